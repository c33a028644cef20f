"""Compiling a call's Triton kernels ahead, in parallel (seqdsl/kernels/precompile.py): the dry
mode and its switches on CPU; on a GPU, that a dry call compiles its kernels without running
them (outputs untouched, the real launch then finds the kernel compiled and computes), and that
an autotuned kernel with no tuning stops the dry call without recording a tuning."""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl
from triton.runtime import _async_compile, autotuner, jit

from seqdsl.kernels import precompile
from seqdsl.reference import selfcheck
from tests.kernels.test_state_pass import ON_GPU


@pytest.fixture
def compiled_mode(monkeypatch):
    """The tests' processes interpret Triton on CPU (tests/kernels/conftest.py), which turns
    `ahead` off: these run it as a GPU machine would."""
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    monkeypatch.delenv("SEQDSL_PRECOMPILE", raising=False)


def test_dry_mode_is_undone_on_exit_and_on_error():
    run, bench = jit.JITFunction.run, autotuner.Autotuner._bench
    with precompile._dry_launches():
        assert jit.JITFunction.run is not run
        with pytest.raises(precompile.Untuned):
            autotuner.Autotuner._bench(type("Tuner", (), {"fn": len})())
    assert (jit.JITFunction.run, autotuner.Autotuner._bench) == (run, bench)
    with pytest.raises(RuntimeError), precompile._dry_launches():
        raise RuntimeError("the dry call failed")
    assert (jit.JITFunction.run, autotuner.Autotuner._bench) == (run, bench)


def test_ahead_says_why_the_dry_call_stopped_and_raises_nothing(compiled_mode):
    def untuned():
        raise precompile.Untuned("kernel_x has no tuning for these shapes yet")

    def broken():
        raise ValueError("shapes do not match\nsecond line")

    run = jit.JITFunction.run
    report = precompile.ahead(lambda: None)
    assert (report.kernels, report.stopped) == (0, "")
    assert precompile.ahead(untuned).stopped == "kernel_x has no tuning for these shapes yet"
    assert precompile.ahead(broken).stopped == "ValueError: shapes do not match"
    assert _async_compile.active_mode.get() is None  # later compilations are not queued on a closed pool
    assert jit.JITFunction.run is run


@pytest.mark.parametrize("switch", [{"SEQDSL_PRECOMPILE": "0"}, {"TRITON_INTERPRET": "1"}])
def test_ahead_is_off_when_switched_off_or_interpreted(compiled_mode, monkeypatch, switch):
    for name, value in switch.items():
        monkeypatch.setenv(name, value)
    called = []
    assert precompile.ahead(lambda: called.append(1)) is None
    assert called == []  # under the interpreter a dry launch would run the kernel: not even called


def test_self_check_runs_the_fast_path_ahead_once_then_checks():
    calls = []

    def fast(x):
        calls.append("fast")
        return x * 2

    def ahead(run):
        calls.append("ahead")
        run()

    x = torch.randn(5)
    assert selfcheck.self_check(fast, lambda x: x * 2, [x], ["x"], tolerance=1e-12,
                                reference_dtype=torch.float64, ahead=ahead) == (True, "")
    assert calls == ["ahead", "fast", "fast"]  # the dry run, then the check's own
    assert selfcheck.self_check(lambda x: x * 3, lambda x: x * 2, [x], ["x"], tolerance=1e-3,
                                reference_dtype=torch.float64, ahead=lambda run: run())[0] is False


@triton.jit
def _add_one(x_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offsets, tl.load(x_ptr + offsets, mask=offsets < n) + 1, mask=offsets < n)


@triton.autotune(configs=[triton.Config({"BLOCK": 64}), triton.Config({"BLOCK": 128})], key=["n"])
@triton.jit
def _add_one_tuned(x_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offsets, tl.load(x_ptr + offsets, mask=offsets < n) + 1, mask=offsets < n)


@ON_GPU
@pytest.mark.gpu
def test_ahead_compiles_without_running_and_the_real_launch_computes(compiled_mode, monkeypatch, tmp_path):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    x = torch.zeros(1000, device="cuda")
    launch = lambda: _add_one[(8,)](x, x.numel(), BLOCK=128)
    report = precompile.ahead(launch)
    torch.cuda.synchronize()
    assert report is not None and report.kernels == 1 and report.stopped == ""
    assert x.eq(0).all()  # compiled, not run
    compiled = _add_one.device_caches[torch.cuda.current_device()][0]
    assert len(compiled) == 1 and not isinstance(next(iter(compiled.values())), _async_compile.FutureKernel)
    launch()
    assert x.eq(1).all()
    assert len(compiled) == 1  # the real launch compiled nothing more


@ON_GPU
@pytest.mark.gpu
def test_an_untuned_kernel_stops_the_dry_call_and_records_no_tuning(compiled_mode, monkeypatch, tmp_path):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    x = torch.zeros(777, device="cuda")
    report = precompile.ahead(lambda: _add_one_tuned[lambda meta: (triton.cdiv(777, meta["BLOCK"]),)](x, 777))
    assert report is not None and "has no tuning" in report.stopped
    assert _add_one_tuned.cache == {}  # nothing timed from launches that did not run
    assert x.eq(0).all()
    _add_one_tuned[lambda meta: (triton.cdiv(777, meta["BLOCK"]),)](x, 777)  # tunes for real
    assert len(_add_one_tuned.cache) == 1 and x.gt(0).all()
