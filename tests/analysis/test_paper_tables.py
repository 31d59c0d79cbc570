"""Issue 22.9: a golden test per paper table. Each ``_tiny`` twin's cells are composed as its sweep composes
them and written as finished cells (synthetic timings: nothing runs); the papers' tables must then have the
papers' rows and columns, and every entry must be filled by the cells the paper's table names — so each
twin holds every baseline its tables need. Timing values are not checked."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from harness.analysis import paper_adaptive, paper_dsbd, paper_mcsd, paper_mtad, quality
from harness.analysis.load import read_results
from harness.analysis.oracle import oracle_tables
from synth_results import compose_twin, write_composed

BOOT = {"n_resamples": 100}


def _build(tmp_path_factory, name: str, speed=None):
    results = tmp_path_factory.mktemp(name) / "results"
    for i, cfg in enumerate(compose_twin(name)):
        write_composed(results, cfg, secs=speed(cfg) if speed else 1.0 / (1 + i % 5))
    res = read_results(results)
    return res, quality.cell_summary(res.records, res.cells, **BOOT)


def _find(cells: pd.DataFrame, method: str, regime: str | None = None, **params) -> str:
    """The one cell id of a method with these parameters (compared as text) and decoding regime."""
    m = cells["method_name"] == method
    if regime is not None:
        m &= cells["regime"] == regime
    for k, v in params.items():
        m &= cells[f"param.{k}"].map(_text) == _text(v)
    ids = cells.loc[m, "cell_id"].tolist()
    assert len(ids) == 1, (method, regime, params, ids)
    return ids[0]


def _text(x) -> str:
    if x is None or (isinstance(x, float) and x != x):
        return "None"  # an unset parameter, however the summary holds it
    if isinstance(x, list):
        return json.dumps(x)
    if isinstance(x, float) and x.is_integer():
        return str(int(x))
    return str(x)


def _sources(table, row, col) -> set:
    return set(filter(None, str(table.sources.loc[row, col]).split(",")))


def _filled(table) -> None:
    """No entry is n/a for want of a cell (the twin holds every cell its tables need)."""
    bad = [(r, c, t) for r, row in table.text.iterrows() for c, t in row.items() if str(t).startswith("n/a: no ")]
    assert not bad, bad


# ---- dsbd ----------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def dsbd(tmp_path_factory):
    return _build(tmp_path_factory, "dsbd_tables_tiny")


def test_dsbd_table1_rows_columns_and_cells(dsbd):
    res, s = dsbd
    c = res.cells
    t = paper_dsbd.table1(s)
    block = "tiny"
    assert list(t.text.columns) == ["PPL", "tokens/s", "J/token"]  # kjv_heldout: no EM/EA, quality is PPL
    assert [r[1] for r in t.text.index][:3] == ["Multinomial", "SpecDecode", "SpecInfer"]
    dsbd_row = t.text.index[3]
    assert dsbd_row[1].startswith("DSBD † (dsbd") and "mem" in dsbd_row[1] and dsbd_row[1].count("†") == 1
    assert _sources(t, (block, "Multinomial"), "PPL") == {_find(c, "ar_sampling")}
    assert _sources(t, (block, "SpecDecode"), "tokens/s") == {_find(c, "sd")}
    assert _sources(t, (block, "SpecInfer"), "J/token") == {_find(c, "specinfer")}
    constrained = set(c[(c["method_name"] == "dsbd") & (c["param.memory_constrained"] == True)]["cell_id"])  # noqa: E712
    assert len(constrained) == 2 and _sources(t, dsbd_row, "PPL") < constrained
    assert any("the papers do not say which setting" in n for n in t.notes)
    _filled(t)


def test_dsbd_mtbench_table_and_front_grid(dsbd):
    res, s = dsbd
    c = res.cells
    t = paper_dsbd.mtbench_table(s)
    assert [r[1] for r in t.text.index] == ["SpecInfer", "Beam (W=5) †", "DSBD †"]
    assert list(t.text.columns) == ["Score", "Token/s", "J/token"]
    assert _sources(t, ("tiny", "Beam (W=5) †"), "Score") == {_find(c, "beam_sampling", width=5)}
    grid = paper_dsbd.grid_cells(s)
    assert set(grid[grid["grid_role"] == "beam sampling"]["cell_id"]) == {_find(c, "beam_sampling", width=w)
                                                                           for w in (1, 2)}
    assert not grid["cell_id"].isin(c[c["param.memory_constrained"] == True]["cell_id"]).any()  # noqa: E712
    assert (grid["grid_role"] == "DSBD").sum() == 4
    width, points = paper_dsbd.width_table(s, res.records)
    assert len(width.text) == 6 and list(width.text.columns) == ["W̄", "PPL", "tokens/s", "J/token"]


# ---- mtad ----------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def mtad(tmp_path_factory):
    return _build(tmp_path_factory, "mtad_tables_tiny")


MAIN = "T 1 · top-k 20 · top-p 0.9"


def test_mtad_tables_3_4_5(mtad):
    res, s = mtad
    c = res.cells
    t3 = paper_mtad.table3(s)
    assert list(t3.text.columns) == [("tiny", "MS"), ("tiny", "SPEC")]
    assert [r[1] for r in t3.text.index] == ["TOKENS/S", "J/TOKEN"]  # as the paper prints them
    row = t3.text.index[0]
    assert _sources(t3, row, ("tiny", "MS")) == {_find(c, "ar_sampling", MAIN)}  # not Table 12's warps
    t4 = paper_mtad.table4(s)
    assert list(t4.text.columns) == ["speculative", "BiLD †", "Spectr", "SpecInfer", "MTAD †"]  # lossy: †
    assert [r[1] for r in t4.text.index] == ["speed (token/s) ↑", "energy (J/token) ↓", "perplexity ↓"]
    row = t4.text.index[0]
    assert _sources(t4, row, "MTAD †") == {_find(c, "mtad", MAIN, draft_width=8, tau=0.1)}  # not the ablations'
    assert _sources(t4, row, "speculative") == {_find(c, "sd", MAIN)}
    assert _sources(t4, row, "Spectr") == {_find(c, "spectr", MAIN, num_drafts=2)}
    _filled(t4)
    t5 = paper_mtad.table5(s)
    assert list(t5.text.index) == ["speculative", "BiLD †", "Spectr", "SpecInfer", "MTAD †"]
    assert _sources(t5, "BiLD †", t5.text.columns[0]) == {_find(c, "bild")}
    assert any(n.startswith("† lossy") for n in t4.notes + t5.notes)


def test_mtad_ablations(mtad):
    res, s = mtad
    c = res.cells
    t7 = paper_mtad.beams_table(s)
    assert list(t7.text.columns) == ["2", "4", "6", "8"]
    assert {_sources(t7, t7.text.index[0], w).pop() for w in ("2", "4", "6", "8")} == \
        {_find(c, "mtad", MAIN, draft_width=w, tau=0.1) for w in (2, 4, 6, 8)}
    t3 = paper_mtad.tau_table(s)
    assert [r[1] for r in t3.text.index] == ["0", "0.1", "0.5", "0.9", "1"]
    t12 = paper_mtad.topk_topp_table(s)
    assert sorted(r[1:] for r in t12.text.index) == sorted([("20", "0.9"), ("20", "0.8"), ("10", "0.9"), ("10", "0.8")])
    assert set(t12.text.columns.get_level_values(0)) == {"AR (the paper's 'Greedy')", "Speculative", "MTAD (MJSD) †"}
    assert t7.title.endswith("†")
    row = [r for r in t12.text.index if r[1:] == ("10", "0.8")][0]
    assert _sources(t12, row, ("Speculative", "tokens/s")) == {_find(c, "sd", "T 1 · top-k 10 · top-p 0.8")}
    _filled(t12)


# ---- mcsd ----------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def mcsd(tmp_path_factory):
    return _build(tmp_path_factory, "mcsd_tables_tiny")


T07, T1 = "T 0.7 · top-k off · top-p off", "T 1 · top-k off · top-p off"


def test_mcsd_tables_2_3_and_ordering(mcsd):
    res, s = mcsd
    c = res.cells
    t2 = paper_mcsd.table2(s)
    assert [r[1:] for r in t2.text.index] == [("Baseline SD", "γ = 4"), ("MCSD", "4 × 2 × 2 × 1"),
                                               ("Our method †", "2 × 4 × 3 × 1 × 1")]  # n_t 2: lossy
    assert list(t2.text.columns) == ["tiny/target"]
    rows = list(t2.text.index)
    assert _sources(t2, rows[0], "tiny/target") == {_find(c, "sd", T07, gamma=4)}
    assert _sources(t2, rows[2], "tiny/target") == {_find(c, "mcsd_target_init", T07, k_config="[2, 4, 3, 1, 1]")}
    t3 = paper_mcsd.table3(s)
    rows = list(t3.text.index)
    assert rows[2][1:] == ("Our method †", "D = 5, W = 16") and rows[1][1] == "MCSD"  # MCSD is lossless
    ours = _find(c, "mcsd_target_init", T1, k_config="[16, 1, 1, 1, 1, 1]", decision_model=None)
    assert list(t3.text.columns) == [("tiny/target", "α"), ("tiny/target", "PPL")]  # quality beside α
    assert _sources(t3, rows[2], ("tiny/target", "α")) == _sources(t3, rows[2], ("tiny/target", "PPL")) == {ours}
    assert _sources(t3, rows[1], ("tiny/target", "α")) == {_find(c, "mcsd", T1, k_config="[4, 2, 2, 1, 1]")}
    assert any("best-of-n_t" in n for n in t3.notes) and any(n.startswith("† lossy") for n in t3.notes)
    order = paper_mcsd.ordering_table(t2)
    assert order.text.shape == (1, 1) and len(_sources(order, order.text.index[0], "tiny/target")) == 3
    _filled(t2)
    _filled(t3)


def test_mcsd_tables_1_and_4(mcsd):
    res, s = mcsd
    c = res.cells
    t4 = paper_mcsd.table4(s)
    assert [r[1] for r in t4.text.index] == ["0 (one root: the target's argmax)",  # exact
                                             "0 (target's top-n_t roots, the paper's) †", "1 †"]  # lossy
    zero = t4.text.index[0]
    top = _find(c, "mcsd_target_init", "greedy", greedy_roots="top_nt")
    assert _sources(t4, t4.text.index[1], ("tiny/target", "α")) == {top}
    assert any("top_nt" in n for n in t4.notes)
    assert list(t4.text.columns) == [("tiny/target", "α"), ("tiny/target", "PPL")]
    assert _sources(t4, zero, ("tiny/target", "α")) == {_find(c, "mcsd_target_init", "greedy", greedy_roots=float("nan"))}
    t1 = paper_mcsd.table1(s, res.records)
    assert [r[1] for r in t1.text.index] == [2, 3] and list(t1.text.columns) == ["tiny/draft"]
    assert t1.title.endswith("†")
    ar = _find(c, "ar_sampling", T07)
    assert _sources(t1, t1.text.index[1], "tiny/draft") == {_find(c, "mcsd_target_init", T07,
                                                                  k_config="[3, 4, 3, 1, 1]"), ar}


# ---- adaptive ------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def adaptive(tmp_path_factory):
    return _build(tmp_path_factory, "adaptive_tables_tiny")


def test_adaptive_tables_2_3_and_policies(adaptive):
    res, s = adaptive
    c = res.cells
    online = c[(c["method_name"] == "sd") & (c["pair"] == "tiny") & (c["param.gamma_policy"] == "online")
               & ~paper_adaptive.swept(c)]["cell_id"].item()  # the default online cell (not Table 10's)
    fixed = c[(c["method_name"] == "sd") & (c["pair"] == "tiny") & (c["param.gamma_policy"] == "fixed")
              & (c["param.gamma"] == 4)]["cell_id"].item()
    ar = c[(c["method_name"] == "ar_greedy") & (c["pair"] == "tiny")]["cell_id"].item()
    sel = c[(c["param.draft_selection"] == "ols") & ~paper_adaptive.swept(c)]["cell_id"].item()  # not Table 11's
    t2 = paper_adaptive.table2(s, res.records, **BOOT)
    assert list(t2.text.columns) == [("cpu", "SPS"), ("cpu", "ARS")]
    row = t2.text.index[0]
    assert _sources(t2, row, ("cpu", "SPS")) == {online, fixed} and _sources(t2, row, ("cpu", "ARS")) == {online, ar}
    t3 = paper_adaptive.table3(s, res.records, res.excluded, **BOOT)
    assert [r for r in t3.text.index] == ["tiny_multi (w/o draft selection)", "tiny_multi (w/ draft selection)"]
    col = t3.text.columns[0]
    sd4 = c[(c["method_name"] == "sd") & (c["pair"] == "tiny_draft4")]
    online4 = sd4[sd4["param.gamma_policy"] == "online"]["cell_id"].item()
    fixed4 = sd4[sd4["param.gamma_policy"] == "fixed"]["cell_id"].item()
    without = _sources(t3, "tiny_multi (w/o draft selection)", col)
    assert without in ({online, fixed}, {online4, fixed4})  # the better single draft's SPS (the paper's w/o)
    sps = {d: paper_adaptive.paired(paper_adaptive._same_prompts(res.records, sel), c[c["cell_id"] == o],
                                    c[c["cell_id"] == f], **BOOT)[0] for d, o, f in (("draft", online, fixed),
                                                                                    ("draft4", online4, fixed4))}
    assert without == ({online, fixed} if sps["draft"] >= sps["draft4"] else {online4, fixed4})
    assert _sources(t3, "tiny_multi (w/ draft selection)", col) == {sel, fixed}
    for row in t3.text.index:  # 6 prompts − 2 fit-phase ones, in both rows
        assert "(n=4" in t3.text.loc[row, col], t3.text.loc[row, col]
    pol = paper_adaptive.policy_table(s, res.records, **BOOT)
    assert [r[1] for r in pol.text.index if "draft4" not in r[0]] == list(paper_adaptive.POLICIES)
    _filled(t2)
    sweeps, comparisons = oracle_tables(res.cells, res.records, **BOOT)
    assert len(sweeps) == 1 and sweeps["gammas"].iloc[0] == "1,2,3,4,6,8"
    assert set(comparisons["gamma_policy"]) >= {"online", "fsm", "cache_fsm", "qlearning", "hf_heuristic"}


# ---- the paper's own figure beside ours, where the row is the paper's ---------------------------------------

def test_the_papers_figures_stand_beside_comparable_rows(tmp_path):
    from synth_results import SAMPLING, write_cell

    res = tmp_path / "results"
    s000 = {**SAMPLING, "name": "sampling_seed000", "top_k": 10, "top_p": 0.8}
    em = {"primary_metric": "exact_match", "primary_metric_higher_is_better": True}
    for cid, method, params in (("ms", "ar_sampling", {}), ("sd", "sd", {"gamma": 4}),
                                ("si", "specinfer", {"gamma": 4, "num_drafts": 2}),
                                ("ds", "dsbd", {"gamma": 2, "draft_width": 4, "memory_constrained": True})):
        for pair in ("llama2_13b_68m", "tiny"):
            write_cell(res, f"{cid}_{pair}", method, params, decoding=s000, pair=pair, dataset="squad",
                       metrics={"exact_match": 0.8}, summary=em)
    r = read_results(res)
    t = paper_dsbd.table1(quality.cell_summary(r.records, r.cells, **BOOT))
    llama = [i for i in t.text.index if i[0].startswith("llama2_13b_68m")]
    assert t.paper.loc[llama[0], "EM/EA"] == "74 (L40)" and t.paper.loc[llama[1], "tokens/s"] == "27.11 (L40)"
    tiny = [i for i in t.text.index if i[0].startswith("tiny")]
    assert (t.paper.loc[tiny] == "").all().all()  # not the paper's pair: nothing beside it


# ---- issue 32: extra cells that compete for an entry never fill it silently ---------------------------------

def _set(cfg: dict, dotted: str, value) -> None:
    *parents, last = dotted.split(".")
    node = cfg
    for p in parents:
        node = node[p]
    node[last] = value


def _with_extra(tmp_path_factory, name: str, extras):
    """The twin's cells plus ``extras``: (pick(cfg) -> bool, {dotted key: value}) — a copy of each picked cell
    with the changes (another warp, gpu, method parameter, ...), written as a finished cell."""
    import copy

    results = tmp_path_factory.mktemp(name + "_extra") / "results"
    cfgs = compose_twin(name)
    for i, cfg in enumerate(cfgs):
        write_composed(results, cfg, secs=1.0 / (1 + i % 5))
    added = []
    for pick, changes in extras:
        for cfg in [c for c in cfgs if pick(c)]:
            new = copy.deepcopy(cfg)
            for k, v in changes.items():
                _set(new, k, v)
            added.append(write_composed(results, new, secs=0.01))
    res = read_results(results)
    return res, quality.cell_summary(res.records, res.cells, **BOOT), added


def _is(method: str, temperature: float | None = None, **params):
    def pick(cfg):
        ok = cfg["method"]["name"] == method and all(json.dumps(cfg["method"].get(k)) == json.dumps(v)
                                                     for k, v in params.items())
        return ok and (temperature is None or cfg["decoding"]["temperature"] == temperature)
    return pick


def test_mcsd_tables_never_mix_another_warp_or_gpu(tmp_path_factory, mcsd):
    """One extra top-k 20 cell at T 0.7 and one a100 copy of "ours" turned entries into "0.7 ± 0.35" (issue 32.1):
    every entry stays the paper's cell, and the extra cells form their own blocks, named by the difference."""
    _, s0 = mcsd
    res, s, added = _with_extra(tmp_path_factory, "mcsd_tables_tiny", [
        (_is("sd", 0.7), {"decoding.top_k": 20}), (_is("mcsd_target_init", 1.0), {"gpu.name": "a100"}),
        (_is("mcsd_target_init", 0.0), {"gpu.name": "a100"})])
    c = res.cells
    for build in (paper_mcsd.table2, paper_mcsd.table3, paper_mcsd.table4):
        t0, t = build(s0), build(s)
        assert not any("±" in str(x) for x in t.text.to_numpy().ravel()), t.text
        for r in t.text.index:  # every extra cell in an entry of its own, never beside the twin's
            for col in t.text.columns:
                ids = _sources(t, r, col)
                assert not (ids & set(added) and ids - set(added)), (build.__name__, r, col, ids)
        # the twin's own entries are unchanged
        for row in t0.text.index:
            match = [r for r in t.text.index if r[1:] == row[1:] and "a100" not in str(r[0]) and "top-k 20"
                     not in str(r[0])]
            assert len(match) == 1, (build.__name__, row, list(t.text.index))
            assert (t.sources.loc[match[0]].values == t0.sources.loc[row].values).all()
    t4 = paper_mcsd.table4(s)
    assert any("a100" in str(r[0]) for r in t4.text.index)  # Table 4 keeps the GPU apart
    sd07 = _find(c, "sd", T07, gamma=4)
    t2 = paper_mcsd.table2(s)
    assert any(_sources(t2, r, col) == {sd07} for r in t2.text.index for col in t2.text.columns)


def test_an_entry_refuses_competing_settings_and_names_the_difference(mcsd):
    """Two cells of one spec that differ in a method parameter the table does not name compete for one
    entry: n/a, naming the parameter and its values — never a mean over them."""
    from harness.analysis.paper import choose

    res, s = mcsd
    rows = paper_mcsd.fixed_depth(s[(s["method_name"] == "mcsd_target_init") & (s["regime"] != "greedy")])
    chosen, why = choose(rows, "ours")
    assert chosen.empty and "method.k_config" in why and "decoding.temperature (0.7 vs 1)" in why
    one = rows.iloc[:1]
    assert choose(pd.concat([one, one.assign(seed=1, cell_id="x")]), "ours")[1] == ""  # seeds are repeats


def _never_mixed(t0, t, added: list[str]) -> None:
    """The twin's table ``t0`` against ``t`` on the twin plus ``added`` cells: no extra cell shares an entry with
    the twin's cells, nothing became a spread, and every filled entry of ``t0`` is still there, from the same
    cells (its row within the block and its column's method may sit in a block named by the difference)."""
    assert not any("±" in str(x) for x in t.text.to_numpy().ravel()), (t.key, t.text)
    found = {}
    for r in t.text.index:
        for col in t.text.columns:
            ids = _sources(t, r, col)
            assert not (ids & set(added) and ids - set(added)), (t.key, r, col, ids)
            found.setdefault(frozenset(ids), []).append((r, col))
    for r in t0.text.index:
        for col in t0.text.columns:
            ids = _sources(t0, r, col)
            if ids and not str(t0.text.loc[r, col]).startswith("n/a") and frozenset(ids) not in found:
                # else refused: an extra cell of another setting competes for this very entry, named
                same = [t.text.loc[x, c] for x in t.text.index for c in t.text.columns if _tail(x) == _tail(r)
                        and (c == col or not isinstance(x, tuple))]
                assert any("settings compete, differing in" in str(x) for x in same), (t0.key, r, col, ids, same)


def _tail(row):
    return row[1:] if isinstance(row, tuple) else row


def test_mtad_tables_never_mix_another_gpu_length_or_policy(tmp_path_factory, mtad):
    _, s0 = mtad
    main = {"decoding.top_k": 20, "decoding.top_p": 0.9}
    res, s, added = _with_extra(tmp_path_factory, "mtad_tables_tiny", [
        (lambda c: c["method"]["name"] == "sd" and c["decoding"]["top_p"] == 0.9 and c["decoding"]["top_k"] == 20,
         {"gpu.name": "a100"}),
        (_is("mtad", draft_width=8, tau=0.1), {"max_new_tokens": 64, **main}),
        (_is("bild"), {"method.rollback_threshold": 2}),
        (_is("spectr"), {"decoding.temperature": 0.7, **main})])
    assert len(added) >= 5
    for build in (paper_mtad.table3, paper_mtad.table4, paper_mtad.table5, paper_mtad.beams_table,
                  paper_mtad.tau_table, paper_mtad.topk_topp_table):
        _never_mixed(build(s0), build(s), added)
    t4 = paper_mtad.table4(s)
    assert any("max_new_tokens 64" in str(r[0]) for r in t4.text.index)  # its own block, named by the difference
    # the tiny pair has no Table 15 column: BiLD's thresholds are not fixed, so two BiLD cells compete — refused
    bild = t4.text.loc[[r for r in t4.text.index if "max_new_tokens 32" in r[0]][0], "BiLD †"]
    assert "method.rollback_threshold (1 vs 2)" in bild


def test_dsbd_one_front_per_pair_gpu_and_regime(tmp_path_factory, dsbd):
    """A faster pair's cells erased the tiny pair's front (3 points -> 0; issue 32.2): one front per pair × gpu ×
    regime, and the tables keep the other pair, gpu and warp apart."""
    res0, s0 = dsbd
    grid0 = paper_dsbd.grid_cells(s0)
    on0 = paper_dsbd.front_masks(grid0, quality.PPL, False, "tokens_per_s")["DSBD front"][0]
    grid_tiny = lambda g: g[(g["pair"] == "tiny") & (g["gpu"] == "cpu")]  # noqa: E731
    res, s, added = _with_extra(tmp_path_factory, "dsbd_tables_tiny", [
        (lambda c: True, {"pair.name": "fast"}),  # every cell again on a pair 100 x faster
        (_is("dsbd", memory_constrained=False), {"gpu.name": "a100"}),
        (_is("specinfer"), {"decoding.top_k": 20})])
    grid = paper_dsbd.grid_cells(s)
    masks = paper_dsbd.front_masks(grid, quality.PPL, False, "tokens_per_s")
    on = masks["DSBD front"][0]
    assert on0.sum() >= 1 and on[grid_tiny(grid).index].sum() == on0.sum()
    assert set(grid.loc[on[on].index].query("pair == 'tiny' and gpu == 'cpu'")["cell_id"]) == \
        set(grid0.loc[on0[on0].index]["cell_id"])
    assert on[grid[(grid["pair"] == "fast")].index].sum() >= 1 and on[grid[grid["gpu"] == "a100"].index].sum() >= 1
    for build in (paper_dsbd.table1, paper_dsbd.mtbench_table):
        _never_mixed(build(s0), build(s), added)


def test_adaptive_tables_never_mix_another_gpu_or_length(tmp_path_factory, adaptive):
    _, s0 = adaptive
    res, s, added = _with_extra(tmp_path_factory, "adaptive_tables_tiny", [
        (lambda c: c["pair"]["name"] == "tiny" and c["method"]["name"] in ("ar", "sd"), {"gpu.name": "a100"}),
        (lambda c: c["pair"]["name"] == "tiny_draft4", {"max_new_tokens": 64})])
    t2 = paper_adaptive.table2(s, res.records, **BOOT)
    assert ("a100", "SPS") in t2.text.columns  # the paper's layout: a column per GPU
    _never_mixed(paper_adaptive.table2(s0, res.records, **BOOT), t2, added)
    _never_mixed(paper_adaptive.table3(s0, res.records, res.excluded, **BOOT),
                 paper_adaptive.table3(s, res.records, res.excluded, **BOOT), added)
    _never_mixed(paper_adaptive.policy_table(s0, res.records, **BOOT), paper_adaptive.policy_table(s, res.records, **BOOT),
                 added)
