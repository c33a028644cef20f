"""The probe tasks by name (`seqdsl probe --tasks`), and what each measures, in one line."""

from __future__ import annotations

from collections.abc import Callable

from seqdsl.errors import did_you_mean, one_of
from seqdsl.probe.batch import ProbeError, Task
from seqdsl.probe.copying import Copy, SelectiveCopy
from seqdsl.probe.needle import Needle
from seqdsl.probe.recall import MQAR, Induction
from seqdsl.probe.state import WordProblem

# name -> (constructor, what it measures). The constructors take no argument: the default
# vocabulary of each task is sized for the small models a probe trains.
TASKS: dict[str, tuple[Callable[[], Task], str]] = {
    "mqar": (MQAR, "multi-query associative recall: values of keys seen earlier (pillars V, R, N)"),
    "induction": (Induction, "repeat the bigram: the token after an earlier occurrence, at 1x-4x the length"),
    "copy": (Copy, "copy a random string: every earlier token kept (V, and a state's capacity)"),
    "selective_copy": (SelectiveCopy, "copy the content tokens among blanks: selection by content (R)"),
    "needle": (Needle, "passkey retrieval in filler at 1x-4x the training length (V)"),
    "a5": (lambda: WordProblem("a5"), "A5 word problem: state tracking, the negative control"),
    "s5": (lambda: WordProblem("s5"), "S5 word problem: state tracking, the negative control"),
}


def task_names(text: str) -> list[str]:
    """The task names of a comma-separated list (`all`: every task), in order, once each; one
    ProbeError naming the first unknown one."""
    names = [w.strip() for w in text.split(",") if w.strip()]
    if not names:
        raise ProbeError("--tasks names no task", hint=f"tasks: {one_of(TASKS)}")
    if names == ["all"]:
        return list(TASKS)
    for name in names:
        if name not in TASKS:
            raise ProbeError(f"unknown task `{name}`",
                             hint=did_you_mean(name, TASKS) or f"tasks: {one_of(TASKS)} (or `all`)")
    return list(dict.fromkeys(names))


def make_task(name: str, *, text=None, text_name: str | None = None) -> Task:
    """The task `name`; the needle's filler is `text` (byte ids, see needle.py) when given."""
    if name == "needle" and text is not None:
        return Needle(text=text, text_name=text_name)
    return TASKS[name][0]()
