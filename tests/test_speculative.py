"""Speculative decoders (sd, specinfer, spectr, mcsd, hf_assisted): lossless, one target call per round.

Exactness: on a toy Llama with a 4-token vocabulary whose draft is a perturbed copy of the
target (acceptance ≈ 0.7, so long accepted paths, bonus tokens and tree branches all occur),
the empirical distribution of generated sequences matches the exact warped target
distribution (enumerated), by a TV bound and a chi-square test.
"""
import copy
import dataclasses

import pytest
import torch

from harness.decoders import build_decoder
from harness.errors import ConfigError
from harness.models import TINY_PAIR_DIR, ModelPair
from harness.primitives.acceptance import (k_sequential_select, multi_step_select,
                                           multi_step_select_without_replacement)
from harness.primitives.forward import CountedModel
from harness.primitives.kv_cache import cache_length
from harness.primitives.sampling import make_generator
from harness.primitives.spec_loop import chain_step, tree_step
from harness.primitives.spec_state import SpeculativeCaches
from harness.primitives.warping import Warp
from harness.testing import (ToyTokenizer, chi_square_pvalue, exact_sequence_distribution, near_pair, toy_model, toy_pair,
                             total_variation, tv_bound)

SPECULATIVE = ("sd", "specinfer", "spectr", "mcsd")
WARP = Warp(temperature=0.9, top_k=3, top_p=0.95)
PROMPT, LENGTH, N = [1, 2, 3], 4, 1500



@pytest.fixture(scope="module")
def pair():
    return near_pair()


def _warp_params(warp: Warp) -> dict:
    return {"temperature": warp.temperature, "top_k": warp.top_k, "top_p": warp.top_p}


@pytest.mark.parametrize("method,params", [
    ("sd", {"gamma": 2}),
    ("sd", {"gamma": 3}),
    ("specinfer", {"gamma": 3, "num_drafts": 3}),
    ("spectr", {"gamma": 3, "num_drafts": 3}),
    ("mcsd", {"k_config": (3, 2, 1)}),
    ("mcsd", {"k_config": (2, 2, 2), "replacement": True}),
])
def test_output_follows_exact_target_distribution(pair, method, params):
    exact = exact_sequence_distribution(pair.target, PROMPT, LENGTH, WARP)
    decoder = build_decoder(method, pair, **params, **_warp_params(WARP))
    samples, accepted = [], 0
    for s in range(N):
        gen = decoder.generate(PROMPT, LENGTH, seed=s)
        samples.append(tuple(gen.output_ids))
        accepted += gen.stats.accepted_tokens
    tv, bound = total_variation(samples, exact), tv_bound(exact, N)
    assert tv < bound, (tv, bound)
    assert chi_square_pvalue(samples, exact) > 1e-4
    assert accepted > N  # drafts really were accepted (more than one per sequence on average)
    draft_exact = exact_sequence_distribution(pair.draft, PROMPT, LENGTH, WARP)  # what a broken rule would emit
    draft_tv = 0.5 * sum(abs(draft_exact.get(k, 0.0) - exact.get(k, 0.0)) for k in set(draft_exact) | set(exact))
    assert draft_tv > 3 * bound


@pytest.mark.parametrize("method", ["sd", "mcsd"])
def test_output_with_eos_follows_exact_distribution(method):
    """EOS inside an accepted draft or as the correction token ends the output there."""
    pair = near_pair(eos_token_id=0)
    exact = exact_sequence_distribution(pair.target, PROMPT, LENGTH, WARP, eos_token_id=0)
    assert sum(v for k, v in exact.items() if len(k) < LENGTH) > 0.2  # EOS is common
    params = {"gamma": 3} if method == "sd" else {"k_config": (2, 2, 1)}
    decoder = build_decoder(method, pair, **params, **_warp_params(WARP))
    samples = [tuple(decoder.generate(PROMPT, LENGTH, seed=s).output_ids) for s in range(1000)]
    assert total_variation(samples, exact) < tv_bound(exact, 1000)
    assert chi_square_pvalue(samples, exact) > 1e-4


@pytest.mark.parametrize("method", SPECULATIVE + ("hf_assisted",))
def test_greedy_is_token_identical_to_ar_greedy_on_toy_pairs(method):
    for p in (near_pair(vocab_size=7, noise=0.2), toy_pair(vocab_size=7), near_pair(vocab_size=7, eos_token_id=3)):
        ar = build_decoder("ar_greedy", p)
        decoder = build_decoder(method, p, temperature=0.0)
        for prompt in ([1], [2, 5, 1], [6, 0, 3, 3, 4]):
            ref = ar.generate(prompt, 20).output_ids
            gen = decoder.generate(prompt, 20)
            assert gen.output_ids == ref, (method, prompt)


@pytest.mark.parametrize("method,params", [("sd", {"gamma": 4}), ("specinfer", {}), ("spectr", {}), ("mcsd", {}),
                                           ("sd", {"gamma": 3, "temperature": 0.0}),
                                           ("mcsd", {"temperature": 0.0})])
def test_one_target_forward_per_iteration(pair, method, params):
    decoder = build_decoder(method, pair, **params)
    gamma = params.get("gamma", 4)
    for seed, max_new in ((0, 17), (1, 30), (2, 1)):
        gen = decoder.generate([1, 2, 3, 0], max_new, seed=seed)
        st = gen.stats
        assert len(gen.output_ids) == max_new
        assert st.target_calls == st.rounds == len(st.accept_lengths)  # prompt prefilled in round 1
        assert st.draft_calls <= gamma * st.rounds  # one draft forward per tree level
        assert st.accepted_tokens == sum(st.accept_lengths) - st.rounds
        assert sum(st.accept_lengths) >= max_new
        assert st.draft_nodes >= st.draft_calls


@torch.no_grad()
def _assert_cache_matches_scratch(model: CountedModel, cache, pending: torch.Tensor, committed: list[int]):
    """Cache + pending = committed, and the next forward equals a from-scratch forward."""
    assert cache_length(cache) + pending.size(1) == len(committed)
    assert pending[0].tolist() == committed[len(committed) - pending.size(1):]
    probe = copy.deepcopy(cache)
    ours = model(pending, probe)[0]
    ref = model.model(input_ids=torch.tensor([committed])).logits[0, -pending.size(1):].float()
    torch.testing.assert_close(ours, ref, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("kind", ["chain", "multi_step", "k_sequential", "mcsd", "greedy_tree"])
def test_kv_rollback_equals_from_scratch_forward(pair, kind):
    target, draft = CountedModel(pair.target, 4), CountedModel(pair.draft, 4)
    prompt = torch.tensor([[1, 2, 3, 0, 2]])
    caches = SpeculativeCaches(target, draft, prompt)
    committed = prompt[0].tolist()
    g = make_generator(3, "cpu")
    warp = Warp(0.0) if kind == "greedy_tree" else WARP
    saw_two_pending = False
    for _ in range(12):
        if kind == "chain":
            res = chain_step(target, draft, caches, 3, warp, g)
        elif kind == "mcsd":
            res = tree_step(target, draft, caches, [3, 2, 2], warp, g, multi_step_select_without_replacement,
                            replacement=False)
        elif kind == "greedy_tree":
            res = tree_step(target, draft, caches, [3, 2, 1], warp, g, multi_step_select)
        else:
            rule = {"multi_step": multi_step_select, "k_sequential": k_sequential_select}[kind]
            res = tree_step(target, draft, caches, [3, 1, 1], warp, g, rule)
        committed += res.tokens
        saw_two_pending |= caches.draft_pending.size(1) == 2
        _assert_cache_matches_scratch(target, caches.target_cache, caches.target_pending, committed)
        _assert_cache_matches_scratch(draft, caches.draft_cache, caches.draft_pending, committed)
    assert saw_two_pending  # the whole draft was accepted at least once: its last token was pending


TINY_MISSING = not (TINY_PAIR_DIR / "target" / "model.safetensors").exists()


@pytest.fixture(scope="module")
def tiny_ar_greedy(tiny_pair, heldout_prompts):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    ar = build_decoder("ar_greedy", tiny_pair)
    refs = [ar.generate(ids, 40).output_ids for ids in heldout_prompts]
    torch.set_num_threads(threads)
    return refs


@pytest.mark.skipif(TINY_MISSING, reason="tiny pair not trained yet")
@pytest.mark.parametrize("method,num_prompts", [("sd", 24), ("mcsd", 6), ("hf_assisted", 8)])
def test_greedy_is_token_identical_to_ar_greedy_on_tiny_pair(tiny_pair, heldout_prompts, tiny_ar_greedy, method,
                                                             num_prompts):
    decoder = build_decoder(method, tiny_pair, temperature=0.0)
    accepted = 0
    for ids, ref in list(zip(heldout_prompts, tiny_ar_greedy))[:num_prompts]:
        gen = decoder.generate(ids, 40)
        assert gen.output_ids == ref
        assert gen.stats.target_calls == gen.stats.rounds
        accepted += gen.stats.accepted_tokens
    assert accepted > 0


def test_hf_assisted_records_stats_and_schedule(pair):
    decoder = build_decoder("hf_assisted", pair, gamma=3, **_warp_params(WARP))
    before = pair.draft.generation_config.to_dict()
    gen = decoder.generate([1, 2, 3], 25, seed=0)
    assert pair.draft.generation_config.to_dict() == before  # the schedule is set for the call only
    st = gen.stats
    assert len(gen.output_ids) == 25
    assert st.rounds == len(st.accept_lengths) == st.target_calls
    assert sum(st.accept_lengths) == 25
    assert st.draft_nodes == st.draft_positions == st.draft_calls and st.draft_nodes <= 3 * st.rounds
    facts = decoder.facts()
    assert facts["transformers_version"]
    assert facts["hf_default_schedule"]["num_assistant_tokens_schedule"]
    params = decoder.params_dict()
    assert params["gamma"] == 3 and params["schedule"] == "constant" and "transformers_version" not in params


@pytest.mark.parametrize("method,params,match", [
    ("sd", {"gamma": 0}, "gamma"),
    ("specinfer", {"num_drafts": 0}, "num_drafts"),
    ("mcsd", {"k_config": []}, "k_config"),
    ("mcsd", {"k_config": [2, 0]}, "k_config"),
    ("hf_assisted", {"schedule": "sometimes"}, "constant"),
    ("spectr", {"width": 2}, "Valid parameters"),
    ("sd", {"top_p": 0.0}, "top_p"),
])
def test_bad_parameters_are_clear_errors(pair, method, params, match):
    with pytest.raises(ConfigError, match=match):
        build_decoder(method, pair, **params)


def test_methods_need_a_draft():
    for method in SPECULATIVE + ("hf_assisted",):
        with pytest.raises(ConfigError, match="draft"):
            build_decoder(method, toy_pair(with_draft=False))


@pytest.mark.parametrize("method", SPECULATIVE + ("hf_assisted",))
def test_method_config_builds_decoder(pair, method, method_config):
    cfg = method_config(method)
    name = cfg.pop("name")
    assert name == method
    decoder = build_decoder(name, pair, **cfg)
    assert decoder.method == method and decoder.params_dict() == dataclasses.asdict(decoder.params)
