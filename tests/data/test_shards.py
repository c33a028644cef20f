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
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("not a shard")
    with pytest.raises(SeqFileError, match="folder .*empty holds no data shards"):  # it exists: not "not found"
        ShardSource([str(tmp_path / "empty")])
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


def test_a_folder_reads_its_shards_only_not_json_beside_them(tmp_path):
    root = write_shards(tmp_path, n=5)
    (root / "web" / "filter_stats.json").write_text('{"posts": 681288, "kept_train": 491836}\n')
    (root / "web" / "README.md").write_text("# web\n")
    source = ShardSource([str(root)])
    assert [p.name for p in source.files] == ["code_00.jsonl", "web_00.jsonl"]
    assert [d.text for d in source.documents(["web"])] == documents("web", 5)


def test_validation_and_test_files_are_never_trained_on(tmp_path):
    from seqdsl.data.packing import PackedSequences
    from seqdsl.data.shards import split_word

    web = tmp_path / "web"
    train = documents("web", 6, seed=1)
    write_jsonl(web / "web_train_00.jsonl", [{"text": t} for t in train])
    # sorted before the training shard, as blogs_test / blogs_val sort around blogs_train_*
    for name in ("web_test.jsonl", "web_val.jsonl", "a-validation-00000-of-00001.jsonl", "dev/part0.jsonl"):
        write_jsonl(web / name, [{"text": f"SPLIT {name}"}])
    for files in ([str(tmp_path)], [str(web / "*.jsonl")], [str(tmp_path / "**" / "*.jsonl")]):
        source = ShardSource(files)
        assert [p.name for p in source.files] == ["web_train_00.jsonl"], files
        stream = PackedSequences(lambda: source.documents(["web"]), lambda t: list(t.encode()), 0, 32, 1e-9)
        rows = stream.batch(40)  # (40, 33): two passes over the training text
        trained = bytes(rows[:, :-1].flatten().tolist())  # consecutive rows share their last token
        assert b"SPLIT" not in trained and train[0].encode() in trained
    with pytest.raises(SeqFileError, match=r"web_val\.jsonl is a validation or test split \(`val`"):
        ShardSource([str(web / "web_val.jsonl")])
    assert [split_word(n) for n in ("contest_00.jsonl", "latest.parquet", "blogs_val.jsonl.zst", "TEST-1.jsonl")] \
        == [None, None, "val", "test"]


def _zst_cut_between_records(records: list[str], keep: int) -> bytes:
    """A zstd frame of `records`, one block per record, cut after the first `keep` blocks: it
    decompresses to `keep` whole records without a decoding error."""
    out = []
    compressor = zstandard.ZstdCompressor().compressobj()
    ends = []
    for record in records:
        out.append(compressor.compress((record + "\n").encode()))
        out.append(compressor.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK))
        ends.append(sum(map(len, out)))
    out.append(compressor.flush())
    return b"".join(out)[:ends[keep - 1]]


def test_a_truncated_zst_is_called_truncated_with_no_stray_log_lines(tmp_path, caplog):
    # large enough that datasets fails past its first chunk, where it logs the error before raising
    records = [json.dumps({"text": t}) for t in documents("web", 3000)]
    whole = zstandard.ZstdCompressor().compress("".join(r + "\n" for r in records).encode())
    (tmp_path / "web").mkdir()
    mid_record = tmp_path / "web" / "mid.jsonl.zst"
    mid_record.write_bytes(whole[: len(whole) // 2])
    between = tmp_path / "web" / "between.jsonl.zst"
    between.write_bytes(_zst_cut_between_records(records, keep=3))
    for path in (mid_record, between):
        with pytest.raises(SeqFileError) as err:
            list(ShardSource([str(path)]).documents(["web"]))
        assert err.value.message == f"data file {path} is truncated: its zstd stream ends before its last frame does"
        assert err.value.hint and "cut short" in err.value.hint
    # datasets logs "Failed to load JSON from file ..." on its own handler (stderr), which
    # propagates here too: nothing of it may get through
    assert [r for r in caplog.records if r.name.startswith("datasets")] == []


def test_the_zst_truncation_check_is_exact_at_every_cut(tmp_path):
    from seqdsl.data.shards import zstd_truncated

    compressor = zstandard.ZstdCompressor(write_checksum=True).compressobj()
    parts = []
    for chunk in (b'{"text": "one"}\n', b"\0" * 300, b'{"text": "two two two"}\n'):  # raw, RLE, compressed
        parts += [compressor.compress(chunk), compressor.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK)]
    frame = b"".join(parts) + compressor.flush()  # four blocks and a checksum
    skippable = (0x184D2A53).to_bytes(4, "little") + (3).to_bytes(4, "little") + b"xyz"
    data = frame + skippable + zstandard.ZstdCompressor().compress(b'{"text": "three"}\n' * 20)
    frame_ends = {len(frame), len(frame) + len(skippable), len(data)}
    path = tmp_path / "f.zst"
    wrong = []
    for cut in range(1, len(data) + 1):
        path.write_bytes(data[:cut])
        if zstd_truncated(path) == (cut in frame_ends):
            wrong.append(cut)
    assert wrong == []


def test_an_empty_shard_holds_no_documents(tmp_path):
    write_jsonl(tmp_path / "web" / "a.jsonl", [{"text": "one"}])
    (tmp_path / "web" / "b.jsonl").write_text("")
    assert [d.text for d in ShardSource([str(tmp_path)]).documents(["web"])] == ["one"]
