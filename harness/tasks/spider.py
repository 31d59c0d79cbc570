"""Spider text-to-SQL, dev split (Yu et al. 2018); the dsbd and mtad papers report execution accuracy.

Data: ``path`` is a folder with ``dev.json``, ``tables.json`` and ``database/<db>/<db>.sqlite`` — the
shipped copy (``tasks/spider``: the 1,034 dev questions, 19 of the 20 dev databases) or a full
Spider release folder. Questions whose database is missing (``wta_1`` in the shipped copy) stay in
the prompt set but score NaN, with ``meta["unscorable"]`` saying why.

Prompt: the schema and question in the OpenAI Codex SQL format (Rajkumar et al. 2022, "Evaluating
the Text-to-SQL Capabilities of Large Language Models"), primed with ``SELECT`` — in the plain
prompt and as the start of the assistant reply under a chat template — so the output continues
the query. Metric: ``execution_accuracy`` (see :mod:`harness.metrics.sql`): each query runs
read-only in a worker process with an allowlist of SQL functions, a memory limit and a hard
wall-clock kill (:func:`harness.sandbox.readonly_query`); every record says so (``meta.isolation`` =
"sqlite-readonly-process"). ``flag_query_killed`` is 1 when the predicted query had to be killed
(past ``timeout_s``, or out of memory): a wrong answer, its reason logged. The output ends at the
``;`` that completes its first statement (``sqlite3.complete_statement``): a ``;`` inside a string
literal, quoted name or comment does not cut it. Spider has no ``min_isolation``: SQL never runs
as a program.
"""
from __future__ import annotations

import json
import logging
import math
import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from harness.errors import ConfigError
from harness.metrics.sql import execution_outcome
from harness.sandbox.sql import SQL_ISOLATION, QueryKilled, first_statement
from harness.sandbox.api import MAX_TIMEOUT_S
from harness.tasks.base import Example, check_limit, register_task
from harness.tasks.templated import TemplateTask

_CODE_FENCE = re.compile(r"```(?:sql|sqlite)?", re.IGNORECASE)
_LOG = logging.getLogger(__name__)


def schema_lines(table: dict) -> list[str]:
    """``table(column, ...)`` per table, with the original (executable) names."""
    columns: dict[int, list[str]] = {i: [] for i in range(len(table["table_names_original"]))}
    for t, name in table["column_names_original"]:
        if t >= 0:
            columns[t].append(name)
    return [f"{name}({', '.join(columns[i])})" for i, name in enumerate(table["table_names_original"])]


def extract_sql(output: str) -> str:
    """The query in an output that continues ``SELECT`` (or restates it): code fences dropped, cut at
    the end of its first complete statement, ``SELECT`` put back in front when the output does not
    start with one."""
    sql = first_statement(_CODE_FENCE.sub("", output)).strip()
    return sql if re.match(r"(select|with)\b", sql, re.IGNORECASE) else f"SELECT {sql}"


@register_task
@dataclass
class Spider(TemplateTask):
    kind = "spider"
    primary_metric = "execution_accuracy"  # dsbd §4.1, mtad Table 6: EA
    path: str = "spider"
    split_file: str = "dev.json"
    timeout_s: float = 5.0
    template: str = ("### SQLite SQL tables, with their properties:\n#\n{schema_comment}\n#\n"
                     "### A query to answer: {question}\nSELECT")
    user_template: str = ("Write one SQLite query that answers the question. Reply with the SQL only.\n\n"
                          "Tables:\n{schema}\n\nQuestion: {question}")
    response_prefix: str = "SELECT"

    def __post_init__(self):
        super().__post_init__()
        check_limit(self.timeout_s, "dataset.timeout_s", 0, MAX_TIMEOUT_S, low_open=True)
        if self.hf_dataset:
            raise ConfigError("task 'spider' scores on the Spider databases: set path to a Spider folder "
                              "(dev.json, tables.json, database/) instead of hf_dataset")

    @property
    def root(self) -> Path:
        return self.resolve(self.path)

    def database(self, db_id: str) -> Path:
        return self.root / "database" / db_id / f"{db_id}.sqlite"

    @cached_property
    def schemas(self) -> dict[str, list[str]]:
        tables = self.root / "tables.json"
        if not tables.exists():
            raise ConfigError(f"Spider schemas not found: {tables} "
                              "(path must be a folder with dev.json, tables.json, database/)")
        return {t["db_id"]: schema_lines(t) for t in json.loads(tables.read_text(encoding="utf-8"))}

    def rows(self) -> list[dict]:
        return self.read(self.root / self.split_file)

    def example(self, row: dict, index: int) -> Example:
        db_id = row["db_id"]
        schema = self.schemas[db_id]
        fields = {"question": row["question"], "schema": "\n".join(schema),
                  "schema_comment": "\n".join(f"# {line}" for line in schema)}
        meta = {"db_id": db_id, "isolation": SQL_ISOLATION}
        if not self.database(db_id).exists():
            meta["unscorable"] = f"database {db_id} is not available under {self.root / 'database'}"
        return self.make_example(f"{db_id}/{index}", fields, reference=row["query"], meta=meta)

    def truncate(self, text: str) -> str:
        """As every task's, but ``;`` ends the output only where it completes a statement."""
        cut = len(text)
        for s in self.stop:
            i = text.find(s) if s != ";" else -1
            if i >= 0:
                cut = min(cut, i)
        return first_statement(text[:cut]) if ";" in self.stop else text[:cut]

    def score(self, example: Example, output: str) -> dict[str, float]:
        if "unscorable" in example.meta:
            return {"execution_accuracy": math.nan, "flag_query_killed": math.nan}
        db = self.database(example.meta["db_id"])
        accuracy, error = execution_outcome(db, example.reference, extract_sql(output), self.timeout_s)
        if isinstance(error, QueryKilled):
            _LOG.warning("spider %s: the predicted query was %s (scored as wrong)", example.id, error)
        return {"execution_accuracy": accuracy, "flag_query_killed": float(isinstance(error, QueryKilled))}
