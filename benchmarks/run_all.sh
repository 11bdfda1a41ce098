#!/usr/bin/env bash
# Every GPU benchmark in one call (the device tool runs this from the repo root):
#   bash benchmarks/run_all.sh            (OUT=dir for the JSON details)
# PGMax comes from a wheel carried in .whl/ (pip install --no-deps).
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 OUT=${OUT:-out}
mkdir -p "$OUT"
filter() { grep -v -E "^ *%|onstant|slow_operation|xla_dump|^$|This isn|file a bug" ; }
if ls .whl/pgmax-*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site:$PWD
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
run() { echo "=== $*"; timeout "${STEP_TIMEOUT:-240}" python3 "$@" 2>&1 | filter | tee -a "$OUT/log.txt" | tail -40; }
run benchmarks/bench_parall.py --sizes 50000 500000 5000000 --iters 200
[ -f benchmarks/bench_schedules.py ] && run benchmarks/bench_schedules.py
run benchmarks/bench_pgmax.py --sizes 50000 500000 --iters 200
run benchmarks/bench_rounds.py --max-rounds 60
