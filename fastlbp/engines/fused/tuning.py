"""Tiles and warps of the fused kernels, by precision (measured on the H200, BENCHMARKS.md).

A *tile* is the slots one Pallas program takes: a tile of rows of one width
(at most the tile), or one chunk of a wider row. `make_runner` picks the
tables' entry for the messages' itemsize (8: float64, 4: float32) unless told.
"""

from __future__ import annotations

TILE = 512  # slots per program when the precision has no entry below
NUM_WARPS = 8

# Factor kernel. float64 runs faster with one slot per thread, the kernel being short of
# registers (20 % less time per iteration than two slots per thread), and with 128-slot tiles
# of 4 warps rather than 256 of 8 (4-6 % less time per iteration at 0.5M and 5M edges);
# float32 with two slots per thread.
AUTO_TILE = {8: 128, 4: 512}
AUTO_WARPS = {8: 4, 4: 8}
# The variable kernel (28-32 registers) takes 512-slot tiles in both precisions: with float64,
# 3-10 % less time per iteration at 0.5M edges than 256.
AUTO_VAR_TILE = {8: 512, 4: 512}
# Its warps are its own, 8 in both precisions (two slots per thread). float64 used to take the
# factor kernel's 4; 4 and 8 measured alike, 16 slower. It is bound by the latency of its
# gather of messages, not by its instructions.
AUTO_VAR_WARPS = {8: 8, 4: 8}

# Sweeps per while-loop trip: eight measured fastest (the trip's own cost paid once per eight
# sweeps), and, each kernel being lowered once, no slower to compile
# than four.
UNROLL = 8


def tuning(itemsize: int, tile: int | None = None, num_warps: int | None = None,
           var_tile: int | None = None, var_warps: int | None = None) -> dict:
    """The tiles and warps for messages of `itemsize` bytes: as given, else the tables'.

    The variable kernel's tile falls back to the factor kernel's when only that is given (a
    small `tile` in tests then makes both sides' rows wide).

    Returns:
        dict of tile, var_tile, num_warps, var_warps (ints).
    """
    return dict(tile=tile or AUTO_TILE.get(itemsize, TILE),
                var_tile=var_tile or tile or AUTO_VAR_TILE.get(itemsize, TILE),
                num_warps=num_warps or AUTO_WARPS.get(itemsize, NUM_WARPS),
                var_warps=var_warps or AUTO_VAR_WARPS.get(itemsize, NUM_WARPS))


__all__ = ["TILE", "NUM_WARPS", "AUTO_TILE", "AUTO_WARPS", "AUTO_VAR_TILE", "AUTO_VAR_WARPS", "UNROLL",
           "tuning"]
