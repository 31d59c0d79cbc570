"""The adaptive-speculation paper's tables (short name ``adaptive``: 004 in ``../shared/seeds``).

* **Table 2**: the online window optimisation (``sd[gamma_policy=online]``) against speculative decoding at a
  fixed γ (SPS: throughput improvement in %, ``sd[gamma_policy=fixed]``) and against autoregressive decoding
  (ARS, ×), per pair and dataset, columns per GPU. Both are paired prompt by prompt (ratio of totals, 95 %
  bootstrap CI over prompts) between cells with the same settings but the method's own.
* **Table 3**: the same SPS without and with draft selection: "w/ draft selection" is the online policy with
  ``draft_selection=ols`` on the multi-draft pair (``*_multi``) against fixed-γ SD on its default-draft twin
  (the pair with the same target and draft and no other drafts), over the prompts both measured — the
  fit-phase prompts (the first ``selection_fit_prompts``) are excluded, as §6.1 evaluates the remaining ones.
* **App. C.2** (Figs. 6-7): every γ policy — throughput, acceptance rate, and throughput against fixed γ.
"""
from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd

from harness.analysis import paper_values as pv
from harness.analysis.tables import prompt_key
from harness.analysis.paper import (Entry, PaperTable, assemble, block_names, blocks, choose, context_keys, paired,
                                    percent, times)
from harness.analysis.specs import MethodSpec

ONLINE = MethodSpec.parse("sd[gamma_policy=online,draft_selection=none]")
FIXED = MethodSpec.parse("sd[gamma_policy=fixed,draft_selection=none]")
SELECTION = MethodSpec.parse("sd[gamma_policy=online,draft_selection=ols]")
AR = MethodSpec.parse("ar_greedy")
POLICIES = ("fixed", "online", "fsm", "cache_fsm", "qlearning", "hf_heuristic")


def _no_selection(cells: pd.DataFrame) -> pd.Series:
    col = cells.get("param.draft_selection", pd.Series(None, index=cells.index))
    return col.isna() | col.astype(str).isin(("none", "None", "null", ""))


def _any(spec: MethodSpec, cells: pd.DataFrame) -> pd.Series:
    """A spec's mask, reading ``draft_selection=none`` as "no draft selection" (null in older summaries)."""
    plain = MethodSpec(spec.method, tuple(p for p in spec.params if p[0] != "draft_selection"))
    mask = plain.mask(cells)
    return mask & _no_selection(cells) if ("draft_selection", "none") in spec.params else mask & spec.mask(cells)


def _defaults() -> dict[str, float]:
    """App. C.5's swept parameters and their defaults (the policy's and the selection's own)."""
    from dataclasses import fields

    from harness.adaptive.policies.online import OnlineParams
    from harness.selection import SelectionParams

    own: dict[str, Any] = {f.name: f.default for cls in (OnlineParams, SelectionParams) for f in fields(cls)}
    return {k: float(own[k]) for k in ("acc_history", "gamma_max", "features")}


def _spec(spec: MethodSpec, cells: pd.DataFrame) -> pd.Series:
    """:func:`_any`, without App. C.5's sensitivity cells (an online policy or draft selection with a swept
    parameter off its default: Tables 10-11's own): the other tables' online cell is the default one."""
    mask = _any(spec, cells)
    return mask & ~swept(cells) if spec.method == "sd" and ("gamma_policy", "online") in spec.params else mask


SWEPT_POLICIES = ("online", "fsm", "cache_fsm", "qlearning", "hf_heuristic")


def swept(cells: pd.DataFrame) -> pd.Series:
    """Tables 10-11's and Fig. 3's own cells: sd with an adaptive policy (not SpecDec++, whose bound is its own)
    whose App. C.5 parameter (history length, γ_max, feature length) is off its default."""
    online = (cells.get("method_name", pd.Series("", index=cells.index)) == "sd") & \
        cells.get("param.gamma_policy", pd.Series("", index=cells.index)).astype(str).isin(SWEPT_POLICIES)
    off = pd.Series(False, index=cells.index)
    for name, default in _defaults().items():
        col = pd.to_numeric(cells.get(f"param.{name}", pd.Series(None, index=cells.index)), errors="coerce")
        off |= col.notna() & (col != float(default))
    return online & off


def fixed_twin(cells: pd.DataFrame, adaptive: pd.DataFrame) -> pd.DataFrame:
    """Fixed-γ SD at the adaptive cell's γ (its starting γ; the seed gives no fixed γ: the sd default, 4) —
    not the other γ of a fixed-γ sweep."""
    fixed = cells[_spec(FIXED, cells)]
    if adaptive.empty or "param.gamma" not in cells:
        return fixed
    return fixed[fixed["param.gamma"].astype(float).isin(adaptive["param.gamma"].astype(float))]


def table2(summary: pd.DataFrame, records: pd.DataFrame, **boot) -> PaperTable:
    entries = []
    found = [(k, g) for k, g in blocks(summary, ["pair", "dataset", "regime"], laid_out=["gpu"])
             if _spec(ONLINE, g).any()]
    names, common = block_names([k for k, _ in found], ["pair", "dataset", "regime"])
    for key, g in found:
        paper = pv.ADAPTIVE_TABLE2.get((pv.paper_pair("adaptive", key[0]), pv.paper_dataset("adaptive", key[1])), {})
        for gpu, gg in g.groupby("gpu", sort=False):
            online, why = choose(gg[_spec(ONLINE, gg)], "online")
            for col, spec, fmt, i in (("SPS", FIXED, percent, 0), ("ARS", AR, times, 1)):
                base, why_b = choose(fixed_twin(gg, online) if spec is FIXED else gg[_spec(spec, gg)], str(spec))
                v, lo, hi, n, src = paired(records, online, base, **boot)
                text = fmt(v, lo, hi) if np.isfinite(v) else f"n/a: {why or why_b or 'no common prompts'}"
                vals = paper.get(pv.paper_gpu(gpu))
                entries.append(Entry((names[key],), (str(gpu), col), v, text, src,
                                     f"{vals[i]} ({pv.paper_gpu(gpu)}, {key[1]})" if vals else ""))
    return assemble("adaptive.table2", "Adaptive Table 2: adaptive window size selection (online) against SD and AR",
                    f"SPS: throughput of the online policy over SD at a fixed γ, as improvement; ARS: over "
                    f"autoregressive decoding (×); ratio of totals [95 % bootstrap CI over prompts]. {common}.",
                    entries, ["pair · dataset"], ["gpu", "measure"])


def _drafts(cell: pd.Series) -> list:
    d = cell.get("pair_drafts")
    return json.loads(d) if isinstance(d, str) and d.strip() not in ("", "null") else []


def single_draft_cells(cells: pd.DataFrame, multi: pd.Series) -> dict[str, pd.DataFrame]:
    """{draft: the cells of the single-draft pair with the multi-draft cell's target and that draft}, in the
    multi-draft cell's setting (dataset and its prompts, gpu, seed, decoding, ...: all but the pair)."""
    single = cells[cells["pair_drafts"].map(lambda d: not _drafts(pd.Series({"pair_drafts": d})))] \
        if "pair_drafts" in cells else cells
    single = single[single["pair_target"] == multi["pair_target"]]
    ctx = context_keys(single, laid_out=["pair"])
    mine = context_keys(multi.to_frame().T, laid_out=["pair"]).iloc[0]
    single = single[ctx == mine]
    return {d: single[single["pair_draft"] == d] for d in _drafts(multi) or [multi["pair_draft"]]
            if (single["pair_draft"] == d).any()}


def default_twin(cells: pd.DataFrame, multi: pd.Series) -> pd.DataFrame:
    """The cells of the default-draft twin of a multi-draft cell's pair: same target and draft, no drafts list,
    the multi-draft cell's setting."""
    return single_draft_cells(cells, multi).get(multi["pair_draft"], cells.iloc[0:0])


def _same_prompts(records: pd.DataFrame, cell_id: str) -> pd.DataFrame:
    """``records`` restricted to the prompts ``cell_id`` measured (a selection cell: its fit phase excluded)."""
    keys = set(prompt_key(records[records["cell_id"] == cell_id]))
    return records[prompt_key(records).isin(keys)]


def table3(summary: pd.DataFrame, records: pd.DataFrame, excluded: pd.DataFrame | None = None, **boot) -> PaperTable:
    """Table 3: "w/o draft selection" is the better single draft's SPS (online over fixed γ on that draft, as in
    Table 2 — the paper's definition); "w/ draft selection" the selection cell over fixed-γ SD on the default
    draft. Both over the prompts the selection cell measured (its fit phase excluded from both rows)."""
    entries, notes = [], []
    for _, m in summary[_spec(SELECTION, summary)].iterrows():
        recs = _same_prompts(records, m["cell_id"])
        target = pv.paper_pair("adaptive", m["pair"]) or str(m["pair"])
        n_fit = int((excluded["cell_id"] == m["cell_id"]).sum()) if excluded is not None and len(excluded) else 0
        col = (str(m["dataset"]), str(m["gpu"]))
        per_draft = []
        for draft, twin in single_draft_cells(summary, m).items():
            online, why_o = choose(twin[_spec(ONLINE, twin)], f"online SD on {draft}")
            fixed, why_f = choose(fixed_twin(twin, m.to_frame().T), f"fixed-γ SD on {draft}")
            per_draft.append((draft, *paired(recs, online, fixed, **boot), why_o or why_f))
        ok = [d for d in per_draft if np.isfinite(d[1])]
        best = max(ok, key=lambda d: d[1]) if ok else None
        notes.append(f"{m['pair']} ({m['dataset']}, {m['gpu']}): {n_fit} fit-phase prompt(s) excluded from both rows; "
                     "SPS per single draft: " + (", ".join(f"{d[0]} {percent(d[1], d[2], d[3])} (n={d[4]})" if
                                                           np.isfinite(d[1]) else f"{d[0]} n/a ({d[6] or 'no prompts'})"
                                                           for d in per_draft) or "no single-draft cells"))
        fixed_default, why_fd = choose(fixed_twin(default_twin(summary, m), m.to_frame().T),
                                       "fixed-γ SD, default draft")
        rows = ((f"{target} (w/o draft selection)", best, "no single-draft SPS (notes)"),
                (f"{target} (w/ draft selection)", (None, *paired(recs, m.to_frame().T, fixed_default, **boot), ""),
                 why_fd))
        for label, est, why in rows:
            v = est[1] if est is not None else np.nan
            paper = pv.ADAPTIVE_TABLE3.get((target, "w/ draft" in label), {}).get(
                (pv.paper_dataset("adaptive", m["dataset"]), pv.paper_gpu(m["gpu"])))
            text = f"{percent(v, est[2], est[3])} (n={est[4]}" + (f", {est[0]})" if est[0] else ")") \
                if np.isfinite(v) else f"n/a: {why or 'no common prompts'}"
            entries.append(Entry((label,), col, v, text, est[5] if est is not None else (),
                                 f"{paper} ({pv.paper_gpu(m['gpu'])})" if paper else ""))
    return assemble("adaptive.table3", "Adaptive Table 3: throughput improvement over speculative decoding, without "
                    "and with draft selection", "w/o: the better single draft's SPS (the online policy over fixed γ on "
                    "that draft; the paper's definition); w/: the selection cell over fixed-γ SD on the default draft. "
                    "Both paired by prompt over the prompts the selection cell measured (its fit phase excluded from "
                    "both).",
                    entries, ["target model"], ["dataset", "gpu"], notes=notes)


def policy_table(summary: pd.DataFrame, records: pd.DataFrame, **boot) -> PaperTable:
    """App. C.2: every γ policy's tokens/s, acceptance rate and speed-up over fixed γ (paired)."""
    entries = []
    sd = summary[MethodSpec.parse("sd").mask(summary) & _no_selection(summary) & ~swept(summary)]
    found = [(k, g) for k, g in blocks(sd) if g["param.gamma_policy"].nunique() > 1] \
        if "param.gamma_policy" in sd else []
    names, common = block_names([k for k, _ in found])
    for key, g in found:
        fixed, _ = choose(fixed_twin(g, g[_spec(ONLINE, g)]), "fixed")
        for policy in [p for p in POLICIES if p in set(g["param.gamma_policy"])]:
            rows, why = choose(fixed if policy == "fixed" else g[g["param.gamma_policy"] == policy], policy)
            row = (names[key], policy)
            for col, header in (("tokens_per_s", "tokens/s"), ("acceptance_rate", "acceptance rate")):
                value, text = (rows[col].mean(), f"{rows[col].mean():.3g}") if not why else (np.nan, f"n/a: {why}")
                entries.append(Entry(row, (header,), value, text, tuple(rows["cell_id"]), "", True))
            if policy == "fixed":
                entries.append(Entry(row, ("÷ fixed γ",), 1.0, "1 (the reference)", tuple(fixed["cell_id"])))
                continue
            v, lo, hi, n, src = paired(records, rows, fixed, **boot)
            entries.append(Entry(row, ("÷ fixed γ",), v, times(v, lo, hi), src, "", True))
    return assemble("adaptive.policies", "Adaptive App. C.2 (Figs. 6-7): γ policies compared",
                    f"Throughput (ratio of totals), acceptance rate (accepted ÷ draft positions) and throughput over "
                    f"the fixed-γ cell, paired by prompt. {common}.", entries, ["block", "γ policy"], ["measure"])


SPECDECPP = MethodSpec.parse("sd[gamma_policy=specdecpp]")
EAGLE_FIXED = MethodSpec.parse("eagle2[gamma_policy=fixed]")
EAGLE_ADAPTIVE = MethodSpec.parse("eagle2[gamma_policy=online]")


def _ratio_entries(records, row, gpu, cells: dict, columns, paper: dict, **boot) -> list[Entry]:
    """Entries ``(row, (gpu, header))`` of paired speed-ups: ``columns`` = ((header, a, b), ...) naming cells."""
    out = []
    for header, a, b in columns:
        (ra, wa), (rb, wb) = cells[a], cells[b]
        v, lo, hi, n, src = paired(records, ra, rb, **boot)
        text = times(v, lo, hi) if np.isfinite(v) else f"n/a: {wa or wb or 'no common prompts'}"
        out.append(Entry(row, (str(gpu), header), v, text, src, paper.get(header, ""), True))
    return out


def table4(summary: pd.DataFrame, records: pd.DataFrame, **boot) -> PaperTable:
    """Table 4: SpecDec++ (each threshold a row) and the online policy, speed-ups over AR, and ours over each."""
    entries = []
    found = [(k, g) for k, g in blocks(summary, ["pair", "dataset", "regime"], laid_out=["gpu"])
             if _spec(SPECDECPP, g).any()]
    names, common = block_names([k for k, _ in found], ["pair", "dataset", "regime"])
    for key, g in found:
        for gpu, gg in g.groupby("gpu", sort=False):
            base = {"AR": choose(gg[_spec(AR, gg)], "AR"), "ours": choose(gg[_spec(ONLINE, gg)], "online")}
            spp = gg[_spec(SPECDECPP, gg)]
            for t, gt in spp.groupby(spp.get("param.threshold", pd.Series("", index=spp.index)), sort=True):
                cells = {**base, "it": choose(gt, "SpecDec++")}
                entries += _ratio_entries(records, (names[key], f"SpecDec++ (threshold {t:g})"), gpu, cells,
                                          (("× AR", "it", "AR"), ("ours ÷ it", "ours", "it")), {}, **boot)
            entries += _ratio_entries(records, (names[key], "ours (online)"), gpu, base, (("× AR", "ours", "AR"),),
                                      {}, **boot)
    return assemble("adaptive.table4", "Adaptive Table 4: SpecDec++ against the online window (tokens/s speed-ups)",
                    f"× AR: throughput over autoregressive decoding; ours ÷ it: the online policy over that SpecDec++ "
                    f"setting; ratio of totals [95 % bootstrap CI over prompts], paired by prompt. {common}.",
                    entries, ["block", "method"], ["gpu", "measure"])


def table8(summary: pd.DataFrame, records: pd.DataFrame, **boot) -> PaperTable:
    """Table 8 (App. C.4): EAGLE-2 at its fixed depth and with adaptive depth (the online policy), over AR."""
    entries = []
    summary = summary[~synced(summary)]  # Table 9's cells (device synchronised at every boundary: slower)
    found = [(k, g) for k, g in blocks(summary, ["pair", "dataset", "regime"], laid_out=["gpu"])
             if _spec(EAGLE_ADAPTIVE, g).any() or _spec(EAGLE_FIXED, g).any()]
    names, common = block_names([k for k, _ in found], ["pair", "dataset", "regime"])
    for key, g in found:
        for gpu, gg in g.groupby("gpu", sort=False):
            cells = {"AR": choose(gg[_spec(AR, gg)], "AR"), "fixed": choose(gg[_spec(EAGLE_FIXED, gg)], "EAGLE-2"),
                     "adaptive": choose(gg[_spec(EAGLE_ADAPTIVE, gg)], "EAGLE-2 adaptive depth")}
            entries += _ratio_entries(records, (names[key],), gpu, cells, (
                ("EAGLE-2 × AR", "fixed", "AR"), ("adaptive depth × AR", "adaptive", "AR"),
                ("adaptive ÷ EAGLE-2", "adaptive", "fixed")), {}, **boot)
    return assemble("adaptive.table8", "Adaptive Table 8: adaptive speculation improving EAGLE-2 (adaptive depth)",
                    "EAGLE-2 at its fixed depth and with the online policy choosing the tree's depth, over AR on the "
                    f"same prompts; ratio of totals [95 % bootstrap CI over prompts]; not Table 9's cells (run with "
                    f"runner.sync_timing or runner.breakdown). {common}.", entries, ["pair · dataset"],
                    ["gpu", "measure"])


#: Table 9's measures: (header, numerator, denominator) — ratios of totals over the cell's prompts
TABLE9 = (("serving (tokens/s)", "new_tokens", "wall_time_s"),
          ("speculation (draft tokens/s)", "draft_nodes", "draft_time_s"),
          ("verification (draft tokens/s)", "draft_nodes", "verify_time_s"),
          ("acceptance rate", "accepted_tokens", "draft_positions"))
SYNCED = ("runner.sync_timing", "runner.breakdown")


def synced(cells: pd.DataFrame) -> pd.Series:
    """Cells run with the device synchronised around drafting and verification (``runner.sync_timing`` or
    ``runner.breakdown``): only their draft/verify times cover the device's work."""
    def one(m) -> bool:
        items = json.loads(m) if isinstance(m, str) else {}
        return any(items.get(k) in (True, "true", "True") for k in SYNCED)
    return cells.get("match_json", pd.Series(None, index=cells.index)).map(one).astype(bool)


def _pooled(records: pd.DataFrame, ids, num: str, den: str) -> float:
    r = records[records["cell_id"].isin(list(ids))]
    if r.empty or num not in r or den not in r:
        return np.nan
    n, d = pd.to_numeric(r[num], errors="coerce"), pd.to_numeric(r[den], errors="coerce")
    return float(n.sum() / d.sum()) if n.notna().all() and d.notna().all() and d.sum() > 0 else np.nan


def table9(summary: pd.DataFrame, records: pd.DataFrame) -> PaperTable:
    """Table 9 (App. C.4): EAGLE-2 and adaptive depth, per block and gpu — serving throughput, speculation and
    verification rates (draft tokens per second of drafting / of verification) and acceptance rate, from the
    recorded ``draft_time_s``/``verify_time_s`` of cells run with the device synchronised (:func:`synced`)."""
    entries = []
    e2 = summary[(_spec(EAGLE_FIXED, summary) | _spec(EAGLE_ADAPTIVE, summary)) & synced(summary)]
    found = blocks(e2, ["pair", "dataset", "regime"], laid_out=["gpu"])
    names, common = block_names([k for k, _ in found], ["pair", "dataset", "regime"])
    for key, g in found:
        for gpu, gg in g.groupby("gpu", sort=False):
            for label, spec in (("EAGLE-2", EAGLE_FIXED), ("ours (adaptive depth)", EAGLE_ADAPTIVE)):
                rows, why = choose(gg[_spec(spec, gg)], label)
                for header, num, den in TABLE9:
                    v = _pooled(records, rows["cell_id"], num, den) if not why else np.nan
                    text = f"{v:.3g}" if np.isfinite(v) else f"n/a: {why or f'{den} not recorded'}"
                    entries.append(Entry((names[key], label), (str(gpu), header), v, text, tuple(rows["cell_id"]),
                                         "", True))
    return assemble("adaptive.table9", "Adaptive Table 9: latency breakdown and acceptance, EAGLE-2 vs adaptive depth",
                    "Serving: generated tokens ÷ wall time; speculation: draft tokens proposed ÷ drafting time; "
                    "verification: draft tokens proposed ÷ verification time (the paper's 'Toks/sec'); "
                    "acceptance rate: "
                    "accepted ÷ draft positions; ratios of totals over the cell's prompts. Only cells run with "
                    f"runner.sync_timing or runner.breakdown (device synchronised at each boundary). {common}.",
                    entries, ["block", "method"], ["gpu", "measure"])


def sensitivity(summary: pd.DataFrame, spec: MethodSpec, param: str, col_param: str | None, key: str, title: str,
                caption: str) -> PaperTable:
    """App. C.5 (Tables 10-11): throughput (tokens/s, ratio of totals; seeds pooled as mean) of ``spec``'s cells
    per value of ``param`` (rows) and ``col_param`` (columns; one column where None), in every block where
    ``param`` takes more than one value. Bold: the best in each column (the paper's highlight)."""
    entries = []
    cells = summary[_any(spec, summary)]
    found = [(k, g) for k, g in blocks(cells, ["pair", "dataset", "regime"], laid_out=["gpu"])
             if f"param.{param}" in g and g[f"param.{param}"].nunique() > 1]
    names, common = block_names([k for k, _ in found], ["pair", "dataset", "regime"])
    for k, g in found:
        for gpu, gg in g.groupby("gpu", sort=False):
            cols = sorted(gg[f"param.{col_param}"].dropna().unique()) if col_param else [None]
            for v in sorted(gg[f"param.{param}"].dropna().unique()):
                for cv in cols:
                    m = gg[f"param.{param}"] == v
                    m &= (gg[f"param.{col_param}"] == cv) if col_param else True
                    rows, why = choose(gg[m], f"{param} {v:g}")
                    value = float(rows["tokens_per_s"].mean()) if not why else np.nan
                    col = (str(gpu), f"{col_param} {cv:g}") if col_param else (str(gpu), "tokens/s")
                    entries.append(Entry((names[k], f"{param} {v:g}"), col, value,
                                         f"{value:.4g}" if np.isfinite(value) else f"n/a: {why}",
                                         tuple(rows["cell_id"]), "", True))
    return assemble(key, title, f"{caption} Tokens/s (ratio of totals over the cell's prompts; the mean over seeds); "
                    f"bold: the best in each column. {common}.", entries, ["block", param], ["gpu", "setting"])


def table10(summary: pd.DataFrame) -> PaperTable:
    """Table 10: the online policy's history length (``gamma_policy.acc_history``) × γ_max."""
    return sensitivity(summary, ONLINE, "acc_history", "gamma_max", "adaptive.table10",
                       "Adaptive Table 10: history length × γ_max of the online window (sensitivity)",
                       "The online policy (no draft selection) per acc_history (rows) and gamma_max (columns).")


def table11(summary: pd.DataFrame) -> PaperTable:
    """Table 11: draft selection's feature vector length (``draft_selection.features``)."""
    return sensitivity(summary, SELECTION, "features", None, "adaptive.table11",
                       "Adaptive Table 11: feature vector length of draft selection (sensitivity)",
                       "The selection cell (online policy, draft_selection=ols) per draft_selection.features; its "
                       "fit-phase prompts excluded, as from every figure.")


FIG3_POLICIES = ("online", "fsm", "cache_fsm", "qlearning")


def fig3(summary: pd.DataFrame) -> PaperTable:
    """Fig. 3 (§6, App. C.2): tokens/s and acceptance rate against γ — fixed-γ SD at each γ, every adaptive policy
    at each γ_max (its cap; the online policy's history length at its default) — per block where some policy
    has more than one γ_max (the paper: OPT 13B-125M on the A100)."""
    entries = []
    sd = summary[MethodSpec.parse("sd").mask(summary) & _no_selection(summary)]
    hist = pd.to_numeric(sd.get("param.acc_history", pd.Series(None, index=sd.index)), errors="coerce")
    sd = sd[hist.isna() | (hist == float(_defaults()["acc_history"]))]
    found = [(k, g) for k, g in blocks(sd, ["pair", "dataset", "regime"], laid_out=["gpu"])
             if "param.gamma_max" in g
             and g[g["param.gamma_policy"].isin(FIG3_POLICIES)]["param.gamma_max"].nunique() > 1]
    names, common = block_names([k for k, _ in found], ["pair", "dataset", "regime"])
    for k, g in found:
        for gpu, gg in g.groupby("gpu", sort=False):
            for policy in ("fixed", *FIG3_POLICIES):
                gp = gg[gg["param.gamma_policy"] == policy]
                x = "param.gamma" if policy == "fixed" else "param.gamma_max"
                for v, gv in sorted(gp.groupby(x), key=lambda t: float(t[0])):
                    rows, why = choose(gv, f"{policy} at {v:g}")
                    for col, header in (("tokens_per_s", "tokens/s"), ("acceptance_rate", "acceptance rate")):
                        value = float(rows[col].mean()) if not why else np.nan
                        entries.append(Entry((f"{names[k]} · {gpu}", "SD (fixed γ)" if policy == "fixed" else policy,
                                              f"{v:g}"), (header,), value,
                                             f"{value:.3g}" if np.isfinite(value) else f"n/a: {why}",
                                             tuple(rows["cell_id"]), "", True))
    return assemble("adaptive.fig3", "Adaptive Fig. 3: throughput and acceptance rate against γ (fixed) / γ_max",
                    f"x: γ for fixed-γ SD, γ_max (the cap) for each adaptive policy; tokens/s (ratio of totals) and "
                    f"acceptance rate (accepted ÷ draft positions). The paper's 'upper bound' line (verification "
                    f"skipped) is not a decoder here. {common}.", entries, ["block", "method", "γ or γ_max"],
                    ["measure"])
