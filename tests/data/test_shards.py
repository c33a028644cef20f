"""Shards through HF `datasets`: JSONL, JSONL.zst and parquet; the domain from the folder name or
from a meta field; unreadable files are one message naming the file."""

from __future__ import annotations

import importlib.util
import json

import pytest

from seqdsl.data.heldout import build_eval_sets
from seqdsl.data.shards import ShardSource
from seqdsl.data.tokenizer import ByteTokenizer
from seqdsl.errors import SeqFileError
from tests.train.helpers import documents, write_jsonl, write_shards

zstandard = pytest.importorskip("zstandard")
# found, not imported: importing datasets takes over a second, paid by the worker that runs these
pytestmark = pytest.mark.skipif(importlib.util.find_spec("datasets") is None, reason="needs HF datasets")


def test_domain_is_the_folder_name(tmp_path):
    source = ShardSource([str(write_shards(tmp_path, n=5))])
    assert source.domains() == ["code", "web"]
    docs = list(source.documents(["web"]))
    assert [d.text for d in docs] == documents("web", 5) and {d.domain for d in docs} == {"web"}


def test_domain_from_a_meta_field_across_jsonl_zst_and_parquet(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    web, code = documents("web", 4), documents("code", 4)
    records = [{"text": t, "meta": {"redpajama_set_name": "RedPajamaWeb"}} for t in web]
    raw = "".join(json.dumps(r) + "\n" for r in records).encode()
    (tmp_path / "a.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(raw))
    table = pa.Table.from_pylist([{"text": t, "meta": {"redpajama_set_name": "RedPajamaGithub"}} for t in code])
    pq.write_table(table, tmp_path / "b.parquet")
    write_jsonl(tmp_path / "c.jsonl", [{"text": "mixed", "meta": {"redpajama_set_name": "RedPajamaWeb"}}])
    source = ShardSource([str(tmp_path)], domain_field="meta.redpajama_set_name")
    got = list(source.documents(["RedPajamaWeb", "RedPajamaGithub"]))
    assert [(d.domain, d.text) for d in got] == (
        [("RedPajamaWeb", t) for t in web] + [("RedPajamaGithub", t) for t in code] + [("RedPajamaWeb", "mixed")])
    assert [d.text for d in source.documents(["RedPajamaGithub"])] == code


def test_missing_and_corrupt_files_are_one_error_naming_the_file(tmp_path):
    with pytest.raises(SeqFileError, match="data file not found"):
        ShardSource([str(tmp_path / "none" / "*.jsonl")])
    bad = tmp_path / "web" / "bad.jsonl"
    bad.parent.mkdir()
    bad.write_text('{"text": "fine"}\n{"text": broken\n')
    with pytest.raises(SeqFileError, match="cannot read data file .*bad.jsonl"):
        list(ShardSource([str(bad)]).documents(["web"]))


def test_eval_sets_hold_only_heldout_documents(tmp_path):
    source = ShardSource([str(write_shards(tmp_path, n=60))])
    sets = build_eval_sets(source, ByteTokenizer(), ["web", "code"], ["web"], heldout=0.2, max_tokens=10**6)
    from seqdsl.data.documents import is_heldout

    for domain in ("web", "code"):
        held = [t for t in documents(domain, 60) if is_heldout(t, 0.2)]
        expected = [b for t in held for b in list(t.encode()) + [0]]
        assert sets[domain].tokens.tolist() == expected
        assert sets[domain].n_bytes == len(expected)
    assert sets["web"].in_domain and not sets["code"].in_domain
