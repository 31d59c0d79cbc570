"""Issue 32 items 3-4: a cell's interleave group and its baseline pairing are its comparison group (same pair,
dataset, prompts, decoding), whatever the method-side keys (γ policy, draft selection, heads)."""
from __future__ import annotations

import json

from harness.analysis import paper_adaptive
from harness.analysis.load import read_results
from harness.run.cell import interleave_key
from harness.run.plan import units
from synth_results import compose_twin, write_composed


def _where(cfg: dict) -> tuple:
    """A cell's comparison group: pair, dataset, decoding and the runner's settings (Table 9's cells run with
    runner.sync_timing: a group of their own)."""
    return (cfg["pair"]["name"], cfg["dataset"]["name"], json.dumps(cfg["decoding"], sort_keys=True),
            json.dumps(cfg.get("runner"), sort_keys=True, default=str))


def test_the_adaptive_twin_runs_ar_and_every_policy_interleaved():
    cfgs = compose_twin("adaptive_tables_tiny")
    groups = units(cfgs)
    by_where: dict[tuple, set] = {}
    for i, unit in enumerate(groups):
        for cfg in unit:
            by_where.setdefault(_where(cfg), set()).add(i)
    assert all(len(u) == 1 for u in by_where.values()), by_where  # one unit per comparison group
    tiny = [u for u in groups if u[0]["pair"]["name"] == "tiny"][0]
    policies = {(c["method"]["name"], (c.get("gamma_policy") or {}).get("name")) for c in tiny}
    assert {("ar", None), ("sd", "fixed"), ("sd", "online"), ("sd", "qlearning"), ("sd", "specdecpp"),
            ("eagle2", "fixed"), ("eagle2", "online")} <= policies
    multi = [u for u in groups if u[0]["pair"]["name"] == "tiny_multi"][0]
    assert {c["method"]["name"] for c in multi} == {"ar", "sd"}  # draft selection and AR: one unit


def test_method_side_keys_never_split_the_interleave_key():
    base = {"method": {"name": "sd"}, "pair": {"name": "tiny"}, "decoding": {"name": "greedy"}, "seed": 0}
    other = {**base, "method": {"name": "eagle2", "head": "tiny/eagle"}, "gamma_policy": {"name": "online"},
             "draft_selection": {"name": "ols"}}
    assert interleave_key(base) == interleave_key(other)
    assert interleave_key(base) != interleave_key({**base, "seed": 1})  # the comparison group still splits


def test_eagle2_and_every_policy_pair_with_ar(tmp_path):
    """The comparison key (``match_json``) ignores the method's side: EAGLE-2 with a γ policy, SD with any
    policy and AR share it on one pair; the multi-draft pair's selection cell shares AR's on that pair."""
    results = tmp_path / "results"
    for cfg in compose_twin("adaptive_tables_tiny"):
        write_composed(results, cfg)
    c = read_results(results).cells
    synced = paper_adaptive.synced(c)  # Table 9's cells: their own group (runner.sync_timing)
    assert set(c.loc[synced, "method_name"]) == {"eagle2"} and synced.sum() == 2
    for pair, g in c[~synced].groupby("pair"):
        assert g["match_json"].nunique() == 1, (pair, g[["label", "match_json"]])
    assert c.loc[~synced & (c["pair"] == "tiny"), "method_name"].isin(["eagle2", "ar_greedy"]).sum() == 3
