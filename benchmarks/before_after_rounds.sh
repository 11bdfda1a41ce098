#!/usr/bin/env bash
# Interactive rounds at the ftp size (benchmarks/bench_rounds.py) for two trees in one device call, run
# alternately so both see the same machine: BEFORE (a copy of an older checkout, default out/before) and
# this checkout. Prints the two tables last; details under $OUT/{before,after}_{config}.
#
#   bash benchmarks/before_after_rounds.sh [BEFORE_DIR] [SECONDS_PER_RUN]
set -uo pipefail
BEFORE=${1:-out/before}
LIMIT=${2:-95}
OUT=${OUT:-out}
mkdir -p "$OUT"
HERE=$PWD
configs=("parall|--schedule parall" "fused|--schedule parall --backend fused" "seqfix|--schedule seqfix")
for c in "${configs[@]}"; do
  name=${c%%|*}; args=${c#*|}
  for side in before after; do
    dir=$HERE; [ "$side" = before ] && dir=$HERE/$BEFORE
    echo "=== $side $name"
    (cd "$dir" && PYTHONPATH=$dir timeout "$LIMIT" python benchmarks/bench_rounds.py $args --max-rounds 60 \
      --out "$OUT/${side}_$name" > "$OUT/${side}_$name.log" 2>&1; echo "rc=$?" >> "$OUT/${side}_$name.log")
    tail -4 "$OUT/${side}_$name.log"
  done
done
