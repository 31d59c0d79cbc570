"""MTAD (002) Fig. 4: relative perplexity against relative downstream score — each method's Table 4 entry (its
Table 15 setting per block) normalised by multinomial sampling's (``ar_sampling``) in the same block: perplexity
÷ MS's perplexity, and the dataset's primary metric ÷ MS's (the paper: lower perplexity, higher score)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from harness.analysis.paper import Entry, PaperTable, assemble, block_names, blocks, choose
from harness.analysis.paper_mtad import ROLES, _head, _role_rows, app_f, main_specs
from harness.analysis.quality import PPL
from harness.analysis.specs import MethodSpec

MS = MethodSpec.parse("ar_sampling")
HEADERS = ("relative perplexity", "relative score")


def _ratio(rows: pd.DataFrame, ms: pd.DataFrame, col: str) -> float:
    if rows.empty or ms.empty or col not in rows or col not in ms:
        return np.nan
    a, b = pd.to_numeric(rows[col], errors="coerce").mean(), pd.to_numeric(ms[col], errors="coerce").mean()
    return float(a / b) if np.isfinite(a) and np.isfinite(b) and b != 0 else np.nan


def fig4_table(summary: pd.DataFrame, records: pd.DataFrame) -> PaperTable:
    """Fig. 4's points: per block and method (speculative, BiLD, Spectr, SpecInfer, MTAD at Table 15's setting),
    (perplexity ÷ MS's, primary metric ÷ MS's); n/a where MS or the method has no single cell or no score."""
    from harness.analysis.quality import primary

    summary = app_f(summary)
    entries, notes = [], []
    found = blocks(summary)
    names, common = block_names([k for k, _ in found])
    for key, g in found:
        ms, why_ms = choose(g[MS.mask(g)], "multinomial sampling")
        prim = primary(g, records)
        notes.append(f"{names[key]}: score = {prim.name}")
        specs = main_specs(key[0], key[1])
        for role, method in ROLES:
            rows, why = _role_rows(g, specs[role], role)
            for header, col in zip(HEADERS, (PPL, prim.column)):
                v = _ratio(rows, ms, col) if not (why or why_ms) else np.nan
                text = f"{v:.3g}" if np.isfinite(v) else f"n/a: {why or why_ms or f'no {col}'}"
                entries.append(Entry((names[key], _head(role, method, summary)), (header,), v, text,
                                     tuple(rows.get("cell_id", ())) + tuple(ms.get("cell_id", ()))))
    return assemble("mtad.fig4", "MTAD Fig. 4: relative perplexity against relative downstream score",
                    f"Each method's Table 4 entry over multinomial sampling's in its block: perplexity ÷ MS's and the "
                    f"dataset's primary metric (notes) ÷ MS's; means over seeds. {common}.", entries,
                    ["block", "method"], ["measure"], notes=notes)
