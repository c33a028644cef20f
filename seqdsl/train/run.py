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
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from seqdsl import jsonl
from seqdsl.data.packing import Cursor
from seqdsl.data.tokenizer import load_tokenizer
from seqdsl.errors import SeqError
from seqdsl.lower import verdicts
from seqdsl.lower.lm import LanguageModel, path_lines
from seqdsl.run import checkpoint, layout
from seqdsl.run.config import RunConfig
from seqdsl.run.data import RunData, import_readers, resolve_data
from seqdsl.run.device import autocast_dtype, device_kind, pick_device
from seqdsl.run.digest import config_digest, digested
from seqdsl.run.records import evaluate_records
from seqdsl.train import distributed
from seqdsl.train.metrics import MetricsLog, Progress
from seqdsl.train.optim import lr_at, optimizer_for, set_lr
from seqdsl.train.prefetch import Ahead, Batch, Prefetcher
from seqdsl.train.setup import ResolvedModel, resolve_model
from seqdsl.train.step import CausalLoss, apply_update, training_step
from seqdsl.train.throughput import device_peak_flops, mfu_meter
from seqdsl.version import __version__

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
    refuses a run directory that holds checkpoints or evaluations (a fresh start rewrites
    config.json, spec.seq and metrics.jsonl, and its checkpoints would replace the old ones). A
    run stopped before its first checkpoint and evaluation starts again in place."""
    if out.exists() and not out.is_dir():
        raise SeqError(f"--out {out} is a file, not a run directory", hint="choose another --out")
    if resume:
        return checkpoint.load_latest(ckpt_root)
    if checkpoint.latest_name(ckpt_root) is not None or checkpoint.step_dirs(ckpt_root):
        raise SeqError(f"{out} already holds a run with checkpoints",
                       hint="add --resume to continue it, or choose another --out")
    if holds_evaluations(out / layout.METRICS):
        raise SeqError(f"{out} already holds a run's evaluations ({layout.METRICS}) and no checkpoint to resume from",
                       hint="choose another --out, or remove the directory to start that run again")
    return None


def holds_evaluations(metrics: Path) -> bool:
    """Whether a metrics.jsonl holds an evaluation record (what `seqdsl compare` reads); a file
    with a broken line before its last is one SeqFileError (jsonl.read), never taken for empty."""
    if not metrics.is_file():
        return False
    records, _ = jsonl.read(metrics)
    return any(record.get("kind") == "eval" for _, record in records)


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
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = config.tf32  # CUDA only; the process's setting is put back
    try:
        steps = _train(config, out, d, resume=resume, show_progress=show_progress and d.main, launched=launched)
        failed = False
        return steps
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32
        distributed.shutdown(d, failed=failed)


@dataclass
class _Run:
    """What every step of a run uses, set up once by `_set_up`."""

    config: RunConfig
    out: Path
    d: distributed.Dist
    device: torch.device
    amp: torch.dtype | None  # the autocast dtype; None: float32
    model: ResolvedModel
    lm: LanguageModel
    steps: int
    micro: int  # M
    accum: int  # A
    digest: str  # config_digest of the resolved config: what --resume must match
    parallel: distributed.Parallel
    optimizer: torch.optim.Optimizer
    log: MetricsLog
    progress: Progress
    heldout: Ahead  # (held-out sets, seconds), read after the stream, beside planning and the first step: `sets`
    mfu: Callable[[float], float | None]
    # seconds spent before the first step: "model" (spec, tokenizer, weights), "plan" (paths,
    # self-checks, compile wrappers), "data" (the packed stream, on a thread beside "plan"),
    # "data_wait" (of "data", what was left when "plan" ended)
    startup: dict[str, float]

    @property
    def sets(self) -> dict:
        """domain -> EvalSet, this process's share scored at each evaluation (waits for the read)."""
        return self.heldout.result()[0][0]

    @property
    def seq_len(self) -> int:
        return self.model.spec.context

    @property
    def ckpt_root(self) -> Path:
        return self.out / "checkpoints"

    @property
    def step_tokens(self) -> int:
        return self.config.batch * self.seq_len


@dataclass
class _Position:
    """Where a run stands: the step this process started at, the tokens trained on, the stream's
    cursor after the last batch trained on (what a checkpoint saves), and the training time of
    the processes before this one (a resumed run's clock goes on from there)."""

    start: int
    tokens: int
    cursor: Cursor
    elapsed_before: float


@dataclass(frozen=True)
class _Clock:
    launched: float  # perf_counter when the command started
    started: float  # perf_counter when the first step of this process started
    checks: verdicts.Spent  # the process's self-check totals when this run began (a run's own are the difference)

    def elapsed(self, position: _Position) -> float:
        return position.elapsed_before + time.perf_counter() - self.started


def _train(config: RunConfig, out: Path, d: distributed.Dist, *, resume: bool, show_progress: bool,
           launched: float | None) -> int:
    launched = launched if launched is not None else time.perf_counter()
    checks_before = verdicts.spent()
    run, position, stream = _set_up(config, out, d, resume=resume, show_progress=show_progress)
    run.lm.train()
    clock = _Clock(launched, time.perf_counter(), checks_before)
    # batches are made on a thread one step ahead, this process's rows (M * A, T + 1) pinned and
    # copied without blocking: the step never waits for packing (its wait is logged as data_wait_s)
    rows = run.micro * run.accum
    ahead = Prefetcher(stream, config.batch, slice(d.rank * rows, (d.rank + 1) * rows), run.device)
    step = position.start
    try:
        for step in range(position.start, run.steps):
            t0 = time.perf_counter()
            batch = ahead.next()
            loss, lr = _step(run, position, step, batch)
            if d.main:
                _record_step(run, position, clock, step, batch, loss=loss, lr=lr, t0=t0)
            if step == position.start:
                _join_heldout(run, step + 1)
            done, last = step + 1, step + 1 == run.steps
            if last or _due(config.eval_every, done):
                _evaluate(run, done, position.tokens)
            if last or _due(config.checkpoint_every, done):
                _save(run, position, done, clock.elapsed(position))  # every process calls; process 0 writes
    except torch.OutOfMemoryError as err:
        raise _out_of_memory(run, step, err) from None
    finally:
        ahead.close()
    run.progress.close()
    return run.steps


def _out_of_memory(run: _Run, step: int, err: torch.OutOfMemoryError) -> SeqError:
    """The one message for a step (or an evaluation) that ran out of device memory: the shape
    that did, the layers that run the O(T^2) reference there (the usual reason at long
    context), what to change; the checkpoints written so far stay as they were."""
    asked = re.search(r"Tried to allocate [\d.]+ \w+", str(err))
    tried = f" (t{asked.group(0)[1:]})" if asked else ""
    reference = path_lines([row for row in run.lm.describe_paths(run.device) if row[2].startswith("reference")])
    where = f"; on the PyTorch reference, which holds T x T scores: {'; '.join(' '.join(line.split()) for line in reference)}" \
        if reference else ""
    kept = f"the checkpoints in {run.ckpt_root} are intact (continue with --resume)" \
        if checkpoint.latest_name(run.ckpt_root) is not None else "no checkpoint had been written"
    return SeqError(f"{run.device.type} out of memory at step {step + 1} with micro batches of {run.micro} x "
                    f"{run.seq_len} tokens{tried}{where}",
                    hint=f"lower `micro_batch` (the batch stays {run.config.batch}: more accumulation steps) or "
                         f"the context; {kept}")


def _due(every: int, done: int) -> bool:
    """Whether a periodic action (every `every` steps; 0: only at the end) falls after step `done`."""
    return bool(every) and done % every == 0


def _set_up(config: RunConfig, out: Path, d: distributed.Dist, *, resume: bool,
            show_progress: bool) -> tuple[_Run, _Position, object]:
    """The run, where it stands and its packed training stream. Everything that can refuse the
    run (the spec, its lowering, the checkpoint to resume) is checked before the data source is
    opened: reading a corpus takes seconds (the builtin one is read in full to name it in
    config.json)."""
    t0 = time.perf_counter()
    device = pick_device(config.device, local_rank=d.local_rank if d.world > 1 else None)
    amp = autocast_dtype(config.dtype, device)
    tokenizer = load_tokenizer(config.data.tokenizer)
    model = resolve_model(config, tokenizer.vocab_size)
    micro, accum = _batch_shape(config, d.world)
    steps = _step_count(config, model.spec.context)
    loaded = _checkpoint_to_resume(out / "checkpoints", out, resume)
    torch.manual_seed(config.seed)
    lm = LanguageModel(model.program, model.spec).to(device)
    if d.main and loaded is not None and (show_progress or loaded.passed_over):
        print(_resume_line(loaded, out, steps), file=sys.stderr, flush=True)

    data = resolve_data(config.data)
    resolved = dict(config.model_dump(), model_name=model.spec.name, seq_len=model.spec.context, steps=steps,
                    vocab=tokenizer.vocab_size, train_domains=data.train_domains, ood_domains=data.ood_domains,
                    data_source=data.source.describe(), processes=d.world, micro_batch=micro,
                    accumulation=accum, parallel=config.parallel if d.world > 1 else "single", device=device.type,
                    dtype=str(amp).removeprefix("torch.") if amp else "float32",
                    spec_digest=model.digest, torch_version=torch.__version__,
                    seqdsl_version=__version__)
    digest = _digest_to_match(resolved, loaded, out)
    t_model = time.perf_counter()
    # the packed stream (from the token cache, built on first use with a progress bar, when the
    # source is cached) and the held-out sets are read on a thread while the paths are planned
    # (self-checks, kernel compilation): on a fresh machine both take seconds to tens of seconds.
    # One process only: with several, process 0 builds the cache while the others wait at a
    # barrier, a collective that must not interleave with the data-parallel wrapping's own.
    say = (lambda line: print(line, file=sys.stderr, flush=True)) if d.main else (lambda line: None)
    cursor = _start_cursor(loaded)

    def read_stream():
        return d.main_first(lambda: data.training_stream(tokenizer, model.spec.context, cursor,
                                                         show_progress=show_progress, say=say))

    background = d.world == 1
    if background:
        # whatever both threads would import is imported here first: the backends' libraries (fla;
        # mamba-ssm and through it transformers, a lazily loaded module that `datasets` looks up
        # once it is in sys.modules: half-imported by planning, a shard read failed with "module
        # 'transformers' has no attribute 'PreTrainedTokenizerBase'" on an H200) and the readers
        lm.describe_paths(device)
        import_readers()
    reading = Ahead(read_stream, background=background, name="seqdsl-data")

    def read_heldout():
        """(the held-out sets, seconds reading them): after the stream (its cores are the
        tokenizer's until then), beside the planning when that takes longer than both, else
        beside the first step; never waited for before it."""
        reading.result()
        t = time.perf_counter()
        return data.heldout_sets(tokenizer), time.perf_counter() - t

    # the held-out sets are first needed at the first evaluation: the run joins them right after
    # the first step (`_join_heldout`), so that a domain without held-out text still stops it
    # there, not at its end. Every process scores its share of them.
    heldout = Ahead(read_heldout, background=background, name="seqdsl-heldout")
    parallel, optimizer = _wrap(config, lm, d, device, amp)
    t_plan = time.perf_counter()
    position = _restore(loaded, lm, optimizer)
    stream, data_wait = reading.result()
    position.cursor = stream.cursor
    log = _open_run_dir(out, d, loaded, resolved, model, position.start)
    # until the sets are read, the remaining time counts every evaluated domain's full budget
    progress = Progress(steps, position.start, config.log_every, show_progress, eval_every=config.eval_every,
                        eval_tokens=config.data.eval_tokens * len(data.eval_domains),
                        step_tokens=config.batch * model.spec.context)
    startup = {"model": t_model - t0, "plan": t_plan - t_model, "data": reading.work_s, "data_wait": data_wait}
    run = _Run(config, out, d, device, amp, model, lm, steps, micro, accum, digest, parallel, optimizer, log,
               progress, heldout, mfu_meter(model, model.spec.context, device_peak_flops(device)), startup)
    _announce(run, data)
    return run, position, stream


def _step_count(config: RunConfig, seq_len: int) -> int:
    steps = config.tokens // (config.batch * seq_len)
    if steps < 1:
        raise SeqError(f"tokens {config.tokens} is less than one batch ({config.batch} x {seq_len} tokens)")
    return steps


def _digest_to_match(resolved: dict, loaded: checkpoint.Loaded | None, out: Path) -> str:
    """The resolved config's digest; a resumed run refuses a config that differs from its own,
    naming the settings that differ where the run's config.json is readable."""
    digest = config_digest(resolved)
    if loaded is not None and loaded.state.get("config_digest") != digest:
        differ = _differing_settings(_read_json(out / "config.json"), resolved)
        which = f" ({', '.join(differ[:6])}{', ...' if len(differ) > 6 else ''})" if differ else ""
        raise SeqError(f"--resume: the config differs from the one {out} was trained with{which}",
                       hint=f"compare with {out / 'config.json'}; resume with the same spec, config and --set")
    return digest


def _differing_settings(before: object, resolved: dict) -> list[str]:
    """The settings the digest covers that differ between the run's config.json `before` and
    this one ([] where that file is unreadable or its tokenizer is gone)."""
    if not isinstance(before, dict):
        return []
    try:
        return _differences(digested(before), digested(json.loads(json.dumps(resolved))))
    except SeqError:
        return []


def _read_json(path: Path) -> object:
    """The JSON document at `path`, or None when it is missing or unreadable."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _differences(before: object, now: object, prefix: str = "") -> list[str]:
    """The dotted keys whose values differ between two JSON documents (nested objects compared
    key by key; [] for a document that is not an object)."""
    if not isinstance(before, dict) or not isinstance(now, dict):
        return []
    keys = sorted(set(before) | set(now))
    out: list[str] = []
    for key in keys:
        a, b = before.get(key), now.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            out += _differences(a, b, f"{prefix}{key}.")
        elif a != b:
            out.append(f"{prefix}{key}")
    return out


def _wrap(config: RunConfig, lm: LanguageModel, d: distributed.Dist, device: torch.device,
          amp: torch.dtype | None) -> tuple[distributed.Parallel, torch.optim.Optimizer]:
    """The loss, wrapped for data parallelism, and the optimizer."""
    if config.compile:
        lm.plan_paths(device, amp)  # self-checks and path logs run eagerly, outside the traced graphs
    loss_fn = CausalLoss(lm, compile=config.compile, cuda_graphs=config.cuda_graphs, scope=config.compile_scope)
    # the data-parallel wrapping point (before the optimizer: FSDP2 replaces the parameters)
    parallel = distributed.wrap_model(lm, loss_fn, d, config.parallel, device, amp)
    return parallel, optimizer_for(lm, config)


def _start_cursor(loaded: checkpoint.Loaded | None) -> Cursor:
    """Where the training stream starts: its beginning, or after the resumed checkpoint's last batch."""
    return Cursor(**loaded.state["cursor"]) if loaded is not None else Cursor()


def _restore(loaded: checkpoint.Loaded | None, lm: LanguageModel, optimizer: torch.optim.Optimizer) -> _Position:
    """Where the run starts: at the beginning, or where the resumed checkpoint left it (its
    weights, optimizer state and random generators restored)."""
    if loaded is None:
        return _Position(start=0, tokens=0, cursor=_start_cursor(loaded), elapsed_before=0.0)
    checkpoint.restore(loaded, lm, optimizer)
    checkpoint.set_rng_state(loaded.state["rng"])
    return _Position(start=loaded.state["step"], tokens=loaded.state["tokens"],
                     cursor=_start_cursor(loaded), elapsed_before=loaded.state.get("elapsed", 0.0))


def _open_run_dir(out: Path, d: distributed.Dist, loaded: checkpoint.Loaded | None, resolved: dict,
                  model: ResolvedModel, start: int) -> MetricsLog:
    """The metrics log; process 0 writes config.json and spec.seq of a new run, or marks where a
    resumed run goes on (the records after its checkpoint are dropped: they are redone)."""
    log = MetricsLog(out / layout.METRICS)
    if not d.main:
        return log
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise SeqError(f"cannot create the run directory {out} ({err.strerror or type(err).__name__})",
                       hint="choose another --out") from None
    if loaded is None:
        (out / "config.json").write_text(json.dumps(resolved, indent=2) + "\n")
        (out / "spec.seq").write_text(model.text)
        log.path.unlink(missing_ok=True)
    else:
        if not isinstance(_read_json(out / "config.json"), dict):
            # the checkpoint's digest matched this config: config.json was damaged or removed since
            (out / "config.json").write_text(json.dumps(resolved, indent=2) + "\n")
        log.truncate_after(start)
        damaged = f" ({loaded.passed_over})" if loaded.passed_over else ""
        log.write({"kind": "event", "step": start, "event": "resume", "detail": f"from {loaded.path.name}{damaged}"})
    return log


def _announce(run: _Run, data: RunData) -> None:
    config = run.config
    run.progress.message(
        f"training {run.model.spec.name} at preset {config.preset or 'as written'} "
        f"({run.lm.num_parameters():,} parameters) for {run.steps} steps of "
        f"{config.batch} x {run.seq_len} tokens on {run.device.type} x {run.d.world}; domains: train "
        f"{', '.join(data.train_domains)}; evaluate {', '.join(data.eval_domains)}")
    for line in run.model.report:  # what the resize changed or could not keep, and the verdict
        run.progress.message(f"  {line}")


def _step(run: _Run, position: _Position, step: int, batch: Batch) -> tuple[float, float]:
    """One optimizer step on `batch`, (the loss averaged over processes, the learning rate).
    A non-finite loss or gradient norm stops the run before the update."""
    config = run.config
    set_lr(run.optimizer, lr := lr_at(step, run.steps, config.lr, config.warmup, config.min_lr_ratio))
    stats = training_step(run.parallel.loss, run.lm.parameters(), batch.rows, run.micro, autocast_dtype=run.amp,
                          clip=config.clip, micro_batch=run.parallel.micro_batch, keep_grads=config.cuda_graphs)
    loss, grad_norm = stats.tolist()  # the step's one read of the device (the check below needs it)
    loss = run.d.mean(loss, run.device)
    _stop_unless_finite(run, step, loss, grad_norm)
    apply_update(run.optimizer, keep_grads=config.cuda_graphs)
    position.tokens += run.step_tokens
    position.cursor = batch.cursor
    return loss, lr


def _stop_unless_finite(run: _Run, step: int, loss: float, grad_norm: float) -> None:
    if math.isfinite(loss) and math.isfinite(grad_norm):
        return
    what, value = ("loss", loss) if not math.isfinite(loss) else ("gradient norm", grad_norm)
    last = checkpoint.latest_name(run.ckpt_root)
    if run.d.main:
        run.log.write({"kind": "event", "step": step, "event": "nan", "detail": f"{what} {value}"})
    run.progress.close()
    raise TrainingStopped(
        f"the {what} became {value} at step {step + 1}; training stopped",
        hint=(f"the last good checkpoint is {run.ckpt_root / last}" if last else "no checkpoint was written yet")
        + "; lower the learning rate (--set lr=...) and start again, or resume with --resume")


def _record_step(run: _Run, position: _Position, clock: _Clock, step: int, batch: Batch, *, loss: float,
                 lr: float, t0: float) -> None:
    """Process 0's records of a step: the train record, the progress line, and after the first
    step of this process, how long the command took to get there."""
    now = time.perf_counter()
    tokens_per_s = run.step_tokens / (now - t0)
    utilisation = run.mfu(tokens_per_s)
    if step == position.start:
        compiling = ""
        if run.config.compile:
            compiling = (f" (compiling {len(run.lm.blocks)} blocks" if run.config.compile_scope == "model"
                         else " (compiling one graph per block structure") + " and the loss head)"
        checks = verdicts.spent().minus(clock.checks)
        startup = dict(run.startup, first_step=now - t0)
        run.log.write({"kind": "event", "step": step + 1, "event": "first_step",
                       "detail": f"{now - clock.launched:.1f} s from the start of the command to the end of the "
                                 f"first step: model {startup['model']:.1f} s, paths {startup['plan']:.1f} s, "
                                 f"data {startup['data']:.1f} s beside them (then waited {startup['data_wait']:.1f} s), "
                                 f"the first step {now - t0:.1f} s{compiling}; of all that, {checks.seconds:.1f} s in "
                                 f"{checks.computed} first-use self-checks or races, {checks.kept} known from the cache",
                       "seconds": now - clock.launched, "selfcheck_seconds": checks.seconds, "startup": startup})
        # the first forward has planned every mixer's path: say which ran
        paths = path_lines(run.lm.describe_paths(run.device))
        run.log.write({"kind": "event", "step": step + 1, "event": "paths", "detail": "; ".join(paths)})
        run.progress.message(f"paths on {run.device.type}: " + "; ".join(paths))
    run.log.write({"kind": "train", "step": step + 1, "tokens": position.tokens, "loss": loss, "lr": lr,
                   "tokens_per_s": tokens_per_s, "mfu": utilisation, "data_wait_s": batch.wait_s,
                   "time": position.elapsed_before + now - clock.started})
    run.progress.update(step + 1, loss, tokens_per_s, utilisation)


def _join_heldout(run: _Run, step: int) -> None:
    """Wait for the held-out sets after the first step (raising what reading them raised: a
    domain without held-out text is one message then, not after the whole run), say how long
    reading them took beside it, and give the remaining time their real size."""
    (sets, read), waited = run.heldout.result()
    run.progress.eval_size(sum(s.tokens.numel() for s in sets.values()))
    if run.d.main:
        run.log.write({"kind": "event", "step": step, "event": "heldout",
                       "detail": f"held-out sets of {len(sets)} domains read in {read:.1f} s after the stream, "
                                 f"beside the planning and the first step (then waited {waited:.1f} s)",
                       "seconds": read, "wait_s": waited})


def _evaluate(run: _Run, step: int, tokens: int) -> None:
    """Every process scores its share of the held-out sets; process 0 writes the records."""
    run.progress.eval_begin(step)
    records = evaluate_records(run.lm, run.sets, step=step, tokens=tokens, seq_len=run.seq_len,
                               batch_size=run.config.eval_batch, device=run.device, autocast_dtype=run.amp,
                               split=(run.d.rank, run.d.world), progress=run.progress.eval_progress,
                               recall=run.config.eval_recall)
    run.progress.eval_end()
    if not run.d.main:
        return
    for record in records:
        run.log.write(record)
    run.progress.message(f"eval at step {step}: " + "  ".join(
        f"{r['domain']}{'*' if r['in_domain'] else ''} {r['loss']:.3f} ({r['bpb']:.3f} bpb)" for r in records))


def _save(run: _Run, position: _Position, step: int, elapsed: float) -> None:
    state = {"tokens": position.tokens, "cursor": position.cursor.to_json(), "rng": checkpoint.rng_state(),
             "config_digest": run.digest, "elapsed": elapsed}
    checkpoint.save(run.ckpt_root, step, run.lm, run.optimizer, state, run.model.text, keep=run.config.keep_checkpoints)
