"""The model as arrays: the factor graph, the model, settings, errors and the message equations.

Layer 1: depends on numpy and JAX only (and `datalog` for the model's names).
"""
