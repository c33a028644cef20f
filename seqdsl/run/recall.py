"""Recall-token loss: the loss on tokens that complete a bigram seen earlier in the same context.

Zoology (Arora et al. 2023, §3) splits the next-token loss of real text in two: *recall* tokens
(Zoology's "AR hits"), where the pair (previous token, this token) already occurred earlier in
the window, so the token can be copied from context by associative recall; and the *other*
tokens. Gated convolutions and recurrent models close most of their gap to attention on the
other tokens and keep it on the recall tokens, which is why the split says more about what a
mixer can select than the mean loss does.

Definition here, per window (what the model sees; nothing carries across windows): inputs x and
targets y, (B, S); target t is a recall token when (x[t], y[t]) = (x[j], y[j]) for some j < t.
(Zoology further separates bigrams frequent in the training data; that needs training counts
and is not done here.)

Shape legend: B windows, S positions, V vocab.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


def recall_mask(inputs: Tensor, targets: Tensor) -> Tensor:
    """(B, S) bool: whether each target completes a bigram that occurred earlier in its row."""
    vocab = int(torch.maximum(inputs.max(), targets.max())) + 1 if inputs.numel() else 1
    bigram = inputs.long() * vocab + targets.long()  # (B, S), one id per (input, target) pair
    # a stable sort puts the occurrences of one bigram together in position order: every one
    # but the first of its run is a repeat
    ids, order = bigram.sort(dim=1, stable=True)
    repeat = torch.zeros_like(ids, dtype=torch.bool)
    repeat[:, 1:] = ids[:, 1:] == ids[:, :-1]
    mask = torch.zeros_like(repeat)
    mask.scatter_(1, order, repeat)
    return mask


@dataclass(frozen=True)
class RecallSplit:
    """Summed NLL (nats) and token counts of the recall tokens and of the others."""

    recall_nll: float
    recall_tokens: int
    other_nll: float
    other_tokens: int

    @property
    def recall_loss(self) -> float | None:
        """Mean NLL of the recall tokens (nats/token); None when there were none."""
        return self.recall_nll / self.recall_tokens if self.recall_tokens else None

    @property
    def other_loss(self) -> float | None:
        return self.other_nll / self.other_tokens if self.other_tokens else None


def _sums(nll: Tensor, inputs: Tensor, targets: Tensor) -> Tensor:
    """(4,) float64 on nll's device: recall NLL, recall tokens, other NLL, other tokens."""
    mask = recall_mask(inputs, targets)
    nll = nll.to(torch.float64)
    return torch.stack([nll[mask].sum(), mask.sum().to(nll.dtype), nll[~mask].sum(), (~mask).sum().to(nll.dtype)])


def _split(sums: Tensor) -> RecallSplit:
    rn, rt, on, ot = sums.tolist()
    return RecallSplit(rn, int(rt), on, int(ot))


def split_nll(nll: Tensor, inputs: Tensor, targets: Tensor) -> RecallSplit:
    """Per-token losses (B, S) of `targets` after `inputs`, summed over recall and other tokens."""
    return _split(_sums(nll, inputs, targets))


class RecallSplits:
    """The recall split of every domain an evaluation scores, gathered as it runs: pass it as
    `observe` to seqdsl/run/loss.py's `evaluate` (or `evaluate_records`), so the split covers
    exactly the windows the ordinary loss scores, in the same forwards, and the two losses
    weighted by their token counts add up to that loss. The sums stay on the device until read
    (no host sync per batch)."""

    def __init__(self) -> None:
        self._sums: dict[str, Tensor | None] = {}

    def split(self, domain: str) -> RecallSplit:
        sums = self._sums[domain]
        return RecallSplit(0.0, 0, 0.0, 0) if sums is None else _split(sums)

    def fields(self, domain: str) -> dict:
        """The eval record's fields of `domain`'s split (metrics.jsonl; docs/evaluation.md)."""
        split = self.split(domain)
        return {"recall_loss": split.recall_loss, "recall_tokens": split.recall_tokens, "other_loss": split.other_loss}

    def sum_over_processes(self, device) -> None:
        """Add every process's share of each domain's split (a torch.distributed group whose
        processes each scored some of the batches, seqdsl/run/loss.py: `evaluate_set`)."""
        import torch.distributed as dist

        for domain in sorted(self._sums):  # the same order in every process: each scores every set
            sums = self._sums[domain]
            total = torch.zeros(4, dtype=torch.float64, device=device) if sums is None else sums.to(device)
            dist.all_reduce(total)
            self._sums[domain] = total

    def __call__(self, domain: str):
        self._sums[domain] = None

        def observe(nll: Tensor, inputs: Tensor, targets: Tensor) -> None:
            part = _sums(nll, inputs, targets)
            before = self._sums[domain]
            self._sums[domain] = part if before is None else before + part

        return observe
