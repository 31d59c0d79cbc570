"""Issue 29.3: each summary stores its identity version; version 2 does not go through release 0.2's layout, and when
the current version changes, a cell measured under another one (no version in its summary = 1) keeps its id and is
reused. (New cells stay at version 1 while the ids of existing results are pinned: tests/config/test_identity.py.)"""
import json

import pytest

from harness.config import identity, legacy
from harness.results import store
from harness.run.runner import run_cell

CELL = {"method": {"name": "sd", "gamma": 2}, "decoding": {"name": "greedy", "temperature": 0.0, "top_k": 0,
                                                          "top_p": 1.0},
        "seed": 0, "max_new_tokens": 3,
        "pair": {"name": "tiny", "target": "tiny/target", "draft": "tiny/draft", "dtype": "float32", "device": "cpu"},
        "dataset": {"name": "kjv_heldout", "task": "text_continuation", "num_prompts": 1, "max_new_tokens": 48,
                    "stop": [], "prompt_words": 12},
        "gpu": {"name": "cpu"}, "energy": {"name": "off", "source": "none"},
        "runner": {"warmup_generations": 0, "warmup_new_tokens": 2, "progress": False}}


def test_version_2_ids_do_not_go_through_the_0_2_layout(monkeypatch):
    old = identity.cell_id(CELL, version=1)
    assert old == identity.cell_id(CELL)  # the current version is 1 (pinned ids)

    def refuse(cfg):
        raise AssertionError("layout_0_2 called for a version-2 id")

    monkeypatch.setattr(legacy, "layout_0_2", refuse)
    new = identity.cell_id(CELL, version=2)
    assert new != old and new.startswith("sd__greedy__tiny__kjv_heldout__cpu__s0__")


def test_a_cell_measured_under_version_1_keeps_its_id_when_the_version_changes(tmp_path, monkeypatch):
    old = run_cell(CELL, tmp_path)  # measured under version 1; then the summary loses the key, as 0.2's had none
    monkeypatch.setattr(identity, "IDENTITY_VERSION", 2)
    assert old.status == "done" and old.cell_id == identity.cell_id(CELL, version=1) != identity.cell_id(CELL)
    path = old.cell_dir / store.SUMMARY
    summary = json.loads(path.read_text())
    assert summary[identity.VERSION_KEY] == 1
    del summary[identity.VERSION_KEY]
    from harness.results import integrity  # resealed with the folder's key (a cell written without the key)

    path.write_text(json.dumps(integrity.seal(old.cell_dir, summary, integrity.folder_key(old.cell_dir.parent))))
    again = run_cell(CELL, tmp_path)
    assert again.status == "skipped" and again.cell_id == old.cell_id
    assert sorted(p.name for p in (tmp_path / "cells").iterdir() if p.is_dir()) == [old.cell_id]


@pytest.mark.parametrize("version", [1, 2])
def test_a_new_cell_stores_the_current_version(tmp_path, monkeypatch, version):
    monkeypatch.setattr(identity, "IDENTITY_VERSION", version)
    out = run_cell(CELL, tmp_path)
    assert out.status == "done" and out.cell_id == identity.cell_id(CELL)
    assert json.loads((out.cell_dir / store.SUMMARY).read_text())[identity.VERSION_KEY] == version
    with pytest.raises(identity.CellConflict):  # compared under its stored version
        bad = json.loads((out.cell_dir / store.SUMMARY).read_text())
        bad["config"]["seed"] = 5
        from harness.results import integrity

        sealed = integrity.seal(out.cell_dir, bad, integrity.folder_key(out.cell_dir.parent))
        (out.cell_dir / store.SUMMARY).write_text(json.dumps(sealed))
        identity.check_reusable(out.cell_dir, CELL)
