"""Run one sweep cell: method × pair × dataset × gpu × seed.

Data flow: prompt → decoder → :class:`Generation` (ids + stats) → one record per prompt
(with quality and energy) → cell summary. Loading and a warm-up generation happen before
any measured window; every measured window is bracketed by the energy meter (which
synchronises the device) and timed inside the decoder.
"""
from __future__ import annotations

import hashlib
import json
import logging
import math
import platform
import resource
import subprocess
import time
import traceback
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import torch

from harness import store
from harness.decoders import build_decoder
from harness.energy import make_energy_meter, summarize_records
from harness.metrics.perplexity import output_perplexity
from harness.models import ModelPair, load_pair
from harness.tasks import load_task

log = logging.getLogger("harness")
PROJECT_ROOT = Path(__file__).resolve().parents[1]
IDENTITY_KEYS = ("method", "pair", "dataset", "gpu", "seed", "energy")


@dataclass
class CellOutcome:
    status: str  # "done" | "skipped" | "failed"
    cell_id: str
    cell_dir: Path
    error: str | None = None


def cell_id(cfg: dict) -> str:
    """Readable and unique: method, pair, dataset, gpu, seed, then a hash of everything that defines the cell."""
    identity = {k: cfg.get(k) for k in IDENTITY_KEYS}
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:10]
    m = cfg["method"]
    return f"{m['name']}__{cfg['pair']['name']}__{cfg['dataset']['name']}__{cfg['gpu']['name']}__s{cfg['seed']}__{digest}"


_PAIR_CACHE: dict[str, ModelPair] = {}


def get_pair(pair_cfg: dict) -> ModelPair:
    """Load (once per process: a local sweep runs its cells in one process) the model pair."""
    key = json.dumps(pair_cfg, sort_keys=True)
    if key not in _PAIR_CACHE:
        _PAIR_CACHE.clear()
        kwargs = {k: v for k, v in pair_cfg.items() if k not in ("target", "draft")}
        _PAIR_CACHE[key] = load_pair(pair_cfg["target"], pair_cfg.get("draft"), **kwargs)
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
    """Run a cell unless it already finished. Failures (OOM, bad config, ...) are recorded in
    ``error.json`` and returned, not raised, so a sweep goes on with its other cells."""
    cid = cell_id(cfg)
    cell_dir = Path(results_dir) / "cells" / cid
    if store.is_finished(cell_dir) and not force:
        log.info("cell %s already finished; skipping", cid)
        return CellOutcome("skipped", cid, cell_dir)
    (cell_dir / store.ERROR).unlink(missing_ok=True)
    writer = None
    try:
        writer = store.RecordWriter(cell_dir)
        _run(cfg, cid, cell_dir, writer)
        return CellOutcome("done", cid, cell_dir)
    except Exception as e:  # noqa: BLE001 — every failure is recorded with its traceback
        if writer is not None:
            writer.abort()
        kind = "oom" if isinstance(e, torch.OutOfMemoryError) or "out of memory" in str(e).lower() else type(e).__name__
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        store.atomic_write_json(cell_dir / store.ERROR, {"cell_id": cid, "kind": kind, "error": str(e),
                                                         "traceback": traceback.format_exc(), "at": now(),
                                                         "config": cfg})
        log.error("cell %s failed (%s): %s", cid, kind, e)
        return CellOutcome("failed", cid, cell_dir, f"{kind}: {e}")


def _run(cfg: dict, cid: str, cell_dir: Path, writer: store.RecordWriter) -> None:
    started = now()
    seed = int(cfg["seed"])
    torch.manual_seed(seed)
    runner_cfg = cfg.get("runner", {})
    method_cfg = dict(cfg["method"])
    method_name = method_cfg.pop("name")

    pair = get_pair(cfg["pair"])
    decoder = build_decoder(method_name, pair, **method_cfg)
    task = load_task(cfg["dataset"])
    examples = task.examples()
    if not examples:
        raise ValueError(f"dataset '{cfg['dataset']['name']}' produced no prompts")
    tok = pair.tokenizer
    max_new = int(cfg.get("max_new_tokens") or task.max_new_tokens)

    encoded = [task.prompt_ids(ex, tok) for ex in examples]  # chat template when the task/tokenizer use one
    for _ in range(int(runner_cfg.get("warmup_generations", 1))):  # untimed, unrecorded
        decoder.generate(encoded[0], int(runner_cfg.get("warmup_new_tokens", 8)), seed=seed)

    totals = {"new_tokens": 0, "wall_time_s": 0.0}
    records = []
    with make_energy_meter(cfg.get("energy"), pair.cuda_devices()) as meter:
        progress = _progress(len(examples), cid, runner_cfg.get("progress", True))
        cell_window = meter.start_window("cell")  # everything the GPUs drew during the cell, protocol included
        for i, (ex, ids) in enumerate(zip(examples, encoded)):
            if pair.device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(pair.device)
            measured = meter.measure(f"prompt {i}", lambda: decoder.generate(ids, max_new, seed=prompt_seed(seed, i)))
            gen = measured.result
            text = tok.decode(gen.output_ids, skip_special_tokens=True)
            answer = task.truncate(text)
            record = {"cell_id": cid, "index": i, "example_id": ex.id, "prompt_tokens": len(ids),
                      **{f"meta.{k}": v for k, v in ex.meta.items()},
                      **gen.stats.as_record(), "stopped_by_eos": gen.stopped_by_eos,
                      "output_ppl": output_perplexity(pair.target, gen.prompt_ids, gen.output_ids),
                      **{f"metric.{k}": v for k, v in task.score(ex, answer).items()},
                      **measured.as_record(lambda g: g.stats.new_tokens),
                      "peak_gpu_mem_bytes": (torch.cuda.max_memory_allocated(pair.device)
                                             if pair.device.type == "cuda" else math.nan),
                      "output_text": text, "prompt": task.prompt_text(ex, tok)}
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
    summary.update({"cell_id": cid, "status": "done", "started_at": started, "finished_at": now(),
                    "method_name": method_name, "decoder": type(decoder).__name__, "decoder_params": decoder.describe(),
                    "max_new_tokens": max_new, "config": cfg, "env": environment_info(pair.device),
                    "cpu_peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                    "energy_meter": energy_info, "gpu_state": gpu_state})
    store.atomic_write_json(cell_dir / store.SUMMARY, summary)
    log.info("cell %s: %d prompts, %.1f tokens/s", cid, len(records), summary["tokens_per_s"])


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


def _nanmean(values) -> float:
    vals = [v for v in values if isinstance(v, (int, float)) and v is not None and math.isfinite(v)]
    return sum(vals) / len(vals) if vals else math.nan


def summarize(records: list[dict]) -> dict:
    """Cell-level aggregates. Rates are ratios of totals (total tokens ÷ total time), not means of ratios."""
    def total(key):
        return sum(r.get(key) or 0 for r in records)

    new_tokens, wall = total("new_tokens"), total("wall_time_s")
    target_calls, drafted, accepted, iters = (total("target_calls"), total("drafted_tokens"),
                                               total("accepted_tokens"), total("iterations"))
    out = {"prompts": len(records), "new_tokens": new_tokens, "wall_time_s": wall,
           "tokens_per_s": new_tokens / wall if wall else math.nan,
           "mean_prompt_tokens_per_s": _nanmean(r["tokens_per_s"] for r in records),
           "target_calls": target_calls, "draft_calls": total("draft_calls"),
           "block_efficiency": new_tokens / target_calls if target_calls else math.nan,
           "drafted_tokens": drafted, "accepted_tokens": accepted,
           "acceptance_rate": accepted / drafted if drafted else math.nan,
           "mean_acceptance_length": 1 + accepted / iters if iters and drafted else math.nan,
           "output_ppl": _nanmean(r["output_ppl"] for r in records),
           "peak_gpu_mem_bytes": max((r["peak_gpu_mem_bytes"] for r in records
                                      if r.get("peak_gpu_mem_bytes") is not None), default=math.nan)}
    metric_keys = sorted({k for r in records for k in r if k.startswith("metric.") or k.startswith("stat.")})
    for k in metric_keys:
        out[k] = _nanmean(r.get(k) for r in records)
    # energy: J/token gross and net as total energy ÷ total tokens over every measured repetition,
    # mean W, source, coverage; NaN with the reasons if any prompt was not measured
    out.update(summarize_records(records))
    return out
