"""`data.eval_tokens` is a budget: each evaluated domain holds exactly min(budget, held-out tokens)
tokens, the document that crosses it cut (a long book no longer makes an evaluation of 95K
tokens), and bits per byte count the bytes of exactly the text the kept tokens stand for."""

from __future__ import annotations

import math
import random

import pytest
import torch

import seqdsl
from seqdsl.data.documents import Document, is_heldout, split_heldout
from seqdsl.data.heldout import build_eval_sets
from seqdsl.data.tokenizer import ByteTokenizer, load_tokenizer
from seqdsl.run.loss import evaluate
from seqdsl.ir.presets import model_at
from seqdsl.lower.lm import LanguageModel
from tests.data.sources import MemorySource

HELDOUT = 0.5
WORDS = "the a of river story night light house old we went they said long road".split()


def heldout_texts(n: int, words: int, seed: str, extra: str = "") -> list[str]:
    """n held-out texts (by the hash rule at HELDOUT) of about `words` words."""
    rng, out = random.Random(seed), []
    while len(out) < n:
        text = " ".join(rng.choice(WORDS) for _ in range(words)) + extra
        if is_heldout(text, HELDOUT):
            out.append(text)
    return out


def test_the_budget_is_exact_when_a_long_document_crosses_it():
    short = heldout_texts(3, 30, "short")
    book = heldout_texts(1, 20_000, "book")[0]  # ~100K bytes: one document, as a book is
    docs = [Document("books", t) for t in short[:2] + [book] + short[2:]]
    budget = 4096
    sets = build_eval_sets(MemorySource(docs), ByteTokenizer(), ["books"], [], heldout=HELDOUT, max_tokens=budget)
    # bytes, each held-out text then byte 0; a book is held out unit by unit (seqdsl/data/documents.py)
    stream = [b for t in short[:2] + split_heldout(book, HELDOUT)[1] for b in list(t.encode()) + [0]]
    assert len(stream) > budget + len(book) // 4, "the book's held-out units cross the budget"
    assert sets["books"].tokens.tolist() == stream[:budget]
    assert sets["books"].n_bytes == budget  # bytes: one token per byte, the cut book's too
    small = build_eval_sets(MemorySource(docs[:2]), ByteTokenizer(), ["books"], [], heldout=HELDOUT,
                            max_tokens=budget)
    assert small["books"].tokens.numel() == sum(len(t.encode()) + 1 for t in short[:2])  # all there is


def test_a_cut_through_a_multibyte_character_counts_the_bytes_kept():
    text = heldout_texts(1, 3, "accents", extra=" déjà vu " * 40)[0]
    budget = len(text.encode()) - len(" vu ".encode()) - 1  # inside the last `à` (2 bytes)
    assert text.encode()[budget - 1] == 0xC3
    sets = build_eval_sets(MemorySource([Document("fr", text)]), ByteTokenizer(), ["fr"], [], heldout=HELDOUT,
                           max_tokens=budget)
    assert sets["fr"].tokens.numel() == budget and sets["fr"].n_bytes == budget


# GPT-2's byte-to-character table (bytes_to_unicode): a byte-level BPE token is a string of these
# characters, one per byte, so a token's bytes can be read off its string independently of decode
def _byte_of_char() -> dict[str, int]:
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in chars:
            chars[b], extra = chr(256 + extra), extra + 1
    return {c: b for b, c in chars.items()}


def byte_level_tokenizer(path, texts: list[str]) -> str:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer)
    tok.save(str(path))
    return str(path)


def test_bits_per_byte_count_the_bytes_of_the_kept_tokens_of_a_cut_document(tmp_path):
    pytest.importorskip("tokenizers")
    texts = heldout_texts(4, 400, "bpe")
    tokenizer = load_tokenizer(byte_level_tokenizer(tmp_path / "tokenizer.json", texts))
    whole = [len(tokenizer.encode(t)) + 1 for t in texts[:2]]
    budget = sum(whole) + 157  # the third document is cut after 157 of its tokens
    sets = build_eval_sets(MemorySource([Document("web", t) for t in texts]), tokenizer, ["web"], [],
                           heldout=HELDOUT, max_tokens=budget)
    assert sets["web"].tokens.numel() == budget

    # independent recomputation: the cut document's kept tokens, read as bytes through the
    # byte-level alphabet, are the first bytes of its text; the whole ones count text + 1 byte
    byte_of = _byte_of_char()
    kept = sets["web"].tokens.tolist()[sum(whole):]
    kept_bytes = bytes(byte_of[c] for i in kept for c in tokenizer._tok.id_to_token(i))
    assert texts[2].encode().startswith(kept_bytes) and 0 < len(kept_bytes) < len(texts[2])
    expected_bytes = sum(len(t.encode()) + 1 for t in texts[:2]) + len(kept_bytes)
    assert sets["web"].n_bytes == expected_bytes

    # and evaluation's bits per byte divide by those bytes: loss * N / (ln 2 * bytes)
    program = seqdsl.loads("mixer a { heads = 2  head_dim = 8  position = rope }\n"
                           f"model m {{ layers = 1  d_model = 16  vocab = {tokenizer.vocab_size}  context = 32  "
                           "mixer = a }").program
    torch.manual_seed(0)
    lm = LanguageModel(program, model_at(program, "m").model).double()
    result = evaluate(lm, sets, seq_len=32, batch_size=4, device="cpu")["web"]
    assert result.bpb == pytest.approx(result.loss * budget / (math.log(2) * expected_bytes), rel=1e-12)


def test_a_domain_set_is_the_same_whatever_else_is_evaluated_and_in_any_file_order(tmp_path):
    from seqdsl.data.shards import ShardSource
    from tests.train.helpers import write_shards

    pytest.importorskip("datasets")
    root = write_shards(tmp_path, n=60)
    files = [str(root / "web"), str(root / "code")]

    def code_set(domains, file_list):
        sets = build_eval_sets(ShardSource(file_list), ByteTokenizer(), domains, ["web"], heldout=0.2, max_tokens=500)
        return sets["code"].tokens.tolist(), sets["code"].n_bytes

    limited = code_set(["web", "code"], files)
    assert len(limited[0]) == 500
    assert code_set(["code"], files) == limited
    assert code_set(["code", "web"], files[::-1]) == limited
