"""The config digest: what must match for `--resume` to continue a run."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from seqdsl.data.shards import file_sha256
from seqdsl.data.tokenizer import BYTES
from seqdsl.errors import SeqFileError

# How the global batch is spread over processes changes only the order of float sums, and
# checkpoints hold the full state: a run may resume at another world size or parallelism.
LAYOUT_KEYS = ("processes", "micro_batch", "accumulation", "parallel")


def config_digest(resolved: dict) -> str:
    """What must match for `--resume` to continue the same run (exactly at the same layout)."""
    return hashlib.sha256(json.dumps(digested(resolved), sort_keys=True).encode()).hexdigest()[:16]


def digested(resolved: dict) -> dict:
    """The part of a resolved config that `config_digest` covers."""
    # keep_absolute acts through the spec it resolves to, which spec_digest covers: a run from
    # before the key existed resumes when its spec is unchanged
    # eval_recall adds measures to the records, not to what trains: a run from before it resumes
    # compile_scope changes how the same step is compiled, not what it computes
    ignored = ("out", "device_name", "torch_version", "seqdsl_version", "keep_absolute", "eval_recall",
               "compile_scope") + LAYOUT_KEYS
    keep = {k: v for k, v in resolved.items() if k not in ignored}
    if isinstance(keep.get("data"), dict):  # the token cache changes how the stream is read, not what it is
        keep["data"] = {k: v for k, v in keep["data"].items() if k != "token_cache"}
        if "tokenizer" in keep["data"]:
            keep["data"]["tokenizer"] = tokenizer_identity(keep["data"]["tokenizer"])
    return keep


def tokenizer_identity(name: str) -> str:
    """The tokenizer as the digest sees it: `bytes` as it is, a tokenizer.json by the SHA-256 of
    its content. A run resumes with the same tokenizer copied elsewhere, and refuses one whose
    file was edited in place (the token ids would no longer mean what the weights learned)."""
    if name == BYTES:
        return name
    try:
        return "sha256:" + file_sha256(Path(name))
    except OSError as err:
        raise SeqFileError(f"cannot read tokenizer {name}: {err.strerror or err}") from None
