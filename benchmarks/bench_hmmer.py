"""hmmer, Soufflé's points-to analysis of a real C program (27.3M rule instances), from `.dl` to a ranking,
stage by stage; its output relations checked against Soufflé's.

    python benchmarks/bench_hmmer.py                                  # ../shared/data/souffle-hmmer
    python benchmarks/bench_hmmer.py --dir DIR -o hmmer.npz           # also write derivation.npz
    python benchmarks/bench_hmmer.py --graph hmmer.npz --dir DIR      # from derivation.npz (no clingo)
    python benchmarks/bench_hmmer.py --check --samples 100000         # and `fastlbp check` (sampled)

Stages (each timed in this process, in this order):

* parse: `datalog.souffle.parse_file` of DIR/hmmer.dl;
* facts, translate, clingo, read back, graph: `datalog.grounding.ground`'s own
  stage times (reading the facts, the translation to clingo's language,
  clingo's grounding to aspif, reading it back in bulk (`datalog.aspif`), the
  derivation graph with duplicates merged); or, with --graph, reading
  derivation.npz (`datalog.npz.read`);
* write npz: `datalog.npz.save` (with -o), and its size;
* cycles: least-fixpoint stages and cycle elimination (`datalog.cycles`);
* model: compression and the factor graph (`datalog.bayesnet.to_model`);
* LBP 1, LBP 2: one cold LBP round (`fastlbp.inference.session.marginals`,
  method lbp), the first with JAX's compilation, then the same again;
* check (with --check): `fastlbp.inference.check.check` against the sampled
  reference (`--samples` worlds; exact is out of reach at this size).

Then the output relations: the alarms (the tuples of `.output` relations CPtrLoad, CPtrStore) must
equal Soufflé's DIR/CPtrLoad.csv and DIR/CPtrStore.csv tuple for tuple, and every marginal must be a
number in [0, 1]; the exit status is 1 otherwise. Prints a table (markdown) and the peak memory
(RSS) of this process; the JSON goes to --out (default $OUT/bench_hmmer.json).

On the GPU machines (no clingo there): carry the wheels of clingo, cffi, pycparser and pcpp and the
folder of hmmer (README "Benchmarks" / BENCHMARKS.md give the command).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DEFAULT_DIR = ROOT.parent / "shared" / "data" / "souffle-hmmer"
OUTPUTS = ("CPtrLoad", "CPtrStore")


def peak_rss_gb() -> float:
    """Peak resident memory of this process (and of finished children: clingo's process), GB."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return max(own, kids) * 1024 / 1e9


def expected_alarms(folder: Path) -> set[str] | None:
    """The tuples of Soufflé's output CSVs (tab-separated), named as fastlbp names them; None if absent."""
    names = set()
    for rel in OUTPUTS:
        path = folder / f"{rel}.csv"
        if not path.exists():
            return None
        for line in path.read_text(encoding="utf-8").splitlines():
            if line:
                names.add(f"{rel}({','.join(line.split(chr(9)))})")
    return names


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", type=Path, default=DEFAULT_DIR, help="the hmmer folder (hmmer.dl, facts/, CSVs)")
    ap.add_argument("--graph", type=Path, help="start from this derivation.npz instead of grounding")
    ap.add_argument("-o", "--output", type=Path, help="write the derivation graph here (derivation.npz)")
    ap.add_argument("--check", action="store_true", help="run `check` against the sampled reference")
    ap.add_argument("--samples", type=int, default=100_000, help="worlds of the sampled reference")
    ap.add_argument("--out", type=Path, help="JSON results (default $OUT/bench_hmmer.json)")
    args = ap.parse_args(argv)

    import jax

    from datalog import cycles, grounding, npz, souffle
    from datalog.bayesnet import to_model
    from fastlbp.core.settings import Settings
    from fastlbp.inference.session import marginals

    jax.config.update("jax_enable_x64", True)  # as fastlbp's entry points run (`fastlbp.core.jax_setup`)
    rows: list[tuple[str, float, str]] = []
    dev = jax.devices()[0]
    info: dict = {"device": f"{dev.platform}:{getattr(dev, 'device_kind', '')}",
                  "cpus": os.cpu_count(), "load_before": os.getloadavg()[0],
                  "python": platform.python_version(), "jax": jax.__version__,
                  "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
    start = time.perf_counter()

    def stage(name: str, t0: float, note: str = "") -> float:
        t = time.perf_counter()
        rows.append((name, t - t0, note))
        print(f"{name}: {t - t0:.2f} s {note}", file=sys.stderr, flush=True)
        return t

    t = time.perf_counter()
    if args.graph:
        dg, _ = npz.read(args.graph)
        t = stage("read npz", t, f"{args.graph.stat().st_size / 1e6:.0f} MB")
    else:
        program = souffle.parse_file(args.dir / "hmmer.dl")
        t = stage("parse", t, f"{len(program.rules)} rules")
        g = grounding.ground(program, grounding.GroundOptions(facts=args.dir / "facts", max_rule_instances=0))
        for name, key in (("facts", "facts"), ("translate", "translate"), ("clingo", "clingo"),
                          ("read back", "read"), ("graph", "graph")):
            rows.append((name, g.seconds[key], f"{g.ground_rules:,} rule instances" if key == "read" else ""))
        t = time.perf_counter()
        dg = g.graph
        info["input_tuples"] = g.facts
    info.update(tuples=dg.num_tuples, clauses=dg.num_clauses, body_entries=int(dg.body.size),
                alarms=len(dg.alarms))
    if args.output:
        npz.save(dg, args.output)
        t = stage("write npz", t, f"{args.output.stat().st_size / 1e6:.0f} MB")
    stages = cycles.least_fixpoint(dg)
    t = stage("cycles", t, f"{stages.num_dropped_clauses:,} clauses dropped")
    if not stages.derivable.all():
        print(f"warning: {int((~stages.derivable).sum())} tuples not derivable", file=sys.stderr)
    model = to_model(dg, compress=True, stages=stages)
    t = stage("model", t, f"{model.num_vars:,} variables, {model.graph.num_edges:,} edges")
    info.update(variables=model.num_vars, edges=model.graph.num_edges)
    settings = Settings(method="lbp")
    rounds = []
    for k in (1, 2):
        rnd = marginals(model, settings=settings)
        rounds.append(rnd)
        t = stage(f"LBP {k}", t, f"{rnd.iterations} iterations, converged {rnd.converged}, "
                                 f"{rnd.seconds:.2f} s in the round")
    info["lbp"] = [{"seconds": r.seconds, "iterations": r.iterations, "converged": r.converged}
                   for r in rounds]
    ok = True
    p = rounds[0].marginals
    if not (np.isfinite(p).all() and (p >= 0).all() and (p <= 1).all()):
        print("error: a marginal is not a number in [0, 1]", file=sys.stderr)
        ok = False
    rows.append(("total", time.perf_counter() - start, ""))
    got = {dg.tuples[a] for a in np.asarray(dg.alarms).tolist()}
    want = expected_alarms(args.dir)
    if want is None:
        verdict = f"not compared: no {', '.join(r + '.csv' for r in OUTPUTS)} in {args.dir}"
    elif got == want:
        verdict = f"equal to Soufflé's ({len(want):,} tuples of {', '.join(OUTPUTS)})"
    else:
        verdict = (f"DIFFERENT from Soufflé's: {len(got - want)} extra (e.g. {sorted(got - want)[:2]}), "
                   f"{len(want - got)} missing (e.g. {sorted(want - got)[:2]})")
        ok = False
    info.update(output_relations=verdict, peak_rss_gb=peak_rss_gb(), load_after=os.getloadavg()[0],
                stages={name: seconds for name, seconds, _ in rows})
    print(f"\nhmmer on {info['device']} ({info['cpus']} CPUs, load {info['load_before']:.1f} before, "
          f"{info['load_after']:.1f} after); {dg.num_tuples:,} tuples, {dg.num_clauses:,} clauses\n")
    print("| stage | seconds | |\n| --- | ---: | --- |")
    for name, seconds, note in rows:
        print(f"| {name} | {seconds:.1f} | {note} |")
    print(f"\noutput relations: {verdict}\npeak RSS: {info['peak_rss_gb']:.2f} GB", flush=True)
    if args.check:  # after the table: a reference this large may not fit where LBP did
        from fastlbp.inference.check import check

        t = time.perf_counter()
        report = check(model, settings=Settings(samples=args.samples), reference="sample")
        info["check"] = {"seconds": time.perf_counter() - t, "verdict": report.verdict,
                         "reasons": report.reasons, "max_abs_error": report.max_abs_error,
                         "mean_abs_error": report.mean_abs_error, "spearman": report.spearman,
                         "top_k": report.top_k, "top_k_overlap": report.top_k_overlap,
                         "reference": report.reference, "reference_info": report.reference_info}
        print(f"check ({args.samples:,} worlds, {info['check']['seconds']:.1f} s): {report.verdict}; "
              f"max |error| {report.max_abs_error:.3g}, mean {report.mean_abs_error:.3g}, Spearman "
              f"{report.spearman:.3f}, top {report.top_k} overlap {report.top_k_overlap}; "
              f"{'; '.join(report.reasons)}")
    out = args.out or Path(os.environ.get("OUT", "out")) / "bench_hmmer.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(info, indent=2, default=str))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
