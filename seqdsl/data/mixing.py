"""The order in which the training pieces of several domains are laid end to end: interleaved in
proportion to each domain's size, so that every stretch of training sees the whole mix.

Each domain keeps its own pieces in the source's order. Piece j of domain d, with b bytes of d's
pieces before it and s bytes itself, sits at the fraction (b + s / 2) / B_d of its domain (B_d:
all of d's bytes); the stream takes the pieces by that fraction (ties: the source's order). At any
point of an epoch every domain has then given about the same share of its own bytes, so the mix of
any stretch of steps is the domains' natural proportions. With one domain the order is the
source's.

Laid end to end in the source's order instead (its files are read in sorted path order), a
mixed-domain run would train on one domain after another: a curriculum, not a mix, and one that
may end before the last domain is reached.

A pure function of the pieces' domains and sizes: the token cache and the on-the-fly packer give
the same stream, and a resumed run finds the same place. Sizes are UTF-8 bytes plus one for the
end-of-document token (`piece_bytes`), the token cache's own measure.
"""

from __future__ import annotations

import numpy as np


def piece_bytes(text: str) -> int:
    """A piece's size for the mix: its UTF-8 bytes and one for its end-of-document token."""
    return len(text.encode("utf-8")) + 1


def mixed_order(domains: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Indices of the pieces in stream order, from each piece's domain (any integer label) and
    size, both (N,) in the source's order."""
    domains = np.asarray(domains)
    sizes = np.asarray(sizes, dtype=np.float64)
    labels = np.unique(domains)
    if len(labels) <= 1:
        return np.arange(len(domains))
    position = np.empty(len(sizes))
    for label in labels:
        mine = np.flatnonzero(domains == label)
        own = sizes[mine]
        position[mine] = (np.cumsum(own) - own / 2) / own.sum()
    return np.lexsort((np.arange(len(sizes)), position))  # by position, then the source's order
