"""seqdsl imports fla's ops without fla's layers and models (seqdsl/lower/backends/fla.py:
`import_ops`), and a user's `from fla import <layer>` afterwards still works, with the exports
fla's own initialiser makes. Each check in a fresh interpreter: the test process may have imported
fla already, and which modules an import loads is only visible from a new one."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(code: str) -> dict:
    out = subprocess.run([sys.executable, "-W", "ignore", "-c", code], capture_output=True, text=True, cwd=ROOT,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


LEAN = """
import json, sys
from seqdsl.lower.backends import fla as backend
ops = backend.import_ops()
loaded = sorted(m for m in ("fla.layers", "fla.models") if m in sys.modules)
import fla
private = getattr(fla, "_not_a_name", None)  # a private probe imports nothing
from fla import ops, utils  # submodules, as Python imports them after asking for the attribute
after_probe = sorted(m for m in ("fla.layers", "fla.models") if m in sys.modules)
kernels = [callable(ops.rwkv7.chunk_rwkv7), callable(ops.gated_delta_rule.chunk_gated_delta_rule)]
from fla import NAME  # the lazy export, as a user writes it
print(json.dumps(dict(loaded=loaded, after_probe=after_probe, kernels=kernels,
                      exported=NAME is getattr(sys.modules["fla.layers"], "NAME", None)
                      or NAME is getattr(sys.modules["fla.models"], "NAME", None),
                      exports=sorted(fla.__all__))))
"""

FULL = """
import json
import fla
print(json.dumps(dict(exports=sorted(fla.__all__))))
"""

ALREADY = """
import json, sys
import fla
from seqdsl.lower.backends import fla as backend
backend.import_ops()
print(json.dumps(dict(getattr_installed="__getattr__" in vars(fla), layers="fla.layers" in sys.modules)))
"""


def test_the_ops_import_without_layers_and_models_and_the_exports_stay_fla_s():
    full = _run(FULL)["exports"]  # what fla's own initialiser exports
    name = full[len(full) // 2]
    lean = _run(LEAN.replace("NAME", name))
    assert lean["loaded"] == [] and lean["after_probe"] == [], lean
    assert lean["kernels"] == [True, True]
    # a user's first `from fla import ...` imports the layers and models and exports what fla would
    assert lean["exported"] is True and lean["exports"] == full


def test_an_fla_the_user_imported_first_is_left_as_it_is():
    assert _run(ALREADY) == dict(getattr_installed=False, layers=True)
