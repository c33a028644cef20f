"""`seqdsl train`: one training run, from a config to a run directory (docs/training.md).

Shape legend: B global batch (sequences per optimizer step), M micro batch (sequences per
forward per process), A accumulation steps (B = M * A * processes), T seq_len, V vocab.

Every process reads the same packed stream and takes its own disjoint slice of each global
batch: process r gets sequences [r*M*A, (r+1)*M*A) and runs them in A micro batches. One
process with A micro batches and P processes with A/P each therefore compute the same gradient
(up to the order of float sums). Only process 0 writes metrics and checkpoints; every process
scores its share of the evaluation batches, and under FSDP2 takes part in checkpoint gathering
(docs/training.md, Several GPUs).
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

import torch

from seqdsl.data.packing import Cursor
from seqdsl.data.tokenizer import load_tokenizer
from seqdsl.errors import SeqError
from seqdsl.eval.records import evaluate_records
from seqdsl.lower.lm import path_lines
from seqdsl.train import checkpoint, distributed
from seqdsl.train.config import RunConfig
from seqdsl.train.device import autocast_dtype, device_kind, pick_device
from seqdsl.train.metrics import MetricsLog, Progress
from seqdsl.train.prefetch import Prefetcher
from seqdsl.train.optim import lr_at, optimizer_for, set_lr
from seqdsl.train.setup import config_digest, resolve_data, resolve_model
from seqdsl.train.step import CausalLoss, apply_update, training_step
from seqdsl.train.throughput import device_peak_flops, mfu_meter


class TrainingStopped(SeqError):
    """The run cannot go on (a non-finite loss); the last good checkpoint is kept."""


def _batch_shape(config: RunConfig, world: int) -> tuple[int, int]:
    """(M, A) from the global batch B and the number of processes."""
    micro = config.micro_batch or max(1, config.batch // world)
    if config.batch % (micro * world):
        raise SeqError(f"batch {config.batch} is not a multiple of micro_batch {micro} x {world} processes")
    return micro, config.batch // (micro * world)


def _checkpoint_to_resume(ckpt_root: Path, out: Path, resume: bool) -> checkpoint.Loaded | None:
    """The verified checkpoint `--resume` continues from, or None for a fresh start, which
    refuses a run directory that already holds checkpoints."""
    if resume:
        return checkpoint.load_latest(ckpt_root)
    if checkpoint.latest_name(ckpt_root) is not None:
        raise SeqError(f"{out} already holds a run with checkpoints",
                       hint="add --resume to continue it, or choose another --out")
    return None


def _resume_line(loaded: checkpoint.Loaded, out: Path, steps: int) -> str:
    """What a resumed run says first: from where, and which damaged checkpoint it passed over."""
    where = f"resuming {out} at step {loaded.state['step']} of {steps}"
    if loaded.passed_over:
        return f"warning: {loaded.passed_over}; {where} from the previous intact checkpoint, {loaded.path}"
    return f"{where} from {loaded.path}"


def train(config: RunConfig, out: Path, *, resume: bool = False, show_progress: bool = True,
          launched: float | None = None) -> int:
    """Run (or resume) the training described by `config` in run directory `out`; returns the
    number of optimizer steps done in total. `launched` (a `time.perf_counter()` reading): when
    the command started, for the time-to-first-step event (default: this call)."""
    d = distributed.init(device_kind(config.device))
    failed = True
    try:
        steps = _train(config, out, d, resume=resume, show_progress=show_progress and d.main, launched=launched)
        failed = False
        return steps
    finally:
        distributed.shutdown(d, failed=failed)


def _train(config: RunConfig, out: Path, d: distributed.Dist, *, resume: bool, show_progress: bool,
           launched: float | None) -> int:
    from seqdsl.lower.lm import LanguageModel

    t_launch = launched if launched is not None else time.perf_counter()
    device = pick_device(config.device, local_rank=d.local_rank if d.world > 1 else None)
    amp = autocast_dtype(config.dtype, device)
    # Everything that can refuse the run (the spec, its lowering, the checkpoint to resume) is
    # checked before the data source is opened: reading a corpus takes seconds (the builtin one
    # is read in full to name it in config.json).
    tokenizer = load_tokenizer(config.data.tokenizer)
    model = resolve_model(config, tokenizer.vocab_size)
    seq_len = model.spec.context
    micro, accum = _batch_shape(config, d.world)
    steps = config.tokens // (config.batch * seq_len)
    if steps < 1:
        raise SeqError(f"tokens {config.tokens} is less than one batch ({config.batch} x {seq_len} tokens)")
    ckpt_root = out / "checkpoints"
    loaded = _checkpoint_to_resume(ckpt_root, out, resume)
    torch.manual_seed(config.seed)
    lm = LanguageModel(model.program, model.spec).to(device)
    if d.main and loaded is not None and (show_progress or loaded.passed_over):
        print(_resume_line(loaded, out, steps), file=sys.stderr, flush=True)

    data = resolve_data(config.data)
    train_domains, eval_domains = data.train_domains, data.eval_domains
    resolved = dict(config.model_dump(), model_name=model.spec.name, seq_len=seq_len, steps=steps,
                    vocab=tokenizer.vocab_size, train_domains=train_domains, ood_domains=data.ood_domains,
                    data_source=data.source.describe(), processes=d.world, micro_batch=micro,
                    accumulation=accum, parallel=config.parallel if d.world > 1 else "single", device=device.type,
                    dtype=str(amp).removeprefix("torch.") if amp else "float32",
                    spec_digest=model.digest, torch_version=torch.__version__,
                    seqdsl_version=_version())
    digest = config_digest(resolved)
    if loaded is not None and loaded.state.get("config_digest") != digest:
        raise SeqError(f"--resume: the config differs from the one {out} was trained with",
                       hint=f"compare with {out / 'config.json'}; resume with the same spec, config and --set")

    if config.compile:
        lm.plan_paths(device, amp)  # self-checks and path logs run eagerly, outside the traced graphs
    loss_fn = CausalLoss(lm, compile=config.compile, cuda_graphs=config.cuda_graphs)
    # the data-parallel wrapping point (before the optimizer: FSDP2 replaces the parameters)
    parallel = distributed.wrap_model(lm, loss_fn, d, config.parallel, device, amp)
    optimizer = optimizer_for(lm, config)
    start, tokens_seen, elapsed0, cursor = 0, 0, 0.0, Cursor()
    if loaded is not None:
        checkpoint.restore(loaded, lm, optimizer)
        checkpoint.set_rng_state(loaded.state["rng"])
        start, tokens_seen = loaded.state["step"], loaded.state["tokens"]
        elapsed0, cursor = loaded.state.get("elapsed", 0.0), Cursor(**loaded.state["cursor"])
    # the packed stream, from the token cache (built on first use, with a progress bar) when the
    # source is cached; every process reads the same stream and keeps its own rows
    say = (lambda line: print(line, file=sys.stderr, flush=True)) if d.main else (lambda line: None)
    stream = d.main_first(lambda: data.training_stream(tokenizer, seq_len, cursor, show_progress=show_progress,
                                                        say=say))
    consumed = stream.cursor  # the cursor after the last batch trained on: what a checkpoint saves

    log = MetricsLog(out / "metrics.jsonl")
    if d.main:
        out.mkdir(parents=True, exist_ok=True)
        if loaded is None:
            (out / "config.json").write_text(json.dumps(resolved, indent=2) + "\n")
            (out / "spec.seq").write_text(model.text)
            log.path.unlink(missing_ok=True)
        else:
            log.truncate_after(start)
            damaged = f" ({loaded.passed_over})" if loaded.passed_over else ""
            log.write({"kind": "event", "step": start, "event": "resume", "detail": f"from {loaded.path.name}{damaged}"})
    sets = data.heldout_sets(tokenizer)  # every process scores its share of the batches
    mfu = mfu_meter(model, seq_len, device_peak_flops(device))
    progress = Progress(steps, start, config.log_every, show_progress, eval_every=config.eval_every,
                        eval_tokens=sum(s.tokens.numel() for s in sets.values()), step_tokens=config.batch * seq_len)
    progress.message(f"training {model.spec.name} at preset {config.preset or 'as written'} "
                     f"({lm.num_parameters():,} parameters) for {steps} steps of "
                     f"{config.batch} x {seq_len} tokens on {device.type} x {d.world}; domains: train "
                     f"{', '.join(train_domains)}; evaluate {', '.join(eval_domains)}")
    for line in model.report:  # what the resize changed or could not keep, and the verdict
        progress.message(f"  {line}")

    def evaluate(step: int) -> None:
        progress.eval_begin(step)
        records = evaluate_records(lm, sets, step=step, tokens=tokens_seen, seq_len=seq_len,
                                   batch_size=config.eval_batch, device=device, autocast_dtype=amp,
                                   split=(d.rank, d.world), progress=progress.eval_progress)
        progress.eval_end()
        if not d.main:
            return
        for record in records:
            log.write(record)
        progress.message(f"eval at step {step}: " + "  ".join(
            f"{r['domain']}{'*' if r['in_domain'] else ''} {r['loss']:.3f} ({r['bpb']:.3f} bpb)" for r in records))

    def save(step: int, elapsed: float) -> None:
        state = {"tokens": tokens_seen, "cursor": consumed.to_json(), "rng": checkpoint.rng_state(),
                 "config_digest": digest, "elapsed": elapsed}
        checkpoint.save(ckpt_root, step, lm, optimizer, state, model.text, keep=config.keep_checkpoints)

    lm.train()
    t_start = time.perf_counter()
    # batches are made on a thread one step ahead, this process's rows (M * A, T + 1) pinned and
    # copied without blocking: the step never waits for packing (its wait is logged as data_wait_s)
    ahead = Prefetcher(stream, config.batch, slice(d.rank * micro * accum, (d.rank + 1) * micro * accum), device)
    try:
        for step in range(start, steps):
            t0 = time.perf_counter()
            set_lr(optimizer, lr := lr_at(step, steps, config.lr, config.warmup, config.min_lr_ratio))
            batch = ahead.next()
            consumed = batch.cursor
            stats = training_step(parallel.loss, lm.parameters(), batch.rows, micro, autocast_dtype=amp,
                                  clip=config.clip, micro_batch=parallel.micro_batch, keep_grads=config.cuda_graphs)
            loss_value, grad_norm = stats.tolist()  # the step's one read of the device (the check below needs it)
            loss_value = d.mean(loss_value, device)
            if not (math.isfinite(loss_value) and math.isfinite(grad_norm)):
                last = checkpoint.latest_name(ckpt_root)
                what = "loss" if not math.isfinite(loss_value) else "gradient norm"
                if d.main:
                    log.write({"kind": "event", "step": step, "event": "nan",
                               "detail": f"{what} {loss_value if what == 'loss' else grad_norm}"})
                progress.close()
                raise TrainingStopped(
                    f"the {what} became {loss_value if what == 'loss' else grad_norm} at step {step + 1}; "
                    "training stopped",
                    hint=(f"the last good checkpoint is {ckpt_root / last}" if last else "no checkpoint was written yet")
                    + "; lower the learning rate (--set lr=...) and start again, or resume with --resume")
            apply_update(optimizer, keep_grads=config.cuda_graphs)
            tokens_seen += config.batch * seq_len
            now = time.perf_counter()
            tokens_per_s = config.batch * seq_len / (now - t0)
            utilisation = mfu(tokens_per_s)
            if d.main:
                if step == start:
                    log.write({"kind": "event", "step": step + 1, "event": "first_step",
                               "detail": f"{now - t_launch:.1f} s from the start of the command to the end of the "
                                         f"first step, which took {now - t0:.1f} s"
                                         + (f" (compiling {len(lm.blocks)} blocks and the loss head)"
                                            if config.compile else ""),
                               "seconds": now - t_launch})
                    # the first forward has planned every mixer's path: say which ran
                    paths = path_lines(lm.describe_paths(device))
                    log.write({"kind": "event", "step": step + 1, "event": "paths", "detail": "; ".join(paths)})
                    progress.message(f"paths on {device.type}: " + "; ".join(paths))
                log.write({"kind": "train", "step": step + 1, "tokens": tokens_seen, "loss": loss_value, "lr": lr,
                           "tokens_per_s": tokens_per_s, "mfu": utilisation, "data_wait_s": batch.wait_s,
                           "time": elapsed0 + now - t_start})
                progress.update(step + 1, loss_value, tokens_per_s, utilisation)
            last_step = step + 1 == steps
            if last_step or (config.eval_every and (step + 1) % config.eval_every == 0):
                evaluate(step + 1)
            if last_step or (config.checkpoint_every and (step + 1) % config.checkpoint_every == 0):
                save(step + 1, elapsed0 + time.perf_counter() - t_start)  # every process calls; process 0 writes
    finally:
        ahead.close()
    progress.close()
    return steps


def _version() -> str:
    from seqdsl import __version__

    return __version__
