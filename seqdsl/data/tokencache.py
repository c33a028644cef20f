"""The token cache: a corpus tokenized once into flat token arrays, read by memory map.

Shape legend: N documents in the cache, P tokens in all (every document followed by its
end-of-document token), T seq_len.

A cache holds the training pieces of the chosen domains (seqdsl/data/documents.py: the documents
with their held-out units removed; a document with none held out is one piece) in the source's
fixed order, each followed by the end-of-document token: exactly what packing lays end to end.

    tokens.bin    (P,) uint16 when the vocabulary fits, else uint32: the pieces end to end
    docs.npy      (N, 4) int64 per piece: token start, token length (EOS included), domain
                  index, UTF-8 bytes of its text
    meta.json     the key, the domains, the dtype, the counts and the SHA-256 of the other files

The key is a digest of the corpus's *content* (every shard's bytes, in stream order, with the
domain each file feeds; or the builtin corpus's digest), of the tokenizer file's bytes, of the
fields read, of the held-out fraction and of this format's version: moving or renaming files
keeps the cache, editing one byte rebuilds it. A cache is written into a temporary folder and renamed into place when
complete, so a killed build leaves no cache, only a temporary folder that the next build
removes. On open every file's size is checked against meta.json, and its SHA-256 too unless the
file is unchanged (same size and modification time, `verified.json`) since a full check passed:
hashing a large corpus's cache on every start would cost seconds to minutes. A damaged or stale
cache is reported in one line and rebuilt, never used.

`CachedSequences` packs training sequences out of a cache with exactly the meaning of
`seqdsl.data.packing.PackedSequences` (same stream, same cursor; several training domains
interleaved by seqdsl/data/mixing.py), but as a pure function of the position in the stream: no
tokenizing and no Python loop per piece between steps.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from contextlib import nullcontext
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from seqdsl.atomic import write_atomic
from seqdsl.cache_root import cache_dir
from seqdsl.data.documents import Document, DocumentSource, split_heldout
from seqdsl.data.mixing import mixed_order, piece_bytes
from seqdsl.data.packing import Cursor
from seqdsl.data.readahead import ReadAhead
from seqdsl.data.shards import file_sha256
from seqdsl.errors import SeqError

FORMAT = 2
ENCODE_BATCH = 2048  # pieces per `encode_batch` call: big enough to keep every core busy
READ_AHEAD = 2  # batches read on a thread ahead of the tokenizer (0: read in turn; benchmarks/bench_token_cache.py)
_FILES = ("tokens.bin", "docs.npy")
_VERIFIED = "verified.json"  # each file's [size, mtime_ns] when its SHA-256 last matched meta.json


def cache_key(content: list[str], tokenizer_digest: str, domains: list[str], heldout: float) -> str:
    record = {"format": FORMAT, "content": content, "tokenizer": tokenizer_digest, "domains": sorted(domains),
              "heldout": heldout}
    return hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()[:20]


@dataclass(frozen=True)
class TokenCache:
    """An opened, verified cache (see the module docstring for the files)."""

    path: Path
    domains: tuple[str, ...]
    tokens: np.ndarray  # (P,) memory map
    docs: np.ndarray  # (N, 4) int64 per piece: start, length, domain index, bytes

    def select(self, domains: list[str]) -> np.ndarray:
        """Indices of the pieces of `domains`, in stream order."""
        return np.flatnonzero(np.isin(self.docs[:, 2], [self.domains.index(d) for d in domains if d in self.domains]))


def default_root() -> Path:
    """Where token caches live: `tokens/` under the cache root (seqdsl/cache_root.py)."""
    return cache_dir("tokens")


def _dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16) if vocab_size <= 2**16 else np.dtype(np.uint32)


def _verify(path: Path, key: str) -> tuple[dict | None, str]:
    """(meta, "") for an intact cache with this key, else (None, why it cannot be used)."""
    try:
        meta = json.loads((path / "meta.json").read_text())
    except (OSError, ValueError):
        return None, "its meta.json is missing or unreadable"
    if meta.get("key") != key or meta.get("format") != FORMAT:
        return None, "it was built for other data, tokenizer or format"
    stamps = {}  # each file's [size, mtime_ns], from one stat
    for name in _FILES:
        try:
            st = (path / name).stat()
        except OSError:
            return None, f"{name} is missing or has the wrong size"
        if st.st_size != meta["sizes"][name]:
            return None, f"{name} is missing or has the wrong size"
        stamps[name] = [st.st_size, st.st_mtime_ns]
    try:
        if json.loads((path / _VERIFIED).read_text()) == stamps:
            return meta, ""  # unchanged since its checksums last matched
    except (OSError, ValueError):
        pass
    for name in _FILES:
        if file_sha256(path / name) != meta["sha256"][name]:
            return None, f"{name} does not match its checksum"
    _write_stamps(path, stamps)
    return meta, ""


# A file written within this many seconds of the check is not stamped: file times are coarser
# than their nanosecond field (a kernel clock tick), so a rewrite in the same tick as the write
# the check saw would keep its stamp; after the margin, any later write shows ("racy git").
_STAMP_MARGIN_NS = 2_000_000_000


def _write_stamps(path: Path, stamps: dict) -> None:
    """Record a passed full check (atomically; a read-only cache is simply checked every time)."""
    if any(mtime > time.time_ns() - _STAMP_MARGIN_NS for _, mtime in stamps.values()):
        return  # too fresh to trust its time: the next open checks it again
    try:
        write_atomic(path / _VERIFIED, json.dumps(stamps))
    except OSError:
        pass


def _open(path: Path, meta: dict) -> TokenCache:
    tokens = np.memmap(path / "tokens.bin", dtype=np.dtype(meta["dtype"]), mode="r", shape=(meta["tokens"],)) \
        if meta["tokens"] else np.zeros(0, dtype=np.dtype(meta["dtype"]))
    return TokenCache(path, tuple(meta["domains"]), tokens, np.load(path / "docs.npy"))


def _pieces(documents: Iterator[Document], heldout: float) -> Iterator[Document]:
    """The training pieces of `documents`, each as a Document of its domain."""
    for doc in documents:
        for piece in split_heldout(doc.text, heldout)[0]:
            yield Document(doc.domain, piece)


def _batches(documents: Iterator[Document], size: int) -> Iterator[list[Document]]:
    batch: list[Document] = []
    for doc in documents:
        batch.append(doc)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def _build(tmp: Path, source: DocumentSource, tokenizer, domains: list[str], heldout: float, key: str,
           progress: Callable[[int, int], None]) -> None:
    """Tokenize every training piece into tmp/: tokens streamed to disk batch by batch, and the
    per-piece table kept as one small numpy chunk per batch, so the corpus never has to fit in
    memory (32 bytes per piece do)."""
    dtype = _dtype(tokenizer.vocab_size)
    index = {d: i for i, d in enumerate(domains)}
    tables: list[np.ndarray] = []
    start = 0
    batches = _batches(_pieces(source.documents(domains), heldout), ENCODE_BATCH)
    # the next batches are read (Python) while this one is tokenized (Rust threads, no GIL)
    reader = ReadAhead(batches, READ_AHEAD) if READ_AHEAD else nullcontext(batches)
    with open(tmp / "tokens.bin", "wb") as out, reader as read:
        for batch in read:
            encoded = tokenizer.encode_batch([doc.text for doc in batch])
            lengths = np.array([len(ids) + 1 for ids in encoded], dtype=np.int64)  # + the EOS token
            n_bytes = np.array([piece_bytes(doc.text) for doc in batch], dtype=np.int64)
            table = np.stack([start + np.cumsum(lengths) - lengths, lengths,
                              np.array([index[doc.domain] for doc in batch], dtype=np.int64), n_bytes], axis=1)
            flat = np.full(int(lengths.sum()), tokenizer.eos_id, dtype=dtype)
            for row, ids in zip(table, encoded):
                flat[row[0] - start: row[0] - start + row[1] - 1] = ids
            out.write(flat.tobytes())
            tables.append(table)
            start += int(lengths.sum())
            progress(len(batch), int(n_bytes.sum()))
    docs = np.concatenate(tables) if tables else np.zeros((0, 4), dtype=np.int64)
    np.save(tmp / "docs.npy", docs)
    meta = {"format": FORMAT, "key": key, "domains": domains, "dtype": dtype.name, "tokens": start,
            "documents": len(docs), "tokenizer": getattr(tokenizer, "name", "?"),
            "sizes": {n: (tmp / n).stat().st_size for n in _FILES},
            "sha256": {n: file_sha256(tmp / n) for n in _FILES}}
    (tmp / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")


def open_cache(source: DocumentSource, tokenizer, domains: list[str], heldout: float, *,
               root: Path | None = None, say: Callable[[str], None] = print,
               note: Callable[[str], None] = lambda line: None,
               progress: Callable[[int, int], None] | None = None) -> TokenCache | None:
    """The verified token cache of the training pieces of `domains` of `source` (held-out units
    of fraction `heldout` removed) under `tokenizer`, built on first use;
    None when the source's content cannot be digested (not cached: read on the fly). `say`
    gets warnings (a cache that cannot be used), `note` what is being done (a build starting)."""
    content = source.content()
    if content is None:
        return None
    key = cache_key(content, tokenizer.digest(), domains, heldout)
    root = root or default_root()
    path = root / key
    if path.exists():
        meta, why = _verify(path, key)
        if meta is not None:
            return _open(path, meta)
        say(f"warning: token cache {path} cannot be used ({why}): rebuilding it")
        shutil.rmtree(path, ignore_errors=True)
    root.mkdir(parents=True, exist_ok=True)
    for stale in root.glob(f".{key}.*"):  # a build killed before its rename
        shutil.rmtree(stale, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=root))
    note(f"tokenizing {', '.join(domains)} into the token cache {path} (once; later runs read it)")
    try:
        _build(tmp, source, tokenizer, domains, heldout, key, progress or (lambda docs, n_bytes: None))
        try:
            os.replace(tmp, path)
        except OSError:  # another process renamed its identical build into place first: keep that one
            if not path.is_dir():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    meta, why = _verify(path, key)
    if meta is None:  # another process replaced it mid-way; never use what we cannot verify
        raise SeqError(f"token cache {path} failed its check right after it was built ({why})")
    return _open(path, meta)


class CachedSequences:
    """Endless packed sequences of (T + 1) tokens of the training pieces of a cache: the stream
    and cursor of `PackedSequences` over the same documents, as a function of position.

    The training pieces (of `domains`, in the mixed order) laid end to end form one epoch of E
    tokens; the stream is epochs back to back. Position p of the stream is token p % E of epoch
    p // E; sequence i of a run starting at position p0 is positions [p0 + iT, p0 + iT + T + 1).
    """

    def __init__(self, cache: TokenCache, domains: list[str], seq_len: int, cursor: Cursor = Cursor()):
        self.cache, self.seq_len = cache, seq_len
        docs = cache.select(domains)
        if len(docs) == 0:
            raise SeqError("no training documents: every document of the training domains is held out "
                           "or the domains are empty", hint="check data.train_domains and data.heldout")
        docs = docs[mixed_order(cache.docs[docs, 2], cache.docs[docs, 3])]  # several domains: interleaved
        self._starts = cache.docs[docs, 0]  # physical start of each training document
        lengths = cache.docs[docs, 1]
        self._ends = np.cumsum(lengths)  # stream offset just past each document, within an epoch
        self._begins = self._ends - lengths
        self.epoch_tokens = int(self._ends[-1])
        if cursor.doc >= len(docs) or cursor.offset >= lengths[cursor.doc]:
            raise SeqError(f"the checkpoint's data cursor {cursor.to_json()} is past the training documents",
                           hint="resume with the data the run was started with")
        self.position = cursor.epoch * self.epoch_tokens + int(self._begins[cursor.doc]) + cursor.offset

    @property
    def cursor(self) -> Cursor:
        """Where the next sequence starts, as (epoch, training piece, offset)."""
        epoch, within = divmod(self.position, self.epoch_tokens)
        doc = int(np.searchsorted(self._ends, within, side="right"))
        return Cursor(epoch, doc, within - int(self._begins[doc]))

    def _gather(self, positions: np.ndarray) -> np.ndarray:
        within = positions % self.epoch_tokens
        doc = np.searchsorted(self._ends, within, side="right")
        return np.asarray(self.cache.tokens[self._starts[doc] + (within - self._begins[doc])])

    def batch(self, n: int) -> torch.Tensor:
        """The next n sequences, (n, T + 1) int64; advances the cursor by n * T tokens."""
        T = self.seq_len
        positions = self.position + np.arange(n, dtype=np.int64)[:, None] * T + np.arange(T + 1, dtype=np.int64)
        self.position += n * T
        return torch.from_numpy(self._gather(positions).astype(np.int64))

    def next(self) -> torch.Tensor:
        return self.batch(1)[0]
