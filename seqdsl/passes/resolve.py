"""Typed modules -> a resolved `Program`: imports loaded, inheritance applied, defaults filled.

`load(path)` is the front door for files and `loads(text)` for strings; both return a
`Loaded`: the program, the source map (spans for diagnostics) and the file's own module (for
`seqdsl fmt`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pydantic

from seqdsl.errors import Note, SeqFileError, SeqSemanticError, Span, did_you_mean
from seqdsl.ir import nodes
from seqdsl.parse import ast
from seqdsl.parse.parser import parse_text
from seqdsl.passes.sourcemap import SourceMap
from seqdsl.passes.typing import Typer, pydantic_message


@dataclass(frozen=True)
class _Origin:
    """Where a declaration came from: its name's span, and the chain of `import` statements
    (outermost first) that brought it into the file being loaded (empty: declared there)."""

    name: Span
    via: tuple[ast.Import, ...]


@dataclass(frozen=True)
class Loaded:
    program: nodes.Program
    sources: SourceMap
    module: nodes.Module
    path: str


def read_text(path: Path, span: Span | None = None) -> str:
    """A spec file's text, or a `SeqFileError` that says why it cannot be read."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SeqFileError(f"no such file: {path}", span) from None
    except IsADirectoryError:
        raise SeqFileError(f"{path} is a directory, not a .seq file", span) from None
    except UnicodeDecodeError as err:
        raise SeqFileError(f"{path} is not UTF-8 text (byte {err.start})", span) from None
    except OSError as err:
        raise SeqFileError(f"cannot read {path}: {err.strerror}", span) from None
    except ValueError as err:  # a NUL byte in the path
        raise SeqFileError(f"cannot read {path!r}: {err}", span) from None


def load(path: str | Path) -> Loaded:
    """Parse, type and resolve a .seq file and everything it imports."""
    path = Path(path)
    return loads(read_text(path), str(path), base_dir=path.parent, _top=path.resolve())


def loads(text: str, path: str = "<string>", base_dir: Path | None = None, *,
          _top: Path | None = None) -> Loaded:
    """Parse, type and resolve spec text; imports are looked up relative to `base_dir`."""
    sources = SourceMap()
    resolver = _Resolver(sources)
    # the file itself heads the import stack, so `a -> b -> a` is caught when b imports a
    stack = (_top,) if _top is not None else ()
    module, decls = resolver.collect(text, path, base_dir or Path.cwd(), stack=stack, via=())
    program = resolver.resolve(decls, own=module)
    return Loaded(program, sources, module, path)


def typed_module(text: str, path: str = "<string>") -> nodes.Module:
    """Parse and type one file's text, without loading imports or resolving inheritance."""
    return Typer(SourceMap()).module(parse_text(text, path))


class _Resolver:
    def __init__(self, sources: SourceMap):
        self.sources = sources
        self.loaded: dict[Path, nodes.Module] = {}

    # --- imports ---------------------------------------------------------------------------------

    def collect(self, text: str, path: str, base_dir: Path, stack: tuple[Path, ...],
                via: tuple[ast.Import, ...]):
        """Type this file and its imports; return (this module, all declarations in load order,
        each with its `_Origin`)."""
        file = parse_text(text, path)
        module = Typer(self.sources).module(file)
        decls: list[tuple[nodes.MixerDecl | nodes.ModelDecl, _Origin]] = []
        for imp in file.imports:
            decls.extend(self.import_(imp, base_dir, stack, via + (imp,)))
        decls.extend((d, _Origin(src.name.span, via)) for d, src in zip(module.decls, file.decls))
        return module, decls

    def import_(self, imp: ast.Import, base_dir: Path, stack: tuple[Path, ...], via: tuple[ast.Import, ...]):
        try:
            target = (base_dir / imp.path.value).resolve()
        except (OSError, ValueError) as err:  # e.g. a NUL byte in the path, a symlink loop
            raise SeqFileError(f"cannot import {imp.path.value!r}: {err}", imp.path.span) from None
        if target in stack:
            chain = " -> ".join(p.name for p in stack[stack.index(target):] + (target,))
            raise SeqSemanticError(f"import cycle: {chain}", imp.path.span,
                                   "move the shared declarations into a third file")
        if target in self.loaded:  # diamond imports: load once
            return ()
        text = read_text(target, imp.path.span)
        module, decls = self.collect(text, str(target), target.parent, stack + (target,), via)
        self.loaded[target] = module
        return decls

    # --- inheritance -----------------------------------------------------------------------------

    def resolve(self, decls, own: nodes.Module) -> nodes.Program:
        mixer_decls = self._index(decls, nodes.MixerDecl, "mixer")
        model_decls = self._index(decls, nodes.ModelDecl, "model")
        mixers = tuple(
            self._build(nodes.Mixer, "mixer", name, self._merged("mixer", name, mixer_decls, ()))
            for name in mixer_decls
        )
        models = tuple(self._model(name, model_decls, mixer_decls) for name in model_decls)
        own_names = tuple(d.name for d in own.decls)
        return nodes.Program(mixers=mixers, models=models, own=own_names)

    def _index(self, decls, cls, keyword) -> dict[str, object]:
        table: dict[str, object] = {}
        origins: dict[str, _Origin] = {}
        for d, origin in decls:
            if not isinstance(d, cls):
                continue
            if d.name in table:
                raise _clash(keyword, d.name, origins[d.name], origin)
            table[d.name] = d
            origins[d.name] = origin
        return table

    def _merged(self, keyword: str, name: str, table, chain: tuple[str, ...]) -> dict[str, object]:
        """The assignments of `name` with those of its bases underneath (nearest wins); a model's
        `preset` is expanded into its sizes at the level where it is written."""
        decl = table[name]
        if name in chain:
            raise SeqSemanticError(f"{keyword} `{name}` extends itself (via {' -> '.join(chain + (name,))})",
                                   self.sources.get(keyword, name, "extends"))
        values: dict[str, object] = {}
        if decl.extends is not None:
            if decl.extends not in table:
                raise SeqSemanticError(
                    f"{keyword} `{name}` extends unknown {keyword} `{decl.extends}`",
                    self.sources.get(keyword, name, "extends"),
                    did_you_mean(decl.extends, table) or "declare it or `import` the file that does")
            values.update(self._merged(keyword, decl.extends, table, chain + (name,)))
            self.sources.copy_subtree((keyword, decl.extends), (keyword, name))
        own = {a.key: a.value for a in decl.assigns}
        preset = own.pop("preset", None)
        if preset is not None:
            # A preset is expanded where it is written: it overrides what the bases say and is
            # overridden by what this block says (nearest wins). Its sizes point at `preset = ...`.
            sizes = nodes.PRESET_SIZES[preset]
            values.update(sizes)
            span = self.sources.get(keyword, name, "preset")
            for key in sizes:
                if key not in own and span is not None:
                    self.sources.add((keyword, name, key), span)
        values.update(own)
        return values

    def _model(self, name: str, table, mixer_decls) -> nodes.Model:
        fields = self._merged("model", name, table, ())
        for required in ("layers", "d_model", "vocab", "mixer"):
            if required not in fields:
                raise SeqSemanticError(
                    f"model `{name}` needs `{required}`", self.sources.get("model", name),
                    f'set `{required} = ...` or start from a preset: `preset = "tiny"`')
        for mixer in fields["mixer"]:
            if mixer not in mixer_decls:
                raise SeqSemanticError(f"model `{name}` uses unknown mixer `{mixer}`",
                                       self.sources.get("model", name, "mixer"),
                                       did_you_mean(mixer, mixer_decls) or "declare it or `import` its file")
        return self._build(nodes.Model, "model", name, fields)

    def _build(self, cls, keyword: str, name: str, fields: dict[str, object]):
        """Construct the IR node; range violations point at the assignment that caused them."""
        try:
            return cls(name=name, **fields)
        except pydantic.ValidationError as err:
            first = err.errors()[0]
            key = str(first["loc"][0]) if first["loc"] else ""
            raise SeqSemanticError(f"{keyword} `{name}`: `{key}` {pydantic_message(first)}",
                                   self.sources.get(keyword, name, key)) from None


def _clash(keyword: str, name: str, first: _Origin, second: _Origin) -> SeqSemanticError:
    """`name` declared twice. The error is reported in the file that brings the two together
    (the deepest file both import chains pass through): at its own declaration when it has
    one, else at its `import` line that brought in the second; the definitions are notes."""
    shared = 0
    while shared < min(len(first.via), len(second.via)) and first.via[shared] is second.via[shared]:
        shared += 1
    message = f"{keyword} `{name}` is declared twice"
    if len(second.via) == shared or len(first.via) == shared:
        here, other = (second, first) if len(second.via) == shared else (first, second)
        imported = len(other.via) > shared
        return SeqSemanticError(
            message + (" (an imported file declares it too)" if imported else ""), here.name,
            "rename one of them" + (", or stop importing the other" if imported else ""),
            notes=(Note(f"the other `{name}` is declared here" + (", in an imported file" if imported else ""),
                        other.name),))
    line = second.via[shared]
    return SeqSemanticError(
        f"{keyword} `{name}` is declared twice: this import brings a second one", line.span,
        "rename one of them, or drop one of the imports",
        notes=(Note(f"`{name}` is declared here", first.name), Note("and again here", second.name)))
