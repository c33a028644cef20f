"""Device and precision: the one choice `seqdsl train` and `seqdsl eval` share
(seqdsl/run/device.py), and the MFU both report (seqdsl/train/throughput.py)."""

from __future__ import annotations

import pytest
import torch

from seqdsl.cli.main import main
from seqdsl.errors import SeqError
from seqdsl.ir.flops import flops_per_token
from seqdsl.run.config import load_config
from seqdsl.run.device import autocast_dtype, device_kind, pick_device
from seqdsl.train.setup import resolve_model
from seqdsl.train.throughput import device_peak_flops, mfu_meter
from tests.train.helpers import MICRO_SPEC, micro_run_args


@pytest.mark.parametrize("dtype, device, expected", [
    ("auto", "cuda", torch.bfloat16), ("auto", "cpu", None), ("float32", "cuda", None),
    ("bfloat16", "cpu", torch.bfloat16), ("bfloat16", "cuda", torch.bfloat16)])
def test_autocast_dtype(dtype, device, expected):
    assert autocast_dtype(dtype, torch.device(device)) == expected


def test_unknown_dtype_is_one_message():
    with pytest.raises(SeqError, match="unknown dtype 'fp8'"):
        autocast_dtype("fp8", torch.device("cpu"))


def test_auto_is_the_cpu_without_a_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert pick_device("auto") == torch.device("cpu") and device_kind("auto") == "cpu"
    assert device_kind("cuda:1") == "cuda"


@pytest.mark.parametrize("name, local_rank, expected", [
    ("auto", None, "cuda:0"), ("cuda", None, "cuda:0"), ("cuda:3", None, "cuda:3"), ("cuda", 2, "cuda:2")])
def test_cuda_resolves_to_the_processs_gpu(monkeypatch, name, local_rank, expected):
    current = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "set_device", current.append)
    assert pick_device(name, local_rank=local_rank) == torch.device(expected)
    assert current == [torch.device(expected)]
    assert device_kind(name) == "cuda"


@pytest.mark.parametrize("name, message", [("tpu9", "unknown device 'tpu9'"),
                                           ("cuda", "device cuda asked for, but no CUDA device")])
def test_bad_device_is_one_message(monkeypatch, name, message):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SeqError, match=message):
        pick_device(name)


def test_train_and_eval_refuse_a_missing_gpu_with_the_same_message(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    run = tmp_path / "run"
    assert main(micro_run_args(tmp_path, steps=2) + ["--out", str(run)]) == 0
    capsys.readouterr()
    assert main(micro_run_args(tmp_path, steps=2) + ["--out", str(tmp_path / "other"), "--device", "cuda"]) == 2
    from_train = capsys.readouterr().err
    assert main(["eval", str(run), "--device", "cuda"]) == 2
    from_eval = capsys.readouterr().err
    assert from_train == from_eval and "no CUDA device is available" in from_eval


def test_mfu_meter_is_training_flops_over_the_peak(tmp_path):
    (tmp_path / "micro.seq").write_text(MICRO_SPEC)
    model = resolve_model(load_config(None, spec=str(tmp_path / "micro.seq"), preset=None), vocab=256)
    per_token = flops_per_token(model.program, model.spec, 16).training
    meter = mfu_meter(model, 16, peak_flops=2e12)
    assert meter(1000.0) == pytest.approx(1000.0 * per_token / 2e12, rel=1e-12)
    assert mfu_meter(model, 16, peak_flops=None)(1000.0) is None
    assert device_peak_flops(torch.device("cpu")) is None
