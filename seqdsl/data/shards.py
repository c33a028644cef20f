"""Domain-labelled shards on disk (JSONL, JSONL.zst, parquet) or on the Hugging Face hub, read
through HF `datasets` in streaming mode.

Records are `{"text": ..., "meta": {...}}` (the field names are configurable). A record's domain
is read from a meta field given as a dotted path (`meta.domain`, SlimPajama's
`meta.redpajama_set_name`) or, when no field is given, is the name of the folder holding the file
(`data/web_blogs/blogs_train_00.jsonl.zst` -> `web_blogs`). Files stream in sorted path order,
records in file order: the order is fixed, so shuffle the shards once when you make them.

A missing file, an unreadable or corrupt one, or a record without the text field is one
`SeqFileError` naming the file.
"""

from __future__ import annotations

import glob
from collections.abc import Iterator
from pathlib import Path

from seqdsl.data.documents import Document
from seqdsl.errors import SeqError, SeqFileError

SUFFIXES = {".jsonl": "json", ".json": "json", ".jsonl.zst": "json", ".json.zst": "json",
            ".jsonl.gz": "json", ".parquet": "parquet"}


def _format(path: Path) -> str | None:
    name = path.name
    for suffix, builder in SUFFIXES.items():
        if name.endswith(suffix):
            return builder
    return None


def expand_files(patterns: list[str]) -> list[Path]:
    """Files named by paths, globs or folders (searched recursively), sorted; an entry that
    matches nothing is an error."""
    files: set[Path] = set()
    for pattern in patterns:
        path = Path(pattern)
        if path.is_dir():
            found = [p for p in path.rglob("*") if p.is_file() and _format(p)]
        elif path.is_file():
            found = [path]
        else:
            found = [Path(p) for p in glob.glob(pattern, recursive=True) if Path(p).is_file()]
        if not found:
            raise SeqFileError(f"data file not found: {pattern}",
                               hint="give files, globs or folders of .jsonl, .jsonl.zst or .parquet shards")
        for p in found:
            if _format(p) is None:
                raise SeqFileError(f"unsupported data file {p}", hint=f"supported: {', '.join(SUFFIXES)}")
        files.update(found)
    return sorted(files)


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


def _records(path: Path) -> Iterator[dict]:
    """The records of one file, streamed; any failure to read it is one SeqFileError."""
    import datasets

    datasets.disable_progress_bars()
    try:
        stream = datasets.load_dataset(_format(path), data_files=[str(path)], split="train", streaming=True)
        yield from stream
    except GeneratorExit:
        raise
    except Exception as err:  # datasets, pyarrow, zstandard and json each raise their own kinds
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise SeqFileError(f"cannot read data file {path}: {first}") from None


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
        import datasets

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
