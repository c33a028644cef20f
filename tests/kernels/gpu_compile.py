"""Compile interpreted kernel launches for a GPU target on a machine without one.

Triton's interpreter runs a kernel as Python: it accepts programs that Triton's compiler refuses
(a loop-carried variable whose type changes inside a loop, for one). `record()` notes every
launch a CPU test makes under the interpreter, with the argument types and compile-time
constants it used; `compile_all()` then hands each distinct launch to Triton's real compiler
(`triton.compile`, front end to PTX and cubin) for a chosen target, in a fresh process without
TRITON_INTERPRET (a module imported under the interpreter holds interpreted functions, which
the compiler cannot take).

    python -m tests.kernels.gpu_compile LAUNCHES.json   # prints {"compiled": n, "failed": [...]}
"""

from __future__ import annotations

import contextlib
import importlib.util
import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

# torch dtype name -> Triton's name in a kernel signature
_DTYPES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "float64": "fp64", "int32": "i32",
           "int64": "i64", "int16": "i16", "int8": "i8", "uint8": "u8", "bool": "i1"}
ROOT = Path(__file__).resolve().parents[2]


def _arg_type(value) -> str | None:
    """The signature entry of a runtime argument (None: a value the kernel takes as a constant)."""
    import torch

    if isinstance(value, torch.Tensor):
        return "*" + _DTYPES[str(value.dtype).removeprefix("torch.")]
    if isinstance(value, bool):
        return "i1"
    if isinstance(value, int):
        return "i32" if -2**31 <= value < 2**31 else "i64"
    if isinstance(value, float):
        return "fp32"
    return None


def _is_constexpr(param: inspect.Parameter) -> bool:
    return "constexpr" in str(param.annotation)


def describe(kernel, args: tuple, kwargs: dict) -> dict:
    """One launch of the interpreted `kernel` as (source file, name, signature, constants, options)."""
    fn = kernel.fn
    params = inspect.signature(fn).parameters
    bound = dict(zip(params, args)) | {k: v for k, v in kwargs.items() if k in params}
    signature, constants = {}, {}
    for name, param in params.items():
        value = bound.get(name, param.default)
        kind = None if _is_constexpr(param) else _arg_type(value)
        if kind is None:
            signature[name] = "constexpr"
            constants[name] = value
        else:
            signature[name] = kind
    options = {k: v for k, v in kwargs.items() if k not in params}
    return dict(path=inspect.getsourcefile(fn), module=fn.__module__, name=fn.__name__, signature=signature,
                constants=constants, options=options)


@contextlib.contextmanager
def record(launches: list[dict]):
    """Within the block, every interpreted launch appends its description to `launches` (once
    per distinct launch) and then runs as usual."""
    from triton.runtime.interpreter import InterpretedFunction

    original = InterpretedFunction.run

    def run(self, *args, grid, warmup, **kwargs):
        entry = describe(self, args, kwargs)
        if entry not in launches:
            launches.append(entry)
        return original(self, *args, grid=grid, warmup=warmup, **kwargs)

    InterpretedFunction.run = run
    try:
        yield launches
    finally:
        InterpretedFunction.run = original


def compile_all(launches: list[dict], *, arch: int = 90, timeout: float = 900) -> dict:
    """{"compiled": n, "failed": [{"name", "error"}]} for `launches` compiled for CUDA sm_`arch`,
    in a subprocess without the interpreter."""
    import tempfile

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    with tempfile.TemporaryDirectory() as tmp:
        spec = Path(tmp) / "launches.json"
        spec.write_text(json.dumps(dict(arch=arch, launches=launches)))
        proc = subprocess.run([sys.executable, "-m", "tests.kernels.gpu_compile", str(spec)], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"the compile process failed ({proc.returncode}): {proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _import(path: str, module: str):
    if module in sys.modules:
        return sys.modules[module]
    spec = importlib.util.spec_from_file_location(module, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[module] = mod  # Triton looks a kernel's helpers up through its module
    spec.loader.exec_module(mod)
    return mod


def _compile(entry: dict, arch: int) -> str:
    """'' when `entry` compiles for sm_`arch`, else the compiler's message."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    fn = getattr(_import(entry["path"], entry["module"]), entry["name"])
    try:
        triton.compile(ASTSource(fn, entry["signature"], entry["constants"]), target=GPUTarget("cuda", arch, 32),
                       options=entry["options"])
    except Exception as err:  # the message is the finding, whatever the compiler raised
        return f"{type(err).__name__}: {err}"
    return ""


def main(path: str) -> None:
    assert os.environ.get("TRITON_INTERPRET") != "1", "compile without the interpreter"
    job = json.loads(Path(path).read_text())
    failed = []
    for entry in job["launches"]:
        error = _compile(entry, job["arch"])
        if error:
            failed.append(dict(name=entry["name"], constants=entry["constants"], error=error[-2000:]))
    print(json.dumps(dict(compiled=len(job["launches"]) - len(failed), failed=failed)))


if __name__ == "__main__":
    main(sys.argv[1])
