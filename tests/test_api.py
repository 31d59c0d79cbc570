"""Issue 33.7: the Python API runs cells through the same composition, validation and runner as ``harness`` and
returns DataFrames."""
import pytest

from harness import api
from harness.config.identity import cell_id
from harness.errors import ConfigError

FAST = dict(dataset={"num_prompts": 1}, max_new_tokens=2, gpu="cpu", pair={"device": "cpu"}, energy="off",
            runner={"progress": False, "warmup_generations": 0})


def test_keyword_arguments_become_the_command_line_s_overrides():
    assert api.overrides(method="sd", decoding="greedy", dataset={"name": "cnndm", "num_prompts": 2},
                         runner={"threads": 1}, seed=3, stop=["a b", "c"], judge=None) == [
        "method=sd", "decoding=greedy", "dataset=cnndm", "dataset.num_prompts=2", "runner.threads=1", "seed=3",
        "stop=['a b',c]", "judge=null"]
    assert api._method_params({"method": "sd", "gamma": 3, "seed": 1}) == {"method": {"name": "sd", "gamma": 3},
                                                                          "seed": 1}


def test_compose_is_the_cli_s_cell():
    from test_validation import composed

    cfg = api.compose(method="sd", decoding="greedy", dataset={"num_prompts": 2}, max_new_tokens=4)
    assert cell_id(cfg) == cell_id(composed("method=sd", "decoding=greedy", "dataset.num_prompts=2",
                                            "max_new_tokens=4"))


@pytest.mark.parametrize("via,cell,key", [("sweep", dict(method="sd", gamma=0), "method.gamma"),
                                          ("run", dict(method="nope"), "method"),
                                          ("run", dict(method="ar_greedy", decoding="sampling"), "method")])
def test_a_bad_cell_raises_config_error_before_anything_runs(tmp_path, via, cell, key):
    common = dict(FAST, results_dir=str(tmp_path / "r"))
    with pytest.raises(ConfigError, match=key):
        api.sweep([cell], **common) if via == "sweep" else api.run(**cell, **common)
    assert not (tmp_path / "r").exists()


def test_run_and_sweep_return_records_and_summaries_on_the_tiny_pair(tmp_path):
    results = str(tmp_path / "r")
    df = api.run("sd", "greedy", results_dir=results, **FAST)
    assert len(df) == 1 and df.attrs["outcomes"][0]["status"] == "done"
    summary = df.attrs["summary"]
    assert list(summary["cell_id"]) == [df["cell_id"][0]] and summary["tokens_per_s"][0] > 0
    assert df["new_tokens"][0] == 2
    both = api.sweep([{"method": "ar"}, {"method": "sd"}, {"method": "ar_greedy", "decoding": "sampling"}],
                     decoding="greedy", results_dir=results, **FAST)  # the last does not apply: skipped, as in -m
    assert [o["status"] for o in both.attrs["outcomes"]] == ["done", "skipped", "n/a"]
    assert set(both["cell_id"]) == {df["cell_id"][0], both.attrs["outcomes"][0]["cell_id"]}
    assert {m.split("(")[0] for m in both.attrs["summary"]["method"]} == {"ar_greedy", "sd"}


def test_harness_run_and_sweep_are_the_api(monkeypatch):
    """``harness.run`` is the run room, and calling it is :func:`harness.api.run`; ``harness.sweep`` likewise."""
    import harness

    seen = []
    monkeypatch.setattr(api, "run", lambda *a, **k: seen.append((a, k)) or "df")
    assert harness.run(method="sd", decoding="greedy") == "df" and seen == [((), {"method": "sd", "decoding": "greedy"})]
    assert harness.sweep is api.sweep
    from harness.run.runner import run_cell  # the room is still the package

    assert callable(run_cell)
