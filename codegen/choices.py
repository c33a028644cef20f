"""The table from kernel-key choices to template holes, with an explicit "unsupported" channel.

`plan(key)` turns a `KernelKey` into the holes of one template (`KernelPlan`), or raises
`Unsupported` with the reason. The reasons come from `seqdsl.ir.support.triton`, the one
statement of what the generated kernels accept (tests/kernels/test_codegen.py checks that the two
agree on every key the IR can produce); the snippet tables below only say how each accepted
choice is written.

This module imports neither torch nor triton.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from seqdsl.errors import SeqError
from seqdsl.ir import support
from seqdsl.ir.key import KernelKey, SelectKey, runs_topk_kernels, selection_group, shared_kv_group, sliding_window


class Unsupported(SeqError):
    """The key asks for something the generated kernels do not do (the reason says what)."""


# visibility -> (predicate of {queries} and {keys}, words); rendered twice: the "causal" hole
# with queries as rows (pos[:, None], cols[None, :]), "causal_t" with keys as rows (the
# keys x queries tiles of the backward's dk/dv loops)
CAUSAL_SNIPPETS = {
    "full": ("{keys} <= {queries}", "j <= i (causal)"),
    # element selection only (support.triton); WINDOW and SINK are the template's constexprs
    "window": ("({keys} <= {queries}) & ((({queries}) - ({keys}) < WINDOW) | ({keys} < SINK))",
               "j <= i and (i - j < window or j < sink) (a sliding window and its sink tokens)"),
}
# chunk score -> template switch ("lse" on the top-k template only: support.triton)
CHUNK_SCORES = {"max": "exact", "mean": "approx", "lse": "lse"}
# (grad, value_grad) -> the element template's gradient mode
ELEMENT_GRADS = {("ste", "hard"): "ste_hard", ("ste", "soft"): "ste_soft",
                 ("none", "hard"): "none", ("none", "soft"): "none"}


@dataclass(frozen=True)
class KernelPlan:
    template: str  # file under codegen/templates/
    holes: tuple[tuple[str, object], ...]  # (name, value), in a stable order

    def hole(self, name: str):
        return dict(self.holes)[name]


def _float(x: float) -> str:
    """A Python literal that round-trips the float exactly (repr does)."""
    return repr(float(x))


def element_slots(k: int) -> int:
    """The top-k element kernels' running list: a power of two >= max(k, 16), also the key tile
    the selection scans (the list and a tile merge by one sort)."""
    return max(16, _pow2_at_least(k))


# From this top-k list width on, the chunk selection by mean keys merges a tile of candidates
# into its list by one sort instead of offering them one at a time (H200, 2026-11-28: at k = 16
# the sort made the shared selection's forward 7.7 -> 6.3 ms at 8K; at k = 3 it made MoBA's
# forward slower, 6.6 -> 8.1 ms at 64K; k 5 to 8, width 8, not measured)
SORTED_SELECT_SLOTS = 8


def sorted_select(sel: SelectKey) -> bool:
    """Whether the top-k chunk kernels keep the running list of a mean-key selection as sorted
    ranks (a tile merged by one sort) rather than offering each candidate (SORTED_SELECT_SLOTS)."""
    return sel.score == "mean" and chunk_slots(sel.k) >= SORTED_SELECT_SLOTS


def chunk_slots(k: int) -> int:
    """The top-k chunk kernels' running list: the power of two >= k (KSLOTS)."""
    return _pow2_at_least(k)


def _pow2_at_least(n: int) -> int:
    return 1 << (n - 1).bit_length()


def plan(key: KernelKey) -> KernelPlan:
    """The template and its holes for `key`; `Unsupported` when the support table says no."""
    verdict = support.triton(key)
    if not verdict.ok:
        raise Unsupported(f"no generated kernel for {key.slug()}: {verdict.reason}")
    sel = key.select
    causal, causal_doc = CAUSAL_SNIPPETS[key.visibility]
    holes: dict[str, object] = {
        "name": key.slug(),
        "factor": _float(key.scale / key.temperature * math.log2(math.e)),
        "grad_scale": _float(key.scale / key.temperature),
        "dk": key.feature_dim, "dv": key.head_dim,
        "causal": causal.format(queries="pos[:, None]", keys="cols[None, :]"),
        "causal_t": causal.format(queries="pos[None, :]", keys="cols[:, None]"), "causal_doc": causal_doc,
        # window(w, sink=n): 0 for full visibility (the template's loops then start at key 0)
        "window": sliding_window(key) or 0, "sink": key.sink,
        "kv_group": shared_kv_group(key),  # query heads per key/value head, read in place
    }
    if sel.over == "element" and sel.k > 1:  # grad = none only (support.triton)
        holes.update(topk=sel.k, kslots=element_slots(sel.k))
        return KernelPlan("topk_element.py.jinja", tuple(holes.items()))
    if sel.over == "element":
        holes["grad"] = ELEMENT_GRADS[(sel.grad, sel.value_grad)]
        return KernelPlan("element.py.jinja", tuple(holes.items()))
    if runs_topk_kernels(sel):  # k > 1, lse scores, or sink tokens
        # `sink` here is the selection's own (top(..., sink=n)): a window's never reaches chunk
        # selection (support.triton refuses windows there)
        holes.update(chunk=sel.chunk, score=CHUNK_SCORES[sel.score], local=sel.local, topk=sel.k,
                     kslots=chunk_slots(sel.k), ste=sel.grad == "ste", sink=sel.sink,
                     sink_block=support.sink_tile(sel), share=selection_group(key), sorted_select=sorted_select(sel),
                     # the group's heads as one tile's rows (tl.dot takes 16 rows or more)
                     group_pass=support.group_attention(key), group_rows=max(16, _pow2_at_least(selection_group(key))))
        return KernelPlan("topk_chunk.py.jinja", tuple(holes.items()))
    holes.update(chunk=sel.chunk, score=CHUNK_SCORES[sel.score], local=sel.local, ste=sel.grad == "ste",
                 inv_temperature=_float(1.0 / key.temperature), scale=_float(key.scale))
    return KernelPlan("chunk.py.jinja", tuple(holes.items()))
