"""mamba-ssm's SSD path against the reference and fla, and 110m training speed of Mamba-2 against
Transformer++, in one run on this machine's GPU.

    python benchmarks/bench_mamba.py [--out results.json] [--layer-batch 8] [--layer-seq 2048]
                                     [--train-seqs 2048,8192] [--train-specs transformer,mamba2]
                                     [--train-tokens 16384] [--steps 4]
    python benchmarks/bench_mamba.py --smoke [--out FILE]   # tiny sizes on the CPU, reference only:
                                                            # checks the script runs

Part 1, one layer's mixing (stage 3 alone), forward + backward, bfloat16 inputs as under
autocast, each backend on the same inputs, median ms after warm-up and each one's relative error
against the reference: Mamba-2's key at the preset's size (110m: 24 heads of 64, state 128, one
group), B x T = 8 x 2048, on mamba.ssd, fla.chunk_simple_gla if it runs here, and the reference;
Mamba-1's (110m: 1536 channels, state 16), B x T = 2 x 2048, on mamba.selective_scan and the
reference.

Part 2, training tokens/s of the models of specs/transformer.seq (Transformer++) and
specs/mamba2.seq (`--train-specs`; add `mamba` for Mamba-1 on its selective scan) at the preset's size at each sequence length, batch = train-tokens / T, with the
step `seqdsl train` runs (its loss module `CausalLoss` and optimizer `adamw` from seqdsl.train;
bf16 autocast on CUDA), the paths chosen automatically (listed in the output); median of the
timed steps after warm-up steps (compilation, autotuning, self-checks).

`--smoke` runs both parts on the CPU at the `tiny` preset (layer B 1 x T 32; training at T 16
and 32, one timed step), the reference only (mamba-ssm and fla run on CUDA only): it exercises
the code, its figures mean nothing. Prints two tables and writes them, the device and the date
as JSON.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

import seqdsl  # noqa: E402
from seqdsl.ir.key import kernel_key  # noqa: E402
from seqdsl.ir.presets import model_at  # noqa: E402
from seqdsl.lower.lm import LanguageModel  # noqa: E402
from seqdsl.lower.backends.reference import recurrent_reference
from seqdsl.lower.inputs import RecurrentInputs  # noqa: E402
from seqdsl.train.optim import adamw  # noqa: E402
from seqdsl.train.run import CausalLoss  # noqa: E402

SPECS = ROOT / "specs"
NAMES = {"transformer": "Transformer++", "mamba2": "Mamba-2", "mamba": "Mamba-1"}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _ms(step, device: torch.device, reps: int, warmup: int = 1) -> float:
    """Median wall time of `reps` calls of step() in ms, after `warmup` untimed calls."""
    for _ in range(warmup):
        step()
    times = []
    for _ in range(reps):
        _sync(device)
        t0 = time.perf_counter()
        step()
        _sync(device)
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def _rel(x, y) -> float:
    return ((x.double() - y.double()).norm() / (y.double().norm() + 1e-30)).item()


def _resized(name: str, preset: str):
    return model_at(seqdsl.load(SPECS / f"{name}.seq").program, preset=preset)


def _layer_runs(key, device: torch.device, chunks: tuple[int, ...] = ()) -> dict:
    """{op: fn(RecurrentInputs) -> (o, state)} for each backend measured on `device`; mamba.ssd
    also at each chunk size of `chunks` (other than its default)."""
    runs = {}
    if device.type == "cuda" and key.decay_shape == "selective":  # mamba-ssm runs on CUDA only
        from seqdsl.lower.backends import mamba_scan

        runs["mamba.selective_scan"] = lambda m: mamba_scan.run(key, m, None)
    elif device.type == "cuda":  # so does fla
        from seqdsl.lower.backends import fla as fla_backend, mamba_ssd

        runs["mamba.ssd"] = lambda m: mamba_ssd.run(key, m, None)
        for chunk in (c for c in chunks if c != mamba_ssd.CHUNK):
            runs[f"mamba.ssd(chunk={chunk})"] = lambda m, chunk=chunk: mamba_ssd.run(key, m, None, chunk)
        runs["fla.chunk_simple_gla"] = lambda m: fla_backend.run("fla.chunk_simple_gla", m, None)
    runs["reference.chunked"] = lambda m: recurrent_reference(key, m, None, False)
    return runs


def _layer_inputs(key, batch: int, seq: int, device: torch.device, dtype: torch.dtype) -> dict:
    """Random stage-(3) inputs for `key`: q and k per group (layer_rows repeats them over the
    group's heads); a per-head log decay (Mamba-2), or step sizes and S4D-real rates (Mamba-1's selective step)."""
    g = torch.Generator().manual_seed(0)
    H, G, K, V = key.heads, key.qk_groups, key.feature_dim, key.value_cols
    rnd = lambda *s: torch.randn(*s, generator=g).to(device=device, dtype=dtype)
    # q and k per group (B, T, G, K): repeated over the group's heads inside each call, so their
    # gradients are the per-group sums on every path (the model's projections are per group)
    base = dict(q=rnd(batch, seq, G, K) * K ** -0.5, k=rnd(batch, seq, G, K), v=rnd(batch, seq, H, V))
    if key.decay_shape == "selective":
        base["dt"] = torch.nn.functional.softplus(torch.randn(batch, seq, H, generator=g) - 3.0).to(device)
        base["rate"] = -torch.arange(1, K + 1, dtype=torch.float32, device=device).repeat(H, 1)
    else:
        base["log_decay"] = -torch.rand(batch, seq, H, generator=g).to(device) * 0.1
    return base


def layer_rows(spec: str, preset: str, batch: int, seq: int, device: torch.device, dtype: torch.dtype,
               reps: int, chunks: tuple[int, ...] = ()) -> list[dict]:
    """One row per backend for one layer's mixing of `spec` (mamba2 or mamba) at `preset`."""
    resized = _resized(spec, preset)
    key = kernel_key(resized.program.mixer(spec), resized.model.d_model)
    base = _layer_inputs(key, batch, seq, device, dtype)
    outputs, rows = {}, []
    for name, fn in _layer_runs(key, device, chunks).items():
        leaves = {n: t.detach().clone().requires_grad_() for n, t in base.items()}

        def step():
            for t in leaves.values():
                t.grad = None
            heads = {n: t.repeat_interleave(key.heads // key.qk_groups, dim=2) if n in ("q", "k") else t
                     for n, t in leaves.items()}
            o, _ = fn(RecurrentInputs(**heads))
            o.float().square().mean().backward()
            return o

        print(f"layer: {name} (on CUDA the first call compiles and autotunes: minutes for mamba-ssm)", flush=True)
        try:
            out = step().detach()
            outputs[name] = (out, [leaves[n].grad.detach().clone() for n in base])
            rows.append({"op": name, "ms": _ms(step, device, reps), "error": ""})
        except Exception as err:  # e.g. fla's refusal of its gated backward on Hopper/Triton 3.6
            rows.append({"op": name, "ms": None, "error": f"{type(err).__name__}: {str(err)[:160]}"})
        print(f"layer: {rows[-1]}", flush=True)
    ref_out, ref_grads = outputs["reference.chunked"]
    for row in rows:
        if row["op"] in outputs:
            out, grads = outputs[row["op"]]
            row["rel_err_out"] = _rel(out, ref_out)
            row["rel_err_grads_max"] = max(_rel(a, b) for a, b in zip(grads, ref_grads))
    return rows


def train_row(name: str, preset: str, seq: int, tokens: int, steps: int, warmup: int, device: torch.device) -> dict:
    """Tokens/s of the training step `seqdsl train` runs (CausalLoss, adamw), median of `steps`."""
    resized = _resized(name, preset)
    spec = resized.model.model_copy(update={"context": max(resized.model.context, seq)})
    torch.manual_seed(0)
    lm = LanguageModel(resized.program, spec).to(device)
    loss_fn = CausalLoss(lm)
    opt = adamw(lm, lr=3e-4, weight_decay=0.1)
    amp = torch.bfloat16 if device.type == "cuda" else None
    batch = max(1, tokens // seq)
    data = torch.randint(0, spec.vocab, (batch, seq + 1), device=device)

    def step():
        with torch.autocast(device.type, dtype=amp, enabled=amp is not None):
            loss = loss_fn(data[:, :-1], data[:, 1:])
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    with warnings.catch_warnings(record=True) as caught:  # the warm-up: compilation, autotuning, self-checks
        warnings.simplefilter("always")
        ms = _ms(step, device, reps=steps, warmup=warmup)
    paths = sorted({f"{p} ({why})" for _, _, p, why in lm.describe_paths(device)})
    return {"spec": name, "model": spec.name, "seq": seq, "batch": batch, "ms_per_step": ms,
            "tokens_per_s": batch * seq / (ms / 1e3), "params": lm.num_parameters(), "paths": paths,
            "warnings": sorted({str(w.message)[:300] for w in caught if "seqdsl" in str(w.message)})}


def _print_layer(rows: list[dict], title: str) -> None:
    print(f"\n{title}")
    print(f"{'op':<22} {'ms':>8} {'rel err out':>12} {'rel err grads':>14}")
    for r in rows:
        if r["ms"] is None:
            print(f"{r['op']:<22} {'-':>8}  refused: {r['error']}")
        else:
            print(f"{r['op']:<22} {r['ms']:>8.2f} {r['rel_err_out']:>12.1e} {r['rel_err_grads_max']:>14.1e}")


def _print_train_summary(train: list[dict], seqs: list[int], specs: list[str]) -> None:
    """tokens/s per spec and length, and each one's ratio to the first spec's (Transformer++)."""
    names = [NAMES.get(s, s) for s in specs]
    print("\n" + f"{'T':>6} " + " ".join(f"{n + ' tok/s':>20}" for n in names)
          + "".join(f" {n + ' ratio':>16}" for n in names[1:]))
    for seq in seqs:
        rows = [next(r for r in train if r["spec"] == s and r["seq"] == seq) for s in specs]
        print(f"{seq:>6} " + " ".join(f"{r['tokens_per_s']:>20,.0f}" for r in rows)
              + "".join(f" {r['tokens_per_s'] / rows[0]['tokens_per_s']:>16.2f}" for r in rows[1:]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=None, help="JSON file for the results")
    ap.add_argument("--preset", default="110m")
    ap.add_argument("--layer-batch", type=int, default=8)
    ap.add_argument("--layer-seq", type=int, default=2048)
    ap.add_argument("--mamba1-layer-batch", type=int, default=2,
                    help="Mamba-1's layer batch: its reference holds a (16, 16, 16) decay block per chunk, "
                         "channel and sequence")
    ap.add_argument("--layer-reps", type=int, default=10)
    ap.add_argument("--layer-specs", default="mamba2,mamba", help="the layers of part 1 (mamba: Mamba-1)")
    ap.add_argument("--ssd-chunks", default="",
                    help="more chunk sizes for mamba.ssd's layer rows, e.g. 64,128 (the path's default is 256)")
    ap.add_argument("--train-seqs", default="2048,8192")
    ap.add_argument("--train-specs", default="transformer,mamba2",
                    help="specs/<name>.seq to train, the first being the baseline of the ratios (mamba: Mamba-1)")
    ap.add_argument("--train-tokens", type=int, default=16384, help="tokens per training step")
    ap.add_argument("--steps", type=int, default=4, help="timed training steps")
    ap.add_argument("--warmup", type=int, default=2, help="untimed training steps first")
    ap.add_argument("--skip-train", action="store_true")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes on the CPU, reference only")
    args = ap.parse_args(argv)
    if args.smoke:
        args.preset, args.layer_batch, args.mamba1_layer_batch, args.layer_seq, args.layer_reps = "tiny", 1, 1, 32, 1
        args.train_seqs, args.train_tokens, args.steps, args.warmup = "16,32", 32, 1, 1
        device = torch.device("cpu")
    elif not torch.cuda.is_available():
        print("bench_mamba: needs a CUDA device (or --smoke, which runs tiny sizes on the CPU)", file=sys.stderr)
        return 2
    else:
        device = torch.device("cuda")
    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    layer_dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    seqs = [int(s) for s in args.train_seqs.split(",")]
    specs = args.train_specs.split(",")
    result = {"device": device_name, "date": datetime.date.today().isoformat(), "torch": torch.__version__,
              "preset": args.preset, "smoke": args.smoke, "layers": []}

    def save() -> None:  # after each part and row: a run stopped at a time limit keeps what it measured
        if args.out:
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_text(json.dumps(result, indent=1) + "\n")

    chunks = tuple(int(c) for c in args.ssd_chunks.split(",") if c)
    layer_batch = {"mamba2": args.layer_batch, "mamba": args.mamba1_layer_batch}
    unknown = set(filter(None, args.layer_specs.split(","))) - set(layer_batch)
    if unknown:
        ap.error(f"--layer-specs takes {', '.join(layer_batch)}; got {', '.join(sorted(unknown))}")
    for spec in (s for s in args.layer_specs.split(",") if s):
        batch = layer_batch[spec]
        rows = layer_rows(spec, args.preset, batch, args.layer_seq, device, layer_dtype, args.layer_reps, chunks)
        result["layers"].append({"spec": spec, "batch": batch, "seq": args.layer_seq,
                                 "dtype": str(layer_dtype).removeprefix("torch."), "rows": rows})
        save()
        _print_layer(rows, f"{device_name}, {result['date']}: one {NAMES[spec]} {args.preset} layer's mixing (B "
                           f"{batch}, T {args.layer_seq}, {result['layers'][-1]['dtype']}), forward + backward")
    result["train"] = train = []
    if not args.skip_train:
        for seq in seqs:
            for name in specs:
                train.append(train_row(name, args.preset, seq, args.train_tokens, args.steps, args.warmup, device))
                save()
                r = train[-1]
                print(f"train {name:<12} T {seq:>5} batch {r['batch']:>2}: {r['tokens_per_s'] / 1e3:8.1f}K tokens/s "
                      f"({r['ms_per_step']:.0f} ms/step); paths: {'; '.join(r['paths'])}", flush=True)
                for w in r["warnings"]:
                    print(f"   warning: {w}")
                if device.type == "cuda":
                    torch.cuda.empty_cache()
        _print_train_summary(train, seqs, specs)
    if args.out:
        save()
        print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
