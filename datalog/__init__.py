"""datalog: derivation graphs in, models out.

    io          the table of file formats (`FORMATS`), `detect_format`, `load`, `read_derivation`,
                `write_derivation`
    formats     derivation.json and Bingo directories: read, write, to a model
    causal_fg   libDAI's causal factor-graph text format
    derivation  the derivation graph (clauses column-wise), duplicate merging
    cycles      cycle elimination by least-fixpoint stages
    bayesnet    derivation graph -> compressed Bayesian network -> factor graph (`to_model`)
    summary     what a loaded graph contains
    rule_probs  rule-probability files (`Rk: p`) for any model made from a derivation graph
    synthetic   generated Bingo-like graphs and their ground truth (forward sampling)

Builds on `fastlbp.core` only (tests/test_layers.py holds it); nothing here imports the engines, the
session or the CLI.
"""
