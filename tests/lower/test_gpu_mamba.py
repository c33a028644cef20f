"""On a GPU with mamba-ssm installed, the mamba-ssm SSD path (seqdsl/lower/backends/mamba_ssd.py) equals
the reference recurrence in outputs, final state and the gradient of every input, for the keys of
Mamba-2, its ablations and RetNet; a prefill on it hands its state on exactly; its decoding steps
(mamba-ssm's selective_state_update) equal the reference step, and generate() on the mamba paths
picks the reference's tokens. Mamba-1's selective scan (seqdsl/lower/backends/mamba_scan.py)
equals the reference's selective step likewise, from an initial state, its decoding steps on
selective_state_update equal the reference step, and a Mamba-1 model trains and generates on
them. Skipped without CUDA or mamba-ssm (benchmarks/build_mamba_ssm.py builds it)."""

from __future__ import annotations

import warnings

import pytest
import torch

from seqdsl.lower.backends import mamba_scan, mamba_ssd
from seqdsl.lower.lm import LanguageModel
from seqdsl.lower.backends.reference import recurrent_reference
from seqdsl.lower.inputs import RecurrentInputs
from seqdsl.lower.paths import set_path
from tests.ir.test_support import _library_key
from tests.spec_library import SPECS_DIR, spec_model

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
    pytest.mark.skipif(torch.cuda.is_available() and bool(mamba_ssd.importable()),
                       reason="mamba-ssm is not importable here (benchmarks/build_mamba_ssm.py --install builds it)"),
]

SSD_SPECS = ["mamba2", "mamba2_no_decay", "mamba2_no_conv", "mamba2_no_groupnorm", "mamba2_rope",
             "mamba2_alibi", "retnet"]


def _inputs(key, T: int, dtype=torch.float32):
    """q and k per group (B, T, G, K), as the projections make them; v, log decay, state."""
    g = torch.Generator().manual_seed(0)
    rnd = lambda *s: torch.randn(*s, generator=g).cuda().to(dtype)
    B, H, G, K, V = 2, key.heads, mamba_ssd.groups(key), key.feature_dim, key.value_cols
    log_decay = None if key.decay_shape == "none" else -torch.rand(B, T, H, generator=g).cuda() * 0.3
    m = RecurrentInputs(q=rnd(B, T, G, K) * key.scale, k=rnd(B, T, G, K), v=rnd(B, T, H, V), log_decay=log_decay)
    return m, rnd(B, H, K, V).float() * 0.1


def _heads(key, m: RecurrentInputs) -> RecurrentInputs:
    """Each group's q and k repeated over its heads (MixerModule._heads)."""
    r = key.heads // m.q.shape[2]
    return RecurrentInputs(q=m.q.repeat_interleave(r, dim=2), k=m.k.repeat_interleave(r, dim=2), v=m.v,
                           log_decay=m.log_decay)


def _rel(x, y) -> float:
    return ((x.double() - y.double()).norm() / (y.double().norm() + 1e-30)).item()


@pytest.fixture
def no_tf32():
    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32 = saved


def _forward_backward(fn, key, m, S):
    leaves = {f: getattr(m, f).detach().clone().requires_grad_() for f in ("q", "k", "v", "log_decay")
              if getattr(m, f) is not None}
    S = S.detach().clone().requires_grad_()
    o, S_out = fn(key, _heads(key, RecurrentInputs(**leaves)), S)
    (o.float().square().sum() + S_out.float().square().sum()).backward()
    return [o, S_out] + [t.grad for t in leaves.values()] + [S.grad]


@pytest.mark.parametrize("name", SSD_SPECS)
def test_mamba_ssd_matches_the_reference_with_every_gradient(name, no_tf32):
    key = _library_key(name)
    m, S = _inputs(key, T=600)  # over two of mamba's 256-step chunks, not a multiple of them
    fast = _forward_backward(mamba_ssd.run, key, m, S)
    ref = _forward_backward(lambda k, mm, s: recurrent_reference(k, mm, s, False), key, m, S)
    what = ["output", "state", "dq", "dk", "dv", "dlog_decay", "dS0"][:len(ref) - 1] + ["dS0"]
    errors = {w: _rel(x, y) for w, x, y in zip(what, fast, ref)}
    print(f"\n{name}: " + ", ".join(f"{w} {e:.1e}" for w, e in errors.items()))
    # Triton's float32 dots run as tf32 inside mamba's kernels: ~1e-3 relative
    assert errors["output"] < 5e-3 and errors["state"] < 5e-3, errors
    assert all(e < 2e-2 for e in errors.values()), errors


def test_mamba_prefill_state_continues_exactly():
    key = _library_key("mamba2")
    m, S = _inputs(key, T=500)
    m = _heads(key, m)
    part = lambda t0, t1: RecurrentInputs(**{f: getattr(m, f)[:, t0:t1] for f in ("q", "k", "v", "log_decay")})
    o1, S1 = mamba_ssd.run(key, part(0, 300), S)
    o2, S2 = mamba_ssd.run(key, part(300, 500), S1)
    o, S_all = mamba_ssd.run(key, m, S)
    assert _rel(torch.cat([o1, o2], dim=1), o) < 1e-3 and _rel(S2, S_all) < 1e-3


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_mamba_self_check_passes_here(dtype):
    key = _library_key("mamba2")
    ok, detail = mamba_ssd.self_check(dtype, torch.device("cuda"), key.feature_dim, key.value_cols,
                                        mamba_ssd.groups(key), key.heads, True)
    assert ok, detail


@pytest.mark.parametrize("name", SSD_SPECS)
def test_mamba_decoding_steps_match_the_reference_step(name):
    """Five chained steps of three sequences through selective_state_update, from a state."""
    key = _library_key(name)
    g = torch.Generator().manual_seed(0)
    B, H, G, K, V, T = 3, key.heads, mamba_ssd.groups(key), key.feature_dim, key.value_cols, 5
    rnd = lambda *s: torch.randn(*s, generator=g).cuda()
    grouped = lambda: rnd(B, T, G, K).repeat_interleave(H // G, dim=2)
    log_decay = None if key.decay_shape == "none" else -torch.rand(B, T, H, generator=g).cuda() * 0.3
    m = RecurrentInputs(q=grouped() * key.scale, k=grouped(), v=rnd(B, T, H, V), log_decay=log_decay)
    S = S_ref = rnd(B, H, K, V) * 0.1
    for t in range(T):
        one = RecurrentInputs(q=m.q[:, t:t + 1], k=m.k[:, t:t + 1], v=m.v[:, t:t + 1],
                              log_decay=None if log_decay is None else log_decay[:, t:t + 1])
        with torch.no_grad():
            o, S = mamba_ssd.step(key, one, S)
            o_ref, S_ref = recurrent_reference(key, one, S_ref, True)
        errors = (_rel(o, o_ref), _rel(S, S_ref))
        assert max(errors) < 1e-4, (t, errors)  # float32 throughout, no tensor-core dots
    print(f"\n{name}: step output {errors[0]:.1e}, state {errors[1]:.1e}")


def test_generate_on_the_mamba_paths_picks_the_reference_tokens(no_tf32, monkeypatch):
    """A prefill on the SSD kernel, then decoding steps on selective_state_update: every token
    generate() picks is the reference's greedy choice (up to a tie within 1e-3 of the logit
    range), and the decoding logits on both paths agree."""
    program, model = spec_model(SPECS_DIR / "mamba2.seq", vocab=256)
    torch.manual_seed(0)
    lm = LanguageModel(program, model).cuda()
    calls = []
    real_step = mamba_ssd.step
    monkeypatch.setattr(mamba_ssd, "step", lambda *a: calls.append(1) or real_step(*a))
    prompt = torch.randint(0, 256, (2, 300), device="cuda")  # over one 256-step chunk
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tokens = lm.generate(prompt, 12)
    assert not [str(w.message) for w in caught if "seqdsl" in str(w.message)]  # no fallback hides here
    plans = [block.mixer.paths.describe()["cuda"] for block in lm.blocks]
    assert all(p.op == "mamba.ssd" and "selective_state_update, self-checked" in p.reason for p in plans), plans
    assert len(calls) == 12 * len(lm.blocks)  # every decoding step of every layer ran the kernel
    with torch.no_grad():
        fast_logits = _decode_logits(lm, tokens, prompt.shape[1])
        set_path(lm, "reference")
        ref_logits = _decode_logits(lm, tokens, prompt.shape[1])
    assert _rel(fast_logits, ref_logits) < 5e-3  # the prefill's tf32 dots inside mamba's kernels
    picked = ref_logits[:, :-1].gather(-1, tokens[:, prompt.shape[1]:, None])[..., 0]
    best, spread = ref_logits[:, :-1].max(-1).values, ref_logits.amax(-1) - ref_logits.amin(-1)
    assert (picked >= best - 1e-3 * spread[:, :-1]).all()


def _decode_logits(lm, tokens, prompt_len: int):
    """The logits at the last prompt position and after each later token fed one at a time."""
    logits, state = lm(tokens[:, :prompt_len])
    out = [logits[:, -1]]
    for t in range(prompt_len, tokens.shape[1]):
        logits, state = lm(tokens[:, t:t + 1], state)
        out.append(logits[:, -1])
    return torch.stack(out, dim=1).float()


# --- Mamba-1: the selective scan ------------------------------------------------------------------------


def _selective_forward_backward(fn, inputs):
    leaves = [t.detach().clone().requires_grad_() for t in inputs]
    o, S = fn(*leaves)
    (o.float().square().sum() + S.float().square().sum()).backward()
    return [o, S] + [t.grad for t in leaves]


def test_mamba1_selective_scan_matches_the_reference_with_every_gradient(no_tf32):
    key = _library_key("mamba")
    assert mamba_ssd.groups(key) == 1 and key.decay_shape == "selective"
    # 64 of Mamba-1's channels (heads of width 1), its 16-entry state, over 600 steps, from a state
    inputs = mamba_scan._inputs(key.feature_dim, key.value_cols, 1, 64, torch.float32,
                                          torch.device("cuda"), T=600)
    fast = _selective_forward_backward(mamba_scan._fast, inputs)
    ref = _selective_forward_backward(mamba_scan.reference, inputs)
    what = ["output", "state", "dq", "dk", "dv", "ddt", "drate", "dS0"]
    errors = {w: _rel(x, y) for w, x, y in zip(what, fast, ref)}
    print("\nmamba (selective scan): " + ", ".join(f"{w} {e:.1e}" for w, e in errors.items()))
    assert all(e < 1e-3 for e in errors.values()), errors  # float32 throughout, no tensor-core dots


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_mamba1_selective_scan_self_check_passes_here(dtype):
    key = _library_key("mamba")
    ok, detail = mamba_scan.self_check(dtype, torch.device("cuda"), key.feature_dim, key.value_cols,
                                                 mamba_ssd.groups(key), key.heads)
    assert ok, detail


def test_mamba1_decoding_steps_match_the_reference_step():
    key = _library_key("mamba")
    for dtype in (torch.float32, torch.bfloat16):
        ok, detail = mamba_ssd.step_self_check(dtype, torch.device("cuda"), key.feature_dim, key.value_cols,
                                                 mamba_ssd.groups(key), key.heads, "selective",
                                                 mamba_scan.grouped_step)
        assert ok, (dtype, detail)
    inputs, S = mamba_ssd._step_inputs(key.feature_dim, key.value_cols, 1, 64, "selective", torch.float32,
                                         torch.device("cuda"), steps=5)
    S_ref = S
    for t in range(5):
        one = RecurrentInputs(q=inputs.q[:, t:t + 1], k=inputs.k[:, t:t + 1], v=inputs.v[:, t:t + 1],
                              dt=inputs.dt[:, t:t + 1], rate=inputs.rate)
        with torch.no_grad():
            o, S = mamba_scan.step(key, one, S)
            o_ref, S_ref = recurrent_reference(key, one, S_ref, True)
        errors = (_rel(o, o_ref), _rel(S, S_ref))
        assert max(errors) < 1e-4, (t, errors)
    print(f"\nmamba: step output {errors[0]:.1e}, state {errors[1]:.1e}")


def test_a_mamba1_model_trains_and_generates_on_the_selective_scan(no_tf32, monkeypatch):
    """Logits and every parameter gradient equal the reference's; then generate(): a prefill on
    the scan, decoding steps on selective_state_update, the reference's tokens."""
    program, model = spec_model(SPECS_DIR / "mamba.seq", vocab=256)
    torch.manual_seed(0)
    lm = LanguageModel(program, model).cuda()
    tokens = torch.randint(0, 256, (2, 300), device="cuda")
    calls = []
    real_step = mamba_scan.step
    monkeypatch.setattr(mamba_scan, "step", lambda *a: calls.append(1) or real_step(*a))

    def logits_and_grads():
        lm.zero_grad()
        logits, _ = lm(tokens)
        logits.float().square().mean().backward()
        return logits.detach(), {n: p.grad.detach().clone() for n, p in lm.named_parameters() if p.grad is not None}

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fast, fast_grads = logits_and_grads()
        generated = lm.generate(tokens[:, :200], 10)
    assert not [str(w.message) for w in caught if "seqdsl" in str(w.message)]
    plans = [block.mixer.paths.describe()["cuda"] for block in lm.blocks]
    assert all(p.op == "mamba.selective_scan" and "selective_state_update, self-checked" in p.reason
               for p in plans), plans
    assert len(calls) == 10 * len(lm.blocks)
    set_path(lm, "reference")
    ref, ref_grads = logits_and_grads()
    assert _rel(fast, ref) < 1e-4
    assert max(_rel(fast_grads[n], ref_grads[n]) for n in ref_grads) < 1e-3
    with torch.no_grad():
        ref_logits = _decode_logits(lm, generated, 200)
    picked = ref_logits[:, :-1].gather(-1, generated[:, 200:, None])[..., 0]
    best, spread = ref_logits[:, :-1].max(-1).values, ref_logits.amax(-1) - ref_logits.amin(-1)
    assert (picked >= best - 1e-3 * spread[:, :-1]).all()


# --- compiled models on the mamba paths -------------------------------------------------------------


@pytest.mark.parametrize("name,path", [("mamba2", "mamba.ssd"), ("mamba", "mamba.selective_scan")])
def test_a_model_on_the_mamba_paths_compiles_as_one_graph_and_equals_eager(name, path, no_tf32):
    """The custom ops around mamba's kernels keep the model body one graph under inductor (it
    once failed to compile the SSD mapping's cumulative sum, and broke the graph at Mamba-1's C++
    scan); the compiled body's loss and gradients equal the eager model's."""
    import torch._dynamo

    program, model = spec_model(SPECS_DIR / f"{name}.seq", vocab=256)
    torch.manual_seed(0)
    lm = LanguageModel(program, model).cuda()
    lm.plan_paths(torch.device("cuda"))
    assert {block.mixer.paths.describe()["cuda"].op for block in lm.blocks} == {path}
    x = torch.randint(0, 256, (2, 300), device="cuda")  # over one of the SSD's 256-step chunks
    torch._dynamo.reset()
    explained = torch._dynamo.explain(lm.training_hidden)(x)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0), explained.break_reasons

    def loss_and_grads(body):
        lm.zero_grad(set_to_none=True)
        loss = body(x).float().square().mean()
        loss.backward()
        return loss.detach(), [p.grad.detach().clone() for p in lm.parameters() if p.grad is not None]

    torch._dynamo.reset()
    want_loss, want = loss_and_grads(lm.training_hidden)
    got_loss, got = loss_and_grads(torch.compile(lm.training_hidden, fullgraph=True))
    assert len(got) == len(want) > 0
    assert _rel(got_loss, want_loss) < 1e-3
    assert max(_rel(g, w) for g, w in zip(got, want)) < 2e-2  # inductor's fusions reorder float sums
