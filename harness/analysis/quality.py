"""Per-cell quality and cost, each with a percentile bootstrap CI over prompts.

Quality: the task metrics (``metric.<name>``) and the output's perplexity under the target
(``output_ppl``, lower is better), as means over the prompts that have a value. Each task declares its
**primary** metric and its direction (``Task.primary_metric``, ``Task.higher_is_better``, written to
``summary.json``; INTERFACES.md item 4): the papers' tables and the Pareto fronts use it (SQuAD exact
match, Spider execution accuracy, CNN/DM Rouge-L, HumanEval pass@1, MT-Bench the judge's score); a task
without one, or whose metric was not measured (MT-Bench without a judge), falls back on perplexity, and
the table says so. Metrics named ``flag_*`` and ``suspicious`` are flags (HumanEval's sandbox), never a
quality axis. Cost: tokens/s and J/token as ratios of totals. Drafting: block efficiency (new tokens ÷
target calls), acceptance rate (accepted ÷ draft positions), both pooled over the cell's prompts.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from harness.analysis import stats

PPL = "output_ppl"
NAN = math.nan
#: metrics that are higher-is-better whatever a summary says (older summaries record no direction)
HIGHER_IS_BETTER = {"metric.mt_bench_score": True}
#: the cell columns a summary row carries (identity, regime, comparison key, declarations)
CELL_COLUMNS = ("cell_id", "method", "method_name", "family", "label", "pair", "dataset", "gpu", "seed", "decoding",
                "regime", "interleaved", "lossless", "match_json", "primary_metric", "primary_metric_higher_is_better",
                "primary_metric_recorded", "pair_target", "pair_draft", "pair_drafts", "report_json", "max_new_tokens")


def is_flag(column: str) -> bool:
    """``metric.flag_*`` and ``metric.suspicious``: flags, never a quality axis."""
    name = column.removeprefix("metric.")
    return name.startswith("flag_") or name == "suspicious"


def quality_columns(records: pd.DataFrame) -> list[str]:
    """Task metrics with at least one value (flags excluded), then perplexity."""
    metrics = [c for c in records.columns if c.startswith("metric.") and not is_flag(c)
               and pd.to_numeric(records[c], errors="coerce").notna().any()]
    return sorted(metrics) + ([PPL] if PPL in records.columns else [])


def flag_columns(records: pd.DataFrame) -> list[str]:
    return sorted(c for c in records.columns if c.startswith("metric.") and is_flag(c))


@dataclass(frozen=True)
class Primary:
    """A dataset's quality axis: the column, its direction, and why it is what it is (empty if declared)."""

    column: str
    higher_is_better: bool
    note: str = ""

    @property
    def name(self) -> str:
        return "PPL" if self.column == PPL else self.column.removeprefix("metric.")


def primary(cells: pd.DataFrame, records: pd.DataFrame | None = None) -> Primary:
    """The declared primary metric of these cells (one dataset), or perplexity with the reason."""
    declared = sorted({str(v) for v in cells.get("primary_metric", pd.Series(dtype=object)).dropna()})
    if len(declared) > 1:
        return Primary(PPL, False, f"cells declare different primary metrics ({', '.join(declared)}): perplexity")
    if not declared:
        recorded = bool(cells.get("primary_metric_recorded", pd.Series(False, index=cells.index)).fillna(False).any())
        why = "the task has no reference metric" if recorded else "no primary metric recorded (older summaries)"
        return Primary(PPL, False, why)
    col = f"metric.{declared[0]}"
    values = records[col] if records is not None and col in records else cells.get(col)
    if values is None or not pd.to_numeric(values, errors="coerce").notna().any():
        return Primary(PPL, False, f"{declared[0]} not measured in these cells: perplexity instead")
    hib = cells.get("primary_metric_higher_is_better", pd.Series(True, index=cells.index)).dropna()
    return Primary(col, bool(hib.iloc[0]) if len(hib) else HIGHER_IS_BETTER.get(col, True))


def higher_is_better(column: str, cells: pd.DataFrame | None = None) -> bool:
    """Direction of a quality column: perplexity lower, a declared primary metric as declared, else higher."""
    if column == PPL:
        return False
    if column in HIGHER_IS_BETTER:
        return HIGHER_IS_BETTER[column]
    if cells is not None and "primary_metric" in cells:
        mine = cells[cells["primary_metric"].astype(str) == column.removeprefix("metric.")]
        hib = mine.get("primary_metric_higher_is_better", pd.Series(dtype=object)).dropna()
        if len(hib):
            return bool(hib.iloc[0])
    return True


def quality_label(column: str, higher: bool | None = None) -> str:
    """Axis label with direction: e.g. ``exact_match (higher is better)``."""
    if column == PPL:
        return "output perplexity under the target (lower is better)"
    higher = higher_is_better(column) if higher is None else higher
    return f"{column.removeprefix('metric.')} ({'higher' if higher else 'lower'} is better)"


def _mean_ci(values: np.ndarray, **boot) -> tuple[float, float, float, int]:
    v = values[np.isfinite(values)]
    if not len(v):
        return NAN, NAN, NAN, 0
    point, lo, hi = stats.estimate((v,), stats.mean, **boot)
    return point, lo, hi, len(v)


def _rate_ci(num: np.ndarray, den: np.ndarray, **boot) -> tuple[float, float, float]:
    if not len(num) or not np.isfinite(num).all() or not np.isfinite(den).all() or den.sum() <= 0:
        return NAN, NAN, NAN
    return stats.estimate((num, den), stats.total_ratio, **boot)


def cell_summary(records: pd.DataFrame, cells: pd.DataFrame, **boot) -> pd.DataFrame:
    """One row per cell: identity, quality columns (``<q>``, ``<q>_lo``, ``<q>_hi``, ``<q>_n``),
    ``tokens_per_s``, ``j_per_token`` (NaN with ``energy_reason``), ``block_efficiency``,
    ``acceptance_rate`` and ``node_acceptance_rate`` with CIs."""
    qcols = quality_columns(records)
    rows = []
    for _, cell in cells.iterrows():
        r = records[records["cell_id"] == cell["cell_id"]]
        row = {k: cell.get(k) for k in CELL_COLUMNS}
        row.update({k: v for k, v in cell.items() if str(k).startswith(("param.", "stat."))})
        row["n_prompts"] = len(r)
        for q in qcols:
            vals = pd.to_numeric(r[q], errors="coerce").to_numpy(float) if q in r else np.array([])
            row[q], row[q + "_lo"], row[q + "_hi"], row[q + "_n"] = _mean_ci(vals, **boot)
        for f in flag_columns(r):
            row[f] = pd.to_numeric(r[f], errors="coerce").mean()
        tok = r["new_tokens"].to_numpy(float)
        row["tokens_per_s"], row["tokens_per_s_lo"], row["tokens_per_s_hi"] = _rate_ci(
            tok, r["wall_time_s"].to_numpy(float), **boot)
        jpt = pd.to_numeric(r.get("energy.j_per_token"), errors="coerce") if "energy.j_per_token" in r else None
        energy = (jpt * r["new_tokens"]).to_numpy(float) if jpt is not None else np.full(len(r), NAN)
        row["j_per_token"], row["j_per_token_lo"], row["j_per_token_hi"] = _rate_ci(energy, tok, **boot)
        row["energy_reason"] = None if np.isfinite(row["j_per_token"]) else _energy_reason(r, cell)
        row.update(_net_energy(r, tok, energy, **boot))
        for name, num, den in (("block_efficiency", "new_tokens", "target_calls"),
                               ("acceptance_rate", "accepted_tokens", "draft_positions"),
                               ("node_acceptance_rate", "accepted_tokens", "draft_nodes")):
            if num in r and den in r and pd.to_numeric(r[den], errors="coerce").fillna(0).sum() > 0:
                row[name], row[name + "_lo"], row[name + "_hi"] = _rate_ci(
                    pd.to_numeric(r[num], errors="coerce").to_numpy(float),
                    pd.to_numeric(r[den], errors="coerce").to_numpy(float), **boot)
            else:
                row[name] = row[name + "_lo"] = row[name + "_hi"] = NAN
        rows.append(row)
    return pd.DataFrame(rows)


IDLE_DOMINATED = 0.10  # net below this share of gross (harness.energy.reading.IDLE_DOMINATED)


def _net_energy(r: pd.DataFrame, tok: np.ndarray, gross: np.ndarray, **boot) -> dict:
    """Net J/token (above the measured idle) with its CI beside gross, and whether the cell is
    idle-dominated (net < 10 % of gross: gross then measures the idle GPU more than the method)."""
    field = "energy.net_j_per_token"
    net = (pd.to_numeric(r[field], errors="coerce") * r["new_tokens"]).to_numpy(float) if field in r \
        else np.full(len(r), NAN)
    row: dict[str, Any] = dict(zip(("net_j_per_token", "net_j_per_token_lo", "net_j_per_token_hi"),
                                   _rate_ci(net, tok, **boot)))
    known = len(net) and np.isfinite(net).all() and np.isfinite(gross).all() and gross.sum() > 0
    row["net_share"] = net.sum() / gross.sum() if known else NAN
    row["idle_dominated"] = bool(row["net_share"] < IDLE_DOMINATED) if known else None
    return row


def _energy_reason(r: pd.DataFrame, cell: pd.Series) -> str:
    for key in ("energy.reason",):
        if key in cell and isinstance(cell[key], str) and cell[key]:
            return cell[key]
    if "energy.reason" in r:
        reasons = sorted({x for x in r["energy.reason"].dropna().astype(str) if x})
        if reasons:
            return "; ".join(reasons)
    return "no energy reading"


def by_category(records: pd.DataFrame, cells: pd.DataFrame, column: str, **boot) -> pd.DataFrame:
    """One row per cell × category (``overall``, then each ``meta.category``): the mean of ``column`` over the
    prompts that have a value, its percentile bootstrap CI and count ``n`` — e.g. the MT-Bench score per
    category (``metric.mt_bench_score``; prompts are resampled within each category)."""
    from harness.analysis.tables import categories

    rows: list[dict] = []
    if column not in records.columns:
        return pd.DataFrame(rows)
    cats = categories(records)
    for _, cell in cells.iterrows():
        mask = records["cell_id"] == cell["cell_id"]
        values = pd.to_numeric(records.loc[mask, column], errors="coerce")
        if not values.notna().any():
            continue
        groups = [("overall", values)] + [(c, values[cats[mask] == c]) for c in sorted(set(cats[mask])) if c]
        for category, v in groups:
            point, lo, hi, n = _mean_ci(v.to_numpy(float), **boot)
            rows.append({**{k: cell.get(k) for k in ("cell_id", "label", "pair", "dataset", "gpu", "seed")},
                         "category": category, column: point, column + "_lo": lo, column + "_hi": hi, "n": n})
    return pd.DataFrame(rows)
