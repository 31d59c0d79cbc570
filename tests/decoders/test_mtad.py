"""MTAD and MTJD (mtad §3, App. B Alg. 1): the accepted-prefix rule on constructed cases, the
joint likelihoods it tests against full forwards, τ = 1 as multinomial sampling, MTJD's joint arg max."""
import itertools

import pytest
import torch

import harness.primitives.acceptance as acceptance
from harness.methods import build_decoder
from harness.errors import ConfigError
from harness.testing import chi_square_pvalue, exact_sequence_distribution, toy_pair


def logs(*probs):
    return torch.log(torch.tensor(probs, dtype=torch.float64))


@pytest.mark.parametrize("p,q,tau,eta", [
    ((0.5, 0.25, 0.2), (0.5, 0.3, 0.2), 0.1, 3),  # every prefix passes
    ((0.01, 0.001), (0.5, 0.4), 0.1, 0),  # none passes
    ((0.04, 0.03, 0.001), (0.5, 0.1, 0.05), 0.1, 2),  # x_1 alone fails, x_{1:2} passes: the LONGEST passing prefix
    ((0.04, 0.03, 0.03), (0.5, 0.1, 0.05), 0.1, 3),
    ((0.9, 0.8), (0.1, 0.05), 0.99, 2),  # p > q: min(1, p/q) = 1 > τ
    ((0.05, 0.02), (0.5, 0.2), 0.1, 0),  # ratio exactly τ does not pass (strict >)
    ((0.3, 0.0), (0.3, 0.1), 0.0, 1),  # τ = 0: passes iff p > 0
    ((0.9, 0.8), (0.1, 0.05), 1.0, 0),  # τ = 1: nothing passes
])
def test_longest_accepted_prefix(p, q, tau, eta):
    assert acceptance.longest_accepted_prefix(logs(*p), logs(*q), tau) == eta


class Scorer:
    def __init__(self, model):
        self.model = model

    @torch.no_grad()
    def prefix_joints(self, context: list, tokens: list) -> torch.Tensor:
        """log p(x_{1:j} | context) for j = 1..len(tokens), by one uncached forward."""
        ids = torch.tensor([context + tokens])
        logp = torch.log_softmax(self.model(input_ids=ids).logits[0].float(), -1)
        cond = torch.stack([logp[len(context) - 1 + i, t] for i, t in enumerate(tokens)])
        return torch.cumsum(cond, 0)


@pytest.mark.parametrize("eos", [None, 3])
def test_mtad_tests_the_right_joint_likelihoods(eos, monkeypatch):
    """Both joint likelihoods MTAD compares equal full forwards on the committed context: the draft's
    beam-sampling cache, the target chain forward and both rollbacks are right."""
    pair = toy_pair(vocab_size=5, eos_token_id=eos)
    target, draft = Scorer(pair.target), Scorer(pair.draft)
    records, context = [], []
    real_rule = acceptance.longest_accepted_prefix

    def recording_rule(p_joint, q_joint, tau):
        records[-1]["p"], records[-1]["q"] = p_joint.clone(), q_joint.clone()
        return real_rule(p_joint, q_joint, tau)

    def recording(dec):
        real_propose, real_round = dec.propose, dec.round

        def propose(spec, depth):
            dtree = real_propose(spec, depth)
            records.append({"context": list(context), "tokens": dtree.tokens.tolist()})
            return dtree

        def round_(spec, depth):
            result = real_round(spec, depth)
            context.extend(result.committed)
            return result
        dec.propose, dec.round = propose, round_
        return dec

    monkeypatch.setattr(acceptance, "longest_accepted_prefix", recording_rule)
    checked = 0
    for params in (dict(), dict(gamma=1, draft_width=2), dict(gamma=3, draft_width=1, tau=0.0), dict(tau=0.9)):
        dec = recording(build_decoder("mtad", pair, top_k=0, top_p=1.0, **params))
        for seed, prompt in enumerate(([1], [2, 0, 4], [4, 4])):
            context[:] = list(prompt)
            records.clear()
            dec.generate(prompt, 10, seed=seed)
            for r in records:
                assert torch.allclose(r["p"], target.prefix_joints(r["context"], r["tokens"]), atol=1e-4)
                assert torch.allclose(r["q"].float(), draft.prefix_joints(r["context"], r["tokens"]), atol=1e-4)
                checked += 1
    assert checked >= 20


def test_mtad_one_target_call_per_iteration():
    pair = toy_pair(vocab_size=6)
    gen = build_decoder("mtad", pair, gamma=4, draft_width=4).generate([1, 2, 3], 16, seed=0)
    assert len(gen.output_ids) == 16
    assert gen.stats.target_calls == gen.stats.rounds  # the prompt is prefilled inside the first call
    assert sum(gen.stats.accept_lengths) >= 16


def test_mtad_tau_one_is_multinomial_sampling():
    """τ = 1 rejects every draft, so each iteration samples one token from T∘p (seed 002 §5.2.2)."""
    pair = toy_pair(vocab_size=4, sharpness=0.6)
    dec = build_decoder("mtad", pair, tau=1.0, gamma=1, draft_width=2, top_k=3, top_p=1.0)
    exact = exact_sequence_distribution(pair.target, [1, 2], 3, dec.params.warp)
    samples = [tuple(dec.generate([1, 2], 3, seed=s).output_ids) for s in range(1200)]
    assert chi_square_pvalue(samples, exact) > 1e-3


@torch.no_grad()
def test_mtjd_beam_search_finds_the_joint_arg_max():
    """With width = |V| the γ = 2 beam search is exhaustive: each step is the exact MTJD arg max."""
    pair = toy_pair(vocab_size=5)
    dec = build_decoder("mtjd", pair, gamma=2, width=5, decoding="greedy")
    prompt = [1, 2]
    out = dec.generate(prompt, 6).output_ids
    context = list(prompt)
    for step in range(3):
        best = max(itertools.product(range(5), repeat=2),
                   key=lambda x: float(Scorer(pair.target).prefix_joints(context, list(x))[-1]))
        assert out[2 * step: 2 * step + 2] == list(best)
        context += list(best)
    assert dec.generate(prompt, 6).stats.accept_lengths == [2, 2, 2]


def test_mtjd_k1_width1_is_greedy():
    pair = toy_pair(vocab_size=7)
    greedy = build_decoder("ar_greedy", pair).generate([3, 1], 12).output_ids
    assert build_decoder("mtjd", pair, gamma=1, width=1, decoding="greedy").generate([3, 1], 12).output_ids == greedy


def test_mtjd_joint_likelihood_not_worse_than_greedy():
    """MTJD's premise (Theorem 3.2, Fig. 1): joint decoding reaches a higher likelihood than greedy."""
    pair = toy_pair(vocab_size=7)
    scorer = Scorer(pair.target)
    prompt = [3, 1]
    greedy = build_decoder("ar_greedy", pair).generate(prompt, 12).output_ids
    joint = build_decoder("mtjd", pair, gamma=4, width=7, decoding="greedy").generate(prompt, 12).output_ids
    assert float(scorer.prefix_joints(prompt, joint)[-1]) >= float(scorer.prefix_joints(prompt, greedy)[-1]) - 1e-5


def test_bad_parameters_are_rejected():
    pair = toy_pair(vocab_size=4)
    for method, bad in (("mtad", dict(tau=1.5)), ("mtad", dict(draft_width=0)), ("mtad", dict(temperature=0.0)),
                        ("mtjd", dict(gamma=0)), ("mtjd", dict(sample=True, temperature=0.0)), ("mtad", dict(beams=2))):
        with pytest.raises(ConfigError):
            build_decoder(method, pair, **bad)
