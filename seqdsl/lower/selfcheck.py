"""One comparison of a fast recurrent kernel with the reference, forward and backward.

Shape legend: whatever the two callables take; both return (output, final state).

`compare` runs `fast` on the inputs in their given dtypes and `reference` on float32 copies,
backpropagates the same loss (sum of squares of the output and of the final state) through both,
and compares the outputs, the final states and the gradient of every floating-point input, each
by its norm-relative error. The fla and mamba-ssm paths share it (seqdsl/lower/fla_paths.py,
seqdsl/lower/mamba_paths.py).
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch
from torch import Tensor

# norm-relative tolerances: float32 dots in Triton kernels may run as tf32 (~1e-3 in norm terms)
TOLERANCE = {torch.float32: 5e-3, torch.bfloat16: 5e-2, torch.float16: 1e-2}


def compare(fast: Callable, reference: Callable, args: Sequence[Tensor | None], names: Sequence[str],
            dtype: torch.dtype) -> tuple[bool, str]:
    """(True, "") when `fast(*args)` matches `reference` within the dtype's tolerance; else
    (False, what differs or the error the kernel raised). `names` names `args` in messages."""
    tol = TOLERANCE.get(dtype, 5e-3)
    try:
        leaves = [t.detach().requires_grad_() if t is not None and t.is_floating_point() else t for t in args]
        o, S = fast(*leaves)
        (o.float().square().sum() + S.float().square().sum()).backward()
        ref_leaves = [t.detach().float().requires_grad_() if t is not None else None for t in args]
        o_r, S_r = reference(*ref_leaves)
        (o_r.square().sum() + S_r.square().sum()).backward()
    except Exception as err:  # the kernel refused to run here: that is the finding
        return False, f"{type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else ''}"
    got, want, what = [o, S], [o_r, S_r], ["output", "state"]
    for name, x, y in zip(names, leaves, ref_leaves):
        if x is not None and y is not None and y.grad is not None:
            what.append(f"d{name}")
            got.append(x.grad if x.grad is not None else torch.zeros_like(y))
            want.append(y.grad)
    for name, x, y in zip(what, got, want):
        err = ((x.float() - y).norm() / (y.norm() + 1e-12)).item()
        if not err <= tol:  # also catches nan
            return False, f"{name} differs from the reference by {err:.2e} (relative, tol {tol:.0e})"
    return True, ""
