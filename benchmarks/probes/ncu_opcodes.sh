#!/usr/bin/env bash
# SASS instruction mix of one fused kernel (device machine), to see what its instructions are:
#   bash benchmarks/probes/ncu_opcodes.sh SIZE DTYPE KERNEL_REGEX   (e.g. 500000 f64 _factor_kernel)
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 OUT=${OUT:-out} XLA_PYTHON_CLIENT_PREALLOCATE=false
mkdir -p "$OUT"
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
size=${1:-500000}; dtype=${2:-f64}; kernel=${3:-_factor_kernel}
log="$OUT/opcodes_${size}_${dtype}${kernel}.csv"
timeout ${NCU_TIMEOUT:-240} "$NCU" --clock-control none --profile-from-start off -k "regex:${kernel}\$" -c 1 \
  --metrics sass__inst_executed_per_opcode,smsp__inst_executed.sum --print-metric-instances details \
  --csv --page raw --log-file "$log" \
  python3 benchmarks/probes/ncu_sweep.py --size "$size" --backend fused --dtype "$dtype" --iters 1 >/dev/null 2>&1
python3 - "$log" <<'PY'
import csv, re, sys
text = open(sys.argv[1]).read()
rows = list(csv.reader(text.splitlines()))
heads = [r for r in rows if "Kernel Name" in r]
if not heads:
    print(text[-3000:])
    sys.exit()
head = heads[0]
data = [r for r in rows[rows.index(head) + 1:] if len(r) == len(head)]
for r in data:
    rec = dict(zip(head, r))
    if "sass__inst_executed_per_opcode" not in rec or not re.search(r"\d", rec["sass__inst_executed_per_opcode"]):
        continue
    print(rec["Kernel Name"][:40], "warp instructions", rec.get("smsp__inst_executed.sum"))
    pairs = re.findall(r"([A-Z][A-Z0-9_.]*)\s*[:=]\s*([\d.,]+)", rec["sass__inst_executed_per_opcode"])
    pairs = sorted(((float(v.replace(",", "")), k) for k, v in pairs), reverse=True)
    total = sum(v for v, _ in pairs) or 1
    for v, k in pairs[:40]:
        print(f"  {k:<12} {v:>14,.0f} {100 * v / total:5.1f} %")
    if not pairs:
        print(rec["sass__inst_executed_per_opcode"][:3000])
    break
PY
