"""Spans of IR nodes, kept beside the IR so that IR equality stays structural.

Keys are paths: ("mixer", NAME) for a declaration's name, ("mixer", NAME, SLOT) for the
assignment that gave a slot its value (in whichever file and declaration it was written, so an
inherited value points at the base), ("mixer", NAME, SLOT, PARAM) for one argument of it.
`get` falls back to the longest known prefix, so a rule can always ask for the most precise
place and gets the best one there is.
"""

from __future__ import annotations

from seqdsl.errors import Span


class SourceMap:
    def __init__(self) -> None:
        self._spans: dict[tuple[str, ...], Span] = {}

    def add(self, path: tuple[str, ...], span: Span) -> None:
        self._spans[path] = span

    def get(self, *path: str) -> Span | None:
        for n in range(len(path), 0, -1):
            span = self._spans.get(tuple(path[:n]))
            if span is not None:
                return span
        return None

    def copy_subtree(self, src: tuple[str, ...], dst: tuple[str, ...]) -> None:
        """Make every span under `src` also known under `dst` (inheritance)."""
        n = len(src)
        for path, span in list(self._spans.items()):
            if path[:n] == src and dst + path[n:] not in self._spans:
                self._spans[dst + path[n:]] = span
