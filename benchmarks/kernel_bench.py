"""What the kernel benchmarks (bench_top1.py, bench_topk.py) share: the results' file stem, the
atomic write of a table and its JSON, and one compiled flex_attention for every shape."""

from __future__ import annotations

import re
from pathlib import Path

_FLEX: dict = {}


def results_stem(prefix: str, device_name: str, fallback: str, date: str, smoke: bool) -> str:
    """`{prefix}_{h100|smoke|fallback}_{YYYY-MM-DD}`: the GPU model from its name
    ("NVIDIA H100 80GB HBM3" -> h100)."""
    model = re.search(r"\b([A-Z]+\d+)\b", device_name)
    tag = "smoke" if smoke else (model.group(1).lower() if model else fallback)
    return f"{prefix}_{tag}_{date[:10]}"


def write_results(out: Path, stem: str, result: dict, json_text: str, markdown_text: str) -> dict:
    """out/stem.json and out/stem.md, each replaced whole (a reader never sees half a file)."""
    for suffix, text in ((".json", json_text), (".md", markdown_text)):
        tmp = out / f"{stem}{suffix}.tmp"
        tmp.write_text(text)
        tmp.replace(out / f"{stem}{suffix}")
    return result


def compiled_flex():
    """torch.compile(flex_attention), once per process, with room to recompile: without it dynamo
    falls back to the eager flex_attention, which materialises the T x T scores."""
    import torch
    import torch._dynamo

    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, 256)
    from torch.nn.attention.flex_attention import flex_attention

    return _FLEX.setdefault("fn", torch.compile(flex_attention))
