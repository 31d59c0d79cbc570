"""CO₂ beside J/token (issue 33.7): the energy the harness measured × the grid's carbon intensity, in
CodeCarbon's convention and units (gCO₂eq per kWh of electricity; emissions in grams of CO₂-equivalent).

No other library measures anything here: the energy is the records' own (``energy.j_per_token`` × new tokens),
and the intensity is configuration — each cell's stored ``report.carbon`` (``region`` and its entry of
``intensity_g_per_kwh``; default: the world average, :data:`harness.config.schema.GRID_INTENSITY`), which
``harness-report --grid-intensity REGION=G`` overrides for every cell. A CO₂ figure is exactly as good as the
energy it comes from (simulated energy gives simulated CO₂; the report's banners say which) and as the intensity,
an annual average unless you set the hour's.
"""
from __future__ import annotations

import json
import math

import pandas as pd

from harness.config.schema import GRID_INTENSITY, GRID_REGION

J_PER_KWH = 3.6e6
NAN = math.nan


def cell_intensity(report_json: str | None, override: tuple[str, float] | None = None) -> tuple[str, float]:
    """(region, gCO₂eq/kWh) of one cell: the override, else its stored ``report.carbon``, else the default."""
    if override is not None:
        return override
    try:
        carbon = (json.loads(report_json or "{}") or {}).get("carbon") or {}
    except (TypeError, ValueError):
        carbon = {}
    region = carbon.get("region") or GRID_REGION
    table = {**GRID_INTENSITY, **(carbon.get("intensity_g_per_kwh") or {})}
    return region, float(table.get(region, NAN))


def g_per_kwh_to_g_per_token(j_per_token: float, intensity: float) -> float:
    """gCO₂eq per token from J/token and gCO₂eq/kWh."""
    return j_per_token / J_PER_KWH * intensity


def co2_table(summary: pd.DataFrame, cells: pd.DataFrame, records: pd.DataFrame,
              override: tuple[str, float] | None = None) -> pd.DataFrame:
    """Per cell: ``region``, ``intensity_g_per_kwh``, ``g_per_1k_tokens`` (with ``_lo``/``_hi`` from J/token's
    CI: the intensity is a constant) and ``total_g`` (the measured prompts' energy; NaN where not measured)."""
    reports = cells.set_index("cell_id")["report_json"] if "report_json" in cells else pd.Series(dtype=object)
    tokens = records.groupby("cell_id")["new_tokens"].sum() if "new_tokens" in records else pd.Series(dtype=float)
    rows = []
    for _, s in summary.iterrows():
        region, intensity = cell_intensity(reports.get(s["cell_id"]), override)
        row = {"cell_id": s["cell_id"], "region": region, "intensity_g_per_kwh": intensity}
        for suffix in ("", "_lo", "_hi"):
            jpt = s.get(f"j_per_token{suffix}", NAN)
            row[f"g_per_1k_tokens{suffix}"] = 1000 * g_per_kwh_to_g_per_token(jpt, intensity) \
                if jpt is not None and pd.notna(jpt) else NAN
        row["total_g"] = g_per_kwh_to_g_per_token(s.get("j_per_token", NAN), intensity) * tokens.get(s["cell_id"], NAN)
        rows.append(row)
    return pd.DataFrame(rows, columns=["cell_id", "region", "intensity_g_per_kwh", "g_per_1k_tokens",
                                       "g_per_1k_tokens_lo", "g_per_1k_tokens_hi", "total_g"])
