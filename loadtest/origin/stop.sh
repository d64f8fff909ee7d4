#!/usr/bin/env bash
# Stops the nginx that start.sh started in DIR (its own pid file only). Bounded:
# TERM, up to 5 s, then KILL.
set -uo pipefail
run="${1:?usage: stop.sh DIR}"
pidf="$run/nginx.pid"
[[ -f "$pidf" ]] || exit 0
pid="$(cat "$pidf")"
[[ -n "$pid" ]] || exit 0
kill -TERM "$pid" 2>/dev/null || exit 0
for _ in $(seq 1 50); do
  kill -0 "$pid" 2>/dev/null || { rm -f "$pidf"; exit 0; }
  sleep 0.1
done
kill -KILL "$pid" 2>/dev/null || true
rm -f "$pidf"
