"""Issue 24.8: the cluster path on a real SLURM (a one-node cluster started here: tests/slurmcluster.py).

* scripts/sbatch_array.sh on an experiment's tiny twin, end to end: one array task per unit, each reading
  its unit from the plan file written once at submission, writing node-local scratch and merging into the
  shared folder (`harness merge`); every cell finished once; a second submission has nothing to do;
* the submitit launcher (`hydra/launcher=slurm_requeue`) runs a sweep's cells as SLURM jobs;
* a task preempted mid-cell (`scontrol requeue`) is requeued by SLURM and resumes at its next prompt, every
  prompt written once;
* a submitit job that keeps hitting its time limit is requeued `max_num_timeout` times, each time resuming
  at its next prompt, and then stops;
* sbatch_array.sh with an invalid override says so (exit 2) and submits nothing.

Skipped with the reason where the cluster cannot start (not root, slurm-wlm/munge not installed:
`make setup-slurm`). The fake-`sbatch` tests (tests/test_sbatch.py) stay the fast unit tests.
"""
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

import slurmcluster
from cellproc import ROOT, env
from harness.results import store
from harness.analysis.load import read_results

pytestmark = pytest.mark.slow
SMALL = ["dataset.num_prompts=2", "max_new_tokens=8", "runner.progress=false", "gpu=cpu", "pair.device=cpu",
         "energy=off", "runner.warmup_new_tokens=2"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    reason = slurmcluster.unavailable()
    if reason:
        pytest.skip(reason)
    c = slurmcluster.start()
    yield c
    c.stop()
    print("\n".join(c.log[-200:]))


def _env(cluster, **extra):
    return {**env(), **cluster.env, "HARNESS": f"{sys.executable} -m harness", **extra}


def _submit(cluster, cwd, overrides, **extra):
    r = subprocess.run(["bash", str(ROOT / "scripts" / "sbatch_array.sh"), *overrides], cwd=cwd,
                       env=_env(cluster, **extra), capture_output=True, text=True, timeout=900)
    cluster.log.append(f"$ sbatch_array.sh {' '.join(overrides)}\n{r.stdout}{r.stderr}")
    return r


def _job_id(text: str) -> str:
    return re.search(r"Submitted batch job (\d+)", text).group(1)


def _wait_for(predicate, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(1)
    raise TimeoutError(what)


def _lines(path: Path) -> int:
    return sum(1 for line in path.read_bytes().split(b"\n")[:-1] if line.strip()) if path.exists() else 0


def test_sbatch_array_runs_an_experiments_tiny_twin_with_local_scratch_and_merge(cluster, tmp_path):
    shared = tmp_path / "shared"
    overrides = ["+experiment=mtad_tables_tiny", *SMALL[:2], f"results_dir={shared}"]
    plan = subprocess.run([sys.executable, "-m", "harness", "plan", "--json", *overrides], cwd=tmp_path,
                          env=_env(cluster), capture_output=True, text=True, timeout=600)
    rows = [json.loads(line) for line in plan.stdout.splitlines() if line.startswith("{")]
    units, cells = sorted({row["unit"] for row in rows}), len(rows)
    assert len(units) >= 2 and cells > len(units), plan.stdout + plan.stderr  # interleaved groups: cells per unit
    r = _submit(cluster, tmp_path, overrides, MAX_PARALLEL="2", LOCAL_RESULTS=str(tmp_path / "scratch" / "r"),
                SBATCH_ARGS=f"--cpus-per-task=1 --output={tmp_path}/task-%A_%a.out")
    assert r.returncode == 0, r.stdout + r.stderr
    job = _job_id(r.stdout)
    assert f"submitting units {','.join(map(str, units))}" in r.stdout and "plan: " in r.stdout
    tasks = cluster.wait_done(job)
    print(f"array job {job}: " + ", ".join(f"{t['JobId']}[{t.get('ArrayTaskId')}] {t['JobState']}" for t in tasks))
    assert len(tasks) == len(units) and all(t["JobState"] == "COMPLETED" for t in tasks), tasks
    logs = "".join(p.read_text() for p in tmp_path.glob("task-*.out"))
    merged = [int(n) for n in re.findall(r"merged (\d+)", logs)]
    assert logs.count("[done]") == cells and sum(merged) == cells  # each task merged its cells from the scratch folder
    res = read_results(shared)
    assert len(res.cells) == cells and res.problems.empty and len(res.records) == 2 * cells
    assert not res.records.duplicated(["cell_id", "index"]).any()
    again = _submit(cluster, tmp_path, overrides)
    assert again.returncode == 0 and "already done" in again.stdout, again.stdout + again.stderr


def test_submitit_launcher_runs_the_sweep_as_slurm_jobs(cluster, tmp_path):
    results = tmp_path / "results"
    r = subprocess.run([sys.executable, "-m", "harness", "-m", "hydra/launcher=slurm_requeue",
                        "hydra.launcher.partition=debug", "hydra.launcher.gpus_per_node=null",
                        "hydra.launcher.cpus_per_task=1", "hydra.launcher.timeout_min=10", "hydra.launcher.mem_gb=null",
                        "method=ar,sd", "decoding=greedy", *SMALL, f"results_dir={results}"],
                       cwd=tmp_path, env=_env(cluster), capture_output=True, text=True, timeout=900)
    cluster.log.append(f"$ harness -m hydra/launcher=slurm_requeue ...\n{r.stdout}{r.stderr}")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    res = read_results(results)
    assert sorted(res.cells["method_name"]) == ["ar_greedy", "sd"] and res.problems.empty
    submitted = sorted({p.name for p in (results / "_hydra").rglob(".submitit/*") if p.is_dir()})
    print(f"submitit jobs: {submitted}")
    assert submitted


def test_preempted_task_resumes_at_its_next_prompt(cluster, tmp_path):
    shared = tmp_path / "shared"
    overrides = ["method=ar_sampling", "dataset.num_prompts=12", "max_new_tokens=48", *SMALL[2:],
                 f"results_dir={shared}"]
    r = _submit(cluster, tmp_path, overrides, SBATCH_ARGS=f"--cpus-per-task=1 --output={tmp_path}/task-%A_%a.out")
    assert r.returncode == 0, r.stdout + r.stderr
    job = _job_id(r.stdout)
    partial = _wait_for(lambda: next(shared.glob(f"cells/*/{store.PARTIAL}"), None), 300, "no partial records")
    _wait_for(lambda: _lines(partial) >= 3, 300, "fewer than 3 prompts written")
    written = _lines(partial)
    cluster.run("scontrol", "requeue", f"{job}_0")  # preemption: SLURM kills the task and queues it again
    print(f"job {job}: requeued after {written} prompts")
    tasks = cluster.wait_done(job, timeout=900)
    assert tasks[0]["JobState"] == "COMPLETED" and int(tasks[0]["Restarts"]) == 1, tasks
    cell = partial.parent
    summary = json.loads((cell / store.SUMMARY).read_text())
    segments = summary["segments"]
    print(f"segments: {[(s['from_index'], s['at']) for s in segments]}")
    assert len(segments) == 2 and segments[1]["from_index"] >= written  # resumed at the next prompt, no rerun
    records = [json.loads(line) for line in (cell / store.RECORDS).read_text().splitlines()]
    assert [r["index"] for r in records] == list(range(12))  # every prompt written once


def test_timed_out_submitit_job_is_requeued_up_to_max_num_timeout(cluster, tmp_path):
    results = tmp_path / "results"
    proc = subprocess.run([sys.executable, "-m", "harness", "-m", "hydra/launcher=slurm_requeue",
                           "hydra.launcher.partition=debug", "hydra.launcher.gpus_per_node=null",
                           "hydra.launcher.cpus_per_task=1", "hydra.launcher.mem_gb=null",
                           "hydra.launcher.timeout_min=2", "hydra.launcher.signal_delay_s=60",
                           "hydra.launcher.max_num_timeout=2", "method=ar_sampling", "dataset.num_prompts=null",
                           # 1,180 prompts x 128 tokens: hours on one CPU, so no machine finishes it in 3 x 2 min
                           # (80 alpaca prompts did finish on a quiet machine: the cell must outlast every attempt)
                           "dataset=kjv_heldout", "max_new_tokens=128", *SMALL[2:], f"results_dir={results}"],
                          cwd=tmp_path, env=_env(cluster), capture_output=True, text=True, timeout=1500)
    cluster.log.append(f"$ harness -m ... timeout_min=2 max_num_timeout=2\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    assert proc.returncode == 1, proc.stderr[-3000:]  # the cell never finishes in time: its job fails, and the sweep
    (job,) = [p.name for p in results.rglob(".submitit/*") if p.is_dir()]
    state = cluster.wait_done(job)[0]  # the launcher returns on the job's result file, before SLURM ends the job
    cell = next(p for p in results.glob("cells/*") if p.is_dir())  # not the folder's .integrity.key
    error = json.loads((cell / store.ERROR).read_text())
    segments = json.loads((cell / "segments.json").read_text())
    written = _lines(cell / store.PARTIAL)
    print(f"submitit job {job}: {state.get('JobState')}, Restarts={state.get('Restarts')}; run segments start at "
          f"prompts {[s['from_index'] for s in segments]}; {written} prompts written; error.json: {error['error']}")
    assert state["Restarts"] == "2"  # requeued after each of the first max_num_timeout = 2 timeouts, then not
    assert "timed-out too many times" in error["error"]
    assert len(segments) == 3  # the first run and two resumes, each at the next prompt (from_index = rows written)
    starts = [s["from_index"] for s in segments]
    assert starts == sorted(starts) and 0 < starts[-1] <= written
    indexes = [json.loads(line)["index"] for line in (cell / store.PARTIAL).read_text().splitlines() if line.strip()]
    assert indexes == list(range(len(indexes)))  # each prompt written once across the requeues


def test_sbatch_array_with_an_invalid_override_says_so(cluster, tmp_path):
    jobs = lambda: cluster.run("squeue", "-h", "-o", "%i", quiet=True).stdout.split()  # noqa: E731
    before = jobs()
    for bad, key in (("method.nope=1", "nope"), ("dataset.num_prompts=0", "dataset.num_prompts"),
                     ("method.gamma=0", "method.gamma")):
        r = _submit(cluster, tmp_path, ["method=sd", bad, f"results_dir={tmp_path / 'r'}"])
        assert r.returncode == 2, r.stdout + r.stderr
        assert "already done" not in r.stdout and "Submitted batch job" not in r.stdout and key in r.stdout + r.stderr
    assert not set(jobs()) - set(before)  # nothing submitted
