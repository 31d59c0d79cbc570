"""Issue 15 item 1: a cell's id covers every setting that can change what it measures, and a finished cell is
reused only when its stored config has the same identity. Issue 29.3: new cells are measured under identity version 2
(the config as composed); the ids of cells measured under version 1 (release 0.2's layout) keep their pinned values."""
import json
import os
import subprocess
import sys

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from harness.config import identity

from harness.results import store
from harness.cli.app import CONF_DIR
from harness.config.groups import register_configs
from harness.config.identity import RESULT_NEUTRAL_KEYS, CellConflict, cell_id, flatten
from harness.run.runner import run_cell

COMPOSED = [("method=ar", "decoding=greedy"), ("method=sd", "decoding=sampling"), ("method=specinfer",),
            ("method=dsbd", "dataset=squad"), ("method=mcsd", "dataset=humaneval", "energy=naive"),
            ("method=beam", "decoding=greedy", "pair=tiny_multi", "gpu=sim_h100"), ("method=mtad", "energy=off"),
            ("method=eagle2", "gamma_policy=online"), ("method=medusa_typical",), ("method=sd", "gamma_policy=specdecpp")]


def composed(*overrides) -> dict:
    register_configs()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return OmegaConf.to_container(compose(config_name="config", overrides=list(overrides)), resolve=True)


def _changed(value):
    """A different value of the same kind."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value + 0.5
    if isinstance(value, str):
        return value + "_x"
    if isinstance(value, list):
        return [*value, "x"]
    if isinstance(value, dict):
        return {**value, "x": 1}
    return 1  # None


def _set(cfg: dict, dotted: str, value) -> dict:
    out = json.loads(json.dumps(cfg))
    *parents, last = dotted.split(".")
    node = out
    for p in parents:
        node = node[p]
    node[last] = value
    return out


def _neutral(key: str) -> bool:
    """A result-neutral key, or a key inside a result-neutral group or node (``judge``, ``report``)."""
    return any(key == k or key.startswith(k + ".") for k in RESULT_NEUTRAL_KEYS)


@pytest.mark.parametrize("overrides", COMPOSED, ids=lambda o: " ".join(o))
def test_every_key_changes_the_id_or_is_result_neutral(overrides):
    """Walk every leaf of the composed config: changing it changes the cell id, unless the key is on the
    explicit allow-list of result-neutral keys (where the id must not change)."""
    cfg = composed(*overrides)
    base = cell_id(cfg)
    leaves = flatten(cfg)
    assert len(leaves) > 30  # the walk really sees the groups (method, decoding, pair, dataset, energy, runner...)
    for key, value in leaves.items():
        other = cell_id(_set(cfg, key, _changed(value)))
        if _neutral(key):
            assert other == base, f"{key} is declared result-neutral but changes the id"
        else:
            assert other != base, f"changing {key} ({value!r}) does not change the cell id"


def test_the_allow_list_is_small_and_every_entry_exists():
    cfg = composed()
    leaves = flatten(cfg)
    assert set(RESULT_NEUTRAL_KEYS) == {"results_dir", "force", "runner.progress", "runner.interleave", "report",
                                        "judge", "tracker"}
    assert all(k in leaves or any(leaf.startswith(k + ".") for leaf in leaves) for k in RESULT_NEUTRAL_KEYS)
    # the judge group (issue 25.3) and the report node (issue 22.3) left every cell id as it was before them
    # and the tracker (issue 33.7)
    assert cell_id(cfg) == cell_id({k: v for k, v in cfg.items() if k not in ("judge", "report", "tracker")})
    assert cell_id(composed("tracker=mlflow", "tracker.project=x")) == cell_id(cfg)
    assert cell_id(composed("judge=openai", "judge.model=x")) == cell_id(cfg)
    assert all(why for why in RESULT_NEUTRAL_KEYS.values())


def test_id_is_readable_and_stable():
    cfg = composed("method=sd", "gpu=cpu")
    cid = cell_id(cfg)
    assert cid.startswith("sd__sampling__tiny__kjv_heldout__cpu__s0__")
    assert cid == cell_id(json.loads(json.dumps(cfg)))  # key order and copies do not matter
    assert len(cid.rsplit("__", 1)[1]) == identity.HASH_CHARS


CELL = {"method": {"name": "ar_greedy"}, "seed": 0, "max_new_tokens": 3,
        "pair": {"name": "tiny", "target": "tiny/target", "draft": "tiny/draft", "dtype": "float32", "device": "cpu"},
        "dataset": {"name": "kjv_heldout", "task": "text_continuation", "num_prompts": 1, "max_new_tokens": 48,
                    "stop": [], "prompt_words": 12},
        "gpu": {"name": "cpu"}, "runner": {"warmup_generations": 0, "warmup_new_tokens": 2, "progress": False}}


def test_finished_cell_is_reused_only_under_the_same_identity(tmp_path):
    out = run_cell(CELL, tmp_path)
    assert out.status == "done"
    # result-neutral keys do not matter
    assert run_cell({**CELL, "runner": {**CELL["runner"], "progress": True}}, tmp_path).status == "skipped"
    # a summary whose stored config differs from the requested one (a hash collision; a foreign summary sealed
    # with this folder's key) is refused; a hand edit without the key is caught earlier, by the seal (test_integrity)
    from harness.results import integrity

    path = out.cell_dir / store.SUMMARY
    key = integrity.folder_key(out.cell_dir.parent)
    summary = json.loads(path.read_text())
    summary["config"]["max_new_tokens"] = 99
    path.write_text(json.dumps(integrity.seal(out.cell_dir, summary, key)))
    with pytest.raises(CellConflict, match=r"max_new_tokens: stored 99, requested 3.*force="):
        run_cell(CELL, tmp_path)
    del summary["config"]
    path.write_text(json.dumps(integrity.seal(out.cell_dir, summary, key)))
    with pytest.raises(CellConflict, match="holds no config"):
        run_cell(CELL, tmp_path)
    assert run_cell(CELL, tmp_path, force=True).status == "done"  # force reruns it
    assert run_cell(CELL, tmp_path).status == "skipped"


def _cli(*args, cwd=None):
    env = dict(os.environ, HYDRA_FULL_ERROR="1")
    return subprocess.run([sys.executable, "-m", "harness", *args], capture_output=True, text=True, env=env,
                          timeout=600, cwd=cwd)


@pytest.mark.slow  # whole processes / CLI sweeps (issue 21.10: `make test` in minutes; CI runs -m slow too)
def test_sweep_over_max_new_tokens_runs_one_cell_per_value(tmp_path):
    """The issue's repro: `harness -m max_new_tokens=8,16` ran the first cell and reported the second as
    already finished."""
    r = _cli("-m", "max_new_tokens=2,3", "method=ar_greedy", "decoding=greedy", "dataset.num_prompts=1",
             "runner.progress=false", "runner.warmup_generations=0", "pair.device=cpu", "gpu=cpu",
             f"results_dir={tmp_path}")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("[done]") == 2 and "[skipped]" not in r.stdout
    maxes = sorted(json.loads(p.read_text())["max_new_tokens"] for p in tmp_path.glob("cells/*/summary.json"))
    assert maxes == [2, 3]


@pytest.mark.slow  # whole processes / CLI sweeps (issue 21.10: `make test` in minutes; CI runs -m slow too)
def test_cli_stops_before_loading_when_a_finished_cell_has_another_config(tmp_path):
    args = ["method=ar_greedy", "decoding=greedy", "dataset.num_prompts=1", "max_new_tokens=2", "runner.progress=false",
            "runner.warmup_generations=0", "pair.device=cpu", "gpu=cpu", f"results_dir={tmp_path}"]
    assert _cli(*args).returncode == 0
    (summary_path,) = tmp_path.glob("cells/*/summary.json")
    summary = json.loads(summary_path.read_text())
    summary["config"]["dataset"]["num_prompts"] = 7  # a foreign config sealed with this folder's key (a collision)
    from harness.results import integrity

    key = integrity.folder_key(summary_path.parent.parent)
    summary_path.write_text(json.dumps(integrity.seal(summary_path.parent, summary, key)))
    r = _cli(*args)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "dataset.num_prompts: stored 7, requested 1" in r.stderr and "force=" in r.stderr
    assert "[skipped]" not in r.stdout and "[done]" not in r.stdout


def test_a_policy_key_that_release_0_2_did_not_have_changes_the_id():
    """The id hashes 0.2's flat layout for 0.2's policy keys; a key added since (a new policy's threshold)
    must still tell cells apart, and a method without 0.2 policy slots hashes its chosen group as it is."""
    cfg = composed("method=sd", "gamma_policy=online")
    one = _set(cfg, "gamma_policy", {**cfg["gamma_policy"], "new_threshold": 0.3})
    two = _set(cfg, "gamma_policy", {**cfg["gamma_policy"], "new_threshold": 0.5})
    assert len({cell_id(cfg), cell_id(one), cell_id(two)}) == 3
    dsbd = composed("method=dsbd")
    assert cell_id(dsbd) != cell_id(_set(dsbd, "gamma_policy", {"name": "online"}))


# issue 33.5: an alias cell is the cell of the decoder it resolves to; explicit cells keep their ids
ALIAS_CELLS = [("ar", "greedy", "ar_greedy"), ("ar", "sampling", "ar_sampling"), ("beam", "greedy", "beam_search"),
               ("beam", "sampling", "beam_sampling")]
# ids of explicit cells computed before this change (issue 33.5), under identity version 1: existing results keep them
KEPT = {"ar_greedy": "ar_greedy__greedy__tiny__kjv_heldout__cpu__s0__735e523a5f98",
        "ar_sampling": "ar_sampling__sampling__tiny__kjv_heldout__cpu__s0__bac9b146f537",
        "beam_search": "beam_search__greedy__tiny__kjv_heldout__cpu__s0__bf9a8430737d",
        "beam_sampling": "beam_sampling__sampling__tiny__kjv_heldout__cpu__s0__5d4f0812eae9"}
# the same cells' ids under identity version 2, what new cells get (issue 29.3); greedy ones are the same under both
KEPT_V2 = {"ar_greedy": "ar_greedy__greedy__tiny__kjv_heldout__cpu__s0__735e523a5f98",
           "ar_sampling": "ar_sampling__sampling__tiny__kjv_heldout__cpu__s0__e40a95c903b3",
           "beam_search": "beam_search__greedy__tiny__kjv_heldout__cpu__s0__bf9a8430737d",
           "beam_sampling": "beam_sampling__sampling__tiny__kjv_heldout__cpu__s0__7542b2f13f59"}


@pytest.mark.parametrize("alias,decoding,target", ALIAS_CELLS)
def test_an_alias_and_its_resolved_method_are_one_cell(alias, decoding, target):
    for version, pins in ((1, KEPT), (2, KEPT_V2)):
        explicit = cell_id(composed(f"method={target}", f"decoding={decoding}", "gpu=cpu"), version=version)
        assert cell_id(composed(f"method={alias}", f"decoding={decoding}", "gpu=cpu"), version=version) == explicit \
            == pins[target]
    assert identity.IDENTITY_VERSION == 2 and cell_id(composed(f"method={target}", f"decoding={decoding}",
                                                               "gpu=cpu")) == KEPT_V2[target]  # a new cell's id
    # a parameter of the resolved method still tells cells apart through the alias
    assert cell_id(composed(f"method={alias}", f"decoding={decoding}", "gpu=cpu", "method.width=2")) != explicit \
        if alias == "beam" else True


# cells whose version-1 id goes through release 0.2's layout (γ policy inside `method`, 0.2's preset name): the
# version-1 pins are the ids such results have; the version-2 pins are a new cell's
LAYOUT_PINS = [(("method=sd", "decoding=sampling"), "sd__sampling__tiny__kjv_heldout__cpu__s0__156f4900c79f",
                "sd__sampling__tiny__kjv_heldout__cpu__s0__a254a559784e"),
               (("method=dsbd", "decoding=sampling_dsbd"),
                "dsbd__sampling_seed000__tiny__kjv_heldout__cpu__s0__9db12d36d269",
                "dsbd__sampling_dsbd__tiny__kjv_heldout__cpu__s0__d7b22e298638"),
               (("method=sd", "gamma_policy=online"), "sd__sampling__tiny__kjv_heldout__cpu__s0__2042d135ce2c",
                "sd__sampling__tiny__kjv_heldout__cpu__s0__07242d01fc2e")]


@pytest.mark.parametrize("overrides,v1,v2", LAYOUT_PINS, ids=lambda o: " ".join(o) if isinstance(o, tuple) else "")
def test_pinned_ids_of_both_identity_versions(overrides, v1, v2):
    cfg = composed(*overrides, "gpu=cpu")
    assert cell_id(cfg, version=1) == v1 and cell_id(cfg, version=2) == v2 == cell_id(cfg)
    assert identity.known_ids(cfg)[:2] == [v2, v1]
    assert identity.version_of(v1, cfg) == 1 and identity.version_of(v2, cfg) == 2


def test_a_finished_alias_cell_keeps_its_old_id(tmp_path):
    from harness.run.cell import prepare_cell

    cfg = composed("method=beam", "decoding=sampling", "gpu=cpu")
    old = cell_id(cfg, version=1, aliases=False)  # such cells were measured under identity version 1
    assert old.startswith("beam__sampling__") and old != cell_id(cfg)
    assert prepare_cell(cfg, tmp_path)[1] == cell_id(cfg)  # nothing there: the new id
    (tmp_path / "cells" / old).mkdir(parents=True)
    assert prepare_cell(cfg, tmp_path)[1] == old  # measured before: found under the id it has
    # the stored alias config and the explicit request compare equal (check_reusable)
    assert identity.differences(cfg, composed("method=beam_sampling", "decoding=sampling", "gpu=cpu")) == []
