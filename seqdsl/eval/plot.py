"""The comparison plot: training loss (x) against OOD loss (y), one panel per OOD domain (the
training domains' held-out loss when no run has an OOD evaluation), one curve per run, evaluations joined in step order; dotted vertical lines, named in each panel's
legend, mark the levels of the matched-loss table. Rendered with matplotlib's Agg backend (no display needed)."""

from __future__ import annotations

import math
from pathlib import Path

from seqdsl.errors import SeqError, SeqFileError
from seqdsl.eval.compare import UNIT, Comparison


def level_legend(cmp: Comparison) -> str:
    """The legend entry of the dotted level lines."""
    return "matched-loss levels of the table: " + ", ".join(f"{lv:.3f}" for lv in cmp.levels)


def pyplot():
    """matplotlib's pyplot on the Agg backend (no display needed), or SeqError without it."""
    try:
        import matplotlib
    except ImportError:
        raise SeqError("the plot needs matplotlib",
                       hint='pip install "seqdsl[train]", or pass --no-plot') from None
    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    return plt


def plot_file(path: str | Path) -> Path:
    """The file a plot named `path` is written to, checked before any work: with no suffix
    matplotlib writes PNG and adds ".png", so the name says so; a suffix matplotlib cannot write
    is one SeqError naming those it can."""
    pyplot()
    from matplotlib.backend_bases import FigureCanvasBase

    out = Path(path)
    if out.is_dir():
        raise SeqError(f"--plot {out} is a directory", hint="name a file, e.g. compare.png")
    if not out.suffix:
        return out.with_name(out.name + ".png")
    formats = FigureCanvasBase.get_supported_filetypes()
    if out.suffix[1:].lower() not in formats:
        raise SeqError(f"cannot write a plot as {out.suffix} ({out})",
                       hint="name a file ending in one of " + ", ".join(f".{f}" for f in sorted(formats)))
    return out


def plot(cmp: Comparison, path: str | Path) -> Path:
    pyplot()
    return save_figure(figure(cmp), path)


def save_figure(fig, path: str | Path) -> Path:
    """Write `fig` to `path` (its folder made) and close it; an unwritable path is one readable
    error. Shared by every seqdsl plot."""
    from matplotlib import pyplot as plt

    out = Path(path)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(out, dpi=120)
    except OSError as err:
        raise SeqFileError(f"cannot write the plot {out}: {err.strerror or err}") from None
    finally:
        plt.close(fig)
    return out


def figure(cmp: Comparison):
    """The comparison's matplotlib figure (the caller closes it)."""
    plt = pyplot()
    # OOD panels; runs evaluated on their training domain only get its held-out panels instead
    in_domain = not cmp.domains
    domains = cmp.in_domains if in_domain else cmp.domains
    if not domains:
        raise SeqError("no evaluations to plot",
                       hint="runs need eval records (kind = eval) after a training step in metrics.jsonl")
    cols = min(3, len(domains))
    rows = math.ceil(len(domains) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 4.2 * rows), squeeze=False)
    for ax, domain in zip(axes.flat, domains):
        for c in cmp.curves:
            points = (c.in_domain if in_domain else c.domains).get(domain, ())
            if not points:
                continue
            style = dict(linewidth=2.2) if c.run.name == cmp.baseline else dict(linewidth=1.4)
            label = c.run.name if c.run.label == c.run.name else f"{c.run.name} ({c.run.label})"
            label += ", baseline" if c.run.name == cmp.baseline else ""
            ax.plot([p.train_loss for p in points], [p.ood for p in points], marker="o", markersize=3.5,
                    label=label, **style)
        for k, level in enumerate(cmp.levels):  # one legend entry names every level line
            ax.axvline(level, color="grey", linestyle=":", linewidth=1,
                       label=level_legend(cmp) if k == 0 else "_nolegend_")
        kind = "in-domain, held out" if in_domain else "OOD"
        ax.set_title(f"{kind}: {domain}")
        ax.set_xlabel("training loss (nats/token)")
        ax.set_ylabel(f"{kind} {cmp.metric} ({UNIT[cmp.metric]})")
        ax.invert_xaxis()  # training proceeds left to right
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    for ax in list(axes.flat)[len(domains):]:
        ax.set_visible(False)
    fig.tight_layout()
    return fig
