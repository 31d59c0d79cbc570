"""The fixed-γ oracle in the analysis and the report (issue 11 item 4; seed 004 §3)."""
import math

import pandas as pd
import pytest

from harness.analysis.oracle import comparison_display, oracle_tables

IDENT = {"method_name": "sd", "pair": "tiny", "dataset": "d", "gpu": "cpu", "seed": 0, "decoding": "greedy"}
#: seconds per prompt (2 prompts × 64 tokens) for each γ: prompt 0 is fastest at γ=1, prompt 1 at γ=4
TIMES = {1: (1.0, 4.0), 2: (2.0, 3.0), 4: (3.0, 1.0)}


def _frames(adaptive_times=(1.5, 1.5), extra_param=None):
    cells, records = [], []
    for g, times in TIMES.items():
        cells.append({**IDENT, "cell_id": f"g{g}", "param.gamma": g, "param.gamma_policy": "fixed",
                      "param.top_k": 20})
        records += [{"cell_id": f"g{g}", "index": i, "new_tokens": 64, "wall_time_s": t} for i, t in enumerate(times)]
    cells.append({**IDENT, "cell_id": "online", "param.gamma": 4, "param.gamma_policy": "online", "param.top_k": 20,
                  "param.acc_history": 6})
    records += [{"cell_id": "online", "index": i, "new_tokens": 64, "wall_time_s": t} for i, t in enumerate(adaptive_times)]
    if extra_param:  # a cell with another parameter is not part of the sweep
        cells.append({**IDENT, "cell_id": "other", "param.gamma": 3, "param.gamma_policy": "fixed", "param.top_k": 5})
        records += [{"cell_id": "other", "index": i, "new_tokens": 64, "wall_time_s": 0.1} for i in range(2)]
    return pd.DataFrame(cells), pd.DataFrame(records)


def test_sweep_gives_best_fixed_gamma_and_per_prompt_oracle():
    cells, records = _frames(extra_param=True)
    sweeps, comparisons = oracle_tables(cells, records, n_resamples=200)
    assert len(sweeps) == 1  # the top_k=5 cell is another configuration, alone: no sweep
    s = sweeps.iloc[0]
    assert s.gammas == "1,2,4" and s.prompts == 2
    assert s.best_gamma == 4 and s.best_tokens_per_s == pytest.approx(128 / 4.0)  # 5 s, 5 s, 4 s in total
    assert s.oracle_tokens_per_s == pytest.approx(128 / 2.0)
    assert s.per_prompt_gain == pytest.approx(1.0)
    assert "γ=1: 1" in s.per_prompt_best_gammas and "γ=4: 1" in s.per_prompt_best_gammas
    (c,) = comparisons.to_dict("records")
    assert c["gamma_policy"] == "online"
    assert c["rot vs SD γ=4"] == pytest.approx((128 / 3.0) / (128 / 4.0))
    assert c["rot vs oracle"] == pytest.approx((128 / 3.0) / (128 / 2.0))
    assert c["geo vs oracle"] == pytest.approx(math.sqrt((1.0 / 1.5) * (1.0 / 1.5)))
    assert "÷ oracle (ratio of totals)" in comparison_display(comparisons)


def test_no_sweep_no_tables():
    cells, records = _frames()
    only_one = cells[cells.cell_id.isin(["g1", "online"])]
    sweeps, comparisons = oracle_tables(only_one, records[records.cell_id.isin(["g1", "online"])])
    assert sweeps.empty and comparisons.empty
    sweeps, _ = oracle_tables(pd.DataFrame(), pd.DataFrame())
    assert sweeps.empty


def test_report_has_no_oracle_section_without_a_sweep(tmp_path):
    """The committed fixture has no fixed-γ sweep: the section is left out, and nothing fails."""
    import shutil
    from pathlib import Path

    from harness.report import build_report

    shutil.copytree(Path(__file__).parent.parent / "fixtures" / "results_small", tmp_path / "results")
    out = build_report(tmp_path / "results", tmp_path / "report", n_resamples=50)
    assert "Fixed-γ oracle" not in Path(out["md"]).read_text()
    # details may name files under tmp_path, whose name contains this test's name ("...no_oracle...")
    assert not any("oracle" in str(d).replace(str(tmp_path), "") for d in out["flags"].get("detail", []))
