"""Issue 29.5: decoders and γ policies from another installed package, through the entry-point groups
``harness.decoders`` and ``harness.gamma_policies`` (the example package: tests/plugin_example), each class
checked against the registry's base class; nothing a config names is imported."""
import os
import subprocess
import sys

from cellproc import ROOT, env
from harness.registry import ENTRY_POINT_GROUPS

EXAMPLE = ROOT / "tests" / "plugin_example"
FAST = ["decoding=greedy", "dataset.num_prompts=1", "max_new_tokens=2", "runner.progress=false", "gpu=cpu",
        "pair.device=cpu", "runner.warmup_generations=0", "energy=off"]


def _env(*paths) -> dict:
    e = env()
    e["PYTHONPATH"] = os.pathsep.join([*map(str, paths), e["PYTHONPATH"]])
    return e


def _python(code: str, *paths):
    return subprocess.run([sys.executable, "-c", code], env=_env(*paths), capture_output=True, text=True, timeout=300)


def test_an_installed_package_adds_a_decoder_and_a_policy():
    r = _python("from harness.decoders.base import registry; from harness.adaptive.policies import POLICIES\n"
                "from harness.adaptive.policies.base import policy_params\n"
                "print('example_greedy' in registry(), 'example_constant' in POLICIES.names(),"
                " policy_params('example_constant', {'every': 3}).build(4).next_gamma())", EXAMPLE)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True", "True", "3"]
    assert ENTRY_POINT_GROUPS == ("harness.decoders", "harness.gamma_policies")


def test_the_cli_runs_a_cell_of_the_package_s_decoder(tmp_path):
    results = tmp_path / "results"
    r = subprocess.run([sys.executable, "-m", "harness", "method=example_greedy", *FAST, f"results_dir={results}"],
                       cwd=ROOT, env=_env(EXAMPLE), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    cells = [p for p in (results / "cells").iterdir() if p.is_dir()]  # beside the folder's integrity key
    assert len(cells) == 1 and cells[0].name.startswith("example_greedy")
    assert (cells[0] / "records.jsonl").is_file()


def test_an_entry_point_that_is_no_decoder_is_refused_by_name(tmp_path):
    dist = tmp_path / "bad_plugin-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: bad-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[harness.decoders]\nbad = collections:OrderedDict\n")
    r = _python("from harness.decoders.base import registry; registry()", tmp_path)
    assert r.returncode != 0
    assert "entry point 'bad = collections:OrderedDict' of group harness.decoders" in r.stderr
    assert "not a subclass of harness.decoders.base.Decoder" in r.stderr


def test_a_config_naming_the_package_s_class_imports_nothing(tmp_path):
    # without the package installed, naming its class is an unknown method: a config never imports anything
    results = tmp_path / "results"
    r = subprocess.run([sys.executable, "-m", "harness", "method=harness_example_plugin.ExampleGreedy", *FAST,
                        f"results_dir={results}"], cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=600)
    assert r.returncode == 2
    assert "harness_example_plugin" in r.stderr and not results.exists()
