"""Study of adaptive speculation (issue 11 item 5; seed 004 §3-§6): γ policies and draft selection
on the tiny pair, side by side, interleaved prompt by prompt with rotating order.

SKELETON: everything but the decoder hook runs today; :func:`build_arm` needs the wiring phase
(decoders that take a γ policy; ``hf_assisted`` with ``schedule=heuristic``). Until then the
script stops with a clear message unless ``--simulate`` is given, which replaces the decoders by
the simulated rounds of :mod:`harness.adaptive.testing` (to exercise the plumbing and the analysis).

Per dataset (≥ 3 with different acceptance, e.g. kjv_heldout, gsm8k, humaneval) and decoding
(greedy, sampling):

1. a fixed-γ sweep γ = 1..8 (SD) → the oracle (best fixed γ per dataset and per prompt, §3);
2. the arms, interleaved: ``sd`` at γ = 4, ``sd`` at the dataset's best fixed γ, every policy
   (online, online with the App. B.2 MLE, fsm, cache_fsm, qlearning after its 25 warm-up
   generations on other prompts (App. C.1), hf_heuristic) and ``hf_assisted`` with HF's
   heuristic schedule;
3. draft selection (§5): features fitted on the dataset's prompts (length, perplexity under the
   cheapest draft, TF-IDF); the first 25 prompts run with every draft to fit Eq. 8; then the
   selected draft vs each single draft, interleaved, at the online policy.

Outputs (``--out``, git-ignored): ``rows.parquet`` (one row per arm × prompt: new tokens, wall
time, rounds, γ per round, accepted), ``summary.csv`` (tokens/s ratios with 95 % percentile
bootstrap CIs over prompts: ratio of totals and geometric mean of per-prompt ratios, vs SD γ=4,
vs SD at the best fixed γ, vs the per-prompt oracle; mean γ; acceptance rate),
``gamma_trace.png`` (γ over one generation per policy).

    python scripts/study_adaptive.py --datasets kjv_heldout,gsm8k,humaneval --prompts 60 --simulate
"""
from __future__ import annotations

import argparse
import math
import random
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from harness.adaptive.draft_selection import DraftSelector, PromptFeaturizer, alpha_from_record
from harness.adaptive.oracle import fixed_gamma_oracle
from harness.adaptive.policies import make_gamma_policy

FIXED_GAMMAS = range(1, 9)
POLICY_ARMS = {  # arm name → (policy name, parameters)
    "online": ("online", {}),
    "online_mle": ("online", {"estimator": "mle"}),
    "online_h24": ("online", {"h": 24}),  # App. C.5's history-length sensitivity, one step further
    "fsm": ("fsm", {}),
    "cache_fsm": ("cache_fsm", {}),
    "qlearning": ("qlearning", {}),
    "hf_heuristic": ("hf_heuristic", {}),
}


@dataclass
class Run:
    """What the study needs from one generation (a decoder's Generation.stats, or a simulation)."""

    new_tokens: int
    wall_time_s: float
    round_gammas: list[int] = field(default_factory=list)
    accept_lengths: list[int] = field(default_factory=list)

    @property
    def accepted(self) -> int:
        return sum(self.accept_lengths) - len(self.accept_lengths)

    @property
    def rejected_rounds(self) -> int:
        return sum(1 for a, g in zip(self.accept_lengths, self.round_gammas) if a - 1 < g)


# ------------------------------------------------------------------ the decoder hook (wiring phase)

def build_arm(pair, arm: str, decoding: str, draft_id: str | None = None):
    """A callable ``generate(prompt_ids, max_new_tokens, seed) -> Run`` for an arm.

    WIRING PHASE: build ``sd`` with ``gamma_policy=make_gamma_policy(...)`` (one policy object per
    arm, kept across the prompts of the dataset), ``hf_assisted`` with ``schedule="heuristic"``,
    and map Generation.stats (``new_tokens``, ``wall_time_s``, ``round_gammas``,
    ``accept_lengths``) to :class:`Run`; ``pair.with_draft(draft_id)`` for draft selection.
    """
    raise NotImplementedError("decoders do not take a γ policy yet (issue 11 wiring phase); use --simulate")


def simulated_arm(arm: str, decoding: str, draft_id: str | None, rng: random.Random, world: dict):
    """Stand-in for :func:`build_arm`: rounds simulated with per-prompt β, draft costs c, b_p(γ)."""
    from harness.adaptive.testing import censored_geometric
    from harness.primitives.gamma_policy import RoundObservation

    c = world["costs"].get(draft_id or "draft", 0.17)
    if arm.startswith("sd_g"):
        policy = make_gamma_policy("fixed", gamma=int(arm[4:]))
    elif arm == "hf_assisted_heuristic":
        policy = make_gamma_policy("hf_heuristic", gamma_max=20)
    else:
        name, kw = POLICY_ARMS[arm]
        policy = make_gamma_policy(name, **kw)

    def generate(prompt_ids, max_new_tokens, seed):
        beta = world["beta"][tuple(prompt_ids)] + world["draft_gain"].get(draft_id or "draft", 0.0)
        policy.reset(list(prompt_ids))
        out, gammas, lens, t = 0, [], [], 0.0
        while out < max_new_tokens:
            g = max(1, min(policy.next_gamma(), max_new_tokens - out - 1))
            a = censored_geometric(min(beta, 0.99), g, rng)
            dt, vt = c * g * world["b"], world["b"] * (1 + world["slope"] * g)
            policy.observe(RoundObservation(g, a, g, tuple(rng.randrange(4096) for _ in range(a + 1)), dt, vt))
            out, t = out + a + 1, t + dt + vt
            gammas.append(g)
            lens.append(a + 1)
        return Run(min(out, max_new_tokens), t, gammas, lens)
    return generate, policy


# ------------------------------------------------------------------ analysis

def paired_ratios(rows: pd.DataFrame, arm: str, baseline: str, n_boot: int = 2000, seed: int = 0) -> dict:
    """tokens/s of ``arm`` ÷ ``baseline`` over the same prompts: ratio of totals and geometric mean
    of per-prompt ratios, each with a 95 % percentile bootstrap CI over prompts (GUIDE §5)."""
    a = rows[rows.arm == arm].set_index("prompt")
    b = rows[rows.arm == baseline].set_index("prompt")
    common = a.index.intersection(b.index)
    a, b = a.loc[common], b.loc[common]
    if len(common) == 0:
        return {"ratio_of_totals": math.nan, "geo_mean": math.nan}
    rng = np.random.default_rng(seed)
    tok_a, t_a, tok_b, t_b = (x.to_numpy(float) for x in (a.new_tokens, a.wall_time_s, b.new_tokens, b.wall_time_s))
    log_r = np.log((tok_a / t_a) / (tok_b / t_b))

    def stats(idx):
        return (tok_a[idx].sum() / t_a[idx].sum()) / (tok_b[idx].sum() / t_b[idx].sum()), math.exp(log_r[idx].mean())
    point = stats(np.arange(len(common)))
    boot = np.array([stats(rng.integers(0, len(common), len(common))) for _ in range(n_boot)])
    lo, hi = np.percentile(boot, [2.5, 97.5], axis=0)
    return {"n": len(common), "ratio_of_totals": point[0], "rot_ci": (lo[0], hi[0]),
            "geo_mean": point[1], "geo_ci": (lo[1], hi[1])}


def run_dataset(dataset: str, decoding: str, prompts: list[list[int]], args, make) -> pd.DataFrame:
    """Interleave every arm over the prompts (order rotating per prompt); return one row per run."""
    arms = [f"sd_g{g}" for g in FIXED_GAMMAS] + list(POLICY_ARMS) + ["hf_assisted_heuristic"]
    gens = {arm: make(arm, decoding, None) for arm in arms}
    warm = gens["qlearning"][1]
    for p in prompts[: getattr(warm, "warmup_trials", 0)]:  # App. C.1: 25 warm-up trials, unrecorded
        gens["qlearning"][0](p, args.max_new_tokens, 0)
    measured = prompts[getattr(warm, "warmup_trials", 0):]
    rows = []
    for i, p in enumerate(measured):
        order = arms[i % len(arms):] + arms[: i % len(arms)]
        for arm in order:
            run = gens[arm][0](p, args.max_new_tokens, i)
            rows.append({"dataset": dataset, "decoding": decoding, "arm": arm, "prompt": i, "new_tokens": run.new_tokens,
                         "wall_time_s": run.wall_time_s, "rounds": len(run.round_gammas),
                         "mean_gamma": float(np.mean(run.round_gammas)) if run.round_gammas else math.nan,
                         "acceptance_rate": run.accepted / max(1, sum(run.round_gammas)),
                         "round_gammas": run.round_gammas})
    return pd.DataFrame(rows)


def summarise(rows: pd.DataFrame) -> pd.DataFrame:
    out = []
    for (dataset, decoding), df in rows.groupby(["dataset", "decoding"]):
        sweep = df[df.arm.str.startswith("sd_g")].assign(gamma=lambda d: d.arm.str[4:].astype(int))
        per_dataset, per_prompt = fixed_gamma_oracle(sweep)
        best = f"sd_g{int(per_dataset.best_gamma.iloc[0])}"
        oracle = per_prompt.assign(arm="oracle", decoding=decoding)
        df_o = pd.concat([df, oracle], ignore_index=True)
        for arm in sorted(set(df.arm)):
            sub = df[df.arm == arm]
            row = {"dataset": dataset, "decoding": decoding, "arm": arm,
                   "tokens_per_s": sub.new_tokens.sum() / sub.wall_time_s.sum(), "mean_gamma": sub.mean_gamma.mean(),
                   "acceptance_rate": sub.acceptance_rate.mean(), "best_fixed_gamma": best}
            for base, label in (("sd_g4", "vs_sd4"), (best, "vs_best_fixed"), ("oracle", "vs_oracle")):
                r = paired_ratios(df_o, arm, base)
                row[f"{label}_rot"], row[f"{label}_rot_ci"] = r["ratio_of_totals"], r.get("rot_ci")
                row[f"{label}_geo"], row[f"{label}_geo_ci"] = r["geo_mean"], r.get("geo_ci")
            out.append(row)
    return pd.DataFrame(out)


def plot_gamma_trace(rows: pd.DataFrame, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    first = rows[(rows.prompt == rows.prompt.min()) & ~rows.arm.str.startswith("sd_g")]
    fig, ax = plt.subplots(figsize=(8, 4))
    for _, r in first.iterrows():
        ax.step(range(len(r.round_gammas)), r.round_gammas, where="post", label=f"{r.arm} ({r.dataset}, {r.decoding})")
    ax.set_xlabel("round")
    ax.set_ylabel("γ")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def draft_selection_study(prompts, ppls, alphas_by_draft, costs, n_fit=25) -> dict:
    """Fit Eq. 8 on the first ``n_fit`` prompts (every draft run), then choose per prompt.

    ``alphas_by_draft[d][i]`` is the realised α of prompt i with draft d (from records:
    :func:`alpha_from_record`). Returns the choices, predicted α and the fits' R².
    """
    feat = PromptFeaturizer().fit(prompts, ppls)
    sel = DraftSelector(costs, n_fit=n_fit)
    us = [feat.transform(p, q) for p, q in zip(prompts, ppls)]
    for i in range(n_fit):
        for d in costs:
            sel.observe(d, us[i], alphas_by_draft[d][i])
    choices = [sel.choose(u) for u in us[n_fit:]]
    return {"choices": choices, "r2": sel.r2()}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", default="kjv_heldout,gsm8k,humaneval")
    ap.add_argument("--decoding", default="greedy,sampling")
    ap.add_argument("--prompts", type=int, default=60, help="measured prompts per dataset (+ 25 q-learning warm-up)")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--out", default="results/study_adaptive")
    ap.add_argument("--simulate", action="store_true", help="simulated rounds instead of decoders (plumbing check)")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(0)
    frames = []
    for dataset in args.datasets.split(","):
        if args.simulate:
            base = {"kjv_heldout": 0.6, "gsm8k": 0.5, "humaneval": 0.75}.get(dataset, 0.6)
            prompts = [[rng.randrange(4096) for _ in range(rng.randint(10, 60))] for _ in range(args.prompts + 25)]
            world = {"beta": {tuple(p): min(0.95, max(0.05, rng.gauss(base, 0.12))) for p in prompts},
                     "costs": {"draft": 0.17, "draft4": 0.25}, "draft_gain": {"draft4": 0.05}, "b": 0.006,
                     "slope": 0.05}

            def make(arm, decoding, draft_id, world=world):
                return simulated_arm(arm, decoding, draft_id, rng, world)
        else:
            from harness.models import load_pair

            pair = load_pair("tiny/target", drafts=["tiny/draft", "tiny/draft4"], device="cpu")
            prompts = []  # WIRING PHASE: load_task(conf/dataset/<dataset>.yaml).examples() → task.prompt_ids

            def make(arm, decoding, draft_id, pair=pair):
                return build_arm(pair, arm, decoding, draft_id)
        for decoding in args.decoding.split(","):
            t0 = time.perf_counter()
            frames.append(run_dataset(dataset, decoding, prompts, args, make))
            print(f"{dataset} {decoding}: {time.perf_counter() - t0:.1f}s", flush=True)
    rows = pd.concat(frames, ignore_index=True)
    rows.to_parquet(out / "rows.parquet")
    summary = summarise(rows)
    summary.to_csv(out / "summary.csv", index=False)
    plot_gamma_trace(rows, out / "gamma_trace.png")
    cols = ["dataset", "decoding", "arm", "tokens_per_s", "vs_sd4_rot", "vs_best_fixed_rot", "vs_oracle_rot", "mean_gamma"]
    print(summary[cols].to_string(index=False, float_format=lambda x: f"{x:.3f}"))


if __name__ == "__main__":
    main()
