"""flash-linear-attention (fla) kernels as fast paths for the recurrent family (CUDA only).

Shape legend: B batch, T tokens, H heads, K key dim, V value dim; fla >= 0.5 takes (B, T, H, *)
like the reference, and states (B, H, K, V) like the reference.

Every op is mapped from the reference's arguments (already scaled q, so fla's scale = 1) and is
*self-checked* once per (op, dtype, device, K, V, kind of decay) against the reference
(`chunked_ref`; `recurrent_ref` for rwkv7), forward and backward, before it is trusted: fla refuses or miscomputes some kernels on some Triton/GPU combinations
(e.g. gated backward kernels on Hopper with Triton < 3.7.1), and a fast path that is wrong is
worse than a slow one. A failed check is reported by the caller and the reference runs instead.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import re
import sys
from types import ModuleType

import torch
from torch import Tensor

from seqdsl.ir.key import KernelKey
from seqdsl.lower.backends.base import import_failure
from seqdsl.lower.inputs import RecurrentInputs
from seqdsl.reference import recurrent as rec_ref
from seqdsl.reference import selfcheck

_VECTOR_OPS = ("fla.chunk_gla", "fla.chunk_rwkv6", "fla.chunk_rwkv7")
_ARG_NAMES = ("q", "k", "v", "log_decay", "beta", "bonus", "a", "kappa", "initial_state")


@functools.lru_cache(maxsize=None)
def importable() -> bool:
    """True when fla's ops import here (it warns when imported on a machine without a GPU; fla
    failing to initialise on this machine counts as not importable)."""
    return not import_failure(import_ops, "flash-linear-attention")


# fla's package initialiser imports its layers and models (transformers, every layer fla has)
# when the flash-linear-attention wheel is installed beside fla-core, and skips them when it is
# not (fla-core alone). seqdsl calls six ops: 9-10 s of the 19-25 s `import fla` took on a fresh
# H100 were the layers and models (docs/training.md, "Where RWKV-7's planning goes").
_EXTENSIONS = ("layers", "models")  # fla.layers, fla.models


def import_ops() -> ModuleType:
    """`fla.ops`, with fla's package imported as fla-core alone would be: its layers and models
    are hidden from its initialiser (a None in sys.modules makes their import fail as if absent),
    then unhidden, and load on first use: `import fla.layers` as usual, and `from fla import
    <a layer or model>` through a module __getattr__ that exports them as the initialiser does.
    When fla is imported already (by the user's code), it is left as it is."""
    if "fla" not in sys.modules:
        hidden = [f"fla.{name}" for name in _EXTENSIONS if f"fla.{name}" not in sys.modules]
        for name in hidden:
            sys.modules[name] = None  # type: ignore[assignment]
        try:
            package = importlib.import_module("fla")
        finally:
            for name in hidden:
                if sys.modules.get(name, ...) is None:
                    del sys.modules[name]
        if not any(f"fla.{name}" in sys.modules for name in _EXTENSIONS):
            vars(package)["__getattr__"] = functools.partial(_export_extensions, package)  # PEP 562
    ops = vars(sys.modules["fla"]).get("ops")  # a stand-in fla (tests) holds its ops; fla's own loads them
    return ops if ops is not None else importlib.import_module("fla.ops")


def _export_extensions(package: ModuleType, name: str):
    """fla's module __getattr__ after `import_ops`: imports fla.layers and fla.models and exports
    their public names into `fla` as its initialiser does (names ending in Config aside), once;
    then `name` from there."""
    # dunder and private probes (pickle, inspect) import nothing, nor does `from fla import ops`
    # (Python asks for the attribute before it imports the submodule)
    if name.startswith("_") or (name not in _EXTENSIONS and importlib.util.find_spec(f"fla.{name}") is not None):
        raise AttributeError(f"module 'fla' has no attribute {name!r}")
    vars(package).pop("__getattr__", None)  # once: the imports below must not come back here
    for extension in _EXTENSIONS:
        try:
            module = importlib.import_module(f"fla.{extension}")
        except ModuleNotFoundError:  # fla-core alone: as its own initialiser, nothing to export
            continue  # (the import itself set `fla.<extension>`)
        for public in module.__all__:
            if not public.endswith("Config"):
                setattr(package, public, getattr(module, public))
                package.__all__.append(public)
    try:
        return vars(package)[name]
    except KeyError:
        raise AttributeError(f"module 'fla' has no attribute {name!r}") from None


def compute_dtype(m) -> torch.dtype:
    """The one dtype fla gets for everything but the log decay: the values' (the projections'
    output dtype, i.e. the autocast dtype), since under autocast some inputs arrive in float32
    (norms, softplus) and fla's kernels take one dtype."""
    return m.v.dtype


def run(op: str, m: RecurrentInputs, S: Tensor | None) -> tuple[Tensor, Tensor]:
    """Run fla op `op` on the reference-style inputs `m`, in the
    dtype mix the self-check tested: `compute_dtype(m)` for all inputs, float32 log decays."""
    dtype = compute_dtype(m)
    cast = lambda t: t.to(dtype) if t is not None else None
    log_decay = m.log_decay.float() if m.log_decay is not None else None
    return _call(op, cast(m.q), cast(m.k), cast(m.v), log_decay, cast(m.beta), cast(m.bonus),
                 cast(m.a), cast(m.kappa), S)


def _call(op, q, k, v, log_decay, beta, bonus, a, kappa, S):
    ops = import_ops()
    q, k, v = (t.contiguous() for t in (q, k, v))
    common = dict(scale=1.0, initial_state=S, output_final_state=True)
    if op in _VECTOR_OPS:  # these kernels take one log decay per key channel, always
        if log_decay is None:
            log_decay = torch.zeros_like(k)
        elif log_decay.dim() == 3:
            log_decay = log_decay[..., None].expand_as(k)
        log_decay = log_decay.contiguous()
    if op == "fla.chunk_simple_gla":
        return ops.simple_gla.chunk_simple_gla(q, k, v, g=log_decay, **common)
    if op == "fla.chunk_gla":
        return ops.gla.chunk_gla(q, k, v, g=log_decay, **common)
    if op == "fla.chunk_rwkv6":
        return ops.rwkv6.chunk_rwkv6(q, k, v, w=log_decay, u=bonus, **common)
    if op == "fla.chunk_delta_rule":
        return ops.delta_rule.chunk_delta_rule(q, k, v, beta=beta, **common)
    if op == "fla.chunk_gated_delta_rule":
        g = log_decay if log_decay is not None else torch.zeros_like(beta)
        return ops.gated_delta_rule.chunk_gated_delta_rule(q, k, v, g=g, beta=beta, **common)
    if op == "fla.chunk_rwkv7":
        # reference rule (4) in fla's dplr convention: fla's a = -kappa, fla's b = kappa * a.
        # disable_recompute: fla's backward otherwise recomputes the whole chunked forward (the
        # intra-chunk matrices, the WY form, every chunk's state), about a tenth of RWKV-7's
        # training step on an H100 (docs/training.md, "RWKV-7 without fla's recomputation"); kept
        # instead, at about 0.8 GB a layer per 16 x 2048 tokens. Without gradients nothing is kept.
        return ops.rwkv7.chunk_rwkv7(q, log_decay, k, v, -kappa, kappa * a, **common,
                                     disable_recompute=torch.is_grad_enabled())
    raise ValueError(f"unknown fla op {op!r}")


# ops whose backward runs fla's gated chunk_bwd_dqkwg when given a decay
_GATED_DQKWG = ("fla.chunk_simple_gla", "fla.chunk_gated_delta_rule")


def _version(text: str) -> tuple[int, ...]:
    """(3, 6, 0) from "3.6.0" (a local or dev suffix ignored)."""
    return tuple(int(part) for part in re.findall(r"\d+", text.split("+")[0])[:3])


@functools.lru_cache(maxsize=None)
def known_refusal(op: str, decay: str) -> str:
    """fla's own guard, read ahead: gated chunk_bwd_dqkwg is wrong on Hopper with Triton in
    [3.4.0, 3.7.1) (fla issue #640), and fla raises in the backward pass unless its TileLang
    backend is installed (seen on an H100 with Triton 3.6: docs/lowering.md, the fla self-check).
    Decided from the GPU and Triton's version without importing fla (seconds on a fresh machine,
    for a library that would not run). "" when fla would not refuse."""
    if op not in _GATED_DQKWG or decay == "none":
        return ""
    if importlib.util.find_spec("tilelang") is not None:  # fla dispatches to TileLang instead
        return ""
    import triton

    hopper = torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9
    if hopper and (3, 4, 0) <= _version(triton.__version__) < (3, 7, 1):
        return (f"fla's gated backward (chunk_bwd_dqkwg) is wrong on Hopper with Triton "
                f"{triton.__version__} < 3.7.1 (fla #640); fla refuses it")
    return ""


def _reference(op, q, k, v, log_decay, beta, bonus, a, kappa, S):
    update = {"fla.chunk_rwkv7": "rwkv7", "fla.chunk_delta_rule": "delta",
              "fla.chunk_gated_delta_rule": "delta"}.get(op, "additive")
    fn = rec_ref.recurrent_ref if update == "rwkv7" else rec_ref.chunked_ref
    return fn(q, k, v, log_decay=log_decay, beta=beta, update=update, bonus=bonus, a=a, kappa=kappa,
              initial_state=S)


def _inputs(op: str, K: int, V: int, H: int, dtype: torch.dtype, device: torch.device, decay: str, T: int = 80):
    """Random inputs shaped like a real call (T not a multiple of fla's chunk of 64), with the
    call's kind of decay, since fla takes different kernels for each, and the call's H heads:
    fla's kernels take H as a compile-time constant, so at any other H each of them would be
    compiled once for the check and again for the model (T, a runtime argument, is a multiple
    of 16 here as in training, the one property of it Triton specializes on)."""
    draw = selfcheck.Draws(device)
    rnd = draw.normal
    B = 1
    q, k, v = rnd(B, T, H, K) * K ** -0.5, rnd(B, T, H, K), rnd(B, T, H, V)
    log_decay = None
    if decay != "none":
        log_decay = -draw.uniform(B, T, H, *((K,) if decay == "vector" else ())) * 0.5
    beta = torch.sigmoid(rnd(B, T, H)) if "delta" in op else None
    bonus = rnd(H, K) * 0.1 if op == "fla.chunk_rwkv6" else None
    a = torch.sigmoid(rnd(B, T, H, K)) if op == "fla.chunk_rwkv7" else None
    kappa = torch.nn.functional.normalize(rnd(B, T, H, K), dim=-1) if a is not None else None
    if "delta" in op or a is not None:
        k = torch.nn.functional.normalize(k, dim=-1)
    S = rnd(B, H, K, V) * 0.1
    # as `run` calls fla: one dtype for all but the log decay and the state, which stay float32
    args = [q, k, v, None, beta, bonus, a, kappa, None]
    args = [t.to(dtype) if t is not None else None for t in args]
    args[3], args[8] = log_decay, S
    return args


@functools.lru_cache(maxsize=None)
def self_check(op: str, dtype: torch.dtype, device: torch.device, K: int = 64, V: int = 64,
               decay: str = "scalar", H: int = 2) -> tuple[bool, str]:
    """(True, "") when `op` matches the reference (outputs, final state, input gradients) on
    this machine for calls shaped like (K, V, H heads, with or without a decay); else (False,
    what went wrong). The first call compiles and autotunes fla's kernels: seconds to a minute
    per op, which the model's own calls with the same H then reuse."""
    known = known_refusal(op, decay)
    if known:  # fla would refuse only in the backward pass, after minutes of compiling
        return False, known
    return selfcheck.self_check(
        lambda *args: _call(op, *args), lambda *args: _reference(op, *args),
        _inputs(op, K, V, H, dtype, device, decay), _ARG_NAMES, outputs=("output", "state"),
        tolerance=selfcheck.TF32_TOLERANCE.get(dtype, 5e-3), reference_dtype=torch.float32, device=device)


class FlaBackend:
    def what(self, op: str) -> str:
        return "flash-linear-attention chunked kernel"

    def facts(self, key: KernelKey) -> str:
        """What an fla op's self-check depends on: the widths, the heads and the decay's shape."""
        return f"K={key.feature_dim} V={key.value_cols} H={key.heads} decay={key.decay_shape}"

    def known_refusal(self, key: KernelKey, op: str) -> str:
        """fla's refusal first (no import needed), then whether fla imports here."""
        if importlib.util.find_spec("fla") is not None and (refusal := known_refusal(op, key.decay_shape)):
            return refusal
        if not importable():
            return "flash-linear-attention is not importable here"
        return ""

    def self_check(self, key: KernelKey, op: str, dtype: torch.dtype, device: torch.device) -> tuple[bool, str]:
        return self_check(op, dtype, device, key.feature_dim, key.value_cols, key.decay_shape, key.heads)

    def recur(self, key: KernelKey, op: str, m: RecurrentInputs, S: Tensor | None, *,
              step_checked: bool = False) -> tuple[Tensor, Tensor]:
        return run(op, m, S)
