"""Issue 33.7: optional experiment trackers (wandb, mlflow) log every finished cell, offline by default; a missing
package is a validation error with the install line; a failing tracker never fails a measured cell.

Neither package is installed in the test environment (mlflow alone pulls in a web server and a database layer), so
the backends run against fake modules that record the calls the real ones receive."""
import sys
import types

import pytest

from harness import api
from harness.config import extras
from harness.config.identity import cell_id
from harness.errors import ConfigError
from harness.results.trackers import TRACKERS, log_cell, tracker_problems
from test_api import FAST


def _fake(name: str, calls: list):
    module = types.ModuleType(name)

    def record(fn):
        return lambda *a, **k: calls.append((fn, a, k)) or module.__dict__.get(f"_{fn}_result")

    if name == "mlflow":
        class Run:
            def __enter__(self):
                calls.append(("start_run", (), {}))

            def __exit__(self, *exc):
                calls.append(("end_run", (), {}))
        for fn in ("set_tracking_uri", "set_experiment", "log_params", "log_metrics", "log_artifact"):
            setattr(module, fn, record(fn))
        module.start_run = lambda **k: calls.append(("start_run_args", (), k)) or Run()
    else:
        run = types.SimpleNamespace(summary={}, save=record("save"), finish=record("finish"))
        module.init = lambda **k: calls.append(("init", (), k)) or run
        module._run = run
    return module


@pytest.fixture
def fake(monkeypatch):
    calls: list = []
    modules = {name: _fake(name, calls) for name in ("wandb", "mlflow")}
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)
    real = extras.installed
    monkeypatch.setattr(extras, "installed", lambda m: m in modules or real(m))
    return calls, modules


def test_the_tracker_is_a_group_outside_the_cell_id():
    ids = {cell_id(api.compose(method="sd", tracker=t)) for t in TRACKERS}
    assert len(ids) == 1


def test_a_missing_tracker_package_is_a_validation_error_with_the_install_line(monkeypatch, tmp_path):
    monkeypatch.setattr(extras, "installed", lambda m: m not in ("wandb", "mlflow"))
    assert tracker_problems({"name": "mlflow"}) == [
        ("tracker", "tracker=mlflow needs the 'mlflow-skinny' package, which is not installed: "
                    "pip install 'decoding-harness[mlflow]'")]
    with pytest.raises(ConfigError, match=r"decoding-harness\[wandb\]"):
        api.run("ar", "greedy", tracker="wandb", results_dir=str(tmp_path / "r"), **FAST)
    assert not (tmp_path / "r").exists()


def test_mlflow_logs_each_finished_cell_into_the_local_file_store(fake, tmp_path):
    calls, _ = fake
    results = tmp_path / "r"
    df = api.run("sd", "greedy", tracker="mlflow", results_dir=str(results), **FAST)
    names = [c[0] for c in calls]
    assert names == ["set_tracking_uri", "set_experiment", "start_run_args", "start_run", "log_params", "log_metrics",
                     "log_artifact", "log_artifact", "end_run"]
    assert calls[0][1][0] == (results / "mlruns").absolute().as_uri()  # offline: the local file store
    params, metrics = calls[4][1][0], calls[5][1][0]
    assert params["method.name"] == "sd" and params["decoding.name"] == "greedy" and "tracker.name" not in params
    assert metrics["tokens_per_s"] == pytest.approx(df.attrs["summary"]["tokens_per_s"][0])
    assert calls[2][2]["run_name"] == df["cell_id"][0]
    assert [c[1][0].rsplit("/", 1)[1] for c in calls[6:8]] == ["summary.json", "records.jsonl"]
    calls.clear()
    api.run("sd", "greedy", tracker="mlflow", results_dir=str(results), **FAST)  # reused, not measured again
    assert calls == []


def test_wandb_runs_offline_into_the_results_folder(fake, tmp_path):
    calls, modules = fake
    results = tmp_path / "r"
    df = api.run("ar", "greedy", tracker={"name": "wandb", "project": "p"}, results_dir=str(results), **FAST)
    init = next(k for name, _, k in calls if name == "init")
    assert init["mode"] == "offline" and init["project"] == "p" and init["dir"] == str(results / "wandb")
    assert init["name"] == df["cell_id"][0] and init["config"]["method.name"] == "ar"
    assert modules["wandb"]._run.summary["new_tokens"] == 2
    assert [name for name, _, _ in calls].count("save") == 2 and calls[-1][0] == "finish"


def test_a_failing_tracker_is_a_warning_never_a_failed_cell(fake, tmp_path, caplog):
    _, modules = fake
    modules["mlflow"].log_metrics = lambda m: (_ for _ in ()).throw(ConnectionError("server down"))
    df = api.run("ar", "greedy", tracker="mlflow", results_dir=str(tmp_path / "r"), **FAST)
    assert df.attrs["outcomes"][0]["status"] == "done"
    assert "not logged (ConnectionError: server down)" in caplog.text
    assert log_cell({"name": "none"}, tmp_path, tmp_path) is False


def test_real_wandb_offline_run_holds_the_cell_s_files(tmp_path, monkeypatch):
    """Against the real package's offline mode (its local files), where wandb is installed
    (``pip install 'decoding-harness[wandb]'``); skipped otherwise."""
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_SILENT", "true")
    df = api.run("ar", "greedy", tracker="wandb", results_dir=str(tmp_path / "r"), **FAST)
    (run,) = (tmp_path / "r" / "wandb" / "wandb").glob("offline-run-*")
    assert {"summary.json", "records.jsonl"} <= {p.name for p in (run / "files").iterdir()}
    assert df.attrs["outcomes"][0]["status"] == "done"


def test_real_mlflow_file_store_holds_the_cell_s_run(tmp_path):
    """Against the real package's local file store, where mlflow is installed (``pip install
    'decoding-harness[mlflow]'``); skipped otherwise."""
    mlflow = pytest.importorskip("mlflow")
    df = api.run("ar", "greedy", tracker="mlflow", results_dir=str(tmp_path / "r"), **FAST)
    mlflow.set_tracking_uri((tmp_path / "r" / "mlruns").absolute().as_uri())
    runs = mlflow.search_runs(experiment_names=["decoding-harness"], output_format="list")
    assert [r.info.run_name for r in runs] == [df["cell_id"][0]]
    assert runs[0].data.params["method.name"] == "ar" and runs[0].data.metrics["new_tokens"] == 2
    artifacts = {a.path for a in mlflow.MlflowClient().list_artifacts(runs[0].info.run_id)}
    assert artifacts == {"summary.json", "records.jsonl"}
