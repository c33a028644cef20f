"""Generate the reference tables of the docs from the code, so they cannot drift.

- grammar/README.md: every mixer slot and model field, and every primitive with its parameters,
  read off the IR classes (seqdsl/ir/nodes.py);
- docs/checker.md: every checker rule, read off the registry (seqdsl/check/).

Each table lives between `<!-- BEGIN GENERATED: NAME -->` and `<!-- END GENERATED: NAME -->`
markers; the rest of the page is hand-written. Run `python docs/gen_reference.py` after changing
the IR or the rules; `--check` exits 1 when a page is out of date (tests/ run the same check).
"""

from __future__ import annotations

import argparse
import inspect
import re
import sys
import typing
from pathlib import Path
from typing import Any, Literal, Union

import annotated_types as at
from pydantic.fields import FieldInfo

from seqdsl.check.registry import PILLARS, ordered
from seqdsl.ir import nodes
from seqdsl.ir.printer import format_value

ROOT = Path(__file__).resolve().parents[1]
GRAMMAR_README = ROOT / "grammar" / "README.md"
CHECKER_DOC = ROOT / "docs" / "checker.md"


def _first_paragraph(doc: str | None) -> str:
    return " ".join(inspect.cleandoc(doc or "").split("\n\n")[0].split())


def _bounds(metadata) -> str:
    parts = []
    for m in metadata:
        if isinstance(m, FieldInfo):
            parts.append(_bounds(m.metadata))
        elif isinstance(m, at.Gt):
            parts.append(f"> {m.gt}")
        elif isinstance(m, at.Ge):
            parts.append(f">= {m.ge}")
        elif isinstance(m, at.Lt):
            parts.append(f"< {m.lt}")
        elif isinstance(m, at.Le):
            parts.append(f"<= {m.le}")
    return ", ".join(p for p in parts if p)


def _type(annotation: Any, metadata=()) -> str:
    """A parameter's type in the language's words: `whole number > 0`, `max | mean | lse`."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        inner, *extra = typing.get_args(annotation)
        return _type(inner, list(metadata) + extra)
    if origin is Union:
        options = [_type(a) for a in typing.get_args(annotation)]
        return " \\| ".join(options)
    if origin is Literal:
        return " \\| ".join(f"`{a}`" for a in typing.get_args(annotation))
    if origin is tuple:
        return "name or [names]"
    bound = _bounds(metadata)
    if isinstance(annotation, type) and issubclass(annotation, nodes.Primitive):
        return f"`{annotation.model_fields['kind'].default}`"
    words = {bool: "`true` \\| `false`", int: "whole number", float: "number", str: '"string"'}
    return words.get(annotation, str(annotation)) + (f" {bound}" if bound else "")


def _default(field: FieldInfo) -> str:
    if field.is_required():
        return "required"
    return f"`{format_value(field.default)}`"


def _primitives(annotation: Any) -> list[type[nodes.Primitive]]:
    args = typing.get_args(typing.get_args(annotation)[0]) if typing.get_origin(annotation) is typing.Annotated \
        else typing.get_args(annotation)
    return [a for a in args if isinstance(a, type) and issubclass(a, nodes.Primitive)]


def _params(cls: type[nodes.Primitive]) -> str:
    rows = []
    for name, field in cls.model_fields.items():
        if name == "kind":
            continue
        where = " (positional)" if name in cls.POSITIONAL else ""
        default = "required" if field.is_required() else f"default {_default(field)}"
        rows.append(f"`{name}`{where}: {_type(field.annotation, field.metadata)}, {default}")
    return "<br>".join(rows) or "—"


def _fields_table(cls: type[nodes.Node], skip: tuple[str, ...]) -> list[str]:
    lines = ["| field | takes | default |", "|---|---|---|"]
    for name, field in cls.model_fields.items():
        if name in skip:
            continue
        prims = _primitives(field.annotation)
        takes = ", ".join(f"`{p.model_fields['kind'].default}`" for p in prims) if prims \
            else _type(field.annotation, field.metadata)
        lines.append(f"| `{name}` | {takes} | {_default(field)} |")
    return lines


def slots_table() -> str:
    """Mixer slots, model fields and every primitive with its parameters and meaning."""
    out = ["### Mixer slots", "", *_fields_table(nodes.Mixer, ("name",)), "",
           "### Model fields", "",
           "`preset` (`\"tiny\"`, `\"110m\"`, `\"1.3b\"`) fills `layers`, `d_model`, `vocab` and "
           "`context`; fields written in the block override it.", "",
           *_fields_table(nodes.Model, ("name",)), "",
           "### Primitives", "",
           "| slot | primitive | parameters | meaning |", "|---|---|---|---|"]
    for owner in (nodes.Mixer, nodes.Model):
        for slot, field in owner.model_fields.items():
            for cls in _primitives(field.annotation):
                kind = cls.model_fields["kind"].default
                out.append(f"| `{slot}` | `{kind}` | {_params(cls)} | {_first_paragraph(cls.__doc__)} |")
    nested = [("`select` → `top(over=...)`", nodes.Element), ("`select` → `top(over=...)`", nodes.Chunk),
              ("`softmax(temperature=...)`, `dot(scale=...)`", nodes.Learned)]
    for where, cls in nested:
        kind = cls.model_fields["kind"].default
        out.append(f"| {where} | `{kind}` | {_params(cls)} | {_first_paragraph(cls.__doc__)} |")
    return "\n".join(out)


# Mistakes shown in the language reference, rendered by the real parser so the page shows
# exactly what a user sees.
ERROR_EXAMPLES = [
    "mixer attn {\n    weights = sofmax\n}\n",
    "mixer attn {\n    visibility = window(256, 4, 3)\n}\n",
    "mixer attn {\n    head_dim = 32 * 2\n}\n",
    "mixr attn {\n    heads = 12\n}\n",
    "mixer attn {\n    visibility = window(256\n}\n",
    "mixer attn {}\nmodel lm {\n    preset = \"110m\"\n    mixer = atn\n}\n",
]


def errors_section() -> str:
    from seqdsl import SeqError, loads

    out = []
    for text in ERROR_EXAMPLES:
        try:
            loads(text, "spec.seq")
        except SeqError as err:
            out += ["```", text.rstrip("\n"), "```", "", "```text", err.render(), "```", ""]
        else:  # pragma: no cover - an example that stopped failing is a docs bug
            raise AssertionError(f"example does not fail: {text!r}")
    return "\n".join(out).rstrip("\n")


def rules_table() -> str:
    out = ["| code | name | pillar | severity | what it reports |", "|---|---|---|---|---|"]
    for r in ordered():
        out.append(f"| {r.code} | `{r.name}` | {r.pillar} ({PILLARS[r.pillar]}) | {r.severity} | "
                   f"{r.summary} |")
    return "\n".join(out)


def rule_changes() -> str:
    """Each rule's `What changed:` paragraph: the judgements that changed a verdict, in the
    rule's own documentation (what `seqdsl explain CODE` prints)."""
    out = []
    for r in ordered():
        for para in r.doc.split("\n\n"):
            if para.startswith("What changed:"):
                text = " ".join(para[len("What changed:"):].split())
                out.append(f"- **{r.code}** `{r.name}`: {text}")
    return "\n".join(out)


GENERATED = {
    GRAMMAR_README: {"slots": slots_table, "errors": errors_section},
    CHECKER_DOC: {"rules": rules_table, "rule-changes": rule_changes},
}


def render(text: str, tables: dict[str, typing.Callable[[], str]]) -> str:
    """`text` with every generated section replaced by a fresh table."""
    for name, make in tables.items():
        pattern = re.compile(rf"(<!-- BEGIN GENERATED: {name} -->\n).*?(<!-- END GENERATED: {name} -->)",
                             re.DOTALL)
        if not pattern.search(text):
            raise ValueError(f"no generated section `{name}` in the page")
        text = pattern.sub(lambda m: m.group(1) + make() + "\n" + m.group(2), text)
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a page is out of date")
    args = parser.parse_args(argv)
    stale = []
    for path, tables in GENERATED.items():
        text = path.read_text(encoding="utf-8")
        fresh = render(text, tables)
        if fresh != text:
            stale.append(path)
            if not args.check:
                path.write_text(fresh, encoding="utf-8")
    for path in stale:
        print(f"{'out of date' if args.check else 'updated'}: {path.relative_to(ROOT)}", file=sys.stderr)
    return 1 if (stale and args.check) else 0


if __name__ == "__main__":
    sys.exit(main())
