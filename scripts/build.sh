#!/usr/bin/env bash
# Builds larder: scripts/build.sh [plain|asan|all]   (default: plain)
#   plain -> build/        (LARDER_BUILD_DIR overrides)
#   asan  -> build-asan/   (LARDER_ASAN_BUILD_DIR overrides), ASan + UBSan
# Under CI=true warnings are errors. Setup is idempotent: an existing build dir
# is reconfigured only when its options differ.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

what="${1:-plain}"
case "$what" in plain|asan|all) ;; *) echo "usage: $0 [plain|asan|all]" >&2; exit 64 ;; esac

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
