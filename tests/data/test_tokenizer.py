"""Tokenizers: bytes, and tokenizer.json files through `tokenizers` (one built here; the real
GPT-NeoX-20B file when the shared data folder is present)."""

from __future__ import annotations

from pathlib import Path

import pytest

from seqdsl.data.tokenizer import ByteTokenizer, load_tokenizer
from seqdsl.errors import SeqError, SeqFileError

tokenizers = pytest.importorskip("tokenizers")
NEOX = Path(__file__).resolve().parents[3] / "shared" / "data" / "tokenizers" / "gpt-neox-20b" / "tokenizer.json"


def test_bytes_are_utf8():
    tok = load_tokenizer("bytes")
    assert isinstance(tok, ByteTokenizer) and tok.vocab_size == 256
    assert tok.encode("é!") == [0xC3, 0xA9, 0x21]


def _word_level(path: Path, with_eos: bool) -> str:
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"[UNK]": 0, "hello": 1, "world": 2}
    if with_eos:
        vocab["<|endoftext|>"] = 3
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(path))
    return str(path)


def test_tokenizer_json_encodes_and_finds_its_end_of_document_token(tmp_path):
    tok = load_tokenizer(_word_level(tmp_path / "tokenizer.json", with_eos=True))
    assert tok.encode("hello world nope") == [1, 2, 0]
    assert (tok.vocab_size, tok.eos_id) == (4, 3)


def test_tokenizer_errors_are_one_message(tmp_path):
    with pytest.raises(SeqFileError, match="tokenizer file not found"):
        load_tokenizer(str(tmp_path / "missing.json"))
    (tmp_path / "bad.json").write_text("{not a tokenizer")
    with pytest.raises(SeqFileError, match="cannot read tokenizer"):
        load_tokenizer(str(tmp_path / "bad.json"))
    (tmp_path / "other.json").write_text('{"hello": 1}')  # JSON, but not a tokenizer
    with pytest.raises(SeqFileError, match="valid JSON, but not a tokenizer.json"):
        load_tokenizer(str(tmp_path / "other.json"))
    with pytest.raises(SeqError, match="no end-of-document token"):
        load_tokenizer(_word_level(tmp_path / "noeos.json", with_eos=False))


@pytest.mark.skipif(not NEOX.is_file(), reason="the shared GPT-NeoX-20B tokenizer.json is not on this machine")
def test_gpt_neox_tokenizer_covers_every_id():
    tok = load_tokenizer(str(NEOX))
    assert tok.vocab_size == 50281 and tok.eos_id == 0  # added tokens run up to id 50280
    assert len(tok.encode("Hello world, this is a test.")) < 10


@pytest.mark.skipif(not NEOX.is_file(), reason="the shared GPT-NeoX-20B tokenizer.json is not on this machine")
def test_batch_encoding_gives_each_texts_own_ids():
    """`encode_batch` (the token cache's, on every core, without character offsets) against
    `encode` one text at a time, on text where offsets are not trivial (multi-byte characters,
    whitespace runs, an empty text)."""
    tok = load_tokenizer(str(NEOX))
    texts = ["Hello world, this is a test.", "", "naïve café — 東京 🚀\n\n\tend", "  spaced   out  " * 20]
    assert tok.encode_batch(texts) == [tok.encode(t) for t in texts]
