"""Fixed per-head schedules that specs refer to by name, in plain Python (no torch), shared by
the checker (which quotes them in messages) and the lowering (which builds tensors from them)."""

from __future__ import annotations

import math


def alibi_slopes(heads: int) -> list[float]:
    """ALiBi's head slopes (Press et al. 2022). For H a power of two: the geometric sequence
    2^(-8/H), 2^(-16/H), ..., 2^(-8). Otherwise the slopes of the closest smaller power of two P,
    then every other slope of 2P for the remaining H - P heads, as the paper's reference code
    does, so the slopes still span (0, 1) geometrically."""
    if heads <= 0:
        raise ValueError(f"heads must be positive, got {heads}")

    def power_of_two(n: int) -> list[float]:
        start = 2.0 ** (-8.0 / n)
        return [start ** (h + 1) for h in range(n)]

    closest = 2 ** int(math.floor(math.log2(heads)))
    if closest == heads:
        return power_of_two(heads)
    return power_of_two(closest) + power_of_two(2 * closest)[0::2][: heads - closest]


def retnet_log_gammas(heads: int) -> list[float]:
    """log gamma_h of RetNet's per-head decays gamma_h = 1 - 2^(-5-h), computed as
    log1p(-2^(-5-h)) so that heads past ~48, where gamma_h rounds to 1.0, still decay."""
    return [math.log1p(-(2.0 ** (-5 - h))) for h in range(heads)]

