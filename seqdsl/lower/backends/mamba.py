"""The mamba backend: mamba-ssm's kernels for the recurrent family, CUDA only, each after a
self-check (docs/mamba.md). Ops: `mamba.ssd`, Mamba-2's SSD chunked kernels (mamba_ssd.py), and
`mamba.selective_scan`, Mamba-1's selective scan (mamba_scan.py). Single decoding steps (no
gradient) run mamba-ssm's selective_state_update once that passed a self-check of its own, else
the reference step.
"""

from __future__ import annotations

import torch
from torch import Tensor

from seqdsl.ir.key import KernelKey
from seqdsl.lower.backends import mamba_scan, mamba_ssd, reference
from seqdsl.lower.inputs import RecurrentInputs

SSD, SELECTIVE_SCAN = "mamba.ssd", "mamba.selective_scan"
STEPS = "decoding steps: mamba-ssm's selective_state_update"


class MambaBackend:
    def what(self, op: str) -> str:
        return "mamba-ssm selective scan" if op == SELECTIVE_SCAN else "mamba-ssm SSD chunked kernel"

    def facts(self, key: KernelKey) -> str:
        """What the self-checks depend on: the widths, the grouping, the kind of decay."""
        return (f"K={key.feature_dim} V={key.value_cols} G={mamba_ssd.groups(key)} H={key.heads} "
                f"decay={key.decay_shape}")

    def known_refusal(self, key: KernelKey, op: str) -> str:
        """Only a missing mamba-ssm: no machine is known where its kernels refuse (unlike fla's
        gated backward on Hopper); the self-check judges the rest."""
        return mamba_scan.importable() if op == SELECTIVE_SCAN else mamba_ssd.importable()

    def self_check(self, key: KernelKey, op: str, dtype: torch.dtype, device: torch.device) -> tuple[bool, str]:
        if op == SELECTIVE_SCAN:
            return mamba_scan.self_check(dtype, device, key.feature_dim, key.value_cols, mamba_ssd.groups(key),
                                         key.heads)
        return mamba_ssd.self_check(dtype, device, key.feature_dim, key.value_cols, mamba_ssd.groups(key),
                                    key.heads, key.decay_shape != "none")

    def step_check(self, key: KernelKey, dtype: torch.dtype, device: torch.device) -> tuple[bool, str]:
        """The self-check of the decoding step's kernel (selective_state_update), through the
        step of the op the key takes."""
        take_step = mamba_scan.grouped_step if key.decay_shape == "selective" else mamba_ssd.grouped_step
        return mamba_ssd.step_self_check(dtype, device, key.feature_dim, key.value_cols, mamba_ssd.groups(key),
                                         key.heads, key.decay_shape, take_step)

    def recur(self, key: KernelKey, op: str, m: RecurrentInputs, S: Tensor | None, *,
              step_checked: bool = False) -> tuple[Tensor, Tensor]:
        """Chunks through the chunked kernel; a single decoding step (no gradient) through
        mamba-ssm's state-update kernel when it passed its own self-check, else the reference step."""
        module = mamba_scan if op == SELECTIVE_SCAN else mamba_ssd
        if m.q.shape[1] > 1:
            return module.run(key, m, S)
        if step_checked and not torch.is_grad_enabled():
            return module.step(key, m, S)
        return reference.recurrent_reference(key, m, S, True)
