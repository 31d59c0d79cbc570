"""Paired speed-up and energy ratios against a baseline method (GUIDE §5).

A cell is compared with the baseline cell of the same pair × dataset × gpu × seed (and
``max_new_tokens``), prompt by prompt: the baseline is ``ar_greedy`` for greedy cells and
``ar_sampling`` for sampling ones (configurable). Two estimates, each with a percentile bootstrap
CI over prompts (prompts resampled jointly for both cells):

* ratio of totals: (Σ tokens / Σ seconds) of the cell ÷ the baseline's; J/token likewise;
* geometric mean of the per-prompt ratios.

Speed-up > 1 is faster than the baseline; an energy ratio < 1 uses fewer joules per token.
Across seeds: mean ± s.d. of the per-seed estimates. Per ``meta.category`` and overall.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from harness.analysis import stats
from harness.analysis.tables import GREEDY, SAMPLING, categories, prompt_key

DEFAULT_BASELINES = {GREEDY: "ar_greedy", SAMPLING: "ar_sampling"}
WARP_PARAMS = ("param.temperature", "param.top_k", "param.top_p")
OVERALL = "overall"
NAN = math.nan


def match_baselines(cells: pd.DataFrame, baselines: dict[str, str] | None = None) -> pd.DataFrame:
    """For every cell: ``baseline_cell_id`` (None where there is none) and ``baseline_note``.

    Several candidate baseline cells (e.g. ar_sampling at two temperatures): the one with the
    same warp parameters is preferred, then the first by cell id.
    """
    baselines = {**DEFAULT_BASELINES, **(baselines or {})}
    rows = []
    for _, cell in cells.iterrows():
        wanted = baselines.get(cell["decoding"])
        cand = cells[(cells["method_name"] == wanted) & _same(cells, cell, ("pair", "dataset", "gpu", "seed"))]
        if "max_new_tokens" in cells.columns and pd.notna(cell.get("max_new_tokens")):
            cand = cand[cand["max_new_tokens"].isna() | (cand["max_new_tokens"] == cell["max_new_tokens"])]
        note = ""
        if cand.empty:
            rows.append({"cell_id": cell["cell_id"], "baseline_cell_id": None, "baseline_method": wanted,
                         "baseline_note": f"no {wanted} cell with the same pair, dataset, gpu, seed and "
                                          f"max_new_tokens"})
            continue
        if len(cand) > 1:
            same_warp = cand[_same(cand, cell, [c for c in WARP_PARAMS if c in cells.columns])]
            if not same_warp.empty:
                cand = same_warp
            note = f"{len(cand)} candidate baseline cells; used the first by cell id"
        cand = cand.sort_values("cell_id")
        rows.append({"cell_id": cell["cell_id"], "baseline_cell_id": cand["cell_id"].iloc[0],
                     "baseline_method": wanted, "baseline_note": note})
    return pd.DataFrame(rows, columns=["cell_id", "baseline_cell_id", "baseline_method", "baseline_note"])


def _same(df: pd.DataFrame, row: pd.Series, cols) -> pd.Series:
    mask = pd.Series(True, index=df.index)
    for c in cols:
        v = row.get(c)
        mask &= (df[c].isna() if pd.isna(v) else (df[c].astype(str) == str(v)))
    return mask


def _energy_j(rec: pd.DataFrame) -> pd.Series:
    """Joules of one generation of each prompt: J/token × new tokens (the protocol's repetitions are
    already divided out of ``energy.j_per_token``)."""
    if "energy.j_per_token" not in rec.columns:
        return pd.Series(NAN, index=rec.index)
    return pd.to_numeric(rec["energy.j_per_token"], errors="coerce") * rec["new_tokens"]


def pair_prompts(records: pd.DataFrame, cell_id: str, baseline_id: str) -> pd.DataFrame:
    """The prompts both cells ran, side by side: tokens, seconds, joules (``_m`` method, ``_b`` baseline)."""
    cols = ["key", "category", "new_tokens", "wall_time_s", "energy_j"]

    def side(cid):
        r = records[records["cell_id"] == cid]
        return pd.DataFrame({"key": prompt_key(r), "category": categories(r), "new_tokens": r["new_tokens"].astype(float),
                             "wall_time_s": r["wall_time_s"].astype(float), "energy_j": _energy_j(r)})[cols]
    m, b = side(cell_id), side(baseline_id)
    out = m.merge(b.drop(columns="category"), on="key", suffixes=("_m", "_b"))
    return out.sort_values("key", kind="stable").reset_index(drop=True)


def ratio_estimates(p: pd.DataFrame, **boot) -> dict:
    """Speed-up and energy ratio (ratio of totals; geometric mean of per-prompt ratios), with CIs,
    from a :func:`pair_prompts` table."""
    out = {"n_prompts": len(p)}
    tok_m, t_m, tok_b, t_b = (p[c].to_numpy(float) for c in ("new_tokens_m", "wall_time_s_m", "new_tokens_b",
                                                             "wall_time_s_b"))
    out["baseline_seconds_per_token"] = t_b.sum() / tok_b.sum() if len(p) and tok_b.sum() > 0 else NAN
    out["speedup"], out["speedup_lo"], out["speedup_hi"] = stats.estimate((tok_m, t_m, tok_b, t_b),
                                                                          stats.ratio_of_totals, **boot)
    with np.errstate(all="ignore"):
        per_prompt = (tok_m / t_m) / (tok_b / t_b)
    ok = np.isfinite(per_prompt) & (per_prompt > 0)
    out["speedup_geo"], out["speedup_geo_lo"], out["speedup_geo_hi"] = stats.estimate((per_prompt[ok],),
                                                                                      stats.geometric_mean, **boot)
    e_m, e_b = p["energy_j_m"].to_numpy(float), p["energy_j_b"].to_numpy(float)
    if len(p) and np.isfinite(e_m).all() and np.isfinite(e_b).all():
        out["energy_ratio"], out["energy_ratio_lo"], out["energy_ratio_hi"] = stats.estimate(
            (e_m, tok_m, e_b, tok_b), stats.ratio_of_totals, **boot)
        with np.errstate(all="ignore"):
            per = (e_m / tok_m) / (e_b / tok_b)
        ok = np.isfinite(per) & (per > 0)
        out["energy_ratio_geo"], out["energy_ratio_geo_lo"], out["energy_ratio_geo_hi"] = stats.estimate(
            (per[ok],), stats.geometric_mean, **boot)
        out["energy_reason"] = None
    else:
        for k in ("energy_ratio", "energy_ratio_geo"):
            out[k] = out[k + "_lo"] = out[k + "_hi"] = NAN
        missing = int((~np.isfinite(e_m)).sum() + (~np.isfinite(e_b)).sum())
        out["energy_reason"] = (f"energy not measured for {missing} of {2 * len(p)} prompt runs (cell + baseline)"
                                if len(p) else "no common prompts")
    return out


def paired_ratios(records: pd.DataFrame, cells: pd.DataFrame, baselines: dict[str, str] | None = None,
                  **boot) -> pd.DataFrame:
    """One row per cell × category (``overall`` plus each ``meta.category``): speed-up and energy
    ratio against the cell's baseline, with bootstrap CIs over prompts; NaN with a reason where no
    baseline or no common prompt exists."""
    matches = match_baselines(cells, baselines)
    rows = []
    for _, m in matches.iterrows():
        cell = cells[cells["cell_id"] == m["cell_id"]].iloc[0]
        base = {k: cell.get(k) for k in ("cell_id", "method", "method_name", "label", "pair", "dataset", "gpu",
                                         "seed", "decoding")}
        base.update(baseline_cell_id=m["baseline_cell_id"], baseline_method=m["baseline_method"])
        if pd.isna(m["baseline_cell_id"]):
            rows.append({**base, "category": OVERALL, "n_prompts": 0, "reason": m["baseline_note"]})
            continue
        p = pair_prompts(records, m["cell_id"], m["baseline_cell_id"])
        groups = [(OVERALL, p)]
        if (p["category"] != "").any():
            groups += [(c, g) for c, g in p.groupby("category") if c != ""]
        for cat, g in groups:
            est = ratio_estimates(g, **boot)
            reason = m["baseline_note"] or None
            if not len(g):
                reason = "no prompt in common with the baseline cell"
            rows.append({**base, "category": cat, **est, "reason": reason})
    return pd.DataFrame(rows)


def ratios_across_seeds(per_seed: pd.DataFrame) -> pd.DataFrame:
    """Mean ± s.d. over seeds of each ratio, per pair × dataset × gpu × method × category."""
    keys = ["pair", "dataset", "gpu", "method", "method_name", "decoding", "category"]
    if per_seed.empty:
        return pd.DataFrame()
    out = None
    for value in ("speedup", "speedup_geo", "energy_ratio", "energy_ratio_geo"):
        if value not in per_seed.columns:
            continue
        part = stats.across_seeds(per_seed, keys, value)
        out = part if out is None else out.merge(part.drop(columns="n_seeds"), on=keys)
    return out
