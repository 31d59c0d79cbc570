"""What a cell's records were computed from, beyond its config: the prompts and the pair's weights.

A cell's id hashes its config (:mod:`harness.config.identity`), not the bytes of its data file or of the weights a
model reference points to. Each run segment of a cell stores :func:`cell_inputs` (``segments`` in the
summary); a resume compares it with the inputs now (:func:`changed_inputs`) and refuses, naming the file,
rather than mixing records computed from two versions of a data file or of a model. A *finished* cell is reused
only when its data and weights are still those (:func:`check_finished`, from
:func:`harness.run.cell.verified_state`): else it is a conflict, refused naming ``force=`` like a cell finished under
another identity (:func:`harness.config.identity.check_reusable`).

* prompts: SHA-256 over every example (id, prompt, reference, messages, meta) and its prompt token ids
  (so a changed tokenizer or chat template counts too);
* examples: SHA-256 over the examples alone (what the data file gave, before any tokenizer), so a finished cell's
  data is checked without loading a tokenizer;
* weights: per model reference, a hub snapshot's commit, or for a local folder SHA-256 over each file's
  name and size, the whole of every small file (configs, tokenizer) and the first, middle and last MiB of
  every large one (cheap at any model size; a retrained checkpoint differs there).
"""
from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path
from typing import Any, Iterable, Mapping

from harness.errors import HarnessError

SAMPLE = 1 << 20  # bytes read at the start, middle and end of a large file


class InputsChanged(HarnessError):
    """A resumed cell's prompts or weights differ from those its records were computed from."""


EXAMPLE_FIELDS = ("id", "prompt", "reference", "messages", "response_prefix", "meta")


def prompts_digest(examples: Iterable[Any], prompt_ids: Iterable[list[int]]) -> str:
    h = hashlib.sha256()
    for ex, ids in zip(examples, prompt_ids):
        item = {k: getattr(ex, k, None) for k in EXAMPLE_FIELDS}
        h.update(json.dumps([item, list(ids)], sort_keys=True, default=str).encode())
    return h.hexdigest()


def examples_digest(examples: Iterable[Any]) -> str:
    h = hashlib.sha256()
    for ex in examples:
        h.update(json.dumps({k: getattr(ex, k, None) for k in EXAMPLE_FIELDS}, sort_keys=True, default=str).encode())
        h.update(b"\n")
    return h.hexdigest()


def _file_digest(path: Path, h) -> None:
    size = path.stat().st_size
    h.update(f"{path.name}\0{size}\0".encode())
    with path.open("rb") as f:
        if size <= 3 * SAMPLE:
            h.update(f.read())
            return
        for offset in (0, size // 2, size - SAMPLE):
            f.seek(offset)
            h.update(f.read(SAMPLE))


@functools.lru_cache(maxsize=32)
def _folder_digest(folder: str, mtimes: str) -> str:  # mtimes: part of the cache key only
    h = hashlib.sha256()
    for path in sorted(p for p in Path(folder).rglob("*") if p.is_file() and ".cache" not in p.parts):
        h.update(str(path.relative_to(folder)).encode())
        _file_digest(path, h)
    return h.hexdigest()


def weights_identity(ref: str) -> str:
    """A model reference's identity: ``sha256:<digest>`` of a local folder, ``hub:<commit>`` of a cached hub
    snapshot, or ``unknown`` (neither found: the reference alone identifies it)."""
    from harness.models import resolve_model_path

    path = Path(resolve_model_path(ref)).expanduser()
    if path.is_dir():
        mtimes = ",".join(str(p.stat().st_mtime_ns) for p in sorted(path.rglob("*")) if p.is_file())
        return "sha256:" + _folder_digest(str(path.resolve()), mtimes)
    try:
        from huggingface_hub import snapshot_download

        snapshot = snapshot_download(ref, local_files_only=True)
        return "hub:" + Path(snapshot).name
    except Exception:  # noqa: BLE001 — not in the local cache (or not a hub id)
        return "unknown"


def cell_inputs(data_file: str, examples: list, prompt_ids: list[list[int]], model_refs: list[str]) -> dict:
    """The inputs a segment's records are computed from (stored in ``segments.json``)."""
    return {"data_file": data_file, "prompts_sha256": prompts_digest(examples, prompt_ids),
            "examples_sha256": examples_digest(examples), "weights": {ref: weights_identity(ref) for ref in model_refs}}


def changed_inputs(stored: Mapping[str, Any], now: Mapping[str, Any]) -> list[str]:
    """What differs between the inputs a cell's records came from and the inputs now, each naming its file."""
    out = []
    if stored.get("examples_sha256") and now.get("examples_sha256") \
            and stored["examples_sha256"] != now["examples_sha256"]:
        out.append(f"the data of {now['data_file']} changed "
                   f"(sha256 of its prompts {str(stored['examples_sha256'])[:12]} "
                   f"when the records were written, {now['examples_sha256'][:12]} now)")
    elif stored.get("prompts_sha256") and now.get("prompts_sha256") \
            and stored["prompts_sha256"] != now["prompts_sha256"]:
        out.append(f"the prompts of {now['data_file']} changed (sha256 {str(stored['prompts_sha256'])[:12]} when its "
                   f"records were written, {now['prompts_sha256'][:12]} now)")
    for ref, was in (stored.get("weights") or {}).items():
        is_now = (now.get("weights") or {}).get(ref)
        if was != "unknown" and is_now not in (None, "unknown") and was != is_now:
            from harness.models import resolve_model_path

            out.append(f"the weights of model '{ref}' ({resolve_model_path(ref)}) changed ({was[:19]} when its records "
                       f"were written, {is_now[:19]} now)")
    return out


def stored_inputs(cell_dir: Path) -> dict | None:
    """The inputs a finished cell's records came from (its summary's segments, else ``segments.json``); None for a
    cell measured before inputs were recorded."""
    from harness.results import store

    try:
        segments = store.read_summary(cell_dir).get("segments")
    except ValueError:
        segments = None
    if not isinstance(segments, list):
        segments = store.read_segments(cell_dir)
    return next((s["inputs"] for s in segments if isinstance(s, dict) and isinstance(s.get("inputs"), dict)), None)


def finished_inputs(cfg: Mapping[str, Any]) -> dict:
    """The inputs a cell of ``cfg`` would be computed from now, as far as known without loading a tokenizer or
    weights: its data's examples (:func:`examples_digest`) and its models' identities."""
    from harness.models import PairSpec
    from harness.tasks.base import load_task

    task = load_task(cfg["dataset"])
    pair = PairSpec.from_config(cfg["pair"])
    return {"data_file": task._data_file(), "examples_sha256": examples_digest(task.examples()),
            "weights": {ref: weights_identity(ref) for ref in [pair.target, *pair.draft_ids]}}


def check_finished(cell_dir: Path, cfg: Mapping[str, Any]) -> None:
    """Raise :class:`~harness.config.identity.CellConflict` unless a finished cell's data file and weights are those
    its records were computed from (same refusal, and same ``force=`` remedy, as a cell finished under another
    identity). A cell that recorded no inputs (measured before they were recorded) is reused as before."""
    from harness.config.identity import CellConflict

    stored = stored_inputs(cell_dir)
    if stored is None:
        return
    cid = Path(cell_dir).name
    remedy = (f"Restore what its records came from, or rerun it with force={cid} (or force=corrupt: every such "
              "cell), or use another results_dir")
    try:
        changed = changed_inputs(stored, finished_inputs(cfg))
    except (HarnessError, OSError, ValueError) as e:  # a data file gone or unreadable (ConfigError names it)
        raise CellConflict(f"cell {cid} finished, but its data cannot be read to check that it is still what its "
                           f"records came from ({e}). {remedy}") from e
    if changed:
        raise CellConflict(f"cell {cid} finished from other inputs than now: " + "; ".join(changed) + f". {remedy}")
