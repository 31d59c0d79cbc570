"""Issue 32 item 8-9: the papers' tables and figures built beside the first ones (adaptive Tables 4 and 8, MCSD
Figs. 3 and 5, DSBD Figs. 8-9, MTAD Table 6 and Figs. 3 and 5), each a golden test on the twins' synthetic results
(layout, selection, marks); and the report lists every table and figure of a paper, built or with its reason."""
from __future__ import annotations

import pytest

from harness.analysis import paper_adaptive, paper_dsbd, paper_mcsd, paper_mtad, quality
from harness.analysis.load import read_results
from synth_results import compose_twin, write_composed
from test_paper_tables import (BOOT, MAIN, T07, T1, _filled, _find, _sources, adaptive, dsbd, mcsd,  # noqa: F401
                               mtad)


def test_mcsd_figs_3_and_5_speedups(mcsd):
    from harness.analysis import paper_figures

    res, s = mcsd
    c = res.cells
    f3 = paper_mcsd.fig3(s, res.records, **BOOT)
    assert list(f3.text.columns) == ["Baseline SD (γ = 4)", "MCSD (4 × 2 × 2 × 1)", "Our method † (2 × 4 × 3 × 1 × 1)"]
    row = f3.text.index[0]
    assert row[1] == "tiny/draft + tiny/target"
    assert _sources(f3, row, "Baseline SD (γ = 4)") == {_find(c, "sd", T07, gamma=4), _find(c, "ar_sampling", T07)}
    f5 = paper_mcsd.fig5(s, res.records, **BOOT)
    assert _sources(f5, f5.text.index[0], "Our method † (D = 5, W = 16)") == {
        _find(c, "mcsd_target_init", T1, k_config="[16, 1, 1, 1, 1, 1]", decision_model=None),
        _find(c, "ar_sampling", T1)}
    _filled(f3)
    _filled(f5)
    fig = paper_figures.bars(f3, "speed-up over AR", reference=1.0)
    assert fig is not None and len(fig.axes[0].patches) == 3  # one bar per method and pair


def test_dsbd_figs_8_and_9(dsbd):
    from harness.analysis import paper_figures

    res, s = dsbd
    c = res.cells
    f8 = paper_dsbd.sweep_table(s, res.records, "threshold")
    assert sorted({r[1] for r in f8.text.index}) == ["t = 0.7", "t = 0.9"]
    assert list(f8.text.columns) == ["PPL", "tokens/s", "J/token"] and f8.title.endswith("†")
    unconstrained = set(c[(c["method_name"] == "dsbd") & (c["param.memory_constrained"] == False)]["cell_id"])  # noqa: E712
    assert set().union(*(_sources(f8, r, "PPL") for r in f8.text.index)) == unconstrained  # not the §4.3 cells
    f9 = paper_dsbd.sweep_table(s, res.records, "draft_width")
    assert sorted({r[1] for r in f9.text.index}) == ["W_S = 2", "W_S = 4"]
    assert paper_figures.scatter(f9, "tokens/s", "PPL", 1) is not None


def test_mtad_figs_3_and_5(mtad):
    from harness.analysis import paper_figures

    res, s = mtad
    c = res.cells
    f5 = paper_mtad.fig5_table(s)
    assert [r[1] for r in f5.text.index] == ["MS", "speculative", "BiLD †", "Spectr", "SpecInfer", "MTAD †"]
    assert _sources(f5, f5.text.index[5], "tokens/s") == {_find(c, "mtad", MAIN, draft_width=8, tau=0.1)}
    assert any("Pearson r" in n for n in f5.notes)  # n/a here: the synthetic cells measure no energy
    tau = paper_mtad.tau_table(s)
    fig = paper_figures.lines(tau, 1, ["perplexity ↓", "speed (token/s) ↑"], "τ")
    assert fig is not None and len(fig.axes) == 2


# ---- the report: every table and figure of a paper, built or with the reason it is not ---------------------

@pytest.mark.parametrize("name", ["mcsd", "dsbd", "mtad", "adaptive"])
def test_report_lists_every_table_and_figure_and_draws_the_built_ones(tmp_path, name):
    from harness.analysis import paper_registry
    from harness.report import build_report

    results = tmp_path / "results"
    for i, cfg in enumerate(compose_twin(f"{name}_tables_tiny")):
        write_composed(results, cfg, secs=1.0 / (1 + i % 5), prompts=2 if name != "adaptive" else None)
    out = build_report(results, tmp_path / "report", n_resamples=50, tables=[name])
    md = out["md"].read_text()
    reg = paper_registry.registry(name)
    assert set(reg["status"]) <= {"built", "out of scope", "not built yet"} and reg["where / why"].str.len().min() > 10
    for item in reg["table or figure"]:
        assert item in md, item  # listed, built or not
    keys = {p.stem.removeprefix("paper_").replace("_", ".", 1) for p in out["tables"] if p.stem.startswith("paper_")}
    built = " ".join(reg.loc[reg["status"] == "built", "where / why"])
    assert keys and all(k in built for k in keys), (keys, built)  # every table the report makes is registered
    plots = {p.stem for p in out["plots"]}
    for fig in {"mcsd": ["mcsd_fig3", "mcsd_fig4", "mcsd_fig5", "mcsd_fig6", "mcsd_fig7", "mcsd_fig8"],
                "dsbd": ["dsbd_fig8", "dsbd_fig9", "dsbd_width"],
                "mtad": ["mtad_fig3", "mtad_fig4"], "adaptive": ["adaptive_fig3", "adaptive_fig5"]}[name]:
        assert fig in plots, (fig, plots)
    if name == "dsbd":  # Fig. 6: the perplexity front beside the primary metric's (here both are PPL: one)
        assert any(p.startswith("dsbd_front_") for p in plots)


def test_mtad_table6_scores_by_dataset_and_category(tmp_path):
    """Table 6 on Table 4's cells: the primary metric per block, and per category where the dataset has them."""
    from synth_results import SAMPLING, write_cell

    res = tmp_path / "results"
    main = {**SAMPLING, "name": "sampling"}
    score = {"primary_metric": "mt_bench_score", "primary_metric_higher_is_better": True}
    cat = (lambda i: {"meta.category": "writing" if i % 2 else "coding"})
    write_cell(res, "sd", "sd", {"gamma": 4, "gamma_policy": "fixed"}, decoding=main, dataset="mt_bench",
               metrics={"mt_bench_score": lambda i: 5 + i % 2}, summary=score, record_extra=cat)
    write_cell(res, "mtad", "mtad", {"gamma": 4, "draft_width": 8, "tau": 0.1}, decoding=main, dataset="mt_bench",
               metrics={"mt_bench_score": 6.0}, summary={**score, "lossless": False}, record_extra=cat)
    write_cell(res, "mtad2", "mtad", {"gamma": 4, "draft_width": 2, "tau": 0.1}, decoding=main, dataset="mt_bench",
               metrics={"mt_bench_score": 1.0}, summary={**score, "lossless": False}, record_extra=cat)  # Table 7's
    r = read_results(res)
    t6 = paper_mtad.table6(quality.cell_summary(r.records, r.cells, **BOOT), r.records)
    assert list(t6.text.index) == ["speculative", "MTAD †"]
    assert [c[1] for c in t6.text.columns] == ["all", "coding", "writing"]
    assert _sources(t6, "MTAD †", t6.text.columns[0]) == {"mtad"}  # Table 4's setting, not the ablation
    assert t6.text.loc["speculative", t6.text.columns[2]].startswith("6 (n=6)")
    assert any("mt_bench_score" in n for n in t6.notes)



def test_adaptive_tables_4_and_8(adaptive):
    res, s = adaptive
    c = res.cells
    ar = c[(c["method_name"] == "ar_greedy") & (c["pair"] == "tiny")]["cell_id"].item()
    online = c[(c["method_name"] == "sd") & (c["pair"] == "tiny") & (c["param.gamma_policy"] == "online")
               & ~paper_adaptive.swept(c)]["cell_id"].item()  # the default online cell (not Table 10's)
    t4 = paper_adaptive.table4(s, res.records, **BOOT)
    assert [r[1] for r in t4.text.index] == ["SpecDec++ (threshold 0.3)", "SpecDec++ (threshold 0.6)",
                                             "SpecDec++ (threshold 0.9)", "ours (online)"]
    assert list(t4.text.columns) == [("cpu", "× AR"), ("cpu", "ours ÷ it")]
    spp = c[(c["param.gamma_policy"] == "specdecpp") & (c["param.threshold"] == 0.6)]["cell_id"].item()
    assert _sources(t4, t4.text.index[1], ("cpu", "× AR")) == {spp, ar}
    assert _sources(t4, t4.text.index[1], ("cpu", "ours ÷ it")) == {online, spp}
    assert _sources(t4, t4.text.index[3], ("cpu", "× AR")) == {online, ar}
    t8 = paper_adaptive.table8(s, res.records, **BOOT)
    e2 = c[(c["method_name"] == "eagle2") & ~paper_adaptive.synced(c)]  # not Table 9's synchronised cells
    fixed, adaptive_ = (e2[e2["param.gamma_policy"] == p]["cell_id"].item() for p in ("fixed", "online"))
    row = t8.text.index[0]
    assert list(t8.text.columns) == [("cpu", "EAGLE-2 × AR"), ("cpu", "adaptive depth × AR"),
                                     ("cpu", "adaptive ÷ EAGLE-2")]
    assert _sources(t8, row, ("cpu", "EAGLE-2 × AR")) == {fixed, ar}  # AR pairs with EAGLE-2 (issue 32.4)
    assert _sources(t8, row, ("cpu", "adaptive ÷ EAGLE-2")) == {adaptive_, fixed}
    _filled(t4)
    _filled(t8)


def test_adaptive_table9_breakdown_from_synchronised_cells_only(adaptive):
    """Table 9: EAGLE-2 and adaptive depth from the cells run with runner.sync_timing (never Table 8's unsynchronised
    ones), each measure a ratio of totals of the recorded fields; n/a (never a number) where times are missing."""
    res, s = adaptive
    c = res.cells
    e2 = c[c["method_name"] == "eagle2"]
    synced = set(e2[paper_adaptive.synced(e2)]["cell_id"])
    assert len(synced) == 2 and len(e2) == 4  # Table 8's two cells stay out
    bare = paper_adaptive.table9(s, res.records)
    spec = bare.text[("cpu", "speculation (draft tokens/s)")]
    assert all(t.startswith("n/a: draft_time_s not recorded") for t in spec)
    recs = res.records.copy()
    recs["draft_time_s"], recs["verify_time_s"] = recs["wall_time_s"] * 0.25, recs["wall_time_s"] * 0.5
    recs["draft_nodes"], recs["draft_positions"] = 24 + recs["index"], 6  # trees of 24+ nodes, depth 6 in all
    recs["accepted_tokens"] = 3 + recs["index"] % 2
    t9 = paper_adaptive.table9(s, recs)
    assert [r[1] for r in t9.text.index] == ["EAGLE-2", "ours (adaptive depth)"]
    assert [col[1] for col in t9.text.columns] == [h for h, _, _ in paper_adaptive.TABLE9]
    for row, policy in zip(t9.text.index, ("fixed", "online")):
        cid = e2[(e2["param.gamma_policy"] == policy) & e2["cell_id"].isin(synced)]["cell_id"].item()
        assert _sources(t9, row, ("cpu", "serving (tokens/s)")) == {cid}
        r = recs[recs["cell_id"] == cid]
        want = {"serving (tokens/s)": r["new_tokens"].sum() / r["wall_time_s"].sum(),
                "speculation (draft tokens/s)": r["draft_nodes"].sum() / r["draft_time_s"].sum(),
                "verification (draft tokens/s)": r["draft_nodes"].sum() / r["verify_time_s"].sum(),
                "acceptance rate": r["accepted_tokens"].sum() / r["draft_positions"].sum()}
        for header, v in want.items():
            assert t9.values.loc[row, ("cpu", header)] == pytest.approx(v)
    _filled(t9)


def test_adaptive_tables_10_and_11_sensitivity(adaptive):
    """Tables 10-11: tokens/s per history length × γ_max and per feature length, each entry one cell; the other
    tables still take the default online cell (the sweep's cells never compete with it)."""
    res, s = adaptive
    c = res.cells
    online = c[(c["method_name"] == "sd") & (c["param.gamma_policy"] == "online") & (c["pair"] == "tiny")]
    t10 = paper_adaptive.table10(s)
    assert [r[1] for r in t10.text.index] == ["acc_history 3", "acc_history 6"]
    assert list(t10.text.columns) == [("cpu", "gamma_max 4"), ("cpu", "gamma_max 6"), ("cpu", "gamma_max 8")]
    for h, g in ((3, 4), (6, 6)):
        cid = online[(online["param.acc_history"] == h) & (online["param.gamma_max"] == g)]["cell_id"].item()
        row, col = (t10.text.index[0][0], f"acc_history {h}"), ("cpu", f"gamma_max {g}")
        assert _sources(t10, row, col) == {cid}
        assert t10.values.loc[row, col] == pytest.approx(s.loc[s["cell_id"] == cid, "tokens_per_s"].item())
    default = online[(online["param.acc_history"] == 6) & (online["param.gamma_max"] == 8)]["cell_id"].item()
    assert _sources(t10, (t10.text.index[0][0], "acc_history 6"), ("cpu", "gamma_max 8")) == {default}
    assert t10.text.loc[(t10.text.index[0][0], "acc_history 3"), ("cpu", "gamma_max 8")].startswith("n/a: no ")
    sel = c[c["param.draft_selection"] == "ols"]
    t11 = paper_adaptive.table11(s)
    assert [r[1] for r in t11.text.index] == ["features 4", "features 8"]
    for f, row in zip((4, 8), t11.text.index):
        assert _sources(t11, row, ("cpu", "tokens/s")) == {sel[sel["param.features"] == f]["cell_id"].item()}
    _filled(t11)
    t2 = paper_adaptive.table2(s, res.records, **BOOT)  # Table 2's online cell: the default one, not competing
    assert default in _sources(t2, t2.text.index[0], ("cpu", "SPS"))
    _filled(t2)


def test_adaptive_fig3_throughput_and_acceptance_against_gamma(adaptive):
    """Fig. 3: fixed-γ SD per γ and each adaptive policy per γ_max (the online policy's history at its default:
    Table 10's other history lengths stay out), one cell per point, drawn as lines."""
    from harness.analysis import paper_figures

    res, s = adaptive
    c = res.cells
    f3 = paper_adaptive.fig3(s)
    points = {(r[1], r[2]) for r in f3.text.index}
    assert {("SD (fixed γ)", g) for g in ("1", "2", "3", "4", "6", "8")} <= points
    assert {("online", "4"), ("online", "6"), ("online", "8"), ("fsm", "4"), ("fsm", "8"), ("qlearning", "4")} <= points
    assert list(f3.text.columns) == ["tokens/s", "acceptance rate"]
    row = next(r for r in f3.text.index if r[1:] == ("online", "4"))
    sd = c[(c["method_name"] == "sd") & (c["pair"] == "tiny")]
    cid = sd[(sd["param.gamma_policy"] == "online") & (sd["param.gamma_max"] == 4) & (sd["param.acc_history"] == 6)]
    assert _sources(f3, row, "tokens/s") == {cid["cell_id"].item()}  # not Table 10's history-3 cell
    _filled(f3)
    fig = paper_figures.lines(f3, 2, ["tokens/s", "acceptance rate"], "γ")
    assert fig is not None and len(fig.axes) == 2 and len(fig.axes[0].lines) == 5  # fixed + four policies


def test_mtad_fig4_relative_perplexity_and_score(tmp_path):
    """Fig. 4: each method's Table 4 entry over multinomial sampling's in its block (perplexity and the primary
    metric); the Table 7 ablation never stands in for MTAD; n/a where a method has no score."""
    from harness.analysis import paper_figures, paper_mtad_fig4
    from synth_results import SAMPLING, write_cell

    res = tmp_path / "results"
    main = {**SAMPLING, "name": "sampling"}
    score = {"primary_metric": "mt_bench_score", "primary_metric_higher_is_better": True}
    write_cell(res, "ms", "ar_sampling", decoding=main, dataset="mt_bench", ppl=4.0,
               metrics={"mt_bench_score": 5.0}, summary=score)
    write_cell(res, "sd", "sd", {"gamma": 4, "gamma_policy": "fixed"}, decoding=main, dataset="mt_bench", ppl=4.0,
               metrics={"mt_bench_score": 5.0}, summary=score)
    write_cell(res, "mtad", "mtad", {"gamma": 4, "draft_width": 8, "tau": 0.1}, decoding=main, dataset="mt_bench",
               ppl=3.0, metrics={"mt_bench_score": 6.0}, summary={**score, "lossless": False})
    write_cell(res, "mtad2", "mtad", {"gamma": 4, "draft_width": 2, "tau": 0.1}, decoding=main, dataset="mt_bench",
               ppl=9.0, metrics={"mt_bench_score": 1.0}, summary={**score, "lossless": False})  # Table 7's
    write_cell(res, "bild", "bild", {"gamma": 10}, decoding=main, dataset="mt_bench", ppl=5.0, summary=score)
    r = read_results(res)
    f4 = paper_mtad_fig4.fig4_table(quality.cell_summary(r.records, r.cells, **BOOT), r.records)
    assert list(f4.text.columns) == ["relative perplexity", "relative score"]
    rows = {row[1]: row for row in f4.text.index}
    assert f4.values.loc[rows["speculative"], "relative perplexity"] == pytest.approx(1.0)
    assert f4.values.loc[rows["MTAD †"], "relative perplexity"] == pytest.approx(0.75)
    assert f4.values.loc[rows["MTAD †"], "relative score"] == pytest.approx(1.2)
    assert _sources(f4, rows["MTAD †"], "relative score") == {"mtad", "ms"}
    assert f4.text.loc[rows["BiLD †"] if "BiLD †" in rows else rows["BiLD"], "relative score"].startswith("n/a")
    assert paper_figures.scatter(f4, "relative perplexity", "relative score", 1) is not None


def test_mcsd_fig6_width_against_alpha_and_speed(mcsd):
    """Fig. 6: the depth-5 target-initialised tree at T 1 per width W (4, 8 and Tables 3-4's 16), one cell each;
    drawn as two panels (α, tokens/s)."""
    from harness.analysis import paper_figures

    res, s = mcsd
    c = res.cells
    f6 = paper_mcsd.fig6(s)
    assert [r[1] for r in f6.text.index] == ["4", "8", "16"]
    assert list(f6.text.columns) == ["α", "tokens/s"] and "†" in f6.title
    for w, row in zip((4, 8, 16), f6.text.index):
        cid = _find(c, "mcsd_target_init", T1, k_config=f"[{w}, 1, 1, 1, 1, 1]", decision_model=None)
        assert _sources(f6, row, "α") == _sources(f6, row, "tokens/s") == {cid}
    _filled(f6)
    fig = paper_figures.lines(f6, 1, ["α", "tokens/s"], "W")
    assert fig is not None and len(fig.axes) == 2


def test_mcsd_fig4_static_grid_heat_map(mcsd):
    """Fig. 4: tokens/s of (2, a, b, 1, 1) at T 0.7, rows a, columns b, one cell each (Table 2's (2, 4, 3, 1, 1)
    among them; Table 1's n_t 3 and other shapes stay out), drawn as a heat map."""
    from harness.analysis import paper_figures

    res, s = mcsd
    c = res.cells
    f4 = paper_mcsd.fig4(s)
    assert [r[1] for r in f4.text.index] == ["2", "4"] and list(f4.text.columns) == ["2", "3"]
    for a, b in ((2, 2), (2, 3), (4, 2), (4, 3)):
        cid = _find(c, "mcsd_target_init", T07, k_config=f"[2, {a}, {b}, 1, 1]")
        assert _sources(f4, (f4.text.index[0][0], str(a)), str(b)) == {cid}
    _filled(f4)
    assert paper_figures.heatmap(f4, "b", "a") is not None
