"""Checkpoints, written so that a kill at any instant leaves the last complete one usable.

Layout (the run-directory contract, docs/training.md):

    checkpoints/step_00000100/  model.safetensors, optimizer.pt, state.json, spec.seq
    checkpoints/latest          the name of the newest complete checkpoint directory

A checkpoint is written into a temporary directory next to its final place, every file flushed
and fsynced, then renamed into place with os.replace; only then is `latest` rewritten (temp file +
os.replace). A kill before the rename leaves a stray temp directory, ignored and removed by the
next write; a kill between the rename and the pointer leaves `latest` naming the previous
checkpoint. `state.json` carries the SHA-256 of the weight and optimizer files, so a checkpoint
damaged afterwards is never loaded. `load_latest` (what `--resume` reads) then falls back to the
newest earlier checkpoint that is intact and says which one was passed over: resuming is exact, so
the run only redoes the steps since that checkpoint (and rewrites the damaged one when it gets
there). `seqdsl eval`, which scores what it is pointed at, refuses instead and names the intact
one (seqdsl/run/rundir.py).

The files hold the *full* (unsharded) state, keyed by parameter names, whatever wrote them: one
process, DDP, or FSDP2 shards (gathered with torch.distributed.checkpoint's state-dict helpers,
full_state_dict + cpu_offload). A checkpoint written at one world size or parallelism therefore
resumes at any other. Under FSDP2 saving and restoring are collective: every process calls them,
process 0 alone writes.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import random
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist

from seqdsl.atomic import write_atomic
from seqdsl.errors import SeqError, SeqFileError
from seqdsl.data.shards import file_sha256

LATEST = "latest"
TMP_PREFIX = ".tmp-"


class CheckpointError(SeqFileError):
    """A checkpoint that is missing, incomplete or damaged."""


@dataclass(frozen=True)
class Loaded:
    path: Path
    state: dict  # state.json
    # why the newer checkpoint `latest` names was passed over for this one (it is damaged)
    passed_over: str | None = None


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


def _full_state_options(**extra):
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(full_state_dict=True, **extra)


def _tied_names(model: torch.nn.Module) -> dict[str, str]:
    """{name: the first name of the same parameter} for parameters reached by several names (tied
    embeddings). safetensors stores a tensor once, under one of its names."""
    first: dict[int, str] = {}
    tied = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        if id(param) in first:
            tied[name] = first[id(param)]
        else:
            first[id(param)] = name
    return tied


def _is_writer() -> bool:
    return not dist.is_initialized() or dist.get_rank() == 0


def full_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> tuple[dict, dict]:
    """(weights, optimizer state): the whole state on the CPU, keyed by parameter names (the
    optimizer's too, not by position), tied parameters once. Collective when the model is sharded
    (FSDP2): every process calls it; process 0 gets the tensors, the others empty dicts."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

    options = _full_state_options(cpu_offload=True)
    weights = get_model_state_dict(model, options=options)
    optim = get_optimizer_state_dict(model, optimizer, options=options)
    for name in _tied_names(model):
        weights.pop(name, None)
    return {k: v.contiguous() for k, v in weights.items()}, optim


def step_name(step: int) -> str:
    return f"step_{step:08d}"


def save(root: Path, step: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: dict,
         spec_text: str, *, keep: int = 2) -> Path | None:
    """Write checkpoint `step` under `root` (= run/checkpoints) atomically; point `latest` at it;
    keep the newest `keep` checkpoints. Every process calls it (the state is gathered
    collectively under FSDP2); process 0 writes and returns the path, the others None."""
    from safetensors.torch import save_file

    weights, optim = full_state(model, optimizer)
    if not _is_writer():
        return None
    root.mkdir(parents=True, exist_ok=True)
    for stray in root.glob(TMP_PREFIX + "*"):  # left by a write that was killed
        shutil.rmtree(stray, ignore_errors=True)
    for stray in root.glob(f".{LATEST}.*.tmp"):  # the pointer's, likewise (seqdsl/atomic.py)
        stray.unlink(missing_ok=True)
    final = root / step_name(step)
    tmp = root / f"{TMP_PREFIX}{step_name(step)}-{os.getpid()}"
    tmp.mkdir()
    save_file(weights, str(tmp / "model.safetensors"))
    _fsync(tmp / "model.safetensors")
    torch.save(optim, tmp / "optimizer.pt")
    _fsync(tmp / "optimizer.pt")
    _fsync_write(tmp / "spec.seq", spec_text.encode("utf-8"))
    state = dict(state, step=step, files={name: file_sha256(tmp / name) for name in ("model.safetensors", "optimizer.pt")})
    _fsync_write(tmp / "state.json", json.dumps(state).encode("utf-8"))
    if final.exists():  # a complete checkpoint of the same step from an earlier attempt
        shutil.rmtree(final)
    os.replace(tmp, final)
    write_atomic(root / LATEST, final.name, durable=True)
    _prune(root, keep)
    return final


def _prune(root: Path, keep: int) -> None:
    steps = step_dirs(root)
    newest = latest_name(root)
    for old in steps[:-keep]:
        if old.name != newest:
            shutil.rmtree(old, ignore_errors=True)


def latest_name(root: Path) -> str | None:
    try:
        return (root / LATEST).read_text().strip() or None
    except (FileNotFoundError, NotADirectoryError):
        return None


def step_dirs(root: Path) -> list[Path]:
    """The checkpoint directories under `root`, oldest first (intact or not)."""
    return sorted(p for p in root.glob("step_*") if p.is_dir()) if root.is_dir() else []


def load_latest(root: Path) -> Loaded:
    """The checkpoint `latest` names under `root`, verified; when that one is damaged, the newest
    earlier one that is intact, with `passed_over` saying what is wrong with the latest. One
    CheckpointError when there is no checkpoint or none is intact."""
    name = latest_name(root)
    if name is None:
        # `latest` lost (deleted, or a copy without it) while step directories remain: the newest intact one
        fallback = intact_before(root, "") if root.is_dir() else None
        if fallback is None:
            raise CheckpointError(f"no checkpoint to resume from in {root}",
                                  hint="run without --resume to start, or point --out at the run")
        return dataclasses.replace(fallback, passed_over=f"{root / LATEST} is missing")
    try:
        return verify(root / name)
    except CheckpointError as damaged:
        previous = intact_before(root, name)
        if previous is None:
            raise CheckpointError(damaged.message, hint="no earlier checkpoint is intact either: start the run "
                                                        "again without --resume, in another --out") from None
        return dataclasses.replace(previous, passed_over=damaged.message)


def _step_of(path: Path) -> int | None:
    number = path.name.removeprefix("step_")
    return int(number) if path.name.startswith("step_") and number.isdigit() else None


def intact_before(root: Path, name: str) -> Loaded | None:
    """The newest checkpoint under `root` older than checkpoint `name` whose files match their
    hashes, verified; None when there is none."""
    newest = _step_of(root / name)
    older = [(step, p) for p in root.glob("step_*")
             if p.is_dir() and (step := _step_of(p)) is not None and (newest is None or step < newest)]
    for _, path in sorted(older, reverse=True):
        try:
            return verify(path)
        except CheckpointError:
            continue
    return None


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
        if file_sha256(path / name) != digest:
            raise CheckpointError(f"checkpoint {path} is damaged: {name} does not match its hash")
    return Loaded(path, state)


def restore(loaded: Loaded, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None) -> None:
    """Load weights (and optimizer state) of a verified checkpoint into `model` (`optimizer`),
    whole or sharded (FSDP2: every process calls it and keeps its shard)."""
    from safetensors.torch import load_file
    from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_optimizer_state_dict

    try:
        weights = load_file(str(loaded.path / "model.safetensors"), device="cpu")
        for name, first in _tied_names(model).items():  # stored once, under either name
            if (name in weights) != (first in weights):
                weights[name] = weights[first] = weights.get(name, weights.get(first))
        expected = set(model.state_dict())
        missing, unexpected = expected - set(weights), set(weights) - expected
        if missing or unexpected:
            raise SeqError(f"checkpoint {loaded.path} does not fit this model "
                           f"(missing {sorted(missing)[:3]}, unexpected {sorted(unexpected)[:3]})")
        set_model_state_dict(model, weights, options=_full_state_options())
        if optimizer is not None:
            optim = torch.load(loaded.path / "optimizer.pt", map_location="cpu", weights_only=True)
            set_optimizer_state_dict(model, optimizer, optim, options=_full_state_options())
    except SeqError:
        raise
    except (RuntimeError, ValueError, OSError, KeyError) as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise CheckpointError(f"checkpoint {loaded.path} cannot be loaded: {first}") from None
