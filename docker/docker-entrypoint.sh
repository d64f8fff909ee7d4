#!/bin/sh
# docker-entrypoint.sh - starts larder in its container (POSIX sh).
#
#   docker-entrypoint.sh [serve [--config FILE]]   (no arguments: serve)
#   docker-entrypoint.sh --version | --help | ...  (passed to larder as they are)
#
# Configuration is by environment only: LARDER_* and the AWS_* upstream
# credentials, read by larder itself (config/larder.conf lists them). Before
# `serve`, this script
#   1. refuses to run as root unless LARDER_ALLOW_ROOT=1;
#   2. runs `larder serve --check` with the same arguments, so a bad setting
#      stops the start with larder's own message and exit status (2);
#   3. creates LARDER_CACHE_DIR if it is set and missing, and checks that it is
#      a directory this user can write (exit 2 otherwise);
# then replaces itself with larder (exec), which so receives SIGTERM directly.
set -eu

die() {
	status=$1
	shift
	printf 'docker-entrypoint: %s\n' "$*" >&2
	exit "$status"
}

[ $# -gt 0 ] || set -- serve

if [ "$1" = serve ]; then
	# `serve --check` and `serve --help` need none of the preparation.
	for arg in "$@"; do
		case $arg in
		--check | --help | -h) exec larder "$@" ;;
		esac
	done

	uid=$(id -u)
	case ${LARDER_ALLOW_ROOT:-} in
	1) ;;
	'' | 0)
		[ "$uid" != 0 ] ||
			die 2 "refusing to run larder as root: run the image as its larder user" \
				"(uid 10001, the default) or another non-root uid, or set LARDER_ALLOW_ROOT=1"
		;;
	*) die 2 "LARDER_ALLOW_ROOT: expected 1 or unset, got \"$LARDER_ALLOW_ROOT\"" ;;
	esac

	# Summary to stderr: stdout is the access log (LARDER_ACCESS_LOG=-).
	larder "$@" --check >&2 || exit $?

	# Cached objects are readable by this user and its group only.
	umask 027
	dir=${LARDER_CACHE_DIR:-}
	if [ -n "$dir" ]; then
		if [ ! -d "$dir" ]; then
			err=$(mkdir -p -- "$dir" 2>&1) || die 2 "LARDER_CACHE_DIR: $err"
		fi
		probe="$dir/.docker-entrypoint-probe.$$"
		if ! (: >"$probe") 2>/dev/null; then
			die 2 "LARDER_CACHE_DIR: \"$dir\" is not writable by uid $uid" \
				"(owner $(stat -c '%u:%g, mode %a' -- "$dir" 2>/dev/null || echo unknown));" \
				"mount a volume this uid can write, or set LARDER_CACHE_DIR= (empty) for RAM only"
		fi
		rm -f -- "$probe"
	fi
fi

exec larder "$@"
