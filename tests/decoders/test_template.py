"""The speculative template: a new method is one small class plus its rule, and gets the rest for free.

Two examples written here, in the decoders' own form (registered decoders are one file each, as ``sd.py``):

The example is a real method, not in the paper set: speculative decoding whose draft stops a round early
when it is unsure (its next token's probability max T∘q < τ), as HF's ``assistant_confidence_threshold``
and, with a trained predictor, SpecDec++ do. It is lossless because the stop decision depends only on what
has been drawn (the round's depth is a stopping time), which the exactness test below checks; the γ policy,
greedy decoding, statistics and the registry-free build all come from the template. The second is a draft-free
method (no draft model): prompt-lookup-style candidates, accepted by the point-mass rule (deterministic
candidates) — the shape of issue 25's prompt lookup, lookahead, Medusa and EAGLE.
"""
from dataclasses import dataclass

import pytest
import torch

from harness.adaptive.policies import policy_params
from harness.decoders.base import param
from harness.decoders.speculative import SpeculativeDecoder, SpeculativeParams
from harness.methods import build_decoder
from harness.primitives.acceptance import point_mass_select, speculative_sampling
from harness.primitives.spec_loop import ChainAcceptance, TreeWalk
from harness.primitives.spec_state import DraftTree
from harness.primitives.warping import Warp
from harness.testing import chi_square_pvalue, exact_sequence_distribution, near_pair, total_variation, tv_bound

WARP = Warp(temperature=0.9, top_k=3, top_p=0.95)
PROMPT, LENGTH, N = [1, 2, 3], 4, 800


# ------------------------------------------------------------------ the whole method: 25 lines
@dataclass(frozen=True)
class ConfidentParams(SpeculativeParams):
    gamma: int = param(6, "most draft tokens per round")
    threshold: float = param(0.42, "stop drafting once the draft's next-token max probability is below it")


@dataclass
class Unsure:
    """The stop hook: a DraftStop that reads the draft's logits of the level just fed (never undrawn tokens)."""

    warp: Warp
    threshold: float
    needs_hidden = False

    def __call__(self, depth, hidden, logits) -> bool:
        return bool(self.warp.probs(logits).max() < self.threshold)


class ConfidentSD(SpeculativeDecoder[ConfidentParams]):
    method = "confident_sd"
    lossless = True
    accept = ChainAcceptance(speculative_sampling)

    def propose(self, spec, depth):
        return spec.draft_tree([1] * depth, stop=Unsure(spec.warp, self.params.threshold))
# ------------------------------------------------------------------


def _params(**kw) -> ConfidentParams:
    return ConfidentParams(temperature=WARP.temperature, top_k=WARP.top_k, top_p=WARP.top_p, **kw)


@pytest.fixture(scope="module")
def pair():
    return near_pair()


def test_the_new_method_is_exact_and_its_rounds_stop_early(pair):
    dec = ConfidentSD(pair, _params())
    exact = exact_sequence_distribution(pair.target, PROMPT, LENGTH, WARP)
    samples, gammas = [], []
    for s in range(N):
        gen = dec.generate(PROMPT, LENGTH, seed=s)
        samples.append(tuple(gen.output_ids))
        gammas += gen.stats.round_gammas
    assert total_variation(samples, exact) < tv_bound(exact, N)
    assert chi_square_pvalue(samples, exact) > 1e-4
    assert 1 in gammas and max(gammas) > 1  # some rounds stopped at the first unsure draft, some went on


def test_the_new_method_gets_greedy_policies_and_statistics_from_the_template(pair):
    ar = build_decoder("ar_greedy", pair)
    greedy = ConfidentSD(pair, ConfidentParams(temperature=0.0, top_k=0, top_p=1.0, threshold=0.9))
    assert greedy.generate(PROMPT, 12).output_ids == ar.generate(PROMPT, 12).output_ids
    dec = ConfidentSD(pair, _params(), gamma_policy=policy_params("fsm", {"gamma_max": 3}))
    st = dec.generate(PROMPT, 16, seed=0).stats
    assert max(st.round_gammas) <= 3 and st.rounds == st.target_calls == len(st.accept_lengths)
    assert dec.params_dict()["gamma_policy"] == "fsm" and dec.is_lossless()


def test_the_example_is_small():
    import inspect

    lines = sum(len(inspect.getsource(obj).splitlines()) for obj in (ConfidentParams, Unsure, ConfidentSD))
    assert lines <= 40, lines


# ------------------------------------------------------------------ a draft-free method: 18 lines
class Lookup(SpeculativeDecoder[ConfidentParams]):
    """Prompt-lookup-style drafting (no draft model): after the last occurrence of the current last token in
    the prompt and the output, propose the γ tokens that followed it; deterministic candidates, so the
    point-mass rule accepts them exactly."""

    method = "lookup_example"
    uses_draft = False
    supports_draft_selection = False
    lossless = True
    accept = TreeWalk(point_mass_select)

    def propose(self, spec, depth):
        seq = spec.tokens
        starts = [i + 1 for i in range(len(seq) - 1) if seq[i] == seq[-1]]
        tokens = seq[starts[-1]:starts[-1] + depth] if starts and depth else []
        return DraftTree.chain(torch.tensor(tokens, dtype=torch.long), num_fed=0)
# ------------------------------------------------------------------


def test_a_draft_free_method_is_one_small_class_and_exact(pair):
    dec = Lookup(pair, _params(gamma=3))
    exact = exact_sequence_distribution(pair.target, PROMPT, LENGTH, WARP)
    samples, accepted = [], 0
    for s in range(N):
        gen = dec.generate(PROMPT, LENGTH, seed=s)
        samples.append(tuple(gen.output_ids))
        accepted += gen.stats.accepted_tokens
        assert gen.stats.draft_calls == 0 and gen.stats.target_calls == gen.stats.rounds
    assert total_variation(samples, exact) < tv_bound(exact, N)
    assert chi_square_pvalue(samples, exact) > 1e-4
    assert accepted > N // 4  # lookups were proposed and accepted
    greedy = Lookup(pair, ConfidentParams(temperature=0.0, top_k=0, top_p=1.0))
    assert greedy.generate([1, 2, 3, 1, 2], 12).output_ids == build_decoder("ar_greedy", pair).generate(
        [1, 2, 3, 1, 2], 12).output_ids
