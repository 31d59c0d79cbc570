"""Pareto fronts (quality vs tokens/s and vs J/token) and iso-quality ratios between method families.

Iso-quality (dsbd v1 §4.2, GUIDE §5): each family swept over its parameters traces points of
(quality, cost); its own non-dominated points form its front. Interpolating both fronts linearly
in quality, one family's advantage over the other is read at equal quality, over the quality
range where both fronts exist; where they do not overlap no ratio is made up. The ratio is
reported as its range over the overlap and the geometric mean over an even grid of qualities,
with a percentile bootstrap CI over prompts (prompts resampled jointly for all cells, so a
resample recomputes every point, both fronts and the ratio).
"""
from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd

from harness.analysis import stats
from harness.analysis.quality import PPL, higher_is_better, primary
from harness.analysis.regime import regimes
from harness.analysis.specs import MethodSpec
from harness.analysis.tables import prompt_key

NAN = math.nan
COSTS = {"tokens_per_s": True, "j_per_token": False, "net_j_per_token": False}  # cost column -> higher is better
#: dsbd §4.2 (the unconstrained DSBD grid against beam sampling; its §4.3 memory-constrained cells are another
#: comparison) and mtad §5
HEADLINE_PAIRS = (("dsbd[memory_constrained=false]", "beam_sampling"), ("mtad", "sd"))
GRID = 51


def pareto_mask(x, y, x_higher: bool = True, y_higher: bool = True) -> np.ndarray:
    """True for the non-dominated points: no other point is at least as good in both and strictly
    better in one. NaN points are never on the front."""
    x = np.asarray(x, float) * (1 if x_higher else -1)
    y = np.asarray(y, float) * (1 if y_higher else -1)
    ok = np.isfinite(x) & np.isfinite(y)
    out: np.ndarray = np.zeros(len(x), bool)
    for i in np.flatnonzero(ok):
        ge = (x[ok] >= x[i]) & (y[ok] >= y[i])
        gt = (x[ok] > x[i]) | (y[ok] > y[i])
        out[i] = not (ge & gt).any()
    return out


def front_curve(quality, cost, q_higher: bool, c_higher: bool) -> tuple[np.ndarray, np.ndarray]:
    """The family's front as (quality ascending, cost): what :func:`interpolate` reads."""
    quality, cost = np.asarray(quality, float), np.asarray(cost, float)
    on = pareto_mask(cost, quality, c_higher, q_higher)
    q, c = quality[on], cost[on]
    order = np.argsort(q, kind="stable")
    return q[order], c[order]


def overlap(qa: np.ndarray, qb: np.ndarray) -> tuple[float, float]:
    if not len(qa) or not len(qb):
        return NAN, NAN
    return max(qa.min(), qb.min()), min(qa.max(), qb.max())


def iso_ratio(front_a, front_b, c_higher: bool, grid: int = GRID) -> tuple[float, float, float, float, float]:
    """(geometric mean, min, max) over the common quality range of A's advantage over B at equal
    quality — cost_A/cost_B where higher cost is better (tokens/s), cost_B/cost_A where lower is
    (J/token): above 1 means A is better — plus the range's ends. NaN where the ranges do not overlap."""
    (qa, ca), (qb, cb) = front_a, front_b
    lo, hi = overlap(qa, qb)
    if not np.isfinite(lo) or lo > hi:
        return NAN, NAN, NAN, lo, hi
    qs = np.linspace(lo, hi, grid) if hi > lo else np.array([lo])
    va, vb = np.interp(qs, qa, ca), np.interp(qs, qb, cb)
    with np.errstate(all="ignore"):
        r = va / vb if c_higher else vb / va
    if not (np.isfinite(r).all() and (r > 0).all()):
        return NAN, NAN, NAN, lo, hi
    return float(np.exp(np.log(r).mean())), float(r.min()), float(r.max()), lo, hi


# ---- points per method, pooled over seeds, and their bootstrap replicates ----------------------------

def _prompt_sums(records: pd.DataFrame, quality: str) -> tuple[list[str], list[str], dict[str, np.ndarray]]:
    """Per method label × prompt key: Σ tokens, Σ seconds, Σ joules, Σ quality, count of quality."""
    r = records.assign(_key=prompt_key(records))
    labels = sorted(r["label"].unique())
    keys = sorted(r["_key"].unique())
    q = pd.to_numeric(r[quality], errors="coerce") if quality in r else pd.Series(NAN, index=r.index)
    jpt = pd.to_numeric(r["energy.j_per_token"], errors="coerce") if "energy.j_per_token" in r else q * NAN
    net = pd.to_numeric(r["energy.net_j_per_token"], errors="coerce") if "energy.net_j_per_token" in r else q * NAN
    frame = pd.DataFrame({"label": r["label"], "key": r["_key"], "tok": r["new_tokens"].astype(float),
                          "sec": r["wall_time_s"].astype(float), "joule": jpt * r["new_tokens"],
                          "netjoule": net * r["new_tokens"],
                          "qsum": q.fillna(0.0), "qn": q.notna().astype(float)})
    # a prompt with an unmeasured run makes the method's energy NaN (min_count keeps the NaN)
    g = frame.groupby(["label", "key"]).agg(tok=("tok", "sum"), sec=("sec", "sum"), qsum=("qsum", "sum"),
                                            qn=("qn", "sum"), joule=("joule", lambda s: s.sum(min_count=len(s))),
                                            netjoule=("netjoule", lambda s: s.sum(min_count=len(s))))
    mats = {c: g[c].unstack("key").reindex(index=labels, columns=keys).to_numpy(float) for c in g.columns}
    return labels, keys, mats


def _points(mats: dict[str, np.ndarray], weights: np.ndarray) -> dict[str, np.ndarray]:
    """Quality, tokens/s and J/token of every method under prompt weights (B, K) → (B, M).
    A method missing a prompt contributes nothing for it (its NaN sums count as 0)."""
    def wsum(m):
        return weights @ np.nan_to_num(m, nan=0.0).T
    with np.errstate(all="ignore"):
        joule = weights @ np.where(np.isnan(mats["joule"]), np.nan, mats["joule"]).T
        net = weights @ np.where(np.isnan(mats["netjoule"]), np.nan, mats["netjoule"]).T
        return {"quality": wsum(mats["qsum"]) / wsum(mats["qn"]),
                "tokens_per_s": wsum(mats["tok"]) / wsum(mats["sec"]),
                "j_per_token": joule / wsum(mats["tok"]), "net_j_per_token": net / wsum(mats["tok"])}


def iso_quality(records: pd.DataFrame, cells: pd.DataFrame, pairs=None, quality_columns=None, *,
                n_resamples: int = 500, level: float = stats.LEVEL, seed: int = stats.SEED) -> pd.DataFrame:
    """Iso-quality ratios per pair × dataset × gpu × decoding regime, for each family pair, quality column
    and cost. A family is a method spec (``dsbd[memory_constrained=false]``: :mod:`~harness.analysis.specs`).
    ``pairs``: (spec A, spec B) tuples or ``"A:B"`` texts; default: the papers' headline pairs plus every
    pair of methods that are both swept (≥ 2 settings). ``quality_columns``: default the dataset's primary
    metric (and perplexity). Rows where no ratio exists say why in ``note``."""
    rows = []
    rng = np.random.default_rng(seed)
    cells = cells.assign(regime=regimes(cells))
    for (pair, dataset, gpu, regime), group in cells.groupby(["pair", "dataset", "gpu", "regime"], dropna=False):
        wanted = [tuple(MethodSpec.parse(x) for x in p) for p in (pairs if pairs is not None
                                                                  else _default_pairs(group))]
        recs = records[records["cell_id"].isin(group["cell_id"])]
        main = primary(group, recs)
        qcols = quality_columns or list(dict.fromkeys([main.column, PPL]))
        for quality in [q for q in qcols if q in recs.columns
                        and pd.to_numeric(recs[q], errors="coerce").notna().any()]:
            labels, keys, mats = _prompt_sums(recs, quality)
            point = _points(mats, np.ones((1, len(keys))))
            idx = rng.integers(0, len(keys), (n_resamples, len(keys)))
            weights = np.apply_along_axis(np.bincount, 1, idx, minlength=len(keys)).astype(float)
            boot = _points(mats, weights)
            q_higher = main.higher_is_better if quality == main.column else higher_is_better(quality, group)
            for fa, fb in wanted:
                members = {str(f): sorted(group.loc[f.mask(group), "label"].astype(str).unique()) for f in (fa, fb)}
                for cost, c_higher in COSTS.items():
                    ctx = {"pair": pair, "dataset": dataset, "gpu": gpu, "decoding": regime, "quality": quality}
                    rows.append(_iso_row(ctx, str(fa), str(fb), q_higher, cost, c_higher, members, labels, point,
                                         boot, level))
    return pd.DataFrame(rows)


def _default_pairs(group: pd.DataFrame) -> list[tuple[str, str]]:
    name = "method_name" if "method_name" in group else "family"
    methods = set(group[name].astype(str))
    out = [p for p in HEADLINE_PAIRS if MethodSpec.parse(p[0]).method in methods
           or MethodSpec.parse(p[1]).method in methods]
    swept = sorted(m for m, g in group.groupby(name) if g["label"].nunique() >= 2)
    named = {MethodSpec.parse(x).method for p in out for x in p}
    out += [p for p in itertools.combinations(swept, 2) if not set(p) <= named]
    return out


def _iso_row(ctx, fa, fb, q_higher, cost, c_higher, members, labels, point, boot, level) -> dict:
    row = {**ctx, "family_a": fa, "family_b": fb, "cost": cost,
           "measure": "speedup" if c_higher else "energy_reduction",
           "n_a": len(members[fa]), "n_b": len(members[fb])}
    nan = {"ratio_geo": NAN, "ratio_min": NAN, "ratio_max": NAN, "ci_lo": NAN, "ci_hi": NAN,
           "overlap_lo": NAN, "overlap_hi": NAN}
    missing = [f for f in (fa, fb) if not members[f]]
    if missing:
        return {**row, **nan, "note": f"no {' or '.join(missing)} cells here ({ctx['decoding']})"}
    cols_a = [labels.index(lab) for lab in members[fa] if lab in labels]
    cols_b = [labels.index(lab) for lab in members[fb] if lab in labels]

    def ratio(pts, b):
        fa_ = front_curve(pts["quality"][b, cols_a], pts[cost][b, cols_a], q_higher, c_higher)
        fb_ = front_curve(pts["quality"][b, cols_b], pts[cost][b, cols_b], q_higher, c_higher)
        return iso_ratio(fa_, fb_, c_higher), fa_, fb_

    (geo, rmin, rmax, lo, hi), front_a, front_b = ratio(point, 0)
    if not len(front_a[0]) or not len(front_b[0]):
        which = [f for f, fr in ((fa, front_a), (fb, front_b)) if not len(fr[0])]
        what = "energy not measured (J/token is NaN)" if cost in ("j_per_token", "net_j_per_token") \
            else f"no {cost} or quality"
        return {**row, **nan, "note": f"{' and '.join(which)}: {what}"}
    if not np.isfinite(geo):
        (a_lo, a_hi), (b_lo, b_hi) = (front_a[0].min(), front_a[0].max()), (front_b[0].min(), front_b[0].max())
        return {**row, **nan, "overlap_lo": lo, "overlap_hi": hi,
                "note": f"quality ranges do not overlap: {fa} [{a_lo:.4g}, {a_hi:.4g}], {fb} [{b_lo:.4g}, {b_hi:.4g}]"}
    reps = np.array([ratio(boot, b)[0][0] for b in range(boot["quality"].shape[0])])
    reps = reps[np.isfinite(reps)]
    alpha = (1 - level) / 2
    ci = (float(np.quantile(reps, alpha)), float(np.quantile(reps, 1 - alpha))) if len(reps) >= 10 else (NAN, NAN)
    note = "single quality value in common" if lo == hi else ""
    if len(reps) < boot["quality"].shape[0]:
        note += ("; " if note else "") + f"ranges overlapped in {len(reps)} of {boot['quality'].shape[0]} resamples"
    return {**row, "ratio_geo": geo, "ratio_min": rmin, "ratio_max": rmax, "ci_lo": ci[0], "ci_hi": ci[1],
            "overlap_lo": lo, "overlap_hi": hi, "note": note}


def front_points(summary: pd.DataFrame, quality: str, cost: str, higher: bool | None = None) -> pd.DataFrame:
    """Per pair × dataset × gpu × decoding regime: every method's (quality, cost) with ``on_front`` marked
    (a front never joins methods of two regimes)."""
    out = []
    summary = summary.assign(regime=regimes(summary))
    q_higher = higher_is_better(quality, summary) if higher is None else higher
    for _, g in summary.groupby(["pair", "dataset", "gpu", "regime"], dropna=False):
        g = g.copy()
        g["on_front"] = pareto_mask(g[cost], g[quality], COSTS[cost], q_higher)
        out.append(g)
    return pd.concat(out) if out else summary.assign(on_front=False)
