"""Speculative decoders (sd, specinfer, spectr, mcsd, hf_assisted): lossless, one target call per round.

Exactness: on a toy Llama with a 4-token vocabulary whose draft is a perturbed copy of the
target (acceptance ≈ 0.7, so long accepted paths, bonus tokens and tree branches all occur),
the empirical distribution of generated sequences matches the exact warped target
distribution (enumerated), by a TV bound and a chi-square test: one chain (sd) and one tree (mcsd)
by default, the other settings with ``-m slow`` (each acceptance rule is proven exact on its own in
tests/primitives/test_acceptance.py). Every decoder that declares itself lossless under greedy decoding
is token-identical to AR greedy (enumerated from the registry by that declaration).
"""

import pytest
import torch

from harness.decoders import registry
from harness.errors import ConfigError
from harness.methods import build_decoder
from harness.models import TINY_PAIR_DIR
from harness.primitives.sampling import make_generator
from harness.primitives.warping import Warp
from harness.testing import chi_square_pvalue, exact_sequence_distribution, near_pair, toy_pair, total_variation, tv_bound
from harness.testing.checks import assert_cache_matches_scratch
from harness.testing.heads import random_head_params

WARP = Warp(temperature=0.9, top_k=3, top_p=0.95)
PROMPT, LENGTH, N = [1, 2, 3], 4, 1500
#: every decoder that can decode greedily, by its declaration
GREEDY = sorted(m for m, c in registry().items() if "greedy" in c.decodings)


@pytest.fixture(scope="module")
def pair():
    return near_pair()


def _warp_params(warp: Warp) -> dict:
    return {"temperature": warp.temperature, "top_k": warp.top_k, "top_p": warp.top_p}


@pytest.mark.parametrize("method,params", [
    pytest.param("sd", {"gamma": 2}, marks=pytest.mark.slow),
    ("sd", {"gamma": 3}),
    pytest.param("specinfer", {"gamma": 3, "num_drafts": 3}, marks=pytest.mark.slow),
    pytest.param("spectr", {"gamma": 3, "num_drafts": 3}, marks=pytest.mark.slow),
    ("mcsd", {"k_config": (3, 2, 1)}),
    pytest.param("mcsd", {"k_config": (2, 2, 2), "replacement": True}, marks=pytest.mark.slow),
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


@pytest.mark.slow
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


@pytest.mark.parametrize("method", GREEDY)
def test_greedy_lossless_decoders_are_token_identical_to_ar_greedy_on_toy_pairs(method):
    """The ``lossless`` declaration checked: every decoder lossless under greedy decoding outputs AR greedy's tokens."""
    for p in (near_pair(vocab_size=7, noise=0.2), toy_pair(vocab_size=7), near_pair(vocab_size=7, eos_token_id=3)):
        ar = build_decoder("ar_greedy", p)
        decoder = build_decoder(method, p, decoding="greedy", **random_head_params(method, p))
        if not decoder.is_lossless():
            assert not registry()[method].lossless
            return
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


@pytest.mark.parametrize("method,params,greedy", [
    ("sd", {"gamma": 3}, False), ("specinfer", {"gamma": 3, "num_drafts": 3}, False),
    ("spectr", {"gamma": 3, "num_drafts": 3}, False), ("mcsd", {"k_config": (3, 2, 2)}, False),
    ("mcsd", {"k_config": (3, 2, 1), "replacement": True}, True)])
def test_kv_rollback_equals_from_scratch_forward(pair, method, params, greedy):
    dec = build_decoder(method, pair, **params, **_warp_params(Warp(0.0) if greedy else WARP))
    prompt = torch.tensor([[1, 2, 3, 0, 2]])
    spec = dec.start(prompt, make_generator(3, "cpu"))
    committed = prompt[0].tolist()
    saw_two_pending = False
    for _ in range(12):
        committed += dec.round(spec, dec.params.gamma).committed
        caches = spec.caches
        saw_two_pending |= caches.draft_pending.size(1) == 2
        assert_cache_matches_scratch(dec.target, caches.target_cache, caches.target_pending, committed)
        assert_cache_matches_scratch(dec.draft, caches.draft_cache, caches.draft_pending, committed)
    assert saw_two_pending  # the whole draft was accepted at least once: its last token was pending


TINY_MISSING = not (TINY_PAIR_DIR / "target" / "model.safetensors").exists()


@pytest.mark.skipif(TINY_MISSING, reason="tiny pair not trained yet")
@pytest.mark.parametrize("method,num_prompts", [("sd", 6), pytest.param("sd", 24, marks=pytest.mark.slow), ("mcsd", 6),
                                                ("hf_assisted", 8)])
def test_greedy_is_token_identical_to_ar_greedy_on_tiny_pair(tiny_pair, heldout_prompts, tiny_ar_greedy, method,
                                                             num_prompts):
    decoder = build_decoder(method, tiny_pair, temperature=0.0)
    accepted = 0
    for ids, ref in zip(heldout_prompts, tiny_ar_greedy[:num_prompts]):
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
    for method in sorted(m for m, c in registry().items() if c.uses_draft):
        with pytest.raises(ConfigError, match="draft"):
            build_decoder(method, toy_pair(with_draft=False))


@pytest.mark.parametrize("method", sorted(registry()))
def test_method_config_builds_decoder(pair, method, method_config):
    cfg = method_config(method)
    name = cfg.pop("name")
    assert name == method
    decoder = build_decoder(name, pair, decoding="sampling" if "sampling" in registry()[name].decodings else "greedy",
                            **{**cfg, **random_head_params(name, pair)})
    assert decoder.method == method and decoder.params_dict().items() >= decoder.params.as_dict().items()


def test_hf_assisted_passes_one_generation_config_and_hf_prints_no_deprecation(tiny_pair):
    """Issue 33.5: no "Passing `generation_config` together with generation-related arguments is deprecated"
    on any hf_assisted run (ours passes a GenerationConfig alone; HF's own assistant call is filtered)."""
    import logging

    from transformers import GenerationConfig
    from transformers.utils import logging as hf_logging

    decoder = build_decoder("hf_assisted", tiny_pair, gamma=3, **_warp_params(WARP))  # a hub-format pair: HF warns
    config, inputs = decoder._generation_config(7)
    assert isinstance(config, GenerationConfig) and config.max_new_tokens == 7 and config.do_sample
    assert set(inputs) == {"assistant_model"}  # nothing else next to the config
    seen: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())

    handler, root = Collect(level=logging.WARNING), hf_logging.get_logger("transformers")
    logging.Logger.warning_once.cache_clear()  # HF warns once per process: make this run the first
    root.addHandler(handler)
    try:
        decoder.generate([1, 2, 3], 6, seed=0)
    finally:
        root.removeHandler(handler)
    assert not [m for m in seen if "deprecated" in m], seen
