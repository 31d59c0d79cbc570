"""Runner: records and summaries, crash-safe writes, resume after a killed sweep, failure isolation."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.results import store
from harness.report import load_results
from harness.run.runner import cell_id, run_cell

CELL = {"method": {"name": "ar_greedy"}, "seed": 0, "max_new_tokens": 6,
        "pair": {"name": "tiny", "target": "tiny/target", "draft": "tiny/draft", "dtype": "float32", "device": "cpu"},
        "dataset": {"name": "kjv_heldout", "task": "text_continuation", "num_prompts": 3, "max_new_tokens": 48,
                    "stop": [], "prompt_words": 12},
        "gpu": {"name": "cpu"}, "runner": {"warmup_generations": 1, "warmup_new_tokens": 2, "progress": False}}


def test_cell_writes_records_and_summary_then_skips(tmp_path):
    out = run_cell(CELL, tmp_path)
    assert out.status == "done"
    records = store.read_records(out.cell_dir)
    assert [r["index"] for r in records] == [0, 1, 2]
    assert all(0 < r["new_tokens"] <= 6 and r["wall_time_s"] > 0 and r["output_ppl"] > 1 for r in records)
    assert all(r["energy.source"] == "none" and r["energy.reason"] for r in records)  # CPU: NaN energy + reason
    summary = json.loads((out.cell_dir / store.SUMMARY).read_text())
    assert summary["prompts"] == 3 and summary["new_tokens"] == sum(r["new_tokens"] for r in records)
    assert summary["tokens_per_s"] == pytest.approx(summary["new_tokens"] / summary["wall_time_s"])
    for key in ("torch", "transformers", "git_sha", "device_type"):
        assert key in summary["env"]
    assert summary["params"] == {} and summary["method_name"] == "ar_greedy" and summary["config"]["seed"] == 0
    assert summary["lossless"] is True
    assert not (out.cell_dir / store.PARTIAL).exists()
    again = run_cell(CELL, tmp_path)
    assert again.status == "skipped" and again.cell_id == out.cell_id


def test_cell_id_depends_on_everything_that_defines_the_cell():
    other = json.loads(json.dumps(CELL))
    other["method"] = {"name": "beam_search", "width": 2}
    seeded = dict(CELL, seed=1)
    ids = {cell_id(CELL), cell_id(other), cell_id(seeded)}
    assert len(ids) == 3
    assert cell_id(CELL).startswith("ar_greedy__tiny__kjv_heldout__cpu__s0__")


def test_failing_cell_is_recorded_and_does_not_raise(tmp_path, monkeypatch):
    """A runtime failure (here: the model crashes) is recorded in error.json and does not raise."""
    from harness.methods import MethodSpec

    def crash(spec, pair, **kwargs):
        raise RuntimeError("the model crashed")
    monkeypatch.setattr(MethodSpec, "build", crash)
    out = run_cell(CELL, tmp_path)
    assert out.status == "failed" and "the model crashed" in out.error
    err = json.loads((out.cell_dir / store.ERROR).read_text())
    assert err["kind"] == "RuntimeError" and "Traceback" in err["traceback"]
    cells, records, failures = load_results(tmp_path)
    assert cells.empty and records.empty and list(failures.cell_id) == [out.cell_id]


def test_config_error_raises_and_writes_nothing(tmp_path):
    """Issue 15 item 2: a configuration error is never a failed-cell record (the CLI finds it before any
    model loads; the API raises it)."""
    from harness.errors import ConfigError

    bad = dict(CELL, method={"name": "beam_sampling", "temperature": 0.0})
    with pytest.raises(ConfigError, match="beam_search"):
        run_cell(bad, tmp_path)
    assert not (tmp_path / "cells").exists() or not any(p.is_dir() for p in (tmp_path / "cells").iterdir())


def test_partial_cells_are_never_read(tmp_path):
    cell_dir = tmp_path / "cells" / "x"
    cell_dir.mkdir(parents=True)
    (cell_dir / store.PARTIAL).write_text('{"index": 0}\n{"ind')  # a torn line from a kill
    cells, records, _ = load_results(tmp_path)
    assert cells.empty and records.empty


def test_atomic_write_leaves_old_file_on_failure(tmp_path):
    path = tmp_path / "a.json"
    store.atomic_write_json(path, {"v": 1})

    class Boom:
        pass
    with pytest.raises(TypeError):
        store.atomic_write_json(path, {"v": Boom()})
    assert json.loads(path.read_text()) == {"v": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["a.json"]


def _harness(args, results):
    env = dict(os.environ, HYDRA_FULL_ERROR="1")
    return [sys.executable, "-m", "harness", *args, f"results_dir={results}", "dataset.num_prompts=4",
            "max_new_tokens=16", "runner.progress=false", "gpu=cpu", "pair.device=cpu"], env


@pytest.mark.slow  # whole processes / CLI sweeps (issue 21.10: `make test` in minutes; CI runs -m slow too)
def test_killed_sweep_resumes_without_duplicates(tmp_path):
    """Kill a 3-cell sweep while its second cell runs; the rerun finishes it, with each row once."""
    cmd, env = _harness(["-m", "method=ar_greedy,beam_search,ar_sampling", "decoding=greedy"], tmp_path)
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    cells = tmp_path / "cells"
    deadline = time.time() + 240
    killed = False
    while time.time() < deadline and proc.poll() is None:
        done = list(cells.glob("*/summary.json")) if cells.exists() else []
        partial = [p for p in cells.glob("*/records.partial.jsonl")] if cells.exists() else []
        if len(done) == 1 and partial:
            proc.send_signal(signal.SIGKILL)
            killed = True
            break
        time.sleep(0.05)
    proc.wait(timeout=60)
    assert killed, "sweep finished before it could be killed mid-cell"
    assert len(list(cells.glob("*/summary.json"))) == 1
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("[skipped]") == 1 and r.stdout.count("[done]") == 2
    cells_df, records_df, failures = load_results(tmp_path)
    assert len(cells_df) == 3 and failures.empty
    assert len(records_df) == 3 * 4
    assert not records_df.duplicated(["cell_id", "index"]).any()
    assert not list(cells.glob("*/records.partial.jsonl"))


def test_report_writes_parquet_and_plot(tmp_path):
    from harness.report import main

    run_cell(CELL, tmp_path)
    run_cell(dict(CELL, method={"name": "beam_search", "width": 2}), tmp_path)
    assert main(["--results", str(tmp_path), "--plots", str(tmp_path / "plots")]) == 0
    import pandas as pd

    from harness.report.cli import default_out

    cells = pd.read_parquet(default_out(tmp_path) / "cells.parquet")  # the report's folder, not the results'
    assert not (tmp_path / "cells.parquet").exists()
    assert set(cells.method) == {"ar_greedy", "beam_search(width=2, length_penalty=1.0, early_stopping=False)"}
    assert (tmp_path / "plots" / "tokens_per_s.png").stat().st_size > 1000


def test_out_of_memory_in_one_cell_is_recorded_and_the_next_cell_runs(tmp_path, monkeypatch):
    import torch

    from harness.methods import MethodSpec

    real_build = MethodSpec.build

    def build(spec, pair, **kwargs):
        if spec.method == "beam_search":
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real_build(spec, pair, **kwargs)
    monkeypatch.setattr(MethodSpec, "build", build)
    oom = run_cell(dict(CELL, method={"name": "beam_search", "width": 8}), tmp_path)
    assert oom.status == "failed" and json.loads((oom.cell_dir / store.ERROR).read_text())["kind"] == "oom"
    assert run_cell(CELL, tmp_path).status == "done"
    monkeypatch.setattr(MethodSpec, "build", real_build)
    retry = run_cell(dict(CELL, method={"name": "beam_search", "width": 8}), tmp_path)  # a rerun retries it
    assert retry.status == "done" and not (retry.cell_dir / store.ERROR).exists()


def test_decoder_warmup_generations_are_run_unrecorded_and_untimed(tmp_path, monkeypatch):
    """Issue 22 item 4 (runner part): max(runner.warmup_generations, decoder.warmup_generations()) generations
    run before the first measured prompt (the Q-learning γ policy's 25 warm-up trials, adaptive App. C.1), none
    of them recorded or timed."""
    import harness.run.runner as runner
    from harness.methods import MethodSpec

    calls = []
    real_build = MethodSpec.build

    def build(spec, pair, **kw):
        decoder = real_build(spec, pair, **kw)
        real_generate = decoder.generate
        decoder.warmup_generations = lambda: 4

        def generate(ids, max_new, **k):
            calls.append(max_new)
            return real_generate(ids, max_new, **k)
        decoder.generate = generate
        return decoder
    monkeypatch.setattr(MethodSpec, "build", build)
    out = run_cell(CELL, tmp_path)
    records = store.read_records(out.cell_dir)
    warmup = CELL["runner"]["warmup_new_tokens"]
    assert calls == [warmup] * 4 + [CELL["max_new_tokens"]] * len(records)  # 4 > runner.warmup_generations=1
    assert len(records) == CELL["dataset"]["num_prompts"]
    quiet = SimpleNamespace(warmup_generations=lambda: 0)  # the contract's default: the runner's count
    assert runner.warmup_generations(runner.runner_config(CELL), quiet) == 1
