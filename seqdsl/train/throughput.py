"""Model FLOPs utilisation for the progress display and metrics.

MERGE NOTE: the FLOP count per token (each mixer's real FLOPs, so a sparse mixer is not credited
with dense attention) and the device's peak rate come from the `eval` branch's
`seqdsl.ir.flops`, which is not on this branch yet: until it merges, `mfu_meter` reports None
(written as null in metrics.jsonl, "n/a" on screen) rather than a guessed number. The integrator
wires it here, in this one function.
"""

from __future__ import annotations

from collections.abc import Callable

import torch


def mfu_meter(model, seq_len: int, device: torch.device) -> Callable[[float], float | None]:
    """tokens/s -> MFU (a fraction of the device's peak), or None when it cannot be computed."""
    return lambda tokens_per_s: None
