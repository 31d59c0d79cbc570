"""Issue 15 items 2, 3 and 8: every cell is validated before any model loads (exit 2, each problem with its
key and valid range, nothing written); values that silently meant something else are refused; silent or
unhelpful failures are now explicit."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.tasks.base import Example
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from harness.results import store
from harness.analysis.load import read_cell, read_results
from harness.cli.app import CONF_DIR
from harness.config.groups import register_configs
from harness.errors import ConfigError
from harness.models import check_model_ref
from harness.run.runner import run_cell
from harness.tasks import load_task
from harness.config.validation import EXIT_CONFIG, Problem, validate_cell, validate_cells, writable_problem


def composed(*overrides) -> dict:
    register_configs()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return OmegaConf.to_container(compose(config_name="config", overrides=list(overrides)), resolve=True)


@pytest.fixture
def no_weights(monkeypatch):
    """Validation never loads weights: any attempt fails the test."""
    import harness.models as models

    def refuse(*a, **k):
        raise AssertionError("validation loaded model weights")
    monkeypatch.setattr(models, "load_model", refuse)


# The list (item 2 and 3), each with the key the message must name and a piece of the valid range.
BAD = [
    (("method=sd", "method.gamma=0"), "method.gamma", ">= 1"),
    (("method=sd", "method.gamma=-1"), "method.gamma", ">= 1"),
    (("decoding.temperature=-1",), "decoding.temperature", ">= 0"),
    (("decoding.top_p=1.5",), "decoding.top_p", "(0, 1]"),
    (("decoding.top_k=-3",), "decoding.top_k", ">= 0"),
    (("method=beam", "method.width=0"), "method.width", ">= 1"),
    (("method=specinfer", "method.num_drafts=0"), "method.num_drafts", ">= 1"),
    (("max_new_tokens=0",), "max_new_tokens", ">= 1"),
    (("max_new_tokens=-3",), "max_new_tokens", ">= 1"),
    (("max_new_tokens=5000",), "max_new_tokens", "valid 1..1022"),
    (("dataset.num_prompts=0",), "dataset.num_prompts", "null (all prompts"),
    (("dataset.num_prompts=-2",), "dataset.num_prompts", ">= 1"),
    (("dataset.max_new_tokens=0",), "dataset.max_new_tokens", ">= 1"),
    (("runner.warmup_new_tokens=0",), "runner.warmup_new_tokens", ">= 1"),
    (("runner.threads=0",), "runner.threads", ">= 1"),
    (("pair.target=/nonexistent/dir",), "pair.target", "directory not found"),
    (("dataset.path=/nonexistent/file.jsonl",), "dataset.path", "not found"),
]


@pytest.mark.parametrize("overrides,key,valid", BAD, ids=lambda v: " ".join(v) if isinstance(v, tuple) else None)
def test_invalid_values_are_found_before_any_model_loads(overrides, key, valid, tmp_path, no_weights):
    cfg = composed(*overrides, f"results_dir={tmp_path / 'r'}")
    problems = validate_cell(cfg)
    assert problems, f"{overrides} passed validation"
    assert any(p.key == key and valid in str(p) for p in problems), [str(p) for p in problems]
    assert not (tmp_path / "r").exists()


def test_valid_default_cells_pass(no_weights):
    for overrides in [(), ("method=sd",), ("method=beam", "decoding=greedy"), ("method=dsbd", "dataset=squad"),
                      ("method=mcsd", "dataset=mt_bench", "max_new_tokens=4")]:
        assert validate_cell(composed(*overrides)) == [], overrides


def test_not_applicable_is_an_error_alone_and_skipped_in_a_sweep(no_weights):
    cfg = composed("method=ar_greedy", "decoding=sampling")
    assert [p.key for p in validate_cell(cfg, single=True)] == ["method"]
    assert validate_cell(cfg, single=False) == []


def test_method_needing_a_draft_on_a_pair_without_one(no_weights):
    cfg = composed("method=sd", "pair.draft=null")
    assert any(p.key == "pair.draft" and "needs a draft" in p.message for p in validate_cell(cfg))


@pytest.mark.parametrize("overrides", [("method=pld",), ("method=lookahead",),
                                       ("method=hf_assisted", "method.prompt_lookup_num_tokens=10")])
def test_draft_free_methods_run_on_a_pair_without_a_draft(no_weights, overrides):
    problems = validate_cell(composed(*overrides, "pair.draft=null"))
    assert not any(p.key == "pair.draft" for p in problems), problems


def test_a_sweep_reports_each_problem_once_with_its_cell(no_weights):
    cells = [(f"max_new_tokens={m} method.gamma={g}", composed("method=sd", f"max_new_tokens={m}", f"method.gamma={g}"))
             for m in (4, 0) for g in (2, 0)]
    problems = validate_cells(cells)
    assert sorted(p.key for p in problems) == ["max_new_tokens", "method.gamma"]
    assert all(p.cell for p in problems)


def _cli(*args, cwd=None):
    env = dict(os.environ, HYDRA_FULL_ERROR="1")
    return subprocess.run([sys.executable, "-m", "harness", *args], capture_output=True, text=True, env=env,
                          timeout=600, cwd=cwd)


def test_cli_single_run_exits_2_and_writes_nothing(tmp_path):
    r = _cli("method=sd", "method.gamma=0", f"results_dir={tmp_path / 'r'}")
    assert r.returncode == EXIT_CONFIG, r.stdout + r.stderr
    assert "method.gamma" in r.stderr and ">= 1" in r.stderr and "Traceback" not in r.stderr
    assert "error.json" not in r.stderr + r.stdout
    assert not (tmp_path / "r").exists()


@pytest.mark.slow  # whole processes / CLI sweeps (issue 21.10: `make test` in minutes; CI runs -m slow too)
def test_cli_sweep_validates_every_cell_before_the_first_loads(tmp_path):
    """The bad cell is the last of the sweep; nothing runs, nothing is written (not even Hydra's folders)."""
    r = _cli("-m", "method=sd,specinfer", "method.gamma=2,-1", "max_new_tokens=4,0", f"results_dir={tmp_path / 'r'}")
    assert r.returncode == EXIT_CONFIG, r.stdout + r.stderr
    assert "method.gamma" in r.stderr and "max_new_tokens" in r.stderr and "[done]" not in r.stdout
    assert not (tmp_path / "r").exists()
    # a cell that does not even compose (a key the method lacks) is reported the same way
    r = _cli("-m", "method=sd,ar_greedy", "method.gamma=2,3", f"results_dir={tmp_path / 'r'}")
    assert r.returncode == EXIT_CONFIG and "method.gamma" in r.stderr and "method=ar_greedy" in r.stderr
    assert not (tmp_path / "r").exists()
    # (a non-sweep override that does not fit the default method fails in Hydra's own composition of the
    # primary config, before anything: Hydra names the key)
    r = _cli("-m", "method=sd,ar_greedy", "method.gamma=2", f"results_dir={tmp_path / 'r'}")
    assert r.returncode != 0 and "method.gamma" in r.stderr and not (tmp_path / "r").exists()


def test_cli_cfg_job_still_prints_an_invalid_config():
    r = _cli("method=sd", "method.gamma=0", "--cfg", "job")
    assert r.returncode == 0, r.stderr
    assert OmegaConf.create(r.stdout).method.gamma == 0


# ---- item 8: silent or unhelpful failures --------------------------------------------------------------------

def test_results_dir_that_cannot_be_written(tmp_path, no_weights):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert "not a directory" in writable_problem(blocker / "results")
    problems = validate_cell(composed(f"results_dir={blocker / 'results'}"))
    assert [p.key for p in problems] == ["results_dir"]
    r = _cli(f"results_dir={blocker / 'results'}", "dataset.num_prompts=1")
    assert r.returncode == EXIT_CONFIG and "results_dir" in r.stderr and "Traceback" not in r.stderr


def test_read_only_results_folder_is_named(tmp_path, monkeypatch):
    """As root every folder is writable; simulate a read-only mount through os.access."""
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: False if Path(p) == tmp_path else real(p, mode))
    assert "not writable" in writable_problem(tmp_path / "results")


CELL = {"method": {"name": "ar_greedy"}, "seed": 0, "max_new_tokens": 3,
        "pair": {"name": "tiny", "target": "tiny/target", "draft": "tiny/draft", "dtype": "float32", "device": "cpu"},
        "dataset": {"name": "kjv_heldout", "task": "text_continuation", "num_prompts": 2, "max_new_tokens": 48,
                    "stop": [], "prompt_words": 12},
        "gpu": {"name": "cpu"}, "runner": {"warmup_generations": 0, "warmup_new_tokens": 2, "progress": False}}


def test_failure_to_write_error_json_does_not_stop_the_sweep(tmp_path, monkeypatch):
    from harness.methods import MethodSpec

    real_write = store.atomic_write_json

    def full_disk(path, obj):
        if Path(path).name == store.ERROR:
            raise OSError(28, "No space left on device")
        return real_write(path, obj)

    def crash(spec, pair, **kwargs):
        raise RuntimeError("the model crashed")
    monkeypatch.setattr(store, "atomic_write_json", full_disk)
    monkeypatch.setattr(MethodSpec, "build", crash)
    out = run_cell(CELL, tmp_path)  # must not raise
    assert out.status == "failed" and "crashed" in out.error
    assert not (out.cell_dir / store.ERROR).exists()
    assert run_cell({**CELL, "seed": 1}, tmp_path).status == "failed"  # and the next cell runs


def test_long_prompt_is_truncated_by_the_rule_and_flagged(tmp_path):
    """A 2,700-token prompt on the 1,024-position tiny pair: the last (1024 - max_new - lookahead) tokens are
    kept, the record says so, and the perplexity is computed inside the context."""
    from harness.analysis.load import read_cell as validate_store

    words = (Path(__file__).parents[2] / "tasks" / "kjv_heldout" / "heldout.jsonl").read_text().split()
    data = tmp_path / "long.jsonl"
    data.write_text(json.dumps({"text": " ".join((words * 3)[:2400]), "citation": "long"}) + "\n")
    cfg = {**CELL, "method": {"name": "sd", "gamma": 3, "temperature": 0.0},
           "dataset": {**CELL["dataset"], "path": str(data), "prompt_words": 2300}}
    out = run_cell(cfg, tmp_path)
    assert out.status == "done", out.error
    (long,) = store.read_records(out.cell_dir)
    assert long["prompt_truncated"] is True and long["prompt_tokens_original"] > 2000
    assert long["prompt_tokens"] == 1024 - 3 - (3 + 1)
    assert long["output_ppl"] > 1 and long["new_tokens"] == 3
    validate_store(out.cell_dir)  # the record set passes the store's reader


def test_corrupted_partial_file_is_replaced_on_rerun(tmp_path):
    """A crash on a full disk leaves a torn, binary records.partial.jsonl: the report calls it incomplete,
    and the rerun starts the cell afresh."""
    from harness.run.runner import cell_id

    cell_dir = tmp_path / "cells" / cell_id(CELL)
    cell_dir.mkdir(parents=True)
    (cell_dir / store.PARTIAL).write_bytes(b'{"index": 0, "cell_id": "x"}\n{"index": 1, "cell\xff\xfe\x00')
    problems = read_results(tmp_path).problems
    assert list(problems.problem) == ["incomplete"]
    out = run_cell(CELL, tmp_path)
    assert out.status == "done"
    records = store.read_records(out.cell_dir)
    assert [r["index"] for r in records] == [0, 1]
    assert all(r["prompt_truncated"] is False and r["prompt_tokens_original"] == r["prompt_tokens"] for r in records)
    assert not (out.cell_dir / store.PARTIAL).exists()


def test_report_skips_a_cell_with_bad_json_and_names_the_file(tmp_path):
    from harness.report import build_report

    good = run_cell(CELL, tmp_path)
    bad = run_cell({**CELL, "seed": 1}, tmp_path)
    path = bad.cell_dir / store.RECORDS
    lines = path.read_text().splitlines()
    path.write_text(lines[0] + "\n" + lines[1][:40] + "\n")  # truncated mid-line
    with pytest.raises(ValueError, match=r"records\.jsonl, line 2"):
        read_cell(bad.cell_dir)
    out = build_report(tmp_path, tmp_path / "report", n_resamples=100)
    assert list(out["cells"].cell_id) == [good.cell_id]
    flags = out["flags"]
    row = flags[flags["cell_id"].astype(str) == bad.cell_id]
    assert not row.empty and "records.jsonl, line 2" in " ".join(row["detail"].astype(str))
    assert "records.jsonl, line 2" in (tmp_path / "report" / "report.md").read_text()


# ---- datasets -------------------------------------------------------------------------------------------------

def test_non_utf8_dataset_file_is_named(tmp_path, no_weights):
    data = tmp_path / "bad.jsonl"
    data.write_bytes(b'{"text": "caf\xe9 au lait is a drink made with coffee and hot milk in equal parts"}\n')
    with pytest.raises(ConfigError, match=f"{data}.*not valid UTF-8"):
        load_task({"task": "text_continuation", "name": "mine", "path": str(data), "prompt_words": 3}).examples()
    problems = validate_cell(composed(f"dataset.path={data}"))
    assert any(p.key == "dataset.path" and str(data) in p.message for p in problems)


def test_malformed_jsonl_dataset_is_named(tmp_path):
    data = tmp_path / "bad.jsonl"
    data.write_text('{"text": "one two three four"}\n{"text": "torn\n')
    with pytest.raises(ConfigError, match=f"{data}.*not valid JSON"):
        load_task({"task": "text_continuation", "name": "mine", "path": str(data), "prompt_words": 2}).examples()


def test_dataset_with_no_prompts(tmp_path, no_weights):
    data = tmp_path / "short.jsonl"
    data.write_text('{"text": "too short"}\n')
    problems = validate_cell(composed(f"dataset.path={data}"))
    assert any(p.key == "dataset" and "no prompts" in p.message for p in problems)


def test_empty_prompt_after_tokenization_is_refused(monkeypatch, no_weights):
    """A tokenizer without BOS turns an empty prompt into no ids at all: refused before any model loads."""
    import harness.config.validation as validation

    class NoBos:
        chat_template = None

        def __call__(self, text, add_special_tokens=True):
            return {"input_ids": [] if not text.strip() else [1, 2]}

    cache = validation._Cache()
    cache.tokenizers["tiny/target"] = NoBos()
    # every prompt is the empty string (dataset.prompt_words=0 is refused by its range since issue 31.7)
    monkeypatch.setattr("harness.tasks.text_continuation.TextContinuation.load",
                        lambda self: [Example(id="0", prompt="", reference="x")])
    cfg = composed()
    problems = validate_cell(cfg, cache)
    assert any(p.key == "dataset" and "empty after tokenization" in p.message for p in problems)


def test_num_prompts_null_means_all_and_zero_is_refused():
    task = load_task({"task": "text_continuation", "name": "kjv", "num_prompts": None})
    assert len(task.examples()) > 12
    with pytest.raises(ConfigError, match="num_prompts must be an integer >= 1, or null"):
        load_task({"task": "text_continuation", "name": "kjv", "num_prompts": 0})


def test_missing_local_pair_directory_is_not_a_hub_id(tmp_path, monkeypatch):
    (tmp_path / "models").mkdir()
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="directory not found: models/mine"):
        check_model_ref("pair.target", "models/mine")
    with pytest.raises(ConfigError, match="directory not found"):
        check_model_ref("pair.target", "./mine")


def test_problem_text_names_key_once():
    assert str(Problem("pair.target", "pair.target: directory not found: x")) == "pair.target: directory not found: x"
    assert str(Problem("max_new_tokens", "must be >= 1", "max_new_tokens=0")) == \
        "max_new_tokens: must be >= 1 [max_new_tokens=0]"


def test_truncated_prompts_are_flagged_in_measurement_quality():
    import pandas as pd

    from harness.analysis.checks import measurement_flags

    records = pd.DataFrame({"cell_id": ["a", "a", "b"], "prompt_truncated": [True, False, False]})
    flags = measurement_flags(pd.DataFrame(columns=["cell_id"]), records, pd.DataFrame(columns=["cell_id", "problem",
                                                                                                "kind", "error"]))
    cut = flags[flags["kind"] == "prompts truncated to the context"]
    assert list(cut["cell_id"]) == ["a"] and "1 prompt(s)" in cut["detail"].iloc[0]
