#!/usr/bin/env bash
# CI smoke for loadgen: serves a few files from a temp dir with python3's
# http.server on loopback, runs loadgen for about a second, and checks that it
# exits 0 and wrote a JSON result. Usage: smoke.sh LOADGEN OUT.json
set -euo pipefail
loadgen="$1" out="$2"
dir="$(mktemp -d)"
srv=""
cleanup() {
  if [[ -n "$srv" ]]; then kill "$srv" 2>/dev/null || true; wait "$srv" 2>/dev/null || true; fi
  rm -rf "$dir"
}
trap cleanup EXIT
mkdir -p "$dir/www/bucket"
for i in $(seq 1 20); do
  head -c $((i * 1000)) /dev/zero > "$dir/www/bucket/obj-$i"
  echo "obj-$i" >> "$dir/keys"
done
python3 -u -m http.server --bind 127.0.0.1 --directory "$dir/www" 0 > "$dir/srv.log" 2>&1 &
srv=$!
port=""
for _ in $(seq 1 100); do   # up to 10 s for the server to say its port
  port="$(sed -n 's/.* port \([0-9]*\).*/\1/p' "$dir/srv.log" | head -1)"
  [[ -n "$port" ]] && break
  sleep 0.1
done
[[ -n "$port" ]] || { echo "smoke: http.server did not start" >&2; cat "$dir/srv.log" >&2; exit 1; }
rm -f "$out"
timeout 30 "$loadgen" --url "http://127.0.0.1:$port/bucket" --keys "$dir/keys" \
  --concurrency 4 --epochs 64 --duration 1 --range 0-499 --sign smoke:secret \
  --pid "$srv" --json "$out" --label smoke
python3 - "$out" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
assert r["total"]["objects"] > 0 and r["total"]["errors"] == 0, r["total"]
# http.server ignores Range: every object comes whole (i * 1000 bytes)
assert r["total"]["bytes"] >= 1000 * r["total"]["objects"], r["total"]
print("smoke: ok,", r["total"]["objects"], "objects")
PY
