"""The canonical printer: IR -> .seq text, the parser's inverse.

`parse(format(module)) == module` for every module, and a resolved `Program` prints as a module
whose mixers and models state every non-default choice, so it round-trips too. Canonical form:
one assignment per line in slot order, four-space indent, a blank line between declarations,
parameters printed only when they differ from their defaults (positional ones always).
"""

from __future__ import annotations

from seqdsl.ir import nodes


def format_value(value: object) -> str:
    if isinstance(value, nodes.Primitive):
        return _format_primitive(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, tuple):
        return value[0] if len(value) == 1 else "[" + ", ".join(value) + "]"
    if isinstance(value, str):
        # Literal choices (auto, scalar, max...) print bare; only presets are strings, and they
        # are typed as str by the typing pass, which the printer cannot tell apart here, so the
        # caller quotes them (see _format_assign).
        return value
    raise TypeError(f"cannot print {value!r}")


def _format_primitive(p: nodes.Primitive) -> str:
    fields = type(p).model_fields
    positional = [format_value(getattr(p, name)) for name in p.POSITIONAL]
    keywords = [
        f"{name}={format_value(getattr(p, name))}"
        for name in fields
        if name != "kind" and name not in p.POSITIONAL and getattr(p, name) != fields[name].default
    ]
    args = positional + keywords
    return f"{p.kind}({', '.join(args)})" if args else p.kind


INDENT = "    "


def quote(text: str) -> str:
    """`text` as a string literal: `"` and `\\` escaped, the two escapes the lexer knows."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def format_import(path: str) -> str:
    return f"import {quote(path)}"


def format_assign(a: nodes.Assign) -> str:
    """`key = value` (no indent)."""
    value = quote(str(a.value)) if a.key == "preset" else format_value(a.value)
    return f"{a.key} = {value}"


def decl_header(d: nodes.MixerDecl | nodes.ModelDecl) -> str:
    """`mixer NAME [extends BASE]` (without the brace)."""
    keyword = "mixer" if isinstance(d, nodes.MixerDecl) else "model"
    return f"{keyword} {d.name}" + (f" extends {d.extends}" if d.extends else "")


def _format_decl(d: nodes.MixerDecl | nodes.ModelDecl) -> str:
    if not d.assigns:
        return decl_header(d) + " {}"
    return "\n".join([decl_header(d) + " {", *(INDENT + format_assign(a) for a in d.assigns), "}"])


def format_module(module: nodes.Module) -> str:
    """Canonical text of a module (imports first, then declarations)."""
    parts = []
    if module.imports:
        parts.append("\n".join(format_import(p) for p in module.imports))
    parts.extend(_format_decl(d) for d in module.decls)
    return "\n\n".join(parts) + "\n"


def _explicit_assigns(node: nodes.Node, slots: tuple[str, ...]) -> tuple[nodes.Assign, ...]:
    fields = type(node).model_fields
    return tuple(
        nodes.Assign(key=s, value=getattr(node, s))
        for s in slots
        if fields[s].is_required() or getattr(node, s) != fields[s].default
    )


def mixer_decl(mixer: nodes.Mixer) -> nodes.MixerDecl:
    """A resolved mixer as a stand-alone declaration (no `extends`, non-defaults explicit)."""
    return nodes.MixerDecl(name=mixer.name, assigns=_explicit_assigns(mixer, nodes.MIXER_SLOTS))


def model_decl(model: nodes.Model) -> nodes.ModelDecl:
    """A resolved model as a stand-alone declaration (no preset, every size explicit)."""
    return nodes.ModelDecl(name=model.name, assigns=_explicit_assigns(model, nodes.MODEL_SLOTS))


def program_module(program: nodes.Program) -> nodes.Module:
    """A resolved program as one self-contained module (imports inlined)."""
    decls = [mixer_decl(m) for m in program.mixers] + [model_decl(m) for m in program.models]
    return nodes.Module(decls=tuple(decls))


def format_program(program: nodes.Program) -> str:
    return format_module(program_module(program))
