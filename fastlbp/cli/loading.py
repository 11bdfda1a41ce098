"""Loading a command's graph: through the model cache, with its progress, then --rule-prob's rule
probabilities."""

from __future__ import annotations

from pathlib import Path

from fastlbp.cli.app import status
from fastlbp.cli.environment import cache_folder
from fastlbp.cli.progress import Progress
from fastlbp.core.errors import InputError
from fastlbp.core.settings import Settings


def load_graph(graph: Path, settings: Settings, *, no_cache: bool = False, progress: Progress | None = None,
               rule_prob: Path | None = None, quiet: bool = False, **kwargs):
    """`fastlbp.io.loading.load` through the model cache (in `cache_folder()`, unless --no-cache or
    FASTLBP_CACHE=off), its stages reported to `progress` as `load: STAGE`; then --rule-prob's
    probabilities (`with_rule_probs`) unless grounding a program took them already (`datalog=`)."""
    from fastlbp.io.loading import load

    folder = None if no_cache else cache_folder()
    hear = None if progress is None else (lambda stage: progress(f"load: {stage}"))
    model = load(graph, settings, cache_dir=folder, progress=hear, **kwargs)
    if progress is not None:
        progress.done()
    if rule_prob is not None and kwargs.get("datalog") is None:
        model = with_rule_probs(model, rule_prob, graph, quiet)
    return model


def with_rule_probs(model, rule_prob: Path, graph: Path, quiet: bool = False):
    """The model with the rule probabilities of a `Rk: p` file (`datalog.rule_probs`).

    Rules the file names that the graph lacks are fine (the file may have been learned on other graphs
    of the analysis): a warning on stderr counts them (--quiet keeps it).

    Raises:
        InputError: a malformed file, a graph without rules, or a file that names none of its rules.
    """
    from datalog.rule_probs import apply_rule_probs, read_rule_probs, rule_names

    probs = read_rule_probs(rule_prob)
    out = apply_rule_probs(model, probs, str(rule_prob))
    info = out.meta["rule_prob"]
    if probs and not info["applied"]:
        names = rule_names(model)
        have = f"{names[0]} ... {names[-1]}" if names else "none"
        raise InputError(str(rule_prob), None, f"names none of the rules of {graph} (its rules: {have})")
    if info["absent"]:
        # A warning, kept under --quiet: a name the graph lacks may be a typo (or a file for another
        # version of the analysis).
        status(f"warning: {rule_prob}: {len(info['absent'])} rule(s) not in {graph} (e.g. "
               f"{info['absent'][0]}); {len(info['applied'])} applied")
    return out
