#!/usr/bin/env bash
# Builds larder: scripts/build.sh [plain|asan|tsan|all]   (default: plain)
#   plain -> build/        (LARDER_BUILD_DIR overrides)
#   asan  -> build-asan/   (LARDER_ASAN_BUILD_DIR overrides), ASan + UBSan
#   tsan  -> build-tsan/   (LARDER_TSAN_BUILD_DIR overrides), ThreadSanitizer with
#            clang: the unit test programs and larder (scripts/test.sh runs them)
#   all   -> the three
# Under CI=true warnings are errors. Setup is idempotent: an existing build dir
# is reconfigured only when its options differ.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

what="${1:-plain}"
case "$what" in plain|asan|tsan|all) ;; *) echo "usage: $0 [plain|asan|tsan|all]" >&2; exit 64 ;; esac

werror=false
[[ "${CI:-}" == "true" ]] && werror=true

# setup DIR OPTION...
setup() {
  local dir="$1"; shift
  local opts=("-Dwerror=$werror" "$@")
  if [[ -f "$dir/build.ninja" && -f "$dir/meson-info/intro-buildoptions.json" ]]; then
    local stamp="$dir/.larder-options"
    if [[ -f "$stamp" && "$(cat "$stamp")" == "${opts[*]}" ]]; then
      return 0
    fi
    meson setup --reconfigure "$dir" "${opts[@]}"
  else
    meson setup "$dir" "${opts[@]}"
  fi
  printf '%s' "${opts[*]}" > "$dir/.larder-options"
}

if [[ "$what" == plain || "$what" == all ]]; then
  dir="${LARDER_BUILD_DIR:-build}"
  setup "$dir"
  ninja -C "$dir"
fi
if [[ "$what" == asan || "$what" == all ]]; then
  dir="${LARDER_ASAN_BUILD_DIR:-build-asan}"
  setup "$dir" -Db_sanitize=address,undefined -Db_lundef=false
  ninja -C "$dir"
fi
if [[ "$what" == tsan || "$what" == all ]]; then
  # clang, whose runtime deps.sh installs already (libclang-rt-14-dev, for the
  # fuzz build). jemalloc off: TSan replaces the allocator itself.
  dir="${LARDER_TSAN_BUILD_DIR:-build-tsan}"
  CC=clang setup "$dir" -Db_sanitize=thread -Db_lundef=false -Djemalloc=disabled
  # The programs the unit suite runs and larder, not the fuzz drivers or the
  # load tools (build.ninja first: a meson.build changed since setup may add a test).
  ninja -C "$dir" build.ninja >/dev/null
  mapfile -t targets < <(meson introspect --tests "$dir" | python3 -c '
import json, os, sys
d = os.path.realpath(sys.argv[1])
for t in json.load(sys.stdin):
    if any(s.split(":")[-1] == "unit" for s in t["suite"]):
        print(os.path.relpath(os.path.realpath(t["cmd"][0]), d))' "$dir")
  ninja -C "$dir" "${targets[@]}" gateway/larder
fi
