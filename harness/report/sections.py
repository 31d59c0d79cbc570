"""The report's general sections: overview (the first screen), speed-ups, per-category speed-ups in
Spec-Bench's form, energy, and quality with the Pareto fronts. Every table has a ``decoding`` column or
states its one regime in the caption; fronts, figures and bold-best never mix regimes."""
from __future__ import annotations

import numpy as np
import pandas as pd

from harness.analysis import paired, pareto, plots, quality
from harness.analysis.labels import lossless_text
from harness.report.context import Analysis, compact
from harness.report.doc import Doc, ci

OVERALL = "overall"


def _overall(a: Analysis) -> pd.DataFrame:
    r = a.ratios
    return r[r["category"] == OVERALL] if r is not None and not r.empty else pd.DataFrame()


def banners(doc: Doc, a: Analysis) -> None:
    """Warnings a reader must see first: simulated energy, small samples, excluded records."""
    sim = a.cells.get("energy_source_config", pd.Series(dtype=object)).astype(str).eq("simulated")
    meter = a.cells.filter(like="energy_meter.").astype(str).apply(lambda c: c.str.contains("simulated")).any(axis=1)
    if sim.any() or meter.any():
        doc.banner(f"Energy is SIMULATED in {int((sim | meter).sum())} of {len(a.cells)} cells (energy.source = "
                   "simulated): their J/token figures exercise the code path, they are not measurements of a GPU.")
    n = a.small_sample()
    if n is not None:
        doc.banner(f"Small samples: a cell has only {n} measured prompt(s) (< {plots.SMALL_N}). Confidence intervals "
                   "are unreliable (greyed in the figures); read the numbers as a smoke test, not a result.")
    distrusted = {cid: note for cid, note in (a.trust.notes if a.trust is not None else {}).items()}
    if distrusted:
        doc.banner(f"Timings to distrust: {len(distrusted)} paired comparison(s) were measured under conditions that "
                   "differ from their baseline's (load, CPU frequency, a shared GPU, a kill and resume) or whose two "
                   "speed-up estimates disagree — marked ⚠ below; see 'Measurement quality'.")
    ex = a.options.get("excluded_counts")
    if ex is not None and len(ex):
        doc.note(f"{int(ex['records'].sum())} record(s) of {len(ex)} cell(s) are excluded from every figure and table: "
                 "draft selection's fit phase (selection.phase = fit; adaptive §6.1 evaluates the remaining prompts).")


def _headline_rows(a: Analysis) -> list[dict]:
    o = _overall(a)
    if o.empty or "speedup" not in o:
        return []
    o = o[o["speedup"].notna() & (o["cell_id"] != o["baseline_cell_id"])]
    rows = []
    for regime, g in o.groupby("regime", sort=False):
        ll = g[g["lossless"].map(lossless_text) == "yes"].sort_values("speedup", ascending=False)
        lossy = g[g["lossless"].map(lossless_text) == "no"].sort_values("speedup", ascending=False)
        unknown = g[g["lossless"].map(lossless_text) == "?"].sort_values("speedup", ascending=False)
        best = _fastest(ll, a) if len(ll) else "none known (no cell here records `lossless: true`)" + (
            f"; fastest of unknown losslessness: {_fastest(unknown, a)}" if len(unknown) else "")
        rows.append({"decoding": regime, "fastest lossless method": best,
                     "lossy methods (speed-up; quality, see below)": ", ".join(
                         f"{r['label']} {r['speedup']:.2f}×" for _, r in lossy.head(4).iterrows()) or "—",
                     "lossless unknown": int((g["lossless"].map(lossless_text) == "?").sum())})
    return rows


def _fastest(rows: pd.DataFrame, a: Analysis) -> str:
    """The fastest of ``rows`` (sorted by speed-up) — never called fastest when it is not faster than its
    baseline; with the reasons to distrust its timing."""
    r = rows.iloc[0]
    text = f"{r['label']} ({r['pair']}, {r['dataset']}): {ci(r, 'speedup')}× {r['baseline_method']}"
    if not r["speedup"] > 1:
        text = f"none faster than the baseline (the best: {text})"
    elif r.get("speedup_lo") is not None and np.isfinite(r.get("speedup_lo")) and r["speedup_lo"] <= 1:
        text += " (not clearly faster: the CI includes 1×)"
    note = a.distrust(r["cell_id"])
    return text + (f" ⚠ {note}" if note else "")


def sec_overview(doc: Doc, a: Analysis) -> None:
    c = a.cells
    groups = ", ".join(f"{p} × {d} × {g}" for (p, d, g), _ in c.groupby(["pair", "dataset", "gpu"], dropna=False))
    doc.p(f"{len(c)} finished cells ({c['method_name'].nunique()} methods, {c['regime'].nunique()} decoding regime(s): "
          f"{', '.join(map(str, c['regime'].unique()))}; "
          f"seeds {', '.join(map(str, sorted(c['seed'].dropna().unique())))}) "
          f"on pair × dataset × gpu: {groups}; {len(a.problems)} cell(s) could not be used (see Measurement quality).")
    doc.p("Speed-ups are paired prompt by prompt against the baseline cell with the same settings but the method — "
          "pair, dataset, prompts, max_new_tokens, the decoding and its warp, gpu, seed (ar_greedy / ar_sampling "
          "unless configured); brackets: 95 % percentile bootstrap CIs over prompts. † marks a method whose summary "
          "says it is not lossless (its output distribution differs from its decoding's AR distribution).")
    rows = _headline_rows(a)
    if rows:
        doc.table(pd.DataFrame(rows), "Headline per decoding regime: the fastest lossless method, and, separately, the "
                  "lossy ones (compare their quality in 'Quality and Pareto fronts')")
    tables = list(a.options.get("paper_docs") or {})
    if tables:
        doc.p("The papers' tables in this report: " + ", ".join(tables) + " (section 'The papers' tables').")


def sec_speed(doc: Doc, a: Analysis) -> None:
    o = _overall(a)
    if o.empty:
        doc.p("No paired ratios (no cells).")
        return
    is_base = o["cell_id"] == o["baseline_cell_id"]
    if is_base.any():
        doc.p("Baseline cells (1× by definition, left out below): " + ", ".join(
            f"{r['label']} ({r['pair']}, {r['dataset']}, {r['regime']})" for _, r in o[is_base].iterrows()) + ".")
    o = o[~is_base]
    show = pd.DataFrame({
        "method": o["label"], "decoding": o["regime"], "pair": o["pair"], "dataset": o["dataset"], "gpu": o["gpu"],
        "seed": o["seed"], "baseline": o["baseline_method"], "lossless": o["lossless"].map(lossless_text),
        "prompts": o["n_prompts"], "speed-up (ratio of totals)": [ci(x, "speedup") for _, x in o.iterrows()],
        "speed-up (geo. mean)": [ci(x, "speedup_geo") for _, x in o.iterrows()],
        "J/token ratio": [ci(x, "energy_ratio") for _, x in o.iterrows()],
        "net J/token ratio": [ci(x, "net_energy_ratio") if "net_energy_ratio" in x else "n/a" for _, x in o.iterrows()],
        "note": [x.get("reason") or "" for _, x in o.iterrows()],
        "trust": [("⚠ " + a.distrust(x["cell_id"])) if a.distrust(x["cell_id"]) else "no flag"
                  for _, x in o.iterrows()]})
    table, said = compact(show.reset_index(drop=True), keep=("method", "decoding", "trust"))
    doc.table(table, "Paired speed-up over the baseline" + (f" — {said}" if said else ""))
    doc.fig("speedup", plots.forest(o, "speedup",
                                    "speed-up over the baseline in tokens/s (log scale; whiskers: 95 % CI)",
                                    reference=1.0, ratio=True),
            "Paired speed-up (ratio of totals) with 95 % bootstrap CIs, one panel per decoding regime; dashed: as fast "
            "as the baseline")
    if o["seed"].nunique() > 1:
        doc.h(3, "Across seeds (mean ± s.d. of the per-seed estimates)")
        doc.table(_fmt_across(paired.ratios_across_seeds(o)))
    sec_categories(doc, a)


def _fmt_across(across: pd.DataFrame) -> pd.DataFrame:
    keep = [k for k in ("pair", "dataset", "gpu", "method_name", "regime", "category", "n_seeds") if k in across]
    out = across[keep].copy()
    for v in ("speedup", "speedup_geo", "energy_ratio", "net_energy_ratio"):
        if f"{v}_mean" in across:
            out[v] = [f"{m:.3g} ± {s:.2g}" if np.isfinite(m) and np.isfinite(s) else "n/a"
                      for m, s in zip(across[f"{v}_mean"], across[f"{v}_sd"])]
    return out


def sec_categories(doc: Doc, a: Analysis) -> None:
    """Spec-Bench's form: methods × categories (speed-up), then the mean accepted tokens and Overall."""
    r = a.ratios
    cats = r[r["category"] != OVERALL] if r is not None and not r.empty else pd.DataFrame()
    if cats.empty:
        return
    acc = a.tables.get("acceptance", pd.DataFrame())
    mat = acc.set_index("cell_id")["mat_pooled"] if len(acc) else pd.Series(dtype=float)
    for key, g in r.groupby(["pair", "dataset", "gpu", "regime"], sort=False):
        if not (g["category"] != OVERALL).any():
            continue
        piv = g.assign(v=[f"{x['speedup']:.2f}×" if np.isfinite(x.get("speedup", np.nan)) else "n/a"
                          for _, x in g.iterrows()]).pivot_table(index="label", columns="category", values="v",
                                                                  aggfunc="first", sort=False)
        piv = piv[[c for c in piv.columns if c != OVERALL] + [OVERALL]]
        ids = g[g["category"] == OVERALL].set_index("label")["cell_id"]
        piv.insert(len(piv.columns) - 1, "#Mean Accepted Tokens",
                   [f"{mat.get(ids.get(lab), np.nan):.2f}" if ids.get(lab) in mat.index else "—" for lab in piv.index])
        piv = piv.rename(columns={OVERALL: "Overall"})
        piv.index.name = "method"
        doc.h(3, "Per category (Spec-Bench's table): " + " · ".join(map(str, key)))
        doc.table(piv, "Speed-up over the baseline per meta.category (ratio of totals), the mean accepted tokens "
                  "per round (MAT, pooled) and Overall")


def sec_energy(doc: Doc, a: Analysis) -> None:
    s = a.summary
    if not s["j_per_token"].notna().any():
        reasons = sorted({str(x) for x in s["energy_reason"].dropna()})
        doc.p("No cell has an energy reading, so there are no J/token figures: " + "; ".join(reasons[:3]))
        return
    o = _overall(a)
    doc.fig("energy_ratio", plots.forest(o, "energy_ratio", "J/token relative to the baseline (log scale; < 1 saves "
                                                            "energy; whiskers: 95 % CI)", reference=1.0, ratio=True),
            "Paired J/token ratio with 95 % bootstrap CIs, one panel per decoding regime")
    doc.fig("j_per_token", plots.forest(s, "j_per_token", "J/token (total energy ÷ total tokens; whiskers: 95 % CI)"),
            "J/token per cell")
    _net_energy(doc, s, o)


def _net_energy(doc: Doc, s: pd.DataFrame, o: pd.DataFrame) -> None:
    """Net J/token (above the measured idle) beside gross: ratio and per cell, and the idle-dominated cells."""
    if "net_energy_ratio" in o and o["net_energy_ratio"].notna().any():
        doc.fig("net_energy_ratio", plots.forest(o, "net_energy_ratio", "net J/token (above idle) relative to the "
                                                 "baseline (log scale; whiskers: 95 % CI)", reference=1.0, ratio=True),
                "Paired net J/token ratio (energy above the measured idle) beside the gross one above")
    if "net_j_per_token" in s and s["net_j_per_token"].notna().any():
        doc.fig("net_j_per_token", plots.forest(s, "net_j_per_token", "net J/token (energy above the measured idle "
                                                                      "÷ total tokens; whiskers: 95 % CI)"),
                "Net J/token per cell, beside gross")
    idle = s[s.get("idle_dominated", pd.Series(False, index=s.index)).fillna(False).astype(bool)]
    if len(idle):
        doc.note("Idle-dominated (net < 10 % of gross: gross J/token measures the idle GPU more than the method): "
                 + ", ".join(f"{r['label']} ({r['pair']}, net {100 * r['net_share']:.1f} % of gross)"
                             for _, r in idle.iterrows()) + ".")


PPL_DIAGNOSTIC = ("Under sampling, the output's perplexity under the target is a distance-from-the-target "
                  "diagnostic, not quality: a lossless sampler matches the target's own PPL in expectation, and a "
                  "lossy one can score lower by drifting toward the target's mode. Sampling cells are therefore on no "
                  "PPL front and have no PPL-based primary quality; judge them by the task metric or the LLM judge "
                  "(judge=openai | hf).")


def sampling_regimes(a: Analysis) -> set:
    """The regime labels of sampling cells (where perplexity is a diagnostic, not quality)."""
    c = a.cells
    return set(c.loc[c["decoding"].astype(str) == "sampling", "regime"]) if "decoding" in c else set()


def _quality_table(a: Analysis) -> tuple[pd.DataFrame, str]:
    s = a.summary
    max_new = a.cells.set_index("cell_id")["max_new_tokens"] if "max_new_tokens" in a.cells else pd.Series(dtype=float)
    show = pd.DataFrame({"method": s["label"], "decoding": s["regime"], "pair": s["pair"], "dataset": s["dataset"],
                         "gpu": s["gpu"], "seed": s["seed"], "prompts": s["n_prompts"],
                         "max new tokens": s["cell_id"].map(max_new), "lossless": s["lossless"].map(lossless_text)})
    sampling = s["regime"].isin(sampling_regimes(a))
    for dataset, g in s.groupby("dataset", sort=False):
        prim = quality.primary(a.cells[a.cells["dataset"] == dataset], a.records)
        show.loc[g.index, "primary quality"] = [
            "none (PPL is a diagnostic under sampling)" if prim.column == quality.PPL and sampling[i]
            else f"{prim.name}: {ci(x, prim.column)}" for i, x in g.iterrows()]
    for q in [q for q in quality.quality_columns(a.records) if q != quality.PPL]:
        show[q.removeprefix("metric.")] = [ci(x, q) for _, x in s.iterrows()]
    show["PPL under the target"] = [ci(x, quality.PPL) + (" (diagnostic)" if sampling[i] else "")
                                    for i, x in s.iterrows()]
    flags = [c for c in s.columns if c.startswith("metric.") and quality.is_flag(c)]
    if flags:
        show["flagged outputs"] = [", ".join(f"{c[7:]} {x[c]:.0%}" for c in flags if x.get(c, 0) > 0) or "none"
                                   for _, x in s.iterrows()]
    show["tokens/s"] = [ci(x, "tokens_per_s") for _, x in s.iterrows()]
    show["J/token"] = [ci(x, "j_per_token") for _, x in s.iterrows()]
    show["net J/token"] = [ci(x, "net_j_per_token") + (" (idle-dominated)" if x.get("idle_dominated") is True else "")
                           if "net_j_per_token" in x else "n/a" for _, x in s.iterrows()]
    show["interleaved"] = ["yes" if bool(v) else "no" for v in s.get("interleaved", pd.Series(False, index=s.index))]
    return compact(show, keep=("method", "decoding"))


def _judge_by_category(doc: Doc, a: Analysis, q: str) -> None:
    """The judge's grade per cell and MT-Bench category, mean [95 % CI] over the category's prompts (turns)."""
    t = quality.by_category(a.records, a.cells, q, **a.boot)
    if t.empty:
        return
    a.tables[q.removeprefix("metric.") + "_by_category"] = t
    t = t.assign(value=[ci(r, q) for _, r in t.iterrows()])
    wide = t.pivot_table(index="label", columns="category", values="value", aggfunc="first")
    wide = wide[["overall", *sorted(c for c in wide.columns if c != "overall")]].reset_index()
    what = "MT-Bench score (judge's 1-10 rating, both turns; higher is better)" if q.endswith("score") else \
        "MT-Bench win rate against the reference method (win 1, tie 0.5, loss 0; higher is better)"
    doc.table(wide, f"{what} per category: mean [95 % CI] over the category's prompts; the judge's failures (NaN, "
              "with the reason in the records' judge.* fields) are left out")


def sec_quality(doc: Doc, a: Analysis) -> None:
    table, said = _quality_table(a)
    doc.table(table, "Quality and cost per cell (the primary quality metric is the task's declared one; flags are "
              "not quality)" + (f" — {said}" if said else ""))
    for q in ("metric.mt_bench_score", "metric.mt_bench_win_rate"):  # the LLM judge's grades (harness.judge)
        if q in a.records and pd.to_numeric(a.records[q], errors="coerce").notna().any():
            _judge_by_category(doc, a, q)
    doc.fig("tokens_per_s", plots.forest(a.summary, "tokens_per_s", "tokens/s (total new tokens ÷ total wall time; "
                                                                    "whiskers: 95 % CI over prompts)"),
            "Throughput per cell, one panel per decoding regime (not paired: compare with the speed-ups above)")
    sampling = sampling_regimes(a)
    if sampling:
        doc.note(PPL_DIAGNOSTIC)
    for dataset, s_all in a.summary.groupby("dataset", sort=False):
        prim = quality.primary(a.cells[a.cells["dataset"] == dataset], a.records)
        if prim.note and prim.column == quality.PPL and s_all["regime"].isin(sampling).all():
            doc.note(f"{dataset}: no quality axis under sampling ({prim.note}; PPL is a diagnostic there).")
        elif prim.note:
            doc.note(f"{dataset}: quality axis = {prim.name} ({prim.note}).")
        for q in dict.fromkeys([prim.column, quality.PPL]):
            s = s_all[~s_all["regime"].isin(sampling)] if q == quality.PPL else s_all  # PPL: no sampling fronts
            if s.empty:
                continue
            hib = prim.higher_is_better if q == prim.column else False
            for cost, label in (("tokens_per_s", "tokens/s (higher is better)"),
                                ("j_per_token", "J/token (lower is better)"),
                                ("net_j_per_token", "net J/token above idle (lower is better)")):
                if cost not in s or not s[cost].notna().any() or q not in s or not s[q].notna().any():
                    continue
                pts = pareto.front_points(s, q, cost, hib)
                name = "_".join(str(x) for x in ("pareto", dataset, q.replace(".", "_"), cost))
                doc.fig(name, plots.pareto(pts, q, cost, label, hib),
                        f"{dataset}: {quality.quality_label(q, hib)} vs {label}; one panel per pair × gpu × regime; "
                        "ringed: the non-dominated (Pareto) set of that regime; bars: 95 % CIs")
