"""Study of adaptive speculation (issue 11 item 5; adaptive §3-§6): γ policies and draft selection
on the tiny pair, side by side, interleaved prompt by prompt with rotating order.

Arms run the real decoders (:func:`build_arm`): ``sd`` with the ``gamma_policy`` group (the CLI's keys),
``hf_assisted`` with ``schedule=heuristic``, ``sd`` with ``draft_selection=ols``. ``--simulate``
replaces them by the simulated rounds of :mod:`harness.adaptive.testing` (a plumbing check);
``--selection-only`` runs only the draft-selection comparison (online γ on each single draft vs ols).
Every row's time is the generation's own wall time (one torch thread by default).

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

    python scripts/study_adaptive.py --datasets kjv_heldout,gsm8k,humaneval --prompts 15   # ≈ 25 min on 1 CPU thread
    python scripts/study_adaptive.py --selection-only --prompts 15                        # ≈ 8 min
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
    "online_mle": ("online", {"acc_estimator": "mle"}),
    "online_h24": ("online", {"acc_history": 24}),  # App. C.5's history-length sensitivity, one step further
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
    selection: dict = field(default_factory=dict)

    @property
    def accepted(self) -> int:
        return sum(self.accept_lengths) - len(self.accept_lengths)

    @property
    def rejected_rounds(self) -> int:
        return sum(1 for a, g in zip(self.accept_lengths, self.round_gammas) if a - 1 < g)


# ------------------------------------------------------------------ the decoder hook

#: policy arms as ``gamma_policy`` group values of ``sd``: the CLI's spelling (gamma_policy=NAME gamma_policy.KEY=…)
POLICY_CONFIG = {arm: {"name": name, **kw} for arm, (name, kw) in POLICY_ARMS.items()}
SELECTION_ARMS = ("sel_ols", "sel_draft4")  # draft selection (online γ) vs the second draft; "online" is the first


def build_arm(pair, arm: str, decoding: str, draft_id: str | None = None):
    """``(generate(prompt_ids, max_new_tokens, seed) -> Run, decoder)`` for an arm, on the real decoders:
    ``sd_g<γ>`` fixed γ; a policy arm = ``sd`` with the ``gamma_policy`` group (one decoder, hence one policy
    object, per arm, kept across the dataset's prompts); ``hf_assisted_heuristic`` = HF assisted generation
    with ``num_assistant_tokens_schedule="heuristic"`` from γ = 4; ``sel_ols`` = ``sd`` online with
    ``draft_selection=ols`` (its ``prepare`` is the caller's); ``sel_draft4`` = ``sd`` online on the second draft."""
    from harness.methods import build_decoder

    if arm.startswith("sd_g"):
        dec = build_decoder("sd", pair, decoding=decoding, gamma=int(arm[4:]))
    elif arm == "hf_assisted_heuristic":
        dec = build_decoder("hf_assisted", pair, decoding=decoding, gamma=4, schedule="heuristic")
    elif arm == "sel_ols":
        dec = build_decoder("sd", pair, decoding=decoding, gamma_policy="online", draft_selection="ols")
    elif arm == "sel_draft4":
        dec = build_decoder("sd", pair.with_draft(draft_id or "tiny/draft4"), decoding=decoding, gamma_policy="online")
    else:
        dec = build_decoder("sd", pair, decoding=decoding, gamma_policy=POLICY_CONFIG[arm])

    def generate(prompt_ids, max_new_tokens, seed):
        gen = dec.generate(prompt_ids, max_new_tokens, seed=seed)
        st = gen.stats
        return Run(st.new_tokens, st.wall_time_s, list(st.round_gammas), list(st.accept_lengths),
                   selection=dict(gen.selection or {}))
    return generate, dec


def simulated_arm(arm: str, decoding: str, draft_id: str | None, rng: random.Random, world: dict):
    """Stand-in for :func:`build_arm`: rounds simulated with per-prompt β, draft costs c, b_p(γ)."""
    from harness.testing.policies import censored_geometric
    from harness.primitives.round import Round

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
            policy.observe(Round(tuple(rng.randrange(4096) for _ in range(a + 1)), g, a, g, dt, vt))
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


def run_dataset(dataset: str, decoding: str, prompts: list[list[int]], args, make, selection: bool = True) -> pd.DataFrame:
    """Interleave every arm over the measured prompts (order rotating per prompt); one row per run.

    The first ``args.warmup`` prompts are not measured: q-learning's warm-up trials (App. C.1: 25) and
    draft selection's fit prompts (§6.1: r = 25, every draft run on each) — both on prompts other than
    the measured ones. Every arm first runs one short untimed generation (allocator, caches)."""
    warm, measured = prompts[: args.warmup], prompts[args.warmup:]
    if getattr(args, "selection_only", False):
        arms = ["online", *SELECTION_ARMS]
    else:
        arms = [f"sd_g{g}" for g in FIXED_GAMMAS] + list(args.policies) + ["hf_assisted_heuristic"]
        arms += list(SELECTION_ARMS) if selection else []
    gens = {arm: make(arm, decoding, None) for arm in arms}
    fit_time = math.nan
    if "sel_ols" in gens:
        gens["sel_ols"][1].prepare(prompts)  # features fitted on the dataset's prompts (no α needed)
        t0 = time.perf_counter()
        for i, p in enumerate(warm):
            gens["sel_ols"][0](p, args.max_new_tokens, 10_000 + i)
        fit_time = time.perf_counter() - t0
    if "qlearning" in gens:
        for i, p in enumerate(warm):  # App. C.1: 25 warm-up trials, unrecorded
            gens["qlearning"][0](p, args.max_new_tokens, 10_000 + i)
    for arm in arms:
        gens[arm][0](measured[0], 8, 0)
    rows = []
    for i, p in enumerate(measured):
        order = arms[i % len(arms):] + arms[: i % len(arms)]
        for arm in order:
            run = gens[arm][0](p, args.max_new_tokens, i)
            sel = run.selection
            rows.append({"dataset": dataset, "decoding": decoding, "arm": arm, "prompt": i, "new_tokens": run.new_tokens,
                         "wall_time_s": run.wall_time_s, "rounds": len(run.round_gammas),
                         "mean_gamma": float(np.mean(run.round_gammas)) if run.round_gammas else math.nan,
                         "accepted": run.accepted, "draft_positions": sum(run.round_gammas),
                         "acceptance_rate": run.accepted / max(1, sum(run.round_gammas)),
                         "round_gammas": run.round_gammas,
                         "sel_draft": sel.get("draft"), "sel_alpha_predicted": sel.get("alpha_predicted", math.nan),
                         "sel_alpha_realised": sel.get("alpha_realised", math.nan),
                         "sel_fit_r2": sel.get("fit_r2", math.nan), "sel_fit_r2_loo": sel.get("fit_r2_loo", math.nan),
                         "sel_feature_time_s": sel.get("feature_time_s", math.nan),
                         "sel_fit_time_s": fit_time})
    return pd.DataFrame(rows)


def with_baselines(df: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """``df`` of one dataset × decoding plus the synthetic arms ``best_fixed`` (SD at the dataset's best
    fixed γ, by ratio of totals), ``oracle`` (each prompt at its own best γ, §3) and ``best_single_draft``
    (the faster of the two single-draft online arms); returns it and the best fixed γ's arm."""
    sweep = df[df.arm.str.startswith("sd_g")].assign(gamma=lambda d: d.arm.str[4:].astype(int))
    extra, best = [], None
    if not sweep.empty:
        per_dataset, per_prompt = fixed_gamma_oracle(sweep)
        best = f"sd_g{int(per_dataset.best_gamma.iloc[0])}"
        extra = [df[df.arm == best].assign(arm="best_fixed"),
                 per_prompt.assign(arm="oracle", decoding=df.decoding.iloc[0])]
    singles = [a for a in ("online", "sel_draft4") if a in set(df.arm)]
    if len(singles) == 2:
        tps = {a: df[df.arm == a].new_tokens.sum() / df[df.arm == a].wall_time_s.sum() for a in singles}
        extra.append(df[df.arm == max(tps, key=tps.get)].assign(arm="best_single_draft"))
    return pd.concat([df, *extra], ignore_index=True), best


COMPARISONS = (("sd_g4", "vs_sd4"), ("best_fixed", "vs_best_fixed"), ("oracle", "vs_oracle"),
               ("hf_assisted_heuristic", "vs_hf_assisted"), ("best_single_draft", "vs_best_single_draft"))


def _summary_row(df_o: pd.DataFrame, arm: str, **ids) -> dict:
    sub = df_o[df_o.arm == arm]
    row = {**ids, "arm": arm, "prompts": sub.prompt.nunique(),
           "tokens_per_s": sub.new_tokens.sum() / sub.wall_time_s.sum(),
           "mean_gamma": (sub.mean_gamma * sub.rounds).sum() / sub.rounds.sum() if "rounds" in sub else math.nan,
           "acceptance_rate": sub.accepted.sum() / max(1, sub.draft_positions.sum()) if "accepted" in sub else math.nan}
    for base, label in COMPARISONS:
        if base not in set(df_o.arm) or base == arm:
            continue
        r = paired_ratios(df_o, arm, base)
        row[f"{label}_rot"], row[f"{label}_rot_ci"] = r["ratio_of_totals"], r.get("rot_ci")
        row[f"{label}_geo"], row[f"{label}_geo_ci"] = r["geo_mean"], r.get("geo_ci")
    return row


def summarise(rows: pd.DataFrame) -> pd.DataFrame:
    """Per dataset × decoding, and pooled over datasets per decoding (``dataset = ALL``: prompts of every
    dataset, each compared with its own dataset's best fixed γ / oracle / best single draft)."""
    out, pooled = [], []
    for (dataset, decoding), df in rows.groupby(["dataset", "decoding"]):
        df_o, best = with_baselines(df)
        for arm in sorted(set(df.arm)):
            out.append(_summary_row(df_o, arm, dataset=dataset, decoding=decoding, best_fixed_gamma=best))
        pooled.append(df_o.assign(prompt=dataset + ":" + df_o.prompt.astype(str)))
    for decoding, df in pd.concat(pooled, ignore_index=True).groupby("decoding"):
        for arm in sorted(set(rows.arm)):
            out.append(_summary_row(df, arm, dataset="ALL", decoding=decoding, best_fixed_gamma="per dataset"))
    return pd.DataFrame(out)


def plot_gamma_trace(rows: pd.DataFrame, path: Path) -> None:
    """γ over one generation (the first measured prompt) per policy, one panel per dataset × decoding."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = list(rows.groupby(["dataset", "decoding"]))
    fig, axes = plt.subplots(len(groups), 1, figsize=(9, 2.6 * len(groups)), squeeze=False, sharex=True)
    for ax, ((dataset, decoding), df) in zip(axes[:, 0], groups):
        first = df[(df.prompt == df.prompt.min()) & ~df.arm.str.startswith("sd_g")]
        for _, r in first.sort_values("arm").iterrows():
            ax.step(range(len(r.round_gammas)), r.round_gammas, where="post", label=r.arm)
        ax.set_title(f"{dataset}, {decoding}: γ per round, first measured prompt", fontsize=9)
        ax.set_ylabel("γ")
    axes[-1, 0].set_xlabel("round")
    axes[0, 0].legend(fontsize=7, ncol=4)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


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


def load_prompts(dataset: str, n: int, tokenizer) -> list[list[int]]:
    """The first ``n`` prompts of ``conf/dataset/<dataset>.yaml`` as token ids (the task's prompt format)."""
    import yaml

    from harness.tasks import load_task

    cfg = yaml.safe_load((Path(__file__).resolve().parents[1] / "conf" / "dataset" / f"{dataset}.yaml").read_text())
    cfg["num_prompts"] = n
    task = load_task(cfg)
    return [task.prompt_ids(ex, tokenizer) for ex in task.examples()]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", default="kjv_heldout,gsm8k,humaneval")
    ap.add_argument("--decoding", default="greedy,sampling")
    ap.add_argument("--prompts", type=int, default=60, help="measured prompts per dataset (+ --warmup unmeasured)")
    ap.add_argument("--warmup", type=int, default=25, help="q-learning warm-up trials = draft-selection fit prompts")
    ap.add_argument("--policies", default="online,online_mle,fsm,cache_fsm,qlearning,hf_heuristic")
    ap.add_argument("--no-selection", action="store_true", help="skip the draft-selection arms")
    ap.add_argument("--selection-only", action="store_true", help="only draft selection vs each single draft (online γ)")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (1: steadier timings on a shared box)")
    ap.add_argument("--out", default="results/study_adaptive")
    ap.add_argument("--simulate", action="store_true", help="simulated rounds instead of decoders (plumbing check)")
    args = ap.parse_args()
    args.policies = [p for p in args.policies.split(",") if p]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(0)
    frames = []
    pair = None
    if not args.simulate:
        import torch

        from harness.models import load_pair

        torch.set_num_threads(args.threads)
        pair = load_pair("tiny/target", drafts=["tiny/draft", "tiny/draft4"], device="cpu", progress=False)
    t_all = time.perf_counter()
    for dataset in args.datasets.split(","):
        if args.simulate:
            base = {"kjv_heldout": 0.6, "gsm8k": 0.5, "humaneval": 0.75}.get(dataset, 0.6)
            prompts = [[rng.randrange(4096) for _ in range(rng.randint(10, 60))] for _ in range(args.prompts + args.warmup)]
            world = {"beta": {tuple(p): min(0.95, max(0.05, rng.gauss(base, 0.12))) for p in prompts},
                     "costs": {"draft": 0.17, "draft4": 0.25}, "draft_gain": {"draft4": 0.05}, "b": 0.006,
                     "slope": 0.05}

            def make(arm, decoding, draft_id, world=world):
                return simulated_arm(arm, decoding, draft_id, rng, world)
        else:
            prompts = load_prompts(dataset, args.prompts + args.warmup, pair.tokenizer)

            def make(arm, decoding, draft_id, pair=pair):
                return build_arm(pair, arm, decoding, draft_id)
        for decoding in args.decoding.split(","):
            t0 = time.perf_counter()
            frames.append(run_dataset(dataset, decoding, prompts, args, make,
                                      selection=not (args.simulate or args.no_selection)))
            print(f"{dataset} {decoding}: {time.perf_counter() - t0:.1f}s", flush=True)
            pd.concat(frames, ignore_index=True).to_parquet(out / "rows.parquet")  # partial results survive
    print(f"total {time.perf_counter() - t_all:.1f}s", flush=True)
    rows = pd.concat(frames, ignore_index=True)
    rows.to_parquet(out / "rows.parquet")
    summary = summarise(rows)
    summary.to_csv(out / "summary.csv", index=False)
    plot_gamma_trace(rows, out / "gamma_trace.png")
    pd.set_option("display.width", 250)
    cols = ["dataset", "decoding", "arm", "tokens_per_s", "mean_gamma", "acceptance_rate", "vs_sd4_geo",
            "vs_best_fixed_geo", "vs_oracle_geo", "vs_hf_assisted_geo"]
    print(summary[[c for c in cols if c in summary]].to_string(index=False, float_format=lambda x: f"{x:.3f}"))


if __name__ == "__main__":
    main()
