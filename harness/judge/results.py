"""A cell's judgment files, read without the judge (the analysis reads them; no torch, no network).

``judgments.jsonl``: one line per record (its ``index``), the fields of :mod:`harness.judge.grade`.
``judge.json``: who judged, the state the judgments belong to (``records_sha256`` of the records graded),
counts, cache hits and the judge's time per answer. Judgments of other records than the cell's current
ones (a cell rerun with ``force=true``) are stale and ignored.
"""
from __future__ import annotations

import json
from pathlib import Path

JUDGMENTS = "judgments.jsonl"
JUDGE_SUMMARY = "judge.json"


def read_judge_summary(cell_dir: Path) -> dict | None:
    try:
        data = json.loads((Path(cell_dir) / JUDGE_SUMMARY).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def read_judgments(cell_dir: Path, records_sha256: str | None) -> dict[int, dict]:
    """The judgment fields by record index, or ``{}`` when the cell has none, or they were made for other
    records than those with checksum ``records_sha256``."""
    summary = read_judge_summary(cell_dir)
    if not summary or not records_sha256 or (summary.get("state") or {}).get("records_sha256") != records_sha256:
        return {}
    out: dict[int, dict] = {}
    try:
        text = (Path(cell_dir) / JUDGMENTS).read_text(encoding="utf-8")
    except OSError:
        return {}
    for line in text.splitlines():
        try:
            row = json.loads(line) if line.strip() else None
        except ValueError:
            return {}  # a torn file: none of it is trusted
        if isinstance(row, dict) and isinstance(row.get("index"), int):
            out[row["index"]] = {k: v for k, v in row.items() if k not in ("index", "example_id")}
    return out
