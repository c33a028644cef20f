"""`seqdsl codegen SPEC --out DIR`: write the generated Triton source of each mixer of a model.

One readable module per mixer (DIR/<mixer>.py), rendered from the mixer's kernel key by
seqdsl.codegen exactly as the runtime renders it (torch-free: nothing is compiled here). A mixer
the generated kernels do not cover is listed with the support table's reason; the exit code is 1
when no mixer could be written.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from seqdsl.errors import SeqError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", metavar="SPEC", help="a .seq file")
    parser.add_argument("--out", required=True, metavar="DIR", help="directory for the generated modules")
    parser.add_argument("--model", help="which model of the file (default: its last model); the model's "
                                        "width lays out the heads")


def run(args: argparse.Namespace) -> int:
    from seqdsl import codegen, load
    from seqdsl.ir.key import kernel_key

    program = load(args.path).program
    if not program.models:
        raise SeqError(f"{args.path} declares no model: codegen needs a model's width to lay out heads",
                       hint="add a `model` that uses the mixer, or import one")
    names = [m.name for m in program.models]
    if args.model is not None and args.model not in names:
        raise SeqError(f"no model {args.model!r} in {args.path}", hint=f"models: {', '.join(names)}")
    model = program.model(args.model) if args.model else program.models[-1]
    out = Path(args.out)
    written = 0
    for name in dict.fromkeys(model.mixer):  # each distinct mixer once, in layer order
        key = kernel_key(program.mixer(name), model.d_model)
        try:
            rendered = codegen.render(key)
        except codegen.Unsupported as err:
            print(f"{name}: not generated: {err.message}")
            continue
        try:
            out.mkdir(parents=True, exist_ok=True)
            (out / f"{name}.py").write_text(rendered.source)
        except OSError as err:
            raise SeqError(f"cannot write {out / (name + '.py')}: {err.strerror}") from None
        written += 1
        print(f"{name}: {out / (name + '.py')} ({rendered.plan.template}, key {key.slug()})")
    return 0 if written else 1
