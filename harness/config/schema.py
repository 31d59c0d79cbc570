"""The typed cell config: one dataclass tree, registered in Hydra's ConfigStore, the single source of the
top-level, ``runner`` and ``report`` keys' types, defaults and help.

``conf/config.yaml`` only picks presets (``defaults:``) and Hydra's settings; the keys themselves are
:class:`CellConfig`'s. The group nodes are typed by their own schemas: ``method`` and ``decoding`` by the
decoders' Params and the decoding presets (:mod:`harness.config.groups`), ``pair`` by the pair presets (checked as
:class:`harness.models.PairSpec`), ``dataset`` by its task's dataclass (:mod:`harness.tasks`), ``energy`` and
``gpu`` by the energy package's configs. Hydra checks every key and type when it composes (an unknown key or
``runner.threads=abc`` fails there); the ranges are checked here, each problem a
:class:`~harness.errors.ConfigError` carrying its key (:func:`field_problems`). :mod:`harness.config.validation`
adds the checks across fields (method × decoding × pair, context, data, results folder).

The CLI turns the composed config into these dataclasses once (``OmegaConf.to_object``, :func:`as_cell_dict`);
the Python API takes plain dicts (:func:`runner_config` fills the ``runner`` defaults from here).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional

from harness.errors import ConfigError

MAX_SEED = 2**32 - 1  # prompt seeds are seed * 1000003 + index: far below 2^63 (torch) for any such seed
MAX_WARMUP_GENERATIONS, MAX_WARMUP_NEW_TOKENS = 100, 4096  # warm-up: a few short generations
MAX_THREADS = 1024  # torch CPU threads; far beyond any machine's cores (the OS would refuse to create them)
SCHEMA_NAME = "cell"  # the primary config's schema in the ConfigStore (conf/config.yaml: defaults: - cell)


def _help(text: str, **kw) -> Any:
    return field(metadata={"help": text}, **kw)


@dataclass
class RunnerConfig:
    """How a cell runs (``runner.*``); none of these but ``progress`` and ``interleave`` is result-neutral."""

    warmup_generations: int = _help("untimed, unrecorded generations before the first measured prompt (the "
                                    "decoder may need more: the Q-learning γ policy's warm-up)", default=1)
    warmup_new_tokens: int = _help("new tokens of each warm-up generation", default=8)
    progress: bool = _help("progress bars (prompts, and transformers' 'Loading weights'); false = none",
                           default=True)
    threads: Optional[int] = _help("torch CPU threads for the cell (null = torch's default)", default=None)
    sync_timing: bool = _help("synchronise the device around drafting/verification (draft_time_s, "
                              "verify_time_s)", default=False)
    interleave: bool = _help("in a sweep (-m): cells that differ only in method run as one comparison, prompt "
                             "i by every method (order rotating) before prompt i+1", default=False)
    breakdown: bool = _help("sync at every draft/verify/forward-call boundary and split energy "
                            "(energy.prefill_j ...)", default=False)


#: grams of CO₂-equivalent per kWh of electricity, CodeCarbon's convention and unit; the default region is the
#: world average (475 gCO₂eq/kWh, IEA 2019: CodeCarbon's and carbontracker's fallback when the grid is unknown)
GRID_REGION = "world"
GRID_INTENSITY = {"world": 475.0}


@dataclass
class CarbonConfig:
    """How ``harness-report`` turns measured energy into CO₂ (``report.carbon.*``): emissions = energy (kWh) ×
    the grid's carbon intensity (gCO₂eq/kWh). Energy is always the harness's own measurement."""

    region: str = _help("which entry of intensity_g_per_kwh applies to these cells (default: world)",
                        default=GRID_REGION)
    intensity_g_per_kwh: Dict[str, float] = _help(
        "gCO₂eq per kWh by region (CodeCarbon's unit); add yours, e.g. report.carbon.region=FR "
        "+report.carbon.intensity_g_per_kwh.FR=56", default_factory=lambda: dict(GRID_INTENSITY))


@dataclass
class ReportConfig:
    """What ``harness-report`` compares and draws (``report.*``; result-neutral: not in the cell id)."""

    baselines: Dict[str, Optional[str]] = _help(
        "per decoding kind, the method spec every speed-up is paired against (null = ar_greedy / ar_sampling), "
        "e.g. report.baselines.sampling='sd[gamma=4,gamma_policy=fixed]'",
        default_factory=lambda: {"greedy": None, "sampling": None})
    iso: List[str] = _help("family pairs A:B for iso-quality ratios, e.g. "
                           "['dsbd[memory_constrained=false]:beam_sampling']", default_factory=list)
    tables: List[str] = _help("the papers' tables to produce (an experiment sets them): dsbd, mtad, mcsd, adaptive",
                              default_factory=list)
    carbon: CarbonConfig = field(default_factory=CarbonConfig,
                                 metadata={"help": "grid carbon intensity for the CO₂ figures beside J/token"})


@dataclass
class CellConfig:
    """One cell: method × decoding × pair × dataset × gpu × seed, and how it runs."""

    method: Any = _help("the decoder (its parameters: harness method=NAME --cfg job), or an alias that follows "
                        "the decoding (ar, beam)", default=None)
    decoding: Any = _help("greedy | sampling | sampling_dsbd; each field overridable (decoding.top_k=10)",
                          default=None)
    gamma_policy: Any = _help("the draft-length policy of methods that draft in rounds (null = the method's fixed "
                              "gamma; harness method=sd gamma_policy=online --cfg job)", default=None)
    draft_selection: Any = _help("null (the pair's draft) | ols (a draft per prompt, adaptive §5)", default=None)
    pair: Any = _help("the target and draft models (conf/pair)", default=None)
    dataset: Any = _help("the prompts and their task (conf/dataset)", default=None)
    gpu: Any = _help("the GPU profile (auto = this machine)", default=None)
    energy: Any = _help("the energy measurement protocol (protocol | naive | off)", default=None)
    judge: Any = _help("the LLM judge for MT-Bench (none | openai | hf; not in the cell id)", default=None)
    tracker: Any = _help("experiment tracker for finished cells (none | wandb | mlflow; offline by default; not in "
                         "the cell id)", default=None)
    seed: int = _help(f"RNG seed, 0..{MAX_SEED}; each prompt is seeded on its own (seed * 1000003 + index)",
                      default=0)
    max_new_tokens: Optional[int] = _help("null = the dataset's max_new_tokens; else an integer >= 1", default=None)
    results_dir: str = _help("cells land in <results_dir>/cells/<cell id>/ (relative to where you launch)",
                             default="results")
    force: Any = _help("rerun from scratch: true (every cell), corrupt (cells that fail verification or conflict), "
                       "a cell id or a list of them; false = reuse finished cells", default=False)
    runner: RunnerConfig = field(default_factory=RunnerConfig, metadata={"help": "how the cell runs"})
    report: ReportConfig = field(default_factory=ReportConfig, metadata={"help": "what harness-report compares"})


def _int_problem(key: str, value: Any, minimum: int, maximum: int | None = None,
                 null: str | None = None) -> ConfigError | None:
    if value is None and null:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value >= minimum and \
            (maximum is None or value <= maximum):
        return None
    valid = f"an integer >= {minimum}" + (f" and <= {maximum}" if maximum is not None else "") + \
        (f", or null ({null})" if null else "")
    return ConfigError(f"must be {valid}, got {value!r}", key=key)


def _force_problem(force: Any) -> ConfigError | None:
    values = force if isinstance(force, (list, tuple)) else [force]
    if isinstance(force, bool) or force is None or all(isinstance(v, str) and v for v in values):
        return None
    return ConfigError(f"must be true, false, 'corrupt' (rerun only cells that fail verification), a cell id or a "
                       f"list of cell ids; got {force!r}", key="force")


def runner_problems(runner: Mapping[str, Any]) -> list[ConfigError]:
    """Range problems of a ``runner`` node (types are Hydra's, but the Python API takes plain dicts)."""
    out = [_int_problem("runner.warmup_generations", runner.get("warmup_generations", 1), 0, MAX_WARMUP_GENERATIONS),
           _int_problem("runner.warmup_new_tokens", runner.get("warmup_new_tokens", 8), 1, MAX_WARMUP_NEW_TOKENS),
           _int_problem("runner.threads", runner.get("threads"), 1, MAX_THREADS, "torch's default")]
    valid = {f.name for f in dataclasses.fields(RunnerConfig)}
    out += [ConfigError(f"unknown key. Valid keys: {', '.join(sorted(valid))}", key=f"runner.{k}")
            for k in sorted(set(runner) - valid)]
    out += [ConfigError(f"must be true or false, got {runner[k]!r}", key=f"runner.{k}")
            for k in ("progress", "sync_timing", "interleave", "breakdown") if k in runner
            and not isinstance(runner[k], bool)]
    return [p for p in out if p is not None]


def field_problems(cfg: Mapping[str, Any]) -> list[ConfigError]:
    """Every top-level and ``runner`` value out of its range, each a ConfigError with its key."""
    out = [_int_problem("seed", cfg.get("seed"), 0, MAX_SEED),
           _int_problem("max_new_tokens", cfg.get("max_new_tokens"), 1, null="the dataset's max_new_tokens"),
           _force_problem(cfg.get("force"))]
    return [p for p in out if p is not None] + runner_problems(cfg.get("runner") or {}) + \
        carbon_problems((cfg.get("report") or {}).get("carbon") or {})


def carbon_problems(carbon: Mapping[str, Any]) -> list[ConfigError]:
    """``report.carbon``: every intensity a number >= 0 (gCO₂eq/kWh), and the region one of them."""
    table = carbon.get("intensity_g_per_kwh", GRID_INTENSITY) or {}
    out = [ConfigError(f"must be a number >= 0 (gCO₂eq/kWh), got {v!r}", key=f"report.carbon.intensity_g_per_kwh.{k}")
           for k, v in table.items() if isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 0]
    region = carbon.get("region", GRID_REGION)
    if region not in table:
        out.append(ConfigError(f"no intensity for region {region!r}: add it (+report.carbon.intensity_g_per_kwh."
                               f"{region}=G) or pick one of {', '.join(sorted(table))}", key="report.carbon.region"))
    return out


def runner_config(cfg: Mapping[str, Any]) -> RunnerConfig:
    """The cell's ``runner`` settings, every key not given at its one default (here)."""
    return RunnerConfig(**(cfg.get("runner") or {}))


def as_cell_dict(cfg) -> dict:
    """The composed config as the runner takes it: converted by ``OmegaConf.to_object`` (a :class:`CellConfig`,
    its group nodes by their own schemas) and back to plain data, the ``hydra`` node left out. A key no node's
    schema knows (``+method.gama=3``, which ``to_object`` would drop) raises
    :class:`harness.config.keys.UnknownKeys` first."""
    from omegaconf import OmegaConf, open_dict

    from harness.config.keys import check_keys

    cfg = cfg.copy()
    with open_dict(cfg):
        cfg.pop("hydra", None)
    check_keys(cfg)
    obj = OmegaConf.to_object(cfg)
    return _plain(obj)


def _plain(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: _plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    return obj


def register(cs) -> None:
    """Store :class:`CellConfig` as ``cell`` (the first entry of ``conf/config.yaml``'s defaults)."""
    cs.store(name=SCHEMA_NAME, node=CellConfig)
