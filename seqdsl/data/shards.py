"""Domain-labelled shards on disk (JSONL, JSONL.zst, parquet) or on the Hugging Face hub, read
through HF `datasets` in streaming mode.

Records are `{"text": ..., "meta": {...}}` (the field names are configurable). A record's domain
is read from a meta field given as a dotted path (`meta.domain`, SlimPajama's
`meta.redpajama_set_name`) or, when no field is given, is the name of the folder holding the file
(`data/web_blogs/blogs_train_00.jsonl.zst` -> `web_blogs`). Files stream in sorted path order,
records in file order: the order is fixed, so shuffle the shards once when you make them.

A folder means its shards: `.jsonl`, `.jsonl.zst`, `.jsonl.gz` and `.parquet` files, searched
recursively; anything else in it (a `filter_stats.json`, a README) is not data. A file or glob
given explicitly may also be a `.json` / `.json.zst` file of records.

Validation and test files are never read: a file whose name, or a folder inside the given folder
whose name, has a part (split at `_`, `-` or `.`) in `SPLIT_WORDS`, e.g. `blogs_val.jsonl.zst`,
`validation-00000-of-00001.parquet`, `test/part0.jsonl`, is left out of folders and globs (below
their fixed leading folders), and a file named on its own with such a name is an error. The
held-out text seqdsl evaluates on is carved from the other files by document hash
(seqdsl/data/documents.py), so a corpus's own val/test files stay untouched for a final
evaluation outside training.

A missing file, an unreadable or corrupt one, a truncated `.zst` one, or a record without the
text field is one `SeqFileError` naming the file.
"""

from __future__ import annotations

import glob
import hashlib
import logging
import re
from collections.abc import Iterator
from pathlib import Path

from seqdsl.data.documents import Document
from seqdsl.errors import SeqError, SeqFileError

SUFFIXES = {".jsonl": "json", ".json": "json", ".jsonl.zst": "json", ".json.zst": "json",
            ".jsonl.gz": "json", ".parquet": "parquet"}
# what a folder's files must end with to be read: the shard formats, not any JSON beside them
FOLDER_SUFFIXES = (".jsonl", ".jsonl.zst", ".jsonl.gz", ".parquet")
# a name part that marks a file (or a folder of files) as a validation or test split
SPLIT_WORDS = frozenset({"val", "valid", "validation", "dev", "test"})


def _format(path: Path) -> str | None:
    name = path.name
    for suffix, builder in SUFFIXES.items():
        if name.endswith(suffix):
            return builder
    return None


def split_word(name: str) -> str | None:
    """The part of a file or folder name that marks it as a validation or test split, if any:
    `blogs_val.jsonl.zst` -> `val`; `contest_00.jsonl` -> None (parts, not substrings)."""
    return next((part for part in re.split(r"[-_.]", name.lower()) if part in SPLIT_WORDS), None)


def _split_marker(path: Path, root: Path) -> str | None:
    """The split word of `path`'s name or of a folder between `root` and it."""
    return next((word for part in path.relative_to(root).parts if (word := split_word(part))), None)


def _folder_files(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*")
            if p.is_file() and p.name.endswith(FOLDER_SUFFIXES) and not _split_marker(p, folder)]


def _glob_files(pattern: str) -> list[Path]:
    """The files a glob matches, less those marked as splits below its fixed leading folders (as
    inside a folder)."""
    parts = Path(pattern).parts
    fixed = next((i for i, part in enumerate(parts) if glob.has_magic(part)), len(parts) - 1)
    root = Path(*parts[:fixed]) if fixed else Path()
    return [Path(p) for p in glob.glob(pattern, recursive=True)
            if Path(p).is_file() and not _split_marker(Path(p), root)]


def _refuse_split_file(path: Path) -> None:
    word = split_word(path.name)
    if word:
        raise SeqFileError(f"data file {path} is a validation or test split (`{word}` in its name); "
                           "seqdsl never trains on such files",
                           hint="leave it out of data.files: the held-out text is carved from the training "
                                "files by document hash (data.heldout)")


def expand_files(patterns: list[str]) -> list[Path]:
    """Files named by paths, globs or folders (searched recursively for shards), sorted, without
    validation or test files (see the module doc); an entry that matches nothing is an error."""
    files: set[Path] = set()
    for pattern in patterns:
        path = Path(pattern)
        if path.is_dir():
            found = _folder_files(path)
        elif path.is_file():
            _refuse_split_file(path)
            found = [path]
        else:
            found = _glob_files(pattern)
        if not found:
            what = (f"folder {pattern} holds no data shards" if path.is_dir()
                    else f"data file not found: {pattern}")
            raise SeqFileError(what, hint="give files, globs or folders of .jsonl, .jsonl.zst or .parquet shards "
                                          "(validation and test files are left out)")
        for p in found:
            if _format(p) is None:
                raise SeqFileError(f"unsupported data file {p}", hint=f"supported: {', '.join(SUFFIXES)}")
        files.update(found)
    return sorted(files)


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file's bytes, read in 4 MiB pieces."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


def _field(record: dict, dotted: str):
    value = record
    for part in dotted.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


class ShardSource:
    """Local shards as a `DocumentSource`."""

    def __init__(self, files: list[str], *, domain_field: str | None = None, text_field: str = "text"):
        self.files = expand_files(files)
        self.domain_field = domain_field
        self.text_field = text_field

    def domains(self) -> list[str]:
        if self.domain_field is None:
            return sorted({p.parent.name for p in self.files})
        raise SeqError(f"the domains of records labelled by `{self.domain_field}` are only known after reading "
                       "every file", hint="list them: --set data.eval_domains='[\"a\",\"b\"]'")

    def documents(self, domains: list[str]) -> Iterator[Document]:
        wanted = set(domains)
        for path in self.files:
            folder = path.parent.name
            if self.domain_field is None and folder not in wanted:
                continue
            for record in _records(path):
                domain = folder if self.domain_field is None else _field(record, self.domain_field)
                if domain not in wanted:
                    continue
                text = _field(record, self.text_field)
                if not isinstance(text, str):
                    raise SeqFileError(f"{path}: a record has no text field `{self.text_field}`",
                                       hint="set data.text_field to the field holding the text")
                yield Document(str(domain), text)

    def describe(self) -> str:
        return f"files:{len(self.files)} ({self.files[0].parent}...)"

    def content(self) -> list[str] | None:
        """The fields read, then per file in stream order: the domain it feeds (its folder, when
        domains come from folders) and the SHA-256 of its bytes."""
        fields = f"text={self.text_field} domain={self.domain_field or '<folder>'}"
        return [fields] + [f"{p.parent.name if self.domain_field is None else ''}:{file_sha256(p)}"
                           for p in self.files]


def _records(path: Path) -> Iterator[dict]:
    """The records of one file, streamed; any failure to read it is one SeqFileError, and a
    `.zst` file cut short says so (also when the cut fell between two records, which reads as
    fewer records without an error)."""
    if path.stat().st_size == 0:  # no records (datasets' reader stops with a bare StopIteration on it)
        return
    datasets = _quiet_datasets()
    try:
        stream = datasets.load_dataset(_format(path), data_files=[str(path)], split="train", streaming=True)
        yield from stream
    except GeneratorExit:
        raise
    except Exception as err:  # datasets, pyarrow, zstandard and json each raise their own kinds
        _refuse_truncated(path)
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise SeqFileError(f"cannot read data file {path}: {first}") from None
    _refuse_truncated(path)


def _quiet_datasets():
    """HF `datasets`, imported, with its progress bars and log lines off: a file it fails to read
    becomes our one SeqFileError, which its own error log line would only precede."""
    import datasets

    datasets.disable_progress_bars()
    datasets.logging.set_verbosity(logging.CRITICAL + 1)
    # every load_dataset call would otherwise send a request to the hub to count a "download" of
    # its json / parquet reader: reading local files must not touch the network, and without one
    # the request's name lookup can stall a read for seconds
    datasets.config.HF_UPDATE_DOWNLOAD_COUNTS = False
    return datasets


def _refuse_truncated(path: Path) -> None:
    if path.name.endswith(".zst") and zstd_truncated(path):
        raise SeqFileError(f"data file {path} is truncated: its zstd stream ends before its last frame does",
                           hint="the file was cut short (an interrupted copy or download); copy it again")


ZSTD_MAGIC = 0xFD2FB528
SKIPPABLE_MAGIC, SKIPPABLE_MASK = 0x184D2A50, 0xFFFFFFF0  # skippable frames: 0x184D2A50 .. 0x184D2A5F


def zstd_truncated(path: Path) -> bool:
    """Whether a zstd file ends inside a frame. Walks the frame and block headers (RFC 8878: a
    3-byte header per block of at most 128 KiB) without decompressing, so it costs a few reads per
    block. A file that is not zstd at all is not called truncated (reading it fails on its own)."""
    import zstandard

    size = path.stat().st_size
    with open(path, "rb") as f:
        pos = 0
        while pos < size:
            f.seek(pos)
            head = f.read(18)  # the longest frame header
            if len(head) < 4:
                return True
            magic = int.from_bytes(head[:4], "little")
            if magic & SKIPPABLE_MASK == SKIPPABLE_MAGIC:
                if len(head) < 8:
                    return True
                pos += 8 + int.from_bytes(head[4:8], "little")
                continue
            if magic != ZSTD_MAGIC:
                return False
            try:
                header = zstandard.frame_header_size(head)
                checksum = zstandard.get_frame_parameters(head).has_checksum
            except zstandard.ZstdError:
                return len(head) < 18  # a header cut short; else a corrupt one
            pos = _blocks_end(f, pos + header) + (4 if checksum else 0)
    return pos > size


def _blocks_end(f, pos: int) -> int:
    """Where the blocks of a frame starting at `pos` end (past the file's end when cut short)."""
    while True:
        f.seek(pos)
        raw = f.read(3)
        if len(raw) < 3:
            return pos + 3
        block = int.from_bytes(raw, "little")
        last, kind, size = block & 1, (block >> 1) & 3, block >> 3
        pos += 3 + (1 if kind == 1 else size)  # an RLE block (kind 1) stores its one byte
        if last:
            return pos


class HubSource(ShardSource):
    """A dataset on the Hugging Face hub, streamed (needs the network; never used by the tests).
    The domain comes from `domain_field` (e.g. `meta.redpajama_set_name`)."""

    def __init__(self, name: str, *, split: str = "train", domain_field: str | None = None,
                 text_field: str = "text"):
        if domain_field is None:
            raise SeqError("a hub dataset needs data.domain_field (e.g. meta.redpajama_set_name)")
        self.name, self.split = name, split
        self.domain_field, self.text_field = domain_field, text_field

    def documents(self, domains: list[str]) -> Iterator[Document]:
        datasets = _quiet_datasets()
        try:
            stream = datasets.load_dataset(self.name, split=self.split, streaming=True)
            wanted = set(domains)
            for record in stream:
                domain = _field(record, self.domain_field)
                if domain in wanted:
                    yield Document(str(domain), _field(record, self.text_field) or "")
        except GeneratorExit:
            raise
        except Exception as err:
            raise SeqError(f"cannot stream hub dataset {self.name}: {str(err).splitlines()[0]}") from None

    def describe(self) -> str:
        return f"hub:{self.name}:{self.split}"

    def content(self) -> None:
        return None  # a hub stream has no digest short of reading it all: read on the fly
