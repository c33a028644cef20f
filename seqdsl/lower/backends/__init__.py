"""The backends that run stage (3) of a mixer, one module each: sdpa, fla, mamba, triton and the
reference. The planner (seqdsl/lower/paths.py) picks one per mixer and device and a call runs it
through the backend the plan names (base.py: `Plan`, `Backend`).
"""

from __future__ import annotations

from seqdsl.lower.backends.base import AttentionBackend, Backend, BackendName, RecurrentBackend
from seqdsl.lower.backends.fla import FlaBackend
from seqdsl.lower.backends.mamba import MambaBackend
from seqdsl.lower.backends.reference import ReferenceBackend
from seqdsl.lower.backends.sdpa import SdpaBackend
from seqdsl.lower.backends.triton import TritonBackend

SDPA, FLA, MAMBA, TRITON, REFERENCE = SdpaBackend(), FlaBackend(), MambaBackend(), TritonBackend(), ReferenceBackend()

# Which backends run which family's calls; planning asks any of them (`BACKENDS`).
ATTENTION: dict[BackendName, AttentionBackend] = {
    BackendName.SDPA: SDPA, BackendName.TRITON: TRITON, BackendName.REFERENCE: REFERENCE}
RECURRENT: dict[BackendName, RecurrentBackend] = {
    BackendName.FLA: FLA, BackendName.MAMBA: MAMBA, BackendName.TRITON: TRITON, BackendName.REFERENCE: REFERENCE}
BACKENDS: dict[BackendName, Backend] = {**ATTENTION, **RECURRENT}
