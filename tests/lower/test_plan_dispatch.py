"""The plan is the one decision of which backend runs a mixer's stage (3); a call only executes
it through the backend the plan names (seqdsl/lower/backends/). Runs on CPU: the fast backends
are replaced by stand-ins where a GPU kernel would run."""

from __future__ import annotations

import pytest
import torch

import seqdsl
from seqdsl.ir.key import dense_at, kernel_key
from seqdsl.lower import backends, paths
from seqdsl.lower.backends import mamba_ssd
from seqdsl.lower.backends import reference as reference_backend
from seqdsl.lower.backends import sdpa as sdpa_backend
from seqdsl.lower.lm import build_lm
from seqdsl.lower.backends.base import BackendName, Plan
from seqdsl.lower.inputs import RecurrentInputs
from seqdsl.lower.paths import PathChooser
from seqdsl.reference.recurrent import recurrent_ref
from tests.ir.test_support import _library_key
from tests.spec_library import SPECS_DIR


def _inputs(T: int, H: int = 2, K: int = 8, V: int = 8) -> RecurrentInputs:
    g = torch.Generator().manual_seed(0)
    rnd = lambda *shape: torch.randn(*shape, generator=g, dtype=torch.float64)
    return RecurrentInputs(q=rnd(1, T, H, K), k=rnd(1, T, H, K), v=rnd(1, T, H, V),
                           log_decay=-torch.rand(1, T, H, generator=g, dtype=torch.float64))


class _Recorder:
    @staticmethod
    def what(op):
        return "stand-in"

    def __init__(self):
        self.calls = []

    def recur(self, key, op, m, S, *, step_checked=False):
        self.calls.append(op)
        return m.v, S


def test_a_recurrent_call_runs_the_planned_backend(monkeypatch):
    recorder = _Recorder()
    monkeypatch.setitem(backends.RECURRENT, BackendName.FLA, recorder)
    chooser = PathChooser(_library_key("mamba2"), "mamba2")
    planned = Plan(BackendName.FLA, "fla.chunk_simple_gla", "planned")
    monkeypatch.setattr(chooser, "plan", lambda device, dtype=None: planned)
    for T in (5, 1):  # a chunk and a decoding step: the plan decides both
        chooser.recurrent(_inputs(T), None)
    assert recorder.calls == ["fla.chunk_simple_gla"] * 2
    assert chooser.describe()["cpu"] == planned


def test_the_mamba_backend_runs_an_unchecked_decoding_step_on_the_reference_step():
    """The SSD kernels take chunks: one token runs recurrent_ref unless the state-update kernel
    passed its self-check (here: no mamba-ssm, so it never ran)."""
    key = _library_key("mamba2")
    m = _inputs(1)
    S = torch.randn(1, 2, 8, 8, dtype=torch.float64)
    o, S1 = backends.MAMBA.recur(key, "mamba.ssd", m, S)
    o_ref, S1_ref = recurrent_ref(m.q, m.k, m.v, log_decay=m.log_decay, initial_state=S)
    assert torch.equal(o, o_ref) and torch.equal(S1, S1_ref)


def test_every_backend_runs_one_family_or_both():
    assert set(backends.ATTENTION) | set(backends.RECURRENT) == set(BackendName)
    # the Triton backend runs the selection kernels and the delta rule's state passing
    assert set(backends.ATTENTION) & set(backends.RECURRENT) == {BackendName.REFERENCE, BackendName.TRITON}


def test_the_mamba_backend_refuses_only_for_a_missing_mamba_ssm(monkeypatch):
    """No machine is known where mamba-ssm's SSD kernels refuse (the stub that said so is gone);
    the self-check judges the rest."""
    assert not hasattr(mamba_ssd, "known_refusal")
    key = _library_key("mamba2")
    monkeypatch.setattr(mamba_ssd, "importable", lambda: "mamba-ssm is not importable here (test)")
    assert backends.MAMBA.known_refusal(key, "mamba.ssd") == "mamba-ssm is not importable here (test)"
    monkeypatch.setattr(mamba_ssd, "importable", lambda: "")
    assert backends.MAMBA.known_refusal(key, "mamba.ssd") == ""


# --- issue 20.9: a restriction that covers the context is planned as dense attention -----------------


def _lm(slots: str, context: int, seed: int = 0):
    text = (f"mixer a {{ heads = 2  head_dim = 16  position = rope  {slots} }}\n"
            f"model m {{ layers = 1  d_model = 32  vocab = 16  context = {context}  mixer = a }}\n")
    torch.manual_seed(seed)
    return build_lm(seqdsl.loads(text).program, "m").double()


@pytest.mark.parametrize("slots, reason", [
    ("visibility = window(4096)", "dense: window(4096) covers the 2048-token context: softmax attention, "
                                  "is_causal (past 4096 tokens: an explicit mask)"),
    ("select = top(1, over=chunk(4096))", "dense: chunk(4096) covers the 2048-token context: softmax attention, "
                                          "is_causal (past 8192 tokens: the reference top-k)"),
    ("select = top(2048)", "dense: top(2048) keeps every key of the 2048-token context: softmax attention, "
                           "is_causal (past 2048 tokens: the reference top-k)"),
])
def test_a_restriction_covering_the_context_is_planned_as_dense_attention(slots, reason):
    """window(4096) at a 2048 context was planned on sdpa.mask, chunk(4096) and top(2048) on the
    reference; each is causal attention within the context, and the plan says why."""
    with torch.device("meta"):
        lm = _lm(slots, 2048)
    ((_, _, path, why),) = lm.describe_paths("cpu")
    assert (path, why) == ("sdpa.causal", reason)
    assert lm.blocks[0].mixer.paths.plan("cuda").reason.startswith(reason.split(": softmax")[0])


def test_the_dense_fact_stops_one_token_past_the_restrictions_reach():
    """By hand: top(1, over=chunk(8)) with the local chunk attends every key while a query has at
    most one earlier chunk, i.e. for sequences of up to 16 tokens; window(16) up to 16."""
    def key(slots):
        return _lm(slots, 16).blocks[0].mixer.key

    assert dense_at(key("select = top(1, over=chunk(8))"), 16).upto == 16
    assert dense_at(key("select = top(1, over=chunk(8))"), 17) is None
    assert dense_at(key("select = top(2, over=chunk(8), local=false)"), 16).upto == 16
    assert dense_at(key("select = top(1, over=chunk(8), local=false)"), 16) is None
    assert dense_at(key("visibility = window(16)"), 16).upto == 16
    assert dense_at(key("visibility = window(15)"), 16) is None
    assert dense_at(key("visibility = full"), 16) is None  # plain attention: nothing to say
    recurrent = kernel_key(seqdsl.loads("mixer r { weights = linear }").program.mixer("r"), 64)
    assert dense_at(recurrent, 16) is None


@pytest.mark.parametrize("slots", ["select = top(1, over=chunk(8))", "select = top(2, over=chunk(8), local=false)",
                                   "select = top(12)", "visibility = window(12)"])
def test_the_dense_reach_is_where_the_oracle_stops_being_full_attention(slots):
    """The fact against the oracle: with the same weights, the forced reference of the mixer
    equals the forced reference of full attention on `upto` tokens and differs on upto + 1
    (the last query then loses a key)."""
    sel, full = _lm(slots, 8), _lm("visibility = full", 8)
    upto = dense_at(sel.blocks[0].mixer.key, 8).upto
    full.load_state_dict(sel.state_dict())
    paths.set_path(sel, "reference")
    paths.set_path(full, "reference")
    tokens = torch.randint(0, 16, (2, upto + 1), generator=torch.Generator().manual_seed(1))
    a, b = sel(tokens[:, :upto])[0], full(tokens[:, :upto])[0]
    assert torch.allclose(a, b, rtol=0, atol=1e-12)
    a, b = sel(tokens)[0], full(tokens)[0]
    assert not torch.allclose(a[:, upto], b[:, upto], atol=1e-6)


class _Spy:
    def __init__(self, monkeypatch):
        self.calls = []
        sdpa, ref = sdpa_backend._sdpa, reference_backend.attention_reference

        def spy_sdpa(key, m, path):
            self.calls.append(("sdpa", key.family, key.visibility, path))
            return sdpa(key, m, path)

        def spy_ref(key, m):
            self.calls.append(("reference", key.family, key.visibility, None))
            return ref(key, m)

        monkeypatch.setattr(sdpa_backend, "_sdpa", spy_sdpa)
        monkeypatch.setattr(reference_backend, "attention_reference", spy_ref)


def _forward_backward(lm, tokens):
    lm.zero_grad()
    out = lm(tokens)[0]
    out.square().sum().backward()
    return out.detach(), {n: p.grad.clone() for n, p in lm.named_parameters()}


@pytest.mark.parametrize("slots, past", [
    ("visibility = window(16)", ("sdpa", "softmax", "window", "sdpa.mask")),
    ("visibility = chunk_local(16)", ("sdpa", "softmax", "chunk_local", "sdpa.mask")),
    ("select = top(16)", ("reference", "select", "full", None)),
    ("select = top(1, over=chunk(8))", ("reference", "select", "full", None)),
    ("select = top(2, over=chunk(8), local=false)", ("reference", "select", "full", None)),
    ("select = top(16, grad=none)", ("reference", "select", "full", None)),
])
def test_dense_plans_run_sdpa_within_reach_and_the_restriction_past_it(slots, past, monkeypatch):
    """At a 16-token context each mixer runs SDPA with is_causal on 16 tokens, with the forced
    reference's outputs and every parameter gradient (float64); on 24 tokens, past its reach,
    the window is masked and the selection runs its reference, again as the forced reference."""
    spy = _Spy(monkeypatch)
    lm = _lm(slots, 16)
    g = torch.Generator().manual_seed(2)
    for T, expected in ((16, ("sdpa", "softmax", "full", "sdpa.causal")), (24, past)):
        tokens = torch.randint(0, 16, (2, T), generator=g)
        spy.calls.clear()
        out, grads = _forward_backward(lm, tokens)
        assert set(spy.calls) == {expected}, spy.calls
        paths.set_path(lm, "reference")
        ref_out, ref_grads = _forward_backward(lm, tokens)
        paths.set_path(lm, None)
        assert torch.allclose(out, ref_out, rtol=0, atol=1e-10)
        for name, grad in grads.items():
            assert torch.allclose(grad, ref_grads[name], rtol=1e-9, atol=1e-10), (T, name)


def test_described_paths_are_the_plans_the_calls_took_not_the_display_plan(monkeypatch):
    """A training run logs `describe_paths` after its first step. A self-check that fails only for
    the dtype training runs in (fla refuses odd value widths in bfloat16) sends the calls to the
    reference, while the display plan (no dtype, no self-check) still names the fast op: the
    description must be what ran."""
    real = PathChooser._make_plan

    def make_plan(self, device, dtype):
        if dtype is None:
            return Plan(BackendName.FLA, "fla.chunk_simple_gla", "display: after a self-check")
        return real(self, device, dtype)

    monkeypatch.setattr(PathChooser, "_make_plan", make_plan)
    lm = _lm("weights = linear", 64)
    ((_, _, before, _),) = lm.describe_paths("cpu")
    assert before == "fla.chunk_simple_gla"  # nothing ran yet: the static plan
    lm(torch.zeros(1, 8, dtype=torch.long))
    ((_, _, after, why),) = lm.describe_paths("cpu")
    ran = lm.blocks[0].mixer.paths.plan("cpu", torch.float32)
    assert (after, why) == (ran.op, ran.reason) and after == "reference.chunked"


def test_plan_paths_makes_every_plan_and_runs_no_planned_kernel(monkeypatch):
    """`LanguageModel.plan_paths` plans each mixer with a two-token forward whose mixers then run
    the reference: the planned kernel is not run (compiled, autotuned) for two tokens. The next
    call runs it."""
    recorder = _Recorder()
    monkeypatch.setitem(backends.RECURRENT, BackendName.FLA, recorder)
    lm = build_lm(seqdsl.load(SPECS_DIR / "mamba2.seq").program, preset="tiny")
    planned = Plan(BackendName.FLA, "fla.chunk_simple_gla", "planned")
    for mixer in lm.mixers():
        monkeypatch.setattr(mixer.paths, "plan", lambda device, dtype=None: planned)
    lm.plan_paths("cpu")
    assert recorder.calls == []
    assert all(mixer.paths.describe()["cpu"] == planned and not mixer.paths.planning_only for mixer in lm.mixers())
    lm(torch.zeros(1, 3, dtype=torch.long))
    assert recorder.calls == ["fla.chunk_simple_gla"] * len(lm.mixers())
