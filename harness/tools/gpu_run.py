"""One prepared GPU run (issue 28.5): every measurement the README's "Measured on GPUs" table needs, in one go.

Steps (``--plan`` prints them with their command lines and time estimates):

1. ``harness-gpu-check`` on the 7B/68M shapes (cost curves, roofline, energy checks);
2. a metered, interleaved sweep of every registered method on the tiny pair, eager mode;
3. the same in graphs mode (``pair.execution=graphs``; methods that refuse it left out, with the reason);
4. a sweep of AR and the draft-model methods on a Llama-2-7B-shaped random pair built on the GPU
   (``pair=llama2_7b_shape_random``: the draft is the target's first two layers), both modes;
5. HF parity on both pairs: harness ``ar`` ÷ HF ``generate`` and ``sd`` ÷ HF assisted generation at equal γ, same
   weights, arms interleaved prompt by prompt, ratios of totals with bootstrap CIs over prompts; and the 7B shape's
   memory roofline (weight bytes ÷ the measured copy bandwidth) for AR's fraction of it;
6. ``harness-report`` on the sweeps' results;
7. the table (:mod:`harness.tools.gpu_table`): device, date, commit; per method × mode tok/s, speed-up over AR
   with its CI, the HF ratio, the fraction of the roofline, J/token gross and net — printed as markdown and written
   to ``gpu_run.md`` beside ``gpu_run.json``.

Everything goes under ``--out`` (default ``$OUT`` when set). A step that fails is recorded and the run goes on; a
step that the time budget (``--budget-s``, 480 s) no longer allows is skipped and named in the table.
``--dry-run`` runs the same steps on a CPU with tiny sizes (the mini random shape for the 7B one, no energy meter,
gpu-check --quick): the whole chain but the GPU. ``scripts/gpu_run.sh`` installs offline and calls this.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Sizes:
    """How much each step measures (GPU: the prepared run; DRY: a CPU smoke run of the same steps)."""

    tiny_prompts: int
    tiny_new_tokens: int
    big_pair: str
    big_prompts: int
    big_new_tokens: int
    parity_prompts: int
    gamma: int
    energy: tuple[str, ...]
    gpu_check: tuple[str, ...] | None
    big_methods: tuple[str, ...] = ("ar", "sd", "specinfer", "spectr", "pld", "lookahead")


GPU = Sizes(tiny_prompts=4, tiny_new_tokens=64, big_pair="llama2_7b_shape_random", big_prompts=3, big_new_tokens=64,
            parity_prompts=4, gamma=4,
            # metered, but short: two repetitions or half a second per prompt (the protocol's defaults take ~5 s)
            energy=("energy.min_window_s=0.5", "energy.min_repetitions=2", "energy.idle_settle_s=0.5",
                    "energy.idle_settled_every_s=120", "energy.infer_update_period_s=0.3"),
            gpu_check=("--shapes", "llama2-7b/68m", "--max-k", "16", "--reps", "5", "--rounds", "6", "--prompts", "2",
                       "--max-new-tokens", "32"))
DRY = Sizes(tiny_prompts=2, tiny_new_tokens=6, big_pair="mini_shape_random", big_prompts=2, big_new_tokens=6,
            parity_prompts=2, gamma=3, energy=("energy=off",), gpu_check=("--quick",), big_methods=("ar", "sd"))
BUDGET_S = 480.0


@dataclass
class Step:
    name: str
    estimate_s: float  # on an H100/H200 with GPU sizes (a guess until the first run: the table records the real ones)
    argv: list[str] | None = None  # a command, or None for a step run in this process
    args: dict = field(default_factory=dict)


def every_method() -> list[str]:
    """Every registered method, its aliases (ar, beam) standing for the decoders they resolve to."""
    from harness.decoders import registry
    from harness.methods import ALIASES

    covered = {t for alias in ALIASES.values() for t in alias.values()}
    return [*ALIASES, *(m for m in sorted(registry()) if m not in covered)]


def sampling_only() -> list[str]:
    """The methods that decode by sampling only, run in their own sweep beside AR sampling: the aliases (their
    sampling decoders: ar_sampling, beam_sampling) and every other registered decoder without greedy decoding."""
    from harness.decoders import registry
    from harness.methods import ALIASES

    covered = {t for alias in ALIASES.values() for t in alias.values()}
    return [*ALIASES, *(m for m, c in sorted(registry().items()) if "greedy" not in c.decodings and m not in covered)]


def graphs_refused() -> dict[str, str]:
    from harness.decoders import registry

    return {m: c.graphs_refusal for m, c in sorted(registry().items()) if c.graphs_refusal}


def _sweep(out: Path, tag: str, methods, pair: str, modes: str, prompts: int, new_tokens: int, sizes: Sizes,
           decoding: str = "greedy") -> list:
    return [sys.executable, "-m", "harness", "-m", f"method={','.join(methods)}", f"decoding={decoding}",
            f"pair={pair}",
            f"pair.execution={modes}", f"dataset.num_prompts={prompts}", f"dataset.max_new_tokens={new_tokens}",
            "runner.interleave=true", "gpu=auto", f"results_dir={out / 'results'}",
            f"hydra.sweep.dir={out / 'hydra' / tag}", *sizes.energy]


def plan(sizes: Sizes, out: Path, only: list[str] | None = None) -> list[Step]:
    """The run's steps, in order (nothing runs here). ``only``: these methods (and AR) instead of every one."""
    from harness.methods import ALIASES

    out = Path(out)
    refused = graphs_refused()
    keep = (lambda m: m == "ar" or m in only) if only else (lambda m: True)
    methods = [m for m in every_method() if keep(m)]
    steps = []
    if sizes.gpu_check is not None:
        steps.append(Step("gpu_check", 70, [sys.executable, "-m", "harness.tools.gpu_check", "--out",
                                             str(out / "gpu_check"), *sizes.gpu_check]))
    sampled = [m for m in sampling_only() if keep(m)]  # with AR sampling, their baseline
    for mode, estimate in (("eager", (90, 25)), ("graphs", (50, 15))):
        kept = [m for m in methods if mode == "eager" or m not in refused]
        left_out = {"left_out": {m: why for m, why in refused.items() if m not in kept}} if mode == "graphs" else {}
        steps += [Step(f"sweep_tiny_{mode}", estimate[0],
                       _sweep(out, f"tiny_{mode}", [m for m in kept if m in ALIASES or m not in sampled], "tiny", mode,
                              sizes.tiny_prompts, sizes.tiny_new_tokens, sizes), left_out),
                  Step(f"sweep_tiny_{mode}_sampling", estimate[1],
                       _sweep(out, f"tiny_{mode}_sampling", [m for m in sampled if m in kept], "tiny", mode,
                              sizes.tiny_prompts, sizes.tiny_new_tokens, sizes, decoding="sampling"))]
    steps += [
        Step("sweep_7b_shape", 110, _sweep(out, "big", [m for m in sizes.big_methods if keep(m)], sizes.big_pair,
                                           "eager,graphs",
                                           sizes.big_prompts, sizes.big_new_tokens, sizes)),
        Step("parity_tiny", 25, None, {"pair": "tiny", "prompts": sizes.parity_prompts,
                                       "new_tokens": sizes.tiny_new_tokens, "gamma": sizes.gamma}),
        Step("parity_7b_shape", 60, None, {"pair": sizes.big_pair, "prompts": sizes.parity_prompts,
                                           "new_tokens": sizes.big_new_tokens, "gamma": sizes.gamma, "roofline": True}),
        Step("report", 20, [sys.executable, "-m", "harness.report", "--results", str(out / "results"), "--out",
                            str(out / "report"), "--force"]),
        Step("table", 5, None),
    ]
    return steps


def run_step(step: Step, out: Path, results: dict, timeout_s: float) -> dict:
    """Run one step; its outcome (ok, seconds, and the step's own figures or the error's tail)."""
    started = time.monotonic()
    try:
        if step.argv is not None:
            log = out / "logs" / f"{step.name}.log"
            log.parent.mkdir(parents=True, exist_ok=True)
            with log.open("w") as f:
                proc = subprocess.run(step.argv, stdout=f, stderr=subprocess.STDOUT, timeout=timeout_s, check=False)
            outcome = {"ok": proc.returncode == 0, "rc": proc.returncode, "log": str(log)}
            if proc.returncode:
                outcome["tail"] = log.read_text(errors="replace")[-1500:]
        elif step.name.startswith("parity"):
            from harness.tools.gpu_parity import parity

            outcome = {"ok": True, **parity(**step.args)}
        else:
            outcome = {"ok": True}
    except Exception as e:  # noqa: BLE001 — recorded; the run goes on to the next step
        outcome = {"ok": False, "error": f"{type(e).__name__}: {e}"}
    outcome["seconds"] = round(time.monotonic() - started, 1)
    return {**outcome, **({"left_out": step.args["left_out"]} if "left_out" in step.args else {})}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="gpu_run", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT") or "gpu_run_out", help="output folder (default: $OUT)")
    ap.add_argument("--dry-run", action="store_true", help="the same steps on a CPU with tiny sizes")
    ap.add_argument("--plan", action="store_true", help="print the steps and exit")
    ap.add_argument("--budget-s", type=float, default=BUDGET_S, help="skip steps once this much time is spent")
    ap.add_argument("--methods", default=None, help="comma list: only these methods (and ar) in the sweeps, e.g. "
                                                    "for a quick smoke run; default every registered method")
    args = ap.parse_args(argv)
    sizes, out = (DRY if args.dry_run else GPU), Path(args.out).resolve()
    steps = plan(sizes, out, args.methods.split(",") if args.methods else None)
    if args.plan:
        print(json.dumps([asdict(s) for s in steps], indent=1, default=str))
        print(f"estimated {sum(s.estimate_s for s in steps):.0f} s of {args.budget_s:.0f} s", file=sys.stderr)
        return 0
    out.mkdir(parents=True, exist_ok=True)
    started, results = time.monotonic(), {}
    for step in steps:
        left = args.budget_s - (time.monotonic() - started)
        if step.name == "table":
            break
        if left < min(step.estimate_s, 30):
            results[step.name] = {"ok": False, "skipped": f"time budget: {left:.0f} s left"}
            continue
        print(f"[gpu_run] {step.name} ...", flush=True)
        results[step.name] = run_step(step, out, results, left)
        print(f"[gpu_run] {step.name}: {'ok' if results[step.name]['ok'] else 'FAILED'} "
              f"({results[step.name]['seconds']} s)", flush=True)
    from harness.tools.gpu_table import render

    doc = {"dry_run": args.dry_run, "sizes": asdict(sizes), "steps": results,
           "elapsed_s": round(time.monotonic() - started, 1)}
    table = render(out, doc)
    (out / "gpu_run.json").write_text(json.dumps(doc, indent=1, default=str))
    (out / "gpu_run.md").write_text(table)
    print(table)
    return 0 if all(r.get("ok") for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
