"""mamba-ssm's SSD path against the reference and fla, and 110m training speed of Mamba-2 against
Transformer++, in one run on this machine's GPU.

    python benchmarks/bench_mamba.py [--out results.json] [--layer-batch 8] [--train-seqs 2048,8192]
                                     [--train-tokens 16384] [--steps 4]

Part 1, one layer's mixing (stage 3 alone), forward + backward, Mamba-2's 110m key (24 heads of
64, state 128, one group), B x T = 8 x 2048, bfloat16 inputs as under autocast: each backend on
the same inputs (mamba.ssd, fla.chunk_simple_gla if it runs here, the reference), median ms of
CUDA-event timings after warm-up, and each one's relative error against the reference.

Part 2, training tokens/s of the 110m models of specs/mamba2.seq and specs/transformer.seq at each
sequence length (AdamW, bf16 autocast, batch = train-tokens / T), the paths chosen automatically
(listed in the output); median of the timed steps after warm-up steps (compilation, autotuning,
self-checks).

Prints two tables and writes them, the device and the date as JSON.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import warnings
from pathlib import Path

import torch

import seqdsl
from seqdsl.ir.key import kernel_key
from seqdsl.lower.lm import LanguageModel, pick_model, with_preset
from seqdsl.lower.paths import RecurrentInputs, _recurrent_reference

SPECS = Path(__file__).resolve().parents[1] / "specs"


def _ms(step, reps: int = 10) -> float:
    step()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def _rel(x, y) -> float:
    return ((x.double() - y.double()).norm() / (y.double().norm() + 1e-30)).item()


def layer_rows(batch: int, seq: int) -> list[dict]:
    from seqdsl.lower import fla_paths, mamba_paths

    program = seqdsl.load(SPECS / "mamba2.seq").program
    model = with_preset(pick_model(program), "110m")
    key = kernel_key(program.mixer("mamba2"), model.d_model)
    g = torch.Generator().manual_seed(0)
    H, G, K, V = key.heads, key.qk_groups, key.feature_dim, key.value_cols
    rnd = lambda *s: torch.randn(*s, generator=g).cuda().bfloat16()
    base = dict(q=rnd(batch, seq, G, K).repeat_interleave(H // G, dim=2) * K ** -0.5,
                k=rnd(batch, seq, G, K).repeat_interleave(H // G, dim=2), v=rnd(batch, seq, H, V),
                log_decay=-torch.rand(batch, seq, H, generator=g).cuda() * 0.1)
    runs = {
        "mamba.ssd": lambda m: mamba_paths.run(key, m, None),
        "fla.chunk_simple_gla": lambda m: fla_paths.run("fla.chunk_simple_gla", m, None),
        "reference.chunked": lambda m: _recurrent_reference(key, m, None, False),
    }
    outputs, rows = {}, []
    for name, fn in runs.items():
        leaves = {n: t.detach().clone().requires_grad_() for n, t in base.items()}

        def step():
            for t in leaves.values():
                t.grad = None
            o, _ = fn(RecurrentInputs(**leaves))
            o.float().square().mean().backward()
            return o

        print(f"layer: {name} (the first call compiles and autotunes: minutes for mamba-ssm)", flush=True)
        try:
            out = step().detach()
            outputs[name] = (out, [leaves[n].grad.detach().clone() for n in base])
            ms = _ms(step)
            rows.append({"op": name, "ms": ms, "error": ""})
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


def train_row(name: str, seq: int, tokens: int, steps: int) -> dict:
    program = seqdsl.load(SPECS / f"{name}.seq").program
    model = with_preset(pick_model(program), "110m")
    model = model.model_copy(update={"context": max(model.context, seq)})
    torch.manual_seed(0)
    lm = LanguageModel(program, model).cuda()
    opt = torch.optim.AdamW(lm.parameters(), lr=3e-4, fused=True)
    batch = max(1, tokens // seq)
    data = torch.randint(0, model.vocab, (batch, seq + 1), device="cuda")

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = lm.loss(data[:, :-1], data[:, 1:])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):  # compilation, autotuning, self-checks
            step()
    torch.cuda.synchronize()
    ms = _ms(step, reps=steps)
    paths = sorted({f"{p} ({why})" for _, _, p, why in lm.describe_paths("cuda")})
    return {"spec": name, "seq": seq, "batch": batch, "ms_per_step": ms,
            "tokens_per_s": batch * seq / (ms / 1e3), "params": lm.num_parameters(), "paths": paths,
            "warnings": sorted({str(w.message)[:300] for w in caught if "seqdsl" in str(w.message)})}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=None)
    ap.add_argument("--layer-batch", type=int, default=8)
    ap.add_argument("--layer-seq", type=int, default=2048)
    ap.add_argument("--train-seqs", default="2048,8192")
    ap.add_argument("--train-tokens", type=int, default=16384, help="tokens per training step")
    ap.add_argument("--steps", type=int, default=4, help="timed training steps")
    ap.add_argument("--skip-train", action="store_true")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("bench_mamba: needs a CUDA device")
    device = torch.cuda.get_device_name(0)
    result = {"device": device, "date": datetime.date.today().isoformat(), "torch": torch.__version__,
              "layer": {"batch": args.layer_batch, "seq": args.layer_seq, "dtype": "bfloat16"}}
    save = lambda: args.out and Path(args.out).write_text(json.dumps(result, indent=1))  # after each part
    result["layer"]["rows"] = rows = layer_rows(args.layer_batch, args.layer_seq)
    save()
    print(f"\n{device}, {result['date']}: one Mamba-2 110m layer's mixing (24 heads x 64, state 128, "
          f"B {args.layer_batch}, T {args.layer_seq}, bf16), forward + backward")
    print(f"{'op':<22} {'ms':>8} {'rel err out':>12} {'rel err grads':>14}")
    for r in rows:
        if r["ms"] is None:
            print(f"{r['op']:<22} {'-':>8}  refused: {r['error']}")
        else:
            print(f"{r['op']:<22} {r['ms']:>8.2f} {r['rel_err_out']:>12.1e} {r['rel_err_grads_max']:>14.1e}")
    result["train"] = train = []
    if not args.skip_train:
        for seq in map(int, args.train_seqs.split(",")):
            for name in ("transformer", "mamba2"):
                train.append(train_row(name, seq, args.train_tokens, args.steps))
                save()
                r = train[-1]
                print(f"train {name:<12} T {seq:>5} batch {r['batch']:>2}: {r['tokens_per_s'] / 1e3:8.1f}K tokens/s "
                      f"({r['ms_per_step']:.0f} ms/step); paths: {'; '.join(r['paths'])}", flush=True)
                for w in r["warnings"]:
                    print(f"   warning: {w}")
        print(f"\n{'T':>6} {'Transformer++ tok/s':>20} {'Mamba-2 tok/s':>14} {'ratio':>6}")
        for seq in map(int, args.train_seqs.split(",")):
            t, m = (next(r for r in train if r["spec"] == n and r["seq"] == seq) for n in ("transformer", "mamba2"))
            print(f"{seq:>6} {t['tokens_per_s']:>20,.0f} {m['tokens_per_s']:>14,.0f} "
                  f"{m['tokens_per_s'] / t['tokens_per_s']:>6.2f}")
    if args.out:
        save()
        print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
