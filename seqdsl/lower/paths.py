"""Execution paths for stage (3) of a mixer: the reference oracle or a fast kernel.

Shape legend: B batch, T new tokens, L tokens so far, H heads, F key feature dim, Dv value dim,
Gk key heads and K value heads as the mixer stores them (grouped-query attention: K = Gk < H;
Mamba-style query/key groups: Gk < K = H).

A `PathChooser` is built from the mixer's `KernelKey` (seqdsl/ir/key.py), which says everything
the computation is specialised on, and its `Dense` fact at the model's context (`dense_at`: a
window, chunk or top-k that covers the context makes the mixer plain causal attention there);
nothing here reads the spec or the owning module. A path is
planned once per (device, dtype): the static support table of each backend
(seqdsl/ir/support.py) says what could run, then what only the machine can say is checked once
(is the package importable, does the kernel pass its self-check against the reference here).
Each choice is logged once (logger "seqdsl"); `describe()` lists the choices made so far and
`plan(device)` the one it would make, which `seqdsl lower` prints. Fallbacks are never silent:
a fast kernel that fails its self-check on this machine is reported with the error (a warning),
and the reference runs instead.

Paths:
    softmax family
        sdpa.causal torch.nn.functional.scaled_dot_product_attention with `is_causal` and no mask
                    (flash/cuDNN-eligible on GPU)
        sdpa.mask   the same with an explicit boolean or additive mask (windows, chunk-local,
                    ALiBi, decay, positional)
        reference   seqdsl.reference.attention
    select family (top-k)
        triton.*    the generated Top-1 kernels (seqdsl.kernels), CUDA only, after a self-check
        reference   seqdsl.reference.top1
    dense (either family, when `Dense` holds): sdpa.* on the dense key for sequences of at most
        `Dense.upto` tokens; past that a window or chunk-local span is masked (sdpa.mask) and a
        selection runs its reference, as the plan's reason says
    recurrent family
        mamba.ssd   mamba-ssm's Mamba-2 SSD chunked kernels (seqdsl/lower/mamba_paths.py), CUDA
                    only, after a self-check; single decoding steps (no gradient) run its
                    selective_state_update after a self-check of their own, else recurrent_ref
        mamba.selective_scan  mamba-ssm's Mamba-1 selective scan for the selective decay
                    (seqdsl/lower/selective_scan_paths.py), likewise, decoding steps included
        fla.<op>    flash-linear-attention chunked kernels, CUDA only, after a self-check
        reference   chunked_ref (recurrent_ref for single steps)
    Where several fast kernels accept a key (mamba.ssd and fla.chunk_simple_gla), each is
    self-checked, and when more than one passes they are timed once on this machine (kept with
    the self-check verdicts, seqdsl/lower/verdicts.py) and the faster runs.

The plan is the one decision: its path names the backend (the part before the dot), and a call
only executes it through that backend's runtime (`_RUNTIMES`: what each backend can refuse,
self-check, time and run). A runtime never picks another backend; what it does with a call
shape its kernel does not take is part of how it runs (the mamba runtime runs single decoding
steps on the reference step, as its docs say).

`set_path(module, "reference")` forces the oracle everywhere (tests, debugging);
"reference.recurrent" / "reference.chunked" force one form of the recurrent oracle. The
environment variable SEQDSL_PATH does the same for every mixer built afterwards.
"""

from __future__ import annotations

import logging
import os
import warnings
from dataclasses import dataclass, fields, replace
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from seqdsl.errors import SeqError
from seqdsl.ir import support
from seqdsl.ir.key import Dense, KernelKey
from seqdsl.reference import attention as attn_ref
from seqdsl.reference import recurrent as rec_ref
from seqdsl.reference import selfcheck
from seqdsl.reference import top1 as top1_ref

log = logging.getLogger("seqdsl")


# --- what stage (3) receives -------------------------------------------------------------------------


@dataclass
class AttentionInputs:
    """Softmax and select families. Queries sit at positions pos..pos+T-1; keys at 0..L-1
    (the cache included). Keys and values come with their shared heads as cached, never
    repeated by the caller: SDPA reads the groups itself (`enable_gqa`)."""

    q: Tensor  # (B, T, H, Dk) after rope / qk-norm
    k: Tensor  # (B, L, Gk, Dk)
    v: Tensor  # (B, L, K, Dv)
    pos: int = 0
    bias: Tensor | None = None  # additive score bias of the T queries' rows, (H or B,H, T, L)
    alibi: Tensor | None = None  # (H,) ALiBi slopes


@dataclass
class RecurrentInputs:
    """Recurrent family, already in the reference's conventions (q scaled, keys normalised for
    delta rules, a normaliser column appended to v for normalized_linear weights)."""

    q: Tensor  # (B, T, H, F)
    k: Tensor  # (B, T, H, F)
    v: Tensor  # (B, T, H, value_cols)
    log_decay: Tensor | None = None  # (B, T, H) or (B, T, H, F), as key.decay_shape says
    # decay_shape "selective" (Mamba-1): the step size (B, T, H) > 0 and the rate (H, F) < 0, the
    # log decay being dt x rate and the write dt k v^T; log_decay then holds only an extra
    # per-head decay (ALiBi), or None
    dt: Tensor | None = None
    rate: Tensor | None = None
    beta: Tensor | None = None  # (B, T, H) delta rules
    bonus: Tensor | None = None  # (H, F) RWKV-6's bonus u
    a: Tensor | None = None  # (B, T, H, F) RWKV-7's in-context rate
    kappa: Tensor | None = None  # (B, T, H, F) RWKV-7's removal key


class Plan(NamedTuple):
    path: str
    reason: str


FORCEABLE = ("reference", "reference.recurrent", "reference.chunked")


def _forced_from_env() -> str | None:
    value = os.environ.get("SEQDSL_PATH") or None
    if value is not None and value not in FORCEABLE:
        raise SeqError(f"SEQDSL_PATH={value!r} is not a path seqdsl can force",
                       hint=f"use one of {', '.join(FORCEABLE)}, or unset it")
    return value


class PathChooser:
    def __init__(self, key: KernelKey, name: str, dense: Dense | None = None):
        self.key = key
        self.name = name  # the mixer's name, for messages
        self.dense = dense  # plain causal attention within the context (seqdsl.ir.key.dense_at)
        self.force: str | None = _forced_from_env()
        self.chosen: dict[str, Plan] = {}
        self._plans: dict[tuple[str, torch.dtype | None], Plan] = {}
        self._top1 = None  # the generated kernels, bound when a plan picks them
        # (device, dtype) plans on a mamba path whose decoding steps passed the state-update self-check
        self._mamba_steps: set[tuple[str, torch.dtype]] = set()

    def describe(self) -> dict[str, Plan]:
        """{device type: (path, reason)} for every device this mixer has run on."""
        return dict(self.chosen)

    def reset(self) -> None:
        self.chosen.clear()
        self._plans.clear()
        self._mamba_steps.clear()

    def plan(self, device: torch.device | str, dtype: torch.dtype | None = None) -> Plan:
        """The path this mixer takes on `device` for inputs of `dtype`. With `dtype = None`
        (`seqdsl lower`), only the static facts are consulted: no self-check is run."""
        device = torch.device(device)
        cache_key = (str(device), dtype)
        if cache_key not in self._plans:
            self._plans[cache_key] = self._make_plan(device, dtype)
        return self._plans[cache_key]

    def _make_plan(self, device: torch.device, dtype: torch.dtype | None) -> Plan:
        key = self.key
        if self.force is not None:
            if key.family == "recurrent" and self.force != "reference":
                return Plan(self.force, "forced")
            return Plan("reference.chunked" if key.family == "recurrent" else "reference", "forced")
        reference = "reference.chunked" if key.family == "recurrent" else "reference"
        if self.dense is not None:
            op, how = _sdpa_plan(self.dense.key, device)
            past = "the reference top-k" if key.family == "select" else "an explicit mask"
            return Plan(op, f"dense: {self.dense.reason}: softmax attention, {how} (past "
                            f"{self.dense.upto} tokens: {past})")
        if key.family == "softmax":
            op, how = _sdpa_plan(key, device)
            return Plan(op, f"softmax attention, {how}")
        offers = [support.triton(key)] if key.family == "select" else support.fast_paths(key)
        accepted = [v for v in offers if v.ok]
        if not accepted:
            return Plan(reference, "; ".join(f"{v.backend}: {v.reason}" for v in offers)
                        if len(offers) > 1 else offers[0].reason)
        if device.type != "cuda":
            verb = "runs" if len(accepted) == 1 else "run"
            return Plan(reference, f"{' and '.join(v.op for v in accepted)} {verb} on CUDA only")
        usable, refused = [], []
        for verdict in accepted:
            known = _RUNTIMES[verdict.backend].known_refusal(key, verdict.op)
            (refused if known else usable).append(known or verdict)
        if not usable:
            return Plan(reference, "; ".join(refused))
        not_here = "".join(f"; not {v.op}: {why}" for v, why in zip(
            (v for v in accepted if v not in usable), refused))
        if dtype is None:  # planning for display: the self-checks run at the first real call
            first = usable[0]
            others = f"; {' or '.join(v.op for v in usable[1:])} if faster here" if len(usable) > 1 else ""
            steps = f"; {_MambaRuntime.steps}, after a self-check" if first.backend == "mamba" else ""
            return Plan(first.op, f"{_RUNTIMES[first.backend].what(first.op)}, after a self-check against the "
                                  f"reference{others}{steps}{not_here}")
        from seqdsl.lower import verdicts

        passed, failed = [], []
        for verdict in usable:
            runtime = _RUNTIMES[verdict.backend]
            facts = {"op": verdict.op, "dtype": dtype, "specialised_on": runtime.facts(key)}
            ok, detail = verdicts.cached(facts, device, lambda: runtime.self_check(key, verdict.op, dtype, device))
            if ok:
                passed.append(verdict)
            else:
                failed.append(f"{verdict.op} failed its self-check here ({detail})")
        instead = f"running {passed[0].op if len(passed) == 1 else 'the faster of the rest'}" if passed \
            else "running the reference"
        for why in failed:
            warnings.warn(f"seqdsl: mixer {self.name}: {why}; {instead} instead", stacklevel=4)
        if not passed:
            return Plan(reference, "; ".join(failed))
        chosen, timing = passed[0], ""
        if len(passed) > 1:  # measured once per machine, kept with the self-check verdicts
            ops = [v.op for v in passed]
            facts = {"race": ops, "dtype": dtype, "specialised_on": repr(key)}
            _, timing = verdicts.cached(facts, device, lambda: (True, _race(key, passed, dtype, device)))
            chosen = next(v for v in passed if v.op == timing.split(":")[0])
            timing = f"; faster here ({timing.split(':', 1)[1].strip()})"
        if chosen.backend == "triton":
            # compile and register the kernels now, outside any torch.compile region: binding
            # inside one would be traced (a graph break)
            from seqdsl.kernels import top1

            self._top1 = top1.bind(key)
        steps = self._mamba_decoding(device, dtype) if chosen.backend == "mamba" else ""
        return Plan(chosen.op, f"{_RUNTIMES[chosen.backend].what(chosen.op)}, self-checked against the reference"
                               f"{timing}{steps}{not_here}")

    def _mamba_decoding(self, device: torch.device, dtype: torch.dtype) -> str:
        """Whether decoding steps on a mamba plan run mamba-ssm's state-update kernel (its
        own self-check, kept with the others) or the reference step; the plan's reason says which."""
        from seqdsl.lower import verdicts

        runtime = _RUNTIMES["mamba"]
        facts = {"op": "mamba.state_update", "dtype": dtype, "specialised_on": runtime.facts(self.key)}
        ok, detail = verdicts.cached(facts, device, lambda: runtime.step_check(self.key, dtype, device))
        if ok:
            self._mamba_steps.add((str(device), dtype))
            return f"; {_MambaRuntime.steps}, self-checked against the reference step"
        warnings.warn(f"seqdsl: mixer {self.name}: mamba-ssm's selective_state_update failed its self-check "
                      f"here ({detail}); decoding steps run the reference recurrent step instead", stacklevel=5)
        return f"; decoding steps: the reference recurrent step (selective_state_update failed its self-check: {detail})"

    def _record(self, device: torch.device, choice: Plan) -> None:
        if self.chosen.get(device.type) != choice:
            self.chosen[device.type] = choice
            log.info("mixer %s on %s: %s (%s)", self.name, device.type, *choice)

    def _plan_call(self, q: Tensor) -> Plan:
        if torch.compiler.is_compiling():
            # Planning runs self-checks, times kernels and logs: none of that can be traced, so a
            # compiled forward only reads the plan an eager call made (LanguageModel.plan_paths).
            choice = self._plans.get((str(q.device), q.dtype))
            if choice is None:  # a builtin exception: dynamo cannot trace SeqError's constructor
                raise RuntimeError(f"mixer {self.name}: torch.compile traced a call on {q.device} in {q.dtype} "
                                   f"before its path was planned; call LanguageModel.plan_paths(device, "
                                   f"autocast_dtype) before the first compiled step")
            return choice
        choice = self.plan(q.device, q.dtype)
        self._record(q.device, choice)
        return choice

    # --- softmax and select families ---------------------------------------------------------------

    def attention(self, m: AttentionInputs) -> Tensor:
        path = self._plan_call(m.q).path
        if path.startswith("sdpa."):
            if self.dense is not None:
                if m.k.shape[1] <= self.dense.upto:  # every restriction covers these keys
                    return _sdpa(self.dense.key, m, path)
                if self.key.family == "select":  # past the selection's reach
                    return _attention_reference(self.key, m)
                return _sdpa(self.key, m, support.sdpa(self.key).op)  # past the window: masked
            return _sdpa(self.key, m, path)
        if path.startswith("triton."):
            from seqdsl.kernels import top1 as top1_kernels

            T, L = m.q.shape[1], m.k.shape[1]
            # the generated kernels take one key/value head per query head
            k, v = attn_ref.repeat_heads(m.k, self.key.heads), attn_ref.repeat_heads(m.v, self.key.heads)
            if m.pos == 0 and T == L:
                return self._top1(m.q, k, v)  # bound once, when the plan chose it
            if T == 1 and m.pos == L - 1 and not torch.is_grad_enabled():
                return top1_kernels.decode(self.key, m.q, k, v)
        # a chunk of several queries against a cache runs on the reference
        return _attention_reference(self.key, m)

    # --- recurrent family --------------------------------------------------------------------------

    def recurrent(self, m: RecurrentInputs, S: Tensor | None) -> tuple[Tensor, Tensor]:
        path = self._plan_call(m.q).path
        # a decoding step may take the plan's own step kernel when that passed its self-check
        step_checked = (str(m.q.device), m.q.dtype) in self._mamba_steps
        return _RUNTIMES[backend(path)].run(self.key, path, m, S, step_checked=step_checked)


def _sdpa_plan(key: KernelKey, device: torch.device) -> tuple[str, str]:
    """The SDPA op for a softmax key and how it is called, in words."""
    op = support.sdpa(key).op
    how = "is_causal (flash/cuDNN eligible)" if op == "sdpa.causal" and device.type == "cuda" \
        else "is_causal" if op == "sdpa.causal" else "explicit mask"
    return op, how


def set_path(model: torch.nn.Module, path: str | None) -> None:
    """Force every mixer in `model` onto `path` (one of FORCEABLE, or None for automatic)."""
    if path is not None and path not in FORCEABLE:
        raise ValueError(f"cannot force path {path!r}; choose one of {FORCEABLE}")
    for sub in model.modules():
        chooser = getattr(sub, "paths", None)
        if isinstance(chooser, PathChooser):
            chooser.force = path
            chooser.reset()


# --- the runtime halves of the backends: they execute what the plan chose --------------------------


def backend(path: str) -> str:
    """The backend a path belongs to: "fla.chunk_gla" -> "fla", "reference.chunked" -> "reference"."""
    return path.split(".", 1)[0]


class _ReferenceRuntime:
    @staticmethod
    def what(op: str) -> str:
        return "the reference"

    @staticmethod
    def run(key: KernelKey, path: str, m: RecurrentInputs, S: Tensor | None, *,
            step_checked: bool = False) -> tuple[Tensor, Tensor]:
        return _recurrent_reference(key, m, S, path == "reference.recurrent")


class _FlaRuntime:
    @staticmethod
    def what(op: str) -> str:
        return "flash-linear-attention chunked kernel"

    @staticmethod
    def facts(key: KernelKey) -> str:
        """What an fla op's self-check depends on: the widths and the decay's shape."""
        return f"K={key.feature_dim} V={key.value_cols} decay={key.decay_shape}"

    @staticmethod
    def known_refusal(key: KernelKey, op: str) -> str:
        from seqdsl.lower import fla_paths

        if not fla_paths.importable():
            return "flash-linear-attention is not importable here"
        return fla_paths.known_refusal(op, key.decay_shape)

    @staticmethod
    def self_check(key: KernelKey, op: str, dtype: torch.dtype, device: torch.device) -> tuple[bool, str]:
        from seqdsl.lower import fla_paths

        return fla_paths.self_check(op, dtype, device, key.feature_dim, key.value_cols, key.decay_shape)

    @staticmethod
    def run(key: KernelKey, op: str, m: RecurrentInputs, S: Tensor | None, *,
            step_checked: bool = False) -> tuple[Tensor, Tensor]:
        from seqdsl.lower import fla_paths

        return fla_paths.run(op, m, S)


class _MambaRuntime:
    """mamba.ssd (Mamba-2's SSD, seqdsl/lower/mamba_paths.py) and mamba.selective_scan (Mamba-1's
    scan, seqdsl/lower/selective_scan_paths.py)."""

    steps = "decoding steps: mamba-ssm's selective_state_update"

    @staticmethod
    def what(op: str) -> str:
        return "mamba-ssm selective scan" if op == "mamba.selective_scan" else "mamba-ssm SSD chunked kernel"

    @staticmethod
    def facts(key: KernelKey) -> str:
        """What the SSD self-check depends on: the widths, the grouping, whether there is a decay."""
        from seqdsl.lower import mamba_paths

        return (f"K={key.feature_dim} V={key.value_cols} G={mamba_paths.groups(key)} H={key.heads} "
                f"decay={key.decay_shape}")

    @staticmethod
    def known_refusal(key: KernelKey, op: str) -> str:
        """Only a missing mamba-ssm: no machine is known where its kernels refuse (unlike fla's
        gated backward on Hopper); the self-check judges the rest."""
        from seqdsl.lower import mamba_paths, selective_scan_paths

        if op == "mamba.selective_scan":
            return selective_scan_paths.importable()
        return mamba_paths.importable()

    @staticmethod
    def self_check(key: KernelKey, op: str, dtype: torch.dtype, device: torch.device) -> tuple[bool, str]:
        from seqdsl.lower import mamba_paths, selective_scan_paths

        if op == "mamba.selective_scan":
            return selective_scan_paths.self_check(dtype, device, key.feature_dim, key.value_cols,
                                                   mamba_paths.groups(key), key.heads)
        return mamba_paths.self_check(dtype, device, key.feature_dim, key.value_cols, mamba_paths.groups(key),
                                      key.heads, key.decay_shape != "none")

    @staticmethod
    def step_check(key: KernelKey, dtype: torch.dtype, device: torch.device) -> tuple[bool, str]:
        from seqdsl.lower import mamba_paths

        return mamba_paths.step_self_check(dtype, device, key.feature_dim, key.value_cols,
                                           mamba_paths.groups(key), key.heads, key.decay_shape)

    @staticmethod
    def run(key: KernelKey, op: str, m: RecurrentInputs, S: Tensor | None, *,
            step_checked: bool = False) -> tuple[Tensor, Tensor]:
        """Chunks through the chunked kernel; a single decoding step (no gradient) through
        mamba-ssm's state-update kernel when it passed its own self-check, else the reference step."""
        from seqdsl.lower import mamba_paths, selective_scan_paths

        module = selective_scan_paths if op == "mamba.selective_scan" else mamba_paths
        if m.q.shape[1] > 1:
            return module.run(key, m, S)
        if step_checked and not torch.is_grad_enabled():
            return module.step(key, m, S)
        return _recurrent_reference(key, m, S, True)


class _TritonRuntime:
    @staticmethod
    def what(op: str) -> str:
        return "generated Triton kernel"

    @staticmethod
    def facts(key: KernelKey) -> str:
        return repr(key)  # generated from the whole key

    @staticmethod
    def known_refusal(key: KernelKey, op: str) -> str:
        try:
            from seqdsl.kernels import top1  # noqa: F401
        except ImportError as err:
            return f"the generated kernels are not importable here ({err})"
        return ""

    @staticmethod
    def self_check(key: KernelKey, op: str, dtype: torch.dtype, device: torch.device) -> tuple[bool, str]:
        from seqdsl.kernels import top1

        return top1.self_check(key, dtype, device)


_RUNTIMES = {"fla": _FlaRuntime(), "mamba": _MambaRuntime(), "triton": _TritonRuntime(),
             "reference": _ReferenceRuntime()}


def _race(key: KernelKey, passed: list[support.Support], dtype: torch.dtype, device: torch.device) -> str:
    """"<fastest op>: <op> <ms> ms, ..." for one forward + backward of each op on the same
    random inputs shaped like the key (B 2, T 2048): median of 5 timed runs after 2 warm-ups."""
    draw = selfcheck.Draws(device)
    rnd = lambda *shape: draw.normal(*shape, dtype=dtype)
    B, T, H = 2, 2048, key.heads
    F_, V = key.feature_dim, key.value_cols
    inputs = dict(q=rnd(B, T, H, F_) * key.scale, k=rnd(B, T, H, F_), v=rnd(B, T, H, V))
    if key.decay_shape != "none":
        inputs["log_decay"] = -draw.uniform(B, T, H) * 0.5
    inputs = {name: t.requires_grad_() for name, t in inputs.items()}
    times = {}
    with torch.enable_grad(), torch.autocast(device.type, enabled=False):
        for verdict in passed:
            times[verdict.op] = _median_ms(lambda: _RUNTIMES[verdict.backend].run(
                key, verdict.op, RecurrentInputs(**inputs), None)[0].float().sum().backward(), device)
    fastest = min(times, key=times.get)
    return f"{fastest}: " + ", ".join(f"{op} {ms:.2f} ms" for op, ms in times.items())


def _median_ms(step, device: torch.device) -> float:
    """Median of 5 CUDA-event timings of step() after 2 warm-ups (compilation, autotuning)."""
    runs = []
    for _ in range(7):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step()
        end.record()
        torch.cuda.synchronize(device)
        runs.append(start.elapsed_time(end))
    return sorted(runs[2:])[2]



# --- softmax implementations -------------------------------------------------------------------------


def _sdpa(key: KernelKey, m: AttentionInputs, path: str) -> Tensor:
    """SDPA as the plan said: `sdpa.causal` (whole sequences from position 0; a chunk against a
    cache takes the mask) or `sdpa.mask`. The support table decides which (seqdsl/ir/support.py:
    e.g. a scale <= 0 gives NaN rows under `is_causal`), not this function."""
    B, T, H, _ = m.q.shape
    L = m.k.shape[1]
    scale = key.scale / key.temperature
    k, v = m.k, m.v
    if k.shape[2] != v.shape[2]:
        # keys shared in query/key groups and values per head, or keys per head (random, constant
        # or no keys) and values in groups: SDPA takes one head count for both, so one per query head
        k, v = attn_ref.repeat_heads(k, H), attn_ref.repeat_heads(v, H)
    # grouped-query attention: SDPA maps query head h to key/value head h // (H / K) itself,
    # so the cache is never repeated to H heads
    gqa = k.shape[2] != H
    q, k, v = (t.transpose(1, 2) for t in (m.q, k, v))  # (B, H or K, *, D)
    if path == "sdpa.causal" and m.pos == 0 and T == L:
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale, enable_gqa=gqa)
        return out.transpose(1, 2)
    visible = attn_ref.visibility_mask(
        T, window=key.window if key.visibility == "window" else None,
        chunk_local=key.window if key.visibility == "chunk_local" else None,
        device=q.device, offset=m.pos, keys=L)
    bias = None
    # biases in float32 at least (bf16 distances lose whole positions), float64 stays float64
    if m.alibi is not None:
        bias = attn_ref.alibi_bias(m.alibi.to(attn_ref.bias_dtype(q.dtype)), T, offset=m.pos, keys=L)
    if m.bias is not None:
        rows = m.bias.to(attn_ref.bias_dtype(q.dtype))
        bias = rows if bias is None else bias + rows
    if bias is None:
        mask = visible
    else:
        # SDPA adds the mask to the *scaled* scores; the bias is defined on the unscaled-by-
        # temperature scores like the reference, so divide it by the temperature here.
        mask = (bias / key.temperature).masked_fill(~visible, float("-inf")).to(q.dtype)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=gqa)
    return out.transpose(1, 2)


def _in_float32(fn):
    """Run a reference in float32 (float64 stays float64) with autocast off: the
    oracle's numerics must not depend on bf16 autocast (and torch has no bf16 kernels for some
    of its steps, e.g. triangular solves on CPU). Outputs come back in the input dtype."""

    def up(t):
        return t.float() if isinstance(t, Tensor) and t.dtype in (torch.bfloat16, torch.float16) else t

    def wrapped(key, m, *args):
        dtype = m.q.dtype
        if dtype in (torch.float32, torch.float64) and not torch.is_autocast_enabled(m.q.device.type):
            return fn(key, m, *args)
        m32 = replace(m, **{f.name: up(getattr(m, f.name)) for f in fields(m)})
        with torch.autocast(m.q.device.type, enabled=False):
            out = fn(key, m32, *(up(a) for a in args))
        if isinstance(out, tuple):  # (o, state): the state stays float32 between calls
            return (out[0].to(dtype),) + out[1:]
        return out.to(dtype)

    return wrapped


@_in_float32
def _attention_reference(key: KernelKey, m: AttentionInputs) -> Tensor:
    """The oracle. Queries are padded with zero rows for the cached positions so the reference
    (which scores a square T x T problem) sees every key at its true position; only the last T
    rows are kept (the padded rows of the bias are zeros). Shared key/value heads are repeated
    to one per query head. O(L^2) per decoding step: fine for an oracle."""
    B, T, H, F_ = m.q.shape
    L = m.k.shape[1]
    k, v = attn_ref.repeat_heads(m.k, H), attn_ref.repeat_heads(m.v, H)
    q = m.q if m.pos == 0 else torch.cat([m.q.new_zeros(B, L - T, H, F_), m.q], dim=1)
    bias = None if m.bias is None else F.pad(m.bias, (0, 0, L - T, 0))
    window = key.window if key.visibility == "window" else None
    sel = key.select
    if sel is not None and sel.over == "element":
        out = top1_ref.topk_element_ref(q, k, v, scale=key.scale, k_top=sel.k,
                                        temperature=key.temperature, grad=sel.grad,
                                        value_grad=sel.value_grad, window=window, alibi_slopes=m.alibi)
    elif sel is not None:
        out = top1_ref.topk_chunk_ref(q, k, v, chunk=sel.chunk, scale=key.scale, k_top=sel.k,
                                      temperature=key.temperature, score=sel.score, local=sel.local,
                                      grad=sel.grad)
    else:
        chunk_local = key.window if key.visibility == "chunk_local" else None
        out = attn_ref.attention_ref(q, k, v, scale=key.scale, temperature=key.temperature,
                                     window=window, chunk_local=chunk_local, alibi_slopes=m.alibi,
                                     bias=bias)
    return out[:, L - T:]


# --- recurrent implementations -----------------------------------------------------------------------

REFERENCE_CHUNK = 64
_REFERENCE_UPDATE = {"additive": "additive", "bonus": "additive", "delta": "delta", "rwkv7": "rwkv7"}


@_in_float32
def _recurrent_reference(key: KernelKey, m: RecurrentInputs, S: Tensor | None, step: bool) -> tuple[Tensor, Tensor]:
    if key.decay_shape == "selective":  # Mamba-1's step: rule (1) with a per-channel decay
        log_decay, v = rec_ref.selective_to_additive(m.dt, m.rate, m.v, m.log_decay)
        m = replace(m, log_decay=log_decay, v=v, dt=None, rate=None)
    kwargs = dict(log_decay=m.log_decay, beta=m.beta, update=_REFERENCE_UPDATE[key.update], bonus=m.bonus,
                  a=m.a, kappa=m.kappa, initial_state=S)
    if step or m.q.shape[1] == 1:
        return rec_ref.recurrent_ref(m.q, m.k, m.v, **kwargs)
    # 64: fla's chunk size; per-channel decay builds its (c, c, Dk) decay tensors within sub-chunks
    # of 16 steps (seqdsl/reference/recurrent.py), so it no longer needs smaller chunks
    return rec_ref.chunked_ref(m.q, m.k, m.v, chunk_size=REFERENCE_CHUNK, **kwargs)
