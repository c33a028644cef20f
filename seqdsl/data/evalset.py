"""Held-out text of one domain, tokenized: what evaluation measures a model's loss on.

The contract between the data pipeline (which builds these from shards or the embedded corpus)
and `seqdsl.eval` (which computes nats per token and bits per byte on them).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class EvalSet:
    domain: str  # e.g. "web", "arxiv", "code"; "val" names the training domains' held-out split
    tokens: torch.Tensor  # (N,) int64: held-out tokens of this domain, never seen in training
    n_bytes: int  # UTF-8 bytes of the text these tokens encode (bits per byte = nats * N / (ln 2 * bytes))
    in_domain: bool = False  # True for the training domains' validation split
