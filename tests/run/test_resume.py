"""Resume within a cell at prompt granularity (issue 14 item 6) and verified skips (issue 15 item 8):
SIGKILL a cell at random points, rerun, and every prompt is written exactly once and the deterministic
fields (outputs, token and accept counts) equal an uninterrupted run's."""
import json
import random
import shutil
import signal
import time

import pytest

from cellproc import CELL, DETERMINISTIC_SUMMARY, det, outcomes, partial_lines, start
from harness.results import integrity, store
from harness.run.runner import prepare_cell, run_cell

SD = {**CELL, "method": {"name": "sd", "gamma": 3}, "decoding": {"name": "sampling", "temperature": 1.0,
                                                               "top_k": 20, "top_p": 0.9}}


def _reference(tmp_path, cfg):
    out = run_cell(cfg, tmp_path / "reference")
    assert out.status == "done"
    return store.read_records(out.cell_dir), json.loads((out.cell_dir / store.SUMMARY).read_text())


def _same_as_reference(cell_dir, ref_records, ref_summary):
    records = store.read_records(cell_dir)
    assert [r["index"] for r in records] == list(range(len(ref_records)))  # each prompt exactly once, in order
    assert [det(r) for r in records] == [det(r) for r in ref_records]
    summary = json.loads((cell_dir / store.SUMMARY).read_text())
    assert {k: summary.get(k) for k in DETERMINISTIC_SUMMARY} == {k: ref_summary.get(k) for k in DETERMINISTIC_SUMMARY}
    assert store.finished_state(cell_dir)[0] == "done"
    assert not (cell_dir / store.PARTIAL).exists() and not (cell_dir / store.ERROR).exists()
    return summary


@pytest.mark.slow  # whole processes / CLI sweeps (issue 21.10: `make test` in minutes; CI runs -m slow too)
def test_sigkill_at_random_points_then_rerun_writes_each_prompt_once(tmp_path):
    cfg = json.loads(json.dumps(SD))
    cfg["dataset"]["num_prompts"], cfg["max_new_tokens"] = 6, 16
    ref_records, ref_summary = _reference(tmp_path, cfg)
    rng = random.Random(14)
    results = tmp_path / "killed"
    cell_dir = prepare_cell(cfg, results)[2]
    kills, kept = 0, []
    for _ in range(3):  # three kills, each at a random moment after the cell has made some progress
        before = partial_lines(cell_dir)
        proc = start([cfg], results)
        deadline = time.time() + 240
        while partial_lines(cell_dir) <= before and proc.poll() is None and time.time() < deadline:
            time.sleep(0.01)
        time.sleep(rng.uniform(0.0, 0.2))
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            kills += 1
        proc.wait(timeout=60)
        kept.append(partial_lines(cell_dir))
        if (cell_dir / store.SUMMARY).exists():
            break
        assert partial_lines(cell_dir) >= before  # a kill never loses a record already written
    assert kills >= 1
    final = outcomes(start([cfg], results))
    assert final[0]["status"] in ("done", "skipped")
    summary = _same_as_reference(cell_dir, ref_records, ref_summary)
    if final[0]["status"] == "done":
        starts = [s["from_index"] for s in summary["segments"]]
        assert summary["resumed"] and starts[0] == 0 and starts == sorted(starts) and len(starts) >= 2


def _same_folder_key(source, target) -> None:
    """Files copied from another results folder stand for this folder's own: its key too (issue 31.5: checksums
    are keyed per results folder)."""
    target.mkdir(parents=True, exist_ok=True)
    shutil.copy(source / integrity.KEY_FILE, target / integrity.KEY_FILE)


def test_torn_last_line_is_dropped_and_the_prompt_rerun(tmp_path):
    ref_records, ref_summary = _reference(tmp_path, SD)
    results = tmp_path / "torn"
    cell_dir = prepare_cell(SD, results)[2]
    cell_dir.mkdir(parents=True)
    lines = (tmp_path / "reference" / "cells" / cell_dir.name / store.RECORDS).read_text().splitlines(True)
    (cell_dir / store.PARTIAL).write_text(lines[0] + lines[1] + lines[2][: len(lines[2]) // 2])
    digests = (tmp_path / "reference" / "cells" / cell_dir.name / store.DIGESTS).read_text().splitlines(True)
    (cell_dir / store.DIGESTS).write_text(digests[0] + digests[1])  # a kill mid-record: its checksum not yet written
    _same_folder_key(tmp_path / "reference" / "cells", cell_dir.parent)
    assert run_cell(SD, results).status == "done"
    summary = _same_as_reference(cell_dir, ref_records, ref_summary)
    assert [s["from_index"] for s in summary["segments"]] == [2]


def test_finished_cell_with_truncated_records_is_repaired_not_skipped(tmp_path, caplog):
    out = run_cell(SD, tmp_path)
    ref_records = store.read_records(out.cell_dir)
    ref_summary = json.loads((out.cell_dir / store.SUMMARY).read_text())
    path = out.cell_dir / store.RECORDS
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 40])  # truncated mid-line
    assert store.finished_state(out.cell_dir)[0] == "corrupt"
    with caplog.at_level("WARNING", logger="harness"):
        again = run_cell(SD, tmp_path)
    assert again.status == "done" and "repairing" in caplog.text
    _same_as_reference(out.cell_dir, ref_records, ref_summary)
    assert (out.cell_dir / "summary.invalid.json").exists()


def test_edited_record_changes_the_checksum(tmp_path):
    out = run_cell(SD, tmp_path)
    path = out.cell_dir / store.RECORDS
    path.write_text(path.read_text().replace('"index": 1', '"index": 1 ', 1))
    state, detail = store.finished_state(out.cell_dir)
    assert state == "corrupt" and "checksum" in detail


def test_records_published_without_a_summary_are_resumed(tmp_path):
    """A kill between publishing records.jsonl and writing summary.json: the rerun takes them back."""
    ref_records, ref_summary = _reference(tmp_path, SD)
    results = tmp_path / "nosummary"
    cell_dir = prepare_cell(SD, results)[2]
    cell_dir.mkdir(parents=True)
    ref_dir = tmp_path / "reference" / "cells" / cell_dir.name
    (cell_dir / store.RECORDS).write_bytes((ref_dir / store.RECORDS).read_bytes())
    (cell_dir / store.DIGESTS).write_bytes((ref_dir / store.DIGESTS).read_bytes())  # written with the records
    _same_folder_key(ref_dir.parent, cell_dir.parent)
    assert run_cell(SD, results).status == "done"
    summary = _same_as_reference(cell_dir, ref_records, ref_summary)
    assert summary["segments"][0]["from_index"] == len(ref_records)  # nothing regenerated


def test_garbage_in_the_partial_file_keeps_the_valid_prefix(tmp_path):
    cell_dir = tmp_path / "c"
    cell_dir.mkdir()
    good = [json.dumps({"index": i, "cell_id": "c"}) for i in range(3)]
    (cell_dir / store.PARTIAL).write_text("\n".join([good[0], good[1], "\x00\x00garbage", good[2]]) + "\n")
    key = integrity.folder_key(tmp_path, create=True)
    (cell_dir / store.DIGESTS).write_text("".join(integrity.line_mac(key, "c", i, g.encode()) + "\n"
                                                  for i, g in enumerate(good)))
    other = tmp_path / "d"
    other.mkdir()
    (other / store.PARTIAL).write_text(good[0] + "\n")  # a record of another cell is not kept
    (other / store.DIGESTS).write_text(integrity.line_mac(key, "d", 0, good[0].encode()) + "\n")
    assert store.RecordWriter.resume(other).next_index == 0
    w = store.RecordWriter.resume(cell_dir)
    assert w.next_index == 2
    w.write({"index": 2, "cell_id": "c"})
    w.abort()
    assert [json.loads(x)["index"] for x in (cell_dir / store.PARTIAL).read_text().splitlines()] == [0, 1, 2]


def test_report_names_a_cell_whose_records_were_truncated(tmp_path):
    from harness.analysis.load import read_results

    good = run_cell(CELL, tmp_path)
    bad = run_cell(SD, tmp_path)
    path = bad.cell_dir / store.RECORDS
    path.write_bytes(path.read_bytes()[:-25])
    res = read_results(tmp_path)
    assert list(res.cells["cell_id"]) == [good.cell_id]  # one bad cell never stops the others
    row = res.problems.iloc[0]
    assert row["cell_id"] == bad.cell_id and row["problem"] == "unreadable" and "records.jsonl" in row["error"]
