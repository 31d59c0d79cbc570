"""Prompt lookup decoding (``pld``): HF's candidates exactly, lossless under sampling, HF's and AR's tokens greedy.

* the n-gram lookup is HF's ``PromptLookupCandidateGenerator.get_candidates`` on random sequences with many
  repeats (no model);
* exactness: on the toy Llama with a 4-token vocabulary (prompts full of repeats, so lookups are proposed and
  accepted), the generated sequences follow the exact warped target distribution (TV bound and chi-square);
  one setting by default, a grid (n-gram sizes, lengths, EOS) with ``-m slow``;
* greedy: token-identical to AR greedy and to HF's prompt lookup (``hf_assisted`` with
  ``prompt_lookup_num_tokens``), round by round, on the embedded tiny pair.
"""
import random

import pytest
import torch

from harness.decoders.pld import NgramIndex
from harness.errors import ConfigError
from harness.methods import build_decoder
from harness.models import TINY_PAIR_DIR
from harness.primitives.warping import Warp
from harness.testing import exact_sequence_distribution, near_pair
from harness.testing.checks import assert_samples_exact

WARP = Warp(temperature=0.9, top_k=3, top_p=0.95)
WARP_PARAMS = {"temperature": 0.9, "top_k": 3, "top_p": 0.95}
TINY_MISSING = not (TINY_PAIR_DIR / "target" / "model.safetensors").exists()


def hf_candidates(seq: list[int], num: int, max_n: int, eos: int | None) -> list[int]:
    from transformers.generation.candidate_generator import PromptLookupCandidateGenerator

    gen = PromptLookupCandidateGenerator(eos_token_id=None if eos is None else torch.tensor([eos]),
                                         num_output_tokens=num, max_matching_ngram_size=max_n, max_length=10_000)
    ids = torch.tensor([seq])
    out, _ = gen.get_candidates(ids)
    return out[0, len(seq):].tolist()


@pytest.mark.parametrize("max_n,num,eos", [(1, 3, None), (2, 10, None), (3, 4, 2), (4, 1, 0)])
def test_lookup_is_hf_prompt_lookup(max_n, num, eos):
    rng = random.Random(max_n * 10 + num)
    for _ in range(60):
        seq = [rng.randrange(5) for _ in range(rng.randrange(1, 30))]
        index = NgramIndex(max_n)
        for cut in range(1, len(seq) + 1):  # grown as a generation grows it
            index.update(seq[:cut])
            assert index.lookup(seq[:cut], num, eos) == hf_candidates(seq[:cut], num, max_n, eos), (seq[:cut], max_n)


def _assert_exact(pair, prompt, length, params, n, eos=None):
    exact = exact_sequence_distribution(pair.target, prompt, length, WARP, eos_token_id=eos)
    stats = assert_samples_exact(build_decoder("pld", pair, **params, **WARP_PARAMS), exact, prompt, length, n)
    assert all(st.draft_calls == 0 and st.target_calls == st.rounds for st in stats)
    assert sum(st.accepted_tokens for st in stats) > n // 4  # lookups were proposed and accepted


def test_pld_follows_the_exact_target_distribution():
    _assert_exact(near_pair(), [1, 2, 3, 1, 2, 0, 1], 4, {"prompt_lookup_num_tokens": 3}, 800)


@pytest.mark.slow
@pytest.mark.parametrize("prompt,length,params,eos", [
    ([1, 2, 3, 1, 2], 5, {"prompt_lookup_num_tokens": 10, "max_matching_ngram_size": 1}, None),
    ([0, 1, 2, 0, 1, 3, 0], 4, {"prompt_lookup_num_tokens": 2, "max_matching_ngram_size": 3}, None),
    ([1, 2, 3, 1, 2, 0, 1], 4, {"prompt_lookup_num_tokens": 4}, 0),  # EOS in lookups and outputs
])
def test_pld_exact_grid(prompt, length, params, eos):
    pair = near_pair(eos_token_id=eos)
    _assert_exact(pair, prompt, length, params, 1500, eos)


@pytest.mark.skipif(TINY_MISSING, reason="tiny pair not trained yet")
def test_greedy_pld_is_ar_and_hf_prompt_lookup_on_tiny_pair(tiny_pair, heldout_prompts, tiny_ar_greedy):
    """Token-identical to AR greedy and to HF's prompt lookup, with HF's rounds (the same candidates accepted);
    a prompt repeated twice makes long lookups."""
    ours = build_decoder("pld", tiny_pair, decoding="greedy", prompt_lookup_num_tokens=6)
    hf = build_decoder("hf_assisted", tiny_pair, decoding="greedy", prompt_lookup_num_tokens=6)
    assert hf.draft is None  # HF's prompt lookup needs no assistant
    ar = build_decoder("ar_greedy", tiny_pair)
    accepted = 0
    for ids, ref in zip(heldout_prompts[:4], tiny_ar_greedy[:4]):
        for prompt, expected in ((ids, ref), (ids + ref + ids, None)):
            mine, theirs = ours.generate(prompt, 40), hf.generate(prompt, 40)
            expected = expected if expected is not None else ar.generate(prompt, 40).output_ids
            assert mine.output_ids == theirs.output_ids == expected
            # the same rounds; the last may differ: with one token left, HF proposes nothing and our loop one
            # draft (the template's rounds draft at least one; the output is cut to max_new_tokens alike)
            assert mine.stats.accept_lengths[:-1] == theirs.stats.accept_lengths[:-1]
            assert mine.stats.target_calls == mine.stats.rounds == theirs.stats.target_calls
            accepted += mine.stats.accepted_tokens
    assert accepted > 40


@pytest.mark.parametrize("method,params,match", [
    ("pld", {"prompt_lookup_num_tokens": 0}, "prompt_lookup_num_tokens"),
    ("pld", {"max_matching_ngram_size": 0}, "max_matching_ngram_size"),
    ("pld", {"gamma": 3}, "Valid parameters"),
    ("hf_assisted", {"prompt_lookup_num_tokens": 0}, "prompt_lookup_num_tokens"),
    ("hf_assisted", {"max_matching_ngram_size": 3}, "prompt_lookup_num_tokens"),
])
def test_bad_parameters_are_clear_errors(method, params, match):
    with pytest.raises(ConfigError, match=match):
        build_decoder(method, near_pair(), **params)


def test_pld_and_hf_prompt_lookup_need_no_draft_and_pld_has_no_gamma_policy():
    from harness.testing import toy_pair

    target_only = toy_pair(with_draft=False)
    dec = build_decoder("pld", target_only, decoding="greedy")
    hf = build_decoder("hf_assisted", target_only, decoding="greedy", prompt_lookup_num_tokens=3)
    assert dec.draft is None and hf.draft is None
    assert dec.generate([1, 2, 1, 2], 6).output_ids == hf.generate([1, 2, 1, 2], 6).output_ids
    with pytest.raises(Exception, match="gamma_policy"):
        build_decoder("pld", near_pair(), gamma_policy="fsm")


def test_hf_assisted_cells_keep_their_ids_with_prompt_lookup_off():
    from harness.config.identity import identity_config

    old = {"method": {"name": "hf_assisted", "gamma": 4, "schedule": "constant", "confidence_threshold": 0.0}}
    new = {"method": {**old["method"], "prompt_lookup_num_tokens": None, "max_matching_ngram_size": None}}
    assert identity_config(new) == identity_config(old)
    lookup = {"method": {**new["method"], "prompt_lookup_num_tokens": 10}}
    assert identity_config(lookup) != identity_config(old)


def test_draft_free_summaries_report_their_own_parameters():
    from harness.methods import method_spec

    for method in ("pld", "lookahead"):
        dec = build_decoder(method, near_pair(), decoding="greedy")
        assert dec.params_dict() == method_spec(method, {}, decoding="greedy").params_dict() == dec.params.as_dict()
