"""Lookahead decoding (``lookahead``): the one forward's mask is the paper's, the output is exact.

* mask: every node of a step's tree (the guesses' trie and the 2D window) gets the logits the target gives
  its own path from scratch — a window token (l, j) sees the committed sequence, level 0's columns ≤ j and its
  column's earlier levels; a guess sees its n-gram's prefix; the branches never see each other;
* exactness: on the toy Llama with a 4-token vocabulary, sampled outputs follow the exact warped target
  distribution (TV bound, chi-square), with n-grams from the pool accepted; a grid with ``-m slow``;
* greedy: token-identical to AR greedy on the embedded tiny pair (the toy pairs: tests/decoders/test_speculative.py,
  every greedy-lossless decoder by declaration).
"""
import pytest
import torch

from harness.errors import ConfigError
from harness.methods import build_decoder
from harness.models import TINY_PAIR_DIR
from harness.primitives.sampling import make_generator
from harness.primitives.tree import path_to
from harness.primitives.warping import Warp
from harness.testing import exact_sequence_distribution, near_pair
from harness.testing.checks import assert_samples_exact

WARP = Warp(temperature=0.9, top_k=3, top_p=0.95)
WARP_PARAMS = {"temperature": 0.9, "top_k": 3, "top_p": 0.95}
TINY_MISSING = not (TINY_PAIR_DIR / "target" / "model.safetensors").exists()


def test_one_forward_gives_every_node_the_logits_of_its_own_path():
    pair = near_pair(vocab_size=6)
    dec = build_decoder("lookahead", pair, decoding="greedy", window=4, ngram=3, guess=3)
    prompt = [1, 2, 3, 1, 2, 4, 1, 2]
    spec = dec.start(torch.tensor([prompt]), make_generator(0, "cpu"))
    inner, seen = spec.accept, []

    def capture(v, generator):
        seen.append(v)
        return inner(v, generator)

    spec.accept = capture
    guessed = False
    for _ in range(6):
        before = list(spec.tokens)
        dec.round(spec, 2)
        v = seen[-1]
        tree = v.proposal.tree
        guessed |= len(v.proposal.dtree.parents) > 0
        for node in range(len(tree)):
            path = tree.tokens[path_to(tree.parents, node)].tolist()
            with torch.no_grad():
                ref = pair.target(torch.tensor([before + path])).logits[0, -1]
            torch.testing.assert_close(v.node_logits[node], ref, atol=1e-4, rtol=1e-4)
    assert guessed  # the verification branch was in some step's tree


def _assert_exact(params, n, length=5, prompt=(1, 2, 3, 1, 2, 0, 1)):
    pair = near_pair()
    exact = exact_sequence_distribution(pair.target, list(prompt), length, WARP)
    dec = build_decoder("lookahead", pair, **params, **WARP_PARAMS)
    stats = assert_samples_exact(dec, exact, list(prompt), length, n)
    assert all(st.draft_calls == 0 and st.target_calls == st.rounds for st in stats)
    assert sum(st.accepted_tokens for st in stats) > n // 4  # cached n-grams were verified and accepted


def test_lookahead_follows_the_exact_target_distribution():
    _assert_exact({"window": 3, "ngram": 2, "guess": 3}, 800)


@pytest.mark.slow
@pytest.mark.parametrize("params", [{"window": 4, "ngram": 3, "guess": 2}, {"window": 2, "ngram": 4, "guess": 4}])
def test_lookahead_exact_grid(params):
    _assert_exact(params, 1500, length=6)


@pytest.mark.skipif(TINY_MISSING, reason="tiny pair not trained yet")
def test_greedy_lookahead_is_ar_greedy_on_tiny_pair(tiny_pair, heldout_prompts, tiny_ar_greedy):
    dec = build_decoder("lookahead", tiny_pair, decoding="greedy", window=5, ngram=3, guess=5)
    accepted = 0
    for ids, ref in zip(heldout_prompts[:4], tiny_ar_greedy[:4]):
        gen = dec.generate(ids, 40)
        assert gen.output_ids == ref
        assert gen.stats.target_calls == gen.stats.rounds
        accepted += gen.stats.accepted_tokens
    assert accepted > 0


@pytest.mark.parametrize("params,match", [({"window": 0}, "window"), ({"ngram": 1}, "ngram"),
                                          ({"guess": 0}, "guess"), ({"gamma": 3}, "Valid parameters")])
def test_bad_parameters_are_clear_errors(params, match):
    with pytest.raises(ConfigError, match=match):
        build_decoder("lookahead", near_pair(), **params)
