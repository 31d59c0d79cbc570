"""``harness-report``: turn the cells under ``results/`` into answers.

Writes ``results/cells.parquet`` and ``results/records.parquet`` (every finished cell), the
analysis tables (``<out>/tables/*.parquet``), the figures (``<out>/plots/*.png``), and a report:
``<out>/index.html`` (self-contained: figures embedded, opens from disk) and ``<out>/report.md``.
The report arranges what :mod:`harness.analysis` computes — paired speed-up and energy ratios with
CIs, quality, Pareto fronts, iso-quality ratios, theory checks, acceptance diagnostics, paper-style
tables — with provenance and a measurement-quality section. It never imports decoder code or torch.

``harness-report --export specbench DIR`` writes each cell as a Spec-Bench answer file instead.
"""
from __future__ import annotations

import argparse
import base64
import html
import io
import math
import os
import sys
import traceback
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd

from harness.analysis import acceptance, checks, oracle, paired, paper, pareto, quality, specbench, stats, theory
from harness.analysis.load import read_results
from harness.analysis.tables import short_labels  # noqa: F401  (re-exported: report.short_labels)

def load_results(results_dir: str | Path = "results") -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(cells, records, failures) for every cell folder under ``results_dir/cells``; ``failures``
    lists failed, incomplete and unreadable cells (columns ``cell_id, problem, kind, error, at``)."""
    r = read_results(results_dir)
    return r.cells, r.records, r.problems


# ---- formatting -----------------------------------------------------------------------------------

def _g(v, digits=3) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "n/a"
    if isinstance(v, (int, np.integer)):
        return str(v)
    if isinstance(v, (float, np.floating)):
        return f"{v:.{digits}g}"
    return str(v)


def ci(row, col: str, digits: int = 3) -> str:
    v = row.get(col)
    if v is None or not np.isfinite(v):
        return "n/a"
    lo, hi = row.get(col + "_lo", math.nan), row.get(col + "_hi", math.nan)
    if lo is not None and hi is not None and np.isfinite(lo) and np.isfinite(hi):
        return f"{v:.{digits}g} [{lo:.{digits}g}, {hi:.{digits}g}]"
    return f"{v:.{digits}g}"


def pct(v) -> str:
    return "n/a" if v is None or not np.isfinite(v) else f"{v:+.1%}"


# ---- a document written once, rendered as HTML and Markdown ------------------------------------------

@dataclass
class Doc:
    """Blocks of a report: ("h", level, text) | ("p", text) | ("table", DataFrame, bold mask | None)
    | ("img", name, png bytes, alt) | ("pre", text) | ("list", [items])."""

    blocks: list = field(default_factory=list)
    images: dict = field(default_factory=dict)

    def h(self, level, text):
        self.blocks.append(("h", level, text))

    def p(self, text):
        self.blocks.append(("p", text))

    def table(self, df, bold=None):
        self.blocks.append(("table", df, bold))

    def pre(self, text):
        self.blocks.append(("pre", text))

    def items(self, items):
        self.blocks.append(("list", list(items)))

    def fig(self, name, figure, alt):
        if figure is None:
            return
        import matplotlib.pyplot as plt

        buf = io.BytesIO()
        figure.savefig(buf, format="png", dpi=110, bbox_inches="tight")
        plt.close(figure)
        self.images[name] = buf.getvalue()
        self.blocks.append(("img", name, alt))

    def markdown(self, image_dir: str) -> str:
        out = []
        for b in self.blocks:
            if b[0] == "h":
                out.append("#" * b[1] + " " + b[2])
            elif b[0] == "p":
                out.append(b[1])
            elif b[0] == "table":
                df, bold = b[1], b[2]
                out.append(paper.to_markdown(df, bold) if bold is not None else _md_table(df))
            elif b[0] == "img":
                out.append(f"![{b[2]}]({image_dir}/{b[1]}.png)")
            elif b[0] == "pre":
                out.append("```\n" + b[1].rstrip() + "\n```")
            elif b[0] == "list":
                out.append("\n".join(f"- {x}" for x in b[1]))
        return "\n\n".join(out) + "\n"

    def html(self, title: str) -> str:
        body, toc = [], []
        for b in self.blocks:
            if b[0] == "h":
                anchor = "s" + str(len(toc))
                if b[1] == 2:
                    toc.append(f'<li><a href="#{anchor}">{html.escape(b[2])}</a></li>')
                body.append(f'<h{b[1]} id="{anchor}">{html.escape(b[2])}</h{b[1]}>')
            elif b[0] == "p":
                body.append(f"<p>{html.escape(b[1])}</p>")
            elif b[0] == "table":
                body.append(_html_table(b[1], b[2]))
            elif b[0] == "img":
                data = base64.b64encode(self.images[b[1]]).decode()
                body.append(f'<figure><img src="data:image/png;base64,{data}" alt="{html.escape(b[2])}">'
                            f"<figcaption>{html.escape(b[2])}</figcaption></figure>")
            elif b[0] == "pre":
                body.append(f"<pre>{html.escape(b[1])}</pre>")
            elif b[0] == "list":
                body.append("<ul>" + "".join(f"<li>{html.escape(str(x))}</li>" for x in b[1]) + "</ul>")
        return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title>"
                f"<style>{CSS}</style></head><body><h1>{html.escape(title)}</h1>"
                f"<nav><ol>{''.join(toc)}</ol></nav>{''.join(body)}</body></html>\n")


CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;
color:#222;line-height:1.45}
h1{border-bottom:2px solid #333}h2{border-bottom:1px solid #bbb;margin-top:2em}
table{border-collapse:collapse;margin:0.6em 0;font-size:0.85em;display:block;overflow-x:auto}
th,td{border:1px solid #ccc;padding:3px 7px;text-align:right;white-space:nowrap}
th{background:#f0f0f0}td:first-child,th:first-child{text-align:left}
tr:nth-child(even){background:#fafafa}
figure{margin:1em 0}img{max-width:100%;border:1px solid #eee}figcaption{font-size:0.85em;color:#555}
pre{background:#f6f6f6;padding:0.8em;overflow-x:auto;font-size:0.8em}nav{background:#f7f7f7;padding:0.3em 1em}
"""


def _md_table(df: pd.DataFrame) -> str:
    if df.empty:
        return "(none)"
    return df.map(_g).to_markdown(index=not isinstance(df.index, pd.RangeIndex))


def _html_table(df: pd.DataFrame, bold: pd.DataFrame | None) -> str:
    if df.empty:
        return "<p>(none)</p>"
    t = df.copy()
    t = t.map(lambda v: html.escape(_g(v)))
    if bold is not None:
        t[bold] = "<b>" + t[bold] + "</b>"
    return t.to_html(escape=False, index=not isinstance(df.index, pd.RangeIndex), border=0)


# ---- the report's sections --------------------------------------------------------------------------

@dataclass
class Analysis:
    cells: pd.DataFrame
    records: pd.DataFrame
    problems: pd.DataFrame
    ratios: pd.DataFrame | None = None
    summary: pd.DataFrame | None = None
    tables: dict = field(default_factory=dict)
    section_errors: list = field(default_factory=list)


def _section(doc: Doc, a: Analysis, title: str, fn) -> None:
    """Run one section; an exception becomes a line in the report and in measurement quality."""
    try:
        fn(doc, a)
    except Exception as e:  # noqa: BLE001 — one failing analysis must not cost the rest of the report
        doc.p(f"This section could not be computed: {type(e).__name__}: {e}")
        a.section_errors.append({"severity": "error", "kind": "analysis failed", "cell_id": "",
                                 "detail": f"{title}: {type(e).__name__}: {e} — {traceback.format_exc(limit=2)}"})


def sec_overview(doc: Doc, a: Analysis) -> None:
    c = a.cells
    groups = ", ".join(f"{p} × {d} × {g}" for (p, d, g), _ in c.groupby(["pair", "dataset", "gpu"], dropna=False))
    doc.p(f"{len(c)} finished cells ({c['method_name'].nunique()} methods, seeds "
          f"{', '.join(map(str, sorted(c['seed'].dropna().unique())))}) on pair × dataset × gpu: {groups}; "
          f"{len(a.problems)} cell(s) could not be used (see Measurement quality). "
          f"Speed-ups are paired, prompt by prompt, against ar_greedy (greedy cells) or ar_sampling (sampling "
          f"cells) of the same pair, dataset, gpu and seed; brackets are 95 % percentile bootstrap CIs over prompts.")
    r = a.ratios
    if r is not None and not r.empty and "speedup" in r:
        o = r[(r["category"] == "overall") & r["speedup"].notna() & (r["method_name"] != r["baseline_method"])]
        if not o.empty:
            best = o.sort_values("speedup", ascending=False).iloc[0]
            doc.p(f"Fastest against its baseline: {best['label']} (seed {best['seed']}, {best['dataset']}), "
                  f"{ci(best, 'speedup')}× {best['baseline_method']} in tokens/s (ratio of totals).")


def sec_speed(doc: Doc, a: Analysis) -> None:
    r = a.ratios
    if r is None or r.empty:
        doc.p("No paired ratios (no cells).")
        return
    o = r[r["category"] == "overall"]
    show = pd.DataFrame({
        "method": o["label"], "pair": o["pair"], "dataset": o["dataset"], "gpu": o["gpu"], "seed": o["seed"],
        "baseline": o["baseline_method"], "prompts": o["n_prompts"],
        "speed-up (ratio of totals)": [ci(x, "speedup") for _, x in o.iterrows()],
        "speed-up (geo. mean per prompt)": [ci(x, "speedup_geo") for _, x in o.iterrows()],
        "J/token ratio": [ci(x, "energy_ratio") for _, x in o.iterrows()],
        "note": [x.get("reason") or "" for _, x in o.iterrows()]})
    doc.table(show.reset_index(drop=True))
    doc.fig("speedup", _forest(o, "speedup", "speed-up over the baseline in tokens/s (×, log scale; whiskers: 95 % CI)"),
            "Paired speed-up (ratio of totals) with 95 % bootstrap CIs; dashed line: as fast as the baseline")
    if o["seed"].nunique() > 1:
        doc.h(3, "Across seeds (mean ± s.d. of the per-seed estimates)")
        across = paired.ratios_across_seeds(r[r["category"] == "overall"])
        doc.table(_fmt_across(across))
    cats = r[r["category"] != "overall"]
    if not cats.empty:
        doc.h(3, "Per category (meta.category)")
        piv = cats.assign(v=[ci(x, "speedup") for _, x in cats.iterrows()]).pivot_table(
            index=["dataset", "label", "seed"], columns="category", values="v", aggfunc="first")
        doc.table(piv)


def _fmt_across(across: pd.DataFrame) -> pd.DataFrame:
    out = across[["pair", "dataset", "gpu", "method_name", "category", "n_seeds"]].copy()
    for v in ("speedup", "speedup_geo", "energy_ratio"):
        if f"{v}_mean" in across:
            out[v] = [f"{m:.3g} ± {s:.2g}" if np.isfinite(m) and np.isfinite(s) else _g(m)
                      for m, s in zip(across[f"{v}_mean"], across[f"{v}_sd"])]
    return out


def _forest(table, value, xlabel):
    from harness.analysis import plots

    return plots.forest(table, value, xlabel, reference=1.0, log=True)


def sec_energy(doc: Doc, a: Analysis) -> None:
    s = a.summary
    measured = s["j_per_token"].notna().sum()
    if not measured:
        reasons = sorted({str(x) for x in s["energy_reason"].dropna()})
        doc.p("No cell has an energy reading, so there are no J/token figures: " + "; ".join(reasons[:3]))
        return
    o = a.ratios[a.ratios["category"] == "overall"]
    doc.fig("energy_ratio", _forest(o, "energy_ratio", "J/token relative to the baseline (×, log scale; < 1 saves "
                                                      "energy; whiskers: 95 % CI)"),
            "Paired J/token ratio with 95 % bootstrap CIs")
    from harness.analysis import plots

    doc.fig("j_per_token", plots.forest(s, "j_per_token", "J/token (total energy ÷ total tokens; whiskers: 95 % CI)"),
            "J/token per cell")


def sec_quality(doc: Doc, a: Analysis) -> None:
    from harness.analysis import plots

    s = a.summary
    qcols = quality.quality_columns(a.records)
    show = pd.DataFrame({"method": s["label"], "dataset": s["dataset"], "seed": s["seed"], "prompts": s["n_prompts"]})
    for q in qcols:
        show[q.removeprefix("metric.")] = [ci(x, q) for _, x in s.iterrows()]
    show["tokens/s"] = [ci(x, "tokens_per_s") for _, x in s.iterrows()]
    show["J/token"] = [ci(x, "j_per_token") for _, x in s.iterrows()]
    show["interleaved"] = ["yes" if bool(v) else "no" for v in s.get("interleaved", pd.Series(False, index=s.index))]
    doc.table(show)
    doc.fig("tokens_per_s", plots.forest(s, "tokens_per_s", "tokens/s (total new tokens ÷ total wall time; whiskers: "
                                                            "95 % CI over prompts)"),
            "Throughput per cell (not paired: compare with the speed-ups above)")
    by = _by_method(s)
    for q in qcols:
        for cost, label in (("tokens_per_s", "tokens/s (higher is better)"), ("j_per_token", "J/token (lower is better)")):
            if by[cost].notna().sum() == 0:
                if cost == "j_per_token":
                    doc.p(f"{q}: no J/token front (no energy measured).")
                continue
            pts = pareto.front_points(by, q, cost)
            for (pair, dataset, gpu), g in pts.groupby(["pair", "dataset", "gpu"], dropna=False):
                if g[q].notna().sum() == 0:
                    continue
                name = "_".join(str(x) for x in ("pareto", pair, dataset, gpu, q.replace(".", "_"), cost))
                doc.fig(name, plots.pareto(g, q, cost, label),
                        f"{quality.quality_label(q)} vs {label} ({pair}, {dataset}, {gpu}); ringed: the non-dominated "
                        "(Pareto) set; bars: 95 % CIs (± s.d. across seeds when there are several)")
                front = g[g["on_front"]].sort_values(cost)
                doc.p(f"Pareto set ({dataset}: {q} vs {cost}): " + ", ".join(front["label"].astype(str)))


def _by_method(s: pd.DataFrame) -> pd.DataFrame:
    """Per pair × dataset × gpu × method over seeds: means; CI of the single seed, else mean ± s.d."""
    value_cols = [c for c in s.columns if c not in ("cell_id", "seed") and pd.api.types.is_numeric_dtype(s[c])
                  and not c.endswith(("_lo", "_hi"))]
    rows = []
    for key, g in s.groupby(["pair", "dataset", "gpu", "label"], dropna=False, sort=False):
        row = dict(zip(["pair", "dataset", "gpu", "label"], key))
        row["family"], row["decoding"] = g["family"].iloc[0], g["decoding"].iloc[0]
        for c in value_cols:
            v = pd.to_numeric(g[c], errors="coerce")
            row[c] = v.mean()
            if len(g) > 1:
                row[c + "_lo"], row[c + "_hi"] = v.mean() - v.std(), v.mean() + v.std()
            else:
                row[c + "_lo"], row[c + "_hi"] = g.get(c + "_lo", pd.Series([math.nan])).iloc[0], \
                    g.get(c + "_hi", pd.Series([math.nan])).iloc[0]
        rows.append(row)
    return pd.DataFrame(rows)


def sec_iso(doc: Doc, a: Analysis, pairs=None) -> None:
    iso = pareto.iso_quality(a.records, a.cells, pairs)
    a.tables["iso_quality"] = iso
    if iso.empty:
        doc.p("No family pair to compare (iso-quality needs at least one of the headline families — DSBD vs beam "
              "sampling, MTAD vs SD — or two families each swept over a parameter; add pairs with --iso A:B).")
        return
    doc.p("A's advantage over B at equal quality, read off each family's interpolated Pareto front over the quality "
          "range both cover: speed-up = tokens/s of A ÷ B; energy reduction = J/token of B ÷ A (above 1: A better). "
          "Geometric mean over the common range [95 % bootstrap CI over prompts], and its min–max.")
    show = pd.DataFrame({
        "A": iso["family_a"], "B": iso["family_b"], "dataset": iso["dataset"], "decoding": iso["decoding"],
        "quality": iso["quality"], "measure": iso["measure"], "settings A/B": iso["n_a"].astype(str) + "/" +
        iso["n_b"].astype(str),
        "common quality range": [f"[{lo:.4g}, {hi:.4g}]" if np.isfinite(r) else "—"
                                 for lo, hi, r in zip(iso["overlap_lo"], iso["overlap_hi"], iso["ratio_geo"])],
        "A over B": [ci({"v": r, "v_lo": lo, "v_hi": hi}, "v") for r, lo, hi in
                     zip(iso["ratio_geo"], iso["ci_lo"], iso["ci_hi"])],
        "min–max": [f"{a_:.3g}–{b_:.3g}" if np.isfinite(a_) else "—" for a_, b_ in zip(iso["ratio_min"], iso["ratio_max"])],
        "note": iso["note"]})
    doc.table(show)


def sec_theory(doc: Doc, a: Analysis) -> None:
    sd = theory.sd_checks(a.records, a.cells, a.ratios)
    ds = theory.dsbd_checks(a.records, a.cells)
    a.tables["theory_sd"], a.tables["theory_dsbd"] = sd, ds
    doc.p("SD model (Leviathan et al.): α̂ by maximum likelihood from the rounds (capped geometric), predicted "
          "tokens per round Σ_r (1 − α̂^(γ_r+1))/(1 − α̂) ÷ rounds vs the measured mean (pooled over rounds). For "
          "trees and lossy rules α̂ is an effective per-depth pass rate and the model an approximation. "
          f"Deviations above {theory.TOLERANCE:.0%} are flagged.")
    if sd.empty:
        doc.p("No cell drafted.")
    else:
        sd = sd.copy()
        show = pd.DataFrame({"method": sd["label"], "dataset": sd["dataset"], "seed": sd["seed"],
                             "rounds": sd.get("rounds"), "mean γ": sd.get("mean_gamma"), "α̂": sd.get("alpha_mle"),
                             "tokens/round": sd.get("tokens_per_round"),
                             "theory": sd.get("tokens_per_round_theory"),
                             "deviation": [pct(x) for x in sd.get("tokens_per_round_dev", pd.Series(np.nan, sd.index))],
                             "flag": sd.get("flag", "").fillna("") if "flag" in sd else "",
                             "note": sd.get("reason", pd.Series("", index=sd.index)).fillna("")})
        doc.table(show)
        doc.h(3, "Speed-up vs the improvement factor")
        doc.p("Predicted speed-up Σ_r E_r ÷ (draft calls · c + target calls · v), with c and v the measured seconds of a "
              "draft call and of a verification call over the AR baseline's seconds per token; 'Leviathan' is "
              "(1 − α̂^(γ+1)) / ((1 − α̂)(γc + 1)), i.e. assuming a verification costs one AR step.")
        show = pd.DataFrame({"method": sd["label"], "seed": sd["seed"],
                             "measured": sd.get("speedup_measured"), "c": sd.get("c"), "v": sd.get("v"),
                             "predicted": sd.get("speedup_theory"), "Leviathan (v=1)": sd.get("speedup_leviathan"),
                             "deviation": [pct(x) for x in sd.get("speedup_dev", pd.Series(np.nan, sd.index))],
                             "why n/a": sd.get("speedup_reason", pd.Series(None, index=sd.index)).fillna(
                                 sd.get("reason", pd.Series("", index=sd.index))).fillna("")})
        doc.table(show)
    doc.h(3, "DSBD Theorem 3.2")
    if ds.empty:
        doc.p("No DSBD cell.")
    else:
        cols = {"label": "method", "seed": "seed", "iterations": "iterations", "gamma": "γ", "threshold_t": "t",
                "pass_rate_mle": "β̂ (layer pass rate, MLE)", "m": "min(t, β̂)", "steps_measured": "steps/iteration",
                "steps_theorem": "Theorem 3.2", "deviation": "deviation", "flag": "flag", "reason": "note"}
        show = ds[[c for c in cols if c in ds]].rename(columns=cols)
        if "deviation" in show:
            show["deviation"] = [pct(x) for x in show["deviation"]]
        doc.table(show.fillna(""))


def sec_acceptance(doc: Doc, a: Analysis) -> None:
    from harness.analysis import plots

    pr = acceptance.per_request_vs_pooled(a.records)
    a.tables["acceptance"] = pr
    if pr.empty:
        doc.p("No cell drafted.")
        return
    doc.p("Mean acceptance length (MAT: tokens committed per round, Spec-Bench's definition) and acceptance rate "
          "(accepted ÷ draft positions), pooled over all rounds vs the mean of per-request values; pooled means "
          "weight long completions more.")
    show = pd.DataFrame({"method": pr["label"], "seed": pr["seed"], "requests": pr["requests"], "rounds": pr["rounds"],
                         "MAT pooled": pr["mat_pooled"], "MAT per request": [ci(x, "mat_per_request") for _, x in pr.iterrows()],
                         "acceptance pooled": pr["acceptance_pooled"],
                         "acceptance per request": [ci(x, "acceptance_per_request") for _, x in pr.iterrows()]})
    doc.table(show)
    hist = acceptance.accept_length_histogram(a.records)
    doc.fig("accept_lengths", plots.accept_histograms(hist), "Accept-length histograms per cell (pooled over rounds)")
    cond = acceptance.conditional_acceptance(a.records)
    a.tables["conditional_acceptance"] = cond
    doc.fig("conditional_acceptance", plots.conditional_acceptance(cond),
            "Per-position conditional acceptance with Wilson 95 % bands (rounds as independent trials)")


def sec_oracle(doc: Doc, a: Analysis) -> None:
    """Fixed-γ sweeps and the per-prompt oracle (seed 004 §3); adaptive γ policies against them."""
    sweeps, comparisons = a.tables.get("oracle_sweeps"), a.tables.get("oracle_comparisons")
    doc.p("A fixed-γ sweep is a set of cells differing only in γ (policy fixed). Best fixed γ: the highest "
          "tokens/s over the dataset (ratio of totals); oracle: every prompt at its own best γ (seed 004 §3: "
          "9-18 % over the best per-dataset γ) — a maximum over single noisy runs, so an optimistic bound.")
    show = sweeps.copy()
    for col in ("best_tokens_per_s", "oracle_tokens_per_s"):
        show[col] = show[col].map(lambda v: f"{v:.1f}")
    show["per_prompt_gain"] = show["per_prompt_gain"].map(pct)
    doc.table(show.reset_index(drop=True))
    if comparisons is not None and not comparisons.empty:
        doc.h(3, "Adaptive γ policies against the sweep (paired by prompt; 95 % bootstrap CIs)")
        doc.table(oracle.comparison_display(comparisons).reset_index(drop=True))


def sec_paper(doc: Doc, a: Analysis) -> None:
    doc.p("Values: estimate [95 % CI] for one seed, mean ± s.d. across seeds otherwise; bold: best in column; "
          "rel. speed: paired speed-up against the cell's baseline.")
    for title, tables in (("DSBD-style (seed 000 Table 1)", paper.dsbd_table(a.summary, a.ratios)),
                          ("MTAD-style (seed 002 Tables 4-5)", paper.mtad_table(a.summary, a.ratios))):
        for key, (text, bold) in tables.items():
            doc.h(3, f"{title}: {key}")
            doc.table(text, bold)
            doc.pre(paper.to_latex(text, bold, caption=f"{title.split(' (')[0]}: {key}"))


def sec_measurement(doc: Doc, a: Analysis, flags: pd.DataFrame) -> None:
    g = checks.grouped_flags(flags)
    if g.empty:
        doc.p("Nothing flagged.")
        return
    doc.p(f"Thresholds: energy coverage below {checks.LOW_COVERAGE:.0%}; run-to-run coefficient of variation above "
          f"{checks.HIGH_CV:.0%} (tokens/s across seeds, or energy trials).")
    show = g.copy()
    show["cells"] = [c if n <= 4 else f"{n} cells: " + ", ".join(c.split(", ")[:3]) + ", …"
                     for c, n in zip(g["cells"], g["n_cells"])]
    doc.table(show[["severity", "kind", "n_cells", "detail", "cells"]])


def sec_provenance(doc: Doc, a: Analysis) -> None:
    facts, per_cell = checks.provenance(a.cells)
    doc.items(f"{k}: {v}" for k, v in facts.items())
    doc.table(per_cell.reset_index(drop=True))


# ---- main ---------------------------------------------------------------------------------------------

def build_report(results_dir: str | Path, out_dir: str | Path, plots_dir: str | Path | None = None,
                 baselines: dict | None = None, iso_pairs=None, n_resamples: int = stats.N_RESAMPLES) -> dict:
    """Compute everything and write the report; returns {"html", "md", "tables", "plots", "cells", "problems"}."""
    res = read_results(results_dir)
    out_dir = Path(out_dir)
    plots_dir = Path(plots_dir) if plots_dir else out_dir / "plots"
    a = Analysis(res.cells, res.records, res.problems)
    doc = Doc()
    if not a.cells.empty:
        a.ratios = paired.paired_ratios(a.records, a.cells, baselines, n_resamples=n_resamples)
        a.summary = quality.cell_summary(a.records, a.cells, n_resamples=n_resamples)
        a.tables.update(paired_ratios=a.ratios, cell_summary=a.summary)
        doc.h(2, "Overview")
        _section(doc, a, "overview", sec_overview)
        for title, fn in (("Speed-ups against AR (paired)", sec_speed), ("Energy", sec_energy),
                          ("Quality and Pareto fronts", sec_quality),
                          ("Iso-quality comparisons", lambda d, x: sec_iso(d, x, iso_pairs)),
                          ("Theory checks", sec_theory), ("Acceptance diagnostics", sec_acceptance),
                          ("Paper-style tables", sec_paper)):
            doc.h(2, title)
            _section(doc, a, title, fn)
        try:
            sweeps, comparisons = oracle.oracle_tables(a.cells, a.records, n_resamples=n_resamples)
        except Exception as e:  # noqa: BLE001 — reported like any failing section
            sweeps, comparisons = pd.DataFrame(), pd.DataFrame()
            a.section_errors.append({"severity": "error", "kind": "analysis failed", "cell_id": "",
                                     "detail": f"fixed-γ oracle: {type(e).__name__}: {e}"})
        if not sweeps.empty:  # only when such cells exist
            a.tables.update(oracle_sweeps=sweeps, oracle_comparisons=comparisons)
            doc.h(2, "Fixed-γ oracle and adaptive γ (seed 004)")
            _section(doc, a, "fixed-γ oracle", sec_oracle)
    else:
        doc.p(f"No finished cell under {results_dir}/cells.")
    flags = checks.measurement_flags(a.cells, a.records, a.problems, a.ratios) if not a.cells.empty else \
        checks.measurement_flags(pd.DataFrame(columns=["cell_id"]), pd.DataFrame(), a.problems)
    flags = pd.concat([flags, pd.DataFrame(a.section_errors, columns=flags.columns)], ignore_index=True)
    doc.h(2, "Measurement quality")
    sec_measurement(doc, a, flags)
    if not a.cells.empty:
        doc.h(2, "Provenance")
        _section(doc, a, "provenance", sec_provenance)
    a.tables["measurement_flags"] = flags

    out_dir.mkdir(parents=True, exist_ok=True)
    plots_dir.mkdir(parents=True, exist_ok=True)
    for name, png in doc.images.items():
        (plots_dir / f"{name}.png").write_bytes(png)
    stamp = datetime.now(timezone.utc).isoformat(timespec="seconds")
    title = f"Decoding benchmark report — {Path(results_dir).resolve().name} ({stamp})"
    html_path, md_path = out_dir / "index.html", out_dir / "report.md"
    html_path.write_text(doc.html(title), encoding="utf-8")
    md_path.write_text(f"# {title}\n\n" + doc.markdown(os.path.relpath(plots_dir, out_dir)), encoding="utf-8")
    table_dir = out_dir / "tables"
    table_dir.mkdir(exist_ok=True)
    written = []
    for name, df in a.tables.items():
        if isinstance(df, pd.DataFrame) and not df.empty:
            written.append(write_parquet(df, table_dir / f"{name}.parquet"))
    return {"html": html_path, "md": md_path, "tables": written, "plots": sorted(plots_dir.glob("*.png")),
            "cells": a.cells, "records": a.records, "problems": a.problems, "flags": flags, "summary": a.summary,
            "ratios": a.ratios}


def write_parquet(df: pd.DataFrame, path: Path) -> Path:
    """Parquet, with columns pyarrow cannot type (mixed objects, dicts) written as JSON text."""
    try:
        df.to_parquet(path, index=False)
    except Exception:  # noqa: BLE001 — pyarrow's errors for mixed object columns vary by type
        import json

        df = df.copy()
        for c in df.columns:
            if df[c].dtype == object:
                df[c] = df[c].map(lambda v: v if v is None or isinstance(v, str) else json.dumps(v, default=str))
        df.to_parquet(path, index=False)
    return path


def console_table(summary: pd.DataFrame, ratios: pd.DataFrame) -> pd.DataFrame:
    """The headline numbers per cell, for the terminal."""
    o = ratios[ratios["category"] == "overall"].set_index("cell_id")
    rows = []
    for _, s in summary.sort_values(["pair", "dataset", "label", "seed"]).iterrows():
        r = o.loc[s["cell_id"]] if s["cell_id"] in o.index else {}
        rows.append({"method": s["label"], "pair": s["pair"], "dataset": s["dataset"], "gpu": s["gpu"],
                     "seed": s["seed"], "tokens/s": _g(s["tokens_per_s"]),
                     "speed-up [95% CI]": ci(r, "speedup") if len(r) else "n/a",
                     "block eff.": _g(s["block_efficiency"]), "acceptance": _g(s["acceptance_rate"]),
                     "ppl": _g(s["output_ppl"]), "J/token": _g(s["j_per_token"]),
                     "interleaved": "yes" if bool(s.get("interleaved", False)) else "no"})
    return pd.DataFrame(rows)


def _kv(items: list[str], what: str) -> dict:
    out = {}
    for item in items or []:
        if "=" not in item:
            raise SystemExit(f"harness-report: {what} must be KEY=VALUE, got '{item}'")
        k, v = item.split("=", 1)
        out[k] = v
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="harness-report", description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", default="results", help="results folder written by `harness` (default: results)")
    ap.add_argument("--out", default=None, help="report folder: index.html, report.md, tables/ (default: report/ "
                                                "beside the results folder, i.e. ./report for ./results)")
    ap.add_argument("--plots", default=None, help="where to write the PNG figures (default: <out>/plots)")
    ap.add_argument("--baseline", action="append", metavar="MODE=METHOD",
                    help="baseline per decoding mode (default: greedy=ar_greedy, sampling=ar_sampling)")
    ap.add_argument("--iso", action="append", metavar="A:B",
                    help="family pair for iso-quality ratios (default: dsbd:beam_sampling, mtad:sd and every pair "
                         "of swept families)")
    ap.add_argument("--bootstrap", type=int, default=stats.N_RESAMPLES, help="bootstrap resamples (default: 2000)")
    ap.add_argument("--export", nargs=2, metavar=("FORMAT", "DIR"),
                    help="write the cells in another benchmark's format instead: specbench DIR")
    args = ap.parse_args(argv)
    if args.export:
        fmt, directory = args.export
        if fmt != "specbench":
            ap.error(f"--export FORMAT must be 'specbench', got '{fmt}'")
        if Path(directory).exists() and not Path(directory).is_dir():
            ap.error(f"--export specbench DIR: '{directory}' is an existing file, not a folder (exit 2, nothing written)")
        res = read_results(args.results)
        if res.cells.empty:
            print(f"harness-report: no finished cells under {args.results}/cells — run `harness` first")
            return 1
        try:
            paths = specbench.export(res.records, res.cells, directory)
        except OSError as e:  # a full disk, a read-only folder, a path through a file
            print(f"harness-report: cannot write the Spec-Bench files to '{directory}': {e.strerror or e} "
                  f"({e.filename or directory})", file=sys.stderr)
            return 1
        print(f"{len(paths)} Spec-Bench answer files -> {directory}/<cell id>.jsonl")
        return 0
    if args.bootstrap < 100:
        ap.error(f"--bootstrap must be >= 100, got {args.bootstrap}")
    baselines = _kv(args.baseline, "--baseline")
    bad = sorted(set(baselines) - {"greedy", "sampling"})
    if bad:
        ap.error(f"--baseline modes must be 'greedy' or 'sampling', got {bad}")
    iso = None
    if args.iso:
        iso = []
        for item in args.iso:
            if item.count(":") != 1:
                ap.error(f"--iso must be FAMILY_A:FAMILY_B, got '{item}'")
            iso.append(tuple(item.split(":")))
    out_dir = args.out or Path(args.results).resolve().parent / "report"
    out = build_report(args.results, out_dir, args.plots, baselines, iso, args.bootstrap)
    cells = out["cells"]
    if cells.empty:
        print(f"harness-report: no finished cells under {args.results}/cells — run `harness` first "
              f"(report with the problems found -> {out['html']})")
        return 1
    results = Path(args.results)
    write_parquet(cells, results / "cells.parquet")
    write_parquet(out["records"], results / "records.parquet")
    print(console_table(out["summary"], out["ratios"]).to_string(index=False))
    print(f"\n{len(cells)} cells, {len(out['records'])} records -> {results / 'cells.parquet'}, "
          f"{results / 'records.parquet'}")
    print(f"report -> {out['html']} and {out['md']} ({len(out['plots'])} figures, {len(out['tables'])} tables)")
    if not out["problems"].empty:
        print(f"\n{len(out['problems'])} cell(s) not used (rerun `harness` to retry failed/incomplete ones):")
        print(out["problems"][["cell_id", "problem", "kind", "error"]].to_string(index=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
