"""datalog: derivation graphs in, models out.

    io          the table of file formats (`FORMATS`), `detect_format`, `load`
    formats     derivation.json and Bingo directories: read, write, to a model
    causal_fg   libDAI's causal factor-graph text format
    derivation  the derivation graph (clauses column-wise), duplicate merging
    cycles      cycle elimination by least-fixpoint stages
    bayesnet    derivation graph -> compressed Bayesian network -> factor graph (`to_model`)
    summary     what a loaded graph contains
    synthetic   generated Bingo-like graphs and their ground truth (forward sampling)

Builds on fastlbp's base layer only (`fastlbp.core.errors`, `fastlbp.core.graph`,
`fastlbp.core.model`); nothing here imports the engines, the session or the CLI.
"""
