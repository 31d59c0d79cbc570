"""MTAD App. C's tables (harness/analysis/paper_mtad_appendix.py): Table 9 (MTJD vs multinomial sampling), Table 10
(Llama-3 methods under lossy / lossless headers) and Table 11 (OPT-30B, Llama-2-70B) — golden tests on the twin's
synthetic cells (layout, which cells fill each entry, marks), the paper's pairs kept to their own tables, and
extra competing cells (another GPU, warp, length, MTJD width, seed, dataset) that never share an entry."""
from __future__ import annotations

from harness.analysis import paper_mtad, paper_mtad_appendix as app, quality
from harness.analysis.load import read_results
from synth_results import write_cell
from test_paper_tables import BOOT, MAIN, _filled, _find, _is, _never_mixed, _sources, _with_extra, mtad  # noqa: F401

TABLE10_COLUMNS = [("lossy methods", "BiLD †"), ("lossy methods", "Typical (Medusa) †"), ("lossless methods", "spec"),
                   ("lossless methods", "spectr"), ("lossless methods", "specinfer"), ("lossless methods", "MCSS"),
                   ("ours", "MTAD †")]
TABLE11_COLUMNS = ["speculative", "BiLD †", "Spectr", "SpecInfer", "MTAD †"]


def test_table9_multinomial_against_mtjd(mtad):
    res, s = mtad
    c = res.cells
    t = app.table9(s, res.records)
    assert list(t.text.columns) == [("tiny", "kjv_heldout")]
    assert list(t.text.index) == [("multinomial", "score"), ("multinomial", "ppl"), ("MTJD †", "score"),
                                  ("MTJD †", "ppl")]
    col = t.text.columns[0]
    assert _sources(t, ("multinomial", "ppl"), col) == {_find(c, "ar_sampling", MAIN)}  # not Table 12's warps
    assert _sources(t, ("MTJD †", "score"), col) == {_find(c, "mtjd", MAIN, gamma=4)}
    assert any(n.startswith("kjv_heldout: score = PPL") for n in t.notes)  # no task metric here: perplexity, said
    assert any(n.startswith("† lossy") for n in t.notes) and (t.paper == "").all().all()  # tiny: not the paper's pair
    _filled(t)


def test_table10_headers_and_its_one_setting(mtad):
    res, s = mtad
    c = res.cells
    t = app.table10(s, res.records)
    assert list(t.text.columns) == TABLE10_COLUMNS
    assert [r[2] for r in t.text.index] == ["tokens/s", "J/token", "PPL"]
    row = t.text.index[0]
    assert _sources(t, row, ("ours", "MTAD †")) == {_find(c, "mtad", MAIN, draft_width=8, tau=0.9)}  # not τ 0.1
    assert _sources(t, row, ("lossy methods", "BiLD †")) == {_find(c, "bild", MAIN)}
    assert _sources(t, row, ("lossless methods", "spectr")) == {_find(c, "spectr", MAIN, num_drafts=2)}
    assert _sources(t, row, ("lossless methods", "MCSS")) == {_find(c, "mcsd", MAIN)}
    assert _sources(t, row, ("lossy methods", "Typical (Medusa) †")) == {_find(c, "typical", MAIN)}
    _filled(t)


def test_table10_headers_follow_the_recorded_lossless_never_the_name(mtad):
    """Typical recorded lossless (as under greedy) moves under "lossless methods" without †; MCSS recorded lossy moves
    under "lossy methods" with †: the headers read each cell's ``lossless``."""
    res, s = mtad
    flipped = s.assign(lossless=[True if m == "typical" else False if m == "mcsd" else v
                                 for m, v in zip(s["method_name"], s["lossless"])])
    cols = list(app.table10(flipped, res.records).text.columns)
    assert ("lossless methods", "Typical (Medusa)") in cols and ("lossy methods", "MCSS †") in cols
    unknown = s.assign(lossless=[None if m == "spectr" else v for m, v in zip(s["method_name"], s["lossless"])])
    assert ("lossless not recorded", "spectr") in list(app.table10(unknown, res.records).text.columns)


def test_table11_per_pair_mean_across_datasets(mtad):
    res, s = mtad
    c = res.cells
    t = app.table11(s)
    assert list(t.text.columns) == TABLE11_COLUMNS
    assert [r[1] for r in t.text.index] == ["speed (token/s) ↑", "energy (J/token) ↓", "perplexity ↓"]
    row = t.text.index[0]
    assert _sources(t, row, "MTAD †") == {_find(c, "mtad", MAIN, draft_width=8, tau=0.1)}  # Table 4's setting for tiny
    assert _sources(t, row, "Spectr") == {_find(c, "spectr", MAIN, num_drafts=2)}
    assert not any("±" in str(x) for x in t.text.to_numpy().ravel())  # one dataset: its entry, no spread
    _filled(t)


def _cell(res, cid, pair, dataset, method, params, secs=1.0, lossless=True, metrics=None):
    em = {"primary_metric": "execution_accuracy", "primary_metric_higher_is_better": True} if metrics else {}
    write_cell(res, cid, method, params, pair=pair, dataset=dataset, secs=secs, metrics=metrics,
               summary={"lossless": lossless, **em})


def test_the_papers_pairs_fill_only_their_own_tables(tmp_path):
    """Llama-3 cells fill Tables 9-10 (the paper's figure beside), OPT-30B's Table 11 (its family's Table 15 column
    per dataset: O,CP BiLD τ1 0.9 τ2 2 and O,CA τ1 0.3 τ2 2; mean ± s.d. across datasets), Llama-2-13B's only §5's
    tables; none appears in another's table."""
    res = tmp_path / "results"
    acc = {"execution_accuracy": 0.5}
    for m, p, lossless in (("ar_sampling", {}, True), ("mtjd", {"gamma": 4, "width": 4}, False)):
        _cell(res, f"{m}_l3", "llama31_8b_32_1b", "spider", m, p, lossless=lossless, metrics=acc)
        _cell(res, f"{m}_l2", "llama2_13b_68m", "spider", m, p, lossless=lossless, metrics=acc)
    _cell(res, "typical_l3", "llama31_8b_32_1b", "spider", "typical", {"gamma": 4}, lossless=False, metrics=acc)
    _cell(res, "mtad_l3", "llama31_8b_32_1b", "spider", "mtad", {"gamma": 4, "draft_width": 8, "tau": 0.9},
          lossless=False, metrics=acc)
    for d, secs in (("chatgpt_prompts", 1.0), ("alpaca", 0.5)):
        _cell(res, f"sd_o30_{d}", "opt_30b_350m", d, "sd", {"gamma": 4, "gamma_policy": "fixed"}, secs=secs)
        for t1, t2 in ((0.9, 2), (0.3, 2)):
            _cell(res, f"bild_o30_{d}_{t1}", "opt_30b_350m", d, "bild", {"gamma": 10, "fallback_threshold": t1,
                                                                          "rollback_threshold": t2}, lossless=False)
    _cell(res, "sd_l2", "llama2_13b_68m", "chatgpt_prompts", "sd", {"gamma": 4, "gamma_policy": "fixed"})
    r = read_results(res)
    s = quality.cell_summary(r.records, r.cells, **BOOT)
    t9 = app.table9(s, r.records)
    assert list(t9.text.columns) == [("llama31_8b_32_1b", "spider")]  # not Llama-2-13B's MTJD
    assert t9.paper.loc[("multinomial", "score"), t9.text.columns[0]] == "22.0 (L40)"
    assert t9.paper.loc[("MTJD †", "ppl"), t9.text.columns[0]] == "1.16 (L40)"
    t10 = app.table10(s, r.records)
    assert {x[1] for x in t10.text.index} == {"llama31_8b_32_1b"}
    row = ("spider", "llama31_8b_32_1b", "execution_accuracy")
    assert t10.paper.loc[row, ("ours", "MTAD †")] == "35.0 (L40)"
    assert _sources(t10, row, ("ours", "MTAD †")) == {"mtad_l3"}
    t11 = app.table11(s)
    assert [x[0] for x in t11.text.index] == ["opt_30b_350m"] * 3
    speed = t11.text.index[0]
    assert _sources(t11, speed, "BiLD †") == {"bild_o30_chatgpt_prompts_0.9", "bild_o30_alpaca_0.3"}  # Table 15's O
    assert "±" in t11.text.loc[speed, "speculative"] and _sources(t11, speed, "speculative") == {
        "sd_o30_chatgpt_prompts", "sd_o30_alpaca"}
    assert t11.paper.loc[speed, "MTAD"] == "19.5±4.11 (GPU not stated)"  # no MTAD cell here: no †, n/a
    assert t11.text.loc[speed, "MTAD"] == "n/a: no MTAD cell"
    t4 = paper_mtad.table4(s)
    assert not any(str(x[0]).startswith(("llama31", "opt_30b")) for x in t4.text.index)
    assert set(filter(None, ",".join(t4.sources.to_numpy().ravel()).split(","))) <= {"sd_l2"}


def test_tables_9_11_never_mix_another_gpu_warp_length_or_mtjd_width(tmp_path_factory, mtad):
    """Extra cells (an a100 MTJD, a T 0.7 Typical, Typical and MTAD τ 0.9 at 64 tokens, an MTJD of width 8, an a100
    Spectr) each form their own block or are refused where they compete (MTJD's width, which Table 9 does not fix),
    naming the difference; nothing turns into a spread, and the twin's entries keep their cells."""
    _, s0 = mtad
    main = {"decoding.top_k": 20, "decoding.top_p": 0.9}
    res, s, added = _with_extra(tmp_path_factory, "mtad_tables_tiny", [
        (_is("mtjd"), {"gpu.name": "a100"}), (_is("typical"), {"decoding.temperature": 0.7, **main}),
        (_is("typical"), {"max_new_tokens": 64}), (_is("mtad", draft_width=8, tau=0.9), {"max_new_tokens": 64, **main}),
        (_is("mtjd"), {"method.width": 8}), (_is("spectr"), {"gpu.name": "a100"})])
    assert len(added) == 6
    r = res.records
    for build in (lambda x: app.table10(x, r), app.table11, paper_mtad.table4):
        _never_mixed(build(s0), build(s), added)
    _never_mixed_by_row(app.table9(s0, r), app.table9(s, r), added)  # Table 9's blocks are its columns
    t9 = app.table9(s, r)
    assert "method.width (4 vs 8)" in t9.text.loc[("MTJD †", "ppl"), ("tiny", "cpu")]  # refused, named
    assert ("tiny", "a100") in t9.text.columns  # the a100 copy: its own column
    t10 = app.table10(s, r)
    long = [x for x in t10.text.index if "max_new_tokens 64" in str(x[0])]  # Typical and MTAD at 64 tokens: a block
    assert _sources(t10, long[0], ("ours", "MTAD †")) < set(added) and "T 0.7" not in " ".join(map(str, t10.text.index))
    assert any("a100" in str(x[0]) for x in app.table11(s).text.index)


def test_seeds_are_repeats_and_datasets_are_averaged_in_table11(tmp_path_factory, mtad):
    """A second seed of Table 4's cells is a repeat of the same setting (mean ± s.d. over seeds within the dataset);
    a second dataset is averaged as the paper does (mean ± s.d. across datasets), each entry one setting."""
    _, s0 = mtad
    table4 = lambda c: c["method"]["name"] in ("sd", "spectr", "specinfer", "bild") or (  # noqa: E731
        c["method"]["name"] == "mtad" and c["method"]["tau"] == 0.1 and c["method"]["draft_width"] == 8)
    main = lambda c: table4(c) and c["decoding"]["top_k"] == 20 and c["decoding"]["top_p"] == 0.9  # noqa: E731
    res, s, added = _with_extra(tmp_path_factory, "mtad_tables_tiny", [(main, {"seed": 1})])
    t = app.table11(s)
    speed = t.text.index[0]
    assert all("±" in t.text.loc[speed, col] and len(_sources(t, speed, col)) == 2 for col in TABLE11_COLUMNS)
    res, s, added = _with_extra(tmp_path_factory, "mtad_tables_tiny", [(main, {"dataset.name": "kjv_copy"})])
    t = app.table11(s)
    assert list(t.text.index) == list(app.table11(s0).text.index)  # one block: the datasets are averaged
    ids = _sources(t, t.text.index[0], "Spectr")
    assert len(ids) == 2 and len(ids & set(added)) == 1 and "±" in t.text.loc[t.text.index[0], "Spectr"]
    assert len(paper_mtad.table4(s).text.index) == 2 * len(paper_mtad.table4(s0).text.index)  # Table 4: per dataset


def _never_mixed_by_row(t0, t, added: list[str]) -> None:
    """:func:`_never_mixed` for a table whose blocks are its columns (their names change when a block is added):
    no extra cell shares an entry, nothing became a spread, and every filled entry of ``t0`` is still in its row,
    from the same cells, or refused there naming the difference."""
    assert not any("±" in str(x) for x in t.text.to_numpy().ravel()), t.text
    for r in t.text.index:
        for col in t.text.columns:
            ids = _sources(t, r, col)
            assert not (ids & set(added) and ids - set(added)), (r, col, ids)
    for r in t0.text.index:
        for col in t0.text.columns:
            ids = _sources(t0, r, col)
            if ids and not str(t0.text.loc[r, col]).startswith("n/a"):
                assert any(_sources(t, r, c) == ids for c in t.text.columns) or any(
                    "settings compete, differing in" in str(x) for x in t.text.loc[r]), (r, col, ids)
