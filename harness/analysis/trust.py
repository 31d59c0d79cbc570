"""When a timing is not to be believed (issue 33.1): cells and paired comparisons measured under different host
load, on a shared GPU, across a kill and resume, or whose two speed-up estimates disagree.

Reads the records' ``host.*`` fields (:mod:`harness.run.contention`: load average, CPU busy and steal shares, CPU
frequency), the energy meter's ``energy.shared`` (another process on the GPU while the prompt ran) and the
``segment`` each record was written in (:mod:`harness.analysis.load`: a resumed cell has several). Load is
compared per CPU (``host.load_1m / host.cpus``), as medians over a cell's prompts.

* a cell whose prompts saw loads apart (more than :data:`LOAD_GAP` per CPU *and* :data:`LOAD_RATIO` times):
  "load varied within the cell";
* a cell and its baseline whose median loads are apart in the same sense, or whose CPU frequencies differ by
  more than :data:`MHZ_GAP`: "measured under different load than its baseline";
* a median CPU steal share above :data:`STEAL`; prompts run while another process used the GPU;
* a cell whose prompts were written by more than one run (a kill and resume), and any comparison using one;
* a ratio of totals and a geometric mean of per-prompt ratios that disagree beyond their CIs (either estimate
  outside the other's 95 % CI, and more than :data:`DISAGREE` apart: a few prompts dominate the totals, often
  ones measured under other conditions).

Records without ``host.*`` fields (written before they existed) are "not recorded", never flagged as equal.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

LOAD_GAP = 0.5  # load average per CPU: medians (or a cell's extremes) further apart, and by more than
LOAD_RATIO = 1.5  # this factor, are "different load" (7.4 vs 8.0 per CPU is one busy machine; 3.5 vs 7 is not)
MHZ_GAP = 0.10  # relative difference of the median CPU frequency
STEAL = 0.05  # median share of CPU time stolen by the hypervisor
DISAGREE = 0.05  # ratio of totals vs geometric mean: at least this far apart (relative), and beyond the CIs
FLAG_COLUMNS = ["severity", "kind", "cell_id", "detail"]
NAN = math.nan


@dataclass
class Trust:
    """``flags`` (severity, kind, cell_id, detail) for Measurement quality; ``notes``: per cell id, the short
    reasons to distrust its paired comparison (for the speed-up table and the headline)."""

    flags: pd.DataFrame
    notes: dict = field(default_factory=dict)
    conditions: pd.DataFrame | None = None

    def note(self, cell_id) -> str:
        return "; ".join(self.notes.get(cell_id, []))


def _num(records: pd.DataFrame, name: str) -> pd.Series:
    return pd.to_numeric(records[name], errors="coerce") if name in records else pd.Series(NAN, index=records.index)


def conditions(records: pd.DataFrame) -> pd.DataFrame:
    """Per cell: the median, min and max load per CPU, median CPU busy and steal shares and frequency, the
    prompts run beside another GPU process, and the runs (segments) its prompts came from."""
    cols = ["cell_id", "load", "load_min", "load_max", "busy", "steal", "mhz", "shared", "prompts", "segments",
            "segment_ranges"]
    if records.empty or "cell_id" not in records:
        return pd.DataFrame(columns=cols)
    cpus = _num(records, "host.cpus")
    per = pd.DataFrame({"cell_id": records["cell_id"], "load": _num(records, "host.load_1m") / cpus.where(cpus > 0),
                        "busy": _num(records, "host.cpu_busy"), "steal": _num(records, "host.cpu_steal"),
                        "mhz": _num(records, "host.cpu_mhz"),
                        "shared": records["energy.shared"].map(lambda v: v is True or v == 1)
                        if "energy.shared" in records else False,
                        "segment": _num(records, "segment").fillna(0), "index": _num(records, "index")})
    rows = []
    for cid, g in per.groupby("cell_id", sort=False):
        ranges = [f"{int(s['index'].min())}–{int(s['index'].max())}" for _, s in g.groupby("segment")
                  if s["index"].notna().any()]
        rows.append({"cell_id": cid, "load": g["load"].median(), "load_min": g["load"].min(),
                     "load_max": g["load"].max(), "busy": g["busy"].median(), "steal": g["steal"].median(),
                     "mhz": g["mhz"].median(), "shared": int(g["shared"].sum()), "prompts": len(g),
                     "segments": int(g["segment"].nunique()), "segment_ranges": ", ".join(ranges)})
    return pd.DataFrame(rows, columns=cols)


def _finite(*xs) -> bool:
    return all(x is not None and isinstance(x, (int, float, np.floating)) and np.isfinite(x) for x in xs)


def _apart(a, b) -> bool:
    """Two loads per CPU that differ: by more than :data:`LOAD_GAP` and by more than a factor :data:`LOAD_RATIO`."""
    lo, hi = sorted((a, b))
    return _finite(lo, hi) and hi - lo > LOAD_GAP and hi > LOAD_RATIO * max(lo, 0.0)


def _cell_flags(c: pd.Series, add) -> None:
    cid = c["cell_id"]
    if _apart(c["load_min"], c["load_max"]):
        add("warning", "load varied within the cell", cid,
            f"the 1-min load average per CPU ranged {c['load_min']:.2f}–{c['load_max']:.2f} over its prompts "
            f"(> {LOAD_GAP} and > {LOAD_RATIO}× apart): its timings mix lighter and heavier load")
    if _finite(c["steal"]) and c["steal"] > STEAL:
        add("warning", "CPU time stolen", cid, f"the hypervisor stole {c['steal']:.0%} of the CPU time (median over "
                                               "prompts): timings depend on the neighbours")
    if c["shared"]:
        add("warning", "GPU shared with another process", cid,
            f"{c['shared']} of {c['prompts']} prompts ran while another process used the GPU (energy.other_pids)")
    if c["segments"] > 1:
        add("warning", "measured across a resume", cid,
            f"its prompts come from {c['segments']} runs (a kill and resume: prompts {c['segment_ranges']}): "
            "the machine's state may differ between them")


def _pair_notes(r: pd.Series, cond: pd.DataFrame, add, interleaved: set) -> list[str]:
    """The reasons to distrust one paired comparison (and its flags). Load that varied during an interleaved
    comparison hit both sides prompt by prompt, so it is no reason to distrust their ratio."""
    cid, bid = r["cell_id"], r["baseline_cell_id"]
    notes = []
    m = cond.loc[cid] if cid in cond.index else None
    b = cond.loc[bid] if bid in cond.index else None
    base = f"baseline {r.get('baseline_method')} ({bid})"
    if m is not None and b is not None:
        if _apart(m["load"], b["load"]):
            add("warning", "measured under different load than its baseline", cid,
                f"median 1-min load average per CPU {m['load']:.2f} here vs {b['load']:.2f} for the {base}: the "
                "speed-up mixes the method with the machine's load")
            notes.append(f"load {m['load']:.2f} vs {b['load']:.2f} per CPU")
        if _finite(m["mhz"], b["mhz"]) and abs(m["mhz"] - b["mhz"]) > MHZ_GAP * max(m["mhz"], b["mhz"]):
            add("warning", "measured under different load than its baseline", cid,
                f"median CPU frequency {m['mhz']:.0f} MHz here vs {b['mhz']:.0f} MHz for the {base}")
            notes.append(f"CPU {m['mhz']:.0f} vs {b['mhz']:.0f} MHz")
        if bool(m["shared"]) != bool(b["shared"]):
            notes.append("GPU shared on one side")
        varied = [x for x in (m, b) if _apart(x["load_min"], x["load_max"])]
        if varied and not {cid, bid} <= interleaved:
            notes.append("load varied (not interleaved)")
        if m["segments"] > 1 or b["segments"] > 1:
            notes.append("across a resume" + (" (baseline)" if b["segments"] > 1 and m["segments"] <= 1 else ""))
    est, geo = r.get("speedup", NAN), r.get("speedup_geo", NAN)
    lo, hi, glo, ghi = (r.get(k, NAN) for k in ("speedup_lo", "speedup_hi", "speedup_geo_lo", "speedup_geo_hi"))
    apart = (_finite(est, geo, lo, hi, glo, ghi) and est > 0 and geo > 0
             and abs(math.log(est / geo)) > math.log(1 + DISAGREE))
    if apart and (not lo <= geo <= hi or not glo <= est <= ghi):
        add("warning", "ratio of totals and geometric mean disagree", cid,
            f"speed-up {est:.3g} [{lo:.3g}, {hi:.3g}] by ratio of totals but {geo:.3g} [{glo:.3g}, {ghi:.3g}] by "
            "geometric mean over prompts (one outside the other's 95 % CI): a few prompts dominate the totals — "
            "were they measured under other conditions?")
        notes.append("ratio of totals ≠ geo. mean")
    return notes


def assess(records: pd.DataFrame, ratios: pd.DataFrame | None, cells: pd.DataFrame | None = None) -> Trust:
    """The trust flags of every cell and of every overall paired comparison (``cells``: which ran interleaved)."""
    rows: list[dict] = []

    def add(severity, kind, cell_id, detail):
        rows.append({"severity": severity, "kind": kind, "cell_id": cell_id, "detail": detail})
    cond = conditions(records)
    for _, c in cond.iterrows():
        _cell_flags(c, add)
    notes = {}
    if ratios is not None and not ratios.empty and "baseline_cell_id" in ratios:
        indexed = cond.set_index("cell_id")
        interleaved = set(cells.loc[cells["interleaved"].fillna(False).astype(bool), "cell_id"]) \
            if cells is not None and "interleaved" in cells else set()
        overall = ratios[(ratios["category"] == "overall") & ratios["baseline_cell_id"].notna()
                         & (ratios["cell_id"] != ratios["baseline_cell_id"])]
        for _, r in overall.iterrows():
            found = _pair_notes(r, indexed, add, interleaved)
            if found:
                notes[r["cell_id"]] = found
    return Trust(pd.DataFrame(rows, columns=FLAG_COLUMNS), notes, cond)
