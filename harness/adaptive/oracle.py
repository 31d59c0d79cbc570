"""The fixed-γ oracle of adaptive §3: the best fixed γ per prompt and per dataset, from a sweep.

§3 motivates adaptive γ by the 9-18 % gained when γ is tuned per prompt instead of per dataset.
Given one row per (dataset, prompt, γ) of a fixed-γ sweep with the measured time and tokens,
:func:`fixed_gamma_oracle` returns, per dataset, the best single γ (highest tokens/s over the
dataset: ratio of totals) and, per prompt, the best γ for that prompt — the upper bound that
adaptive policies are judged against. Pure pandas; the sweep itself is the study script's.
"""
from __future__ import annotations

import pandas as pd


def fixed_gamma_oracle(sweep: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``sweep`` columns: dataset, prompt (id), gamma, new_tokens, wall_time_s.

    Returns (per_dataset, per_prompt):
    per_dataset — dataset, best_gamma, tokens_per_s (at the best γ), oracle_tokens_per_s (each
    prompt at its own best γ, ratio of totals), per_prompt_gain (oracle ÷ best fixed − 1);
    per_prompt — dataset, prompt, best_gamma, tokens_per_s, new_tokens, wall_time_s of its best γ.
    """
    need = {"dataset", "prompt", "gamma", "new_tokens", "wall_time_s"}
    missing = need - set(sweep.columns)
    if missing:
        raise ValueError(f"fixed-γ sweep lacks column(s) {sorted(missing)}; needs {sorted(need)}")
    df = sweep.assign(tokens_per_s=sweep["new_tokens"] / sweep["wall_time_s"])
    totals = df.groupby(["dataset", "gamma"])[["new_tokens", "wall_time_s"]].sum()
    totals["tokens_per_s"] = totals["new_tokens"] / totals["wall_time_s"]
    best = totals.reset_index().sort_values(["dataset", "tokens_per_s"], ascending=[True, False])
    best = best.groupby("dataset").head(1)[["dataset", "gamma", "tokens_per_s"]].rename(columns={"gamma": "best_gamma"})
    idx = df.groupby(["dataset", "prompt"])["tokens_per_s"].idxmax()
    per_prompt = df.loc[idx, ["dataset", "prompt", "gamma", "tokens_per_s", "new_tokens", "wall_time_s"]]
    per_prompt = per_prompt.rename(columns={"gamma": "best_gamma"}).reset_index(drop=True)
    orc = per_prompt.groupby("dataset")[["new_tokens", "wall_time_s"]].sum()
    orc["oracle_tokens_per_s"] = orc["new_tokens"] / orc["wall_time_s"]
    per_dataset = best.merge(orc[["oracle_tokens_per_s"]].reset_index(), on="dataset")
    per_dataset["per_prompt_gain"] = per_dataset["oracle_tokens_per_s"] / per_dataset["tokens_per_s"] - 1
    return per_dataset.reset_index(drop=True), per_prompt
