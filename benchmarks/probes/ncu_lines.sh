#!/usr/bin/env bash
# Instructions executed and stall samples per SASS line of one fused kernel (device machine), from
# Nsight Compute's source counters (Triton's cubins carry no line info, so SASS, not Python lines).
#   bash benchmarks/probes/ncu_lines.sh SIZE DTYPE KERNEL_REGEX   -> $OUT/lines_*.sass.csv and .sass.txt, summary printed
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 OUT=${OUT:-out} XLA_PYTHON_CLIENT_PREALLOCATE=false
mkdir -p "$OUT"
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
size=${1:-500000}; dtype=${2:-f64}; kernel=${3:-_factor_kernel}
rep="$OUT/lines_${size}_${dtype}${kernel}"
timeout ${NCU_TIMEOUT:-300} "$NCU" --clock-control none --profile-from-start off -k "regex:${kernel}\$" -c 1 \
  --section SourceCounters --section InstructionStats --import-source yes -f -o "$rep" \
  python3 benchmarks/probes/ncu_sweep.py --size "$size" --backend fused --dtype "$dtype" --iters 1 >/dev/null 2>&1
"$NCU" -i "$rep.ncu-rep" --page source --csv --print-source sass > "$rep.sass.csv" 2> "$rep.err"
head -c 600 "$rep.err"
python3 benchmarks/probes/ncu_lines_table.py "$rep.sass.csv"
