"""The run config: what `seqdsl train` trains, on what data, for how long, and how.

A pydantic model, loaded from a JSON or TOML file (see `recipes/`) and then overridden from the
command line (`--set data.heldout=0.1`, or explicit flags). Every field has a default, so
`seqdsl train SPEC` alone trains a `tiny` model on the builtin corpus.

A mistake is one SeqError naming the key and what wrote it: the file (with the line and a caret
in a TOML file, whose keys can be found line by line), the `--set` assignment or the flag; an
unknown key gets a did-you-mean from the keys of its section, or of the other sections when it
sits in the wrong one (`heldout` at the top level: did you mean `data.heldout`?).
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from seqdsl.errors import Note, SeqError, SeqFileError, Span
from seqdsl.ir.nodes import Preset

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
    # tokenize the corpus once into the token cache (seqdsl/data/tokencache.py) and pack training
    # sequences from it; false tokenizes on the fly. The stream is the same either way.
    token_cache: bool = True
    eval_tokens: int = Field(65_536, gt=1)  # tokens per evaluated domain, exactly (the last document is cut)

    def training_domains(self, available: list[str]) -> list[str]:
        return list(available) if ALL in self.train_domains else list(self.train_domains)


class RunConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    spec: str = ""  # the .seq file (set from the command line)
    model: str | None = None  # which model of the file (default: its last)
    preset: Preset | None = "tiny"  # resize the model; None keeps the spec's sizes
    # with a preset: keep windows and chunks in tokens instead of scaling them with the context
    # (docs/lowering.md, Presets); the resized model's verdict is printed either way
    keep_absolute: bool = False
    tokens: int = Field(2_000_000, gt=0)  # training tokens (steps = tokens // (batch * seq_len))
    batch: int = Field(16, gt=0)  # global batch, in sequences per optimizer step
    micro_batch: int | None = None  # sequences per forward per process (default: batch / processes)
    seq_len: int | None = Field(None, gt=0)  # default: the model's context
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
    # each evaluation also splits its loss into recall tokens and the others (seqdsl/run/recall.py;
    # `seqdsl compare --metric recall_loss`): the same forwards, a sort per batch more, summed on the device
    eval_recall: bool = True
    checkpoint_every: int = Field(100, ge=0)  # steps between checkpoints (0: only at the end)
    keep_checkpoints: int = Field(2, gt=0)
    log_every: int = Field(10, gt=0)
    device: str = "auto"  # auto = cuda if available, else cpu
    dtype: Literal["auto", "float32", "bfloat16"] = "auto"  # autocast dtype; auto = bf16 on cuda
    # on CUDA, float32 matmuls on TF32 tensor cores (float32's range, a 10-bit mantissa; what
    # fla's and mamba-ssm's Triton dots already use): under bf16 autocast these are the chunked
    # recurrences' float32 algebra (docs/training.md); false keeps them in full float32
    tf32: bool = True
    compile: bool = False  # torch.compile the model's blocks and the loss head (compile_scope: how the blocks are)
    # with compile, on CUDA: replay each compiled piece as a CUDA graph (torch.compile's
    # "reduce-overhead"), so a step no longer waits on hundreds of kernel launches
    cuda_graphs: bool = False
    # with compile: "block" compiles one block function shared by blocks of one structure (start-up
    # of about one block's compilation); "model" traces every block into one graph (minutes for
    # deep chunked recurrences). The same computation either way (seqdsl/train/step.py, CausalLoss)
    compile_scope: Literal["block", "model"] = "block"
    # With several processes (torchrun): ddp replicates the model and optimizer in every process;
    # fsdp shards them (FSDP2, per block) for the presets whose replicas do not fit (1.3b and up).
    # Ignored by a single process. Checkpoints are the same either way (docs/training.md).
    parallel: Literal["ddp", "fsdp"] = "ddp"
    data: DataConfig = DataConfig()

    @model_validator(mode="after")
    def _sane(self) -> "RunConfig":
        if self.data.source == "files" and not self.data.files:
            raise KeyProblem("data.source", "data.source = files needs data.files")
        if self.data.source == "hub" and not self.data.hub:
            raise KeyProblem("data.source", "data.source = hub needs data.hub")
        if self.cuda_graphs and not self.compile:
            raise KeyProblem("cuda_graphs", "cuda_graphs = true needs compile = true (the graphs are torch.compile's)")
        return self


class KeyProblem(ValueError):
    """A check across fields, raised with the key it is reported at (pydantic reports a model
    validator's errors at no key)."""

    def __init__(self, key: str, message: str):
        super().__init__(message)
        self.key = key


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise SeqFileError(f"cannot read config {path}: {err.strerror if isinstance(err, OSError) else err}") from None


def _parse(path: Path, text: str) -> dict:
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


def apply_override(raw: dict, assignment: str) -> str:
    """`key=value` or `section.key=value` applied to a raw config dict; returns the dotted key."""
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
    return ".".join(parts)


def load_config(path: str | None, overrides: list[str] = (), **explicit) -> RunConfig:
    """The config file (if any), then `--set` overrides, then explicit flags that are not None."""
    written = Written(Path(path), _read_text(Path(path))) if path else Written()
    raw = _parse(written.file, written.text) if path else {}
    for assignment in overrides:
        written.wrote(apply_override(raw, assignment), f"--set {assignment}")
    for key, value in explicit.items():
        if value is not None:
            raw[key] = value
            written.wrote(key, _flag(key, value))
    return build_config(raw, written)


def _flag(key: str, value) -> str:
    """The command-line words of an explicit flag (seqdsl/cli/train.py)."""
    if key == "spec":
        return "the SPEC argument"
    if isinstance(value, bool):
        return f"--{'' if value else 'no-'}{key.replace('_', '-')}"
    return f"--{key.replace('_', '-')} {value}"


@dataclass
class Written:
    """What wrote a config's values: its file (with the text, to find a TOML key's line), then
    the command-line words that set keys after it (later ones win)."""

    file: Path | None = None
    text: str = ""
    overrides: dict[str, str] = field(default_factory=dict)  # dotted key -> "--set k=v" or "--lr 0.1"

    def wrote(self, key: str, words: str) -> None:
        self.overrides.pop(key, None)  # re-inserted: the order of the dict is the order of writing
        self.overrides[key] = words

    def origin(self, key: str) -> tuple[str | None, Span | None]:
        """(the words or file that wrote `key`, its place in a TOML file or None)."""
        touching = [words for k, words in self.overrides.items()
                    if k == key or key.startswith(k + ".") or k.startswith(key + ".")]
        if touching:
            return touching[-1], None
        if self.file is None:
            return None, None
        return str(self.file), toml_span(self.file, self.text, key) if self.file.suffix == ".toml" else None


def build_config(raw: dict, written: Written | None = None) -> RunConfig:
    try:
        return RunConfig.model_validate(raw)
    except ValidationError as err:
        raise config_error(err.errors(), written or Written()) from None


def config_error(errors: list[dict], written: Written) -> SeqError:
    """Pydantic's validation errors as one SeqError: the first is the error, the others notes, in
    the order of the file's lines, unknown keys first otherwise (a misspelt key is the likeliest
    cause of the rest). With several, each carries its own did-you-mean."""
    problems = sorted((_problem(e, written) for e in errors),
                      key=lambda p: (p.span.line if p.span else 0, not p.unknown_key))
    if len(problems) == 1:
        return SeqError(problems[0].message, span=problems[0].span, hint=problems[0].hint)
    lines = [Note(f"{p.message}: {p.hint}" if p.hint else p.message, p.span) for p in problems]
    return SeqError(lines[0].message, span=lines[0].span, notes=tuple(lines[1:]))


class _Problem(NamedTuple):
    message: str
    span: Span | None
    hint: str | None
    unknown_key: bool


def _problem(error: dict, written: Written) -> _Problem:
    cause = error.get("ctx", {}).get("error")
    key = cause.key if isinstance(cause, KeyProblem) else ".".join(str(p) for p in error["loc"])
    if error["type"] == "extra_forbidden":
        message, hint = f"unknown config key `{key}`", suggest_key(key)
    elif isinstance(cause, KeyProblem):
        message, hint = str(cause), None
    else:
        reason = error["msg"][:1].lower() + error["msg"][1:]
        value = json.dumps(error["input"], default=str)
        message, hint = (reason if key in written.overrides else f"`{key}` = {value}: {reason}"), None
    origin, span = written.origin(key)
    # a TOML span renders as file:line:col; anything else is named before the message
    return _Problem(f"{origin}: {message}" if origin and span is None else message, span, hint,
                    error["type"] == "extra_forbidden")


def _config_keys() -> dict[str, str]:
    """{dotted key: its last part} of every key of the config, sections included."""
    keys = {name: name for name in RunConfig.model_fields}
    keys.update({f"data.{name}": name for name in DataConfig.model_fields})
    return keys


def suggest_key(key: str) -> str:
    """A did-you-mean for an unknown key: the closest key of its section, else of any section
    (a key written in the wrong one); else the keys of its section."""
    section, _, last = key.rpartition(".")
    keys = _config_keys()
    here = [k for k in keys if k.rpartition(".")[0] == section]
    for pool in (here, list(keys)):
        close = difflib.get_close_matches(last, [keys[k] for k in pool], n=1, cutoff=0.6)
        if close:
            return f"did you mean `{next(k for k in pool if keys[k] == close[0])}`?"
    if not here:
        return f"the config has no section `{section}`; its sections: data"
    return f"the keys of {f'[{section}]' if section else 'the top level'}: {', '.join(keys[k] for k in here)}"


_TABLE = re.compile(r"\s*\[\s*([A-Za-z0-9_.\- ]+?)\s*\]\s*(?:#.*)?$")
_KEY = re.compile(r"\s*(\"?)([A-Za-z0-9_\-]+(?:\s*\.\s*[A-Za-z0-9_\-]+)*)\1\s*=")
_STRINGS = re.compile(r"\"(?:\\.|[^\"\\])*\"|'[^']*'")


def toml_span(path: Path, text: str, key: str) -> Span | None:
    """Where dotted `key` is written in a TOML file: its `key = ...` line (under its [table], or
    dotted), else the line of the nearest enclosing key written inline (`data = {...}`); None
    when neither is found."""
    lines = _toml_key_lines(text)
    parts = key.split(".")
    for n in range(len(parts), 0, -1):
        found = lines.get(".".join(parts[:n]))
        if found:
            number, start, end, line = found
            return Span(str(path), number, start + 1, number, end + 1, line)
    return None


def _toml_key_lines(text: str) -> dict[str, tuple[int, int, int, str]]:
    """{dotted key: (line number, start and end column of the key, the line)} of every key line
    of TOML text (the first of each; lines inside multi-line strings and arrays skipped)."""
    found, table, in_string, depth = {}, "", False, 0
    for number, line in enumerate(text.splitlines(), start=1):
        if line.count('"""') % 2 or line.count("'''") % 2:
            in_string = not in_string
            if in_string:  # the key line that opens the string still counts
                _record_key(found, table, number, line)
            continue
        if in_string:
            continue
        bare = _STRINGS.sub("", line).split("#", 1)[0]
        if depth == 0:
            header = _TABLE.match(line)
            if header and not line.lstrip().startswith("[["):
                table = re.sub(r"\s+", "", header.group(1))
                found.setdefault(table, (number, header.start(1), header.end(1), line))
                continue
            _record_key(found, table, number, line)
        depth = max(0, depth + bare.count("[") - bare.count("]"))
    return found


def _record_key(found: dict, table: str, number: int, line: str) -> None:
    match = _KEY.match(line)
    if match:
        key = re.sub(r"\s+", "", match.group(2))
        found.setdefault(f"{table}.{key}" if table else key, (number, match.start(2), match.end(2), line))
