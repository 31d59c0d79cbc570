"""The report's diagnostic sections: iso-quality comparisons, theory checks, acceptance, the fixed-γ oracle,
measurement quality and provenance."""
from __future__ import annotations

from functools import partial

import numpy as np
import pandas as pd

from harness.analysis import acceptance, checks, oracle, pareto, plots, theory
from harness.analysis.specs import parse_pair
from harness.analysis.quality import PPL
from harness.report.context import Analysis, compact
from harness.report.doc import Doc, ci, duration, pct
from harness.report.sections import sampling_regimes


def iso_pairs(a: Analysis) -> list | None:
    """The family pairs: the command line's, else the cells' configs' ``report.iso``, else None (defaults)."""
    texts = a.options.get("iso") or a.configured("iso")
    return [parse_pair(t) for t in texts] if texts else None


def sec_iso(doc: Doc, a: Analysis) -> None:
    iso = pareto.iso_quality(a.records, a.cells, iso_pairs(a))
    a.tables["iso_quality"] = iso  # the whole analysis (every pair, with why none); the report shows what exists
    if not iso.empty:  # perplexity is no quality under sampling (issue 33.3): no iso-"quality" on it there
        iso = iso[~((iso["quality"] == PPL) & iso["decoding"].isin(sampling_regimes(a)))].reset_index(drop=True)
    computed = pd.to_numeric(iso.get("ratio_geo", pd.Series(dtype=float)), errors="coerce").notna()
    if not iso.empty and not computed.all():  # rows without a ratio (a family absent): named once, not listed n/a
        gone = iso[~computed].drop_duplicates(["family_a", "family_b", "note"])
        missing = "; ".join(f"{x['family_a']} vs {x['family_b']}: {x['note']}" for _, x in gone.iterrows())
        iso = iso[computed].reset_index(drop=True)
        if iso.empty:
            doc.p(f"No iso-quality comparison can be computed from these cells ({missing}). Add pairs with "
                  "--iso A:B, each a method spec such as 'dsbd[memory_constrained=false]'.")
            return
        doc.note(f"Pairs without a comparison here: {missing}.")
    if iso.empty:
        doc.p("No family pair to compare (iso-quality needs one of the headline families — DSBD (unconstrained) vs "
              "beam sampling, MTAD vs SD — or two methods each swept over a parameter; add pairs with --iso A:B, "
              "each a method spec such as 'dsbd[memory_constrained=false]').")
        return
    doc.p("A's advantage over B at equal quality, read off each family's interpolated Pareto front over the quality "
          "range both cover, within one decoding regime: speed-up = tokens/s of A ÷ B; energy reduction = J/token of "
          "B ÷ A (above 1: A better). Geometric mean over the common range [95 % bootstrap CI over prompts], min–max.")
    show = pd.DataFrame({
        "A": iso["family_a"], "B": iso["family_b"], "pair": iso["pair"], "dataset": iso["dataset"],
        "decoding": iso["decoding"], "quality": iso["quality"].str.removeprefix("metric."), "measure": iso["measure"],
        "settings A/B": iso["n_a"].astype(str) + "/" + iso["n_b"].astype(str),
        "common quality range": [f"[{lo:.4g}, {hi:.4g}]" if np.isfinite(r) else "—"
                                 for lo, hi, r in zip(iso["overlap_lo"], iso["overlap_hi"], iso["ratio_geo"])],
        "A over B": [ci({"v": r, "v_lo": lo, "v_hi": hi}, "v") for r, lo, hi in
                     zip(iso["ratio_geo"], iso["ci_lo"], iso["ci_hi"])],
        "min–max": [f"{x:.3g}–{y:.3g}" if np.isfinite(x) else "—" for x, y in zip(iso["ratio_min"], iso["ratio_max"])],
        "note": iso["note"]})
    table, said = compact(show, keep=("A", "B", "decoding"))
    doc.table(table, "Iso-quality ratios" + (f" — {said}" if said else ""))


def sec_latency(doc: Doc, a: Analysis) -> None:
    from harness.analysis.latency import latency_table

    lat = latency_table(a.records)
    a.tables["latency"] = lat
    doc.p("Per cell over its prompts: TTFT = the prompt-encoding (prefill) calls, TPOT = decode time ÷ "
          "(new tokens − 1), end-to-end = the generation's wall time (harness/analysis/latency.py); p50 / p90 / p99.")
    cells = a.cells.set_index("cell_id")
    ids = lat["cell_id"]

    def cell(col, default=None):
        return ids.map(cells[col]) if col in cells else pd.Series(default, index=lat.index)
    new = a.records.groupby("cell_id")["new_tokens"].mean() if "new_tokens" in a.records else pd.Series(dtype=float)
    shown = pd.DataFrame({"method": cell("label").fillna(ids), "decoding": cell("regime"), "pair": cell("pair"),
                          "dataset": cell("dataset"), "gpu": cell("gpu"), "seed": cell("seed"),
                          "prompts": lat["n_prompts"], "max new tokens": cell("max_new_tokens"),
                          "mean new tokens": ids.map(new).map(lambda v: f"{v:.1f}" if pd.notna(v) else "n/a")})
    for metric, name in (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT"), ("e2e_ms", "end-to-end")):
        for q in (50, 90, 99):
            shown[f"{name} p{q}"] = [duration(v / 1e3) for v in lat[f"{metric}_p{q}"]]
    table, said = compact(shown, keep=("method", "decoding"))
    doc.table(table, "Latency percentiles" + (f" — {said}" if said else ""))


def _column(df: pd.DataFrame, name: str) -> pd.Series:
    """``df[name]``, or NaN where the table has no such column."""
    return df.get(name, pd.Series(np.nan, index=df.index))


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
        col = partial(_column, sd)
        show = pd.DataFrame({"method": sd["label"], "decoding": col("regime"), "dataset": sd["dataset"],
                             "seed": sd["seed"],
                             "rounds": col("rounds"),
                             "mean γ": col("mean_gamma"), "α̂": col("alpha_mle"),
                             "tokens/round": col("tokens_per_round"),
                             "theory": col("tokens_per_round_theory"),
                             "deviation": [pct(x) for x in col("tokens_per_round_dev")],
                             "flag": _text(col("flag")), "note": _text(col("reason"))})
        doc.table(*compact(show))
        doc.h(3, "Speed-up vs the improvement factor")
        doc.p("Predicted speed-up Σ_r E_r ÷ (draft calls · c + target calls · v), with c and v the measured seconds of "
              "a draft call and of a verification call over the AR baseline's seconds per token; 'Leviathan' is "
              "(1 − α̂^(γ+1)) / ((1 − α̂)(γc + 1)), i.e. assuming a verification costs one AR step.")
        show = pd.DataFrame({"method": sd["label"], "decoding": col("regime"), "seed": sd["seed"],
                             "measured": col("speedup_measured"),
                             "c": col("c"), "v": col("v"), "predicted": col("speedup_theory"),
                             "Leviathan (v=1)": col("speedup_leviathan"),
                             "deviation": [pct(x) for x in col("speedup_dev")],
                             "why n/a": _text(_text(col("speedup_reason"), empty=None)
                                              .fillna(_text(col("reason"), empty=None)))})
        doc.table(*compact(show))
    doc.h(3, "DSBD Theorem 3.2")
    if ds.empty:
        doc.p("No DSBD cell.")
        return
    doc.p("Expected steps per iteration (1 − m^(γ+1))/(1 − m), m = min(t, β̄), with β̄ the mean over verified layers of "
          "P(at least W_min drafts accepted) from Eq. 2-5, recorded by the decoder (the theorem's own prediction). "
          "Beside it, the same with the realised layer pass rate β̂ — near-circular as a check, shown for reference.")
    cols = {"label": "method", "regime": "decoding", "seed": "seed", "iterations": "iterations", "gamma": "γ",
            "threshold_t": "t",
            "beta_bar": "β̄ (Eq. 2-5)", "m": "min(t, β̄)", "steps_measured": "steps/iteration",
            "steps_theorem": "Theorem 3.2", "deviation": "deviation", "pass_rate_mle": "β̂ (realised)",
            "steps_with_pass_rate": "with β̂", "flag": "flag", "reason": "note"}
    show = ds[[c for c in cols if c in ds]].rename(columns=cols)
    if "deviation" in show:
        show["deviation"] = [pct(x) for x in show["deviation"]]
    doc.table(*compact(show.astype(object).where(show.notna(), "")))


def sec_acceptance(doc: Doc, a: Analysis) -> None:
    pr = acceptance.per_request_vs_pooled(a.records, **a.boot)
    a.tables["acceptance"] = pr
    if pr.empty:
        doc.p("No cell drafted.")
        return
    doc.p("Mean acceptance length (MAT: tokens committed per round, Spec-Bench's definition) and acceptance rate "
          "(accepted ÷ draft positions), pooled over all rounds vs the mean of per-request values; pooled means "
          "weight long completions more.")
    show = pd.DataFrame({"method": pr["label"], "decoding": pr["regime"], "seed": pr["seed"],
                         "requests": pr["requests"],
                         "rounds": pr["rounds"], "MAT pooled": pr["mat_pooled"],
                         "MAT per request": [ci(x, "mat_per_request") for _, x in pr.iterrows()],
                         "acceptance pooled": pr["acceptance_pooled"],
                         "acceptance per request": [ci(x, "acceptance_per_request") for _, x in pr.iterrows()]})
    doc.table(*compact(show, keep=("method", "decoding")))
    hist = acceptance.accept_length_histogram(a.records)
    doc.fig("accept_lengths", plots.accept_histograms(hist),
            "Accept-length histograms, one panel per cell (integer bins; n = rounds; dashed: MAT)")
    cond = acceptance.conditional_acceptance(a.records)
    a.tables["conditional_acceptance"] = cond
    doc.fig("conditional_acceptance", plots.conditional_acceptance(cond),
            "Per-position conditional acceptance, one panel per cell, with Wilson 95 % bands (rounds as independent "
            "trials; n = rounds that reached position 1)")


def sec_oracle(doc: Doc, a: Analysis) -> None:
    """Fixed-γ sweeps and the per-prompt oracle (adaptive §3); adaptive γ policies against them."""
    sweeps, comparisons = a.tables["oracle_sweeps"], a.tables.get("oracle_comparisons")  # shown when computed
    doc.p("A fixed-γ sweep is a set of cells differing only in γ (policy fixed). Best fixed γ: the highest "
          "tokens/s over the dataset (ratio of totals); oracle: every prompt at its own best γ (adaptive §3: "
          "9-18 % over the best per-dataset γ) — a maximum over single noisy runs, so an optimistic bound.")
    show = sweeps.copy()
    for col in ("best_tokens_per_s", "oracle_tokens_per_s"):
        show[col] = show[col].map(lambda v: f"{v:.1f}")
    show["per_prompt_gain"] = show["per_prompt_gain"].map(pct)
    doc.table(*compact(show.reset_index(drop=True), keep=("method_name", "decoding")))
    if comparisons is not None and not comparisons.empty:
        doc.h(3, "Adaptive γ policies against the sweep (paired by prompt; 95 % bootstrap CIs)")
        doc.table(*compact(oracle.comparison_display(comparisons).reset_index(drop=True),
                           keep=("method_name", "gamma_policy")))


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
    doc.table(*compact(per_cell.reset_index(drop=True), keep=("cell",)))


def _text(values: pd.Series, empty: str | None = "") -> pd.Series:
    """A column of notes as objects (NaN → ``empty``): an all-NaN column is float, and pandas refuses a string
    fill value for it from pandas 4 on."""
    out = values.astype(object)
    return out.where(out.notna(), empty)
