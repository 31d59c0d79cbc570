"""Issue 24.4 and 24.7: one discoverable CLI, exit status 2 for every configuration error, Hydra job folders
without result-neutral keys, and array tasks that read their unit from a plan file."""
import json
import subprocess
import sys

import pytest

from cellproc import ROOT, env
from harness import __version__
from harness.run.planfile import read_plan, task_unit

FAST = ["decoding=greedy", "dataset.num_prompts=1", "max_new_tokens=2", "runner.progress=false", "gpu=cpu",
        "pair.device=cpu", "runner.warmup_generations=0", "energy=off"]


def harness(*args, cwd=None, timeout=600):
    return subprocess.run([sys.executable, "-m", "harness", *map(str, args)], cwd=cwd or ROOT, env=env(),
                          capture_output=True, text=True, timeout=timeout)


def test_help_lists_every_command_and_version_is_the_harness_s():
    r = harness("--help")
    assert r.returncode == 0
    for command in ("plan", "task", "merge", "push", "report", "ls", "gpu-check", "power-probe"):
        assert f"\n  {command} " in r.stdout, command
    assert "Config groups" in r.stdout and "method:" in r.stdout  # Hydra's part: groups and the composed config
    r = harness("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"harness {__version__}"


def test_version_imports_no_torch_and_help_shows_no_schema_group():
    """Issue 33.5: ``--version`` answers before anything heavy is imported; ``--help`` lists the config groups a
    user picks from, not the schemas behind them."""
    probe = ("import runpy, sys; sys.argv = ['harness', '--version']\n"
             "runpy.run_module('harness', run_name='__main__')\n"
             "print(sorted(m for m in ('torch', 'transformers', 'hydra', 'pandas') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=env(), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.splitlines() == [f"harness {__version__}", "[]"]
    r = harness("--help")
    assert r.returncode == 0 and "\nschema:" not in r.stdout and "\ngpu: " in r.stdout


def _ls(capsys, *args):
    from harness.cli.catalog import ls_main

    rc = ls_main(list(args))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_ls_lists_groups_options_and_each_key_s_help(capsys):
    rc, out, _ = _ls(capsys)
    assert rc == 0 and "method: " in out and "pair: " in out
    rc, out, _ = _ls(capsys, "methods")
    assert rc == 0 and "\n  sd " in out and "\n  dsbd " in out
    rc, out, _ = _ls(capsys, "method", "sd")
    assert rc == 0 and "method.gamma = 4    # draft length" in out
    rc, out, _ = _ls(capsys, "pairs", "tiny")
    assert rc == 0 and "pair.revision = null    # hub revision" in out
    rc, out, _ = _ls(capsys, "datasets", "custom")
    assert rc == 0 and "dataset.metric = none" in out
    rc, out, _ = _ls(capsys, "policies")
    assert rc == 0 and "online" in out and "qlearning" in out
    rc, _, err = _ls(capsys, "method", "nope")
    assert rc == 2 and "Valid:" in err


@pytest.mark.parametrize("override,says", [("method=nope", "method/nope"), ("nope=1", "nope"),
                                           ("method=sd method.gamma=abc", "method.gamma"), ("seed=[", "seed"),
                                           ("method=sd method.gamma=0", "method.gamma")])
def test_every_configuration_error_exits_2_before_anything_is_written(tmp_path, override, says):
    r = harness(*override.split(), f"results_dir={tmp_path / 'r'}", cwd=tmp_path)
    assert r.returncode == 2, r.stderr[-2000:]
    assert says in r.stderr and not (tmp_path / "r").exists()
    if override in ("method=nope", "seed=["):
        r = harness("plan", *override.split(), cwd=tmp_path)
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]


def test_absolute_results_dir_makes_one_hydra_folder_per_job(tmp_path):
    results = tmp_path / "abs" / "results"
    r = harness("-m", "method=ar,sd", *FAST, f"results_dir={results}", "runner.interleave=false", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    (sweep,) = (results / "_hydra" / "multirun").iterdir()
    jobs = sorted(p.name for p in sweep.iterdir() if p.is_dir())
    assert len(jobs) == 2 and all("results_dir" not in j and "runner.interleave" not in j for j in jobs), jobs
    assert not any(p.name == "tmp" for p in sweep.rglob("*"))  # no tree mirroring the absolute path
    for cid in (p.name for p in (results / "cells").iterdir() if p.is_dir()):  # issue 33.5: each cell announced once, with numbers
        assert (r.stdout + r.stderr).count(cid) == 1 and f"[done] {cid} (1 prompts, " in r.stdout, r.stdout
    doc = json.loads((results / "results.json").read_text())  # one results.json per sweep
    assert sorted(c["method_name"] for c in doc["cells"]) == ["ar_greedy", "sd"]
    assert doc["environment"]["harness"] == __version__ and doc["sweep"]["argv"][0] == "-m"
    assert json.loads((sweep / "results.json").read_text())["cells"] == doc["cells"]


def test_job_folder_names_fit_a_file_system():
    from harness.cli.app import job_dirname

    assert job_dirname("a=1,results_dir=/x/y") == "a=1,results_dir=_x_y"
    long = ",".join(f"method.key{i}=/some/long/path/{i}" for i in range(20))
    name = job_dirname(long)
    assert len(name.encode()) <= 200 and name != job_dirname(long + "x") and "/" not in name


@pytest.mark.slow  # whole processes / CLI sweeps (issue 21.10: `make test` in minutes; CI runs -m slow too)
def test_task_reads_its_unit_from_a_plan_file(tmp_path):
    plan = tmp_path / "plan.json"
    results = tmp_path / "r"
    r = harness("plan", "--write", plan, "method=ar,sd", *FAST, f"results_dir={results}")
    assert r.returncode == 0, r.stderr[-2000:]
    doc = read_plan(plan)
    assert doc["n_units"] == 2 and doc["harness_version"] == __version__
    assert [u[0]["method"]["name"] for u in doc["units"]] == ["ar", "sd"]
    assert task_unit(plan, 1, [f"results_dir={tmp_path / 'scratch'}"])[0]["results_dir"] == str(tmp_path / "scratch")
    r = harness("task", "--plan", plan, "1")
    assert r.returncode == 0 and "[done] sd__greedy" in r.stdout, r.stderr[-2000:]
    assert len([p for p in (results / "cells").iterdir() if p.is_dir()]) == 1  # beside .integrity.key
    r = harness("task", "--plan", plan, "5")
    assert r.returncode == 2 and "out of range" in r.stderr
    r = harness("task", "--plan", plan, "0", "method.gamma=3")
    assert r.returncode == 2 and "would change the cells" in r.stderr
    r = harness("task", "--plan", tmp_path / "missing.json", "0")
    assert r.returncode == 2 and "plan file not found" in r.stderr


def test_plan_rows_that_differ_only_by_the_hash_show_the_differing_keys(tmp_path):
    """Issue 33.5: two cells whose readable ids are equal (a sweep over max_new_tokens and gamma) show the keys
    that tell them apart; a cell alone in its readable id shows nothing."""
    from harness.run.plan import plan_rows
    from test_validation import composed

    jobs = [composed("method=sd", f"max_new_tokens={m}", f"method.gamma={g}", f"results_dir={tmp_path}")
            for m, g in ((4, 2), (8, 2), (8, 3))] + [composed("method=ar", f"results_dir={tmp_path}")]
    rows = plan_rows(jobs)
    assert [r["differs"] for r in rows if r["cell_id"].startswith("sd__")] == [
        "max_new_tokens=4, method.gamma=2", "max_new_tokens=8, method.gamma=2", "max_new_tokens=8, method.gamma=3"]
    assert [r["differs"] for r in rows if not r["cell_id"].startswith("sd__")] == [""]
    json.dumps(rows)  # `harness plan --json` prints them
