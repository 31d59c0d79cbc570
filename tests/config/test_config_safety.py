"""Config that acts before validation, and values that pass validation and fail later (issue 20 items 8-9):
nothing a config file names runs before the harness has checked it, no config explodes, out-of-range values are
refused with their range, labels say what happened, and full disks and bad export paths get plain messages."""
import errno
import json
import os
import subprocess
import sys

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from cellproc import CELL, ROOT, env
from harness.results import store
from harness.cli.app import CONF_DIR
from harness.config.groups import register_configs
from harness.run.runner import prepare_cell, run_cell, run_cells
from harness.config.validation import validate_cell

# as a dataset option (its keys are the untyped dataset node's): 10 keys of 10 references each, and YAML aliases
BOMB_INTERPOLATIONS = "b0: [x,x,x,x,x,x,x,x,x,x]\n" + "".join(
    f"b{i}: [{','.join([repr('${..b%d}' % (i - 1))] * 10)}]\n" for i in range(1, 6))
BOMB_ALIASES = "a0: &a0 [x,x,x,x,x,x,x,x,x,x]\n" + "".join(
    f"a{i}: &a{i} [{','.join(['*a%d' % (i - 1)] * 10)}]\n" for i in range(1, 6))
EVIL = "# @package _global_\nhydra:\n  callbacks:\n    evil:\n      _target_: pathlib.Path.touch\n      self: {}\n"


def _harness(*args, timeout=240):
    return subprocess.run([sys.executable, "-m", "harness", *args], env=env(), cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


def composed(*overrides) -> dict:
    register_configs()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return OmegaConf.to_container(compose(config_name="config", overrides=list(overrides)), resolve=True)


# ---- item 8: config that acts before validation -----------------------------------------------------------

def test_a_foreign_callback_never_runs(tmp_path):
    marker = tmp_path / "PWNED"
    (tmp_path / "conf" / "extra").mkdir(parents=True)
    (tmp_path / "conf" / "extra" / "evil.yaml").write_text(EVIL.format(marker))
    r = _harness("--config-dir", str(tmp_path / "conf"), "+extra=evil", "dataset.num_prompts=1", "max_new_tokens=2",
                 "runner.progress=false", f"results_dir={tmp_path / 'r'}")
    assert r.returncode == 2 and "hydra.callbacks.evil" in r.stderr and "pathlib.Path.touch" in r.stderr
    assert not marker.exists() and not (tmp_path / "r").exists()


@pytest.mark.parametrize("bomb", [BOMB_INTERPOLATIONS, BOMB_ALIASES], ids=["interpolations", "aliases"])
def test_a_self_referencing_config_is_refused_before_it_expands(tmp_path, bomb):
    from harness.config.preflight import argv_problems

    (tmp_path / "conf" / "dataset").mkdir(parents=True)
    (tmp_path / "conf" / "dataset" / "bomb.yaml").write_text(bomb)
    assert len(bomb) < 600  # a few hundred bytes
    problems = argv_problems(["--config-dir", str(tmp_path / "conf"), "dataset=bomb"], str(CONF_DIR))
    assert problems and "the limit" in problems[0], problems


def test_a_bomb_chosen_by_one_cell_of_a_sweep_is_that_cells_problem(tmp_path):
    from harness.config.preflight import ConfigTooLarge, config_problems, resolved_container
    from harness.config.validation import job_container

    cfg = OmegaConf.create({"dataset": OmegaConf.create(BOMB_INTERPOLATIONS)})
    assert config_problems(cfg)
    with pytest.raises(ConfigTooLarge, match="limits"):
        job_container(cfg)
    deep = OmegaConf.create({f"k{i}": f"${{k{i - 1}}}" if i else "x" for i in range(60)})
    assert "deep" in config_problems(deep)[0]
    assert resolved_container(OmegaConf.create({"a": 1, "b": "${a}"})) == {"a": 1, "b": 1}


# ---- issue 31.2: logging configs, launchers, sweepers and _target_ keys act before validation too ----------

TRUNCATE = ("version: 1\nhandlers:\n  file:\n    class: logging.FileHandler\n    filename: {victim}\n    mode: w\n"
            "root:\n  handlers: [file]\n")
FACTORY = ("version: 1\nhandlers:\n  made:\n    (): pathlib.Path.touch\n    self: {victim}\nroot:\n  handlers: [made]\n")


def _preset_dir(tmp_path, group: str, text: str, name: str = "default"):
    folder = tmp_path / "conf" / "hydra" / group
    folder.mkdir(parents=True)
    (folder / f"{name}.yaml").write_text(text)
    return tmp_path / "conf"


@pytest.mark.parametrize("case", ["hydra_logging factory", "inline in a global file",
                                  "own logging preset name", "command-line handler", "foreign launcher",
                                  "foreign sweeper", "_target_ in a dataset"])
def test_logging_launchers_sweepers_and_targets_not_shipped_are_refused_before_hydra_applies_them(tmp_path, case):
    from harness.config.preflight import argv_problems

    victim = tmp_path / "victim.txt"
    extra = tmp_path / "conf" / "extra"
    argv = {
        "hydra_logging factory": lambda: ["--config-dir", str(_preset_dir(tmp_path, "hydra_logging", FACTORY.format(
            victim=victim), "mine")), "hydra/hydra_logging=mine"],
        "own logging preset name": lambda: ["--config-dir", str(_preset_dir(tmp_path, "job_logging", TRUNCATE.format(
            victim=victim), "quiet")), "hydra/job_logging=quiet"],
        "command-line handler": lambda: [f"hydra.job_logging.handlers.file.filename={victim}",
                                         "+hydra.job_logging.handlers.file.mode=w"],
        "foreign launcher": lambda: ["hydra.launcher._target_=pathlib.Path"],
        "foreign sweeper": lambda: ["hydra.sweeper._target_=pathlib.Path", "-m"],
    }.get(case)
    if argv is None:
        extra.mkdir(parents=True)
        text = ("# @package _global_\nhydra:\n  job_logging:\n" + "".join(
            "    " + line + "\n" for line in TRUNCATE.format(victim=victim).splitlines())
            if case == "inline in a global file" else "name: x\nloader:\n  _target_: os.system\n  _args_: ['true']\n")
        (extra / "evil.yaml").write_text(text)
        argv = lambda: ["--config-dir", str(tmp_path / "conf"), "+extra=evil"] if case == "inline in a global file" \
            else ["--config-dir", str(tmp_path / "conf"), "+extra@dataset=evil"]
    problems = argv_problems(argv(), str(CONF_DIR))
    assert problems, case
    assert not victim.exists()


def test_the_shipped_logging_launchers_and_sweepers_pass():
    from harness.config.preflight import argv_problems

    for argv in ([], ["hydra/job_logging=disabled", "hydra/hydra_logging=none"], ["-m", "method=ar,sd"],
                 ["-m", "+experiment=mtad_tables_tiny"], ["-m", "hydra/launcher=slurm_requeue"]):
        assert argv_problems(argv, str(CONF_DIR)) == [], argv


def test_a_truncating_log_handler_never_touches_its_file(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    conf = _preset_dir(tmp_path, "job_logging", TRUNCATE.format(victim=victim), "quiet")
    r = _harness("--config-dir", str(conf), "hydra/job_logging=quiet", "dataset.num_prompts=1", "max_new_tokens=2", "runner.progress=false",
                 f"results_dir={tmp_path / 'r'}")
    assert r.returncode == 2 and "hydra.job_logging is not one of the logging presets" in r.stderr, r.stderr[-2000:]
    assert victim.read_text() == "precious" and not (tmp_path / "r").exists()


def test_resolver_calls_count_against_the_size_bound(tmp_path):
    from harness.config.preflight import argv_problems, config_problems

    bomb = "b0: [x,x,x,x,x,x,x,x,x,x]\n" + "".join(
        f"b{i}: [{','.join([repr('${oc.select:dataset.b%d,null}' % (i - 1))] * 10)}]\n" for i in range(1, 6))
    (tmp_path / "conf" / "dataset").mkdir(parents=True)
    (tmp_path / "conf" / "dataset" / "bomb.yaml").write_text(bomb)
    problems = argv_problems(["--config-dir", str(tmp_path / "conf"), "dataset=bomb"], str(CONF_DIR))
    assert problems and "the limit" in problems[0], problems
    assert config_problems(OmegaConf.create({"a": {"b": 1}, "c": "${oc.select:a.b,0}", "d": "${oc.env:HOME,x}"})) == []


# ---- item 9: values that pass validation and fail later -------------------------------------------------

@pytest.mark.parametrize("override,key,valid", [
    ("decoding.temperature=inf", "decoding.temperature", "[0.01, 100.0]"),
    ("decoding.temperature=nan", "decoding.temperature", "[0.01, 100.0]"),
    ("decoding.temperature=1e-30", "decoding.temperature", "[0.01, 100.0]"),
    ("seed=9223372036854775808", "seed", "<= 4294967295"),
    ("runner.threads=100000", "runner.threads", "<= 1024"),
    ("dataset.stop=['']", "dataset.stop", "non-empty strings"),
    ("+dataset.sample_seed=-1", "dataset.sample_seed", ">= 0"),
    ("force=[1,2]", "force", "a cell id"),
])
def test_values_that_would_fail_later_are_refused_with_their_range(override, key, valid, tmp_path):
    problems = validate_cell(composed(override, f"results_dir={tmp_path}"))
    assert any(p.key == key and valid in str(p) for p in problems), [str(p) for p in problems]


@pytest.mark.parametrize("overrides,key,valid", [
    (["dataset=humaneval", "dataset.timeout_s=0"], "dataset.timeout_s", "> 0 and <= 600"),
    (["dataset=humaneval", "dataset.timeout_s=1e308"], "dataset.timeout_s", "> 0 and <= 600"),
    (["dataset=humaneval", "dataset.timeout_s=nan"], "dataset.timeout_s", "> 0 and <= 600"),
    (["dataset=humaneval", "dataset.memory_mb=-1"], "dataset.memory_mb", ">= 64"),
    (["dataset=spider", "dataset.timeout_s=-1"], "dataset.timeout_s", "> 0 and <= 600"),
    (["dataset.prompt_words=-5"], "dataset.prompt_words", ">= 1"),
    (["runner.warmup_new_tokens=100000000"], "runner.warmup_new_tokens", "<= 4096"),
    (["dataset=mt_bench", "judge=openai", "judge.timeout_s=1e308"], "judge.timeout_s", "<= 3600"),
    (["dataset=mt_bench", "judge=openai", "judge.backoff_max_s=inf"], "judge.backoff_max_s", "<= 3600"),
])
def test_every_task_and_judge_limit_is_range_checked_before_anything_loads(overrides, key, valid, tmp_path):
    problems = validate_cell(composed(*overrides, f"results_dir={tmp_path}"))
    assert any(p.key == key and valid in str(p) for p in problems), [(p.key, str(p)) for p in problems]


def test_sandbox_limits_are_range_checked():
    from harness.sandbox import PythonLimits

    for bad in ({"timeout_s": 0}, {"timeout_s": float("inf")}, {"memory_mb": -1}, {"disk_mb": 0}):
        with pytest.raises(ValueError, match="PythonLimits: "):
            PythonLimits(**bad)


def test_a_python_tag_in_a_config_is_a_clear_error_not_a_traceback(tmp_path):
    (tmp_path / "conf" / "dataset").mkdir(parents=True)
    (tmp_path / "conf" / "dataset" / "evil.yaml").write_text(
        f"name: x\npath: !!python/object/apply:os.system ['touch {tmp_path / 'PWNED'}']\n")
    r = _harness("--config-dir", str(tmp_path / "conf"), "dataset=evil", f"results_dir={tmp_path / 'r'}")
    assert r.returncode == 2 and "YAML tag(s) tag:yaml.org,2002:python/object/apply:os.system" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "PWNED").exists()


def test_a_cell_whose_partner_was_busy_is_not_labelled_interleaved(tmp_path):
    sd = {**CELL, "method": {"name": "sd", "gamma": 2}}
    busy_dir = prepare_cell(sd, tmp_path)[2]
    with store.CellLock(busy_dir):  # another sweep is running the partner
        outcomes = run_cells([CELL, sd], tmp_path)
    assert [o.status for o in outcomes] == ["done", "busy"]
    summary = json.loads((outcomes[0].cell_dir / store.SUMMARY).read_text())
    assert summary["interleaved"] is False and summary["interleave_group"] == []
    assert summary["segments"][0]["interleaved_with"] == []


def test_sbatch_array_with_an_invalid_override_says_so_and_submits_nothing(tmp_path):
    from test_sbatch import _fake_env

    e = _fake_env(tmp_path)
    r = subprocess.run(["bash", str(ROOT / "scripts" / "sbatch_array.sh"), "method=sd", "method.gamma=0",
                        f"results_dir={tmp_path / 'r'}", "dataset.num_prompts=1", "gpu=cpu"], env=e, cwd=ROOT,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "already done" not in r.stdout and "invalid" in r.stderr and "method.gamma" in r.stderr
    assert not (tmp_path / "sbatch.log").exists()


def test_a_full_disk_is_a_clear_problem_before_and_a_clear_failure_during_a_run(tmp_path, monkeypatch):
    import shutil as shutil_module

    import harness.config.validation as validation

    usage = shutil_module.disk_usage(tmp_path)
    monkeypatch.setattr(validation.shutil, "disk_usage", lambda p: usage._replace(free=1024))
    problems = validate_cell({**CELL, "results_dir": str(tmp_path)})
    assert [p.key for p in problems] == ["results_dir"] and "MiB free" in problems[0].message
    monkeypatch.undo()

    def no_space(self, record):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self.partial))
    monkeypatch.setattr(store.RecordWriter, "write", no_space)
    out = run_cell(CELL, tmp_path)
    assert out.status == "failed" and out.error.startswith("disk full: ")


def test_export_to_an_existing_file_is_a_usage_error(tmp_path, capsys):
    from harness.report import main

    run_cell(CELL, tmp_path / "r")
    existing = tmp_path / "answers.jsonl"
    existing.write_text("keep me\n")
    with pytest.raises(SystemExit) as exc:
        main(["--results", str(tmp_path / "r"), "--export", "specbench", str(existing)])
    assert exc.value.code == 2 and "existing file" in capsys.readouterr().err
    assert existing.read_text() == "keep me\n"
