"""Short method labels: the method and only the parameters that differ within a comparison.

A comparison is the cells of one pair × dataset × gpu × decoding regime (what a table block, a front or a
figure panel shows): ``sd γ=4`` beside ``sd γ=8``, ``dsbd W_S=4 t=0.9``, ``sd online`` for a γ policy; a γ
policy or a draft selection other than the default is always named (``sd online ols``). The warp is never in
a label (it is the regime, stated once in a table's caption or a panel's title). A method whose summary
says it is not lossless (``lossless: false``; INTERFACES.md item 1) is marked with † — unknown (older
summaries) is not marked, and never guessed from the name.
"""
from __future__ import annotations

import json
from typing import Any

import pandas as pd

from harness.analysis.regime import WARP

LOSSY_MARK = " †"
#: the papers' symbols for the parameters (README glossary)
SYMBOLS = {"gamma": "γ", "num_drafts": "m", "width": "W", "draft_width": "W_S", "threshold": "t",
           "min_width": "W_min", "tau": "τ", "k_config": "k", "fallback_threshold": "τ1",
           "rollback_threshold": "τ2", "posterior_threshold": "ε", "posterior_alpha": "δ",
           "decision_threshold": "θ", "selection_fit_prompts": "fit"}
#: a method's own name for a parameter where the glossary's symbol would mislead (MTAD's draft beams)
METHOD_SYMBOLS = {("mtad", "draft_width"): "beams"}
#: parameters shown by their value alone (``sd online``, ``sd ols``), and always where not their default
VALUE_ONLY = {"gamma_policy": "fixed", "draft_selection": "none"}
COMPARISON = ["pair", "dataset", "gpu", "regime"]


def _fmt(key: str, v: Any) -> str:
    if isinstance(v, (list, tuple)):
        return "×".join(str(x) for x in v)
    if key == "memory_constrained":
        return "mem" if v in (True, "true", "True") else "no-mem"
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


def _original(row: pd.Series, key: str) -> Any:
    """A parameter as the summary wrote it (a table column may have turned 4 into 4.0)."""
    try:
        return json.loads(row["params_json"]).get(key, row[f"param.{key}"])
    except (KeyError, TypeError, ValueError):
        return row.get(f"param.{key}")


def param_text(row: pd.Series, key: str) -> str:
    v = _original(row, key)
    if v is None or (isinstance(v, float) and v != v):
        return ""
    if key in VALUE_ONLY or key == "memory_constrained":
        return _fmt(key, v) if str(v) not in ("None", "none", "null") else ""
    symbol = METHOD_SYMBOLS.get((str(row.get("method_name")), key), SYMBOLS.get(key, key))
    return f"{symbol}={_fmt(key, v)}"


def varying(cells: pd.DataFrame) -> list[str]:
    """Parameter names (warp excluded) that take more than one value among ``cells``."""
    cols = [c for c in cells.columns if c.startswith("param.") and c[6:] not in WARP]
    return [c[6:] for c in cols if cells[c].astype(str).nunique() > 1]


def short_labels(cells: pd.DataFrame, mark_lossy: bool = True) -> pd.Series:
    """Per cell: method name + the parameters that vary among that method's cells in its comparison (+ † if
    lossy)."""
    labels = cells["method_name"].astype(str).copy()
    by = ["method_name"] + [c for c in COMPARISON if c in cells]
    for _, group in cells.groupby(by, sort=False, dropna=False):
        keys = varying(group)
        for i, row in group.iterrows():
            shown = [k for k, default in VALUE_ONLY.items() if k not in keys and f"param.{k}" in row
                     and str(row[f"param.{k}"]) not in (default, "nan", "None")]
            parts = [param_text(row, k) for k in shown + keys]
            labels[i] = " ".join([str(row["method_name"]), *[p for p in parts if p]])
    if mark_lossy and "lossless" in cells:
        lossy = cells["lossless"].map(lambda v: lossless_text(v) == "no").astype(bool)
        labels[lossy] += LOSSY_MARK
    return labels


def lossless_text(v) -> str:
    """``yes`` / ``no`` / ``?`` (not recorded) for a ``lossless`` value."""
    if v is True or (isinstance(v, (int, float)) and not pd.isna(v) and v == 1):
        return "yes"
    if v is False or (isinstance(v, (int, float)) and not pd.isna(v) and v == 0):
        return "no"
    return "?"
