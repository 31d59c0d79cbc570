"""Shared machinery for tasks built from data rows and prompt templates.

Rows come from a file shipped under ``tasks/`` (``path``: a ``.json`` list, ``.jsonl`` or ``.csv``)
or, for full splits, from HF ``datasets`` (``hf_dataset``: a hub id or a local dataset folder,
with ``hf_config`` and ``hf_split``); ``columns`` renames source columns to the names the task
reads (``{task_name: source_name}``).

Prompts: ``template`` (``str.format`` placeholders for the task's fields and ``{system_prompt}``;
double literal braces) gives the plain prompt. For tokenizers with a chat template,
``system_prompt`` becomes the system message (none when empty), ``user_template`` the user
message, and ``response_prefix`` the start of the assistant's reply, so that both formats leave
the model at the same point (for example right after ``SELECT`` for Spider).
"""
from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import ConfigError
from harness.tasks.base import Example, Task


def read_rows(path: Path) -> list[dict]:
    """Rows of a ``.json`` (list of objects), ``.jsonl`` or ``.csv`` file."""
    if not path.exists():
        raise ConfigError(f"task data file not found: {path}")
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if path.suffix == ".json":
        return json.loads(path.read_text(encoding="utf-8"))
    if path.suffix == ".csv":
        with path.open(encoding="utf-8", newline="") as f:
            return list(csv.DictReader(f))
    raise ConfigError(f"unsupported task data file '{path}'. Valid suffixes: .json, .jsonl, .csv")


def hf_rows(dataset: str, config: str | None, split: str) -> list[dict]:
    """All rows of one split through HF ``datasets`` (hub id, or a local dataset folder)."""
    try:
        import datasets
    except ImportError as e:
        raise ConfigError("hf_dataset needs the 'datasets' package (pip install datasets)") from e
    why = hub_dataset_unreachable(dataset)
    if why:
        raise ConfigError(f"dataset.hf_dataset: '{dataset}' is a hub dataset, not in the local hub cache, and the hub "
                          f"cannot be reached ({why}). Download it where there is network (`hf download --repo-type "
                          f"dataset {dataset}`, same HF_HOME), or set dataset.hf_dataset to a local copy",
                          key="dataset.hf_dataset")
    return [dict(row) for row in datasets.load_dataset(dataset, config, split=split)]


def hub_dataset_unreachable(dataset: str) -> str | None:
    """Why hub dataset ``dataset`` cannot be read here (the hub unreachable, probed once in seconds:
    :func:`harness.models.hub_unreachable`), where ``datasets`` would retry for half a minute; None for a local
    path, a dataset in the local hub cache, or a reachable hub."""
    if Path(dataset).expanduser().exists():
        return None
    from huggingface_hub import try_to_load_from_cache

    from harness.models import hub_unreachable

    try:
        cached = isinstance(try_to_load_from_cache(dataset, "README.md", repo_type="dataset"), str)
    except Exception:  # noqa: BLE001 — a malformed id: not cached; the hub client names it
        cached = False
    return None if cached else hub_unreachable()


@dataclass
class TemplateTask(Task):
    path: str = ""
    hf_dataset: str | None = None
    hf_config: str | None = None
    hf_split: str = "test"
    columns: dict[str, str] = field(default_factory=dict)
    template: str = ""
    user_template: str = ""
    system_prompt: str = ""
    response_prefix: str = ""

    def required_modules(self) -> tuple[str, ...]:
        """The task's own, and ``datasets`` where the rows come from ``hf_dataset``."""
        return (*super().required_modules(), *(("datasets",) if self.hf_dataset else ()))

    def rows(self) -> list[dict]:
        if self.hf_dataset:
            rows = hf_rows(self.hf_dataset, self.hf_config, self.hf_split)
        else:
            rows = self.read(self.resolve(self.path))
        if not self.columns:
            return rows
        missing = sorted({src for src in self.columns.values()} - set(rows[0])) if rows else []
        if missing:
            raise ConfigError(f"task '{self.name}': columns {missing} not in the data. "
                              f"Valid columns: {', '.join(sorted(rows[0]))}")
        return [{**row, **{ours: row[src] for ours, src in self.columns.items()}} for row in rows]

    def read(self, path: Path) -> list[dict]:
        return read_rows(path)

    def example(self, row: dict, index: int) -> Example:
        """One row → one example; subclasses call :meth:`make_example`."""
        raise NotImplementedError

    def load(self) -> list[Example]:
        return [self.example(row, i) for i, row in enumerate(self.rows())]

    def make_example(self, id: str | int, fields: dict[str, Any], reference: Any = None,
                     meta: dict | None = None) -> Example:
        fields = {**fields, "system_prompt": self.system_prompt}
        try:
            prompt = self.template.format(**fields)
            user = self.user_template.format(**fields)
            prefix = self.response_prefix.format(**fields)
        except KeyError as e:
            raise ConfigError(f"task '{self.name}': unknown placeholder {e} in a prompt template. "
                              f"Valid placeholders: {', '.join(sorted(fields))}") from e
        messages = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        messages.append({"role": "user", "content": user})
        return Example(id=str(id), prompt=prompt, reference=reference, meta=meta or {}, messages=messages,
                       response_prefix=prefix)
