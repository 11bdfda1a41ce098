"""The bottom layer: the factor graph, the model, settings and the plan, errors, the hard constraints, the
message equations and segment sums, text helpers and atomic file writing.

Imports no other fastlbp package (tests/test_layers.py holds it); JAX and numpy only where needed.
"""
