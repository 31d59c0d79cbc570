"""The improved-MCSD paper's decision-model figures (short name ``mcsd``: 003 in ``../shared/seeds``, App. A.2).

The decision model (§3.3; ``decision_model`` of ``mcsd_target_init`` — "our framework": target-initialised fork
(W, 1, …, 1) with the dynamic sliced mask and early stop — and of ``mcsd_dynamic``, the lossless draft-initialised
fork) stops a round's drafting when every sequence's predicted acceptance is below β (0.4).

* **Fig. 7**: the paper plots the T1 model's predictions for positive and negative examples and finds them
  overlapping. Here: from the cells run with a decision model, every check's prediction as the rule uses it — the
  largest over the W sequences (``stat.decision_predictions``, recorded per round by the decoder) — against the
  verification's outcome: did the round's accepted path reach the token the check judges (draft level d + the
  model's lookahead; from ``accept_lengths``)? A check whose judged token was never drafted (a T2 check that
  stopped the round) has no outcome and is left out (counted in the notes). Rows: per cell setting, accepted /
  rejected; columns: the share of that outcome's checks per prediction bin, their number, and the share below β
  (where the rule stops); the notes give each setting's AUC (Mann-Whitney) and its premature stops (below β,
  yet accepted). The paper's examples are per token and sequence (its training labels); these are per check
  and round — the decision the rule actually takes.
* **Fig. 8**: α and tokens/s per width W with the decision model off and on, per block where a method has both
  (the paper: MT-Bench, both drafts; here the drafts that have a decision model — the embedded pair's).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from harness.analysis.paper import (LOSSY_MARK, LOSSY_NOTE, Entry, PaperTable, assemble, block_names, blocks, choose,
                                    column_entry, lossy)
from harness.analysis.paper_mcsd import ALPHA_NOTE, _width, unset
from harness.analysis.specs import MethodSpec

FAMILIES = (("our framework", MethodSpec.parse("mcsd_target_init")),
            ("draft-initialised fork", MethodSpec.parse("mcsd_dynamic")))
OFF = "off"
BINS = np.linspace(0.0, 1.0, 11)
BIN_NAMES = tuple(f"{a:.1f}-{b:.1f}" for a, b in zip(BINS[:-1], BINS[1:]))
AUX = ["_family", "_w", "_dm"]


def _decision(v) -> str:
    return OFF if unset(v) else str(v)


def _fork_cells(summary: pd.DataFrame) -> pd.DataFrame:
    """The fork-shaped cells of either family with their width W (``_w``), family (``_family``) and decision
    model (``_dm``: "off" or its name): target-initialised k_config (W, 1, 1, 1, 1, 1), or the fork's num_drafts."""
    parts = []
    for family, spec in FAMILIES:
        c = summary[spec.mask(summary)]
        if c.empty:
            continue
        if spec.method == "mcsd_target_init":
            w = c.get("param.k_config", pd.Series(None, index=c.index)).map(_width)
        else:
            w = pd.to_numeric(c.get("param.num_drafts", pd.Series(None, index=c.index)), errors="coerce")
        c = c[w.notna()]
        dm = c.get("param.decision_model", pd.Series(None, index=c.index, dtype=object)).map(_decision)
        parts.append(c.assign(_family=family, _w=w[w.notna()].astype(int), _dm=dm))
    return pd.concat(parts) if parts else summary.iloc[0:0].assign(_family=[], _w=[], _dm=[])


def _found(s: pd.DataFrame):
    """(block key, rows) per pair × dataset × gpu × regime (and any other varying setting)."""
    return blocks(s.drop(columns=AUX), ["pair", "dataset", "gpu", "regime"])


def fig8(summary: pd.DataFrame) -> PaperTable:
    """Fig. 8 (App. A.2): α (left) and tokens/s (right) per width W, the decision model off and on, for each method
    of a block that was run both ways; one cell per point (:func:`~harness.analysis.paper.choose`)."""
    s = _fork_cells(summary)
    entries, any_lossy, kept = [], False, []
    for key, g in _found(s):
        g = s.loc[g.index]
        both = [f for f, gf in g.groupby("_family", sort=False) if gf["_dm"].eq(OFF).any() and gf["_dm"].ne(OFF).any()]
        if both:
            kept.append((key, g[g["_family"].isin(both)]))
    names, common = block_names([k for k, _ in kept], ["pair", "dataset", "gpu", "regime"])
    for key, g in kept:
        order = sorted(g.groupby(["_family", "_dm"], sort=False), key=lambda t: (t[0][0], t[0][1] != OFF, t[0][1]))
        for (family, dm), gd in order:  # off first
            for w, gw in sorted(gd.groupby("_w"), key=lambda t: t[0]):
                rows, why = choose(gw.drop(columns=AUX), f"{family} W {w} decision model {dm}")
                any_lossy |= lossy(rows)
                row = (names[key], f"{family} · decision model {dm}", f"{w}")
                for col, header in (("acceptance_rate", "α"), ("tokens_per_s", "tokens/s")):
                    entries.append(column_entry(rows, col, row, (header,), True, why=why))
    return assemble("mcsd.fig8", "MCSD Fig. 8: acceptance rate and speed with the decision model off and on" +
                    (LOSSY_MARK if any_lossy else ""), "Per width W (our framework: k_config (W, 1, 1, 1, 1, 1), "
                    "the draft-initialised fork: num_drafts W; depth 5): α (accepted ÷ draft positions) and tokens/s, "
                    "decision model off (fixed depth) and on (early stop at β, §3.3), in every block where a method "
                    f"ran both ways. {common}.", entries, ["block", "method", "W"], ["measure"],
                    notes=[ALPHA_NOTE] + [LOSSY_NOTE] * any_lossy)


def checks(records: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, int, str]:
    """(prediction per check, its outcome 1 accepted / 0 rejected, checks without an outcome, why not) over the
    records' rounds: check d of a round judges draft level d + lookahead, accepted when the round's accepted drafts
    (accept length − 1) reach it; a level beyond the round's depth was never drafted (no outcome)."""
    if records.empty or "stat.decision_predictions" not in records:
        return np.array([]), np.array([]), 0, "decision predictions not recorded (stat.decision_predictions)"
    preds, labels, censored = [], [], 0
    for _, r in records.iterrows():
        rounds, acc, gam = r["stat.decision_predictions"], r.get("accept_lengths"), r.get("round_gammas")
        look = r.get("stat.decision_lookahead")
        if not isinstance(rounds, (list, np.ndarray)) or look is None or pd.isna(look) or acc is None or gam is None \
                or len(rounds) != len(acc) or len(acc) != len(gam):
            return np.array([]), np.array([]), 0, "decision predictions not aligned with the rounds"
        for ps, a, g in zip(rounds, acc, gam):
            for d, p in enumerate(ps, start=1):
                judged = d + int(look)
                if judged > g:
                    censored += 1
                    continue
                preds.append(float(p))
                labels.append(int(a) - 1 >= judged)
    return np.asarray(preds, float), np.asarray(labels, int), censored, ""


def _auc(p: np.ndarray, y: np.ndarray) -> float:
    from scipy.stats import mannwhitneyu

    pos, neg = p[y == 1], p[y == 0]
    if not len(pos) or not len(neg):
        return np.nan
    return float(mannwhitneyu(pos, neg, alternative="two-sided").statistic) / (len(pos) * len(neg))


def _outcome_entries(row, p: np.ndarray, beta: float, sources: tuple) -> list[Entry]:
    n = len(p)
    share = np.histogram(np.clip(p, 0.0, 1.0), BINS)[0] / n if n else np.full(len(BIN_NAMES), np.nan)
    below = float((p < beta).mean()) if n else np.nan
    out = [Entry(row, (b,), float(v), f"{v:.2f}" if n else "n/a: no checks", sources) for b, v in zip(BIN_NAMES, share)]
    return out + [Entry(row, ("checks",), float(n), str(n), sources),
                  Entry(row, ("below β",), below, f"{below:.2f}" if n else "n/a: no checks", sources)]


def fig7(summary: pd.DataFrame, records: pd.DataFrame) -> PaperTable:
    """Fig. 7 (App. A.2): the distribution of the decision model's predictions per outcome (module docstring)."""
    s = _fork_cells(summary)
    s = s[s["_dm"] != OFF]
    entries, notes = [], []
    found = _found(s)
    names, common = block_names([k for k, _ in found], ["pair", "dataset", "gpu", "regime"])
    for key, g in found:
        g = s.loc[g.index]
        for (family, dm, w), gc in g.groupby(["_family", "_dm", "_w"], sort=True):
            rows, why = choose(gc.drop(columns=AUX), f"{family} W {w} decision model {dm}")
            beta = pd.to_numeric(rows.get("param.decision_threshold", pd.Series([0.4])), errors="coerce").dropna()
            beta_v = float(beta.iloc[0]) if len(beta) else 0.4
            label = f"{family} W {w} · {dm} (β {beta_v:g})"
            p, y, censored, reason = checks(records[records["cell_id"].isin(list(rows["cell_id"]))]) if not why \
                else (np.array([]), np.array([]), 0, why)
            src = tuple(rows["cell_id"]) if not why else tuple(gc["cell_id"])
            for outcome, m in (("accepted", y == 1), ("rejected", y == 0)):
                row = (names[key], label, outcome)
                if reason:
                    entries += [Entry(row, (b,), text=f"n/a: {reason}", sources=src) for b in BIN_NAMES]
                else:
                    entries += _outcome_entries(row, p[m], beta_v, src)
            if not reason:
                premature = float(((p < beta_v) & (y == 1)).sum() / max(1, (p < beta_v).sum()))
                auc = _auc(p, y)
                auc_text = f"AUC {auc:.3f}" if np.isfinite(auc) else "AUC n/a (one outcome only)"
                notes.append(f"{names[key]} · {label}: {auc_text} over {len(p)} checks; of the checks below "
                             f"β, {premature:.0%} judged a token the target accepted (premature stops); {censored} "
                             "checks judged a token never drafted (no outcome, left out)")
    return assemble("mcsd.fig7", "MCSD Fig. 7: the decision model's predictions, accepted against rejected",
                    "Per cell with a decision model: each check's prediction as the rule uses it (the largest over "
                    "the W sequences) against whether the round's accepted path reached the token the check judges; "
                    "columns: the share of that outcome's checks per prediction bin, their number, and the share "
                    f"below β (where the rule stops). {common}.", entries, ["block", "setting", "outcome"],
                    ["prediction"], notes=notes)
