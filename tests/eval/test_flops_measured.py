"""FLOPs per token (seqdsl/ir/flops.py) against counts made without it, for every spec in the
library, and the MFU that training reports from them.

Each spec is lowered at the `tiny` preset with its windows and chunks cut to 16 tokens
(tests/spec_library.py: `shrunk_spec_model`), so that a 64-token sequence makes windows exclude
keys and Top-1 chunk queries choose among several chunks. Then, per part of the count:

- dense layers (projections, MLP, head): measured by `torch.utils.flop_counter.FlopCounterMode`
  on the lowered model's forward and backward, with stage (3) of every mixer replaced by a
  stand-in that does no arithmetic but keeps q, k, v and the other stage-(3) inputs in the graph
  (so every projection's backward runs). The causal conv is a sum over taps (elementwise, which
  flop_counter does not see): counted by hand, 2 x channels x taps per token.
- softmax attention: flop_counter on the reference (`seqdsl.reference.attention`), on inputs of
  the shapes the model gave stage (3). The reference materialises all T x T scores, so the
  measured count is a per-(query, key) cost times T^2; the algorithm's count is that cost times
  the (query, key) pairs the reference's own visibility mask lets through.
- Top-1 element and chunk selection: the reference also materialises every score, which only
  confirms the per-product costs (2 H F per score, 2 H Dv per value); the work of the algorithm
  is counted by hand here, by enumerating for every query the keys it scores and attends
  (docs/flops.md's conventions, written out position by position rather than in closed form).
- the recurrent family: the chunk-parallel algorithm of flash-linear-attention's kernels is
  executed here for rule (1) (checked equal to the step-by-step reference) and measured by
  flop_counter; decays are elementwise and do not change its products. The delta rule's, RWKV-7's
  and RWKV-6's extra products are counted by hand, product by product.

Tolerance: every count is a sum of integer products (the triangular inverse's C^3/3 aside), exact
in float64 at these sizes, so counts are compared at rel=1e-12: the slack only absorbs the
division by the sequence length. A dropped or doubled term is off by far more.
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from seqdsl.ir.flops import Flops, flops_per_token, mixing_flops
from seqdsl.lower import paths as paths_module
from seqdsl.lower.lm import LanguageModel
from seqdsl.lower.paths import set_path
from seqdsl.reference.attention import repeat_heads, visibility_mask
from seqdsl.reference.recurrent import recurrent_ref
from seqdsl.train.throughput import mfu_meter
from tests.spec_library import SPEC_FILES, SPEC_IDS, at_most_heads, shrunk_spec_model

T = 64  # training context of the measured models: 4 windows / chunks of SHRINK tokens
SHRINK = 16
REL = 1e-12
RECURRENT_CHUNK = 64  # flash-linear-attention's chunk size, which the count follows (docs/flops.md)


def counted(fn) -> int:
    with FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops()


def tensor_fields(m) -> list[torch.Tensor]:
    return [t for t in (getattr(m, f.name) for f in dataclasses.fields(m)) if isinstance(t, torch.Tensor)]


# --- measuring a lowered model ----------------------------------------------------------------------


@dataclasses.dataclass
class ModelCount:
    dense: Flops  # all of the model but stage (3), measured, per sequence
    stage3: list  # per mixer layer, in order: (PathChooser, the inputs it was given)


def measure_model(lm: LanguageModel, tokens: torch.Tensor, monkeypatch) -> ModelCount:
    """The model's FLOPs with stage (3) stood in for (see the module doc), and stage (3)'s inputs."""
    calls = []

    def attention(chooser, m):
        calls.append((chooser, m))
        keep = sum(t.sum() for t in tensor_fields(m) if t is not m.v and t.requires_grad)
        return repeat_heads(m.v, chooser.key.heads) + 0 * keep

    def recurrent(chooser, m, S):
        calls.append((chooser, m))
        keep = sum(t.sum() for t in tensor_fields(m) if t is not m.v and t.requires_grad)
        return m.v + 0 * keep, None

    with monkeypatch.context() as patch:
        patch.setattr(paths_module.PathChooser, "attention", attention)
        patch.setattr(paths_module.PathChooser, "recurrent", recurrent)
        out = {}
        forward = counted(lambda: out.update(logits=lm(tokens)[0]))
        backward = counted(lambda: out["logits"].sum().backward())
    return ModelCount(Flops(forward, backward), calls)


REAL_ATTENTION = paths_module.PathChooser.attention


def measure_attention(chooser, m) -> Flops:
    """flop_counter on the reference stage (3) (the path `set_path(..., "reference")` forced),
    on CPU inputs of the shapes the model gave it (random values: the reference's products do
    not depend on them). q, k and v all get gradients, as a fused attention backward computes
    them all."""
    g = torch.Generator().manual_seed(0)
    m = dataclasses.replace(m, **{f.name: torch.randn(t.shape, generator=g, requires_grad=f.name in ("q", "k", "v"))
                                  for f in dataclasses.fields(m) if isinstance(t := getattr(m, f.name), torch.Tensor)})
    out = {}
    forward = counted(lambda: out.update(o=REAL_ATTENTION(chooser, m)))
    backward = counted(lambda: out["o"].sum().backward())
    return Flops(forward, backward)


# --- hand counts, per family --------------------------------------------------------------------------


def conv_by_hand(lm: LanguageModel) -> Flops:
    """The depthwise causal conv, per token: a multiply and an add per channel per tap (it is
    written as a sum of elementwise products, invisible to flop_counter); its backward computes
    the input's and the taps' gradients, twice that."""
    total = 0
    for block in lm.blocks:
        weight = getattr(block.mixer, "conv_weight", None)  # (channels, taps)
        if weight is not None:
            total += 2 * weight.numel()
    return Flops(total, 2 * total)


def softmax_expected(key, measured: Flops) -> tuple[Flops, Flops]:
    """(causal, dense) per token: the reference's cost per (query, key) pair times the pairs
    its visibility mask keeps; `dense` charges every query as the last one."""
    window = key.window if key.visibility == "window" else None
    chunk_local = key.window if key.visibility == "chunk_local" else None
    mask = visibility_mask(T, window=window, chunk_local=chunk_local, sink=key.sink)
    per_pair = Flops(measured.forward / T ** 2, measured.backward / T ** 2)
    return per_pair.scaled(mask.sum().item() / T), per_pair.scaled(mask[-1].sum().item())


def select_expected(key, measured: Flops) -> tuple[Flops, Flops]:
    """(causal, dense) per token for Top-k selection, by enumerating each query's work."""
    H, F, Dv = key.heads, key.feature_dim, key.head_dim
    score, value = 2 * H * F, 2 * H * Dv  # one q.k product / one weighted value, all heads
    # the reference computes every score and mixes every value once: the per-product costs
    assert measured.forward == (score + value) * T ** 2
    sel = key.select
    if sel.over == "element":
        visible = visibility_mask(T, window=key.window if key.visibility == "window" else None,
                                  sink=key.sink).sum(-1).tolist()
        per_query = [_element_work(sel, n, score, value, H, Dv) for n in visible]
    else:
        per_query = [_chunk_work(sel, i, score, value, H, F) for i in range(T)]
    forward = [f for f, _ in per_query]
    backward = [b for _, b in per_query]
    if sel.over == "element" and sel.grad == "ste":
        # the straight-through backward is the reference's: dense attention's backward, over the
        # visible keys only
        backward = [measured.backward / T ** 2 * n for n in visible]
    causal = Flops(sum(forward) / T, sum(backward) / T)
    return causal, Flops(forward[-1], backward[-1])


def _element_work(sel, visible: int, score, value, H, Dv) -> tuple[float, float | None]:
    """(forward, backward) of one query that sees `visible` keys."""
    picked = min(sel.k, visible)
    forward = score * visible + value * picked  # every score (for the arg-max), the picked values
    if sel.grad == "ste":
        return forward, None  # measured: see select_expected
    if sel.k == 1:
        return forward, H * Dv  # no gradient reaches q, k; the one chosen value gets dO added
    return forward, 2 * (score + value) * picked  # softmax attention's backward inside the picked


def _chunk_work(sel, i, score, value, H, F) -> tuple[float, float]:
    """(forward, backward) of query i (chunk selection: causal visibility, chunks of sel.chunk)."""
    c = sel.chunk
    own = i // c

    def keys(chunk):  # keys of `chunk` that query i may see
        return [j for j in range(chunk * c, min(chunk * c + c, T)) if j <= i]

    candidates = list(range(own)) if sel.local else list(range(own + 1))
    candidate_keys = sum(len(keys(ch)) for ch in candidates)
    if sel.score == "mean":
        # one product per candidate against its mean key; keeping the means costs one add per
        # key channel per token
        forward = score * len(candidates) + H * F
    else:
        forward = score * candidate_keys  # max / lse need every candidate key's score
    # the chosen chunks, complete ones first (the earliest among equals): the count's bound when
    # the partial own chunk competes
    chosen = sorted(candidates, key=lambda ch: -len(keys(ch)))[:sel.k]
    # the attended keys as a set: the chosen chunks', the own chunk's (local) and the sink tokens
    # (j < sink, j <= i), a key in more than one of them attended once
    attended_keys = {j for ch in chosen for j in keys(ch)} | (set(keys(own)) if sel.local else set())
    attended_keys |= {j for j in range(sel.sink) if j <= i}
    attended = len(attended_keys)
    forward += (score + value) * attended
    backward = 2 * (score + value) * attended
    if sel.grad == "ste":
        # the gate's gradient reaches each candidate's score through one q.k product per
        # candidate (max: its arg-max key, mean: its mean key) or per candidate key (lse): dq and dk
        through = candidate_keys if sel.score == "lse" else len(candidates)
        backward += 2 * score * through
    return forward, backward


def chunk_parallel_rule1(q, k, v, S0, C: int):
    """Rule (1) without decay, as flash-linear-attention's chunk kernels compute it: per chunk the
    whole (C, C) block of scores (then masked), times the values, plus the queries against the
    state the earlier chunks left, then the state update K^T V. q, k (H, T, F), v (H, T, Dv),
    S0 (H, F, Dv) -> (outputs (H, T, Dv), final state (H, F, Dv))."""
    causal = torch.ones(C, C, dtype=torch.bool, device=q.device).tril()
    S, out = S0, []
    for start in range(0, q.shape[1], C):
        Q, K, V = q[:, start:start + C], k[:, start:start + C], v[:, start:start + C]
        A = (Q @ K.transpose(1, 2)).masked_fill(~causal, 0.0)
        out.append(A @ V + Q @ S)
        S = S + K.transpose(1, 2) @ V
    return torch.cat(out, dim=1), S


def measured_rule1(key, seq_len: int) -> Flops:
    """flop_counter on `chunk_parallel_rule1` with the key's shapes (on the meta device: shapes
    only), per token. The initial and the final state take part in the loss, so that every
    product has both of its operands differentiated: the backward = 2 x forward that the count
    charges for every chunk."""
    C = min(RECURRENT_CHUNK, seq_len)
    H, F, Dv = key.heads, key.feature_dim, key.value_cols
    shapes = [(H, seq_len, F), (H, seq_len, F), (H, seq_len, Dv), (H, F, Dv)]
    leaves = [torch.empty(s, device="meta", requires_grad=True) for s in shapes]
    out = {}
    forward = counted(lambda: out.update(o=chunk_parallel_rule1(*leaves, C)))
    backward = counted(lambda: (out["o"][0].sum() + out["o"][1].sum()).backward())
    return Flops(forward / seq_len, backward / seq_len)


def recurrent_extra_by_hand(key, seq_len: int) -> Flops:
    """The products the delta, RWKV-7 and RWKV-6 rules add to rule (1), per token, all heads;
    backward twice the forward."""
    C = min(RECURRENT_CHUNK, seq_len)
    F, Dv = key.feature_dim, key.value_cols
    per_chunk = 0.0
    if key.update in ("delta", "rwkv7"):
        # the WY representation of the chunk (DeltaNet's chunk form, Yang et al. 2024):
        per_chunk += (2 * C * C * F  # K K^T: the chunk's unit-triangular system
                      + C ** 3 / 3  # its inverse, by forward substitution
                      + 2 * C * C * F  # W = A (beta K)
                      + 2 * C * C * Dv  # U = A (beta V)
                      + 2 * C * F * Dv)  # U - W S: what the state does not predict yet
    if key.update == "rwkv7":
        per_chunk += 2 * (2 * C * C * F)  # two more C x C interaction blocks (q.b, a.k) of its DPLR form
    per_token = per_chunk / C
    if key.update == "bonus":
        per_token += 2 * F + 2 * Dv  # RWKV-6's current-token term (q . u k) v
    return Flops(key.heads * per_token, 2 * key.heads * per_token)


# --- the tests -----------------------------------------------------------------------------------------


TOKENS_PER_S, PEAK = 1.0e5, 1.0e14


@pytest.mark.parametrize("path", SPEC_FILES, ids=SPEC_IDS)
def test_flops_per_token_are_the_measured_work_and_give_the_mfu(path, monkeypatch):
    program, model = shrunk_spec_model(path, SHRINK)
    model = at_most_heads(program, model)  # Mamba-1's 256 heads: the per-head code runs at 64 too
    with torch.device("meta"):  # counts depend on shapes only: nothing is computed
        lm = LanguageModel(program, model)
    set_path(lm, "reference")
    tokens = torch.zeros(1, T, dtype=torch.long, device="meta")
    measured = measure_model(lm, tokens, monkeypatch)
    count = flops_per_token(program, model, T)
    dense_count = count.items["projections"] + count.items["mlp"] + count.items["head"]
    dense = measured.dense.scaled(1 / T) + conv_by_hand(lm)
    assert dense_count.forward == pytest.approx(dense.forward, rel=REL)
    assert dense_count.backward == pytest.approx(dense.backward, rel=REL)

    assert len(measured.stage3) == model.layers
    mixing, mixing_dense = Flops(0.0, 0.0), Flops(0.0, 0.0)
    for chooser, inputs in measured.stage3:
        key = chooser.key
        if key.family == "recurrent":
            per_token = measured_rule1(key, T) + recurrent_extra_by_hand(key, T)
            causal = dense_convention = per_token
        else:
            expected = softmax_expected if key.family == "softmax" else select_expected
            causal, dense_convention = expected(key, measure_attention(chooser, inputs))
        mixing, mixing_dense = mixing + causal, mixing_dense + dense_convention
        for convention, want in (("causal", causal), ("dense", dense_convention)):
            got = mixing_flops(key, T, convention)
            assert got.forward == pytest.approx(want.forward, rel=REL), f"{key.family} forward, {convention}"
            assert got.backward == pytest.approx(want.backward, rel=REL), f"{key.family} backward, {convention}"
    assert count.items["mixing"].training == pytest.approx(mixing.training, rel=REL)
    dense_total = flops_per_token(program, model, T, convention="dense").training
    assert dense_total == pytest.approx(dense.training + mixing_dense.training, rel=REL)

    # the MFU a run reports is the achieved FLOP/s over the peak, from these counts
    meter = mfu_meter(SimpleNamespace(program=program, spec=model), T, PEAK)
    assert meter(TOKENS_PER_S) == pytest.approx(TOKENS_PER_S * (dense.training + mixing.training) / PEAK, rel=REL)


@pytest.mark.parametrize("sink", [0, 3, 16, 21, 40, 64])
@pytest.mark.parametrize("local", [True, False])
@pytest.mark.parametrize("k", [1, 2])
def test_chunk_selection_sinks_are_counted_once(k, local, sink):
    """The sink term of the chunk-selection count against the enumerated set union (sinks,
    chosen chunks, own chunk) at sink counts inside, at and past the first chunk, and past the
    sequence: the library's `moba_sink4` shrunk above keeps its 4 sinks inside chunk 0, which the
    count's chosen chunks (the earliest ones) always hold, so it adds no keys there."""
    from seqdsl.ir import nodes
    from seqdsl.ir.key import kernel_key

    top = nodes.Top(k=k, over=nodes.Chunk(size=SHRINK), local=local, sink=sink)
    key = kernel_key(nodes.Mixer(name="m", heads=2, head_dim=8, select=top), 16)
    H, F, Dv = key.heads, key.feature_dim, key.head_dim
    per_query = [_chunk_work(key.select, i, 2 * H * F, 2 * H * Dv, H, F) for i in range(T)]
    for convention, work in (("causal", per_query), ("dense", per_query[-1:])):
        got = mixing_flops(key, T, convention)
        assert got.forward == pytest.approx(sum(f for f, _ in work) / len(work), rel=REL), convention
        assert got.backward == pytest.approx(sum(b for _, b in work) / len(work), rel=REL), convention


@pytest.mark.parametrize("chunks", [1, 3])
def test_the_measured_chunk_algorithm_is_the_recurrence(chunks):
    """`chunk_parallel_rule1`, whose products the recurrent family's count is measured on,
    computes rule (1): the step-by-step reference's outputs and final state."""
    C, H, F, Dv = 8, 2, 6, 5
    g = torch.Generator().manual_seed(0)
    q, k = (torch.randn(H, chunks * C, F, generator=g, dtype=torch.float64) / F for _ in range(2))
    v = torch.randn(H, chunks * C, Dv, generator=g, dtype=torch.float64)
    S0 = torch.randn(H, F, Dv, generator=g, dtype=torch.float64)
    expected, expected_state = recurrent_ref(*(x.transpose(0, 1)[None] for x in (q, k, v)), initial_state=S0[None])
    got, state = chunk_parallel_rule1(q, k, v, S0, C)
    torch.testing.assert_close(got.transpose(0, 1)[None], expected)
    torch.testing.assert_close(state[None], expected_state)


@pytest.mark.parametrize("seq_len", [32, 64, 256])
def test_recurrent_counts_follow_the_chunk_algorithm_at_any_context(seq_len):
    """The recurrent family's count at contexts shorter than, equal to and longer than the chunk
    (the library's keys at the tiny preset, unshrunk)."""
    from seqdsl.ir.key import kernel_key
    from tests.spec_library import spec_model

    keys = {}
    for path in SPEC_FILES:
        program, model = spec_model(path)
        model = at_most_heads(program, model)
        for name in model.mixer:
            key = kernel_key(program.mixer(name), model.d_model)
            if key.family == "recurrent":
                keys[key] = path.stem
    assert {k.update for k in keys} == {"additive", "bonus", "delta", "rwkv7"}
    for key, spec in keys.items():
        want = measured_rule1(key, seq_len) + recurrent_extra_by_hand(key, seq_len)
        got = mixing_flops(key, seq_len)
        assert got.forward == pytest.approx(want.forward, rel=REL), spec
        assert got.backward == pytest.approx(want.backward, rel=REL), spec
