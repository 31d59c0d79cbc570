"""The judgment cache: one JSON file per judgment, keyed by (question and turn, hash of the answers graded,
judge, prompt version), so a cell is graded again — by the same judge, or after a rerun of the report —
without asking the judge, and a sweep's array tasks share it safely (each file is written whole, atomically;
two writers of one key write the same judgment).

Only the judge's answers are cached (an unreadable verdict too: it is the judge's answer, and reading it is
redone on every use); a judge that could not be reached is not, so a later run asks again. Entries hold
no credentials: the judge is named by backend, model and endpoint URL.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from harness.results import store

CACHE_DIRNAME = "judge_cache"


def judgment_key(judge: dict, prompt_version: str, question_id: Any, turn: int, messages: list[dict]) -> str:
    """The cache key: the question and turn, the hash of the filled prompt (it holds the answers graded and any
    reference answer), the judge's identity and the prompt's version."""
    answers_sha = hashlib.sha256(json.dumps(messages, sort_keys=True, ensure_ascii=False).encode()).hexdigest()
    parts = {"question_id": str(question_id), "turn": int(turn), "answers_sha256": answers_sha, "judge": judge,
             "prompt": prompt_version}
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


class JudgmentCache:
    def __init__(self, root: Path, read: bool = True):
        self.root = Path(root)
        self.read = read

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict | None:
        if not self.read:
            return None
        try:
            entry = json.loads(self._path(key).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None  # absent, or torn by a crash: asked again
        return entry if isinstance(entry, dict) and isinstance(entry.get("output"), str) else None

    def put(self, key: str, entry: dict) -> None:
        store.atomic_write_json(self._path(key), {"key": key, **entry})
