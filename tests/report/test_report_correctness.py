"""Issue 22 items 1-4: the report's silently wrong answers, each on a synthetic results folder written as the
runner writes one. Every test here failed on the main branch before the fix (see the closing note)."""
import math

import numpy as np
import pytest

from harness.report import build_report
from synth_results import GREEDY, SAMPLING, write_cell


def _report(tmp_path, **kw):
    return build_report(tmp_path / "results", tmp_path / "report", n_resamples=100, **kw)


def _overall(out, cell_id):
    r = out["ratios"]
    return r[(r["cell_id"] == cell_id) & (r["category"] == "overall")].iloc[0]


# ---- 1. the quality axis is the task's declared primary metric; flags are never quality ----------------------

def test_quality_axis_is_the_declared_primary_metric_and_flags_are_not_quality(tmp_path):
    res = tmp_path / "results"
    he = {"primary_metric": "pass@1", "primary_metric_higher_is_better": True}
    for cid, secs, passed in (("ar", 1.0, 0.5), ("sd", 0.5, 0.5), ("typ", 0.4, 0.25)):
        write_cell(res, cid, {"ar": "ar_sampling", "sd": "sd", "typ": "typical"}[cid], dataset="humaneval", secs=secs,
                   metrics={"pass@1": passed, "flag_dunder": 1.0 if cid == "typ" else 0.0, "suspicious": 0.0},
                   summary=he)
    cd = {"primary_metric": "rougeL", "primary_metric_higher_is_better": True}
    for cid, secs in (("ar_cd", 1.0), ("sd_cd", 0.5)):
        write_cell(res, cid, cid[:-3].replace("ar", "ar_sampling"), dataset="cnndm", secs=secs, summary=cd,
                   metrics={"rouge1": 0.3, "rouge2": 0.1, "rougeL": 0.2, "rougeLsum": 0.25})
    out = _report(tmp_path)
    names = [p.name for p in out["plots"]]
    assert not any("flag" in n or "suspicious" in n for n in names), names  # never a quality axis
    assert any("pass@1" in n for n in names) and any("rougeL_" in n for n in names)
    assert not any("rouge1" in n or "rouge2" in n for n in names)  # CNN/DM: Rouge-L (mtad Table 6), not ROUGE-1
    from harness.analysis import quality
    assert "metric.flag_dunder" not in quality.quality_columns(out["records"])
    assert "metric.suspicious" not in quality.quality_columns(out["records"])


def test_a_lower_is_better_primary_metric_is_ranked_as_declared(tmp_path):
    res = tmp_path / "results"
    lower = {"primary_metric": "error", "primary_metric_higher_is_better": False}
    for cid, secs, err in (("a", 1.0, 0.1), ("b", 0.5, 0.4)):  # both on the front: b faster, a fewer errors
        write_cell(res, cid, "ar_sampling" if cid == "a" else "sd", secs=secs, metrics={"error": err}, summary=lower)
    write_cell(res, "c", "typical", secs=1.0, metrics={"error": 0.5}, summary=lower)  # dominated: slow, more errors
    out = _report(tmp_path)
    from harness.analysis import pareto
    pts = pareto.front_points(out["summary"], "metric.error", "tokens_per_s").set_index("cell_id")  # direction: declared
    assert pts["on_front"].to_dict() == {"a": True, "b": True, "c": False}


# ---- 2. a baseline matches the whole decoding and every other setting ---------------------------------------

def test_a_baseline_never_pairs_across_warps_or_temperatures(tmp_path):
    res = tmp_path / "results"
    write_cell(res, "ar20", "ar_sampling")  # top-k 20
    write_cell(res, "sd10", "sd", {"gamma": 4}, decoding={**SAMPLING, "top_k": 10}, secs=0.5)
    t07 = {"name": "sampling_t0.7", "temperature": 0.7, "top_k": 0, "top_p": 1.0}
    write_cell(res, "ar07", "ar_sampling", decoding=t07)
    write_cell(res, "sd1", "sd", {"gamma": 5}, decoding={**t07, "name": "sampling_t1", "temperature": 1.0}, secs=0.5)
    write_cell(res, "sd07", "sd", {"gamma": 4}, decoding=t07, secs=0.5)
    out = _report(tmp_path)
    for cid in ("sd10", "sd1"):
        row = _overall(out, cid)
        assert math.isnan(row.get("speedup", math.nan)), cid
        assert "no ar_sampling cell with the same settings" in row["reason"] and "differs in" in row["reason"]
    assert "top_k" in _overall(out, "sd10")["reason"] and "temperature" in _overall(out, "sd1")["reason"]
    good = _overall(out, "sd07")  # the same warp: paired
    assert good["baseline_cell_id"] == "ar07" and good["speedup"] == pytest.approx(2.0)


def test_a_baseline_never_pairs_across_other_settings(tmp_path):
    """(Already right on main for max_new_tokens; kept as a guard now that the whole config is compared.)"""
    res = tmp_path / "results"
    write_cell(res, "ar", "ar_sampling", max_new_tokens=32)
    write_cell(res, "sd", "sd", {"gamma": 4}, max_new_tokens=16, secs=0.5)
    row = _overall(_report(tmp_path), "sd")
    assert math.isnan(row.get("speedup", math.nan)) and "max_new_tokens" in row["reason"]


# ---- 3. baselines and families are method specs with parameters ------------------------------------------------

def test_a_baseline_spec_with_parameters_picks_that_cell_and_an_ambiguous_one_says_so(tmp_path):
    res = tmp_path / "results"
    write_cell(res, "ar", "ar_greedy", decoding=GREEDY)
    write_cell(res, "fixed", "sd", {"gamma": 4, "gamma_policy": "fixed"}, decoding=GREEDY, secs=0.5)
    write_cell(res, "online", "sd", {"gamma": 4, "gamma_policy": "online"}, decoding=GREEDY, secs=0.4)
    out = _report(tmp_path, baselines={"greedy": "sd[gamma=4,gamma_policy=fixed]"})
    online = _overall(out, "online")
    assert online["baseline_cell_id"] == "fixed" and online["speedup"] == pytest.approx(0.5 / 0.4)
    out = _report(tmp_path, baselines={"greedy": "sd"})  # two sd cells: never "the first cell id"
    row = _overall(out, "fixed")
    assert math.isnan(row.get("speedup", math.nan)) and "gamma_policy" in row["reason"]


def test_iso_families_are_specs_and_the_memory_constrained_cells_stay_off_the_front(tmp_path):
    res = tmp_path / "results"
    s000 = {**SAMPLING, "name": "sampling_seed000", "top_k": 10, "top_p": 0.8}
    for i, (width, q, secs) in enumerate(((1, 0.2, 1.0), (2, 0.4, 2.0))):
        write_cell(res, f"beam{width}", "beam_sampling", {"width": width}, decoding=s000, secs=secs,
                   metrics={"exact_match": q}, summary={"primary_metric": "exact_match"})
    for i, (ws, q, secs) in enumerate(((2, 0.25, 0.6), (4, 0.45, 1.2))):
        write_cell(res, f"dsbd{ws}", "dsbd", {"draft_width": ws, "memory_constrained": False}, decoding=s000,
                   secs=secs, metrics={"exact_match": q}, summary={"primary_metric": "exact_match"})
    write_cell(res, "dsbd_mem", "dsbd", {"draft_width": 4, "memory_constrained": True}, decoding=s000, secs=0.1,
               metrics={"exact_match": 0.45}, summary={"primary_metric": "exact_match"})  # would dominate the front
    out = _report(tmp_path)
    iso = out["analysis"].tables["iso_quality"] if "analysis" in out else None
    import pandas as pd
    iso = pd.read_parquet(tmp_path / "report" / "tables" / "iso_quality.parquet") if iso is None else iso
    row = iso[(iso["family_b"] == "beam_sampling") & (iso["cost"] == "tokens_per_s")
              & (iso["quality"] == "metric.exact_match")].iloc[0]
    assert row["n_a"] == 2  # the two unconstrained settings, not the constrained one
    # the unconstrained DSBD front is 1/0.6 vs beam 1/1.0 at q 0.25 ... about 1.67x; with the constrained cell 10x
    assert 1.2 < row["ratio_geo"] < 2.5


def test_a_family_named_in_the_cells_config_is_used(tmp_path):
    res = tmp_path / "results"
    rep = {"baselines": {"greedy": None, "sampling": "sd[gamma=4]"}, "iso": [], "tables": []}
    write_cell(res, "sd4", "sd", {"gamma": 4}, report=rep)
    write_cell(res, "sd8", "sd", {"gamma": 8}, report=rep, secs=0.5)
    write_cell(res, "ar", "ar_sampling", report=rep, secs=2.0)
    out = _report(tmp_path)
    assert _overall(out, "sd8")["baseline_cell_id"] == "sd4" and _overall(out, "sd8")["speedup"] == pytest.approx(2.0)


# ---- 4. what the paper excludes is excluded: draft selection's fit phase --------------------------------------

def test_fit_phase_records_are_excluded_from_every_figure_and_counted(tmp_path):
    res = tmp_path / "results"
    write_cell(res, "ar", "ar_greedy", decoding=GREEDY, pair="tiny_multi")
    # the fit phase runs every draft (slow, 10 s per prompt); the select phase is fast
    write_cell(res, "sel", "sd", {"gamma": 4, "gamma_policy": "online", "draft_selection": "ols"}, decoding=GREEDY,
               pair="tiny_multi", secs=0.5,
               record_extra=lambda i: {"selection.phase": "fit" if i < 4 else "select",
                                       "wall_time_s": 10.0 if i < 4 else 0.5 * (1 + i / 20)})
    out = _report(tmp_path)
    assert not (out["records"].get("selection.phase", np.array([])) == "fit").any()
    row = _overall(out, "sel")
    assert row["n_prompts"] == 8 and row["speedup"] == pytest.approx(2.0, rel=0.05)
    text = out["md"].read_text()
    assert "4 record(s) of 1 cell(s) are excluded from every figure" in text
