"""Latency percentiles per cell from the records' prefill and decode times (no new measurement).

* **TTFT** (time to first token, TTFT-like): ``prefill_time_s``, the forward calls that encode the prompt
  (each model's first call; a speculative method's first target call also verifies its first drafts).
* **TPOT** (time per output token after the first): ``decode_time_s / (new_tokens - 1)``, for prompts that
  generated at least two tokens.
* **end-to-end**: ``wall_time_s`` of the generation.

p50, p90 and p99 over the cell's prompts (linear interpolation between order statistics, numpy's default;
with few prompts p99 is close to the maximum). Records without the times (``hf_assisted``: NaN) give NaN.
Pure pandas/numpy: no torch, no decoder code.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

PERCENTILES = (50, 90, 99)
METRICS = ("ttft_ms", "tpot_ms", "e2e_ms")


def per_prompt(records: pd.DataFrame) -> pd.DataFrame:
    """``cell_id``, ``ttft_ms``, ``tpot_ms``, ``e2e_ms`` per record."""
    def col(name):
        return pd.to_numeric(records[name], errors="coerce") if name in records else pd.Series(np.nan, records.index)

    new = col("new_tokens")
    tpot = (col("decode_time_s") / (new - 1)).where(new >= 2)
    return pd.DataFrame({"cell_id": records["cell_id"], "ttft_ms": col("prefill_time_s") * 1e3,
                         "tpot_ms": tpot * 1e3, "e2e_ms": col("wall_time_s") * 1e3})


def latency_table(records: pd.DataFrame) -> pd.DataFrame:
    """One row per cell: ``n_prompts`` and ``<metric>_p50/_p90/_p99`` for TTFT, TPOT and end-to-end (ms)."""
    columns = ["cell_id", "n_prompts"] + [f"{m}_p{q}" for m in METRICS for q in PERCENTILES]
    if records.empty or "cell_id" not in records:
        return pd.DataFrame(columns=columns)
    rows = []
    for cid, g in per_prompt(records).groupby("cell_id", sort=True):
        row = {"cell_id": cid, "n_prompts": len(g)}
        for m in METRICS:
            values = g[m].dropna().to_numpy(dtype=float)
            for q in PERCENTILES:
                row[f"{m}_p{q}"] = float(np.percentile(values, q)) if len(values) else np.nan
        rows.append(row)
    return pd.DataFrame(rows, columns=columns)
