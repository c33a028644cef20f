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

    def __add__(self, other: "RecallSplit") -> "RecallSplit":
        return RecallSplit(self.recall_nll + other.recall_nll, self.recall_tokens + other.recall_tokens,
                           self.other_nll + other.other_nll, self.other_tokens + other.other_tokens)

    @property
    def recall_loss(self) -> float | None:
        """Mean NLL of the recall tokens (nats/token); None when there were none."""
        return self.recall_nll / self.recall_tokens if self.recall_tokens else None

    @property
    def other_loss(self) -> float | None:
        return self.other_nll / self.other_tokens if self.other_tokens else None


def split_nll(nll: Tensor, inputs: Tensor, targets: Tensor) -> RecallSplit:
    """Per-token losses (B, S) of `targets` after `inputs`, summed over recall and other tokens."""
    mask = recall_mask(inputs, targets)
    return RecallSplit(float(nll[mask].sum()), int(mask.sum()), float(nll[~mask].sum()), int((~mask).sum()))


class RecallSplits:
    """The recall split of every domain an evaluation scores, gathered as it runs: pass it as
    `observe` to seqdsl/run/loss.py's `evaluate` (or `evaluate_records`), so the split covers
    exactly the windows the ordinary loss scores, in the same forwards, and the two losses
    weighted by their token counts add up to that loss."""

    def __init__(self) -> None:
        self.splits: dict[str, RecallSplit] = {}

    def fields(self, domain: str) -> dict:
        """The eval record's fields of `domain`'s split (metrics.jsonl; docs/evaluation.md)."""
        split = self.splits[domain]
        return {"recall_loss": split.recall_loss, "recall_tokens": split.recall_tokens, "other_loss": split.other_loss}

    def sum_over_processes(self, device) -> None:
        """Add every process's share of each domain's split (a torch.distributed group whose
        processes each scored some of the batches, seqdsl/run/loss.py: `evaluate_set`)."""
        import torch.distributed as dist

        domains = sorted(self.splits)  # the same order in every process: each scores every set
        t = torch.tensor([[s.recall_nll, s.recall_tokens, s.other_nll, s.other_tokens]
                          for s in (self.splits[d] for d in domains)], dtype=torch.float64, device=device)
        dist.all_reduce(t)
        for d, (rn, rt, on, ot) in zip(domains, t.tolist()):
            self.splits[d] = RecallSplit(rn, int(rt), on, int(ot))

    def __call__(self, domain: str):
        self.splits[domain] = RecallSplit(0.0, 0, 0.0, 0)

        def observe(nll: Tensor, inputs: Tensor, targets: Tensor) -> None:
            self.splits[domain] = self.splits[domain] + split_nll(nll, inputs, targets)

        return observe
