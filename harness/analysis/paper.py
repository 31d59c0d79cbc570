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

import json
import math
import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from harness.analysis.paired import pair_prompts, ratio_estimates

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
    values: pd.DataFrame | None = None  # the entries' numbers (NaN where n/a): what a figure draws

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
                      under if second else under & False, list(notes), printed, printed_caption, values)


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


def settings(cells: pd.DataFrame) -> list[dict]:
    """Each cell's full setting: its comparison key (``match_json``: pair, dataset and its prompts, gpu,
    decoding and warp, ``max_new_tokens``, runner and energy settings; the seed dropped — seeds are repeats)
    and the method's parameters (``method.<name>``), as comparable values."""
    out = []
    for _, c in cells.iterrows():
        items = json.loads(c["match_json"]) if isinstance(c.get("match_json"), str) else \
            {k: c.get(k) for k in ("pair", "dataset", "gpu", "max_new_tokens", "regime") if k in c}
        items = {k: _norm(v) for k, v in items.items() if k not in SEED_KEYS}
        items.update({f"method.{k[6:]}": _norm(v) for k, v in c.items() if k.startswith("param.") and not _missing(v)})
        items["method"] = str(c.get("method_name", c.get("family", "")))
        out.append(items)
    return out


SEED_KEYS = ("seed",)


def _missing(v) -> bool:
    return v is None or (isinstance(v, float) and v != v)


def _norm(v):
    from harness.analysis.specs import _norm as norm

    return norm(json.dumps(v) if isinstance(v, (list, dict)) else v)


def differences(items: list[dict], limit: int = 3) -> str:
    """The keys on which settings differ, with their values: "decoding.top_k (0 vs 20), gpu (a100 vs cpu)"."""
    keys = sorted({k for i in items for k in i})
    diff = [k for k in keys if len({json.dumps(i.get(k), default=str) for i in items}) > 1]
    text = ", ".join(f"{k} ({' vs '.join(sorted({_show(i.get(k)) for i in items}))})" for k in diff[:limit])
    return text + (f" and {len(diff) - limit} more" if len(diff) > limit else "")


def _show(v) -> str:
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return "unset" if v is None else str(v)


def choose(rows: pd.DataFrame, what: str) -> tuple[pd.DataFrame, str]:
    """The one setting (its cells: one per seed) an entry stands for: (rows, "") — or (empty, why) when cells
    of more than one full setting (:func:`settings`: pair, dataset, gpu, decoding and warp, the method's
    parameters, ...) compete for it; ``why`` names the difference (the table never picks, nor averages, one
    silently)."""
    if rows.empty:
        return rows, f"no {what} cell"
    items = settings(rows)
    distinct = {json.dumps(i, sort_keys=True, default=str) for i in items}
    if len(distinct) > 1:
        return rows.iloc[0:0], (f"{len(distinct)} {what} settings compete, differing in {differences(items)}: "
                                "no single entry")
    return rows, ""


LOSSY_MARK = " †"  # as the generic tables mark it (harness.analysis.labels)
LOSSY_NOTE = ("† lossy: the cells declare an output distribution that is not the target's (the decoder's own "
              "is_lossless, recorded in each summary; never guessed from the name).")


def lossy(rows: pd.DataFrame) -> bool:
    """Whether any of these cells declares itself lossy (``lossless`` false; unknown is not lossy)."""
    return any(v is False or v is np.False_ for v in rows.get("lossless", pd.Series(dtype=object)))


def mark(name: str, rows: pd.DataFrame) -> str:
    """``name`` with † where its cells are lossy (:func:`lossy`)."""
    return name + LOSSY_MARK if lossy(rows) else name


def paired(records: pd.DataFrame, a: pd.DataFrame, b: pd.DataFrame, **boot) -> tuple[float, float, float, int, tuple]:
    """(speed-up, lo, hi, prompts, sources) of cell a over cell b (one cell each), prompt by prompt."""
    if len(a) != 1 or len(b) != 1:
        return np.nan, np.nan, np.nan, 0, tuple(a.get("cell_id", ())) + tuple(b.get("cell_id", ()))
    p = pair_prompts(records, a["cell_id"].iloc[0], b["cell_id"].iloc[0])
    est = ratio_estimates(p, **boot)
    return est["speedup"], est["speedup_lo"], est["speedup_hi"], len(p), (a["cell_id"].iloc[0], b["cell_id"].iloc[0])


def block_title(pair, dataset, gpu, regime) -> str:
    return f"{pair} · {dataset} · {gpu} · {regime}"


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
SETTING = "setting"
#: the settings a block or layout key stands for (its prefix in :func:`settings`)
COVERS = {"pair": ("pair",), "dataset": ("dataset",), "gpu": ("gpu", "energy.gpu"), "regime": ("regime", "decoding"),
          "max_new_tokens": ("max_new_tokens",), "seed": ("seed",)}


def _covered(key: str, by) -> bool:
    prefixes = [p for b in by for p in COVERS.get(b, (b,))]
    return any(key == p or key.startswith(p + ".") for p in prefixes) or key == "method" or key.startswith("method.")


def context_keys(cells: pd.DataFrame, laid_out=()) -> pd.Series:
    """Per cell, its full setting without the method's and without ``laid_out``'s (e.g. ``["pair"]``: the cells
    of other pairs in the same setting share the key), as text."""
    if cells.empty:
        return pd.Series(dtype=object, index=cells.index)
    return pd.Series([json.dumps({k: v for k, v in i.items() if not _covered(k, laid_out)}, sort_keys=True,
                                 default=str) for i in settings(cells)], index=cells.index)


def contextualise(summary: pd.DataFrame, keys=BLOCK, laid_out=()) -> pd.DataFrame:
    """``summary`` with a ``setting`` column: per cell, the settings outside the block ``keys``, the table's
    layout (``laid_out``: what its rows and columns show, e.g. the pair as columns) and the method that vary
    between these cells (e.g. "max_new_tokens 64", "runner.threads 4"); empty where none does. Blocks split by
    it (:func:`blocks`), so cells of another setting never share an entry with the paper's."""
    if summary.empty:
        return summary.assign(**{SETTING: pd.Series(dtype=object)})
    rest = [{k: v for k, v in i.items() if not _covered(k, [*keys, *laid_out])} for i in settings(summary)]
    names = sorted({k for r in rest for k in r})
    vary = [k for k in names if len({json.dumps(r.get(k), default=str) for r in rest}) > 1]
    return summary.assign(**{SETTING: ["; ".join(f"{k} {_show(r.get(k))}" for k in vary) for r in rest]})


def blocks(summary: pd.DataFrame, keys=BLOCK, laid_out=()):
    """(key, rows) per block: ``keys`` (default pair × dataset × gpu × regime) and the other settings that vary
    (:func:`contextualise`; the key's last part), in order of first appearance."""
    if summary.empty:
        return []
    if SETTING not in summary:
        summary = contextualise(summary, keys, laid_out)
    return list(summary.groupby([k for k in keys if k in summary] + [SETTING], dropna=False, sort=False))


def several(values) -> bool:
    return len(set(map(str, values))) > 1


def block_names(keys: list[tuple], names=BLOCK) -> tuple[dict, str]:
    """({block key: a name showing only the parts that vary between blocks}, "the constant parts") — the
    constant parts (e.g. the gpu and the warp) go into the caption once. A key one longer than ``names`` ends
    in the block's other settings (:func:`blocks`)."""
    keys = list(dict.fromkeys(keys))
    names = list(names) + [SETTING] * bool(keys and len(keys[0]) > len(names))
    vary = [i for i in range(len(names)) if len({str(k[i]) for k in keys}) > 1]
    const = [i for i in range(len(names)) if i not in vary and not (names[i] == SETTING and not keys[0][i])]
    label = {k: " · ".join(str(k[i]) for i in vary) or str(k[0]) for k in keys}
    common = "; ".join(f"{names[i]} {keys[0][i]}" for i in const) if keys else ""
    return label, common


def block_rows(summary: pd.DataFrame, key: tuple, keys=BLOCK) -> pd.DataFrame:
    """The rows of ``summary`` in one block (``key`` from :func:`blocks` on ``summary`` or a part of it that
    keeps its ``setting`` column)."""
    cols = [k for k in keys if k in summary] + [SETTING] * (len(key) > len(keys) and SETTING in summary)
    return summary[(summary[cols].astype(str) == [str(k) for k in key[:len(cols)]]).all(axis=1)]


def same_group(cells: pd.DataFrame, cell: pd.Series) -> pd.DataFrame:
    """The cells in ``cell``'s comparison group (same ``match_json``: everything but the method's side), e.g.
    the baseline an entry is paired with."""
    if "match_json" not in cells:
        return cells[(cells[[k for k in BLOCK if k in cells]].astype(str) ==
                      [str(cell[k]) for k in BLOCK if k in cells]).all(axis=1)]
    return cells[cells["match_json"].astype(str) == str(cell["match_json"])]
