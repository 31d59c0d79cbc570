"""Console entry points: ``harness`` (the Hydra app: one cell, or a sweep with ``-m``) and
``harness-report`` (see :mod:`harness.report`).

Config comes from ``conf/`` plus the decoders' Params registered in Hydra's ConfigStore
(:mod:`harness.config.groups`), so Hydra validates every key and type itself, and its own flags work
(``--cfg job``, ``--config-dir``, ``hydra.searchpath``; ``--help`` lists the subcommands too). Before Hydra
creates any folder or the first model loads, every cell of the run or sweep is composed and validated
(:mod:`harness.config.validation`, a Hydra callback in ``conf/config.yaml``): on a problem the command prints
each one with its key and valid values and exits with status 2, having written nothing; so do the
configuration errors Hydra itself detects (an unknown key or group option, a value of the wrong type, an
override it cannot parse), which Hydra alone would end with status 1. Exit status 1: some cell failed at
run time (its ``error.json`` says why).

``harness -m method=ar,sd,specinfer runner.interleave=true`` runs the sweep's cells that differ only
in ``method`` as one interleaved comparison (:func:`harness.run.runner.run_cells`): Hydra's basic launcher
composes every job first (each job only queues its config), then the groups run. Under another launcher
(submitit), each job runs its own cell as usual. Subcommands (no Hydra app; :data:`SUBCOMMANDS`): ``plan``,
``task``, ``merge`` (:mod:`harness.run.plan`), ``report`` (= ``harness-report``), ``ls``
(:mod:`harness.cli.catalog`), ``gpu-check``, ``power-probe``;
``harness --version`` prints the harness's version.
"""
from __future__ import annotations

import logging
import sys
from pathlib import Path

from harness.resources import conf_dir

CONF_DIR = conf_dir()
EXIT_CONFIG = 2
# name -> (module, function, one line for `harness --help`)
SUBCOMMANDS: dict[str, tuple[str, str, str]] = {
    "plan": ("harness.run.plan", "plan_main", "the cells of a sweep, their status; --write PLAN.json for array tasks"),
    "task": ("harness.run.plan", "task_main", "run one unit of a sweep: harness task [--plan PLAN.json] INDEX"),
    "merge": ("harness.run.plan", "merge_main", "copy the finished cells of results folders into one"),
    "push": ("harness.results.push", "push_main", "publish finished cells: --to DIR, or --hub OWNER/NAME (a dataset)"),
    "report": ("harness.report", "main", "read results/, write the report (= harness-report)"),
    "ls": ("harness.cli.catalog", "ls_main", "list methods, policies, datasets, pairs, ... with each key's help"),
    "gpu-check": ("harness.tools.gpu_check", "main",
                  "validate a GPU machine (= harness-gpu-check)"),
    "power-probe": ("harness.tools.probe", "main",
                    "what power readings this machine offers (= harness-power-probe)"),
}
_FAILED: list[str] = []
_NOT_APPLICABLE: list[str] = []  # single runs only: in a sweep, a method/decoding pair that does not apply is skipped
_QUEUED: list = []  # runner.interleave under the basic launcher: jobs' typed cells, run as comparisons after the sweep
_CELLS: list = []  # outcomes of this process's cells (a local sweep's results.json)
_SWEEP: dict = {}  # the multirun's argv and Hydra sweep folder


def _hydra_app():
    import hydra
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    @hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="config")
    def app(cfg) -> None:
        from harness.errors import ConfigError
        from harness.run.runner import run_cell

        from harness.config.preflight import resolved_container
        from harness.run.cell import Cell

        hc = HydraConfig.get()
        multirun = hc.mode == RunMode.MULTIRUN
        try:  # the typed cell, each node validated by its schema once; from here on the cell is this object
            cell = Cell.build(resolved_container(cfg))  # bounded before resolving (harness.config.preflight)
        except ConfigError as e:
            _config_error(e)
        if multirun and not _SWEEP:
            _SWEEP.update(argv=sys.argv[1:], sweep_dir=str(hc.sweep.dir), launcher=str(hc.launcher.get("_target_", "")))
        if multirun and cell.runner.interleave and "BasicLauncher" in str(hc.launcher.get("_target_", "")):
            _QUEUED.append(cell)  # runs after the sweep, interleaved with the jobs that differ only in method
            return
        try:
            outcome = run_cell(cell, cell.results_dir, force=cell.force)
        except ConfigError as e:  # found only at run time (e.g. a finished cell changed meanwhile): stop, no record
            _config_error(e)
        _report(outcome, multirun)
        if outcome.status == "failed" and multirun and "BasicLauncher" not in str(hc.launcher.get("_target_", "")):
            # a job of another launcher (submitit) fails with its cell, so that `harness -m` exits 1 there too
            raise CellFailed(f"cell {outcome.cell_id} failed: {outcome.error}")

    return app


class CellFailed(RuntimeError):
    """A cell failed at run time (its error.json says why): the job's outcome under a remote launcher."""


def _config_error(e) -> None:
    print(f"harness: error: {e}", file=sys.stderr, flush=True)
    sys.exit(2)


def _report(outcome, multirun: bool = True) -> None:
    print(outcome.line(), flush=True)
    _CELLS.append(outcome)
    if outcome.status == "failed":
        _FAILED.append(outcome.cell_id)
    elif outcome.status == "n/a" and not multirun:
        _NOT_APPLICABLE.append(outcome.error or outcome.cell_id)


def _write_results_json() -> None:
    """One ``results.json`` per local sweep (:func:`harness.results.provenance.write_results_json`): in the sweep's
    Hydra folder (kept) and as ``<results_dir>/results.json`` (the latest sweep into that folder)."""
    import shutil

    from harness.results.provenance import write_results_json

    by_dir: dict = {}
    for o in _CELLS:
        if o.status != "n/a":
            by_dir.setdefault(o.cell_dir.parent.parent, []).append(o.cell_id)
    for results_dir, ids in by_dir.items():
        path = write_results_json(results_dir, ids, dict(_SWEEP))
        sweep_dir = Path(_SWEEP.get("sweep_dir", ""))
        if _SWEEP.get("sweep_dir") and sweep_dir.is_dir():
            shutil.copyfile(path, sweep_dir / path.name)


def _run_queued() -> None:
    """Run the queued jobs of an interleaved sweep, one comparison per group (see harness.run.plan.units)."""
    from harness.errors import ConfigError
    from harness.run.plan import units
    from harness.run.runner import run_cells

    by_config = {id(c.config): c for c in _QUEUED}
    for unit in units([c.config for c in _QUEUED]):  # grouped by their configs (harness.run.plan.units)
        cells = [by_config[id(config)] for config in unit]
        ids = ", ".join(c.config["method"]["name"] for c in cells)
        print(f"interleaved comparison of {len(cells)} cells: {ids}", flush=True)
        try:
            outcomes = run_cells(cells, cells[0].results_dir, force=cells[0].force)
        except ConfigError as e:
            _config_error(e)
        for outcome in outcomes:
            _report(outcome)
    _QUEUED.clear()


def _subcommand(name: str, argv: list[str]) -> int:
    import importlib

    module, func, _ = SUBCOMMANDS[name]
    try:
        rc = getattr(importlib.import_module(module), func)(argv)
    except Exception as e:  # noqa: BLE001 — configuration errors exit 2 with one line; anything else is a bug
        if not is_config_error(e):
            raise
        print(f"harness {name}: error: {e}", file=sys.stderr)
        return EXIT_CONFIG
    return int(rc or 0)


def is_config_error(e: BaseException | None) -> bool:
    """Whether an exception is a configuration error: the harness's own, or one Hydra/OmegaConf raise while
    composing (unknown key or group option, wrong type, unparsable override, missing config)."""
    if e is None:
        return False
    from hydra.errors import ConfigCompositionException, MissingConfigException, OverrideParseException
    from omegaconf.errors import OmegaConfBaseException

    from harness.errors import ConfigError

    return isinstance(e, (ConfigError, ConfigCompositionException, MissingConfigException, OverrideParseException,
                          OmegaConfBaseException))


def _unparsable(argv: list[str]) -> list[str]:
    """The command-line overrides Hydra's grammar rejects (its own message does not name them)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import OverrideParseException

    parser, bad = OverridesParser.create(), []
    for arg in argv:
        if "=" in arg and not arg.startswith("-"):
            try:
                parser.parse_overrides([arg])
            except OverrideParseException:
                bad.append(arg)
    return bad


def _version() -> str:
    from harness import __version__

    return f"harness {__version__}"


def usage() -> str:
    """The first part of ``harness --help``: every command (Hydra's help of the config follows)."""
    width = max(len(n) for n in SUBCOMMANDS) + 2
    lines = [f"{_version()}: benchmark LLM decoding methods (time, energy, quality) over Hydra sweeps.", "",
             "Usage:",
             "  harness [OVERRIDES...]          run one cell (method x decoding x pair x dataset x gpu x seed)",
             "  harness -m OVERRIDES...         run a sweep (comma-separated values, +experiment=NAME, ...)",
             "  harness COMMAND [ARGS...]       one of the commands below (COMMAND --help for its options)",
             "  harness --version | --help | --cfg job [OVERRIDES...]", "", "Commands:"]
    lines += [f"  {name:<{width}}{text}" for name, (_, _, text) in SUBCOMMANDS.items()]
    lines += ["", "Exit status: 0 done; 1 a cell failed at run time (see its error.json); 2 a configuration error "
              "(nothing written).", ""]
    return "\n".join(lines)


def job_dirname(override_dirname: str, limit: int = 200) -> str:
    """``${harness_dirname:...}`` (``hydra.sweep.subdir``): Hydra's override_dirname with ``/`` replaced, so an
    override holding a path (``dataset.hf_dataset=/data/x.json``) makes one folder, not a tree of them; a name
    longer than ``limit`` bytes (file systems allow 255) keeps its start and ends with a hash of the whole."""
    import hashlib

    name = str(override_dirname).replace("/", "_") or "default"
    if len(name.encode()) <= limit:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:12]
    return name.encode()[: limit - 16].decode(errors="ignore") + "..." + digest


def register_resolvers() -> None:
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver("harness_dirname"):
        OmegaConf.register_new_resolver("harness_dirname", job_dirname)


register_resolvers()


EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a command ended by Ctrl-C
INTERRUPTED = "interrupted: rerun the same command to resume"


def main() -> None:
    """``harness``: Ctrl-C ends it with one line (:data:`INTERRUPTED`) and status 130, not a traceback: every
    finished prompt's record is on disk, and the same command resumes each cell at its next prompt."""
    try:
        _main(sys.argv[1:])
    except KeyboardInterrupt:
        print(f"\n{INTERRUPTED}", file=sys.stderr, flush=True)
        sys.exit(EXIT_INTERRUPTED)


def _main(argv: list[str]) -> None:
    if "--version" in argv or argv[:1] == ["-V"]:  # before anything heavy: no torch, no Hydra (tests/test_cli.py)
        print(_version())
        return
    from harness.config.legacy import upgrade_overrides

    logging.getLogger("harness").setLevel(logging.INFO)
    sys.argv[1:] = argv = upgrade_overrides(argv)  # deprecated keys and presets -> their names now (with a message)
    if "--help" in argv or "-h" in argv:
        print(usage())  # then Hydra's help: the config groups and the composed config
    if argv and argv[0] in SUBCOMMANDS:
        sys.exit(_subcommand(argv[0], argv[1:]))
    _run_hydra(argv)


def _run_hydra(argv: list[str]) -> None:
    """The Hydra app (one cell, or a sweep with ``-m``), then the queued comparisons, results.json and the exit
    status."""
    from harness.config.groups import register_configs
    from harness.config.preflight import check_argv
    from harness.run.sweeper import load_sweeper_plugin

    register_configs()
    load_sweeper_plugin()  # hydra/sweeper=grids (the experiments' sweeper), also from a checkout not reinstalled
    check_argv(argv, str(CONF_DIR))  # before Hydra instantiates callbacks or resolves anything (exit 2)
    try:
        _hydra_app()()
    except SystemExit as e:  # Hydra reports its own errors and exits 1; a configuration error exits 2
        if e.code == 1 and is_config_error(e.__context__):
            for bad in _unparsable(argv):
                print(f"harness: error: cannot parse the override '{bad}' (Hydra's override grammar)", file=sys.stderr)
            sys.exit(EXIT_CONFIG)
        raise
    if _QUEUED:
        _run_queued()
    if _SWEEP and _CELLS:
        _write_results_json()
    if _FAILED:
        print(f"harness: {len(_FAILED)} cell(s) failed; see error.json in their cell folders: {', '.join(_FAILED)}",
              file=sys.stderr)
        sys.exit(1)
    if _NOT_APPLICABLE:
        print(f"harness: error: {_NOT_APPLICABLE[0]}", file=sys.stderr)
        sys.exit(2)
