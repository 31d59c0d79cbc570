"""Provenance and measurement quality: what produced the numbers and what to distrust in them."""
from __future__ import annotations

import importlib.metadata
import math

import numpy as np
import pandas as pd

from harness.analysis.regime import seedless_key

LOW_COVERAGE = 0.5  # fraction of the measured time the energy source actually saw
HIGH_CV = 0.10  # coefficient of variation across seeds (tokens/s) or across energy trials
NAN = math.nan
REPORT_PACKAGES = ("pandas", "numpy", "scipy", "matplotlib", "pyarrow")


def _col(df: pd.DataFrame, name: str, default=None) -> pd.Series:
    return df[name] if name in df.columns else pd.Series(default, index=df.index, dtype=object)


def _distinct(df: pd.DataFrame, name: str) -> str:
    vals = sorted({str(v) for v in _col(df, name).dropna()})
    return ", ".join(vals) if vals else "not recorded"


def provenance(cells: pd.DataFrame) -> tuple[dict, pd.DataFrame]:
    """(facts shared by the run, per-cell table of device / energy source / coverage)."""
    facts = {
        "git sha": _distinct(cells, "env.git_sha"),
        "harness": _distinct(cells, "env.harness"),
        "CPU": _distinct(cells, "env.cpu_model"),
        "python": _distinct(cells, "env.python"),
        "torch": _distinct(cells, "env.torch"),
        "transformers": _distinct(cells, "env.transformers"),
        "hydra": _distinct(cells, "env.hydra"),
        "device": _distinct(cells, "env.device_name") + " (" + _distinct(cells, "env.device_type") + ")",
        "CUDA": _distinct(cells, "env.cuda"),
        "driver": _distinct(cells, "energy_meter.energy_driver"),
        "GPUs metered": _distinct(cells, "energy_meter.energy_gpus"),
        "host": _distinct(cells, "env.host"),
        "run between": (f"{_col(cells, 'started_at').dropna().min()} and {_col(cells, 'finished_at').dropna().max()}"
                        if "started_at" in cells else "not recorded"),
    }
    for pkg in REPORT_PACKAGES:
        try:
            facts[f"{pkg} (report)"] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            facts[f"{pkg} (report)"] = "not installed"
    per_cell = pd.DataFrame({
        "cell": cells["cell_id"], "method": cells.get("label", cells["method_name"]), "seed": cells["seed"],
        "device": _col(cells, "env.device_name"), "energy source": _col(cells, "energy.source"),
        "energy config": _col(cells, "energy_meter.energy_config"),
        "prompts measured": [f"{m:.0f}/{n:.0f}" if pd.notna(m) and pd.notna(n) else "?"
                             for m, n in zip(_col(cells, "energy.prompts_measured"), _col(cells, "energy.prompts"))],
        "coverage": pd.to_numeric(_col(cells, "energy.coverage"), errors="coerce"),
        "interleaved": _col(cells, "interleaved", False).fillna(False).astype(bool),
        "git sha": _col(cells, "env.git_sha").map(lambda s: str(s)[:12] if isinstance(s, str) else s),
        "target revision": _col(cells, "env.checkpoints.target.revision").map(
            lambda s: str(s)[:19] if isinstance(s, str) else s),  # hub commit, or sha256: of a local checkpoint
    })
    return facts, per_cell


def measurement_flags(cells: pd.DataFrame, records: pd.DataFrame, problems: pd.DataFrame,
                      ratios: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per kind of problem and detail, naming the cells it applies to."""
    rows: list[dict] = []

    def add(severity, kind, cell_id, detail):
        rows.append({"severity": severity, "kind": kind, "cell_id": cell_id, "detail": detail})

    for _, p in problems.iterrows():
        kind = {"failed": "failed cell", "unreadable": "unreadable cell", "incomplete": "incomplete cell"}.get(
            p["problem"], str(p["problem"]))
        add("error", kind, p["cell_id"], f"{p['kind']}: {p['error']}")
    for _, c in cells.iterrows():
        cid = c["cell_id"]
        jpt = c.get("energy.j_per_token", NAN)
        if jpt is None or (isinstance(jpt, float) and math.isnan(jpt)):
            add("warning", "energy not measured", cid, str(c.get("energy.reason") or "no energy reading"))
        cov = c.get("energy.coverage", NAN)
        if isinstance(cov, (int, float)) and np.isfinite(cov) and cov < LOW_COVERAGE:
            add("warning", "low energy coverage", cid, f"the energy source saw {cov:.0%} of the measured time "
                                                        f"(< {LOW_COVERAGE:.0%})")
        if str(c.get("env.device_type", "")) == "cpu":
            add("warning", "CPU only", cid, "ran on a CPU: no GPU energy; timings are CPU timings")
        if not bool(c.get("interleaved", False)):
            add("info", "not interleaved", cid, "cells ran one after another, not interleaved prompt by prompt: "
                                                "machine drift between cells is not cancelled by pairing")
    if "energy.trial_spread" in records:
        spread = records.groupby("cell_id")["energy.trial_spread"].apply(
            lambda s: pd.to_numeric(s, errors="coerce").mean())
        for cid, s in spread.items():
            if np.isfinite(s) and s > HIGH_CV:
                add("warning", "high run-to-run variance", cid, f"energy trials disagree by {s:.0%} on average")
    if len(cells) and "seed" in cells:  # only cells that differ in nothing but the seed are seeds of one setting
        for _, g in cells.groupby(seedless_key(cells), dropna=False):
            tps = pd.to_numeric(g["tokens_per_s"], errors="coerce").dropna() if "tokens_per_s" in g else g.iloc[0:0]
            if len(tps) >= 2 and tps.std() / tps.mean() > HIGH_CV:
                for cid in g["cell_id"]:
                    add("warning", "high run-to-run variance", cid,
                        f"tokens/s varies {tps.std() / tps.mean():.0%} (c.v.) across {len(tps)} seeds")
    if "round_gammas_source" in records:
        inferred = records[records["round_gammas_source"] == "inferred"]["cell_id"].unique()
        for cid in inferred:
            add("info", "round depths inferred", cid, "record has no round_gammas (older format): reconstructed "
                                                      "from the configured γ and the clipping rule")
    if "prompt_truncated" in records:
        cut = records[records["prompt_truncated"].fillna(False).astype(bool)]
        for cid, g in cut.groupby("cell_id"):
            add("warning", "prompts truncated to the context", cid,
                f"{len(g)} prompt(s) longer than the model's context kept their last tokens (harness/run/context.py; "
                "records: prompt_truncated, prompt_tokens_original)")
    if ratios is not None and not ratios.empty and "reason" in ratios:
        for _, r in ratios[(ratios["category"] == "overall") & ratios["speedup"].isna()].iterrows() \
                if "speedup" in ratios else ratios.iterrows():
            add("warning", "no paired baseline", r["cell_id"], str(r.get("reason")))
    return pd.DataFrame(rows, columns=["severity", "kind", "cell_id", "detail"])


def grouped_flags(flags: pd.DataFrame) -> pd.DataFrame:
    """Flags with the same kind and detail merged into one row listing their cells."""
    if flags.empty:
        return pd.DataFrame(columns=["severity", "kind", "detail", "cells", "n_cells"])
    order = {"error": 0, "warning": 1, "info": 2}
    g = flags.groupby(["severity", "kind", "detail"], sort=False)["cell_id"].agg(
        cells=lambda s: ", ".join(sorted(set(map(str, s)))), n_cells=lambda s: s.nunique()).reset_index()
    return g.sort_values(["severity", "kind"], key=lambda s: s.map(order) if s.name == "severity" else s,
                         kind="stable").reset_index(drop=True)
