"""Launch helpers shared by the Top-1 runtimes: tile sizes, dot precision, strides.

Shape legend: q, k (B, T, H, Dk); v (B, T, H, Dv); per-row statistics (B*H, T).

Tile sizes are chosen here per launch site (`SITES`); the variable SEQDSL_TOP1_TILES overrides
them for tuning, a JSON object from site to fields, e.g.
    SEQDSL_TOP1_TILES='{"element.bwd_dkdv": {"BLOCK_M": 64, "num_warps": 8}}'
(benchmarks/sweep_top1_tiles.py sweeps them and checks every setting's outputs).
"""

from __future__ import annotations

import functools
import json
import os

import torch
from torch import Tensor

from seqdsl.errors import SeqError


def interpreted() -> bool:
    """Triton runs its kernels in numpy (CPU tests): tiles are kept small there."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        return False
    _interpreter_index_fix()
    return True


_FIXED: list[bool] = []  # one entry once the patch is in


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


def topk_tiles(dim: int, dtype: torch.dtype, *, train: bool) -> dict:
    """Tiles of the top-k chunk kernels' forward attention (attn_fwd, merge: train False) and
    backward over pairs (attn_bwd, dq_sum, sink_bwd: train True): the Top-1 chunk kernels'
    (`tiles`), except at D <= 64 in half precision, where benchmarks/sweep_top1_tiles.py found
    faster (H200, 2026-11-28, MoBA k 3 of 128, 16 x 2048 and 4 x 8192 tokens, 12 heads;
    docs/kernels.md): the forward with 32 queries a tile, 4 warps, one stage (1.06x the forward's
    default at 2K, 1.01x at 8K), the backward with 8 warps (1.12x at 2K with 3 stages)."""
    cfg = tiles(dim, dtype, train=train)
    if interpreted() or dtype == torch.float32 or dim > 64:
        return cfg
    if train:
        return {**cfg, "num_warps": 8, "num_stages": 3}
    return {**cfg, "BLOCK_M": 32, "num_warps": 4, "num_stages": 1}


def backward_tiles(dim: int, dtype: torch.dtype) -> tuple[dict, dict]:
    """(dk/dv kernel, dq kernel) tiles for the element backward: the kernel that holds keys takes
    many keys and few queries per step, the one that holds queries the reverse (the shapes of
    Triton's fused-attention tutorial for Hopper). FUSE_DQ = 1: the dk/dv kernel adds dq too
    (float32 atomics) and the dq kernel does not run."""
    if interpreted():  # unequal tiles, as on the GPU: the kernels' diagonal logic is exercised
        small = dict(num_warps=4, num_stages=1)
        return dict(BLOCK_M=16, BLOCK_N=32, FUSE_DQ=0, **small), dict(BLOCK_M=32, BLOCK_N=16, **small)
    if dtype == torch.float32:
        cfg = tiles(dim, dtype, train=True)
        return {**cfg, "FUSE_DQ": 0}, cfg
    # dk/dv at D <= 64: 64 queries per step, the fastest setting benchmarks/sweep_top1_tiles.py
    # found (docs/kernels.md, Tuning tile sizes); D 128 was not swept
    return (dict(BLOCK_M=64 if dim <= 64 else 32, BLOCK_N=128, FUSE_DQ=0, num_warps=4, num_stages=3),
            dict(BLOCK_M=128, BLOCK_N=32, num_warps=4, num_stages=3))


def gate_tiles(dim: int, dtype: torch.dtype, *, chunk: int) -> dict:
    """Tiles of the STE gate kernels (gate_dq; Approx also gate_dkbar): BLOCK_M queries per step,
    BLOCK_C mean keys per tile (Approx) and SPLIT_ROWS queries per gate_dkbar program (a slice of
    T; the slices' programs add atomically). Their own launch site, chunk.gate: at 32K Approx's
    two took as long as attn_bwd (H100 profile, docs/kernels.md)."""
    if interpreted():  # 2 mean keys per tile, a chunk of queries per slice: a CPU test's few span several
        return dict(BLOCK_M=16, BLOCK_C=2, SPLIT_ROWS=chunk, num_warps=4, num_stages=1)
    if dtype == torch.float32:
        return {**tiles(dim, dtype, train=True), "BLOCK_C": 32, "SPLIT_ROWS": 1024}
    # 32 mean keys per tile, 4 warps, 2 stages, at D 64 and 128: the fastest setting
    # benchmarks/sweep_top1_tiles.py found (docs/kernels.md, Tuning tile sizes)
    return dict(BLOCK_M=64, BLOCK_C=32, SPLIT_ROWS=1024, num_warps=4, num_stages=2)


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
    the rows in order of their id (-1 first, stable: torch.sort); starts (B*H, n_buckets + 1)
    int32, where id c's rows begin in perm. The sort's keys are id + 1 in the narrowest type that
    holds them: a radix sort does one pass per byte of its keys, and ids rarely pass 255 (MoBA's 16
    chunks at 2K: uint8, one pass instead of four)."""
    narrow = torch.uint8 if n_buckets < 255 else torch.int16 if n_buckets < 32767 else torch.int32
    keys = (ids + 1).to(narrow)
    ordered, perm = torch.sort(keys, dim=-1, stable=True)
    bounds = torch.arange(1, n_buckets + 2, dtype=narrow, device=ids.device).expand(ids.shape[0], -1)
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


# --- tuning: tile overrides ----------------------------------------------------------------------

TILES_ENV = "SEQDSL_TOP1_TILES"
_TILE = (16, 32, 64, 128, 256)
_OPTS = {"num_warps": (1, 2, 4, 8, 16), "num_stages": (1, 2, 3, 4, 5, 6)}
# each launch site and the fields its kernels read (the chunk kernels' key tile is the chunk)
SITES = {
    "element.fwd": {"BLOCK_M": _TILE, "BLOCK_N": _TILE, **_OPTS},
    "element.value_grad": {"BLOCK_M": _TILE, "BLOCK_N": _TILE, **_OPTS},
    "element.bwd_dkdv": {"BLOCK_M": _TILE, "BLOCK_N": _TILE, "FUSE_DQ": (0, 1), **_OPTS},
    "element.bwd_dq": {"BLOCK_M": _TILE, "BLOCK_N": _TILE, **_OPTS},
    "chunk.fwd": {"BLOCK_M": _TILE, **_OPTS},  # selection and attention of the forward
    "chunk.bwd": {"BLOCK_M": _TILE, **_OPTS},
    # the STE gate kernels: SPLIT_ROWS is a multiple of every BLOCK_M they take (<= the chunk)
    "chunk.gate": {"BLOCK_M": _TILE, "BLOCK_C": (16, 32, 64, 128), "SPLIT_ROWS": (256, 512, 1024, 2048, 4096), **_OPTS},
    # the top-k chunk kernels (kernels/topk_chunk.py): the selection (select, select_shared), the
    # forward's attention (attn_fwd, merge), the backward (attn_bwd, dq_sum, sink_bwd), the STE
    # gate (gate_dq, gate_dk), and the per-group kernels (a tile is the group's heads)
    "topk_chunk.select": {"BLOCK_M": _TILE, **_OPTS},
    "topk_chunk.fwd": {"BLOCK_M": _TILE, **_OPTS},
    "topk_chunk.bwd": {"BLOCK_M": _TILE, **_OPTS},
    "topk_chunk.gate": {"BLOCK_M": _TILE, **_OPTS},
    "topk_chunk.group": dict(_OPTS),
    # the causal conv (kernels/causal_conv.py): rows x channels per tile; the backward's first
    # pass (g and dw) gives each program SPAN rows (dw's partial sums are per program), its
    # second (du from g) is the forward's shape
    "conv.fwd": {"BLOCK_T": _TILE, "BLOCK_C": _TILE, **_OPTS},
    "conv.bwd": {"BLOCK_T": _TILE, "BLOCK_C": _TILE, "SPAN": (64, 128, 256, 512, 1024, 2048), **_OPTS},
    "conv.bwd_du": {"BLOCK_T": _TILE, "BLOCK_C": _TILE, **_OPTS},
}


class TileOverrideError(SeqError):
    """SEQDSL_TOP1_TILES is not a valid override."""


# what a site's kernels assume of its tiles together
_RULES = {"element.bwd_dkdv": (lambda c: c["BLOCK_N"] % c["BLOCK_M"] == 0,
                               "BLOCK_M must divide BLOCK_N (its diagonal query tiles end where the key block ends)"),
          "conv.bwd": (lambda c: c["SPAN"] % c["BLOCK_T"] == 0, "BLOCK_T must divide SPAN (a program's rows)")}


def tuned(site: str, cfg: dict) -> dict:
    """`cfg` with the fields SEQDSL_TOP1_TILES sets for `site` (unset: `cfg` itself)."""
    if site not in SITES:  # a site the override could never name (it refuses unknown sites)
        raise ValueError(f"launch site {site!r} is not in kernels/launch.py: SITES")
    raw = os.environ.get(TILES_ENV, "")
    if not raw.strip():
        return cfg
    out = {**cfg, **overrides(raw).get(site, {})}
    rule = _RULES.get(site)
    if rule and not rule[0](out):
        raise TileOverrideError(f"{TILES_ENV}: {site} with {_shown(out)}: {rule[1]}")
    return out


def _shown(cfg: dict) -> str:
    return ", ".join(f"{k} = {v}" for k, v in cfg.items() if k.startswith("BLOCK"))


@functools.lru_cache(maxsize=16)
def overrides(raw: str) -> dict[str, dict[str, int]]:
    """The parsed and checked override (a TileOverrideError names what is wrong)."""
    if not raw.strip():
        return {}
    try:
        given = json.loads(raw)
    except json.JSONDecodeError as err:
        raise TileOverrideError(f"{TILES_ENV} is not JSON ({err.msg} at column {err.colno})") from None
    if not isinstance(given, dict):
        raise TileOverrideError(f"{TILES_ENV} must be a JSON object from launch site to tile fields")
    for site, fields in given.items():
        if site not in SITES:
            raise TileOverrideError(f"{TILES_ENV}: unknown launch site {site!r}",
                                    hint=f"the sites are {', '.join(SITES)}")
        if not isinstance(fields, dict):
            raise TileOverrideError(f"{TILES_ENV}: {site} must map to an object of fields")
        for name, value in fields.items():
            allowed = SITES[site].get(name)
            if allowed is None:
                raise TileOverrideError(f"{TILES_ENV}: {site} has no field {name!r}",
                                        hint=f"its fields are {', '.join(SITES[site])}")
            if value not in allowed or isinstance(value, bool):
                raise TileOverrideError(f"{TILES_ENV}: {site}.{name} = {value!r} is not one of {allowed}")
    return given
