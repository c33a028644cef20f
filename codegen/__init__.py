"""seqdsl.codegen: Triton source rendered from a kernel key (torch- and triton-free).

    render(key) -> Rendered      the readable module for one mixer's Top-1 kernels
    plan(key)   -> KernelPlan    the template and holes (codegen/choices.py), or Unsupported

Templates live in codegen/templates/ (a notation legend at the top of each). The runtime
(seqdsl.kernels) writes the rendered text to its cache, imports it, and launches the kernels.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from pathlib import Path

from seqdsl.codegen.choices import KernelPlan, Unsupported, plan
from seqdsl.ir.key import KernelKey

# Bump when the generator (this package's Python, not the templates) changes what it renders:
# the runtime's compile cache keys on it (templates are hashed by content).
GENERATOR_VERSION = "1"
TEMPLATE_DIR = Path(__file__).parent / "templates"

__all__ = ["GENERATOR_VERSION", "KernelPlan", "Rendered", "Unsupported", "plan", "render", "template_source"]


@dataclass(frozen=True)
class Rendered:
    key: KernelKey
    plan: KernelPlan
    source: str  # the Python/Triton module text

    @property
    def name(self) -> str:
        return self.key.slug()

    def digest(self, *extra: str) -> str:
        """Hash of (key, template source, rendered source, generator version, *extra): the cache
        key. The rendered source covers the templates the main one imports (common.jinja)."""
        h = hashlib.sha256()
        for part in (repr(self.key), template_source(self.plan.template), self.source, GENERATOR_VERSION, *extra):
            h.update(part.encode())
            h.update(b"\0")
        return h.hexdigest()[:16]


def template_source(name: str) -> str:
    return (TEMPLATE_DIR / name).read_text()


@functools.lru_cache(maxsize=None)
def _environment():
    """One environment per process: it caches the compiled templates (compiling one takes ~20 ms)
    and reloads a template whose file changed (jinja2's auto_reload)."""
    import jinja2

    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATE_DIR)), undefined=jinja2.StrictUndefined,
        trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True, autoescape=False)


def render(key: KernelKey) -> Rendered:
    """The Triton module for `key`, or `Unsupported` (with the support table's reason)."""
    kernel_plan = plan(key)
    holes = dict(kernel_plan.holes, version=GENERATOR_VERSION)
    source = _environment().get_template(kernel_plan.template).render(**holes)
    return Rendered(key, kernel_plan, source)
