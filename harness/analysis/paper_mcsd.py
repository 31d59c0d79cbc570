"""The improved-MCSD paper's tables (short name ``mcsd``: 003 in ``../shared/seeds``).

α is the acceptance rate as this harness defines it (accepted ÷ draft positions, pooled over rounds; README
metrics), the paper's per-position acceptance. "Our method" is the target-initialised tree
(``mcsd_target_init``): (2,4,3,1,1) in Table 2 (static), and D = 5, W = 16 — sixteen target-initialised roots
each followed by a chain of five, k_config (16,1,1,1,1,1) — in Tables 3 and 4 (§4.1: "all settings follow
the optimal MCSD static configuration", i.e. target-initialised).

* **Table 1**: MT-Bench score of the target-initialised tree with n_t = 2 and 3 roots, per draft, at T 0.7, and
  its change from AR at the same temperature (the paper's judge is GPT-4; ours is the task's primary metric).
* **Table 2** (T 0.7: SD γ 4, MCSD 4×2×2×1, ours 2×4×3×1×1) and its α ordering SD < MCSD < ours as a table;
  **Table 3** (T 1: SD γ 5, MCSD 4×2×2×1×1, ours D 5 W 16); **Table 4** (ours at T 0 and 1, per draft).
"""
from __future__ import annotations

import json

import numpy as np
import pandas as pd

from harness.analysis import paper_values as pv
from harness.analysis.paper import (Entry, PaperTable, assemble, block_names, blocks, choose, column_entry, paired,
                                    times, contextualise, lossy, mark, same_group, LOSSY_MARK, LOSSY_NOTE)
from harness.analysis.quality import primary
from harness.analysis.specs import MethodSpec

T2 = (("Baseline SD", "γ = 4", "sd[gamma=4,gamma_policy=fixed]"),
      ("MCSD", "4 × 2 × 2 × 1", "mcsd[k_config=[4,2,2,1]]"),
      ("Our method", "2 × 4 × 3 × 1 × 1", "mcsd_target_init[k_config=[2,4,3,1,1]]"))
T3 = (("Baseline SD", "γ = 5", "sd[gamma=5,gamma_policy=fixed]"),
      ("MCSD", "4 × 2 × 2 × 1 × 1", "mcsd[k_config=[4,2,2,1,1]]"),
      ("Our method", "D = 5, W = 16", "mcsd_target_init[k_config=[16,1,1,1,1,1]]"))
OURS_DYNAMIC = MethodSpec.parse(T3[2][2])
PAPER_KEY = {"Baseline SD": "SD", "MCSD": "MCSD", "Our method": "ours"}


ALPHA_NOTE = ("α of the target-initialised tree is a best-of-n_t statistic: each round keeps the root whose path "
              "the target accepts longest, so α near 1 (bold) does not mean the draft matches the target — it is "
              "bought with a biased output distribution (§3.1); its output quality stands beside it.")
#: mcsd_target_init's root rule under greedy decoding: the target's argmax (one root, exact) or the paper's
#: top-n_t tokens (several roots, lossy: :mod:`harness.decoders.mcsd_target_init`)
GREEDY_ROOTS = "greedy_roots"


def fixed_depth(summary: pd.DataFrame) -> pd.DataFrame:
    """The cells that draft to their full depth: no early-stop decision model (``decision_model`` null). Tables 1-4
    and Figs. 3-6 are the static and the D 5 W 16 settings; the decision model's cells are Figs. 7-8's own
    (:mod:`harness.analysis.paper_mcsd_figs`) and never compete with them."""
    col = summary.get("param.decision_model", pd.Series(None, index=summary.index, dtype=object))
    return summary[col.map(unset)]


def unset(v) -> bool:
    """A parameter left null, however a summary holds it (None, NaN, "null")."""
    return v is None or (isinstance(v, float) and v != v) or str(v) in ("", "null", "None")


def _temperature(regime: str) -> float | None:
    if regime == "greedy":
        return 0.0
    for part in str(regime).split(" · "):
        if part.startswith("T "):
            return float(part[2:])
    return None


def _plain(regime: str) -> bool:
    """The paper's warp: the temperature alone (no top-k, no top-p)."""
    return regime == "greedy" or str(regime).endswith("top-k off · top-p off")


def _names(cells: pd.DataFrame) -> tuple[pd.Series, pd.Series]:
    """Target and draft names per cell: the paper's where the pair is one of its pairs, else the model ids."""
    target, draft = [], []
    for _, c in cells.iterrows():
        names = pv.paper_pair("mcsd", c["pair"])
        target.append(names[0] if names else str(c.get("pair_target") or c["pair"]))
        draft.append(names[1] if names else str(c.get("pair_draft") or c["pair"]))
    return pd.Series(target, index=cells.index, dtype=object), pd.Series(draft, index=cells.index, dtype=object)


def _with_names(s: pd.DataFrame) -> pd.DataFrame:
    target, draft = _names(s)
    return s.assign(target=target, draft=draft)


def _quality_entry(rows, prim, row, col, why) -> Entry:
    return column_entry(rows, prim.column, row, col, None, why=why)


def _alpha_table(summary: pd.DataFrame, roles, temperature: float, key: str, title: str, paper: dict,
                 records: pd.DataFrame | None = None, quality: bool = False) -> PaperTable:
    summary = fixed_depth(summary)
    s = _with_names(summary[summary["regime"].map(_temperature) == temperature])
    entries, notes, any_lossy = [], [], False
    found = blocks(s, ["dataset", "gpu", "regime", "draft"], laid_out=["pair"])
    names, common = block_names([k for k, _ in found], ["dataset", "gpu", "regime", "draft"])
    for bkey, g in found:
        prim = primary(g, records)
        if quality:
            notes.append(f"{names[bkey]}: quality = {prim.name}" + (f" ({prim.note})" if prim.note else ""))
        for role, config, spec_text in roles:
            spec = MethodSpec.parse(spec_text)
            for tgt, gt in g.groupby("target", sort=False):
                rows, why = choose(gt[spec.mask(gt)], role)
                any_lossy |= lossy(rows)
                vals = paper.get(pv.paper_dataset("mcsd", bkey[0]), {}).get(PAPER_KEY[role])
                col = ("Llama 2-7B Chat", "Vicuna-7B").index(tgt) if tgt in ("Llama 2-7B Chat", "Vicuna-7B") else None
                comparable = vals and col is not None and bkey[3] == "Llama-68M" and _plain(bkey[2])
                row = (names[bkey], mark(role, rows), config)
                column = (tgt, "α") if quality else (tgt,)
                entries.append(column_entry(rows, "acceptance_rate", row, column, True,
                                            f"{vals[col]} (RTX 4090)" if comparable else "", why=why))
                if quality:
                    entries.append(_quality_entry(rows, prim, row, (tgt, prim.name), why))
    notes += [ALPHA_NOTE] * quality + [LOSSY_NOTE] * any_lossy
    return assemble(key, title, f"α: accepted ÷ draft positions, pooled over rounds [95 % bootstrap CI over prompts]; "
                    f"temperature {temperature:g}; columns: target models. {common}. Bold: best per column in each "
                    "block.", entries, ["block", "method", "configuration"], ["target", "measure"] if quality else
                    ["target"], notes=notes)


def table2(summary: pd.DataFrame) -> PaperTable:
    return _alpha_table(summary, T2, 0.7, "mcsd.table2", "MCSD Table 2: acceptance rate α at temperature 0.7 (static "
                        "configurations)", pv.MCSD_TABLE2)


def table3(summary: pd.DataFrame, records: pd.DataFrame | None = None) -> PaperTable:
    return _alpha_table(summary, T3, 1.0, "mcsd.table3", "MCSD Table 3: acceptance rate α at temperature 1 (D = 5), "
                        "with the output quality beside it", pv.MCSD_TABLE3, records, quality=True)


def ordering_table(t2: PaperTable) -> PaperTable:
    """Table 2's α ordering: per block and target, whether SD < MCSD < ours holds (the paper: in every entry)."""
    entries = []
    if t2.empty:
        return assemble("mcsd.ordering", "MCSD Table 2: α ordering", "", [], ["dataset"], ["target"])
    for block in t2.text.index.get_level_values(0).unique():
        sub = t2.text.loc[block]
        for tgt in t2.text.columns:
            found = [(r, sub.loc[r, tgt]) for role, config, _ in T2 for r in sub.index if r[0].removesuffix(
                LOSSY_MARK) == role and r[1] == config]
            vals = [_value(t) for _, t in found]
            srcs = [x for r, _ in found for x in str(t2.sources.loc[(block, *r), tgt]).split(",") if x]
            if len(vals) != 3 or any(not np.isfinite(v) for v in vals):
                text = "n/a (an α is missing)"
            else:
                holds = vals[0] < vals[1] < vals[2]
                text = ("yes: " if holds else "no: ") + " < ".join(f"{v:.3g}" for v in vals)
            paper = "yes (RTX 4090)" if tgt in ("Llama 2-7B Chat", "Vicuna-7B") else ""
            entries.append(Entry((block,), (tgt,), np.nan, text, tuple(srcs), paper))
    return assemble("mcsd.ordering", "MCSD Table 2: does α order SD < MCSD < our method?",
                    "Point estimates of Table 2 (SD γ 4, MCSD 4×2×2×1, ours 2×4×3×1×1; T 0.7). The paper: yes in every "
                    "entry.", entries, ["block"], ["target"])


def _value(text: str) -> float:
    try:
        return float(str(text).split(" ")[0])
    except ValueError:
        return np.nan


def _temp_row(cells: pd.DataFrame) -> str:
    """Table 4's row: the temperature (the paper's warp), else the whole regime; under greedy, the root rule."""
    regime = str(cells["regime"].iloc[0])
    text = f"{_temperature(regime):g}" if _plain(regime) else regime
    roots = cells.get(f"param.{GREEDY_ROOTS}", pd.Series(dtype=object)).dropna()
    if regime == "greedy":
        top = len(roots) and str(roots.iloc[0]) == "top_nt"
        text += " (target's top-n_t roots, the paper's)" if top else " (one root: the target's argmax)"
    return text


def table4(summary: pd.DataFrame, records: pd.DataFrame | None = None) -> PaperTable:
    """Table 4: α of our method (D 5, W 16) at T 0 and 1 (under greedy: one row per root rule), per dataset,
    gpu, draft and target, with the output quality beside it."""
    summary = fixed_depth(summary)
    s = _with_names(summary[OURS_DYNAMIC.mask(summary)])
    found = blocks(s, ["dataset", "gpu", "draft"], laid_out=["pair", "regime"])
    names, common = block_names([k for k, _ in found], ["dataset", "gpu", "draft"])
    entries, notes, any_lossy = [], [], False
    for bkey, g in found:
        prim = primary(summary[summary["dataset"] == bkey[0]], records)
        notes.append(f"{names[bkey]}: quality = {prim.name}" + (f" ({prim.note})" if prim.note else ""))
        by_row = g.groupby(["regime", g.get(f"param.{GREEDY_ROOTS}", pd.Series("", index=g.index)).fillna("")],
                           sort=False)
        for (regime, _), gr in sorted(by_row, key=lambda x: (_temperature(x[0][0]) or 0, str(x[0][1]))):
            temp = _temperature(regime)
            for tgt, gt in gr.groupby("target", sort=False):
                rows, why = choose(gt, "our method")
                any_lossy |= lossy(rows)
                row = (names[bkey], mark(_temp_row(gt), rows))
                vals = pv.MCSD_TABLE4.get((pv.paper_dataset("mcsd", bkey[0]), bkey[2], int(temp or 0)))
                col = ("Llama 2-7B Chat", "Vicuna-7B").index(tgt) if tgt in ("Llama 2-7B Chat", "Vicuna-7B") else None
                comparable = vals and col is not None and _plain(regime) and (
                    temp != 0 or str(gt.get(f"param.{GREEDY_ROOTS}", pd.Series(["top_nt"])).iloc[0]) == "top_nt")
                entries.append(column_entry(rows, "acceptance_rate", row, (tgt, "α"), None,
                                            f"{vals[col]} (RTX 4090)" if comparable else "", why=why))
                entries.append(_quality_entry(rows, prim, row, (tgt, prim.name), why))
    notes += [ALPHA_NOTE, "T 0: with the target's argmax as the only root, the tree is one chain and the output is "
              "greedy (lossless); the paper's T 0 figures need several roots — the target's top-n_t tokens "
              "(mcsd_target_init greedy_roots=top_nt, lossy †: a non-argmax root may win)."] + [LOSSY_NOTE] * any_lossy
    return assemble("mcsd.table4",
                    "MCSD Table 4: acceptance rates of our method (D = 5, W = 16) at temperature 0 and 1",
                    f"Our method: mcsd_target_init k_config (16,1,1,1,1,1). {common}.", entries,
                    ["block", "temperature"], ["target", "measure"], notes=notes)


def table1(summary: pd.DataFrame, records: pd.DataFrame) -> PaperTable:
    """Table 1: quality of the target-initialised tree with n_t = 2, 3 roots at T 0.7, and its change from AR."""
    s = _with_names(fixed_depth(summary[summary["regime"].map(_temperature) == 0.7]))
    ti = s[MethodSpec.parse("mcsd_target_init").mask(s)]
    ti = ti.assign(n_t=ti["param.k_config"].map(lambda k: json.loads(k)[0] if isinstance(k, str) else None))
    ti = ti[ti["param.k_config"].map(lambda k: isinstance(k, str) and json.loads(k)[1:] == [4, 3, 1, 1])]
    s = contextualise(s, ["dataset", "gpu", "regime", "target"], laid_out=["pair"])
    ti = s.loc[ti.index].assign(n_t=ti["n_t"])
    entries, notes, any_lossy = [], [], False
    found = blocks(ti, ["dataset", "gpu", "regime", "target"])
    names, common = block_names([k for k, _ in found], ["dataset", "gpu", "regime", "target"])
    for bkey, g in found:
        prim = primary(s[s["dataset"] == bkey[0]], records)
        notes.append(f"{names[bkey]}: quality = {prim.name}" + (f" ({prim.note})" if prim.note else ""))
        for (n_t, dr), gn in sorted(g.groupby(["n_t", "draft"], sort=False), key=lambda x: x[0]):
            rows, why = choose(gn, f"n_t={n_t}")
            any_lossy |= lossy(rows)
            ar = same_group(s, gn.iloc[0])
            ar = ar[MethodSpec.parse("ar_sampling").mask(ar)]
            e = column_entry(rows, prim.column, (names[bkey], int(n_t)), (dr,), prim.higher_is_better, why=why)
            if not why and not ar.empty and np.isfinite(e.value):
                e.text += f" ({e.value - ar[prim.column].mean():+.3g} vs AR)"
                e.sources += tuple(ar["cell_id"])
            vals = pv.MCSD_TABLE1.get(int(n_t), {}).get(dr) if pv.paper_dataset("mcsd", bkey[0]) == "MT-Bench" and \
                bkey[3] == "Llama 2-7B Chat" and _plain(bkey[2]) else None
            e.paper = f"{vals} (RTX 4090)" if vals else ""
            entries.append(e)
    return assemble("mcsd.table1", "MCSD Table 1: quality of target-initialised multi-candidate selection (T 0.7)" +
                    LOSSY_MARK * any_lossy, "Rows: target-initialised width n_t (k_config (n_t,4,3,1,1)); columns: "
                    "drafts; in brackets the change from AR sampling in the same comparison group (the paper: AR "
                    f"Llama-2-7B scores 6.29). {common}.", entries, ["block", "n_t"], ["draft"],
                    notes=notes + [LOSSY_NOTE] * any_lossy)


AR_SAMPLING, AR_GREEDY = MethodSpec.parse("ar_sampling"), MethodSpec.parse("ar_greedy")
FORK = MethodSpec.parse("mcsd_dynamic")


def _speedups(summary: pd.DataFrame, records: pd.DataFrame, roles, temperature: float, key: str, title: str,
              **boot) -> PaperTable:
    """Speed-ups over AR (vanilla decoding in the same comparison group: same pair, dataset, prompts, warp), paired
    by prompt, per dataset and pair (the paper's "draft + target" bars), one column per method."""
    s = _with_names(fixed_depth(summary[summary["regime"].map(_temperature) == temperature]))
    entries, any_lossy = [], False
    found = blocks(s, ["dataset", "pair", "gpu", "regime"])
    names, common = block_names([k for k, _ in found], ["dataset", "pair", "gpu", "regime"])
    for bkey, g in found:
        ar, why_ar = choose(g[(AR_GREEDY if temperature == 0 else AR_SAMPLING).mask(g)], "AR")
        label = f"{g['draft'].iloc[0]} + {g['target'].iloc[0]}"
        for role, config, spec_text in roles:
            rows, why = choose(g[MethodSpec.parse(spec_text).mask(g)], role)
            any_lossy |= lossy(rows)
            v, lo, hi, n, src = paired(records, rows, ar, **boot)
            text = times(v, lo, hi) if np.isfinite(v) else f"n/a: {why or why_ar or 'no common prompts'}"
            entries.append(Entry((names[bkey], label), (f"{mark(role, rows)} ({config})",), v, text, src, "", True))
    return assemble(key, title, "Throughput over AR decoding at the same temperature (vanilla inference), ratio of "
                    f"totals [95 % bootstrap CI over prompts], paired by prompt. {common}.", entries,
                    ["block", "draft + target"], ["method"], notes=[LOSSY_NOTE] * any_lossy)


def fig3(summary: pd.DataFrame, records: pd.DataFrame, **boot) -> PaperTable:
    """Fig. 3: speed-ups over AR at T 0.7 with the static configurations of Table 2."""
    return _speedups(summary, records, T2, 0.7, "mcsd.fig3", "MCSD Fig. 3: speed-ups over AR at temperature 0.7 "
                     "(static configurations)", **boot)


def fig5(summary: pd.DataFrame, records: pd.DataFrame, **boot) -> PaperTable:
    """Fig. 5: speed-ups over AR at T 1 with the dynamic setting of Table 3 (D 5, W 16)."""
    return _speedups(summary, records, T3, 1.0, "mcsd.fig5", "MCSD Fig. 5: speed-ups over AR at temperature 1 "
                     "(dynamic setting, D = 5, W = 16)", **boot)


def fig6(summary: pd.DataFrame) -> PaperTable:
    """Fig. 6 (App. A.1.1): the target-initialised tree at T 1, depth 5 (k_config [W, 1, 1, 1, 1, 1]), per width W:
    acceptance rate α and tokens/s, per block where more than one W was run."""
    s = fixed_depth(summary[(summary["regime"].map(_temperature) == 1.0) &
                            MethodSpec.parse("mcsd_target_init").mask(summary)])
    width = s.get("param.k_config", pd.Series(None, index=s.index)).map(_width)
    s = s[width.notna()].assign(_w=width[width.notna()])
    entries, any_lossy = [], False
    found = [(k, g) for k, g in blocks(s.drop(columns="_w"), ["pair", "dataset", "gpu", "regime"])
             if s.loc[g.index, "_w"].nunique() > 1]
    names, common = block_names([k for k, _ in found], ["pair", "dataset", "gpu", "regime"])
    for key, g in found:
        for w, gw in sorted(g.groupby(s.loc[g.index, "_w"]), key=lambda t: t[0]):
            rows, why = choose(gw, f"W = {w}")
            any_lossy |= lossy(rows)
            for col, header in (("acceptance_rate", "α"), ("tokens_per_s", "tokens/s")):
                entries.append(column_entry(rows, col, (names[key], f"{w}"), (header,), True, why=why))
    return assemble("mcsd.fig6", "MCSD Fig. 6: width W against acceptance rate and speed (D = 5, T 1)" +
                    (f" {LOSSY_MARK}" if any_lossy else ""), f"Our method with k_config [W, 1, 1, 1, 1, 1] (W "
                    f"target-initialised roots, depth 5) at each W. {common}.", entries, ["block", "W"], ["measure"],
                    notes=[ALPHA_NOTE] + [LOSSY_NOTE] * any_lossy)


def _width(k) -> int | None:
    """W of a depth-5 target-initialised configuration [W, 1, 1, 1, 1, 1]; None for any other shape."""
    import json

    ks = json.loads(k) if isinstance(k, str) else k
    ok = isinstance(ks, (list, tuple)) and len(ks) == 6 and all(int(x) == 1 for x in ks[1:])
    return int(ks[0]) if ok else None


def fig4(summary: pd.DataFrame) -> PaperTable:
    """Fig. 4 (App. A): the static grid search — tokens/s of the target-initialised tree at T 0.7 with k_config
    (2, a, b, 1, 1) (n_t 2, as §4 fixes it), rows a, columns b, per block where more than one configuration ran
    (the paper finds (2, 4, 3, 1, 1) fastest on MT-Bench)."""
    import json

    s = fixed_depth(summary[(summary["regime"].map(_temperature) == 0.7) &
                            MethodSpec.parse("mcsd_target_init").mask(summary)])
    ks = s.get("param.k_config", pd.Series(None, index=s.index))
    ks = ks.map(lambda k: json.loads(k) if isinstance(k, str) else None)
    grid = ks.map(lambda k: isinstance(k, list) and len(k) == 5 and k[0] == 2 and k[3:] == [1, 1])
    s, ks = s[grid], ks[grid]
    entries, any_lossy = [], False
    found = [(k, g) for k, g in blocks(s, ["pair", "dataset", "gpu", "regime"]) if len(g) > 1]
    names, common = block_names([k for k, _ in found], ["pair", "dataset", "gpu", "regime"])
    for key, g in found:
        for (a, b), gab in sorted(g.groupby([ks[g.index].map(lambda k: k[1]), ks[g.index].map(lambda k: k[2])]),
                                  key=lambda t: t[0]):
            rows, why = choose(gab, f"(2, {a}, {b}, 1, 1)")
            any_lossy |= lossy(rows)
            entries.append(column_entry(rows, "tokens_per_s", (names[key], f"{a}"), (f"{b}",), True, why=why))
    return assemble("mcsd.fig4", "MCSD Fig. 4: tokens/s across static configurations (2, a, b, 1, 1), T 0.7" +
                    (f" {LOSSY_MARK}" if any_lossy else ""), "Rows: a, the draft's children per target-initialised "
                    f"root; columns: b, per second-level node (k_config (2, a, b, 1, 1)). {common}.", entries,
                    ["block", "a"], ["b"], best="col", notes=[LOSSY_NOTE] * any_lossy)
