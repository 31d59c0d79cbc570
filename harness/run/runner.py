"""Run one sweep cell: method × decoding × pair × dataset × gpu × seed.

Data flow: prompt → decoder → :class:`Generation` (ids + stats) → one record per prompt
(with quality and energy) → cell summary. The cell is planned first (:func:`plan_cell`: method and
decoding resolved, parameters and pair config validated) without loading any weights; a method that
cannot decode the requested way is "n/a" (skipped, nothing written). Loading and a warm-up
generation happen before any measured window; every measured window is bracketed by the energy
meter (which synchronises the device) and timed inside the decoder.

Crash safety (see :mod:`harness.results.store`): a cell runs under a per-cell lock (a second process given the
same cell returns "busy" and writes nothing); each prompt's record is fsynced as it is written, so a
killed cell resumes at its next prompt (:func:`run_cells`), and the summary stores a record count and
checksum that a rerun verifies before skipping. Several methods on one pair × dataset × gpu can run as
one interleaved comparison (:func:`run_cells`), each still written to its own cell.
"""
from __future__ import annotations

import json
import logging
import math
import platform
import resource
import dataclasses
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch

from harness.run import contention, context

from harness.results import store
from harness.run.cell import (Cell, CellPlan, as_cell, cell_id, gpu_label, interleave_key,  # noqa: F401 (re-exported)
                          plan_cell,
                          prepare_cell, prompt_seed)
from harness.run.cellrun import CellOutcome, CellRun, now
from harness.energy import make_energy_meter, summarize_records
from harness.errors import ConfigError
from harness.run.fingerprint import cell_inputs
from harness.run.warmup import warm_up, warmup_generations  # noqa: F401 (re-exported)
from harness.metrics.perplexity import output_perplexity
from harness.models import ModelPair, PairSpec, load_pair
from harness.primitives.graphs import DEFAULT_EXECUTION
from harness.results.record import CellSummary, build_record, energy_breakdown
from harness.resources import source_root
from harness.config import identity
from harness.config.schema import RunnerConfig, runner_config  # noqa: F401 (re-exported)

log = logging.getLogger("harness")


_PAIR_CACHE: dict[str, ModelPair] = {}


def get_pair(pair: PairSpec, progress: bool = True) -> ModelPair:
    """Load (once per process: a local sweep runs its cells in one process) the model pair, and set its execution
    mode (``pair.execution``: cells of both modes share the loaded weights)."""
    loaded = {k: v for k, v in dataclasses.asdict(pair).items() if k != "execution"}  # what the weights depend on
    key = json.dumps(loaded, sort_keys=True, default=str)
    if key not in _PAIR_CACHE:
        _PAIR_CACHE.clear()
        _PAIR_CACHE[key] = load_pair(**loaded, progress=progress)
    return _PAIR_CACHE[key].set_execution(pair.execution or DEFAULT_EXECUTION)


def environment_info(device: torch.device, pair: ModelPair | None = None) -> dict:
    """The summary's ``env``: versions, machine, CPU model, device, git sha and (with ``pair``) the checkpoint
    revisions that were loaded (:mod:`harness.results.provenance`)."""
    from harness.results import provenance

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


def run_cell(cfg: Cell | Mapping[str, Any], results_dir: str | Path = "results", force: Any = False) -> CellOutcome:
    """Run a cell unless it already finished (and was measured under the same identity:
    :func:`harness.config.identity.check_reusable`); a killed or failed cell resumes at its next prompt, a cell whose
    files fail verification is repaired (:mod:`harness.run.cellrun`). Runtime failures (OOM, a crashing model,
    changed inputs on resume, ...) are recorded in ``error.json`` and returned, not raised, so a sweep goes on
    with its other cells. Configuration errors (:class:`~harness.errors.ConfigError`) are raised and leave
    nothing behind; the CLI finds them for every cell before any model loads (:mod:`harness.config.validation`). A
    method that cannot decode the requested way returns "n/a" and writes nothing; a cell another live process
    is running returns "busy" and writes nothing. ``force``: see :func:`harness.run.cell.forced`. ``cfg``: the typed
    :class:`~harness.run.cell.Cell` (the CLI's), or a plain composed config (built into one here)."""
    return run_cells([as_cell(cfg)], results_dir, force=force)[0]


def run_cells(cfgs: Sequence[Cell | Mapping[str, Any]], results_dir: str | Path = "results",
              force: Any = False) -> list[CellOutcome]:
    """Run one cell, or several as one *interleaved comparison*: prompt i is generated by every method
    (the order rotating by one each prompt) before prompt i+1, so drift, contention and thermal state hit
    all methods alike. Each method's records go to its own cell (the same cell id as a separate run); its
    summary says whether it ran interleaved and with which cells (a partner that was busy, finished or failed
    before the first prompt is not counted). The cells must differ only in ``method`` (:func:`interleave_key`).
    Locks, resume and failure isolation work per cell."""
    typed = [as_cell(c) for c in cfgs]
    if len({interleave_key(c.config) for c in typed}) > 1:
        raise ValueError("an interleaved comparison groups cells that differ only in `method`")
    cells = [CellRun(c, results_dir) for c in typed]
    active = []
    try:
        for c in cells:
            if c.open(force) is None:
                active.append(c)
        if active:
            _run(list(active))
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
    _track(cells, results_dir)
    return [c.outcome for c in cells]


def _track(cells: list[CellRun], results_dir) -> None:
    """Copy each cell finished in this run to the configured experiment tracker (:mod:`harness.results.trackers`)."""
    for c in cells:
        tracker = c.cell.tracker
        if c.outcome is not None and c.outcome.status == "done" and tracker is not None and tracker.name != "none":
            from harness.results.trackers import log_cell

            log_cell(tracker, c.cell_dir, results_dir)


def _judge(cells: list[CellRun]) -> None:
    """Grade the finished cells with the configured LLM judge (:mod:`harness.judge`): after every cell of the
    comparison has generated, outside every timed and energy window; judgments go to their own files."""
    done = [(c.cfg, c.cell_dir) for c in cells if c.outcome is not None and c.outcome.status in ("done", "skipped")]
    if any(c.cell.judge is not None and c.cell.judge.backend != "none" for c in cells
           if c.outcome is not None and c.outcome.status in ("done", "skipped")):
        from harness.judge import judge_cells

        judge_cells(done)


@dataclass
class _Shared:
    """What the cells of one run share: the pair, the task and its prompts, and the run's settings."""

    cell: Cell
    pair: ModelPair
    task: Any
    examples: list
    raw_ids: list[list[int]]
    max_new: int
    n_positions: int | None

    @property
    def seed(self) -> int:
        return self.cell.seed

    @property
    def runner(self) -> RunnerConfig:
        return self.cell.runner


def _load(cell: Cell) -> _Shared:
    if cell.plan is None:  # opened cells have a plan (CellRun.open returns "n/a" without one)
        raise ValueError(f"cell without a plan: {cell.not_applicable}")
    runner = cell.runner
    if runner.threads:
        torch.set_num_threads(runner.threads)
    pair = get_pair(cell.plan.pair, progress=runner.progress)
    task = cell.dataset
    examples = task.examples()
    if not examples:
        raise ValueError(f"dataset '{task.name}' produced no prompts")
    max_new = context.resolve_max_new_tokens(cell.config, task.max_new_tokens)  # null = the dataset's; <= 0 refused
    n_positions = context.pair_positions(pair.target.config, [d.config for d in pair.drafts.values()])
    raw_ids = [task.prompt_ids(ex, pair.tokenizer) for ex in examples]  # chat template when the task/tokenizer use one
    return _Shared(cell, pair, task, examples, raw_ids, max_new, n_positions)


def _prepare(c: CellRun, sh: _Shared) -> None:
    """Fit the cell's prompts, build its decoder and run the warm-up generations (untimed, unrecorded)."""
    if c.open_writer.next_index > len(sh.examples):
        raise ValueError(f"{c.cell_dir / store.PARTIAL} has {c.open_writer.next_index} records but the dataset "
                         f"has {len(sh.examples)} prompts")
    # prompts longer than the trained context keep their last tokens, flagged (harness.run.context's rule;
    # the lookahead is the method's own, so each cell of a comparison fits its prompts itself)
    c.fitted = [context.fit_prompt(ids, sh.n_positions, sh.max_new, c.cell_plan.method.lookahead)
                for ids in sh.raw_ids]
    if any(n is not None for _, n in c.fitted):
        log.warning("cell %s: %d prompt(s) longer than the model's context (%d positions) keep their last "
                    "tokens (records: prompt_truncated)", c.cid, sum(n is not None for _, n in c.fitted),
                    sh.n_positions)
    torch.manual_seed(sh.seed)
    c.decoder = c.cell_plan.method.build(sh.pair, sync_timing=sh.runner.breakdown or sh.runner.sync_timing)
    c.decoder.prepare([ids for ids, _ in c.fitted])  # e.g. draft selection fits its prompt features (adaptive §5)
    warm_up(c.decoder, c.fitted[0][0], sh.runner, sh.seed, sh.max_new)  # every set-up cost before the first window


def _run(cells: list[CellRun]) -> None:
    sh = _load(cells[0].cell)
    inputs = cell_inputs(sh.task._data_file(), sh.examples, sh.raw_ids,
                         [cells[0].cell_plan.pair.target, *cells[0].cell_plan.pair.draft_ids])
    for c in list(cells):
        try:
            _prepare(c, sh)
        except ConfigError:
            raise
        except Exception as e:  # noqa: BLE001 — this cell fails (recorded); the comparison's other cells go on
            c.fail(e)
            cells.remove(c)
    for c in list(cells):
        try:
            c.start_segment(inputs, partners=[o.cid for o in cells if o is not c])
        except Exception as e:  # noqa: BLE001 — changed inputs (or an unwritable folder): this cell fails alone
            c.fail(e)
            cells.remove(c)
    if cells:
        _loop(cells, sh)


def _loop(cells: list[CellRun], sh: _Shared) -> None:
    """Prompt by prompt, every method (order rotating), each prompt in its own energy window; then finish."""
    totals = {"new_tokens": 0, "wall_time_s": 0.0}
    start = min(c.open_writer.next_index for c in cells)
    with make_energy_meter(sh.cell.energy, sh.pair.cuda_devices()) as meter:
        label = cells[0].cid if len(cells) == 1 else f"compare[{len(cells)}]"
        progress = _progress(len(sh.examples) - start, label, sh.runner.progress)
        cell_window = meter.start_window("cell")  # everything the GPUs drew during the cell, protocol included
        for i in range(start, len(sh.examples)):
            rot = i % len(cells)
            for c in cells[rot:] + cells[:rot]:  # rotating order: each method goes first equally often
                if c.outcome is not None or c.open_writer.next_index != i:
                    continue
                try:
                    gen = _one_prompt(c, sh, meter, i)
                except Exception as e:  # noqa: BLE001 — this cell fails; the comparison goes on
                    c.fail(e)
                    continue
                totals["new_tokens"] += gen.stats.new_tokens
                totals["wall_time_s"] += gen.stats.wall_time_s
            progress(totals)
        progress(None)
        energy_info = {**meter.describe(), **meter.stop_window(cell_window).as_record(prefix="energy_cell.")}
        gpu_state = meter.gpu_state()
    survivors = [c.cid for c in cells if c.outcome is None]
    for c in cells:
        if c.outcome is not None:
            continue
        try:
            _finish_cell(c, sh, energy_info, gpu_state, [cid for cid in survivors if cid != c.cid])
        except Exception as e:  # noqa: BLE001 — this cell fails (recorded); the others are still finished
            c.fail(e)


def _one_prompt(c: CellRun, sh: _Shared, meter, i: int):
    """Generate, score and write prompt i of cell c. Self-contained: its seed, energy window and record
    depend on nothing earlier in the cell, so a resumed cell writes what an uninterrupted one would."""
    tok, pair, task, ex = sh.pair.tokenizer, sh.pair, sh.task, sh.examples[i]
    ids, original = c.fitted[i]
    if ex.history:  # a later turn of a conversation: its prompt holds this cell's own earlier answers
        ex = task.with_history(ex, c.open_writer.records)
        ids, original = context.fit_prompt(task.prompt_ids(ex, tok), sh.n_positions, sh.max_new,
                                           c.cell_plan.method.lookahead)
    if pair.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(pair.device)
    host = contention.reader()  # the host's load around the prompt (issue 33.1), sampled outside its window
    before = host.sample()
    measured = meter.measure(f"prompt {i}", lambda: c.decoder.generate(ids, sh.max_new, seed=prompt_seed(sh.seed, i),
                                                                        stop=task.stop))
    load = host.between(before, host.sample())
    gen = measured.result
    text = tok.decode(gen.output_ids, skip_special_tokens=True)
    record = build_record(
        cell_id=c.cid, index=i, example=ex, prompt_ids=ids, generation=gen, output_text=text,
        prompt_text=task.prompt_text(ex, tok),
        output_ppl=_perplexity(pair.target, gen.prompt_ids, gen.output_ids, sh.n_positions),
        prompt_tokens_original=original,
        metrics=task.score(ex, task.truncate(text)),
        energy={**measured.as_record(lambda g: g.stats.new_tokens),
                **energy_breakdown(meter.attribute, gen.stats, sh.runner.breakdown)}, host=load,
        peak_gpu_mem_bytes=(torch.cuda.max_memory_allocated(pair.device) if pair.device.type == "cuda"
                            else math.nan))
    c.open_writer.write(record.flat())
    c.held_lock.heartbeat()
    return gen


def interleave_label(segments: list[dict], cid: str, count: int | None = None) -> tuple[bool, list[str]]:
    """(interleaved, group) of a cell from what its run segments did: interleaved only when every segment that
    ran prompts (``count``: the cell's records; a resume that found them all ran none) ran alongside at least one
    other cell to its end; the group is the cell and every cell it ran alongside."""
    if count is not None:
        ends = [s.get("from_index") for s in segments[1:]] + [count]
        ran = [s for s, end in zip(segments, ends) if not isinstance(end, int) or s.get("from_index") != end]
        segments = ran or segments[:1]
    partners = [s.get("interleaved_with") or [] for s in segments]
    together = sorted({cid, *(p for ps in partners for p in ps)})
    interleaved = bool(segments) and all(partners)
    return interleaved, together if interleaved else []


def _finish_cell(c: CellRun, sh: _Shared, energy_info: dict, gpu_state, partners: list[str]) -> None:
    segments = store.read_segments(c.cell_dir)
    if segments:  # the partners that ran this segment to its end (one that failed midway does not count)
        segments[-1]["interleaved_with"] = partners
    records_path = c.open_writer.commit()
    count, digest = store.records_digest(records_path)
    summary = CellSummary.of(c.open_writer.records, summarize_records, identity=_identity(c, sh),
                             run=_run_facts(c, sh, segments, energy_info, gpu_state),
                             integrity={"records_count": count, "records_sha256": digest}).flat()
    store.write_summary(c.cell_dir, summary)  # sealed with the results folder's key (harness.results.integrity)
    store.atomic_write_json(c.cell_dir / store.SEGMENTS, segments)  # kept: a summary rebuilt after deletion
    # (records taken back, nothing rerun) labels the cell from what its segments did
    c.release()
    c.finish("done", note=f"{count} prompts, {summary['tokens_per_s']:.1f} tokens/s")  # announced once, by its line


def _identity(c: CellRun, sh: _Shared) -> dict:
    """What the cell ran: the method resolved, its parameters and facts, the config, whether it is lossless
    for its parameters and decoding (``Decoder.is_lossless``; ``Decoder.lossless``: for every setting) and the
    task's primary quality metric."""
    params, method_name = c.decoder.params_dict(), c.cell_plan.decoder_cls.method
    return {"cell_id": c.cid, identity.VERSION_KEY: identity.version_of(c.cid, c.cfg), "status": "done",
            "method_name": method_name, "decoding": c.decoder.decoding,
            "decoder": type(c.decoder).__name__, "lossless": c.decoder.is_lossless(),
            "params": params, "facts": c.decoder.facts(),
            "max_new_tokens": sh.max_new, "config": c.cfg,
            "primary_metric": getattr(sh.task, "primary_metric", None),
            "primary_metric_higher_is_better": bool(getattr(sh.task, "higher_is_better", True))}


def _run_facts(c: CellRun, sh: _Shared, segments: list[dict], energy_info: dict, gpu_state) -> dict:
    """How and where the cell ran: times, environment, memory, energy meter, its segments and interleaving."""
    interleaved, group = interleave_label(segments, c.cid, len(c.open_writer.records))
    return {"started_at": segments[0]["at"] if segments else c.started, "finished_at": now(),
            "env": environment_info(sh.pair.device, sh.pair), "execution": c.decoder.execution_facts(),
            "cpu_peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            "energy_meter": energy_info, "gpu_state": gpu_state, "interleaved": interleaved,
            "interleave_group": group, "segments": segments, "resumed": len(segments) > 1}


def _perplexity(model, prompt_ids: list[int], output_ids: list[int], n_positions: int | None) -> float:
    """Output perplexity conditioned on at most the trained context (:func:`harness.run.context.perplexity_window`)."""
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
