"""Issue 29.2: one typed Cell from the CLI's door to the store — every node a typed object built by its schema
(no Any where a type is known), validated once: the cell validation built is the one the CLI runs."""
import typing

from hydra import compose, initialize_config_dir

from harness.config.groups import register_configs
from harness.config.schema import ReportConfig, RunnerConfig, as_cell_dict
from harness.config.validation import validate_cells
from harness.energy.config import EnergyConfig
from harness.energy.hardware import GpuProfile
from harness.methods import MethodSpec
from harness.models import PairSpec
from harness.resources import conf_dir
from harness.run import cell as cell_module
from harness.run.cell import Cell, CellPlan
from harness.tasks import Task

register_configs()


def _config(*overrides) -> dict:
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        return as_cell_dict(compose("config", ["gpu=cpu", "energy=off", *overrides]))


def test_every_node_of_the_cell_is_typed():
    from harness.judge.config import JudgeConfig
    from harness.results.trackers import TrackerConfig

    names = {**vars(cell_module), "Task": Task, "GpuProfile": GpuProfile, "EnergyConfig": EnergyConfig,
             "JudgeConfig": JudgeConfig, "RunnerConfig": RunnerConfig, "ReportConfig": ReportConfig}
    hints = typing.get_type_hints(Cell, localns=names)
    untyped = [name for name, hint in hints.items() if hint is typing.Any and name != "config"]
    assert untyped == []
    cell = Cell.build(_config("method=sd", "gamma_policy=online"))
    assert isinstance(cell.plan, CellPlan) and isinstance(cell.plan.method, MethodSpec)
    assert isinstance(cell.plan.pair, PairSpec) and isinstance(cell.dataset, Task)
    assert isinstance(cell.gpu, GpuProfile) and isinstance(cell.energy, EnergyConfig)
    assert isinstance(cell.runner, RunnerConfig) and isinstance(cell.report, ReportConfig)
    assert cell.plan.method.gamma_policy.name == "online" and cell.seed == 0
    assert isinstance(cell.tracker, TrackerConfig) and cell.tracker.name == "none"  # read typed by the runner


def test_a_method_that_does_not_apply_is_a_cell_without_a_plan():
    cell = Cell.build(_config("method=ar_greedy", "decoding=sampling"))
    assert cell.plan is None and "not applicable" in cell.not_applicable


def test_the_cell_validation_built_is_the_one_that_runs(monkeypatch, tmp_path):
    cfg = _config("method=sd", f"results_dir={tmp_path}")
    assert validate_cells([("", cfg)], single=True) == []
    calls = []
    monkeypatch.setattr(cell_module, "plan_cell", lambda c: calls.append(c))
    first = Cell.build(cfg)  # the CLI's, after validation: not planned again
    assert calls == [] and isinstance(first.plan, CellPlan)
    Cell.build(cfg)  # taken once: a later build (the Python API's) plans afresh
    assert len(calls) == 1
