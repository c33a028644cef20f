"""What every backend is asked, and the plan that names one.

A `Plan` is the one decision of how a mixer's stage (3) runs on a device: its backend (an enum,
which is what a call dispatches on) and its op, named as the support tables
(seqdsl/ir/support.py) and `seqdsl lower` name it (`sdpa.causal`, `fla.chunk_gla`,
`reference.chunked`).
"""

from __future__ import annotations

import enum
import logging
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor

from seqdsl.ir.key import Dense, KernelKey
from seqdsl.lower.backends import autotune_pins, autotune_seed
from seqdsl.lower.inputs import AttentionInputs, RecurrentInputs

log = logging.getLogger("seqdsl")


class BackendName(enum.Enum):
    SDPA = "sdpa"
    FLA = "fla"
    MAMBA = "mamba"
    TRITON = "triton"
    REFERENCE = "reference"


@dataclass(frozen=True)
class Plan:
    backend: BackendName
    op: str  # what runs, as users see it: "sdpa.causal", "triton.top1_chunk", "reference"
    reason: str  # why this and not another, in words (`seqdsl lower` prints it)


class Backend(Protocol):
    """What the planner asks a backend before trusting it on a machine."""

    def what(self, op: str) -> str:
        """`op` in words, for the plan's reason."""
        ...

    def facts(self, key: KernelKey) -> str:
        """What the self-check of `key` depends on besides the op and dtype (its verdict is kept
        on disk under these facts, seqdsl/lower/verdicts.py)."""
        ...

    def known_refusal(self, key: KernelKey, op: str) -> str:
        """Why `op` cannot run here without trying it (a package that does not import); ""."""
        ...

    def self_check(self, key: KernelKey, op: str, dtype: torch.dtype, device: torch.device) -> tuple[bool, str]:
        """(True, "") when `op` matches the reference on this machine, else (False, why)."""
        ...


def import_failure(load: Callable[[], object], what: str) -> str:
    """"" when `load()` imports `what` here, else why not, in one line: an ImportError, or a
    package's CUDA extension failing to load (which raises other errors). On a GPU the shipped
    autotuning is seeded first: a library's Triton kernels read Triton's autotuning settings
    when they are decorated, at import (`autotune_seed`); after the import, the tunings Triton
    cannot keep are put back in memory (`autotune_pins`)."""
    if torch.cuda.is_available():
        autotune_seed.seed_once(autotune_seed.gpu_folder(torch.cuda.get_device_name(), torch.cuda.get_device_capability()))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            load()
    except Exception as err:
        first = str(err).splitlines()[0][:120] if str(err) else ""
        return f"{what} is not importable here ({type(err).__name__}: {first})"
    if torch.cuda.is_available():
        pinned = autotune_pins.pin_shipped()
        if pinned:
            log.info("seqdsl: %d autotuning choices Triton does not keep (configs with a pre_hook) put back from "
                     "seqdsl's records for this GPU (seqdsl/lower/backends/autotune_pins.py)", pinned)
    return ""


class Unchecked:
    """The Backend questions answered for a backend that is never self-checked: the reference
    (what the others are checked against) and torch's own SDPA (tested against the reference)."""

    def facts(self, key: KernelKey) -> str:
        return ""

    def known_refusal(self, key: KernelKey, op: str) -> str:
        return ""

    def self_check(self, key: KernelKey, op: str, dtype: torch.dtype, device: torch.device) -> tuple[bool, str]:
        return True, ""


class AttentionBackend(Backend, Protocol):
    """Runs the softmax and select families. `dense`: the mixer's plain-attention fact at its
    context; `kernels`: what planning bound for this key (the generated Top-1 kernels)."""

    def attend(self, key: KernelKey, op: str, m: AttentionInputs, *, dense: Dense | None,
               kernels: object) -> Tensor: ...


class RecurrentBackend(Backend, Protocol):
    """Runs the recurrent family: (output, new state). `step_checked`: a decoding step may take
    the backend's own step kernel, which passed its self-check for this plan."""

    def recur(self, key: KernelKey, op: str, m: RecurrentInputs, S: Tensor | None, *,
              step_checked: bool = False) -> tuple[Tensor, Tensor]: ...
