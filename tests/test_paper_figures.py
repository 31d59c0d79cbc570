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
        _find(c, "mcsd_target_init", T1, k_config="[16, 1, 1, 1, 1, 1]"), _find(c, "ar_sampling", T1)}
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
    for fig in {"mcsd": ["mcsd_fig3", "mcsd_fig5"], "dsbd": ["dsbd_fig8", "dsbd_fig9", "dsbd_width"],
                "mtad": ["mtad_fig3"], "adaptive": []}[name]:
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
    online = c[(c["method_name"] == "sd") & (c["pair"] == "tiny") & (c["param.gamma_policy"] == "online")]["cell_id"].item()
    t4 = paper_adaptive.table4(s, res.records, **BOOT)
    assert [r[1] for r in t4.text.index] == ["SpecDec++ (threshold 0.3)", "SpecDec++ (threshold 0.6)",
                                             "SpecDec++ (threshold 0.9)", "ours (online)"]
    assert list(t4.text.columns) == [("cpu", "× AR"), ("cpu", "ours ÷ it")]
    spp = c[(c["param.gamma_policy"] == "specdecpp") & (c["param.threshold"] == 0.6)]["cell_id"].item()
    assert _sources(t4, t4.text.index[1], ("cpu", "× AR")) == {spp, ar}
    assert _sources(t4, t4.text.index[1], ("cpu", "ours ÷ it")) == {online, spp}
    assert _sources(t4, t4.text.index[3], ("cpu", "× AR")) == {online, ar}
    t8 = paper_adaptive.table8(s, res.records, **BOOT)
    e2 = c[c["method_name"] == "eagle2"]
    fixed, adaptive_ = (e2[e2["param.gamma_policy"] == p]["cell_id"].item() for p in ("fixed", "online"))
    row = t8.text.index[0]
    assert list(t8.text.columns) == [("cpu", "EAGLE-2 × AR"), ("cpu", "adaptive depth × AR"),
                                     ("cpu", "adaptive ÷ EAGLE-2")]
    assert _sources(t8, row, ("cpu", "EAGLE-2 × AR")) == {fixed, ar}  # AR pairs with EAGLE-2 (issue 32.4)
    assert _sources(t8, row, ("cpu", "adaptive ÷ EAGLE-2")) == {adaptive_, fixed}
    _filled(t4)
    _filled(t8)
