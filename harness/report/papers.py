"""The papers' tables, one report section per table, as the papers print them (rows, columns, bold), with
the paper's own figure beside ours where the row is comparable. Which papers: ``report.tables`` of the
cells' configs (each experiment names its own) or ``--tables``; without either, every paper whose methods
are in the results."""
from __future__ import annotations

import pandas as pd

from harness.analysis import paper, paper_adaptive, paper_dsbd, paper_mcsd, paper_mtad, pareto, plots, quality
from harness.analysis.specs import MethodSpec
from harness.references import ref
from harness.report.context import Analysis, run_section
from harness.report.doc import Doc

PAPERS = ("dsbd", "mtad", "mcsd", "adaptive")
DETECT = {"dsbd": "dsbd", "mtad": "mtad", "mcsd": "mcsd_target_init", "adaptive": "sd[gamma_policy=online]"}


def wanted(a: Analysis) -> list[str]:
    asked = a.options.get("tables") or a.configured("tables")
    if asked:
        return [p for p in PAPERS if p in asked]
    return [p for p in PAPERS if MethodSpec.parse(DETECT[p]).mask(a.cells).any()]


def _show(doc: Doc, a: Analysis, t: paper.PaperTable) -> None:
    a.tables[f"paper_{t.key.replace('.', '_')}"] = _long(t)
    doc.h(3, t.title)
    if t.empty:
        doc.p("No cells for this table in these results (the experiment that produces it names them).")
        return
    doc.paper(t)
    doc.pre(paper.to_latex(t))


def _long(t: paper.PaperTable) -> pd.DataFrame:
    """A table in long form (row, column, text, sources, paper) for ``tables/*.parquet``."""
    if t.empty:
        return pd.DataFrame()
    stack = {k: getattr(t, k).stack(list(range(t.text.columns.nlevels)), future_stack=True) for k in ("text", "sources", "paper")}
    out = pd.DataFrame(stack).reset_index()
    return out.astype(str)


def sec_dsbd(doc: Doc, a: Analysis) -> None:
    s = a.summary
    doc.p(f"{ref('dsbd').cite()} — §4.2 front and iso-quality, Table 1 (memory constraint), 001 Table 1 (MT-Bench), "
          "App. C.2 (W̄). Warp: the cells' decoding (the papers: top-k 10, top-p 0.8).")
    grid = paper_dsbd.grid_cells(s)
    for dataset, g in grid.groupby("dataset", sort=False):
        prim = quality.primary(a.cells[a.cells["dataset"] == dataset], a.records)
        for cost, label in (("tokens_per_s", "tokens/s (higher is better)"), ("j_per_token", "J/token (lower is better)"),
                            ("net_j_per_token", "net J/token above idle (lower is better)")):
            if cost in g and g[cost].notna().any() and prim.column in g and g[prim.column].notna().any():
                doc.fig(f"dsbd_front_{dataset}_{cost}", plots.pareto(g, prim.column, cost, label, prim.higher_is_better,
                                                                     fronts=_fronts(g, prim, cost)),
                        f"DSBD §4.2 ({dataset}): {quality.quality_label(prim.column, prim.higher_is_better)} vs {label}; "
                        "solid: DSBD's Pareto front (unconstrained grid), dashed: beam sampling W = 1..4; SpD and "
                        "SpecInfer as points. Memory-constrained cells are not on this figure (Table 1).")
    iso = pareto.iso_quality(a.records, a.cells[a.cells["cell_id"].isin(grid["cell_id"])],
                             [(paper_dsbd.GRID["DSBD"], paper_dsbd.GRID["beam sampling"])],
                             n_resamples=min(500, a.boot["n_resamples"]))
    _show(doc, a, paper_dsbd.iso_table(iso))
    _show(doc, a, paper_dsbd.table1(s))
    _show(doc, a, paper_dsbd.mtbench_table(s))
    width, points = paper_dsbd.width_table(s, a.records)
    _show(doc, a, width)
    doc.fig("dsbd_width", plots.width_scatter(points), "DSBD App. C.2: W̄ against quality, tokens/s and J/token")


def _fronts(g: pd.DataFrame, prim, cost: str) -> dict:
    out = {}
    for name, role, style in (("DSBD front", "DSBD", "-"), ("beam sampling", "beam sampling", "--")):
        fam = g[g["grid_role"] == role]
        mask = pd.Series(False, index=g.index)
        if len(fam):
            on = pareto.pareto_mask(fam[cost], fam[prim.column], pareto.COSTS[cost], prim.higher_is_better)
            mask[fam.index[on] if role == "DSBD" else fam.index] = True
        out[name] = (mask, style)
    return out


def sec_mtad(doc: Doc, a: Analysis) -> None:
    s = a.summary
    doc.p(f"{ref('mtad').cite()} — Tables 3-5 and the ablations (Table 7, Fig. 3, Table 12).")
    for build in (paper_mtad.table3, paper_mtad.table4, paper_mtad.table5, paper_mtad.beams_table,
                  paper_mtad.tau_table, paper_mtad.topk_topp_table):
        _show(doc, a, build(s))


def sec_mcsd(doc: Doc, a: Analysis) -> None:
    s = a.summary
    doc.p(f"{ref('mcsd').cite()} — Tables 1-4; speed-ups (Figs. 3 and 5) are in 'Speed-ups against the baseline'.")
    _show(doc, a, paper_mcsd.table1(s, a.records))
    t2 = paper_mcsd.table2(s)
    _show(doc, a, t2)
    _show(doc, a, paper_mcsd.ordering_table(t2))
    _show(doc, a, paper_mcsd.table3(s))
    _show(doc, a, paper_mcsd.table4(s))


def sec_adaptive(doc: Doc, a: Analysis) -> None:
    s, boot = a.summary, a.boot
    doc.p(f"{ref('adaptive').cite()} — Tables 2-3, App. C.2; the §3 per-prompt γ oracle is the section 'Fixed-γ oracle'.")
    _show(doc, a, paper_adaptive.table2(s, a.records, **boot))
    _show(doc, a, paper_adaptive.table3(s, a.records, a.excluded, **boot))
    _show(doc, a, paper_adaptive.policy_table(s, a.records, **boot))


SECTIONS = {"dsbd": ("DSBD (dsbd)", sec_dsbd), "mtad": ("MTAD (mtad)", sec_mtad),
            "mcsd": ("Improved MCSD (mcsd)", sec_mcsd), "adaptive": ("Adaptive speculation (adaptive)", sec_adaptive)}


def sec_papers(doc: Doc, a: Analysis) -> None:
    names = a.options.get("paper_tables") or []
    if not names:
        doc.p("No paper's methods in these results (an experiment's report.tables, or --tables, names them).")
        return
    doc.p("Values: estimate [95 % CI over prompts] for one seed, mean ± s.d. across seeds (or datasets where the paper "
          "averages them); bold: best as the paper marks it; 'paper:' the paper's own figure and hardware, where the "
          "pair and dataset are the paper's. A LaTeX version follows each table.")
    for name in names:
        title, fn = SECTIONS[name]
        doc.h(3, title)
        run_section(doc, a, title, fn)
