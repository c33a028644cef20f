"""FLOPs per token of a model, from the IR: what each layer's kernels compute, for MFU.

One FLOP is one multiply or one add (a multiply-add counts 2). Counts are per token, averaged
over the T positions of a training sequence of length T. `docs/flops.md` gives each formula's
reasoning and sources; in short:

- matmuls (projections, MLP, output head): 2 FLOPs per weight per token; the embedding lookup
  is free; norms, rope, gates, activations, softmax exponentials and decays are elementwise and
  left out (under 1% of the total at the presets' sizes).
- the mixing stage (3) is counted per query position i, as the *work the algorithm does*:
    softmax attention   2 (F + Dv) H per visible key (scores q.k, then the weighted sum of v)
    top-k element       scores of every visible key (the arg-max needs them all) + k values
    top-k chunk         Exact (max/lse): scores of every key in the candidate chunks;
                        Approx (mean): one score per candidate chunk's mean key; then
                        attention over the selected chunks (+ the query's own chunk and
                        the sink tokens)
    recurrent family    the chunk-parallel form with chunks of C = 64 (flash-linear-attention's
                        kernels): C x C intra-chunk blocks, state reads/writes of size F x Dv
- conventions for the attention-like terms:
    "causal" (default)  query i is charged for the keys it can see: i + 1 under full causal
                        visibility, i.e. about T/2 on average (a kernel that skips masked blocks).
    "dense"             every query is charged as the last one (T keys under full visibility):
                        the PaLM / Chinchilla / nanoGPT convention 6N + 12 L d T, which the
                        published MFU figures (llm.c, nanochat) use.
- training = forward + backward; backward = 2 x forward (the standard 3x-forward convention),
  except where the selection's backward differs from its forward (top-k: see `_select_backward`).

This module imports neither torch nor triton.

Shape names: H heads, Dk key width, Dv value width, F feature width of phi(k) (= Dk for
identity), G query/key groups, d d_model, V vocab, T training context, C chunk size.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Literal

from seqdsl.ir import nodes
from seqdsl.ir.key import KernelKey, chunk_size, selection, window_size
from seqdsl.ir.plan import MixerPlan, mixer_plan, swiglu_hidden

Convention = Literal["causal", "dense"]
CONVENTIONS: tuple[str, ...] = ("causal", "dense")

# Chunk length of the recurrent family's chunk-parallel kernels (fla's chunk_* ops and
# seqdsl/reference/recurrent.py's chunked form both default to 64).
RECURRENT_CHUNK = 64

@dataclass(frozen=True)
class Flops:
    forward: float
    backward: float

    @property
    def training(self) -> float:
        return self.forward + self.backward

    def __add__(self, other: "Flops") -> "Flops":
        return Flops(self.forward + other.forward, self.backward + other.backward)

    def scaled(self, n: float) -> "Flops":
        return Flops(self.forward * n, self.backward * n)


def matmul(weights: float) -> Flops:
    """A dense layer of `weights` weights applied to one token: 2 FLOPs per weight forward,
    twice that backward (gradients for the input and for the weights)."""
    return Flops(2.0 * weights, 4.0 * weights)


@dataclass(frozen=True)
class FlopCount:
    """FLOPs per token of a model at context `seq_len`, itemised."""

    model: str
    seq_len: int
    convention: Convention
    items: dict[str, Flops] = field(default_factory=dict)  # e.g. "mixing", "projections", "mlp", "head"

    @property
    def forward(self) -> float:
        return sum(f.forward for f in self.items.values())

    @property
    def training(self) -> float:
        return sum(f.training for f in self.items.values())


# --- the mixing stage, per query position -------------------------------------------------------


def _visible(key: KernelKey, i: int) -> int:
    """Keys query i (0-based) sees under the mixer's visibility."""
    if key.visibility == "window":
        window = window_size(key)
        # and the sink tokens that have left the window: j < sink with j <= i - window
        return min(i + 1, window) + max(0, min(key.sink, i - window + 1))
    if key.visibility == "chunk_local":
        return i % window_size(key) + 1
    return i + 1


def _attention(key: KernelKey, keys: int) -> float:
    """Forward FLOPs of softmax attention of one query over `keys` keys, all heads. A
    `positional` relation's scores are a learned per-distance table, read, not computed."""
    score_width = 0 if key.relation == "positional" else key.feature_dim
    return 2.0 * key.heads * (score_width + key.head_dim) * keys


def _softmax_mixing(key: KernelKey, i: int) -> Flops:
    fwd = _attention(key, _visible(key, i))
    return Flops(fwd, 2.0 * fwd)


def _element_mixing(key: KernelKey, i: int) -> Flops:
    sel, H = selection(key), key.heads
    vis = _visible(key, i)
    picked = min(sel.k, vis)
    scan = 2.0 * H * key.feature_dim * vis  # every visible score, to find the arg-max
    forward = scan + 2.0 * H * key.head_dim * picked
    if sel.grad == "ste":
        # the straight-through backward differentiates the softmax surrogate over all visible
        # keys: the backward of dense attention over them
        backward = 2.0 * _attention(key, vis)
    elif sel.k == 1:
        backward = 1.0 * H * key.head_dim  # q and k get no gradient; dv_argmax += dO
    else:
        backward = 2.0 * _attention(key, picked)  # the softmax inside the selected keys
    return Flops(forward, backward)


def _chunk_mixing(key: KernelKey, i: int) -> Flops:
    sel, H, Fk = selection(key), key.heads, key.feature_dim
    c = chunk_size(sel)
    ci, r = divmod(i, c)  # the query's chunk, and its offset inside it
    if sel.local:
        # candidates: the ci earlier (complete) chunks; the own chunk's prefix is always attended
        cand_chunks, cand_keys = ci, ci * c
    else:
        # candidates include the own chunk, scored on its r + 1 visible keys
        cand_chunks, cand_keys = ci + 1, ci * c + r + 1
    # attended keys, counting the selected chunks as the earliest complete ones where there are
    # enough (an upper bound when local=False picks the partial own chunk): keys [0, chosen),
    # plus the own chunk's prefix [ci c, i] when it is attended (local, or local=False with
    # fewer candidates than k)
    chosen = min(sel.k, ci) * c
    own_attended = sel.local or sel.k > ci
    attended = chosen + (r + 1 if own_attended else 0)
    # the sink tokens j < sink, j <= i are a set union with those: only the ones past the chosen
    # chunks and before the attended own chunk are more keys (chunk 0, chosen, holds small sinks)
    sunk = min(sel.sink, i + 1)
    attended += max(0, min(sunk, ci * c if own_attended else i + 1) - chosen)
    if sel.score == "mean":
        # one score per candidate chunk, against its mean key; the means themselves cost one
        # add per key channel per token (kept once per key)
        scan = 2.0 * H * Fk * cand_chunks + H * Fk
        score_grad_keys = cand_chunks
    else:
        # max (Exact) and lse need every candidate key's score to score a chunk
        scan = 2.0 * H * Fk * cand_keys
        score_grad_keys = cand_chunks if sel.score == "max" else cand_keys
    attend = _attention(key, attended)
    backward = 2.0 * attend
    if sel.grad == "ste":
        # the gate's gradient reaches each candidate chunk's score: through its arg-max key (max),
        # its mean key (mean) or all its keys (lse): dq and dk of one q.k product each
        backward += 2.0 * 2.0 * H * Fk * score_grad_keys
    return Flops(scan + attend, backward)


def _recurrent_mixing(key: KernelKey, seq_len: int) -> Flops:
    """Chunk-parallel form, per token, all heads (independent of the position)."""
    C = min(RECURRENT_CHUNK, seq_len)
    Fk, Dv = key.feature_dim, key.value_cols
    per_head = (2.0 * C * Fk      # Q K^T inside the chunk (the full C x C block)
                + 2.0 * C * Dv    # (masked, decayed) scores times V inside the chunk
                + 2.0 * Fk * Dv   # q S: the state's contribution from earlier chunks
                + 2.0 * Fk * Dv)  # S += K^T V at the chunk's end
    if key.update in ("delta", "rwkv7"):
        # WY representation (DeltaNet's chunk form): K K^T, the C x C triangular inverse
        # (C^3/3 per chunk), W = A (beta K), U = A (beta V), and U - W S
        per_head += 2.0 * C * Fk + C * C / 3.0 + 2.0 * C * Fk + 2.0 * C * Dv + 2.0 * Fk * Dv
    if key.update == "rwkv7":
        # the diagonal-plus-low-rank form has four C x C interaction blocks (q.k, q.b, a.k, a.b)
        # where the delta rule has two
        per_head += 2.0 * 2.0 * C * Fk
    if key.update == "bonus":
        per_head += 2.0 * Fk + 2.0 * Dv  # RWKV-6's (q . u k) v term
    fwd = key.heads * per_head
    return Flops(fwd, 2.0 * fwd)


@lru_cache(maxsize=256)
def mixing_flops(key: KernelKey, seq_len: int, convention: Convention = "causal") -> Flops:
    """Stage (3) FLOPs per token at context `seq_len`, averaged over its positions."""
    if convention not in CONVENTIONS:
        raise ValueError(f"unknown FLOP convention {convention!r} (one of {', '.join(CONVENTIONS)})")
    if seq_len < 1:
        raise ValueError(f"seq_len must be positive, got {seq_len}")
    if key.family == "recurrent":
        return _recurrent_mixing(key, seq_len)
    if key.family == "softmax":
        at = _softmax_mixing
    elif selection(key).over == "element":
        at = _element_mixing
    else:
        at = _chunk_mixing
    positions = range(seq_len) if convention == "causal" else [seq_len - 1]
    total = Flops(0.0, 0.0)
    for i in positions:
        total = total + at(key, i)
    return total.scaled(1.0 / len(positions))


# --- weights: projections, conv, MLP, head -------------------------------------------------------


def projection_weights(plan: MixerPlan) -> int:
    """Weights of the mixer's dense layers (biases left out), as its plan has the lowering build
    them: q/k/v/o projections, output gate, and the decay / beta / a projections."""
    return sum(p.weights for p in plan.linears)


def conv_flops(plan: MixerPlan) -> Flops:
    """The depthwise causal conv over the joined q, k, v projections (token shift is
    elementwise: left out)."""
    if plan.inputs.conv is None:
        return Flops(0.0, 0.0)
    return matmul(plan.inputs.channels * plan.inputs.conv)


def mlp_weights(model: nodes.Model) -> int:
    if not isinstance(model.mlp, nodes.SwiGLU):
        return 0
    hidden = swiglu_hidden(model.mlp, model.d_model)
    # transformer: gate_up (d x 2h) + down (h x d); rwkv7 channel mix: key (d x h) + value (h x d)
    return (3 if model.block == "transformer" else 2) * model.d_model * hidden


def flops_per_token(program: nodes.Program, model: nodes.Model, seq_len: int, *,
                    convention: Convention = "causal") -> FlopCount:
    """FLOPs per token of `model` trained at context `seq_len`, itemised as
    projections (mixer dense layers and conv), mixing (stage 3), mlp, and head."""
    zero = Flops(0.0, 0.0)
    proj, mix, mlp = zero, zero, zero
    for layer in range(model.layers):
        plan = mixer_plan(program.mixer(model.mixer[layer % len(model.mixer)]), model.d_model)
        proj = proj + matmul(projection_weights(plan)) + conv_flops(plan)
        mix = mix + mixing_flops(plan.key, seq_len, convention)
        mlp = mlp + matmul(mlp_weights(model))
    # the output head is a d x V matmul whether or not it is tied to the embedding; the
    # embedding itself is a lookup
    head = matmul(model.d_model * model.vocab)
    return FlopCount(model.name, seq_len, convention,
                     {"projections": proj, "mixing": mix, "mlp": mlp, "head": head})


# --- MFU -----------------------------------------------------------------------------------------

# Dense (no sparsity) bf16 tensor-core peaks from the vendors' data sheets, FLOP/s, matched
# against the device name as torch reports it (torch.cuda.get_device_name). The issue asks MFU
# against the *measured* bf16 GEMM rate too: pass that to `mfu` as `peak_flops`.
PEAK_BF16: tuple[tuple[str, float], ...] = (
    ("H100 PCIe", 756e12),
    ("H100", 989e12),  # SXM (and "H100 80GB HBM3")
    ("H200", 989e12),  # same compute as H100 SXM, more memory
    ("A100", 312e12),
)


def peak_bf16_flops(device_name: str) -> float | None:
    """Data-sheet dense bf16 peak of a device (first entry whose key is in its name), or None."""
    for key, peak in PEAK_BF16:
        if key.lower() in device_name.lower():
            return peak
    return None


def mfu(tokens_per_s: float, flops_per_token: float, peak_flops: float) -> float:
    """Model FLOPs utilisation: achieved model FLOP/s over `peak_flops` (a data-sheet peak from
    `peak_bf16_flops`, or a measured GEMM rate). Pass training FLOPs per token for training."""
    if peak_flops <= 0:
        raise ValueError(f"peak_flops must be positive, got {peak_flops}")
    return tokens_per_s * flops_per_token / peak_flops
