"""The principle linter: rules for full-sequence arbitrary selection (docs/design.md §5).

    >>> from seqdsl import loads
    >>> from seqdsl.check import check_program
    >>> check_program(loads("mixer w { visibility = window(256) }")).verdict
    'fail'

One module per rule family (visibility V, relation R, distribution N, wellformed W, model M);
`registry` defines rules and diagnostics, `engine` runs them and derives verdicts, `report`
renders text and JSON. Nothing here imports torch or triton: `seqdsl check` runs anywhere.
"""

from seqdsl.check.engine import SpecReport, check_paths, check_program, mixer_verdict, model_verdict
from seqdsl.check.registry import RULES, Diagnostic, Finding, Rule, active_rules, lookup

__all__ = [
    "RULES", "Diagnostic", "Finding", "Rule", "SpecReport", "active_rules", "check_paths",
    "check_program", "lookup", "mixer_verdict", "model_verdict",
]
