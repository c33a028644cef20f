"""Held-out units below the document (seqdsl/data/documents.py): a long document is cut into
units that join back to it, each held out by its own hash; a domain of one long document (a
book) is evaluated on its held-out units, which never reach training on either path (on the fly
or from the token cache); its evaluation text is the same in the limited- and the mixed-domain
setting and in any file order."""

from __future__ import annotations


import pytest

from seqdsl.data.documents import UNIT_CHARS, Document, is_heldout, split_heldout, units
from seqdsl.data.heldout import build_eval_sets
from seqdsl.data.packing import PackedSequences
from seqdsl.data.tokencache import CachedSequences, open_cache
from seqdsl.data.tokenizer import ByteTokenizer
from tests.data.sources import MemorySource

HELDOUT = 0.25


def _book(n_lines: int = 1500, tag: str = "b") -> str:
    """A long document of numbered lines (each ~70 characters), so any unit is recognisable."""
    return "".join(f"{tag} line {i:05d} of the only book in this domain, with some words.\n" for i in range(n_lines))


def test_units_join_back_to_the_document_within_the_size():
    text = _book()
    parts = units(text)
    assert "".join(parts) == text
    assert len(parts) > 1 and all(0 < len(p) <= UNIT_CHARS for p in parts)
    assert all(p.endswith("\n") for p in parts[:-1]), "cut at line ends where the text has them"
    assert units("short post") == ["short post"]
    no_breaks = "x" * (3 * UNIT_CHARS + 5)
    assert [len(p) for p in units(no_breaks)] == [UNIT_CHARS] * 3 + [5]


def test_split_is_a_partition_of_the_units_by_their_own_hash():
    text = _book()
    pieces, held = split_heldout(text, HELDOUT)
    parts = units(text)
    assert held == [u for u in parts if is_heldout(u, HELDOUT)]
    assert held and pieces, "this book has both (the test needs them)"
    assert "".join(pieces) == "".join(u for u in parts if not is_heldout(u, HELDOUT))
    # a piece is a run of consecutive kept units: as many pieces as runs
    runs = sum(1 for i, u in enumerate(parts) if not is_heldout(u, HELDOUT)
               and (i == 0 or is_heldout(parts[i - 1], HELDOUT)))
    assert len(pieces) == runs
    assert split_heldout("a short post", HELDOUT) in ((["a short post"], []), ([], ["a short post"]))


def _stream_text(stream, n_tokens: int, T: int = 64) -> str:
    seqs = stream.batch(n_tokens // T)
    return bytes(t for row in seqs.tolist() for t in row[:T]).decode("utf-8", errors="replace")


@pytest.mark.parametrize("cached", [False, True])
def test_a_one_document_domain_is_evaluated_on_units_never_trained_on(tmp_path, cached):
    book = _book()
    source = MemorySource([Document("books", book)])
    tok = ByteTokenizer()
    sets = build_eval_sets(source, tok, ["books"], [], heldout=HELDOUT, max_tokens=10**9)
    held = split_heldout(book, HELDOUT)[1]
    assert sets["books"].tokens.numel() == sum(len(u.encode()) + 1 for u in held)
    if cached:
        cache = open_cache(source, tok, ["books"], HELDOUT, root=tmp_path, say=lambda m: None)
        stream = CachedSequences(cache, ["books"], 64)
    else:
        stream = PackedSequences(lambda: source.documents(["books"]), tok.encode, tok.eos_id, 64, HELDOUT)
    trained = _stream_text(stream, 2 * len(book))  # two epochs
    for unit in held:
        for line in unit.splitlines():
            assert line not in trained, f"held-out text reached training: {line!r}"
    for piece in split_heldout(book, HELDOUT)[0]:
        assert piece.splitlines()[0] in trained


def test_eval_text_is_the_same_in_either_setting_and_file_order():
    docs = [Document("books", _book(tag="b")), Document("web", _book(300, tag="w")), Document("books", _book(900, tag="c"))]
    tok = ByteTokenizer()

    def books_set(order, train):
        return build_eval_sets(MemorySource(order), tok, ["books"], train, heldout=HELDOUT, max_tokens=10**9)["books"]

    limited = books_set(docs, ["web"])
    mixed = books_set(docs, ["web", "books"])
    assert limited.tokens.tolist() == mixed.tokens.tolist() and limited.n_bytes == mixed.n_bytes
    other_order = books_set([docs[1], docs[0], docs[2]], ["web"])
    assert other_order.tokens.tolist() == limited.tokens.tolist()
