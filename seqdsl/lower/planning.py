"""What the two path planners share: stage (3)'s `PathChooser` (seqdsl/lower/paths.py) and stage
(1)'s `ConvPath` (seqdsl/lower/conv_path.py).

One plan per (device, input dtype), made once by `_make_plan` (the subclass's decision: support
table, self-checks) and kept. Planning runs self-checks, times kernels and logs, none of which
can be traced, so it happens in an eager call (`LanguageModel.plan_paths`) and a compiled call
only reads the plan (`plan_call`); each choice is logged once per device type and kept in
`chosen` for the reports (`LanguageModel.describe_paths`).
"""

from __future__ import annotations

import logging

import torch
from torch import Tensor

from seqdsl.lower.backends.base import Plan

log = logging.getLogger("seqdsl")


class Planner:
    """`name`: the mixer's, for messages; `subject`: what is planned, in the log and errors."""

    subject = "path"

    def __init__(self, name: str, force: str | None):
        self.name = name
        self.force = force  # a forced path (set_path, SEQDSL_PATH)
        # set by LanguageModel.plan_paths for its throwaway two-token forward: the plans are made
        # (self-checks and all), then the call runs the reference, not the planned kernel, which
        # would compile (and autotune) for a two-token shape that training never runs
        self.planning_only = False
        self.chosen: dict[str, Plan] = {}
        self._plans: dict[tuple[str, torch.dtype | None], Plan] = {}

    def reset(self) -> None:
        self.chosen.clear()
        self._plans.clear()

    def plan(self, device: torch.device | str, dtype: torch.dtype | None = None) -> Plan:
        """The plan on `device` for inputs of `dtype`. With `dtype = None` (`seqdsl lower`), only
        the static facts are consulted: no self-check is run."""
        device = torch.device(device)
        cache_key = (str(device), dtype)
        if cache_key not in self._plans:
            self._plans[cache_key] = self._make_plan(device, dtype)
        return self._plans[cache_key]

    def _make_plan(self, device: torch.device, dtype: torch.dtype | None) -> Plan:
        raise NotImplementedError

    def plan_call(self, x: Tensor) -> Plan:
        """The plan for a call on `x`'s device and dtype: made (and logged) here in an eager
        call, read in a compiled one."""
        if torch.compiler.is_compiling():
            choice = self._plans.get((str(x.device), x.dtype))
            if choice is None:  # a builtin exception: dynamo cannot trace SeqError's constructor
                raise RuntimeError(f"mixer {self.name}: torch.compile traced a call on {x.device} in {x.dtype} "
                                   f"before its {self.subject} was planned; call LanguageModel.plan_paths(device, "
                                   f"autocast_dtype) before the first compiled step")
            return choice
        choice = self.plan(x.device, x.dtype)
        if self.chosen.get(x.device.type) != choice:
            self.chosen[x.device.type] = choice
            log.info("mixer %s on %s: %s %s (%s)", self.name, x.device.type, self.subject, choice.op, choice.reason)
        return choice
