"""Paired, interleaved CPU benchmark of two checkouts of this package (issue 28: "on CPU no regression").

    python scripts/bench_paired.py OLD_TREE NEW_TREE --pair toy|tiny --cases mcsd_dynamic:sampling,mcsd:greedy
        [--prompts 24] [--tokens 32]

A case may name method parameters after a second colon, ``+``-separated:
``bild:sampling:fallback_threshold=0.3+gamma=4``.

OLD_TREE is e.g. ``git archive <commit> | tar -x -C /tmp/old``. One persistent worker process per tree (1 torch
thread each, its own PYTHONPATH), each warmed up on two generations per case. The driver then runs the same prompt
and seed on both, one generation at a time, alternating which goes first. Each worker times its generation with
``time.process_time`` (CPU time of that process, robust to other load on a shared machine). Printed per case:
new/old ratio of total time with a 95 % percentile bootstrap CI over prompts, and how many outputs were identical.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

import numpy as np


def _prompts(pair_name: str, n: int):
    if pair_name == "toy":
        import random

        from harness.testing import near_pair

        rng = random.Random(0)
        return near_pair(vocab_size=16), [[rng.randrange(1, 16) for _ in range(8 + i % 5)] for i in range(n)]
    from harness.models import load_pair
    from harness.tasks import load_task

    pair = load_pair("tiny/target", "tiny/draft", device="cpu", progress=False)
    task = load_task({"task": "text_continuation", "name": "kjv_heldout", "num_prompts": n, "prompt_words": 10})
    return pair, [pair.tokenizer(ex.prompt)["input_ids"] for ex in task.examples()]


def _params(text: str) -> dict:
    """``k=v+k=v`` (``-``: none) -> {k: v}, each value read as JSON where it parses (numbers), else a string."""
    out = {}
    for item in ([] if text == "-" else text.split("+")):
        key, value = item.split("=", 1)
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def worker(pair_name: str, n: int) -> None:
    """Reads 'method decoding prompt seed tokens' lines; answers each with its CPU seconds and output."""
    import torch

    from harness.methods import build_decoder
    from harness.testing.heads import random_head_params

    torch.set_num_threads(1)
    pair, prompts = _prompts(pair_name, n)
    decoders = {}
    print(json.dumps({"ready": len(prompts)}), flush=True)
    for line in sys.stdin:
        method, decoding, params, i, seed, tokens = line.split()
        if (method, decoding, params) not in decoders:
            dec = decoders[method, decoding, params] = build_decoder(
                method, pair, decoding=decoding, **random_head_params(method, pair), **_params(params))
            for p in prompts[:2]:
                dec.generate(p, 8, seed=0)
        start = time.process_time()
        gen = decoders[method, decoding, params].generate(prompts[int(i)], int(tokens), seed=int(seed))
        print(json.dumps({"t": time.process_time() - start, "out": gen.output_ids}), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--pair", default="toy", choices=("toy", "tiny"))
    ap.add_argument("--cases", required=True, help="method:decoding, comma-separated")
    ap.add_argument("--prompts", type=int, default=24)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args.pair, args.prompts)
    procs = {}
    for name, tree in (("old", args.old), ("new", args.new)):
        procs[name] = subprocess.Popen(
            [sys.executable, __file__, tree, tree, "--worker", "--pair", args.pair, "--cases", "-",
             "--prompts", str(args.prompts)], cwd=tree, env={"PYTHONPATH": tree, "OMP_NUM_THREADS": "1",
                                                               "PATH": "/usr/bin:/bin"},
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        json.loads(procs[name].stdout.readline())

    def ask(name: str, case: str, i: int) -> dict:
        method, decoding, *params = case.split(":")
        procs[name].stdin.write(f"{method} {decoding} {params[0] if params else '-'} {i} {100 + i} {args.tokens}\n")
        procs[name].stdin.flush()
        return json.loads(procs[name].stdout.readline())

    for case in args.cases.split(","):
        times: dict[str, list[float]] = {"old": [], "new": []}
        same = 0
        for i in range(args.prompts):
            out = {name: ask(name, case, i) for name in (("old", "new") if i % 2 == 0 else ("new", "old"))}
            for name in times:
                times[name].append(out[name]["t"])
            same += out["old"]["out"] == out["new"]["out"]
        old, new = np.array(times["old"]), np.array(times["new"])
        boot = np.random.default_rng(0).integers(0, len(old), (5000, len(old)))
        lo, hi = np.percentile(new[boot].sum(1) / old[boot].sum(1), [2.5, 97.5])
        print(f"{args.pair} {case}: new/old {new.sum() / old.sum():.3f} [{lo:.3f}, {hi:.3f}] over {len(old)} prompts; "
              f"old {old.sum():.2f} s, new {new.sum():.2f} s; identical outputs {same}/{len(old)}", flush=True)
    for p in procs.values():
        p.stdin.close()
        p.wait()


if __name__ == "__main__":
    main()
