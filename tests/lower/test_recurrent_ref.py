"""The recurrent-family reference: against fla's pure-PyTorch naive references, and against itself.

Layout as in seqdsl/reference/recurrent.py: q, k (B, T, H, Dk), v (B, T, H, Dv), state
(B, H, Dk, Dv). Everything of ours runs in float64 (the golden). fla's naive references cast their
inputs to float32 inside, so comparisons with them allow float32 rounding accumulated over T steps;
comparisons among our own forms allow float64 rounding only.

fla's naive files are loaded straight from their paths: they need only torch and einops, while
`import fla` pulls in the whole library (Triton probing included) and costs seconds.
"""

from __future__ import annotations

import importlib.util

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from seqdsl.ir.key import feature_width
from seqdsl.reference.features import feature_map
from seqdsl.reference.recurrent import (
    STATE_GROUP, _pass_states, _scores, _sub_chunk, _unit_lower_inverse, _vector_block, chunked_ref, parallel_ref,
    recurrent_ref)
from tests.oracles.fla import fla_root

F64 = torch.float64
FP32_TOL = 2e-5  # relative: float32 eps (1.2e-7) x ~100 steps of accumulation, with margin
FP64_TOL = 1e-10  # relative: float64 eps (2.2e-16) x the same, with a wide margin
LENGTHS = (1, 7, 63, 100)

# Architecture -> (update rule, decay granularity). "bonus" is the additive rule with RWKV-6's u.
CASES = {
    "linear_attention": ("additive", None),
    "mamba2": ("additive", "scalar"),
    "gla": ("additive", "vector"),
    "rwkv6": ("bonus", "vector"),
    "deltanet": ("delta", None),
    "gated_deltanet": ("delta", "scalar"),
    "delta_vector_decay": ("delta", "vector"),
    "rwkv7": ("rwkv7", "vector"),
    "rwkv7_scalar_decay": ("rwkv7", "scalar"),
}


def fla_naive(relpath: str, name: str):
    """A function from fla/ops/<relpath>; a missing fla or function fails the test (fla is in the
    dev extra: a skip here would silently drop an oracle)."""
    path = fla_root() / "ops" / relpath
    if not path.exists():
        pytest.fail(f"fla has no {path} in this version; bound flash-linear-attention in pyproject.toml to a release that has it", pytrace=False)
    mod_spec = importlib.util.spec_from_file_location(f"_fla_naive_{abs(hash(path))}", path)
    module = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(module)
    return getattr(module, name)


def make_inputs(case: str, B=2, T=7, H=2, Dk=4, Dv=3, seed=0, state=True, dtype=F64) -> dict:
    """Random inputs for a CASES entry, in the ranges each architecture produces."""
    rule, decay = CASES[case]
    gen = torch.Generator().manual_seed(seed)
    randn = lambda *shape: torch.randn(*shape, generator=gen, dtype=dtype)
    rand = lambda *shape: torch.rand(*shape, generator=gen, dtype=dtype)
    x = {"q": randn(B, T, H, Dk), "k": randn(B, T, H, Dk), "v": randn(B, T, H, Dv)}
    if rule in ("delta", "rwkv7"):  # the delta rules expect unit keys
        x["k"] = F.normalize(x["k"], dim=-1)
    # log-sigmoid gates: log decays in (-inf, 0), mostly within [-5, 0], as Mamba/GLA produce
    if decay == "scalar":
        x["log_decay"] = F.logsigmoid(2 * randn(B, T, H) + 1)
    elif decay == "vector":
        x["log_decay"] = F.logsigmoid(2 * randn(B, T, H, Dk) + 1)
    if rule == "bonus":
        x["bonus"] = randn(H, Dk)
    if rule == "delta":
        x["beta"] = rand(B, T, H)
    if rule == "rwkv7":
        x["a"], x["kappa"] = rand(B, T, H, Dk), F.normalize(randn(B, T, H, Dk), dim=-1)
    if state:
        x["initial_state"] = randn(B, H, Dk, Dv)
    return x


def run(form, case: str, x: dict, **extra):
    rule = CASES[case][0]
    update = "additive" if rule == "bonus" else rule
    if form is parallel_ref:
        return parallel_ref(**x, **extra)
    return form(**x, update=update, **extra)


def assert_near(ours, ref, tol, what=""):
    """max |ours - ref| <= tol * max(1, max |ref|): error measured against the reference's scale."""
    ref = ref.to(ours.dtype)
    err = (ours - ref).abs().max().item() if ours.numel() else 0.0
    scale = max(1.0, ref.abs().max().item() if ref.numel() else 0.0)
    assert err <= tol * scale, f"{what}: max error {err:.3g} > {tol:.1g} x scale {scale:.3g}"


def outputs_and_grads(fn, x: dict, seed=1, float32=False):
    """fn(leaves) -> (o, state or None); returns o, state and d(loss)/d(leaf) for every leaf.
    float32: fn sees the leaves cast to float32 (differentiably: gradients reach the leaves)."""
    leaves = {n: t.detach().clone().requires_grad_() for n, t in x.items()}
    o, S = fn({n: t.float() for n, t in leaves.items()} if float32 else leaves)
    o, S = o.to(F64), (None if S is None else S.to(F64))
    gen = torch.Generator().manual_seed(seed)
    loss = (o * torch.randn(o.shape, generator=gen, dtype=o.dtype)).sum()
    if S is not None:
        loss = loss + (S * torch.randn(S.shape, generator=gen, dtype=S.dtype)).sum()
    grads = torch.autograd.grad(loss, list(leaves.values()))
    return o, S, dict(zip(leaves, grads))


def compare(ours_fn, ref_fn, x: dict, tol, with_state=True, fla=False):
    """Outputs, final states and gradients of ours_fn (float64) against ref_fn. fla=True: ref_fn is
    one of fla's naive references, which mix float32 internals with their inputs' dtype, so it
    gets float32 inputs and the float32 tolerance."""
    o1, S1, g1 = outputs_and_grads(ours_fn, x)
    o2, S2, g2 = outputs_and_grads(ref_fn, x, float32=fla)
    assert o1.shape == o2.shape
    assert_near(o1, o2, tol, "output")
    if with_state:
        assert_near(S1, S2, tol, "final state")
    for name in g1:
        assert_near(g1[name], g2[name], tol, f"grad {name}")


head_first = lambda t: t.transpose(1, 2)  # (B, T, H, D) <-> (B, H, T, D)


def time_first(result):
    """(o (B, H, T, Dv), S) from a head-first fla reference -> (o (B, T, H, Dv), S)."""
    o, S = result
    return head_first(o), S

# --- feature maps --------------------------------------------------------------------------------


def test_taylor_features_expand_exp_to_second_order():
    q, k = torch.randn(5, 6, dtype=F64), torch.randn(5, 6, dtype=F64)
    dot = (q * k).sum(-1)
    phi = (feature_map(q, "taylor") * feature_map(k, "taylor")).sum(-1)
    assert_near(phi, 1 + dot + dot**2 / 2, FP64_TOL, "taylor")


@pytest.mark.parametrize("name", ["identity", "elu1", "relu", "taylor"])
def test_feature_dim_matches_feature_map(name):
    x = torch.randn(3, 5, dtype=F64)
    phi = feature_map(x, name)
    assert phi.shape == (3, feature_width(name, 5))
    if name == "elu1":
        assert (phi > 0).all()
    if name == "relu":
        assert (phi >= 0).all()


def test_unknown_feature_map_is_an_error():
    with pytest.raises(ValueError, match="unknown feature map"):
        feature_map(torch.zeros(2), "softplus")


# --- against fla's naive references --------------------------------------------------------------


@pytest.mark.parametrize("T", LENGTHS)
def test_linear_attention_matches_fla(T):
    naive = fla_naive("linear_attn/naive.py", "naive_recurrent_linear_attn")
    x = make_inputs("linear_attention", T=T)
    compare(lambda L: recurrent_ref(**L),
            lambda L: naive(L["q"], L["k"], L["v"], scale=1.0, initial_state=L["initial_state"],
                            output_final_state=True), x, FP32_TOL, fla=True)


def test_based_taylor_matches_fla_parallel_based():
    # fla computes 1 + s q.k + (s q.k)^2 / 2 with s = D^-1/2 on q; ours feeds phi(s q), phi(k).
    naive = fla_naive("based/naive.py", "naive_parallel_based")
    x = make_inputs("linear_attention", T=63, Dk=3, state=False)
    s = x["q"].shape[-1] ** -0.5
    phi = lambda x: feature_map(x, "taylor")
    ours = lambda L: (recurrent_ref(phi(L["q"] * s), phi(L["k"]), L["v"])[0], None)
    theirs = lambda L: (head_first(naive(*map(head_first, (L["q"], L["k"], L["v"])),
                                         scale=s, use_norm=False)), None)
    compare(ours, theirs, x, FP64_TOL, with_state=False)  # fla's naive Based stays in float64


def test_retnet_matches_fla_retention():
    naive = fla_naive("retention/naive.py", "naive_retention")
    x = make_inputs("linear_attention", T=63, H=3, state=False)
    B, T, H, Dk = x["q"].shape
    gamma = 1 - 2.0 ** (-5.0 - torch.arange(H, dtype=F64))  # RetNet's per-head schedule
    log_decay = gamma.log().expand(B, T, H)
    ours = lambda L: (recurrent_ref(L["q"] * Dk**-0.5, L["k"], L["v"], log_decay=log_decay)[0],
                      None)
    theirs = lambda L: (head_first(naive(*map(head_first, (L["q"], L["k"], L["v"])))), None)
    compare(ours, theirs, x, FP32_TOL, with_state=False, fla=True)


@pytest.mark.parametrize("case,Dv", [("gla", 3), ("gla", 1)])  # Dv = 1: Mamba-1's per-channel heads
@pytest.mark.parametrize("T", LENGTHS)
def test_vector_decay_matches_fla_gla(case, Dv, T):
    naive = fla_naive("gla/naive.py", "naive_recurrent_gla")
    x = make_inputs(case, T=T, Dv=Dv)
    Dk = x["q"].shape[-1]  # fla scales q by Dk^-1/2 inside; ours takes q already scaled
    compare(lambda L: recurrent_ref(**{**L, "q": L["q"] * Dk**-0.5}),
            lambda L: naive(L["q"], L["k"], L["v"], L["log_decay"],
                            initial_state=L["initial_state"], output_final_state=True),
            x, FP32_TOL, fla=True)


@pytest.mark.parametrize("T", LENGTHS)
def test_scalar_decay_matches_fla_simple_gla(T):
    recurrent = fla_naive("simple_gla/naive.py", "naive_recurrent_simple_gla")
    chunk = fla_naive("simple_gla/naive.py", "naive_chunk_simple_gla")
    x = make_inputs("mamba2", T=T)
    args = lambda L: (L["q"], L["k"], L["v"], L["log_decay"])
    ours = lambda L: recurrent_ref(**L)
    compare(ours, lambda L: recurrent(*args(L), scale=1.0, initial_state=L["initial_state"],
                                      output_final_state=True), x, FP32_TOL, fla=True)
    compare(ours, lambda L: chunk(*args(L), scale=1.0, initial_state=L["initial_state"],
                                  output_final_state=True, chunk_size=16), x, FP32_TOL, fla=True)


@pytest.mark.parametrize("T", LENGTHS)
def test_deltanet_matches_fla_delta_rule(T):
    naive = fla_naive("delta_rule/naive.py", "delta_rule_recurrence")
    x = make_inputs("deltanet", T=T)
    Dk = x["q"].shape[-1]  # fla scales q by Dk^-1/2 inside
    theirs = lambda L: time_first(naive(*map(head_first, (L["q"], L["k"], L["v"], L["beta"])),
                                        initial_state=L["initial_state"], output_final_state=True))
    ours = lambda L: recurrent_ref(**{**L, "q": L["q"] * Dk**-0.5}, update="delta")
    compare(ours, theirs, x, FP32_TOL, fla=True)


@pytest.mark.parametrize("T", LENGTHS)
def test_gated_deltanet_matches_fla_gated_delta_rule(T):
    recurrent = fla_naive("gated_delta_rule/naive.py", "naive_recurrent_gated_delta_rule")
    chunk = fla_naive("gated_delta_rule/naive.py", "naive_chunk_gated_delta_rule")
    x = make_inputs("gated_deltanet", T=T)
    ours = lambda L: recurrent_ref(**L, update="delta")
    common = lambda L: dict(q=L["q"], k=L["k"], v=L["v"], beta=L["beta"], g=L["log_decay"],
                            scale=1.0, initial_state=L["initial_state"], output_final_state=True)
    compare(ours, lambda L: recurrent(**common(L)), x, FP32_TOL, fla=True)
    compare(ours, lambda L: chunk(**common(L), chunk_size=16), x, FP32_TOL, fla=True)


@pytest.mark.parametrize("T", LENGTHS)
def test_rwkv6_bonus_matches_fla_rwkv6(T):
    naive = fla_naive("rwkv6/recurrent_naive.py", "naive_recurrent_rwkv6")
    x = make_inputs("rwkv6", T=T)
    theirs = lambda L: time_first(naive(*map(head_first, (L["q"], L["k"], L["v"], L["log_decay"])),
                                        L["bonus"], scale=1.0, initial_state=L["initial_state"],
                                        output_final_state=True))
    compare(lambda L: recurrent_ref(**L), theirs, x, FP32_TOL, fla=True)


@pytest.mark.parametrize("T", LENGTHS)
def test_rwkv7_matches_fla_dplr(T):
    # fla's dplr: S_t = exp(gk_t) S_(t-1) + b_t (a_t^T S_(t-1)) + k_t v_t^T; RWKV-7 passes
    # a = -kappa, b = kappa * a_rate (fla.layers.rwkv7). fla scales q by Dk^-1/2 inside.
    naive = fla_naive("generalized_delta_rule/dplr/naive.py", "dplr_recurrence")
    x = make_inputs("rwkv7", T=T)
    Dk = x["q"].shape[-1]
    theirs = lambda L: time_first(naive(*map(head_first, (L["q"], L["k"], L["v"], -L["kappa"],
                                                           L["kappa"] * L["a"], L["log_decay"])),
                                        initial_state=L["initial_state"], output_final_state=True))
    ours = lambda L: recurrent_ref(**{**L, "q": L["q"] * Dk**-0.5}, update="rwkv7")
    compare(ours, theirs, x, FP32_TOL, fla=True)


# --- against itself: recurrent == chunked == parallel --------------------------------------------


@settings(max_examples=40, deadline=None, derandomize=True)
@given(case=st.sampled_from(sorted(CASES)), T=st.sampled_from(LENGTHS) | st.integers(1, 40),
       chunk=st.sampled_from([1, 3, 16, 64, 128]), Dk=st.integers(1, 5), Dv=st.integers(1, 4),
       seed=st.integers(0, 2**16), state=st.booleans())
def test_chunked_equals_recurrent(case, T, chunk, Dk, Dv, seed, state):
    x = make_inputs(case, B=1, T=T, Dk=Dk, Dv=Dv, seed=seed, state=state)
    o1, S1 = run(recurrent_ref, case, x)
    o2, S2 = run(chunked_ref, case, x, chunk_size=chunk)
    assert_near(o2, o1, FP64_TOL, "output")
    assert_near(S2, S1, FP64_TOL, "final state")


@pytest.mark.parametrize("case", sorted(CASES))
def test_chunked_gradients_equal_recurrent(case):
    x = make_inputs(case, T=63)
    compare(lambda L: run(chunked_ref, case, L, chunk_size=16),
            lambda L: run(recurrent_ref, case, L), x, FP64_TOL)


@pytest.mark.parametrize("case", ["linear_attention", "mamba2", "gla"])
@pytest.mark.parametrize("T", LENGTHS)
def test_parallel_equals_recurrent(case, T):
    x = make_inputs(case, T=T)
    compare(lambda L: run(parallel_ref, case, L), lambda L: run(recurrent_ref, case, L), x,
            FP64_TOL)


@pytest.mark.parametrize("C", [64, 33, 17, 16, 1])
def test_unit_lower_inverse_and_its_gradient_equal_autograd_through_a_solve(C):
    # the delta rules' one inverse per chunk (by halves down to 16 rows: 64 two levels, 33 halves of
    # 16 and 17, 16 one solve), its backward written by hand (two matmuls), against autograd through
    # torch's triangular solve; the diagonal and upper part are not read, so they carry garbage here
    # and get zero gradient
    gen = torch.Generator().manual_seed(C)
    lhs = torch.randn(2, 3, C, C, generator=gen, dtype=F64) / C**0.5
    lhs = lhs.requires_grad_()
    ours = _unit_lower_inverse(lhs)
    eye = torch.eye(C, dtype=F64).expand(2, 3, C, C)
    solved = torch.linalg.solve_triangular(lhs, eye, upper=False, unitriangular=True)
    assert_near(ours, solved, FP64_TOL, "inverse")
    assert_near(ours @ (lhs.detach().tril(-1) + torch.eye(C, dtype=F64)), eye, FP64_TOL, "T L = I")
    w = torch.randn(ours.shape, generator=gen, dtype=F64)
    (g_ours,) = torch.autograd.grad((ours * w).sum(), lhs)
    (g_solve,) = torch.autograd.grad((solved * w).sum(), lhs)
    assert_near(g_ours, g_solve.tril(-1), FP64_TOL, "gradient")
    assert (g_ours.triu() == 0).all()


@pytest.mark.parametrize("C", [64, 48, 30, 17])  # sub-chunks of 16, 16, 15 and 1 steps
@pytest.mark.parametrize("strict", [False, True])
def test_sub_chunked_vector_scores_equal_the_whole_decay_tensor(C, strict):
    # `_scores` builds per-channel decays within sub-chunks and splits them at the sub-chunk
    # boundary across sub-chunks; `_vector_block` builds the whole (C, C, Dk) tensor.
    gen = torch.Generator().manual_seed(C)
    x, y = (torch.randn(2, 3, C, 5, generator=gen, dtype=F64, requires_grad=True) for _ in range(2))
    g = F.logsigmoid(2 * torch.randn(2, 3, C, 5, generator=gen, dtype=F64) + 1).requires_grad_()
    G = g.cumsum(-2)
    gx = G - g if strict else G  # the two pairings chunked_ref uses: (G - g, G) and (G, G)
    ours = _scores(x, y, gx, G, strict=strict)
    whole = _vector_block(x, y, gx, G, strict)
    assert _sub_chunk(C) < C
    assert_near(ours, whole, FP64_TOL, "scores")
    w = torch.randn(ours.shape, generator=gen, dtype=F64)
    grads = torch.autograd.grad((ours * w).sum(), (x, y, g))
    for a, b in zip(grads, torch.autograd.grad((whole * w).sum(), (x, y, g))):
        assert_near(a, b, FP64_TOL, "gradient")


@pytest.mark.parametrize("case", sorted(CASES))
def test_chunk_64_gradients_equal_recurrent(case):
    # chunk 64 over 100 steps: one full chunk (four sub-chunks for per-channel decay) and a padded one
    x = make_inputs(case, T=100)
    compare(lambda L: run(chunked_ref, case, L, chunk_size=64),
            lambda L: run(recurrent_ref, case, L), x, FP64_TOL)


@pytest.mark.parametrize("case", ["mamba2", "rwkv6"])
def test_chunked_across_state_groups_equals_recurrent(case):
    # chunk 1 over 2 * STATE_GROUP + 5 steps: the closed-form states are solved in three groups
    x = make_inputs(case, T=2 * STATE_GROUP + 5)
    compare(lambda L: run(chunked_ref, case, L, chunk_size=1),
            lambda L: run(recurrent_ref, case, L), x, FP64_TOL)


@pytest.mark.parametrize("shape", [(1, 1), (3, 1), (3, 4), (8, 1), (2 * STATE_GROUP + 3, 1)],
                         ids=["one-chunk", "scalar", "vector", "power-of-two", "groups"])
@pytest.mark.parametrize("low_rank", [False, True])
def test_state_passing_equals_chunk_by_chunk_loop(shape, low_rank):
    # `_pass_states` solves S_(n+1) = (diag(exp l_n) + L_n) S_n + b_n in closed form when L = 0,
    # STATE_GROUP chunks at a time ("groups": three groups, the last one partial), and chunk by
    # chunk otherwise
    N, D = shape
    Dk, Dv = 4, 2
    gen = torch.Generator().manual_seed(N + D)
    l = -3 * torch.rand(2, N, D, generator=gen, dtype=F64) / N  # keeps early states visible at the end
    b = torch.randn(2, N, Dk, Dv, generator=gen, dtype=F64)
    S = torch.randn(2, Dk, Dv, generator=gen, dtype=F64)
    L = 0.1 * torch.randn(2, N, Dk, Dk, generator=gen, dtype=F64) if low_rank else None
    states = _pass_states(l, b, S, L)
    expected = [S]
    for n in range(N):
        decayed = l[:, n].exp()[..., None] * S
        S = decayed + (0 if L is None else L[:, n] @ S) + b[:, n]
        expected.append(S)
    assert_near(states, torch.stack(expected, dim=1), FP64_TOL, "states")


def test_strong_decay_does_not_overflow():
    # Cumulative log decay reaches -3000 over 100 steps: exp(+3000) would overflow even float64,
    # so any form that folded exp(+-G) into q and k would produce inf / NaN here.
    for case in ("mamba2", "gla", "rwkv6", "gated_deltanet", "rwkv7"):
        x = make_inputs(case, T=100)
        x["log_decay"] = -30.0 * torch.rand_like(x["log_decay"]) - 15.0
        forms = [lambda L: run(chunked_ref, case, L, chunk_size=64)]
        if CASES[case][0] == "additive":
            forms.append(lambda L: run(parallel_ref, case, L))
        for form in forms:
            o, S, grads = outputs_and_grads(form, x)
            assert all(t.isfinite().all() for t in (o, S, *grads.values())), case
            compare(form, lambda L: run(recurrent_ref, case, L), x, FP64_TOL)


# --- invariants ----------------------------------------------------------------------------------


def along_time(x: dict, f) -> dict:
    """x with f applied to every per-step input (those with a T axis), the rest unchanged."""
    return {n: (f(t) if n in ("q", "k", "v", "log_decay", "beta", "a", "kappa") else t)
            for n, t in x.items()}


FORMS_AND_CASES = [(form, case) for form in (recurrent_ref, chunked_ref, parallel_ref)
                   for case in sorted(CASES)
                   if form is not parallel_ref or CASES[case][0] == "additive"]


@pytest.mark.parametrize("form,case", FORMS_AND_CASES,
                         ids=[f"{f.__name__}-{c}" for f, c in FORMS_AND_CASES])
def test_split_with_carried_state_equals_whole(form, case):
    x = make_inputs(case, T=63)
    extra = {"chunk_size": 16} if form is chunked_ref else {}
    o, S = run(form, case, x, **extra)
    for cut in (1, 20, 62):
        first = along_time(x, lambda t: t[:, :cut])
        rest = along_time(x, lambda t: t[:, cut:])
        o1, S1 = run(form, case, first, **extra)
        o2, S2 = run(form, case, {**rest, "initial_state": S1}, **extra)
        assert_near(torch.cat([o1, o2], dim=1), o, FP64_TOL, f"output, cut {cut}")
        assert_near(S2, S, FP64_TOL, f"final state, cut {cut}")


@pytest.mark.parametrize("form", [recurrent_ref, chunked_ref], ids=lambda f: f.__name__)
@pytest.mark.parametrize("case", sorted(CASES))
def test_future_tokens_do_not_change_past_outputs(form, case):
    x = make_inputs(case, T=40)
    o, _ = run(form, case, x, **({"chunk_size": 16} if form is chunked_ref else {}))
    t0 = 21  # mid-chunk, so the chunked form's intra-chunk masks are exercised
    changed = along_time(x, lambda t: torch.cat([t[:, :t0], t[:, t0:] + 1.0], dim=1))
    o2, _ = run(form, case, changed, **({"chunk_size": 16} if form is chunked_ref else {}))
    assert torch.equal(o2[:, :t0], o[:, :t0])
    assert not torch.allclose(o2[:, t0:], o[:, t0:])


@pytest.mark.parametrize("case", sorted(CASES))
def test_float32_stays_float32_and_near_float64(case):
    x = make_inputs(case, T=63)
    o64, S64 = run(chunked_ref, case, x, chunk_size=16)
    x32 = {n: t.float() for n, t in x.items()}
    for form, extra in ((recurrent_ref, {}), (chunked_ref, {"chunk_size": 16})):
        o32, S32 = run(form, case, x32, **extra)
        assert o32.dtype == S32.dtype == torch.float32
        assert_near(o32.double(), o64, FP32_TOL, form.__name__)


def test_arguments_are_checked():
    x = make_inputs("linear_attention", T=5)
    with pytest.raises(ValueError, match="beta"):
        recurrent_ref(**x, update="delta")
    with pytest.raises(ValueError, match="kappa"):
        chunked_ref(**x, update="rwkv7")
    with pytest.raises(ValueError, match="bonus"):
        recurrent_ref(**x, update="delta", beta=x["q"][..., 0], bonus=torch.zeros(2, 4, dtype=F64))
    with pytest.raises(ValueError, match="log_decay"):
        parallel_ref(**x, log_decay=torch.zeros(3, dtype=F64))
    with pytest.raises(ValueError, match="unknown update"):
        recurrent_ref(**x, update="mamba")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("case", sorted(CASES))
def test_cuda_matches_cpu(case):
    x = make_inputs(case, T=100)
    cuda = {n: t.cuda() for n, t in x.items()}
    for form, extra in ((recurrent_ref, {}), (chunked_ref, {"chunk_size": 64})):
        o, S = run(form, case, x, **extra)
        o_gpu, S_gpu = run(form, case, cuda, **extra)
        assert o_gpu.is_cuda and S_gpu.is_cuda
        assert_near(o_gpu.cpu(), o, FP64_TOL, f"{form.__name__} output")
        assert_near(S_gpu.cpu(), S, FP64_TOL, f"{form.__name__} final state")
