"""Draft-free methods (issue 25 items 1 and 4): tokens/s of ``pld`` ÷ HF's prompt lookup at the same settings, and of
``pld`` / ``lookahead`` ÷ AR greedy, with mean accepted length, on a summarisation and a code-editing prompt set.

Greedy decoding on the embedded tiny pair (CPU). Every arm decodes prompt 1, then every arm prompt 2, …, the
arms' order rotating from prompt to prompt (load from other processes hits every arm alike); each ratio is the
geometric mean of the per-prompt tokens/s ratios with a 95 % percentile bootstrap CI over prompts
(:mod:`harness.analysis.stats`). MAT (mean accepted length) = committed tokens ÷ target forwards. Outputs are
checked token-identical to AR's on every prompt (the methods are lossless).

Prompt sets: ``cnndm`` (the shipped CNN/DM articles, ``Article: … TL;DR:``, cut to ``--doc-words`` words for
the tiny model's 1,024 positions) and ``code_edit`` (``tasks/code_edit``: HumanEval functions with an edit
instruction, the code in the prompt).

    nice python scripts/study_draft_free.py [--sets cnndm,code_edit] [--prompts 20] [--max-new-tokens 96]
        [--arms pld,hf_pld,ar,lookahead,lookahead_cpu] [--num-tokens 10] [--ngram 2] [--out FILE]

Arms: ``pld`` and ``hf_pld`` (HF's prompt lookup through ``hf_assisted``) at ``--num-tokens``/``--ngram``, ``ar``
(AR greedy), ``lookahead`` (the paper's W = 15, N = 5, G = 15), ``lookahead_cpu`` (W = 5, N = 3, G = 5) and ``sd``
(γ = 4 with the tiny draft, a drafted method beside the draft-free ones).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from harness.analysis.stats import estimate, geometric_mean  # noqa: E402
from harness.methods import build_decoder  # noqa: E402
from harness.resources import data_dir  # noqa: E402


def arms(args) -> dict[str, tuple[str, dict]]:
    lookup = {"prompt_lookup_num_tokens": args.num_tokens, "max_matching_ngram_size": args.ngram}
    known = {"pld": ("pld", lookup), "hf_pld": ("hf_assisted", lookup), "ar": ("ar_greedy", {}),
             "lookahead": ("lookahead", {}),  # the paper's W = 15, N = 5, G = 15
             "lookahead_cpu": ("lookahead", {"window": 5, "ngram": 3, "guess": 5}),
             "sd": ("sd", {"gamma": 4})}  # the tiny draft, for MAT and speed beside a drafted method
    return {name: known[name] for name in args.arms.split(",")}


def prompt_set(name: str, pair, n: int, doc_words: int) -> list[list[int]]:
    if name == "code_edit":
        rows = [json.loads(line) for line in (data_dir() / "code_edit" / "prompts.jsonl").read_text().splitlines()]
        return [pair.tokenizer(r["prompt"])["input_ids"] for r in rows[:n]]
    import yaml

    from harness.resources import conf_dir
    from harness.tasks import load_task

    conf = yaml.safe_load((conf_dir() / "dataset" / f"{name}.yaml").read_text())
    task = load_task({**conf, "num_prompts": n, "max_document_words": doc_words})
    return [task.prompt_ids(ex, pair.tokenizer) for ex in task.examples()]


def run_set(decoders: dict, prompts: list[list[int]], max_new: int) -> dict[str, dict[str, list[float]]]:
    """Interleaved, order rotating: per arm, per prompt tokens, seconds, target forwards; outputs checked."""
    names = list(decoders)
    rows = {k: {"tokens": [], "seconds": [], "forwards": []} for k in names}
    for i, ids in enumerate(prompts):
        shift = i % len(names)
        outputs = {}
        for key in names[shift:] + names[:shift]:
            gen = decoders[key].generate(ids, max_new)
            outputs[key] = gen.output_ids
            rows[key]["tokens"].append(gen.stats.new_tokens)
            rows[key]["seconds"].append(gen.stats.wall_time_s)
            rows[key]["forwards"].append(gen.stats.target_calls)
        if len({tuple(o) for o in outputs.values()}) != 1:
            raise AssertionError(f"prompt {i}: outputs differ between arms {sorted(outputs)}")
    return rows


def ratio(rows, a: str, b: str) -> tuple[float, float, float]:
    ra, rb = rows[a], rows[b]
    per_prompt = (np.array(ra["tokens"]) / np.array(ra["seconds"])) / (np.array(rb["tokens"]) / np.array(rb["seconds"]))
    return estimate((per_prompt,), geometric_mean)


def summarise(rows: dict) -> dict:
    out = {"arms": {}}
    for k, r in rows.items():
        out["arms"][k] = {"tok_s": sum(r["tokens"]) / sum(r["seconds"]), "mat": sum(r["tokens"]) / sum(r["forwards"])}
    pairs = [(a, b) for a, b in (("pld", "hf_pld"), ("pld", "ar"), ("hf_pld", "ar"), ("lookahead", "ar"),
                                 ("lookahead_cpu", "ar"), ("sd", "ar")) if a in rows and b in rows]
    out["ratios"] = {f"{a}/{b}": ratio(rows, a, b) for a, b in pairs}
    return out


def render(report: dict) -> str:
    lines = [f"tiny pair, greedy, {report['max_new_tokens']} new tokens, threads {report['threads']}, "
             f"transformers {report['transformers']}, lookup {report['num_tokens']}/{report['ngram']}"]
    for name, res in report["sets"].items():
        lines += ["", f"{name}: {res['prompts']} prompts, {res['elapsed_s']:.0f} s",
                  "| arm | tokens/s | MAT |", "|---|---|---|"]
        lines += [f"| {k} | {v['tok_s']:.1f} | {v['mat']:.2f} |" for k, v in res["arms"].items()]
        lines += ["| ratio (geo. mean of per-prompt tokens/s) | point | 95% CI |", "|---|---|---|"]
        lines += [f"| {k} | {p:.3f} | [{lo:.3f}, {hi:.3f}] |" for k, (p, lo, hi) in res["ratios"].items()]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", default="cnndm,code_edit")
    parser.add_argument("--arms", default="pld,hf_pld,ar")
    parser.add_argument("--prompts", type=int, default=20)
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--num-tokens", type=int, default=10, help="prompt_lookup_num_tokens (HF's example: 10)")
    parser.add_argument("--ngram", type=int, default=2, help="max_matching_ngram_size (HF default 2)")
    parser.add_argument("--doc-words", type=int, default=300)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    import transformers

    from harness.models import load_pair

    pair = load_pair("tiny/target", "tiny/draft", device="cpu")
    decoders = {k: build_decoder(m, pair, decoding="greedy", **p) for k, (m, p) in arms(args).items()}
    report = {"max_new_tokens": args.max_new_tokens, "threads": args.threads, "num_tokens": args.num_tokens,
              "ngram": args.ngram, "transformers": transformers.__version__, "sets": {}}
    for name in args.sets.split(","):
        prompts = prompt_set(name, pair, args.prompts, args.doc_words)
        for dec in decoders.values():  # warm-up, untimed
            dec.generate(prompts[0], 8)
        start = time.perf_counter()
        rows = run_set(decoders, prompts, args.max_new_tokens)
        report["sets"][name] = {"prompts": len(prompts), "elapsed_s": time.perf_counter() - start, **summarise(rows)}
    if args.out:  # the JSON first: a long run's numbers survive a broken terminal
        Path(args.out).write_text(json.dumps(report, indent=2))
    print(render(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
