#!/usr/bin/env bash
# Nsight Compute per-kernel table for PARALL iterations (device machine):
#   bash benchmarks/probes/ncu_all.sh SIZE BACKEND:DTYPE ...   (NCU_FULL=1: also memory and SM throughput,
#   more replay passes; NCU_TIMEOUT: seconds per configuration, default 300)
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 OUT=${OUT:-out} XLA_PYTHON_CLIENT_PREALLOCATE=false
mkdir -p "$OUT"
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
M=gpu__time_duration.sum,launch__registers_per_thread,launch__block_size,launch__grid_size
M=$M,sm__maximum_warps_per_active_cycle_pct,sm__warps_active.avg.pct_of_peak_sustained_active
M=$M,smsp__inst_executed.sum,sm__pipe_fp64_cycles_active.avg.pct_of_peak_sustained_active
[ -n "${NCU_FULL:-}" ] && M=$M,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__throughput.avg.pct_of_peak_sustained_elapsed,sm__throughput.avg.pct_of_peak_sustained_elapsed
size=${1:-500000}
for cfg in "${@:2}"; do
  IFS=: read -r backend dtype <<< "$cfg"
  log="$OUT/ncu_${size}_${backend}_${dtype}.csv"
  echo "=== $size $backend $dtype"
  timeout ${NCU_TIMEOUT:-300} "$NCU" --clock-control none --profile-from-start off --csv --page raw --metrics "$M" \
    --log-file "$log" python3 benchmarks/probes/ncu_sweep.py --size "$size" --backend "$backend" --dtype "$dtype" \
    --iters 1 2>&1 | grep -v -E "onstant|slow_operation|^ *%|^$" | tail -5
  python3 benchmarks/probes/ncu_table.py "$log"
done
