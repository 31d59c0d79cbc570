"""Validation of every cell of a run or sweep before the first model loads.

(This module is long because it is the one contract a cell passes before anything loads — each check reports
every problem of every cell at once, with its key — and a sweep's expansion shares its problem type.)

``harness`` (single run or ``-m`` sweep) composes each cell's config exactly as Hydra's launcher will
(:class:`ValidateCells`, a Hydra callback: ``on_run_start`` / ``on_multirun_start``, i.e. before Hydra
creates any output folder) and checks it here without loading weights. Each value's own range is its
schema's: the top-level and ``runner`` keys (:mod:`harness.config.schema`), the method's Params under the decoding
(:func:`harness.run.cell.plan_cell`), the pair (:class:`harness.models.PairSpec`), the dataset's task, the energy
config; each raises a :class:`~harness.errors.ConfigError` carrying its key. Here, how they fit together:

* a method that needs a draft on a pair without one; a method that does not apply to the decoding;
* the optional packages of the task and the tracker (:mod:`harness.config.extras`: the install line); a hub model
  neither cached nor downloadable (:func:`harness.models.hub_problems`: one short probe, never minutes of retries);
* the dataset's data file read as the cell will read it (missing, not UTF-8, malformed: the file is named),
  at least one prompt, no prompt that tokenizes to nothing (tokenizers load, weights do not);
* the trained context (from the models' configs, when available locally): ``max_new_tokens`` plus the
  method's lookahead must leave room for a prompt (:mod:`harness.run.context`);
* ``results_dir`` is writable with room to spare (nothing is created to find out);
* a finished cell at the same id was measured under the same identity (:func:`harness.config.identity.check_reusable`)
  unless ``force`` names it; ``force=<id>`` names cells of this run.

Every problem is printed with its key and valid values; the command exits 2 having written nothing. A method that
does not apply to the decoding (``NotApplicable``) is skipped in a sweep and an error (status 2) in a single run.
Runtime failures (out of memory, a crashing model) are recorded per cell in ``error.json``; config errors never.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

from hydra.experimental.callback import Callback

from harness.config import extras
from harness.config import identity
from harness.run.context import pair_positions, prompt_budget, resolve_max_new_tokens
from harness.errors import ConfigError, NotApplicable
from harness.config.schema import field_problems

log = logging.getLogger("harness")
EXIT_CONFIG = 2
WARP_KEYS = ("temperature", "top_k", "top_p")
MIN_FREE_BYTES = 16 << 20  # a results folder's file system needs room for a cell's files and Hydra's


@dataclass(frozen=True)
class Problem:
    key: str
    message: str
    cell: str = ""  # the cell's overrides (a sweep) or id

    def __str__(self) -> str:
        where = f" [{self.cell}]" if self.cell else ""
        text = self.message if self.message.startswith(self.key) else f"{self.key}: {self.message}"
        return text + where


# ---- keys of errors whose raiser does not name one -----------------------------------------------------

def _method_key(message: str, cfg: Mapping[str, Any]) -> str:
    """The config key a Params/warp error is about, for errors raised without a key (the decoders' Params
    checks): ``decoding.<k>`` for the warp under a decoding, else ``method.<k>`` for the first method key the
    message names, else ``method``."""
    head = message.split(" ")[0].strip("'\":,")
    method_keys = [k for k in (cfg.get("method") or {}) if k != "name"]
    if head in WARP_KEYS:
        return f"decoding.{head}" if cfg.get("decoding") is not None else f"method.{head}"
    for k in sorted(method_keys, key=len, reverse=True):
        if k == head or f"'{k}'" in message or message.startswith(f"{k} ") or f" {k} " in message:
            return f"method.{k}"
    for k in WARP_KEYS:
        if k in message:
            return f"decoding.{k}" if cfg.get("decoding") is not None else f"method.{k}"
    return "method"


# ---- datasets and models (cached across the cells of a sweep) ----------------------------------------------

class _Cache:
    def __init__(self):
        self.examples: dict[str, Any] = {}
        self.tokenizers: dict[str, Any] = {}
        self.positions: dict[str, int | None] = {}
        self.writable: dict[str, str | None] = {}
        self.lengths: dict[tuple[str, str], list[int]] = {}


def dataset_examples(dataset_cfg: Mapping[str, Any], cache: _Cache | None = None):
    """(task, examples) for a dataset config, or raise :class:`ConfigError` naming the key or the file."""
    from harness.tasks import load_task

    key = json.dumps(dataset_cfg, sort_keys=True, default=str)
    if cache is not None and key in cache.examples:
        return cache.examples[key]
    task = load_task(dict(dataset_cfg))
    needs = extras.missing(task.required_modules(), f"dataset '{dataset_cfg.get('name')}' (task '{task.kind}')")
    if needs:  # before reading the data or loading a model: the install line, not a failure after generating
        raise ConfigError("; ".join(needs), key="dataset")
    examples = task.examples()
    if cache is not None:
        cache.examples[key] = (task, examples)
    return task, examples


def _tokenizer(ref: str, cache: _Cache):
    if ref not in cache.tokenizers:
        try:
            from harness.models import load_tokenizer

            cache.tokenizers[ref] = load_tokenizer(ref)
        except Exception as e:  # noqa: BLE001 — not available offline: checked again when the cell loads
            log.debug("validation: tokenizer of %s not available (%s); prompt checks skipped", ref, e)
            cache.tokenizers[ref] = None
    return cache.tokenizers[ref]


def _positions(refs: list[str], cache: _Cache) -> int | None:
    key = "|".join(refs)
    if key not in cache.positions:
        try:
            from transformers import AutoConfig

            from harness.models import resolve_model_path

            configs = [AutoConfig.from_pretrained(resolve_model_path(r), local_files_only=True) for r in refs]
            cache.positions[key] = pair_positions(configs[0], configs[1:])
        except Exception as e:  # noqa: BLE001 — a hub model not cached locally: no context check here
            log.debug("validation: configs of %s not available (%s); context check skipped", refs, e)
            cache.positions[key] = None
    return cache.positions[key]


def writable_problem(results_dir: str | os.PathLike) -> str | None:
    """Why ``results_dir`` cannot hold results (None when it can), without creating anything: the folder, or
    its nearest existing ancestor, must be a writable directory."""
    path = Path(results_dir).expanduser().absolute()
    probe = path
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if not probe.is_dir():
        return f"'{probe}' is not a directory, so '{path}' cannot be created"
    if not os.access(probe, os.W_OK | os.X_OK):
        return f"'{probe}' is not writable (read-only folder or file system)"
    free = shutil.disk_usage(probe).free
    if free < MIN_FREE_BYTES:
        return (f"the file system of '{probe}' has {free / 2**20:.1f} MiB free; a results folder needs at least "
                f"{MIN_FREE_BYTES >> 20} MiB (free some space, or choose another results_dir)")
    cells = path / "cells"
    if cells.exists() and (not cells.is_dir() or not os.access(cells, os.W_OK | os.X_OK)):
        return f"'{cells}' is not a writable directory"
    return None


# ---- one cell --------------------------------------------------------------------------------------------

def validate_cell(cfg: Mapping[str, Any], cache: _Cache | None = None, label: str = "",
                  single: bool = True) -> list[Problem]:
    """Every problem of one composed cell config (a plain dict, interpolations resolved). Loads no weights.
    ``single``: a method that does not apply to the decoding is a problem (a sweep skips such cells). Each
    value's own range is its schema's (:func:`harness.config.schema.field_problems`, the task's and pair's checks);
    what is checked here is how the values fit together."""
    cache = cache or _Cache()
    problems = [Problem(e.key or "config", str(e), label) for e in field_problems(cfg)]

    def add(key: str, message: str) -> None:
        problems.append(Problem(key, message, label))

    from harness.energy import EnergyConfig

    energy = None
    try:
        energy = EnergyConfig.from_any(dict(cfg["energy"]) if cfg.get("energy") is not None else None)
    except (ConfigError, TypeError, ValueError) as e:
        add(getattr(e, "key", None) or "energy", str(e))
    plan = _plan(cfg, add, single)
    task, examples = _dataset(cfg.get("dataset") or {}, cache, add)
    if plan is not None and task is not None and examples:
        max_new_ok = not any(p.key in ("max_new_tokens", "dataset.max_new_tokens") for p in problems)
        _fit(cfg, plan, task, examples, cache, add, max_new_ok)
    from harness.judge import judge_problems
    from harness.results.trackers import tracker_problems

    judged = judge_problems(cfg["judge"], task, single=single) if cfg.get("judge") is not None else []
    for key, message in [*judged, *tracker_problems(cfg.get("tracker"))]:  # the judge's endpoint, key, model; the
        add(key, message)  # tracker's name and package
    results_dir = str(cfg.get("results_dir", "results"))
    if results_dir not in cache.writable:
        cache.writable[results_dir] = writable_problem(results_dir)
    unwritable = cache.writable[results_dir]
    if unwritable:
        add("results_dir", unwritable)
    elif plan is not None:
        _check_cell_folder(cfg, results_dir, add)
    if not problems and plan is not None and task is not None and energy is not None:
        _remember(cfg, plan, task, energy)
    return problems


def _remember(cfg: Mapping[str, Any], plan, task, energy) -> None:
    """The typed cell from the nodes validated here, for the CLI to run as it is (:meth:`harness.run.cell.Cell.build`
    of this config returns it: each node validated once)."""
    from harness.run.cell import Cell

    try:
        Cell.assemble(cfg, plan, task, energy)
    except ConfigError:  # a node validation does not build (gpu, judge, report): Cell.build reports it
        pass


def _plan(cfg: Mapping[str, Any], add, single: bool):
    """The cell's plan (method × decoding, the method's parameters, the pair), or None with its problem."""
    from harness.run.cell import plan_cell

    try:
        return plan_cell(dict(cfg))
    except NotApplicable as e:  # a sweep skips the cell; its other settings are still checked
        if single:
            add("method", str(e))
    except ConfigError as e:
        add(e.key or _method_key(str(e), cfg), str(e))
    except (TypeError, ValueError) as e:
        add("method", f"{type(e).__name__}: {e}")
    return None


def _dataset(dataset: Mapping[str, Any], cache: _Cache, add) -> tuple[Any, list]:
    """(task, examples) read as the cell will read them, or (None, []) with the problem."""
    try:
        task, examples = dataset_examples(dataset, cache)
    except ConfigError as e:
        add(e.key or "dataset", str(e))
        return None, []
    except Exception as e:  # noqa: BLE001 — a missing/unreadable data file: named in the message
        add("dataset.path", f"dataset '{dataset.get('name')}' cannot be read: {type(e).__name__}: {e}")
        return None, []
    if not examples:
        add("dataset", f"dataset '{dataset.get('name')}' produced no prompts (check dataset.path and its filters, "
                       "e.g. prompt_words)")
    return task, examples


def _fit(cfg: Mapping[str, Any], plan, task, examples: list, cache: _Cache, add, max_new_ok: bool) -> None:
    """The method fits the pair (a draft where it needs one; its hub models reachable) and the context (room for
    a prompt); no prompt tokenizes to nothing."""
    from harness.models import hub_problems

    if plan.method.needs_draft and not plan.pair.draft:
        add("pair.draft", f"method '{plan.decoder_cls.method}' needs a draft model; pair '{plan.pair.name}' has "
                          "none (set pair.draft)")
    refusal = plan.decoder_cls.graphs_refusal
    if plan.pair.execution == "graphs" and refusal:
        add("pair.execution", f"method '{plan.decoder_cls.method}' cannot run with pair.execution=graphs: {refusal}")
    hub = [add(key, message) for key, message in hub_problems(plan.pair)]  # the hub probed once per process
    if hub:
        return  # its tokenizer and config cannot be read either
    max_new = resolve_max_new_tokens(cfg, task.max_new_tokens) if max_new_ok else None
    n_positions = _positions([plan.pair.target, *plan.pair.draft_ids], cache)
    extra = plan.method.lookahead
    if max_new is not None and n_positions is not None and prompt_budget(n_positions, max_new, extra) < 1:
        add("max_new_tokens", f"{max_new} (+ lookahead {extra} of {plan.decoder_cls.method}) leaves no room for a "
                              f"prompt in the model's {n_positions} positions: valid 1..{n_positions - extra - 1}")
    tok = _tokenizer(plan.pair.target, cache)
    if tok is None:
        return
    dataset = cfg.get("dataset") or {}
    key = (json.dumps(dataset, sort_keys=True, default=str), plan.pair.target)
    try:
        if key not in cache.lengths:
            cache.lengths[key] = [len(task.prompt_ids(ex, tok)) for ex in examples]
    except ConfigError as e:
        add(e.key or "dataset", str(e))
        return
    empty = [ex.id for ex, n in zip(examples, cache.lengths[key]) if n == 0]
    if empty:
        add("dataset", f"{len(empty)} prompt(s) of dataset '{dataset.get('name')}' are empty after tokenization "
                       f"(ids: {', '.join(map(str, empty[:5]))}); remove them from the data")


def _check_cell_folder(cfg: Mapping[str, Any], results_dir: str, add) -> None:
    """A finished cell at this id must have been measured under this identity, unless ``force`` names it; a
    cell whose files fail verification is repaired on its own when it runs (a warning, not a problem)."""
    from harness.run.cell import forced, prepare_cell, verified_state

    try:
        labelled, cid, cell_dir = prepare_cell(cfg, results_dir)
    except (KeyError, TypeError) as e:
        add("config", f"incomplete cell config: {type(e).__name__}: {e}")
        return
    except ConfigError as e:
        add("results_dir", str(e))
        return
    if not (cell_dir / identity.SUMMARY).is_file():
        return
    state, detail = verified_state(cell_dir, labelled)
    ids = identity.known_ids(labelled)  # force= names the cell by any of its ids
    if state == "conflict" and not forced(cfg.get("force"), ids, state):
        add("results_dir", detail)
    elif state == "corrupt" and not forced(cfg.get("force"), ids, state):
        log.warning("cell %s fails verification (%s); it will be repaired: records that fail their checksum or "
                    "range are rerun (force=corrupt reruns such cells from scratch)", cid, detail)


def validate_cells(cells: Iterable[tuple[str, Mapping[str, Any]]], single: bool = False) -> list[Problem]:
    """Problems of every ``(label, config)`` cell; each distinct problem once (the first cell that has it)."""
    cache = _Cache()
    seen: dict[tuple[str, str], Problem] = {}
    counts: dict[tuple[str, str], int] = {}
    cells = list(cells)
    for label, cfg in cells:
        for p in validate_cell(cfg, cache, label, single=single):
            seen.setdefault((p.key, p.message), p)
            counts[(p.key, p.message)] = counts.get((p.key, p.message), 0) + 1
    for p in _unknown_forced_ids(cells):
        seen.setdefault((p.key, p.message), p)
        counts[(p.key, p.message)] = 1
    return [dataclasses.replace(p, cell=f"{p.cell} and {counts[k] - 1} more cell(s)") if counts[k] > 1 and p.cell else p
            for k, p in seen.items()]


def _unknown_forced_ids(cells: list[tuple[str, Mapping[str, Any]]]) -> list[Problem]:
    """``force=<cell id>`` (or a list of them) must name cells of this run."""
    from harness.run.cell import FORCE_CORRUPT, unknown_forced_ids

    unknown, ids = unknown_forced_ids([cfg for _, cfg in cells])
    if not unknown:
        return []
    example = ids[0] if ids else "(none)"
    return [Problem("force", f"names no cell of this run: {', '.join(unknown)} (valid: true, false, {FORCE_CORRUPT}, "
                             f"or cell ids of this run, e.g. {example}; `harness plan` lists them)")]


def format_problems(problems: list[Problem], n_cells: int) -> str:
    head = (f"harness: invalid configuration ({len(problems)} problem(s) in {n_cells} cell(s)); nothing was run "
            "or written:")
    return "\n".join([head, *(f"  - {p}" for p in problems)])


def exit_on_problems(problems: list[Problem], n_cells: int) -> None:
    if problems:
        print(format_problems(problems, n_cells), file=sys.stderr, flush=True)
        sys.exit(EXIT_CONFIG)


# ---- Hydra: compose every cell as the launcher will --------------------------------------------------------

def job_container(cfg) -> dict:
    """The job's config as the task function gets it: without the ``hydra`` node, interpolations resolved
    (bounded first: :func:`harness.config.preflight.resolved_container`)."""
    from harness.config.preflight import resolved_container

    return resolved_container(cfg)


def sweep_cells(config) -> tuple[list[tuple[str, dict]], list[Problem]]:
    """Every cell of the multirun whose primary config is ``config``: the sweep overrides expanded exactly as
    the sweeper does (:func:`harness.run.sweeper.config_sweep_overrides`: params x each grid), each cell composed
    by the config loader as the launcher will; and a problem for each cell that does not compose (an unknown key
    or group option, a value of the wrong type)."""
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    from harness.run.sweeper import config_sweep_overrides

    loader = GlobalHydra.instance().config_loader()
    arguments = list(OmegaConf.to_container(config.hydra.overrides.task, resolve=False))
    # hydra.sweeper.params x each of hydra.sweeper.grids (the experiments' sweeper), else BasicSweeper's product
    batches = [config_sweep_overrides(config, arguments, loader)]
    cells, failures = [], []
    for batch in batches:
        for job_overrides in batch:
            label = " ".join(job_overrides)
            try:
                composed = loader.load_sweep_config(master_config=config, sweep_overrides=list(job_overrides))
                cells.append((label, job_container(composed)))
            except ConfigError as e:  # keys no schema knows (+method.gama=3): each with its key
                failures += [Problem(err.key or "config", str(err), label) for err in getattr(e, "errors", [e])]
            except Exception as e:  # noqa: BLE001 — Hydra's composition errors (unknown key, wrong type), size bounds
                text = f"{e} ({e.__cause__})" if e.__cause__ is not None else str(e)
                failures.append(Problem(_hydra_key(text), " ".join(text.split()), label))
    return cells, failures


def _hydra_key(message: str) -> str:
    import re

    for pattern in (r"full_key: (\S+)", r"override '([^']+)'", r"Could not load '([^']+)'"):
        m = re.search(pattern, message)
        if m:
            return m.group(1)
    return "overrides"


class ValidateCells(Callback):
    """Hydra callback (``hydra.callbacks.validate`` in ``conf/config.yaml``): validate before Hydra creates
    any folder or the first cell loads a model; exit with status 2 on a problem."""

    def on_run_start(self, config, **kwargs) -> None:
        from harness.config.preflight import ConfigTooLarge

        try:
            cfg = job_container(config)
        except ConfigTooLarge as e:
            exit_on_problems([Problem("config", str(e))], 1)
        except ConfigError as e:  # keys no schema knows (+method.gama=3): each with its key
            exit_on_problems([Problem(err.key or "config", str(err)) for err in getattr(e, "errors", [e])], 1)
        exit_on_problems(validate_cells([("", cfg)], single=True), 1)

    def on_multirun_start(self, config, **kwargs) -> None:
        try:
            cells, failures = sweep_cells(config)
        except Exception as e:  # noqa: BLE001 — overrides Hydra's sweeper cannot parse: it reports them itself
            log.warning("validation: sweep expansion failed (%s); Hydra will report it", e)
            return
        exit_on_problems(failures + validate_cells(cells, single=False), len(cells) + len(failures))


__all__ = ["Problem", "ValidateCells", "validate_cell", "validate_cells", "writable_problem", "sweep_cells"]
