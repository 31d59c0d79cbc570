"""Interleaved comparison mode (issue 10 items 4 and 6): the methods of one pair × dataset × gpu run prompt
by prompt, each into its own cell; the records equal separate runs' (same outputs for the same seeds), the
summaries say which cells were interleaved, and a kill + rerun resumes every cell."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from cellproc import CELL, DETERMINISTIC_SUMMARY, ROOT, det, env, outcomes, partial_lines, start
from harness.results import store
from harness.run.runner import prepare_cell, run_cell, run_cells

SAMPLING = {"name": "sampling", "temperature": 1.0, "top_k": 20, "top_p": 0.9}
METHODS = [{"name": "ar_sampling"}, {"name": "sd", "gamma": 3}, {"name": "specinfer", "gamma": 2, "num_drafts": 2}]


def _cfgs(n=3):
    out = []
    for m in METHODS:
        cfg = json.loads(json.dumps(CELL))
        cfg.update(method=m, decoding=SAMPLING)
        cfg["dataset"]["num_prompts"] = n
        out.append(cfg)
    return out


def _compare_dirs(a, b):
    for name in sorted(p.name for p in (a / "cells").iterdir() if p.is_dir()):  # not the folder's .integrity.key
        ra, rb = store.read_records(a / "cells" / name), store.read_records(b / "cells" / name)
        assert [det(r) for r in ra] == [det(r) for r in rb], name
        sa, sb = (json.loads((d / "cells" / name / store.SUMMARY).read_text()) for d in (a, b))
        assert {k: sa.get(k) for k in DETERMINISTIC_SUMMARY} == {k: sb.get(k) for k in DETERMINISTIC_SUMMARY}


def test_interleaved_equals_separate_cells(tmp_path):
    cfgs = _cfgs()
    separate = [run_cell(c, tmp_path / "separate") for c in cfgs]
    together = run_cells(cfgs, tmp_path / "interleaved")
    assert [o.status for o in separate] == [o.status for o in together] == ["done"] * 3
    assert [o.cell_id for o in separate] == [o.cell_id for o in together]  # same cell ids
    _compare_dirs(tmp_path / "separate", tmp_path / "interleaved")
    for o in together:
        s = json.loads((o.cell_dir / store.SUMMARY).read_text())
        assert s["interleaved"] is True and s["interleave_group"] == [x.cell_id for x in together]
    for o in separate:
        assert json.loads((o.cell_dir / store.SUMMARY).read_text())["interleaved"] is False
    assert [o.status for o in run_cells(cfgs, tmp_path / "interleaved")] == ["skipped"] * 3

    from harness.analysis.load import read_results
    from harness.analysis import quality, paired
    from harness.report import console_table

    res = read_results(tmp_path / "interleaved")
    assert res.cells["interleaved"].all()
    table = console_table(quality.cell_summary(res.records, res.cells, n_resamples=50),
                          paired.paired_ratios(res.records, res.cells, n_resamples=50))
    assert list(table["interleaved"]) == ["yes"] * 3


def test_interleaved_order_rotates_per_prompt(tmp_path, monkeypatch):
    import harness.run.runner as runner

    order = []
    real = runner._one_prompt

    def spy(c, *a, **k):
        order.append((a[-1], c.cfg["method"]["name"]))  # (prompt index: the last argument, method)
        return real(c, *a, **k)
    monkeypatch.setattr(runner, "_one_prompt", spy)
    run_cells(_cfgs(3), tmp_path)
    names = [m["name"] for m in METHODS]
    assert [m for i, m in order if i == 0] == names
    assert [m for i, m in order if i == 1] == names[1:] + names[:1]
    assert [m for i, m in order if i == 2] == names[2:] + names[:2]
    assert [i for i, _ in order] == sorted(i for i, _ in order)  # prompt i by every method before i+1


@pytest.mark.slow  # whole processes / CLI sweeps (issue 21.10: `make test` in minutes; CI runs -m slow too)
def test_interleaved_survives_kill_and_rerun(tmp_path):
    cfgs = _cfgs(5)
    for c in cfgs:
        c["max_new_tokens"] = 12
    for c in cfgs:
        run_cell(c, tmp_path / "separate")
    results = tmp_path / "interleaved"
    dirs = [prepare_cell(c, results)[2] for c in cfgs]
    proc = start(cfgs, results)
    deadline = time.time() + 240
    while sum(partial_lines(d) for d in dirs) < 4 and proc.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    written = [partial_lines(d) for d in dirs]
    assert max(written) - min(written) <= 1  # interleaved: no method runs ahead by more than the prompt in flight
    assert all(o["status"] in ("done", "skipped") for o in outcomes(start(cfgs, results)))
    _compare_dirs(tmp_path / "separate", results)
    for d in dirs:
        s = json.loads((d / store.SUMMARY).read_text())
        assert s["interleaved"] and not (d / store.ERROR).exists()


@pytest.mark.slow  # whole processes / CLI sweeps (issue 21.10: `make test` in minutes; CI runs -m slow too)
def test_cli_sweep_with_runner_interleave_groups_methods(tmp_path):
    cmd = [sys.executable, "-m", "harness", "-m", "method=ar,sd", "decoding=greedy,sampling", "runner.interleave=true",
           f"results_dir={tmp_path}", "dataset.num_prompts=2", "max_new_tokens=4", "runner.progress=false",
           "gpu=cpu", "pair.device=cpu", "runner.warmup_new_tokens=2"]
    r = subprocess.run(cmd, env=env(), capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.count("interleaved comparison of 2 cells") == 2 and r.stdout.count("[done]") == 4
    summaries = [json.loads(p.read_text()) for p in tmp_path.glob("cells/*/summary.json")]
    assert len(summaries) == 4 and all(s["interleaved"] and len(s["interleave_group"]) == 2 for s in summaries)
    plan = subprocess.run([sys.executable, "-m", "harness", "plan", "--json", *cmd[4:]], env=env(),
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    rows = [json.loads(x) for x in plan.stdout.splitlines()]
    assert [r["unit"] for r in rows] == [0, 0, 1, 1] and {r["status"] for r in rows} == {"done"}


def test_a_summary_rebuilt_after_deletion_keeps_interleaved(tmp_path):
    """Issue 31.5: the summary of an interleaved cell deleted, the cell rerun alone: its records are taken back
    (nothing regenerated) and its summary still says what the records' run was."""
    cfgs = _cfgs(2)
    together = run_cells(cfgs, tmp_path)
    summary_path = together[1].cell_dir / store.SUMMARY
    before = json.loads(summary_path.read_text())
    assert before["interleaved"] is True
    summary_path.unlink()
    again = run_cell(cfgs[1], tmp_path)
    assert again.status == "done"
    after = json.loads(summary_path.read_text())
    assert after["interleaved"] is True and after["interleave_group"] == before["interleave_group"]
    assert after["segments"][-1]["from_index"] == before["prompts"]  # nothing regenerated
