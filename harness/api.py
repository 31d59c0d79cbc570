"""The Python API: run cells and sweeps from Python and get pandas DataFrames back (issue 33.7), as
optimum-benchmark's ``Benchmark.launch`` or lm-eval's ``simple_evaluate`` do::

    from harness.api import run, sweep   # (``harness.run`` is the package of the run room)
    df = run(method="sd", decoding="greedy", dataset={"num_prompts": 2}, max_new_tokens=16,
                     results_dir="/tmp/r")              # one row per prompt (the cell's records)
    df.attrs["summary"]                                  # one row per cell: tokens/s, J/token, acceptance, ...
    both = sweep([{"method": "ar"}, {"method": "sd", "gamma": 3}], decoding="greedy", results_dir="/tmp/r")

There is no second path: the keyword arguments become the command line's overrides (:func:`overrides`), the
cell is composed by Hydra from the same ``conf/`` as ``harness``, validated by the same code before any model
loads (:mod:`harness.config.validation`: a problem raises :class:`~harness.errors.ConfigError` with every
problem and its key, nothing written), and run by the same runner (:func:`harness.run.runner.run_cells`): a
finished cell is reused, a killed one resumes, ``runner.interleave`` makes one interleaved comparison of cells
that differ only in ``method``. A cell that fails at run time raises :class:`CellFailed` (its ``error.json``
says why).

Keyword arguments: a config group (``method``, ``decoding``, ``pair``, ``dataset``, ``gpu``, ``energy``,
``judge``, ``gamma_policy``, ``draft_selection``) takes an option name (``dataset="cnndm"``) or a dict of
keys (``dataset={"num_prompts": 2}``; ``"name"`` picks the option); any other key is a config key
(``seed=1``, ``runner={"threads": 1}``); ``overrides=[...]`` adds raw Hydra overrides. A method's own
parameters may be given at the top level of :func:`sweep`'s cells (``{"method": "sd", "gamma": 3}``).
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterable, Mapping

GROUPS = ("method", "decoding", "pair", "dataset", "gpu", "energy", "judge", "gamma_policy", "draft_selection")
_PLAIN = re.compile(r"^[A-Za-z0-9_./:+\-@]*$")


class CellFailed(RuntimeError):
    """A cell failed at run time; ``outcome.cell_dir / 'error.json'`` says why."""

    def __init__(self, outcome):
        super().__init__(f"cell {outcome.cell_id} failed: {outcome.error}")
        self.outcome = outcome


def _value(v: Any) -> str:
    """A Python value as Hydra's override grammar reads it."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(_value(x) for x in v) + "]"
    if isinstance(v, Mapping):
        return "{" + ",".join(f"{k}:{_value(x)}" for k, x in v.items()) + "}"
    text = str(v)
    return text if text and _PLAIN.match(text) else "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _keys(prefix: str, values: Mapping[str, Any]) -> list[str]:
    out = []
    for k, v in values.items():
        if isinstance(v, Mapping) and v:
            out += _keys(f"{prefix}{k}.", v)
        else:
            out.append(f"{prefix}{k}={_value(v)}")
    return out


def overrides(**cell: Any) -> list[str]:
    """The command line's overrides for a cell given as keyword arguments (the rules in the module docstring)."""
    out = list(cell.pop("overrides", None) or [])
    for key, value in cell.items():
        if key in GROUPS and isinstance(value, Mapping):
            value = dict(value)
            if "name" in value:
                out.append(f"{key}={_value(value.pop('name'))}")
            out += _keys(f"{key}.", value)
        elif key in GROUPS or not isinstance(value, Mapping):
            out.append(f"{key}={_value(value)}")
        else:
            out += _keys(f"{key}.", value)
    return out


def compose(**cell: Any) -> dict:
    """One cell's config, composed by Hydra from ``conf/`` as ``harness`` composes it, interpolations resolved."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from harness.cli.app import CONF_DIR
    from harness.config.groups import register_configs
    from harness.config.validation import job_container

    register_configs()
    args = overrides(**cell)
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            return job_container(hydra_compose(config_name="config", overrides=args))
    except Exception as e:  # Hydra's composition errors (unknown key or option, wrong type)
        from harness.cli.app import is_config_error
        from harness.errors import ConfigError

        if is_config_error(e):
            raise ConfigError(f"{' '.join(args)}: {' '.join(str(e).split())}") from e
        raise


def _method_params(cell: Mapping[str, Any]) -> dict:
    """A sweep cell's method parameters given at its top level (``{"method": "sd", "gamma": 3}``) moved under
    ``method``."""
    top = {"seed", "max_new_tokens", "results_dir", "force", "runner", "report", "overrides", "tracker", *GROUPS}
    cell = dict(cell)
    extra = {k: cell.pop(k) for k in list(cell) if k not in top}
    if extra:
        method = cell.get("method", "ar")
        method = dict(method) if isinstance(method, Mapping) else {"name": method}
        cell["method"] = {**method, **extra}
    return cell


def _validated(cfgs: list[dict], single: bool) -> None:
    from harness.config.validation import format_problems, validate_cells
    from harness.errors import ConfigError

    problems = validate_cells([(" ".join(map(str, _label(c))), c) for c in cfgs], single=single)
    if problems:
        raise ConfigError(format_problems(problems, len(cfgs)))


def _label(cfg: dict) -> list[str]:
    return [str((cfg.get("method") or {}).get("name")), str((cfg.get("decoding") or {}).get("name")),
            f"seed={cfg.get('seed')}"]


def _frames(outcomes) -> "Any":
    """Records of the finished cells as one DataFrame; ``attrs['summary']``: one row per cell."""
    import pandas as pd

    from harness.analysis.load import read_cell

    rows, records = [], []
    for o in outcomes:
        if o.status in ("done", "skipped"):
            row, recs = read_cell(Path(o.cell_dir))
            rows.append(row)
            records += [{"cell_id": o.cell_id, **r} for r in recs]
    frame = pd.DataFrame(records)
    frame.attrs["summary"] = pd.DataFrame(rows)
    frame.attrs["outcomes"] = [{"cell_id": o.cell_id, "status": o.status, "error": o.error,
                                "cell_dir": str(o.cell_dir)} for o in outcomes]
    return frame


def _execute(cfgs: list[dict]) -> list:
    from harness.run.plan import units
    from harness.run.runner import run_cells

    outcomes = []
    for unit in units(cfgs):
        outcomes += run_cells(unit, unit[0].get("results_dir", "results"), force=unit[0].get("force"))
    failed = [o for o in outcomes if o.status == "failed"]
    if failed:
        raise CellFailed(failed[0])
    return outcomes


def run(method: Any = None, decoding: Any = None, **cell: Any):
    """Run one cell (method × decoding × pair × dataset × gpu × seed) and return its records as a
    :class:`pandas.DataFrame` (one row per prompt; ``df.attrs["summary"]``: the cell's summary row,
    ``df.attrs["outcomes"]``: its status). Arguments as ``harness``'s overrides (module docstring); a
    configuration problem raises :class:`~harness.errors.ConfigError` before any model loads, a method that does
    not apply to the decoding included (as ``harness`` alone exits 2 for it)."""
    if method is not None:
        cell["method"] = method
    if decoding is not None:
        cell["decoding"] = decoding
    cfg = compose(**cell)
    _validated([cfg], single=True)
    return _frames(_execute([cfg]))


def sweep(cells: Iterable[Mapping[str, Any]], **common: Any):
    """Run several cells — each a dict of :func:`run`'s arguments (a method's parameters may sit at its top level),
    over ``common`` — and return every record in one DataFrame (a ``cell_id`` column; ``attrs["summary"]``: one
    row per cell). Every cell is validated before the first runs; a method that does not apply to a cell's
    decoding is skipped, as in ``harness -m``. ``runner={"interleave": True}`` runs the cells that differ only in
    ``method`` as one interleaved comparison."""
    cfgs = [compose(**{**common, **_method_params(c)}) for c in cells]
    _validated(cfgs, single=False)
    return _frames(_execute(cfgs))


__all__ = ["CellFailed", "compose", "overrides", "run", "sweep"]
