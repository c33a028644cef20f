"""Execution paths for stage (3) of a mixer: the reference oracle or a fast kernel.

Shape legend: B batch, T new tokens, L tokens so far, H heads, F key feature dim, Dv value dim.

A `PathChooser` belongs to one `MixerModule`. On the first call on a device it picks a path,
records why, and logs it once (logger "seqdsl"); `describe()` lists the choices made so far
and `plan(device)` the one it would make, which is what `seqdsl lower` prints. Fallbacks are never silent: a fast kernel that fails its self-check on
this machine (e.g. fla's gated backward kernels on Hopper with Triton < 3.7.1) is reported with
the error, and the reference runs instead.

Paths:
    softmax family
        sdpa        torch.nn.functional.scaled_dot_product_attention; `is_causal` without a mask
                    when nothing else is needed (flash/cuDNN-eligible on GPU), else an explicit
                    boolean or additive mask (windows, chunk-local, ALiBi, decay, positional)
        reference   seqdsl.reference.attention / top1 (top-k selection always, until the
                    generated Triton kernels for the Top-1 family land)
    recurrent family
        fla.<op>    flash-linear-attention chunked kernels, CUDA only, after a self-check
        reference   chunked_ref (recurrent_ref for single steps)

`set_path(module, "reference")` forces the oracle everywhere (tests, debugging);
"reference.recurrent" / "reference.chunked" force one form of the recurrent oracle. The
environment variable SEQDSL_PATH does the same for every mixer built afterwards.
"""

from __future__ import annotations

import logging
import os
import warnings
from dataclasses import fields, replace

import torch
import torch.nn.functional as F
from torch import Tensor

from seqdsl.errors import SeqError
from seqdsl.ir import nodes
from seqdsl.reference import attention as attn_ref
from seqdsl.reference import recurrent as rec_ref
from seqdsl.reference import top1 as top1_ref

log = logging.getLogger("seqdsl")


class PathChooser:
    def __init__(self, module):
        self.module = module  # not an nn.Module itself, so this registers nothing
        self.force: str | None = _forced_from_env()
        self.chosen: dict[str, tuple[str, str]] = {}

    def describe(self) -> dict[str, tuple[str, str]]:
        """{device type: (path, reason)} for every device this mixer has run on."""
        return dict(self.chosen)

    def plan(self, device: torch.device | str) -> tuple[str, str]:
        """The path this mixer would take on `device`, without running it."""
        device = torch.device(device)
        if self.module.spec.is_recurrent:
            return _plan_recurrent(self.module, device, self.force)
        return _plan_softmax(self.module, device, self.force)

    def _record(self, device: torch.device, choice: tuple[str, str]) -> None:
        if self.chosen.get(device.type) != choice:
            self.chosen[device.type] = choice
            log.info("mixer %s on %s: %s (%s)", self.module.spec.name, device.type, *choice)

    # --- softmax family ------------------------------------------------------------------------------

    def softmax(self, m, pos: int) -> Tensor:
        path, why = self.plan(m.q.device)
        self._record(m.q.device, (path, why))
        if path == "sdpa":
            return _sdpa(self.module, m, pos)
        return _softmax_reference(self.module, m, pos)

    # --- recurrent family ----------------------------------------------------------------------------

    def recurrent(self, m, S: Tensor | None) -> tuple[Tensor, Tensor]:
        device = m.q.device
        path, why = self.plan(device)
        if path.startswith("fla."):
            from seqdsl.lower import fla_paths

            ok, detail = fla_paths.self_check(path, fla_paths.compute_dtype(m), device, m.q.shape[-1],
                                              m.v.shape[-1], decay=fla_paths.decay_kind(m.log_decay))
            if ok:
                self._record(device, (path, why))
                return fla_paths.run(path, m, S)
            fallback = ("reference.chunked", f"{path} failed its self-check here ({detail})")
            if self.chosen.get(device.type) != fallback:
                warnings.warn(f"seqdsl: mixer {self.module.spec.name}: {fallback[1]}; "
                              "running the reference instead", stacklevel=2)
            path, why = fallback
        self._record(device, (path, why))
        return _recurrent_reference(self.module, m, S, path == "reference.recurrent")


FORCEABLE = ("reference", "reference.recurrent", "reference.chunked")


def _forced_from_env() -> str | None:
    value = os.environ.get("SEQDSL_PATH") or None
    if value is not None and value not in FORCEABLE:
        raise SeqError(f"SEQDSL_PATH={value!r} is not a path seqdsl can force",
                       hint=f"use one of {', '.join(FORCEABLE)}, or unset it")
    return value


def set_path(model: torch.nn.Module, path: str | None) -> None:
    """Force every mixer in `model` onto `path` (one of FORCEABLE, or None for automatic)."""
    if path is not None and path not in FORCEABLE:
        raise ValueError(f"cannot force path {path!r}; choose one of {FORCEABLE}")
    for sub in model.modules():
        chooser = getattr(sub, "paths", None)
        if isinstance(chooser, PathChooser):
            chooser.force = path
            chooser.chosen.clear()


# --- planning ----------------------------------------------------------------------------------------


def _plan_softmax(module, device: torch.device, force: str | None) -> tuple[str, str]:
    spec = module.spec
    if isinstance(spec.select, nodes.Top):
        what = "element" if isinstance(spec.select.over, nodes.Element) else "chunk"
        return "reference", f"top-{spec.select.k} {what} selection: reference (no fused kernel yet)"
    if force is not None and force.startswith("reference"):
        return "reference", "forced"
    needs_mask = (not isinstance(spec.visibility, nodes.Full) or isinstance(spec.position, nodes.Alibi)
                  or not isinstance(spec.decay, nodes.NoDecay) or isinstance(spec.relation, nodes.Positional))
    how = "explicit mask" if needs_mask else "is_causal (flash/cuDNN eligible)" if device.type == "cuda" \
        else "is_causal"
    return "sdpa", f"softmax attention, {how}"


def _plan_recurrent(module, device: torch.device, force: str | None) -> tuple[str, str]:
    spec = module.spec
    if force in ("reference.recurrent", "reference.chunked"):
        return force, "forced"
    if force != "reference" and device.type == "cuda":
        from seqdsl.lower import fla_paths

        values = module.Dv + isinstance(spec.weights, nodes.NormalizedLinear)  # + normaliser column
        op, why_not = fla_paths.op_for(spec, module.F, values)
        known = fla_paths.known_refusal(op, fla_paths.spec_decay_kind(spec)) if op else ""
        if op is not None and not known:
            return op, "flash-linear-attention chunked kernel"
        reason = known or why_not
    elif force == "reference":
        reason = "forced"
    else:
        reason = f"no fast kernel on {device.type}"
    return "reference.chunked", reason


# --- softmax implementations -------------------------------------------------------------------------


def _sdpa(module, m, pos: int) -> Tensor:
    spec = module.spec
    B, T, H, _ = m.q.shape
    L = m.k.shape[1]
    temperature = spec.weights.temperature
    scale = module.score_scale() / temperature
    q, k, v = (t.transpose(1, 2) for t in (m.q, m.k, m.v))  # (B, H, *, D)
    plain = (pos == 0 and T == L and m.bias is None and isinstance(spec.visibility, nodes.Full)
             and not hasattr(module, "alibi"))
    if plain:
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
        return out.transpose(1, 2)
    vis = spec.visibility
    visible = attn_ref.visibility_mask(
        T, window=vis.size if isinstance(vis, nodes.Window) else None,
        chunk_local=vis.size if isinstance(vis, nodes.ChunkLocal) else None,
        device=q.device, offset=pos, keys=L)
    bias = None
    if hasattr(module, "alibi"):
        bias = attn_ref.alibi_bias(module.alibi.to(attn_ref.bias_dtype(q.dtype)), T, offset=pos, keys=L)
    if m.bias is not None:
        rows = m.bias[..., pos:pos + T, :].to(attn_ref.bias_dtype(q.dtype))
        bias = rows if bias is None else bias + rows
    if bias is None:
        mask = visible
    else:
        # SDPA adds the mask to the *scaled* scores; the bias is defined on the unscaled-by-
        # temperature scores like the reference, so divide it by the temperature here.
        mask = (bias / temperature).masked_fill(~visible, float("-inf")).to(q.dtype)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    return out.transpose(1, 2)


def _in_float32(fn):
    """Run a reference in float32 (float64 stays float64) with autocast off: the
    oracle's numerics must not depend on bf16 autocast (and torch has no bf16 kernels for some
    of its steps, e.g. triangular solves on CPU). Outputs come back in the input dtype."""

    def wrapped(module, m, *args):
        dtype = m.q.dtype
        if dtype in (torch.float32, torch.float64) and not torch.is_autocast_enabled(m.q.device.type):
            return fn(module, m, *args)
        up = lambda t: t.float() if isinstance(t, Tensor) and t.dtype in (torch.bfloat16, torch.float16) else t
        m32 = replace(m, **{f.name: up(getattr(m, f.name)) for f in fields(m) if f.name != "extra"},
                      extra={k: up(v) for k, v in m.extra.items()})
        args = tuple(up(a) for a in args)
        with torch.autocast(m.q.device.type, enabled=False):
            out = fn(module, m32, *args)
        if isinstance(out, tuple):  # (o, state): the state stays float32 between calls
            return (out[0].to(dtype),) + out[1:]
        return out.to(dtype)

    return wrapped


@_in_float32
def _softmax_reference(module, m, pos: int) -> Tensor:
    """The oracle. Queries are padded with zero rows for the cached positions so the reference
    (which scores a square T x T problem) sees every key at its true position; only the last T
    rows are kept. O(L^2) per decoding step: fine for an oracle."""
    spec = module.spec
    B, T, H, F_ = m.q.shape
    L = m.k.shape[1]
    q = m.q if pos == 0 else torch.cat([m.q.new_zeros(B, L - T, H, F_), m.q], dim=1)
    scale = module.score_scale()
    temperature = spec.weights.temperature
    window = spec.visibility.size if isinstance(spec.visibility, nodes.Window) else None
    alibi = getattr(module, "alibi", None)
    sel = spec.select
    if isinstance(sel, nodes.Top) and isinstance(sel.over, nodes.Element):
        out = top1_ref.topk_element_ref(q, m.k, m.v, scale=scale, k_top=sel.k, temperature=temperature,
                                        grad=sel.grad, value_grad=sel.value_grad, window=window,
                                        alibi_slopes=alibi)
    elif isinstance(sel, nodes.Top):
        out = top1_ref.topk_chunk_ref(q, m.k, m.v, chunk=sel.over.size, scale=scale, k_top=sel.k,
                                      temperature=temperature, score=sel.score, local=sel.local,
                                      grad=sel.grad)
    else:
        chunk_local = spec.visibility.size if isinstance(spec.visibility, nodes.ChunkLocal) else None
        out = attn_ref.attention_ref(q, m.k, m.v, scale=scale, temperature=temperature, window=window,
                                     chunk_local=chunk_local, alibi_slopes=alibi, bias=m.bias)
    return out[:, L - T:]


# --- recurrent implementations -----------------------------------------------------------------------


@_in_float32
def _recurrent_reference(module, m, S: Tensor | None, step: bool) -> tuple[Tensor, Tensor]:
    kwargs = dict(log_decay=m.log_decay, beta=m.beta, update=_update_kind(m), bonus=m.extra.get("bonus"),
                  a=m.a, kappa=m.kappa, initial_state=S)
    if step or m.q.shape[1] == 1:
        return rec_ref.recurrent_ref(m.q, m.k, m.v, **kwargs)
    # a per-channel decay costs (C, C, Dk) per chunk: small chunks are several times faster on CPU
    vector = m.log_decay is not None and m.log_decay.dim() == 4
    return rec_ref.chunked_ref(m.q, m.k, m.v, chunk_size=16 if vector else 64, **kwargs)


def _update_kind(m) -> str:
    if m.a is not None:
        return "rwkv7"
    if m.beta is not None:
        return "delta"
    return "additive"

