"""Issue 33.2: a key no node's schema knows is refused, however it was added (``+key``, ``++key``, a config file,
an experiment file), with the nearest valid key named; exit 2 from the CLI, nothing written."""
import subprocess
import sys

import pytest
from hydra import compose, initialize_config_dir

from cellproc import ROOT, env
from harness.config.groups import register_configs
from harness.config.keys import unknown_key_problems
from harness.config.schema import as_cell_dict
from harness.errors import ConfigError
from harness.resources import conf_dir

register_configs()


def harness(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "harness", *map(str, args)], cwd=cwd or ROOT, env=env(),
                          capture_output=True, text=True, timeout=600)


def _problems(*overrides):
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        return {e.key: str(e) for e in unknown_key_problems(compose("config", list(overrides)))}


@pytest.mark.parametrize("override, key, nearest", [
    ("+method.gama=3", "method.gama", "method.gamma"),
    ("++method.gama=3", "method.gama", "method.gamma"),
    ("+decoding.temprature=0.5", "decoding.temprature", "decoding.temperature"),
    ("+runner.thread=2", "runner.thread", "runner.threads"),
    ("+pair.targt=x", "pair.targt", "pair.target"),
    ("+dataset.num_prompt=2", "dataset.num_prompt", "dataset.num_prompts"),
    ("+gpu.power_readings=nvml", "gpu.power_readings", "gpu.power_reading"),
    ("+energy.sample_hertz=10", "energy.sample_hertz", "energy.sample_hz"),
    ("+gamma_policy.acc_histry=3", "gamma_policy.acc_histry", "gamma_policy.acc_history"),
    ("+sed=1", "sed", "seed"),
])
def test_every_node_refuses_a_key_its_schema_does_not_know(override, key, nearest):
    extra = ["method=sd"] + (["gamma_policy=online"] if override.startswith("+gamma_policy") else [])
    problems = _problems(*extra, override)
    assert list(problems) == [key]
    assert f"did you mean '{nearest}'" in problems[key]


def test_known_keys_and_free_mappings_pass():
    assert _problems("method=sd", "method.gamma=3", "+report.baselines.other=ar", "gpu=sim_h100") == {}


def test_the_conversion_refuses_instead_of_dropping():
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        cfg = compose("config", ["method=sd", "+method.gama=3"])
    with pytest.raises(ConfigError, match="method.gamma"):
        as_cell_dict(cfg)


def _user_conf(tmp_path):
    (tmp_path / "conf" / "method").mkdir(parents=True)
    (tmp_path / "conf" / "experiment").mkdir()
    (tmp_path / "conf" / "method" / "sd_typo.yaml").write_text("defaults:\n  - sd\n  - _self_\ngama: 3\n")
    (tmp_path / "conf" / "experiment" / "typo.yaml").write_text(
        "# @package _global_\nmethod:\n  gama: 3\nhydra:\n  sweeper:\n    params:\n      seed: 0,1\n")
    return tmp_path / "conf"


@pytest.mark.parametrize("how", ["plus", "plain", "config_file", "experiment_sweep"])
def test_cli_exits_2_naming_the_nearest_key(tmp_path, how):
    results = tmp_path / "results"
    conf = _user_conf(tmp_path)
    args = {"plus": ["method=sd", "+method.gama=3"], "plain": ["method=sd", "method.gama=3"],
            "config_file": ["--config-dir", conf, "method=sd_typo"],
            "experiment_sweep": ["-m", "--config-dir", conf, "method=sd", "+experiment=typo"]}[how]
    r = harness(*args, f"results_dir={results}", "dataset.num_prompts=1", "energy=off", cwd=ROOT)
    assert r.returncode == 2, r.stderr[-2000:]
    assert "method.gama" in r.stderr and "did you mean 'method.gamma'" in r.stderr
    assert not results.exists()
