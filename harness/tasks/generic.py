"""Your own data without writing Python: a task over HF ``datasets`` (``dataset=custom``).

Rows come from ``datasets.load_dataset``: ``hf_dataset`` is a hub id (``org/name``, with ``hf_config``
and ``hf_split``), or local files — one file, a glob or a folder of ``.json``/``.jsonl``, ``.csv`` or
``.parquet`` files, relative to where you launch (``datasets``' packaged builders; local files are one
split, ``train``), so nothing needs the network. The keys are the other tasks' (:mod:`harness.tasks.templated`):
``columns`` renames columns (``{name in the template: column in the data}``); ``template`` is a
``str.format`` over the row (``user_template`` and ``system_prompt`` for chat templates, as the other
tasks); ``reference`` names the column with the answer(s) and ``metric`` scores against it with one of
the harness's metrics (:data:`METRICS`); ``category`` names a column that becomes ``meta.category``
(Spec-Bench style: the report's speed-ups per category); ``id_field`` a row id. ``num_prompts``,
``sample_seed``, ``max_new_tokens``, ``stop`` and ``prompt_format`` work as for every task.

The chosen metric is the cell's primary quality metric (``primary_metric``; ``none``: the target's
perplexity of the output, which every record has).
"""
from __future__ import annotations

import glob
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from harness.errors import ConfigError
from harness.tasks.base import Example, register_task
from harness.tasks.templated import TemplateTask

SUFFIX_BUILDERS = {".json": "json", ".jsonl": "json", ".csv": "csv", ".parquet": "parquet"}


def _golds(reference: Any) -> list[str]:
    if reference is None:
        return []
    if isinstance(reference, dict) and "text" in reference:  # SQuAD-style {"text": [...], ...}
        reference = reference["text"]
    return [str(r) for r in reference] if isinstance(reference, (list, tuple)) else [str(reference)]


def _exact_match(output: str, reference: Any) -> dict[str, float]:
    from harness.metrics.squad import exact_match

    return {"exact_match": exact_match(output.strip(), _golds(reference))}


def _f1(output: str, reference: Any) -> dict[str, float]:
    from harness.metrics.squad import f1

    return {"f1": f1(output.strip(), _golds(reference))}


def _rouge(output: str, reference: Any) -> dict[str, float]:
    from harness.metrics.rouge import rouge

    return rouge(output, _golds(reference)[0] if _golds(reference) else "")


def _accuracy(output: str, reference: Any) -> dict[str, float]:
    from harness.metrics.math_answer import answer_correct

    golds = _golds(reference)
    return {"accuracy": max((answer_correct(output, g) for g in golds), default=0.0)}


def _contains(output: str, reference: Any) -> dict[str, float]:
    from harness.metrics.squad import normalize_answer

    text = normalize_answer(output)
    return {"contains": float(any(normalize_answer(g) and normalize_answer(g) in text for g in _golds(reference)))}


#: metric name -> (scorer(output, reference) -> {metric: value}, primary metric key, higher is better)
METRICS: dict[str, tuple[Callable[[str, Any], dict[str, float]] | None, str | None, bool]] = {
    "none": (None, None, False),
    "exact_match": (_exact_match, "exact_match", True),  # SQuAD normalisation
    "f1": (_f1, "f1", True),  # SQuAD token F1
    "rouge": (_rouge, "rougeL", True),  # rouge1/rouge2/rougeL/rougeLsum F-measures (rouge-score)
    "accuracy": (_accuracy, "accuracy", True),  # the final number equals the reference's (GSM8K style)
    "contains": (_contains, "contains", True),  # a normalised reference occurs in the output
}


def local_files(source: str) -> list[str] | None:
    """The data files a local ``source`` names (file, glob, or folder), or None when it is no local path."""
    path = Path(source).expanduser()
    if path.is_dir():
        return sorted(str(p) for p in path.iterdir() if p.suffix in SUFFIX_BUILDERS)
    if path.is_file():
        return [str(path)]
    if any(c in source for c in "*?["):
        return sorted(glob.glob(str(path)))
    if source.startswith(("/", "./", "../", "~")) or Path(source).suffix in SUFFIX_BUILDERS:
        raise ConfigError(f"dataset.hf_dataset: file not found: {source}")
    return None


@register_task
@dataclass
class GenericTask(TemplateTask):
    kind = "generic"
    hf_split: str = "train"
    template: str = "{prompt}"
    user_template: str | None = None  # type: ignore[assignment]  # null = the template
    reference: str | None = None
    category: str | None = None
    id_field: str | None = None
    metric: str = "none"

    def __post_init__(self):
        super().__post_init__()
        if self.path:
            raise ConfigError("dataset.path is not read by task 'generic': set dataset.hf_dataset to your file(s) "
                              "(json, jsonl, csv, parquet; a glob or a folder) or a hub dataset id")
        if not self.hf_dataset or not isinstance(self.hf_dataset, str):
            raise ConfigError("dataset.hf_dataset must name a hub dataset id or local json/jsonl/csv/parquet file(s), "
                              f"got {self.hf_dataset!r}")
        if self.metric not in METRICS:
            raise ConfigError(f"unknown dataset.metric '{self.metric}'. Valid: {', '.join(METRICS)}")
        if self.metric != "none" and not self.reference:
            raise ConfigError(f"dataset.metric '{self.metric}' needs dataset.reference (the column with the answer)")
        if self.user_template is None:
            self.user_template = self.template

    @property
    def primary_metric(self) -> str | None:
        return METRICS[self.metric][1]

    def required_modules(self) -> tuple[str, ...]:
        """``datasets`` reads every source; ROUGE needs ``rouge_score``."""
        return ("datasets", *(("rouge_score",) if self.metric == "rouge" else ()))

    @property
    def higher_is_better(self) -> bool:
        return METRICS[self.metric][2]

    def rows(self) -> list[dict]:
        try:
            import datasets
        except ImportError as e:
            raise ConfigError("task 'generic' needs the 'datasets' package: "
                              "pip install 'decoding-harness[tasks]'") from e
        files = local_files(self.hf_dataset)
        if files is not None:
            builders = {SUFFIX_BUILDERS.get(Path(f).suffix) for f in files}
            if not files or None in builders or len(builders) > 1:
                raise ConfigError(f"dataset.hf_dataset: {self.hf_dataset} holds no data files of one kind "
                                  f"({', '.join(SUFFIX_BUILDERS)}); found {files[:5]}")
            data = datasets.load_dataset(builders.pop(), data_files=files, split=self.hf_split)
        else:
            data = datasets.load_dataset(self.hf_dataset, self.hf_config, split=self.hf_split)
        rows = [dict(r) for r in data]
        columns = set(rows[0]) if rows else set()
        needed = {*self.columns.values(), *(c for c in (self.reference, self.category, self.id_field) if c)}
        missing = sorted(needed - columns)
        if missing:
            raise ConfigError(f"dataset '{self.name}': column(s) {missing} not in {self.hf_dataset}. "
                              f"Valid columns: {', '.join(sorted(columns))}")
        return [{**row, **{ours: row[src] for ours, src in self.columns.items()}} for row in rows]

    def example(self, row: dict, index: int) -> Example:
        meta = {"category": str(row[self.category])} if self.category else {}
        ref = row[self.reference] if self.reference else None
        return self.make_example(row[self.id_field] if self.id_field else index, row, reference=ref, meta=meta)

    def score(self, example: Example, output: str) -> dict[str, float]:
        scorer = METRICS[self.metric][0]
        return scorer(output, example.reference) if scorer is not None else {}
