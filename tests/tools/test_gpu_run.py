"""The prepared GPU run (issue 28.5): its plan covers every method in both execution modes within the time budget,
its sweeps' overrides compose, the table renders without results, the shell scripts are shellcheck-clean."""
import shutil
import subprocess
from pathlib import Path

import pytest

from harness.decoders import registry
from harness.tools import gpu_run
from harness.tools.gpu_table import render

ROOT = Path(__file__).resolve().parents[2]


def _sweeps(steps, mode):
    out = {}
    for s in steps:
        if s.argv and s.name.startswith("sweep_tiny") and f"pair.execution={mode}" in s.argv:
            decoding = next(a.split("=", 1)[1] for a in s.argv if a.startswith("decoding="))
            methods = next(a.split("=", 1)[1] for a in s.argv if a.startswith("method=")).split(",")
            out.setdefault(decoding, set()).update(methods)
    return out


@pytest.mark.parametrize("sizes", [gpu_run.GPU, gpu_run.DRY])
def test_the_plan_runs_every_method_in_both_modes_within_the_budget(sizes, tmp_path):
    from harness.methods import resolve_method

    steps = gpu_run.plan(sizes, tmp_path)
    refused = {m for m, c in registry().items() if c.graphs_refusal}
    assert refused == {"hf_assisted"}
    for mode in ("eager", "graphs"):
        covered = set()
        for decoding, methods in _sweeps(steps, mode).items():
            for m in methods:
                cls, _ = resolve_method(m, decoding=decoding)
                assert decoding in cls.decodings, (m, decoding)  # no cell of the plan is skipped as not applicable
                covered.add(cls.method)
        assert covered == set(registry()) - (refused if mode == "graphs" else set()), mode
    graphs_step = next(s for s in steps if s.name == "sweep_tiny_graphs")
    assert set(graphs_step.args["left_out"]) == refused
    for s in steps:  # everything the run writes goes under its --out
        argv = s.argv or []
        written = [a.split("=", 1)[1] for a in argv if a.startswith(("results_dir=", "hydra.sweep.dir="))]
        written += [argv[i + 1] for i, a in enumerate(argv) if a == "--out"]
        assert all(w.startswith(str(tmp_path)) for w in written), s.name
    if sizes is gpu_run.GPU:
        assert sum(s.estimate_s for s in steps) <= gpu_run.BUDGET_S
        assert any(s.name == "gpu_check" for s in steps)
        assert any("pair=llama2_7b_shape_random" in (s.argv or []) for s in steps)


def test_the_sweeps_overrides_compose(tmp_path):
    """Every override of the GPU plan's sweeps names a config key (the first value of each sweep list)."""
    from hydra import compose, initialize_config_dir

    from harness.cli.app import CONF_DIR
    from harness.config.groups import register_configs

    register_configs()
    for s in gpu_run.plan(gpu_run.GPU, tmp_path):
        if s.argv and s.argv[1:3] == ["-m", "harness"]:
            overrides = [a.split(",")[0] for a in s.argv[4:] if not a.startswith("hydra.")]
            with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
                compose(config_name="config", overrides=[*overrides, "gpu=cpu"])


def test_the_table_renders_a_run_without_results(tmp_path):
    doc = {"dry_run": True, "steps": {"gpu_check": {"ok": False, "skipped": "time budget: 3 s left"}},
           "elapsed_s": 1.0}
    text = render(tmp_path, doc)
    assert "commit" in text and "gpu_check: time budget" in text


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck not installed")
def test_the_scripts_are_shellcheck_clean():
    subprocess.run(["shellcheck", str(ROOT / "scripts" / "gpu_run.sh"), str(ROOT / "scripts" / "make_wheelhouse.sh")],
                   check=True)
