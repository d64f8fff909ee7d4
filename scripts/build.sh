#!/usr/bin/env bash
# Builds larder: scripts/build.sh [plain|asan|tsan|all|previous]   (default: plain)
#   plain -> build/        (LARDER_BUILD_DIR overrides)
#   asan  -> build-asan/   (LARDER_ASAN_BUILD_DIR overrides), ASan + UBSan
#   tsan  -> build-tsan/   (LARDER_TSAN_BUILD_DIR overrides), ThreadSanitizer with
#            clang: the unit test programs and larder (scripts/test.sh runs them)
#   all   -> the three
#   previous -> build-prev/larder: the larder of the commit scripts/previous-release
#            names, built from the repository's history (git archive) for the
#            rolling-upgrade tests; exits 3, building nothing, when the history
#            does not hold it (a shallow clone)
# Under CI=true warnings are errors. Setup is idempotent: an existing build dir
# is reconfigured only when its options differ.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

what="${1:-plain}"
case "$what" in
  plain|asan|tsan|all|previous) ;;
  *) echo "usage: $0 [plain|asan|tsan|all|previous]" >&2; exit 64 ;;
esac

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
if [[ "$what" == previous ]]; then
  rev="$(grep -v '^#' scripts/previous-release | head -1)"
  out=build-prev
  if [[ -x "$out/larder" && "$(cat "$out/.larder-rev" 2>/dev/null)" == "$rev" ]]; then
    exit 0
  fi
  if ! git cat-file -e "$rev^{commit}" 2>/dev/null; then
    echo "build.sh: $rev (scripts/previous-release) is not in this repository's history" >&2
    exit 3
  fi
  rm -rf "$out"
  mkdir -p "$out/src"
  git archive "$rev" | tar -x -C "$out/src"
  # Its own options, warnings not errors: it is code already released.
  (cd "$out/src" && meson setup ../build -Dwerror=false >/dev/null)
  ninja -C "$out/build" gateway/larder
  cp "$out/build/gateway/larder" "$out/larder"
  printf '%s' "$rev" > "$out/.larder-rev"
fi
