"""Packing: every training token is a target exactly once, in order; held-out documents never
appear; a stream rebuilt from a saved cursor continues exactly where the first one was."""

from __future__ import annotations

from seqdsl.data.documents import Document, is_heldout
from seqdsl.data.packing import Cursor, PackedSequences
from seqdsl.data.tokenizer import ByteTokenizer

DOCS = [Document("web", f"document number {i} " + "x" * (i % 7)) for i in range(40)]
HELDOUT = 0.2


def _stream(seq_len: int = 8, cursor: Cursor = Cursor()) -> PackedSequences:
    tok = ByteTokenizer()
    return PackedSequences(lambda: iter(DOCS), tok.encode, tok.eos_id, seq_len, HELDOUT, cursor)


def _expected_tokens() -> list[int]:
    """The training documents laid end to end, each followed by the end-of-document byte."""
    out = []
    for doc in DOCS:
        if not is_heldout(doc.text, HELDOUT):
            out += list(doc.text.encode()) + [0]
    return out


def test_sequences_tile_the_training_documents():
    expected = _expected_tokens()
    assert 0 < len(expected) < sum(len(d.text) + 1 for d in DOCS), "some documents are held out"
    stream, T = _stream(), 8
    n = len(expected) // T - 1
    seqs = [stream.next().tolist() for _ in range(n)]
    assert all(len(s) == T + 1 for s in seqs)
    for i, s in enumerate(seqs):
        assert s == expected[i * T: i * T + T + 1], f"sequence {i}"


def test_stream_wraps_into_the_next_epoch():
    expected = _expected_tokens()
    stream, T = _stream(), 8
    seqs = [stream.next().tolist() for _ in range(2 * len(expected) // T)]
    flat = [t for s in seqs for t in s[:T]]
    assert flat[: 2 * len(expected)] == (expected * 2)[: len(flat[: 2 * len(expected)])]
    assert stream.cursor.epoch >= 1


def test_resumed_stream_continues_exactly():
    first = _stream()
    for _ in range(37):  # past the end of the first epoch
        first.next()
    saved = Cursor(**first.cursor.to_json())
    after = [first.next().tolist() for _ in range(25)]
    resumed = _stream(cursor=saved)
    assert [resumed.next().tolist() for _ in range(25)] == after


def test_heldout_split_depends_on_the_text_only():
    texts = [f"text {i}" for i in range(2000)]
    held = [t for t in texts if is_heldout(t, 0.1)]
    assert 150 < len(held) < 250  # about 10%
    assert held == [t for t in reversed(texts) if is_heldout(t, 0.1)][::-1]
