"""Console entry points: ``harness`` (the Hydra app: one cell, or a sweep with ``-m``) and
``harness-report`` (see :mod:`harness.report`).

Config comes from ``conf/`` plus the decoders' Params registered in Hydra's ConfigStore
(:mod:`harness.configs`), so Hydra validates every key and type itself, and its own flags work
(``--cfg job``, ``--config-dir``, ``hydra.searchpath``, ``--help``). Before Hydra creates any folder or
the first model loads, every cell of the run or sweep is composed and validated
(:mod:`harness.validation`, a Hydra callback in ``conf/config.yaml``): on a problem the command prints
each one with its key and valid values and exits with status 2, having written nothing. Exit status 1:
some cell failed at run time (its ``error.json`` says why).

``harness -m method=ar,sd,specinfer runner.interleave=true`` runs the sweep's cells that differ only
in ``method`` as one interleaved comparison (:func:`harness.runner.run_cells`): Hydra's basic launcher
composes every job first (each job only queues its config), then the groups run. Under another launcher
(submitit), each job runs its own cell as usual. Subcommands (no Hydra app): ``harness plan``,
``harness task INDEX``, ``harness merge`` (:mod:`harness.plan`).
"""
from __future__ import annotations

import logging
import sys
from pathlib import Path

from harness.resources import conf_dir

CONF_DIR = conf_dir()
_FAILED: list[str] = []
_NOT_APPLICABLE: list[str] = []  # single runs only: in a sweep, a method/decoding pair that does not apply is skipped
_QUEUED: list[dict] = []  # runner.interleave under the basic launcher: jobs' configs, run as comparisons after the sweep


def _hydra_app():
    import hydra
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    @hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="config")
    def app(cfg) -> None:
        from harness.errors import ConfigError
        from harness.runner import run_cell

        from harness.preflight import resolved_container
        from harness.schema import runner_config

        container = resolved_container(cfg)  # bounded before resolving (harness.preflight)
        hc = HydraConfig.get()
        multirun = hc.mode == RunMode.MULTIRUN
        if multirun and runner_config(container).interleave and \
                "BasicLauncher" in str(hc.launcher.get("_target_", "")):
            _QUEUED.append(container)  # runs after the sweep, interleaved with the jobs that differ only in method
            return
        try:
            outcome = run_cell(container, container["results_dir"], force=container.get("force"))
        except ConfigError as e:  # found only at run time (e.g. a finished cell changed meanwhile): stop, no record
            _config_error(e)
        _report(outcome, multirun)

    return app


def _config_error(e) -> None:
    print(f"harness: error: {e}", file=sys.stderr, flush=True)
    sys.exit(2)


def _report(outcome, multirun: bool = True) -> None:
    print(f"[{outcome.status}] {outcome.cell_id}" + (f": {outcome.error}" if outcome.error else ""), flush=True)
    if outcome.status == "failed":
        _FAILED.append(outcome.cell_id)
    elif outcome.status == "n/a" and not multirun:
        _NOT_APPLICABLE.append(outcome.error or outcome.cell_id)


def _run_queued() -> None:
    """Run the queued jobs of an interleaved sweep, one comparison per group (see harness.plan.units)."""
    from harness.errors import ConfigError
    from harness.plan import units
    from harness.runner import run_cells

    for unit in units(_QUEUED):
        ids = ", ".join(c["method"]["name"] for c in unit)
        print(f"interleaved comparison of {len(unit)} cells: {ids}", flush=True)
        try:
            outcomes = run_cells(unit, unit[0]["results_dir"], force=unit[0].get("force"))
        except ConfigError as e:
            _config_error(e)
        for outcome in outcomes:
            _report(outcome)
    _QUEUED.clear()


def main() -> None:
    from harness.configs import register_configs
    from harness.sweeper import load_sweeper_plugin

    logging.getLogger("harness").setLevel(logging.INFO)
    sub = {"plan": "plan_main", "task": "task_main", "merge": "merge_main"}
    if len(sys.argv) > 1 and sys.argv[1] in sub:
        import harness.plan

        sys.exit(getattr(harness.plan, sub[sys.argv[1]])(sys.argv[2:]))
    register_configs()
    load_sweeper_plugin()  # hydra/sweeper=grids (the experiments' sweeper), also from a checkout not reinstalled
    from harness.preflight import check_argv

    check_argv(sys.argv[1:], str(CONF_DIR))  # before Hydra instantiates callbacks or resolves anything (exit 2)
    _hydra_app()()
    if _QUEUED:
        _run_queued()
    if _FAILED:
        print(f"harness: {len(_FAILED)} cell(s) failed; see error.json in their cell folders: {', '.join(_FAILED)}",
              file=sys.stderr)
        sys.exit(1)
    if _NOT_APPLICABLE:
        print(f"harness: error: {_NOT_APPLICABLE[0]}", file=sys.stderr)
        sys.exit(2)
