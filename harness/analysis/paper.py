"""The papers' tables, as the papers print them: the machinery the per-paper modules share.

Each table (:class:`PaperTable`) keeps the paper's rows and columns. An entry is computed from named cells
(``sources``: the cell ids behind it, so a test can check which cells fill which entry) and printed as
"estimate [95 % CI]" for one seed, "mean ± s.d." across seeds, or "n/a"; bold marks the best (and, where
the paper underlines it, underline the second best) per column within a block of rows, or per row. Where
a row is comparable with the paper's (the paper's pair and dataset), the paper's printed figure stands
beside ours (``paper``); where none is, the paper's table as printed can be shown under ours
(``printed``). :mod:`~harness.analysis.paper_values` holds the printed figures.

The per-paper modules: :mod:`~harness.analysis.paper_dsbd`, :mod:`~harness.analysis.paper_mtad`,
:mod:`~harness.analysis.paper_mcsd`, :mod:`~harness.analysis.paper_adaptive`.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

NA = "n/a"
NAN = math.nan


@dataclass
class Entry:
    """One table entry: where it sits, its value and text, the cells behind it, the paper's figure."""

    row: tuple
    col: tuple
    value: float = NAN
    text: str = NA
    sources: tuple[str, ...] = ()
    paper: str = ""
    higher: bool | None = None  # the direction for bold/underline; None = not ranked


@dataclass
class PaperTable:
    key: str  # e.g. "dsbd.table1"
    title: str
    caption: str
    text: pd.DataFrame
    sources: pd.DataFrame
    paper: pd.DataFrame
    bold: pd.DataFrame
    underline: pd.DataFrame
    notes: list[str] = field(default_factory=list)
    printed: pd.DataFrame | None = None  # the paper's table as printed (when no row here is comparable)
    printed_caption: str = ""

    @property
    def empty(self) -> bool:
        return self.text.empty


def _index(keys: list[tuple], names: list[str]) -> pd.Index:
    if len(names) == 1:
        return pd.Index([k[0] for k in keys], name=names[0])
    return pd.MultiIndex.from_tuples(keys, names=names)


def _rank(values: pd.DataFrame, higher: pd.DataFrame, groups) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(best, second best) masks: within each group of positions (a list of (row, col) lists)."""
    best = pd.DataFrame(False, index=values.index, columns=values.columns)
    second = best.copy()
    for group in groups:
        pts = [(r, c) for r, c in group if np.isfinite(values.iat[r, c]) and higher.iat[r, c] is not None]
        if len(pts) < 2:
            continue
        sign = [1 if higher.iat[r, c] else -1 for r, c in pts]
        scored = sorted({s * values.iat[r, c] for (r, c), s in zip(pts, sign)}, reverse=True)
        for (r, c), s in zip(pts, sign):
            v = s * values.iat[r, c]
            best.iat[r, c] = v == scored[0]
            second.iat[r, c] = len(scored) > 2 and v == scored[1]
    return best, second


def assemble(key: str, title: str, caption: str, entries: list[Entry], row_names: list[str], col_names: list[str],
             best: str = "col", second: bool = False, notes=(), printed: pd.DataFrame | None = None,
             printed_caption: str = "") -> PaperTable:
    """Build a :class:`PaperTable` from entries (rows and columns in order of first appearance). ``best``:
    "col" ranks each column within each block of rows (the first row level), "row" ranks each row."""
    rows = list(dict.fromkeys(e.row for e in entries))
    cols = list(dict.fromkeys(e.col for e in entries))
    ri, ci = _index(rows, row_names), _index(cols, col_names)
    frames = {k: pd.DataFrame("", index=ri, columns=ci, dtype=object) for k in ("text", "sources", "paper")}
    values = pd.DataFrame(NAN, index=ri, columns=ci, dtype=float)
    higher = pd.DataFrame(None, index=ri, columns=ci, dtype=object)
    frames["text"].loc[:, :] = NA if rows and cols else ""
    pos_r, pos_c = {r: i for i, r in enumerate(rows)}, {c: i for i, c in enumerate(cols)}
    for e in entries:
        r, c = pos_r[e.row], pos_c[e.col]
        frames["text"].iat[r, c], frames["sources"].iat[r, c] = e.text, ",".join(e.sources)
        frames["paper"].iat[r, c], values.iat[r, c], higher.iat[r, c] = e.paper, e.value, e.higher
    if best == "row":
        groups = [[(r, c) for c in range(len(cols))] for r in range(len(rows))]
    else:
        blocks = list(dict.fromkeys(r[0] for r in rows)) if len(row_names) > 1 else [None]
        groups = [[(r, c) for r, row in enumerate(rows) if block is None or row[0] == block]
                  for c in range(len(cols)) for block in blocks]
    bold, under = _rank(values, higher, groups)
    return PaperTable(key, title, caption, frames["text"], frames["sources"], frames["paper"], bold,
                      under if second else under & False, list(notes), printed, printed_caption)


# ---- values of entries ------------------------------------------------------------------------------------

def _g(v: float, digits: int = 3) -> str:
    return f"{v:.{digits}g}"


def estimate_text(values, lo=None, hi=None, digits: int = 3, unit: str = "") -> tuple[float, str]:
    """(value, text) over the rows of one entry: one row: "v [lo, hi]"; several (seeds or datasets):
    "mean ± s.d."; none: NaN, n/a."""
    v = pd.to_numeric(pd.Series(values), errors="coerce").dropna()
    if v.empty:
        return NAN, NA
    if len(v) > 1:
        return float(v.mean()), f"{_g(v.mean(), digits)}{unit} ± {v.std():.2g}"
    lo_v = pd.to_numeric(pd.Series(lo), errors="coerce").dropna() if lo is not None else pd.Series(dtype=float)
    hi_v = pd.to_numeric(pd.Series(hi), errors="coerce").dropna() if hi is not None else pd.Series(dtype=float)
    text = f"{_g(v.iloc[0], digits)}{unit}"
    if len(lo_v) == 1 and len(hi_v) == 1:
        text += f" [{_g(lo_v.iloc[0], digits)}, {_g(hi_v.iloc[0], digits)}]"
    return float(v.iloc[0]), text


def column_entry(rows: pd.DataFrame, col: str, row: tuple, column: tuple, higher: bool | None, paper: str = "",
                 why: str = "", digits: int = 3, unit: str = "") -> Entry:
    """An entry from a summary column (``col``, ``col_lo``, ``col_hi``) of the selected cells ``rows``; with
    ``why`` (no single cell stands for it: :func:`choose`), "n/a: why"."""
    if why or rows.empty or col not in rows:
        return Entry(row, column, text=f"n/a: {why}" if why else NA, sources=tuple(rows.get("cell_id", [])),
                     paper=paper, higher=higher)
    value, text = estimate_text(rows[col], rows.get(col + "_lo"), rows.get(col + "_hi"), digits, unit)
    return Entry(row, column, value, text, tuple(rows["cell_id"]), paper, higher)


def percent(v: float, lo: float = NAN, hi: float = NAN) -> str:
    """A ratio r as the improvement (r − 1) in %, e.g. 1.0643 → "+6.43 %"."""
    if not np.isfinite(v):
        return NA
    text = f"{(v - 1) * 100:+.2f} %"
    return text + (f" [{(lo - 1) * 100:+.1f}, {(hi - 1) * 100:+.1f}]" if np.isfinite(lo) and np.isfinite(hi) else "")


def times(v: float, lo: float = NAN, hi: float = NAN) -> str:
    if not np.isfinite(v):
        return NA
    return f"{v:.2f}×" + (f" [{lo:.2f}, {hi:.2f}]" if np.isfinite(lo) and np.isfinite(hi) else "")


def choose(rows: pd.DataFrame, what: str) -> tuple[pd.DataFrame, str]:
    """The one cell (per seed) an entry stands for: (rows, "") or (empty, why) when several settings of
    ``what`` compete for it (the table would otherwise pick silently)."""
    if rows.empty:
        return rows, f"no {what} cell"
    settings = rows["label"].astype(str).unique() if "label" in rows else []
    if len(settings) > 1:
        return rows.iloc[0:0], f"{len(settings)} {what} settings ({', '.join(map(str, settings))}): no single entry"
    return rows, ""


# ---- Markdown and LaTeX ------------------------------------------------------------------------------------

def to_markdown(t: PaperTable) -> str:
    text = t.text.copy()
    text[t.bold] = "**" + text[t.bold].astype(str) + "**"
    text[t.underline] = "<u>" + text[t.underline].astype(str) + "</u>"
    has_paper = t.paper.astype(str) != ""
    text[has_paper] = text[has_paper].astype(str) + " (paper: " + t.paper[has_paper].astype(str) + ")"
    if isinstance(text.columns, pd.MultiIndex):
        text.columns = [" · ".join(str(x) for x in c) for c in text.columns]
    if isinstance(text.index, pd.MultiIndex):
        text.index = [" · ".join(str(x) for x in i) for i in text.index]
    return text.to_markdown()


def to_latex(t: PaperTable) -> str:
    text = t.text.map(lambda v: _latex_escape(str(v)).replace("±", r"$\pm$").replace("×", r"$\times$"))
    text[t.bold] = r"\textbf{" + text[t.bold].astype(str) + "}"
    text[t.underline] = r"\underline{" + text[t.underline].astype(str) + "}"
    for axis in ("index", "columns"):
        idx = getattr(text, axis)
        if isinstance(idx, pd.MultiIndex):
            new = pd.MultiIndex.from_tuples([tuple(_latex_escape(str(x)) for x in k) for k in idx], names=idx.names)
        else:
            new = pd.Index([_latex_escape(str(k)) for k in idx], name=idx.name)
        setattr(text, axis, new)
    return text.style.to_latex(hrules=True, multicol_align="c", caption=_latex_escape(t.title) or None)


_LATEX = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{",
          "}": r"\}", "~": r"\textasciitilde{}", "^": r"\^{}"}


def _latex_escape(s: str) -> str:
    return re.sub(r"[\\&%$#_{}~^]", lambda m: _LATEX[m.group()], s)


BLOCK = ["pair", "dataset", "gpu", "regime"]


def blocks(summary: pd.DataFrame, keys=BLOCK):
    """(key, rows) per pair × dataset × gpu × regime, in order of first appearance."""
    if summary.empty:
        return []
    return list(summary.groupby([k for k in keys if k in summary], dropna=False, sort=False))


def several(values) -> bool:
    return len(set(map(str, values))) > 1


def block_names(keys: list[tuple], names=BLOCK) -> tuple[dict, str]:
    """({block key: a name showing only the parts that vary between blocks}, "the constant parts") — the
    constant parts (e.g. the gpu and the warp) go into the caption once."""
    keys = list(dict.fromkeys(keys))
    vary = [i for i in range(len(names)) if len({str(k[i]) for k in keys}) > 1]
    const = [i for i in range(len(names)) if i not in vary]
    label = {k: " · ".join(str(k[i]) for i in vary) or str(k[0]) for k in keys}
    common = "; ".join(f"{names[i]} {keys[0][i]}" for i in const) if keys else ""
    return label, common


def block_rows(summary: pd.DataFrame, key: tuple, keys=BLOCK) -> pd.DataFrame:
    """The rows of ``summary`` in one block (``key`` from :func:`blocks`)."""
    cols = [k for k in keys if k in summary]
    return summary[(summary[cols].astype(str) == [str(k) for k in key]).all(axis=1)]
