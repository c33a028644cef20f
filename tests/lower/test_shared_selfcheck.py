"""The self-check the fast paths share (seqdsl/reference/selfcheck.py): it compares outputs and
every input gradient norm-relatively, reports the first that differs or what the kernel raised,
and the fla, mamba-ssm and Top-1 checks are built on it. Runs on CPU: where a GPU kernel would
be checked, the reference (or a broken copy of it) stands in."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

from seqdsl.lower.backends import fla as fla_backend, mamba_ssd
from seqdsl.reference import selfcheck

ROOT = Path(__file__).resolve().parents[2]


def _reference(x, w):
    return (x @ w).tanh(), w.sum()


class _WrongBackward(torch.autograd.Function):
    """x @ w forward, with dw scaled by 1.5 in the backward."""

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x @ w

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        return grad @ w.T, 1.5 * (x.T @ grad)


def _args():
    draw = selfcheck.Draws("cpu")
    return [draw.normal(6, 4), draw.normal(4, 3)]


def test_a_matching_implementation_passes_with_every_error_reported():
    errors = selfcheck.relative_errors(_reference, _reference, _args(), ("x", "w"),
                                       reference_dtype=torch.float64, outputs=("y", "total"))
    assert set(errors) == {"y", "total", "dx", "dw"}
    assert max(errors.values()) < 1e-6  # float32 against float64
    assert selfcheck.self_check(_reference, _reference, _args(), ("x", "w"), tolerance=1e-5,
                                reference_dtype=torch.float64, outputs=("y", "total")) == (True, "")


def test_a_wrong_gradient_is_named():
    fast = lambda x, w: (_WrongBackward.apply(x, w).tanh(), w.sum())
    ok, detail = selfcheck.self_check(fast, _reference, _args(), ("x", "w"), tolerance=1e-3,
                                      reference_dtype=torch.float64, outputs=("y", "total"))
    assert not ok and detail.startswith("dw differs from the reference")


def test_a_kernel_that_raises_is_a_finding_not_a_crash():
    def broken(x, w):
        raise RuntimeError("no kernel image for this GPU\nsecond line")

    ok, detail = selfcheck.self_check(broken, _reference, _args(), ("x", "w"), tolerance=1e-3,
                                      reference_dtype=torch.float64)
    assert (ok, detail) == (False, "RuntimeError: no kernel image for this GPU")


def test_a_nan_output_fails_whatever_the_tolerance():
    fast = lambda x, w: (_reference(x, w)[0] * float("nan"), w.sum())
    ok, detail = selfcheck.self_check(fast, _reference, _args(), ("x", "w"), tolerance=1e9,
                                      reference_dtype=torch.float64, outputs=("y", "total"))
    assert not ok and detail.startswith("y differs")


def test_the_check_runs_its_own_backward_under_no_grad():
    with torch.no_grad():
        assert selfcheck.self_check(_reference, _reference, _args(), ("x", "w"), tolerance=1e-5,
                                    reference_dtype=torch.float64, outputs=("y", "total")) == (True, "")


@pytest.fixture
def fresh_checks():
    mamba_ssd.self_check.cache_clear()
    fla_backend.self_check.cache_clear()
    yield
    mamba_ssd.self_check.cache_clear()
    fla_backend.self_check.cache_clear()


@pytest.mark.parametrize("broken", [False, True])
def test_the_mamba_check_is_the_shared_one(monkeypatch, fresh_checks, broken):
    """With the reference standing in for mamba's SSD kernels the check passes; with a write
    scaled by 1.01 it names the output."""
    stand_in = mamba_ssd.reference
    if broken:
        stand_in = lambda x, *rest: mamba_ssd.reference(x * 1.01, *rest)
    monkeypatch.setattr(mamba_ssd, "ssd", stand_in)
    ok, detail = mamba_ssd.self_check(torch.float32, torch.device("cpu"), 8, 8, 1, 2, True)
    assert (ok, detail) == (True, "") if not broken else (not ok and detail.startswith("output differs"))


@pytest.mark.parametrize("op", ["fla.chunk_simple_gla", "fla.chunk_delta_rule", "fla.chunk_rwkv7"])
def test_the_fla_check_is_the_shared_one(monkeypatch, fresh_checks, op):
    monkeypatch.setattr(fla_backend, "_call", fla_backend._reference)
    monkeypatch.setattr(fla_backend, "known_refusal", lambda op, decay: "")
    assert fla_backend.self_check(op, torch.float32, torch.device("cpu"), 8, 8, "scalar") == (True, "")


def _imports(folder: Path) -> set[str]:
    names = set()
    for path in folder.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                names.add(node.module)
            elif isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
    return names


def test_imports_run_downward_kernels_and_reference_never_import_lower():
    """lower and kernels are peers above reference: the shared self-check lives in reference."""
    kernels = _imports(ROOT / "kernels")
    reference = _imports(ROOT / "seqdsl" / "reference")
    assert not any(name.startswith("seqdsl.lower") for name in kernels), kernels
    assert not any(name.startswith(("seqdsl.lower", "seqdsl.kernels")) for name in reference), reference


def test_the_fla_check_runs_at_the_models_heads(monkeypatch, fresh_checks):
    """fla's kernels take the heads as a compile-time constant: the check draws the key's H heads
    (not a fixed 2), so that the kernels it compiles are the ones the model's calls reuse."""
    import seqdsl
    from seqdsl.ir.key import kernel_key

    spec = seqdsl.loads(Path(__file__).resolve().parents[2].joinpath("specs", "rwkv7.seq").read_text())
    key = kernel_key(spec.program.mixer(spec.program.mixers[0].name), 768)  # the 110m width: 12 heads of 64
    seen = []
    monkeypatch.setattr(fla_backend, "_call", lambda op, *args: seen.append(args[0].shape) or
                        fla_backend._reference(op, *args))
    monkeypatch.setattr(fla_backend, "known_refusal", lambda op, decay: "")
    assert fla_backend.FlaBackend().self_check(key, "fla.chunk_rwkv7", torch.float32, torch.device("cpu")) == (True, "")
    assert key.heads > 2 and seen and all(shape[2] == key.heads for shape in seen)
    assert f"H={key.heads}" in fla_backend.FlaBackend().facts(key)  # a verdict is kept per head count
