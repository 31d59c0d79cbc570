"""A finished cell is reused only when what its records were computed from is still there (issue 31, class 5): its
data file (a user's file or a shipped ``tasks/`` file) and its weights. Otherwise it is a conflict, refused naming
``force=`` like a cell finished under another identity; ``force=<cell id>`` reruns it."""
import json
import shutil

import pytest

from cellproc import CELL, ROOT
from harness.config.identity import CellConflict
from harness.config.validation import validate_cell
from harness.models import resolve_model_path
from harness.results import store
from harness.run.runner import run_cell

ROWS = (ROOT / "tasks" / "kjv_heldout" / "heldout.jsonl").read_text().splitlines(True)[:3]


def _edit_row(path, i=1):
    rows = path.read_text().splitlines(True)
    row = json.loads(rows[i])
    row["text"] = "And another verse was put here " + row["text"]
    rows[i] = json.dumps(row) + "\n"
    path.write_text("".join(rows))


def _refused_then_forced(cfg, results, changed: str):
    """The finished cell is refused naming what changed and force=<id>, untouched; validation says so before
    anything loads; force=<id> reruns it."""
    with pytest.raises(CellConflict) as e:
        run_cell(cfg, results)
    cid = e.value.args[0].split()[1]
    assert changed in str(e.value) and f"force={cid}" in str(e.value)
    problems = validate_cell({**cfg, "results_dir": str(results)})
    assert any(changed in p.message and f"force={cid}" in p.message for p in problems), problems
    out = run_cell(cfg, results, force=cid)
    assert out.status == "done" and store.finished_state(out.cell_dir)[0] == "done"
    assert run_cell(cfg, results).status == "skipped"  # its inputs now match again


def _cfg(data, **dataset):
    return {**CELL, "dataset": {**CELL["dataset"], "path": str(data), "num_prompts": 3, **dataset}}


def test_a_finished_cell_whose_own_data_file_changed_is_not_reused_silently(tmp_path):
    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(ROWS))
    cfg = _cfg(data)
    out = run_cell(cfg, tmp_path / "r")
    assert out.status == "done"
    records = (out.cell_dir / store.RECORDS).read_bytes()
    assert run_cell(cfg, tmp_path / "r").status == "skipped"  # unchanged: reused
    _edit_row(data)
    with pytest.raises(CellConflict):
        run_cell(cfg, tmp_path / "r")
    assert (out.cell_dir / store.RECORDS).read_bytes() == records  # refused: the finished cell is untouched
    _refused_then_forced(cfg, tmp_path / "r", str(data))


def test_a_finished_cell_whose_shipped_task_file_changed_is_not_reused_silently(tmp_path, monkeypatch):
    import harness.tasks.base as base

    tasks = tmp_path / "tasks"
    (tasks / "kjv_heldout").mkdir(parents=True)
    (tasks / "kjv_heldout" / "heldout.jsonl").write_text("".join(ROWS))
    monkeypatch.setattr(base, "TASKS_DIR", tasks)
    cfg = _cfg("kjv_heldout/heldout.jsonl", sample_seed=3, num_prompts=2)
    assert run_cell(cfg, tmp_path / "r").status == "done"
    with (tasks / "kjv_heldout" / "heldout.jsonl").open("a") as f:  # a row added: the seeded sample changes
        f.write(ROWS[0])
    _edit_row(tasks / "kjv_heldout" / "heldout.jsonl", 0)
    _refused_then_forced(cfg, tmp_path / "r", "heldout.jsonl")


def test_a_finished_cell_whose_weights_changed_is_not_reused_silently(tmp_path):
    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(ROWS))
    model = tmp_path / "target"
    shutil.copytree(resolve_model_path("tiny/target"), model)
    cfg = {**_cfg(data), "pair": {**CELL["pair"], "target": str(model)}}
    assert run_cell(cfg, tmp_path / "r").status == "done"
    conf = json.loads((model / "config.json").read_text())
    conf["retrained_note"] = "same shapes, another checkpoint"
    (model / "config.json").write_text(json.dumps(conf))
    _refused_then_forced(cfg, tmp_path / "r", str(model))


def test_a_finished_cell_whose_data_file_is_gone_is_refused_naming_force(tmp_path):
    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(ROWS))
    cfg = _cfg(data)
    out = run_cell(cfg, tmp_path / "r")
    data.unlink()
    with pytest.raises(CellConflict) as e:
        run_cell(cfg, tmp_path / "r")
    assert f"force={out.cell_id}" in str(e.value) and str(data) in str(e.value)
