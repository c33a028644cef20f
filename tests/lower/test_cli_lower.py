"""`seqdsl lower`: sizes, parameter count, a path per layer, the module tree; readable errors."""

from __future__ import annotations

import re

import pytest

from seqdsl.cli.main import main
from tests.oracles.fla import require_fla
from tests.spec_library import SPECS_DIR


def _run(capsys, *argv):
    code = main(["lower", *argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


def test_lower_reports_sizes_parameters_paths_and_tree(capsys):
    code, out, _ = _run(capsys, str(SPECS_DIR / "hybrid_mamba2_transformer.seq"), "--device", "cpu")
    assert code == 0
    assert "12 layers, d_model 768" in out
    params = int(re.search(r"parameters: ([\d,]+)", out).group(1).replace(",", ""))
    assert 100e6 < params < 250e6
    assert re.search(r"layers 0,1,3,4,6,7,9,10\s+mamba2: reference.chunked", out)
    assert re.search(r"layers 2,5,8,11\s+transformer: sdpa", out)
    assert "(blocks 2,5,8,11): Block(" in out and "(head): Linear" in out


@pytest.mark.slow  # importing fla (the planner asks it which kernels exist) costs 7 s on 2 cores
def test_lower_plans_for_a_gpu_without_one(capsys):
    require_fla()
    code, out, _ = _run(capsys, str(SPECS_DIR / "mamba2.seq"), "--device", "cuda", "--no-tree",
                        "--preset", "tiny")
    assert code == 0 and "fla.chunk_simple_gla" in out and "self-checked" in out


@pytest.mark.parametrize("argv, message", [
    (["missing.seq"], "no such file"),
    ([str(SPECS_DIR / "transformer.seq"), "--device", "tpu9"], "unknown device"),
    ([str(SPECS_DIR / "transformer.seq"), "--model", "nope"], "no model `nope`"),
])
def test_lower_errors_are_one_readable_message(capsys, argv, message):
    code, _, err = _run(capsys, *argv)
    assert code == 2 and message in err


def test_a_spec_the_lowering_cannot_build_exits_2(tmp_path, capsys):
    spec = tmp_path / "bad.seq"
    spec.write_text("mixer a { select = top(1) weights = linear }\n")
    code, _, err = _run(capsys, str(spec))
    assert code == 2 and "cannot be lowered" in err and "W001" in err


def test_lower_says_when_a_window_or_chunk_makes_attention_dense(tmp_path, capsys):
    """Issue 20.9: window(4096) and chunk(4096) at a 2048 context are dense attention; `lower`
    plans them on SDPA with is_causal and says why."""
    spec = tmp_path / "wide.seq"
    spec.write_text('import "' + str(SPECS_DIR / "transformer.seq") + '"\n'
                    "mixer wide_window extends transformer { visibility = window(4096) }\n"
                    "mixer wide_chunk extends transformer { select = top(1, over=chunk(4096)) }\n"
                    "model wide_110m extends transformer_110m { mixer = [wide_window, wide_chunk] }\n")
    code, out, _ = _run(capsys, str(spec), "--device", "cpu", "--no-tree")
    assert code == 0
    assert re.search(r"wide_window: sdpa\.causal \(dense: window\(4096\) covers the 2048-token context", out)
    assert re.search(r"wide_chunk: sdpa\.causal \(dense: chunk\(4096\) covers the 2048-token context", out)
