"""The report's footprint sections: CO₂ beside J/token (from the measured energy and the grid's carbon
intensity, :mod:`harness.analysis.carbon`) and peak memory (:mod:`harness.analysis.memory`)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from harness.analysis import carbon, memory
from harness.report.context import Analysis, compact
from harness.report.doc import Doc, ci, num


def size(n) -> str:
    """Bytes in binary units: ``812 MiB``, ``1.52 GiB`` (n/a for missing)."""
    if n is None or not np.isfinite(n):
        return "n/a"
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= scale:
            return f"{num(n / scale)} {unit}"
    return f"{int(n)} B"


def grams(g) -> str:
    """Grams of CO₂eq in readable units (mg below a gram, kg above a kilogram)."""
    if g is None or not np.isfinite(g):
        return "n/a"
    if abs(g) >= 1000:
        return f"{num(g / 1000)} kg"
    if abs(g) < 1:
        return f"{num(g * 1000)} mg"
    return f"{num(g)} g"


def _cells(a: Analysis, ids: pd.Series) -> pd.DataFrame:
    s = a.summary.set_index("cell_id")
    return pd.DataFrame({"method": ids.map(s["label"]), "decoding": ids.map(s["regime"]), "pair": ids.map(s["pair"]),
                         "dataset": ids.map(s["dataset"]), "gpu": ids.map(s["gpu"]), "seed": ids.map(s["seed"])})


def sec_carbon(doc: Doc, a: Analysis) -> bool | None:
    """CO₂-equivalent per 1000 tokens and per cell, beside J/token."""
    co2 = carbon.co2_table(a.summary, a.cells, a.records, a.options.get("grid"))
    a.tables["co2"] = co2
    if not co2["g_per_1k_tokens"].notna().any():
        return False  # no energy measured: 'Energy' says why, and there is no CO₂ to show
    doc.p("Emissions = the energy measured here (kWh) × the grid's carbon intensity (gCO₂eq/kWh, CodeCarbon's "
          "convention): report.carbon.region and report.carbon.intensity_g_per_kwh of each cell's config (default: "
          "the world average, 475 gCO₂eq/kWh), or harness-report --grid-intensity REGION=G. The intensity is a "
          "setting, not a measurement: the CIs are J/token's, scaled.")
    s = a.summary.set_index("cell_id")
    show = _cells(a, co2["cell_id"]).assign(**{
        "J/token": [ci(s.loc[c], "j_per_token") for c in co2["cell_id"]],
        "gCO₂eq / 1k tokens": [ci(r, "g_per_1k_tokens") for _, r in co2.iterrows()],
        "CO₂eq of the measured prompts": co2["total_g"].map(grams),
        "grid": [f"{r} ({num(i)} g/kWh)" for r, i in zip(co2["region"], co2["intensity_g_per_kwh"])]})
    table, said = compact(show[co2["g_per_1k_tokens"].notna().to_numpy()].reset_index(drop=True),
                          keep=("method", "decoding"))
    doc.table(table, "CO₂-equivalent beside J/token (cells with an energy reading)" + (f" — {said}" if said else ""))
    return None


def sec_memory(doc: Doc, a: Analysis) -> None:
    """Peak GPU memory per cell (max and median over prompts) and the process's peak CPU RSS."""
    mem = memory.memory_table(a.records, a.cells)
    a.tables["memory"] = mem
    if mem.empty or not (mem["gpu_peak_bytes"].notna().any() or mem["cpu_peak_rss_bytes"].notna().any()):
        doc.p("No memory figures recorded in these cells.")
        return
    doc.p("GPU: torch.cuda.max_memory_allocated per prompt (PyTorch's tensors, not the driver's reserve), the "
          "cell's maximum and median over prompts; n/a on a CPU run. CPU: the process's peak resident set size when "
          "the cell finished — a sweep runs its cells in one process, so it is a running maximum over the cells run "
          "before it (an upper bound on this cell's own use).")
    show = _cells(a, mem["cell_id"]).assign(**{
        "prompts": mem["prompts"], "peak GPU memory": mem["gpu_peak_bytes"].map(size),
        "median prompt's GPU peak": mem["gpu_median_bytes"].map(size),
        "process peak RSS (CPU)": mem["cpu_peak_rss_bytes"].map(size)})
    table, said = compact(show, keep=("method", "decoding"))
    doc.table(table, "Peak memory per cell" + (f" — {said}" if said else ""))
