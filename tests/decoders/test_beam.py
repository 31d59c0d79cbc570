"""Beam decoders: beam search is token-identical to HF generate(num_beams=W); beam sampling
draws from T∘p_beam (seed 000 Eq. 1) exactly — one step, and whole decodes of two steps."""
import itertools
from collections import Counter

import pytest
import torch

from harness.methods import build_decoder
from harness.primitives.beams import beam_joint_logprobs, sample_beams
from harness.errors import ConfigError
from harness.primitives.warping import Warp
from harness.testing import toy_pair, total_variation, tv_bound


def hf_beam(model, ids, width, max_new, **kw):
    out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                         num_beams=width, do_sample=False, max_new_tokens=max_new, **kw)
    return out[0, len(ids):].tolist()


@pytest.mark.parametrize("width,length_penalty,early_stopping", [
    (2, 1.0, False), pytest.param(4, 1.0, False, marks=pytest.mark.slow), (3, 0.5, True), (4, 2.0, "never")])
def test_beam_search_matches_hf_generate_on_tiny_pair(tiny_pair, heldout_prompts, width, length_penalty,
                                                      early_stopping):
    decoder = build_decoder("beam_search", tiny_pair, width=width, length_penalty=length_penalty,
                            early_stopping=early_stopping)
    prompts = heldout_prompts if width == 4 and length_penalty == 1.0 else heldout_prompts[:6]
    for ids in prompts:
        ours = decoder.generate(ids, 24).output_ids
        ref = hf_beam(tiny_pair.target, ids, width, 24, length_penalty=length_penalty, early_stopping=early_stopping)
        pad = tiny_pair.tokenizer.pad_token_id
        assert ours == ref[: len(ours)] and all(t == pad for t in ref[len(ours):]), (ours, ref)


def test_beam_search_with_eos_matches_hf():
    pair = toy_pair(vocab_size=6, eos_token_id=2, with_draft=False, sharpness=0.5)
    for width, prompt in itertools.product((2, 3), ([0], [1, 3], [4, 4, 5], [5, 0], [3])):
        ours = build_decoder("beam_search", pair, width=width).generate(prompt, 8).output_ids
        ref = hf_beam(pair.target, prompt, width, 8, eos_token_id=2, pad_token_id=2)
        assert ours == ref[: len(ours)] and all(t == 2 for t in ref[len(ours):]), (width, prompt, ours, ref)


def exact_p_beam(model, beams: list[list[int]], beam_logp: list[float], warp: Warp) -> dict:
    """T∘p_beam over beams × V by full forwards: {(beam index, token): probability}. Eq. 1."""
    with torch.no_grad():
        cond = torch.stack([torch.log_softmax(model(input_ids=torch.tensor([b])).logits[0, -1].float(), -1)
                            for b in beams])
    joint = cond + torch.tensor(beam_logp)[:, None]
    probs = warp.probs(joint.reshape(-1)).reshape(joint.shape)
    return {(i, t): float(probs[i, t]) for i in range(len(beams)) for t in range(joint.size(1)) if probs[i, t] > 0}


@pytest.mark.parametrize("warp", [Warp(1.0, 0, 1.0), Warp(1.0, 6, 0.8), Warp(0.7, 0, 0.9)])
def test_one_beam_sampling_step_follows_p_beam(warp):
    pair = toy_pair(vocab_size=5, with_draft=False)
    beams, beam_logp = [[0, 1, 2], [0, 1, 4], [0, 3, 3]], [-1.2, -0.4, -2.5]
    exact = exact_p_beam(pair.target, beams, beam_logp, warp)
    with torch.no_grad():
        cond = torch.log_softmax(pair.target(input_ids=torch.tensor(beams)).logits[:, -1].float(), -1)
    joint = beam_joint_logprobs(torch.tensor(beam_logp), cond, torch.zeros(3, dtype=torch.bool), eos_token_id=0)
    n = 40000
    g = torch.Generator().manual_seed(0)
    parent, token = sample_beams(joint, warp, n, g)
    samples = list(zip(parent.tolist(), token.tolist()))
    assert total_variation(samples, exact) < tv_bound(exact, n)


def exact_two_step_output(model, prompt, width, warp):
    """Exact distribution of the returned beam after 2 steps of W-beam sampling (lowest perplexity wins)."""
    step1 = exact_p_beam(model, [prompt], [0.0], warp)
    out = Counter()
    for draws in itertools.product(step1.items(), repeat=width):
        pr1 = 1.0
        beams, logps = [], []
        for (_, tok), pr in draws:
            pr1 *= pr
            beams.append(prompt + [tok])
        with torch.no_grad():
            lp = [float(torch.log_softmax(model(input_ids=torch.tensor([prompt])).logits[0, -1].float(), -1)[b[-1]])
                  for b in beams]
        logps = lp
        step2 = exact_p_beam(model, beams, logps, warp)
        with torch.no_grad():
            cond = {i: torch.log_softmax(model(input_ids=torch.tensor([b])).logits[0, -1].float(), -1)
                    for i, b in enumerate(beams)}
        for draws2 in itertools.product(step2.items(), repeat=width):
            pr2 = 1.0
            cands = []
            for (i, tok), pr in draws2:
                pr2 *= pr
                cands.append((-(logps[i] + float(cond[i][tok])) / 2, tuple(beams[i][len(prompt):]) + (tok,)))
            best = min(range(width), key=lambda j: (cands[j][0], j))
            out[cands[best][1]] += pr1 * pr2
    return dict(out)


def test_beam_sampling_decode_follows_exact_distribution():
    pair = toy_pair(vocab_size=4, with_draft=False)
    warp, width, prompt = Warp(1.0, 5, 0.9), 2, [1, 2]
    exact = exact_two_step_output(pair.target, prompt, width, warp)
    decoder = build_decoder("beam_sampling", pair, width=width, temperature=1.0, top_k=5, top_p=0.9)
    n = 2000
    samples = [tuple(decoder.generate(prompt, 2, seed=s).output_ids) for s in range(n)]
    assert total_variation(samples, exact) < tv_bound(exact, n)


def test_beam_sampling_rejects_temperature_zero():
    with pytest.raises(ConfigError, match="beam_search"):
        build_decoder("beam_sampling", toy_pair(with_draft=False), temperature=0.0)
