"""What a user asks for: sessions and methods over the engines, checks, rankings, metrics, learning,
simulation. Built on `fastlbp.core`, `datalog`, `schedules` and `fastlbp.engines` (tests/test_layers.py).
"""
