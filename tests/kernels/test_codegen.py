"""seqdsl.codegen: rendered sources against golden files, the choice table against the support
table, the CLI, and the torch-free import rule. No kernel runs here.

Regenerate the golden files after an intended template change with
    SEQDSL_REGEN_GOLDEN=1 .venv/bin/python -m pytest tests/kernels/test_codegen.py
and review the diff: it is the generated code's diff.
"""

from __future__ import annotations

import ast
import dataclasses
import itertools
import os
from pathlib import Path

import pytest

from seqdsl import codegen
from seqdsl.codegen.choices import sorted_select
from seqdsl.cli.main import main
from seqdsl.ir import support
from seqdsl.ir.key import runs_topk_kernels
from tests.fresh_imports import heavy_imports
from tests.kernels.keys import SPECS, spec_key, variant

GOLDEN = Path(__file__).parent / "golden"
GOLDEN_SPECS = ("top1_element", "top1_element_no_grad", "top1_chunk_exact", "top1_chunk_approx",
                "top1_chunk_exact_no_local", "top1_chunk_exact_no_grad", "moba", "topk_element_64", "topk_chunk_lse",
                "moba_sink4", "nsa_selected")


@pytest.mark.parametrize("spec", GOLDEN_SPECS)
def test_rendered_source_matches_golden_file(spec):
    source = codegen.render(spec_key(spec)).source
    path = GOLDEN / f"{spec}.py"
    if os.environ.get("SEQDSL_REGEN_GOLDEN"):
        path.write_text(source)
    assert path.is_file(), f"no golden file {path}: run with SEQDSL_REGEN_GOLDEN=1"
    assert source == path.read_text(), f"{spec}: rendered source differs from {path} (SEQDSL_REGEN_GOLDEN=1)"


@pytest.mark.parametrize("spec", GOLDEN_SPECS)
def test_rendered_source_is_python_with_the_expected_kernels(spec):
    key = spec_key(spec)
    tree = ast.parse(codegen.render(key).source)
    kernels = {node.name.removeprefix(key.slug() + "_") for node in tree.body if isinstance(node, ast.FunctionDef)}
    sel = key.select
    if sel.over == "element" and sel.k > 1:  # top-k elements; ranks, merge, gather, softmax: helpers
        expected = {"select", "ranks", "merge", "bound", "collect", "merge_tiles", "gather", "softmax", "attn_fwd",
                    "attn_bwd"}
    elif sel.over == "element":
        expected = {"fwd"} | ({"bwd_delta", "bwd_dkdv", "bwd_dq"} if sel.grad == "ste" else set())
        expected |= {"value_grad"} if sel.grad == "none" or sel.value_grad == "hard" else set()
    elif runs_topk_kernels(sel):  # top-k chunks (and lse): decoding runs the forward's kernels with one query
        # per (query, key/value group) when the group chooses together and shares keys, else per pair
        expected = {"select", "bwd_delta", "attn_bwd"}
        expected |= {"group_fwd", "group_dq"} if support.group_attention(key) else {"attn_fwd", "merge", "dq_sum"}
        expected |= {"gate_dq", "gate_dk"} if sel.grad == "ste" else set()
        expected |= {"chunk_lse"} if sel.score == "lse" else set()  # the chunk's score, a helper
        expected |= {"sink_bwd"} if sel.sink else set()
        expected |= {"select_shared"} if sel.share == "group" else set()
        expected |= {"keep_best"} if sorted_select(sel) else set()  # mean keys, k > 4: the selection's sorted merge
    else:
        expected = {"select", "attn_fwd", "bwd_delta", "attn_bwd", "decode"}
        expected |= {"attn_local"} if sel.local else set()
        expected |= {"gate_dq"} if sel.grad == "ste" else set()
        expected |= {"gate_dkbar"} if sel.grad == "ste" and sel.score == "mean" else set()
    assert kernels == expected


def test_exact_and_approx_specs_render_different_kernels():
    exact = codegen.render(spec_key("top1_chunk_exact")).source
    approx = codegen.render(spec_key("top1_chunk_approx")).source
    assert exact != approx
    assert "KBAR + b * sbb" in approx and "KBAR + b * sbb" not in exact  # mean keys: Approx only


def test_holes_carry_scale_temperature_and_dims():
    key = variant("top1_element", dk=32, dv=64, scale=0.5, temperature=2.0)
    source = codegen.render(key).source
    assert "FACTOR = tl.constexpr(0.36067376022224085)" in source  # 0.5 / 2 * log2(e)
    assert "GRAD_SCALE = tl.constexpr(0.25)" in source
    assert "DK = tl.constexpr(32)" in source and "DV = tl.constexpr(64)" in source


def _keys():
    """Keys of every shipped spec's mixers, and variations over every select field the IR has."""
    keys = []
    for path in sorted(SPECS.glob("*.seq")):
        from seqdsl import load

        program = load(path).program
        for model in program.models:
            from seqdsl.ir.key import kernel_key

            keys += [kernel_key(program.mixer(name), model.d_model) for name in dict.fromkeys(model.mixer)]
    base = spec_key("top1_chunk_exact")
    for over, score, local, grad, k, chunk, dim in itertools.product(
            ("element", "chunk"), ("max", "mean", "lse"), (True, False), ("ste", "none"), (1, 2),
            (8, 16, 96, 128, 256), (8, 64, 256)):
        sel = dataclasses.replace(base.select, over=over, score=score, local=local, grad=grad, k=k,
                                  chunk=chunk if over == "chunk" else None)
        keys.append(dataclasses.replace(base, select=sel, key_dim=dim, feature_dim=dim, head_dim=dim))
    return keys


def test_codegen_renders_exactly_what_the_support_table_admits():
    for key in _keys():
        verdict = support.triton(key)
        if verdict.ok:
            ast.parse(codegen.render(key).source)
        else:
            with pytest.raises(codegen.Unsupported) as refused:
                codegen.render(key)
            assert verdict.reason in refused.value.message


def test_cli_writes_one_module_per_mixer(tmp_path, capsys):
    assert main(["codegen", str(SPECS / "top1_chunk_exact.seq"), "--out", str(tmp_path / "exact")]) == 0
    assert main(["codegen", str(SPECS / "top1_chunk_approx.seq"), "--out", str(tmp_path / "approx")]) == 0
    exact = (tmp_path / "exact" / "top1_chunk_exact.py").read_text()
    approx = (tmp_path / "approx" / "top1_chunk_approx.py").read_text()
    assert exact != approx and exact == (GOLDEN / "top1_chunk_exact.py").read_text()


def test_cli_names_the_reason_for_a_mixer_it_cannot_generate(tmp_path, capsys):
    assert main(["codegen", str(SPECS / "transformer.seq"), "--out", str(tmp_path)]) == 1
    assert "Top-1 selection family only" in capsys.readouterr().out
    assert not any(tmp_path.iterdir())


def test_cli_reports_a_missing_file_in_one_line(tmp_path, capsys):
    assert main(["codegen", str(tmp_path / "nope.seq"), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "nope.seq" in err


def test_codegen_imports_neither_torch_nor_triton():
    assert heavy_imports("codegen", ("torch", "triton"))[0] == []
