"""Issue 32 (left open): adaptive Fig. 5 (the optimal γ of objective 1, checked against
``theory.improvement_factor``) and MCSD Figs. 7-8 (the decision model's predictions against the verification's
outcome, and the decision model on/off), each a golden test: layout, which cells fill which entry, and extra
competing cells that must not mix in."""
from __future__ import annotations

import numpy as np

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
