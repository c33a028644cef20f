"""One recurrent layer's mixing (stage 3) on the PyTorch reference: eager vs torch.compile.

    python benchmarks/bench_recurrent.py [--specs mamba2,gla,...] [--preset 110m] [--seq 2048]
                                         [--batch 8] [--repeats 5] [--recurrent] [--tf32]
                                         [--out FILE.json]
    python benchmarks/bench_recurrent.py --smoke   # tiny sizes on CPU: checks the script runs

Times forward + backward of exactly what the `reference.chunked` path runs
(`seqdsl.lower.backends.reference.recurrent_reference`: the chunked form, in float32) on random inputs
shaped like each spec's mixer at the preset (its kernel key: heads, feature and value widths, decay
shape, update rule), in bf16 on CUDA as autocast hands them over. Forms:

    chunked          eager
    chunked+compile  torch.compile(fullgraph=True) of the same function (first call = compilation)
    recurrent        the step-by-step definition, eager (only with --recurrent: T sequential steps)
    triton.delta_chunk+compile   delta rules on CUDA: the compiled form with the state passing in
                     one Triton kernel per direction and the chunk products in bf16, what the
                     `triton.delta_chunk` path runs (seqdsl/kernels/state_pass.py)
    triton.delta_chunk+compile, fp32   the same with every product in float32 (TF32), as the
                     path ran before 2026-11-28 (tenth session)
    <form>, <other>  with --earlier, for the delta rules: the compiled form (with the state-passing
                     kernel on CUDA) with algorithms this file keeps: `solve` the chunk inverse by
                     one triangular solve (the reference's before 2026-11-27; it now goes by
                     halves), `scan` the states by a scan over the chunks' affine maps (tried in
                     place of the loop over the chunks, and slower), and `scan+solve` both

With --cuda-graphs the compiled forms are compiled with mode="reduce-overhead" (CUDA graphs, as
`seqdsl train` runs them with `cuda_graphs = true`), so small kernels are timed without their
launch overhead. Reported: median milliseconds over `--repeats` runs after two warm-ups, the layer's tokens/s, the
first call's seconds (compilation for the compiled form), and the compiled form's largest output
difference from eager relative to the output's largest entry. Prints a table and writes JSON
(default benchmarks/results/bench_recurrent_<device>_<date>.json).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import statistics
import sys
import time
import traceback
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

import seqdsl  # noqa: E402
from seqdsl.ir.key import KernelKey, kernel_key  # noqa: E402
from seqdsl.ir.presets import model_at  # noqa: E402
from seqdsl.lower.backends.reference import recurrent_reference  # noqa: E402
from seqdsl.lower.inputs import RecurrentInputs  # noqa: E402
from seqdsl.reference import recurrent as rec  # noqa: E402

SPECS = ROOT / "specs"
DEFAULT = "linear_attention,mamba2,retnet,gla,rwkv6,deltanet,gated_deltanet,rwkv7,based"


def layer_key(name: str, preset: str) -> KernelKey:
    """The kernel key of the spec's (first) mixer at the preset's width."""
    resized = model_at(seqdsl.load(SPECS / f"{name}.seq").program, preset=preset)
    mixer = resized.program.mixer(resized.model.mixer[0])
    return kernel_key(mixer, resized.model.d_model)


def random_inputs(key: KernelKey, B: int, T: int, device: torch.device, dtype: torch.dtype) -> dict:
    """Leaves in the ranges the lowering produces: unit keys for the delta rules, per-step decays
    of about 0.9 to 1 (what the initialisations give, docs/lowering.md), gates in (0, 1)."""
    g = torch.Generator().manual_seed(0)
    H, Fd, V = key.heads, key.feature_dim, key.value_cols
    rnd = lambda *shape: torch.randn(*shape, generator=g)
    x = {"q": rnd(B, T, H, Fd) * key.scale, "k": rnd(B, T, H, Fd), "v": rnd(B, T, H, V)}
    if key.update in ("delta", "rwkv7"):
        x["k"] = F.normalize(x["k"], dim=-1)
    if key.decay_shape == "scalar":
        x["log_decay"] = -0.1 * torch.rand(B, T, H, generator=g)
    elif key.decay_shape == "vector":
        x["log_decay"] = -0.1 * torch.rand(B, T, H, Fd, generator=g)
    if key.update == "delta":
        x["beta"] = torch.rand(B, T, H, generator=g)
    elif key.update == "rwkv7":
        x["a"], x["kappa"] = torch.rand(B, T, H, Fd, generator=g), F.normalize(rnd(B, T, H, Fd), dim=-1)
    elif key.update == "bonus":
        x["bonus"] = 0.1 * rnd(H, Fd)
    return {n: t.to(device=device, dtype=dtype if n != "bonus" else torch.float32).requires_grad_()
            for n, t in x.items()}


def solve_inverse(lhs):
    """The chunk inverse as taken before the halves: one triangular solve of the whole chunk."""
    eye = torch.eye(lhs.shape[-1], dtype=lhs.dtype, device=lhs.device).expand_as(lhs)
    return torch.linalg.solve_triangular(lhs, eye, upper=False, unitriangular=True)


def scan_pass_states(log_decay, b, S0, low_rank, walk=None):
    """The delta rules' states by a scan over the chunks' affine maps x -> T_n x + b_n (Hillis
    and Steele's: after the step of span d, (T_n, b_n) composes chunks n - 2d + 1 .. n): ceil(log2
    N) steps of products batched over the chunks, tried 2026-11-27 in place of the reference's
    loop over the chunks and slower (the compositions cost Dk^3 per chunk and step)."""
    if low_rank is None:
        return LOOP_PASS_STATES(log_decay, b, S0, low_rank, walk)
    Dk = low_rank.shape[-1]
    transition = low_rank + torch.diag_embed(log_decay.exp().expand(*log_decay.shape[:-1], Dk))
    offset = torch.cat([transition[..., :1, :, :] @ S0.unsqueeze(-3) + b[..., :1, :, :], b[..., 1:, :, :]], dim=-3)
    span = 1
    while span < offset.shape[-3]:
        later = transition[..., span:, :, :]
        offset = torch.cat([offset[..., :span, :, :], later @ offset[..., :-span, :, :] + offset[..., span:, :, :]],
                           dim=-3)
        if 2 * span < offset.shape[-3]:
            transition = torch.cat([transition[..., :span, :, :], later @ transition[..., :-span, :, :]], dim=-3)
        span *= 2
    return torch.cat([S0.unsqueeze(-3), offset], dim=-3)


LOOP_PASS_STATES = rec._pass_states  # the reference's own, kept for the additive rules while swapped
EARLIER = {"solve": {"_inverse_by_halves": solve_inverse}, "scan": {"_pass_states": scan_pass_states},
           "scan+solve": {"_pass_states": scan_pass_states, "_inverse_by_halves": solve_inverse}}


@contextlib.contextmanager
def earlier(name: str | None):
    """The reference module with the earlier algorithm(s) `name` in place (none: as it is), for
    as long as a form is compiled and timed (dynamo guards on the functions it inlined)."""
    swaps = EARLIER.get(name, {}) if name else {}
    kept = {attr: getattr(rec, attr) for attr in swaps}
    for attr, fn in swaps.items():
        setattr(rec, attr, fn)
    try:
        yield
    finally:
        for attr, fn in kept.items():
            setattr(rec, attr, fn)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_form(run, leaves: dict, repeats: int, device: torch.device) -> tuple[float, float, torch.Tensor, float | None]:
    """(median ms of forward + backward, first call s, output, peak GiB) of run(RecurrentInputs);
    the peak is the most memory the form held at once beyond what was held before it (on CUDA;
    with CUDA graphs, its graphs' pools included), None elsewhere."""
    weight = None
    times, first, out = [], 0.0, None
    held = torch.cuda.memory_allocated(device) if device.type == "cuda" else 0
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    for i in range(2 + repeats):
        for t in leaves.values():
            t.grad = None
        if hasattr(torch.compiler, "cudagraph_mark_step_begin"):
            torch.compiler.cudagraph_mark_step_begin()  # each call is a new step (CUDA graph trees)
        _sync(device)
        t0 = time.perf_counter()
        o, S = run(RecurrentInputs(**leaves))
        weight = torch.randn_like(o, dtype=torch.float32) if weight is None else weight
        ((o.float() * weight).sum() + S.float().sum()).backward()
        _sync(device)
        dt = time.perf_counter() - t0
        if i == 0:
            first, out = dt, o.detach().float()
        elif i >= 2:
            times.append(dt * 1e3)
    peak = (torch.cuda.max_memory_allocated(device) - held) / 2**30 if device.type == "cuda" else None
    return statistics.median(times), first, out, peak


def bench_spec(name: str, preset: str, B: int, T: int, repeats: int, device: torch.device,
               recurrent: bool, earlier_forms: tuple[str, ...] = (), cuda_graphs: bool = False) -> list[dict]:
    key = layer_key(name, preset)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    leaves = random_inputs(key, B, T, device, dtype)
    chunked = lambda m: recurrent_reference(key, m, None, False)
    compiled = lambda fn: torch.compile(fn, fullgraph=True, dynamic=False,
                                        mode="reduce-overhead" if cuda_graphs else None)
    forms = {"chunked": (chunked, None), "chunked+compile": (compiled(chunked), None)}
    base, base_name = chunked, "chunked+compile"  # what the earlier algorithms are swapped into
    if key.update == "delta" and device.type == "cuda":
        from seqdsl.kernels import state_pass
        from seqdsl.lower.backends.triton import delta_chunk

        base, base_name = (lambda m: recurrent_reference(key, m, None, False, state_pass.affine_states),
                           "triton.delta_chunk+compile, fp32")
        forms[base_name] = (compiled(base), None)
        forms["triton.delta_chunk+compile"] = (compiled(lambda m: delta_chunk(key, m, None)), None)
    if key.update in ("delta", "rwkv7"):
        forms.update({f"{base_name}, {name}": (compiled(base), name) for name in earlier_forms})
    if recurrent:
        forms["recurrent"] = (lambda m: recurrent_reference(key, m, None, True), None)
    shape = (f"H {key.heads} K {key.feature_dim} V {key.value_cols} decay {key.decay_shape} "
             f"update {key.update}")
    rows, eager_out = [], None
    for form, (run, algorithms) in forms.items():
        with earlier(algorithms):
            ms, first, out, peak = time_form(run, leaves, repeats, device)
        row = {"spec": name, "form": form, "shape": shape, "ms": ms, "tokens_per_s": B * T / (ms / 1e3),
               "first_call_s": first, "peak_gib": peak, "rel_diff_vs_eager": None}
        if eager_out is None:
            eager_out = out
        else:
            row["rel_diff_vs_eager"] = ((out - eager_out).abs().max() / eager_out.abs().max()).item()
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--specs", default=DEFAULT)
    p.add_argument("--preset", default="110m")
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--recurrent", action="store_true", help="also time the step-by-step definition")
    p.add_argument("--tf32", action="store_true", help="let float32 matmuls use TF32 on CUDA")
    p.add_argument("--earlier", nargs="?", const=",".join(EARLIER), default="",
                   help="delta rules: also time the compiled form with earlier algorithms (all, or a comma list "
                        f"of {', '.join(EARLIER)})")
    p.add_argument("--cuda-graphs", action="store_true", help="compile with mode='reduce-overhead' (CUDA graphs)")
    p.add_argument("--device", default=None)
    p.add_argument("--smoke", action="store_true", help="tiny preset, seq 128, batch 2, on CPU")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    if args.smoke:
        args.preset, args.seq, args.batch, args.repeats = "tiny", 128, 2, 1
        args.device = args.device or "cpu"
    earlier_names = tuple(name for name in args.earlier.split(",") if name)
    unknown = [name for name in earlier_names if name not in EARLIER]
    if unknown:
        p.error(f"--earlier: unknown {', '.join(unknown)} (known: {', '.join(EARLIER)})")
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    torch.backends.cuda.matmul.allow_tf32 = args.tf32
    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    date = datetime.date.today().isoformat()
    out = Path(args.out) if args.out else ROOT / "benchmarks" / "results" / (
        f"bench_recurrent_{'smoke_' if args.smoke else ''}{device_name.replace(' ', '_').lower()}_{date}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    print(f"device {device_name}; preset {args.preset}, B {args.batch}, T {args.seq}, "
          f"{'bf16 inputs' if device.type == 'cuda' else 'float32'}{', TF32' if args.tf32 else ''}; "
          f"forward + backward of one layer's mixing",
          flush=True)
    print(f"{'spec':<18} {'form':<40} {'ms':>9} {'tokens/s':>12} {'first s':>8} {'peak GiB':>8} {'rel diff':>9}  shape",
          flush=True)
    rows, failed = [], False
    for name in args.specs.split(","):
        try:
            new = bench_spec(name, args.preset, args.batch, args.seq, args.repeats, device, args.recurrent,
                             earlier_names, args.cuda_graphs)
        except Exception as err:  # one failing spec must not hide the others' figures
            traceback.print_exc()
            new, failed = [{"spec": name, "error": f"{type(err).__name__}: {err}".splitlines()[0]}], True
        for r in new:
            if "error" in r:
                print(f"{r['spec']:<18} failed: {r['error']}", flush=True)
                continue
            diff = "" if r["rel_diff_vs_eager"] is None else f"{r['rel_diff_vs_eager']:.1e}"
            peak = "" if r["peak_gib"] is None else f"{r['peak_gib']:.2f}"
            print(f"{r['spec']:<18} {r['form']:<40} {r['ms']:>9.2f} {r['tokens_per_s']:>12,.0f} "
                  f"{r['first_call_s']:>8.1f} {peak:>8} {diff:>9}  {r['shape']}", flush=True)
        rows += new
        out.write_text(json.dumps({"device": device_name, "date": date, "torch": torch.__version__,
                                   "preset": args.preset, "seq": args.seq, "batch": args.batch,
                                   "repeats": args.repeats, "tf32": args.tf32, "cuda_graphs": args.cuda_graphs,
                                   "rows": rows}, indent=2) + "\n")
    print(f"wrote {out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
