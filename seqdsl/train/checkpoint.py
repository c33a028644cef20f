"""Checkpoints, written so that a kill at any instant leaves the last complete one usable.

Layout (the run-directory contract, docs/training.md):

    checkpoints/step_00000100/  model.safetensors, optimizer.pt, state.json, spec.seq
    checkpoints/latest          the name of the newest complete checkpoint directory

A checkpoint is written into a temporary directory next to its final place, every file flushed
and fsynced, then renamed into place with os.replace; only then is `latest` rewritten (temp file +
os.replace). A kill before the rename leaves a stray temp directory, ignored and removed by the
next write; a kill between the rename and the pointer leaves `latest` naming the previous
checkpoint. `state.json` carries the SHA-256 of the weight and optimizer files, so a checkpoint
damaged afterwards is refused with one message instead of loading garbage.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import random
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch

from seqdsl.errors import SeqError, SeqFileError

LATEST = "latest"
TMP_PREFIX = ".tmp-"


class CheckpointError(SeqFileError):
    """A checkpoint that is missing, incomplete or damaged."""


@dataclass(frozen=True)
class Loaded:
    path: Path
    state: dict  # state.json


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _fsync_write(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _fsync(path: Path) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def rng_state() -> dict:
    """Every RNG the run could draw from, as JSON-serialisable data."""
    version, internal, gauss = random.getstate()
    state = {"torch": base64.b64encode(torch.get_rng_state().numpy().tobytes()).decode(),
             "python": {"version": version, "internal": list(internal), "gauss": gauss}}
    if torch.cuda.is_available():
        state["cuda"] = [base64.b64encode(s.numpy().tobytes()).decode() for s in torch.cuda.get_rng_state_all()]
    return state


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(torch.frombuffer(bytearray(base64.b64decode(state["torch"])), dtype=torch.uint8))
    py = state["python"]
    random.setstate((py["version"], tuple(py["internal"]), py["gauss"]))
    if "cuda" in state and torch.cuda.is_available() and len(state["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(
            [torch.frombuffer(bytearray(base64.b64decode(s)), dtype=torch.uint8) for s in state["cuda"]])


def step_name(step: int) -> str:
    return f"step_{step:08d}"


def save(root: Path, step: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: dict,
         spec_text: str, *, keep: int = 2) -> Path:
    """Write checkpoint `step` under `root` (= run/checkpoints) atomically; point `latest` at it;
    keep the newest `keep` checkpoints."""
    from safetensors.torch import save_model

    root.mkdir(parents=True, exist_ok=True)
    for stray in root.glob(TMP_PREFIX + "*"):  # left by a write that was killed
        shutil.rmtree(stray, ignore_errors=True)
    final = root / step_name(step)
    tmp = root / f"{TMP_PREFIX}{step_name(step)}-{os.getpid()}"
    tmp.mkdir()
    save_model(model, str(tmp / "model.safetensors"))  # handles tied (shared) weights
    _fsync(tmp / "model.safetensors")
    torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
    _fsync(tmp / "optimizer.pt")
    _fsync_write(tmp / "spec.seq", spec_text.encode("utf-8"))
    state = dict(state, step=step, files={name: _sha256(tmp / name) for name in ("model.safetensors", "optimizer.pt")})
    _fsync_write(tmp / "state.json", json.dumps(state).encode("utf-8"))
    if final.exists():  # a complete checkpoint of the same step from an earlier attempt
        shutil.rmtree(final)
    os.replace(tmp, final)
    pointer = root / f"{TMP_PREFIX}{LATEST}-{os.getpid()}"
    _fsync_write(pointer, final.name.encode())
    os.replace(pointer, root / LATEST)
    _prune(root, keep)
    return final


def _prune(root: Path, keep: int) -> None:
    steps = sorted(p for p in root.glob("step_*") if p.is_dir())
    newest = latest_name(root)
    for old in steps[:-keep]:
        if old.name != newest:
            shutil.rmtree(old, ignore_errors=True)


def latest_name(root: Path) -> str | None:
    try:
        return (root / LATEST).read_text().strip() or None
    except FileNotFoundError:
        return None


def load_latest(root: Path) -> Loaded:
    """The newest complete checkpoint under `root`, verified; one CheckpointError otherwise."""
    name = latest_name(root)
    if name is None:
        raise CheckpointError(f"no checkpoint to resume from in {root}",
                              hint="run without --resume to start, or point --out at the run")
    return verify(root / name)


def verify(path: Path) -> Loaded:
    """A checkpoint directory whose files are all there and match the hashes in state.json."""
    try:
        state = json.loads((path / "state.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise CheckpointError(f"checkpoint {path} is damaged: cannot read state.json "
                              f"({type(err).__name__})") from None
    files = state.get("files") if isinstance(state, dict) else None
    if not isinstance(files, dict) or not files:
        raise CheckpointError(f"checkpoint {path} is damaged: state.json lists no file hashes to check "
                              "its files against")
    for name, digest in files.items():
        if not (path / name).is_file():
            raise CheckpointError(f"checkpoint {path} is damaged: {name} is missing")
        if _sha256(path / name) != digest:
            raise CheckpointError(f"checkpoint {path} is damaged: {name} does not match its hash")
    return Loaded(path, state)


def restore(loaded: Loaded, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None,
            device: torch.device) -> None:
    """Load weights (and optimizer state) of a verified checkpoint into `model` (`optimizer`)."""
    from safetensors.torch import load_model

    try:
        missing, unexpected = load_model(model, str(loaded.path / "model.safetensors"), strict=False,
                                         device=str(device))
        if missing or unexpected:
            raise SeqError(f"checkpoint {loaded.path} does not fit this model "
                           f"(missing {sorted(missing)[:3]}, unexpected {sorted(unexpected)[:3]})")
        if optimizer is not None:
            optimizer.load_state_dict(torch.load(loaded.path / "optimizer.pt", map_location=device,
                                                 weights_only=True))
    except SeqError:
        raise
    except (RuntimeError, ValueError, OSError) as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise CheckpointError(f"checkpoint {loaded.path} cannot be loaded: {first}") from None
