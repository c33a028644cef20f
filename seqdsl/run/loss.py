"""Held-out loss of a language model on evaluation sets: nats per token and bits per byte.

Shape legend: N tokens of a set, S = seq_len (tokens fed per window), B windows per batch,
V vocab.

Windows. The set's N tokens are cut into windows of S + 1 tokens that advance by S, so two
consecutive windows share one token: the last target of one window is the first input of the
next. Window w feeds tokens[wS : wS + S] and scores their successors tokens[wS + 1 : wS + S + 1].
The last window is shorter when N - 1 is not a multiple of S and is scored too. Every token but
the first is therefore scored exactly once, with the left context of its own window (up to S
tokens; the model carries nothing from one window to the next). Scored tokens = N - 1.

Bits per byte. The set's text is `n_bytes` UTF-8 bytes encoded as N tokens. The scored N - 1
tokens are credited with the same fraction of the bytes, n_bytes * (N - 1) / N, so

    bpb = total NLL / (ln 2 * n_bytes * (N - 1) / N) = loss * N / (ln 2 * n_bytes)

which is `EvalSet`'s formula. (Attributing the exact bytes of the unscored first token instead
would need the tokenizer here; for a set of thousands of tokens the two differ by under 0.1%.)

Any context length may be asked for, including longer than the model was trained on (RoPE and
the recurrent family extrapolate, for better or worse: that is what is measured). Mixers with
per-position parameters (`relation = random_keys` or `positional`) have none beyond the model's
`context` and are refused with one message.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from seqdsl.data.evalset import EvalSet
from seqdsl.errors import SeqError
from seqdsl.lower.lm import LanguageModel
from seqdsl.run.device import autocast


class EvalError(SeqError):
    """An evaluation that cannot be run as asked."""


@dataclass(frozen=True)
class DomainLoss:
    loss: float  # nats per scored token
    bpb: float  # bits per byte
    tokens: int  # tokens scored (N - 1)


def check_seq_len(model: LanguageModel, seq_len: int) -> None:
    if seq_len < 1:
        raise EvalError(f"seq_len must be at least 1, got {seq_len}")
    limit = model.positions_limit()  # the mixer plans' per_position, from the IR
    if limit is not None and seq_len > limit:
        kinds = sorted({m.spec.relation.kind for m in model.mixers() if m.per_position})
        raise EvalError(
            f"model `{model.spec.name}` cannot be evaluated at seq_len {seq_len}: its "
            f"`relation = {kinds[0]}` has per-position parameters for {limit} tokens only",
            hint=f"use --seq-len {limit} or less")


def windows(n_tokens: int, seq_len: int) -> list[tuple[int, int]]:
    """(start, length) of each window's inputs: inputs tokens[start : start+length], targets
    shifted by one. Covers targets 1 .. n_tokens-1 exactly once."""
    return [(s, min(seq_len, n_tokens - 1 - s)) for s in range(0, n_tokens - 1, seq_len)]


def batch_count(n_tokens: int, seq_len: int, batch_size: int) -> int:
    """How many batches `_batches` cuts n_tokens into: the full windows in groups of batch_size,
    then the shorter last window if there is one."""
    spans = windows(n_tokens, seq_len)
    full = sum(1 for _, n in spans if n == seq_len)
    return math.ceil(full / batch_size) + (len(spans) > full)


def _batches(tokens: Tensor, seq_len: int, batch_size: int) -> Iterator[tuple[Tensor, Tensor]]:
    """(inputs, targets), each (B, S'), all windows of one batch of the same length S'."""
    spans = windows(tokens.numel(), seq_len)
    full = [s for s, n in spans if n == seq_len]
    for i in range(0, len(full), batch_size):
        starts = full[i:i + batch_size]
        yield _stack(tokens, starts, seq_len)
    tail = [(s, n) for s, n in spans if n < seq_len]
    for s, n in tail:  # at most one
        yield _stack(tokens, [s], n)


def _stack(tokens: Tensor, starts: list[int], length: int) -> tuple[Tensor, Tensor]:
    rows = torch.stack([tokens[s:s + length + 1] for s in starts])  # (B, S'+1)
    return rows[:, :-1], rows[:, 1:]


# observe(nll, x, y): every batch this process scores, with its per-token loss (B, S') in float64
# (e.g. the recall split, seqdsl/run/recall.py), so a second measure costs no second forward
Observer = Callable[[Tensor, Tensor, Tensor], None]


def _nll_sum(model: LanguageModel, x: Tensor, y: Tensor, observe: Observer | None = None) -> float:
    """Summed NLL of targets y (B, S') given inputs x, accumulated in float64."""
    logits, _ = model(x)  # (B, S', V)
    # float32 at least (bf16 logits under autocast); float64 models keep float64
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
    nll = F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="none").double()
    if observe is not None:
        observe(nll.view_as(y), x, y)
    return nll.sum().item()


def forwards_per_process(n_batches: int, world: int) -> int:
    return math.ceil(n_batches / world)


def evaluate_set(model: LanguageModel, tokens: Tensor, n_bytes: int, *, seq_len: int,
                 batch_size: int, device, autocast_dtype=None, split: tuple[int, int] = (0, 1),
                 after_forward: Callable[[], None] | None = None, observe: Observer | None = None) -> DomainLoss:
    """`split` = (rank, world): this process scores batches rank, rank + world, ... and the sums
    are added over the processes (a torch.distributed group of `world`). Every process runs the
    same number of forwards (`forwards_per_process`), with a discarded one where its share runs
    out, since a sharded (FSDP2) model's forward is collective. `after_forward` is called after
    each of them (progress display); `observe` sees every batch scored here (`Observer`)."""
    n = tokens.numel()
    if n < 2:
        raise EvalError(f"an evaluation set needs at least 2 tokens to score one, got {n}")
    if n_bytes <= 0:
        raise EvalError(f"an evaluation set needs a positive byte count, got {n_bytes}")
    device = torch.device(device)
    rank, world = split
    batches = list(_batches(tokens.to(torch.long), seq_len, batch_size))
    total = 0.0
    for i in range(rank, rank + world * forwards_per_process(len(batches), world), world):
        x, y = batches[i] if i < len(batches) else batches[0]
        with autocast(device, autocast_dtype):
            nll = _nll_sum(model, x.to(device), y.to(device), observe if i < len(batches) else None)
        total += nll if i < len(batches) else 0.0
        if after_forward is not None:
            after_forward()
    if world > 1:
        total = _sum_over_processes(total, device)
    scored = n - 1
    loss = total / scored
    return DomainLoss(loss=loss, bpb=loss * n / (math.log(2) * n_bytes), tokens=scored)


def _sum_over_processes(value: float, device: torch.device) -> float:
    import torch.distributed as dist

    t = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return t.item()


# progress(done, total, domain): forwards done by this process out of its total over every set,
# and the domain being scored; called as each set starts (its domain announced), then after each
# forward
EvalProgress = Callable[[int, int, str], None]


class _ForwardCounter:
    def __init__(self, progress: EvalProgress, total: int):
        self.progress, self.total, self.done, self.domain = progress, total, 0, ""

    def start(self, domain: str) -> None:
        self.domain = domain
        self.progress(self.done, self.total, domain)

    def tick(self) -> None:
        self.done += 1
        self.progress(self.done, self.total, self.domain)


def evaluate(model: LanguageModel, sets: Mapping[str, EvalSet], *, seq_len: int, batch_size: int,
             device, autocast_dtype=None, split: tuple[int, int] = (0, 1),
             progress: EvalProgress | None = None,
             observe: Callable[[str], Observer] | None = None) -> dict[str, DomainLoss]:
    """Loss of `model` on each set (keyed as `sets`), every token but the first of each set
    scored once (see the module docstring), the batches split over processes as `split` says
    (`evaluate_set`). Runs without gradients in eval mode; the model's training mode is restored
    afterwards. `progress`, if given, is told of every forward (`EvalProgress`); `observe(domain)`,
    if given, gives the `Observer` of that domain's batches."""
    if batch_size < 1:
        raise EvalError(f"batch_size must be at least 1, got {batch_size}")
    check_seq_len(model, seq_len)
    world = split[1]
    counter = _ForwardCounter(progress or (lambda *_: None), total=sum(
        forwards_per_process(batch_count(s.tokens.numel(), seq_len, batch_size), world) for s in sets.values()))
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            results = {}
            for name, s in sets.items():
                counter.start(name)
                results[name] = evaluate_set(model, s.tokens, s.n_bytes, seq_len=seq_len,
                                             batch_size=batch_size, device=device,
                                             autocast_dtype=autocast_dtype, split=split,
                                             after_forward=counter.tick,
                                             observe=None if observe is None else observe(name))
            return results
    finally:
        model.train(was_training)
