#!/usr/bin/env bash
# Runs every test: installs dependencies, checks the sources
# (scripts/check-source.py: banned functions, layers), builds plain, ASan and
# TSan, runs the meson suites (unit, fuzz) on the ASan build and the unit suite
# on the TSan build, then the Python integration suite against the ASan larder,
# and the modules whose threads share the most state against the TSan larder.
# The last line is `N passed, N failed[, N skipped]`.
# Exit status is non-zero when anything failed.
#   LARDER_BUILD_DIR / LARDER_ASAN_BUILD_DIR / LARDER_TSAN_BUILD_DIR
#                                              build dirs (default build, build-asan, build-tsan)
#   LARDER_TEST_SKIP_BUILD=1                   use the builds as they are
#   LARDER_TEST_PORT_BASE                      the tests' ports: 3000 per runner from it
#                                              (default 20000; tests/integration/run.py)
#   extra arguments are passed to tests/integration/run.py (test names)
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

export LARDER_BUILD_DIR="${LARDER_BUILD_DIR:-build}"
export LARDER_ASAN_BUILD_DIR="${LARDER_ASAN_BUILD_DIR:-build-asan}"
export LARDER_TSAN_BUILD_DIR="${LARDER_TSAN_BUILD_DIR:-build-tsan}"
case "$LARDER_ASAN_BUILD_DIR" in /*) ;; *) LARDER_ASAN_BUILD_DIR="$ROOT/$LARDER_ASAN_BUILD_DIR" ;; esac

check_pass=0 check_fail=0
meson_pass=0 meson_fail=0 meson_skip=0
tsan_pass=0 tsan_fail=0 tsan_skip=0
py_pass=0 py_fail=0 py_skip=0
tsan_py_pass=0 tsan_py_fail=0 tsan_py_skip=0
notes=()

scripts/deps.sh
deps_rc=$?
if ((deps_rc != 0 && deps_rc != 2)); then
  echo "test.sh: installing dependencies failed" >&2
  echo "0 passed, 1 failed"
  exit 1
fi

# --- source rules (one test: banned functions and include layers)
echo "== scripts/check-source.py"
if python3 scripts/check-source.py; then check_pass=1; else check_fail=1; fi

if [[ "${LARDER_TEST_SKIP_BUILD:-}" != 1 ]]; then
  if ! scripts/build.sh all; then
    echo "test.sh: build failed" >&2
    echo "0 passed, 1 failed"
    exit 1
  fi
fi

# --- the larder of scripts/previous-release, for the rolling-upgrade tests
# (LARDER_PREVIOUS_BIN; given, it is used as it is). Not there, they skip.
if [[ -z "${LARDER_PREVIOUS_BIN:-}" ]]; then
  prev_rc=0
  if [[ "${LARDER_TEST_SKIP_BUILD:-}" != 1 || ! -x build-prev/larder ]]; then
    echo "== scripts/build.sh previous"
    scripts/build.sh previous
    prev_rc=$?
  fi
  if ((prev_rc == 0)) && [[ -x build-prev/larder ]]; then
    export LARDER_PREVIOUS_BIN="$ROOT/build-prev/larder"
  else
    notes+=("the previous release was not built (scripts/build.sh previous: $prev_rc): its rolling-upgrade tests are skipped")
  fi
fi

# --- meson suites (cmocka unit tests, fuzz corpus replay) on the ASan build
export ASAN_OPTIONS="halt_on_error=1:abort_on_error=1:detect_leaks=1:print_summary=1"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:print_summary=1"
# testlog_counts FILE: "passed failed skipped" from a meson testlog.json
testlog_counts() {
  python3 - "$1" <<'PY'
import json, sys
p = f = s = 0
for line in open(sys.argv[1]):
    line = line.strip()
    if not line:
        continue
    r = json.loads(line).get("result")
    if r in ("OK", "EXPECTEDFAIL"):
        p += 1
    elif r == "SKIP":
        s += 1
    else:  # FAIL, TIMEOUT, ERROR, UNEXPECTEDPASS
        f += 1
print(p, f, s)
PY
}

testlog="$LARDER_ASAN_BUILD_DIR/meson-logs/testlog.json"
rm -f "$testlog"
echo "== meson test (unit, fuzz, loadtest smoke) in $LARDER_ASAN_BUILD_DIR"
meson test -C "$LARDER_ASAN_BUILD_DIR" --suite unit --suite fuzz --suite loadtest --print-errorlogs \
  --timeout-multiplier 3 --num-processes "$(nproc)"
meson_rc=$?
[[ -f "$testlog" ]] && read -r meson_pass meson_fail meson_skip < <(testlog_counts "$testlog")
if ((meson_rc != 0 && meson_fail == 0)); then
  meson_fail=1
  notes+=("meson test exited $meson_rc without a failed test in testlog.json")
fi

# --- the unit suite again under ThreadSanitizer (build-tsan holds only the
# unit programs, hence --no-rebuild). A data race fails the test.
testlog="$LARDER_TSAN_BUILD_DIR/meson-logs/testlog.json"
rm -f "$testlog"
echo "== meson test (unit) under ThreadSanitizer in $LARDER_TSAN_BUILD_DIR"
# clang 14's TSan fails at start ("unexpected memory mapping") where the
# kernel randomises mmap with more bits than it expects (vm.mmap_rnd_bits=32);
# without address randomisation it always starts, so turn it off if allowed.
norand=()
setarch "$(uname -m)" -R true 2>/dev/null && norand=(setarch "$(uname -m)" -R)
TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1" \
  "${norand[@]}" meson test -C "$LARDER_TSAN_BUILD_DIR" --suite unit --no-rebuild --print-errorlogs \
  --timeout-multiplier 3 --num-processes "$(nproc)"
tsan_rc=$?
[[ -f "$testlog" ]] && read -r tsan_pass tsan_fail tsan_skip < <(testlog_counts "$testlog")
if ((tsan_rc != 0 && tsan_fail == 0)); then
  tsan_fail=1
  notes+=("meson test under TSan exited $tsan_rc without a failed test in testlog.json")
fi

# integration LABEL TIMEOUT [PREFIX...] -- [run.py ARGS...]: runs the Python
# integration suite, under PREFIX (a command such as env or setarch) when
# given; sets int_pass int_fail int_skip. A runner that ends badly without
# reporting a failure counts as one failed, with a note.
integration() {
  local label="$1" limit="$2" counts rc prefix=(); shift 2
  while [[ "$1" != -- ]]; do prefix+=("$1"); shift; done
  shift
  int_pass=0 int_fail=0 int_skip=0
  counts="$(mktemp)"
  timeout --signal=TERM --kill-after=30 "$limit" \
    "${prefix[@]}" python3 tests/integration/run.py --counts "$counts" "$@"
  rc=$?
  if [[ -s "$counts" ]]; then
    read -r int_pass int_fail int_skip < <(python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); print(c["passed"], c["failed"], c["skipped"])' "$counts")
  fi
  rm -f "$counts"
  if ((rc != 0 && int_fail == 0)); then
    int_fail=1
    notes+=("integration runner ($label) exited $rc (timeout or crash) without reporting a failure")
  fi
}

# --- Python integration suite against the ASan larder, on one runner per core
# (at most 4: run.py gives each a port range of its own below the ephemeral
# ports). Its tests mostly wait on processes and timers, so two runners on
# two cores take little more than half the time of one.
jobs=$(nproc)
((jobs > 4)) && jobs=4
if ((deps_rc == 2)); then
  py_fail=1
  notes+=("integration suite not run: python3 lacks boto3/moto/awscli (see above)")
else
  echo "== integration tests against $LARDER_ASAN_BUILD_DIR/gateway/larder ($jobs runners)"
  integration ASan 1500 -- --jobs "$jobs" "$@"
  py_pass=$int_pass py_fail=$int_fail py_skip=$int_skip
fi

# --- the integration modules where the admin thread, the workers and the
# store's I/O threads share the most state, and the cluster churn (its
# heartbeat, subscriber and peer traffic under restarts), against the TSan
# larder (without address randomisation: norand, above): a data race larder
# reports fails the test (harness.py collects TSan's reports). About 3
# minutes on two runners; the whole suite passes so too, in about 12.
tsan_modules=(test_prefetch test_lookahead test_profiles test_pins test_admin test_operations
              test_cache_faults test_cluster_churn)
if ((deps_rc != 2)) && (($# == 0)); then
  tsan_bin="$LARDER_TSAN_BUILD_DIR/gateway/larder"
  case "$tsan_bin" in /*) ;; *) tsan_bin="$ROOT/$tsan_bin" ;; esac
  echo "== integration modules against $tsan_bin (ThreadSanitizer, $jobs runners)"
  integration TSan 600 env "LARDER_BIN=$tsan_bin" "${norand[@]}" -- --jobs "$jobs" "${tsan_modules[@]}"
  tsan_py_pass=$int_pass tsan_py_fail=$int_fail tsan_py_skip=$int_skip
fi

# --- short seeded soaks of a three-node cluster against the ASan larder
# (tests/soak/soak.py --ci: every answer checked against a model of the
# origin's versions, nodes and Redis restarted meanwhile; about a minute
# each): one of this version's nodes alone, and one with its third node
# running the previous release (a rolling upgrade). A failing run keeps its
# logs in the ASan build folder.
soak_pass=0 soak_fail=0
# soak LABEL ARGS...: one soak run, counted; its ports from the first integration
# runner's range (free by then), below the ephemeral ports as theirs are
soak() {
  local label="$1" out p f base="${LARDER_TEST_PORT_BASE:-20000}"; shift
  echo "== soak ($label: tests/soak/soak.py --ci $*) against $LARDER_ASAN_BUILD_DIR/gateway/larder"
  out="$(mktemp)"
  LARDER_BIN="$LARDER_ASAN_BUILD_DIR/gateway/larder" LARDER_TEST_PORTS="$base-$((base + 3000))" \
    timeout --signal=TERM --kill-after=30 300 \
    python3 tests/soak/soak.py --ci --keep "$LARDER_ASAN_BUILD_DIR/soak-logs-$label" "$@" \
    2>&1 | tee "$out"
  read -r p f < <(sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed$/\1 \2/p' "$out" | tail -1)
  if [[ -z "${p:-}" ]]; then
    p=0 f=1
    notes+=("the soak ($label) ended without its count line (timeout or crash)")
  fi
  soak_pass=$((soak_pass + p)) soak_fail=$((soak_fail + f))
  rm -f "$out"
}
if ((deps_rc != 2)) && (($# == 0)); then
  soak this --seed 1
  if [[ -n "${LARDER_PREVIOUS_BIN:-}" ]]; then
    soak upgrade --seed 2 --previous-bin "$LARDER_PREVIOUS_BIN"
  fi
fi

passed=$((check_pass + meson_pass + tsan_pass + py_pass + tsan_py_pass + soak_pass))
failed=$((check_fail + meson_fail + tsan_fail + py_fail + tsan_py_fail + soak_fail))
skipped=$((meson_skip + tsan_skip + py_skip + tsan_py_skip))
echo
echo "== summary"
echo "source checks:      $check_pass passed, $check_fail failed"
echo "meson (unit, fuzz): $meson_pass passed, $meson_fail failed, $meson_skip skipped"
echo "unit under TSan:    $tsan_pass passed, $tsan_fail failed, $tsan_skip skipped"
echo "integration:        $py_pass passed, $py_fail failed, $py_skip skipped"
echo "integration, TSan:  $tsan_py_pass passed, $tsan_py_fail failed, $tsan_py_skip skipped"
echo "soak:               $soak_pass passed, $soak_fail failed"
for n in "${notes[@]}"; do echo "note: $n"; done
if ((skipped)); then
  echo "$passed passed, $failed failed, $skipped skipped"
else
  echo "$passed passed, $failed failed"
fi
((failed == 0))
