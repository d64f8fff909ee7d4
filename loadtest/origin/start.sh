#!/usr/bin/env bash
# Starts one nginx for the load tests, configured from a template in this directory.
#
#   start.sh --kind origin|peer|static --run DIR --listen ADDR:PORT
#            [--root DATA] [--delay-ms 20] [--rate 100m] [--origin ADDR:PORT]
#            [--slice 8m] [--cache-max 20g] [--workers 1] [--cpu LIST]
#            [--netns NAME] [--access-log on|off]
#
# origin: files under DATA (/bucket/key), --delay-ms before the first byte of
#         every request, --rate per request (0 = uncapped); access log in DIR/access.log.
# peer:   caching reverse proxy (proxy_cache + proxy_cache_lock + slice) to --origin.
# static: files under DATA, no delay, no cap.
# The config goes to DIR/nginx.conf, the pid to DIR/nginx.pid; stop with stop.sh DIR.
# --cpu pins nginx with taskset; --netns runs it inside that network namespace.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
kind="" run="" listen="" root="" delay_ms=20 rate=100m origin="" slice=8m cache_max=20g
workers=1 cpu="" netns="" alog=on
while (($#)); do
  case "$1" in
    --kind) kind="$2";; --run) run="$2";; --listen) listen="$2";; --root) root="$2";;
    --delay-ms) delay_ms="$2";; --rate) rate="$2";; --origin) origin="$2";;
    --slice) slice="$2";; --cache-max) cache_max="$2";; --workers) workers="$2";;
    --cpu) cpu="$2";; --netns) netns="$2";; --access-log) alog="$2";;
    *) echo "start.sh: unknown option $1" >&2; exit 2;;
  esac
  shift 2
done
[[ -n "$kind" && -n "$run" && -n "$listen" ]] || { echo "start.sh: --kind, --run and --listen are required" >&2; exit 2; }
command -v nginx >/dev/null 2>&1 || "$here/../deps.sh"
mkdir -p "$run/tmp"
run="$(cd "$run" && pwd)"
[[ -z "$root" ]] || root="$(cd "$root" && pwd)"

modules="$(nginx -V 2>&1 | sed -n 's/.*--modules-path=\([^ ]*\).*/\1/p')"
load_module=""
if [[ "$kind" == origin ]]; then
  [[ -f "$modules/ngx_http_echo_module.so" ]] || "$here/../deps.sh"
  load_module="load_module $modules/ngx_http_echo_module.so;"
fi
user_line=""
((EUID != 0)) || user_line="user root root;"  # the data may sit in a private temp dir
delay_s="$(awk -v ms="$delay_ms" 'BEGIN { printf "%.3f", ms / 1000 }')"
access_log="$run/access.log lt"
[[ "$alog" == on ]] || access_log="off"

{
  sed -e "s|@LOAD_MODULE@|$load_module|" -e "s|@USER_LINE@|$user_line|" \
      -e "s|@WORKERS@|$workers|" -e "s|@RUN@|$run|g" "$here/common.conf.in"
  sed -e "s|@RUN@|$run|g" -e "s|@LISTEN@|$listen|g" -e "s|@ROOT@|$root|g" \
      -e "s|@DELAY_S@|$delay_s|g" -e "s|@RATE@|$rate|g" -e "s|@ORIGIN@|$origin|g" \
      -e "s|@SLICE@|$slice|g" -e "s|@CACHE_MAX@|$cache_max|g" -e "s|@ACCESS_LOG@|$access_log|g" \
      "$here/$kind.conf.in"
} > "$run/nginx.conf"

cmd=(nginx -p "$run" -c "$run/nginx.conf" -e "$run/error.log")
[[ -z "$cpu" ]] || cmd=(taskset -c "$cpu" "${cmd[@]}")
[[ -z "$netns" ]] || cmd=(ip netns exec "$netns" "${cmd[@]}")
"${cmd[@]}" -t -q || { echo "start.sh: nginx -t failed for $run/nginx.conf" >&2; exit 1; }
rm -f "$run/nginx.pid"
"${cmd[@]}"
for _ in $(seq 1 100); do   # up to 10 s until it answers
  if curl -s -o /dev/null --max-time 1 "http://$listen/"; then exit 0; fi
  sleep 0.1
done
echo "start.sh: nginx ($kind) did not answer on $listen; see $run/error.log" >&2
exit 1
