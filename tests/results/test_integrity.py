"""Results that cannot lie (issue 20 items 4-7): a repair never blesses edited data, one bad cell never stops
the others, a resume notices changed inputs, and config values never make paths outside the results folder."""
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from cellproc import CELL, ROOT, env
from harness.results import store
from harness.analysis.load import read_results
from harness.run.runner import prepare_cell, run_cell, run_cells
from harness.config.validation import validate_cell

SD = {**CELL, "method": {"name": "sd", "gamma": 3}, "max_new_tokens": 8,
      "decoding": {"name": "sampling", "temperature": 1.0, "top_k": 20, "top_p": 0.9},
      "dataset": {**CELL["dataset"], "num_prompts": 3}}
DET = ("index", "example_id", "output_text", "new_tokens", "accepted_tokens", "rounds", "accept_lengths")


def _det(records):
    return [{k: r.get(k) for k in DET} for r in records]


def _lines(path):
    return path.read_text().splitlines(True)


# ---- item 4: a repair that blesses edited data -------------------------------------------------------------

def test_an_edited_record_is_rerun_and_kept_aside_never_blessed(tmp_path, caplog):
    out = run_cell(SD, tmp_path)
    ref = store.read_records(out.cell_dir)
    path = out.cell_dir / store.RECORDS
    lines = _lines(path)
    edited = json.loads(lines[1])
    edited["acceptance_rate"], edited["output_text"] = 0.99, "an edited output"  # in range, so only the checksum sees it
    path.write_text(lines[0] + json.dumps(edited) + "\n" + "".join(lines[2:]))
    assert store.finished_state(out.cell_dir)[0] == "corrupt"
    with caplog.at_level("WARNING", logger="harness"):
        assert run_cell(SD, tmp_path).status == "done"
    records = store.read_records(out.cell_dir)
    assert "an edited output" not in path.read_text()  # the edited record was rerun, not kept
    assert _det(records) == _det(ref)
    assert "an edited output" in (out.cell_dir / "records.invalid.jsonl").read_text()  # kept aside
    assert (out.cell_dir / "summary.invalid.json").exists()
    summary = json.loads((out.cell_dir / store.SUMMARY).read_text())
    assert summary["segments"][-1]["from_index"] == 1  # record 0 verified by its own checksum and kept
    assert store.finished_state(out.cell_dir)[0] == "done"


def test_an_out_of_range_record_under_a_recomputed_checksum_is_never_done(tmp_path):
    """Someone (or an old repair) wrote a fresh checksum over an acceptance rate of 3.16: range checks catch it."""
    out = run_cell(SD, tmp_path)
    path = out.cell_dir / store.RECORDS
    lines = _lines(path)
    forged = json.loads(lines[0])
    forged["acceptance_rate"] = 3.16
    path.write_text(json.dumps(forged) + "\n" + "".join(lines[1:]))
    summary_path = out.cell_dir / store.SUMMARY
    summary = json.loads(summary_path.read_text())
    summary["records_sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
    summary_path.write_text(json.dumps(summary))
    state, detail = store.finished_state(out.cell_dir)
    assert state == "corrupt" and "acceptance_rate=3.16" in detail
    res = read_results(tmp_path)
    assert res.cells.empty and "acceptance_rate" in res.problems.iloc[0]["error"]
    assert run_cell(SD, tmp_path).status == "done"
    assert all(r["acceptance_rate"] <= 1 for r in store.read_records(out.cell_dir))


def test_record_ranges():
    from harness.results.record import record_problems

    good = {"index": 0, "new_tokens": 8, "acceptance_rate": 0.5, "rounds": 2, "accept_lengths": [3, 5],
            "rejected_rounds": 1, "wall_time_s": 0.1, "output_ppl": 3.0, "energy.coverage": None}
    assert record_problems(good, max_new_tokens=8) == []
    for bad, word in (({"acceptance_rate": 3.16}, "acceptance_rate"), ({"new_tokens": -1}, "new_tokens"),
                      ({"new_tokens": 9}, "max_new_tokens"), ({"wall_time_s": -2.0}, "wall_time_s"),
                      ({"rejected_rounds": 3}, "rejected_rounds"), ({"accept_lengths": [3]}, "accept_lengths"),
                      ({"output_ppl": 0.5}, "output_ppl"), ({"target_calls": 1.5}, "target_calls")):
        problems = record_problems({**good, **bad}, max_new_tokens=8)
        assert problems and word in problems[0], (bad, problems)


# ---- item 5: one bad cell must not stop a sweep -------------------------------------------------------------

@pytest.mark.parametrize("content", [b'{"cell_id": "x", "prom', b"[]", b"null"])
def test_a_broken_summary_is_repaired_on_its_own(tmp_path, content):
    good = run_cell(CELL, tmp_path)
    bad = run_cell(SD, tmp_path)
    (bad.cell_dir / store.SUMMARY).write_bytes(content)
    assert validate_cell({**SD, "results_dir": str(tmp_path)}) == []  # not a configuration problem
    outcomes = run_cells([SD], tmp_path) + run_cells([CELL], tmp_path)
    assert [o.status for o in outcomes] == ["done", "skipped"]
    assert (bad.cell_dir / "summary.invalid.json").read_bytes() == content
    assert store.finished_state(bad.cell_dir)[0] == "done" and store.finished_state(good.cell_dir)[0] == "done"


@pytest.mark.parametrize("content", ["[]", "null", "[1]", '"x"'])
@pytest.mark.parametrize("mode", ["flock", "excl"])
def test_a_lock_file_without_an_owner_is_stale(tmp_path, content, mode):
    (tmp_path / store.LOCK).write_text(content)
    old = time.time() - 3600
    os.utime(tmp_path / store.LOCK, (old, old))
    lock = store.CellLock(tmp_path, mode=mode).acquire()
    assert store.lock_state(tmp_path) in (None, {"host": lock.owner_info()["host"], "pid": os.getpid(),
                                                 "since": pytest.approx(time.time(), abs=60)})
    lock.release()


def test_force_is_scoped_to_corrupt_or_named_cells(tmp_path):
    from harness.run.cell import forced

    good, conflicting = run_cell(CELL, tmp_path), run_cell(SD, tmp_path)
    summary_path = conflicting.cell_dir / store.SUMMARY
    summary = json.loads(summary_path.read_text())
    summary["config"]["max_new_tokens"] = 99  # measured under another identity (a collision): written, and
    store.write_summary(conflicting.cell_dir, summary)  # sealed, by a harness (a hand edit is corruption: below)
    problems = validate_cell({**SD, "results_dir": str(tmp_path)})
    assert problems and f"force={conflicting.cell_id}" in str(problems[0])
    for force in ("corrupt", conflicting.cell_id, [conflicting.cell_id]):
        assert validate_cell({**SD, "results_dir": str(tmp_path), "force": force}) == []
    outcomes = run_cells([CELL], tmp_path, force="corrupt") + run_cells([SD], tmp_path, force="corrupt")
    assert [o.status for o in outcomes] == ["skipped", "done"]  # the good cell is never rerun
    assert json.loads((conflicting.cell_dir / "summary.invalid.json").read_text())["config"]["max_new_tokens"] == 99
    assert forced(True, "a", "done") and not forced(False, "a", "corrupt") and forced(["a"], "a", "done")
    assert not forced("corrupt", "a", "done") and forced("corrupt", "a", "conflict")


def test_a_merge_killed_midway_leaves_no_temporary_files_behind(tmp_path):
    src = tmp_path / "src"
    out = run_cell(CELL, src)
    dest_cell = tmp_path / "dest" / "cells" / out.cell_id
    dest_cell.mkdir(parents=True)
    for name in (f".{store.RECORDS}.merge.999.tmp", f".{store.SUMMARY}.abc123.tmp"):  # a killed merger's and writer's
        (dest_cell / name).write_text("torn")
    r = subprocess.run([sys.executable, "-m", "harness", "merge", str(src), "--into", str(tmp_path / "dest")],
                       env=env(), cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert not list(dest_cell.glob(".*.tmp")) and store.finished_state(dest_cell)[0] == "done"


# ---- item 6: resume notices changed inputs -------------------------------------------------------------------

def _fail_at_prompt(monkeypatch, index):
    """The cell fails at prompt ``index`` (a crash mid-cell: its earlier records stay, for a resume)."""
    import harness.run.runner as runner

    real, calls = runner._one_prompt, []

    def flaky(*a, **k):
        calls.append(1)
        if len(calls) == index + 1:
            raise RuntimeError("killed")
        return real(*a, **k)
    monkeypatch.setattr(runner, "_one_prompt", flaky)
    return lambda: monkeypatch.setattr(runner, "_one_prompt", real)


def test_resume_refuses_changed_prompts_naming_the_file(tmp_path, monkeypatch):
    data = tmp_path / "prompts.jsonl"
    src = (ROOT / "tasks" / "kjv_heldout" / "heldout.jsonl").read_text().splitlines(True)[:3]
    data.write_text("".join(src))
    cfg = {**CELL, "dataset": {**CELL["dataset"], "path": str(data), "num_prompts": 3}}
    restore = _fail_at_prompt(monkeypatch, 2)
    assert run_cell(cfg, tmp_path / "r").status == "failed"  # records 0 and 1 written, then the cell failed
    restore()
    row = json.loads(src[1])
    row["text"] = "And a different verse was put here " + row["text"]
    data.write_text(src[0] + json.dumps(row) + "\n" + src[2])
    out = run_cell(cfg, tmp_path / "r")
    assert out.status == "failed" and "InputsChanged" in out.error and str(data) in out.error
    assert not (out.cell_dir / store.SUMMARY).exists()
    assert (out.cell_dir / store.PARTIAL).read_text().count("\n") == 2  # the old records untouched, not mixed
    data.write_text("".join(src))  # restored: the resume goes on
    assert run_cell(cfg, tmp_path / "r").status == "done"


def test_resume_refuses_changed_weights(tmp_path, monkeypatch):
    from harness.models import TINY_PAIR_DIR

    draft = tmp_path / "draft"
    shutil.copytree(TINY_PAIR_DIR / "draft", draft)
    cfg = {**SD, "pair": {**SD["pair"], "draft": str(draft)}}
    restore = _fail_at_prompt(monkeypatch, 1)
    assert run_cell(cfg, tmp_path / "r").status == "failed"
    restore()
    config = json.loads((draft / "config.json").read_text())
    (draft / "config.json").write_text(json.dumps({**config, "retrained": True}))
    out = run_cell(cfg, tmp_path / "r")
    assert out.status == "failed" and "weights" in out.error and str(draft) in out.error


# ---- item 7: paths from config values ----------------------------------------------------------------------

@pytest.mark.parametrize("key,value", [("pair", "org/model"), ("dataset", "../../escape"), ("gpu", "../x"),
                                       ("decoding", "a/../../b")])
def test_cell_folders_stay_one_level_under_results(tmp_path, key, value):
    cfg = json.loads(json.dumps(SD))
    cfg[key]["name"] = value
    _, cid, cell_dir = prepare_cell(cfg, tmp_path)
    assert "/" not in cid and cell_dir.parent == tmp_path / "cells"
    assert prepare_cell(SD, tmp_path)[1] != cid  # the sanitised name is still its own cell


def test_a_slashed_pair_name_is_seen_by_the_report(tmp_path):
    cfg = {**CELL, "pair": {**CELL["pair"], "name": "org/model"}}
    out = run_cell(cfg, tmp_path)
    assert out.status == "done" and out.cell_dir.parent == tmp_path / "cells"
    res = read_results(tmp_path)
    assert list(res.cells["cell_id"]) == [out.cell_id] and res.cells["pair"].iloc[0] == "org/model"


@pytest.mark.slow  # whole processes / CLI sweeps (issue 21.10: `make test` in minutes; CI runs -m slow too)
def test_a_sweep_with_a_traversing_name_writes_only_under_its_results_folder(tmp_path):
    work = tmp_path / "a" / "b"
    work.mkdir(parents=True)
    r = subprocess.run([sys.executable, "-m", "harness", "-m", "method=ar", "dataset.name=../../../escaped",
                        "dataset.num_prompts=1", "max_new_tokens=2", "runner.progress=false", "runner.warmup_new_tokens=2",
                        "results_dir=res"], env=env(), cwd=work, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    results = work / "res"
    outside = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p != results and results not in p.parents)
    assert outside == ["a", "a/b"]  # nothing written beside the results folder (Hydra's job folder included)
    [cell] = [p for p in (work / "res" / "cells").iterdir() if p.is_dir()]
    assert "escaped" in cell.name and store.finished_state(cell)[0] == "done"


# ---- issue 31.5: checksums bound to the cell and the results folder ------------------------------------------

def _edit_with_checksums(cell_dir, index: int = 1) -> None:
    """Edit record ``index`` in range and recompute everything a plain checksum scheme has: its line in
    records.sha256 (SHA-256 of the line) and the summary's records_sha256."""
    path = cell_dir / store.RECORDS
    lines = _lines(path)
    edited = json.loads(lines[index])
    edited["output_text"] = "an edited output"
    lines[index] = json.dumps(edited) + "\n"
    path.write_text("".join(lines))
    digests = (cell_dir / store.DIGESTS).read_text().splitlines()
    digests[index] = hashlib.sha256(lines[index].rstrip("\n").encode()).hexdigest()
    (cell_dir / store.DIGESTS).write_text("\n".join(digests) + "\n")
    summary = json.loads((cell_dir / store.SUMMARY).read_text())
    summary["records_sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
    (cell_dir / store.SUMMARY).write_text(json.dumps(summary))


def test_a_record_edited_with_its_checksums_is_detected_and_the_report_shows_it(tmp_path):
    from harness.analysis.load import read_results

    out = run_cell(SD, tmp_path)
    _edit_with_checksums(out.cell_dir)
    state, detail = store.finished_state(out.cell_dir)
    assert state == "corrupt" and "integrity_hmac" in detail
    results = read_results(tmp_path)
    assert results.problems.astype(str).apply(lambda row: "integrity_hmac" in " ".join(map(str, row)), axis=1).any(), \
        results.problems.to_dict("records")
    assert run_cell(SD, tmp_path).status == "done"  # repaired: the edited record rerun
    assert "an edited output" not in (out.cell_dir / store.RECORDS).read_text()
    assert store.finished_state(out.cell_dir)[0] == "done"


def test_a_partial_record_edited_with_its_checksum_line_is_rerun(tmp_path):
    out = run_cell(SD, tmp_path)
    os.replace(out.cell_dir / store.RECORDS, out.cell_dir / store.PARTIAL)  # as a kill before the summary leaves it
    (out.cell_dir / store.SUMMARY).unlink()
    path = out.cell_dir / store.PARTIAL
    lines = _lines(path)
    edited = json.loads(lines[1])
    edited["output_text"] = "an edited output"
    lines[1] = json.dumps(edited) + "\n"
    path.write_text("".join(lines))
    digests = (out.cell_dir / store.DIGESTS).read_text().splitlines()
    digests[1] = hashlib.sha256(lines[1].rstrip("\n").encode()).hexdigest()
    (out.cell_dir / store.DIGESTS).write_text("\n".join(digests) + "\n")
    kept = store.recover_partial(out.cell_dir)
    assert len(kept) == 1  # record 0 only: record 1's line no longer carries the folder key's HMAC


def test_checksums_bind_records_to_their_cell_and_position(tmp_path):
    """Two cells of one results folder: a record and its checksum line copied from another cell (or another
    position) do not verify."""
    out = run_cell(SD, tmp_path)
    lines, digests = _lines(out.cell_dir / store.RECORDS), (out.cell_dir / store.DIGESTS).read_text().splitlines()
    swapped = [lines[1], lines[0], *lines[2:]]
    (out.cell_dir / store.RECORDS).write_text("".join(swapped))
    (out.cell_dir / store.DIGESTS).write_text("\n".join([digests[1], digests[0], *digests[2:]]) + "\n")
    os.replace(out.cell_dir / store.RECORDS, out.cell_dir / store.PARTIAL)
    (out.cell_dir / store.SUMMARY).unlink()
    assert store.recover_partial(out.cell_dir) == []


def test_cells_finished_before_the_folder_had_a_key_are_adopted_as_they_are(tmp_path):
    from harness.results import integrity

    out = run_cell(SD, tmp_path)
    summary = json.loads((out.cell_dir / store.SUMMARY).read_text())
    summary.pop(integrity.SEAL)
    (out.cell_dir / store.SUMMARY).write_text(json.dumps(summary))
    (out.cell_dir.parent / integrity.KEY_FILE).unlink()  # an older harness's folder
    assert store.finished_state(out.cell_dir)[0] == "done"  # nothing to check against
    integrity.folder_key(out.cell_dir.parent, create=True, adopt=store.adopt_legacy)
    assert store.finished_state(out.cell_dir)[0] == "done"
    assert json.loads((out.cell_dir / store.SUMMARY).read_text())[integrity.ADOPTED] is True
    _edit_with_checksums(out.cell_dir)
    assert store.finished_state(out.cell_dir)[0] == "corrupt"
