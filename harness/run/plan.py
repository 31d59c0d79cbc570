"""Sweeps as plans: which cells a sweep runs, which are done, and one *unit* of it per cluster task.

``harness plan OVERRIDES...`` composes every job of the sweep (the same overrides as ``harness -m``,
split by Hydra's own basic sweeper, so ``a=1,2`` and ``range()`` mean what they mean there), loads no
weights, and prints one row per cell: its unit, cell id, status (done | running | partial | failed |
corrupt | pending | n/a) and prompts already written. A *unit* is what one task runs: one cell, or
with ``runner.interleave=true`` one interleaved comparison (the cells that differ only in ``method``).

``harness task INDEX OVERRIDES...`` runs unit INDEX of that plan; ``harness plan --write PLAN.json`` stores the
composed plan once and ``harness task --plan PLAN.json INDEX`` reads its unit from it without composing the sweep
again (:mod:`harness.run.planfile`; ``scripts/sbatch_array.sh`` does this, passing ``$SLURM_ARRAY_TASK_ID``);
``harness merge SRC... --into DST`` copies the finished, verified cells of several results folders into one (under each
cell's lock, summary last, so a concurrent reader or a
second merger never sees a torn or half-merged cell).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

from harness.results import integrity, store
from harness.run.cell import interleave_key, plan_cell, prepare_cell
from harness.energy.cost import overhead_line
from harness.resources import conf_dir
from harness.config.schema import runner_config

CONF_DIR = conf_dir()


def compose_jobs(overrides: list[str], config_dir: str | None = None) -> list[dict]:
    """The composed, resolved config of every job a ``harness -m OVERRIDES`` sweep would run, in
    Hydra's order: the basic sweeper's cartesian product, or — when the composed config selects the
    experiments' ``grids`` sweeper (``+experiment=...``) — the union of its grids
    (:func:`harness.run.sweeper.config_sweep_overrides`, the same expansion validation uses)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from harness.config.groups import register_configs
    from harness.config.preflight import ConfigTooLarge, resolved_container, yaml_problems
    from harness.run.sweeper import config_sweep_overrides

    register_configs()
    overrides = [o for o in overrides if o not in ("-m", "--multirun")]
    problems = yaml_problems(config_dir) if config_dir else []
    if problems:
        raise ConfigTooLarge("; ".join(problems))
    if config_dir:
        overrides = [*overrides, f"hydra.searchpath=[file://{Path(config_dir).resolve()}]"]
    GlobalHydra.instance().clear()
    out = []
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        # the primary config with only the non-sweep overrides: it says which sweeper and grids apply
        plain = [o for o in overrides if not _is_sweep(o)]
        primary = compose(config_name="config", overrides=plain, return_hydra_config=True)
        jobs = config_sweep_overrides(primary, overrides) or [overrides]
        for job in jobs:
            out.append(resolved_container(compose(config_name="config", overrides=list(job))))
    return out


def _is_sweep(override: str) -> bool:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return OverridesParser.create().parse_overrides([override])[0].is_sweep_override()


def units(jobs: list[dict]) -> list[list[dict]]:
    """Jobs grouped into units: one cell each, or with ``runner.interleave`` one comparison per group of
    cells that differ only in ``method`` (in the order each group first appears)."""
    groups: dict[str, list[dict]] = {}
    out: list[list[dict]] = []
    for cfg in jobs:
        if runner_config(cfg).interleave:
            key = interleave_key(cfg)
            if key not in groups:
                groups[key] = []
                out.append(groups[key])
            groups[key].append(cfg)
        else:
            out.append([cfg])
    return out


def plan_rows(jobs: list[dict]) -> list[dict]:
    rows = []
    for u, unit in enumerate(units(jobs)):
        for cfg in unit:
            cfg, cid, cell_dir = prepare_cell(cfg, cfg.get("results_dir", "results"))
            try:
                plan_cell(cfg)
                st = store.cell_status(cell_dir)
            except Exception as e:  # noqa: BLE001 — not applicable, or a configuration error
                from harness.errors import NotApplicable

                st = {"status": "n/a" if isinstance(e, NotApplicable) else "invalid", "prompts_written": 0,
                      "detail": str(e)[:160]}
            rows.append({"unit": u, "cell_id": cid, "interleaved": len(unit) > 1, **st,
                         "cell_dir": str(cell_dir), "energy_overhead": overhead_line(cfg), "config": cfg})
    return _differing_keys(rows)


def _differing_keys(rows: list[dict]) -> list[dict]:
    """Each row's ``differs``: for cells whose ids differ only by the hash (same method, decoding, pair, dataset,
    gpu, seed), the identity keys that tell them apart, with this cell's values (``max_new_tokens=8``). Grouped by
    the ids under the current identity version, so a cell found under an older id groups with its new siblings."""
    from harness.config.identity import cell_id, flatten, identity_config, resolve_alias

    groups: dict[str, list[dict]] = {}
    for r in rows:
        groups.setdefault(cell_id(r["config"]).rsplit("__", 1)[0], []).append(r)
    for group in groups.values():
        flat = [flatten(json.loads(json.dumps(identity_config(resolve_alias(r["config"])), default=str)))
                for r in group]
        keys = sorted({k for f in flat for k in f if len({json.dumps(g.get(k), default=str) for g in flat}) > 1})
        for r, f in zip(group, flat):
            r["differs"] = ", ".join(f"{k}={f.get(k, '<absent>')}" for k in keys) if len(group) > 1 else ""
    for r in rows:
        r.pop("config")
    return rows


def _args(argv, prog, extra=None):
    p = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    if extra:
        extra(p)
    p.add_argument("--config-dir", default=None, help="a user config directory added to Hydra's search path")
    p.add_argument("overrides", nargs="*", help="the sweep's overrides, as for `harness -m`")
    return p.parse_args(argv)


def _compose_or_exit(args, prog: str) -> list[dict]:
    """:func:`compose_jobs`, or exit 2 naming the problem when the overrides do not compose (an unknown key or
    group option, a value of the wrong type, a config beyond the size bounds)."""
    try:
        return compose_jobs(args.overrides, args.config_dir)
    except Exception as e:  # noqa: BLE001 — Hydra's composition and override-parsing errors
        cause = f" ({e.__cause__})" if e.__cause__ is not None else ""
        print(f"{prog}: invalid overrides: {' '.join(str(e).split())}{cause}; nothing was run or submitted",
              file=sys.stderr)
        sys.exit(2)


def _label(cfg: dict) -> list[str]:
    """A cell's readable name in problem messages: its method, decoding, dataset and seed."""
    return [f"method={cfg['method']['name']}", f"decoding={(cfg.get('decoding') or {}).get('name')}",
            f"dataset={cfg['dataset']['name']}", f"seed={cfg.get('seed')}"]


def plan_main(argv: list[str]) -> int:
    def extra(p):
        p.add_argument("--json", action="store_true", help="one JSON object per cell")
        p.add_argument("--count", action="store_true", help="print only the number of units (array size)")
        p.add_argument("--todo", action="store_true",
                       help="print only the units with a cell still to run, comma-separated (an sbatch --array list)")
        p.add_argument("--write", metavar="PLAN.json", default=None,
                       help="also write every unit's composed configs to this file, for `harness task --plan`")
    args = _args(argv, "harness plan", extra)
    jobs = _compose_or_exit(args, "harness plan")
    if args.todo:  # what an array will run: validated as `harness -m` would (a bad override exits 2, not "done")
        from harness.config.validation import exit_on_problems, validate_cells

        exit_on_problems(validate_cells([(" ".join(_label(c)), c) for c in jobs], single=False), len(jobs))
    if args.write:
        from harness.run.planfile import write_plan

        write_plan(args.write, units(jobs), args.overrides, args.config_dir)
    if args.count:
        print(len(units(jobs)))
        return 0
    rows = plan_rows(jobs)
    if args.todo:
        todo = sorted({r["unit"] for r in rows if r["status"] not in ("done", "n/a", "invalid", "running")})
        print(",".join(map(str, todo)))
        return 0
    if args.json:
        for r in rows:
            print(json.dumps(r))
        return 0
    from tabulate import tabulate

    print(tabulate([[r["unit"], r["cell_id"], r["differs"], r["status"], r["prompts_written"],
                     "yes" if r["interleaved"] else "", r["detail"], r["energy_overhead"]] for r in rows],
                   headers=["unit", "cell", "differs by", "status", "prompts written", "interleaved", "detail",
                            "energy overhead"]))
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    kinds = ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
    print(f"\n{len(rows)} cells in {len(units(jobs))} units: " + kinds)
    return 0


def task_main(argv: list[str]) -> int:
    """Run one unit of the plan; exit 1 if a cell failed, 0 otherwise (done, skipped, busy, n/a)."""
    def extra(p):
        p.add_argument("index", type=int, help="the unit to run (e.g. $SLURM_ARRAY_TASK_ID)")
        p.add_argument("--plan", metavar="PLAN.json", default=None,
                       help="read the unit from this plan file (`harness plan --write`) instead of composing the sweep")
    args = _args(argv, "harness task", extra)
    if args.plan:
        from harness.run.planfile import task_unit

        unit = task_unit(args.plan, args.index, args.overrides)
    else:
        plan = units(_compose_or_exit(args, "harness task"))
        if not 0 <= args.index < len(plan):
            print(f"harness task: index {args.index} is out of range: this sweep has {len(plan)} units "
                  f"(0..{len(plan) - 1})", file=sys.stderr)
            return 2
        unit = plan[args.index]
    from harness.errors import ConfigError
    from harness.run.runner import run_cells
    from harness.config.validation import exit_on_problems, validate_cells

    exit_on_problems(validate_cells([(c["method"]["name"], c) for c in unit]), len(unit))  # exit 2 before loading
    try:
        outcomes = run_cells(unit, unit[0].get("results_dir", "results"), force=unit[0].get("force"))
    except ConfigError as e:
        print(f"harness task: error: {e}", file=sys.stderr)
        return 2
    for o in outcomes:
        print(o.line(), flush=True)
    return 1 if any(o.status == "failed" for o in outcomes) else 0


def merge(sources: list[Path], dest: Path) -> dict[str, int]:
    """Copy every finished cell whose records match its summary's checksum from ``sources`` into
    ``dest``; cells already finished there are left alone (under any of their ids: :func:`present_as`). Each cell is
    copied under its lock in ``dest``, records first and the summary last (both atomic renames), so concurrent
    mergers and readers never see a torn row or a summary without its records."""
    counts = {"merged": 0, "present": 0, "skipped_unfinished": 0, "skipped_corrupt": 0, "busy": 0}
    for src in sources:
        for cell in sorted((Path(src) / "cells").glob("*")):
            if not cell.is_dir():
                continue
            state, detail = store.finished_state(cell)
            if state != "done":
                counts["skipped_corrupt" if state == "corrupt" else "skipped_unfinished"] += 1
                if state == "corrupt":
                    print(f"harness merge: skipping {cell}: {detail}", file=sys.stderr)
                continue
            target = Path(dest) / "cells" / cell.name
            if store.finished_state(target)[0] == "done" or present_as(cell, dest):
                counts["present"] += 1
                continue
            try:
                with store.CellLock(target):
                    if store.finished_state(target)[0] == "done" or present_as(cell, dest):
                        counts["present"] += 1
                        continue
                    store.clean_temp_files(target)  # what a killed merger or writer left
                    for name in (store.RECORDS, store.DIGESTS, store.SUMMARY):  # summary last: it marks it finished
                        if not (cell / name).exists():
                            (target / name).unlink(missing_ok=True)
                            continue
                        tmp = target / f".{name}.merge.{os.getpid()}.tmp"
                        shutil.copyfile(cell / name, tmp)
                        with open(tmp, "rb+") as f:
                            os.fsync(f.fileno())
                        os.replace(tmp, target / name)
                    for stale in (store.PARTIAL, store.ERROR, store.SEGMENTS):
                        (target / stale).unlink(missing_ok=True)
                    integrity.rekey(target, adopt=store.adopt_legacy)  # verified there, bound to this folder's key
                    counts["merged"] += 1
            except store.CellBusy:
                counts["busy"] += 1
    return counts


def present_as(cell: Path, dest: Path) -> str | None:
    """The other id under which ``dest`` already holds the finished cell ``cell`` (the same identity measured under
    another identity version: :func:`harness.config.identity.known_ids`), else None; ``harness merge`` keeps one
    measurement per cell, whatever the version each folder's was measured under."""
    from harness.config import identity

    try:
        summary = json.loads((cell / store.SUMMARY).read_text(encoding="utf-8"))
        ids = identity.known_ids(summary["config"])
    except (OSError, ValueError, KeyError, TypeError):  # no config to compare: merged under its own id only
        return None
    for other in ids:
        if other != cell.name and store.finished_state(Path(dest) / "cells" / other)[0] == "done":
            try:
                identity.check_reusable(Path(dest) / "cells" / other, summary["config"])
            except identity.CellConflict:
                continue
            return other
    return None


def merge_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="harness merge", description=merge.__doc__)
    p.add_argument("sources", nargs="+", type=Path, help="results folders (each with cells/)")
    p.add_argument("--into", required=True, type=Path, help="the merged results folder")
    args = p.parse_args(argv)
    counts = merge(args.sources, args.into)
    print("harness merge: " + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in counts.items()))
    return 0
