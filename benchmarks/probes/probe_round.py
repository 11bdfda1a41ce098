"""Where a warm PARALL round's time goes, per backend (dispatch, device, results to the host).

    python benchmarks/probes/probe_round.py --preset ftp --backends xla fused

Builds the synthetic graph, converges once, then times warm rounds the way
`fastlbp.inference.session.Session.run` did them: one label flipped, the runner called with the
last messages, the results read back. Each round is split into the
evidence's transfer, the call's return (it blocks on the while loop's
test), the device work left (`block_until_ready`) and the reads to the
host; rounds with `max_iters` 0 give the fixed costs of a call (no sweep but
the fused loop's priming one). Medians over the rounds; a table is printed
last and details go to $OUT/probe_round.json.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))  # graphs: evidence_from_labels

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from common import environment, parall_runner, write_json  # noqa: E402
from graphs import evidence_from_labels  # noqa: E402

from fastlbp.engines.loop import controls, init  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="ftp")
    ap.add_argument("--backends", nargs="+", default=["xla", "fused"])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--read", choices=["asarray", "device_get"], default="asarray",
                    help="how results reach the host: one np.asarray each, or one jax.device_get")
    args = ap.parse_args(argv)
    from datalog import synthetic
    from datalog.bayesnet import to_model

    model = to_model(synthetic.generate(preset=args.preset, seed=0))
    graph = jax.device_put(model.graph)
    dt = jnp.float64
    alarms = list(model.alarms)[: args.rounds]
    rows = []
    for backend in args.backends:
        runner = parall_runner(model.graph, backend)

        def call(msgs, labels, max_iters, ev=None):
            if ev is None:
                ev = jnp.asarray(evidence_from_labels(model.num_vars, labels), dt)
            return runner(graph, msgs, ev, controls(1e-6, max_iters, 0.0, dt))

        first = call(init(graph, dt), {}, 1000)
        jax.block_until_ready(first)
        for max_iters in (1000, 0):
            msgs = first.messages
            parts = {"evidence": [], "dispatch": [], "device": [], "host": [], "total": []}
            iters = []
            labels: dict[int, bool] = {}
            for a in alarms:
                labels[int(a)] = False
                te = time.perf_counter()
                ev = jax.block_until_ready(jnp.asarray(evidence_from_labels(model.num_vars, labels), dt))
                t0 = time.perf_counter()
                res = call(msgs, labels, max_iters, ev)
                t1 = time.perf_counter()
                jax.block_until_ready(res)
                t2 = time.perf_counter()
                if args.read == "asarray":
                    _ = bool(res.conflict), np.asarray(res.log_odds), np.asarray(res.marginals)
                else:  # one call: the copies overlap
                    _ = jax.device_get((res.conflict, res.log_odds, res.marginals))
                iters.append(int(res.iterations))
                t3 = time.perf_counter()
                if max_iters:
                    msgs = res.messages
                for k, v in zip(parts, (t0 - te, t1 - t0, t2 - t1, t3 - t2, t3 - te), strict=True):
                    parts[k].append(v)
            row = {"backend": backend, "read": args.read, "max_iters": max_iters,
                   "median_iterations": statistics.median(iters),
                   **{f"{k}_ms": statistics.median(v) * 1e3 for k, v in parts.items()}}
            rows.append(row)
            print(row, flush=True)
    write_json(f"probe_round_{args.read}.json",
               {"environment": environment(), "edges": graph.num_edges, "rows": rows})
    print(f"{'backend':>8} {'max_it':>6} {'it':>4} {'evidence ms':>11} {'call ms':>8} {'device ms':>9} "
          f"{'host ms':>7} {'total ms':>8}")
    for r in rows:
        print(f"{r['backend']:>8} {r['max_iters']:>6} {r['median_iterations']:>4} {r['evidence_ms']:>11.3f} "
              f"{r['dispatch_ms']:>8.3f} {r['device_ms']:>9.3f} {r['host_ms']:>7.3f} {r['total_ms']:>8.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
