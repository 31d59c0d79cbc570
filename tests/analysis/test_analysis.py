"""Analysis functions on small hand-built tables with known answers."""
import math

import numpy as np
import pandas as pd
import pytest

from harness.analysis import acceptance, checks, paired, pareto, specbench, stats, theory
from harness.analysis.labels import short_labels
from harness.analysis.tables import cell_params, cell_row, infer_decoding, infer_round_gammas, normalize_record


# ---- statistics -------------------------------------------------------------------------------------

def test_percentile_bootstrap_covers_the_true_mean_at_about_the_nominal_rate():
    rng = np.random.default_rng(5)
    trials, covered = 300, 0
    for t in range(trials):
        x = rng.exponential(2.0, size=40)  # skewed, true mean 2
        lo, hi = stats.bootstrap_ci((x,), stats.mean, n_resamples=400, seed=t)
        covered += lo <= 2.0 <= hi
    # nominal 0.95; percentile CIs run a little short at n = 40 (about 0.92 in a 400-trial check)
    assert 0.88 <= covered / trials <= 0.98


def test_paired_ratio_of_totals_and_degenerate_inputs():
    tok = np.full(5, 10.0)
    assert stats.estimate((tok, np.full(5, 0.5), tok, np.full(5, 1.0)), stats.ratio_of_totals) == \
        pytest.approx((2.0, 2.0, 2.0))
    assert all(math.isnan(v) for v in stats.bootstrap_ci((np.array([1.0]),), stats.mean))  # one prompt: no CI


def test_across_seeds_mean_and_sd():
    per_seed = pd.DataFrame({"m": ["a", "a", "a", "b"], "speedup": [1.0, 2.0, 3.0, 5.0]})
    out = stats.across_seeds(per_seed, ["m"], "speedup").set_index("m")
    assert out.loc["a", "speedup_mean"] == 2.0 and out.loc["a", "speedup_sd"] == pytest.approx(1.0)
    assert out.loc["a", "n_seeds"] == 3 and math.isnan(out.loc["b", "speedup_sd"])


# ---- Pareto fronts and iso-quality -------------------------------------------------------------------

def test_pareto_set():
    speed = [1, 2, 3, 2, 4, np.nan]
    quality = [5, 4, 2, 3, 1, 9]  # (2, 3) is dominated by (2, 4); the NaN point is never on the front
    assert pareto.pareto_mask(speed, quality).tolist() == [True, True, True, False, True, False]
    # perplexity: lower is better
    assert pareto.pareto_mask([1, 2, 3], [2.0, 1.0, 3.0], True, False).tolist() == [False, True, True]


def test_iso_quality_ratio_interpolates_fronts_over_their_common_range():
    qa = np.array([1.0, 2.0, 3.0])
    qb = np.array([2.0, 3.5, 5.0])
    front_a = (qa, 2 * (6 - qa))  # A is twice as fast as B at every quality
    front_b = (qb, 6 - qb)
    geo, lo, hi, q_lo, q_hi = pareto.iso_ratio(front_a, front_b, c_higher=True)
    assert (geo, lo, hi) == pytest.approx((2.0, 2.0, 2.0)) and (q_lo, q_hi) == (2.0, 3.0)
    # J/token: lower is better, the advantage is B/A
    geo, *_ = pareto.iso_ratio((qa, 0.5 * (6 - qa)), (qb, 6 - qb), c_higher=False)
    assert geo == pytest.approx(2.0)
    # a ratio that varies along the overlap: A = 10 at every quality, B = q on [1, 3]
    geo, lo, hi, *_ = pareto.iso_ratio((np.array([1.0, 3.0]), np.array([10.0, 10.0])),
                                       (np.array([1.0, 3.0]), np.array([1.0, 3.0])), True, grid=3)
    assert (lo, hi) == pytest.approx((10 / 3, 10.0)) and geo == pytest.approx((10 * 5 * 10 / 3) ** (1 / 3))
    geo, *_, q_lo, q_hi = pareto.iso_ratio((np.array([1.0]), np.array([1.0])), (np.array([2.0]), np.array([1.0])),
                                           True)
    assert math.isnan(geo) and q_lo > q_hi  # no overlap: no ratio


def _records(label, family, speeds, qualities, cell):
    return pd.DataFrame({"cell_id": cell, "label": label, "family": family, "example_id": [f"p{i}" for i in range(4)],
                         "new_tokens": 10.0, "wall_time_s": [10.0 / s for s in speeds], "metric.score": qualities,
                         "energy.j_per_token": [1.0 / s for s in speeds], "output_ppl": 2.0})


def test_iso_quality_on_records_of_two_swept_families():
    fam = {"fast": [(20, 0.2), (10, 0.6)], "slow": [(10, 0.2), (5, 0.6)]}  # (tokens/s, quality) per setting
    recs, cells = [], []
    for family, points in fam.items():
        for j, (speed, q) in enumerate(points):
            cid = f"{family}{j}"
            recs.append(_records(f"{family}({j})", family, [speed] * 4, [q] * 4, cid))
            cells.append({"cell_id": cid, "label": f"{family}({j})", "family": family, "pair": "p", "dataset": "d",
                          "gpu": "g", "decoding": "sampling"})
    out = pareto.iso_quality(pd.concat(recs), pd.DataFrame(cells), [("fast", "slow")], ["metric.score"],
                             n_resamples=50)
    speed = out[out["cost"] == "tokens_per_s"].iloc[0]
    assert speed["ratio_geo"] == pytest.approx(2.0) and (speed["overlap_lo"], speed["overlap_hi"]) == (0.2, 0.6)
    assert speed["ci_lo"] == pytest.approx(2.0) and speed["ci_hi"] == pytest.approx(2.0)
    energy = out[out["cost"] == "j_per_token"].iloc[0]
    assert energy["ratio_geo"] == pytest.approx(2.0) and energy["measure"] == "energy_reduction"


# ---- theory ---------------------------------------------------------------------------------------------

def test_sd_formulas():
    assert theory.expected_tokens_per_round(0.5, 3) == pytest.approx((1 - 0.5 ** 4) / 0.5)
    assert theory.expected_tokens_per_round(1.0, 4) == 5 and theory.expected_tokens_per_round(0.0, 4) == 1
    assert theory.improvement_factor(0.8, 4, 0.05) == pytest.approx((1 - 0.8 ** 5) / (0.2 * 1.2))
    assert theory.improvement_factor(0.8, 4, 0.05, v=2.0) == pytest.approx((1 - 0.8 ** 5) / (0.2 * 2.2))


def _simulate_rounds(alpha, gammas, rng):
    accepted = []
    for g in gammas:
        a = 0
        while a < g and rng.random() < alpha:
            a += 1
        accepted.append(a)
    return np.array(accepted)


def test_alpha_mle_recovers_alpha_and_maximises_the_capped_geometric_likelihood():
    rng = np.random.default_rng(7)
    gammas = rng.choice([2, 4, 6], size=6000)
    a = _simulate_rounds(0.7, gammas, rng)
    alpha = theory.alpha_mle(a, gammas)
    assert alpha == pytest.approx(0.7, abs=0.015)
    ll = theory.log_likelihood(alpha, a, gammas)
    assert all(theory.log_likelihood(alpha + d, a, gammas) < ll for d in (-0.01, -0.001, 0.001, 0.01))
    # the expected tokens per round at α̂ matches the simulated mean
    predicted = np.mean(theory.expected_tokens_per_round(alpha, gammas))
    assert np.mean(a + 1) == pytest.approx(predicted, rel=0.02)
    assert theory.alpha_mle([2, 2], [2, 2]) == 1.0 and math.isnan(theory.alpha_mle([0], [0]))


def _draft_cell(cid, family, lengths, gammas, **extra):
    recs = pd.DataFrame({"cell_id": cid, "label": family, "rounds": [len(x) for x in lengths],
                         "accept_lengths": lengths, "round_gammas": gammas,
                         "new_tokens": [sum(x) for x in lengths], "target_calls": [len(x) for x in lengths],
                         "draft_calls": [sum(g) for g in gammas], "draft_positions": [sum(g) for g in gammas],
                         "draft_nodes": [sum(g) for g in gammas], "wall_time_s": 1.0, **extra})
    cell = {"cell_id": cid, "method": family, "method_name": family, "family": family, "label": family, "pair": "p",
            "dataset": "d", "gpu": "g", "seed": 0, "param.threshold": 0.5}
    return recs, cell


def test_sd_check_flags_a_deviation_and_predicts_the_speedup_from_measured_costs():
    lengths, gammas = [[5, 5, 1, 1]], [[4, 4, 4, 4]]  # bimodal: the i.i.d. model is off
    recs, cell = _draft_cell("c", "sd", lengths, gammas, draft_time_s=1.6, verify_time_s=2.0)
    speed = pd.DataFrame({"cell_id": ["c"], "category": ["overall"], "speedup": [1.5],
                          "baseline_seconds_per_token": [0.5]})
    row = theory.sd_checks(recs, pd.DataFrame([cell]), speed).iloc[0]
    alpha = 8 / (8 + 2)
    assert row["alpha_mle"] == pytest.approx(alpha) and row["tokens_per_round"] == 3.0
    assert row["tokens_per_round_theory"] == pytest.approx(theory.expected_tokens_per_round(alpha, 4))
    assert "tokens/round" in row["flag"]
    c, v = (1.6 / 16) / 0.5, (2.0 / 4) / 0.5
    assert (row["c"], row["v"]) == pytest.approx((c, v))
    assert row["speedup_theory"] == pytest.approx(4 * theory.expected_tokens_per_round(alpha, 4) / (16 * c + 4 * v))
    recs2, cell2 = _draft_cell("c", "sd", lengths, gammas)  # no timing fields: NaN with the reason
    row2 = theory.sd_checks(recs2, pd.DataFrame([cell2]), speed).iloc[0]
    assert math.isnan(row2["speedup_theory"]) and "draft_time_s" in row2["speedup_reason"]


def test_dsbd_theorem_uses_min_of_threshold_and_pass_rate():
    """Issue 22.7: the theorem's prediction uses β̄ from Eq. 2-5 (recorded per prompt), not the realised
    pass rate β̂ (shown beside it); without a recorded β̄ there is no prediction, with the reason."""
    recs, cell = _draft_cell("d", "dsbd", [[4, 4, 2]], [[3, 3, 3]])  # β̂ = 7/8 > t = 0.5
    row = theory.dsbd_checks(recs, pd.DataFrame([cell])).iloc[0]
    assert row["pass_rate_mle"] == pytest.approx(7 / 8) and row["m_realised"] == 0.5
    assert math.isnan(row["steps_theorem"]) and "β̄ not recorded" in row["reason"]
    recs["stat.beta_bar"], recs["stat.beta_layers"] = 0.4, 3  # β̄ = 0.4 < t: m = β̄, not the realised 7/8
    row = theory.dsbd_checks(recs, pd.DataFrame([cell])).iloc[0]
    assert row["beta_bar"] == pytest.approx(0.4) and row["m"] == pytest.approx(0.4)
    assert row["steps_theorem"] == pytest.approx((1 - 0.4 ** 4) / 0.6)
    assert row["steps_with_pass_rate"] == pytest.approx((1 - 0.5 ** 4) / 0.5)
    assert row["steps_measured"] == pytest.approx(10 / 3) and row["flag"].startswith("off by")
    two = pd.concat([recs, recs.assign(**{"stat.beta_bar": 0.8, "stat.beta_layers": 1})], ignore_index=True)
    assert theory.pooled_beta(two) == pytest.approx((0.4 * 3 + 0.8) / 4)  # pooled by layer


# ---- acceptance diagnostics ------------------------------------------------------------------------------

def test_conditional_acceptance_histogram_and_pooled_vs_per_request():
    recs, _ = _draft_cell("a", "sd", [[1, 3, 3], [2]], [[2, 2, 2], [2]], accepted_tokens=[4, 1])
    recs["draft_positions"] = [6, 2]
    cond = acceptance.conditional_acceptance(recs).set_index("position")
    # accepted counts a = [0, 2, 2, 1]: position 1 reached 4×, accepted 3×; position 2 reached 3×, accepted 2×
    assert (cond.loc[1, "reached"], cond.loc[1, "accepted"]) == (4, 3)
    assert (cond.loc[2, "reached"], cond.loc[2, "accepted"]) == (3, 2)
    assert cond.loc[1, "rate_lo"] < 0.75 < cond.loc[1, "rate_hi"]
    hist = acceptance.accept_length_histogram(recs).set_index("accept_length")
    assert hist["rounds"].to_dict() == {1: 1, 2: 1, 3: 2} and hist["fraction"].sum() == pytest.approx(1)
    pr = acceptance.per_request_vs_pooled(recs).iloc[0]
    assert pr["mat_pooled"] == pytest.approx(9 / 4) and pr["mat_per_request"] == pytest.approx((7 / 3 + 2) / 2)
    assert pr["acceptance_pooled"] == pytest.approx(5 / 8)
    assert pr["acceptance_per_request"] == pytest.approx((4 / 6 + 1 / 2) / 2)


# ---- paired ratios and baselines ----------------------------------------------------------------------

def _cells_and_records():
    cells = pd.DataFrame([
        {"cell_id": "ar", "method": "ar_sampling", "method_name": "ar_sampling", "label": "ar_sampling",
         "decoding": "sampling", "pair": "p", "dataset": "d", "gpu": "g", "seed": 0, "max_new_tokens": 8},
        {"cell_id": "sd", "method": "sd", "method_name": "sd", "label": "sd", "decoding": "sampling", "pair": "p",
         "dataset": "d", "gpu": "g", "seed": 0, "max_new_tokens": 8},
        {"cell_id": "gr", "method": "beam_search", "method_name": "beam_search", "label": "beam_search",
         "decoding": "greedy", "pair": "p", "dataset": "d", "gpu": "g", "seed": 0, "max_new_tokens": 8}])
    rows = []
    for cid, secs, jpt in (("ar", 1.0, 2.0), ("sd", 0.5, 1.0), ("gr", 2.0, 4.0)):
        for i in range(6):
            rows.append({"cell_id": cid, "example_id": f"q{i}", "index": i, "meta.category": "ab"[i % 2],
                         "new_tokens": 10, "wall_time_s": secs * (1 + i / 10), "energy.j_per_token": jpt})
    return cells, pd.DataFrame(rows)


def test_paired_ratios_per_category_and_missing_baseline():
    cells, records = _cells_and_records()
    out = paired.paired_ratios(records, cells, n_resamples=200)
    sd = out[(out.cell_id == "sd")].set_index("category")
    assert set(sd.index) == {"overall", "a", "b"}
    assert sd.loc["overall", ["speedup", "speedup_lo", "speedup_hi", "speedup_geo"]].tolist() == pytest.approx([2] * 4)
    assert sd.loc["overall", "energy_ratio"] == pytest.approx(0.5) and sd.loc["a", "n_prompts"] == 3
    greedy = out[out.cell_id == "gr"].iloc[0]  # greedy cell, no ar_greedy cell: NaN with the reason
    assert math.isnan(greedy.get("speedup", math.nan)) and "no ar_greedy cell" in greedy["reason"]
    # a configured baseline (issue 22.3: a spec; of the same decoding — issue 22.2: never across decodings)
    out = paired.paired_ratios(records, cells, {"sampling": "sd"}, n_resamples=100)
    assert out[(out.cell_id == "ar") & (out.category == "overall")]["speedup"].iloc[0] == pytest.approx(0.5)
    out = paired.paired_ratios(records, cells, {"greedy": "ar_sampling"}, n_resamples=100)
    gr = out[(out.cell_id == "gr") & (out.category == "overall")].iloc[0]
    assert math.isnan(gr.get("speedup", math.nan)) and "differs in regime" in gr["reason"]


def test_baseline_prefers_the_same_warp_and_skips_other_seeds():
    cells, _ = _cells_and_records()
    cells["param.temperature"] = 1.0
    other = cells.iloc[[0]].assign(cell_id="ar_hot", **{"param.temperature": 0.7})
    seed1 = cells.iloc[[0]].assign(cell_id="ar_s1", seed=1)
    m = paired.match_baselines(pd.concat([other, cells, seed1], ignore_index=True)).set_index("cell_id")
    assert m.loc["sd", "baseline_cell_id"] == "ar"


# ---- summaries of any age ------------------------------------------------------------------------------

def test_old_summary_params_drop_facts_and_decoding_is_inferred():
    old = {"decoder_params": {"method": "hf_assisted", "gamma": 4, "temperature": 1.0, "transformers_version": "5",
                              "hf_default_schedule": {"num_assistant_tokens": 20}}}
    assert cell_params(old) == {"gamma": 4, "temperature": 1.0}
    assert cell_params({"params": {"gamma": 2}, "decoder_params": {"gamma": 9}}) == {"gamma": 2}
    assert infer_decoding("sd", {"temperature": 0.0}) == "greedy"
    assert infer_decoding("sd", {"temperature": 0.7}) == "sampling"
    assert infer_decoding("beam_search", {"width": 4}) == "greedy"
    assert infer_decoding("mtjd", {"sample": False, "temperature": 1.0}) == "greedy"
    assert infer_decoding("sd", {"temperature": 0.0}, declared="sampling") == "sampling"
    row = cell_row({"method_name": "sd", "params": {"gamma": 4, "k_config": [4, 2]}, "seed": 1,
                    "config": {"pair": {"name": "tiny"}, "dataset": {"name": "d"}, "gpu": {"name": "cpu"}}})
    assert (row["pair"], row["dataset"], row["gpu"], row["seed"], row["interleaved"]) == ("tiny", "d", "cpu", 1, False)
    assert row["method"] == "sd(gamma=4, k_config=(4,2))" and row["param.k_config"] == "[4, 2]"


def test_short_labels_name_only_varying_parameters():
    cells = pd.DataFrame({"method_name": ["beam", "beam", "sd"], "param.width": [2.0, 4.0, math.nan],
                          "param.top_k": [10, 10, 20],
                          "params_json": ['{"width": 2, "top_k": 10}', '{"width": 4, "top_k": 10}', '{"top_k": 20}']})
    assert short_labels(cells).tolist() == ["beam W=2", "beam W=4", "sd"]  # issue 22.10: `sd γ=4` style, no warp


def test_round_depths_of_old_records_are_reconstructed_only_when_consistent():
    assert infer_round_gammas([1, 3, 4, 4, 4], 4, 16, min_depth=1) == [4, 4, 4, 4, 3]
    cell = {"cell_id": "c", "max_new_tokens": 16}
    old = {"iterations": 5, "drafted_tokens": 19, "accepted_tokens": 11, "accept_lengths": [1, 3, 4, 4, 4],
           "stat.rejected_rounds": 2}
    r = normalize_record(old, cell, {"gamma": 4})
    assert (r["rounds"], r["draft_nodes"], r["draft_positions"], r["rejected_rounds"]) == (5, 19, 19, 2)
    assert r["round_gammas"] == [4, 4, 4, 4, 3] and r["round_gammas_source"] == "inferred"
    bild = {"iterations": 3, "drafted_tokens": 2, "accepted_tokens": 1, "accept_lengths": [2, 1, 1],
            "stat.rejected_rounds": 3}  # BiLD drafts fewer tokens than its γ: depths unknown
    r = normalize_record(bild, cell, {"gamma": 10})
    assert r["round_gammas"] is None and math.isnan(r["draft_positions"])


# ---- measurement quality and Spec-Bench ------------------------------------------------------------------

def test_measurement_flags_name_each_problem():
    cells = pd.DataFrame([{"cell_id": "a", "pair": "p", "dataset": "d", "gpu": "g", "method": "m", "seed": 0,
                           "tokens_per_s": 100.0, "energy.j_per_token": math.nan, "energy.reason": "off",
                           "env.device_type": "cpu", "interleaved": False},
                          {"cell_id": "b", "pair": "p", "dataset": "d", "gpu": "g", "method": "m", "seed": 1,
                           "tokens_per_s": 150.0, "energy.j_per_token": 1.0, "energy.coverage": 0.2,
                           "env.device_type": "cuda", "interleaved": True}])
    problems = pd.DataFrame([{"cell_id": "x", "problem": "unreadable", "kind": "JSONDecodeError", "error": "torn",
                              "at": None}])
    flags = checks.measurement_flags(cells, pd.DataFrame({"cell_id": []}), problems)
    kinds = flags.groupby("kind")["cell_id"].apply(sorted).to_dict()
    assert kinds["unreadable cell"] == ["x"] and kinds["energy not measured"] == ["a"]
    assert kinds["low energy coverage"] == ["b"] and kinds["CPU only"] == ["a"] and kinds["not interleaved"] == ["a"]
    assert kinds["high run-to-run variance"] == ["a", "b"]
    grouped = checks.grouped_flags(flags)
    assert grouped["severity"].iloc[0] == "error"


def test_specbench_answer_lines():
    cell = pd.Series({"cell_id": "c", "method": "sd(gamma=4)", "dataset": "kjv", "finished_at": "2026-01-01T00:00:00+00:00"})
    rec = pd.Series({"cell_id": "c", "index": 3, "example_id": "81", "new_tokens": 6, "wall_time_s": 0.5, "rounds": 2,
                     "accept_lengths": [4, 2], "target_calls": 2, "output_text": " hi", "meta.category": "writing"})
    line = specbench.answer(rec, cell)
    assert line["question_id"] == 81 and line["category"] == "writing" and line["model_id"] == "sd(gamma=4)"
    ch = line["choices"][0]
    assert ch == {"index": 0, "turns": [" hi"], "decoding_steps": [2], "new_tokens": [6], "wall_time": [0.5],
                  "accept_lengths": [4, 2]}
    ar_rec = rec.drop("meta.category")
    ar_rec["rounds"], ar_rec["accept_lengths"], ar_rec["target_calls"] = 0, [], 6
    ar = specbench.answer(ar_rec, cell)
    assert ar["category"] == "kjv" and ar["choices"][0]["accept_lengths"] == [1] * 6
    assert ar["choices"][0]["decoding_steps"] == [6]
