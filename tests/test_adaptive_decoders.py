"""γ policies and draft selection wired into the decoders (issue 11 items 1-2; seed 004 §4-5, App. C.4).

* every policy × every lossless decoder keeps the output distributed exactly as the target's (toy
  Llama pair from tests/test_speculative.py, enumerated target distribution, TV bound + χ²), with γ
  really moving between 0 (a plain target step) and 3;
* a policy that peeks at the current round's outcome (a test double: it dry-runs the coming round
  from snapshots of the caches and the random stream and keeps a γ that will be fully accepted)
  fails the same test;
* the config path: ``method.gamma_policy`` and its keys on every decoder that drafts with depth,
  unknown names and bad values are ConfigErrors naming the valid choices, the Hydra schema has them;
* draft selection (``draft_selection=ols``) fits on the first r prompts, then picks per prompt and
  records the choice, predicted and realised α and the fit's R².
"""
import copy
import dataclasses

import pytest
import torch

from harness.adaptive.policies import POLICIES
from harness.adaptive.testing import PeekingPolicy
from harness.decoders import build_decoder
from harness.decoders.base import SpeculativeParams, registry
from harness.errors import ConfigError
from harness.models import ModelPair
from harness.testing import (ToyTokenizer, chi_square_pvalue, exact_sequence_distribution, near_pair, toy_model, toy_pair,
                             total_variation, tv_bound)
from harness.primitives.warping import Warp

WARP = Warp(temperature=0.9, top_k=3, top_p=0.95)
PROMPT, LENGTH, N = [1, 2, 3], 4, 800
#: lossless decoders that draft with depth, and parameters that make their rounds cheap on the toy pair
LOSSLESS = {
    "sd": {"gamma": 2},
    "specinfer": {"gamma": 2, "num_drafts": 2},
    "spectr": {"gamma": 2, "num_drafts": 2},
    "mcsd": {"k_config": (2, 2)},
    "mcsd_dynamic": {"gamma": 2, "num_drafts": 2},
    "mcsd_target_init": {"k_config": (1, 2, 1, 1)},  # n_t = 1: exact (seed 003 §3.1)
}
POLICY_RANGE = {"gamma_min": 0, "gamma_max": 3}



@pytest.fixture(scope="module")
def pair():
    return near_pair()


@pytest.fixture(scope="module")
def exact(pair):
    return exact_sequence_distribution(pair.target, PROMPT, LENGTH, WARP)


def _warp():
    return {"temperature": WARP.temperature, "top_k": WARP.top_k, "top_p": WARP.top_p}


def _samples(dec, n=N):
    out, gammas = [], set()
    for s in range(n):
        gen = dec.generate(PROMPT, LENGTH, seed=s)
        out.append(tuple(gen.output_ids))
        gammas.update(gen.stats.round_gammas)
    return out, gammas


def _matrix():
    """Every adaptive policy × every lossless decoder (``fixed`` is the existing exactness tests'); the sd
    row and the online column run by default, the rest with ``-m slow`` (≈ 5 s each on one core)."""
    for method in LOSSLESS:
        for policy in POLICIES:
            if policy == "fixed":
                continue
            quick = method == "sd" or policy == "online"
            yield pytest.param(method, policy, marks=() if quick else pytest.mark.slow, id=f"{method}-{policy}")


@pytest.mark.parametrize("method,policy", list(_matrix()))
def test_every_policy_keeps_every_lossless_decoder_exact(pair, exact, method, policy):
    dec = build_decoder(method, pair, gamma_policy=policy, **LOSSLESS[method], **POLICY_RANGE, **_warp())
    assert type(dec.gamma_policy) is POLICIES[policy]
    samples, gammas = _samples(dec)
    tv, bound = total_variation(samples, exact), tv_bound(exact, N)
    assert tv < bound, (tv, bound)
    assert chi_square_pvalue(samples, exact) > 1e-4
    if policy != "online":  # online may settle on one γ for this toy cost model
        assert len(gammas) >= 2, gammas  # γ really moved


def _peeking_loop(real_loop):
    """The decoders' speculative_loop, with the policy given a ``dry_run(γ)`` that runs the coming round on
    copies of the caches and the random stream (what a cheating policy would need) and returns its accepted
    drafts; nothing of the dry run survives."""
    def loop(step, policy, *args, **kwargs):
        names = step.__code__.co_freevars
        cells = dict(zip(names, step.__closure__))

        def dry_run(gamma):
            caches, gen = cells["caches"].cell_contents, cells["generator"].cell_contents
            state = gen.get_state()
            cells["caches"].cell_contents = copy.deepcopy(caches)
            try:
                return step(gamma).accepted
            finally:
                cells["caches"].cell_contents = caches
                gen.set_state(state)
        policy.dry_run = dry_run
        return real_loop(step, policy, *args, **kwargs)
    return loop


@pytest.mark.parametrize("method", ["sd", "mcsd"])
def test_a_policy_peeking_at_the_current_round_fails_the_exactness_test(pair, exact, method, monkeypatch):
    import importlib

    module = importlib.import_module(registry()[method].__module__)
    monkeypatch.setattr(module, "speculative_loop", _peeking_loop(module.speculative_loop))
    params = {"gamma": 1} if method == "sd" else {"k_config": (2, 1, 1)}
    dec = build_decoder(method, pair, gamma_policy=PeekingPolicy(gammas=(1, 3)), **params, **_warp())
    samples, gammas = _samples(dec)
    assert {1, 3} <= gammas  # (2: clipped to the tokens still needed)
    tv, bound = total_variation(samples, exact), tv_bound(exact, N)
    assert tv > bound or chi_square_pvalue(samples, exact) < 1e-4, (tv, bound)


def test_the_peeking_loop_itself_changes_nothing(pair, exact, monkeypatch):
    """The dry runs leave no trace: with an honest policy under the peeking loop the output is still exact."""
    import harness.decoders.sd as sd

    monkeypatch.setattr(sd, "speculative_loop", _peeking_loop(sd.speculative_loop))

    class DryRunThenFixed(PeekingPolicy):
        def next_gamma(self):
            self.dry_run(3)  # look, but do not use it
            return 2
    dec = build_decoder("sd", pair, gamma_policy=DryRunThenFixed(), **_warp())
    samples, _ = _samples(dec)
    assert chi_square_pvalue(samples, exact) > 1e-4


# ---------------------------------------------------------------- the config path

DEPTH_DECODERS = ("sd", "specinfer", "spectr", "mcsd", "mcsd_dynamic", "mcsd_target_init", "mtad", "bild", "typical")


def test_every_decoder_with_depth_has_the_shared_params():
    for method in DEPTH_DECODERS:
        assert issubclass(registry()[method].Params, SpeculativeParams), method
    defaults = {}
    for method in DEPTH_DECODERS:
        for f in dataclasses.fields(registry()[method].Params):
            if f.name in {g.name for g in dataclasses.fields(SpeculativeParams)}:
                assert defaults.setdefault(f.name, f.default) == f.default, f.name  # one default everywhere
    assert defaults["gamma_policy"] == "fixed" and defaults["q_warmup_trials"] == 25 and defaults["acc_history"] == 6


def test_mcsd_dynamic_early_stop_params_inherit_the_base():
    from harness.decoders.mcsd_dynamic import EarlyStopParams

    assert issubclass(EarlyStopParams, SpeculativeParams)


@pytest.mark.parametrize("params,match", [
    ({"gamma_policy": "bogus"}, "fixed, online, fsm, cache_fsm, qlearning, hf_heuristic"),
    ({"gamma_policy": "online", "acc_max": 1.5}, "acc_max"),
    ({"gamma_policy": "online", "acc_estimator": "x"}, "eq2 | mle"),
    ({"gamma_policy": "qlearning", "q_reward": "x"}, "acceptance | throughput"),
    ({"gamma_policy": "fsm", "gamma_max": 0}, "gamma_max"),
    ({"draft_selection": "magic"}, "none, ols"),
    ({"selection_fit_prompts": 1}, "selection_fit_prompts"),
])
def test_bad_policy_config_is_a_clear_error(params, match):
    with pytest.raises(ConfigError, match=match):
        build_decoder("sd", toy_pair(), **params)


def test_policy_keys_reach_the_policy_and_gamma_is_its_start():
    dec = build_decoder("sd", toy_pair(), gamma=3, gamma_policy="online", acc_history=9, acc_max=0.9,
                        acc_estimator="mle", gamma_max=6)
    p = dec.gamma_policy
    assert (p.h, p.acc_max, p.estimator, p.gamma_init, p.gamma_max) == (9, 0.9, "mle", 3, 6)
    assert dec.sync_timing  # online reads measured times
    q = build_decoder("specinfer", toy_pair(), gamma_policy="qlearning", q_warmup_trials=3, q_reward="throughput")
    assert (q.gamma_policy.warmup_trials, q.gamma_policy.reward) == (3, "throughput")
    assert build_decoder("sd", toy_pair(), gamma_policy="fixed", gamma=5).gamma_policy.gamma == 5


def test_tree_depth_adapts_beyond_and_below_the_k_config():
    """mcsd: deeper rounds continue as width-1 chains (App. C.4); mcsd_target_init is capped at its tree."""
    from test_stats import Recorder

    pair = toy_pair(vocab_size=7)
    dec = build_decoder("mcsd", pair, k_config=(2, 2), gamma_policy=Recorder([4, 1]), temperature=0)
    gen = dec.generate([3, 1], 12)
    assert 4 in gen.stats.round_gammas and 1 in gen.stats.round_gammas
    assert gen.output_ids == build_decoder("ar_greedy", pair).generate([3, 1], 12).output_ids
    capped = build_decoder("mcsd_target_init", pair, k_config=(1, 2, 1), gamma_policy="fsm", gamma_max=8)
    assert capped.gamma_policy.gamma_max == 2
    dyn = build_decoder("mcsd_dynamic", pair, gamma=2, num_drafts=2, gamma_policy="fsm", gamma_max=5, temperature=0)
    gen = dyn.generate([3, 1], 24)
    assert max(gen.stats.round_gammas) <= 5


def test_hydra_schema_has_the_policy_keys():
    from harness.configs import method_schema

    names = {f.name for f in dataclasses.fields(method_schema(registry()["sd"]))}
    assert {"gamma_policy", "gamma_min", "gamma_max", "acc_history", "q_warmup_trials", "draft_selection"} <= names


def test_decoders_without_depth_reject_a_policy_and_selection():
    pair = toy_pair()
    with pytest.raises(ConfigError, match="gamma_policy"):
        build_decoder("ar_sampling", pair, gamma_policy="online")


# ---------------------------------------------------------------- draft selection (§5)

def multi_pair() -> ModelPair:
    target = toy_model(5, seed=0, hidden=24, layers=2)
    small = toy_model(5, seed=1, hidden=16, layers=1)
    close = copy.deepcopy(target)
    with torch.no_grad():
        close.lm_head.weight.add_(0.05 * torch.randn(close.lm_head.weight.shape,
                                                     generator=torch.Generator().manual_seed(2)))
    return ModelPair(target=target, draft=small, tokenizer=ToyTokenizer(5, None), name="toy-multi",
                     target_id="toy/target", draft_id="small", drafts={"small": small, "close": close})


def test_draft_selection_fits_then_chooses_and_records():
    pair = multi_pair()
    dec = build_decoder("sd", pair, draft_selection="ols", selection_fit_prompts=4, selection_features=4,
                        temperature=0)
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, 5, (int(n),), generator=g).tolist() for n in torch.randint(3, 12, (10,), generator=g)]
    with pytest.raises(ConfigError, match="prepare"):
        dec.generate(prompts[0], 8)
    dec.prepare(prompts)
    ar = build_decoder("ar_greedy", pair)
    records = []
    for i, p in enumerate(prompts):
        gen = dec.generate(p, 10)
        assert gen.output_ids == ar.generate(p, 10).output_ids  # greedy: whatever the draft, lossless
        records.append(gen.selection)
    assert [r["phase"] for r in records] == ["fit"] * 4 + ["select"] * 6
    assert all(r["draft"] == "small" and r["fit_extra_time_s"] > 0 for r in records[:4])
    chosen = records[4:]
    assert all(r["draft"] in ("small", "close") and 0 <= r["alpha_predicted"] <= 1 for r in chosen)
    assert all(0 <= r["alpha_realised"] <= 1 and r["c"] > 0 for r in chosen)
    assert all(r["fit_r2"] <= 1 + 1e-9 or r["fit_r2"] != r["fit_r2"] for r in chosen)  # NaN: α constant in the fit
    assert dec.selection.cheapest == "small"  # perplexity feature from the cheapest draft
    pol = dec.selection.policies
    assert pol["small"] is not pol["close"] and dec.gamma_policy in pol.values()  # one policy per draft
    assert all(r["feature_time_s"] > 0 for r in records)
    assert set(dec.selection.describe()["costs"]) == {"small", "close"}


def test_draft_selection_record_fields_reach_the_record():
    from types import SimpleNamespace

    from harness.record import build_record
    from harness.stats import GenerationStats

    gen = SimpleNamespace(stats=GenerationStats(), stopped_by_eos=False,
                          selection={"draft": "close", "alpha_predicted": 0.5})
    rec = build_record(cell_id="c", index=0, example=SimpleNamespace(id="e", meta={}), prompt_ids=[1], generation=gen,
                       output_text="", prompt_text="", output_ppl=1.0, metrics={}, energy={})
    flat = rec.flat()  # a Record in sections; the file's flat names only at the edge
    assert flat["selection.draft"] == "close" and flat["selection.alpha_predicted"] == 0.5


def test_draft_selection_needs_several_drafts_and_a_method_that_can_switch():
    with pytest.raises(ConfigError, match="several drafts"):
        build_decoder("sd", toy_pair(), draft_selection="ols")
    with pytest.raises(ConfigError, match="cannot switch drafts"):
        build_decoder("mcsd_dynamic", multi_pair(), draft_selection="ols", gamma=2, num_drafts=2)
