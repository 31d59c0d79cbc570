"""Plain sbatch arrays (issue 14 item 7): scripts/sbatch_array.sh submits one array task per unit of
`harness plan`; a fake `sbatch` on PATH runs the tasks as local processes, some concurrently and some
given the same cell twice. Every cell ends up finished once, no row lost or torn; `harness merge`
run concurrently from several task folders into one shared folder likewise."""
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from cellproc import ROOT, env
from harness.results import store
from harness.analysis.load import read_results

FAKE_SBATCH = r'''#!/usr/bin/env bash
# Fake sbatch: --array=LIST[%MAX] runs "$script" once per task id with SLURM_ARRAY_TASK_ID set, MAX at a
# time (local processes), and waits for them all. Every other flag is ignored.
set -u
spec=""; args=()
for a in "$@"; do
  case "$a" in --array=*) spec="${a#--array=}";; -*) ;; *) args+=("$a");; esac
done
echo "$@" >> "$FAKE_SBATCH_LOG"
list="${spec%%\%*}"; max=1; [[ "$spec" == *%* ]] && max="${spec##*%}"
ids=()
IFS=',' read -ra parts <<< "$list"
for p in "${parts[@]}"; do
  if [[ "$p" == *-* ]]; then for ((i=${p%-*}; i<=${p#*-}; i++)); do ids+=("$i"); done; else ids+=("$p"); fi
done
for extra in ${FAKE_SBATCH_DUPLICATE:-}; do ids+=("$extra"); done   # a task id given twice (resubmission)
rc=0
for id in "${ids[@]}"; do
  while (( $(jobs -rp | wc -l) >= max )); do wait -n || rc=1; done
  SLURM_ARRAY_TASK_ID=$id SLURM_ARRAY_JOB_ID=42 bash "${args[0]}" "${args[@]:1}" > "$FAKE_SBATCH_OUT/task_$id.$RANDOM.out" 2>&1 &
done
while (( $(jobs -rp | wc -l) > 0 )); do wait -n || rc=1; done
echo "Submitted batch job 42"
exit $rc
'''


def _fake_env(tmp_path, **extra):
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    sbatch = bindir / "sbatch"
    sbatch.write_text(FAKE_SBATCH)
    sbatch.chmod(sbatch.stat().st_mode | stat.S_IEXEC)
    (tmp_path / "out").mkdir(exist_ok=True)
    return dict(env(), PATH=f"{bindir}{os.pathsep}{os.environ['PATH']}", HARNESS=f"{sys.executable} -m harness",
                FAKE_SBATCH_LOG=str(tmp_path / "sbatch.log"), FAKE_SBATCH_OUT=str(tmp_path / "out"), **extra)


def _overrides(results):
    return ["method=ar,sd", "decoding=greedy", "seed=0,1", f"results_dir={results}", "dataset.num_prompts=3",
            "max_new_tokens=4", "runner.progress=false", "gpu=cpu", "pair.device=cpu", "runner.warmup_new_tokens=2"]


def _check(results, n_cells, prompts=3):
    res = read_results(results)
    assert len(res.cells) == n_cells and res.problems.empty, res.problems.to_dict("records")
    assert len(res.records) == n_cells * prompts
    assert not res.records.duplicated(["cell_id", "index"]).any()
    for d in (p for p in (Path(results) / "cells").iterdir() if p.is_dir()):  # not .integrity.key
        assert store.finished_state(d)[0] == "done" and not (d / store.ERROR).exists()
        assert len(json.loads((d / store.SUMMARY).read_text())["segments"]) == 1  # one task ran it


@pytest.mark.slow  # whole processes / CLI sweeps (issue 21.10: `make test` in minutes; CI runs -m slow too)
def test_sbatch_array_runs_every_unit_once_concurrently(tmp_path):
    results = tmp_path / "shared"
    e = _fake_env(tmp_path, MAX_PARALLEL="3", FAKE_SBATCH_DUPLICATE="0 1")
    r = subprocess.run(["bash", str(ROOT / "scripts" / "sbatch_array.sh"), *_overrides(results)], env=e, cwd=ROOT,
                       capture_output=True, text=True, timeout=900)
    logs = "\n".join(p.read_text() for p in (tmp_path / "out").iterdir())
    assert r.returncode == 0, r.stdout + r.stderr + logs
    assert "--array=0,1,2,3%3" in (tmp_path / "sbatch.log").read_text()
    _check(results, 4)
    assert logs.count("[done]") == 4 and logs.count("[busy]") + logs.count("[skipped]") == 2
    again = subprocess.run(["bash", str(ROOT / "scripts" / "sbatch_array.sh"), *_overrides(results)], env=e, cwd=ROOT,
                           capture_output=True, text=True, timeout=300)
    assert "already done" in again.stdout


@pytest.mark.slow
def test_sbatch_array_interleaved_units_and_local_results_merge(tmp_path):
    results = tmp_path / "shared"
    e = _fake_env(tmp_path, MAX_PARALLEL="2", LOCAL_RESULTS=str(tmp_path / "scratch"))
    over = [*_overrides(results), "runner.interleave=true"]
    r = subprocess.run(["bash", str(ROOT / "scripts" / "sbatch_array.sh"), *over], env=e, cwd=ROOT,
                       capture_output=True, text=True, timeout=900)
    logs = "\n".join(p.read_text() for p in (tmp_path / "out").iterdir())
    assert r.returncode == 0, r.stdout + r.stderr + logs
    assert "--array=0,1%2" in (tmp_path / "sbatch.log").read_text()  # one unit per seed: ar and sd interleaved
    _check(results, 4)
    cells = read_results(results).cells
    assert cells["interleaved"].all()


@pytest.mark.slow  # whole processes / CLI sweeps (issue 21.10: `make test` in minutes; CI runs -m slow too)
def test_concurrent_merges_never_tear_or_duplicate(tmp_path):
    from harness.run.runner import run_cell
    from cellproc import CELL

    srcs = []
    for k in range(3):  # three task folders with overlapping cells (seed 0 in all, seed k in one)
        src = tmp_path / f"task{k}"
        for seed in {0, k}:
            assert run_cell(dict(CELL, seed=seed), src).status == "done"
        srcs.append(src)
    dest = tmp_path / "merged"
    procs = [subprocess.Popen([sys.executable, "-m", "harness", "merge", str(s), "--into", str(dest)], env=env(),
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for s in srcs + srcs[::-1]]
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    _check(dest, 3, prompts=CELL["dataset"]["num_prompts"])
    assert not list(dest.glob("cells/*/.*.tmp"))
