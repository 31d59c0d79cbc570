"""Issue 32 (left open): adaptive Fig. 5 (the optimal γ of objective 1, checked against
``theory.improvement_factor``) and MCSD Figs. 7-8 (the decision model's predictions against the verification's
outcome, and the decision model on/off), each a golden test: layout, which cells fill which entry, and extra
competing cells that must not mix in."""
from __future__ import annotations

import numpy as np
import pytest

from harness.analysis import paper_adaptive_figs, paper_figures
from harness.analysis.theory import improvement_factor


# ---- adaptive Fig. 5 -----------------------------------------------------------------------------------------

def _brute(alpha: float, c: float, cap: int) -> int:
    vals = [(1 - alpha ** (g + 1)) / ((1 - alpha) * (g * c + 1)) for g in range(1, cap + 1)]
    return 1 + int(np.argmax(vals))


def test_adaptive_fig5_optimal_gamma_grid_and_drawing():
    """Rows α, columns c; every value the argmax of (1 − α^(γ+1)) / ((1 − α)(γc + 1)) over γ 1..cap (written out
    here, independently of both modules), non-decreasing in α and non-increasing in c; drawn one line per c."""
    t = paper_adaptive_figs.fig5()
    cap = paper_adaptive_figs.GAMMA_CAP
    assert list(t.text.index) == [f"{a:g}" for a in paper_adaptive_figs.ALPHAS]
    assert list(t.text.columns) == [f"c = {c:g}" for c in paper_adaptive_figs.RATIOS]
    for a in paper_adaptive_figs.ALPHAS:
        for c in paper_adaptive_figs.RATIOS:
            g = _brute(a, c, cap)
            assert t.values.loc[f"{a:g}", f"c = {c:g}"] == g
            assert t.text.loc[f"{a:g}", f"c = {c:g}"].endswith(f"({improvement_factor(a, g, c):.2f}×)")
    v = t.values.to_numpy(float)
    assert (np.diff(v, axis=0) >= 0).all() and (np.diff(v, axis=1) <= 0).all()
    assert t.values.loc["0.5", "c = 0.5"] == 1  # a draft half the target's cost at α 0.5: speculate one token
    assert "equals harness.analysis.theory.improvement_factor" in t.notes[0]
    assert not t.bold.to_numpy().any()  # a theory grid has no "best"
    fig = paper_figures.column_lines(t, "α", "optimal γ")
    assert fig is not None and len(fig.axes[0].lines) == len(paper_adaptive_figs.RATIOS)
    np.testing.assert_array_equal(fig.axes[0].lines[0].get_ydata(), v[:, 0])  # drawn from the table's own values


def test_adaptive_fig5_objective_check_is_live(monkeypatch):
    """The check compares objective 1 as the online policy computes it with improvement_factor: an objective
    that drops the verification step (b_p ignored) is reported, never a silent agreement."""
    assert paper_adaptive_figs.check_objective() == []
    monkeypatch.setattr(paper_adaptive_figs, "objective",
                        lambda acc, g, a_q, b_p: (1 - acc ** (g + 1)) / ((1 - acc) * g * a_q))
    bad = paper_adaptive_figs.check_objective(alphas=(0.8,), ratios=(0.1,), cap=8)
    assert bad and "objective 1" in bad[0]
    assert "DISAGREE" in paper_adaptive_figs.fig5(alphas=(0.8,), ratios=(0.1,), cap=8).notes[0]


# ---- MCSD Figs. 7-8 ------------------------------------------------------------------------------------------

from harness.analysis import paper_mcsd, paper_mcsd_figs  # noqa: E402
from test_paper_tables import T1, _find, _is, _sources, _with_extra, mcsd  # noqa: E402,F401

FRAME, FORK = "our framework", "draft-initialised fork"


def test_mcsd_fig8_decision_model_off_and_on_per_width(mcsd):
    """Fig. 8: the target-initialised fork at W 4, 8, 16 with the decision model off (Fig. 6's and Tables 3-4's
    cells) and on (fig78_decision_on), one cell per point; the fork that ran only with it stays out; two panels."""
    res, s = mcsd
    c = res.cells
    f8 = paper_mcsd_figs.fig8(s)
    assert [r[1:] for r in f8.text.index] == [(f"{FRAME} · decision model {dm}", w) for dm in ("off", "t1")
                                              for w in ("4", "8", "16")]
    assert list(f8.text.columns) == ["α", "tokens/s"] and f8.title.endswith("†")
    for row in f8.text.index:
        dm = None if row[1].endswith("off") else "t1"
        cid = _find(c, "mcsd_target_init", T1, k_config=f"[{row[2]}, 1, 1, 1, 1, 1]", decision_model=dm)
        assert _sources(f8, row, "α") == _sources(f8, row, "tokens/s") == {cid}
        assert f8.values.loc[row, "α"] == pytest.approx(s.loc[s["cell_id"] == cid, "acceptance_rate"].item())
    fig = paper_figures.lines(f8, 2, ["α", "tokens/s"], "width W")
    assert fig is not None and len(fig.axes) == 2 and len(fig.axes[0].lines) == 2  # off and on
    np.testing.assert_allclose(fig.axes[0].lines[0].get_ydata(), f8.values["α"].to_numpy()[:3])


def _row(t, label: str, outcome: str):
    return next(r for r in t.text.index if r[1] == label and r[2] == outcome)


def test_mcsd_fig7_predictions_against_the_rounds_outcome(mcsd):
    """Fig. 7 on the synthetic rounds (depth 5, two tokens committed: the first draft accepted; predictions 0.85+
    then 0.45, 0.35, 0.15): accepted checks all in 0.8-0.9, rejected ones a third each in 0.4-0.5, 0.3-0.4,
    0.1-0.2; every cell with a decision model in its own rows, by block (T 1 and greedy apart)."""
    res, s = mcsd
    c = res.cells
    f7 = paper_mcsd_figs.fig7(s, res.records)
    labels = {r[1] for r in f7.text.index}
    assert labels == {f"{FRAME} W {w} · t1 (β 0.4)" for w in (4, 8, 16)} | {f"{FORK} W 16 · t1 (β 0.4)"}
    assert len({r[0] for r in f7.text.index}) == 2  # T 1 and greedy: the fork ran in both, never pooled
    assert list(f7.text.columns) == [*paper_mcsd_figs.BIN_NAMES, "checks", "below β"]
    acc, rej = _row(f7, f"{FRAME} W 8 · t1 (β 0.4)", "accepted"), _row(f7, f"{FRAME} W 8 · t1 (β 0.4)", "rejected")
    assert _sources(f7, acc, "checks") == {_find(c, "mcsd_target_init", T1, k_config="[8, 1, 1, 1, 1, 1]",
                                                 decision_model="t1")}
    prompts = (res.records["cell_id"] == next(iter(_sources(f7, acc, "checks")))).sum()
    assert f7.values.loc[acc, "checks"] == 5 * prompts and f7.values.loc[rej, "checks"] == 15 * prompts
    assert f7.values.loc[acc, "0.8-0.9"] == 1.0 and f7.values.loc[acc, "below β"] == 0.0
    for b in ("0.1-0.2", "0.3-0.4", "0.4-0.5"):
        assert f7.values.loc[rej, b] == pytest.approx(1 / 3)
    assert f7.values.loc[rej, "below β"] == pytest.approx(2 / 3)
    assert any("AUC 1.000" in n and "0% judged a token the target accepted" in n for n in f7.notes)
    fig = paper_figures.histograms(f7, list(paper_mcsd_figs.BIN_NAMES), "prediction")
    assert fig is not None and len(fig.axes) == 4 + 1  # one panel per cell setting, accepted and rejected in each
    assert len(fig.axes[0].patches) == 2 * len(paper_mcsd_figs.BIN_NAMES)


def test_mcsd_fig7_checks_judge_the_lookahead_token_and_skip_undrafted_ones():
    """T2 (lookahead 1) after turn d judges level d + 1: a round that stopped at d has no outcome for its last
    check (never drafted); a round of depth 5 accepting 3 drafts: checks 1-2 accepted, 3-4 rejected; one of depth 2
    accepting both: its first check accepted."""
    import pandas as pd

    recs = pd.DataFrame([{"stat.decision_predictions": [[0.9, 0.8, 0.3, 0.2], [0.7, 0.1]],
                          "stat.decision_lookahead": 1, "accept_lengths": [4, 3], "round_gammas": [5, 2]}])
    p, y, censored, why = paper_mcsd_figs.checks(recs)
    assert not why and censored == 1
    assert list(p) == [0.9, 0.8, 0.3, 0.2, 0.7] and list(y) == [1, 1, 0, 0, 1]
    bad = recs.assign(accept_lengths=[[4]])
    assert paper_mcsd_figs.checks(bad)[3] == "decision predictions not aligned with the rounds"
    assert paper_mcsd_figs.checks(recs.drop(columns="stat.decision_predictions"))[3].startswith("decision predictions "
                                                                                                "not recorded")


def test_mcsd_figs_7_8_never_mix_competing_cells(tmp_path_factory, mcsd):
    """Extra cells: a second β for the W 16 decision cell (competes: n/a naming it in both figures), top-k 20 copies
    of every target-initialised T 1 cell and an a100 copy of W 4 without it (their own blocks, never beside the
    twin's); the decision cells never enter Tables 3-4 or Fig. 6, whose entries stay the twin's."""
    _, s0 = mcsd
    w16 = [16, 1, 1, 1, 1, 1]
    res, s, added = _with_extra(tmp_path_factory, "mcsd_tables_tiny", [
        (_is("mcsd_target_init", 1.0, k_config=w16, decision_model="t1"), {"method.decision_threshold": 0.6}),
        (_is("mcsd_target_init", 1.0), {"decoding.top_k": 20}),
        (_is("mcsd_target_init", 1.0, k_config=[4, 1, 1, 1, 1, 1], decision_model=None),
         {"gpu.name": "a100"})])
    f8_0, f8 = paper_mcsd_figs.fig8(s0), paper_mcsd_figs.fig8(s)
    twin = [r for r in f8.text.index if "top-k 20" not in str(r[0])]
    assert [r[1:] for r in twin] == [r[1:] for r in f8_0.text.index]  # the a100 block has no decision cell: out
    on16 = next(r for r in twin if r[1].endswith("t1") and r[2] == "16")
    assert f8.text.loc[on16, "α"].startswith("n/a: 2 ") and "method.decision_threshold (0.4 vs 0.6)" in \
        f8.text.loc[on16, "α"]
    for r in twin:
        if r != on16:
            assert (f8.sources.loc[r].values == f8_0.sources.loc[f8_0.text.index[twin.index(r)]].values).all()
    topk = [r for r in f8.text.index if "top-k 20" in str(r[0])]
    assert len(topk) == 6 and all(_sources(f8, r, "α") and _sources(f8, r, "α") <= set(added) for r in topk)
    f7 = paper_mcsd_figs.fig7(s, res.records)
    row = next(r for r in f7.text.index if r[1].startswith(f"{FRAME} W 16") and "top-k 20" not in str(r[0]))
    assert f7.text.loc[row, "checks"].startswith("n/a: 2 ") or f7.text.loc[row, "0.0-0.1"].startswith("n/a: 2 ")
    for build in (paper_mcsd.table3, paper_mcsd.table4, paper_mcsd.fig6):
        t0, t = build(s0), build(s)
        for row in t0.text.index:
            match = [r for r in t.text.index if r[1:] == row[1:] and "a100" not in str(r[0])
                     and "top-k 20" not in str(r[0])]
            assert len(match) == 1 and (t.sources.loc[match[0]].values == t0.sources.loc[row].values).all(), row
