"""experiments/build_code_domain.py: the code domain is the manifest's files, byte for byte, or
the build is refused naming the first file that differs."""

from __future__ import annotations

import hashlib
import io
import json

import pytest

from tests.docs_generator import load_script

zstandard = pytest.importorskip("zstandard")
build = load_script("experiments/build_code_domain.py", "build_code_domain")


def shard_documents(folder) -> list[dict]:
    raw = (folder / build.SHARD_NAME).read_bytes()
    text = io.TextIOWrapper(io.BytesIO(zstandard.ZstdDecompressor().decompress(raw, max_output_size=1 << 26)), encoding="utf-8")
    return [json.loads(line) for line in text]


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "lib"
    for rel, text in {"b.py": "x = 1\n", "a/c.py": "def f():\n    return 2\n", "a/__init__.py": "",
                      "tests/test_a.py": "assert True\n", "a/test/skip.py": "y = 2\n", "notes.txt": "not code\n"}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_the_shard_holds_every_source_file_once_in_path_order_with_its_hash(tree, tmp_path):
    manifest = tmp_path / "manifest.json"
    assert build.main(["--root", str(tree), "--out", str(tmp_path / "code"), "--manifest", str(manifest),
                       "--write-manifest"]) == 0
    docs = shard_documents(tmp_path / "code")
    # test folders, empty files and non-Python files are left out
    assert [d["meta"]["path"] for d in docs] == ["a/c.py", "b.py"]
    for d in docs:
        raw = (tree / d["meta"]["path"]).read_bytes()
        assert d["text"] == raw.decode() and d["meta"]["sha256"] == hashlib.sha256(raw).hexdigest()
    listing = json.loads(manifest.read_text())
    assert listing["files"] == 2 and [f["path"] for f in listing["listing"]] == ["a/c.py", "b.py"]


def test_a_rebuild_must_match_the_manifest_else_it_names_the_file(tree, tmp_path, capsys):
    manifest = tmp_path / "manifest.json"
    args = ["--root", str(tree), "--out", str(tmp_path / "code"), "--manifest", str(manifest)]
    assert build.main([*args, "--write-manifest"]) == 0
    assert build.main(args) == 0  # the same files: accepted
    before = (tmp_path / "code" / build.SHARD_NAME).read_bytes()
    (tree / "b.py").write_text("x = 3\n")
    assert build.main(args) == 2
    err = capsys.readouterr().err
    assert "b.py (differs)" in err and err.count("\n") == 1
    assert (tmp_path / "code" / build.SHARD_NAME).read_bytes() == before  # the refused build wrote nothing
