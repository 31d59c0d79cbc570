"""The MTAD paper's App. C tables on its other pairs (002 in ``../shared/seeds``; short name ``mtad``).

* **Table 9** (App. C.1): multinomial sampling (``ar_sampling``) against MTJD (``mtjd``, k = γ 4) on Llama-3 and
  Llama-3-Instruct over Spider, MT-Bench and HumanEval: each dataset's primary metric ("score") and perplexity.
* **Table 10** (App. C.2): tokens/s, J/token and the score of BiLD, Typical (Medusa), speculative, Spectr,
  SpecInfer, MCSS and MTAD on the same pairs and datasets, headed "lossy methods" / "lossless methods" from each
  method's recorded ``lossless`` (MTAD: "ours"), at one setting (:data:`TABLE10`).
* **Table 11** (App. C.3): Table 4's measures and methods for OPT-30B/350M and Llama-2-70B/7B-chat, each method at
  its family's Table 15 setting per dataset, mean ± s.d. across datasets.

Which pair fills which table: :func:`~harness.analysis.paper_mtad.shown` (App. C's pairs only here; a pair the
paper does not name, e.g. the tiny twin's, stands in everywhere). Every entry is one setting
(:func:`~harness.analysis.paper.choose`); other GPUs, warps, lengths form blocks of their own.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from harness.analysis import paper_values as pv
from harness.analysis.paper import (LOSSY_NOTE, Entry, PaperTable, assemble, block_names, blocks, column_entry,
                                    estimate_text, lossy)
from harness.analysis.paper_mtad import MEASURES, ROLES, SPEC, _head, _role_rows, app_f, main_specs
from harness.analysis.quality import PPL, primary
from harness.analysis.specs import MethodSpec

MS, MTJD = MethodSpec.parse("ar_sampling"), MethodSpec.parse("mtjd[gamma=4]")  # Table 9: k = 4
#: Table 10's one setting (the paper gives none): Table 15's L,SP and L,MT column (identical), all three datasets
TABLE10 = {"BiLD": "bild[gamma=10,fallback_threshold=0.9,rollback_threshold=1]", "Typical (Medusa)": "typical[gamma=4]",
           "spec": str(SPEC), "spectr": "spectr[gamma=4,num_drafts=2]", "specinfer": "specinfer[gamma=4,num_drafts=2]",
           "MCSS": "mcsd[k_config=[4,2,2,1]]", "MTAD": "mtad[gamma=4,draft_width=8,tau=0.9]"}
ONLY_TABLE10 = ("typical", "mcsd")  # a block shows in Table 10 where one of these ran (Table 4's methods alone: no)
HARDWARE = {"9-10": "L40", "11": "GPU not stated"}  # App. E: one L40; C.3 does not say where 70B ran


def _paper_name(pair, tables: str) -> str | None:
    own = pv.MTAD_APPENDIX_PAIRS.get(str(pair))
    return own[1] if own and own[0] == tables else None


def _printed(value: str | None, tables: str) -> str:
    return f"{value} ({HARDWARE[tables]})" if value else ""


def table9(summary: pd.DataFrame, records: pd.DataFrame) -> PaperTable:
    """Table 9: per pair and dataset, the score (the dataset's primary metric) and perplexity of multinomial
    sampling and MTJD (k 4); blocks where MTJD ran."""
    summary = app_f(summary, "9-10")
    entries, notes = [], []
    found = _in_paper_order([(k, g) for k, g in blocks(summary, ["dataset", "gpu", "regime"], laid_out=["pair"])
                             if MethodSpec.parse("mtjd").mask(g).any()], pv.MTAD_APPENDIX_DATASETS)
    names, common = block_names([k for k, _ in found], ["dataset", "gpu", "regime"])
    for key, g in found:
        prim = primary(g, records)
        notes.append(f"{names[key]}: score = {prim.name}" + (f" ({prim.note})" if prim.note else ""))
        paper_data = pv.MTAD_APPENDIX_DATASETS.get(str(key[0]))
        for pair, gp in _pairs(g):
            if not MethodSpec.parse("mtjd").mask(gp).any():
                continue
            printed = pv.MTAD_TABLE9.get((_paper_name(pair, "9-10"), paper_data))
            for j, (role, spec) in enumerate((("multinomial", MS), ("MTJD", MTJD))):
                rows, why = _role_rows(gp, spec, role, "Table 9's setting")
                for i, (measure, col) in enumerate((("score", prim.column), ("ppl", PPL))):
                    entries.append(column_entry(rows, col, (_head(role, spec, summary), measure),
                                                (str(pair), names[key]), None,
                                                _printed(printed[2 * j + i] if printed else None, "9-10"), why=why))
    entries.sort(key=lambda e: _pair_rank(e.col[0]))  # the paper's columns: per pair, its datasets
    return assemble("mtad.table9", "MTAD Table 9: single-token multinomial sampling and MTJD",
                    f"MTJD: k (γ) 4, the target's beam decoding over 4 tokens. Score: each dataset's primary metric "
                    f"(notes; the paper prints Spider accuracy and pass@1 in %); higher scores, lower ppl are better. "
                    f"{common}.", entries, ["method", "measure"], ["pair", "dataset"],
                    notes=notes + [LOSSY_NOTE] * any("†" in e.row[0] for e in entries))


def _group(role: str, method: str, summary: pd.DataFrame) -> str:
    """Table 10's header over a method: "ours" (MTAD, as the paper heads it), else from its cells' recorded
    ``lossless``: lossy where any cell says so, lossless where every cell says so, else "lossless not recorded"."""
    if role == "MTAD":
        return "ours"
    cells = summary[MethodSpec.parse(method).mask(summary)]
    if lossy(cells):
        return "lossy methods"
    recorded = list(cells.get("lossless", pd.Series(dtype=object)))
    return "lossless methods" if recorded and all(v is True or v is np.True_ for v in recorded) else \
        "lossless not recorded"


def _in_paper_order(found: list, order) -> list:
    """Blocks (keyed first by dataset) in the paper's order of datasets, others after them as found."""
    rank = {d: i for i, d in enumerate(order)}
    return sorted(found, key=lambda kg: rank.get(str(kg[0][0]), len(rank)))


def _pairs(g: pd.DataFrame):
    """(pair, its cells) in the paper's order (Llama-3, then -Instruct), others after them as found."""
    return sorted(g.groupby("pair", sort=False), key=lambda pg: _pair_rank(pg[0]))


def _pair_rank(pair) -> int:
    order = list(pv.MTAD_APPENDIX_PAIRS)
    return order.index(str(pair)) if str(pair) in order else len(order)


ROLES10 = (("BiLD", "bild"), ("Typical (Medusa)", "typical"), ("spec", "sd"), ("spectr", "spectr"),
           ("specinfer", "specinfer"), ("MCSS", "mcsd"), ("MTAD", "mtad"))


def table10(summary: pd.DataFrame, records: pd.DataFrame) -> PaperTable:
    """Table 10: per dataset and pair, tokens/s, J/token and the score of the seven methods at :data:`TABLE10`;
    headers lossy / lossless from the cells' recorded ``lossless``; bold: best in the row."""
    summary = app_f(summary, "9-10")
    entries, notes = [], []
    found = _in_paper_order(blocks(summary, ["dataset", "gpu", "regime"], laid_out=["pair"]), pv.MTAD_APPENDIX_DATASETS)
    names, common = block_names([k for k, _ in found], ["dataset", "gpu", "regime"])
    heads = {role: (_group(role, m, summary), _head(role, m, summary)) for role, m in ROLES10}
    for key, g in found:
        prim = primary(g, records)
        paper_data = pv.MTAD_APPENDIX_DATASETS.get(str(key[0]))
        for pair, gp in _pairs(g):
            if not any(MethodSpec.parse(m).mask(gp).any() for m in ONLY_TABLE10):
                continue
            notes.append(f"{names[key]} · {pair}: score = {prim.name}" + (f" ({prim.note})" if prim.note else ""))
            printed = pv.MTAD_TABLE10.get((paper_data, _paper_name(pair, "9-10")))
            measures = (("tokens/s", "tokens_per_s", True), ("J/token", "j_per_token", False),
                        (prim.name, prim.column, prim.higher_is_better))
            for j, (role, _) in enumerate(ROLES10):
                rows, why = _role_rows(gp, TABLE10[role], role, "Table 10's setting")
                for i, (measure, col, hib) in enumerate(measures):
                    entries.append(column_entry(rows, col, (names[key], str(pair), measure), heads[role], hib,
                                                _printed(printed[i][j] if printed else None, "9-10"), why=why))
    setting = "; ".join(f"{r} = {s}" for r, s in TABLE10.items())
    return assemble("mtad.table10", "MTAD Table 10: MTAD and the other decoding methods on Llama-3 and "
                    "Llama-3-Instruct", f"Lossy / lossless (and †): each method's cells' recorded lossless; 'ours': "
                    f"MTAD, as the paper heads it. "
                    f"One setting for every block (the paper gives none; Table 15's L,SP = L,MT column): {setting}. "
                    f"Score: each dataset's primary metric (notes). Bold: best in the row. {common}.",
                    entries, ["dataset", "model", "metric"], ["group", "method"], best="row",
                    notes=notes + [LOSSY_NOTE] * any("†" in e.col[1] for e in entries))


def _across_datasets(g: pd.DataFrame, pair, role: str, col: str) -> tuple[float, str, tuple]:
    """(value, text, sources): the role's Table 15 cells per dataset (one setting each), mean over seeds per
    dataset, then mean ± s.d. across datasets (one dataset: its entry); refused where settings compete."""
    chosen = [(d, *_role_rows(gd, main_specs(pair, d)[role], role)) for d, gd in g.groupby("dataset", sort=False)]
    refused = [f"{d}: {why}" for d, _, why in chosen if "compete" in why]
    have = [(d, r) for d, r, _ in chosen if not r.empty]
    sources = tuple(c for _, r in have for c in r["cell_id"])
    if refused:
        return np.nan, "n/a: " + "; ".join(refused), sources
    if not have:
        whys = list(dict.fromkeys(why for _, _, why in chosen))
        return np.nan, "n/a: " + (whys[0] if len(whys) == 1 else "; ".join(f"{d}: {w}" for d, _, w in chosen)), sources
    if len(have) == 1:
        e = column_entry(have[0][1], col, (), (), None)
        value, text = e.value, e.text
    else:
        means = [pd.to_numeric(r.get(col, pd.Series(dtype=float)), errors="coerce").mean() for _, r in have]
        value, text = estimate_text(means)
    missing = len(chosen) - len(have)
    part = f" ({len(have)} of {len(chosen)} datasets)" if missing and np.isfinite(value) else ""
    return value, text + part, sources


def table11(summary: pd.DataFrame) -> PaperTable:
    """Table 11: per pair (OPT-30B/350M, Llama-2-70B/7B-chat, or a stand-in), speed, energy and perplexity of
    Table 4's methods, each at its family's Table 15 setting per dataset; mean ± s.d. across datasets."""
    summary = app_f(summary, "11")
    entries, notes = [], []
    found = [(k, g) for k, g in blocks(summary, ["pair", "gpu", "regime"], laid_out=["dataset"])
             if any(MethodSpec.parse(m).mask(g).any() for _, m in ROLES)]
    names, common = block_names([k for k, _ in found], ["pair", "gpu", "regime"])
    for key, g in found:
        name = _paper_name(key[0], "11")
        notes.append(f"{names[key]}: " + (f"Table 15's {name} column per dataset" if name else "a pair the paper "
                                          "does not name: Table 4's setting for it (m 2, MTAD τ 0.1; BiLD's thresholds "
                                          "not fixed)"))
        printed = pv.MTAD_TABLE11.get(name)
        for j, (role, method) in enumerate(ROLES):
            for i, (measure, col, hib) in enumerate(MEASURES):
                value, text, sources = _across_datasets(g, key[0], role, col)
                entries.append(Entry((names[key], measure), (_head(role, method, summary),), value, text, sources,
                                     _printed(printed[i][j] if printed else None, "11"), hib))
    return assemble("mtad.table11", "MTAD Table 11: inference efficiency and output perplexity with OPT (350M, 30B) "
                    "and Llama-2-Chat (7B, 70B)", f"Mean ± s.d. across datasets (means over seeds per dataset; one "
                    f"dataset: its entry). Bold: best in the row, underlined: second best. {common}.",
                    entries, ["block", "measure"], ["method"], best="row", second=True,
                    notes=notes + [LOSSY_NOTE] * any("†" in e.col[0] for e in entries))
