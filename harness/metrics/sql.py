"""Spider execution accuracy (Yu et al. 2018) by result comparison, as in the test-suite evaluation
of Zhong et al. (2020) on one database: the predicted and gold results must have the same rows as
multisets — as sequences when the gold query has ORDER BY — up to a permutation of columns."""
from __future__ import annotations

import itertools
import re
from collections import Counter
from pathlib import Path

from harness.sandbox.sql import QueryError, readonly_query

_ORDER_BY = re.compile(r"\border\s+by\b", re.IGNORECASE)


def _column_permutations(gold: list[tuple], pred: list[tuple]):
    """Orders of the predicted columns whose value multisets match the gold columns, one by one."""
    width = len(gold[0])
    gold_cols = [Counter(row[j] for row in gold) for j in range(width)]
    pred_cols = [Counter(row[k] for row in pred) for k in range(width)]
    candidates = [[k for k in range(width) if pred_cols[k] == gold_cols[j]] for j in range(width)]
    for perm in itertools.product(*candidates):
        if len(set(perm)) == width:
            yield perm


def results_match(gold: list[tuple], pred: list[tuple], ordered: bool) -> bool:
    if not gold or not pred:
        return not gold and not pred
    if len(gold) != len(pred) or len(gold[0]) != len(pred[0]):
        return False
    for perm in _column_permutations(gold, pred):
        permuted = [tuple(row[k] for k in perm) for row in pred]
        if (permuted == gold) if ordered else (Counter(permuted) == Counter(gold)):
            return True
    return False


def execution_outcome(db_path: str | Path, gold_sql: str, pred_sql: str,
                      timeout_s: float = 5.0) -> tuple[float, QueryError | None]:
    """(1.0 when the predicted query's result matches the gold one's on the database, else 0.0; why
    the predicted query gave no result). A query that fails, is denied, or is killed for its time
    or memory (:class:`~harness.sandbox.sql.QueryKilled`) is a wrong answer; a gold query that
    fails raises."""
    gold = readonly_query(db_path, gold_sql, timeout_s=timeout_s)
    try:
        pred = readonly_query(db_path, pred_sql, timeout_s=timeout_s)
    except QueryError as e:
        return 0.0, e
    return float(results_match(gold, pred, ordered=bool(_ORDER_BY.search(gold_sql)))), None


def execution_match(db_path: str | Path, gold_sql: str, pred_sql: str, timeout_s: float = 5.0) -> float:
    """1.0 when the predicted query's result matches the gold one's on the database, else 0.0
    (including a predicted query that fails, is denied, times out or is killed)."""
    return execution_outcome(db_path, gold_sql, pred_sql, timeout_s)[0]
