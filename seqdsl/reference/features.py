"""Reference feature maps phi for the linear-weights family: score(q, k) = phi(q) . phi(k).

Shape legend
    x       (..., D)        a query or key, last dim = head dim D
    phi(x)  (..., F)        F = seqdsl.ir.key.feature_width(name, D)

The maps, numbered as in the code (names are the IR's `Dot.feature` values):

    (1) identity   phi(x) = x                                         F = D
    (2) elu1       phi(x) = elu(x) + 1          (positive: linear attention, Katharopoulos 2020)
    (3) relu       phi(x) = max(x, 0)           (non-negative, sparse)
    (4) taylor     phi(x) = [1, x, vec(x x^T) / sqrt(2)]               F = 1 + D + D^2
                   so that phi(q) . phi(k) = 1 + q.k + (q.k)^2 / 2,
                   the 2nd-order Taylor expansion of exp(q.k) (Based, Arora et al. 2024).

Scaling is not applied here: the caller scales x first (Based scales q and k by D^(-1/4) so that
the Taylor terms expand exp(q.k / sqrt(D))). The Taylor map keeps the full outer product rather
than the D(D+1)/2 symmetric half: twice the memory, but the identity above is plain to read.
"""

from __future__ import annotations

import math

from typing import get_args

import torch
import torch.nn.functional as F
from torch import Tensor

from seqdsl.ir.nodes import FeatureMap

FEATURE_MAPS: tuple[str, ...] = get_args(FeatureMap)


def feature_map(x: Tensor, name: str) -> Tensor:
    """phi(x) over the last dimension; differentiable, dtype and device of x."""
    if name == "identity":  # (1)
        return x
    if name == "elu1":  # (2) elu(x) + 1 > 0 everywhere, so normalised linear weights stay positive
        return F.elu(x) + 1.0
    if name == "relu":  # (3)
        return F.relu(x)
    if name == "taylor":  # (4)
        # [1, x, x (x) x / sqrt(2)]: the dot product of two such vectors is
        # 1 + x.y + sum_ab x_a x_b y_a y_b / 2 = 1 + x.y + (x.y)^2 / 2.
        ones = torch.ones_like(x[..., :1])
        outer = (x.unsqueeze(-1) * x.unsqueeze(-2)).flatten(-2) / math.sqrt(2.0)
        return torch.cat([ones, x, outer], dim=-1)
    raise ValueError(f"unknown feature map {name!r}; expected one of {FEATURE_MAPS}")
