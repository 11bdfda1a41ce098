"""What a loaded graph contains: sizes, what loading removed or merged, fan-in and fan-out."""

from __future__ import annotations

import numpy as np

from fastlbp.core.graph import AND, OR
from fastlbp.core.model import Model
from fastlbp.core.text import safe_name


def _largest(counts: np.ndarray, names) -> dict:
    if counts.size == 0 or counts.max() <= 0:
        return {"largest": 0, "at": None}
    i = int(np.argmax(counts))
    return {"largest": int(counts[i]), "at": names[i]}


def describe(model: Model) -> dict:
    """A JSON-able summary of a model (derivation-graph parts only when loaded from one).

    Keys: `source`; `derivation` (tuples, input and derived tuples, clauses,
    rules, largest fan-in = most clauses deriving one tuple, largest fan-out =
    most clauses using one tuple, largest body) or null; `alarms`, `labels`,
    `truth` counts (`truth_true`: the ground-truth labels that say true);
    `bayesian_network` (vertices, edges = parent links,
    largest fan-in = most parents, largest fan-out = most children);
    `factor_graph` (variables, factors, AND/OR factors, edges);
    `loading` (what cycle elimination, deduplication and compression
    dropped, removed or merged); `warnings`.
    """
    g = model.graph.to_numpy()
    names = model.var_names
    body_sizes = np.diff(g.factor_offsets) - 1
    parents = np.zeros(model.num_vars, np.int64)
    np.add.at(parents, g.factor_head, body_sizes)
    children = np.bincount(g.edge_var[~g.edge_is_head], minlength=model.num_vars)
    out: dict = {"source": model.source, "derivation": None}
    dg = model.meta.get("derivation")
    if dg is not None:
        heads = np.asarray(dg.clause_head, np.int64)
        body = np.asarray(dg.body, np.int64)
        lens = np.diff(np.asarray(dg.body_offsets, np.int64))
        derived = np.bincount(heads, minlength=dg.num_tuples)
        stages = model.meta.get("stages")
        out["derivation"] = {
            "tuples": dg.num_tuples,
            "input_tuples": int(stages.is_input.sum()) if stages is not None else int((derived == 0).sum()),
            "clauses": dg.num_clauses,
            "rules": len(dg.rules),
            "largest_fan_in": _largest(derived, dg.tuples),
            "largest_fan_out": _largest(np.bincount(body, minlength=dg.num_tuples), dg.tuples),
            "largest_body": int(lens.max()) if lens.size else 0,
            "fixpoint_stages": int(stages.tuple_stage.max()) if stages is not None else None,
        }
    out.update({
        "alarms": len(model.alarms),
        "labels": len(model.labels),
        "truth": len(model.meta.get("truth", {})),
        "truth_true": sum(bool(v) for v in model.meta.get("truth", {}).values()),
        "bayesian_network": {
            "vertices": model.num_vars,
            "edges": int(body_sizes.sum()),
            "largest_fan_in": _largest(parents, names),
            "largest_fan_out": _largest(children, names),
        },
        "factor_graph": {
            "variables": model.num_vars,
            "factors": g.num_factors,
            "and_factors": int(np.count_nonzero(g.factor_kind == AND)),
            "or_factors": int(np.count_nonzero(g.factor_kind == OR)),
            "edges": g.num_edges,
        },
        "loading": dict(model.meta.get("report", {})),
        "warnings": list(model.meta.get("warnings", [])),
    })
    return out


_LOADING_TEXT = {
    "duplicate_clauses_merged": "duplicate clauses merged",
    "duplicate_body_tuples_removed": "repeated body tuples removed",
    "clauses_dropped_by_cycle_elimination": "clauses dropped by cycle elimination",
    "underivable_tuples": "tuples neither input nor derivable (dropped)",
    "constant_inputs_removed": "input tuples with prior 1 removed (constant true)",
    "pruned_tuples": "tuples pruned (no alarm or label depends on them)",
    "pruned_clauses": "clauses pruned (no alarm or label depends on them)",
    "merged_tuples": "tuples merged with their only clause",
}


def _rounded(key: str, value) -> str:
    """A value of `info --schedule` for people: 3 significant digits, seconds in ms or s, counts with commas,
    histograms as their nonempty bins."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return str(value)
    if isinstance(value, int | np.integer):
        return f"{int(value):,}"
    if isinstance(value, float | np.floating):
        if key.endswith(("seconds", "_s")):
            return f"{value * 1e3:.3g} ms" if abs(value) < 1 else f"{value:.3g} s"
        return f"{float(value):.3g}"
    if isinstance(value, dict):
        if set(value) == {"bin_edges", "counts"}:
            e, c = value["bin_edges"], value["counts"]
            return ", ".join(f"[{e[i]:,},{e[i + 1]:,}): {n:,}" for i, n in enumerate(c) if n) or "empty"
        return ", ".join(f"{k} {_rounded(k, v)}" for k, v in value.items())
    if isinstance(value, list | tuple):
        return ", ".join(_rounded(key, v) for v in value)
    return str(value)


def to_text(info: dict) -> str:
    """The summary as aligned `key: value` lines for people; names from the graph (the tuple of the
    largest fan-in or fan-out, the source, warnings) through `safe_name`."""
    def fan(d):
        return f"{d['largest']:,}" + (f" ({safe_name(str(d['at']))})" if d["at"] is not None else "")

    rows: list[tuple[str, str]] = [("source", safe_name(str(info["source"])))]
    dv = info["derivation"]
    if dv is not None:
        rows += [
            ("tuples", f"{dv['tuples']:,} ({dv['input_tuples']:,} inputs)"),
            ("clauses", f"{dv['clauses']:,}"),
            ("rules", f"{dv['rules']:,}"),
            ("largest fan-in (clauses deriving a tuple)", fan(dv["largest_fan_in"])),
            ("largest fan-out (clauses using a tuple)", fan(dv["largest_fan_out"])),
            ("largest clause body", str(dv["largest_body"])),
            ("least-fixpoint stages", str(dv["fixpoint_stages"])),
        ]
    rows += [("alarms", f"{info['alarms']:,}"), ("labels", f"{info['labels']:,}")]
    if info["truth"]:
        rows.append(("ground-truth labels", f"{info['truth']:,} ({info.get('truth_true', 0):,} true)"))
    bn, fg = info["bayesian_network"], info["factor_graph"]
    rows += [
        ("Bayesian network vertices", f"{bn['vertices']:,}"),
        ("Bayesian network edges", f"{bn['edges']:,}"),
        ("largest fan-in (parents)", fan(bn["largest_fan_in"])),
        ("largest fan-out (children)", fan(bn["largest_fan_out"])),
        ("factors", f"{fg['factors']:,} ({fg['and_factors']:,} AND, {fg['or_factors']:,} OR)"),
        ("factor-graph edges", f"{fg['edges']:,}"),
    ]
    for key, value in info["loading"].items():
        rows.append((_LOADING_TEXT.get(key, key.replace("_", " ")), f"{value:,}"))
    if info.get("schedule"):
        for key, value in info["schedule"].items():
            rows.append((f"schedule {key}", _rounded(key, value)))
    width = max(len(k) for k, _ in rows)
    lines = [f"{k + ':':<{width + 1}} {v}" for k, v in rows]
    lines += [f"warning: {safe_name(str(w))}" for w in info["warnings"]]
    return "\n".join(lines)
