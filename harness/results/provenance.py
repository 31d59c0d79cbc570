"""Provenance a reviewer asks for: which checkpoint, which code, which machine.

* :func:`checkpoint_revision` — the revision a model was loaded at: the hub commit (``config._commit_hash``,
  pinned with ``pair.revision``), or for a local directory (the embedded pair included) a SHA-256 over
  its files' relative paths and contents, so "the same local path" cannot hide different weights.
* :func:`environment` — the harness version, Python and the libraries a result depends on (torch,
  transformers, tokenizers, accelerate, numpy, ...; ``None`` where one is not installed), the CPU model,
  the device.
* :func:`write_results_json` — one ``results.json`` per sweep, as lm-eval and optimum-benchmark write:
  the sweep's config (overrides, plan), the environment, and one row per cell (its id, status, the
  headline numbers and the path of its summary).
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import re
from datetime import datetime, timezone
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any, Iterable

#: distributions whose versions go into every summary's ``env`` (None where not installed)
PACKAGES = ("torch", "transformers", "tokenizers", "accelerate", "safetensors", "huggingface-hub", "numpy",
            "hydra-core", "omegaconf", "datasets", "nvidia-ml-py")
_CHUNK = 1 << 20


@lru_cache(maxsize=None)
def directory_hash(path: str) -> str:
    """``sha256:<hex>`` over every file under ``path`` (relative path and content, sorted by path)."""
    root = Path(path)
    h = hashlib.sha256()
    for f in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = f.relative_to(root).as_posix()
        if rel.startswith(".") or "/." in rel:  # .cache/, .git/: not the checkpoint
            continue
        h.update(rel.encode() + b"\0")
        with open(f, "rb") as fh:
            for chunk in iter(lambda: fh.read(_CHUNK), b""):
                h.update(chunk)
        h.update(b"\0")
    return "sha256:" + h.hexdigest()


def checkpoint_revision(ref: str, model=None, requested: str | None = None) -> dict:
    """What was loaded for model reference ``ref``: ``{"ref", "requested", "revision", "kind"}`` — ``kind``
    ``hub`` (revision = the commit the hub resolved, from the loaded config), ``local`` (revision = a
    content hash of the directory) or ``unknown``."""
    from harness.models import resolve_model_path

    path = Path(resolve_model_path(ref)).expanduser()
    if path.is_dir():
        return {"ref": ref, "requested": requested, "revision": directory_hash(str(path.resolve())), "kind": "local"}
    commit = getattr(getattr(model, "config", None), "_commit_hash", None)
    return {"ref": ref, "requested": requested, "revision": commit or requested,
            "kind": "hub" if commit else "unknown"}


def pair_revisions(pair) -> dict[str, dict]:
    """``{"target": {...}, "drafts": {draft id: {...}}}`` for a loaded :class:`~harness.models.ModelPair`."""
    meta = pair.meta or {}
    out = {"target": checkpoint_revision(pair.target_id, pair.target, meta.get("revision"))}
    out["drafts"] = {d: checkpoint_revision(d, m, meta.get("draft_revision")) for d, m in (pair.drafts or {}).items()}
    return out


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``, ``sysctl`` on macOS), else what :mod:`platform` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            if re.match(r"^(model name|Processor|cpu model)\s*:", line):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    if platform.system() == "Darwin":
        import subprocess

        try:
            return subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True, text=True,
                                  timeout=5).stdout.strip() or platform.processor()
        except (OSError, subprocess.SubprocessError):
            pass
    return platform.processor() or platform.machine()


def package_versions(names: Iterable[str] = PACKAGES) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def environment() -> dict[str, Any]:
    """Machine and software facts (no device: the runner adds its device fields)."""
    from harness import __version__

    versions = package_versions()
    return {"harness": __version__, "python": platform.python_version(), "cpu_model": cpu_model(),
            "cpu_count": os.cpu_count(), "os": platform.platform(),
            **{("hydra" if name == "hydra-core" else name.replace("-", "_")): v for name, v in versions.items()}}


# ---- results.json: one file per sweep --------------------------------------------------------------------

RESULTS_JSON = "results.json"
_ROW_KEYS = ("cell_id", "status", "method_name", "decoding", "tokens_per_s", "new_tokens", "wall_time_s",
             "records_count", "lossless", "primary_metric")


def cell_row(cell_dir: Path) -> dict:
    """One row of ``results.json``: the cell's id and status, its headline numbers and where its files are."""
    row: dict[str, Any] = {"cell_id": cell_dir.name, "cell_dir": str(cell_dir)}
    summary_path = cell_dir / "summary.json"
    if summary_path.is_file():
        try:
            summary = json.loads(summary_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {**row, "status": "corrupt"}
        row.update({k: summary[k] for k in _ROW_KEYS if k in summary})
        row["config"] = summary.get("config")
        row["env"] = summary.get("env")  # where the cell ran: host, device, versions, checkpoint revisions
        row.setdefault("status", "done")
    elif (cell_dir / "error.json").is_file():
        row["status"] = "failed"
    else:
        row["status"] = "pending"
    return row


def write_results_json(results_dir: str | Path, cell_ids: list[str], sweep: dict,
                       out_dir: str | Path | None = None) -> Path:
    """``<out_dir>/results.json`` (default: ``<results_dir>/results.json``, a sweep's own) for the cells of
    ``results_dir`` (written atomically; a later sweep into the same folder replaces it — every cell's own summary
    stays; ``harness-report`` writes its copy into the report folder): ``{"harness_version", "created_at",
    "sweep", "environment" (of the writing process), "cells": [row, ...]}``."""
    from harness import __version__

    cells_root = Path(results_dir)
    results = Path(out_dir) if out_dir is not None else cells_root
    rows = [cell_row(cells_root / "cells" / cid) for cid in dict.fromkeys(cell_ids)]
    doc = {"format": "harness-results/1", "harness_version": __version__,
           "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
           "sweep": sweep, "environment": environment(), "cells": rows}
    results.mkdir(parents=True, exist_ok=True)
    tmp = results / f".{RESULTS_JSON}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(doc, indent=1, default=str), encoding="utf-8")
    os.replace(tmp, results / RESULTS_JSON)
    return results / RESULTS_JSON
