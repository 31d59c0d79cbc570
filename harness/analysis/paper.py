"""Paper-style tables, in Markdown and LaTeX.

* DSBD-style (seed 000 Table 1): method rows; per dataset: quality, perplexity, speed relative to
  the baseline, J/token.
* MTAD-style (seed 002 Tables 4-5): method rows per pair × dataset × gpu: acceptance rate, block
  efficiency, quality, perplexity, J/token, tokens/s.

A value is "mean ± s.d." over seeds when there are several, else "estimate [95 % CI]" over
prompts; "n/a" where nothing was measured. The best value of each column is bold.
"""
from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd

from harness.analysis.quality import PPL

NA = "n/a"
KEYS = ["pair", "dataset", "gpu", "label"]


def aggregate(summary: pd.DataFrame, ratios: pd.DataFrame | None, columns: list[str]) -> pd.DataFrame:
    """Per pair × dataset × gpu × method: for each column its mean over seeds, s.d., CI (one seed)
    and the number of seeds. ``speedup`` comes from the overall paired ratios."""
    s = summary.copy()
    if ratios is not None and not ratios.empty:
        r = ratios[ratios["category"] == "overall"][["cell_id", "speedup", "speedup_lo", "speedup_hi"]]
        s = s.merge(r, on="cell_id", how="left")
    rows = []
    for key, g in s.groupby(KEYS, dropna=False, sort=False):
        row = dict(zip(KEYS, key))
        row["n_seeds"] = g["seed"].nunique()
        for c in columns:
            if c not in g:
                continue
            v = pd.to_numeric(g[c], errors="coerce")
            row[c] = v.mean()
            row[c + "_sd"] = v.std() if len(v.dropna()) > 1 else math.nan
            row[c + "_lo"] = pd.to_numeric(g.get(c + "_lo"), errors="coerce").mean() if c + "_lo" in g else math.nan
            row[c + "_hi"] = pd.to_numeric(g.get(c + "_hi"), errors="coerce").mean() if c + "_hi" in g else math.nan
        rows.append(row)
    return pd.DataFrame(rows)


def fmt(row: pd.Series, c: str, digits: int = 3) -> str:
    v = row.get(c, math.nan)
    if v is None or not np.isfinite(v):
        return NA
    if row.get("n_seeds", 1) > 1 and np.isfinite(row.get(c + "_sd", math.nan)):
        return f"{v:.{digits}g} ± {row[c + '_sd']:.2g}"
    lo, hi = row.get(c + "_lo", math.nan), row.get(c + "_hi", math.nan)
    if np.isfinite(lo) and np.isfinite(hi):
        return f"{v:.{digits}g} [{lo:.{digits}g}, {hi:.{digits}g}]"
    return f"{v:.{digits}g}"


def primary_quality(summary: pd.DataFrame, dataset: str) -> str | None:
    """The dataset's first task metric with a value (e.g. exact_match), if any."""
    g = summary[summary["dataset"] == dataset]
    metrics = sorted(c for c in g.columns if c.startswith("metric.") and not c.endswith(("_lo", "_hi", "_n"))
                     and pd.to_numeric(g[c], errors="coerce").notna().any())
    return metrics[0] if metrics else None


def _best(values: pd.Series, higher: bool) -> pd.Series:
    v = pd.to_numeric(values, errors="coerce")
    if v.notna().sum() < 2:
        return pd.Series(False, index=values.index)
    return v == (v.max() if higher else v.min())


def _table(agg: pd.DataFrame, spec: list[tuple[str, str, bool]]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(text table, bold mask) for columns spec = [(column, header, higher is better)]."""
    text = pd.DataFrame({hdr: [fmt(r, c) for _, r in agg.iterrows()] for c, hdr, _ in spec}, index=agg.index)
    bold = pd.DataFrame({hdr: _best(agg[c], hi) if c in agg else False for c, hdr, hi in spec}, index=agg.index)
    return text, bold


def dsbd_table(summary: pd.DataFrame, ratios: pd.DataFrame | None) -> dict[str, tuple[pd.DataFrame, pd.DataFrame]]:
    """Per pair × gpu: rows = methods, columns = (dataset, measure)."""
    out = {}
    for (pair, gpu), s in summary.groupby(["pair", "gpu"], dropna=False):
        parts, bolds = [], []
        for dataset, sd in s.groupby("dataset", sort=True):
            metric = primary_quality(sd, dataset)
            spec = ([(metric, metric.removeprefix("metric."), True)] if metric else []) + \
                [(PPL, "PPL", False), ("speedup", "rel. speed", True), ("j_per_token", "J/token", False)]
            agg = aggregate(sd, ratios, [c for c, _, _ in spec]).set_index("label")
            text, bold = _table(agg, spec)
            text.columns = pd.MultiIndex.from_product([[dataset], text.columns])
            bold.columns = text.columns
            parts.append(text)
            bolds.append(bold)
        text = pd.concat(parts, axis=1).fillna("")
        bold = pd.concat(bolds, axis=1).reindex(text.index).fillna(False).astype(bool)
        text.index.name = "method"
        out[f"pair={pair}, gpu={gpu}"] = (text, bold)
    return out


def mtad_table(summary: pd.DataFrame, ratios: pd.DataFrame | None) -> dict[str, tuple[pd.DataFrame, pd.DataFrame]]:
    """Per pair × dataset × gpu: rows = methods; acceptance rate, block efficiency, quality, J/token, tokens/s."""
    out = {}
    for (pair, dataset, gpu), s in summary.groupby(["pair", "dataset", "gpu"], dropna=False):
        metric = primary_quality(s, dataset)
        spec = [("acceptance_rate", "acceptance rate", True), ("block_efficiency", "block efficiency", True)] + \
            ([(metric, metric.removeprefix("metric."), True)] if metric else []) + \
            [(PPL, "PPL", False), ("j_per_token", "J/token", False), ("tokens_per_s", "tokens/s", True)]
        agg = aggregate(s, ratios, [c for c, _, _ in spec]).set_index("label")
        text, bold = _table(agg, spec)
        text.index.name = "method"
        out[f"pair={pair}, dataset={dataset}, gpu={gpu}"] = (text, bold)
    return out


def to_markdown(text: pd.DataFrame, bold: pd.DataFrame) -> str:
    t = text.copy()
    t[bold] = "**" + t[bold].astype(str) + "**"
    if isinstance(t.columns, pd.MultiIndex):
        t.columns = [" · ".join(str(x) for x in c) for c in t.columns]
    return t.to_markdown()


def to_latex(text: pd.DataFrame, bold: pd.DataFrame, caption: str = "") -> str:
    t = text.copy()
    t = t.map(lambda v: _latex_escape(str(v)).replace("±", r"$\pm$"))
    t[bold] = r"\textbf{" + t[bold].astype(str) + "}"
    t.index = [_latex_escape(str(i)) for i in t.index]
    if isinstance(t.columns, pd.MultiIndex):
        t.columns = pd.MultiIndex.from_tuples([tuple(_latex_escape(str(x)) for x in c) for c in t.columns])
    else:
        t.columns = [_latex_escape(str(c)) for c in t.columns]
    return t.style.to_latex(hrules=True, multicol_align="c", caption=_latex_escape(caption) or None)


_LATEX = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{",
          "}": r"\}", "~": r"\textasciitilde{}", "^": r"\^{}"}


def _latex_escape(s: str) -> str:
    return re.sub(r"[\\&%$#_{}~^]", lambda m: _LATEX[m.group()], s)
