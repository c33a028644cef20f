"""seqdsl: a compiler for sequence-mixer architectures.

The static core (parse, IR, passes, check) imports neither torch nor triton:

    >>> import seqdsl
    >>> loaded = seqdsl.loads("mixer attn { position = rope }")
    >>> loaded.program.mixer("attn").position.kind
    'rope'
"""

from seqdsl.errors import SeqError, SeqFileError, SeqSemanticError, SeqSyntaxError
from seqdsl.ir.printer import format_module, format_program
from seqdsl.passes.resolve import Loaded, load, loads, typed_module

from seqdsl.version import __version__

__all__ = [
    "Loaded", "SeqError", "SeqFileError", "SeqSemanticError", "SeqSyntaxError",
    "format_module", "format_program", "generate_text", "load", "loads", "typed_module", "__version__",
]


def __getattr__(name: str):
    # Imported on first use: it needs torch, and `import seqdsl` must not (the static core).
    if name == "generate_text":
        from seqdsl.text import generate_text

        return generate_text
    raise AttributeError(f"module 'seqdsl' has no attribute {name!r}")
