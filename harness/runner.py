"""Run one sweep cell: method × decoding × pair × dataset × gpu × seed.

Data flow: prompt → decoder → :class:`Generation` (ids + stats) → one record per prompt
(with quality and energy) → cell summary. The cell is planned first (:func:`plan_cell`: method and
decoding resolved, parameters and pair config validated) without loading any weights; a method that
cannot decode the requested way is "n/a" (skipped, nothing written). Loading and a warm-up
generation happen before any measured window; every measured window is bracketed by the energy
meter (which synchronises the device) and timed inside the decoder.

Crash safety (see :mod:`harness.store`): a cell runs under a per-cell lock (a second process given the
same cell returns "busy" and writes nothing); each prompt's record is fsynced as it is written, so a
killed cell resumes at its next prompt (:func:`run_cells`), and the summary stores a record count and
checksum that a rerun verifies before skipping. Several methods on one pair × dataset × gpu can run as
one interleaved comparison (:func:`run_cells`), each still written to its own cell.
"""
from __future__ import annotations

import json
import logging
import math
import os
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
from harness.decoders.base import Decoder
from harness.decoding import Decoding, as_decoding
from harness.energy import make_energy_meter, summarize_records
from harness.errors import ConfigError, NotApplicable
from harness.methods import MethodSpec, cell_method_spec
from harness.metrics.perplexity import output_perplexity
from harness.models import ModelPair, PairSpec, load_pair
from harness.resources import conf_dir, source_root
from harness.record import build_record, energy_breakdown, summarize_cell
from harness.tasks import load_task

log = logging.getLogger("harness")


@dataclass
class CellOutcome:
    status: str  # "done" | "skipped" | "failed" | "n/a"
    cell_id: str
    cell_dir: Path
    error: str | None = None


@dataclass
class CellPlan:
    """What a cell runs, resolved and validated before any weights load."""

    method: MethodSpec
    decoding: Decoding | None
    pair: PairSpec

    @property
    def decoder_cls(self) -> type[Decoder]:
        return self.method.cls


def plan_cell(cfg: dict) -> CellPlan:
    """Resolve the method under the decoding (aliases, the decoding's warp) with its γ policy and draft
    selection, validate its parameters and the pair config. Raises :class:`~harness.errors.NotApplicable` for
    a method that cannot decode the requested way, :class:`~harness.errors.ConfigError` for bad input; loads
    nothing."""
    decoding = cfg.get("decoding")
    return CellPlan(cell_method_spec(cfg), as_decoding(decoding) if decoding is not None else None,
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

    for path in sorted((conf_dir() / "gpu").glob("*.yaml")):
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


def environment_info(device: torch.device, pair: ModelPair | None = None) -> dict:
    """The summary's ``env``: versions, machine, CPU model, device, git sha and (with ``pair``) the checkpoint
    revisions that were loaded (:mod:`harness.provenance`)."""
    from harness import provenance

    info = {**provenance.environment(), "torch": torch.__version__,
            "host": platform.node(), "platform": platform.platform(), "device_type": device.type,
            "torch_threads": torch.get_num_threads(), "git_sha": git_sha()}
    if device.type == "cuda":
        info["device_name"] = torch.cuda.get_device_name(device)
        info["cuda"] = torch.version.cuda
    else:
        info["device_name"] = info["cpu_model"] or platform.processor() or platform.machine()
    if pair is not None:
        info["checkpoints"] = provenance.pair_revisions(pair)
    return info


def git_sha() -> str | None:
    """The checkout's commit (``-dirty`` with uncommitted changes); None for an installed package."""
    root = source_root()
    if root is None:
        return None
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                             timeout=5).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=5).stdout.strip()
        return (sha + ("-dirty" if dirty else "")) or None
    except (OSError, subprocess.SubprocessError):
        return None


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def prompt_seed(seed: int, index: int) -> int:
    return seed * 1_000_003 + index


def prepare_cell(cfg: dict, results_dir: str | Path = "results") -> tuple[dict, str, Path]:
    """(config with the ``gpu`` label resolved, cell id, cell folder) — what a cell is called and where
    it lives, without running anything (shared by the runner and ``harness plan``)."""
    if "gpu" in cfg:
        cfg = {**cfg, "gpu": {**cfg["gpu"], "name": gpu_label(cfg["gpu"])}}
    cid = cell_id(cfg)
    return cfg, cid, Path(results_dir) / "cells" / cid


def cell_status(cell_dir: Path) -> dict:
    """State of a cell folder for ``harness plan``: status (done | running | partial | failed | corrupt
    | pending) and how many prompts are written."""
    state, detail = store.finished_state(cell_dir)
    if state == "done":
        n = store.records_digest(cell_dir / store.RECORDS)[0]
        return {"status": "done", "prompts_written": n, "detail": ""}
    owner = store.lock_state(cell_dir)
    partial = cell_dir / store.PARTIAL
    n = 0
    if partial.exists():
        n = sum(1 for line in partial.read_bytes().split(b"\n")[:-1] if line.strip())
    if owner:
        return {"status": "running", "prompts_written": n, "detail": f"{owner.get('host')} pid {owner.get('pid')}"}
    if state == "corrupt":
        return {"status": "corrupt", "prompts_written": n, "detail": detail}
    if (cell_dir / store.ERROR).exists():
        try:
            err = json.loads((cell_dir / store.ERROR).read_text(encoding="utf-8"))
            detail = f"{err.get('kind')}: {str(err.get('error'))[:120]}"
        except (OSError, ValueError):
            detail = "unreadable error.json"
        return {"status": "failed", "prompts_written": n, "detail": detail}
    if n:
        return {"status": "partial", "prompts_written": n, "detail": "resumes at prompt %d" % n}
    return {"status": "pending", "prompts_written": 0, "detail": ""}


class _Cell:
    """One cell of a run (alone, or one method of an interleaved comparison): its lock, writer and
    decoder, and the records it has so far."""

    def __init__(self, cfg: dict, results_dir: str | Path):
        self.cfg, self.cid, self.cell_dir = prepare_cell(cfg, results_dir)
        self.plan: CellPlan | None = None
        self.lock: store.CellLock | None = None
        self.writer: store.RecordWriter | None = None
        self.decoder: Decoder | None = None
        self.outcome: CellOutcome | None = None
        self.started = now()
        self.resumed_at = 0
        self.fitted: list[tuple[list[int], int | None]] = []  # (prompt ids as run, original length if truncated)

    def finish(self, status: str, error: str | None = None) -> CellOutcome:
        self.outcome = CellOutcome(status, self.cid, self.cell_dir, error)
        return self.outcome

    def fail(self, e: BaseException) -> CellOutcome:
        if self.writer is not None:
            self.writer.abort()
        kind = "oom" if isinstance(e, torch.OutOfMemoryError) or "out of memory" in str(e).lower() else type(e).__name__
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        if self.lock is not None:  # only the lock holder writes into the cell
            try:
                store.atomic_write_json(self.cell_dir / store.ERROR, {
                    "cell_id": self.cid, "kind": kind, "error": str(e), "traceback": traceback.format_exc(),
                    "at": now(), "config": self.cfg,
                    "prompts_written": self.writer.next_index if self.writer is not None else 0})
            except Exception as werr:  # noqa: BLE001 — a read-only or full results folder must not stop the sweep
                log.error("cell %s: could not write %s (%s: %s)", self.cid, self.cell_dir / store.ERROR,
                          type(werr).__name__, werr)
        log.error("cell %s failed (%s): %s", self.cid, kind, e)
        self.release()
        return self.finish("failed", f"{kind}: {e}")

    def release(self) -> None:
        if self.lock is not None:
            self.lock.release()
            self.lock = None

    def discard(self) -> None:
        """A configuration error found only once data and models are at hand: leave nothing behind that
        this run created (records a previous run wrote stay, for its resume)."""
        if self.writer is not None:
            self.writer.abort()
            if self.resumed_at == 0:
                self.writer.partial.unlink(missing_ok=True)
                (self.cell_dir / SEGMENTS).unlink(missing_ok=True)
                if self.lock is not None:
                    self.lock.path.unlink(missing_ok=True)
        self.release()
        if self.cell_dir.is_dir() and not any(self.cell_dir.iterdir()):
            self.cell_dir.rmdir()


def _open_cell(cell: _Cell, force: bool) -> CellOutcome | None:
    """Plan, skip, lock and open the writer of one cell; returns its outcome when it will not run."""
    try:
        cell.plan = plan_cell(cell.cfg)
    except NotApplicable as e:
        log.info("cell %s is not applicable: %s", cell.cid, e)
        return cell.finish("n/a", str(e))
    # a ConfigError from plan_cell is raised, never recorded as a failed cell
    state, _ = store.finished_state(cell.cell_dir)
    if state == "done" and not force:
        identity.check_reusable(cell.cell_dir, cell.cfg)  # CellConflict unless measured under this identity
        log.info("cell %s already finished; skipping", cell.cid)
        return cell.finish("skipped")
    try:
        cell.lock = store.CellLock(cell.cell_dir).acquire()
    except store.CellBusy as e:
        log.warning("%s; not running it here", e)
        return cell.finish("busy", str(e))
    except OSError as e:
        return cell.fail(e)
    try:
        state, detail = store.finished_state(cell.cell_dir)  # another process may have finished it meanwhile
        if state == "done" and not force:
            cell.release()
            identity.check_reusable(cell.cell_dir, cell.cfg)
            return cell.finish("skipped")
        if state == "corrupt" and not force:
            store.reopen_corrupt(cell.cell_dir, detail)
        if force:
            for name in (store.SUMMARY, store.RECORDS, SEGMENTS):
                (cell.cell_dir / name).unlink(missing_ok=True)
        (cell.cell_dir / store.ERROR).unlink(missing_ok=True)
        cell.writer = store.RecordWriter(cell.cell_dir, resume=not force)
        cell.resumed_at = cell.writer.next_index
        segments = _read_segments(cell.cell_dir) if not force else []
        segments.append({"from_index": cell.resumed_at, "at": now(), "host": platform.node(), "pid": os.getpid()})
        store.atomic_write_json(cell.cell_dir / SEGMENTS, segments)
        if cell.resumed_at:
            log.info("cell %s: resuming at prompt %d (%d records kept)", cell.cid, cell.resumed_at, cell.resumed_at)
    except ConfigError:
        cell.release()
        raise
    except Exception as e:  # noqa: BLE001
        return cell.fail(e)
    return None


SEGMENTS = "segments.json"  # one entry per run segment of a cell (first run, then each resume)


def _read_segments(cell_dir: Path) -> list[dict]:
    try:
        data = json.loads((cell_dir / SEGMENTS).read_text(encoding="utf-8"))
        return data if isinstance(data, list) else []
    except (OSError, ValueError):
        return []


def run_cell(cfg: dict, results_dir: str | Path = "results", force: bool = False) -> CellOutcome:
    """Run a cell unless it already finished (and was measured under the same identity:
    :func:`harness.identity.check_reusable`); a killed or failed cell resumes at its next prompt.
    Runtime failures (OOM, a crashing model, ...) are recorded in ``error.json`` and returned, not raised,
    so a sweep goes on with its other cells. Configuration errors (:class:`~harness.errors.ConfigError`)
    are raised and leave nothing behind; the CLI finds them for every cell before any model loads
    (:mod:`harness.validation`). A method that cannot decode the requested way returns "n/a" and
    writes nothing; a cell another live process is running returns "busy" and writes nothing."""
    return run_cells([cfg], results_dir, force=force)[0]


def interleave_key(cfg: dict) -> str:
    """Cells that can run as one interleaved comparison share everything but ``method``."""
    return json.dumps({k: v for k, v in cfg.items() if k != "method"}, sort_keys=True, default=str)


def run_cells(cfgs: list[dict], results_dir: str | Path = "results", force: bool = False) -> list[CellOutcome]:
    """Run one cell, or several as one *interleaved comparison*: prompt i is generated by every method
    (the order rotating by one each prompt) before prompt i+1, so drift, contention and thermal state hit
    all methods alike. Each method's records go to its own cell (the same cell id as a separate run),
    with ``interleaved: true`` and the comparison's cell ids in its summary. The cells must differ only in
    ``method`` (:func:`interleave_key`). Locks, resume and failure isolation work per cell."""
    if len({interleave_key(c) for c in cfgs}) > 1:
        raise ValueError("an interleaved comparison groups cells that differ only in `method`")
    cells = [_Cell(c, results_dir) for c in cfgs]
    active = []
    try:
        for c in cells:
            if _open_cell(c, force) is None:
                active.append(c)
        if active:
            _run(list(active), interleaved=len(cells) > 1, group=[c.cid for c in cells])
    except ConfigError:  # raised, never a failed-cell record; nothing of this run left behind
        for c in active:
            if c.outcome is None:
                c.discard()
        for c in cells:
            c.release()
        raise
    except Exception as e:  # noqa: BLE001 — a shared failure (loading the pair, the dataset) fails every cell
        for c in active:
            if c.outcome is None:
                c.fail(e)
    for c in cells:
        c.release()
    _judge(cells)
    return [c.outcome for c in cells]


def _judge(cells: list[_Cell]) -> None:
    """Grade the finished cells with the configured LLM judge (:mod:`harness.judge`): after every cell of the
    comparison has generated, outside every timed and energy window; judgments go to their own files."""
    done = [(c.cfg, c.cell_dir) for c in cells if c.outcome is not None and c.outcome.status in ("done", "skipped")]
    if any((cfg.get("judge") or {}).get("backend", "none") != "none" for cfg, _ in done):
        from harness.judge import judge_cells

        judge_cells(done)


def _run(cells: list[_Cell], interleaved: bool, group: list[str]) -> None:
    cfg = cells[0].cfg
    seed = int(cfg["seed"])
    runner_cfg = cfg.get("runner", {})
    if runner_cfg.get("threads"):
        torch.set_num_threads(int(runner_cfg["threads"]))
    pair = get_pair(cfg["pair"], progress=bool(runner_cfg.get("progress", True)))
    task = load_task(cfg["dataset"])
    examples = task.examples()
    if not examples:
        raise ValueError(f"dataset '{cfg['dataset']['name']}' produced no prompts")
    tok = pair.tokenizer
    max_new = context.resolve_max_new_tokens(cfg, task.max_new_tokens)  # null = the dataset's; 0/negative refused
    n_positions = context.pair_positions(pair.target.config, [d.config for d in pair.drafts.values()])
    raw_ids = [task.prompt_ids(ex, tok) for ex in examples]  # chat template when the task/tokenizer use one
    breakdown = bool(runner_cfg.get("breakdown", False))  # device sync at draft/verify/call boundaries

    for c in list(cells):
        try:
            if c.writer.next_index > len(examples):
                raise ValueError(f"{c.cell_dir / store.PARTIAL} has {c.writer.next_index} records but the dataset "
                                 f"has {len(examples)} prompts")
            # prompts longer than the trained context keep their last tokens, flagged (harness.context's rule;
            # the lookahead is the method's own, so each cell of a comparison fits its prompts itself)
            c.fitted = [context.fit_prompt(ids, n_positions, max_new, c.plan.method.lookahead) for ids in raw_ids]
            if any(n is not None for _, n in c.fitted):
                log.warning("cell %s: %d prompt(s) longer than the model's context (%d positions) keep their last "
                            "tokens (records: prompt_truncated)", c.cid, sum(n is not None for _, n in c.fitted),
                            n_positions)
            torch.manual_seed(seed)
            c.decoder = c.plan.method.build(pair, sync_timing=breakdown or bool(runner_cfg.get("sync_timing", False)))
            c.decoder.prepare([ids for ids, _ in c.fitted])  # e.g. draft selection fits its prompt features (seed 004 §5)
            for _ in range(int(runner_cfg.get("warmup_generations", 1))):  # untimed, unrecorded
                c.decoder.generate(c.fitted[0][0], int(runner_cfg.get("warmup_new_tokens", 8)), seed=seed)
        except ConfigError:
            raise
        except Exception as e:  # noqa: BLE001
            c.fail(e)
            cells.remove(c)
    if not cells:
        return

    totals = {"new_tokens": 0, "wall_time_s": 0.0}
    start = min(c.writer.next_index for c in cells)
    with make_energy_meter(cfg.get("energy"), pair.cuda_devices()) as meter:
        label = cells[0].cid if len(cells) == 1 else f"compare[{len(cells)}]"
        progress = _progress(len(examples) - start, label, runner_cfg.get("progress", True))
        cell_window = meter.start_window("cell")  # everything the GPUs drew during the cell, protocol included
        for i in range(start, len(examples)):
            ex = examples[i]
            rot = i % len(cells)
            for c in cells[rot:] + cells[:rot]:  # rotating order: each method goes first equally often
                if c.outcome is not None or c.writer.next_index != i:
                    continue
                try:
                    gen = _one_prompt(c, pair, task, meter, ex, i, seed, max_new, n_positions, breakdown)
                except Exception as e:  # noqa: BLE001 — this cell fails; the comparison goes on
                    c.fail(e)
                    continue
                totals["new_tokens"] += gen.stats.new_tokens
                totals["wall_time_s"] += gen.stats.wall_time_s
            progress(totals)
        progress(None)
        energy_info = {**meter.describe(), **meter.stop_window(cell_window).as_record(prefix="energy_cell.")}
        gpu_state = meter.gpu_state()
    for c in cells:
        if c.outcome is not None:
            continue
        try:
            _finish_cell(c, pair, max_new, energy_info, gpu_state, interleaved, group, task)
        except Exception as e:  # noqa: BLE001
            c.fail(e)


def _one_prompt(c: _Cell, pair: ModelPair, task, meter, ex, i: int, seed: int, max_new: int,
                n_positions: int | None, breakdown: bool = False):
    """Generate, score and write prompt i of cell c. Self-contained: its seed, energy window and record
    depend on nothing earlier in the cell, so a resumed cell writes what an uninterrupted one would."""
    tok = pair.tokenizer
    ids, original = c.fitted[i]
    if ex.history:  # a later turn of a conversation: its prompt holds this cell's own earlier answers
        ex = task.with_history(ex, c.writer.records)
        ids, original = context.fit_prompt(task.prompt_ids(ex, tok), n_positions, max_new, c.plan.method.lookahead)
    if pair.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(pair.device)
    measured = meter.measure(f"prompt {i}", lambda: c.decoder.generate(ids, max_new, seed=prompt_seed(seed, i),
                                                                        stop=task.stop))
    gen = measured.result
    text = tok.decode(gen.output_ids, skip_special_tokens=True)
    record = build_record(
        cell_id=c.cid, index=i, example=ex, prompt_ids=ids, generation=gen, output_text=text,
        prompt_text=task.prompt_text(ex, tok),
        output_ppl=_perplexity(pair.target, gen.prompt_ids, gen.output_ids, n_positions),
        prompt_tokens_original=original,
        metrics=task.score(ex, task.truncate(text)),
        energy={**measured.as_record(lambda g: g.stats.new_tokens),
                **energy_breakdown(meter.attribute, gen.stats, breakdown)},
        peak_gpu_mem_bytes=(torch.cuda.max_memory_allocated(pair.device) if pair.device.type == "cuda"
                            else math.nan))
    c.writer.write(record)
    c.lock.heartbeat()
    return gen


def _finish_cell(c: _Cell, pair: ModelPair, max_new: int, energy_info: dict, gpu_state, interleaved: bool,
                 group: list[str], task=None) -> None:
    records_path = c.writer.commit()
    records = c.writer.records
    count, digest = store.records_digest(records_path)
    summary = summarize(records)
    params = c.decoder.params_dict()
    method_name = c.plan.decoder_cls.method
    segments = _read_segments(c.cell_dir)
    summary.update({"cell_id": c.cid, "status": "done", "started_at": (segments[0]["at"] if segments else c.started),
                    "finished_at": now(), "method_name": method_name, "decoding": c.decoder.decoding,
                    "decoder": type(c.decoder).__name__, "params": params, "facts": c.decoder.facts(),
                    "max_new_tokens": max_new, "config": c.cfg, "env": environment_info(pair.device, pair),
                    "cpu_peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                    "energy_meter": energy_info, "gpu_state": gpu_state,
                    "interleaved": interleaved, "interleave_group": group if interleaved else [],
                    "segments": segments, "resumed": len(segments) > 1,
                    "records_count": count, "records_sha256": digest,
                    # the report's quality axis and lossless marking (INTERFACES.md items 1 and 4): lossless for this
                    # decoder's parameters and decoding (Decoder.is_lossless; Decoder.lossless: for every setting)
                    "primary_metric": getattr(task, "primary_metric", None),
                    "primary_metric_higher_is_better": bool(getattr(task, "higher_is_better", True)),
                    "lossless": c.decoder.is_lossless()})
    store.atomic_write_json(c.cell_dir / store.SUMMARY, summary)
    (c.cell_dir / SEGMENTS).unlink(missing_ok=True)
    c.release()
    c.finish("done")
    log.info("cell %s: %d prompts, %.1f tokens/s", c.cid, len(records), summary["tokens_per_s"])


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
