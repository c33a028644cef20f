"""The shipped autotuning results (seqdsl/lower/backends/autotune_seed.py): seeded into Triton's
cache only where missing (never over a file Triton wrote), whole, without failing on an
unwritable cache; results caching turned on unless the user said otherwise; the shipped files
are Triton's own format and ship with the package."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path


from seqdsl.lower.backends import autotune_pins, autotune_seed

ROOT = Path(__file__).resolve().parents[2]


def _seed_dir(tmp_path: Path) -> Path:
    root = tmp_path / "seed"
    for digest, kernel, n in (("AAA", "k1", 1), ("AAA", "k2", 2), ("BBB", "k1", 3)):
        (root / digest).mkdir(parents=True, exist_ok=True)
        (root / digest / f"{kernel}.autotune.json").write_text(json.dumps({"key": [n], "configs_timings": []}))
    (root / "AAA" / "notes.txt").write_text("not an autotuning file")
    return root


def test_seed_copies_what_is_missing_and_keeps_what_triton_wrote(tmp_path):
    root, cache = _seed_dir(tmp_path), tmp_path / "cache"
    (cache / "AAA").mkdir(parents=True)
    (cache / "AAA" / "k2.autotune.json").write_text("written by Triton here")
    assert autotune_seed.seed(cache, root) == 2
    assert (cache / "AAA" / "k2.autotune.json").read_text() == "written by Triton here"
    for digest, kernel in (("AAA", "k1"), ("BBB", "k1")):
        assert (cache / digest / f"{kernel}.autotune.json").read_bytes() == \
            (root / digest / f"{kernel}.autotune.json").read_bytes()
    assert not (cache / "AAA" / "notes.txt").exists()
    assert not list(cache.rglob("*.tmp"))  # written aside, then renamed
    assert autotune_seed.seed(cache, root) == 0  # a second time: nothing missing


def test_an_unwritable_cache_is_left_alone(tmp_path):
    root = _seed_dir(tmp_path)
    blocked = tmp_path / "file_not_folder"
    blocked.write_text("x")
    assert autotune_seed.seed(blocked / "cache", root) == 0


def test_seed_once_turns_results_caching_on_unless_the_user_decided(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(autotune_seed, "seed", lambda *a, **k: calls.append(1) or 7)
    monkeypatch.delenv("TRITON_CACHE_AUTOTUNING", raising=False)
    monkeypatch.delenv("SEQDSL_AUTOTUNE_SEED", raising=False)
    assert autotune_seed.seed_once.__wrapped__() == 7
    assert os.environ["TRITON_CACHE_AUTOTUNING"] == "1"
    monkeypatch.setenv("TRITON_CACHE_AUTOTUNING", "0")
    autotune_seed.seed_once.__wrapped__()
    assert os.environ["TRITON_CACHE_AUTOTUNING"] == "0"
    monkeypatch.setenv("SEQDSL_AUTOTUNE_SEED", "0")
    monkeypatch.delenv("TRITON_CACHE_AUTOTUNING")
    assert autotune_seed.seed_once.__wrapped__() == 0
    assert "TRITON_CACHE_AUTOTUNING" not in os.environ and len(calls) == 2


def test_triton_cache_dir_follows_triton(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "tc"))
    assert autotune_seed.triton_cache_dir() == tmp_path / "tc"


def test_collect_takes_the_autotuning_files_only(tmp_path):
    cache, out = _seed_dir(tmp_path), tmp_path / "out"
    assert autotune_seed.collect(cache, out) == 3
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*")  if p.is_file()) == \
        ["AAA/k1.autotune.json", "AAA/k2.autotune.json", "BBB/k1.autotune.json"]


def test_the_shipped_files_are_tritons_format_and_ship_with_the_package():
    files = autotune_seed.seed_files()
    assert files, "no shipped autotuning files (benchmarks/dump_autotune_seed.py records them)"
    for path in files:
        data = json.loads(path.read_text())
        assert isinstance(data["key"], list) and data["configs_timings"], path
        for config, timings in data["configs_timings"]:
            assert {"kwargs", "num_warps", "num_stages"} <= set(config) and timings, path
    readme = (autotune_seed.SEED_DIR / "README.md").read_text()
    recorded = re.findall(r"^- .*Triton [0-9.]+.*: (\d+) files$", readme, flags=re.M)
    assert recorded and sum(map(int, recorded)) == len(files)  # each recording says what it added
    assert '"seqdsl.lower.backends" = ["autotune-seed/*/*.json", "autotune-seed/README.md", "autotune-seed/pins.json"]' in \
        (ROOT / "pyproject.toml").read_text()


def test_the_seed_comes_before_a_library_import_on_a_gpu_only(monkeypatch):
    """Triton reads TRITON_CACHE_AUTOTUNING when a kernel is decorated, at import: the backends'
    shared import check seeds first on a GPU, and not at all without one. fla's and mamba-ssm's
    checks go through it."""
    import torch

    from seqdsl.lower.backends import base, fla, mamba_scan, mamba_ssd

    order: list[str] = []
    monkeypatch.setattr(autotune_seed, "seed_once", lambda: order.append("seed"))
    monkeypatch.setattr(autotune_pins, "pin_shipped", lambda: order.append("pin") and 0)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert base.import_failure(lambda: order.append("import"), "x") == ""
    assert order == ["import"]
    order.clear()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert base.import_failure(lambda: order.append("import"), "x") == ""
    assert order == ["seed", "import", "pin"]  # the tunings Triton does not keep: after the import
    order.clear()
    assert base.import_failure(lambda: 1 / 0, "x").startswith("x is not importable here")
    assert order == ["seed"]
    for check in (fla.importable, mamba_ssd.importable, mamba_scan.importable):
        order.clear()
        check.__wrapped__() if hasattr(check, "__wrapped__") else check()
        assert order[:1] == ["seed"], check
