"""BiLD and typical acceptance (the lossy baselines of seed 002): the criteria on constructed cases,
greedy identity with AR greedy, and the degenerate thresholds that reduce them to known decoders.
Also: the method configs of issue 5 build their decoders."""
import math

import pytest
import torch

from harness.methods import build_decoder
from harness.primitives.acceptance import first_rollback, typical_prefix_length
from harness.errors import ConfigError
from harness.testing import chi_square_pvalue, exact_sequence_distribution, toy_pair


def test_typical_acceptance_bar_adapts_to_entropy():
    uniform = torch.log(torch.full((4,), 0.25))  # H = ln 4: bar = min(0.09, 0.3/4) = 0.075 < 0.25
    peaked = torch.log(torch.tensor([0.97, 0.01, 0.01, 0.01]))  # low H: bar = ε = 0.09 > 0.01
    logits = torch.stack([uniform, peaked, peaked])
    assert typical_prefix_length(logits, torch.tensor([3, 0, 2]), 1.0, 0.09, 0.3) == 2
    assert typical_prefix_length(logits, torch.tensor([3, 1, 0]), 1.0, 0.09, 0.3) == 1  # stops at the first miss
    assert typical_prefix_length(logits, torch.tensor([1, 0, 0]), 1.0, 0.09, 0.3) == 3
    assert typical_prefix_length(uniform[None], torch.tensor([0]), 1.0, 0.3, 0.9) == 1  # bar = δ/4 = 0.225 < 0.25
    assert typical_prefix_length(uniform[None], torch.tensor([0]), 1.0, 0.3, 1.2) == 0  # bar = min(ε, δ/4) = 0.3
    assert typical_prefix_length(logits, torch.tensor([0, 0, 1]), 0.0, 0.09, 0.3) == 2  # greedy: argmax match


def test_first_rollback():
    assert first_rollback(torch.tensor([0.1, 2.5, 0.2]), 2.0) == 1
    assert first_rollback(torch.tensor([0.1, 1.9]), 2.0) == 2
    assert first_rollback(torch.tensor([]), 2.0) == 0
    assert first_rollback(torch.tensor([math.inf]), 3.0) == 0


@pytest.mark.parametrize("method,params", [("bild", dict(gamma=5)), ("typical", dict(gamma=3))])
def test_greedy_is_token_identical_to_ar_greedy(method, params):
    pair = toy_pair(vocab_size=9, eos_token_id=8, sharpness=0.7)
    ar = build_decoder("ar_greedy", pair)
    dec = build_decoder(method, pair, temperature=0.0, **params)
    for prompt in ([1], [2, 5, 7], [4, 4, 0, 1]):
        assert dec.generate(prompt, 20).output_ids == ar.generate(prompt, 20).output_ids


def test_bild_always_falling_back_is_multinomial_sampling():
    """τ1 = 1 (an unwarped draft is never that sure): no draft survives, each token comes from T∘p."""
    pair = toy_pair(vocab_size=4, sharpness=0.6)
    dec = build_decoder("bild", pair, fallback_threshold=1.0, top_k=0, top_p=1.0)
    exact = exact_sequence_distribution(pair.target, [1, 2], 3, dec.params.warp)
    samples = [tuple(dec.generate([1, 2], 3, seed=s).output_ids) for s in range(1200)]
    assert chi_square_pvalue(samples, exact) > 1e-3
    assert dec.generate([1, 2], 3, seed=0).stats.extras.fallbacks == 3


def test_bild_never_falling_back_nor_rolling_back_keeps_every_draft():
    pair = toy_pair(vocab_size=6)
    dec = build_decoder("bild", pair, gamma=4, fallback_threshold=0.0, rollback_threshold=math.inf)
    st = dec.generate([1, 2], 15, seed=0).stats
    assert st.accept_lengths == [5, 5, 5] and st.target_calls == 3
    assert st.extras.fallbacks == 0 and st.rejected_rounds == 0


def test_typical_with_zero_threshold_keeps_every_draft():
    pair = toy_pair(vocab_size=6)
    st = build_decoder("typical", pair, gamma=4, posterior_threshold=0.0).generate([1, 2], 15, seed=0).stats
    assert st.accept_lengths == [5, 5, 5] and st.target_calls == 3


def test_bad_parameters_are_rejected():
    pair = toy_pair(vocab_size=4)
    for method, bad in (("bild", dict(fallback_threshold=1.5)), ("bild", dict(rollback_threshold=-1)),
                        ("bild", dict(gamma=0)), ("typical", dict(posterior_threshold=2.0)),
                        ("typical", dict(gamma=0)), ("typical", dict(epsilon=0.1))):
        with pytest.raises(ConfigError):
            build_decoder(method, pair, **bad)


@pytest.mark.parametrize("method", ["dsbd", "mtad", "mtjd", "bild", "typical"])
def test_method_config_builds_decoder(method, method_config):
    cfg = method_config(method)
    assert cfg.pop("name") == method
    decoder = build_decoder(method, toy_pair(vocab_size=5), **cfg)
    assert decoder.method == method
    if method != "mtjd":
        with pytest.raises(ConfigError, match="draft"):
            build_decoder(method, toy_pair(vocab_size=5, with_draft=False), **cfg)


@torch.no_grad()
def test_bild_drafts_from_the_right_draft_distribution(monkeypatch):
    """Drafting with fallback keeps the draft cache right: every confidence BiLD takes is T∘q at the committed
    context plus the tokens drafted so far (full-forward reference), in one-token or chunked draft calls."""
    import harness.decoders.bild as bild_module

    pair = toy_pair(vocab_size=6, sharpness=1.5)
    warp = build_decoder("bild", pair, top_k=0, top_p=1.0).params.warp
    state = {"context": [], "drafted": [], "checked": 0}
    real_draft = bild_module.draft_tree

    def recording_draft(draft, caches, widths, warp_, generator, replacement=True):
        out = real_draft(draft, caches, widths, warp_, generator, replacement)  # a chain of len(widths) drafts
        assert widths == [1] * len(widths)
        for i, token in enumerate(out.tokens.tolist()):  # each draft's T∘q: the root's, then after each fed draft
            ids = torch.tensor([state["context"] + state["drafted"]])
            expected = warp.probs(pair.draft(input_ids=ids).logits[0, -1].float())
            assert torch.allclose(out.root_q if i == 0 else out.node_q[i - 1], expected, atol=1e-5)
            state["drafted"].append(token)
            state["checked"] += 1
        return out

    def recording_round(real_round):
        def round_(spec, depth):
            result = real_round(spec, depth)
            state["context"] += result.committed
            state["drafted"] = []
            return result
        return round_

    monkeypatch.setattr(bild_module, "draft_tree", recording_draft)
    for thresholds in ((0.5, 1.0), (0.0, math.inf)):  # fallbacks and rollbacks; then every draft kept (γ reached)
        dec = build_decoder("bild", pair, gamma=4, fallback_threshold=thresholds[0], rollback_threshold=thresholds[1],
                            top_k=0, top_p=1.0)
        dec.round = recording_round(dec.round)
        for seed, prompt in enumerate(([1], [3, 0, 2])):
            state["context"], state["drafted"] = list(prompt), []
            st = dec.generate(prompt, 16, seed=seed).stats
            assert (st.extras.fallbacks > 0 and st.rejected_rounds > 0) == (thresholds[0] > 0)  # rollbacks
    assert state["checked"] > 40


def bild_law(pair, prompt: list[int], length: int, warp, gamma: int, tau1: float, tau2: float) -> dict:
    """BiLD's exact output law over ``length`` tokens, the policy followed token by token (module docstring of
    harness.decoders.bild): in a round of budget min(γ, max(1, tokens needed − 1)) (the loop's clip), a draft
    position whose max T∘q < τ1 hands the token to T∘p; else x ~ T∘q, replaced by a token from T∘p if
    −log T∘p(x) > τ2 (the round ends), kept otherwise; after the budget's drafts T∘p adds a token."""
    from harness.testing.distributions import next_token_probs

    law: dict[tuple[int, ...], float] = {}

    def step(out: tuple[int, ...], left: int, weight: float) -> None:  # ``left`` drafts left in the round
        if len(out) >= length:
            law[out[:length]] = law.get(out[:length], 0.0) + weight
            return
        if left is None:
            left = min(gamma, max(1, length - len(out) - 1))
        p = next_token_probs(pair.target, prompt + list(out), warp)
        if left == 0:
            return end(out, p, weight)
        q = next_token_probs(pair.draft, prompt + list(out), warp)
        if float(q.max()) < tau1:
            return end(out, p, weight)
        for x in range(q.numel()):
            if float(q[x]) == 0:
                continue
            if float(p[x]) == 0 or -math.log(float(p[x])) > tau2:
                end(out, p, weight * float(q[x]))
            else:
                step(out + (x,), left - 1, weight * float(q[x]))

    def end(out, p, weight) -> None:
        for y in range(p.numel()):
            if float(p[y]) > 0:
                step(out + (y,), None, weight * float(p[y]))

    step((), None, 1.0)
    return law


@pytest.mark.slow  # 2 x 1500 generations: ~30 s CPU each
@pytest.mark.parametrize("gamma,tau1,tau2", [(3, 0.45, 1.0), (2, 0.0, 0.7)])
def test_bild_sampling_follows_bilds_law(gamma, tau1, tau2):
    """The sampled output follows the law of BiLD's token-by-token policy (fallbacks, rollbacks and full rounds
    all occur), whatever the draft chunks and the reads: the device finds the fallback point, the law is BiLD's."""
    pair = toy_pair(vocab_size=4, sharpness=1.2)
    dec = build_decoder("bild", pair, gamma=gamma, fallback_threshold=tau1, rollback_threshold=tau2, top_k=0,
                        top_p=1.0)
    law = bild_law(pair, [1, 2], 4, dec.params.warp, gamma, tau1, tau2)
    assert abs(sum(law.values()) - 1) < 1e-6
    gens = [dec.generate([1, 2], 4, seed=s) for s in range(1500)]
    assert chi_square_pvalue([tuple(g.output_ids) for g in gens], law) > 1e-3
    if tau1 > 0:
        assert sum(g.stats.extras.fallbacks for g in gens) > 0 and sum(g.stats.rejected_rounds for g in gens) > 0
