"""Issue 29.3: a results folder holding cells measured under identity version 1 (releases 0.2/0.3) next to new cells
(version 2). A sweep started under version 1 and rerun under version 2 resumes: finished cells are skipped under the
ids they have, a killed one resumes in its folder, only the missing cells run (under version-2 ids); ``force=``
names a cell by any of its ids; ``harness merge`` keeps one measurement per cell; the report pairs a method with its
baseline whatever version each was measured under; ``harness plan`` shows the ids the cells have."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.config import identity
from harness.results import store
from harness.run.runner import prepare_cell, run_cell

ROOT = Path(__file__).resolve().parents[2]
BASE = {"seed": 0, "max_new_tokens": 3, "decoding": {"name": "sampling", "temperature": 1.0, "top_k": 20, "top_p": 0.9},
        "pair": {"name": "tiny", "target": "tiny/target", "draft": "tiny/draft", "dtype": "float32", "device": "cpu"},
        "dataset": {"name": "kjv_heldout", "task": "text_continuation", "num_prompts": 2, "max_new_tokens": 48,
                    "stop": [], "prompt_words": 12},
        "gpu": {"name": "cpu"}, "energy": {"name": "off", "source": "none"},
        "runner": {"warmup_generations": 0, "warmup_new_tokens": 2, "progress": False}}
AR = {**BASE, "method": {"name": "ar_sampling"}}
SD = {**BASE, "method": {"name": "sd", "gamma": 2}}


def _ids(cfg) -> tuple[str, str]:
    v1, v2 = identity.cell_id(cfg, version=1), identity.cell_id(cfg, version=2)
    assert v1 != v2  # the cells of these tests have different ids under the two versions
    return v1, v2


def _under_v1(monkeypatch, cfg, results):
    with monkeypatch.context() as m:  # release 0.2/0.3 measured it; afterwards this release's version again
        m.setattr(identity, "IDENTITY_VERSION", 1)
        out = run_cell(cfg, results)
    assert out.status == "done" and out.cell_id == identity.cell_id(cfg, version=1)
    return out


def _kill_midway(cell_dir: Path, keep: int = 1) -> None:
    """Make a finished cell look killed after ``keep`` prompts: no summary, the first records in the partial file."""
    lines = (cell_dir / store.RECORDS).read_text().splitlines(True)
    digests = (cell_dir / store.DIGESTS).read_text().splitlines(True)
    for name in (store.SUMMARY, store.RECORDS, store.SEGMENTS):
        (cell_dir / name).unlink(missing_ok=True)
    (cell_dir / store.PARTIAL).write_text("".join(lines[:keep]))
    (cell_dir / store.DIGESTS).write_text("".join(digests[:keep]))


def _folders(results: Path) -> list[str]:
    return sorted(p.name for p in (results / "cells").iterdir() if p.is_dir())


def test_a_sweep_started_under_version_1_resumes_under_version_2(tmp_path, monkeypatch):
    ar1, ar2 = _ids(AR)
    sd1, sd2 = _ids(SD)
    _under_v1(monkeypatch, AR, tmp_path)
    _kill_midway(_under_v1(monkeypatch, SD, tmp_path).cell_dir)  # killed after its first prompt
    assert [prepare_cell(c, tmp_path)[1] for c in (AR, SD)] == [ar1, sd1]
    ar, sd = run_cell(AR, tmp_path), run_cell(SD, tmp_path)
    assert (ar.status, ar.cell_id) == ("skipped", ar1)  # finished: not rerun
    assert (sd.status, sd.cell_id) == ("done", sd1)  # resumed in its folder, at its second prompt
    summary = json.loads((sd.cell_dir / store.SUMMARY).read_text())
    assert summary[identity.VERSION_KEY] == 1 and [s["from_index"] for s in summary["segments"]] == [1]
    assert [r["index"] for r in store.read_records(sd.cell_dir)] == [0, 1]
    new = run_cell({**AR, "seed": 1}, tmp_path)  # a cell the sweep had not reached: measured under version 2
    assert new.status == "done" and new.cell_id == identity.cell_id({**AR, "seed": 1}, version=2)
    assert json.loads((new.cell_dir / store.SUMMARY).read_text())[identity.VERSION_KEY] == 2
    assert _folders(tmp_path) == sorted([ar1, sd1, new.cell_id])  # no second folder for a cell
    assert ar2 not in _folders(tmp_path) and sd2 not in _folders(tmp_path)


def test_force_names_a_cell_by_any_of_its_ids(tmp_path, monkeypatch):
    v1, v2 = _ids(AR)
    old = _under_v1(monkeypatch, AR, tmp_path / "old")
    again = run_cell(AR, tmp_path / "old", force=v1)  # the id it has: rerun in its folder, keeping the id
    assert (again.status, again.cell_id) == ("done", v1) and _folders(tmp_path / "old") == [v1]
    assert json.loads((old.cell_dir / store.SUMMARY).read_text())[identity.VERSION_KEY] == 1
    assert run_cell(AR, tmp_path / "new").cell_id == v2
    assert run_cell(AR, tmp_path / "new", force=v1).status == "done"  # the id the user knew from release 0.3
    assert run_cell(AR, tmp_path / "new", force=v2).status == "done"
    assert run_cell(AR, tmp_path / "new", force="some__other__id").status == "skipped"


def test_force_with_an_old_id_is_no_unknown_id(tmp_path):
    from harness.config.validation import validate_cells

    v1, _ = _ids(AR)
    cfg = {**AR, "results_dir": str(tmp_path), "force": v1}
    assert [p for p in validate_cells([("ar", cfg)]) if p.key == "force"] == []
    cfg = {**AR, "results_dir": str(tmp_path), "force": v1 + "x"}
    assert [p.key for p in validate_cells([("ar", cfg)]) if p.key == "force"] == ["force"]


def test_merge_keeps_one_measurement_per_cell_across_versions(tmp_path, monkeypatch):
    from harness.run.plan import merge

    v1, v2 = _ids(AR)
    _under_v1(monkeypatch, AR, tmp_path / "a")  # release 0.3's folder
    assert run_cell(AR, tmp_path / "b").cell_id == v2  # the same cell measured again, now
    run_cell(SD, tmp_path / "b")
    counts = merge([tmp_path / "a", tmp_path / "b"], tmp_path / "m")
    assert counts["merged"] == 2 and counts["present"] == 1
    assert _folders(tmp_path / "m") == sorted([v1, identity.cell_id(SD)])
    counts = merge([tmp_path / "b", tmp_path / "a"], tmp_path / "m2")  # the other order: the version-2 one kept
    assert counts["merged"] == 2 and counts["present"] == 1 and v2 in _folders(tmp_path / "m2")
    assert run_cell(AR, tmp_path / "m").status == "skipped"  # found under the id it was merged with


def test_the_report_pairs_cells_of_different_versions(tmp_path, monkeypatch):
    from harness.analysis.load import read_results
    from harness.analysis.paired import match_baselines

    _under_v1(monkeypatch, AR, tmp_path)  # the baseline measured by release 0.3
    sd = run_cell(SD, tmp_path)  # a new method cell
    assert sd.cell_id == identity.cell_id(SD, version=2)
    cells = read_results(tmp_path).cells
    pairs = match_baselines(cells).set_index("cell_id")
    assert pairs.loc[sd.cell_id, "baseline_cell_id"] == identity.cell_id(AR, version=1)
    # the same pairing as two cells measured under one version (the comparison reads stored configs, not ids)
    run_cell(AR, tmp_path / "v2")
    run_cell(SD, tmp_path / "v2")
    same = match_baselines(read_results(tmp_path / "v2").cells).set_index("cell_id")
    assert same.loc[sd.cell_id, "baseline_cell_id"] == identity.cell_id(AR, version=2)
    assert list(cells.sort_values("method_name")["match_json"]) == \
        list(read_results(tmp_path / "v2").cells.sort_values("method_name")["match_json"])


def test_plan_shows_the_id_a_cell_has_and_groups_it_with_its_siblings(tmp_path):
    from harness.run.plan import compose_jobs, plan_rows

    jobs = compose_jobs(["-m", "method=dsbd", "decoding=sampling_dsbd", "max_new_tokens=2,3", "gpu=cpu",
                         "pair.device=cpu", f"results_dir={tmp_path}"])
    old = identity.cell_id(prepare_cell(jobs[0], tmp_path)[0], version=1)
    assert old.startswith("dsbd__sampling_seed000__")  # release 0.2's preset name in a version-1 id
    (tmp_path / "cells" / old).mkdir(parents=True)  # a cell that release began
    rows = plan_rows(jobs)
    assert [r["cell_id"] for r in rows] == [old, identity.cell_id(prepare_cell(jobs[1], tmp_path)[0])]
    assert rows[1]["cell_id"].startswith("dsbd__sampling_dsbd__")
    assert [r["differs"] for r in rows] == ["max_new_tokens=2", "max_new_tokens=3"]


def _cli(results: Path, sweep: Path, version: int | None, *overrides: str) -> subprocess.CompletedProcess:
    """``harness -m ...``, measuring new cells under identity ``version`` (None: this release's)."""
    code = ("import sys; from harness.config import identity; v = sys.argv.pop(1); "
            "identity.IDENTITY_VERSION = int(v) if v != 'None' else identity.IDENTITY_VERSION; "
            "from harness.cli.app import main; sys.argv[0] = 'harness'; main()")
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-c", code, str(version), "-m", "decoding=sampling", "dataset.num_prompts=2",
                           "max_new_tokens=3", "runner.progress=false", "runner.warmup_generations=0",
                           "pair.device=cpu", "gpu=cpu", "energy=off", f"results_dir={results}",
                           f"hydra.sweep.dir={sweep}", *overrides],
                          capture_output=True, text=True, env=env, timeout=600, cwd=ROOT)


@pytest.mark.slow  # whole processes / CLI sweeps (issue 21.10: `make test` in minutes; CI runs -m slow too)
def test_the_cli_reruns_nothing_of_a_sweep_measured_under_version_1(tmp_path):
    results = tmp_path / "r"
    first = _cli(results, tmp_path / "s1", 1, "method=ar_sampling,sd")
    assert first.returncode == 0 and first.stdout.count("[done]") == 2, first.stdout + first.stderr
    old = _folders(results)
    summaries = {p: (results / "cells" / p / store.SUMMARY).read_bytes() for p in old}
    assert all(json.loads(s)[identity.VERSION_KEY] == 1 for s in summaries.values())
    again = _cli(results, tmp_path / "s2", None, "method=ar_sampling,sd", "seed=0,1")
    assert again.returncode == 0, again.stdout + again.stderr
    assert again.stdout.count("[skipped]") == 2 and again.stdout.count("[done]") == 2, again.stdout
    new = sorted(set(_folders(results)) - set(old))
    assert len(new) == 2 and all("__s1__" in n for n in new)
    assert all(json.loads((results / "cells" / n / store.SUMMARY).read_text())[identity.VERSION_KEY] == 2 for n in new)
    assert {p: (results / "cells" / p / store.SUMMARY).read_bytes() for p in old} == summaries  # untouched
