"""Figures (matplotlib, Agg): every estimate drawn as a point with its CI, never as a bar that could
run below zero; labelled axes with units; one panel per decoding regime (a greedy and a sampling method never
share an axis or a front); readable with 20 methods.

* A method keeps one colour in every figure (:func:`colour`, by method name); its settings differ by marker.
* Ratio axes are logarithmic with labelled ticks (0.5×, 0.7×, 1×, 1.5×, 2×, 3×).
* Fewer than :data:`SMALL_N` prompts behind an estimate: its CI is drawn in light grey and the panel says so.
* Acceptance: small multiples, one panel per cell, integer bins, the number of rounds in each title.
"""
from __future__ import annotations

import math
import zlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

from harness.analysis.quality import quality_label
from harness.analysis.regime import regimes

MARKERS = "osD^v<>pPX*h"
GROUP = ["pair", "dataset", "gpu", "regime"]
SMALL_N = 10
RATIO_TICKS = (0.25, 0.33, 0.5, 0.7, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
#: a fixed order, so a method has the same colour in every report
KNOWN = ("ar_greedy", "ar_sampling", "beam_search", "beam_sampling", "sd", "specinfer", "spectr", "mcsd",
         "mcsd_target_init", "mcsd_dynamic", "hf_assisted", "dsbd", "mtad", "mtjd", "bild", "typical")
MAX_COLS = 4


def colour(method_name: str):
    """The method's colour (tab20; unknown methods by a stable hash)."""
    name = str(method_name)
    i = KNOWN.index(name) if name in KNOWN else len(KNOWN) + zlib.crc32(name.encode()) % 4
    return plt.get_cmap("tab20")(i % 20)


def _markers(g: pd.DataFrame) -> dict:
    """A marker per label within each method (its settings)."""
    out = {}
    for _, m in g.groupby("method_name", sort=False):
        for j, lab in enumerate(dict.fromkeys(m["label"].astype(str))):
            out[lab] = MARKERS[j % len(MARKERS)]
    return out


def _title(key) -> str:
    return "  ·  ".join(str(k) for k in key)


def _err(point, lo, hi) -> np.ndarray:
    """Asymmetric error bars from a CI (0 where the CI is unknown)."""
    point, lo, hi = (np.asarray(x, float) for x in (point, lo, hi))
    return np.vstack([np.nan_to_num(point - lo, nan=0.0).clip(0), np.nan_to_num(hi - point, nan=0.0).clip(0)])


def ratio_axis(ax, values, axis: str = "x") -> None:
    """Log scale with the labelled ratio ticks that fall in the data's range (at least 1×)."""
    v = np.asarray(values, float)
    v = v[np.isfinite(v) & (v > 0)]
    lo, hi = (min(v.min(), 1.0), max(v.max(), 1.0)) if len(v) else (0.7, 1.5)
    ticks = [t for t in RATIO_TICKS if lo / 1.15 <= t <= hi * 1.15] or [1.0]
    getattr(ax, f"set_{axis}scale")("log")
    getattr(ax, f"set_{axis}lim")(lo / 1.2, hi * 1.2)
    target = ax.xaxis if axis == "x" else ax.yaxis
    target.set_major_locator(FixedLocator(ticks))
    target.set_major_formatter(FuncFormatter(lambda t, _: f"{t:g}×"))
    target.set_minor_formatter(NullFormatter())


def _groups(table: pd.DataFrame) -> list:
    table = table.assign(regime=regimes(table))
    return list(table.groupby(GROUP, dropna=False, sort=False))


def forest(table: pd.DataFrame, value: str, xlabel: str, reference: float | None = None,
           ratio: bool = False, n_col: str = "n_prompts") -> Figure | None:
    """One panel per pair × dataset × gpu × regime; one row per method: the estimate with its CI
    (``<value>_lo``/``<value>_hi``) as a horizontal whisker; a dashed line at ``reference``."""
    table = table[np.isfinite(pd.to_numeric(table[value], errors="coerce"))]
    if table.empty:
        return None
    groups = _groups(table)
    heights = [max(len(g), 2) * 0.3 + 1.1 for _, g in groups]
    fig, axes = plt.subplots(len(groups), 1, figsize=(9.0, sum(heights)), squeeze=False,
                             gridspec_kw={"height_ratios": heights})
    for ax, (key, g) in zip(axes[:, 0], groups):
        g = g.sort_values(value)
        y = np.arange(len(g))
        n = pd.to_numeric(g.get(n_col, pd.Series(SMALL_N, index=g.index)), errors="coerce").fillna(SMALL_N)
        small = n < SMALL_N
        for yi, (_, row), is_small in zip(y, g.iterrows(), small):
            ax.errorbar(row[value], yi, xerr=_err([row[value]], [row.get(value + "_lo")], [row.get(value + "_hi")]),
                        fmt="none", ecolor="0.82" if is_small else "0.35", capsize=3, lw=1)
            ax.scatter(row[value], yi, color=colour(row.get("method_name", row.get("label"))), zorder=3, s=30)
            ax.annotate(f"{row[value]:.3g}", (row[value], yi), textcoords="offset points", xytext=(0, 5), ha="center",
                        fontsize=7)
        ax.set_yticks(y, g["label"].astype(str), fontsize=8)
        ax.set_ylim(-0.7, len(g) - 0.3)
        if reference is not None:
            ax.axvline(reference, ls="--", color="0.5", lw=1)
        if ratio:
            ratio_axis(ax, pd.concat([g[value], g.get(value + "_lo", g[value]), g.get(value + "_hi", g[value])]))
        note = f"  (n = {int(n.min())} prompts < {SMALL_N}: CIs greyed, unreliable)" if small.any() else ""
        ax.set_title(_title(key) + note, fontsize=9)
        ax.set_xlabel(xlabel, fontsize=8)
        ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return fig


def _panel(ax, g: pd.DataFrame, quality: str, cost: str, fronts: dict) -> None:
    markers = _markers(g)
    small = pd.to_numeric(g.get("n_prompts", pd.Series(SMALL_N, index=g.index)),
                          errors="coerce").fillna(SMALL_N) < SMALL_N
    for (_, row), is_small in zip(g.iterrows(), small):
        c = colour(row.get("method_name", row["label"]))
        ax.errorbar(row[cost], row[quality], xerr=_err([row[cost]], [row.get(cost + "_lo")], [row.get(cost + "_hi")]),
                    yerr=_err([row[quality]], [row.get(quality + "_lo")], [row.get(quality + "_hi")]),
                    fmt=markers[str(row["label"])], color=c, ecolor="0.82" if is_small else c, ms=7, capsize=2,
                    lw=0.8, label=str(row["label"]))
    for name, (mask, style) in fronts.items():
        front = g[mask.reindex(g.index, fill_value=False)].sort_values(cost)
        if len(front):
            ax.plot(front[cost], front[quality], style, color="0.2", lw=1.2, zorder=1, label=name)
    ax.grid(alpha=0.3)


def pareto(points: pd.DataFrame, quality: str, cost: str, cost_label: str, higher: bool | None = None,
           fronts: dict | None = None) -> Figure | None:
    """Quality vs cost, one panel per pair × dataset × gpu × regime: every method with CI bars in both directions.
    ``fronts``: {legend name: (boolean mask over ``points``, line style)}; default the non-dominated set
    (``on_front``), ringed and joined."""
    points = points[np.isfinite(pd.to_numeric(points[quality], errors="coerce"))
                    & np.isfinite(pd.to_numeric(points[cost], errors="coerce"))]
    if points.empty:
        return None
    groups = _groups(points)
    ncol = min(len(groups), 2)
    nrow = math.ceil(len(groups) / ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(5.6 * ncol + 3.6, 4.4 * nrow), squeeze=False)
    for ax in axes.flat[len(groups):]:
        ax.axis("off")
    for ax, (key, g) in zip(axes.flat, groups):
        default = {"Pareto front": (g["on_front"].astype(bool), "-")} if "on_front" in g else {}
        _panel(ax, g, quality, cost, fronts or default)
        if fronts is None and "on_front" in g:
            on = g[g["on_front"].astype(bool)]
            ax.scatter(on[cost], on[quality], s=190, facecolors="none", edgecolors="0.1", lw=1.2, zorder=4)
        ax.set_xlabel(cost_label, fontsize=8)
        ax.set_ylabel(quality_label(quality, higher), fontsize=8)
        ax.set_title(_title(key), fontsize=9)
    handles, names = [], []
    for ax in axes.flat[: len(groups)]:
        for h, n in zip(*ax.get_legend_handles_labels()):
            if n not in names:
                handles.append(h)
                names.append(n)
    fig.legend(handles, names, loc="center left", bbox_to_anchor=(1 - 3.5 / fig.get_figwidth(), 0.5),
               fontsize=7, ncol=1 if len(names) <= 24 else 2, frameon=False)
    fig.tight_layout(rect=(0, 0, 1 - 3.6 / fig.get_figwidth(), 1))
    return fig


def _grid(n: int, w: float = 3.0, h: float = 2.4):
    ncol = min(MAX_COLS, n)
    nrow = math.ceil(n / ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(w * ncol, h * nrow), squeeze=False)
    for ax in axes.flat[n:]:
        ax.axis("off")
    return fig, axes


def accept_histograms(hist: pd.DataFrame) -> Figure | None:
    """Small multiples: the fraction of rounds committing 1, 2, ... tokens (integer bins), one panel per cell."""
    if hist.empty:
        return None
    cells = list(hist.groupby("cell_id", sort=False))
    fig, axes = _grid(len(cells))
    for ax, (_, g) in zip(axes.flat, cells):
        ax.bar(g["accept_length"], g["fraction"], color=colour(g.get("method_name", g["label"]).iloc[0]), width=0.8)
        n = int(g["rounds"].sum())
        mat = (g["accept_length"] * g["rounds"]).sum() / n
        ax.axvline(mat, color="0.2", ls="--", lw=1)
        ax.set_title(f"{g['label'].iloc[0]}\n{g['regime'].iloc[0] if 'regime' in g else ''} · n = {n} rounds · "
                     f"MAT {mat:.2f}", fontsize=7)
        ax.set_xticks(range(1, int(g["accept_length"].max()) + 1))
        ax.set_xlabel("tokens committed per round", fontsize=7)
        ax.set_ylabel("fraction of rounds", fontsize=7)
        ax.set_ylim(0, 1)
        ax.tick_params(labelsize=7)
    fig.tight_layout()
    return fig


def conditional_acceptance(cond: pd.DataFrame) -> Figure | None:
    """Small multiples: P(position k accepted | reached) per cell, Wilson 95 % bands, rounds reached per panel."""
    if cond.empty:
        return None
    cells = list(cond.groupby("cell_id", sort=False))
    fig, axes = _grid(len(cells))
    for ax, (_, g) in zip(axes.flat, cells):
        c = colour(g.get("method_name", g["label"]).iloc[0])
        ax.plot(g["position"], g["rate"], marker="o", color=c, lw=1.2, ms=4)
        ax.fill_between(g["position"], g["rate_lo"], g["rate_hi"], color=c, alpha=0.2)
        regime = f" · {g['regime'].iloc[0]}" if "regime" in g else ""
        ax.set_title(f"{g['label'].iloc[0]}{regime}\nn = {int(g['reached'].iloc[0])} rounds", fontsize=7)
        ax.set_ylim(0, 1.02)
        ax.set_xticks(list(g["position"].astype(int)))
        ax.set_xlabel("draft position k", fontsize=7)
        ax.set_ylabel("P(accept k | < k accepted)", fontsize=7)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def width_scatter(points: pd.DataFrame) -> Figure | None:
    """dsbd App. C.2: W̄ against quality, tokens/s and J/token, one row of panels per block."""
    points = points[np.isfinite(pd.to_numeric(points.get("avg_width"), errors="coerce"))] if len(points) else points
    if points.empty:
        return None
    blocks = list(points.groupby("block", sort=False))
    panels = [(col, name) for col, name in (("quality", None), ("tokens_per_s", "tokens/s"), ("j_per_token", "J/token"))
              if col in points and np.isfinite(pd.to_numeric(points[col], errors="coerce")).any()]  # no empty panel
    if not panels:
        return None
    fig, axes = plt.subplots(len(blocks), len(panels), figsize=(11 * len(panels) / 3, 3.0 * len(blocks)),
                             squeeze=False)
    for row, (block, g) in zip(axes, blocks):
        for ax, (col, name) in zip(row, [(c, n or g["quality_name"].iloc[0]) for c, n in panels]):
            ax.scatter(g["avg_width"], g[col], color=colour("dsbd"), s=25)
            ax.set_xlabel("W̄ (average accepted width)", fontsize=8)
            ax.set_ylabel(name, fontsize=8)
            ax.set_title(f"{block}: W̄ vs {name}", fontsize=8)
            ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig
