"""The path of stage (1)'s causal convolution: the Triton kernel or the reference taps.

Like stage (3)'s `PathChooser` (seqdsl/lower/paths.py), one decision per (device, dtype), made
eagerly (`LanguageModel.plan_paths`) and read by compiled calls: the static table
(`seqdsl.ir.support.causal_conv`, from the spec's `conv = causal(size)`) says whether the kernel
could run, then the machine answers once (CUDA, a dtype the kernel takes, the kernel importable
and matching the reference on this GPU: a self-check kept with the others,
seqdsl/lower/verdicts.py). A failed self-check is a warning and the reference runs; the choice
is logged once and reported with the mixer's path (`LanguageModel.describe_paths`).

    triton.causal_conv   kernels/causal_conv.py, for calls from position 0 (training, prefill);
                         a call with a past (decoding) runs the reference taps
    reference            seqdsl/reference/conv.py
"""

from __future__ import annotations

import os
import warnings

import torch
from torch import Tensor

from seqdsl.ir import support
from seqdsl.lower import verdicts
from seqdsl.lower.backends.base import BackendName, Plan
from seqdsl.lower.planning import Planner
from seqdsl.reference import conv as conv_ref
from seqdsl.reference import selfcheck

OP = "triton.causal_conv"
# norm-relative: float32 sums the same taps in another order; 16-bit rounds y, du once
TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 1e-2, torch.float16: 2e-3}


class ConvPath(Planner):
    subject = "causal conv"

    def __init__(self, size: int, channels: int, name: str):
        super().__init__(name, os.environ.get("SEQDSL_PATH") or None)  # any forced path: the reference
        self.size, self.channels = size, channels

    def _make_plan(self, device: torch.device, dtype: torch.dtype | None) -> Plan:
        if self.force is not None:
            return _reference("forced")
        offer = support.causal_conv(self.size)
        if not offer.ok:
            return _reference(offer.reason)
        if device.type != "cuda":
            return _reference(f"{OP} runs on CUDA only")
        if dtype is not None and dtype not in TOLERANCE:
            return _reference(f"{OP} takes float32, bfloat16 and float16, not {str(dtype).removeprefix('torch.')}")
        try:
            from seqdsl.kernels import causal_conv  # noqa: F401
        except ImportError as err:
            return _reference(f"the Triton kernels are not importable here ({err})")
        what = f"{OP} from position 0 (decoding steps: the reference taps)"
        if dtype is None:
            return Plan(BackendName.TRITON, OP, f"{what}, after a self-check against the reference")
        facts = {"op": OP, "dtype": dtype, "specialised_on": f"causal({self.size}), {self.channels} channels"}
        ok, detail = verdicts.cached(facts, device, lambda: self_check(self.size, self.channels, dtype, device))
        if not ok:
            warnings.warn(f"seqdsl: mixer {self.name}: {OP} failed its self-check here ({detail}); "
                          "running the reference taps instead", stacklevel=5)
            return _reference(f"{OP} failed its self-check here ({detail})")
        return Plan(BackendName.TRITON, OP, f"{what}, self-checked against the reference")

    def __call__(self, u: Tensor, weight: Tensor, past: Tensor | None) -> tuple[Tensor, Tensor]:
        """(silu(causal conv of u), the last size-1 inputs: the next call's past)."""
        plan = self.plan_call(u)
        if plan.backend is BackendName.TRITON and past is None and not self.planning_only:
            from seqdsl.kernels import causal_conv

            return causal_conv.causal_conv_silu(u, weight), conv_ref.last_inputs(u, None, self.size)
        return conv_ref.causal_conv_silu(u, weight, past)


def _reference(reason: str) -> Plan:
    return Plan(BackendName.REFERENCE, "reference", reason)


def self_check(size: int, channels: int, dtype: torch.dtype, device: torch.device) -> tuple[bool, str]:
    """The kernel against the reference in float64 on this machine: y, du and dw from inputs
    in `dtype`, two sequences of 208 tokens: a partial last tile and span, and a length
    divisible by 16, as training's are, so that the kernels compiled here are the ones training
    runs (Triton specialises integer arguments on their divisibility by 16; as the SSD's
    self-check, docs/training.md)."""
    from seqdsl.kernels import causal_conv

    draw = selfcheck.Draws(device)
    args = [draw.normal(2, 208, channels, dtype=dtype), draw.normal(channels, size) / size]
    return selfcheck.self_check(causal_conv.causal_conv_silu, lambda u, w: conv_ref.causal_conv_silu(u, w)[0],
                                args, ("u", "weight"), tolerance=TOLERANCE[dtype],
                                reference_dtype=torch.float64, device=device)
