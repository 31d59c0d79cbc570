"""The trained-head decoders (medusa, medusa_typical, eagle2): exact with a RANDOM head, greedy-identical with the
embedded heads, their rounds and counts, and clear errors for heads that do not fit.

Exactness must not depend on the head's quality: the toy target (4-token vocabulary) gets randomly initialised
heads, saved in the published layouts and loaded by path (:mod:`harness.testing.heads`), and the empirical
distribution of the outputs is held to the exact warped target distribution (TV bound and χ²). One cheap case per
method by default, the grids ``-m slow``.
"""
import pytest
import torch

from harness.errors import ConfigError, HarnessError
from harness.methods import build_decoder
from harness.primitives.warping import Warp
from harness.testing import (chi_square_pvalue, exact_sequence_distribution, near_pair, sample_generations,
                             total_variation, tv_bound)
from harness.testing.heads import random_eagle, random_head_params, random_medusa

WARP = Warp(temperature=0.9, top_k=3, top_p=0.95)
WARP_PARAMS = {"temperature": WARP.temperature, "top_k": WARP.top_k, "top_p": WARP.top_p}
PROMPT, LENGTH, N = [1, 2, 3], 4, 800
HEAD_METHODS = ("medusa", "medusa_typical", "eagle2")


@pytest.fixture(scope="module")
def pair():
    return near_pair()


def _build(method, pair, **kw):
    return build_decoder(method, pair, **{**random_head_params(method, pair), **kw})


def _assert_exact(decoder, pair, n: int = N) -> None:
    exact = exact_sequence_distribution(pair.target, PROMPT, LENGTH, WARP)
    gens = sample_generations(decoder, PROMPT, LENGTH, n)
    samples = [tuple(g.output_ids) for g in gens]
    assert all(g.stats.target_calls == g.stats.rounds for g in gens)  # one verification per round, the first the prefill
    accepted = sum(g.stats.accepted_tokens for g in gens)
    tv, bound = total_variation(samples, exact), tv_bound(exact, n)
    assert tv < bound, (tv, bound)
    assert chi_square_pvalue(samples, exact) > 1e-4
    assert accepted > n // 4  # candidates were accepted: the tree walk really ran


@pytest.mark.parametrize("method", ["medusa", "eagle2"])
def test_lossless_head_methods_are_exact_with_a_random_head(pair, method):
    _assert_exact(_build(method, pair, **WARP_PARAMS), pair)


@pytest.mark.slow
@pytest.mark.parametrize("method,kw", [
    ("medusa", {"tree_nodes": 3}),
    ("medusa", {"choices": "[[0], [0, 0], [0, 0, 0]]"}),
    ("eagle2", {"tree_top_k": 2, "depth": 4, "total_tokens": 5}),
    ("eagle2", {"tree_top_k": 4, "depth": 2, "total_tokens": 20}),
    ("eagle2", {"tree_top_k": 1, "depth": 3, "total_tokens": 3}),
])
def test_head_methods_are_exact_with_other_trees(pair, method, kw):
    _assert_exact(_build(method, pair, **WARP_PARAMS, **kw), pair, 1500)


def test_medusa_typical_is_lossy_under_sampling_and_declares_it(pair):
    dec = _build("medusa_typical", pair, **WARP_PARAMS)
    assert not dec.lossless and not dec.is_lossless()
    assert _build("medusa_typical", pair, decoding="greedy").is_lossless()
    gen = dec.generate(PROMPT, 12, seed=0)
    assert len(gen.output_ids) == 12 and gen.stats.accepted_tokens > 0


@pytest.mark.parametrize("method", HEAD_METHODS)
def test_greedy_is_token_identical_to_ar_greedy_on_the_tiny_pair(tiny_pair, heldout_prompts, tiny_ar_greedy, method):
    decoder = build_decoder(method, tiny_pair, decoding="greedy")  # the embedded heads: tiny/medusa, tiny/eagle
    accepted = 0
    for ids, ref in zip(heldout_prompts, tiny_ar_greedy[:3]):
        gen = decoder.generate(ids, 40)
        assert gen.output_ids == ref
        st = gen.stats
        assert st.target_calls == st.rounds and st.round_gammas[0] == 0  # the first round is the prefill
        assert st.draft_calls > 0 and st.draft_time_s > 0  # head calls are draft calls, timed as drafting
        accepted += st.accepted_tokens
    assert accepted > 0
    assert decoder.is_lossless()


def test_head_calls_are_counted_and_attributed_as_drafting(pair):
    dec = _build("eagle2", pair, **WARP_PARAMS)
    st = dec.generate(PROMPT, 10, seed=1).stats
    assert st.rounds - 1 <= st.draft_calls <= 3 * (st.rounds - 1)  # one head call per level (depth 3) and round
    assert st.spans["draft"] and len(st.spans["draft"]) == st.draft_calls
    med = _build("medusa", pair, **WARP_PARAMS).generate(PROMPT, 10, seed=1).stats
    assert med.draft_calls == med.rounds - 1  # one evaluation of the heads per round after the prefill


def test_params_lookahead_and_config_errors(pair, tmp_path):
    from harness.decoders.eagle2 import Eagle2Params
    from harness.decoders.medusa import MedusaParams

    assert MedusaParams().lookahead == 5 and MedusaParams(tree_nodes=3).lookahead == 3  # mc_sim_7b_63 is 4 deep
    assert Eagle2Params().lookahead == 7 and Eagle2Params(depth=2, total_tokens=20).gamma == 2
    with pytest.raises(ConfigError, match="choices"):
        MedusaParams(choices="mc_sim_nope")
    with pytest.raises(ConfigError, match="parents"):
        MedusaParams(choices="[[0, 0]]")
    with pytest.raises(ConfigError, match="total_tokens"):
        Eagle2Params(tree_top_k=2, depth=2, total_tokens=7)
    with pytest.raises(ConfigError, match="method.heads=tiny/medusa.*hidden states of size 256"):
        build_decoder("medusa", pair)  # the embedded heads are trained on tiny/target, not on the toy
    with pytest.raises(ConfigError, match="method.head=tiny/eagle.*hidden states of size 256"):
        build_decoder("eagle2", pair)
    with pytest.raises(ConfigError, match="unknown embedded head"):
        build_decoder("medusa", pair, heads="tiny/nope")
    with pytest.raises(HarnessError, match="no Medusa checkpoint"):
        random_eagle(24, 4).save_pretrained(tmp_path, dtype=torch.float32)
        build_decoder("medusa", pair, heads=str(tmp_path))
    random_medusa(24, 3).save_pretrained(tmp_path / "small", dtype=torch.float32)
    with pytest.raises(ConfigError, match="predicts 3 tokens"):
        build_decoder("medusa", pair, heads=str(tmp_path / "small"))


def test_the_rounds_keep_the_hidden_states_of_the_committed_positions(pair):
    """``spec.hidden`` (the template's hidden states from each verification) equals a from-scratch forward's last
    hidden states at the committed positions the round fed: hidden[i] at tokens[-k - 1 + i]."""
    dec = _build("eagle2", pair, **WARP_PARAMS)
    spec = dec.start(torch.tensor([PROMPT]), torch.Generator().manual_seed(0))
    for depth in (3, 3, 2, 3, 1, 3):
        dec.round(spec, depth)
        k = spec.hidden.size(0)
        with torch.no_grad():
            ref = pair.target(input_ids=torch.tensor([spec.tokens[:-1]]), output_hidden_states=True).hidden_states[-1]
        torch.testing.assert_close(spec.hidden, ref[0, -k:], atol=1e-4, rtol=1e-4)
    assert spec.caches.draft_cache is None  # draft-free: no draft model, no draft cache


@pytest.mark.parametrize("decoding", ["greedy", "sampling"])
def test_eagle2_takes_the_committed_tokens_from_the_device(pair, decoding, monkeypatch):
    """The tokens after the head's features (the last k committed ones) come from the round on the device
    (``spec.hidden_tokens``: the pending tokens, the path's, the next token; issue 28 item 2), equal to the host's."""
    from harness.decoders.eagle2 import Eagle2

    seen: list[tuple[list[int], list[int]]] = []
    propose = Eagle2.propose

    def checked(self, spec, depth):
        if spec.hidden is not None:
            seen.append((spec.hidden_tokens[0].tolist(), spec.tokens[-spec.hidden.size(0):]))
        return propose(self, spec, depth)

    monkeypatch.setattr(Eagle2, "propose", checked)
    kw = WARP_PARAMS if decoding == "sampling" else {}
    _build("eagle2", pair, decoding=decoding, **kw).generate([1, 2, 3, 0, 2, 1], 24, seed=1)
    assert len(seen) > 3 and all(device == host for device, host in seen), seen
