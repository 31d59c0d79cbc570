"""mcsd_target_init ``greedy_roots: top_nt`` (issue 32.7): the paper's T 0 variant, the target's top-n_t tokens
as the roots under greedy decoding — explicit, lossy, and the default (one argmax root) unchanged."""
import pytest
import torch

from harness.errors import ConfigError
from harness.methods import build_decoder
from harness.testing import near_pair, toy_pair

K = (3, 2, 1)


def test_default_and_one_root_stay_greedy_and_lossless():
    for p in (near_pair(vocab_size=7, noise=0.2), toy_pair(vocab_size=7)):
        ar = build_decoder("ar_greedy", p)
        for params in ({"k_config": K}, {"k_config": (1, 2, 1), "greedy_roots": "top_nt"},
                       {"k_config": K, "greedy_roots": "argmax"}):
            dec = build_decoder("mcsd_target_init", p, temperature=0.0, **params)
            assert dec.is_lossless()
            for prompt in ([1], [2, 5, 1]):
                assert dec.generate(prompt, 20).output_ids == ar.generate(prompt, 20).output_ids


def test_top_nt_roots_are_the_targets_top_tokens_and_lossy():
    p = toy_pair(vocab_size=7)  # the draft unrelated to the target: other roots win often
    dec = build_decoder("mcsd_target_init", p, temperature=0.0, k_config=K, greedy_roots="top_nt")
    assert not dec.is_lossless()
    seen = []
    propose = dec.propose

    def spy(spec, depth):
        seen.append(torch.topk(spec.state.logits.float(), K[0]).indices.tolist())
        out = propose(spec, depth)
        return out
    dec.propose = spy
    wins, differs = 0, False
    ar = build_decoder("ar_greedy", p)
    for prompt in ([1], [2, 5, 1], [6, 0, 3, 3, 4], [4, 4]):
        gen = dec.generate(prompt, 24)
        st = gen.stats
        assert st.rounds > 0 and st.draft_nodes > 0
        wins += st.extras.other_root_wins
        differs |= gen.output_ids != ar.generate(prompt, 24).output_ids
    assert seen and all(len(set(r)) == K[0] for r in seen)  # three distinct roots a round
    assert wins > 0 and differs  # a non-argmax root won: the output is no longer greedy


def test_greedy_roots_is_checked_and_keeps_old_cell_ids():
    with pytest.raises(ConfigError, match="greedy_roots"):
        build_decoder("mcsd_target_init", near_pair(vocab_size=7), temperature=0.0, greedy_roots="top3")
    from harness.config.identity import identity_config

    cfg = {"method": {"name": "mcsd_target_init", "k_config": [16, 1, 1, 1, 1, 1]}, "seed": 0}
    for version in (1, 2):  # the ids of cells measured under identity version 1 (0.2/0.3), and new cells'
        assert identity_config({**cfg, "method": {**cfg["method"], "greedy_roots": None}}, version) == \
            identity_config(cfg, version)
