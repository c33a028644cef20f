"""docs/gen_reference.py loaded as a module (it is a script, not part of the package)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load_script(relpath: str, name: str):
    """A script of the repository (not part of the package) loaded as a module."""
    spec = importlib.util.spec_from_file_location(name, ROOT / relpath)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there while the script runs
    spec.loader.exec_module(module)
    return module


def load_generator():
    return load_script("docs/gen_reference.py", "gen_reference")
