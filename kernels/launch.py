"""Launch helpers shared by the Top-1 runtimes: tile sizes, dot precision, strides.

Shape legend: q, k (B, T, H, Dk); v (B, T, H, Dv); per-row statistics (B*H, T).
"""

from __future__ import annotations

import os

import torch
from torch import Tensor


def interpreted() -> bool:
    """Triton runs its kernels in numpy (CPU tests): tiles are kept small there."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        return False
    _interpreter_index_fix()
    return True


_FIXED = []


def _interpreter_index_fix() -> None:
    """Triton 3.6's interpreter turns a scalar (a 1-element numpy array) into a loop bound with
    int(array), which numpy >= 2.3 refuses for arrays of one dimension ("only 0-dimensional
    arrays can be converted"): every `for i in range(lo, hi)` with a runtime bound fails. Patch
    its tensor's __index__ to read the element explicitly. Interpreter (CPU tests) only."""
    if _FIXED:
        return
    from triton.runtime import interpreter

    original = getattr(interpreter, "_patch_lang_tensor", None)
    if original is None:  # another Triton: nothing to fix, or a different layout
        _FIXED.append(True)
        return

    def patched(tensor, scope):
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))

    interpreter._patch_lang_tensor = patched
    _FIXED.append(True)


def precision(dtype: torch.dtype) -> str:
    """tl.dot input precision: exact float32 products (selections then match a float64
    reference up to genuine near-ties); bf16/fp16 dots ignore it."""
    return "ieee" if dtype == torch.float32 else "tf32"


def tiles(dim: int, dtype: torch.dtype, *, train: bool) -> dict:
    """Tile sizes and launch options for head dim `dim` (a whole tile: 16..128). float32 tiles
    are twice as large in shared memory: one pipeline stage (a 128-wide float32 chunk tile with
    two stages overflows the H100's 227 KiB)."""
    if interpreted():
        return dict(BLOCK_M=16, BLOCK_N=16, num_warps=4, num_stages=1)
    wide = dtype == torch.float32
    if train:
        return dict(BLOCK_M=32 if wide else 64, BLOCK_N=64, num_warps=4 if dim <= 64 else 8,
                    num_stages=1 if wide or dim > 64 else 2)
    return dict(BLOCK_M=64 if wide else 128, BLOCK_N=64 if dim > 64 or wide else 128, num_warps=8,
                num_stages=1 if wide else 3)


def backward_tiles(dim: int, dtype: torch.dtype) -> tuple[dict, dict]:
    """(dk/dv kernel, dq kernel) tiles for the element backward: the kernel that holds keys takes
    many keys and few queries per step, the one that holds queries the reverse (the shapes of
    Triton's fused-attention tutorial for Hopper)."""
    if interpreted():  # unequal tiles, as on the GPU: the kernels' diagonal logic is exercised
        small = dict(num_warps=4, num_stages=1)
        return dict(BLOCK_M=16, BLOCK_N=32, **small), dict(BLOCK_M=32, BLOCK_N=16, **small)
    if dtype == torch.float32:
        cfg = tiles(dim, dtype, train=True)
        return cfg, cfg
    return (dict(BLOCK_M=32, BLOCK_N=128, num_warps=4, num_stages=3),
            dict(BLOCK_M=128, BLOCK_N=32, num_warps=4, num_stages=3))


# queries per program of the Approx gate_dkbar kernel (a slice of T; its programs add atomically)
SPLIT_ROWS = 1024


def value_grad_tiles(*, q_dtype: torch.dtype) -> dict:
    """Tiles of the element value_grad kernel (keys per program, queries per step)."""
    if interpreted():
        return dict(BLOCK_M=16, BLOCK_N=16, num_warps=4, num_stages=1)
    return dict(BLOCK_M=64 if q_dtype == torch.float32 else 128, BLOCK_N=64, num_warps=4, num_stages=2)


def delta(kernel, do: Tensor, o: Tensor, gate: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
    """The backward's pre-pass (codegen/templates/common.jinja: bwd_delta): (D, GG), D (B*H, T)
    float32 = rowsum(dO * o), read once from (B, T, H, Dv) tensors; GG = D * gate with `gate`
    (B*H, T), else None."""
    B, T, H, _ = do.shape
    block_m = 16 if interpreted() else 64
    out = torch.empty(B * H, T, dtype=torch.float32, device=do.device)
    gg = () if gate is None else (gate, torch.empty_like(out))
    kernel[(-(-T // block_m), B * H)](do, o, out, *gg, *strides(do, o), T, H, BLOCK_M=block_m)
    return out, (gg[1] if gg else None)


def bucket(ids: Tensor, n_buckets: int) -> tuple[Tensor, Tensor]:
    """Rows grouped by a small id (ids (B*H, T), values -1 .. n_buckets - 1): perm (B*H, T) int32,
    the rows in order of their id (-1 first, stable: torch.sort, O(T log T)); starts
    (B*H, n_buckets + 1) int32, where id c's rows begin in perm."""
    ordered, perm = torch.sort(ids, dim=-1, stable=True)
    bounds = torch.arange(n_buckets + 1, dtype=ids.dtype, device=ids.device).expand(ids.shape[0], -1)
    starts = torch.searchsorted(ordered, bounds.contiguous())
    return perm.to(torch.int32).contiguous(), starts.to(torch.int32).contiguous()


def strides(*ts: Tensor) -> list[int]:
    """(batch, time, head) strides of each (B, T, H, D) tensor, flattened."""
    out: list[int] = []
    for t in ts:
        out += [t.stride(0), t.stride(1), t.stride(2)]
    return out


def launch_opts(cfg: dict) -> dict:
    return {k: cfg[k] for k in ("num_warps", "num_stages")}


def blocks(cfg: dict, *names: str) -> dict:
    return {k: cfg[k] for k in names}
