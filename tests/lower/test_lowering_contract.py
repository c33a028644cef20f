"""What the lowering promises beyond the numbers: `seqdsl check` and the lowering agree on what
can be built; mixed precision and no-grad calls work on every spec; forced paths are validated;
the fla argument mapping is what the self-check tests."""

from __future__ import annotations

import sys
import types

import pytest
import torch
from hypothesis import assume, given, settings

from seqdsl.errors import SeqError
from seqdsl.ir import nodes
import seqdsl
from seqdsl.check import check_program
from seqdsl.ir.printer import format_module, mixer_decl
from seqdsl.lower.backends import fla as fla_backend
from seqdsl.lower.lm import LanguageModel
from seqdsl.lower.mixer import LoweringError, MixerModule
from seqdsl.lower.paths import set_path
from tests.language.strategies import mixers
from tests.spec_library import SPEC_FILES, SPEC_IDS, at_most_heads, shrink_mixer, spec_model


@settings(max_examples=150, deadline=None)
@given(mixer=mixers("m"))
def test_lowering_builds_exactly_what_the_checker_accepts(mixer):
    """`seqdsl check` (rules W001, M003, run on a model of width 128 around the mixer) and the
    lowering agree on whether the mixer can be built."""
    model = nodes.ModelDecl(name="lm", assigns=(
        nodes.Assign(key="layers", value=1), nodes.Assign(key="d_model", value=128),
        nodes.Assign(key="vocab", value=64), nodes.Assign(key="mixer", value=("m",))))
    text = format_module(nodes.Module(decls=(mixer_decl(mixer), model)))
    report = check_program(seqdsl.loads(text), select=["W001", "M003"])
    buildable = not any(d.severity == "error" for d in report.diagnostics)
    with torch.device("meta"):
        if buildable:
            MixerModule(mixer, 128, context=64)
        else:
            with pytest.raises(LoweringError):
                MixerModule(mixer, 128, context=64)


@pytest.mark.parametrize("path", SPEC_FILES, ids=SPEC_IDS)
def test_bf16_autocast_forward_backward_and_no_grad_decode(path):
    program, model = spec_model(path, vocab=64)
    model = at_most_heads(program, model).model_copy(update={"context": 64})
    torch.manual_seed(0)
    lm = LanguageModel(program, model)
    tokens = torch.randint(0, 64, (2, 33))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = lm.loss(tokens[:, :-1], tokens[:, 1:])
    loss.backward()
    assert torch.isfinite(loss)
    assert all(torch.isfinite(p.grad).all() for p in lm.parameters() if p.grad is not None)
    # under bf16 autocast every path is planned (self-checked, raced, run) for bf16 inputs: a
    # float32 parameter in front of the path (the convolution's weight was one) would promote the
    # activations, and a GPU path (mamba's SSD kernels) would then run in float32
    assert {dtype for block in lm.blocks for _, dtype in block.mixer.paths.planned()} == {torch.bfloat16}
    with torch.no_grad():
        out = lm.generate(tokens[:, :5], steps=3)
    assert out.shape == (2, 8)


def test_bf16_autocast_alibi_matches_float32_past_256_tokens():
    """bf16 cannot count positions past 256: distances must be formed in float32."""
    from tests.spec_library import SPECS_DIR

    program, model = spec_model(SPECS_DIR / "alibi.seq", vocab=64)
    model = model.model_copy(update={"context": 320})
    torch.manual_seed(0)
    lm = LanguageModel(program, model)
    tokens = torch.randint(0, 64, (1, 320))
    with torch.no_grad():
        ref, _ = lm(tokens)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            low, _ = lm(tokens)
    err = (low.float() - ref).norm(dim=-1) / ref.norm(dim=-1)
    assert err[0, 256:].max() < 5e-2, err[0, 256:].max()


def test_forcing_an_unknown_path_is_refused(monkeypatch):
    program, model = spec_model(SPEC_FILES[0], vocab=64)
    lm = LanguageModel(program, model)
    with pytest.raises(ValueError):
        set_path(lm, "refernce")
    monkeypatch.setenv("SEQDSL_PATH", "fast-please")
    with pytest.raises(SeqError, match="SEQDSL_PATH"):
        LanguageModel(program, model)


# --- fla argument mapping, with fla's entry points replaced by recorders ---------------------------


@pytest.fixture
def recorded_fla(monkeypatch):
    calls = {}

    def recorder(name):
        def fn(*args, **kwargs):
            calls[name] = (args, kwargs)
            q, v = args[0], args[2] if name != "chunk_rwkv7" else args[3]
            return torch.zeros_like(v), torch.zeros(q.shape[0], q.shape[2], q.shape[3], v.shape[3])
        return fn

    ops = types.SimpleNamespace(**{
        pkg: types.SimpleNamespace(**{fn: recorder(fn)})
        for pkg, fn in [("simple_gla", "chunk_simple_gla"), ("gla", "chunk_gla"), ("rwkv6", "chunk_rwkv6"),
                        ("rwkv7", "chunk_rwkv7"), ("delta_rule", "chunk_delta_rule"),
                        ("gated_delta_rule", "chunk_gated_delta_rule")]})
    monkeypatch.setitem(sys.modules, "fla", types.SimpleNamespace(ops=ops))
    return calls


def _qkv(B=1, T=5, H=2, K=16, V=16):
    return torch.randn(B, T, H, K), torch.randn(B, T, H, K), torch.randn(B, T, H, V)


@pytest.mark.parametrize("op", ["fla.chunk_gla", "fla.chunk_rwkv6", "fla.chunk_rwkv7"])
@pytest.mark.parametrize("decay", ["none", "scalar"])
def test_per_channel_kernels_get_a_per_channel_decay(recorded_fla, op, decay):
    q, k, v = _qkv()
    log_decay = None if decay == "none" else -torch.rand(1, 5, 2)
    bonus = torch.zeros(2, 16) if op == "fla.chunk_rwkv6" else None
    a = torch.rand(1, 5, 2, 16) if op == "fla.chunk_rwkv7" else None
    kappa = torch.randn(1, 5, 2, 16) if a is not None else None
    fla_backend._call(op, q, k, v, log_decay, None, bonus, a, kappa, None)
    args, kwargs = recorded_fla[op.split(".")[1]]
    g = args[1] if op == "fla.chunk_rwkv7" else kwargs.get("g", kwargs.get("w"))
    assert g.shape == k.shape
    expected = torch.zeros_like(k) if log_decay is None else log_decay[..., None].expand_as(k)
    torch.testing.assert_close(g, expected)
    assert kwargs["scale"] == 1.0 and kwargs["output_final_state"]
    if op == "fla.chunk_rwkv7":  # reference rule (4) in fla's dplr form: a = -kappa, b = kappa * a
        torch.testing.assert_close(args[4], -kappa)
        torch.testing.assert_close(args[5], kappa * a)


@pytest.mark.parametrize("grad", [True, False])
def test_rwkv7_keeps_its_forward_for_the_backward_only_when_training(recorded_fla, grad):
    """fla's chunk_rwkv7 recomputes its chunked forward in the backward unless told to keep it:
    kept when gradients are on (faster, more memory), not asked for in inference."""
    q, k, v = _qkv()
    a, kappa = torch.rand(1, 5, 2, 16), torch.randn(1, 5, 2, 16)
    with torch.set_grad_enabled(grad):
        fla_backend._call("fla.chunk_rwkv7", q, k, v, -torch.rand(1, 5, 2, 16), None, None, a, kappa, None)
    assert recorded_fla["chunk_rwkv7"][1]["disable_recompute"] is grad


@pytest.mark.parametrize("op", ["fla.chunk_simple_gla", "fla.chunk_delta_rule", "fla.chunk_gated_delta_rule"])
def test_scalar_decay_and_delta_kernels_get_their_arguments(recorded_fla, op):
    q, k, v = _qkv()
    log_decay = -torch.rand(1, 5, 2) if op != "fla.chunk_delta_rule" else None
    beta = torch.rand(1, 5, 2) if "delta" in op else None
    S = torch.randn(1, 2, 16, 16)
    fla_backend._call(op, q, k, v, log_decay, beta, None, None, None, S)
    args, kwargs = recorded_fla[op.split(".")[1]]
    assert args[0] is q or torch.equal(args[0], q)
    assert torch.equal(args[1], k) and torch.equal(args[2], v)
    assert kwargs["scale"] == 1.0 and kwargs["initial_state"] is S and kwargs["output_final_state"]
    if log_decay is not None:
        assert torch.equal(kwargs["g"], log_decay)
    if beta is not None:
        assert torch.equal(kwargs["beta"], beta)


def at_test_size(mixer: nodes.Mixer) -> nodes.Mixer:
    """A drawn mixer with every size small (heads <= 3, head dims 2-16, windows and chunks <= 8,
    k <= 3) and every number in a range where float32 is exact enough to compare (|scale| <= 4,
    temperature in [1/4, 4], rope base >= 2), keeping every slot's kind."""
    update = {"head_dim": 2 ** (1 + mixer.head_dim % 4), "expand": 1 + mixer.expand % 2}
    if mixer.heads != "auto":
        update["heads"] = 1 + mixer.heads % 3
    if mixer.key_dim != "auto":
        update["key_dim"] = 2 ** (1 + mixer.key_dim % 4)
    if mixer.qk_groups != "auto":
        update["qk_groups"] = 1
    rel = mixer.relation
    def clamp(value, low, high):  # a learned value keeps being learned, from an initial value in range
        if isinstance(value, nodes.Learned):
            return nodes.Learned(init=max(0.25, min(4.0, value.init)))
        return max(low, min(high, value))

    if isinstance(rel, nodes.Dot) and rel.scale != "auto":
        update["relation"] = rel.model_copy(update={"scale": clamp(rel.scale, -4.0, 4.0)})
    if isinstance(mixer.weights, nodes.Softmax):
        update["weights"] = nodes.Softmax(temperature=clamp(mixer.weights.temperature, 0.25, 4.0))
    if isinstance(mixer.position, nodes.Rope):
        update["position"] = nodes.Rope(base=max(2.0, mixer.position.base))
    if isinstance(mixer.conv, nodes.CausalConv):
        update["conv"] = nodes.CausalConv(size=1 + mixer.conv.size % 4)
    if isinstance(mixer.select, nodes.Top):
        update["select"] = mixer.select.model_copy(update={"k": 1 + mixer.select.k % 3})
    return shrink_mixer(mixer.model_copy(update=update), 8)


@settings(max_examples=40, deadline=None)
@given(mixer=mixers("m"))
def test_every_buildable_mixer_runs_forward_and_backward(mixer):
    """Random mixers, built for real at small sizes: a finite forward over 3 windows/chunks of 8,
    and finite gradients (the contract test above builds them on the meta device only)."""
    mixer = at_test_size(mixer)
    try:
        module = MixerModule(mixer, 32, context=32)
    except LoweringError:
        assume(False)
    torch.manual_seed(0)
    x = torch.randn(2, 24, 32, requires_grad=True)
    out, _ = module(x)
    assert torch.isfinite(out).all(), f"non-finite output for {mixer}"
    out[:, -1].square().sum().backward()
    assert torch.isfinite(x.grad).all(), f"non-finite input gradient for {mixer}"
    assert all(torch.isfinite(p.grad).all() for p in module.parameters() if p.grad is not None)


@pytest.mark.parametrize("scale", [-1.0, 0.0, 1.5e-109])
def test_a_score_scale_at_most_zero_plans_the_explicit_mask_and_matches_the_reference(scale):
    """SDPA's `is_causal` gives NaN rows for a scale <= 0 (its kernels mask before scaling), and
    for a positive scale that is 0 in float32 (hypothesis found 1.5e-109); the support table plans
    the explicit mask for them, which matches the float64 reference."""
    mixer = seqdsl.loads(f"mixer m {{ heads = 2  head_dim = 16  relation = dot(scale = {scale}) }}").program.mixer("m")
    torch.manual_seed(0)
    module = MixerModule(mixer, 32)
    reference = MixerModule(mixer, 32).double()
    reference.load_state_dict(module.state_dict())
    set_path(reference, "reference")
    x = torch.randn(2, 24, 32, dtype=torch.float64)
    out, _ = module(x.float())
    assert module.paths.describe()["cpu"].op == "sdpa.mask"
    want, _ = reference(x)
    assert ((out.double() - want).norm() / want.norm()).item() < 1e-5
