"""`seqdsl lower SPEC`: build the spec's PyTorch model and show what runs where.

Prints the model's sizes and parameter count, the execution path each layer takes on the target
device and why (fast kernel or reference, and the reason for any fallback), and the module tree.
The model is built on the meta device, so even the 1.3B preset costs no memory or time.
"""

from __future__ import annotations

import argparse

from seqdsl.errors import SeqError
from seqdsl.ir import nodes


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", metavar="SPEC", help="a .seq file")
    parser.add_argument("--model", help="which model of the file (default: its last model)")
    parser.add_argument("--preset", choices=nodes.PRESETS, help="resize the model to a preset")
    parser.add_argument("--keep-absolute", action="store_true", dest="keep_absolute",
                        help="with --preset: keep windows and chunks in tokens instead of scaling them "
                             "with the context")
    parser.add_argument("--device", default=None,
                        help="device to plan for (default: cuda if available, else cpu)")
    parser.add_argument("--no-tree", action="store_true", help="omit the module tree")


def _count(n: int) -> str:
    for unit, div in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= div:
            return f"{n / div:.2f}{unit}"
    return str(n)


def _tree(lm) -> str:
    """The module tree with repeated identical blocks folded: one block per distinct mixer."""
    from seqdsl.lower.lm import layer_ranges

    lines = [f"{type(lm).__name__}("]
    lines.append(f"  (embed): {lm.embed}")
    shown: set[str] = set()
    for block in lm.blocks:
        name = block.mixer.spec.name
        if name in shown:
            continue
        shown.add(name)
        layers = [j for j, b in enumerate(lm.blocks) if b.mixer.spec.name == name]
        body = repr(block).replace("\n", "\n  ")
        lines.append(f"  (blocks {layer_ranges(layers)}): {body}")
    lines.append(f"  (norm): {lm.norm}")
    tied = " (tied to embed)" if lm.spec.tie else ""
    lines.append(f"  (head): {lm.head}{tied}")
    lines.append(")")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    import torch

    from seqdsl.check.resized import resize_report
    from seqdsl.ir.presets import model_at, preset_refusals
    from seqdsl.lower.lm import LanguageModel, path_lines
    from seqdsl.passes.resolve import load

    if args.keep_absolute and not args.preset:
        raise SeqError("--keep-absolute applies to a resize", hint="add --preset tiny, 110m or 1.3b")
    written = load(args.path).program
    resized = model_at(written, args.model, args.preset, keep_absolute=args.keep_absolute)
    program, spec = resized.program, resized.model
    try:
        device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    except RuntimeError:
        raise SeqError(f"unknown device {args.device!r}", hint="use cpu, cuda or cuda:N") from None
    try:
        with torch.device("meta"):
            lm = LanguageModel(program, spec)
    except (RuntimeError, ValueError, TypeError, OverflowError) as err:
        # sizes the spec language accepts but torch cannot allocate (e.g. 10^20 heads)
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise SeqError(f"cannot build model {spec.name}: {first}") from None
    total = lm.num_parameters()
    body = lm.num_parameters(exclude_embedding=True)
    shown = f" (resized to preset {args.preset})" if args.preset else ""
    print(f"model {spec.name}{shown}: {spec.layers} layers, d_model {spec.d_model}, vocab {spec.vocab}, "
          f"context {spec.context}, block {spec.block}, mlp {spec.mlp.kind}, tie {str(spec.tie).lower()}")
    for line in resize_report(written, resized):
        print(f"  {line}")
    if resized.preset is None:  # what a later --preset would refuse, said now
        for preset, err in preset_refusals(resized.program, spec):
            print(f"  preset {preset}: {err.message}")
    print(f"parameters: {total:,} ({_count(total)}); without embeddings: {body:,} ({_count(body)})")
    print(f"\npaths on {device.type}:")
    rows = lm.describe_paths(device)
    for line in path_lines(rows):
        print(f"  {line}")
    if device.type == "cuda" and any(r[2].startswith(("fla.", "mamba.")) for r in rows):
        print("  (fla and mamba-ssm kernels are self-checked against the reference on first use; a "
              "failure falls back to the reference with a warning)")
    if not args.no_tree:
        print("\n" + _tree(lm))
    return 0
