"""What a cell is compared within: its decoding regime and everything but the method.

* The **regime** is the decoding with its warp: ``greedy``, or ``T 1 · top-k 20 · top-p 0.9``. Methods are
  compared, ranked and drawn only within one regime (a greedy method is never on a sampling front).
* The **comparison key** of a cell is every setting of its stored config that defines the measurement
  (:func:`harness.config.identity.comparison_config`: result-neutral keys dropped) except the method's side
  (the method, its γ policy and draft selection) — pair, dataset and its prompt selection, ``max_new_tokens``,
  the decoding's warp, gpu, seed, the runner's and the energy protocol's settings — plus the regime. Two cells are
  comparable (a method and its baseline, the points of one front) only when their keys are equal; nothing falls back
  across settings. Summaries written without a config fall back on the identity columns and the regime.
"""
from __future__ import annotations

import json
import math
from typing import Any

import pandas as pd

from harness.config.identity import comparison_config, flatten

GREEDY = "greedy"
WARP = ("temperature", "top_k", "top_p")
IDENTITY_COLUMNS = ("pair", "dataset", "gpu", "seed", "max_new_tokens")


def warp_of(params: dict, cfg: dict) -> dict:
    """The warp a cell sampled with: the config's ``decoding`` node, else the method's parameters."""
    dec = node if isinstance(node := cfg.get("decoding"), dict) else {}
    src = dec if any(k in dec for k in WARP) else params
    return {k: src.get(k) for k in WARP if src.get(k) is not None}


def _num(v) -> str:
    try:
        return f"{float(v):g}"
    except (TypeError, ValueError):
        return str(v)


def regime_label(decoding: str, warp: dict) -> str:
    """``greedy`` or the warp, e.g. ``T 1 · top-k 20 · top-p 0.9`` (top-k 0 and top-p 1 are "off")."""
    if decoding == GREEDY:
        return GREEDY
    if not warp:
        return str(decoding)
    t = warp.get("temperature")
    if t is not None and float(t) == 0.0:
        return GREEDY
    parts = [f"T {_num(t)}" if t is not None else "T ?"]
    k, p = warp.get("top_k"), warp.get("top_p")
    parts.append("top-k off" if k in (None, 0) else f"top-k {int(float(k))}")
    parts.append("top-p off" if p is None or float(p) >= 1.0 else f"top-p {_num(p)}")
    return " · ".join(parts)


def comparison_items(summary: dict, cfg: dict, row: dict) -> dict[str, Any]:
    """The flattened settings a comparable cell must share (module docstring)."""
    items: dict[str, Any] = {}
    if cfg:
        items = dict(flatten(comparison_config(cfg)))  # the method's side (γ policy, draft selection) dropped
    for k in IDENTITY_COLUMNS:
        items.setdefault(k, row.get(k))
    items["regime"] = row.get("regime")
    return items


def comparison_key(items: dict) -> str:
    return json.dumps(items, sort_keys=True, default=str)


def key_column(cells: pd.DataFrame) -> pd.Series:
    """Each cell's comparison key (``match_json``), built from the columns for tables without it."""
    if "match_json" in cells:
        return cells["match_json"].astype(str)
    regimes = cells["regime"] if "regime" in cells else _regimes(cells)
    cols = [c for c in IDENTITY_COLUMNS if c in cells]
    return pd.Series([comparison_key({**{c: _plain(r[c]) for c in cols}, "regime": g})
                      for (_, r), g in zip(cells.iterrows(), regimes)], index=cells.index, dtype=object)


def seedless_key(cells: pd.DataFrame) -> pd.Series:
    """Each cell's comparison key without its seed, with its method: cells sharing it differ *only* in seed, and
    only they may be pooled "across seeds" (issue 33.3: two cells differing in prompts or max_new_tokens are not
    two seeds)."""
    method = cells["params_json"].astype(str) if "params_json" in cells else pd.Series("", index=cells.index)
    names = cells["method_name"].astype(str) if "method_name" in cells else pd.Series("", index=cells.index)
    out = []
    for key, name, params in zip(key_column(cells), names, method):
        items = json.loads(key)
        items.pop("seed", None)
        out.append(comparison_key({**items, "method": name, "params": params}))
    return pd.Series(out, index=cells.index, dtype=object)


def _plain(v):
    return None if isinstance(v, float) and math.isnan(v) else v


def _regimes(cells: pd.DataFrame) -> pd.Series:
    out = []
    for _, r in cells.iterrows():
        warp = {k: _plain(r.get(f"param.{k}")) for k in WARP if _plain(r.get(f"param.{k}")) is not None}
        out.append(regime_label(str(r.get("decoding", "sampling")), warp))
    return pd.Series(out, index=cells.index, dtype=object)


def regimes(cells: pd.DataFrame) -> pd.Series:
    """The ``regime`` column, or one derived from ``decoding`` and the warp parameters."""
    return cells["regime"].astype(str) if "regime" in cells else _regimes(cells)


def differing(a: str, b: str) -> list[str]:
    """``key (a vs b)`` for the settings in which two comparison keys differ."""
    x, y = json.loads(a), json.loads(b)
    return [f"{k} ({x.get(k)!r} vs {y.get(k)!r})" for k in sorted(set(x) | set(y)) if x.get(k) != y.get(k)]
