"""The papers' figures, drawn from their tables (:class:`~harness.analysis.paper.PaperTable` ``values``): the
figure shows exactly the entries of the table beside it (the same cells, the same selection), as bars (one
group per row, one bar per column: speed-ups per method) or lines (a swept parameter on the x axis)."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from harness.analysis.paper import PaperTable  # noqa: E402


def _name(key) -> str:
    return " · ".join(map(str, key)) if isinstance(key, tuple) else str(key)


def bars(t: PaperTable, ylabel: str, reference: float | None = None) -> Figure | None:
    """One group of bars per row of ``t``, one bar per column; ``reference`` a horizontal line (1: AR)."""
    v = t.values
    if v is None or v.empty or not np.isfinite(v.to_numpy(float)).any():
        return None
    fig, ax = plt.subplots(figsize=(max(4.0, 0.9 * v.size), 3.0))
    x, width = np.arange(len(v.index)), 0.8 / max(1, len(v.columns))
    for i, col in enumerate(v.columns):
        ax.bar(x + i * width, v[col].to_numpy(float), width, label=_name(col))
    ax.set_xticks(x + width * (len(v.columns) - 1) / 2, [_name(r) for r in v.index], rotation=20, ha="right",
                  fontsize=7)
    if reference is not None:
        ax.axhline(reference, color="grey", lw=0.8, ls="--")
    ax.set_ylabel(ylabel)
    ax.set_title(t.title, fontsize=8)
    ax.legend(fontsize=7)
    return fig


def lines(t: PaperTable, x_level: int, measures: list, xlabel: str) -> Figure | None:
    """One panel per measure (a column of ``t``), one line per block (the row levels but ``x_level``), the row
    level ``x_level`` (a swept parameter) on the x axis."""
    v = t.values
    if v is None or v.empty:
        return None
    measures = [m for m in measures if m in v.columns and np.isfinite(v[m].to_numpy(float)).any()]
    if not measures:
        return None
    fig, axes = plt.subplots(1, len(measures), figsize=(3.2 * len(measures), 2.6), squeeze=False)
    idx = v.index.to_frame(index=False)
    rest = [c for i, c in enumerate(idx.columns) if i != x_level]
    for ax, m in zip(axes[0], measures):
        frame = idx.assign(value=v[m].to_numpy(float))
        for key, g in (frame.groupby(rest, sort=False) if rest else [("", frame)]):
            xs = pd.to_numeric(g.iloc[:, x_level], errors="coerce")
            ax.plot(xs, g["value"], marker="o", label=_name(key))
        ax.set_xlabel(xlabel)
        ax.set_title(_name(m), fontsize=8)
    axes[0][0].legend(fontsize=6)
    fig.suptitle(t.title, fontsize=8)
    fig.tight_layout()
    return fig


def scatter(t: PaperTable, x: str, y: str, level: int, ylabel: str = "", xlabel: str = "") -> Figure | None:
    """Each row of ``t`` a point (column ``x`` against column ``y``), one colour per value of row level ``level``,
    one panel per block (row level 0)."""
    v = t.values
    if v is None or v.empty or x not in v.columns or y not in v.columns:
        return None
    idx = v.index.to_frame(index=False)
    frame = idx.assign(x=v[x].to_numpy(float), y=v[y].to_numpy(float))
    blocks_ = list(frame.groupby(idx.columns[0], sort=False))
    fig, axes = plt.subplots(1, len(blocks_), figsize=(3.4 * len(blocks_), 2.8), squeeze=False)
    for ax, (block, g) in zip(axes[0], blocks_):
        for value, gv in g.groupby(idx.columns[level], sort=False):
            ax.scatter(gv["x"], gv["y"], label=str(value), s=18)
        ax.set_title(str(block), fontsize=8)
        ax.set_xlabel(xlabel or _name(x))
        ax.set_ylabel(ylabel or _name(y))
    axes[0][0].legend(fontsize=7)
    fig.suptitle(t.title, fontsize=8)
    fig.tight_layout()
    return fig


def heatmap(t: PaperTable, xlabel: str, ylabel: str) -> Figure | None:
    """One heat map per block (row level 0): row level 1 against the columns, the entries' values annotated."""
    v = t.values
    if v is None or v.empty or not np.isfinite(v.to_numpy(float)).any():
        return None
    blocks_ = list(v.groupby(level=0, sort=False))
    fig, axes = plt.subplots(1, len(blocks_), figsize=(3.4 * len(blocks_), 2.8), squeeze=False)
    for ax, (block, g) in zip(axes[0], blocks_):
        data = g.to_numpy(float)
        im = ax.imshow(data, cmap="viridis", aspect="auto")
        ax.set_xticks(range(len(g.columns)), [_name(c) for c in g.columns])
        ax.set_yticks(range(len(g.index)), [_name(r[1]) for r in g.index])
        for (i, j), x in np.ndenumerate(data):
            if np.isfinite(x):
                ax.text(j, i, f"{x:.3g}", ha="center", va="center", fontsize=7, color="w")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_title(str(block), fontsize=8)
        fig.colorbar(im, ax=ax)
    fig.suptitle(t.title, fontsize=8)
    fig.tight_layout()
    return fig


def column_lines(t: PaperTable, xlabel: str, ylabel: str) -> Figure | None:
    """One line per column of ``t`` (a single-level row index: the x values), e.g. the optimal γ against α, one
    line per latency ratio c."""
    v = t.values
    if v is None or v.empty or not np.isfinite(v.to_numpy(float)).any():
        return None
    import textwrap

    fig, ax = plt.subplots(figsize=(4.8, 3.4))
    xs = pd.to_numeric(pd.Series(v.index), errors="coerce").to_numpy(float)
    for col in v.columns:
        ax.plot(xs, v[col].to_numpy(float), marker="o", ms=3, label=_name(col))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(textwrap.fill(t.title, 60), fontsize=8)
    ax.legend(fontsize=6)
    fig.tight_layout()
    return fig


def histograms(t: PaperTable, bins: list, xlabel: str) -> Figure | None:
    """One panel per row of ``t`` but its last level (e.g. a cell's setting), one set of translucent bars per value
    of the last level (e.g. accepted / rejected) over the columns ``bins`` (shares per bin): where they overlap."""
    v = t.values
    if v is None or v.empty or not all(b in v.columns for b in bins) or not np.isfinite(v[bins].to_numpy(float)).any():
        return None
    panels = list(dict.fromkeys(r[:-1] for r in v.index))
    fig, axes = plt.subplots(1, len(panels), figsize=(3.6 * len(panels), 2.8), squeeze=False)
    x = np.arange(len(bins))
    for ax, panel in zip(axes[0], panels):
        for row in [r for r in v.index if r[:-1] == panel]:
            ax.bar(x, v.loc[row, bins].to_numpy(float), 0.9, alpha=0.5, label=str(row[-1]))
        ax.set_xticks(x, bins, rotation=60, fontsize=6)
        ax.set_xlabel(xlabel)
        ax.set_title(_name(panel), fontsize=7)
    axes[0][0].set_ylabel("share of checks")
    axes[0][0].legend(fontsize=7)
    fig.suptitle(t.title, fontsize=8)
    fig.tight_layout()
    return fig
