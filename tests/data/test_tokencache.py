"""The token cache (seqdsl/data/tokencache.py): the stream packed from it is the on-the-fly
stream of seqdsl/data/packing.py, token for token and cursor for cursor; its key follows content,
not paths; a damaged, stale or half-built cache is detected and rebuilt, never used."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest

from seqdsl.data.documents import Document
from seqdsl.data.packing import Cursor, PackedSequences
from seqdsl.data.tokencache import CachedSequences, open_cache
from seqdsl.data.tokenizer import ByteTokenizer, load_tokenizer
from tests.data.sources import MemorySource

HELDOUT = 0.2


def _docs(n: int = 60) -> list[Document]:
    return [Document("web" if i % 3 else "wiki", f"doc {i} é " + "xyz" * (i % 11)) for i in range(n)]


def _shards(tmp_path: Path, docs: list[Document]) -> list[str]:
    """The documents as JSONL shards, one folder per domain (the folder names the domain)."""
    for domain in {d.domain for d in docs}:
        folder = tmp_path / "corpus" / domain
        folder.mkdir(parents=True, exist_ok=True)
        rows = [d for d in docs if d.domain == domain]
        half = len(rows) // 2
        for i, part in enumerate((rows[:half], rows[half:])):
            (folder / f"{domain}_{i}.jsonl").write_text("".join(json.dumps({"text": d.text}) + "\n" for d in part))
    return [str(tmp_path / "corpus")]


def _cache(tmp_path, source, tokenizer=None, domains=("web", "wiki"), messages=None):
    say = (messages.append if messages is not None else (lambda m: None))
    return open_cache(source, tokenizer or ByteTokenizer(), list(domains), HELDOUT, root=tmp_path / "cache", say=say)


def _on_the_fly(source, domains, seq_len, cursor=Cursor(), tokenizer=None):
    tok = tokenizer or ByteTokenizer()
    return PackedSequences(lambda: source.documents(domains), tok.encode, tok.eos_id, seq_len, HELDOUT, cursor)


@pytest.fixture
def shard_source(tmp_path):
    from seqdsl.data.shards import ShardSource

    return ShardSource(_shards(tmp_path, _docs()))


@pytest.mark.parametrize("train", [["web"], ["web", "wiki"]])
def test_cached_stream_is_the_on_the_fly_stream_with_its_cursors(tmp_path, shard_source, train):
    cache = _cache(tmp_path, shard_source)
    fly, cached = _on_the_fly(shard_source, train, 16), CachedSequences(cache, train, 16)
    for step in range(40):  # several epochs of this small corpus
        n = 1 + step % 3
        assert cached.batch(n).tolist() == fly.batch(n).tolist(), f"step {step}"
        assert cached.cursor == fly.cursor, f"cursor after step {step}"


def test_resume_from_a_cursor_continues_the_exact_stream(tmp_path, shard_source):
    cache = _cache(tmp_path, shard_source)
    first = CachedSequences(cache, ["web"], 8)
    for _ in range(23):
        first.batch(2)
    saved = Cursor(**first.cursor.to_json())
    after = first.batch(5).tolist()
    assert CachedSequences(cache, ["web"], 8, saved).batch(5).tolist() == after
    assert _on_the_fly(shard_source, ["web"], 8, saved).batch(5).tolist() == after


def test_held_out_documents_never_reach_the_cached_stream(tmp_path):
    # each document is one repeated distinctive byte: any token of a held-out one would show
    docs = [Document("web", chr(0x41 + i) * (5 + i)) for i in range(40)]
    source = MemorySource(docs)
    cache = open_cache(source, ByteTokenizer(), ["web"], 0.3, root=tmp_path / "c", say=lambda m: None)
    from seqdsl.data.documents import is_heldout

    held = {ord(d.text[0]) for d in docs if is_heldout(d.text, 0.3)}
    kept = {ord(d.text[0]) for d in docs if not is_heldout(d.text, 0.3)}
    assert held and kept
    seen = set(CachedSequences(cache, ["web"], 7).batch(200).flatten().tolist())
    assert seen & held == set()
    assert seen == kept | {0}


def test_a_file_tokenizer_gives_the_same_ids_batched(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"[UNK]": 0, "<|endoftext|>": 1, **{f"w{i}": i + 2 for i in range(50)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(tmp_path / "tokenizer.json"))
    tokenizer = load_tokenizer(str(tmp_path / "tokenizer.json"))
    docs = [Document("web", " ".join(f"w{(i * j) % 60}" for j in range(i % 9 + 1))) for i in range(50)]
    source = MemorySource(docs)
    cache = _cache(tmp_path, source, tokenizer, domains=("web",))
    assert cache.tokens.dtype == np.uint16
    fly = _on_the_fly(source, ["web"], 6, tokenizer=tokenizer)
    assert CachedSequences(cache, ["web"], 6).batch(30).tolist() == fly.batch(30).tolist()


def test_key_follows_content_not_paths(tmp_path):
    from seqdsl.data.shards import ShardSource

    docs = _docs(30)
    a = _cache(tmp_path, ShardSource(_shards(tmp_path / "a", docs)))
    b = _cache(tmp_path, ShardSource(_shards(tmp_path / "b", docs)))  # the same bytes elsewhere
    assert a.path == b.path
    edited = docs[:-1] + [Document(docs[-1].domain, docs[-1].text + "!")]
    c = _cache(tmp_path, ShardSource(_shards(tmp_path / "c", edited)))
    assert c.path != a.path


@pytest.mark.parametrize("damage", ["truncate", "flip", "meta"])
def test_a_damaged_cache_is_reported_and_rebuilt_never_used(tmp_path, shard_source, damage):
    good = _cache(tmp_path, shard_source)
    expected = CachedSequences(good, ["web"], 8).batch(10).tolist()
    tokens = good.path / "tokens.bin"
    if damage == "truncate":
        tokens.write_bytes(tokens.read_bytes()[:-3])
    elif damage == "flip":
        raw = bytearray(tokens.read_bytes())
        raw[len(raw) // 2] ^= 0xFF
        tokens.write_bytes(bytes(raw))
    else:
        (good.path / "meta.json").write_text("{")
    messages: list[str] = []
    rebuilt = _cache(tmp_path, shard_source, messages=messages)
    assert any("cannot be used" in m and "rebuilding" in m for m in messages), messages
    assert CachedSequences(rebuilt, ["web"], 8).batch(10).tolist() == expected


def test_a_killed_build_leaves_no_cache(tmp_path, shard_source, monkeypatch):
    import seqdsl.data.tokencache as tc

    def boom(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(tc, "_build", boom)
    with pytest.raises(KeyboardInterrupt):
        _cache(tmp_path, shard_source)
    assert not [p for p in (tmp_path / "cache").iterdir()], "nothing half-built may stay"


def test_an_unchanged_cache_is_hashed_once_and_a_rewrite_is_still_caught(tmp_path, shard_source, monkeypatch):
    """Opening a cache re-hashes its files only when they changed since a full check passed
    (size or modification time), so a large corpus does not pay a full read per start; a cache
    written moments ago is not trusted by its times (they are coarser than they look)."""
    import os

    import seqdsl.data.tokencache as tc

    good = _cache(tmp_path, shard_source)
    old = time.time_ns() - 10**10  # as if built ten seconds ago
    for name in tc._FILES:
        os.utime(good.path / name, ns=(old, old))
    hashed: list[str] = []
    real = tc.file_sha256
    monkeypatch.setattr(tc, "file_sha256", lambda p: hashed.append(p.name) or real(p))
    _cache(tmp_path, shard_source)
    assert sorted(hashed) == sorted(tc._FILES)  # the first open checks and stamps
    hashed.clear()
    _cache(tmp_path, shard_source)
    assert hashed == []  # unchanged: trusted
    tokens = good.path / "tokens.bin"
    raw = bytearray(tokens.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    tokens.write_bytes(bytes(raw))  # a new modification time
    messages: list[str] = []
    _cache(tmp_path, shard_source, messages=messages)
    assert any("does not match its checksum" in m for m in messages), messages


def test_a_freshly_written_cache_is_not_stamped(tmp_path, shard_source):
    import seqdsl.data.tokencache as tc

    good = _cache(tmp_path, shard_source)
    _cache(tmp_path, shard_source)
    assert not (good.path / tc._VERIFIED).exists()
