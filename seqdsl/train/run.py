"""`seqdsl train`: one training run, from a config to a run directory (docs/training.md).

Shape legend: B global batch (sequences per optimizer step), M micro batch (sequences per
forward per process), A accumulation steps (B = M * A * processes), T seq_len, V vocab.

Every process reads the same packed stream and takes its own disjoint slice of each global
batch: process r gets sequences [r*M*A, (r+1)*M*A) and runs them in A micro batches. One
process with A micro batches and P processes with A/P each therefore compute the same gradient
(up to the order of float sums). Only process 0 evaluates, writes metrics and checkpoints.
"""

from __future__ import annotations

import json
import math
import time
from contextlib import nullcontext
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqdsl.data.heldout import build_eval_sets
from seqdsl.data.packing import Cursor, PackedSequences
from seqdsl.data.tokenizer import load_tokenizer
from seqdsl.errors import SeqError
from seqdsl.train import checkpoint, distributed
from seqdsl.train.config import RunConfig
from seqdsl.train.evaluation import evaluate_sets
from seqdsl.train.metrics import MetricsLog, Progress
from seqdsl.train.optim import adamw, lr_at, set_lr
from seqdsl.train.setup import config_digest, make_source, resolve_domains, resolve_model
from seqdsl.train.throughput import mfu_meter


class TrainingStopped(SeqError):
    """The run cannot go on (a non-finite loss); the last good checkpoint is kept."""


class CausalLoss(nn.Module):
    """Mean next-token cross-entropy of a LanguageModel: the module DDP wraps (its forward is
    what DDP hooks), so gradients are averaged over processes."""

    def __init__(self, lm: nn.Module):
        super().__init__()
        self.lm = lm

    def forward(self, inputs: Tensor, targets: Tensor) -> Tensor:  # (M, T), (M, T) -> ()
        logits, _ = self.lm(inputs)
        return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())


def _device(name: str, d: distributed.Dist) -> torch.device:
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(name)
    except RuntimeError:
        raise SeqError(f"unknown device {name!r}", hint="use cpu, cuda or cuda:N") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise SeqError("device cuda asked for, but no CUDA device is available")
        device = torch.device("cuda", d.local_rank if d.world > 1 else (device.index or 0))
        torch.cuda.set_device(device)
    return device


def _autocast_dtype(config: RunConfig, device: torch.device) -> torch.dtype | None:
    if config.dtype == "bfloat16" or (config.dtype == "auto" and device.type == "cuda"):
        return torch.bfloat16
    return None


def _batch_shape(config: RunConfig, world: int) -> tuple[int, int]:
    """(M, A) from the global batch B and the number of processes."""
    micro = config.micro_batch or max(1, config.batch // world)
    if config.batch % (micro * world):
        raise SeqError(f"batch {config.batch} is not a multiple of micro_batch {micro} x {world} processes")
    return micro, config.batch // (micro * world)


def train(config: RunConfig, out: Path, *, resume: bool = False, show_progress: bool = True) -> int:
    """Run (or resume) the training described by `config` in run directory `out`; returns the
    number of optimizer steps done in total."""
    d = distributed.init("cuda" if config.device.startswith("cuda") or (
        config.device == "auto" and torch.cuda.is_available()) else "cpu")
    try:
        return _train(config, out, d, resume=resume, show_progress=show_progress and d.main)
    finally:
        distributed.shutdown(d)


def _train(config: RunConfig, out: Path, d: distributed.Dist, *, resume: bool, show_progress: bool) -> int:
    from seqdsl.lower.lm import LanguageModel

    device = _device(config.device, d)
    amp = _autocast_dtype(config, device)
    tokenizer = load_tokenizer(config.data.tokenizer)
    source = make_source(config.data)
    train_domains, eval_domains = resolve_domains(config, source)
    model = resolve_model(config, tokenizer.vocab_size)
    seq_len = model.spec.context
    micro, accum = _batch_shape(config, d.world)
    steps = config.tokens // (config.batch * seq_len)
    if steps < 1:
        raise SeqError(f"tokens {config.tokens} is less than one batch ({config.batch} x {seq_len} tokens)")

    resolved = dict(config.model_dump(), model_name=model.spec.name, seq_len=seq_len, steps=steps,
                    vocab=tokenizer.vocab_size, train_domains=train_domains,
                    ood_domains=[x for x in eval_domains if x not in train_domains],
                    data_source=source.describe(), processes=d.world, micro_batch=micro, accumulation=accum,
                    device=device.type, dtype=str(amp).removeprefix("torch.") if amp else "float32",
                    spec_digest=model.digest, torch_version=torch.__version__,
                    seqdsl_version=_version())
    digest = config_digest(resolved)
    ckpt_root = out / "checkpoints"
    loaded = None
    if resume:
        loaded = checkpoint.load_latest(ckpt_root)
        if loaded.state.get("config_digest") != digest:
            raise SeqError(f"--resume: the config differs from the one {out} was trained with",
                           hint=f"compare with {out / 'config.json'}; resume with the same spec, config and --set")
    elif checkpoint.latest_name(ckpt_root) is not None:
        raise SeqError(f"{out} already holds a run with checkpoints",
                       hint="add --resume to continue it, or choose another --out")

    torch.manual_seed(config.seed)
    lm = LanguageModel(model.program, model.spec).to(device)
    if config.compile:
        lm.plan_paths(device, amp)  # self-checks and path logs run eagerly, outside the traced graphs
        for block in lm.blocks:  # per block, as torchtitan does: whole-LM compile fails on torch 2.11
            block.compile()
    optimizer = adamw(lm, lr=config.lr, weight_decay=config.weight_decay, betas=(config.beta1, config.beta2))
    start, tokens_seen, elapsed0, cursor = 0, 0, 0.0, Cursor()
    if loaded is not None:
        checkpoint.restore(loaded, lm, optimizer, device)
        checkpoint.set_rng_state(loaded.state["rng"])
        start, tokens_seen = loaded.state["step"], loaded.state["tokens"]
        elapsed0, cursor = loaded.state.get("elapsed", 0.0), Cursor(**loaded.state["cursor"])
    stream = PackedSequences(lambda: source.documents(train_domains), tokenizer.encode, tokenizer.eos_id,
                             seq_len, config.data.heldout, cursor)
    loss_fn: nn.Module = CausalLoss(lm)
    if d.world > 1:
        loss_fn = nn.parallel.DistributedDataParallel(
            loss_fn, device_ids=[device.index] if device.type == "cuda" else None)

    log = MetricsLog(out / "metrics.jsonl")
    sets = {}
    if d.main:
        out.mkdir(parents=True, exist_ok=True)
        if loaded is None:
            (out / "config.json").write_text(json.dumps(resolved, indent=2) + "\n")
            (out / "spec.seq").write_text(model.text)
            log.path.unlink(missing_ok=True)
        else:
            log.truncate_after(start)
            log.write({"kind": "event", "step": start, "event": "resume", "detail": f"from {loaded.path.name}"})
        sets = build_eval_sets(source, tokenizer, eval_domains, train_domains, heldout=config.data.heldout,
                               max_tokens=config.data.eval_tokens)
    mfu = mfu_meter(model, seq_len, device)
    progress = Progress(steps, start, config.log_every, show_progress)
    progress.message(f"training {model.spec.name} at preset {config.preset or 'as written'} "
                     f"({lm.num_parameters():,} parameters) for {steps} steps of "
                     f"{config.batch} x {seq_len} tokens on {device.type} x {d.world}; domains: train "
                     f"{', '.join(train_domains)}; evaluate {', '.join(eval_domains)}")

    def evaluate(step: int) -> None:
        results = evaluate_sets(lm, sets, seq_len=seq_len, batch_size=config.eval_batch, device=device,
                                autocast_dtype=amp)
        for domain, (loss, bpb, n) in results.items():
            log.write({"kind": "eval", "step": step, "tokens": tokens_seen, "domain": domain,
                       "in_domain": domain in train_domains, "loss": loss, "bpb": bpb, "eval_tokens": n,
                       "seq_len": seq_len})
        progress.message(f"eval at step {step}: " + "  ".join(
            f"{dom}{'*' if dom in train_domains else ''} {loss:.3f} ({bpb:.3f} bpb)"
            for dom, (loss, bpb, _) in results.items()))

    def save(step: int, elapsed: float) -> None:
        state = {"tokens": tokens_seen, "cursor": stream.cursor.to_json(), "rng": checkpoint.rng_state(),
                 "config_digest": digest, "elapsed": elapsed}
        checkpoint.save(ckpt_root, step, lm, optimizer, state, model.text, keep=config.keep_checkpoints)

    autocast = (lambda: torch.autocast(device.type, dtype=amp)) if amp else nullcontext
    lm.train()
    t_start = time.perf_counter()
    for step in range(start, steps):
        t0 = time.perf_counter()
        set_lr(optimizer, lr := lr_at(step, steps, config.lr, config.warmup, config.min_lr_ratio))
        batch = stream.batch(config.batch)  # (B, T + 1): the same on every process
        mine = batch[d.rank * micro * accum: (d.rank + 1) * micro * accum]
        loss_sum = 0.0
        for k in range(accum):
            chunk = mine[k * micro: (k + 1) * micro].to(device)
            sync = nullcontext() if d.world == 1 or k == accum - 1 else loss_fn.no_sync()
            with sync:
                with autocast():
                    loss = loss_fn(chunk[:, :-1], chunk[:, 1:])
                (loss / accum).backward()
            loss_sum += loss.item()
        loss_value = d.mean(loss_sum / accum, device)
        grad_norm = torch.nn.utils.clip_grad_norm_(lm.parameters(), config.clip).item()
        if not (math.isfinite(loss_value) and math.isfinite(grad_norm)):
            last = checkpoint.latest_name(ckpt_root)
            what = "loss" if not math.isfinite(loss_value) else "gradient norm"
            if d.main:
                log.write({"kind": "event", "step": step, "event": "nan",
                           "detail": f"{what} {loss_value if what == 'loss' else grad_norm}"})
            progress.close()
            raise TrainingStopped(
                f"the {what} became {loss_value if what == 'loss' else grad_norm} at step {step + 1}; training stopped",
                hint=(f"the last good checkpoint is {ckpt_root / last}" if last else "no checkpoint was written yet")
                + "; lower the learning rate (--set lr=...) and start again, or resume with --resume")
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        tokens_seen += config.batch * seq_len
        now = time.perf_counter()
        tokens_per_s = config.batch * seq_len / (now - t0)
        if d.main:
            if step == start and config.compile:
                log.write({"kind": "event", "step": step + 1, "event": "compile",
                           "detail": f"first step (compiling {len(lm.blocks)} blocks) took {now - t0:.1f} s"})
            log.write({"kind": "train", "step": step + 1, "tokens": tokens_seen, "loss": loss_value, "lr": lr,
                       "tokens_per_s": tokens_per_s, "mfu": mfu(tokens_per_s), "time": elapsed0 + now - t_start})
            progress.update(step + 1, loss_value, tokens_per_s, mfu(tokens_per_s))
            last_step = step + 1 == steps
            if last_step or (config.eval_every and (step + 1) % config.eval_every == 0):
                evaluate(step + 1)
            if last_step or (config.checkpoint_every and (step + 1) % config.checkpoint_every == 0):
                save(step + 1, elapsed0 + time.perf_counter() - t_start)
    progress.close()
    return steps


def _version() -> str:
    from seqdsl import __version__

    return __version__
