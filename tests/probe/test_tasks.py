"""The probe tasks' generators: deterministic for a seed, different across seeds, solvable (the
oracle, which reads only each answer's prefix, gets every answer right), and scoring only answer
tokens, checked against each task's layout written out independently here."""

from __future__ import annotations

import pytest
import torch

from seqdsl.probe.batch import Level, ProbeError, oracle_predictions
from seqdsl.probe.copying import SEP, Copy, SelectiveCopy
from seqdsl.probe.needle import DIGITS, Needle, heldout_text
from seqdsl.probe.recall import MQAR, Induction
from seqdsl.probe.registry import TASKS, make_task, task_names
from seqdsl.probe.state import WordProblem, compose, elements

N = 16  # rows per batch: the oracle is plain Python


def _levels(task, seq_len=32):
    plan = task.plan(seq_len)
    return list(dict.fromkeys(plan.train + plan.evaluate))


def _sample(task, level, seed, n=N):
    return task.sample(level, n, torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("name", TASKS)
def test_same_seed_same_batch_other_seed_other_batch(name):
    task = make_task(name)
    for level in _levels(task):
        a, b, c = _sample(task, level, 7), _sample(task, level, 7), _sample(task, level, 8)
        for x, y in ((a.inputs, b.inputs), (a.targets, b.targets), (a.mask, b.mask)):
            assert torch.equal(x, y)
        assert not torch.equal(a.inputs, c.inputs)


@pytest.mark.parametrize("name", TASKS)
def test_oracle_solves_every_level(name):
    task = make_task(name)
    for level in _levels(task):
        batch = _sample(task, level, 0)
        assert batch.inputs.shape == batch.targets.shape == batch.mask.shape == (N, level.seq_len)
        assert batch.inputs.dtype == torch.long and batch.mask.dtype == torch.bool
        assert 0 <= int(batch.inputs.min()) and int(batch.inputs.max()) < task.vocab
        assert int(batch.targets.max()) < task.vocab
        assert batch.mask.any(dim=1).all(), "every row has answers"
        preds = oracle_predictions(task, batch, level)
        assert torch.equal(preds[batch.mask], batch.targets[batch.mask]), level


@pytest.mark.parametrize("name", TASKS)
def test_oracle_catches_a_wrong_answer(name):
    """The solvability test can fail: a corrupted answer is not what the oracle predicts."""
    task = make_task(name)
    level = _levels(task)[0]
    batch = _sample(task, level, 0)
    b, t = batch.mask.nonzero()[0].tolist()
    batch.targets[b, t] = (batch.targets[b, t] + 1) % task.vocab
    preds = oracle_predictions(task, batch, level)
    assert not torch.equal(preds[batch.mask], batch.targets[batch.mask])


def test_mqar_masks_exactly_the_queried_keys():
    task = MQAR(vocab=64)
    level = Level.of(40, pairs=6, queries=4)
    batch = _sample(task, level, 3)
    K = (64 - 1) // 2
    for b in range(N):
        row = batch.inputs[b].tolist() + [batch.targets[b, -1].item()]
        keys, values = row[0:12:2], row[1:12:2]
        assert len(set(keys)) == 6 and all(1 <= k <= K for k in keys)
        assert all(K < v < 64 for v in values)
        answers = batch.mask[b].nonzero().flatten().tolist()
        assert len(answers) == 4
        for t in answers:
            assert t >= 12 and row[t] in keys and row[t + 1] == values[keys.index(row[t])]
        # everything after the pairs that is not a query or its answer is filler
        rest = [x for i, x in enumerate(row[12:], 12) if i not in answers and i - 1 not in answers]
        assert set(rest) <= {0}


def test_copy_and_selective_copy_score_the_tokens_after_the_separator():
    batch = _sample(Copy(vocab=16), Level.of(12, length=6), 1)
    for b in range(N):
        row = batch.inputs[b].tolist()
        assert row[6] == SEP and batch.mask[b].nonzero().flatten().tolist() == list(range(6, 12))
        assert batch.targets[b, 6:].tolist() == row[:6]
    batch = _sample(SelectiveCopy(vocab=16), Level.of(24, tokens=5), 1)
    for b in range(N):
        row = batch.inputs[b].tolist()
        content = [x for x in row[:19] if x != 0]
        assert row[19] == SEP and len(content) == 5
        assert batch.mask[b].nonzero().flatten().tolist() == list(range(19, 24))
        assert batch.targets[b, 19:].tolist() == content


def test_induction_scores_the_last_position_and_the_trigger_occurs_once_before():
    batch = _sample(Induction(vocab=16), Level.of(20), 2)
    assert batch.mask[:, -1].all() and batch.mask.sum() == N
    for b in range(N):
        row = batch.inputs[b].tolist()
        assert row[:-1].count(row[-1]) == 1
        assert batch.targets[b, -1] == row[row.index(row[-1]) + 1]


def test_needle_scores_the_digits_after_the_query():
    task = Needle(filler=20)
    batch = _sample(task, Level.of(48, digits=3), 4)
    for b in range(N):
        row = batch.inputs[b].tolist()
        key = row.index(task.key)
        assert row.count(task.key) == 1 and row[45] == task.query
        assert batch.mask[b].nonzero().flatten().tolist() == [45, 46, 47]
        assert batch.targets[b, 45:].tolist() == row[key + 1: key + 4]
        assert all(task.digit0 <= d < task.digit0 + DIGITS for d in row[key + 1: key + 4])
    depths = {batch.inputs[b].tolist().index(task.key) for b in range(N)}
    assert len(depths) > 1, "the needle is hidden at different depths"


def test_needle_in_heldout_text_uses_the_text_as_filler():
    from seqdsl.data.documents import Document, is_heldout

    texts = [f"document {i}: " + "lorem ipsum dolor sit amet " * 20 for i in range(60)]

    class Source:
        def documents(self, domains):
            return iter(Document("prose", t) for t in texts)

    text = heldout_text(Source(), ["prose"], fraction=0.3, max_bytes=10_000)
    held = "".join(t + "\n" for t in texts if is_heldout(t, 0.3))
    assert 0 < text.numel() and bytes(text.tolist()).decode() == held[:10_000]
    task = Needle(text=text)
    batch = _sample(task, Level.of(64, digits=4), 0)
    hay = [x for x in batch.inputs[0].tolist() if x < 256]
    assert bytes(hay).decode() in held  # a window of the text, cut once by the needle
    assert torch.equal(oracle_predictions(task, batch, Level.of(64, digits=4))[batch.mask], batch.targets[batch.mask])


def test_word_problem_targets_are_running_products():
    a5 = WordProblem("a5")
    assert a5.vocab == 60 and WordProblem("s5").vocab == 120
    batch = _sample(a5, Level.of(6), 5)
    elems = elements("a5")
    for b in range(N):
        state = tuple(range(5))
        for t, g in enumerate(batch.inputs[b].tolist()):
            state = compose(state, elems[g])
            assert batch.targets[b, t] == elems.index(state)
    assert batch.mask.all()


@pytest.mark.parametrize("task, level, words", [
    (MQAR(vocab=16), Level.of(32, pairs=9, queries=9), "do not fit a vocabulary"),
    (MQAR(vocab=64), Level.of(16, pairs=6, queries=6), "do not fit 16 tokens"),
    (Copy(), Level.of(10, length=4), "copied in 8 tokens"),
    (SelectiveCopy(), Level.of(10, tokens=6), "do not fit 10 positions"),
    (Needle(), Level.of(6, digits=4), "need at least 9 tokens"),
])
def test_impossible_levels_are_refused_with_a_reason(task, level, words):
    with pytest.raises(ProbeError, match=words):
        task.sample(level, 2, torch.Generator())


def test_task_names():
    assert task_names("mqar, copy,mqar") == ["mqar", "copy"]
    assert task_names("all") == list(TASKS)
    with pytest.raises(ProbeError, match="unknown task `mqra`") as err:
        task_names("mqra")
    assert "did you mean `mqar`" in err.value.render()
    with pytest.raises(ProbeError, match="names no task"):
        task_names(" , ")
