"""Reading a checkpoint for evaluation: the model it holds, built from its own spec.

Accepts a run directory (its `checkpoints/latest`), a run's `checkpoints/` directory, or one
checkpoint directory `step_NNNNNNNN/` (the run-directory contract, docs/evaluation.md). The model
is the one `spec.seq` declares: training writes the resolved model there (resized to its preset,
with the tokenizer's vocabulary and the run's context), so it is built as it stands; the weights are then
loaded strictly, so a checkpoint that does not fit its spec is refused. Its files are first
checked against the SHA-256 digests in state.json by the same verifier `--resume` uses
(seqdsl/run/checkpoint.py, which writes checkpoints). Every failure is one CheckpointError.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from seqdsl.errors import SeqError
from seqdsl.run.checkpoint import LATEST, CheckpointError, intact_before, verify
from seqdsl.run.layout import CHECKPOINTS, CONFIG, SPEC, STATE, WEIGHTS


@dataclass(frozen=True)
class Checkpoint:
    path: Path  # the step directory
    run: Path | None  # the run directory holding it (None for a checkpoint outside a run)
    state: dict  # state.json
    spec_text: str
    config: dict  # the run's config.json ({} when there is none)

    @property
    def step(self) -> int:
        return int(self.state.get("step", 0))

    @property
    def tokens(self) -> int:
        return int(self.state.get("tokens", 0))


def locate(path: str | Path) -> tuple[Path, Path | None]:
    """(checkpoint directory, run directory or None) of a run, checkpoints/ or step directory."""
    p = Path(path)
    if not p.exists():
        raise CheckpointError(f"{p}: no such checkpoint or run directory")
    if (p / WEIGHTS).is_file() or (p / STATE).is_file():
        run = p.parent.parent if p.parent.name == CHECKPOINTS else None
        return p, run
    root, run = (p / CHECKPOINTS, p) if (p / CHECKPOINTS).is_dir() else (p, None)
    if root.name == CHECKPOINTS and run is None:
        run = root.parent
    try:
        name = (root / LATEST).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        raise CheckpointError(f"{p}: no complete checkpoint ({root / LATEST} is missing)",
                              hint="pass a run directory, its checkpoints/ or a step_NNNNNNNN/ directory") from None
    if not name or "/" in name or name in (".", ".."):
        raise CheckpointError(f"{root / LATEST} does not name a checkpoint directory")
    return root / name, run


def _read_json(path: Path, what: str) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise CheckpointError(f"{what} {path} is unreadable ({type(err).__name__})") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{what} {path} is not a JSON object")
    return data


def _verified_state(ckpt: Path) -> dict:
    """state.json of a checkpoint whose files are all there and match their hashes. A damaged one
    is refused, naming the newest earlier one that is intact: evaluation scores the checkpoint it
    is pointed at, never another step in its place (`--resume` does fall back: resuming is exact)."""
    try:
        if not ckpt.is_dir():
            raise CheckpointError(f"checkpoint {ckpt} is missing")
        for name in (WEIGHTS, STATE, SPEC):
            if not (ckpt / name).is_file():
                raise CheckpointError(f"checkpoint {ckpt} is incomplete: {name} is missing")
        return verify(ckpt).state
    except CheckpointError as err:
        previous = intact_before(ckpt.parent, ckpt.name)
        if previous is None:
            raise
        raise CheckpointError(err.message, hint=f"the previous checkpoint is intact: seqdsl eval {previous.path}") from None


def read_checkpoint(path: str | Path) -> Checkpoint:
    ckpt, run = locate(path)
    state = _verified_state(ckpt)
    try:
        spec_text = (ckpt / SPEC).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise CheckpointError(f"cannot read {ckpt / SPEC} ({type(err).__name__})") from None
    config = _read_json(run / CONFIG, "run config") if run is not None and (run / CONFIG).is_file() else {}
    return Checkpoint(ckpt, run, state, spec_text, config)


def build_model(ckpt: Checkpoint, device):
    """The LanguageModel of `ckpt` with its weights, on `device`, in eval mode."""
    from safetensors import SafetensorError
    from safetensors.torch import load_model

    from seqdsl.ir.presets import model_at
    from seqdsl.lower.lm import LanguageModel
    from seqdsl.passes.resolve import loads

    # spec.seq holds the model as trained (already resized to its preset, with the tokenizer's
    # vocabulary and the run's context): build it as it stands, never resize it again
    program = loads(ckpt.spec_text, str(ckpt.path / SPEC)).program
    model = model_at(program).model
    # built normally (not on the meta device) so that buffers the checkpoint does not store,
    # such as ALiBi slopes, are computed as in training
    lm = LanguageModel(program, model)
    try:
        missing, unexpected = load_model(lm, str(ckpt.path / WEIGHTS), strict=False)
    except (SafetensorError, OSError, RuntimeError, ValueError) as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise CheckpointError(f"checkpoint {ckpt.path}: cannot load {WEIGHTS}: {first}") from None
    if missing or unexpected:
        raise SeqError(f"checkpoint {ckpt.path} does not fit model `{model.name}` of its spec.seq "
                       f"(missing {sorted(missing)[:3]}, unexpected {sorted(unexpected)[:3]})")
    return lm.to(device).eval()
