"""AR decoders: greedy is token-identical to HF generate; sampling follows the exact warped distribution."""
import pytest
import torch

from harness.methods import build_decoder
from harness.primitives.warping import Warp
from harness.testing import exact_sequence_distribution, total_variation, toy_pair, tv_bound


def hf_generate(model, ids, **kwargs):
    out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long), **kwargs)
    return out[0, len(ids):].tolist()


@pytest.mark.parametrize("prompts", [slice(0, 6), pytest.param(slice(6, None), marks=pytest.mark.slow)])
def test_greedy_matches_hf_generate_on_tiny_pair(tiny_pair, heldout_prompts, prompts):
    decoder = build_decoder("ar_greedy", tiny_pair)
    assert len(heldout_prompts) >= 20
    for ids in heldout_prompts[prompts]:
        ours = decoder.generate(ids, 40)
        ref = hf_generate(tiny_pair.target, ids, do_sample=False, max_new_tokens=40)
        assert ours.output_ids == ref
        assert ours.stats.target_calls == len(ref)  # one target forward per token
        assert ours.stats.draft_calls == 0


def test_greedy_stops_at_eos_like_hf():
    pair = toy_pair(vocab_size=6, eos_token_id=2, with_draft=False)
    decoder = build_decoder("ar_greedy", pair)
    for prompt in ([0], [1, 3], [4, 4, 5], [5, 0]):
        ours = decoder.generate(prompt, 12).output_ids
        ref = hf_generate(pair.target, prompt, do_sample=False, max_new_tokens=12, eos_token_id=2, pad_token_id=2)
        assert ours == ref[: len(ours)] and all(t == 2 for t in ref[len(ours):])


@pytest.mark.parametrize("warp", [Warp(1.0, 3, 0.9), pytest.param(Warp(0.8, 0, 0.7), marks=pytest.mark.slow)])
def test_multinomial_follows_exact_warped_distribution(warp):
    """Sequences of 3 tokens from a toy LM (vocab 5): empirical vs exact T∘p, TV below the n-sample bound."""
    pair = toy_pair(vocab_size=5, with_draft=False)
    prompt, length, n = [1, 3], 3, 2000
    exact = exact_sequence_distribution(pair.target, prompt, length, warp)
    decoder = build_decoder("ar_sampling", pair, temperature=warp.temperature, top_k=warp.top_k, top_p=warp.top_p)
    samples = [tuple(decoder.generate(prompt, length, seed=s).output_ids) for s in range(n)]
    tv = total_variation(samples, exact)
    assert tv < tv_bound(exact, n), (tv, tv_bound(exact, n))
    assert set(samples) <= set(exact)  # never a sequence the warp excludes


def test_multinomial_is_reproducible_by_seed():
    pair = toy_pair(vocab_size=5, with_draft=False)
    decoder = build_decoder("ar_sampling", pair)
    assert decoder.generate([1], 10, seed=7).output_ids == decoder.generate([1], 10, seed=7).output_ids
