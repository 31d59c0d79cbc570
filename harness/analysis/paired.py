"""Paired speed-up and energy ratios against a baseline cell (GUIDE §5).

A cell is compared with the one baseline cell that has the same **comparison key** — the whole stored
config but the method's own node: pair, dataset and its prompts, ``max_new_tokens``, the decoding and its
warp (temperature, top-k, top-p), gpu, seed, runner and energy settings (:mod:`~harness.analysis.regime`)
— prompt by prompt. The baseline is a method spec (:mod:`~harness.analysis.specs`) per decoding kind:
``ar_greedy`` for greedy cells and ``ar_sampling`` for sampling ones by default, a cell's config may name
another (``report.baselines.sampling: 'sd[gamma=4,gamma_policy=fixed]'``) and the command line wins over
both. No baseline cell with the same key, or several that the spec does not tell apart: the ratio is n/a
with the reason (the nearest candidate's differing settings) — never a cell of another setting.

Two estimates, each with a percentile bootstrap CI over prompts (prompts resampled jointly for both
cells): the ratio of totals ((Σ tokens / Σ seconds) of the cell ÷ the baseline's; J/token likewise) and
the geometric mean of the per-prompt ratios. Speed-up > 1 is faster than the baseline; an energy ratio < 1
uses fewer joules per token. Across seeds: mean ± s.d. of the per-seed estimates. Per ``meta.category``
and overall.
"""
from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pandas as pd

from harness.analysis import stats
from harness.analysis.regime import differing, key_column, seedless_key
from harness.analysis.specs import MethodSpec
from harness.analysis.tables import GREEDY, SAMPLING, categories, prompt_key

DEFAULT_BASELINES = {GREEDY: "ar_greedy", SAMPLING: "ar_sampling"}
OVERALL = "overall"
NAN = math.nan
MATCH_COLUMNS = ["cell_id", "baseline_cell_id", "baseline_method", "baseline_note"]


def _configured(cell: pd.Series) -> dict:
    """``report.baselines`` of the cell's stored config (non-null entries)."""
    try:
        report = json.loads(cell.get("report_json") or "{}")
    except (TypeError, ValueError):
        return {}
    return {k: v for k, v in (report.get("baselines") or {}).items() if v}


def baseline_spec(cell: pd.Series, override: dict | None = None) -> MethodSpec | None:
    """The baseline spec of a cell: the command line's, else its config's, else the default."""
    kind = cell.get("decoding")
    text = (override or {}).get(kind) or _configured(cell).get(kind) or DEFAULT_BASELINES.get(kind)
    return MethodSpec.parse(text) if text else None


def _why_none(cells: pd.DataFrame, keys: pd.Series, cell: pd.Series, spec: MethodSpec, mine: str) -> str:
    named = cells[spec.mask(cells)]
    if named.empty:
        return f"no {spec} cell in these results"
    nearest = min(named.index, key=lambda i: len(differing(keys[i], mine)))
    diff = differing(keys[nearest], mine)
    shown = "; ".join(diff[:3]) + (f"; and {len(diff) - 3} more" if len(diff) > 3 else "")
    return (f"no {spec} cell with the same settings (nearest: {named.loc[nearest, 'cell_id']}, which differs in "
            f"{shown})")


def match_baselines(cells: pd.DataFrame, baselines: dict[str, str] | None = None) -> pd.DataFrame:
    """For every cell: ``baseline_cell_id`` (None where there is none), ``baseline_method`` (the spec)
    and ``baseline_note`` (why none, or empty)."""
    keys = key_column(cells)
    rows = []
    for i, cell in cells.iterrows():
        spec = baseline_spec(cell, baselines)
        if spec is None:
            rows.append({"cell_id": cell["cell_id"], "baseline_cell_id": None, "baseline_method": None,
                         "baseline_note": f"no baseline for decoding {cell.get('decoding')!r}"})
            continue
        cand = cells[spec.mask(cells) & (keys == keys[i])]
        bid, note = None, ""
        if len(cand) == 1:
            bid = cand["cell_id"].iloc[0]
        elif cand.empty:
            note = _why_none(cells, keys, cell, spec, keys[i])
        else:
            params = sorted({c[6:] for c in cand.columns if c.startswith("param.")
                             and cand[c].astype(str).nunique() > 1})
            note = (f"{len(cand)} {spec} cells with the same settings, differing in {', '.join(params) or 'nothing'}: "
                    f"name the baseline's parameters (e.g. --baseline '{cell.get('decoding')}={spec.method}"
                    f"[{params[0] if params else 'key'}=...]')")
        rows.append({"cell_id": cell["cell_id"], "baseline_cell_id": bid, "baseline_method": str(spec),
                     "baseline_note": note})
    return pd.DataFrame(rows, columns=MATCH_COLUMNS)


def _energy_j(rec: pd.DataFrame, field: str = "energy.j_per_token") -> pd.Series:
    """Joules of one generation of each prompt: J/token × new tokens (the protocol's repetitions are
    already divided out of ``energy.j_per_token``); ``field="energy.net_j_per_token"``: net of idle."""
    if field not in rec.columns:
        return pd.Series(NAN, index=rec.index)
    return pd.to_numeric(rec[field], errors="coerce") * rec["new_tokens"]


def pair_prompts(records: pd.DataFrame, cell_id: str, baseline_id: str) -> pd.DataFrame:
    """The prompts both cells ran, side by side: tokens, seconds, joules (``_m`` method, ``_b`` baseline)."""
    cols = ["key", "category", "new_tokens", "wall_time_s", "energy_j", "net_energy_j"]

    def side(cid):
        r = records[records["cell_id"] == cid]
        return pd.DataFrame({"key": prompt_key(r), "category": categories(r),
                             "new_tokens": r["new_tokens"].astype(float),
                             "wall_time_s": r["wall_time_s"].astype(float), "energy_j": _energy_j(r),
                             "net_energy_j": _energy_j(r, "energy.net_j_per_token")})[cols]
    m, b = side(cell_id), side(baseline_id)
    out = m.merge(b.drop(columns="category"), on="key", suffixes=("_m", "_b"))
    return out.sort_values("key", kind="stable").reset_index(drop=True)


def ratio_estimates(p: pd.DataFrame, **boot) -> dict:
    """Speed-up and energy ratio (ratio of totals; geometric mean of per-prompt ratios), with CIs,
    from a :func:`pair_prompts` table."""
    out: dict[str, Any] = {"n_prompts": len(p)}
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
    out.update(_net_ratio(p, tok_m, tok_b, **boot))
    return out


def _net_ratio(p: pd.DataFrame, tok_m, tok_b, **boot) -> dict:
    """Net J/token (above the measured idle) relative to the baseline, beside the gross ratio: on a GPU
    that mostly idles the two can point opposite ways."""
    if "net_energy_j_m" not in p:
        return {"net_energy_ratio": NAN, "net_energy_ratio_lo": NAN, "net_energy_ratio_hi": NAN,
                "net_energy_reason": "no net energy in the records"}
    e_m, e_b = p["net_energy_j_m"].to_numpy(float), p["net_energy_j_b"].to_numpy(float)
    if len(p) and np.isfinite(e_m).all() and np.isfinite(e_b).all() and e_m.sum() > 0 and e_b.sum() > 0:
        point, lo, hi = stats.estimate((e_m, tok_m, e_b, tok_b), stats.ratio_of_totals, **boot)
        return {"net_energy_ratio": point, "net_energy_ratio_lo": lo, "net_energy_ratio_hi": hi,
                "net_energy_reason": None}
    return {"net_energy_ratio": NAN, "net_energy_ratio_lo": NAN, "net_energy_ratio_hi": NAN,
            "net_energy_reason": "net energy not measured (or ≤ 0) on some prompt runs" if len(p)
            else "no common prompts"}


def paired_ratios(records: pd.DataFrame, cells: pd.DataFrame, baselines: dict[str, str] | None = None,
                  **boot) -> pd.DataFrame:
    """One row per cell × category (``overall`` plus each ``meta.category``): speed-up and energy
    ratio against the cell's baseline, with bootstrap CIs over prompts; NaN with a reason where no
    baseline or no common prompt exists."""
    matches = match_baselines(cells, baselines)
    settings = dict(zip(cells["cell_id"], seedless_key(cells)))  # pooled across seeds only when all else is equal
    rows = []
    for _, m in matches.iterrows():
        cell = cells[cells["cell_id"] == m["cell_id"]].iloc[0]
        base = {k: cell.get(k) for k in ("cell_id", "method", "method_name", "label", "pair", "dataset", "gpu",
                                         "seed", "decoding", "regime", "lossless")}
        base.update(baseline_cell_id=m["baseline_cell_id"], baseline_method=m["baseline_method"],
                    settings_key=settings[m["cell_id"]])
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
    keys = [k for k in ("pair", "dataset", "gpu", "method", "method_name", "decoding", "regime", "category",
                        "settings_key") if k in per_seed.columns]
    if per_seed.empty:
        return pd.DataFrame()
    out = None
    for value in ("speedup", "speedup_geo", "energy_ratio", "energy_ratio_geo", "net_energy_ratio"):
        if value not in per_seed.columns:
            continue
        part = stats.across_seeds(per_seed, keys, value)
        out = part if out is None else out.merge(part.drop(columns="n_seeds"), on=keys)
    return out
