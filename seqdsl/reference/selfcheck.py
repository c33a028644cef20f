"""Comparing a fast implementation with its reference, forward and backward: the one self-check
the fast paths share (fla and mamba-ssm in seqdsl/lower, the generated Top-1 kernels in
seqdsl/kernels; both may import this layer, neither may import the other's).

Shape legend: whatever the two callables take; each returns one tensor or a tuple of them.

    inputs = Draws(device)                    seeded random inputs, the same on every machine
    errors = relative_errors(fast, reference, args, names, ...)
                                              {"output": e, "dq": e, ...}: norm-relative errors
    ok, detail = self_check(fast, reference, args, names, tolerance=..., ...)
                                              (True, "") or (False, what differs / what raised)

`fast` runs on the inputs in their given dtypes, `reference` on copies in `reference_dtype`
(float64 where the oracle must be exact, float32 where bf16 has no kernels on the reference's
steps); both are differentiated against the same cotangents (given, or drawn from a fixed seed),
so the gradient of every floating-point input is compared as well as every output. An error is
||got - want|| / ||want|| (the absolute norm when want is 0), so one tolerance per dtype fits
every size.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch
from torch import Tensor


# norm-relative tolerances of the recurrent fast paths (fla, mamba-ssm): their float32 dots may
# run as tf32 in Triton (~1e-3 in norm terms)
TF32_TOLERANCE = {torch.float32: 5e-3, torch.bfloat16: 5e-2, torch.float16: 1e-2}


class Draws:
    """Random inputs from a seeded CPU generator, moved to `device`: the same numbers on every
    machine, whatever the device's own generator does."""

    def __init__(self, device: torch.device | str, seed: int = 0):
        self.device = torch.device(device)
        self.generator = torch.Generator(device="cpu").manual_seed(seed)

    def normal(self, *shape: int, dtype: torch.dtype = torch.float32) -> Tensor:
        return torch.randn(shape, generator=self.generator).to(device=self.device, dtype=dtype)

    def uniform(self, *shape: int, dtype: torch.dtype = torch.float32) -> Tensor:
        """U[0, 1)."""
        return torch.rand(shape, generator=self.generator).to(device=self.device, dtype=dtype)


def _as_tuple(out) -> tuple[Tensor, ...]:
    return out if isinstance(out, tuple) else (out,)


def relative_errors(fast: Callable, reference: Callable, args: Sequence[Tensor | None], names: Sequence[str],
                    *, reference_dtype: torch.dtype, outputs: Sequence[str] = ("output",),
                    cotangents: Sequence[Tensor] | None = None) -> dict[str, float]:
    """Norm-relative errors of fast's outputs (named `outputs`) and of the gradients of the
    floating-point `args` (named "d" + `names`) against the reference's. Exceptions from either
    callable propagate."""
    leaves = [t.detach().requires_grad_() if t is not None and t.is_floating_point() else t for t in args]
    got = _as_tuple(fast(*leaves))
    ref_leaves = [t.detach().to(reference_dtype).requires_grad_() if t is not None and t.is_floating_point()
                  else t for t in args]
    want = _as_tuple(reference(*ref_leaves))
    if cotangents is None:
        draws = Draws("cpu", seed=1)
        cotangents = [draws.normal(*w.shape, dtype=reference_dtype).to(w.device) for w in want]
    torch.autograd.backward([g.to(reference_dtype) for g in got], [c.to(reference_dtype) for c in cotangents])
    torch.autograd.backward(list(want), [c.to(device=w.device, dtype=w.dtype) for c, w in zip(cotangents, want)])
    pairs = dict(zip(outputs, zip(got, want)))
    for name, x, y in zip(names, leaves, ref_leaves):
        if isinstance(y, Tensor) and y.grad is not None:
            pairs[f"d{name}"] = (x.grad if x.grad is not None else torch.zeros_like(y), y.grad)
    errors = {}
    for name, (x, y) in pairs.items():
        scale = y.norm().item()
        diff = (x.to(y.dtype) - y).norm().item()
        errors[name] = diff / scale if scale > 0 else diff
    return errors


def self_check(fast: Callable, reference: Callable, args: Sequence[Tensor | None], names: Sequence[str], *,
               tolerance: float, reference_dtype: torch.dtype, outputs: Sequence[str] = ("output",),
               device: torch.device | str = "cpu") -> tuple[bool, str]:
    """(True, "") when every error of `relative_errors` is within `tolerance`; else (False, the
    first that is not, or the error the kernel raised: a kernel that refuses to run here is a
    finding, not a crash). Runs its own forward and backward whatever the caller is doing: under
    no_grad (evaluation, generation) or autocast it would otherwise fail or test the wrong thing."""
    device = torch.device(device)
    try:
        with torch.enable_grad(), torch.autocast(device.type, enabled=False):
            errors = relative_errors(fast, reference, args, names, reference_dtype=reference_dtype,
                                     outputs=outputs)
    except Exception as err:  # the kernel failed to compile or run here: that is the finding
        return False, f"{type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else ''}"
    for name, err in errors.items():
        if not err <= tolerance:  # also catches nan
            return False, f"{name} differs from the reference by {err:.2e} (relative, tol {tolerance:.0e})"
    return True, ""
