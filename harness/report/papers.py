"""The papers' tables, one report section per table, as the papers print them (rows, columns, bold), with
the paper's own figure beside ours where the row is comparable. Which papers: ``report.tables`` of the
cells' configs (each experiment names its own) or ``--tables``; without either, every paper whose methods
are in the results. A table is shown only when its experiment's cells are present: the others are named once
at the end (with the experiment that produces them), and a paper none of whose tables has cells is left out
of the report altogether (issue 33.3: no "no cells" stubs)."""
from __future__ import annotations

import pandas as pd

from harness.analysis import (paper, paper_adaptive, paper_dsbd, paper_figures, paper_mcsd, paper_mtad,
                              paper_mtad_appendix, paper_mtad_fig4, paper_registry, pareto, plots, quality)
from harness.analysis import paper_adaptive_figs, paper_mcsd_figs
from harness.analysis.specs import MethodSpec
from harness.references import ref
from harness.report.context import Analysis, run_section
from harness.report.doc import Doc

PAPERS = ("dsbd", "mtad", "mcsd", "adaptive")
DETECT = {"dsbd": "dsbd", "mtad": "mtad", "mcsd": "mcsd_target_init", "adaptive": "sd[gamma_policy=online]"}


def wanted(a: Analysis) -> list[str]:
    """The papers whose tables to build: ``--tables``, else the cells' ``report.tables`` (an experiment's cells
    name their paper). A paper whose methods merely appear (the default sweep runs dsbd and mtad) is not built
    from cells its experiment did not make: it is named once (``papers_detected``), never stubbed (issue 33.3)."""
    asked = a.options.get("tables") or a.configured("tables")
    if asked:
        return [p for p in PAPERS if p in asked]
    a.options["papers_detected"] = [p for p in PAPERS if MethodSpec.parse(DETECT[p]).mask(a.cells).any()]
    return []


def _has_cells(t: paper.PaperTable) -> bool:
    """Whether any entry of the table was measured here (a table of n/a entries has no cells)."""
    text = t.text.astype(str)
    return not t.empty and bool((~(text.isin(["", "—", "nan"]) | text.apply(lambda c: c.str.startswith(paper.NA))))
                                .to_numpy().any())


def _show(doc: Doc, a: Analysis, t: paper.PaperTable) -> None:
    if not _has_cells(t):
        a.options.setdefault("paper_tables_absent", []).append(t.title)
        return
    a.tables[f"paper_{t.key.replace('.', '_')}"] = _long(t)
    doc.h(3, t.title)
    doc.paper(t)
    doc.pre(paper.to_latex(t))


def _long(t: paper.PaperTable) -> pd.DataFrame:
    """A table in long form (row, column, text, sources, paper) for ``tables/*.parquet``."""
    if t.empty:
        return pd.DataFrame()
    levels = list(range(t.text.columns.nlevels))
    stack = {k: getattr(t, k).stack(levels, future_stack=True) for k in ("text", "sources", "paper")}
    out = pd.DataFrame(stack).reset_index()
    return out.astype(str)


def sec_dsbd(doc: Doc, a: Analysis) -> None:
    s = a.summary
    doc.p(f"{ref('dsbd').cite()} — §4.2 front and iso-quality, Table 1 (memory constraint), 001 Table 1 (MT-Bench), "
          "App. C.2 (W̄). Warp: the cells' decoding (the papers: top-k 10, top-p 0.8).")
    grid = paper_dsbd.grid_cells(s)
    found = paper.blocks(grid)
    for key, g in found:  # one figure, and one front per family, per pair × dataset × gpu × regime
        prim = quality.primary(a.cells[a.cells["dataset"] == key[1]], a.records)
        axes = [(prim.column, prim.higher_is_better, "")]
        axes += [(quality.PPL, False, "_ppl")] * (prim.column != quality.PPL)
        for (qcol, hib, tag), (cost, label) in [(q, c) for q in axes for c in (
                ("tokens_per_s", "tokens/s (higher is better)"), ("j_per_token", "J/token (lower is better)"),
                ("net_j_per_token", "net J/token above idle (lower is better)"))]:
            if cost in g and g[cost].notna().any() and qcol in g and g[qcol].notna().any():
                slug = "_".join(str(x) for x in key if str(x)).replace(" ", "").replace("·", "_").replace("/", "_")
                fronts = paper_dsbd.front_masks(g, qcol, hib, cost)
                doc.fig(f"dsbd_front{tag}_{slug}_{cost}", plots.pareto(g, qcol, cost, label, hib, fronts=fronts),
                        f"DSBD §4.2 ({paper.block_title(*key[:4])}): {quality.quality_label(qcol, hib)} vs {label}"
                        f"{' (Fig. 6: perplexity as quality)' if tag else ''}; solid: DSBD's Pareto front "
                        "(unconstrained grid), dashed: beam sampling W = 1..4; SpD and SpecInfer as points. "
                        "Memory-constrained cells are not on this figure (Table 1).")
    isos = [pareto.iso_quality(a.records, a.cells[a.cells["cell_id"].isin(g["cell_id"])],  # per block: never mixed
                               [(paper_dsbd.GRID["DSBD"], paper_dsbd.GRID["beam sampling"])],
                               n_resamples=min(500, a.boot["n_resamples"])) for _, g in found]
    iso = pd.concat(isos, ignore_index=True) if isos else pd.DataFrame()
    _show(doc, a, paper_dsbd.iso_table(iso))
    _show(doc, a, paper_dsbd.table1(s))
    _show(doc, a, paper_dsbd.mtbench_table(s))
    width, points = paper_dsbd.width_table(s, a.records)
    _show(doc, a, width)
    doc.fig("dsbd_width", plots.width_scatter(points), "DSBD App. C.2: W̄ against quality, tokens/s and J/token")
    for param in ("threshold", "draft_width"):
        t = paper_dsbd.sweep_table(s, a.records, param)
        _show(doc, a, t)
        if _has_cells(t):
            doc.fig(t.key.replace(".", "_"), paper_figures.scatter(t, "tokens/s", t.text.columns[0], 1), t.title)


def sec_mtad(doc: Doc, a: Analysis) -> None:
    s = a.summary
    doc.p(f"{ref('mtad').cite()} — Tables 3-7, 9-12, Figs. 3-5.")
    for build in (paper_mtad.table3, paper_mtad.table4, paper_mtad.table5, paper_mtad.beams_table,
                  paper_mtad.tau_table, paper_mtad.topk_topp_table, paper_mtad.fig5_table):
        t = build(s)
        _show(doc, a, t)
        if not _has_cells(t):
            continue
        if t.key == "mtad.fig3":
            doc.fig("mtad_fig3", paper_figures.lines(t, 1, ["perplexity ↓", "speed (token/s) ↑", "energy (J/token) ↓"],
                                                     "τ"), t.title)
        if t.key == "mtad.fig5":
            doc.fig("mtad_fig5", paper_figures.scatter(t, "tokens/s", "J/token", 1), t.title)
    _show(doc, a, paper_mtad.table6(s, a.records))
    f4 = paper_mtad_fig4.fig4_table(s, a.records)
    _show(doc, a, f4)
    if _has_cells(f4):
        doc.fig("mtad_fig4", paper_figures.scatter(f4, "relative perplexity", "relative score", 1), f4.title)
    for t in (paper_mtad_appendix.table9(s, a.records), paper_mtad_appendix.table10(s, a.records),
              paper_mtad_appendix.table11(s)):  # App. C's pairs (§5's tables never show them)
        _show(doc, a, t)


def sec_mcsd(doc: Doc, a: Analysis) -> None:
    s = a.summary
    doc.p(f"{ref('mcsd').cite()} — Tables 1-4, Figs. 3-8.")
    _show(doc, a, paper_mcsd.table1(s, a.records))
    t2 = paper_mcsd.table2(s)
    _show(doc, a, t2)
    _show(doc, a, paper_mcsd.ordering_table(t2))
    _show(doc, a, paper_mcsd.table3(s, a.records))
    _show(doc, a, paper_mcsd.table4(s, a.records))
    for build in (paper_mcsd.fig3, paper_mcsd.fig5):
        t = build(s, a.records, **a.boot)
        _show(doc, a, t)
        if _has_cells(t):
            doc.fig(t.key.replace(".", "_"), paper_figures.bars(t, "speed-up over AR", reference=1.0), t.title)
    f4 = paper_mcsd.fig4(s)
    _show(doc, a, f4)
    if _has_cells(f4):
        doc.fig("mcsd_fig4", paper_figures.heatmap(f4, "b", "a"), f4.title)
    f6 = paper_mcsd.fig6(s)
    _show(doc, a, f6)
    if _has_cells(f6):
        doc.fig("mcsd_fig6", paper_figures.lines(f6, 1, ["α", "tokens/s"], "width W"), f6.title)
    f7 = paper_mcsd_figs.fig7(s, a.records)
    _show(doc, a, f7)
    if _has_cells(f7):
        doc.fig("mcsd_fig7", paper_figures.histograms(f7, list(paper_mcsd_figs.BIN_NAMES), "predicted acceptance"),
                f7.title)
    f8 = paper_mcsd_figs.fig8(s)
    _show(doc, a, f8)
    if _has_cells(f8):
        doc.fig("mcsd_fig8", paper_figures.lines(f8, 2, ["α", "tokens/s"], "width W"), f8.title)


def sec_adaptive(doc: Doc, a: Analysis) -> None:
    s, boot = a.summary, a.boot
    doc.p(f"{ref('adaptive').cite()} — Tables 2-4 and 8-11, Fig. 3, App. C.2; the §3 per-prompt γ oracle is the "
          "section 'Fixed-γ oracle'.")
    _show(doc, a, paper_adaptive.table2(s, a.records, **boot))
    _show(doc, a, paper_adaptive.table3(s, a.records, a.excluded, **boot))
    _show(doc, a, paper_adaptive.table4(s, a.records, **boot))
    _show(doc, a, paper_adaptive.table8(s, a.records, **boot))
    _show(doc, a, paper_adaptive.table9(s, a.records))
    _show(doc, a, paper_adaptive.table10(s))
    _show(doc, a, paper_adaptive.table11(s))
    f3 = paper_adaptive.fig3(s)
    _show(doc, a, f3)
    if _has_cells(f3):
        doc.fig("adaptive_fig3", paper_figures.lines(f3, 2, ["tokens/s", "acceptance rate"], "γ (fixed) / γ_max"),
                f3.title)
    f5 = paper_adaptive_figs.fig5()  # theory: drawn beside the measured tables, from no cell
    _show(doc, a, f5)
    doc.fig("adaptive_fig5", paper_figures.column_lines(f5, "single-token accuracy α", "optimal γ"), f5.title)
    _show(doc, a, paper_adaptive.policy_table(s, a.records, **boot))


SECTIONS = {"dsbd": ("DSBD (dsbd)", sec_dsbd), "mtad": ("MTAD (mtad)", sec_mtad),
            "mcsd": ("Improved MCSD (mcsd)", sec_mcsd), "adaptive": ("Adaptive speculation (adaptive)", sec_adaptive)}


EXPERIMENTS = {"dsbd": "dsbd_tables", "mtad": "mtad_tables", "mcsd": "mcsd_tables", "adaptive": "adaptive_tables"}


def render(a: Analysis) -> dict:
    """{paper: its section (a Doc)} for every wanted paper with at least one table that has cells; the titles
    of the tables without cells go to ``a.options["paper_tables_absent"]``."""
    out = {}
    for name in a.options.get("paper_tables") or []:
        title, fn = SECTIONS[name]
        before = len(a.options.get("paper_tables_absent", []))
        part = Doc()
        run_section(part, a, title, fn)
        if any(b[0] == "paper" for b in part.blocks) or any(b[0] == "p" and b[1].startswith("This section could not")
                                                            for b in part.blocks):
            out[name] = part
        else:  # not one table with cells: the paper's section is left out (named once, with its experiment)
            del a.options["paper_tables_absent"][before:]
            a.options.setdefault("papers_absent", []).append(name)
    return out


def absent_text(a: Analysis) -> str:
    """One sentence naming the papers and tables whose experiment's cells are not in these results ('' if none)."""
    detected = a.options.get("papers_detected") or []
    papers, tables = a.options.get("papers_absent") or [], a.options.get("paper_tables_absent") or []
    parts = []
    if detected:
        parts.append("the methods of " + ", ".join(detected) + " are here, but not their experiments' cells, so their "
                     "tables are not built (" + "; ".join(f"harness -m +experiment={EXPERIMENTS[p]}_tiny (or "
                                                          f"{EXPERIMENTS[p]})" for p in detected)
                     + "; or harness-report --tables NAME to build them from these cells)")
    if papers:
        parts.append("the papers " + ", ".join(f"{p} (harness -m +experiment={EXPERIMENTS[p]})" for p in papers)
                     + " have none of their experiment's cells here")
    if tables:
        parts.append("these tables have no cells here: " + "; ".join(tables))
    return ("Not shown: " + "; ".join(parts) + ".") if parts else ""


def sec_papers(doc: Doc, a: Analysis) -> None:
    shown = a.options.get("paper_docs") or {}
    absent = absent_text(a)
    if not shown:
        doc.p(absent or "No paper's methods in these results (an experiment's report.tables, or --tables, names them).")
        return
    doc.p("Values: estimate [95 % CI over prompts] for one seed, mean ± s.d. across seeds (or datasets where the paper "
          "averages them); bold: best as the paper marks it; 'paper:' the paper's own figure and hardware, where the "
          "pair and dataset are the paper's. A LaTeX version follows each table.")
    for name, part in shown.items():
        doc.h(3, SECTIONS[name][0])
        doc.table(paper_registry.registry(name), f"Every table and figure of {name}: built here, out of scope, or not "
                                                 "built yet, with where or why")
        doc.blocks += part.blocks
        doc.images.update(part.images)
    if absent:
        doc.note(absent)
