"""The tunings Triton does not keep, kept by seqdsl (seqdsl/lower/backends/autotune_pins.py):
recorded from the autotuners whose configs carry a pre_hook (and only those), put back as the
autotuner's own config object where GPU, Triton and package versions are the recording's, and
skipped on any difference; merged records replace their own kind; the backends' import check
puts them back after a library's import, on a GPU only."""

from __future__ import annotations

import copy
import json

import pytest

from seqdsl.lower.backends import autotune_pins
from tests.lower import pinned_kernels as kernels

GPU, TRITON = "NVIDIA H100 80GB HBM3", "3.6.0"
KEY = (1000, "torch.float32", "torch.float32")


@pytest.fixture(autouse=True)
def untuned():
    for tuner in (kernels.accumulate, kernels.copy, kernels.accumulate_even.fn):
        tuner.cache.clear()
    yield
    for tuner in (kernels.accumulate, kernels.copy, kernels.accumulate_even.fn):
        tuner.cache.clear()


def tuned_records() -> list[dict]:
    """What the recording reads after a tuning chose config 2 of `accumulate`, config 1 of
    `accumulate_even` and of `copy` (in this test's kernel module)."""
    return [r for r in tuned_records_anywhere() if r["module"] == kernels.__name__]


def tuned_records_anywhere() -> list[dict]:
    kernels.accumulate.cache[KEY] = kernels.accumulate.configs[2]
    kernels.accumulate_even.fn.cache[KEY] = kernels.accumulate_even.fn.configs[1]
    kernels.copy.cache[KEY] = kernels.copy.configs[1]
    rows = autotune_pins.record(["tests"], GPU, TRITON)
    for tuner in (kernels.accumulate, kernels.copy, kernels.accumulate_even.fn):
        tuner.cache.clear()
    return rows


def test_only_tunings_with_a_pre_hook_are_recorded_as_plain_data():
    rows = tuned_records()
    assert [r["kernel"] for r in rows] == ["accumulate", "accumulate_even"]  # copy: Triton keeps it itself
    assert rows[0]["key"] == list(KEY) and rows[0]["config"]["kwargs"] == {"BLOCK": 64}
    assert rows[0]["config"]["num_warps"] == 8 and (rows[0]["gpu"], rows[0]["triton"]) == (GPU, TRITON)
    assert json.loads(json.dumps(rows)) == rows


def test_a_kernel_imported_into_another_module_is_recorded_once(monkeypatch):
    import sys
    import types

    alias = types.ModuleType("tests.lower.pinned_alias")
    alias.accumulate = kernels.accumulate
    monkeypatch.setitem(sys.modules, alias.__name__, alias)
    assert sum(r["kernel"] == "accumulate" for r in tuned_records_anywhere()) == 1


def test_pin_puts_back_the_autotuners_own_config_with_its_hook():
    rows = json.loads(json.dumps(tuned_records()))  # as read from the shipped file
    assert autotune_pins.pin(rows, GPU, TRITON) == 2
    assert kernels.accumulate.cache[KEY] is kernels.accumulate.configs[2]
    assert kernels.accumulate.cache[KEY].pre_hook is kernels.zero_out
    assert kernels.accumulate_even.fn.cache[KEY] is kernels.accumulate_even.fn.configs[1]
    assert autotune_pins.pin(rows, GPU, TRITON) == 0  # a key the autotuner has is left alone


@pytest.mark.parametrize("change", ["gpu", "triton", "version", "module", "kernel", "config", "ambiguous"])
def test_any_difference_skips_a_record(change):
    rows = tuned_records()[:1]
    row = copy.deepcopy(rows[0])
    if change == "gpu":
        row["gpu"] = "NVIDIA H200"
    elif change == "triton":
        row["triton"] = "3.5.0"
    elif change == "version":
        row["version"] = "2.3.2.post1"  # the tests package has none
    elif change == "module":
        row["module"] = "mamba_ssm.not_imported"
    elif change == "kernel":
        row["kernel"] = "renamed"
    elif change == "config":
        row["config"]["kwargs"] = {"BLOCK": 128}  # the kernel's candidates changed
    else:  # two candidates with the recorded fields: which one was timed is unknown
        row["config"]["num_warps"] = 4
        kernels.accumulate.configs.append(kernels.accumulate.configs[1])
    try:
        assert autotune_pins.pin([row], GPU, TRITON) == 0
        assert kernels.accumulate.cache == {}
    finally:
        if change == "ambiguous":
            kernels.accumulate.configs.pop()


def test_merge_replaces_a_record_of_the_same_gpu_versions_kernel_and_key():
    old = tuned_records()
    newer = copy.deepcopy(old[0])
    newer["config"]["num_warps"] = 4
    other_gpu = dict(copy.deepcopy(old[0]), gpu="NVIDIA H200")
    merged = autotune_pins.merge(old, [newer, other_gpu])
    assert len(merged) == 3 and newer in merged and other_gpu in merged and old[0] not in merged


def test_pin_shipped_reads_the_file_for_this_gpu_and_is_off_with_the_seed_switch(tmp_path, monkeypatch):
    import torch
    import triton

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *_: GPU)
    monkeypatch.delenv("SEQDSL_AUTOTUNE_SEED", raising=False)
    assert autotune_pins.pin_shipped(tmp_path / "none.json") == 0  # nothing shipped
    path = tmp_path / "pins.json"
    path.write_text(json.dumps({"records": [dict(r, triton=triton.__version__) for r in tuned_records()]}))
    monkeypatch.setenv("SEQDSL_AUTOTUNE_SEED", "0")
    assert autotune_pins.pin_shipped(path) == 0 and kernels.accumulate.cache == {}
    monkeypatch.delenv("SEQDSL_AUTOTUNE_SEED")
    assert autotune_pins.pin_shipped(path) == 2 and kernels.accumulate.cache[KEY] is kernels.accumulate.configs[2]


def test_write_and_read_round_trip_and_no_file_is_no_records(tmp_path):
    path = tmp_path / "pins.json"
    assert autotune_pins.read(path) == []
    rows = tuned_records()
    autotune_pins.write(path, rows)
    assert autotune_pins.read(path) == rows
    assert autotune_pins.pin(autotune_pins.read(path), GPU, TRITON) == 2
