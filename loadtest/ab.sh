#!/usr/bin/env bash
# Two builds of larder measured against each other, runs interleaved so that
# drift of the machine (heat, other load) falls on both alike:
#   loadtest/ab.sh LARDER_A LARDER_B ROUNDS [quick|full] [scenario...]
# runs A, B, A, B, ... ROUNDS times each, then prints every run's median
# [min-max] over A's and B's rounds and B's median over A's
# (report.py compare); the table is also saved in the last run's folder as
# ab.md. The baseline (nginx, the direct origin) inside each run is measured
# again every round too.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
(($# >= 3)) || { sed -n '2,9p' "$0" >&2; exit 2; }
a="$(realpath "$1")" b="$(realpath "$2")" rounds="$3"
shift 3
[[ -x "$a" && -x "$b" ]] || { echo "ab.sh: $a or $b is not an executable" >&2; exit 2; }
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "ab.sh: ROUNDS must be a positive number" >&2; exit 2; }
a_dirs=() b_dirs=()
for ((i = 1; i <= rounds; i++)); do
  for side in a b; do
    bin="$a"; [[ $side == b ]] && bin="$b"
    echo "== round $i/$rounds: $side ($bin)"
    LARDER_BIN="$bin" "$here/run.sh" "$@" > /dev/null
    dir="$(readlink -f "$here/results/latest")"
    if [[ $side == a ]]; then a_dirs+=("$dir"); else b_dirs+=("$dir"); fi
    sleep 1   # results folders are named by the second
  done
done
python3 "$here/report.py" compare "${a_dirs[@]}" -- "${b_dirs[@]}" | tee "${b_dirs[-1]}/ab.md"
