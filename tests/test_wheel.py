"""Issue 24.1: the harness installs from a wheel and runs outside its checkout.

The test builds the wheel (``pip wheel --no-deps --no-build-isolation``, offline, with the venv's
setuptools) from a copy of the source tree, installs it into a fresh venv in a temporary folder, and from
another folder runs a cell, ``harness plan``, ``harness-report``, the experiments' sweeper and a user
``--config-dir``. The fresh venv gets its dependencies (torch, transformers, ...) from this venv's
site-packages through a ``.pth`` path line — a plain path is not a site dir, so the checkout's editable
install there is not activated — and the test asserts that ``harness`` is imported from the wheel.
"""
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

from cellproc import ROOT

pytestmark = pytest.mark.slow

SKIP = {".git", ".venv", "results", "report", "plots", "outputs", "multirun", "build", "dist", "__pycache__",
        ".pytest_cache", ".benchmarks"}
TOP_ONLY = {"results", "report", "plots", "outputs", "multirun", "build", "dist"}  # generated at the top, never
#                                                          inside the package (harness/report/ is the report's code)
CELL = ["method=ar", "decoding=greedy", "dataset.num_prompts=2", "max_new_tokens=4", "runner.progress=false",
        "runner.warmup_new_tokens=2", "gpu=cpu", "pair.device=cpu", "energy=off"]


def _run(cmd, cwd, **kw):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    r = subprocess.run([str(c) for c in cmd], cwd=cwd, env={**env, "OMP_NUM_THREADS": "1"}, capture_output=True,
                       text=True, timeout=kw.pop("timeout", 600), **kw)
    print(f"$ {' '.join(map(str, cmd))}  (in {cwd})\n{r.stdout[-3000:]}{r.stderr[-3000:]}")
    return r


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    shutil.copytree(ROOT, src, ignore=lambda d, names: [n for n in names if (n in SKIP and (n not in TOP_ONLY or
                                                                                     Path(d) == Path(ROOT)))
                                                        or n.endswith(".egg-info")])
    dist = tmp / "dist"
    r = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", dist, src],
             cwd=tmp)
    assert r.returncode == 0, r.stderr
    assert not (src / "build").exists()  # issue 33.5: the build leaves no build/ in the checkout
    wheel = next(dist.glob("decoding_harness-*.whl"))
    env_dir = tmp / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    py = env_dir / "bin" / "python"
    site = Path(_run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=tmp).stdout.strip())
    (site / "_project_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")  # deps only: a path, not a site dir
    r = _run([py, "-m", "pip", "install", "--no-deps", "--no-index", wheel], cwd=tmp)
    assert r.returncode == 0, r.stderr
    work = tmp / "elsewhere"
    work.mkdir()
    return {"wheel": wheel, "bin": env_dir / "bin", "py": py, "work": work, "site": site}


def test_wheel_holds_configs_data_plugin_and_metadata(installed):
    names = zipfile.ZipFile(installed["wheel"]).namelist()
    for needed in ("harness/conf/config.yaml", "harness/conf/pair/tiny.yaml", "harness/conf/dataset/custom.yaml",
                   "harness/data/kjv_heldout/heldout.jsonl", "harness/data/spider/PROVENANCE.md",
                   "harness/assets/tiny_pair/target/config.json", "harness/py.typed",
                   "hydra_plugins/harness_grids/__init__.py"):
        assert needed in names, needed
    assert not any(n.startswith(("tests/", "scripts/", "conf/", "tasks/")) for n in names)
    meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
    text = zipfile.ZipFile(installed["wheel"]).read(meta).decode()
    from harness import __version__

    assert f"Version: {__version__}" in text and "License-Expression: MIT" in text
    assert "Provides-Extra: gpu" in text and "Provides-Extra: slurm" in text and "Provides-Extra: tasks" in text
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)


def test_installed_harness_runs_a_cell_plan_and_report_elsewhere(installed):
    b, work = installed["bin"], installed["work"]
    r = _run([installed["py"], "-c", "import harness, hydra_plugins.harness_grids as g; print(harness.__file__); "
              "print(g.__file__)"], cwd=work)
    assert r.returncode == 0 and all(line.startswith(str(installed["site"])) for line in r.stdout.split()), r.stdout
    from harness import __version__

    assert _run([b / "harness", "--version"], cwd=work).stdout.strip() == f"harness {__version__}"
    r = _run([b / "harness", *CELL, "results_dir=res"], cwd=work)
    assert r.returncode == 0 and "[done]" in r.stdout, r.stderr
    summary = json.loads(next((work / "res" / "cells").glob("*/summary.json")).read_text())
    assert summary["records_count"] == 2 and summary["env"]["git_sha"] is None  # installed: no checkout
    assert summary["env"]["checkpoints"]["target"]["revision"].startswith("sha256:")
    r = _run([b / "harness", "plan", *CELL[1:], "method=ar,sd", "results_dir=res"], cwd=work)
    assert r.returncode == 0 and "done" in r.stdout and "pending" in r.stdout, r.stderr
    r = _run([b / "harness-report", "--results", "res", "--out", "rep"], cwd=work)
    assert r.returncode == 0, r.stderr
    assert (work / "rep" / "index.html").is_file() and (work / "rep" / "cells.csv").is_file()
    assert (work / "rep" / "results.json").is_file()
    # issue 33.5: the report writes into its own folder only (a single run writes no results.json either)
    assert not (work / "res" / "cells.csv").exists() and not (work / "res" / "results.json").exists()


def test_installed_harness_finds_the_sweeper_and_a_user_config_dir(installed):
    b, work = installed["bin"], installed["work"]
    r = _run([b / "harness", "plan", "--count", "+experiment=mtad_tables_tiny"], cwd=work)
    assert r.returncode == 0 and int(r.stdout.strip()) > 1, r.stderr
    mine = work / "myconf" / "pair"
    mine.mkdir(parents=True)
    (mine / "mine.yaml").write_text("defaults: [tiny, _self_]\nname: mine\n")
    r = _run([b / "harness", "--config-dir", work / "myconf", "pair=mine", "--cfg", "job"], cwd=work)
    assert r.returncode == 0 and "name: mine" in r.stdout, r.stderr
    r = _run([b / "harness", "ls", "--config-dir", work / "myconf", "pairs"], cwd=work)
    assert r.returncode == 0 and "mine" in r.stdout.split(), r.stdout
    r = _run([b / "harness", "pair=nope"], cwd=work)
    assert r.returncode == 2 and "pair/nope" in r.stderr
