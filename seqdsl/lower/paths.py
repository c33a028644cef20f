"""Execution paths for stage (3) of a mixer: the reference oracle or a fast kernel.

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
        triton.delta_chunk  the delta rule's chunked reference with its state passing in a Triton
                    kernel (seqdsl/kernels/state_pass.py), CUDA only, after a self-check
        mamba.ssd   mamba-ssm's Mamba-2 SSD chunked kernels (seqdsl/lower/backends/mamba_ssd.py), CUDA
                    only, after a self-check; single decoding steps (no gradient) run its
                    selective_state_update after a self-check of their own, else recurrent_ref
        mamba.selective_scan  mamba-ssm's Mamba-1 selective scan for the selective decay
                    (seqdsl/lower/backends/mamba_scan.py), likewise, decoding steps included
        fla.<op>    flash-linear-attention chunked kernels, CUDA only, after a self-check
        reference   chunked_ref (recurrent_ref for single steps)
    Where several fast kernels accept a key (mamba.ssd and fla.chunk_simple_gla; fla's delta
    rules and triton.delta_chunk), each is
    self-checked, and when more than one passes they are timed once on this machine (kept with
    the self-check verdicts, seqdsl/lower/verdicts.py) and the faster runs.

The plan is the one decision: `Plan(backend, op, reason)` (seqdsl/lower/backends/base.py), and a
call only executes it through the backend it names (seqdsl/lower/backends/: what each backend can
refuse, self-check and run). A backend never picks another; what it does with a call shape its
kernel does not take is part of how it runs (the mamba backend runs single decoding steps on the
reference step, as its docs say).

Stage (1)'s causal conv is planned the same way, per (device, dtype), in seqdsl/lower/conv_path.py
(`triton.causal_conv` or the reference taps); `set_path` and SEQDSL_PATH force it too.

`set_path(module, "reference")` forces the oracle everywhere (tests, debugging);
"reference.recurrent" / "reference.chunked" force one form of the recurrent oracle. The
environment variable SEQDSL_PATH does the same for every mixer built afterwards.
"""

from __future__ import annotations

import os
import warnings

import torch
from torch import Tensor

from seqdsl.errors import SeqError
from seqdsl.ir import support
from seqdsl.ir.key import Dense, KernelKey
from seqdsl.lower import backends, verdicts
from seqdsl.lower.conv_path import ConvPath
from seqdsl.lower.backends import mamba, sdpa
from seqdsl.lower.backends.base import BackendName, Plan
from seqdsl.lower.backends.reference import CHUNKED, RECURRENT
from seqdsl.lower.inputs import AttentionInputs, RecurrentInputs
from seqdsl.lower.planning import Planner
from seqdsl.reference import recurrent as rec_ref
from seqdsl.reference import selfcheck

FORCEABLE = ("reference", "reference.recurrent", "reference.chunked")


def _forced_from_env() -> str | None:
    value = os.environ.get("SEQDSL_PATH") or None
    if value is not None and value not in FORCEABLE:
        raise SeqError(f"SEQDSL_PATH={value!r} is not a path seqdsl can force",
                       hint=f"use one of {', '.join(FORCEABLE)}, or unset it")
    return value


def _reference(key: KernelKey, reason: str) -> Plan:
    if key.family != "recurrent":
        return Plan(BackendName.REFERENCE, "reference", reason)
    if key.decay_shape in ("vector", "selective") and key.value_cols < rec_ref.SUB_CHUNK:
        # a per-channel decay makes the chunked form build (c, c, Dk) tensors per sub-chunk of c
        # steps, c * Dk numbers per step, while a step of the recurrence keeps its state, Dk * Dv:
        # with values narrower than c (Mamba-1's are 1 wide) the recurrence needs less memory
        return Plan(BackendName.REFERENCE, RECURRENT, f"{reason}; step by step: with {key.value_cols}-wide values "
                                                      "and a per-channel decay it needs less memory than chunked")
    return Plan(BackendName.REFERENCE, CHUNKED, reason)


def _backend(offer: support.Support) -> BackendName:
    """The backend of one of the support table's offers (the table names them in its own words)."""
    return BackendName(offer.backend)


class PathChooser(Planner):
    def __init__(self, key: KernelKey, name: str, dense: Dense | None = None):
        super().__init__(name, _forced_from_env())
        self.key = key
        self.dense = dense  # plain causal attention within the context (seqdsl.ir.key.dense_at)
        self._top1: object = None  # the generated kernels, bound when a plan picks them
        # (device, dtype) plans on a mamba path whose decoding steps passed the state-update self-check
        self._mamba_steps: set[tuple[str, torch.dtype]] = set()

    def describe(self) -> dict[str, Plan]:
        """{device type: plan} for every device this mixer has run on."""
        return dict(self.chosen)

    def planned(self) -> list[tuple[str, torch.dtype | None]]:
        """The (device, input dtype) pairs this mixer has planned a path for."""
        return list(self._plans)

    def reset(self) -> None:
        super().reset()
        self._mamba_steps.clear()

    def _make_plan(self, device: torch.device, dtype: torch.dtype | None) -> Plan:
        key = self.key
        if self.force is not None:
            if key.family == "recurrent" and self.force != "reference":
                return Plan(BackendName.REFERENCE, self.force, "forced")
            return _reference(key, "forced")
        if self.dense is not None:
            op, how = sdpa.op_for(self.dense.key, device)
            past = "the reference top-k" if key.family == "select" else "an explicit mask"
            return Plan(BackendName.SDPA, op, f"dense: {self.dense.reason}: softmax attention, {how} (past "
                                              f"{self.dense.upto} tokens: {past})")
        if key.family == "softmax":
            op, how = sdpa.op_for(key, device)
            return Plan(BackendName.SDPA, op, f"softmax attention, {how}")
        offers = [support.triton(key)] if key.family == "select" else support.fast_paths(key)
        accepted = [v for v in offers if v.ok]
        if not accepted:
            return _reference(key, "; ".join(f"{v.backend}: {v.reason}" for v in offers)
                              if len(offers) > 1 else offers[0].reason)
        if device.type != "cuda":
            verb = "runs" if len(accepted) == 1 else "run"
            return _reference(key, f"{' and '.join(str(v.op) for v in accepted)} {verb} on CUDA only")
        usable: list[support.Support] = []
        refused: list[str] = []
        for offer in accepted:
            known = backends.BACKENDS[_backend(offer)].known_refusal(key, str(offer.op))
            if known:
                refused.append(known)
            else:
                usable.append(offer)
        if not usable:
            return _reference(key, "; ".join(refused))
        not_here = "".join(f"; not {v.op}: {why}" for v, why in zip(
            (v for v in accepted if v not in usable), refused))
        if dtype is None:  # planning for display: the self-checks run at the first real call
            return _display_plan(usable, not_here)
        return self._checked_plan(device, dtype, usable, not_here)

    def _checked_plan(self, device: torch.device, dtype: torch.dtype, usable: list[support.Support],
                      not_here: str) -> Plan:
        """The fastest of the `usable` offers that passes its self-check on this machine, else
        the reference; every failure is a warning."""
        passed, failed = [], []
        for offer in usable:
            backend = backends.BACKENDS[_backend(offer)]
            facts: dict[str, object] = {"op": offer.op, "dtype": dtype, "specialised_on": backend.facts(self.key)}
            ok, detail = verdicts.cached(facts, device, lambda: backend.self_check(self.key, str(offer.op), dtype,
                                                                                   device))
            if ok:
                passed.append(offer)
            else:
                failed.append(f"{offer.op} failed its self-check here ({detail})")
        instead = f"running {passed[0].op if len(passed) == 1 else 'the faster of the rest'}" if passed \
            else "running the reference"
        for why in failed:
            warnings.warn(f"seqdsl: mixer {self.name}: {why}; {instead} instead", stacklevel=5)
        if not passed:
            return _reference(self.key, "; ".join(failed))
        chosen, timing = self._fastest(passed, device, dtype)
        name = _backend(chosen)
        if name is BackendName.TRITON and self.key.family == "select":
            self._top1 = backends.TRITON.bind(self.key)
        steps = self._mamba_decoding(device, dtype) if name is BackendName.MAMBA else ""
        return Plan(name, str(chosen.op), f"{backends.BACKENDS[name].what(str(chosen.op))}, self-checked against "
                                          f"the reference{timing}{steps}{not_here}")

    def _fastest(self, passed: list[support.Support], device: torch.device,
                 dtype: torch.dtype) -> tuple[support.Support, str]:
        """The offer to run and, when several passed, the timings that chose it, in words. Timed
        once per machine and kept with the self-check verdicts."""
        if len(passed) == 1:
            return passed[0], ""
        facts = {"race_ms": [v.op for v in passed], "dtype": dtype, "specialised_on": repr(self.key)}
        times = verdicts.timings(facts, device, lambda: _race(self.key, passed, dtype, device))
        fastest = min(times, key=times.__getitem__)
        chosen = next(v for v in passed if v.op == fastest)
        return chosen, f"; faster here ({', '.join(f'{op} {ms:.2f} ms' for op, ms in times.items())})"

    def _mamba_decoding(self, device: torch.device, dtype: torch.dtype) -> str:
        """Whether decoding steps on a mamba plan run mamba-ssm's state-update kernel (its
        own self-check, kept with the others) or the reference step; the plan's reason says which."""
        facts = {"op": "mamba.state_update", "dtype": dtype, "specialised_on": backends.MAMBA.facts(self.key)}
        ok, detail = verdicts.cached(facts, device, lambda: backends.MAMBA.step_check(self.key, dtype, device))
        if ok:
            self._mamba_steps.add((str(device), dtype))
            return f"; {mamba.STEPS}, self-checked against the reference step"
        warnings.warn(f"seqdsl: mixer {self.name}: mamba-ssm's selective_state_update failed its self-check "
                      f"here ({detail}); decoding steps run the reference recurrent step instead", stacklevel=6)
        return f"; decoding steps: the reference recurrent step (selective_state_update failed its self-check: {detail})"

    def attention(self, m: AttentionInputs) -> Tensor:
        """Softmax and select families, on the planned backend."""
        plan = self.plan_call(m.q)
        if self.planning_only:
            return backends.REFERENCE.attend(self.key, "reference", m, dense=self.dense)
        return backends.ATTENTION[plan.backend].attend(self.key, plan.op, m, dense=self.dense, kernels=self._top1)

    def recurrent(self, m: RecurrentInputs, S: Tensor | None) -> tuple[Tensor, Tensor]:
        """Recurrent family, on the planned backend."""
        plan = self.plan_call(m.q)
        if self.planning_only:
            return backends.REFERENCE.recur(self.key, CHUNKED, m, S)
        # a decoding step may take the plan's own step kernel when that passed its self-check
        step_checked = (str(m.q.device), m.q.dtype) in self._mamba_steps
        return backends.RECURRENT[plan.backend].recur(self.key, plan.op, m, S, step_checked=step_checked)


def _display_plan(usable: list[support.Support], not_here: str) -> Plan:
    """The plan `seqdsl lower` shows before any self-check has run: the first usable offer."""
    first = usable[0]
    name = _backend(first)
    others = f"; {' or '.join(str(v.op) for v in usable[1:])} if faster here" if len(usable) > 1 else ""
    steps = f"; {mamba.STEPS}, after a self-check" if name is BackendName.MAMBA else ""
    return Plan(name, str(first.op), f"{backends.BACKENDS[name].what(str(first.op))}, after a self-check against "
                                     f"the reference{others}{steps}{not_here}")


def set_path(model: torch.nn.Module, path: str | None) -> None:
    """Force every mixer in `model` onto `path` (one of FORCEABLE, or None for automatic)."""
    if path is not None and path not in FORCEABLE:
        raise ValueError(f"cannot force path {path!r}; choose one of {FORCEABLE}")
    for sub in model.modules():
        for chooser in (getattr(sub, "paths", None), getattr(sub, "conv_path", None)):
            if isinstance(chooser, (PathChooser, ConvPath)):  # a forced path runs the reference conv
                chooser.force = path
                chooser.reset()


def _race(key: KernelKey, passed: list[support.Support], dtype: torch.dtype, device: torch.device) -> dict[str, float]:
    """{op: milliseconds} for one forward + backward of each op on the same random inputs shaped
    like the key (B 2, T 2048): median of 5 timed runs after 2 warm-ups."""
    draw = selfcheck.Draws(device)
    rnd = lambda *shape: draw.normal(*shape, dtype=dtype)
    B, T, H = 2, 2048, key.heads
    F_, V = key.feature_dim, key.value_cols
    inputs = dict(q=rnd(B, T, H, F_) * key.scale, k=rnd(B, T, H, F_), v=rnd(B, T, H, V))
    if key.decay_shape != "none":
        inputs["log_decay"] = -draw.uniform(B, T, H, *((F_,) if key.decay_shape == "vector" else ())) * 0.5
    if key.update == "delta":  # fla's delta rules and triton.delta_chunk: unit keys, a writing strength
        inputs["k"] = torch.nn.functional.normalize(inputs["k"], dim=-1)
        inputs["beta"] = torch.sigmoid(rnd(B, T, H))
    inputs = {name: t.requires_grad_() for name, t in inputs.items()}
    times = {}
    with torch.enable_grad(), torch.autocast(device.type, enabled=False):
        for offer in passed:
            backend = backends.RECURRENT[_backend(offer)]
            times[str(offer.op)] = _median_ms(lambda: backend.recur(
                key, str(offer.op), RecurrentInputs(**inputs), None)[0].float().sum().backward(), device)
    return times


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
