"""Every spec parameter changes what it should, on every path that accepts it.

The parameters are enumerated from the IR (seqdsl/ir/nodes.py), not listed by hand: every field
of `Mixer`, a slot being a parameter whose values are its primitive classes, and every field of
every primitive class a slot can hold, nested ones included. Names read as a path:
`position=rope.base` is `base` of the `rope` in slot `position`; `select=top.over=chunk.size` is
`size` of the `chunk` in `top`'s `over`. `CASES` gives each parameter hosts (mixers it matters
in) and other values; a parameter in neither `CASES` nor `NOT_PARAMETERS` (with a reason) fails
`test_every_ir_parameter_has_cases`, and so do cases whose values leave out one of the
parameter's literal values, booleans or classes.

For each (parameter, host, value):
- `test_a_parameter_changes_what_the_mixer_computes` (semantic exhaustiveness): the float64
  reference computes something else at that value than at the host's, with every parameter the
  two mixers share (same name and shape) set to the host's values: its output, or its input
  gradient for the parameters that only shape the backward (`watch="gradient"`), by far more than
  the paths' tolerance. Sharing the parameters is what makes this a test of the lowering: a
  value that adds a parameter also shifts the random draws of every parameter after it, which
  alone changes the output of a lowering that ignores the value (a trial `gelu` gate that built
  `gate_proj` and never applied it passed a comparison of independently drawn mixers). A value
  that is rightly no change under shared parameters (an initial value) is in `NO_OPS`, with the
  reason, and must stay no change;
- `test_every_path_follows_a_parameter`: every path the support tables offer for the mixer at
  that value, run on CPU in float32,
  matches that float64 reference: the output, the input gradient and every parameter's
  gradient of a whole sequence, and the output of the same tokens fed from a cache (a chunk of
  two, then one token at a time: decoding's code paths). A path that ignored the parameter would
  compute the host's value instead, and fail.

The CPU-runnable paths: the reference's forms; `sdpa.causal` and `sdpa.mask` (SDPA itself); the
generated Top-1 Triton kernels under TRITON_INTERPRET=1 (tests/conftest.py sets it on a machine
without a GPU); flash-linear-attention's runtime with fla's
own pure-PyTorch naive recurrences standing in for its Triton kernels (the argument mapping
of seqdsl/lower/backends/fla.py is what runs); mamba-ssm's SSD and selective scan runtimes with the
stand-ins of tests/lower/test_mamba_custom_ops.py for their CUDA kernels. A path is forced by
replacing the planner's answer (`PathChooser.plan`), as tests/lower/test_plan_dispatch.py does.

`test_every_path_agrees_where_every_parameter_is_set` runs specs that set every parameter to a
non-default value (checked from the same enumeration) on every path, for the interactions.
"""

from __future__ import annotations

import copy
import functools
import os
import sys
import types
import typing
from dataclasses import dataclass
from typing import Literal, Union, get_args, get_origin

import pytest
import torch

import seqdsl
from seqdsl.ir import nodes, support
from seqdsl.ir.conflicts import conflicts
from seqdsl.ir.key import KernelKey
from seqdsl.ir.printer import format_module, format_value, mixer_decl
from seqdsl.lower.backends import mamba_ssd
from seqdsl.lower.backends import mamba_scan as scan_paths
from seqdsl.lower.mixer import MixerModule
from seqdsl.lower.backends.base import BackendName, Plan
from seqdsl.lower.paths import set_path
from tests.lower.test_mamba_custom_ops import _ExtensionStandIn, _ssd_stand_in_backward, _ssd_stand_in_forward
from tests.lower.test_recurrent_ref import fla_naive

D_MODEL = 32
TOL = 1e-4  # norm-relative, a float32 path against the float64 reference (seen: ~1e-6)
CHANGED = 100 * TOL  # the least the reference must change for a parameter's change to be seen

# Fields of Mixer that are no parameter of the computation.
NOT_PARAMETERS = {
    "name": "the mixer's name: messages, and how a model refers to it",
}


# --- the parameters, from the IR ---------------------------------------------------------------------


def _unwrap(annotation):
    while get_origin(annotation) is typing.Annotated:
        annotation = get_args(annotation)[0]
    return annotation


def _alternatives(annotation) -> list:
    """The alternatives of a field's type: Union members, Annotated stripped."""
    annotation = _unwrap(annotation)
    if get_origin(annotation) is Union:
        return [_unwrap(a) for a in get_args(annotation)]
    return [annotation]


def _classes(annotation) -> list[type[nodes.Primitive]]:
    return [a for a in _alternatives(annotation) if isinstance(a, type) and issubclass(a, nodes.Primitive)]


def _kind(cls: type[nodes.Primitive]) -> str:
    return cls.model_fields["kind"].default


def _primitive_parameters(prefix: str, cls: type[nodes.Primitive]):
    for name, field in cls.model_fields.items():
        if name == "kind":
            continue
        here = f"{prefix}={_kind(cls)}.{name}"
        yield here
        for member in _classes(field.annotation):
            yield from _primitive_parameters(here, member)


def ir_parameters() -> list[str]:
    """Every parameter a mixer spec can set, named as in the module docstring."""
    out = []
    for name, field in nodes.Mixer.model_fields.items():
        if name in NOT_PARAMETERS:
            continue
        out.append(name)
        for member in _classes(field.annotation):
            out.extend(_primitive_parameters(name, member))
    return out


def _field(param: str):
    """The pydantic field a parameter name points at."""
    slot, *steps = param.split("=")
    field = nodes.Mixer.model_fields[slot]
    for step in steps:
        kind, name = step.split(".")
        cls = next(c for c in _classes(field.annotation) if _kind(c) == kind)
        field = cls.model_fields[name]
    return field


def required_values(param: str) -> set:
    """What a parameter's cases must cover: each literal value, both booleans, each primitive
    class (as ("class", kind)), and ("number",) where any number is allowed."""
    out = set()
    for alt in _alternatives(_field(param).annotation):
        if get_origin(alt) is Literal:
            out.update(get_args(alt))
        elif alt is bool:
            out.update((True, False))
        elif isinstance(alt, type) and issubclass(alt, nodes.Primitive):
            out.add(("class", _kind(alt)))
        elif alt in (int, float):
            out.add(("number",))
        else:
            raise AssertionError(f"{param}: unexpected type {alt!r}: teach required_values about it")
    return out


def _covers(value) -> object:
    if isinstance(value, nodes.Primitive):
        return ("class", value.kind)
    if isinstance(value, (bool, str)):
        return value
    return ("number",)


def holds(mixer: nodes.Mixer, param: str) -> bool:
    """Whether `mixer` has the primitives `param` lives in (a rope for `position=rope.base`)."""
    slot, *steps = param.split("=")
    node = getattr(mixer, slot)
    for step in steps:
        kind, name = step.split(".")
        if getattr(node, "kind", None) != kind:
            return False
        node = getattr(node, name)
    return True


def value_at(mixer: nodes.Mixer, param: str):
    assert holds(mixer, param), f"{param}: the host {mixer} does not hold it"
    slot, *steps = param.split("=")
    node = getattr(mixer, slot)
    for step in steps:
        node = getattr(node, step.split(".")[1])
    return node


def with_value(mixer: nodes.Mixer, param: str, value) -> nodes.Mixer:
    """The mixer with `param` set to `value`, validated as a spec would be."""

    def replaced(node, steps):
        if not steps:
            return value
        kind, name = steps[0].split(".")
        assert node.kind == kind, f"{param}: the host has `{node.kind}` where the parameter needs `{kind}`"
        return node.model_copy(update={name: replaced(getattr(node, name), steps[1:])})

    slot, *steps = param.split("=")
    changed = mixer.model_copy(update={slot: replaced(getattr(mixer, slot), steps)})
    return nodes.Mixer.model_validate(changed.model_dump())


# --- the table ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    host: nodes.Mixer
    values: tuple
    watch: Literal["output", "gradient"] = "output"  # what the parameter changes


def mixer(**fields) -> nodes.Mixer:
    fields.setdefault("heads", 2)
    fields.setdefault("head_dim", 16)
    return nodes.Mixer(name="m", **fields)


SOFTMAX = mixer()
# one head: the generated kernels run under Triton's interpreter, whose time grows with the heads
ELEMENT = mixer(heads=1, select=nodes.Top())
CHUNK = mixer(heads=1, select=nodes.Top(over=nodes.Chunk(size=16)))
# two heads where the generated kernels do not run (reference only): ALiBi's one-head slope
# (1/256) is too gentle to move an arg-max, two heads' first one (1/16) moves it
ELEMENT2 = mixer(select=nodes.Top())
CHUNK2 = mixer(select=nodes.Top(over=nodes.Chunk(size=16)))
LINEAR = mixer(weights=nodes.Linear())
ELU_LINEAR = mixer(weights=nodes.Linear(), relation=nodes.Dot(feature="elu1"))
SCALAR = nodes.DataDependentDecay(granularity="scalar")
VECTOR = nodes.DataDependentDecay(granularity="vector")
ROPE = nodes.Rope()
LEARNED_SCALE = nodes.Dot(scale=nodes.Learned(init=1.0))
LEARNED_TEMPERATURE = nodes.Softmax(temperature=nodes.Learned(init=1.0))


def on(*hosts: nodes.Mixer, **fields) -> tuple[nodes.Mixer, ...]:
    return tuple(h.model_copy(update=fields) for h in hosts)


def cases(hosts, values, watch="output") -> tuple[Case, ...]:
    return tuple(Case(h, tuple(values), watch) for h in hosts)


CASES: dict[str, tuple[Case, ...]] = {
    # sizes
    "heads": cases([mixer(heads=4)], [1, "auto"]),
    "head_dim": cases([SOFTMAX, ELEMENT, LINEAR], [32]),
    "expand": cases([mixer(heads="auto")], [2]),
    "key_dim": cases([SOFTMAX, LINEAR], [32]),
    "qk_groups": cases([SOFTMAX, LINEAR], [1]),
    "kv_groups": cases((SOFTMAX, mixer(select=nodes.Top()), LINEAR)  # keys by content, and not:
                       + on(SOFTMAX, relation=nodes.RandomKeys()) + on(SOFTMAX, relation=nodes.ConstKeys())
                       + on(SOFTMAX, relation=nodes.Positional()) + on(LINEAR, relation=nodes.RandomKeys()), [1]),
    # position
    "position": cases([SOFTMAX, LINEAR], [nodes.Rope(), nodes.Alibi()]) + cases([ELEMENT], [nodes.Rope()])
    + cases([ELEMENT2], [nodes.Alibi()]),
    "position=rope.base": cases(on(SOFTMAX, ELEMENT, LINEAR, position=ROPE), [10.0]),
    # relation
    "relation": cases([SOFTMAX], [nodes.RandomKeys(), nodes.ConstKeys(), nodes.Positional()])
    + cases([ELEMENT, LINEAR], [nodes.RandomKeys(), nodes.ConstKeys()]),
    # (top-1 of single keys: a positive factor on the scores keeps each query's arg-max, so the
    # forward stays; the STE's softmax surrogate, the backward, changes)
    "relation=dot.scale": cases([SOFTMAX, CHUNK, LINEAR], [2.0, -1.0, nodes.Learned(init=2.0)])
    + cases([ELEMENT], [2.0, nodes.Learned(init=2.0)], watch="gradient") + cases([ELEMENT], [-1.0]),
    "relation=dot.scale=learned.init": cases(on(SOFTMAX, LINEAR, relation=LEARNED_SCALE), [0.25])
    + cases(on(ELEMENT, relation=LEARNED_SCALE), [0.25], watch="gradient"),
    "relation=dot.feature": cases([LINEAR], ["elu1", "relu", "taylor"]),
    "relation=dot.qk_norm": cases([SOFTMAX, ELEMENT, LINEAR], [True]),
    "relation=random_keys.seed": cases(on(SOFTMAX, ELEMENT, LINEAR, relation=nodes.RandomKeys()), [7]),
    # visibility
    "visibility": cases([SOFTMAX], [nodes.Window(size=4), nodes.ChunkLocal(size=4)])
    + cases([ELEMENT2], [nodes.Window(size=4)]),
    "visibility=window.size": cases(on(SOFTMAX, ELEMENT2, visibility=nodes.Window(size=4)), [9]),
    "visibility=window.sink": cases(on(SOFTMAX, ELEMENT2, visibility=nodes.Window(size=4)), [2]),
    "visibility=chunk_local.size": cases(on(SOFTMAX, visibility=nodes.ChunkLocal(size=4)), [8]),
    # weights; the temperature divides the whole score, biases included (ALiBi, decay, positional)
    "weights": cases([SOFTMAX], [nodes.Linear()]) + cases([ELU_LINEAR], [nodes.NormalizedLinear()]),
    "weights=softmax.temperature": cases([SOFTMAX, CHUNK], [0.5, nodes.Learned(init=0.5)])
    + cases([ELEMENT], [0.5, nodes.Learned(init=0.5)], watch="gradient")
    + cases(on(SOFTMAX, position=nodes.Alibi()) + on(SOFTMAX, decay=nodes.ConstantDecay(gamma=0.7))
            + on(SOFTMAX, decay=SCALAR) + on(SOFTMAX, relation=nodes.Positional()), [0.5])
    + cases(on(ELEMENT2, position=nodes.Alibi()), [0.5], watch="gradient"),
    "weights=softmax.temperature=learned.init": cases(on(SOFTMAX, CHUNK, weights=LEARNED_TEMPERATURE), [0.25])
    + cases(on(ELEMENT, weights=LEARNED_TEMPERATURE), [0.25], watch="gradient"),
    # select
    "select": cases([SOFTMAX], [nodes.Top(), nodes.Top(over=nodes.Chunk(size=16))]),
    "select=top.k": cases([ELEMENT2, CHUNK2], [2]),
    "select=top.over": cases([ELEMENT], [nodes.Chunk(size=16)]),
    "select=top.over=chunk.size": cases([CHUNK], [32]),
    "select=top.score": cases([CHUNK], ["mean"]) + cases([CHUNK2], ["lse"]),
    "select=top.local": cases([CHUNK], [False]),
    "select=top.grad": cases([ELEMENT, CHUNK], ["none"], watch="gradient"),
    "select=top.value_grad": cases([ELEMENT], ["soft"], watch="gradient"),
    # sinks inside the first chunk and past it (a key both sunk and chosen is attended once), and
    # without the own chunk; chunk selection only (on element selection they are inert: W005)
    "select=top.sink": cases([CHUNK], [3, 20])
    + cases(on(CHUNK, select=nodes.Top(over=nodes.Chunk(size=16), local=False)), [3]),
    # chunks chosen by the heads of a key/value head together (reference only; NSA's selection)
    "select=top.share": cases([mixer(heads=4, kv_groups=1, select=nodes.Top(k=2, over=nodes.Chunk(size=8)))],
                              ["group"]),
    # the recurrent family's slots, and their score-bias meaning under softmax
    "decay": cases([SOFTMAX, LINEAR], [nodes.ConstantDecay(), SCALAR]),
    "decay=constant.gamma": cases(on(SOFTMAX, LINEAR, decay=nodes.ConstantDecay()), [0.5]),
    "decay=data_dependent.granularity": cases(on(LINEAR, decay=SCALAR), ["vector", "selective"]),
    "update": cases([LINEAR], [nodes.Delta(), nodes.Rwkv7()]),
    "update=additive.bonus": cases(on(LINEAR, decay=VECTOR), [True]),
    # inputs and output
    "conv": cases([SOFTMAX, ELEMENT, LINEAR], [nodes.CausalConv(), nodes.TokenShift()]),
    "conv=causal.size": cases(on(SOFTMAX, LINEAR, conv=nodes.CausalConv()), [2]),
    "norm": cases([SOFTMAX, LINEAR], [nodes.GroupNorm(), nodes.RmsNorm()]),
    "gate": cases([SOFTMAX, LINEAR], [nodes.SwishGate(), nodes.SigmoidGate()]),
}


def spec_text(m: nodes.Mixer) -> str:
    """The mixer as its canonical spec, on one line: what a failure names."""
    return " ".join(format_module(nodes.Module(decls=(mixer_decl(m),))).split())


def _host_label(host: nodes.Mixer) -> str:
    body = spec_text(host)
    return body[body.index("{") + 1:body.rindex("}")].strip().replace(" = ", "=").replace("  ", " ")


RUNS = [(param, case.host, value, case.watch) for param, found in CASES.items() for case in found
        for value in case.values]
RUN_IDS = [f"{param}:{{{_host_label(host)}}}->{format_value(value)}" for param, host, value, _ in RUNS]


def test_every_ir_parameter_has_cases():
    enumerated = ir_parameters()
    assert "position=rope.base" in enumerated and "select=top.over=chunk.size" in enumerated
    assert "weights=softmax.temperature=learned.init" in enumerated
    missing = [p for p in enumerated if p not in CASES]
    assert not missing, f"parameters with no case here: {missing}; add them to CASES (or NOT_PARAMETERS, with a reason)"
    assert not set(CASES) - set(enumerated), f"cases for parameters the IR no longer has: {set(CASES) - set(enumerated)}"
    for param, found in CASES.items():
        covered = {_covers(value_at(c.host, param)) for c in found} | {_covers(v) for c in found for v in c.values}
        assert required_values(param) <= covered, (
            f"{param}: no case takes {required_values(param) - covered}")


# --- running a mixer on a path -----------------------------------------------------------------------


def _sdpa_ops(key: KernelKey) -> list[str]:
    return (["sdpa.causal"] if support.sdpa(key).op == "sdpa.causal" else []) + ["sdpa.mask"]


def cpu_paths(module: MixerModule) -> list[str]:
    """The paths a CPU run exercises for `module`: the reference's forms and every fast path the
    support tables offer its key (with stand-ins where the kernel needs a GPU)."""
    key = module.key
    if key.family == "recurrent":
        return ["reference.chunked", "reference.recurrent"] + [
            v.op for v in support.fast_paths(key) if v.ok and (v.backend != "triton" or kernels_on_cpu())]
    dense = getattr(module.paths, "dense", None)  # a mixer that is plain attention within its context
    if dense is not None:
        return ["reference"] + _sdpa_ops(dense.key)
    if key.family == "softmax":
        return ["reference"] + _sdpa_ops(key)
    return ["reference"] + ([support.triton(key).op] if support.triton(key).ok and kernels_on_cpu() else [])


def _naive_fla_ops() -> types.SimpleNamespace:
    """fla.ops as seqdsl/lower/backends/fla.py calls it, each chunked kernel replaced by fla's own
    naive (pure-PyTorch, differentiable) recurrence of the same math. Layouts (B, T, H, *);
    the naive functions that scale q by K^-1/2 themselves get q pre-scaled by K^1/2."""
    head_first = lambda t: t.transpose(1, 2)
    gla = fla_naive("gla/naive.py", "naive_recurrent_gla")
    simple_gla = fla_naive("simple_gla/naive.py", "naive_recurrent_simple_gla")
    rwkv6 = fla_naive("rwkv6/recurrent_naive.py", "naive_recurrent_rwkv6")
    gated_delta = fla_naive("gated_delta_rule/naive.py", "naive_recurrent_gated_delta_rule")
    dplr = fla_naive("generalized_delta_rule/dplr/naive.py", "dplr_recurrence")
    unscaled = lambda q, scale: q * scale * q.shape[-1] ** 0.5

    def chunk_simple_gla(q, k, v, g=None, *, scale, initial_state, output_final_state):
        g = torch.zeros(q.shape[:3], dtype=torch.float32) if g is None else g
        return simple_gla(q, k, v, g, scale=scale, initial_state=initial_state, output_final_state=True)

    def chunk_gla(q, k, v, g, *, scale, initial_state, output_final_state):
        return gla(unscaled(q, scale), k, v, g, initial_state=initial_state, output_final_state=True)

    def chunk_rwkv6(q, k, v, w, u, *, scale, initial_state, output_final_state):
        o, S = rwkv6(*map(head_first, (q, k, v, w)), u, scale=scale, initial_state=initial_state,
                     output_final_state=True)
        return head_first(o), S

    def chunk_delta_rule(q, k, v, beta, *, scale, initial_state, output_final_state):
        # fla's naive delta_rule_recurrence runs without gradient: its gated form with no decay
        return gated_delta(q, k, v, beta, torch.zeros_like(beta), scale=scale, initial_state=initial_state,
                           output_final_state=True)

    def chunk_gated_delta_rule(q, k, v, g, beta, *, scale, initial_state, output_final_state):
        return gated_delta(q, k, v, beta, g, scale=scale, initial_state=initial_state, output_final_state=True)

    def chunk_rwkv7(q, w, k, v, a, b, *, scale, initial_state, output_final_state, disable_recompute):
        o, S = dplr(*map(head_first, (unscaled(q, scale), k, v, a, b, w)), initial_state=initial_state,
                    output_final_state=True)
        return head_first(o), S

    spaces = dict(simple_gla=chunk_simple_gla, gla=chunk_gla, rwkv6=chunk_rwkv6, delta_rule=chunk_delta_rule,
                  gated_delta_rule=chunk_gated_delta_rule, rwkv7=chunk_rwkv7)
    return types.SimpleNamespace(**{name: types.SimpleNamespace(**{f"chunk_{name}": fn})
                                    for name, fn in spaces.items()})


@pytest.fixture(scope="module")
def naive_fla():
    return types.SimpleNamespace(ops=_naive_fla_ops())


@pytest.fixture
def stand_ins(monkeypatch, naive_fla):
    """The GPU kernels' stand-ins (module docstring)."""
    monkeypatch.setitem(sys.modules, "fla", naive_fla)
    monkeypatch.setattr(mamba_ssd, "_forward", _ssd_stand_in_forward)
    monkeypatch.setattr(mamba_ssd, "_backward", _ssd_stand_in_backward)
    monkeypatch.setattr(scan_paths, "_cuda", lambda: _ExtensionStandIn())


def kernels_on_cpu() -> bool:
    """Whether the generated kernels run on CPU tensors here: under Triton's interpreter, which
    tests/conftest.py turns on on a machine without a GPU (a GPU machine's own tests run them)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def test_the_generated_kernels_take_part_here():
    if torch.cuda.is_available() and not kernels_on_cpu():
        pytest.skip("a GPU machine: the generated kernels run on it in tests/kernels' GPU tests, not on CPU")
    assert kernels_on_cpu(), "TRITON_INTERPRET=1 is what tests/conftest.py sets without a GPU"


def on_path(module: MixerModule, path: str) -> MixerModule:
    """`module` running `path` whatever the planner would choose on this machine."""
    if path.startswith("reference"):
        set_path(module, path)
        return module
    chooser = module.paths
    forced = Plan(BackendName(path.partition(".")[0]), path, "forced by the test")
    chooser.plan = lambda device, dtype=None: forced  # shadows the method: every call runs `path`
    if path.startswith("triton.") and module.key.family == "select":
        from seqdsl.kernels import top1

        chooser._top1 = top1.bind(module.key)  # what a plan that chose the kernels binds
    return module


@dataclass
class Result:
    out: torch.Tensor  # (B, T, D) of a whole sequence
    dx: torch.Tensor  # its input gradient for a fixed output cotangent
    dparams: torch.Tensor  # every parameter's gradient, flattened and joined
    decoded: torch.Tensor  # the same tokens' outputs from a cache: T-3, then 2, then 1


def _length(m: nodes.Mixer) -> int:
    chunk = m.select.over.size if isinstance(m.select, nodes.Top) and isinstance(m.select.over, nodes.Chunk) else 0
    assert chunk <= 32, "the table's chunks are 16 or 32 tokens long"
    return 36 if chunk else 16  # two complete chunks of 16 (one of 32) and a partial one


def run(module: MixerModule, T: int, dtype: torch.dtype) -> Result:
    g = torch.Generator().manual_seed(1)
    x64 = torch.randn(1, T, D_MODEL, generator=g, dtype=torch.float64)
    cotangent = torch.randn(1, T, D_MODEL, generator=g, dtype=torch.float64)
    module = module.to(dtype)
    x = x64.to(dtype).requires_grad_()
    out, _ = module(x)
    (out * cotangent.to(dtype)).sum().backward()
    params = [p.grad if p.grad is not None else torch.zeros_like(p) for p in module.parameters()]
    with torch.no_grad():
        pieces, state = [], None
        for start, end in [(0, T - 3), (T - 3, T - 1), (T - 1, T)]:
            piece, state = module(x64[:, start:end].to(dtype), state)
            pieces.append(piece)
    flat = torch.cat([p.flatten() for p in params]) if params else torch.zeros(0)
    return Result(out.detach().double(), x.grad.double(), flat.double(), torch.cat(pieces, 1).double())


def build(m: nodes.Mixer) -> MixerModule:
    """`m` at the test's size, every parameter moved off its initial value by N(0, 0.1^2): some
    start at zero (a positional relation's distance table, RWKV's bonus and rates), where they
    would hide what a temperature or scale does to them."""
    assert not conflicts(m), f"the table asks for a mixer that cannot be built: {conflicts(m)}"
    torch.manual_seed(0)
    module = MixerModule(m, D_MODEL, context=64)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(0.1 * torch.randn(p.shape, dtype=p.dtype))
    return module


def run_reference(module: MixerModule, T: int) -> Result:
    """`module` on the reference path in float64. Its RMSNorms take float32's epsilon: torch's
    default is the input dtype's (2.2e-16 in float64), a different function from the float32
    paths' wherever a row's mean square is small."""
    module = on_path(module, "reference")
    for norm in module.modules():
        if isinstance(norm, torch.nn.RMSNorm) and norm.eps is None:
            norm.eps = torch.finfo(torch.float32).eps
    return run(module, T, torch.float64)


@functools.lru_cache(maxsize=None)
def reference(m: nodes.Mixer, T: int) -> Result:
    """The float64 reference of `m` (the paths' oracle; cached: hosts recur across cases)."""
    return run_reference(build(m), T)


def sharing(host: nodes.Mixer, changed: nodes.Mixer) -> MixerModule:
    """`changed` built, with every parameter it shares with `host` (same name and shape) set to
    the host's: what differs from the host's module is what the changed value built."""
    module, theirs = build(changed), dict(build(host).named_parameters())
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name in theirs and theirs[name].shape == p.shape:
                p.copy_(theirs[name])
    return module


def rel(x: torch.Tensor, y: torch.Tensor) -> float:
    scale = y.norm().item()
    diff = (x - y).norm().item()
    return diff / scale if scale > 0 else diff


def assert_paths_match_reference(m: nodes.Mixer, T: int) -> list[str]:
    """Every CPU path of `m` against its float64 reference; returns the paths run."""
    want = reference(m, T)
    module = build(m)
    paths = cpu_paths(module)
    for path in paths:
        got = run(on_path(copy.deepcopy(module), path), T, torch.float32)
        errors = {"output": rel(got.out, want.out), "input gradient": rel(got.dx, want.dx),
                  "parameter gradients": rel(got.dparams, want.dparams),
                  "decoded from a cache": rel(got.decoded, want.out)}
        bad = {what: f"{err:.2g}" for what, err in errors.items() if not err <= TOL}
        assert not bad, f"path {path} differs from the float64 reference of `{spec_text(m)}`: {bad}"
    return paths


# (parameter, value) pairs that rightly change nothing once the host's parameters are shared, and why.
NO_OPS = {
    ("relation=dot.scale=learned.init", "0.25"):
        "an initial value: where log_scale starts, which sharing sets to the host's "
        "(tests/lower/test_learned_and_kv_groups.py: test_learned_values_start_at_their_init)",
    ("weights=softmax.temperature=learned.init", "0.25"):
        "an initial value: where log_temperature starts, which sharing sets to the host's "
        "(tests/lower/test_learned_and_kv_groups.py: test_learned_values_start_at_their_init)",
}


@pytest.mark.parametrize("param, host, value, watch", RUNS, ids=RUN_IDS)
def test_a_parameter_changes_what_the_mixer_computes(param, host, value, watch):
    changed = with_value(host, param, value)
    T = max(_length(host), _length(changed))
    before, after = reference(host, T), run_reference(sharing(host, changed), T)
    seen = rel(after.dx, before.dx) if watch == "gradient" else rel(after.out, before.out)
    why = NO_OPS.get((param, format_value(value)))
    if why is not None:
        assert seen <= TOL, f"{param} = {format_value(value)} is listed as no change ({why}), yet changes {seen:.2g}"
        return
    assert seen > CHANGED, (f"{param} = {format_value(value)} changes the reference's {watch} by {seen:.2g} "
                            f"only, in `{spec_text(changed)}`, with the host's parameters: the lowering ignores it")


@pytest.mark.parametrize("param, host, value, watch", RUNS, ids=RUN_IDS)
def test_every_path_follows_a_parameter(stand_ins, param, host, value, watch):
    changed = with_value(host, param, value)
    assert_paths_match_reference(changed, max(_length(host), _length(changed)))


# --- every parameter set at once ---------------------------------------------------------------------

EVERYTHING_SET = """
mixer softmax_window { heads = 2  head_dim = 16  key_dim = 32  kv_groups = 1  position = rope(base = 100.0)
    relation = dot(scale = 0.3, qk_norm = true)  visibility = window(9, sink = 2)  weights = softmax(temperature = 0.5)
    decay = constant(gamma = 0.8)  conv = causal(3)  norm = rmsnorm  gate = swish }
mixer softmax_alibi { expand = 2  head_dim = 16  qk_groups = 2  position = alibi
    relation = dot(scale = learned(0.5))  visibility = chunk_local(8)  weights = softmax(temperature = 2.0)
    decay = data_dependent(scalar)  conv = token_shift  norm = groupnorm  gate = sigmoid }
mixer softmax_positional { heads = 2  head_dim = 16  relation = positional  weights = softmax(temperature = 0.7) }
mixer softmax_random_keys { heads = 2  head_dim = 16  kv_groups = 1  relation = random_keys(seed = 3)
    weights = softmax(temperature = learned(0.5))  conv = causal(2) }
mixer top1_element { heads = 2  head_dim = 32  position = rope(base = 100.0)  relation = dot(scale = 0.3, qk_norm = true)
    weights = softmax(temperature = learned(0.5))  select = top(1, value_grad = soft)  conv = causal(2) }
mixer topk_element_window { heads = 2  head_dim = 16  kv_groups = 1  position = alibi  visibility = window(9, sink = 2)
    weights = softmax(temperature = 0.5)  select = top(3, grad = none) }
mixer top1_chunk { heads = 2  head_dim = 16  relation = dot(scale = learned(2.0))
    weights = softmax(temperature = 0.5)  select = top(1, over = chunk(16), score = mean, local = false, grad = none) }
mixer top2_chunk_lse { heads = 2  head_dim = 16  relation = const_keys
    select = top(2, over = chunk(16), score = lse) }
mixer top2_chunk_sink { heads = 2  head_dim = 16  position = rope(base = 100.0)  relation = dot(qk_norm = true)
    weights = softmax(temperature = 0.5)  select = top(2, over = chunk(8), local = false, sink = 10) }
mixer top2_chunk_shared { heads = 4  head_dim = 16  kv_groups = 2
    select = top(2, over = chunk(8), score = lse, grad = none, share = group) }
mixer rwkv6_like { heads = 2  head_dim = 16  key_dim = 32  qk_groups = 1  relation = dot(scale = 0.5, feature = relu)
    weights = linear  decay = data_dependent(vector)  update = additive(bonus = true)  conv = token_shift
    norm = groupnorm  gate = sigmoid }
mixer delta_everything { heads = 2  head_dim = 16  position = rope(base = 100.0)
    relation = dot(feature = elu1, qk_norm = true)  weights = normalized_linear  decay = constant(gamma = 0.9)
    update = delta  conv = causal(2)  norm = rmsnorm  gate = swish }
mixer rwkv7_alibi { heads = 2  head_dim = 16  position = alibi  relation = dot(feature = relu)  weights = linear
    decay = data_dependent(vector)  update = rwkv7 }
mixer based_gated_delta { heads = 2  head_dim = 4  relation = dot(feature = taylor, scale = 0.7)  weights = linear
    decay = data_dependent(scalar)  update = delta }
mixer gla_like { heads = 2  head_dim = 16  weights = linear  decay = data_dependent(vector)  norm = rmsnorm  gate = swish }
mixer deltanet_like { heads = 2  head_dim = 16  relation = dot(scale = 0.5, qk_norm = true)  weights = linear
    update = delta  conv = causal(4) }
mixer gated_deltanet_like { heads = 2  head_dim = 16  weights = linear  decay = data_dependent(scalar)  update = delta }
mixer selective { heads = 2  head_dim = 16  relation = random_keys(seed = 5)  weights = linear
    decay = data_dependent(selective)  kv_groups = 1 }
mixer retnet_like { heads = 2  head_dim = 16  relation = dot(scale = learned(0.5))  weights = linear  decay = constant }
"""
EVERYTHING = seqdsl.loads(EVERYTHING_SET).program.mixers


def _is_default(m: nodes.Mixer, param: str) -> bool | None:
    """Whether `m` leaves `param` at its default; None when `m` does not hold it (another class
    in its slot). A required field (a window's size) has no default: setting it counts."""
    if not holds(m, param):
        return None
    value = value_at(m, param)
    field = _field(param)
    if field.is_required():
        return False
    default = field.get_default(call_default_factory=True)
    return value == default


def test_the_everything_specs_set_every_parameter():
    unset = [p for p in ir_parameters() if not any(_is_default(m, p) is False for m in EVERYTHING)]
    assert not unset, f"no spec in EVERYTHING_SET sets {unset} to a non-default value"


# every op the support tables can plan (seqdsl/ir/support.py)
FAST_OPS = {"sdpa.causal", "sdpa.mask", "triton.top1_element", "triton.top1_chunk", "mamba.ssd",
            "mamba.selective_scan", "fla.chunk_simple_gla", "fla.chunk_gla", "fla.chunk_rwkv6", "fla.chunk_rwkv7",
            "fla.chunk_delta_rule", "fla.chunk_gated_delta_rule"}


def test_the_everything_specs_reach_every_fast_path():
    if not kernels_on_cpu():
        pytest.skip("the generated kernels do not run on CPU here (a GPU machine)")
    reached = {path for m in EVERYTHING for path in cpu_paths(build(m))}
    assert FAST_OPS <= reached, f"no spec in EVERYTHING_SET runs {FAST_OPS - reached}"


@pytest.mark.parametrize("m", EVERYTHING, ids=[m.name for m in EVERYTHING])
def test_every_path_agrees_where_every_parameter_is_set(stand_ins, m):
    assert_paths_match_reference(m, 36)
