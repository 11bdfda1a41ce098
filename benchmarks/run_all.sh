#!/usr/bin/env bash
# The GPU benchmarks behind the figures in BENCHMARKS.md, run from the repo root on the device machine:
#
#   bash benchmarks/run_all.sh MODE        details under $OUT (default ./out), a short table printed last
#
#   check                the fused kernels against the XLA engine on random graphs (and batches under vmap)
#   parall               PARALL µs per iteration, XLA and fused, f64 and f32, at 50K / 0.5M / 5M edges;
#                        the fused loop's compile time in a fresh process
#   rounds               triage rounds at the ftp size, full simulate: PARALL (XLA, fused), SEQFIX (relaxation)
#   rounds-seqfix-pallas the same for SEQFIX with the persistent Pallas kernel (seqfix:chunked, backend "fused")
#   schedules            SEQFIX / TOPO by relaxation at 50K, 0.5M and the ftp size: levels, passes, rounds, exactness
#   schedules-5m         the same at 5M edges (no exactness check: it does not fit one 10-minute call)
#   chunked              SEQFIX / TOPO with the level-by-level chunk loop (50K, 0.5M, ftp)
#   seqfix-pallas        the persistent SEQFIX kernel at 50K against the chunk loop; chunk widths and warps at ftp
#   seqfix-pallas-ftp    the persistent SEQFIX / TOPO kernel at ftp and 0.5M edges, 256-slot chunks, rounds
#   pgmax                PGMax 0.6.1 and fastlbp side by side (PGMax from a wheel carried in .whl/)
#   chains               deep chains (10^3, 10^4, 10^5 links), SEQFIX / TOPO: levelling, pass budget, passes,
#                        sweeps, rounds, exactness against the chunk loop; the unbudgeted relaxation at 10^3
#   chains-calibrate     the cost of a relaxation pass and of a chunk step on synthetic graphs (the pass
#                        budget's cost model, schedules/relax_plan.py)
#   all                  every mode above, one after another (longer than one 10-minute device call:
#                        on the device tool run each mode as its own call)
#
# Each mode fits one 10-minute call. Nsight Compute and the other one-off probes are in benchmarks/probes/.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 OUT=${OUT:-out}
mkdir -p "$OUT"
MODES="check parall rounds rounds-seqfix-pallas schedules schedules-5m chunked seqfix-pallas seqfix-pallas-ftp pgmax chains chains-calibrate"
filter() { grep -v -E "^ *%|onstant|slow_operation|xla_dump|^$|This isn|file a bug" ; }
# run SECONDS SCRIPT ARGS...: one benchmark under a time limit; its output to $OUT/log.txt, its tail shown.
run() { echo "=== $*"; timeout "$1" python3 "${@:2}" 2>&1 | filter | tee -a "$OUT/log.txt" | tail -30; }
if ls .whl/pgmax-*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site:$PWD
fi
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader

mode() {
  case "$1" in
    check)
      run 200 benchmarks/check_fused.py --graphs 6 ;;
    parall)
      run 300 benchmarks/bench_parall.py --sizes 50000 500000 5000000 --iters 200 --variants xla fused-unroll8
      run 150 benchmarks/compile_probe.py --sizes 500000 5000000 ;;
    rounds)
      run 150 benchmarks/bench_rounds.py --schedule parall --max-rounds 60 --out "$OUT/rounds_parall"
      run 150 benchmarks/bench_rounds.py --schedule parall --backend fused --max-rounds 60 \
        --out "$OUT/rounds_parall_fused"
      run 200 benchmarks/bench_rounds.py --schedule seqfix --max-rounds 60 --out "$OUT/rounds_seqfix" ;;
    rounds-seqfix-pallas)
      run 300 benchmarks/bench_rounds.py --schedule seqfix:chunked --backend fused --max-rounds 60 \
        --out "$OUT/rounds_seqfix_fused" ;;
    schedules)
      run 400 benchmarks/bench_schedules.py --sizes 50000 500000 ftp --strategies seqfix topo --round-budget 4 ;;
    schedules-5m)
      run 570 benchmarks/bench_schedules.py --sizes 5000000 --strategies seqfix topo --round-budget 4 --no-check ;;
    chunked)
      run 400 benchmarks/bench_schedules.py --sizes 50000 500000 ftp --strategies seqfix:chunked topo:chunked \
        --round-budget 8 ;;
    seqfix-pallas)
      run 200 benchmarks/bench_seqfix_pallas.py --sizes 50000 --strategies seqfix --atomic --width 128 --warps 8
      run 350 benchmarks/bench_seqfix_pallas.py --sizes ftp --strategies seqfix --sweep-widths 128 256 512 \
        --sweep-warps 8 16 --atomic ;;
    seqfix-pallas-ftp)
      run 570 benchmarks/bench_seqfix_pallas.py --sizes ftp 500000 --atomic --width 256 --warps 8 ;;
    pgmax)
      run 300 benchmarks/bench_pgmax.py --sizes 50000 500000 --iters 200 ;;
    chains)
      run 570 benchmarks/bench_chains.py --links 1000 10000 100000 --before-up-to 1000 ;;
    chains-calibrate)
      run 570 benchmarks/bench_chains.py --links --calibrate 50000 500000 ftp --json bench_chains_calibrate.json ;;
    *)
      echo "unknown mode '$1'; modes: $MODES all" >&2
      return 2 ;;
  esac
}

status=0
if [ "${1:-}" = all ]; then
  for m in $MODES; do mode "$m" || status=$?; done
else
  mode "${1:-}" || status=$?
fi
# The short table: the headline figures of every JSON the run left in $OUT.
python3 benchmarks/summary.py "$OUT"
exit $status
