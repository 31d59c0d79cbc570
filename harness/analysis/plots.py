"""Figures (matplotlib, Agg): every estimate drawn as a point with its CI, never as a bar that could
run below zero; labelled axes with units; legends; sized to stay readable with 20 methods."""
from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from harness.analysis.quality import quality_label  # noqa: E402

MARKERS = "osD^v<>pPX*h"
GROUP = ["pair", "dataset", "gpu"]


def style(i: int) -> dict:
    """A distinct colour × marker for the i-th method (20 colours, 12 markers)."""
    return {"color": plt.get_cmap("tab20")(i % 20), "marker": MARKERS[i % len(MARKERS)]}


def _title(key) -> str:
    pair, dataset, gpu = key
    return f"pair={pair}  dataset={dataset}  gpu={gpu}"


def _err(point, lo, hi) -> np.ndarray:
    """Asymmetric error bars from a CI (0 where the CI is unknown)."""
    point, lo, hi = (np.asarray(x, float) for x in (point, lo, hi))
    return np.vstack([np.nan_to_num(point - lo, nan=0.0).clip(0), np.nan_to_num(hi - point, nan=0.0).clip(0)])


def forest(table: pd.DataFrame, value: str, xlabel: str, reference: float | None = None,
           log: bool = False) -> Figure | None:
    """One panel per pair × dataset × gpu; one row per method: the estimate with its CI
    (``<value>_lo``/``<value>_hi``) as a horizontal whisker; a dashed line at ``reference``."""
    table = table[np.isfinite(pd.to_numeric(table[value], errors="coerce"))]
    if table.empty:
        return None
    groups = list(table.groupby(GROUP, dropna=False))
    heights = [max(len(g), 2) * 0.32 + 1.0 for _, g in groups]
    fig, axes = plt.subplots(len(groups), 1, figsize=(8.5, sum(heights)), squeeze=False,
                             gridspec_kw={"height_ratios": heights})
    for ax, (key, g) in zip(axes[:, 0], groups):
        g = g.sort_values(value)
        y = np.arange(len(g))
        colors = ["tab:orange" if d == "greedy" else "tab:blue" for d in g.get("decoding", ["sampling"] * len(g))]
        ax.errorbar(g[value], y, xerr=_err(g[value], g.get(value + "_lo", g[value]), g.get(value + "_hi", g[value])),
                    fmt="none", ecolor="0.4", capsize=3, lw=1)
        ax.scatter(g[value], y, c=colors, zorder=3, s=28)
        for yi, v in zip(y, g[value]):
            ax.annotate(f"{v:.3g}", (v, yi), textcoords="offset points", xytext=(0, 5), ha="center", fontsize=7)
        ax.set_yticks(y, g["label"].astype(str), fontsize=8)
        ax.set_ylim(-0.7, len(g) - 0.3)
        if reference is not None:
            ax.axvline(reference, ls="--", color="0.5", lw=1)
        if log:
            ax.set_xscale("log")
        ax.set_title(_title(key), fontsize=9)
        ax.set_xlabel(xlabel, fontsize=8)
        ax.grid(axis="x", alpha=0.3)
    handles = [plt.Line2D([], [], ls="", marker="o", color=c, label=lab)
               for c, lab in (("tab:orange", "greedy (vs ar_greedy)"), ("tab:blue", "sampling (vs ar_sampling)"))]
    axes[0, 0].legend(handles=handles, fontsize=7, loc="lower right")
    fig.tight_layout()
    return fig


def pareto(points: pd.DataFrame, quality: str, cost: str, cost_label: str) -> Figure | None:
    """Quality vs cost per pair × dataset × gpu: every method with CI error bars in both directions,
    the non-dominated set ringed and joined by a line, one legend entry per method."""
    points = points[np.isfinite(pd.to_numeric(points[quality], errors="coerce"))
                    & np.isfinite(pd.to_numeric(points[cost], errors="coerce"))]
    if points.empty:
        return None
    groups = list(points.groupby(GROUP, dropna=False))
    labels = sorted(points["label"].astype(str).unique())
    fig, axes = plt.subplots(1, len(groups), figsize=(6.5 * len(groups) + 3.5, 5.0), squeeze=False)
    for ax, (key, g) in zip(axes[0], groups):
        for _, row in g.iterrows():
            st = style(labels.index(str(row["label"])))
            ax.errorbar(row[cost], row[quality], xerr=_err([row[cost]], [row.get(cost + "_lo")], [row.get(cost + "_hi")]),
                        yerr=_err([row[quality]], [row.get(quality + "_lo")], [row.get(quality + "_hi")]),
                        fmt=st["marker"], color=st["color"], ms=7, capsize=2, lw=0.8, label=str(row["label"]))
        front = g[g["on_front"]].sort_values(cost)
        ax.plot(front[cost], front[quality], "-", color="0.2", lw=1.2, zorder=1, label="_front")
        ax.scatter(front[cost], front[quality], s=190, facecolors="none", edgecolors="0.1", lw=1.2, zorder=4)
        ax.set_xlabel(cost_label)
        ax.set_ylabel(quality_label(quality))
        ax.set_title(_title(key), fontsize=9)
        ax.grid(alpha=0.3)
    handles, names = axes[0, -1].get_legend_handles_labels()
    uniq = dict(zip(names, handles))
    uniq["Pareto front (ringed)"] = plt.Line2D([], [], color="0.2", marker="o", mfc="none", ms=11)
    fig.legend(uniq.values(), uniq.keys(), loc="center left", bbox_to_anchor=(1 - 3.3 / fig.get_figwidth(), 0.5),
               fontsize=8, ncol=1 if len(uniq) <= 22 else 2, frameon=False)
    fig.tight_layout(rect=(0, 0, 1 - 3.4 / fig.get_figwidth(), 1))
    return fig


def accept_histograms(hist: pd.DataFrame) -> Figure | None:
    """Small multiples: the fraction of rounds committing 1, 2, ... tokens, one panel per method."""
    if hist.empty:
        return None
    cells = list(hist.groupby("cell_id", sort=False))
    ncol = min(4, len(cells))
    nrow = math.ceil(len(cells) / ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(3.2 * ncol, 2.5 * nrow), squeeze=False, sharey=True)
    for ax in axes.flat[len(cells):]:
        ax.axis("off")
    for ax, (_, g) in zip(axes.flat, cells):
        ax.bar(g["accept_length"], g["fraction"], color="tab:blue", width=0.8)
        mat = (g["accept_length"] * g["rounds"]).sum() / g["rounds"].sum()
        ax.axvline(mat, color="tab:red", ls="--", lw=1)
        ax.set_title(f"{g['label'].iloc[0]}  (MAT {mat:.2f})", fontsize=8)
        ax.set_xlabel("tokens committed per round", fontsize=7)
        ax.set_ylim(0, 1)
        ax.tick_params(labelsize=7)
    for ax in axes[:, 0]:
        ax.set_ylabel("fraction of rounds", fontsize=7)
    fig.suptitle("Accept-length histograms (pooled over rounds; dashed: mean acceptance length)", fontsize=9)
    fig.tight_layout()
    return fig


def conditional_acceptance(cond: pd.DataFrame) -> Figure | None:
    """P(position k accepted | reached) per method, with Wilson 95 % bands."""
    if cond.empty:
        return None
    labels = list(dict.fromkeys(cond["label"].astype(str)))
    fig, ax = plt.subplots(figsize=(8.5 + (2.5 if len(labels) > 10 else 0), 4.5))
    for i, (lab, g) in enumerate(cond.groupby(cond["label"].astype(str), sort=False)):
        st = style(labels.index(lab))
        ax.plot(g["position"], g["rate"], marker=st["marker"], color=st["color"], label=lab, lw=1.2)
        ax.fill_between(g["position"], g["rate_lo"], g["rate_hi"], color=st["color"], alpha=0.12)
    ax.set_xlabel("draft position k (depth in the round)")
    ax.set_ylabel("P(accept k | positions < k accepted)")
    ax.set_ylim(0, 1.02)
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    fig.tight_layout()
    return fig
