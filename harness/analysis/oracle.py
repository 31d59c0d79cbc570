"""The fixed-γ oracle in the report (adaptive §3; issue 11 item 4): adaptive policies against the best fixed γ.

A **fixed-γ sweep** is a set of finished cells that differ only in ``gamma`` — same method, pair,
dataset, gpu, seed, decoding and every other parameter, ``gamma_policy`` fixed (or absent: cells from
before the policy keys) — with at least two γ values. From its records (matched prompt by prompt on
``index``) :func:`harness.adaptive.oracle.fixed_gamma_oracle` gives the best fixed γ for the dataset
(highest tokens/s, ratio of totals) and each prompt's own best γ: the per-prompt oracle, the upper
bound §3 motivates adaptive γ with (9-18 % over the best per-dataset γ in the paper).

:func:`oracle_tables` returns (sweeps, comparisons): one row per sweep (best γ, its tokens/s, the
oracle's, the per-prompt gain, the distribution of per-prompt best γ), and one row per adaptive cell
of the same method/pair/dataset/gpu/seed/decoding (``gamma_policy`` ≠ fixed): its tokens/s ÷ SD at γ = 4
(where swept), ÷ the best fixed γ and ÷ the oracle, as ratio of totals and geometric mean of per-prompt
ratios, each with a 95 % percentile bootstrap CI over prompts. Pure pandas/numpy (no decoders, no torch).

The per-prompt oracle takes a maximum over noisy timings (one run per γ and prompt): it is biased
upwards by the noise, more so with more γ values swept; read it as an optimistic bound.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from harness.adaptive.oracle import fixed_gamma_oracle
from harness.analysis import stats

IDENTITY = ["method_name", "pair", "dataset", "gpu", "seed", "decoding"]
#: parameters that choose or tune the γ policy: not part of what makes cells comparable in a sweep
POLICY_PARAMS = {"param.gamma", "param.gamma_policy", "param.gamma_min", "param.gamma_max", "param.acc_history",
                 "param.acc_max", "param.acc_estimator", "param.time_window", "param.q_state_len", "param.q_lr",
                 "param.q_discount", "param.q_epsilon", "param.q_epsilon_warmup", "param.q_warmup_trials",
                 "param.q_reward", "param.hf_transient"}
SWEEP_COLUMNS = ["method_name", "pair", "dataset", "gpu", "seed", "decoding", "gammas", "prompts", "best_gamma",
                 "best_tokens_per_s", "oracle_tokens_per_s", "per_prompt_gain", "per_prompt_best_gammas"]


def _policy(cells: pd.DataFrame) -> pd.Series:
    col = cells["param.gamma_policy"] if "param.gamma_policy" in cells else pd.Series("fixed", index=cells.index)
    return col.fillna("fixed").astype(str)


def _key_columns(cells: pd.DataFrame) -> list[str]:
    others = sorted(c for c in cells.columns if c.startswith("param.") and c not in POLICY_PARAMS)
    return [c for c in IDENTITY if c in cells] + others


def _group_key(cells: pd.DataFrame, cols: list[str]) -> pd.Series:
    return pd.Series(["|".join(map(str, row)) for row in cells[cols].itertuples(index=False)], index=cells.index,
                     dtype=object)


def _paired(a: pd.DataFrame, b: pd.DataFrame, n_resamples: int) -> dict:
    """tokens/s of a ÷ b over the prompts both have (``index``): ratio of totals and geometric mean, with CIs."""
    m = a.merge(b, on="index", suffixes=("_a", "_b"))
    m = m[(m.wall_time_s_a > 0) & (m.wall_time_s_b > 0) & (m.new_tokens_a > 0) & (m.new_tokens_b > 0)]
    if m.empty:
        return {"n": 0}
    arrays = tuple(m[c].to_numpy(float) for c in ("new_tokens_a", "wall_time_s_a", "new_tokens_b", "wall_time_s_b"))
    rot = stats.estimate(arrays, stats.ratio_of_totals, n_resamples=n_resamples)
    per_prompt = (arrays[0] / arrays[1]) / (arrays[2] / arrays[3])
    geo = stats.estimate((per_prompt,), stats.geometric_mean, n_resamples=n_resamples)
    return {"n": len(m), "rot": rot, "geo": geo}


def oracle_tables(cells: pd.DataFrame, records: pd.DataFrame,
                  n_resamples: int = stats.N_RESAMPLES) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(sweeps, comparisons) — see the module docstring. Empty frames when there is no fixed-γ sweep."""
    if cells.empty or "param.gamma" not in cells or records.empty:
        return pd.DataFrame(columns=SWEEP_COLUMNS), pd.DataFrame()
    cells = cells[cells["param.gamma"].notna()].copy()
    cells["policy"] = _policy(cells)
    cols = _key_columns(cells)
    cells["sweep_key"] = _group_key(cells, cols)
    ident = [c for c in IDENTITY if c in cells]
    cells["ident_key"] = _group_key(cells, ident)
    rec = records[["cell_id", "index", "new_tokens", "wall_time_s"]]
    sweeps, comparisons = [], []
    fixed = cells[cells.policy == "fixed"]
    for _, group in fixed.groupby("sweep_key"):
        if group["param.gamma"].nunique() < 2:
            continue
        group = group.drop_duplicates("param.gamma")
        r = rec.merge(group[["cell_id", "param.gamma"]], on="cell_id")
        common = set.intersection(*(set(g["index"]) for _, g in r.groupby("param.gamma")))
        r = r[r["index"].isin(common)]
        if r.empty:
            continue
        sweep = pd.DataFrame({"dataset": "d", "prompt": r["index"], "gamma": r["param.gamma"].astype(int),
                              "new_tokens": r["new_tokens"], "wall_time_s": r["wall_time_s"]})
        per_dataset, per_prompt = fixed_gamma_oracle(sweep)
        best = per_dataset.iloc[0]
        first = group.iloc[0]
        counts = per_prompt.best_gamma.value_counts().sort_index()
        gammas = ",".join(str(int(g)) for g in sorted(group["param.gamma"]))
        sweeps.append({**{c: first[c] for c in ident}, "gammas": gammas,
                       "prompts": len(common), "best_gamma": int(best.best_gamma),
                       "best_tokens_per_s": best.tokens_per_s, "oracle_tokens_per_s": best.oracle_tokens_per_s,
                       "per_prompt_gain": best.per_prompt_gain,
                       "per_prompt_best_gammas": ", ".join(f"γ={g}: {n}" for g, n in counts.items())})
        baselines = {"best fixed γ": sweep[sweep.gamma == int(best.best_gamma)],
                     "oracle": per_prompt.rename(columns={"best_gamma": "gamma"})}
        if 4 in set(sweep.gamma):
            baselines["SD γ=4"] = sweep[sweep.gamma == 4]
        baselines = {k: v.rename(columns={"prompt": "index"})[["index", "new_tokens", "wall_time_s"]]
                     for k, v in baselines.items()}
        adaptive = cells[(cells.policy != "fixed") & (cells.ident_key == first["ident_key"])]
        for _, cell in adaptive.iterrows():
            mine = rec[rec.cell_id == cell["cell_id"]][["index", "new_tokens", "wall_time_s"]]
            row = {**{c: cell[c] for c in ident}, "cell_id": cell["cell_id"], "gamma_policy": cell["policy"],
                   "tokens_per_s": mine.new_tokens.sum() / mine.wall_time_s.sum() if len(mine) else math.nan}
            for label, base in baselines.items():
                p = _paired(mine, base, n_resamples)
                row[f"n vs {label}"] = p["n"]
                for stat in ("rot", "geo"):
                    v = p.get(stat, (math.nan, math.nan, math.nan))
                    row[f"{stat} vs {label}"], row[f"{stat} vs {label} lo"], row[f"{stat} vs {label} hi"] = v
            comparisons.append(row)
    return (pd.DataFrame(sweeps, columns=SWEEP_COLUMNS) if sweeps else pd.DataFrame(columns=SWEEP_COLUMNS),
            pd.DataFrame(comparisons))


def _ci(v, lo, hi) -> str:
    if v is None or not np.isfinite(v):
        return "—"
    return f"{v:.3f} [{lo:.3f}, {hi:.3f}]" if np.isfinite(lo) else f"{v:.3f}"


def comparison_display(comparisons: pd.DataFrame) -> pd.DataFrame:
    """The comparisons as text cells: estimate [95 % CI]."""
    if comparisons.empty:
        return comparisons
    out = comparisons[[c for c in IDENTITY if c in comparisons] + ["gamma_policy", "tokens_per_s"]].copy()
    for label in ("SD γ=4", "best fixed γ", "oracle"):
        for stat, name in (("rot", "ratio of totals"), ("geo", "geo. mean")):
            col = f"{stat} vs {label}"
            if col in comparisons:
                out[f"÷ {label} ({name})"] = [_ci(r[col], r[f"{col} lo"], r[f"{col} hi"])
                                             for _, r in comparisons.iterrows()]
    return out
