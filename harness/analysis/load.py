"""Result folders → tables. The only module of the package that reads files.

``read_results`` returns the cells and records of every finished cell and, in ``problems``, one
row for every cell it could not use: failed (``error.json``), incomplete (killed or still running:
only ``records.partial.jsonl``), or unreadable (a torn or hand-edited file, a summary without a
method...). One bad cell never stops the others from being read.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from harness.results import store
from harness.analysis.labels import short_labels
from harness.analysis.tables import cell_params, cell_row, normalize_record, numeric
from harness.judge.results import read_judgments

PROBLEM_COLUMNS = ["cell_id", "problem", "kind", "error", "at"]
#: records that no figure may use: draft selection's fit phase (adaptive §6.1: the online models are fitted on
#: the first prompts, every draft runs them, and the paper evaluates the remaining prompts)
EXCLUDED_PHASES = ("fit",)


@dataclass
class Results:
    cells: pd.DataFrame
    records: pd.DataFrame  # the measured records: every figure and table reads these
    problems: pd.DataFrame
    excluded: pd.DataFrame | None = None  # records left out of every figure (selection.phase == "fit")

    def excluded_counts(self) -> pd.DataFrame:
        """Per cell: how many records were excluded and why (``cell_id, label, records, reason``)."""
        ex = self.excluded
        if ex is None or ex.empty:
            return pd.DataFrame(columns=["cell_id", "label", "records", "reason"])
        g = ex.groupby("cell_id", sort=False).size().rename("records").reset_index()
        labels = ex.drop_duplicates("cell_id").set_index("cell_id").get("label")
        g["label"] = g["cell_id"].map(labels) if labels is not None else g["cell_id"]
        g["reason"] = "draft selection's fit phase (selection.phase = fit)"
        return g[["cell_id", "label", "records", "reason"]]


def split_excluded(records: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(measured records, excluded records): records in :data:`EXCLUDED_PHASES` leave every figure."""
    if "selection.phase" not in records:
        return records, records.iloc[0:0]
    fit = records["selection.phase"].astype(str).isin(EXCLUDED_PHASES)
    return records[~fit].reset_index(drop=True), records[fit].reset_index(drop=True)


def _json_error(path: Path, e: Exception) -> ValueError:
    """The error of an unreadable result file, naming the file as ``<cell id>/<file>`` (and the line of a
    JSONL file)."""
    where = f"{path.parent.name}/{path.name}"
    if isinstance(e, json.JSONDecodeError) and path.suffix == ".jsonl":
        try:
            for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
                if line.strip():
                    try:
                        json.loads(line)
                    except json.JSONDecodeError:
                        where = f"{where}, line {n}"
                        break
        except OSError:
            pass
    return ValueError(f"{where}: {type(e).__name__}: {e}")


def read_cell(cell_dir: Path) -> tuple[dict, list[dict]]:
    """(cell row, normalised records) of one finished cell; raises on anything malformed, naming the file."""
    try:
        summary = json.loads((cell_dir / store.SUMMARY).read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise _json_error(cell_dir / store.SUMMARY, e) from e
    if not isinstance(summary, dict):
        raise ValueError(f"{cell_dir.name}/{store.SUMMARY} is not a JSON object")
    row = cell_row(summary)
    row.setdefault("cell_id", cell_dir.name)
    try:
        raw = store.read_records(cell_dir)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise _json_error(cell_dir / store.RECORDS, e) from e
    state, detail = store.finished_state(cell_dir)  # the record count and checksum stored in the summary
    if state != "done":
        raise ValueError(f"{detail} (rerun `harness` with the same overrides to repair the cell)")
    if not raw:
        raise ValueError("records.jsonl has no records")
    params = cell_params(summary)
    judged = read_judgments(cell_dir, summary.get("records_sha256"))  # LLM-judge grades (harness.judge), by index
    records = [normalize_record({**r, **judged.get(r.get("index"), {})}, row, params) for r in raw]
    starts = sorted(int(s.get("from_index") or 0) for s in summary.get("segments") or [] if isinstance(s, dict))
    for r in records:  # which run wrote it: a killed and resumed cell has several (harness.analysis.trust)
        r["segment"] = max(sum(1 for s in starts if s <= int(r.get("index") or 0)) - 1, 0)
    if "prompts" in row and row["prompts"] is not None and int(row["prompts"]) != len(records):
        raise ValueError(f"summary says {row['prompts']} prompts but records.jsonl has {len(records)}")
    return row, records


def read_results(results_dir: str | Path = "results") -> Results:
    cells, records, problems = [], [], []
    for cell_dir in sorted((Path(results_dir) / "cells").glob("*")):
        if not cell_dir.is_dir():
            continue
        name = cell_dir.name
        if store.is_finished(cell_dir):
            try:
                row, recs = read_cell(cell_dir)
            except Exception as e:  # noqa: BLE001 — any malformed cell is reported, never fatal
                text = str(e) if name in str(e) else f"{name}: {type(e).__name__}: {e}"
                problems.append({"cell_id": name, "problem": "unreadable", "kind": type(e).__name__,
                                 "error": text[:500], "at": None})
                continue
            cells.append(row)
            records.extend(recs)
        elif (cell_dir / store.ERROR).is_file():
            try:
                err = json.loads((cell_dir / store.ERROR).read_text(encoding="utf-8"))
                problems.append({"cell_id": err.get("cell_id", name), "problem": "failed",
                                 "kind": err.get("kind"), "error": err.get("error"), "at": err.get("at")})
            except (OSError, ValueError, AttributeError) as e:  # unreadable, not JSON, or not an object
                problems.append({"cell_id": name, "problem": "failed", "kind": "unreadable error.json",
                                 "error": str(e)[:500], "at": None})
        elif (cell_dir / store.PARTIAL).is_file():
            problems.append({"cell_id": name, "problem": "incomplete", "kind": "killed or running",
                             "error": "only records.partial.jsonl: the cell never finished (rerun `harness`)",
                             "at": None})
    cells_df, records_df = numeric(pd.DataFrame(cells)), numeric(pd.DataFrame(records))
    if not cells_df.empty:
        cells_df["label"] = short_labels(cells_df)
        records_df = records_df.merge(cells_df[["cell_id", "label", "regime"]], on="cell_id", how="left")
    records_df, excluded = split_excluded(records_df)
    return Results(cells_df, records_df, pd.DataFrame(problems, columns=PROBLEM_COLUMNS), excluded)
