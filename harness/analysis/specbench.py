"""Spec-Bench answer files (github.com/hemingkx/Spec-Bench, ``evaluation/eval.py`` writes them and
``evaluation/speed.py`` reads them): one JSON line per question,

    {"question_id", "category", "answer_id", "model_id",
     "choices": [{"index", "turns", "decoding_steps", "new_tokens", "wall_time", "accept_lengths"}],
     "tstamp"}

with per-turn lists ``turns`` (text), ``decoding_steps``, ``new_tokens``, ``wall_time`` (s) and a
flat ``accept_lengths`` (tokens committed per step). One record is one single-turn answer. For
methods without drafting, as Spec-Bench's own baseline does, a step is one target call committing
one token (``decoding_steps`` = target calls, ``accept_lengths`` = [1] × new tokens). ``speed.py``
selects by ``category`` (Spec-Bench's task names; MT-Bench's eight categories count as
``mt_bench``); records without ``meta.category`` get their dataset's name.
"""
from __future__ import annotations

import json
import math
from datetime import datetime
from pathlib import Path

import pandas as pd

from harness.results import store


def _question_id(example_id, index):
    if example_id is None or (isinstance(example_id, float) and math.isnan(example_id)):
        return int(index)
    s = str(example_id)
    return int(s) if s.isdigit() else s


def _tstamp(cell: pd.Series) -> float:
    try:
        return datetime.fromisoformat(str(cell.get("finished_at"))).timestamp()
    except (TypeError, ValueError):
        return 0.0


def answer(rec: pd.Series, cell: pd.Series) -> dict:
    """One Spec-Bench answer line from one record."""
    new_tokens = int(rec["new_tokens"])
    rounds = int(rec.get("rounds") or 0) if pd.notna(rec.get("rounds")) else 0
    lengths = [int(x) for x in (rec.get("accept_lengths") if isinstance(rec.get("accept_lengths"), list) else [])]
    if rounds > 0 and lengths:
        steps = rounds
    else:
        steps = int(rec.get("target_calls") or new_tokens)
        lengths = [1] * new_tokens
    category = rec.get("meta.category")
    if not isinstance(category, str) or not category:
        category = str(cell.get("dataset"))
    text = rec.get("output_text")
    return {"question_id": _question_id(rec.get("example_id"), rec.get("index")), "category": category,
            "answer_id": f"{rec['cell_id']}/{int(rec['index'])}", "model_id": str(cell.get("method")),
            "choices": [{"index": 0, "turns": [text if isinstance(text, str) else ""], "decoding_steps": [steps],
                         "new_tokens": [new_tokens], "wall_time": [float(rec["wall_time_s"])],
                         "accept_lengths": lengths}],
            "tstamp": _tstamp(cell)}


def export(records: pd.DataFrame, cells: pd.DataFrame, out_dir: str | Path) -> list[Path]:
    """Write ``<out_dir>/<cell id>.jsonl`` for every cell (atomically); returns the paths."""
    out_dir = Path(out_dir)
    paths = []
    for _, cell in cells.iterrows():
        r = records[records["cell_id"] == cell["cell_id"]].sort_values("index")
        lines = [json.dumps(answer(rec, cell), ensure_ascii=False) for _, rec in r.iterrows()]
        path = out_dir / f"{cell['cell_id']}.jsonl"
        store.atomic_write_text(path, "\n".join(lines) + "\n")
        paths.append(path)
    return paths
