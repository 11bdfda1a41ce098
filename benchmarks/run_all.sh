#!/usr/bin/env bash
# The GPU benchmarks, run from the repo root on the device machine:
#   bash benchmarks/run_all.sh parall     PARALL (XLA vs Pallas) and PGMax side by side
#   bash benchmarks/run_all.sh schedules  SEQFIX/TOPO by relaxation: passes, rounds, a pass's profile, and
#                                         the full SEQFIX simulate at the ftp size (fits one 10-minute call)
#   bash benchmarks/run_all.sh schedules5m  the same at 5M edges (no chunk-loop comparison)
#   bash benchmarks/run_all.sh chunked    the level-by-level chunk loop at 0.05M-ftp, PARALL rounds
#   bash benchmarks/run_all.sh fused2     the fused kernels' check and PARALL speed only (0.5M, 5M)
#   bash benchmarks/run_all.sh occupancy  fused kernels at other tile sizes and warp counts (0.5M, 5M)
#   bash benchmarks/run_all.sh tiles      more tile / warp / unroll settings of the fused kernels
#   bash benchmarks/run_all.sh session4   fused kernels one at a time (0.5M), SEQFIX at the ftp size
#   bash benchmarks/run_all.sh session5   fused kernels with the math outside the width switch: check, compile, speed
#   bash benchmarks/run_all.sh session5b  the same with earlier versions side by side (benchmarks/_old_*.py, not committed)
#   bash benchmarks/run_all.sh session5c  compile in a fresh process, PARALL speed, PARALL rounds XLA vs fused
#   bash benchmarks/run_all.sh tiles5     tile and warp settings of the fused kernels, 8 sweeps per trip
#   bash benchmarks/run_all.sh session6   fused kernels with five transcendentals and device-side loop control:
#                                         check, compile, speed beside session 5's (benchmarks/_old_s5.py)
#   bash benchmarks/run_all.sh session6b  the same beside each step of session 6 (_old_s5, _old_s6a, ...) and
#                                         variable-kernel tiles of 512 and 1024 slots
#   bash benchmarks/run_all.sh session6c  session 6's result: check, compile, speed beside XLA and session 5
#                                         (benchmarks/_old_s5.py), Nsight Compute at 5M edges
#   bash benchmarks/run_all.sh persist6   the factor kernel walking tiles with loads ahead (264-1056 programs)
#   bash benchmarks/run_all.sh rounds6    PARALL triage rounds at the ftp size, XLA and fused
#   bash benchmarks/run_all.sh session6e  two factors per row where they fit, beside the kernels before
#                                         (benchmarks/_old_s6d.py)
#   bash benchmarks/run_all.sh tiles6     factor tiles of 128-512 slots with 4 or 8 warps, after session 6
#   bash benchmarks/run_all.sh tiles6b    float64 factor tiles of 64 slots with 2 warps, variable tiles 256-1024
#   bash benchmarks/run_all.sh session7   float64 divisions off their slow path, int control test, role bytes:
#                                         check, compile, speed beside session 6 (benchmarks/_old_s6.py and its
#                                         _oldlog_s6.py), PARALL triage rounds XLA and fused
#   bash benchmarks/run_all.sh session8   check, the variable kernel's gather against XLA's (micro_gather.py),
#                                         variable tiles and warps
#   bash benchmarks/run_all.sh session8b  wide factor rows waiting in the factor kernel: check, compile, speed
#                                         beside XLA and session 7 (benchmarks/_old_s7.py, not committed), rounds
#   bash benchmarks/run_all.sh bounds9    lower bounds by timing-only copies (make_bounds.py): the factor kernel's
#                                         math made cheap, the random gathers made contiguous, both
#   bash benchmarks/run_all.sh bounds9b   the same for each gather alone, and for a totals record of 8 bytes
#   bash benchmarks/run_all.sh session9   check (with batches under jax.vmap), compile, speed beside XLA, rounds
#   bash benchmarks/run_all.sh check4     the persistent SEQFIX kernel at 50K (its atomic variant runs on the GPU only)
# Nsight Compute, per kernel: bash benchmarks/ncu_all.sh 500000 fused:f64 (alone in a call: under ncu the
# fused kernels' compile and replay take 5+ minutes)
#   bash benchmarks/run_all.sh fused      the fused Pallas kernels (FASTLBP_BACKEND=fused): check, PARALL
#                                         side by side with XLA, the persistent SEQFIX/TOPO kernel, rounds
# PGMax comes from a wheel carried in .whl/ (pip install --no-deps). JSON details go to $OUT.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 OUT=${OUT:-out}
mkdir -p "$OUT"
filter() { grep -v -E "^ *%|onstant|slow_operation|xla_dump|^$|This isn|file a bug" ; }
if ls .whl/pgmax-*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site:$PWD
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
run() { echo "=== $*"; timeout "$1" python3 "${@:2}" 2>&1 | filter | tee -a "$OUT/log.txt" | tail -30; }
# The iterations each bench_parall.py row ran (timing-only copies must run all of them).
iterations_run() {
  python3 -c "import json; print([(r['variant'], r['precision'], r['iters']) for r in json.load(open('$OUT/bench_parall.json'))['rows']])"
}
case "${1:-parall}" in
  parall)
    run 300 benchmarks/bench_parall.py --sizes 50000 500000 5000000 --iters 200
    run 250 benchmarks/bench_pgmax.py --sizes 50000 500000 --iters 200 ;;
  schedules)
    run 60 benchmarks/profile_relaxed.py --size ftp
    run 150 benchmarks/bench_rounds.py --schedule seqfix --out "$OUT/rounds_seqfix"
    run 330 benchmarks/bench_schedules.py --sizes 50000 500000 ftp --strategies seqfix topo --round-budget 4 ;;
  schedules5m)
    run 560 benchmarks/bench_schedules.py --sizes 5000000 --strategies seqfix topo --round-budget 4 --no-check ;;
  chunked)
    run 330 benchmarks/bench_schedules.py --sizes 50000 500000 ftp --strategies seqfix:chunked topo:chunked \
      --round-budget 8
    run 220 benchmarks/bench_rounds.py --schedule parall --max-rounds 40 --out "$OUT/rounds_parall" ;;
  fused2)
    run 120 benchmarks/check_fused.py --graphs 6
    run 400 benchmarks/bench_parall.py --sizes 500000 5000000 --iters 200 \
      --variants xla fused-unroll4 fused-unroll4-w4 fused-unroll8 ;;
  occupancy)
    run 420 benchmarks/bench_parall.py --sizes 500000 5000000 --iters 200 \
      --variants xla fused-unroll4 fused-unroll4-t256-w8 fused-unroll4-w16 fused-unroll4-t1024-w16 ;;
  tiles)
    run 400 benchmarks/bench_parall.py --sizes 500000 5000000 --iters 200 \
      --variants fused-u4-t256-w8 fused-u4-t128-w4 fused-u4-t256-w4 fused-u8-t256-w8 fused-u4-t128-w8 ;;
  session4)
    run 200 benchmarks/profile_fused.py --size 500000 --configs 512,8 --dtypes f64 f32
    run 80 benchmarks/bench_schedules.py --sizes ftp --strategies seqfix --round-budget 4 --no-check
    run 150 benchmarks/bench_rounds.py --schedule seqfix --out "$OUT/rounds_seqfix" ;;
  session5)
    run 150 benchmarks/check_fused.py --graphs 3
    run 100 benchmarks/compile_probe.py --sizes 500000 5000000 --passes
    run 330 benchmarks/bench_parall.py --sizes 50000 500000 5000000 --iters 200 --variants xla old-unroll4 fused-unroll4 ;;
  session5c)
    run 120 benchmarks/compile_probe.py --sizes 50000 500000 5000000
    run 300 benchmarks/bench_parall.py --sizes 50000 500000 5000000 --iters 200 \
      --variants xla fused-unroll4 fused-unroll8
    run 100 benchmarks/bench_rounds.py --schedule parall --max-rounds 60 --out "$OUT/rounds_parall"
    FASTLBP_BACKEND=fused run 100 benchmarks/bench_rounds.py --schedule parall --max-rounds 60 \
      --out "$OUT/rounds_parall_fused" ;;
  session6)
    run 150 benchmarks/check_fused.py --graphs 3
    run 100 benchmarks/compile_probe.py --sizes 500000 5000000
    run 330 benchmarks/bench_parall.py --sizes 50000 500000 5000000 --iters 200 \
      --variants xla fused-unroll8 $(ls benchmarks/_old_*.py 2>/dev/null | sed 's/.*_old_\(.*\)\.py/\1-unroll8/') ;;
  session6b)
    run 120 benchmarks/check_fused.py --graphs 3
    run 460 benchmarks/bench_parall.py --sizes 500000 5000000 --iters 200 \
      --variants fused-unroll8 fused-u8-t256-w8-v512 fused-u8-t256-w8-v1024 \
      $(ls benchmarks/_old_*.py 2>/dev/null | sed 's/.*_old_\(.*\)\.py/\1-unroll8/') ;;
  session6c)
    run 120 benchmarks/check_fused.py --graphs 3
    run 100 benchmarks/compile_probe.py --sizes 500000 5000000
    run 300 benchmarks/bench_parall.py --sizes 50000 500000 5000000 --iters 200 \
      --variants xla fused-unroll8 s5-unroll8
    NCU_FULL=1 NCU_TIMEOUT=200 bash benchmarks/ncu_all.sh 5000000 fused:f64 2>&1 | tail -20 ;;
  persist6)
    run 460 benchmarks/bench_parall.py --sizes 500000 5000000 --iters 200 \
      --variants fused-unroll8 fused-u8-t256-w8-v512-p264 fused-u8-t256-w8-v512-p396 fused-u8-t256-w8-v512-p528 \
      fused-u8-t256-w8-v512-p1056 ;;
  rounds6)
    run 120 benchmarks/bench_rounds.py --schedule parall --max-rounds 60 --out "$OUT/rounds_parall"
    FASTLBP_BACKEND=fused run 120 benchmarks/bench_rounds.py --schedule parall --max-rounds 60 \
      --out "$OUT/rounds_parall_fused" ;;
  session7)
    run 120 benchmarks/check_fused.py --graphs 3
    run 100 benchmarks/compile_probe.py --sizes 500000 5000000
    run 300 benchmarks/bench_parall.py --sizes 50000 500000 5000000 --iters 200 \
      --variants xla fused-unroll8 s6-unroll8
    run 100 benchmarks/bench_rounds.py --schedule parall --max-rounds 60 --out "$OUT/rounds_parall"
    FASTLBP_BACKEND=fused run 100 benchmarks/bench_rounds.py --schedule parall --max-rounds 60 \
      --out "$OUT/rounds_parall_fused" ;;
  session8)
    run 120 benchmarks/check_fused.py --graphs 3
    run 120 benchmarks/micro_gather.py --sizes 500000 5000000
    run 400 benchmarks/bench_parall.py --sizes 500000 5000000 --iters 200 \
      --variants fused-unroll8 fused-u8-t128-w4-v1024-x8 fused-u8-t128-w4-v256-x4 fused-u8-t128-w4-v128-x2 ;;
  session9)
    run 200 benchmarks/check_fused.py --graphs 6
    run 100 benchmarks/compile_probe.py --sizes 500000 5000000
    run 250 benchmarks/bench_parall.py --sizes 50000 500000 5000000 --iters 200 --variants xla fused-unroll8
    FASTLBP_BACKEND=fused run 100 benchmarks/bench_rounds.py --schedule parall --max-rounds 60 \
      --out "$OUT/rounds_parall_fused" ;;
  bounds9)
    python3 benchmarks/make_bounds.py
    run 400 benchmarks/bench_parall.py --sizes 50000 500000 5000000 --iters 200 \
      --variants fused-unroll8 bnomath-unroll8 bnogather-unroll8 bideal-unroll8
    iterations_run ;;
  bounds9b)
    python3 benchmarks/make_bounds.py
    run 400 benchmarks/bench_parall.py --sizes 500000 5000000 --iters 200 \
      --variants fused-unroll8 bnogf-unroll8 bnogv-unroll8 bnogather-unroll8 bhalf-unroll8
    iterations_run ;;
  session8b)
    run 150 benchmarks/check_fused.py --graphs 6
    run 100 benchmarks/compile_probe.py --sizes 500000 5000000
    run 330 benchmarks/bench_parall.py --sizes 50000 500000 5000000 --iters 200 \
      --variants xla fused-unroll8 s7-unroll8
    run 100 benchmarks/bench_rounds.py --schedule parall --max-rounds 60 --out "$OUT/rounds_parall"
    FASTLBP_BACKEND=fused run 100 benchmarks/bench_rounds.py --schedule parall --max-rounds 60 \
      --out "$OUT/rounds_parall_fused" ;;
  session6e)
    run 120 benchmarks/check_fused.py --graphs 3
    run 300 benchmarks/bench_parall.py --sizes 50000 500000 5000000 --iters 200 \
      --variants xla fused-unroll8 s6d-unroll8 ;;
  tiles6)
    run 400 benchmarks/bench_parall.py --sizes 500000 5000000 --iters 200 \
      --variants fused-unroll8 fused-u8-t512-w8-v512 fused-u8-t256-w4-v512 fused-u8-t128-w4-v512 ;;
  tiles6b)
    run 400 benchmarks/bench_parall.py --sizes 500000 5000000 --iters 200 \
      --variants fused-unroll8 fused-u8-t64-w2-v512 fused-u8-t128-w4-v256 fused-u8-t128-w4-v1024 ;;
  tiles5)
    run 400 benchmarks/bench_parall.py --sizes 500000 5000000 --iters 200 \
      --variants fused-u8-t256-w8 fused-u8-t512-w8 fused-u8-t256-w4 fused-u8-t512-w16 fused-u8-t128-w4 ;;
  session5b)
    run 150 benchmarks/check_fused.py --graphs 3
    run 100 benchmarks/compile_probe.py --sizes 500000 5000000 --passes
    run 330 benchmarks/bench_parall.py --sizes 50000 500000 5000000 --iters 200 \
      --variants xla s4-unroll4 c1-unroll4 fused-unroll4 fused-unroll8 ;;
  check4)
    run 200 benchmarks/bench_seqfix_pallas.py --sizes 50000 --strategies seqfix --atomic --width 128 --warps 8 ;;
  fused)
    run 150 benchmarks/check_fused.py --graphs 6
    run 300 benchmarks/bench_parall.py --sizes 500000 5000000 --iters 200 --variants xla fused-unroll4
    run 330 benchmarks/bench_seqfix_pallas.py --sizes ftp --strategies seqfix topo --atomic --width 128 --warps 8
    export FASTLBP_BACKEND=fused
    run 150 benchmarks/bench_rounds.py --schedule seqfix --max-rounds 60 --out "$OUT/rounds_seqfix_fused"
    unset FASTLBP_BACKEND ;;
esac
