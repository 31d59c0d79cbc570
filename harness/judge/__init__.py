"""LLM-as-judge quality for open-ended answers: MT-Bench single-answer grading and pairwise grading against a
reference method (Zheng et al. 2023, arXiv 2306.05685), with FastChat's published judge prompts and verdict
formats (``[[rating]]``, ``[[A]]``/``[[B]]``/``[[C]]``).

Data flow: a finished cell's records → judgment jobs (:mod:`~harness.judge.grade`, prompts from
:mod:`~harness.judge.prompts`) → the cache (:mod:`~harness.judge.cache`) or the judge (an OpenAI-compatible
endpoint or a local HF model: :mod:`~harness.judge.client`, :mod:`~harness.judge.local`) → verdicts
(:mod:`~harness.judge.verdict`) → ``judgments.jsonl`` beside the records (:mod:`~harness.judge.cells`), which
the analysis joins to the records (:mod:`~harness.judge.results`). Configuration: :mod:`~harness.judge.config`
(the ``judge`` config group). Importing this package loads neither torch nor a model.
"""
from harness.judge.config import JudgeConfig, judge_problems


def judge_cells(cells) -> None:
    """Grade finished cells (``[(config, cell folder), ...]``) with the judge their configs name (see
    :func:`harness.judge.cells.judge_cells`)."""
    from harness.judge.cells import judge_cells as run

    run(cells)


__all__ = ["JudgeConfig", "judge_cells", "judge_problems"]
