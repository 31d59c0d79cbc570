"""Experiment trackers (issue 33.7): ``tracker=wandb`` or ``tracker=mlflow`` logs every finished cell — its
config as parameters, the summary's numbers as metrics, ``summary.json`` and ``records.jsonl`` as files — to
Weights & Biases or MLflow; ``tracker=none`` (the default) logs nothing.

Offline by default: wandb runs in ``offline`` mode into ``<results_dir>/wandb`` (``wandb sync`` uploads later;
``tracker.offline=false`` logs online), MLflow into the local file store ``<results_dir>/mlruns`` (``mlflow ui
--backend-store-uri <results_dir>/mlruns``; ``tracker.uri`` names a tracking server or a database store such as
``sqlite:///mlflow.db``, which needs the full ``mlflow`` package; MLflow 3 keeps the file store in maintenance mode,
and the harness sets its opt-in ``MLFLOW_ALLOW_FILE_STORE=true`` for the default). The packages are optional
extras (``pip install 'decoding-harness[wandb]'`` / ``[mlflow]``), checked in validation before any model loads.

A tracker only copies what the cell wrote: the records and summary on disk are the measurement, and a tracker
that fails (no network, a full disk) is a warning, never a failed cell. The key is not in the cell id
(:data:`harness.config.identity.RESULT_NEUTRAL_KEYS`).
"""
from __future__ import annotations

import json
import logging
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional

log = logging.getLogger("harness")
GROUP = "tracker"
TRACKERS = ("none", "wandb", "mlflow")
MAX_PARAM_CHARS = 500  # MLflow's limit on a parameter's value in older servers; wandb takes any


@dataclass
class TrackerConfig:
    name: str = field(default="none", metadata={"help": "none | wandb | mlflow"})
    project: str = field(default="decoding-harness", metadata={"help": "wandb project / MLflow experiment"})
    offline: bool = field(default=True, metadata={"help": "wandb: offline mode (wandb sync uploads later)"})
    uri: Optional[str] = field(default=None, metadata={"help": "MLflow tracking URI (null: <results_dir>/mlruns)"})
    dir: Optional[str] = field(default=None, metadata={"help": "wandb's folder (null: <results_dir>/wandb)"})


def register_tracker_configs(cs) -> None:
    """``tracker=none | wandb | mlflow`` in Hydra's ConfigStore (typed: Hydra checks keys and types)."""
    for name in TRACKERS:
        cs.store(group=GROUP, name=name, node=TrackerConfig(name=name))


def tracker_problems(tracker: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    """``(key, message)``: an unknown tracker, or its package not installed (with the install line)."""
    from harness.config import extras

    name = (tracker or {}).get("name", "none")
    if name not in TRACKERS:
        return [("tracker", f"unknown tracker '{name}'. Valid: {', '.join(TRACKERS)}")]
    if name == "none":
        return []
    return [("tracker", m) for m in extras.missing([name], f"tracker={name}")]


def cell_payload(cell_dir: Path) -> tuple[str, dict, dict, list[Path]]:
    """(cell id, parameters: the config flattened, metrics: the summary's finite numbers, files to attach)."""
    from harness.config.identity import flatten

    summary = json.loads((Path(cell_dir) / "summary.json").read_text(encoding="utf-8"))
    params = {k: v for k, v in flatten(summary.get("config") or {}).items() if not k.startswith(("tracker", "judge"))}
    metrics = {k: float(v) for k, v in summary.items()
               if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}
    files = [p for p in (Path(cell_dir) / "summary.json", Path(cell_dir) / "records.jsonl") if p.is_file()]
    return Path(cell_dir).name, params, metrics, files


def _wandb(cfg: TrackerConfig, results_dir: Path, cid: str, params: dict, metrics: dict, files: list[Path]) -> None:
    import wandb

    folder = Path(cfg.dir) if cfg.dir else results_dir / "wandb"
    folder.mkdir(parents=True, exist_ok=True)
    run_id = re.sub(r"[^A-Za-z0-9_-]", "-", cid)[-64:]  # wandb's id alphabet and length; the id's hash is at the end
    run = wandb.init(project=cfg.project, name=cid, id=run_id, config=params, dir=str(folder),
                     mode="offline" if cfg.offline else "online", resume="allow", reinit=True)
    try:
        run.summary.update(metrics)
        for f in files:
            run.save(str(f), base_path=str(f.parent), policy="now")
    finally:
        run.finish()


def _mlflow(cfg: TrackerConfig, results_dir: Path, cid: str, params: dict, metrics: dict, files: list[Path]) -> None:
    import os

    import mlflow

    if cfg.uri is None:  # the local file store: MLflow >= 3.x keeps it in maintenance mode behind this opt-in (the
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")  # database stores need sqlalchemy: full mlflow)
    mlflow.set_tracking_uri(cfg.uri or (results_dir / "mlruns").absolute().as_uri())
    mlflow.set_experiment(cfg.project)
    with mlflow.start_run(run_name=cid):
        mlflow.log_params({k: str(v)[:MAX_PARAM_CHARS] for k, v in params.items()})
        mlflow.log_metrics(metrics)
        for f in files:
            mlflow.log_artifact(str(f))


BACKENDS = {"wandb": _wandb, "mlflow": _mlflow}


def log_cell(tracker: TrackerConfig | Mapping[str, Any] | None, cell_dir: str | Path, results_dir: str | Path) -> bool:
    """Log one finished cell to the configured tracker; True when it was logged. A tracker's failure is a
    warning: the cell's files are the measurement, and they are written."""
    cfg = tracker if isinstance(tracker, TrackerConfig) else TrackerConfig(**(tracker or {}))
    if cfg.name == "none":
        return False
    try:
        BACKENDS[cfg.name](cfg, Path(results_dir), *cell_payload(Path(cell_dir)))
    except Exception as e:  # noqa: BLE001 — never fail a measured cell for its copy
        log.warning("tracker %s: cell %s not logged (%s: %s); its files are in %s", cfg.name, Path(cell_dir).name,
                    type(e).__name__, e, cell_dir)
        return False
    return True


__all__ = ["TRACKERS", "TrackerConfig", "log_cell", "register_tracker_configs", "tracker_problems"]
