"""The shipped autotuning results (seqdsl/lower/backends/autotune_seed.py): seeded into Triton's
cache only where missing (never over a file Triton wrote), whole, without failing on an
unwritable cache; this GPU's recording before another GPU's of the same architecture, never one
of another architecture, and said when borrowed; results caching turned on unless the user said
otherwise; the shipped files are Triton's own format and ship with the package."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path


from seqdsl.lower.backends import autotune_pins, autotune_seed

ROOT = Path(__file__).resolve().parents[2]


GPU = "nvidia-h100-80gb-hbm3-sm90"


def _tuning(gpu: str, n: int) -> str:
    return json.dumps({"key": [n], "configs_timings": [], "recorded on": gpu})


def _seed_dir(tmp_path: Path) -> Path:
    """This GPU's k1 of AAA and BBB, another sm90 GPU's k1 and k2 of AAA, an sm80 GPU's k3."""
    root = tmp_path / "seed"
    for gpu, digest, kernel, n in ((GPU, "AAA", "k1", 1), (GPU, "BBB", "k1", 3), ("nvidia-h200-sm90", "AAA", "k1", 4),
                                   ("nvidia-h200-sm90", "AAA", "k2", 2), ("nvidia-a100-sxm4-80gb-sm80", "CCC", "k3", 5)):
        (root / gpu / digest).mkdir(parents=True, exist_ok=True)
        (root / gpu / digest / f"{kernel}.autotune.json").write_text(_tuning(gpu, n))
    (root / GPU / "AAA" / "notes.txt").write_text("not an autotuning file")
    (root / "README.md").write_text("not a GPU")
    return root


def test_gpu_folder_names_the_gpu_and_its_architecture():
    assert autotune_seed.gpu_folder("NVIDIA H100 80GB HBM3", (9, 0)) == GPU
    assert autotune_seed.gpu_folder("NVIDIA H200", (9, 0)) == "nvidia-h200-sm90"
    assert autotune_seed.gpu_folder("  NVIDIA A100-SXM4-80GB ", (8, 0)) == "nvidia-a100-sxm4-80gb-sm80"


def test_this_gpus_recording_first_then_another_of_its_architecture_never_another_architecture(tmp_path):
    root = _seed_dir(tmp_path)
    picked = autotune_seed.chosen(GPU, root)
    assert {name: path.parent.parent.name for name, path in picked.items()} == {
        "AAA/k1.autotune.json": GPU, "BBB/k1.autotune.json": GPU, "AAA/k2.autotune.json": "nvidia-h200-sm90"}
    # a GPU with no recording of its own: every tuning of its architecture, none of another
    assert {path.parent.parent.name for path in autotune_seed.chosen("nvidia-h800-sm90", root).values()} == \
        {GPU, "nvidia-h200-sm90"}
    assert autotune_seed.chosen("nvidia-l4-sm89", root) == {}


def test_seed_copies_what_is_missing_and_keeps_what_triton_wrote(tmp_path):
    root, cache = _seed_dir(tmp_path), tmp_path / "cache"
    (cache / "AAA").mkdir(parents=True)
    (cache / "AAA" / "k2.autotune.json").write_text("written by Triton here")
    assert autotune_seed.seed(GPU, cache, root) == (2, {"nvidia-h200-sm90": 1})
    assert (cache / "AAA" / "k2.autotune.json").read_text() == "written by Triton here"
    for digest, kernel in (("AAA", "k1"), ("BBB", "k1")):
        assert (cache / digest / f"{kernel}.autotune.json").read_bytes() == \
            (root / GPU / digest / f"{kernel}.autotune.json").read_bytes()
    assert not (cache / "AAA" / "notes.txt").exists() and not (cache / "CCC").exists()
    assert not list(cache.rglob("*.tmp"))  # written aside, then renamed
    assert autotune_seed.seed(GPU, cache, root)[0] == 0  # a second time: nothing missing


def test_another_gpus_seeded_file_gives_way_to_this_gpus_own(tmp_path):
    """A cache seeded before this GPU had recordings of its own holds another GPU's file, byte
    for byte: replaced. A file that differs from every recording was tuned here: kept."""
    root, cache = _seed_dir(tmp_path), tmp_path / "cache"
    (cache / "AAA").mkdir(parents=True)
    (cache / "AAA" / "k1.autotune.json").write_text(_tuning("nvidia-h200-sm90", 4))
    (cache / "BBB").mkdir(parents=True)
    (cache / "BBB" / "k1.autotune.json").write_text("tuned here")
    assert autotune_seed.seed(GPU, cache, root)[0] == 2  # AAA/k1 replaced, AAA/k2 new
    assert (cache / "AAA" / "k1.autotune.json").read_text() == _tuning(GPU, 1)
    assert (cache / "BBB" / "k1.autotune.json").read_text() == "tuned here"
    # the same cache on the other GPU: its own recording takes the seeded file's place again
    assert autotune_seed.seed("nvidia-h200-sm90", cache, root)[0] == 1
    assert (cache / "AAA" / "k1.autotune.json").read_text() == _tuning("nvidia-h200-sm90", 4)


def test_an_unwritable_cache_is_left_alone(tmp_path):
    root = _seed_dir(tmp_path)
    blocked = tmp_path / "file_not_folder"
    blocked.write_text("x")
    assert autotune_seed.seed(GPU, blocked / "cache", root)[0] == 0


def test_seed_once_turns_results_caching_on_unless_the_user_decided(tmp_path, monkeypatch, caplog):
    calls = []
    monkeypatch.setattr(autotune_seed, "seed", lambda gpu: calls.append(gpu) or (7, {}))
    monkeypatch.delenv("TRITON_CACHE_AUTOTUNING", raising=False)
    monkeypatch.delenv("SEQDSL_AUTOTUNE_SEED", raising=False)
    assert autotune_seed.seed_once.__wrapped__(GPU) == 7
    assert os.environ["TRITON_CACHE_AUTOTUNING"] == "1"
    monkeypatch.setenv("TRITON_CACHE_AUTOTUNING", "0")
    autotune_seed.seed_once.__wrapped__(GPU)
    assert os.environ["TRITON_CACHE_AUTOTUNING"] == "0"
    monkeypatch.setenv("SEQDSL_AUTOTUNE_SEED", "0")
    monkeypatch.delenv("TRITON_CACHE_AUTOTUNING")
    assert autotune_seed.seed_once.__wrapped__(GPU) == 0
    assert "TRITON_CACHE_AUTOTUNING" not in os.environ and calls == [GPU, GPU]
    assert not caplog.records  # all of it this GPU's own: nothing to say


def test_seed_once_says_when_another_gpus_tunings_are_used(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(autotune_seed, "seed", lambda gpu: (3, {"nvidia-h200-sm90": 13}))
    monkeypatch.delenv("SEQDSL_AUTOTUNE_SEED", raising=False)
    with caplog.at_level("WARNING", logger="seqdsl"):
        assert autotune_seed.seed_once.__wrapped__(GPU) == 3
    (line,) = [r.getMessage() for r in caplog.records]
    assert "13 of" in line and "nvidia-h200-sm90" in line and GPU in line and "SEQDSL_AUTOTUNE_SEED=0" in line


def test_triton_cache_dir_follows_triton(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "tc"))
    assert autotune_seed.triton_cache_dir() == tmp_path / "tc"


def test_collect_takes_the_autotuning_files_only(tmp_path):
    cache, out = _seed_dir(tmp_path) / GPU, tmp_path / "out"  # a Triton cache: <digest>/<kernel>.autotune.json
    (cache / "AAA" / "k1.json").write_text("a compiled kernel's metadata")
    assert autotune_seed.collect(cache, out) == 2
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*")  if p.is_file()) == \
        ["AAA/k1.autotune.json", "BBB/k1.autotune.json"]


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
    for path in files:  # one folder per GPU, named as `gpu_folder` names them
        assert re.fullmatch(r"[a-z0-9-]+-sm\d+", path.parent.parent.name), path
    assert '"seqdsl.lower.backends" = ["autotune-seed/*/*/*.json", "autotune-seed/README.md", "autotune-seed/pins.json"]' in \
        (ROOT / "pyproject.toml").read_text()


def test_the_seed_comes_before_a_library_import_on_a_gpu_only(monkeypatch):
    """Triton reads TRITON_CACHE_AUTOTUNING when a kernel is decorated, at import: the backends'
    shared import check seeds first on a GPU, and not at all without one. fla's and mamba-ssm's
    checks go through it."""
    import torch

    from seqdsl.lower.backends import base, fla, mamba_scan, mamba_ssd

    order: list[str] = []
    monkeypatch.setattr(autotune_seed, "seed_once", lambda gpu: order.append("seed"))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
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
