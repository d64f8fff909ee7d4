#!/usr/bin/env bash
# Stops the nginx that start.sh started in DIR (its own pid file only). Bounded:
# TERM, up to 5 s, then KILL, of the master and its workers (a worker outlives a
# killed master).
set -uo pipefail
run="${1:?usage: stop.sh DIR}"
pidf="$run/nginx.pid"
[[ -f "$pidf" ]] || exit 0
pid="$(cat "$pidf")"
[[ -n "$pid" ]] || exit 0
# gone: the master has exited. A zombie has too: nginx's master is not our child (it
# forks into the background), and whoever reaps it (init, in a container often a
# process that polls) may take seconds more (measured: 1.6-2 s per stop here).
gone() {
  ! kill -0 "$pid" 2>/dev/null || [[ "$(awk '/^State:/ {print $2}' "/proc/$pid/status" 2>/dev/null)" == Z ]]
}
kill -TERM "$pid" 2>/dev/null || exit 0
for _ in $(seq 1 50); do
  gone && { rm -f "$pidf"; exit 0; }
  sleep 0.1
done
workers="$(pgrep -P "$pid" 2>/dev/null | tr '\n' ' ')"
# shellcheck disable=SC2086 # one pid a word
kill -KILL "$pid" $workers 2>/dev/null || true
rm -f "$pidf"
