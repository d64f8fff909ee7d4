#!/usr/bin/env bash
# Issue 15's side-by-side table: loadtest/table.sh [quick|full|smoke] [ROUNDS]
#
# Runs run.sh's scenarios a (c = 8, 32, 64, and at 32 the epoch through a full
# RAM tier), d, e and c (one reader of a cold 256 MiB shard) in the two
# configurations of run.sh, interleaved: defaults,
# tuned, defaults, tuned, ... ROUNDS times each (default 3), then prints each
# figure's median [min-max] per configuration (report.py sidebyside); a ratio
# is larder's over its peer's (nginx proxy_cache + slice, or the origin
# direct) measured in the same run. The table is saved as
# loadtest/results/table-<mode>-<UTC time>.md.
#   quick: 2,000 x 115 KiB objects, 4 s per hit run, the storm and the shard at
#          256 MiB; about 80 s per run, 8 minutes for 3 rounds on 2 cores
#   full:  20,000 objects, 10 s per hit run
#   smoke: tiny sizes, to prove it runs; the figures mean nothing
# LOADTEST_TABLE: which configurations, as CONFIG:PIN words (default "defaults:0
# tuned:1": the shipped defaults unpinned, the tuned set-up pinned); "all" adds
# defaults pinned and tuned unpinned ("defaults:0 defaults:1 tuned:1 tuned:0").
# Environment: as run.sh (LARDER_BIN, LOADTEST_BUILD, LOADTEST_WORK, ...).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mode=quick
if [[ "${1:-}" == quick || "${1:-}" == full || "${1:-}" == smoke ]]; then mode="$1"; shift; fi
rounds="${1:-3}"
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { sed -n '2,20p' "$0" >&2; exit 2; }
export LOADTEST_CONCURRENCIES="8 32 64" LOADTEST_SHARD_READERS=1
export LOADTEST_STORM_MIB=256 LOADTEST_SHARDS=256 LOADTEST_LEAN=1
if [[ "$mode" == smoke ]]; then
  export LOADTEST_CONCURRENCIES=4 LOADTEST_STORM_MIB=8 LOADTEST_SHARDS=4
fi
stamp="$(date -u +%Y%m%dT%H%M%SZ)"
dirs=()
t0=$SECONDS
combos="${LOADTEST_TABLE:-defaults:0 tuned:1}"
[[ "$combos" != all ]] || combos="defaults:0 defaults:1 tuned:1 tuned:0"
for combo in $combos; do
  [[ "$combo" =~ ^(defaults|tuned):[01]$ ]] || { echo "table.sh: LOADTEST_TABLE: $combo?" >&2; exit 2; }
done
for ((i = 1; i <= rounds; i++)); do
  for combo in $combos; do
    cfg="${combo%:*}" pin="${combo#*:}"
    echo "== round $i/$rounds: $cfg, pinned $pin ($((SECONDS - t0)) s so far)"
    LOADTEST_CONFIG="$cfg" LOADTEST_PIN="$pin" LOADTEST_NVME=0 "$here/run.sh" "$mode" a d e c > /dev/null
    dirs+=("$(readlink -f "$here/results/latest")")
    sleep 1   # results folders are named by the second
  done
done
out="$here/results/table-$mode-$stamp.md"
python3 "$here/report.py" sidebyside "${dirs[@]}" | tee "$out"
echo "== done in $((SECONDS - t0)) s; table in $out"
