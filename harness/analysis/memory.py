"""Peak memory per cell (issue 33.7: recorded, never shown until now), from what the runner recorded.

* GPU: ``peak_gpu_mem_bytes`` per prompt (``torch.cuda.max_memory_allocated`` after resetting the peak before
  the prompt: the tensors PyTorch's allocator held, not the driver's reserve) — the cell's maximum and median
  over prompts; NaN on a CPU run.
* CPU: the summary's ``cpu_peak_rss_bytes``, the process's peak resident set size when the cell finished
  (``ru_maxrss``). A sweep runs its cells in one process, so this is a running maximum over the cells run so
  far in that process: an upper bound on the cell's own use, not its own figure.
"""
from __future__ import annotations

import math

import pandas as pd

COLUMNS = ["cell_id", "prompts", "gpu_peak_bytes", "gpu_median_bytes", "cpu_peak_rss_bytes"]


def memory_table(records: pd.DataFrame, cells: pd.DataFrame) -> pd.DataFrame:
    """One row per cell: prompts, GPU peak (max and median over prompts) and the process's CPU peak RSS."""
    if cells.empty:
        return pd.DataFrame(columns=COLUMNS)
    gpu = pd.to_numeric(records["peak_gpu_mem_bytes"], errors="coerce") if "peak_gpu_mem_bytes" in records else \
        pd.Series(math.nan, index=records.index)
    by = gpu.groupby(records["cell_id"]) if len(records) else None
    rss = cells.set_index("cell_id")["cpu_peak_rss_bytes"] if "cpu_peak_rss_bytes" in cells else pd.Series(dtype=float)
    rows = []
    for cid in cells["cell_id"]:
        g = by.get_group(cid) if by is not None and cid in by.groups else pd.Series(dtype=float)
        rows.append({"cell_id": cid, "prompts": len(g), "gpu_peak_bytes": g.max(), "gpu_median_bytes": g.median(),
                     "cpu_peak_rss_bytes": pd.to_numeric(rss.get(cid, math.nan), errors="coerce")})
    return pd.DataFrame(rows, columns=COLUMNS)
