"""The data guarantees, checked on what a real `seqdsl train` run consumes and measures.

Each test trains a micro model (tests/train/helpers.py) with `seqdsl.train.run.train` on a small
three-domain corpus written here as JSONL shards, with a word-level tokenizer in which every word
belongs to one document only: a token id then names the document it came from. The run is
watched at two points only: the rows `training_step` receives (what the optimizer trains on) and
the evaluation sets `seqdsl.run.loss.evaluate` measures. Nothing is read from the packing or
held-out helpers, so the checks hold whatever those become. (The documents are shorter than a
held-out unit, seqdsl/data/documents.py, so each is held out or trained on whole.) Checked:

- no token of a held-out document (the documented rule: SHA-256 of the text below the fraction,
  recomputed here) reaches a training batch, in the limited- and in the mixed-domain setting;
- every training document reaches the stream whole: its tokens and then the end-of-document
  token, contiguous and in order, every document once per epoch;
- the evaluation sets are the same text in the limited- and the mixed-domain setting and
  whatever the order of the files;
- a run stopped and resumed trains on exactly the batches of the uninterrupted run;
- a run on local shards touches no network;
- the bits per byte a run reports are its loss over the UTF-8 bytes of the evaluated text
  (end-of-document tokens one byte each), recomputed from the raw text, and the loss itself is
  recomputed from the model at evaluation time.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import importlib.util
import itertools
import json
import math
import random
import socket
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from seqdsl.run import loss as loss_module
from seqdsl.train import run as run_module
from seqdsl.run.config import build_config
from tests.train.helpers import MICRO_SPEC, write_jsonl

tokenizers = pytest.importorskip("tokenizers")
# found, not imported: importing datasets takes over a second, paid by the worker that runs these
pytestmark = pytest.mark.skipif(importlib.util.find_spec("datasets") is None, reason="needs HF datasets")

DOMAINS = ("web", "code", "prose")  # folder names: the domain of every shard inside
SHARDS = 2  # per domain, so that the order of the files matters to the stream
DOCS_PER_SHARD = 8
HELDOUT = 0.25
EOS = "<|endoftext|>"
SEQ_LEN = 16  # MICRO_SPEC's context
BATCH = 4
STEPS = 10
CHECKPOINT_EVERY = 3
# The two settings, each with its run's training domains and how its stream is read: the
# limited-domain run packs from the token cache (the default for files), the mixed-domain run
# tokenizes on the fly (data.token_cache = false), so both ways of feeding the loop are watched.
SETTINGS = {"limited": (["web"], True), "mixed": (list(DOMAINS), False)}
# evaluation tokens per domain of the `budgeted` run: cuts code after its last word (its end
# token left out), web and prose mid-document
BUDGET = 29


# --- the corpus -----------------------------------------------------------------------------------


def document(domain: str, shard: int, n: int, words: int) -> str:
    """Words that no other document has (`web1d3ü0`, ...), so a token id names its document; the
    `ü` and `中` make the text's UTF-8 bytes differ from its characters."""
    return " ".join(f"{domain}{shard}d{n}ü{j}" + ("中" if j % 3 == 0 else "") for j in range(words))


def corpus() -> dict[str, list[list[str]]]:
    """domain -> shard -> texts, 3 to 24 words each (documents both shorter and longer than a
    training sequence)."""
    rng = random.Random(0)
    return {d: [[document(d, s, n, rng.randint(3, 24)) for n in range(DOCS_PER_SHARD)] for s in range(SHARDS)]
            for d in DOMAINS}


def heldout_by_rule(text: str, fraction: float = HELDOUT) -> bool:
    """The documented held-out rule (docs/training.md), written out: the first 8 bytes of the
    SHA-256 of the UTF-8 text, as a fraction of 2^64, below `fraction`."""
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big") < fraction * 2 ** 64


@dataclass(frozen=True)
class World:
    """The corpus on disk, its tokenizer and the micro spec."""

    root: Path
    docs: dict[str, list[list[str]]]
    tokenizer: Path
    spec: Path

    def texts(self, domain: str) -> list[str]:
        return [t for shard in self.docs[domain] for t in shard]

    def shard_files(self) -> list[Path]:
        return [self.root / "data" / d / f"{d}_{s:02d}.jsonl" for d in DOMAINS for s in range(SHARDS)]

    def encode(self, text: str) -> list[int]:
        return _tokenizer(self.tokenizer).encode(text).ids

    def eos(self) -> int:
        return _tokenizer(self.tokenizer).token_to_id(EOS)


@functools.lru_cache(maxsize=4)
def _tokenizer(path: Path):
    return tokenizers.Tokenizer.from_file(str(path))


def write_world(root: Path) -> World:
    docs = corpus()
    for domain in DOMAINS:
        for s, texts in enumerate(docs[domain]):
            write_jsonl(root / "data" / domain / f"{domain}_{s:02d}.jsonl",
                        [{"text": t, "meta": {"domain": domain}} for t in texts])
    vocab = {"[UNK]": 0, EOS: 1}
    for domain in DOMAINS:
        for shard in docs[domain]:
            for text in shard:
                for word in text.split():
                    vocab.setdefault(word, len(vocab))
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    tok.save(str(root / "tokenizer.json"))
    (root / "micro.seq").write_text(MICRO_SPEC)
    return World(root, docs, root / "tokenizer.json", root / "micro.seq")


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> World:
    w = write_world(tmp_path_factory.mktemp("corpus"))
    for domain in DOMAINS:  # the design's preconditions: something held out, something trained on
        held = [t for t in w.texts(domain) if heldout_by_rule(t)]
        assert 2 <= len(held) <= len(w.texts(domain)) - 6, f"{domain}: {len(held)} held-out documents"
    return w


# --- a watched run --------------------------------------------------------------------------------


@dataclass
class Watched:
    """What one `train` call consumed and measured."""

    rows: list[torch.Tensor] = field(default_factory=list)  # per optimizer step: (B, T + 1)
    eval_sets: list[dict] = field(default_factory=list)  # per evaluation: domain -> EvalSet
    own_loss: list[dict[str, float]] = field(default_factory=list)  # per evaluation: domain -> nats/token
    records: list[dict] = field(default_factory=list)  # metrics.jsonl


def run_config(world: World, *, train_domains: list[str], files: list[str] | None = None, steps: int = STEPS,
               eval_tokens: int = 10 ** 6, token_cache: bool = True):
    """A micro run on the world's shards; by default every held-out document fits the evaluation
    budget, so the evaluated text is all of them."""
    data = {"source": "files", "files": files or [str(world.root / "data")], "tokenizer": str(world.tokenizer),
            "train_domains": train_domains, "heldout": HELDOUT, "eval_tokens": eval_tokens,
            "token_cache": token_cache}
    return build_config({"spec": str(world.spec), "preset": None, "tokens": steps * BATCH * SEQ_LEN,
                         "batch": BATCH, "device": "cpu", "eval_every": 0, "checkpoint_every": CHECKPOINT_EVERY,
                         "warmup": 2, "lr": 0.01, "data": data})


def setting_config(world: World, setting: str):
    domains, token_cache = SETTINGS[setting]
    return run_config(world, train_domains=["*"] if domains == list(DOMAINS) else domains, token_cache=token_cache)


def window_nll(model, tokens: torch.Tensor, seq_len: int) -> float:
    """Summed NLL of tokens[1:], target t predicted from the window holding it (windows of seq_len
    inputs starting at multiples of seq_len; docs/evaluation.md), in float64."""
    model = copy.deepcopy(model).double().eval()
    total = 0.0
    with torch.no_grad():
        for start in range(0, tokens.numel() - 1, seq_len):
            window = tokens[start:start + seq_len + 1]
            logits, _ = model(window[None, :-1])
            total -= F.log_softmax(logits[0], dim=-1).gather(-1, window[1:, None]).sum().item()
    return total


def watched_train(world: World, out: Path, config, *, resume: bool = False, stop_at: int | None = None) -> Watched:
    """Train, recording every batch `training_step` receives and every set `evaluate` measures
    (with the loss recomputed here, from the model as it is evaluated). `stop_at`: a Ctrl-C in
    place of that training step (counted from 1 in this call)."""
    seen = Watched()
    real_step, real_evaluate = run_module.training_step, loss_module.evaluate

    def step(loss_fn, params, rows, micro, **kwargs):
        if stop_at is not None and len(seen.rows) + 1 == stop_at:
            raise KeyboardInterrupt
        seen.rows.append(rows.detach().cpu().clone())
        return real_step(loss_fn, params, rows, micro, **kwargs)

    def evaluate(model, sets, *, seq_len, **kwargs):
        seen.eval_sets.append(dict(sets))
        seen.own_loss.append({d: window_nll(model, s.tokens, seq_len) / (s.tokens.numel() - 1)
                              for d, s in sets.items()})
        return real_evaluate(model, sets, seq_len=seq_len, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SEQDSL_CACHE_DIR", str(out.parent / f"{out.name}-cache"))  # no cache from another run
        patch.setattr(run_module, "training_step", step)
        patch.setattr(loss_module, "evaluate", evaluate)
        if stop_at is None:
            run_module.train(config, out, resume=resume, show_progress=False)
        else:
            with pytest.raises(KeyboardInterrupt):
                run_module.train(config, out, resume=resume, show_progress=False)
    metrics = out / "metrics.jsonl"
    seen.records = [json.loads(line) for line in metrics.read_text().splitlines()] if metrics.exists() else []
    return seen


@pytest.fixture(scope="module")
def limited(world, tmp_path_factory) -> Watched:
    return watched_train(world, tmp_path_factory.mktemp("limited") / "run", setting_config(world, "limited"))


@pytest.fixture(scope="module")
def mixed(world, tmp_path_factory) -> Watched:
    return watched_train(world, tmp_path_factory.mktemp("mixed") / "run", setting_config(world, "mixed"))


@pytest.fixture(scope="module")
def budgeted(world, tmp_path_factory) -> Watched:
    """One step, evaluated with a budget that cuts a held-out document of every domain."""
    config = run_config(world, train_domains=["web"], steps=1, eval_tokens=BUDGET)
    return watched_train(world, tmp_path_factory.mktemp("budgeted") / "run", config)


def training_texts(world: World, domains: list[str]) -> list[str]:
    return [t for d in domains for t in world.texts(d) if not heldout_by_rule(t)]


def packed_stream(rows: list[torch.Tensor]) -> list[int]:
    """The token stream the rows were cut from: row i is tokens [iT, iT + T + 1), so consecutive
    rows share one token (checked), and the stream is every row's first T tokens, then the last
    row's last one."""
    flat = [row.tolist() for batch in rows for row in batch]
    for i in range(1, len(flat)):
        assert flat[i][0] == flat[i - 1][-1], f"rows {i - 1} and {i} do not overlap by one token"
    return [t for row in flat for t in row[:-1]] + flat[-1][-1:]


def segments(stream: list[int], eos: int) -> tuple[list[tuple[int, ...]], tuple[int, ...]]:
    """The stream cut after every end-of-document token: (complete segments without their EOS,
    the unfinished tail)."""
    done, current = [], []
    for t in stream:
        if t == eos:
            done.append(tuple(current))
            current = []
        else:
            current.append(t)
    return done, tuple(current)


# --- the guarantees -------------------------------------------------------------------------------


@pytest.mark.parametrize("setting", SETTINGS)
def test_no_token_of_a_heldout_document_reaches_a_training_batch(world, setting, request):
    seen = request.getfixturevalue(setting)
    trained = {t for batch in seen.rows for t in batch.flatten().tolist()}
    assert seen.rows and len(seen.rows) == STEPS
    for domain in DOMAINS:
        for text in world.texts(domain):
            if heldout_by_rule(text):
                leaked = trained & set(world.encode(text))
                assert not leaked, f"held-out {domain} document {text[:20]!r}... reached training ({len(leaked)} ids)"
    measured = {t for s in seen.eval_sets[0].values() for t in s.tokens.tolist()} - {world.eos()}
    assert measured and not trained & measured, "evaluated tokens were trained on"
    # and the stream is not vacuous: it is the training documents, every one of them
    allowed = {t for text in training_texts(world, SETTINGS[setting][0]) for t in world.encode(text)}
    assert trained - {world.eos()} == allowed


@pytest.mark.parametrize("setting", SETTINGS)
def test_every_document_is_packed_whole_with_its_end_token(world, setting, request):
    seen = request.getfixturevalue(setting)
    stream = packed_stream(seen.rows)
    done, tail = segments(stream, world.eos())
    expected = Counter(tuple(world.encode(t)) for t in training_texts(world, SETTINGS[setting][0]))
    n = sum(expected.values())
    assert len(done) >= n, "the run does not reach the end of the first epoch: lengthen it"
    for i, seg in enumerate(done):
        assert seg in expected, f"segment {i} ({len(seg)} tokens) is not one whole training document"
    for start in range(0, len(done) - n + 1, n):  # each full epoch: every document exactly once
        assert Counter(done[start:start + n]) == expected, f"epoch starting at segment {start}"
    assert any(doc[:len(tail)] == tail for doc in expected), "the unfinished last document is not a prefix"


def _documents_of(eval_set, eos: int) -> Counter:
    done, tail = segments(eval_set.tokens.tolist(), eos)
    assert tail == (), "an evaluation set ends with an end-of-document token"
    return Counter(done)


def test_eval_sets_are_the_heldout_text_in_every_setting_and_file_order(world, limited, mixed, tmp_path):
    """The limited- and mixed-domain runs, a run given the shards one by one in reverse order,
    and a run on the same documents in other files and another order, are evaluated on the same
    text: the held-out documents of each domain, whole."""
    listed = watched_train(world, tmp_path / "listed", run_config(
        world, train_domains=["web"], files=[str(p) for p in reversed(world.shard_files())], steps=1))
    moved = write_world(tmp_path / "moved")
    for domain in DOMAINS:  # shard 0's documents into shard 1's file and back, each file reversed
        texts = world.docs[domain]
        for s in range(SHARDS):
            write_jsonl(moved.root / "data" / domain / f"{domain}_{s:02d}.jsonl",
                        [{"text": t} for t in reversed(texts[SHARDS - 1 - s])])
    reordered = watched_train(moved, tmp_path / "reordered", run_config(moved, train_domains=["web"], steps=1))

    reference = limited.eval_sets[0]
    assert set(reference) == set(DOMAINS) and reference["web"].in_domain and not reference["code"].in_domain
    for domain in DOMAINS:
        held = Counter(tuple(world.encode(t)) for t in world.texts(domain) if heldout_by_rule(t))
        assert _documents_of(reference[domain], world.eos()) == held, domain
        for other in (mixed, listed):
            got = other.eval_sets[0][domain]
            assert torch.equal(got.tokens, reference[domain].tokens), domain
            assert got.n_bytes == reference[domain].n_bytes, domain
        got = reordered.eval_sets[0][domain]
        assert _documents_of(got, world.eos()) == held, domain  # the same documents, in the new order
        assert got.n_bytes == reference[domain].n_bytes, domain
    assert all(s.in_domain for s in mixed.eval_sets[0].values())


@pytest.mark.parametrize("setting", SETTINGS)
def test_a_resumed_run_trains_on_the_uninterrupted_runs_batches(world, setting, tmp_path, request):
    config = setting_config(world, setting)
    stop = 8  # Ctrl-C at step 8: the last checkpoint is step 6's (CHECKPOINT_EVERY = 3)
    # the design's point: the stream position of that checkpoint is inside a document (and, in
    # the limited setting, in the third epoch), so resuming must restore the offset in it
    position = (stop - 2) * BATCH * SEQ_LEN
    stream_order = training_texts(world, sorted(SETTINGS[setting][0]))  # files in sorted path order
    ends = list(itertools.accumulate(len(world.encode(t)) + 1 for t in stream_order))
    assert position % ends[-1] not in [0, *ends]

    run = tmp_path / "run"
    first = watched_train(world, run, config, stop_at=stop)
    assert len(first.rows) == stop - 1
    resumed = watched_train(world, run, config, resume=True)
    done = STEPS - len(resumed.rows)
    assert 0 < done < stop - 1, f"the resumed run started at step {done}, not at a checkpoint mid-run"
    uninterrupted = request.getfixturevalue(setting).rows
    for i, rows in enumerate(first.rows):
        assert torch.equal(rows, uninterrupted[i]), f"step {i + 1} before the stop"
    for i, rows in enumerate(resumed.rows):
        assert torch.equal(rows, uninterrupted[done + i]), f"step {done + i + 1} after resuming"


def test_a_run_on_local_shards_touches_no_network(world, tmp_path, monkeypatch):
    """Local shards are read without a single name lookup or connection (HF `datasets` would
    otherwise ping the hub on every file it opens, and stall for seconds where there is no
    network)."""
    tried = []

    def refuse(*args, **kwargs):
        tried.append(args[:2])
        raise OSError("this test has no network")

    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    seen = watched_train(world, tmp_path / "run", run_config(world, train_domains=["web"], steps=1))
    assert seen.rows and seen.eval_sets
    assert not tried, f"the run tried to reach {tried[0]}"


def utf8_bytes(text: str) -> int:
    return len(text.encode("utf-8"))


def evaluated_text(world: World, domain: str, budget: int, count=utf8_bytes) -> tuple[int, int]:
    """(tokens N, UTF-8 bytes) of the text an evaluation of `domain` with `budget` tokens covers,
    from the raw documents: the held-out ones in source order (files in sorted path order,
    records in file order; docs/training.md), each with its end-of-document token (one byte),
    the one that crosses the budget cut to the words that fit (its end token left out).
    `count=len` counts characters instead of bytes."""
    n_tokens = n_bytes = 0
    for text in world.texts(domain):
        if not heldout_by_rule(text):
            continue
        words = text.split(" ")  # one token per word (WhitespaceSplit and one space between words)
        room = budget - n_tokens
        if len(words) + 1 <= room:
            n_tokens, n_bytes = n_tokens + len(words) + 1, n_bytes + count(text) + 1
            continue
        return budget, n_bytes + count(" ".join(words[:room]))
    return n_tokens, n_bytes


@pytest.mark.parametrize("setting, budget", [("limited", 10 ** 6), ("mixed", 10 ** 6), ("budgeted", BUDGET)])
def test_reported_bits_per_byte_are_recomputed_from_the_raw_text(world, setting, budget, request):
    """bpb = nats/token x N / (ln 2 x bytes), N the tokens of the evaluated text and bytes its
    UTF-8 bytes plus one per end-of-document token (docs/evaluation.md): the N - 1 scored tokens
    are credited with their share of the bytes. The loss is recomputed too, from the model as it
    was evaluated."""
    seen = request.getfixturevalue(setting)
    evals = [r for r in seen.records if r["kind"] == "eval"]
    assert {r["domain"] for r in evals} == set(DOMAINS)
    for record in evals:
        domain = record["domain"]
        n_tokens, n_bytes = evaluated_text(world, domain, budget)
        assert record["eval_tokens"] == n_tokens - 1 and seen.eval_sets[-1][domain].tokens.numel() == n_tokens
        # what a wrong byte count could use instead differs here: tokens, characters
        chars, _ = evaluated_text(world, domain, budget, count=len)
        assert n_bytes not in (n_tokens, chars), domain
        own = seen.own_loss[-1][domain]
        assert record["loss"] == pytest.approx(own, rel=1e-5), domain  # a float32 model against float64
        assert record["bpb"] == pytest.approx(record["loss"] * n_tokens / (math.log(2) * n_bytes), rel=1e-12), domain
    if budget < 10 ** 6:  # the budget cut a document in every domain (a whole-document set ends with EOS)
        assert all(s.tokens[-1].item() != world.eos() for s in seen.eval_sets[-1].values())
