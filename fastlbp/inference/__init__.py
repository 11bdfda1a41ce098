"""What a user asks for: sessions and methods over the engines, checks, rankings, metrics, simulation.

Layer 3: built on `fastlbp.core` and `fastlbp.engines`.
"""
