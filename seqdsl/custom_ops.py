"""seqdsl's torch.library custom ops, named so that a compiled graph can never call one of them
with another schema than it was compiled against.

torch's compile caches (inductor's and AOTAutograd's, on disk) know a custom op by its name. A
graph compiled against `seqdsl::mamba_ssd` with four outputs, found in a warm cache, was run by an
older seqdsl whose op of that name returned two (`IndexError` inside the compiled call, H200,
2026-11-28; docs/training.md, "Mamba-2 with its chunk states kept"); a user upgrading seqdsl over
warm caches meets the same. Every op is therefore registered as `seqdsl::<name>_<digest>`, the
digest taken over its schema (argument and return types, as torch infers them from the
signature): a schema change is a new op, which no cached graph calls.

    @custom_op("affine_states")
    def states(M: Tensor, b: Tensor, S0: Tensor) -> Tensor: ...

    op("affine_states")   # its OpOverload, e.g. for torch.library.opcheck
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import torch

_QUALIFIED: dict[str, str] = {}  # name -> the name registered: "<name>_<digest>"


def qualified_name(name: str, fn: Callable, mutates_args=()) -> str:
    """`name` with the digest of `fn`'s schema, as registered in the `seqdsl` namespace."""
    schema = torch.library.infer_schema(fn, mutates_args=mutates_args)
    return f"{name}_{hashlib.sha256(schema.encode()).hexdigest()[:8]}"


def custom_op(name: str, mutates_args=()) -> Callable[[Callable], torch.library.CustomOpDef]:
    """torch.library.custom_op as `seqdsl::<name>_<schema digest>`."""

    def register(fn: Callable) -> torch.library.CustomOpDef:
        qualified = qualified_name(name, fn, mutates_args)
        _QUALIFIED[name] = qualified
        return torch.library.custom_op(f"seqdsl::{qualified}", mutates_args=mutates_args)(fn)

    return register


def op(name: str) -> torch._ops.OpOverload:
    """The registered op `name` (its default overload)."""
    if name not in _QUALIFIED:
        raise KeyError(f"no seqdsl custom op {name!r} is registered (registered: {sorted(_QUALIFIED)})")
    return getattr(torch.ops.seqdsl, _QUALIFIED[name]).default
