"""The run config: what `seqdsl train` trains, on what data, for how long, and how.

A pydantic model, loaded from a JSON or TOML file (see `recipes/`) and then overridden from the
command line (`--set data.heldout=0.1`, or explicit flags). Every field has a default, so
`seqdsl train SPEC` alone trains a `tiny` model on the builtin corpus.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from seqdsl.errors import SeqError, SeqFileError

ALL = "*"  # data.train_domains = ["*"]: the mixed-domain setting (train on every domain)


class DataConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    source: Literal["builtin", "files", "hub"] = "builtin"
    files: list[str] = []  # source = files: paths, globs or folders of .jsonl / .jsonl.zst / .parquet
    hub: str | None = None  # source = hub: a dataset id, streamed (needs the network)
    hub_split: str = "train"
    domain_field: str | None = None  # dotted path, e.g. meta.redpajama_set_name; None = folder name
    text_field: str = "text"
    train_domains: list[str] = ["docstrings"]  # ["*"] trains on every domain (mixed-domain)
    eval_domains: list[str] | None = None  # None: every domain of the source
    tokenizer: str = "bytes"  # or the path of a tokenizer.json
    heldout: float = Field(0.05, gt=0.0, lt=1.0)  # fraction of documents held out (by text hash)
    eval_tokens: int = Field(65_536, gt=1)  # tokens per evaluated domain (whole documents)

    def training_domains(self, available: list[str]) -> list[str]:
        return list(available) if ALL in self.train_domains else list(self.train_domains)


class RunConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    spec: str = ""  # the .seq file (set from the command line)
    model: str | None = None  # which model of the file (default: its last)
    preset: str | None = "tiny"  # resize the model (tiny / 110m / 1.3b); None keeps the spec's sizes
    tokens: int = Field(2_000_000, gt=0)  # training tokens (steps = tokens // (batch * seq_len))
    batch: int = Field(16, gt=0)  # global batch, in sequences per optimizer step
    micro_batch: int | None = None  # sequences per forward per process (default: batch / processes)
    seq_len: int | None = None  # default: the model's context
    lr: float = Field(3e-3, gt=0)
    min_lr_ratio: float = Field(0.1, ge=0, le=1)  # the cosine decays to lr * min_lr_ratio
    warmup: int = Field(20, ge=0)  # linear warmup steps
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    clip: float = 1.0
    seed: int = 0
    eval_every: int = Field(100, ge=0)  # steps between evaluations (0: only at the end)
    eval_batch: int = Field(8, gt=0)
    checkpoint_every: int = Field(100, ge=0)  # steps between checkpoints (0: only at the end)
    keep_checkpoints: int = Field(2, gt=0)
    log_every: int = Field(10, gt=0)
    device: str = "auto"  # auto = cuda if available, else cpu
    dtype: Literal["auto", "float32", "bfloat16"] = "auto"  # autocast dtype; auto = bf16 on cuda
    compile: bool = False  # torch.compile each block (as torchtitan does) and the loss head
    # with compile, on CUDA: replay each compiled piece as a CUDA graph (torch.compile's
    # "reduce-overhead"), so a step no longer waits on hundreds of kernel launches
    cuda_graphs: bool = False
    # With several processes (torchrun): ddp replicates the model and optimizer in every process;
    # fsdp shards them (FSDP2, per block) for the presets whose replicas do not fit (1.3b and up).
    # Ignored by a single process. Checkpoints are the same either way (docs/training.md).
    parallel: Literal["ddp", "fsdp"] = "ddp"
    data: DataConfig = DataConfig()

    @model_validator(mode="after")
    def _sane(self) -> "RunConfig":
        if self.data.source == "files" and not self.data.files:
            raise ValueError("data.source = files needs data.files")
        if self.data.source == "hub" and not self.data.hub:
            raise ValueError("data.source = hub needs data.hub")
        if self.cuda_graphs and not self.compile:
            raise ValueError("cuda_graphs = true needs compile = true (the graphs are torch.compile's)")
        return self


def _read(path: Path) -> dict:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise SeqFileError(f"cannot read config {path}: {err.strerror if isinstance(err, OSError) else err}") from None
    try:
        if path.suffix == ".toml":
            return _toml().loads(text)
        return json.loads(text)
    except ValueError as err:  # json.JSONDecodeError and tomllib.TOMLDecodeError
        raise SeqFileError(f"{path}: not valid {path.suffix[1:].upper()}: {err}") from None


def _toml():
    try:
        import tomllib  # Python >= 3.11

        return tomllib
    except ImportError:
        try:
            import tomli  # the same parser, for Python 3.10 (the `train` extra installs it)

            return tomli
        except ImportError:
            raise SeqError("TOML configs need Python >= 3.11 or the tomli package; or use a .json config") from None


def _parse_value(text: str):
    """`--set` values are JSON when they parse as JSON (numbers, true, lists), else strings."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def apply_override(raw: dict, assignment: str) -> dict:
    """`key=value` or `section.key=value` applied to a raw config dict."""
    key, sep, value = assignment.partition("=")
    if not sep or not key:
        raise SeqError(f"bad --set {assignment!r}", hint="write --set key=value, e.g. --set data.heldout=0.1")
    target = raw
    parts = key.strip().split(".")
    for part in parts[:-1]:
        target = target.setdefault(part, {})
        if not isinstance(target, dict):
            raise SeqError(f"bad --set {assignment!r}: {part} is not a section")
    target[parts[-1]] = _parse_value(value.strip())
    return raw


def build_config(raw: dict) -> RunConfig:
    try:
        return RunConfig.model_validate(raw)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "config"
        raise SeqError(f"bad run config: {where}: {first['msg']}") from None


def load_config(path: str | None, overrides: list[str] = (), **explicit) -> RunConfig:
    """The config file (if any), then `--set` overrides, then explicit flags that are not None."""
    raw = _read(Path(path)) if path else {}
    for assignment in overrides:
        apply_override(raw, assignment)
    raw.update({k: v for k, v in explicit.items() if v is not None})
    return build_config(raw)
