"""The MTAD paper's tables (short name ``mtad``: 002 in ``../shared/seeds``).

* **Table 3**: multinomial sampling (MS, ``ar_sampling``) and speculative decoding (SPEC, ``sd``): tokens/s and
  J/token per pair (the paper's figures are its ChatAlpaca column).
* **Table 4**: speed, energy and perplexity of speculative, BiLD, Spectr, SpecInfer and MTAD per dataset and
  pair; bold best, underlined second best per row. Each entry is the method's Table 15 setting for the block
  (the paper's pairs and datasets: App. F Table 15; elsewhere the setting Table 15 uses most: γ 4, m 2,
  MTAD 8 beams τ 0.1; BiLD γ 10) — the ablation cells of the same block never fill it.
* **Table 5**: block efficiency (tokens per target call) per method and pair, mean ± s.d. across datasets.
* **Table 7** (draft beams 2/4/6/8), **Fig. 3** (τ sweep) and **Table 12** (top-k × top-p): the ablations.

These tables show §5's pairs (and any pair the paper does not name); App. C's pairs fill only Tables 9-11
(:mod:`~harness.analysis.paper_mtad_appendix`; :func:`shown`).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from harness.analysis import paper_values as pv
from harness.analysis.paper import (LOSSY_MARK, LOSSY_NOTE, Entry, PaperTable, assemble, block_names, blocks,
                                    choose, column_entry, estimate_text, lossy)
from harness.analysis.quality import PPL
from harness.analysis.specs import MethodSpec

MEASURES = (("speed (token/s) ↑", "tokens_per_s", True), ("energy (J/token) ↓", "j_per_token", False),
            ("perplexity ↓", PPL, False))
ROLES = (("speculative", "sd"), ("BiLD", "bild"), ("Spectr", "spectr"), ("SpecInfer", "specinfer"), ("MTAD", "mtad"))
#: App. F Table 15 per (pair, dataset): Spectr/SpecInfer m, BiLD τ1 and τ2, MTAD τ (γ 4, BiLD γ 10, 8 beams)
Setting = tuple[int, "float | None", "int | None", float]  # (m, BiLD τ1, BiLD τ2, MTAD τ); None: not fixed
TABLE15: dict[tuple[str, str], Setting] = {
    ("Llama-2", "CP"): (4, 0.9, 2, 0.1), ("OPT", "CP"): (4, 0.9, 2, 0.1), ("Llama-2", "CA"): (2, 0.9, 1, 0.1),
    ("OPT", "CA"): (2, 0.3, 2, 0.1), ("Llama-2", "CD"): (4, 0.9, 3, 0.1), ("OPT", "CD"): (2, 0.3, 2, 0.1),
    ("Llama-2", "SP"): (2, 0.9, 1, 0.9), ("OPT", "SP"): (2, 0.9, 1, 0.1), ("Llama-2", "MT"): (2, 0.9, 1, 0.9),
    ("OPT", "MT"): (2, 0.9, 1, 0.1)}
SPEC = MethodSpec.parse("sd[gamma=4,gamma_policy=fixed]")  # the paper's speculative decoding: γ 4, fixed
DEFAULT_SETTING: Setting = (2, None, None, 0.1)  # elsewhere: Table 15's most common m and τ; BiLD's τ not fixed
APP_F = "T 1 · top-k 20 · top-p 0.9"  # App. F's warp: every table but Table 12 (whose warps are its subject)


def shown(summary: pd.DataFrame, tables: str = "§5") -> pd.DataFrame:
    """The cells of the pairs ``tables`` show: §5's pairs only §5's tables ("§5"), App. C's pairs only their own
    ("9-10", "11": :data:`~harness.analysis.paper_values.MTAD_APPENDIX_PAIRS`), any other pair (your own, the tiny
    twin's) every table — so no table mixes in a pair the paper kept to another."""
    def owner(pair) -> str:
        appendix = pv.MTAD_APPENDIX_PAIRS.get(str(pair))
        return appendix[0] if appendix else "§5" if pv.paper_pair("mtad", pair) else tables

    return summary[[owner(p) == tables for p in summary["pair"]]] if len(summary) else summary


def app_f(summary: pd.DataFrame, tables: str = "§5") -> pd.DataFrame:
    """The cells under App. F's warp, where there are any (else every cell: a sweep under another warp), of the
    pairs ``tables`` show (:func:`shown`)."""
    summary = shown(summary, tables)
    mine = summary[summary["regime"] == APP_F]
    return mine if len(mine) else summary


def main_specs(pair, dataset) -> dict[str, MethodSpec]:
    """The Table 4 setting of every method for one block (Table 11's pairs: their family's Table 15 column)."""
    family = pv.paper_pair("mtad", pair) or pv.MTAD_APPENDIX_PAIRS.get(str(pair), ("", None))[1]  # Table 11: L / O
    m, t1, t2, tau = TABLE15.get((family, pv.paper_dataset("mtad", dataset)), DEFAULT_SETTING)
    bild = "bild[gamma=10" + (f",fallback_threshold={t1},rollback_threshold={t2}" if t1 is not None else "") + "]"
    return {"speculative": SPEC, "BiLD": MethodSpec.parse(bild),
            "Spectr": MethodSpec.parse(f"spectr[gamma=4,num_drafts={m}]"),
            "SpecInfer": MethodSpec.parse(f"specinfer[gamma=4,num_drafts={m}]"),
            "MTAD": MethodSpec.parse(f"mtad[gamma=4,draft_width=8,tau={tau}]")}


def _head(role: str, spec: MethodSpec | str, cells: pd.DataFrame) -> str:
    """A method's header, with † where its cells in these results declare themselves lossy (the same header in
    every block, so a column is one method)."""
    name = spec.method if isinstance(spec, MethodSpec) else str(spec)
    return role + LOSSY_MARK if lossy(cells[MethodSpec.parse(name).mask(cells)]) else role


def _role_rows(g: pd.DataFrame, spec: MethodSpec | str, role: str,
               setting: str = "the Table 15 setting") -> tuple[pd.DataFrame, str]:
    """The cells of ``spec`` in ``g`` (one setting: :func:`choose`), or why none stands for the role's entry."""
    spec = MethodSpec.parse(spec)
    rows = g[spec.mask(g)] if spec.method in set(g["method_name"]) else g.iloc[0:0]
    if rows.empty and not g[MethodSpec.parse(spec.method).mask(g)].empty:
        return rows, f"no {spec} cell ({setting})"
    return choose(rows, role)


def table3(summary: pd.DataFrame) -> PaperTable:
    summary = app_f(summary)
    entries = []
    found = blocks(summary, ["dataset", "gpu", "regime"], laid_out=["pair"])
    names, common = block_names([k for k, _ in found], ["dataset", "gpu", "regime"])
    for key, g in found:
        for pair, gp in g.groupby("pair", sort=False):
            for role, spec in (("MS", MethodSpec.parse("ar_sampling")), ("SPEC", SPEC)):
                rows, why = choose(gp[spec.mask(gp)], role)
                for i, (_, col, _) in enumerate(MEASURES[:2]):
                    vals = pv.MTAD_TABLE3.get(pv.paper_pair("mtad", pair), {}).get(role) \
                        if pv.paper_dataset("mtad", key[0]) == "CA" else None
                    e = column_entry(rows, col, (names[key], ("TOKENS/S", "J/TOKEN")[i]), (pair, role), None,
                                     f"{vals[i]} (L40)" if vals else "", why=why)
                    entries.append(e)
    return assemble("mtad.table3", "MTAD Table 3: speed and energy of multinomial sampling (MS) and speculative "
                    "decoding (SPEC)", f"{common}. The paper's figures are its ChatAlpaca (CA) column.",
                    entries, ["block", "measure"], ["pair", "method"])


def table4(summary: pd.DataFrame) -> PaperTable:
    summary = app_f(summary)
    entries, notes = [], []
    found = blocks(summary)
    names, common = block_names([k for k, _ in found])
    for key, g in found:
        specs = main_specs(key[0], key[1])
        paper = pv.MTAD_TABLE4.get((pv.paper_dataset("mtad", key[1]), pv.paper_pair("mtad", key[0])), {})
        if not any(not g[s.mask(g)].empty for s in specs.values()):
            continue
        notes.append(f"{names[key]}: " + ", ".join(f"{r} = {s}" for r, s in specs.items()))
        for i, (role, method) in enumerate(ROLES):
            rows, why = _role_rows(g, specs[role], role)
            for measure, col, hib in MEASURES:
                vals = paper.get(measure.split(" ")[0])
                e = column_entry(rows, col, (names[key], measure), (_head(role, method, summary),), hib,
                                 f"{vals[i]} (L40)" if vals else "", why=why)
                entries.append(e)
    return assemble("mtad.table4", "MTAD Table 4: inference efficiency and output perplexity", f"{common}. Bold: best "
                    "in the row, underlined: second best. Each entry: the method's Table 15 setting (notes).",
                    entries, ["block", "measure"], ["method"], best="row", second=True,
                    notes=notes + [LOSSY_NOTE] * any(LOSSY_MARK in e.col[0] for e in entries))


def table5(summary: pd.DataFrame) -> PaperTable:
    summary = app_f(summary)
    entries = []
    groups = blocks(summary, ["pair", "gpu", "regime"], laid_out=["dataset"])
    names, common = block_names([k for k, _ in groups], ["pair", "gpu", "regime"])
    for key, g in groups:
        for role, method in ROLES:
            chosen = [(d, *_role_rows(gd, main_specs(key[0], d)[role], role))
                      for d, gd in g.groupby("dataset", sort=False)]
            refused = [f"{d}: {why}" for d, _, why in chosen if "compete" in why]
            parts = [r for _, r, _ in chosen if not r.empty]
            rows = pd.concat(parts) if parts and not refused else g.iloc[0:0]
            value, text = estimate_text(rows["block_efficiency"], rows.get("block_efficiency_lo"),
                                        rows.get("block_efficiency_hi")) if len(rows) else (float("nan"), "n/a")
            text = f"n/a: {'; '.join(refused)}" if refused else text
            col = pv.paper_pair("mtad", key[0])
            paper = pv.MTAD_TABLE5[role][("Llama-2", "OPT").index(col)] + " (L40)" if col in ("Llama-2", "OPT") else ""
            entries.append(Entry((_head(role, method, summary),), (names[key],), value, text,
                                 tuple(rows.get("cell_id", ())), paper, True))
    return assemble("mtad.table5", "MTAD Table 5: average number of tokens generated per iteration (block efficiency)",
                    f"Mean ± s.d. across datasets (one dataset: estimate [95 % CI]); the Table 4 cells. {common}.",
                    entries, ["method"], ["pair"], notes=[LOSSY_NOTE] * any(LOSSY_MARK in e.row[0] for e in entries))


def _swept(summary: pd.DataFrame, spec: str, param: str):
    """The blocks (under App. F's warp) in which MTAD cells matching ``spec`` take several ``param`` values."""
    summary = app_f(summary)
    mtad = summary[MethodSpec.parse(spec).mask(summary)]
    found = [(k, g) for k, g in blocks(mtad) if g[f"param.{param}"].nunique() > 1]
    return found, *block_names([k for k, _ in found])


def beams_table(summary: pd.DataFrame) -> PaperTable:
    """Table 7: MTAD with 2/4/6/8 draft beams (γ 4, the block's τ): speed, energy, perplexity."""
    entries = []
    found, names, common = _swept(summary, "mtad[gamma=4]", "draft_width")
    for key, g in found:
        tau = main_specs(key[0], key[1])["MTAD"].params
        g = g[MethodSpec("mtad", tuple(p for p in tau if p[0] == "tau")).mask(g)]
        paper = pv.MTAD_TABLE7.get(pv.paper_pair("mtad", key[0])) if pv.paper_dataset("mtad", key[1]) == "CP" else None
        for width, gw in sorted(g.groupby("param.draft_width"), key=lambda x: float(x[0])):
            rows, why = choose(gw, f"beams={width:g}")
            for measure, col, hib in MEASURES:
                i = (2, 4, 6, 8).index(int(width)) if int(width) in (2, 4, 6, 8) else None
                vals = paper.get(measure.split(" ")[0]) if paper else None
                e = column_entry(rows, col, (names[key], measure), (f"{width:g}",), hib,
                                 f"{vals[i]} (L40)" if vals and i is not None else "", why=why)
                entries.append(e)
    return assemble("mtad.table7", "MTAD Table 7: effect of the number of draft beams" + _title_mark(summary),
                    f"MTAD γ 4 at the block's "
                    f"Table 15 τ. {common}. The paper: ChatGPT-Prompts.", entries, ["block", "measure"], ["# beams"],
                    best="row")


def tau_table(summary: pd.DataFrame) -> PaperTable:
    """Fig. 3: MTAD across τ (γ 4, 8 beams): speed, energy, perplexity, block efficiency."""
    entries = []
    found, names, common = _swept(summary, "mtad[gamma=4,draft_width=8]", "tau")
    for key, g in found:
        for tau, gt in sorted(g.groupby("param.tau"), key=lambda x: float(x[0])):
            rows, why = choose(gt, f"τ={tau:g}")
            for measure, col, hib in (*MEASURES, ("block efficiency ↑", "block_efficiency", True)):
                e = column_entry(rows, col, (names[key], f"{tau:g}"), (measure,), hib, why=why)
                entries.append(e)
    return assemble("mtad.fig3", "MTAD Fig. 3: effect of the acceptance threshold τ" + _title_mark(summary),
                    f"MTAD γ 4, 8 beams. {common}. "
                    "The paper: efficiency drops as τ grows; perplexity is stable for τ in 0.1-0.9 and rises "
                    "towards multinomial sampling's near τ = 1.", entries, ["block", "τ"], ["measure"])


def topk_topp_table(summary: pd.DataFrame) -> PaperTable:
    """Table 12: AR sampling, speculative and MTAD (the paper's MJSD) under top-k ∈ {20, 10} × top-p ∈ {0.9, 0.8}."""
    entries = []
    roles = (("AR (the paper's 'Greedy')", MethodSpec.parse("ar_sampling")), ("Speculative", SPEC),
             ("MTAD (MJSD)", None))
    summary = shown(summary)
    summary = summary[summary["regime"].astype(str).str.startswith("T 1 ·")]  # the paper holds T 1
    groups = [(k, g) for k, g in blocks(summary, ["pair", "dataset", "gpu"], laid_out=["regime"])
              if g[MethodSpec.parse("mtad").mask(g)]["regime"].nunique() > 1]
    names, common = block_names([k for k, _ in groups], ["pair", "dataset", "gpu"])
    for key, g in groups:
        warps = sorted(g.groupby(["param.top_k", "param.top_p"], sort=False), key=lambda x: (-x[0][0], -x[0][1]))
        for (k, p), gw in warps:  # the paper's order: k 20 then 10, p 0.9 then 0.8
            paper = pv.MTAD_TABLE12.get((int(k), float(p))) if pv.paper_pair("mtad", key[0]) == "Llama-2" and \
                pv.paper_dataset("mtad", key[1]) == "CP" else None
            for j, (role, spec) in enumerate(roles):
                spec = spec or main_specs(key[0], key[1])["MTAD"]
                rows, why = choose(gw[spec.mask(gw)], role)
                for i, (header, col) in enumerate((("PPL", PPL), ("tokens/s", "tokens_per_s"))):
                    e = column_entry(rows, col, (names[key], f"{int(k)}", f"{float(p):g}"),
                                     (_head(role, spec, summary), header), None,
                                     f"{paper[2 * j + i]} (L40)" if paper else "", why=why)
                    entries.append(e)
    return assemble("mtad.table12", "MTAD Table 12: ablation of k and p in top-k and top-p sampling",
                    f"Temperature 1; each (k, p) is its own decoding regime, every method paired within it. {common}.",
                    entries, ["block", "K", "P"], ["method", "measure"],
                    notes=[LOSSY_NOTE] * any(LOSSY_MARK in e.col[0] for e in entries))


def _title_mark(summary: pd.DataFrame) -> str:
    return LOSSY_MARK if lossy(summary[MethodSpec.parse("mtad").mask(summary)]) else ""


def fig5_table(summary: pd.DataFrame) -> PaperTable:
    """Fig. 5: speed against energy of Table 4's entries (each method's Table 15 setting per block), with the
    Pearson correlation across them (the paper: strongly negative — faster decoding, less energy per token)."""
    summary = app_f(summary)
    entries, points = [], []
    found = blocks(summary)
    names, common = block_names([k for k, _ in found])
    for key, g in found:
        specs = main_specs(key[0], key[1])
        for role, method in (("MS", "ar_sampling"), *ROLES):
            spec = specs.get(role, MethodSpec.parse("ar_sampling"))
            rows, why = _role_rows(g, spec, role) if role in specs else choose(g[spec.mask(g)], role)
            if rows.empty and not why.startswith("n/a") and "compete" not in why:
                continue
            for col, header in (("tokens_per_s", "tokens/s"), ("j_per_token", "J/token")):
                e = column_entry(rows, col, (names[key], _head(role, method, summary)), (header,), None, why=why)
                entries.append(e)
                points.append((header, e.value))
    tps = np.array([v for h, v in points if h == "tokens/s"], float)
    jpt = np.array([v for h, v in points if h == "J/token"], float)
    ok = np.isfinite(tps) & np.isfinite(jpt)
    r = f"{np.corrcoef(tps[ok], jpt[ok])[0, 1]:+.2f} (n={int(ok.sum())})" if ok.sum() >= 3 and \
        np.ptp(tps[ok]) > 0 and np.ptp(jpt[ok]) > 0 else "n/a (fewer than 3 points with energy measured)"
    return assemble("mtad.fig5", "MTAD Fig. 5: correlation between speed and energy", f"Table 4's entries. {common}. "
                    f"Pearson r of tokens/s with J/token: {r}.", entries, ["block", "method"], ["measure"],
                    notes=[f"Pearson r (tokens/s, J/token): {r}"])


def table6(summary: pd.DataFrame, records: pd.DataFrame) -> PaperTable:
    """Table 6: the downstream task score (each dataset's primary metric: ROUGE-L on CNN/DM, EA on Spider, the
    judge's MT-Bench score) of speculative decoding and MTAD — Table 4's cells — and, where the dataset has
    categories (MT-Bench), the score per category (mean over that category's prompts)."""
    from harness.analysis.quality import primary
    from harness.analysis.tables import categories

    summary = app_f(summary)
    entries, notes = [], []
    found = blocks(summary, ["pair", "dataset", "gpu", "regime"])
    names, common = block_names([k for k, _ in found])
    for key, g in found:
        prim = primary(g, records)
        notes.append(f"{names[key]}: score = {prim.name}" + (f" ({prim.note})" if prim.note else ""))
        specs = main_specs(key[0], key[1])
        for role, method in (("speculative", "sd"), ("MTAD", "mtad")):
            rows, why = _role_rows(g, specs[role], role)
            row = (_head(role, method, summary),)
            entries.append(column_entry(rows, prim.column, row, (names[key], "all"), prim.higher_is_better, why=why))
            recs = records[records["cell_id"].isin(rows.get("cell_id", []))]
            cats = categories(recs) if len(recs) and prim.column in recs else pd.Series(dtype=str)
            for cat, rc in recs.groupby(cats.values, sort=True) if cats.ne("").any() else []:
                value = pd.to_numeric(rc[prim.column], errors="coerce").mean()
                entries.append(Entry(row, (names[key], str(cat)), value, f"{value:.3g} (n={len(rc)})",
                                     tuple(rows["cell_id"]), "", prim.higher_is_better))
    return assemble("mtad.table6", "MTAD Table 6: downstream task scores of speculative decoding and MTAD",
                    f"Each dataset's primary metric (the notes name it); MT-Bench also per category (mean over its "
                    f"prompts). Table 4's cells. {common}. Bold: the better method per column.", entries, ["method"],
                    ["block", "category"], notes=notes + [LOSSY_NOTE] * any(LOSSY_MARK in e.row[0] for e in entries))
