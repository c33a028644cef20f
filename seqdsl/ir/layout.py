"""How a mixer's heads fit into a model: one torch-free answer for the checker (M003) and the
lowering (MixerModule), so the two can never disagree on what can be built."""

from __future__ import annotations

from dataclasses import dataclass

from seqdsl.ir import nodes


class LayoutError(ValueError):
    """The heads do not fit; the message says why and what to change."""

    def __init__(self, message: str, fix: str):
        super().__init__(message)
        self.fix = fix


@dataclass(frozen=True)
class HeadLayout:
    heads: int  # H
    key_dim: int  # Dk: state rows / query-key width per head
    head_dim: int  # Dv: value width per head
    qk_groups: int  # G: distinct query/key projections, each shared by H / G heads
    kv_groups: int  # K: distinct key/value projections, each shared by H / K heads (GQA)

    # Projections per tensor: q has G, v has K, k has whichever is shared (ir/conflicts.py
    # refuses a mixer that sets both, so at most one of G and K is below H).

    @property
    def key_groups(self) -> int:
        """Distinct key projections (and key heads the decoding cache stores)."""
        return min(self.qk_groups, self.kv_groups)


def head_layout(mixer: nodes.Mixer, d_model: int) -> HeadLayout:
    """The mixer's head layout inside a model of width `d_model`, or LayoutError."""
    Dv = mixer.head_dim
    if mixer.heads == "auto":
        inner = mixer.expand * d_model
        if inner % Dv:
            raise LayoutError(
                f"mixer {mixer.name}: heads = auto needs expand x d_model = {mixer.expand} x "
                f"{d_model} = {inner} to be a multiple of head_dim {Dv}",
                f"set `heads` in mixer {mixer.name}, or a head_dim that divides {inner}")
        H = inner // Dv
    else:
        H = mixer.heads
    G = H if mixer.qk_groups == "auto" else mixer.qk_groups
    if H % G:
        raise LayoutError(f"mixer {mixer.name}: qk_groups = {G} does not divide its {H} heads",
                          f"set qk_groups in mixer {mixer.name} to a divisor of {H}")
    K = H if mixer.kv_groups == "auto" else mixer.kv_groups
    if H % K:
        raise LayoutError(f"mixer {mixer.name}: kv_groups = {K} does not divide its {H} heads",
                          f"set kv_groups in mixer {mixer.name} to a divisor of {H}")
    Dk = Dv if mixer.key_dim == "auto" else mixer.key_dim
    return HeadLayout(H, Dk, Dv, G, K)
