"""How the planner (seqdsl/lower/paths.py) chooses between mamba-ssm and fla for a key both
accept: each one's self-check decides what is correct, a timing measured once (and kept on disk
with the self-check verdicts) decides what is faster, and every refusal is reported. The
runtimes are replaced by stand-ins here, so this runs on CPU; the real kernels are compared with
the reference on a GPU in tests/lower/test_gpu_mamba.py."""

from __future__ import annotations

import importlib.util
import warnings

import pytest
import torch

from seqdsl.lower import backends, paths, verdicts
from seqdsl.lower.backends.base import BackendName
from seqdsl.lower.paths import PathChooser
from tests.ir.test_support import _library_key


class _StandIn:
    def __init__(self, name: str, passes: bool):
        self.name, self.passes, self.checks = f"{name} stand-in", passes, 0
        self.steps_pass, self.step_checks = True, 0

    def what(self, op):
        return self.name

    def facts(self, key):
        return self.name

    def known_refusal(self, key, op):
        return ""

    def self_check(self, key, op, dtype, device):
        self.checks += 1
        return (True, "") if self.passes else (False, "output differs")

    def step_check(self, key, dtype, device):
        self.step_checks += 1
        return (True, "") if self.steps_pass else (False, "state differs")


@pytest.fixture
def stand_ins(monkeypatch, tmp_path):
    """Both recurrent backends replaced, the verdict store in a fresh folder, a fake GPU's facts,
    and a race whose result is set by the test."""
    monkeypatch.setenv("SEQDSL_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(verdicts, "machine_facts", lambda device: {"device_name": "stand-in GPU"})
    runtimes = {"mamba": _StandIn("mamba", True), "fla": _StandIn("fla", True)}
    monkeypatch.setitem(backends.BACKENDS, BackendName.MAMBA, runtimes["mamba"])
    monkeypatch.setitem(backends.BACKENDS, BackendName.FLA, runtimes["fla"])
    monkeypatch.setattr(backends, "MAMBA", runtimes["mamba"])
    races = []

    def race(key, passed, dtype, device):
        races.append([v.op for v in passed])
        return {"mamba.ssd": 2.0, "fla.chunk_simple_gla": 1.0}

    monkeypatch.setattr(paths, "_race", race)
    return runtimes, races


def test_the_faster_of_two_correct_kernels_runs_and_the_timing_is_kept(stand_ins):
    runtimes, races = stand_ins
    key = _library_key("mamba2")
    plan = PathChooser(key, "mamba2").plan("cuda", torch.float32)
    assert plan.op == "fla.chunk_simple_gla" and "faster here" in plan.reason
    assert races == [["mamba.ssd", "fla.chunk_simple_gla"]]
    again = PathChooser(key, "mamba2").plan("cuda", torch.float32)  # a new process, say
    assert again == plan and len(races) == 1 and runtimes["mamba"].checks == 1


def test_a_kernel_that_fails_its_self_check_is_reported_and_the_other_runs(stand_ins):
    runtimes, races = stand_ins
    runtimes["mamba"].passes = False
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plan = PathChooser(_library_key("mamba2"), "mamba2").plan("cuda", torch.float32)
    assert plan.op == "fla.chunk_simple_gla" and not races
    assert any("mamba.ssd failed its self-check" in str(w.message) and "running fla.chunk_simple_gla"
               in str(w.message) for w in caught)


def test_when_every_kernel_fails_the_reference_runs_with_both_reasons(stand_ins):
    runtimes, _ = stand_ins
    runtimes["mamba"].passes = runtimes["fla"].passes = False
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        plan = PathChooser(_library_key("retnet"), "retnet").plan("cuda", torch.float32)
    assert plan.op == "reference.chunked"
    assert "mamba.ssd failed" in plan.reason and "fla.chunk_simple_gla failed" in plan.reason


def test_on_cpu_the_reference_runs_and_the_plan_names_the_gpu_kernels():
    plan = PathChooser(_library_key("mamba2"), "mamba2").plan("cpu", torch.float32)
    assert plan.op == "reference.chunked" and "mamba.ssd" in plan.reason and "CUDA only" in plan.reason


def test_narrow_values_with_a_per_channel_decay_run_the_reference_step_by_step():
    """Mamba-1 (1-wide values, a per-channel decay): the chunked oracle's (c, c, Dk) decay
    tensors would dwarf the recurrence's state (a tiny probe model ran out of 24 GB chunked);
    GLA's 128-wide values keep the chunked form."""
    plan = PathChooser(_library_key("mamba"), "mamba").plan("cpu", torch.float32)
    assert plan.op == "reference.recurrent" and "1-wide values" in plan.reason
    assert PathChooser(_library_key("gla"), "gla").plan("cpu", torch.float32).op == "reference.chunked"


@pytest.mark.skipif(importlib.util.find_spec("mamba_ssm") is not None, reason="mamba-ssm is installed here")
def test_without_mamba_ssm_the_gpu_plan_says_so(monkeypatch):
    from seqdsl.lower.backends import fla as fla_backend

    if not torch.cuda.is_available():  # importing fla costs seconds; on CPU its plan is not the point
        monkeypatch.setattr(fla_backend, "importable", lambda: False)
    plan = PathChooser(_library_key("mamba2"), "mamba2").plan("cuda")
    assert plan.op != "mamba.ssd" and "mamba-ssm is not importable here" in plan.reason


def test_decoding_steps_on_mamba_run_its_state_update_after_their_own_self_check(stand_ins):
    runtimes, _ = stand_ins
    runtimes["fla"].passes = False
    key = _library_key("mamba2")
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        plan = PathChooser(key, "mamba2").plan("cuda", torch.float32)
        again = PathChooser(key, "mamba2").plan("cuda", torch.float32)  # the verdict is kept on disk
    assert plan.op == "mamba.ssd" and again == plan and runtimes["mamba"].step_checks == 1
    assert "decoding steps: mamba-ssm's selective_state_update, self-checked against the reference step" in plan.reason


def test_decoding_steps_whose_kernel_fails_its_self_check_run_the_reference_step_and_say_so(stand_ins):
    runtimes, _ = stand_ins
    runtimes["fla"].passes = False
    runtimes["mamba"].steps_pass = False
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plan = PathChooser(_library_key("mamba2"), "mamba2").plan("cuda", torch.float32)
    assert plan.op == "mamba.ssd"  # the chunked kernel passed: training keeps it
    assert "decoding steps: the reference recurrent step (selective_state_update failed its self-check: " \
           "state differs)" in plan.reason
    assert any("selective_state_update failed its self-check" in str(w.message) for w in caught)


@pytest.mark.parametrize("name, op", [("retnet", "mamba.ssd"), ("mamba", "mamba.selective_scan")])
def test_the_displayed_plan_names_the_decoding_kernel(stand_ins, name, op):
    plan = PathChooser(_library_key(name), name).plan("cuda")
    assert plan.op == op and "decoding steps: mamba-ssm's selective_state_update, after a self-check" \
        in plan.reason
