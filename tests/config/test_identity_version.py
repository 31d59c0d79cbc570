"""Issue 29.3: each summary stores its identity version; new cells are measured under version 2, which does not go
through release 0.2's layout, and a cell measured under another version (no version in its summary = 1) keeps its id
and is reused (the pinned ids of both versions: tests/config/test_identity.py; a results folder of both:
tests/run/test_mixed_identity.py)."""
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
    assert identity.IDENTITY_VERSION == 2 and old != identity.cell_id(CELL)  # new cells: version 2

    def refuse(cfg):
        raise AssertionError("layout_0_2 called for a version-2 id")

    monkeypatch.setattr(legacy, "layout_0_2", refuse)
    new = identity.cell_id(CELL, version=2)
    assert new != old and new.startswith("sd__greedy__tiny__kjv_heldout__cpu__s0__") and new == identity.cell_id(CELL)


def test_a_cell_measured_under_version_1_keeps_its_id_when_the_version_changes(tmp_path, monkeypatch):
    with monkeypatch.context() as m:  # measured under version 1; then the summary loses the key, as 0.2's had none
        m.setattr(identity, "IDENTITY_VERSION", 1)
        old = run_cell(CELL, tmp_path)
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


@pytest.mark.parametrize("current", [1, 2])
def test_version_of_names_the_version_of_each_id_whichever_is_current(monkeypatch, current):
    monkeypatch.setattr(identity, "IDENTITY_VERSION", current)
    v1, v2 = identity.cell_id(CELL, version=1), identity.cell_id(CELL, version=2)
    assert identity.version_of(v1, CELL) == 1 and identity.version_of(v2, CELL) == 2
    assert identity.known_ids(CELL)[0] == identity.cell_id(CELL) and set(identity.known_ids(CELL)) >= {v1, v2}
    alias = {**CELL, "method": {"name": "beam", "num_beams": 2}}  # measured before aliases were named by decoder
    old_alias = identity.cell_id(alias, version=1, aliases=False)
    found = identity.version_of(old_alias, alias)  # the current version where both give that id
    assert old_alias.startswith("beam__") and identity.cell_id(alias, version=found, aliases=False) == old_alias
    assert found == (current if old_alias == identity.cell_id(alias, version=2, aliases=False) else 1)
    with pytest.raises(ValueError, match="not the id of this config"):
        identity.version_of(v1, {**CELL, "seed": 1})
    with pytest.raises(ValueError, match="identity version 3 is unknown"):
        identity.cell_id(CELL, version=3)


def test_a_summary_of_an_unknown_identity_version_is_not_reused(tmp_path):
    out = run_cell(CELL, tmp_path)
    from harness.results import integrity

    summary = json.loads((out.cell_dir / store.SUMMARY).read_text())
    summary[identity.VERSION_KEY] = 3  # written by a later release
    sealed = integrity.seal(out.cell_dir, summary, integrity.folder_key(out.cell_dir.parent))
    (out.cell_dir / store.SUMMARY).write_text(json.dumps(sealed))
    with pytest.raises(identity.CellConflict, match="identity version 3, which this release does not know"):
        identity.check_reusable(out.cell_dir, CELL)
