"""What every section reads: the loaded results, the computed tables, and the helpers that keep tables
compact (columns constant across a table move into its caption)."""
from __future__ import annotations

import json
import traceback
from dataclasses import dataclass, field

import pandas as pd

from harness.analysis.plots import SMALL_N
from harness.analysis.trust import Trust


@dataclass
class Analysis:
    cells: pd.DataFrame
    records: pd.DataFrame
    problems: pd.DataFrame
    excluded: pd.DataFrame | None = None
    ratios: pd.DataFrame = field(default_factory=pd.DataFrame)  # computed before the sections (build._compute)
    summary: pd.DataFrame = field(default_factory=pd.DataFrame)
    tables: dict = field(default_factory=dict)
    section_errors: list = field(default_factory=list)
    trust: Trust | None = None  # what not to believe (computed with the ratios)
    options: dict = field(default_factory=dict)  # baselines, iso pairs, paper tables, bootstrap resamples

    @property
    def boot(self) -> dict:
        return {"n_resamples": self.options.get("n_resamples", 2000)}

    def configured(self, key: str) -> list:
        """The union over cells of a ``report.<key>`` list in their stored configs (``iso``, ``tables``)."""
        out = []
        for text in self.cells.get("report_json", pd.Series(dtype=object)).dropna().unique():
            try:
                out += [x for x in json.loads(text).get(key) or [] if x not in out]
            except (TypeError, ValueError):
                continue
        return out

    def distrust(self, cell_id) -> str:
        """The reasons to distrust a cell's paired comparison ('' when none)."""
        return self.trust.note(cell_id) if self.trust is not None else ""

    def small_sample(self) -> int | None:
        """The smallest number of measured prompts of a cell, when below :data:`SMALL_N`."""
        if self.records.empty:
            return None
        n = int(self.records.groupby("cell_id").size().min())
        return n if n < SMALL_N else None


def run_section(doc, a: Analysis, title: str, fn):
    """Run one section (returning what it returns: False = nothing to show); an exception becomes a line in the
    report and in measurement quality."""
    try:
        return fn(doc, a)
    except Exception as e:  # noqa: BLE001 — one failing analysis must not cost the rest of the report
        doc.p(f"This section could not be computed: {type(e).__name__}: {e}")
        a.section_errors.append({"severity": "error", "kind": "analysis failed", "cell_id": "",
                                 "detail": f"{title}: {type(e).__name__}: {e} — {traceback.format_exc(limit=2)}"})


def compact(df: pd.DataFrame, keep=("method",)) -> tuple[pd.DataFrame, str]:
    """Drop the columns whose value is the same in every row (except ``keep``) and say them once:
    (table, "pair tiny; gpu cpu; seed 0")."""
    if len(df) < 2:
        return df, ""
    const = [c for c in df.columns if c not in keep and df[c].astype(str).nunique() == 1]
    said = "; ".join(f"{c} {_plain(df[c].iloc[0])}" for c in const if str(df[c].iloc[0]) not in ("", "nan", "None"))
    return df.drop(columns=const), said


def _plain(v):
    return int(v) if isinstance(v, float) and v.is_integer() else v
