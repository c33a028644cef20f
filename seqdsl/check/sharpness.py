"""How sharply a softmax mixer's weights can concentrate, computed from the spec alone.

One place decides what "sharp" means, so that every rule (and every way of writing a spec) is
judged alike: `dot(scale = s)` and `softmax(temperature = T)` both multiply the logits, and only
their product matters. Two numbers come out:

- the *effective inverse temperature* beta: the factor on q.k relative to the standard scaled
  dot product, 1/sqrt(Dk) at temperature 1. beta = (scale * sqrt(Dk)) / T, with scale = 1/sqrt(Dk)
  for `scale = auto` (beta = 1/T). beta < 1 is a flattened softmax: to select a token the model
  must learn score gaps 1/beta times larger than a standard Transformer needs.
- with `qk_norm`, a *bound on the logits*: q and k are RMS-normalised per head (seqdsl/lower/
  mixer.py: torch.nn.RMSNorm(Dk) with a learnable per-channel gain), so |q.k| <= g_q g_k Dk with
  g the largest gain, and every logit lies in [-L, L] with L = |scale| g_q g_k Dk / T. The gains
  start at 1 and are learnable; the checker ASSUMES THEY STAY AT 1 (NORM_GAIN), i.e. it judges
  what the spec gives at initialisation, and says so in its messages. With N keys, the largest
  weight one key can take is 1 / (1 + (N - 1) e^(-2L)) (that key at +L, all others at -L).

Nothing here imports torch: `seqdsl check` runs anywhere.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from seqdsl.ir import nodes

# The RMSNorm gain assumed for q and k when bounding the logits under `qk_norm`: torch's RMSNorm
# weights start at 1. They are learnable, so a model can lift the bound by growing them; the
# checker judges the spec as written (at initialisation), as N002 judges a temperature that a
# model could also compensate for by learning larger scores.
NORM_GAIN = 1.0

# A key can be *selected* when it can hold more weight than all other keys together.
SELECTABLE_WEIGHT = 0.5

# Relative tolerance when comparing beta with 1: `dot(scale = 1/(T sqrt(Dk)))` and
# `softmax(temperature = T)` are the same mixer and must get the same verdict despite rounding.
_REL_TOL = 1e-9


@dataclass(frozen=True)
class Sharpness:
    """What the spec lets the softmax weights do (see the module docstring)."""

    inverse_temperature: float  # beta, relative to q.k / sqrt(Dk) at temperature 1
    keys: int  # how many keys the forward softmax spreads over, at the context
    logit_bound: float | None  # L with qk_norm (at NORM_GAIN); None when unbounded
    max_weight: float | None  # the largest weight one key can take; None when unbounded

    @property
    def flattened(self) -> bool:
        """Flatter than the standard scaled dot product at temperature 1."""
        return self.inverse_temperature < 1.0 and not math.isclose(
            self.inverse_temperature, 1.0, rel_tol=_REL_TOL)

    @property
    def capped(self) -> bool:
        """QK-norm bounds the logits so tightly that no key can outweigh the others together."""
        return self.max_weight is not None and self.max_weight < SELECTABLE_WEIGHT


def _temperature(mixer: nodes.Mixer) -> float:
    w = mixer.weights
    if isinstance(w, nodes.Softmax):
        return nodes.initial_value(w.temperature)  # a learned one is judged where it starts
    if isinstance(w, (nodes.Linear, nodes.NormalizedLinear)):
        return 1.0  # no temperature: the recurrent family is judged by N001
    raise TypeError(f"unhandled weights {w!r}")


def _scale(mixer: nodes.Mixer, key_dim: int) -> float:
    """The factor on q.k; the other relations have no scale parameter: the standard one."""
    rel = mixer.relation
    if isinstance(rel, nodes.Dot) and rel.scale != "auto":
        # a negative scale flips the sign, not the sharpness; a learned one is judged where it starts
        return abs(nodes.initial_value(rel.scale))
    return 1.0 / math.sqrt(key_dim)


def effective_inverse_temperature(mixer: nodes.Mixer, key_dim: int) -> float:
    """beta = (scale * sqrt(Dk)) / T: 1 for the standard scaled dot product at temperature 1."""
    return _scale(mixer, key_dim) * math.sqrt(key_dim) / _temperature(mixer)


def qk_norm_logit_bound(mixer: nodes.Mixer, key_dim: int, gain: float = NORM_GAIN) -> float | None:
    """L = |scale| g^2 Dk / T: every logit lies in [-L, L] under `qk_norm` (None without it)."""
    rel = mixer.relation
    if not (isinstance(rel, nodes.Dot) and rel.qk_norm):
        return None
    return _scale(mixer, key_dim) * gain * gain * key_dim / _temperature(mixer)


def max_softmax_weight(logit_bound: float, keys: int) -> float:
    """The largest softmax weight one of `keys` keys can take when logits lie in [-L, L]."""
    if keys <= 1:
        return 1.0
    # 1 / (1 + (N-1) e^(-2L)), written to stay finite for any L >= 0
    return 1.0 / (1.0 + (keys - 1) * math.exp(-2.0 * logit_bound))


def _visible(mixer: nodes.Mixer, context: int) -> int:
    vis = mixer.visibility
    if isinstance(vis, nodes.Full):
        return context
    if isinstance(vis, nodes.Window):  # the last query's window and the sink tokens before it
        return min(vis.size + vis.sink, context)
    if isinstance(vis, nodes.ChunkLocal):
        return min(vis.size, context)
    raise TypeError(f"unhandled visibility {vis!r}")


def forward_keys(mixer: nodes.Mixer, context: int) -> int:
    """How many keys the forward softmax of the last query spreads over: the visible ones, or
    the selected ones (k elements; k chunks, plus the own chunk with `local` and the sinks)."""
    visible = _visible(mixer, context)
    sel = mixer.select
    if isinstance(sel, nodes.NoSelect):
        return visible
    if isinstance(sel, nodes.Top) and isinstance(sel.over, nodes.Element):
        return min(sel.k, visible)
    if isinstance(sel, nodes.Top) and isinstance(sel.over, nodes.Chunk):
        return min(visible, (sel.k + int(sel.local)) * sel.over.size + sel.sink)
    raise TypeError(f"unhandled select {sel!r}")


def sharpness(mixer: nodes.Mixer, key_dim: int, context: int) -> Sharpness:
    keys = forward_keys(mixer, context)
    bound = qk_norm_logit_bound(mixer, key_dim)
    return Sharpness(
        inverse_temperature=effective_inverse_temperature(mixer, key_dim), keys=keys,
        logit_bound=bound, max_weight=None if bound is None else max_softmax_weight(bound, keys))
