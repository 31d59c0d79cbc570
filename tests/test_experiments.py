"""The seeds' experiments (``conf/experiment/*.yaml``, ``harness -m +experiment=NAME``): every experiment
composes, its sweep (``hydra.sweeper.params`` x each of ``hydra.sweeper.grids``) expands into cells, and
every cell plans — method Params and pair config validated, nothing loaded, no hub touched. The
settings the seeds fix (seed 002 Table 15, seed 000/001 §4.2, seed 003 §4.1) are checked cell by cell,
and one ``_tiny`` twin runs end to end through the CLI."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

from harness.cli.app import CONF_DIR
from harness.config.groups import register_configs
from harness.run.runner import plan_cell
from harness.run.sweeper import config_sweep_overrides, sweep_overrides

ROOT = Path(__file__).resolve().parents[1]  # the checkout (CONF_DIR: conf/ at the top of a checkout, harness/conf in a wheel)
EXPERIMENTS = sorted(p.stem for p in (CONF_DIR / "experiment").glob("*.yaml"))
GROUPS = ("pair", "dataset", "method", "decoding", "gamma_policy", "draft_selection", "gpu", "energy")


@pytest.fixture(scope="module")
def hydra_ctx():
    register_configs()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        yield


def _experiment(name: str):
    return compose(config_name="config", overrides=[f"+experiment={name}"], return_hydra_config=True)


def _split(cell: list[str]) -> tuple[tuple[str, ...], list]:
    """A cell's config-group choices (composed by Hydra) and its other overrides (applied as Hydra does:
    a struct-mode update, so an unknown key or a value of the wrong type fails)."""
    parsed = OverridesParser.create().parse_overrides(cell)
    groups = tuple(f"{o.key_or_group}={o.value()}" for o in parsed if o.key_or_group in GROUPS)
    return groups, [o for o in parsed if o.key_or_group not in GROUPS]


_CELLS: dict[str, list[tuple[list[str], dict]]] = {}


def _cell_configs(name: str) -> list[tuple[list[str], dict]]:
    """Every cell (cached per experiment: read-only) of an experiment as (overrides, resolved config). Hydra composes each distinct set of
    group choices once; the remaining key=value overrides are applied to a copy (struct mode, typed
    nodes). :func:`test_fast_cell_composition_equals_hydra` checks this equals composing each cell."""
    if name in _CELLS:
        return _CELLS[name]
    cells = config_sweep_overrides(_experiment(name))
    composed: dict[tuple[str, ...], object] = {}
    out = []
    for cell in cells:
        groups, rest = _split(cell)
        if groups not in composed:
            composed[groups] = compose(config_name="config", overrides=[f"+experiment={name}", *groups])
        cfg = composed[groups].copy()
        for o in rest:
            OmegaConf.update(cfg, o.key_or_group, o.value(), merge=False)
        out.append((cell, OmegaConf.to_container(cfg, resolve=True)))
    _CELLS[name] = out
    return out


# ---- the sweeper ---------------------------------------------------------------------------------------

def test_sweeper_is_the_basic_sweeper_without_grids():
    assert sweep_overrides({"a": "1,2"}, None, ["b=x,y"]) == [["a=1", "b=x"], ["a=1", "b=y"], ["a=2", "b=x"],
                                                              ["a=2", "b=y"]]


def test_sweeper_unions_grids_and_the_command_line_wins():
    cells = sweep_overrides({"pair": "p,q", "seed": "0"},
                            {"g1": {"method": "m1", "method.k": "1,2"}, "g2": {"pair": "r", "method": "m2"},
                             "dup": {"method": "m1", "method.k": "1"}, "off": None},
                            ["seed=5"])
    assert cells == [["pair=p", "seed=5", "method=m1", "method.k=1"], ["pair=p", "seed=5", "method=m1", "method.k=2"],
                     ["pair=q", "seed=5", "method=m1", "method.k=1"], ["pair=q", "seed=5", "method=m1", "method.k=2"],
                     ["pair=r", "seed=5", "method=m2"]]  # dup's cells ran already; a null grid is dropped


# ---- every experiment composes; every cell plans ------------------------------------------------------

@pytest.mark.slow  # whole processes / CLI sweeps (issue 21.10: `make test` in minutes; CI runs -m slow too)
@pytest.mark.parametrize("name", EXPERIMENTS)
def test_every_cell_of_every_experiment_validates(hydra_ctx, name):
    cfg = _experiment(name)
    assert cfg.hydra.sweeper._target_ == "hydra_plugins.harness_grids.GridSweeper"
    cells = _cell_configs(name)
    assert cells
    ids = Counter()
    for overrides, cell in cells:
        plan = plan_cell(cell)  # Params built, pair config validated (no weights, no hub)
        assert plan.pair.target
        # the runner's timing synchronisation is part of a cell's identity (adaptive Table 9's cells: sync_timing)
        keys = ("method", "decoding", "gamma_policy", "draft_selection", "pair", "dataset", "seed", "max_new_tokens",
                "runner")
        ids[json.dumps({k: cell.get(k) for k in keys}, sort_keys=True)] += 1
        if name.endswith("_tiny"):
            assert cell["pair"]["target"] == "tiny/target" and cell["dataset"]["name"] == "kjv_heldout"
        else:
            assert not cell["pair"]["target"].startswith("tiny/"), overrides  # the seeds' pairs, by hub id
    assert max(ids.values()) == 1, "two grids produce the same cell"


@pytest.mark.slow  # composes every cell of every twin (issue 21.10; CI runs -m slow)
@pytest.mark.parametrize("name", EXPERIMENTS)
def test_every_experiment_has_a_tiny_twin_with_the_same_methods(hydra_ctx, name):
    if name.endswith("_tiny"):
        return
    assert f"{name}_tiny" in EXPERIMENTS
    methods = {c["method"]["name"] for _, c in _cell_configs(name)}
    tiny = {c["method"]["name"] for _, c in _cell_configs(f"{name}_tiny")}
    assert methods == tiny


@pytest.mark.slow  # whole processes / CLI sweeps (issue 21.10: `make test` in minutes; CI runs -m slow too)
def test_fast_cell_composition_equals_hydra(hydra_ctx):
    """The shortcut of :func:`_cell_configs` (compose per group choice, then apply the rest) gives exactly
    Hydra's composition of the cell, on a sample of every experiment's cells."""
    for name in EXPERIMENTS:
        cells = _cell_configs(name)
        for overrides, fast in cells[:: max(1, len(cells) // 7)]:
            full = compose(config_name="config", overrides=[f"+experiment={name}", *overrides])
            assert OmegaConf.to_container(full, resolve=True) == fast, overrides


def test_an_unknown_method_key_in_a_grid_fails(hydra_ctx):
    cfg = compose(config_name="config", overrides=["method=sd"])
    with pytest.raises(Exception, match="draft_width"):
        OmegaConf.update(cfg, "method.draft_width", 3, merge=False)


# ---- the seeds' settings, cell by cell ----------------------------------------------------------------

L, O = "llama2_13b_68m", "opt_13b_125m"
CP, CA, CD, SP, MT = "chatgpt_prompts", "alpaca", "cnndm", "spider", "mt_bench"
COLUMNS = [(L, CP), (O, CP), (L, CA), (O, CA), (L, CD), (O, CD), (L, SP), (O, SP), (L, MT), (O, MT)]
TABLE15 = {  # seed 002 App. F, Table 15, column by column
    "num_drafts": [4, 4, 2, 2, 4, 2, 2, 2, 2, 2],
    "fallback_threshold": [0.9, 0.9, 0.9, 0.3, 0.9, 0.3, 0.9, 0.9, 0.9, 0.9],
    "rollback_threshold": [2, 2, 1, 2, 3, 2, 1, 1, 1, 1],
    "tau": [0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.9, 0.1, 0.9, 0.1],
}


def _mtad_ablation(c: dict) -> bool:
    """A cell of mtad_tables' ablation grids (Table 7, Fig. 3, Table 12): another warp, or MTAD on ChatGPT-Prompts
    with other beams or τ than Table 15's (8, 0.1)."""
    warp = (c["decoding"]["top_k"], c["decoding"]["top_p"])
    m = c["method"]
    return warp != (20, 0.9) or (m["name"] == "mtad" and c["dataset"]["name"] == CP
                                 and (m["draft_width"], m["tau"]) != (8, 0.1))


def test_mtad_tables_follow_table_15(hydra_ctx):
    every = [c for _, c in _cell_configs("mtad_tables") if c["pair"]["name"] in (L, O)]  # §5's pairs (App. C: below)
    cells = [c for c in every if not _mtad_ablation(c)]
    assert {c["max_new_tokens"] for c in cells} == {128}
    assert {(c["decoding"]["top_k"], c["decoding"]["top_p"], c["decoding"]["temperature"]) for c in cells} == {(20, 0.9, 1.0)}
    ablation = [c for c in every if _mtad_ablation(c)]  # issue 22.8: the ablation grids exist as grids
    mtad_cp = {(c["pair"]["name"], c["method"]["draft_width"], c["method"]["tau"]) for c in every
               if c["method"]["name"] == "mtad" and c["dataset"]["name"] == CP and c["decoding"]["top_k"] == 20
               and c["decoding"]["top_p"] == 0.9}
    assert {(p, w) for p in (L, O) for w in (2, 4, 6, 8)} <= {(p, w) for p, w, t in mtad_cp if t == 0.1}  # Table 7
    assert {0.0, 0.1, 0.5, 0.9, 1.0} <= {t for p, w, t in mtad_cp if w == 8 and p == L}  # Fig. 3
    warps = {(c["decoding"]["top_k"], c["decoding"]["top_p"], c["method"]["name"]) for c in ablation
             if c["pair"]["name"] == L}
    assert {(k, p, m) for k, p in ((20, 0.8), (10, 0.9), (10, 0.8)) for m in ("ar_sampling", "sd", "mtad")} <= warps
    _follow_table_15(cells, {L: L, O: O}, 6)  # one cell per column and method: ar_sampling, sd, spectr, specinfer, bild, mtad


def _follow_table_15(cells: list[dict], family: dict, methods: int) -> None:
    """One cell per Table 15 column (``family``: L / O -> the pair that runs that family's columns) and method,
    with the column's settings."""
    by = {}
    for c in cells:
        by.setdefault((c["pair"]["name"], c["dataset"]["name"], c["method"]["name"]), []).append(c["method"])
    assert len(cells) == len(by) == 10 * methods
    for i, (pair, data) in enumerate((family[p], d) for p, d in COLUMNS):
        assert by[(pair, data, "sd")][0]["gamma"] == 4
        for m in ("spectr", "specinfer"):
            assert (by[(pair, data, m)][0]["gamma"], by[(pair, data, m)][0]["num_drafts"]) == (4, TABLE15["num_drafts"][i])
        bild = by[(pair, data, "bild")][0]
        assert (bild["gamma"], bild["fallback_threshold"], bild["rollback_threshold"]) == (
            10, TABLE15["fallback_threshold"][i], TABLE15["rollback_threshold"][i])
        mtad = by[(pair, data, "mtad")][0]
        assert (mtad["gamma"], mtad["draft_width"], mtad["tau"]) == (4, 8, TABLE15["tau"][i])


L3, L3I, O30, L70 = "llama31_8b_32_1b", "llama31_8b_32_1b_instruct", "opt_30b_350m", "llama2_70b_chat_7b_chat"


def test_mtad_appendix_c_pairs_and_settings(hydra_ctx):
    """Tables 9-10 (App. C.1-C.2): both Llama-3 pairs by hub id on Spider, MT-Bench and HumanEval, multinomial and
    MTJD k 4, and the seven methods at one setting (Table 15's L,SP column); Table 11 (App. C.3): OPT-30B/350M and
    Llama-2-70B/7B-chat on §5's five datasets, each method at its family's Table 15 column; App. F's warp, 128
    tokens everywhere."""
    every = [c for _, c in _cell_configs("mtad_tables")]
    c9 = [c for c in every if c["pair"]["name"] in (L3, L3I)]
    c11 = [c for c in every if c["pair"]["name"] in (O30, L70)]
    assert {(c["pair"]["target"], c["pair"]["draft"]) for c in c9} == {
        ("meta-llama/Llama-3.1-8B", "meta-llama/Llama-3.2-1B"),
        ("meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.2-1B-Instruct")}
    assert {(c["pair"]["target"], c["pair"]["draft"]) for c in c11} == {
        ("facebook/opt-30b", "facebook/opt-350m"), ("meta-llama/Llama-2-70b-chat-hf", "meta-llama/Llama-2-7b-chat-hf")}
    for c in c9 + c11:
        assert (c["max_new_tokens"], c["decoding"]["temperature"], c["decoding"]["top_k"], c["decoding"]["top_p"]) == \
            (128, 1.0, 20, 0.9)
    want = {"ar_sampling": {}, "mtjd": {"gamma": 4, "width": 4}, "sd": {"gamma": 4},
            "spectr": {"gamma": 4, "num_drafts": 2}, "specinfer": {"gamma": 4, "num_drafts": 2},
            "bild": {"gamma": 10, "fallback_threshold": 0.9, "rollback_threshold": 1}, "typical": {"gamma": 4},
            "mcsd": {"k_config": [4, 2, 2, 1]}, "mtad": {"gamma": 4, "draft_width": 8, "tau": 0.9}}
    got = Counter((c["pair"]["name"], c["dataset"]["name"], c["method"]["name"]) for c in c9)
    assert got == Counter({(p, d, m): 1 for p in (L3, L3I) for d in ("spider", "mt_bench", "humaneval") for m in want})
    for c in c9:
        assert {k: c["method"][k] for k in want[c["method"]["name"]]} == want[c["method"]["name"]], c["method"]
    _follow_table_15(c11, {L: L70, O: O30}, 5)  # speculative, Spectr, SpecInfer, BiLD, MTAD (no multinomial row)


@pytest.mark.slow  # composes the whole experiment (issue 21.10; CI runs -m slow; mtad's stays by default)
def test_dsbd_tables_grid(hydra_ctx):
    cells = [c for _, c in _cell_configs("dsbd_tables")]
    assert {(c["decoding"]["top_k"], c["decoding"]["top_p"]) for c in cells} == {(10, 0.8)}
    pairs = {c["pair"]["target"] for c in cells}
    assert pairs == {"meta-llama/Llama-2-13b-hf", "facebook/opt-13b", "meta-llama/Llama-3.1-8B"}
    per = Counter()
    for c in cells:
        m = c["method"]
        if m["name"] == "dsbd":
            assert m["gamma"] in (2, 3) and 2 <= m["draft_width"] <= 6 and m["threshold"] in (0.7, 0.9)
            assert m["min_width"] in (1, 2, 3) and m["width"] is None
            per[(c["pair"]["name"], c["dataset"]["name"], m["memory_constrained"])] += 1
        if m["name"] == "beam_sampling":
            assert m["width"] in ((1, 2, 3, 4) if c["dataset"]["name"] != "mt_bench" else (5,))
    assert set(per.values()) == {2 * 5 * 2 * 3}  # γ x W_S x t x W_min for every pair/dataset (and constrained)
    assert {d for (_, d, _) in per} == {"squad", "spider", "mt_bench"}
    assert not any(mc is False for (_, d, mc) in per if d == "mt_bench")  # Table 1 (001): constrained DSBD


@pytest.mark.slow  # composes the whole experiment (issue 21.10; CI runs -m slow; mtad's stays by default)
def test_mcsd_tables_settings(hydra_ctx):
    cells = [c for _, c in _cell_configs("mcsd_tables")]
    assert {c["max_new_tokens"] for c in cells} == {200}
    got = {(c["method"]["name"], c["decoding"]["temperature"], tuple(c["method"].get("k_config") or ()),
            c["method"].get("gamma"), c["method"].get("num_drafts")) for c in cells}
    assert ("sd", 0.7, (), 4, None) in got and ("sd", 1.0, (), 5, None) in got
    assert ("mcsd", 0.7, (4, 2, 2, 1), None, None) in got and ("mcsd", 1.0, (4, 2, 2, 1, 1), None, None) in got
    assert ("mcsd_target_init", 0.7, (2, 4, 3, 1, 1), None, None) in got
    assert ("mcsd_target_init", 0.7, (3, 4, 3, 1, 1), None, None) in got  # Table 1: n_t = 3
    # issue 22.6: "our method" of Tables 3-4 is the target-initialised tree, D 5 W 16 = 16 roots x chains of 5
    assert {("mcsd_target_init", t, (16, 1, 1, 1, 1, 1), None, None) for t in (0.0, 1.0)} <= got
    assert {("mcsd_dynamic", t, (), 5, 16) for t in (0.0, 1.0)} <= got  # the lossless fork, as a reference
    assert {("ar", 0.7), ("ar", 1.0), ("ar", 0.0)} <= {g[:2] for g in got}  # AR at every temperature
    assert {c["dataset"]["name"] for c in cells} == {"mt_bench", "alpaca", "triviaqa"}


@pytest.mark.slow  # composes the whole experiment (issue 21.10; CI runs -m slow; mtad's stays by default)
def test_adaptive_tables_settings(hydra_ctx):
    cells = [c for _, c in _cell_configs("adaptive_tables")]
    assert {c["decoding"]["name"] for c in cells} == {"greedy"}
    policies = {(c.get("gamma_policy") or {"name": "fixed"})["name"] for c in cells if c["method"]["name"] == "sd"}
    assert policies == {"fixed", "online", "fsm", "cache_fsm", "qlearning", "hf_heuristic", "specdecpp"}
    eagle = {(c["pair"]["name"], (c.get("gamma_policy") or {"name": "fixed"})["name"]) for c in cells
             if c["method"]["name"] == "eagle2"}  # App. C.4: adaptive depth beside EAGLE-2's fixed depth
    assert eagle == {(p, g) for p in ("llama2_7b_chat_68m", "llama2_70b_chat_7b_chat") for g in ("fixed", "online")}
    selection = [c for c in cells if (c.get("draft_selection") or {}).get("name") == "ols"]
    assert {c["pair"]["name"] for c in selection} == {"llama2_70b_chat_multi", "bloom_7b1_multi"}


# ---- one tiny twin, end to end through the CLI --------------------------------------------------------

@pytest.mark.slow  # whole processes / CLI sweeps (issue 21.10: `make test` in minutes; CI runs -m slow too)
def test_a_tiny_experiment_runs_end_to_end(hydra_ctx, tmp_path):
    name = "mcsd_tables_tiny"
    expected = len(config_sweep_overrides(_experiment(name)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "harness", "-m", f"+experiment={name}", f"results_dir={tmp_path}",
                           "max_new_tokens=8", "dataset.num_prompts=2", "runner.warmup_generations=0"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summaries = [json.loads(p.read_text()) for p in Path(tmp_path, "cells").glob("*/summary.json")]
    assert len(summaries) == expected == proc.stdout.count("[done]")
    assert {s["method_name"] for s in summaries} == {"ar_sampling", "ar_greedy", "sd", "mcsd", "mcsd_target_init",
                                                     "mcsd_dynamic"}
    assert {s["max_new_tokens"] for s in summaries} == {8}


@pytest.mark.slow  # whole processes / CLI sweeps (issue 21.10: `make test` in minutes; CI runs -m slow too)
def test_the_sweeper_loads_from_a_checkout_whose_hydra_plugins_is_not_installed(tmp_path):
    """An install made before ``hydra_plugins/`` existed still finds the sweeper next to its ``harness``."""
    (tmp_path / "path").mkdir()
    (tmp_path / "path" / "harness").symlink_to(ROOT / "harness")  # only the package is on the path
    # an editable install of this checkout maps hydra_plugins/ too (pyproject packages it): hide that mapping
    code = ("import sys\n"
            "sys.meta_path = [f for f in sys.meta_path if '__editable__' not in getattr(f, '__module__', '')]\n"
            "sys.path = [p for p in sys.path if '__editable__' not in p]\n"
            "import harness.cli.app\n"
            "try:\n    import hydra_plugins.harness_grids\nexcept ImportError:\n    pass\n"
            "else:\n    sys.exit('hydra_plugins.harness_grids should not be importable here')\n"
            "sys.argv = ['harness', '-m', '+experiment=mtad_tables_tiny', 'results_dir=" + str(tmp_path / "r") + "',"
            " 'max_new_tokens=2', 'dataset.num_prompts=1', 'runner.warmup_generations=0',"
            " '~hydra.sweeper.grids.multi_draft', '~hydra.sweeper.grids.mtad', '~hydra.sweeper.grids.bild',"
            " '~hydra.sweeper.grids.speculative', '~hydra.sweeper.grids.ablation_beams',"
            " '~hydra.sweeper.grids.ablation_tau', '~hydra.sweeper.grids.table12_k20_p08',"
            " '~hydra.sweeper.grids.table12_k10', '~hydra.sweeper.grids.table9_mtjd',"
            " '~hydra.sweeper.grids.table10_typical', '~hydra.sweeper.grids.table10_mcss']\n"
            "harness.cli.app.main()\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "path"), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("[done]") == 1



@pytest.mark.parametrize("name", ["dsbd_tables_tiny", "mcsd_tables_tiny"])
def test_plan_lists_every_cell_of_an_experiment(name):
    """`harness plan` / `harness task` / sbatch arrays expand the experiments' grids exactly as the sweeper
    does (a plan built on the basic sweeper alone would see one cell)."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.initialize import get_gh_backup, restore_gh_from_backup

    from harness.run.plan import compose_jobs

    backup = get_gh_backup()  # the module fixture's Hydra, restored after: later tests of this file compose with it
    try:
        jobs = compose_jobs([f"+experiment={name}"])
        GlobalHydra.instance().clear()
        register_configs()
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cells = config_sweep_overrides(_experiment(name), [f"+experiment={name}"])
    finally:
        restore_gh_from_backup(backup)
    assert len(jobs) == len(cells) > 1
    wanted = {o.split("=", 1)[1] for cell in cells for o in cell if o.startswith("method=")}
    assert {job["method"]["name"] for job in jobs} == wanted


def test_docs_papers_cell_counts_are_the_sweeps(hydra_ctx):
    """docs/papers.md's cell counts (the table's last column, and the twins' counts) are what each sweep plans
    (``harness plan``): an experiment that grows says so in the manual."""
    import re

    text = (ROOT / "docs" / "papers.md").read_text()
    counted = {m[0]: int(m[1]) for m in re.findall(r"^\| `(\w+)` \|.*\| (\d+) \|$", text, flags=re.M)}
    twins = re.search(r"cells: ((?:\w+ \d+(?:, )?)+)", text)
    assert twins, "docs/papers.md names the twins' cell counts"
    counted.update({f"{n}_tables_tiny": int(k) for n, k in re.findall(r"(\w+) (\d+)", twins[1])})
    full = [n for n in EXPERIMENTS if not n.endswith("_tiny")]
    assert set(counted) == set(EXPERIMENTS), (sorted(counted), full)
    for name in EXPERIMENTS:
        assert len(config_sweep_overrides(_experiment(name))) == counted[name], name
