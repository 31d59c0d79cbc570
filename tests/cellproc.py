"""Helpers for the crash-safety tests: run one cell (or an interleaved comparison) in a child process."""
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CELL = {"method": {"name": "ar_sampling"}, "seed": 0, "max_new_tokens": 6,
        "pair": {"name": "tiny", "target": "tiny/target", "draft": "tiny/draft", "dtype": "float32", "device": "cpu"},
        "dataset": {"name": "kjv_heldout", "task": "text_continuation", "num_prompts": 4, "max_new_tokens": 48,
                    "stop": [], "prompt_words": 12},
        "gpu": {"name": "cpu"},
        "runner": {"warmup_generations": 1, "warmup_new_tokens": 2, "progress": False}}

CHILD = """
import json, sys, torch
torch.set_num_threads(1)
from harness.run.runner import run_cells
cfgs, results = json.loads(sys.argv[1]), sys.argv[2]
for o in run_cells(cfgs, results):
    print(json.dumps({"status": o.status, "cell_id": o.cell_id, "error": o.error}), flush=True)
"""


def env() -> dict:
    return dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), OMP_NUM_THREADS="1")


def start(cfgs: list[dict], results: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", CHILD, json.dumps(cfgs), str(results)], env=env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def outcomes(proc: subprocess.Popen, timeout: float = 300) -> list[dict]:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err[-3000:]
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def partial_lines(cell_dir: Path) -> int:
    """Complete records written so far (records.jsonl once the cell published them)."""
    for name in ("records.partial.jsonl", "records.jsonl"):
        try:
            return (cell_dir / name).read_bytes().count(b"\n")
        except FileNotFoundError:
            continue
    return 0


DETERMINISTIC_RECORD = ("index", "example_id", "output_text", "new_tokens", "accepted_tokens", "rounds",
                        "accept_lengths", "draft_positions", "rejected_rounds", "target_calls", "draft_calls",
                        "round_gammas", "output_ppl")
DETERMINISTIC_SUMMARY = ("prompts", "new_tokens", "acceptance_rate", "block_efficiency", "records_count",
                         "method_name", "params", "max_new_tokens", "rounds", "accepted_tokens", "target_calls",
                         "output_ppl", "cell_id")


def det(record: dict, keys=DETERMINISTIC_RECORD) -> dict:
    return {k: record.get(k) for k in keys}
