"""The rule registry: what a rule is, what it sees, what it reports.

A rule is a generator function registered with `@rule(code, name, pillar, severity)`. Its
docstring is its documentation (`seqdsl explain CODE` prints it): why the property matters for
full-sequence arbitrary selection, what the paper found, how to fix a spec. It receives a context
(`MixerContext` for pillars V, R, N, W; `ModelContext` for pillar M) and yields `Finding`s; the
engine stamps them with the rule's code, name, pillar and severity to make `Diagnostic`s.

Pillars (docs/design.md §2, §5):
  V  full-sequence visibility     R  real relation calculation    N  non-uniform distribution
  W  well-formedness (the spec is consistent and runs fast)       M  model-level (several mixers)

This module imports neither torch nor triton.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, Union

from seqdsl.errors import SeqError, Span, did_you_mean
from seqdsl.ir import nodes
from seqdsl.passes.sourcemap import SourceMap

PILLARS: dict[str, str] = {
    "V": "full-sequence visibility",
    "R": "real relation calculation",
    "N": "non-uniform distribution",
    "W": "well-formedness",
    "M": "model",
}
SEVERITIES = ("error", "warning", "info")
# The paper's training context (docs/design.md §2): used when no model fixes one.
PAPER_CONTEXT = 2048


@dataclass(frozen=True)
class Finding:
    """What a rule yields: the specifics of one problem. `severity` overrides the rule's default
    when one rule covers cases of different weight (e.g. R004)."""

    message: str
    span: Span | None
    why: str
    fix: str
    severity: str | None = None


@dataclass(frozen=True)
class Diagnostic:
    code: str
    name: str
    pillar: str
    severity: str
    message: str
    span: Span | None
    why: str
    fix: str
    subject: str  # the mixer or model the finding is about



@dataclass(frozen=True)
class Rule:
    code: str
    name: str
    pillar: str
    severity: str
    func: "RuleFunc"

    @property
    def scope(self) -> str:
        return "model" if self.pillar == "M" else "mixer"

    @property
    def doc(self) -> str:
        return inspect.cleandoc(self.func.__doc__ or "")

    @property
    def summary(self) -> str:
        """The docstring's first sentence: the one-line description in tables."""
        first = self.doc.split("\n\n")[0].replace("\n", " ")
        return first.rstrip(".")


RULES: dict[str, Rule] = {}
_CODE = re.compile(r"^[VRNWM]\d{3}$")
_NAME = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")


def rule(code: str, name: str, pillar: str, severity: str):
    """Register a rule. Codes are unique, start with their pillar letter, and the rule must
    document itself: a rule without a docstring is a bug caught at import time."""

    def register(func):
        assert _CODE.match(code) and code[0] == pillar, f"bad rule code {code}"
        assert _NAME.match(name), f"rule names are kebab-case: {name}"
        assert severity in SEVERITIES and pillar in PILLARS
        assert code not in RULES and all(r.name != name for r in RULES.values()), code
        assert func.__doc__, f"rule {code} needs a docstring: it is the rule's documentation"
        for part in ("Why:", "Paper:", "Fix:"):  # what `seqdsl explain` promises to say
            assert part in func.__doc__, f"rule {code}'s docstring needs a `{part}` paragraph"
        RULES[code] = Rule(code, name, pillar, severity, func)
        return func

    return register


def ordered() -> list[Rule]:
    """All rules, pillar by pillar (V, R, N, W, M), then by code: the order of every listing."""
    order = list(PILLARS)
    return sorted(RULES.values(), key=lambda r: (order.index(r.pillar), r.code))


def lookup(word: str) -> Rule:
    """A rule by code (any case) or kebab-case name; SeqError with a suggestion otherwise."""
    upper = word.upper()
    if upper in RULES:
        return RULES[upper]
    for r in RULES.values():
        if r.name == word:
            return r
    hint = did_you_mean(upper, RULES) or did_you_mean(word, [r.name for r in RULES.values()])
    raise SeqError(f"unknown rule `{word}`", None, hint or "`seqdsl explain --list` lists the rules")


def _matches(selector: str, r: Rule) -> bool:
    return r.code.startswith(selector.upper()) or r.name == selector


def active_rules(select: Iterable[str] | None = None, ignore: Iterable[str] | None = None) -> list[Rule]:
    """Rules left after `--select` (codes, code prefixes such as `V` or `V00`, or names) and
    `--ignore`. A selector that matches no rule is an error, not a silent no-op."""
    select = None if select is None else list(select)
    ignore = list(ignore or ())
    for selector in (select or []) + ignore:
        if not any(_matches(selector, r) for r in RULES.values()):
            names = list(RULES) + [r.name for r in RULES.values()]
            hint = did_you_mean(selector.upper(), RULES) or did_you_mean(selector, names)
            raise SeqError(f"`{selector}` matches no rule", None,
                           hint or "select by code (`V001`), prefix (`V`, `N00`) or name (`finite-window`)")
    chosen = [r for r in ordered() if select is None or any(_matches(s, r) for s in select)]
    return [r for r in chosen if not any(_matches(s, r) for s in ignore)]


# --- what a rule sees ----------------------------------------------------------------------------


@dataclass(frozen=True)
class MixerContext:
    """One mixer, with what the rules need to talk about it in concrete numbers.

    `context` is the sequence length its findings are measured against: `--context` if given,
    else the shortest context among the models that use the mixer, else the paper's 2048;
    `context_from` says which, in words, for the messages."""

    mixer: nodes.Mixer
    program: nodes.Program
    sources: SourceMap
    context: int
    context_from: str
    models: tuple[nodes.Model, ...] = ()

    @property
    def name(self) -> str:
        return self.mixer.name

    def span(self, *path: str) -> Span | None:
        """The most precise span known for a slot (or a parameter of it) of this mixer."""
        return self.sources.get("mixer", self.mixer.name, *path)

    @property
    def ctx(self) -> str:
        """`the 2048-token context (model x)`: how messages name the context."""
        return f"the {self.context}-token context ({self.context_from})"

    @property
    def heads(self) -> int | None:
        """The number of heads, when the mixer or a model using it fixes it."""
        if isinstance(self.mixer.heads, int):
            return self.mixer.heads
        for model in self.models:
            inner = self.mixer.expand * model.d_model
            if inner % self.mixer.head_dim == 0:
                return inner // self.mixer.head_dim
        return None

    @property
    def key_dim(self) -> int:
        return self.mixer.key_dim if isinstance(self.mixer.key_dim, int) else self.mixer.head_dim


@dataclass(frozen=True)
class ModelContext:
    """One model, plus the verdicts of the mixers it uses (computed before the model rules)."""

    model: nodes.Model
    program: nodes.Program
    sources: SourceMap
    mixer_verdicts: dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.model.name

    def span(self, *path: str) -> Span | None:
        return self.sources.get("model", self.model.name, *path)


# What a rule function takes and yields.
RuleFunc = Callable[[Union[MixerContext, ModelContext]], Iterator[Finding]]


def percent(part: float, whole: float) -> str:
    """`12.5%`: a share of the context, with as many digits as make it readable."""
    return f"{100.0 * part / whole:.3g}%"


def count(n: int) -> str:
    """`196,608`: large integers with thousands separators."""
    return f"{n:,}"
