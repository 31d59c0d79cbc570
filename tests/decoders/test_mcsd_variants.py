"""The mcsd paper's improved MCSD: target-initialised trees (§3.1), fork-shaped dynamic trees with early stop (§3.2-3.3).

Exactness of the lossless configurations against the enumerated target distribution (the toy pair of
``test_speculative``: a 4-token vocabulary, draft = perturbed target): the draft-initialised fork with
static or decision-model depth, one target-initialised token (with and without early stop, with a γ
policy that skips drafting). A decision model only chooses γ: a random decision model and a random
stub give the exact distribution too. Target initialisation with several roots is biased (§3.1):
detectably so on a toy pair whose draft is unrelated to the target (slow test). Greedy decoding is
token-identical to AR greedy.
"""

import pytest
import torch

from harness.methods import build_decoder
from harness.errors import ConfigError
from harness.models import TINY_PAIR_DIR
from harness.decoders.decision_model import DecisionModel, EarlyStopRule, topk_entropy_features
from harness.primitives.drafting import draft_tree
from harness.primitives.forward import CountedModel
from harness.primitives.kv_cache import cache_length
from harness.primitives.multi_candidate import TreeMasks
from harness.primitives.sampling import make_generator
from harness.primitives.spec_state import SpeculativeCaches
from harness.primitives.tree_attention import SlicedTreeMask, attention_inputs, fork_parents
from harness.primitives.tree import (
                                     tree_attention_mask, tree_position_ids, with_stem)
from harness.primitives.warping import Warp
from harness.testing import chi_square_pvalue, exact_sequence_distribution, toy_pair, total_variation, tv_bound
from harness.testing import near_pair
from harness.testing.checks import assert_cache_matches_scratch
from harness.testing.policies import ScriptedPolicy

WARP = Warp(temperature=0.9, top_k=3, top_p=0.95)
PROMPT, LENGTH, N = [1, 2, 3], 4, 1500
TINY_MISSING = not (TINY_PAIR_DIR / "target" / "model.safetensors").exists()


def _warp_params(warp: Warp) -> dict:
    return {"temperature": warp.temperature, "top_k": warp.top_k, "top_p": warp.top_p}


@pytest.fixture(scope="module")
def pair():
    return near_pair()


class RandomStop:
    """A stub stop hook: stops with probability 1/2 at every check, from its own generator (not the decoder's)."""

    needs_hidden = False

    def __init__(self, seed=0):
        self.g = torch.Generator().manual_seed(seed)
        self.checks = self.stops = 0

    def reset(self):
        self.checks = self.stops = 0

    def __call__(self, depth, hidden, logits):
        stop = bool(torch.rand(1, generator=self.g) < 0.5)
        self.checks += 1
        self.stops += int(stop)
        return stop


@pytest.fixture(scope="module")
def random_models(pair, tmp_path_factory):
    """Randomly initialised T1 and T2 models for the toy draft, saved where ``decision_model`` can name them,
    with a threshold at the 70 % quantile of their predictions so that they stop some rounds, not all."""
    folder = tmp_path_factory.mktemp("decision_models")
    ctx = torch.randint(0, 4, (64, 6), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        hidden = pair.draft.model(input_ids=ctx).last_hidden_state.reshape(-1, pair.draft.config.hidden_size)
        probs = WARP.probs(pair.draft(input_ids=ctx).logits.reshape(-1, 4))
    out = {}
    for kind, feats, top_k in (("t1", hidden, None), ("t2", topk_entropy_features(probs, 3), 3)):
        torch.manual_seed(3)
        model = DecisionModel(kind, feats.size(-1), top_k=top_k)
        model.set_standardisation(feats)
        with torch.no_grad():
            model.net[-1].weight.mul_(10)  # spread the predictions
        threshold = float(model.predict(feats).quantile(0.7))
        model.save(folder, f"random_{kind}")
        out[kind] = (str(folder / f"random_{kind}"), threshold)
    return out


def _decoder(pair, method, params, random_models=None, stop=None, policy=None):
    params = dict(params)
    if "decision_model" in params:
        params["decision_model"], params["decision_threshold"] = random_models[params["decision_model"]]
    dec = build_decoder(method, pair, gamma_policy=policy, **params, **_warp_params(WARP))
    if stop is not None:
        dec.stop = stop
    return dec


EXACT_CASES = {  # (method, params, stub stop hook, γ policy)
    "dynamic fork W=3 D=3, random T1 decision model": ("mcsd_dynamic", {"num_drafts": 3, "gamma": 3,
                                                                       "decision_model": "t1"}, None, None),
    "dynamic fork W=2 D=3, random stub": ("mcsd_dynamic", {"num_drafts": 2, "gamma": 3}, RandomStop, None),
    "target-init n_t=1 (1,3,2), random T2 decision model": ("mcsd_target_init", {"k_config": (1, 3, 2),
                                                                                 "decision_model": "t2"}, None, None),
    "target-init n_t=1 (1,2,1,1), random stub, γ policy 0/2/3": ("mcsd_target_init", {"k_config": (1, 2, 1, 1)},
                                                                RandomStop, lambda: ScriptedPolicy([0, 2, 3])),
    "target-init n_t=1 (1,2,2,4), random stub: dead nodes below the read level (k > top_k)": (
        "mcsd_target_init", {"k_config": (1, 2, 2, 4)}, RandomStop, None),
}


#: one case per round driver by default (the walk of a fork with an early-stop hook; the best-root walk of a
#: target-initialised tree under a γ policy), the others with -m slow
DEFAULT_CASES = ("dynamic fork W=3 D=3, random T1 decision model", "target-init n_t=1 (1,2,1,1), random stub, γ policy 0/2/3")


@pytest.mark.parametrize("case", [c if c in DEFAULT_CASES else pytest.param(c, marks=pytest.mark.slow)
                                  for c in EXACT_CASES])
def test_lossless_configurations_follow_exact_target_distribution(pair, random_models, case):
    method, params, stop, policy = EXACT_CASES[case]
    dec = _decoder(pair, method, params, random_models, stop() if stop else None, policy() if policy else None)
    exact = exact_sequence_distribution(pair.target, PROMPT, LENGTH, WARP)
    samples, accepted, stops, rounds = [], 0, 0, 0
    for s in range(N):
        gen = dec.generate(PROMPT, LENGTH, seed=s)
        samples.append(tuple(gen.output_ids))
        accepted += gen.stats.accepted_tokens
        stops += gen.stats.extras.early_stops
        rounds += gen.stats.rounds
    tv, bound = total_variation(samples, exact), tv_bound(exact, N)
    assert tv < bound, (tv, bound)
    assert chi_square_pvalue(samples, exact) > 1e-4
    assert accepted > N  # drafts were accepted
    assert 0.05 * rounds < stops < 0.95 * rounds  # the decision really changed γ, and not always


@pytest.mark.slow
def test_target_init_single_root_with_eos_is_exact():
    pair = near_pair(eos_token_id=0)
    exact = exact_sequence_distribution(pair.target, PROMPT, LENGTH, WARP, eos_token_id=0)
    dec = build_decoder("mcsd_target_init", pair, k_config=(1, 2, 1), **_warp_params(WARP))
    samples = [tuple(dec.generate(PROMPT, LENGTH, seed=s).output_ids) for s in range(1000)]
    assert total_variation(samples, exact) < tv_bound(exact, 1000)
    assert chi_square_pvalue(samples, exact) > 1e-4


@pytest.mark.slow
def test_target_init_with_two_roots_is_detectably_biased():
    """§3.1: selecting among n_t = 2 target tokens by accepted length biases the output; the same pair with
    n_t = 1 passes (the control). The draft is an unrelated toy model, so acceptance differs by token."""
    pair, warp, length, n = toy_pair(vocab_size=5), Warp(1.0), 3, 3000
    exact = exact_sequence_distribution(pair.target, PROMPT, length, warp)
    results = {}
    for n_t in (1, 2):
        dec = build_decoder("mcsd_target_init", pair, k_config=(n_t, 2, 1), temperature=1.0, top_k=0, top_p=1.0)
        samples = [tuple(dec.generate(PROMPT, length, seed=s).output_ids) for s in range(n)]
        results[n_t] = (total_variation(samples, exact), chi_square_pvalue(samples, exact))
    bound = tv_bound(exact, n)
    assert results[1][0] < bound and results[1][1] > 1e-4
    assert results[2][0] > bound and results[2][1] < 1e-6, results


@pytest.mark.parametrize("method,params", [
    ("mcsd_dynamic", {}), ("mcsd_dynamic", {"num_drafts": 3, "gamma": 4}),
    ("mcsd_target_init", {}), ("mcsd_target_init", {"k_config": (3, 2, 1)}),
])
@pytest.mark.parametrize("with_stop", [False, True])
def test_greedy_is_token_identical_to_ar_greedy_on_toy_pairs(method, params, with_stop):
    for p in (near_pair(vocab_size=7, noise=0.2), toy_pair(vocab_size=7), near_pair(vocab_size=7, eos_token_id=3)):
        ar = build_decoder("ar_greedy", p)
        dec = build_decoder(method, p, temperature=0.0, **params)
        if with_stop:
            dec.stop = RandomStop(1)
        for prompt in ([1], [2, 5, 1], [6, 0, 3, 3, 4]):
            assert dec.generate(prompt, 20).output_ids == ar.generate(prompt, 20).output_ids, (method, prompt)


@pytest.mark.parametrize("method,params", [("mcsd_dynamic", {"num_drafts": 3, "gamma": 3}),
                                           ("mcsd_target_init", {"k_config": (2, 2, 1)})])
def test_statistics_follow_the_record_contract(method, params):
    pair = toy_pair(vocab_size=6, sharpness=1.5)
    dec = build_decoder(method, pair, temperature=1.0, top_k=0, top_p=1.0, **params)
    dec.stop = RandomStop(2)
    st = dec.generate([1, 2, 3], 30, seed=0).stats
    target_init = method == "mcsd_target_init"
    depth = 2 if target_init else 3
    assert st.target_calls == st.rounds + (1 if target_init else 0)  # §3.1's prefill: one extra target call
    assert st.rounds == len(st.accept_lengths) == len(st.round_gammas) > 0
    assert st.accepted_tokens == sum(st.accept_lengths) - st.rounds
    assert st.draft_positions == sum(st.round_gammas)
    assert all(1 <= g <= depth for g in st.round_gammas)
    assert sum(g < depth for g in st.round_gammas[:-1]) <= st.extras.early_stops <= st.extras.decision_checks
    assert st.extras.early_stops > 0
    per_level = [2 * 2, 2 * 2 * 1] if target_init else [3, 3, 3]  # draft tokens per level (roots not counted)
    full = sum(sum(per_level[:g]) for g in st.round_gammas)
    if target_init:  # a round has fewer roots where r (a residual after a rejection) has fewer than n_t tokens
        assert full / 2 <= st.draft_nodes <= full
    else:
        assert st.draft_nodes == full
    if target_init:
        assert 0 <= st.extras.other_root_wins <= st.rounds


def test_dynamic_round_gammas_reach_the_policy():
    """The realised γ (after an early stop) is what the policy observes, not the depth it asked for."""
    pair = toy_pair(vocab_size=6)
    policy = ScriptedPolicy([3])
    dec = build_decoder("mcsd_dynamic", pair, num_drafts=2, gamma=3, gamma_policy=policy, temperature=1.0)
    dec.stop = RandomStop(4)
    st = dec.generate([1, 2], 25, seed=1).stats
    assert [o.gamma for o in policy.seen] == st.round_gammas and min(st.round_gammas) < 3


def _variant(pair, target_init: bool, k_config):
    """mcsd_target_init with ``k_config``, or mcsd_dynamic's fork of the same widths (k_config (W, 1, …, 1))."""
    if target_init:
        return build_decoder("mcsd_target_init", pair, k_config=k_config, **_warp_params(WARP))
    return build_decoder("mcsd_dynamic", pair, num_drafts=k_config[0], gamma=len(k_config), **_warp_params(WARP))


@pytest.mark.parametrize("target_init", [False, True])
def test_kv_rollback_equals_from_scratch_forward(pair, target_init):
    dec = _variant(pair, target_init, (2, 2, 1) if target_init else (3, 1, 1))
    dec.stop = stop = RandomStop(5)
    prompt = torch.tensor([[1, 2, 3, 0, 2]])
    spec = dec.start(prompt, make_generator(3, "cpu"))
    committed = prompt[0].tolist()
    for _ in range(12):
        committed += dec.round(spec, dec.params.gamma).committed
        caches = spec.caches
        assert_cache_matches_scratch(dec.draft, caches.draft_cache, caches.draft_pending, committed)
        assert_cache_matches_scratch(dec.target, caches.target_cache, caches.target_pending, committed)
        if target_init:  # nothing pending for the target: its cache holds the whole committed sequence
            assert caches.target_pending.size(1) == 0
    assert stop.stops > 0


@pytest.mark.parametrize("target_init", [False, True])
def test_sliced_masks_change_nothing(pair, target_init):
    """Same seed with and without the sliced masks: the same tokens (the slices equal the rebuilt masks)."""
    out = []
    for use_masks in (True, False):
        dec = _variant(pair, target_init, (3, 2, 1) if target_init else (3, 1, 1))
        if not use_masks:
            dec.masks, dec.verify_mask = TreeMasks(), None
        spec = dec.start(torch.tensor([[1, 2, 3]]), make_generator(7, "cpu"))
        out.append([dec.round(spec, dec.params.gamma).committed for _ in range(8)])
    assert out[0] == out[1]


def test_attention_inputs_slice_when_they_can_and_build_otherwise():
    sliced = SlicedTreeMask(fork_parents(3, 3), capacity=16)
    full = fork_parents(3, 2)
    mask, pos = attention_inputs(full, 10, stem_len=1, sliced=sliced)
    assert mask.untyped_storage().data_ptr() == sliced.mask(2, 10, 1).untyped_storage().data_ptr()  # a view
    short = full[:-1]  # a level left short (fewer valid children): not a truncation of the fork
    assert sliced.depth_of(short) is None and sliced.depth_of(full) == 2 and sliced.depth_of([]) is None
    for parents in (full, short):
        m, p = attention_inputs(parents, 10, stem_len=1, sliced=sliced)
        assert torch.equal(m, tree_attention_mask(with_stem(1, parents), 10))
        assert torch.equal(p, tree_position_ids(with_stem(1, parents), 10))
        m, p = attention_inputs(parents, 10, first_node=3, sliced=sliced)
        assert torch.equal(m, tree_attention_mask(parents, 10)[:, :, 3:])
    m16, _ = attention_inputs(full, 10, sliced=sliced, dtype=torch.float16)  # another dtype: built, not sliced
    assert m16.dtype == torch.float16
    with pytest.raises(ValueError, match="first_node"):
        attention_inputs(full, 10, stem_len=1, first_node=3)


def test_draft_stop_hook_is_asked_after_each_fed_level(pair):
    class Recording:
        needs_hidden = True

        def __init__(self, stop_at):
            self.calls, self.stop_at = [], stop_at

        def __call__(self, depth, hidden, logits):
            self.calls.append((depth, tuple(hidden.shape), tuple(logits.shape)))
            return depth == self.stop_at

    target, draft = CountedModel(pair.target, 4), CountedModel(pair.draft, 4)
    for stop_at in (1, 2, None):
        caches = SpeculativeCaches(target, draft, torch.tensor([[1, 2, 3]]))
        hook = Recording(stop_at)
        dtree = draft_tree(draft, caches, [3, 1, 1, 1], WARP, make_generator(0, "cpu"), replacement=False, stop=hook)
        h = pair.draft.config.hidden_size
        expect_levels = stop_at or 4
        assert hook.calls == [(d, (3, h), (3, 4)) for d in range(1, min(expect_levels, 3) + 1)][:3]
        assert len(dtree.parents) == 3 * expect_levels
        assert dtree.num_fed == (3 * expect_levels if stop_at else 9)
        assert cache_length(caches.draft_cache) == 3 + dtree.num_fed


def test_counted_model_returns_the_last_hidden_state(pair):
    model = CountedModel(pair.draft, 4)
    ids = torch.tensor([[1, 2, 3, 0]])
    logits, hidden = model(ids, return_hidden=True)
    torch.testing.assert_close(logits, model(ids), atol=0, rtol=0)
    with torch.no_grad():
        torch.testing.assert_close(hidden, pair.draft.model(input_ids=ids).last_hidden_state)
    assert model.calls == 2


def test_early_stop_rule_uses_the_models_features():
    torch.manual_seed(0)
    t2 = DecisionModel("t2", 4, top_k=3)
    logits = torch.randn(5, 6)
    rule = EarlyStopRule(t2, 1.0, Warp(0.7))
    assert rule(1, None, logits) and not rule.needs_hidden  # every prediction < 1
    assert (rule.checks, rule.stops) == (1, 1)
    assert not EarlyStopRule(t2, 0.0, Warp(0.0))(1, None, logits)  # greedy: the plain softmax's features
    t1 = EarlyStopRule(DecisionModel("t1", 8), 1.0)
    assert t1.needs_hidden and t1(2, torch.randn(5, 8), logits)
    with pytest.raises(ConfigError, match="threshold"):
        EarlyStopRule(t2, 1.5)


@pytest.mark.parametrize("method,params,match", [
    ("mcsd_target_init", {"k_config": [3]}, "k_config"),
    ("mcsd_target_init", {"k_config": [2, 0, 1]}, "k_config"),
    ("mcsd_dynamic", {"num_drafts": 0}, "num_drafts"),
    ("mcsd_dynamic", {"gamma": 0}, "gamma"),
    ("mcsd_dynamic", {"decision_threshold": 1.5}, "threshold"),
    ("mcsd_dynamic", {"decision_model": "no_such_model"}, "not found"),
    ("mcsd_target_init", {"decision_model": "t1"}, "tiny/draft"),  # the toy pair's draft has no committed model
    ("mcsd_dynamic", {"decision_model": "tiny_t1_temp1"}, "hidden size"),  # T1 of the tiny draft on the toy draft
])
def test_bad_parameters_are_clear_errors(pair, method, params, match):
    with pytest.raises(ConfigError, match=match):
        build_decoder(method, pair, **params)


@pytest.mark.skipif(TINY_MISSING, reason="tiny pair not trained yet")
@pytest.mark.parametrize("method,params", [("mcsd_dynamic", {"num_drafts": 4, "decision_model": "t1"}),
                                           ("mcsd_target_init", {"decision_model": "t2"})])
def test_greedy_with_decision_models_is_token_identical_to_ar_greedy_on_tiny_pair(tiny_pair, heldout_prompts,
                                                                                 tiny_ar_greedy, method, params):
    """The committed T = 0 decision models stop some rounds early; the output stays the target's greedy one."""
    dec = build_decoder(method, tiny_pair, decoding="greedy", **params)
    assert dec.stop.model.info["name"].endswith("_temp0")
    checks = 0
    for ids, ref in zip(heldout_prompts, tiny_ar_greedy[:4]):
        gen = dec.generate(ids, 40)
        assert gen.output_ids == ref
        assert gen.stats.target_calls == gen.stats.rounds + (1 if method == "mcsd_target_init" else 0)
        checks += gen.stats.extras.decision_checks
    assert checks > 0


def test_target_init_roots_r_lacks_stay_dead_and_never_win(pair):
    """n_t = 3 roots from an r with one token (top-k 1): two roots are dead, kept childless in the tree with no read
    of their own (issue 28 item 2); the real root always wins, so the output is the target's greedy output and
    ``other_root_wins`` stays 0; the round reads at most its draft levels with several children and the walk."""
    from harness.testing.host_sync import counting

    prompt = [3, 1, 2, 1, 0]
    want = build_decoder("ar_greedy", pair, decoding="greedy").generate(prompt, 24, seed=0).output_ids
    dec = build_decoder("mcsd_target_init", pair, decoding="sampling", k_config=(3, 2, 1), temperature=1.0, top_k=1)
    for seed in range(3):
        with counting() as c:
            gen = dec.generate(prompt, 24, seed=seed)
        assert gen.output_ids == want
        assert gen.stats.extras.other_root_wins == 0
        assert c.by_kind["read"] <= 2 * gen.stats.rounds + 2, dict(c.by_name)
