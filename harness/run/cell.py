"""What a cell is — method × decoding × pair × dataset × gpu × seed — before anything runs.

:class:`Cell` is the cell, typed: built once where the CLI (or the Python API) receives its config, each node by
its own schema (:meth:`Cell.build`), and handed as it is to the runner, the meter and the store. From a composed
cell config this module also gives the cell's plan (method and decoding resolved, parameters and
pair config validated: :func:`plan_cell`), its gpu label (:func:`gpu_label`), its id (:mod:`harness.config.identity`)
and its folder (:func:`cell_folder`, always one folder directly under ``<results_dir>/cells``), whether a
finished cell may be reused (:func:`verified_state`) and whether ``force`` reruns it (:func:`forced`).
Nothing here loads weights or writes files; the runner, validation and planning all build on it.
"""
from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence, Union

from harness.config import identity
from harness.run import fingerprint

from harness.results import store
from harness.results.trackers import TrackerConfig
from harness.decoders.base import Decoder
from harness.decoding import Decoding
from harness.errors import ConfigError, NotApplicable
from harness.methods import MethodSpec, cell_method_spec, read_decoding
from harness.models import PairSpec
from harness.resources import conf_dir

if TYPE_CHECKING:
    from harness.config.schema import ReportConfig, RunnerConfig
    from harness.energy.config import EnergyConfig
    from harness.energy.hardware import GpuProfile
    from harness.judge.config import JudgeConfig
    from harness.tasks import Task

log = logging.getLogger("harness")
FORCE_CORRUPT = "corrupt"  # force=corrupt: rerun only the cells that fail verification or conflict


@dataclass
class CellPlan:
    """What a cell runs, resolved and validated before any weights load."""

    method: MethodSpec
    decoding: Decoding | None
    pair: PairSpec

    @property
    def decoder_cls(self) -> type[Decoder]:
        return self.method.cls


def plan_cell(cfg: Mapping[str, Any]) -> CellPlan:
    """Resolve the method under the decoding (aliases, the decoding's warp) with its γ policy and draft
    selection, validate its parameters and the pair config. Raises :class:`~harness.errors.NotApplicable` for
    a method that cannot decode the requested way, :class:`~harness.errors.ConfigError` for bad input; loads
    nothing."""
    decoding = cfg.get("decoding")
    return CellPlan(cell_method_spec(cfg), read_decoding(decoding) if decoding is not None else None,
                    PairSpec.from_config(cfg["pair"]))


Force = Union[bool, str, list]  # true | false | "corrupt" | a cell id | a list of cell ids (:func:`forced`)


@dataclass(frozen=True)
class Cell:
    """One cell, typed: method × decoding × pair (the :class:`CellPlan`) × dataset (its task) × gpu × seed, the
    energy protocol, the judge and how it runs, each node built and validated by its own schema once
    (:meth:`build`). ``config`` is the composed config as plain data: what the cell id hashes
    (:mod:`harness.config.identity`) and ``summary.json`` stores. ``not_applicable``: why the method cannot
    decode the requested way (a sweep skips such a cell; ``plan`` is then None)."""

    config: Mapping[str, Any]
    plan: CellPlan | None
    dataset: Task
    gpu: GpuProfile
    energy: EnergyConfig
    judge: JudgeConfig | None
    runner: RunnerConfig
    report: ReportConfig
    seed: int
    max_new_tokens: int | None
    results_dir: str
    force: Force
    not_applicable: str | None = None
    tracker: TrackerConfig | None = None  # where the finished cell is copied (harness.results.trackers); None: nowhere

    @classmethod
    def build(cls, config: Mapping[str, Any]) -> Cell:
        """The typed cell of a composed config (plain data, interpolations resolved; its keys already checked
        against the schemas when it came from Hydra: :mod:`harness.config.keys`). Raises the first
        :class:`~harness.errors.ConfigError` of its nodes; loads nothing."""
        from harness.config.schema import field_problems
        from harness.energy.config import EnergyConfig
        from harness.tasks import load_task

        built = _VALIDATED.pop(_key(config), None)
        if built is not None:  # validation built it in this process (harness.config.validation): not twice
            return built
        config = dict(config)
        problems = field_problems(config)
        if problems:
            raise problems[0]
        try:
            plan, not_applicable = plan_cell(config), None
        except NotApplicable as e:
            plan, not_applicable = None, str(e)
        return cls.assemble(config, plan, load_task(dict(config["dataset"])),
                            EnergyConfig.from_any(config.get("energy")), not_applicable, remember=False)

    @classmethod
    def assemble(cls, config: Mapping[str, Any], plan: CellPlan | None, dataset: Task, energy: EnergyConfig,
                 not_applicable: str | None = None, remember: bool = True) -> Cell:
        """The cell from its nodes already built (validation builds the plan, the task and the energy config
        while it collects every problem); ``remember``: the next :meth:`build` of the same config in this process
        (the CLI's, once validation passed) returns it instead of building it again."""
        from harness.config.schema import ReportConfig, runner_config
        from harness.energy.hardware import GpuProfile

        config = dict(config)
        cell = cls(config=config, plan=plan, dataset=dataset, gpu=_node(GpuProfile, "gpu", config.get("gpu")),
                   energy=energy, judge=_judge(config.get("judge")), runner=runner_config(config),
                   report=_node(ReportConfig, "report", config.get("report")), seed=int(config.get("seed", 0)),
                   max_new_tokens=config.get("max_new_tokens"), results_dir=str(config.get("results_dir", "results")),
                   force=config.get("force", False), not_applicable=not_applicable,
                   tracker=_node(TrackerConfig, "tracker", config.get("tracker")))
        if remember:
            _VALIDATED[_key(config)] = cell
        return cell


_VALIDATED: dict[str, Cell] = {}  # cells validation built, by config, until the CLI takes each (once)


def _key(config: Mapping[str, Any]) -> str:
    return json.dumps(config, sort_keys=True, default=str)


def as_cell(cell: Cell | Mapping[str, Any]) -> Cell:
    """``cell`` if it is a :class:`Cell`, else the Cell of a plain composed config (the Python API's)."""
    return cell if isinstance(cell, Cell) else Cell.build(cell)


def _node(schema: type, key: str, values: Mapping[str, Any] | None) -> Any:
    try:
        return schema(**dict(values or {}))
    except TypeError as e:
        raise ConfigError(f"{key}: {e}", key=key) from e


def _judge(values: Mapping[str, Any] | None) -> Any:
    if values is None:
        return None
    from harness.judge.config import JudgeConfig

    return _node(JudgeConfig, "judge", values)


def gpu_label(gpu_cfg: Mapping[str, Any]) -> str:
    """The ``gpu`` label of a cell: the profile's name, or for ``auto`` what this machine has — ``cpu``
    without a GPU, else the matching ``conf/gpu`` profile or the device name."""
    name = gpu_cfg.get("name", "auto")
    if name != "auto":
        return name
    import torch

    if not torch.cuda.is_available():
        return "cpu"
    device = torch.cuda.get_device_name(0)
    import yaml

    for path in sorted((conf_dir() / "gpu").glob("*.yaml")):
        profile = yaml.safe_load(path.read_text()) or {}
        if any(tag in device for tag in profile.get("match") or []):
            return profile.get("name", path.stem)
    return re.sub(r"[^a-z0-9]+", "_", device.lower()).strip("_")


def cell_id(cfg: Mapping[str, Any]) -> str:
    """Readable and unique: method, decoding, pair, dataset, gpu, seed, then a hash of every setting that
    can change what the cell measures (:func:`harness.config.identity.cell_id`; gpu label already resolved)."""
    return identity.cell_id(cfg)


def labelled(cfg: Mapping[str, Any]) -> dict:
    """The config with its ``gpu`` label resolved (``auto`` → this machine's), as the cell id is taken."""
    return {**cfg, "gpu": {**cfg["gpu"], "name": gpu_label(cfg["gpu"])}} if "gpu" in cfg else dict(cfg)


def cell_folder(results_dir: str | Path, cid: str) -> Path:
    """``<results_dir>/cells/<cid>``, refused unless it is one folder directly under ``cells``."""
    cells = Path(results_dir) / "cells"
    folder = cells / cid
    if cid in ("", ".", "..") or folder.resolve().parent != cells.resolve():
        raise ConfigError(f"cell id '{cid}' is not one folder name under {cells}")
    return folder


def prepare_cell(cfg: Mapping[str, Any], results_dir: str | Path = "results") -> tuple[dict, str, Path]:
    """(config with the ``gpu`` label resolved, cell id, cell folder) — what a cell is called and where
    it lives, without running anything (shared by the runner, validation and ``harness plan``). A cell already in
    ``results_dir`` (finished or partly run) under another of its ids keeps it: measured under another identity
    version, or an alias cell measured before aliases were named by their decoder (:func:`identity.known_ids`)."""
    cfg = labelled(cfg)
    cid, *others = identity.known_ids(cfg)
    folder = cell_folder(results_dir, cid)
    if not folder.exists():
        for old in others:
            if cell_folder(results_dir, old).exists():
                return cfg, old, cell_folder(results_dir, old)
    return cfg, cid, folder


def interleave_key(cfg: Mapping[str, Any]) -> str:
    """Cells that can run as one interleaved comparison share everything but the method's side
    (:data:`harness.config.identity.METHOD_SIDE_KEYS`: method, γ policy, draft selection): their comparison group."""
    return json.dumps({k: v for k, v in cfg.items() if k not in identity.METHOD_SIDE_KEYS}, sort_keys=True,
                      default=str)


def prompt_seed(seed: int, index: int) -> int:
    """The seed of prompt ``index``'s generation: every prompt is seeded on its own (resume, interleaving)."""
    return seed * 1_000_003 + index


def verified_state(cell_dir: Path, cfg: Mapping[str, Any]) -> tuple[str, str]:
    """("done" | "corrupt" | "conflict" | "none", detail) of a cell folder for the config ``cfg``: "done" is a
    finished cell whose files verify (:func:`harness.results.store.finished_state`) and whose stored config has
    ``cfg``'s identity and whose data and weights are still those of its records; "conflict" a verified cell
    measured under another identity or from other inputs; "corrupt" a cell whose
    files fail verification (repaired on its own when it runs)."""
    state, detail = store.finished_state(cell_dir)
    if state != "done":
        return state, detail
    try:
        identity.check_reusable(cell_dir, cfg)
        fingerprint.check_finished(cell_dir, cfg)  # its data file and weights are still those of its records
    except identity.CellConflict as e:
        return "conflict", str(e)
    return "done", ""


def forced(force: Any, cid: str | Sequence[str], state: str) -> bool:
    """Whether ``force`` reruns cell ``cid`` (in ``state``) from scratch: ``true`` every cell; ``corrupt``
    the cells that fail verification or conflict; a cell id, or a list of them, those cells. ``cid`` may be every id
    of the cell (:func:`identity.known_ids`: ``force=`` names a cell by any of them)."""
    if force is True:
        return True
    if not force or isinstance(force, bool):
        return False
    ids = {cid} if isinstance(cid, str) else set(cid)
    values = force if isinstance(force, (list, tuple)) else [force]
    return any(v in ids or (v == FORCE_CORRUPT and state in ("corrupt", "conflict")) for v in values)


def unknown_forced_ids(cfgs: list[Mapping[str, Any]]) -> tuple[list[str], list[str]]:
    """(the cell ids ``force`` names that are no cell of ``cfgs``, the cells' ids: every id each may have)."""
    named: set[str] = set()
    for cfg in cfgs:
        force = cfg.get("force")
        values = [force] if isinstance(force, str) else force if isinstance(force, (list, tuple)) else []
        named |= {v for v in values if isinstance(v, str) and v != FORCE_CORRUPT}
    if not named:
        return [], []
    ids = []
    for cfg in cfgs:
        try:
            ids += identity.known_ids(labelled(cfg))
        except (KeyError, TypeError):
            pass
    return sorted(named - set(ids)), ids
