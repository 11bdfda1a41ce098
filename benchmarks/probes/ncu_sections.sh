#!/usr/bin/env bash
# Nsight Compute sections (speed of light, memory, scheduler, warp stalls, occupancy) of the fused
# factor and variable kernels of one PARALL sweep (device machine):
#   bash benchmarks/probes/ncu_sections.sh SIZE DTYPE [KERNEL_REGEX]   -> $OUT/sections_SIZE_DTYPE.txt, summary printed
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 OUT=${OUT:-out} XLA_PYTHON_CLIENT_PREALLOCATE=false
mkdir -p "$OUT"
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
size=${1:-500000}; dtype=${2:-f64}; kernel=${3:-_factor_kernel|_var_kernel}
log="$OUT/sections_${size}_${dtype}.txt"
timeout ${NCU_TIMEOUT:-300} "$NCU" --clock-control none --profile-from-start off -k "regex:(${kernel})\$" -c 2 \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section SchedulerStats --section WarpStateStats \
  --section Occupancy --section LaunchStats --section ComputeWorkloadAnalysis \
  python3 benchmarks/probes/ncu_sweep.py --size "$size" --backend fused --dtype "$dtype" --iters 1 > "$log" 2>&1
grep -E "^\s+[a-z_]+_kernel|Duration|DRAM Throughput|L2 Cache Throughput|L1/TEX Hit|L2 Hit|Mem Busy|Max Bandwidth|Issue Slots Busy|Issued Warp Per Scheduler|No Eligible|Active Warps Per Scheduler|Eligible Warps|Warp Cycles Per Issued|Achieved Occupancy|Registers Per|Executed Ipc Active|Memory Throughput|Compute \(SM\)" "$log" | head -80
grep -E "OPT|stall|Stall" "$log" | head -30
