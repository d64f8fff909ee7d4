#!/usr/bin/env bash
# larder's benchmarks: loadtest/run.sh [smoke|quick|full] [scenario...]
# (smoke: every scenario at a tiny size, to prove they run; the figures mean nothing)
#
# Scenarios (default: all, in this order): a d e c b f m w g t l
#   a  random reads of small objects, one epoch, concurrency 8/16/32/64:
#      direct vs larder cold vs larder warm vs nginx proxy_cache (cold, warm); at c=32
#      (or the last concurrency) also a cold epoch of other objects through a larder
#      whose RAM tier is full, as in a cache that has been running (LOADTEST_STEADY=0: not)
#   d  coalescing storm: 64 clients read one cold object at once
#   e  hit-path ceiling, concurrency 32: larder vs nginx proxy_cache vs nginx files
#   c  sequential shards, 1 and 8 readers, origin capped per connection
#   b  three epochs in new random orders: per-epoch throughput and upstream GETs
#   f  dataset twice the RAM cache, three epochs: subset vs lru vs policy_sim
#   m  larder's RSS with 1,000 open connections
#   w  a burst: 1,000 readers of cold small objects at once, through one S3 prefix whose
#      window is 16 (as after SlowDowns): throughput, latency and SlowDown answers of the line
#   g  three larder nodes with Redis: upstream GETs per chunk, the dataset read through all
#   t  a PyTorch DataLoader (8 workers, boto3) reads the small objects twice: direct vs larder
#   l  one boto3 reader of 300 cold small objects in a known order: direct vs larder vs larder
#      with a read-order lookahead (POST /admin/lookahead); and a DataLoader (4 workers)
#
# Configuration (LOADTEST_CONFIG; the run prints which and writes config.json):
#   tuned     (default) the system under test (larder, the nginx peer or nginx
#             serving files) is pinned to CPU $LOADTEST_SUT_CPU (0) with one worker,
#             access logs off; loadgen and the origin share CPU $LOADTEST_CLIENT_CPU (1).
#             larder: 8 MiB chunks, metadata immutable, the RAM tier (+ an NVMe tier in
#             a and b unless LOADTEST_NVME=0).
#   defaults  nothing pinned. larder with its shipped defaults: only the settings
#             that reach the origin and admit the client key, plus LARDER_CACHE_DIR
#             (the NVMe tier, as the container image sets it) and the admin port; the
#             access log as shipped (stdout, to a file here). Sizes only where a
#             scenario is about them (f, m). The nginx peer: one worker per core,
#             access log on. (g's cluster nodes keep their own settings.)
# All clients sign every request with SigV4 (nginx ignores it). The origin runs
# in a network namespace behind a veth pair when it can be created (netns.sh),
# else on loopback. Everything listens on loopback or that namespace only.
# loadtest/table.sh runs a d e c in both configurations, interleaved, and prints
# the side-by-side table of issue 15 (docs/benchmarks.md).
#
# Environment: LARDER_BIN, LOADGEN_BIN, POLICY_SIM_BIN (default: BUILD/...),
# LOADTEST_BUILD (build), LOADTEST_WORK (a temp dir for data and caches),
# LOADTEST_NETNS (auto|0), LOADTEST_DELAY_MS (20), LOADTEST_RATE (100m),
# LOADTEST_PEER_DIR (the nginx peer's and files' run and cache directories; default: on
# /dev/shm, see below), LOADTEST_SUT_CPU, LOADTEST_CLIENT_CPU, LOADTEST_CONFIG (tuned|defaults),
# LOADTEST_PIN (1|0: pin or not, whatever the configuration does), LOADTEST_NVME (1|0), sizes: LOADTEST_CONCURRENCIES (a: "8 16 32 64"), LOADTEST_STORM_MIB (d),
# LOADTEST_SHARDS (c: MiB sizes), LOADTEST_SHARD_READERS (c: "1 8"), LOADTEST_E_SECS (e's
# seconds per run: 4 quick, 10 full, 1 smoke; longer to profile it), LOADTEST_LEAN (1: only the
# runs of table.sh's figures: e without large objects and files, c without warm reads),
# LOADTEST_PORT_BASE (18080: larder; +1, +2 the nginx peer and files, +10 the origin, +15
# larder's admin, +20 to +23 g's nodes, +29 g's Redis). Any LARDER_* variable set reaches the
# larder under test (the run lists them).
# Results: loadtest/results/<mode>-<UTC time>/ (JSON per run, summaries, PNGs),
# and loadtest/results/latest pointing at it.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"

mode=quick
if [[ "${1:-}" == quick || "${1:-}" == full || "${1:-}" == smoke ]]; then mode="$1"; shift; fi
scenarios=("$@")
((${#scenarios[@]})) || scenarios=(a d e c b f m w g t l)

build="${LOADTEST_BUILD:-$root/build}"
larder_bin="${LARDER_BIN:-$build/gateway/larder}"
loadgen_bin="${LOADGEN_BIN:-$build/loadtest/loadgen}"
policy_sim_bin="${POLICY_SIM_BIN:-$build/loadtest/policy_sim}"
floor_bin="${FLOOR_BIN:-$build/loadtest/floor}"
for b in "$larder_bin" "$loadgen_bin" "$policy_sim_bin" "$floor_bin"; do
  [[ -x "$b" ]] || { echo "run.sh: $b is missing; build first (meson setup build && ninja -C build)" >&2; exit 1; }
done
"$here/deps.sh"

work="${LOADTEST_WORK:-${TMPDIR:-/tmp}/larder-loadtest}"
mkdir -p "$work"
stamp="$(date -u +%Y%m%dT%H%M%SZ)"
res="$here/results/$mode-$stamp"
mkdir -p "$res"
ln -sfn "$mode-$stamp" "$here/results/latest"
log="$res/run.log"
exec > >(tee -a "$log") 2>&1

ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
ncpu="$(nproc)"
sut_cpu="${LOADTEST_SUT_CPU:-0}"
cli_cpu="${LOADTEST_CLIENT_CPU:-1}"
if ((ncpu < 2)); then sut_cpu=""; cli_cpu=""; fi
config="${LOADTEST_CONFIG:-tuned}"
case "$config" in
  tuned) ;;
  defaults) sut_cpu=""; cli_cpu=""; LOADTEST_NVME=1;;
  *) echo "run.sh: LOADTEST_CONFIG must be tuned or defaults, not $config" >&2; exit 2;;
esac
# LOADTEST_PIN overrides the configuration's pinning: 1 pins (tuned's CPUs), 0 does not.
case "${LOADTEST_PIN:-}" in
  "") ;;
  0) sut_cpu=""; cli_cpu="";;
  1) if ((ncpu >= 2)); then sut_cpu="${LOADTEST_SUT_CPU:-0}"; cli_cpu="${LOADTEST_CLIENT_CPU:-1}"; fi;;
  *) echo "run.sh: LOADTEST_PIN must be 0 or 1, not $LOADTEST_PIN" >&2; exit 2;;
esac
lean="${LOADTEST_LEAN:-0}"
steady="${LOADTEST_STEADY:-1}"
nvme="${LOADTEST_NVME:-1}"   # defaults: the NVMe tier always

delay_ms="${LOADTEST_DELAY_MS:-20}"
rate="${LOADTEST_RATE:-100m}"
key="loadtest-key" secret="loadtest-secret-0123456789"
pb="${LOADTEST_PORT_BASE:-18080}"   # another run on the machine: give it another base
larder_port=$pb peer_port=$((pb + 1)) static_port=$((pb + 2)) floor_port=$((pb + 3))
origin_port=$((pb + 10))
admin_port=$((pb + 15))
admin_token="loadtest-admin-token-0123"
t_start=$SECONDS

# ---- sizes per mode ----
small_bytes=117760   # 115 KiB
large_mib=64
concurrencies=(8 16 32 64)
if [[ "$mode" == quick ]]; then
  n_small=2000 storm_mib=64 shard_sizes=(4 64 256) large_n=4 e_secs=4
elif [[ "$mode" == smoke ]]; then
  n_small=60 storm_mib=8 shard_sizes=(4) large_n=1 e_secs=1 large_mib=8 concurrencies=(4)
else
  n_small=20000 storm_mib=256 shard_sizes=(4 16 64 256) large_n=8 e_secs=10
fi
shard_readers=(1 8)
e_secs="${LOADTEST_E_SECS:-$e_secs}"
[[ -z "${LOADTEST_CONCURRENCIES:-}" ]] || read -ra concurrencies <<< "$LOADTEST_CONCURRENCIES"
[[ -z "${LOADTEST_SHARDS:-}" ]] || read -ra shard_sizes <<< "$LOADTEST_SHARDS"
[[ -z "${LOADTEST_SHARD_READERS:-}" ]] || read -ra shard_readers <<< "$LOADTEST_SHARD_READERS"
storm_mib="${LOADTEST_STORM_MIB:-$storm_mib}"

# ---- cleanup: only what this script started ----
larder_pid="" floor_pid=""
nginx_runs=()
g_pids=()
netns_used=0
peer_dir="" peer_dir_ours=0
cleanup() {
  set +e
  for p in "${g_pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
  [[ -z "$larder_pid" ]] || { kill -TERM "$larder_pid" 2>/dev/null; wait "$larder_pid" 2>/dev/null; }
  floor_stop
  for r in "${nginx_runs[@]}"; do "$here/origin/stop.sh" "$r"; done
  ((peer_dir_ours == 0)) || rm -rf "$peer_dir"
  ((netns_used == 0)) || "$here/netns.sh" down
}
trap cleanup EXIT

echo "== larder load tests ($mode): $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
echo "   cpu: $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1) x $ncpu; kernel $(uname -r)"
echo "   larder: $larder_bin; results: $res"
if [[ "$config" == tuned ]]; then
  nv="RAM tier + NVMe tier in a and b"; ((nvme)) || nv="RAM tier only"
  echo "   configuration: tuned: larder 1 worker, access log off, 8 MiB chunks, metadata immutable,"
  echo "     $nv; nginx peer 1 worker, access log off"
else
  echo "   configuration: defaults: larder's shipped defaults (workers = cores, access log to stdout,"
  echo "     NVMe tier in LARDER_CACHE_DIR at its default size); nginx peer one worker per core,"
  echo "     access log on"
fi
own="$(env | sed -n 's/^\(LARDER_[A-Z0-9_]*\)=.*/\1/p' | grep -vx 'LARDER_BIN\|LARDER_BUILD_DIR' \
  | paste -sd' ' - || true)"
[[ -z "$own" ]] || echo "   larder settings from the environment (unless the configuration sets them): $own"
printf '{"config": "%s", "nvme": %d, "mode": "%s", "sut_cpu": "%s", "client_cpu": "%s", "ncpu": %d}\n' \
  "$config" "$nvme" "$mode" "$sut_cpu" "$cli_cpu" "$ncpu" > "$res/config.json"

# ---- the origin, in a namespace when possible ----
origin_ip=127.0.0.1
netns_opt=()
if [[ "${LOADTEST_NETNS:-auto}" != 0 ]] && ((EUID == 0)) && ip_ns="$("$here/netns.sh" up 2>/dev/null)"; then
  origin_ip="$ip_ns"; netns_used=1; netns_opt=(--netns "${LOADTEST_NETNS_NAME:-larder-lt}")
  echo "   origin: network namespace larder-lt, $origin_ip:$origin_port over a veth pair"
else
  echo "   origin: loopback 127.0.0.1:$origin_port (network namespace not available here)"
fi
origin="$origin_ip:$origin_port"
if [[ -n "$sut_cpu" ]]; then
  echo "   pinning: system under test on CPU $sut_cpu; loadgen + origin on CPU $cli_cpu"
elif [[ "$config" == defaults || "${LOADTEST_PIN:-}" == 0 ]]; then
  echo "   pinning: none ($([[ "${LOADTEST_PIN:-}" == 0 ]] && echo LOADTEST_PIN=0 || echo defaults))"
else
  echo "   pinning: none (fewer than 2 CPUs)"
fi
echo "   origin: ${delay_ms} ms before the first byte, limit_rate $rate per request"

# ---- data (made once per size, kept in $work/data) ----
data="$work/data"
make_objects() { # dir count bytes
  local dir="$1" n="$2" bytes="$3"
  [[ -f "$dir/.done-$n-$bytes" ]] && return 0
  rm -rf "$dir"; mkdir -p "$dir"
  head -c $((n * bytes)) /dev/urandom | split -b "$bytes" -a 6 -d - "$dir/obj-"
  touch "$dir/.done-$n-$bytes"
}
keys_for() { # subdir (under bench/) [repeat]
  local sub="$1" rep="${2:-1}" r
  for ((r = 0; r < rep; r++)); do (cd "$data/bench" && ls "$sub" | sed "s|^|$sub/|"); done
}
echo "-- preparing data in $data"
make_objects "$data/bench/small" "$n_small" "$small_bytes"
make_objects "$data/bench/large" "$large_n" $((large_mib << 20))
make_objects "$data/bench/storm" 1 $((storm_mib << 20))
for s in "${shard_sizes[@]}"; do
  n=8; ((s < 256)) || n=2
  [[ "$mode" == full ]] && n=8
  make_objects "$data/bench/shard-$s" "$n" $((s << 20))
done
keys_for small > "$work/keys-small"
# Other names for the small objects (hard links: the same bytes and sizes, no more disk), for
# a's epoch through a full RAM tier: small-b is the epoch, fill-N fill a's 1 GiB tier first.
link_objects() { # subdir
  local dir="$data/bench/$1" mark=".done-$n_small-$small_bytes"
  [[ -f "$dir/$mark" && "$dir/$mark" -nt "$data/bench/small/$mark" ]] && return 0
  rm -rf "$dir"; mkdir -p "$dir"
  (cd "$data/bench/small" && find . -name 'obj-*' -print0 | xargs -0 ln -t "$dir")
  touch "$dir/$mark"
}
if ((steady)); then
  link_objects small-b
  keys_for small-b > "$work/keys-small-b"
  n_fill=$(((5 << 28) / (n_small * small_bytes) + 1))   # 1.25 GiB and more
  [[ "$mode" != smoke ]] || n_fill=1
  : > "$work/keys-fill"
  for ((i = 1; i <= n_fill; i++)); do link_objects "fill-$i"; keys_for "fill-$i" >> "$work/keys-fill"; done
fi
small_total=$((n_small * small_bytes))

"$here/origin/start.sh" --kind origin --run "$work/run-origin" --listen "$origin" --root "$data" \
  --delay-ms "$delay_ms" --rate "$rate" --cpu "${cli_cpu:-0-$((ncpu - 1))}" "${netns_opt[@]}"
nginx_runs+=("$work/run-origin")
origin_log="$work/run-origin/access.log"
origin_lines() { wc -l < "$origin_log"; }
origin_gets() { grep -c ' GET ' "$origin_log" || true; }
# origin_span FROM TO PATH: seconds from the first start to the last end of the
# origin's requests of PATH logged as lines FROM+1..TO (how long a fill took).
origin_span() {
  sed -n "$(($1 + 1)),$2p" "$origin_log" | awk -v p="$3" '$3 != p { next } { s = $1 - $NF; if (!n++ || s < a) a = s; if ($1 > b) b = $1 }
    END { printf "%.3f", n ? b - a : 0 }'
}

# ---- the systems under test ----
# The nginx peer's cache files live on tmpfs when there is one: on ext4, a
# cache made again every run spends most of its CPU finding free inodes past
# the recently deleted ones (measured: 8-11 instead of 1.4 CPU s/GB cold),
# which would flatter larder. "So the page cache", as intended.
peer_dir="${LOADTEST_PEER_DIR:-}"
if [[ -z "$peer_dir" ]]; then
  peer_dir="$work"
  if [[ -d /dev/shm && -w /dev/shm ]]; then peer_dir="/dev/shm/larder-loadtest-$pb" peer_dir_ours=1; fi
fi
mkdir -p "$peer_dir"
# larder_start RAM_BYTES DISK_BYTES(0 = no NVMe tier) [POLICY [sized]]: tuned, as
# said; defaults: shipped defaults, the sizes and policy only with "sized".
larder_start() {
  larder_stop
  local dir="$work/run-larder"
  rm -rf "$dir"; mkdir -p "$dir"
  local envs=(LARDER_LISTEN="127.0.0.1:$larder_port" LARDER_UPSTREAM_URL="http://$origin"
    LARDER_UPSTREAM_ADDRESSING=path LARDER_UPSTREAM_REGION=us-east-1
    AWS_ACCESS_KEY_ID=origin-key AWS_SECRET_ACCESS_KEY=origin-secret
    LARDER_CLIENT_KEY="$key" LARDER_CLIENT_SECRET="$secret"
    LARDER_ADMIN_LISTEN="127.0.0.1:$admin_port" LARDER_ADMIN_TOKEN="$admin_token")
  if [[ "$config" == defaults ]]; then
    envs+=(LARDER_CACHE_DIR="$dir/cache")
    [[ "${4:-}" != sized ]] || envs+=(LARDER_RAM_CACHE_SIZE="$1" LARDER_CACHE_POLICY="${3:-subset}")
  else
    envs+=(LARDER_RAM_CACHE_SIZE="$1" LARDER_CACHE_POLICY="${3:-subset}" LARDER_METADATA_TTL=immutable
      LARDER_ACCESS_LOG=off LARDER_WORKERS=1 LARDER_CHUNK_SIZE=8MiB)
    if [[ "$2" != 0 ]] && ((nvme)); then
      envs+=(LARDER_CACHE_DIR="$dir/cache" LARDER_DISK_CACHE_SIZE="$2")
    fi
  fi
  if [[ -n "$sut_cpu" ]]; then
    env "${envs[@]}" taskset -c "$sut_cpu" "$larder_bin" serve > "$dir/larder.log" 2>&1 &
  else
    env "${envs[@]}" "$larder_bin" serve > "$dir/larder.log" 2>&1 &
  fi
  larder_pid=$!
  local i
  for ((i = 0; i < 100; i++)); do
    if curl -s -o /dev/null --max-time 1 "http://127.0.0.1:$larder_port/"; then return 0; fi
    kill -0 "$larder_pid" 2>/dev/null || break
    sleep 0.1
  done
  echo "run.sh: larder did not start; see $dir/larder.log" >&2
  cat "$dir/larder.log" >&2
  exit 1
}
# larder_settle LABEL: waits (at most 30 s) for larder's NVMe write queue to drain (its count
# of writes done and dropped stands still for half a second), says how many were done while it
# waited (after LABEL's run was measured), and flushes the page cache: the kernel would write
# the dirty pages back about 30 s later and charge the completions' interrupt time to whatever
# runs then.
larder_settle() {
  local first="" prev="" cur i
  for ((i = 0; i < 60; i++)); do
    cur="$(curl -s -H "Authorization: Bearer $admin_token" "http://127.0.0.1:$admin_port/metrics" |
      awk '/^larder_nvme_writes_total/ {s += $2} END {print s + 0}')"
    [[ -n "$first" ]] || first="$cur"
    [[ "$cur" != "$prev" ]] || break
    prev="$cur"; sleep 0.5
  done
  ((cur == first)) || echo "   $1: $((cur - first)) NVMe writes were done after its run was measured"
  sync
}
larder_stop() {
  [[ -z "$larder_pid" ]] && return 0
  kill -TERM "$larder_pid" 2>/dev/null || true
  local i
  for ((i = 0; i < 100; i++)); do kill -0 "$larder_pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$larder_pid" 2>/dev/null || true
  wait "$larder_pid" 2>/dev/null || true
  larder_pid=""
}
# The floor (loadtest/floor.c): the same answers with no work behind them, one
# process per larder worker (defaults: one per core; tuned: one, pinned).
floor_start() {
  floor_stop
  local w=1 how=()
  [[ "$config" != defaults ]] || w="$ncpu"
  [[ -z "$sut_cpu" ]] || how=(taskset -c "$sut_cpu")
  "${how[@]}" "$floor_bin" --listen "$floor_port" --size "$small_bytes" --objects "$n_small" \
    --workers "$w" &
  floor_pid=$!
  local i
  for ((i = 0; i < 100; i++)); do
    if curl -s -o /dev/null --max-time 1 "http://127.0.0.1:$floor_port/"; then return 0; fi
    sleep 0.1
  done
  echo "run.sh: the floor server did not start" >&2
  exit 1
}
floor_stop() {
  [[ -n "$floor_pid" ]] || return 0
  pkill -TERM -P "$floor_pid" 2>/dev/null || true
  kill -TERM "$floor_pid" 2>/dev/null || true
  wait "$floor_pid" 2>/dev/null || true
  floor_pid=""
}
nginx_start() { # kind port [extra start.sh options]
  local kind="$1" port="$2"; shift 2
  local dir="$peer_dir/run-$kind" how=(--access-log off)
  [[ -z "$sut_cpu" ]] || how+=(--cpu "$sut_cpu")
  [[ "$config" != defaults ]] || how=(--workers auto --access-log on)
  "$here/origin/stop.sh" "$dir"
  rm -rf "$dir"
  "$here/origin/start.sh" --kind "$kind" --run "$dir" --listen "127.0.0.1:$port" --root "$data" \
    --origin "$origin" "${how[@]}" "$@"
  nginx_runs+=("$dir")
}
nginx_workers() { # kind: its worker (and cache manager) pids
  local dir="$peer_dir/run-$1"
  [[ "$1" != origin ]] || dir="$work/run-origin"
  pgrep -P "$(cat "$dir/nginx.pid")" | paste -sd, -
}

# ---- one measurement ----
# measure SCENARIO LABEL TARGET(direct|larder|peer|static) KEYS CONC EPOCHS [loadgen options]
measure() {
  local scen="$1" label="$2" target="$3" keys="$4" conc="$5" epochs="$6"; shift 6
  local url opts=(--sign "$key:$secret") pid=""
  case "$target" in
    direct) url="http://$origin/bench"; pid="$(nginx_workers origin)";;
    larder) url="http://127.0.0.1:$larder_port/bench"; pid="$larder_pid";;
    peer) url="http://127.0.0.1:$peer_port/bench"; pid="$(nginx_workers peer)";;
    static) url="http://127.0.0.1:$static_port/bench"; pid="$(nginx_workers static)";;
    floor) url="http://127.0.0.1:$floor_port/bench"
      pid="$(echo "$floor_pid" $(pgrep -P "$floor_pid") | tr ' ' ,)";;
  esac
  [[ -z "$pid" ]] || opts+=(--pid "$pid")
  local out="$res/$scen-$label.json" before after rc=0
  before="$(origin_lines)"
  if [[ -n "$cli_cpu" ]]; then
    taskset -c "$cli_cpu" "$loadgen_bin" --url "$url" --keys "$keys" --concurrency "$conc" \
      --epochs "$epochs" --seed "$RANDOM" --json "$out" --label "$scen-$label" "${opts[@]}" "$@" || rc=$?
  else
    "$loadgen_bin" --url "$url" --keys "$keys" --concurrency "$conc" \
      --epochs "$epochs" --seed "$RANDOM" --json "$out" --label "$scen-$label" "${opts[@]}" "$@" || rc=$?
  fi
  sleep 0.2   # let the origin's last log lines land
  after="$(origin_lines)"
  python3 "$here/report.py" annotate "$out" scenario="$scen" label="$label" target="$target" \
    upstream_gets=$((after - before)) loadgen_rc="$rc"
}

# ---- scenarios ----
scen_a() {
  echo; echo "== a: random reads of ${n_small} x 115 KiB objects, one epoch"
  local c steady_c="${concurrencies[-1]}"
  for c in "${concurrencies[@]}"; do ((c != 32)) || steady_c=32; done
  for c in "${concurrencies[@]}"; do
    measure a "direct-c$c" direct "$work/keys-small" "$c" 1
    larder_start 1GiB 4GiB
    measure a "larder-cold-c$c" larder "$work/keys-small" "$c" 1
    larder_settle "larder-cold-c$c"   # its NVMe writes land here, not in the runs after
    measure a "larder-warm-c$c" larder "$work/keys-small" "$c" 1
    nginx_start peer "$peer_port"
    measure a "nginx-cold-c$c" peer "$work/keys-small" "$c" 1
    measure a "nginx-warm-c$c" peer "$work/keys-small" "$c" 1
    if ((steady && c == steady_c)); then
      # A cache that has been running: its RAM tier is full of other chunks, and a new
      # epoch's chunks take the memory of those it evicts instead of fresh pages.
      measure a "larder-fill-c$c" larder "$work/keys-fill" 64 1
      larder_settle "larder-fill-c$c"
      measure a "larder-steady-c$c" larder "$work/keys-small-b" "$c" 1
      larder_settle "larder-steady-c$c"
    fi
  done
  larder_stop
  python3 "$here/report.py" table "$res" a
}

scen_d() {
  echo; echo "== d: coalescing storm, 64 clients read one cold ${storm_mib} MiB object"
  local k="$work/keys-storm" i
  for ((i = 0; i < 64; i++)); do echo storm/obj-000000; done > "$k"
  local b1 b2 b3
  larder_start 1GiB 0
  b1="$(origin_lines)"
  measure d larder larder "$k" 64 1
  larder_stop
  nginx_start peer "$peer_port"
  b2="$(origin_lines)"
  measure d nginx peer "$k" 64 1
  b3="$(origin_lines)"
  # fill_s: from the first upstream GET's start to the last's end
  python3 "$here/report.py" annotate "$res/d-larder.json" chunks=$(((storm_mib + 7) / 8)) \
    fill_s="$(origin_span "$b1" "$b2" /bench/storm/obj-000000)"
  python3 "$here/report.py" annotate "$res/d-nginx.json" chunks=$(((storm_mib + 7) / 8)) \
    fill_s="$(origin_span "$b2" "$b3" /bench/storm/obj-000000)"
  python3 "$here/report.py" table "$res" d
}

scen_e() {
  echo; echo "== e: hit-path ceiling, concurrency 32, ${e_secs} s per run"
  local kl="$work/keys-large"
  keys_for large $((32 / large_n + 1)) > "$kl"
  # Tuned: a RAM tier the small objects fit in (full mode's 2.3 GB pass 2 GiB),
  # so that these are RAM hits. The defaults keep the shipped 1 GiB: past it,
  # their hits come from the NVMe tier.
  local ram=$((small_total * 5 / 4))
  ((ram > (2 << 30))) || ram=$((2 << 30))
  larder_start "$ram" 0
  measure e larder-warmup larder "$work/keys-small" 64 1
  ((lean)) || measure e larder-warmup-large larder "$kl" 8 1
  measure e larder-small larder "$work/keys-small" 32 50 --duration "$e_secs"
  ((lean)) || measure e larder-large larder "$kl" 32 50 --duration "$e_secs"
  larder_stop
  nginx_start peer "$peer_port"
  measure e nginx-warmup peer "$work/keys-small" 64 1
  ((lean)) || measure e nginx-warmup-large peer "$kl" 8 1
  measure e nginx-small peer "$work/keys-small" 32 50 --duration "$e_secs"
  ((lean)) || measure e nginx-large peer "$kl" 32 50 --duration "$e_secs"
  floor_start
  measure e floor-small floor "$work/keys-small" 32 50 --duration "$e_secs"
  floor_stop
  if ((lean)); then python3 "$here/report.py" table "$res" e; return; fi
  nginx_start static "$static_port"
  measure e files-small static "$work/keys-small" 32 50 --duration "$e_secs"
  measure e files-large static "$kl" 32 50 --duration "$e_secs"
  python3 "$here/report.py" table "$res" e
}

scen_c() {
  echo; echo "== c: sequential shards, origin capped at $rate per connection"
  local s r k
  for s in "${shard_sizes[@]}"; do
    k="$work/keys-shard-$s"
    keys_for "shard-$s" > "$k"
    for r in "${shard_readers[@]}"; do
      (($(wc -l < "$k") >= r)) || continue
      if ((r == 1)); then head -1 "$k" > "$k.$r"; else cp "$k" "$k.$r"; fi
      measure c "direct-${s}MiB-r$r" direct "$k.$r" "$r" 1
      larder_start 2GiB 0
      measure c "larder-cold-${s}MiB-r$r" larder "$k.$r" "$r" 1
      ((lean)) || measure c "larder-warm-${s}MiB-r$r" larder "$k.$r" "$r" 1
    done
  done
  larder_stop
  python3 "$here/report.py" table "$res" c
}

scen_b() {
  echo; echo "== b: three epochs in new random orders, concurrency 32"
  local e
  larder_start 1GiB 4GiB
  for e in 1 2 3; do measure b "larder-epoch$e" larder "$work/keys-small" 32 1; done
  larder_stop
  nginx_start peer "$peer_port"
  for e in 1 2 3; do measure b "nginx-epoch$e" peer "$work/keys-small" 32 1; done
  measure b "direct-epoch1" direct "$work/keys-small" 32 1
  python3 "$here/report.py" table "$res" b
}

scen_f() {
  local ram=$((small_total / 2))
  echo; echo "== f: dataset ($small_total B) twice the RAM cache ($ram B), no NVMe tier, three epochs"
  local p e
  for p in subset lru; do
    larder_start "$ram" 0 "$p" sized
    for e in 1 2 3; do measure f "$p-epoch$e" larder "$work/keys-small" 32 1; done
  done
  larder_stop
  "$policy_sim_bin" -n "$n_small" -c $((n_small / 2)) -e 3 "$res/f-policy_sim.json" > "$res/f-policy_sim.txt"
  python3 "$here/report.py" table "$res" f
}

scen_m() {
  echo; echo "== m: larder's memory with 1,000 open connections (RAM tier 256 MiB, warm)"
  larder_start 256MiB 0 subset sized
  # 2,000 objects (230 MB) in every mode, so that they stay warm in the 256 MiB tier: m is about
  # what 1,000 connections cost, not about misses (full mode's 20,000 would be mostly misses).
  head -n 2000 "$work/keys-small" > "$work/keys-m"
  measure m warmup larder "$work/keys-m" 64 1
  measure m c1000 larder "$work/keys-m" 1000 3
  python3 "$here/report.py" annotate "$res/m-c1000.json" ram_tier_bytes=$((256 << 20))
  larder_stop
  python3 "$here/report.py" table "$res" m
}

scen_w() {
  echo; echo "== w: 1,000 readers of cold objects at once, one S3 prefix with a window of 16"
  # 16 in flight to a prefix is where its window stands after S3 has answered SlowDown; with
  # the shipped 64 the line would be gone before it forms in quick mode. Most readers wait for
  # a place, longer than the 1 s after which they queue in order; none should wait out the
  # 5 s wait bound (a 503 SlowDown to its client, counted in errors).
  LARDER_UPSTREAM_WINDOW_MAX=16 larder_start 1GiB 0
  measure w c1000 larder "$work/keys-small" 1000 1
  larder_stop
  python3 "$here/report.py" table "$res" w
}

scen_g() {
  echo; echo "== g: three larder nodes and Redis: the small dataset read through every node at once"
  local rport=$((pb + 29)) i node_ports=($((pb + 20)) $((pb + 21)) $((pb + 22)))
  redis-server --port "$rport" --bind 127.0.0.1 --save "" --appendonly no \
    > "$work/redis.log" 2>&1 &
  g_pids+=($!)
  for ((i = 0; i < 50; i++)); do (exec 3<>"/dev/tcp/127.0.0.1/$rport") 2>/dev/null && break; sleep 0.1; done
  # g_node ID PORT: one cluster node, one worker, 1 GiB of RAM tier.
  g_node() {
    local dir="$work/run-node$1"
    rm -rf "$dir"; mkdir -p "$dir"
    env LARDER_LISTEN="127.0.0.1:$2" LARDER_UPSTREAM_URL="http://$origin" \
      LARDER_UPSTREAM_ADDRESSING=path LARDER_UPSTREAM_REGION=us-east-1 \
      AWS_ACCESS_KEY_ID=origin-key AWS_SECRET_ACCESS_KEY=origin-secret \
      LARDER_CLIENT_KEY="$key" LARDER_CLIENT_SECRET="$secret" LARDER_RAM_CACHE_SIZE=1GiB \
      LARDER_METADATA_TTL=immutable LARDER_ACCESS_LOG=off LARDER_WORKERS=1 \
      LARDER_ADMIN_LISTEN=off LARDER_CHUNK_SIZE=8MiB \
      LARDER_REDIS_URL="redis://127.0.0.1:$rport" LARDER_NODE_ID="node$1" \
      LARDER_ADVERTISE="127.0.0.1:$2" \
      LARDER_CLUSTER_SECRET="loadtest-cluster-secret-0123" \
      "$larder_bin" serve > "$dir/larder.log" 2>&1 &
    g_pids+=($!)
  }
  for i in 0 1 2; do g_node "$i" "${node_ports[$i]}"; done
  # g_dir_keys: placement directory keys in Redis now.
  g_dir_keys() { redis-cli -p "$rport" --scan --pattern 'larder:dir:*' | wc -l; }
  sleep 3   # three heartbeats: every node sees the others
  local before after
  before="$(origin_lines)"
  local lg=()
  for i in 0 1 2; do
    "$loadgen_bin" --url "http://127.0.0.1:${node_ports[$i]}/bench" --keys "$work/keys-small" \
      --concurrency 16 --epochs 1 --seed $((i + 7)) --sign "$key:$secret" \
      --json "$res/g-node$i.json" --label "g-node$i" > "$res/g-node$i.txt" &
    lg+=($!)
  done
  for p in "${lg[@]}"; do wait "$p" || echo "run.sh: a loadgen of g failed" >&2; done
  sleep 0.3
  after="$(origin_lines)"
  local gets=$((after - before)) chunks=$n_small
  cat "$res"/g-node*.txt
  python3 - "$gets" "$chunks" "$res/g-cluster.json" <<'PY'
import json, sys
gets, chunks, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
json.dump({"scenario": "g", "nodes": 3, "readers_per_node": 16, "chunks": chunks,
           "upstream_gets": gets, "upstream_gets_per_chunk": gets / chunks}, open(out, "w"))
print("   g: %d origin GETs for %d chunks read through 3 nodes: %.3f upstream GETs per chunk"
      " (alone, each node would fetch every chunk: 3.0)" % (gets, chunks, gets / chunks))
PY
  # A fourth node joins the warm cluster and reads everything: it now owns
  # about a quarter of the chunks and holds none. The placement directory
  # sends it to the nodes that hold them; without it, its own quarter would
  # be fetched from the origin again.
  local jport=$((pb + 23)) dir_before dir_after
  sleep 2.5   # two heartbeats: the directory is what the three nodes list for good
  dir_before="$(g_dir_keys)"
  g_node 3 "$jport"
  sleep 3
  dir_after="$(g_dir_keys)"
  before="$(origin_lines)"
  "$loadgen_bin" --url "http://127.0.0.1:$jport/bench" --keys "$work/keys-small" \
    --concurrency 16 --epochs 1 --seed 11 --sign "$key:$secret" \
    --json "$res/g-join.json" --label "g-join" > "$res/g-join.txt" \
    || echo "run.sh: the loadgen of g (join) failed" >&2
  sleep 0.3
  after="$(origin_lines)"
  cat "$res/g-join.txt"
  python3 - "$((after - before))" "$chunks" "$res/g-cluster.json" "$dir_before" "$dir_after" <<'PY'
import json, sys
gets, chunks, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
dir_before, dir_after = int(sys.argv[4]), int(sys.argv[5])
d = json.load(open(out))
d.update({"join_upstream_gets": gets, "join_upstream_gets_per_chunk": gets / chunks,
          "directory_keys_3_nodes": dir_before, "directory_keys_after_join": dir_after})
json.dump(d, open(out, "w"))
print("   g: placement directory: %d keys with 3 nodes, %d after a 4th joined (%d chunks cached)"
      % (dir_before, dir_after, chunks))
print("   g: the 4th node read all %d chunks: %d origin GETs (%.3f per chunk; "
      "without the placement directory about 0.25, its own quarter)" % (chunks, gets, gets / chunks))
PY
  for p in "${g_pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${g_pids[@]}"; do wait "$p" 2>/dev/null || true; done
  g_pids=()
}

# t: the training input loop of tests/integration/clients/torch_dataloader.py
# (map-style dataset, shuffled, a boto3 client per worker) under Debian's
# python3, two epochs in one process; origin GETs counted per epoch.
scen_t() {
  local workers=8
  [[ "$mode" != smoke ]] || workers=2
  echo; echo "== t: PyTorch DataLoader, $workers workers, ${n_small} x 115 KiB, epochs 1 and 2"
  /usr/bin/python3 -c "import torch, boto3" \
    || { echo "run.sh: t needs python3-torch and python3-boto3 (scripts/deps.sh)" >&2; exit 1; }
  t_run direct "http://$origin" "$workers"
  larder_start 1GiB 0
  t_run larder "http://127.0.0.1:$larder_port" "$workers"
  larder_stop
  python3 "$here/report.py" table "$res" t
}
t_run() { # LABEL ENDPOINT WORKERS
  local out="$res/t-$1.json" pin=() b m a
  [[ -z "$cli_cpu" ]] || pin=(taskset -c "$cli_cpu")
  b="$(origin_lines)"
  coproc TORCH { env AWS_ENDPOINT_URL="$2" AWS_ACCESS_KEY_ID="$key" AWS_SECRET_ACCESS_KEY="$secret" \
    AWS_DEFAULT_REGION=us-east-1 "${pin[@]}" /usr/bin/python3 \
    "$root/tests/integration/clients/torch_dataloader.py" --bucket bench --keys "$work/keys-small" \
    --workers "$3" --epochs 2 --pause --json "$out"; }
  local tpid=$TORCH_PID line=""
  read -r line <&"${TORCH[0]}" || true
  sleep 0.2; m="$(origin_lines)"
  echo >&"${TORCH[1]}"
  wait "$tpid" || { echo "run.sh: the DataLoader ($1) failed" >&2; exit 1; }
  sleep 0.2; a="$(origin_lines)"
  python3 "$here/report.py" annotate "$out" target="$1" upstream_gets_epoch1=$((m - b)) \
    upstream_gets_epoch2=$((a - m))
}

# l: one reader of cold small objects in an order larder is told (POST
# /admin/lookahead) vs the same reader direct and through larder untold; each
# larder run starts cold. Then a DataLoader (4 workers) in a shuffled order.
scen_l() {
  local n=300 w=64
  [[ "$mode" != smoke ]] || n=40
  echo; echo "== l: one boto3 reader, $n cold x 115 KiB objects in a known order (window $w)"
  /usr/bin/python3 -c "import torch, boto3" \
    || { echo "run.sh: l needs python3-torch and python3-boto3 (scripts/deps.sh)" >&2; exit 1; }
  l_run direct "http://$origin" 0
  larder_start 1GiB 0
  l_run larder "http://127.0.0.1:$larder_port" 0
  l_run larder-warm "http://127.0.0.1:$larder_port" 0   # hit speed: the same reads again
  larder_start 1GiB 0
  l_run larder-lookahead "http://127.0.0.1:$larder_port" 0 --lookahead "http://127.0.0.1:$admin_port" --window "$w"
  l_run dataloader4-direct "http://$origin" 4 --seed 7
  larder_start 1GiB 0
  l_run dataloader4-larder "http://127.0.0.1:$larder_port" 4 --seed 7
  larder_start 1GiB 0
  l_run dataloader4-larder-lookahead "http://127.0.0.1:$larder_port" 4 --seed 7 \
    --lookahead "http://127.0.0.1:$admin_port" --window 256
  larder_stop
  python3 "$here/report.py" table "$res" l
}
l_run() { # LABEL ENDPOINT WORKERS [lookahead_reader.py options]
  local label="$1" ep="$2" wk="$3" out="$res/l-$1.json" pin=() b a rc=0; shift 3
  [[ -z "$cli_cpu" ]] || pin=(taskset -c "$cli_cpu")
  b="$(origin_gets)"
  env AWS_ENDPOINT_URL="$ep" AWS_ACCESS_KEY_ID="$key" AWS_SECRET_ACCESS_KEY="$secret" \
    AWS_DEFAULT_REGION=us-east-1 LARDER_ADMIN_TOKEN="$admin_token" "${pin[@]}" /usr/bin/python3 \
    "$here/lookahead_reader.py" --bucket bench --keys "$work/keys-small" --n "${n:-300}" \
    --workers "$wk" --json "$out" "$@" || rc=$?
  sleep 0.2; a="$(origin_gets)"
  python3 "$here/report.py" annotate "$out" target="$label" upstream_gets=$((a - b)) rc="$rc"
}

for s in "${scenarios[@]}"; do
  case "$s" in
    a|b|c|d|e|f|m|w|g|t|l) "scen_$s";;
    *) echo "run.sh: unknown scenario $s" >&2; exit 2;;
  esac
done
python3 "$here/report.py" summary "$res" > "$res/summary.md"
python3 "$here/report.py" plots "$res" || echo "run.sh: plots failed" >&2
echo; cat "$res/summary.md"
echo "== done in $((SECONDS - t_start)) s; results in $res"
