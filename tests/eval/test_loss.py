"""`evaluate` against an independent computation: every target scored from its own prefix, one
forward per token, in float64."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import seqdsl
from seqdsl.data.evalset import EvalSet
from seqdsl.run.loss import EvalError, evaluate
from seqdsl.run.loss import windows
from seqdsl.ir.presets import model_at
from seqdsl.lower.lm import LanguageModel

SPEC = """
mixer attn { heads = 2  head_dim = 16  position = rope }
mixer rk extends attn { relation = random_keys }
model tiny_attn { layers = 2  d_model = 32  vocab = 23  context = 12  mixer = attn }
model tiny_rk extends tiny_attn { mixer = rk }
"""


def tiny_lm(name: str, seed: int = 0) -> LanguageModel:
    program = seqdsl.loads(SPEC).program
    torch.manual_seed(seed)
    return LanguageModel(program, model_at(program, name).model).double()


def prefix_nll(lm: LanguageModel, tokens: torch.Tensor, seq_len: int) -> float:
    """Sum over targets t = 1..N-1 of -log p(tokens[t] | its window's prefix), each from its own
    forward on tokens[start:t] where start is the window start of t (a multiple of seq_len)."""
    total = 0.0
    with torch.no_grad():
        for t in range(1, tokens.numel()):
            start = (t - 1) // seq_len * seq_len
            logits, _ = lm(tokens[None, start:t])
            total -= F.log_softmax(logits[0, -1], dim=-1)[tokens[t]].item()
    return total


@pytest.mark.parametrize("n_tokens, seq_len, batch_size", [
    (41, 8, 2),    # 5 full windows in batches of 2, 2 and 1 (no tail)
    (47, 8, 3),    # 5 full windows and a tail of 6
    (30, 40, 4),   # one window longer than the model's context (RoPE extrapolates)
])
def test_evaluate_matches_prefix_by_prefix_float64(n_tokens, seq_len, batch_size):
    lm = tiny_lm("tiny_attn")
    tokens = torch.randint(0, 23, (n_tokens,), generator=torch.Generator().manual_seed(1))
    n_bytes = 3 * n_tokens + 5
    out = evaluate(lm, {"d": EvalSet("d", tokens, n_bytes)}, seq_len=seq_len,
                   batch_size=batch_size, device="cpu")["d"]
    expected = prefix_nll(lm, tokens, seq_len)
    assert out.tokens == n_tokens - 1
    assert out.loss == pytest.approx(expected / (n_tokens - 1), rel=1e-10)
    scored_bytes = n_bytes * (n_tokens - 1) / n_tokens
    assert out.bpb == pytest.approx(expected / (math.log(2) * scored_bytes), rel=1e-10)


def test_windows_score_every_token_but_the_first_once():
    for n, s in [(2, 1), (9, 4), (10, 4), (11, 4), (100, 7)]:
        targets = [t for start, length in windows(n, s) for t in range(start + 1, start + length + 1)]
        assert targets == list(range(1, n))
        assert all(1 <= length <= s for _, length in windows(n, s))


def test_float32_evaluation_agrees_with_float64_reference():
    lm = tiny_lm("tiny_attn")
    tokens = torch.randint(0, 23, (33,), generator=torch.Generator().manual_seed(2))
    expected = prefix_nll(lm, tokens, 8) / 32
    out = evaluate(lm.float(), {"d": EvalSet("d", tokens, 40)}, seq_len=8, batch_size=4, device="cpu")
    assert abs(out["d"].loss - expected) / expected < 1e-5


def test_several_sets_are_keyed_and_independent():
    lm = tiny_lm("tiny_attn")
    g = torch.Generator().manual_seed(3)
    a, b = torch.randint(0, 23, (20,), generator=g), torch.randint(0, 23, (27,), generator=g)
    both = evaluate(lm, {"a": EvalSet("a", a, 20), "b": EvalSet("b", b, 50)}, seq_len=5,
                    batch_size=2, device="cpu")
    alone = evaluate(lm, {"b": EvalSet("b", b, 50)}, seq_len=5, batch_size=2, device="cpu")
    assert set(both) == {"a", "b"}
    assert both["b"] == alone["b"]
    assert both["a"].tokens == 19


@pytest.mark.parametrize("training", [True, False])
def test_training_mode_is_restored_and_no_gradient_kept(training):
    lm = tiny_lm("tiny_attn")
    lm.train(training)
    tokens = torch.randint(0, 23, (20,), generator=torch.Generator().manual_seed(4))
    evaluate(lm, {"d": EvalSet("d", tokens, 20)}, seq_len=8, batch_size=2, device="cpu")
    assert lm.training is training
    assert all(p.grad is None for p in lm.parameters())


def test_per_position_relation_refuses_beyond_its_context_with_one_message():
    lm = tiny_lm("tiny_rk")
    tokens = torch.randint(0, 23, (40,), generator=torch.Generator().manual_seed(5))
    sets = {"d": EvalSet("d", tokens, 40)}
    evaluate(lm, sets, seq_len=12, batch_size=2, device="cpu")  # within context: fine
    with pytest.raises(EvalError, match=r"random_keys.*12 tokens only"):
        evaluate(lm, sets, seq_len=13, batch_size=2, device="cpu")


@pytest.mark.parametrize("tokens, n_bytes, match", [
    (torch.tensor([3]), 1, "at least 2 tokens"),
    (torch.tensor([3, 4]), 0, "positive byte count"),
])
def test_degenerate_sets_are_refused(tokens, n_bytes, match):
    with pytest.raises(EvalError, match=match):
        evaluate(tiny_lm("tiny_attn"), {"d": EvalSet("d", tokens, n_bytes)}, seq_len=4,
                 batch_size=1, device="cpu")


@pytest.mark.filterwarnings("ignore:Mismatch dtype between input and weight")  # torch's CPU rms_norm
def test_bfloat16_autocast_stays_close_to_float32():
    lm = tiny_lm("tiny_attn").float()
    tokens = torch.randint(0, 23, (65,), generator=torch.Generator().manual_seed(6))
    sets = {"d": EvalSet("d", tokens, 65)}
    full = evaluate(lm, sets, seq_len=16, batch_size=4, device="cpu")["d"]
    half = evaluate(lm, sets, seq_len=16, batch_size=4, device="cpu", autocast_dtype=torch.bfloat16)["d"]
    # bf16 keeps 8 bits of mantissa: activations round at ~0.4%; the loss is an average of them
    assert half.loss != full.loss
    assert abs(half.loss - full.loss) / full.loss < 0.02


def test_a_split_evaluation_adds_up_to_the_whole_with_as_many_forwards_per_process(monkeypatch):
    """Two processes' shares (rank 0 and 1 of 2; the sum over processes replaced by the identity)
    add up to the one-process loss, and both processes run the same number of forwards (a
    sharded model's forward is collective), the one with fewer batches a discarded one."""
    import seqdsl.run.loss as loss_mod

    lm = tiny_lm("tiny_attn")
    tokens = torch.randint(0, 23, (62,), generator=torch.Generator().manual_seed(1))  # 5 windows of 12, a tail of 1
    monkeypatch.setattr(loss_mod, "_sum_over_processes", lambda value, device: value)
    calls = []
    real = loss_mod._nll_sum
    monkeypatch.setattr(loss_mod, "_nll_sum", lambda *a: calls.append(1) or real(*a))
    whole = loss_mod.evaluate_set(lm, tokens, 100, seq_len=12, batch_size=2, device="cpu").loss
    assert len(calls) == 4  # batches of 2, 2, 1 full windows and the tail
    shares = []
    for rank in (0, 1):
        calls.clear()
        shares.append(loss_mod.evaluate_set(lm, tokens, 100, seq_len=12, batch_size=2, device="cpu",
                                            split=(rank, 2)).loss)
        assert len(calls) == 2
    assert sum(shares) == pytest.approx(whole, rel=1e-12)
    calls.clear()
    loss_mod.evaluate_set(lm, tokens, 100, seq_len=12, batch_size=2, device="cpu", split=(2, 3))
    assert len(calls) == 2  # 4 batches over 3 processes: rank 2 scores one and runs one discarded
