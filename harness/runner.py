"""Run one sweep cell: method × decoding × pair × dataset × gpu × seed.

Data flow: prompt → decoder → :class:`Generation` (ids + stats) → one record per prompt
(with quality and energy) → cell summary. The cell is planned first (:func:`plan_cell`: method and
decoding resolved, parameters and pair config validated) without loading any weights; a method that
cannot decode the requested way is "n/a" (skipped, nothing written). Loading and a warm-up
generation happen before any measured window; every measured window is bracketed by the energy
meter (which synchronises the device) and timed inside the decoder.
"""
from __future__ import annotations

import json
import logging
import math
import platform
import re
import resource
import subprocess
import time
import traceback
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import torch

from harness import context, identity, store
from harness.decoders import build_decoder
from harness.decoders.base import Decoder, make_params, resolve_method
from harness.decoding import WARP_KEYS, Decoding, as_decoding
from harness.energy import make_energy_meter, summarize_records
from harness.errors import ConfigError, NotApplicable
from harness.metrics.perplexity import output_perplexity
from harness.models import ModelPair, PairSpec, load_pair
from harness.record import build_record, energy_breakdown, summarize_cell
from harness.tasks import load_task

log = logging.getLogger("harness")
PROJECT_ROOT = Path(__file__).resolve().parents[1]


@dataclass
class CellOutcome:
    status: str  # "done" | "skipped" | "failed" | "n/a"
    cell_id: str
    cell_dir: Path
    error: str | None = None


@dataclass
class CellPlan:
    """What a cell runs, resolved and validated before any weights load."""

    decoder_cls: type[Decoder]
    params: dict
    decoding: Decoding | None
    pair: PairSpec


def plan_cell(cfg: dict) -> CellPlan:
    """Resolve the method under the decoding (aliases, the decoding's warp), validate its parameters and
    the pair config. Raises :class:`~harness.errors.NotApplicable` for a method that cannot decode the
    requested way, :class:`~harness.errors.ConfigError` for bad input; loads nothing."""
    method_cfg = dict(cfg["method"])
    name = method_cfg.pop("name")
    decoding = cfg.get("decoding")
    if decoding is not None:
        for key in WARP_KEYS:
            if method_cfg.get(key) is not None:
                log.warning("method.%s is deprecated and will be removed in the next release; set decoding.%s "
                            "(here method.%s=%s overrides the decoding)", key, key, key, method_cfg[key])
    cls, params = resolve_method(name, method_cfg, decoding)
    make_params(cls, params)  # bad parameters fail before any weights load
    return CellPlan(cls, params, as_decoding(decoding) if decoding is not None else None,
                    PairSpec.from_config(cfg["pair"]))


def cell_id(cfg: dict) -> str:
    """Readable and unique: method, decoding, pair, dataset, gpu, seed, then a hash of every setting that
    can change what the cell measures (:mod:`harness.identity`)."""
    return identity.cell_id(cfg)


def gpu_label(gpu_cfg: dict) -> str:
    """The ``gpu`` label of a cell: the profile's name, or for ``auto`` what this machine has — ``cpu``
    without a GPU, else the matching ``conf/gpu`` profile or the device name."""
    name = gpu_cfg.get("name", "auto")
    if name != "auto":
        return name
    if not torch.cuda.is_available():
        return "cpu"
    device = torch.cuda.get_device_name(0)
    import yaml

    for path in sorted((PROJECT_ROOT / "conf" / "gpu").glob("*.yaml")):
        profile = yaml.safe_load(path.read_text()) or {}
        if any(tag in device for tag in profile.get("match") or []):
            return profile.get("name", path.stem)
    return re.sub(r"[^a-z0-9]+", "_", device.lower()).strip("_")


_PAIR_CACHE: dict[str, ModelPair] = {}


def get_pair(pair_cfg: dict, progress: bool = True) -> ModelPair:
    """Load (once per process: a local sweep runs its cells in one process) the model pair."""
    key = json.dumps(pair_cfg, sort_keys=True)
    if key not in _PAIR_CACHE:
        _PAIR_CACHE.clear()
        kwargs = {k: v for k, v in pair_cfg.items() if k not in ("target", "draft")}
        _PAIR_CACHE[key] = load_pair(pair_cfg["target"], pair_cfg.get("draft"), progress=progress, **kwargs)
    return _PAIR_CACHE[key]


def environment_info(device: torch.device) -> dict:
    import hydra
    import transformers

    info = {"python": platform.python_version(), "torch": torch.__version__,
            "transformers": transformers.__version__, "hydra": hydra.__version__,
            "host": platform.node(), "platform": platform.platform(), "device_type": device.type,
            "torch_threads": torch.get_num_threads(), "git_sha": git_sha()}
    if device.type == "cuda":
        info["device_name"] = torch.cuda.get_device_name(device)
        info["cuda"] = torch.version.cuda
    else:
        info["device_name"] = platform.processor() or platform.machine()
    return info


def git_sha() -> str | None:
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=PROJECT_ROOT, capture_output=True, text=True,
                             timeout=5).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=PROJECT_ROOT,
                               capture_output=True, text=True, timeout=5).stdout.strip()
        return (sha + ("-dirty" if dirty else "")) or None
    except (OSError, subprocess.SubprocessError):
        return None


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def prompt_seed(seed: int, index: int) -> int:
    return seed * 1_000_003 + index


def run_cell(cfg: dict, results_dir: str | Path = "results", force: bool = False) -> CellOutcome:
    """Run a cell unless it already finished (and was measured under the same identity:
    :func:`harness.identity.check_reusable`). Runtime failures (OOM, a crashing model, ...) are recorded
    in ``error.json`` and returned, not raised, so a sweep goes on with its other cells. Configuration
    errors (:class:`~harness.errors.ConfigError`) are raised and leave nothing behind; the CLI finds them
    for every cell before any model loads (:mod:`harness.validation`). A method that cannot decode the
    requested way returns "n/a" and writes nothing."""
    if "gpu" in cfg:
        cfg = {**cfg, "gpu": {**cfg["gpu"], "name": gpu_label(cfg["gpu"])}}
    cid = cell_id(cfg)
    cell_dir = Path(results_dir) / "cells" / cid
    try:
        plan = plan_cell(cfg)  # a ConfigError is raised, never recorded as a failed cell
    except NotApplicable as e:
        log.info("cell %s is not applicable: %s", cid, e)
        return CellOutcome("n/a", cid, cell_dir, str(e))
    if store.is_finished(cell_dir) and not force:
        identity.check_reusable(cell_dir, cfg)  # CellConflict unless measured under this identity
        log.info("cell %s already finished; skipping", cid)
        return CellOutcome("skipped", cid, cell_dir)
    (cell_dir / store.ERROR).unlink(missing_ok=True)
    writer = None
    try:
        writer = store.RecordWriter(cell_dir)
        _run(cfg, plan, cid, cell_dir, writer)
        return CellOutcome("done", cid, cell_dir)
    except ConfigError:  # found only once the data/models are at hand: still a config error, not a failed cell
        if writer is not None:
            writer.abort()
            writer.partial.unlink(missing_ok=True)
        if cell_dir.is_dir() and not any(cell_dir.iterdir()):
            cell_dir.rmdir()
        raise
    except Exception as e:  # noqa: BLE001 — every failure is recorded with its traceback
        if writer is not None:
            writer.abort()
        kind = "oom" if isinstance(e, torch.OutOfMemoryError) or "out of memory" in str(e).lower() else type(e).__name__
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        try:
            store.atomic_write_json(cell_dir / store.ERROR, {"cell_id": cid, "kind": kind, "error": str(e),
                                                             "traceback": traceback.format_exc(), "at": now(),
                                                             "config": cfg})
        except Exception as write_error:  # noqa: BLE001 — a full/read-only disk must not stop the sweep
            log.error("cell %s: could not write %s (%s: %s)", cid, cell_dir / store.ERROR,
                      type(write_error).__name__, write_error)
        log.error("cell %s failed (%s): %s", cid, kind, e)
        return CellOutcome("failed", cid, cell_dir, f"{kind}: {e}")


def _run(cfg: dict, plan: CellPlan, cid: str, cell_dir: Path, writer: store.RecordWriter) -> None:
    started = now()
    seed = int(cfg["seed"])
    torch.manual_seed(seed)
    runner_cfg = cfg.get("runner", {})
    if runner_cfg.get("threads"):
        torch.set_num_threads(int(runner_cfg["threads"]))
    method_name = plan.decoder_cls.method

    pair = get_pair(cfg["pair"], progress=bool(runner_cfg.get("progress", True)))
    breakdown = bool(runner_cfg.get("breakdown", False))  # device sync at draft/verify/call boundaries
    decoder = build_decoder(method_name, pair, sync_timing=breakdown or bool(runner_cfg.get("sync_timing", False)),
                            **plan.params)
    task = load_task(cfg["dataset"])
    examples = task.examples()
    if not examples:
        raise ValueError(f"dataset '{cfg['dataset']['name']}' produced no prompts")
    tok = pair.tokenizer
    max_new = context.resolve_max_new_tokens(cfg, task.max_new_tokens)  # null = the dataset's; 0/negative refused
    n_positions = context.pair_positions(pair.target.config, [d.config for d in pair.drafts.values()])
    # prompts longer than the trained context keep their last tokens, flagged (harness.context's rule)
    fitted = [context.fit_prompt(task.prompt_ids(ex, tok), n_positions, max_new, context.lookahead(plan.params))
              for ex in examples]  # chat template when the task/tokenizer use one
    encoded = [ids for ids, _ in fitted]
    if any(n is not None for _, n in fitted):
        log.warning("cell %s: %d prompt(s) longer than the model's context (%d positions) keep their last tokens "
                    "(records: prompt_truncated)", cid, sum(n is not None for _, n in fitted), n_positions)
    decoder.prepare(encoded)  # e.g. draft selection fits its prompt features (seed 004 §5)
    for _ in range(int(runner_cfg.get("warmup_generations", 1))):  # untimed, unrecorded
        decoder.generate(encoded[0], int(runner_cfg.get("warmup_new_tokens", 8)), seed=seed)

    totals = {"new_tokens": 0, "wall_time_s": 0.0}
    records = []
    with make_energy_meter(cfg.get("energy"), pair.cuda_devices()) as meter:
        progress = _progress(len(examples), cid, runner_cfg.get("progress", True))
        cell_window = meter.start_window("cell")  # everything the GPUs drew during the cell, protocol included
        for i, (ex, ids, (_, original)) in enumerate(zip(examples, encoded, fitted)):
            if pair.device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(pair.device)
            measured = meter.measure(f"prompt {i}", lambda: decoder.generate(ids, max_new, seed=prompt_seed(seed, i),
                                                                            stop=task.stop))
            gen = measured.result
            text = tok.decode(gen.output_ids, skip_special_tokens=True)
            record = build_record(
                cell_id=cid, index=i, example=ex, prompt_ids=ids, generation=gen, output_text=text,
                prompt_text=task.prompt_text(ex, tok),
                output_ppl=_perplexity(pair.target, gen.prompt_ids, gen.output_ids, n_positions),
                prompt_tokens_original=original,
                metrics=task.score(ex, task.truncate(text)),
                energy={**measured.as_record(lambda g: g.stats.new_tokens),
                        **energy_breakdown(meter.attribute, gen.stats, breakdown)},
                peak_gpu_mem_bytes=(torch.cuda.max_memory_allocated(pair.device) if pair.device.type == "cuda"
                                    else math.nan))
            writer.write(record)
            records.append(record)
            totals["new_tokens"] += gen.stats.new_tokens
            totals["wall_time_s"] += gen.stats.wall_time_s
            progress(totals)
        progress(None)
        energy_info = {**meter.describe(), **meter.stop_window(cell_window).as_record(prefix="energy_cell.")}
        gpu_state = meter.gpu_state()
    writer.commit()
    summary = summarize(records)
    params = decoder.params_dict()
    summary.update({"cell_id": cid, "status": "done", "started_at": started, "finished_at": now(),
                    "method_name": method_name, "decoding": decoder.decoding, "decoder": type(decoder).__name__,
                    "params": params, "facts": decoder.facts(),
                    "decoder_params": {"method": method_name, **params},  # the report's old key, until it reads params
                    "max_new_tokens": max_new, "config": cfg, "env": environment_info(pair.device),
                    "cpu_peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                    "energy_meter": energy_info, "gpu_state": gpu_state})
    store.atomic_write_json(cell_dir / store.SUMMARY, summary)
    log.info("cell %s: %d prompts, %.1f tokens/s", cid, len(records), summary["tokens_per_s"])


def _perplexity(model, prompt_ids: list[int], output_ids: list[int], n_positions: int | None) -> float:
    """Output perplexity conditioned on at most the trained context (:func:`harness.context.perplexity_window`)."""
    window = context.perplexity_window(prompt_ids, output_ids, n_positions)
    if n_positions is not None and len(window) + len(output_ids) > n_positions:
        return math.nan  # the output alone outgrows the context: no in-context perplexity
    return output_perplexity(model, window, output_ids)


def _progress(total: int, label: str, enabled: bool):
    """A tqdm bar over prompts showing running tokens/s; returns an update callable (None closes)."""
    from tqdm.auto import tqdm

    bar = tqdm(total=total, desc=label.split("__")[0], leave=False, disable=not enabled)

    def update(totals):
        if totals is None:
            bar.close()
            return
        bar.update(1)
        if totals["wall_time_s"] > 0:
            bar.set_postfix(tok_s=f"{totals['new_tokens'] / totals['wall_time_s']:.1f}")
    return update


def summarize(records: list[dict]) -> dict:
    """Cell-level aggregates (:func:`harness.record.summarize_cell`) and the energy totals: J/token gross
    and net as total energy ÷ total tokens over every measured repetition, mean W, source, coverage;
    NaN with the reasons if any prompt was not measured."""
    out = summarize_cell(records)
    out.update(summarize_records(records))
    return out
