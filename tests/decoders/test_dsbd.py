"""The DSBD decoder (seed 000 §3): exactness at fixed width against target beam sampling, beam scores
against full forwards (forest masks and per-beam KV caches), one target call per iteration, and
the memory-constrained mode (§3.4)."""
import itertools
import math

import pytest
import torch

from harness.methods import build_decoder
from harness.errors import ConfigError
from harness.primitives.beams import beam_distribution
from harness.primitives.kv_cache import cache_bytes
from harness.testing import chi_square_pvalue, total_variation, toy_pair, tv_bound


class Scorer:
    """log p(next | prefix) by full, uncached forwards (memoised): the reference for every check."""

    def __init__(self, model):
        self.model, self.memo = model, {}

    @torch.no_grad()
    def next_logp(self, ids: tuple) -> torch.Tensor:
        if ids not in self.memo:
            logits = self.model(input_ids=torch.tensor([ids])).logits[0, -1].float()
            self.memo[ids] = torch.log_softmax(logits, -1)
        return self.memo[ids]

    def seq_logp(self, prompt: list, seq: list) -> float:
        return sum(float(self.next_logp(tuple(prompt + seq[:i]))[t]) for i, t in enumerate(seq))


def exact_beam_sampling_output(model, prompt, width, length, warp, eos=None) -> dict:
    """Law of the sequence returned by beam sampling (Eq. 1, W i.i.d. draws per step, lowest
    perplexity returned, first on ties), by enumerating every ordered beam tuple."""
    scorer = Scorer(model)
    vocab = scorer.next_logp(tuple(prompt)).numel()
    states = {((),): 1.0}  # ordered tuple of beams (token tuples, EOS-padded) -> probability

    def ended(beam):
        return eos is not None and eos in beam

    def logp(beam):
        seq = list(beam[: beam.index(eos) + 1]) if ended(beam) else list(beam)
        return scorer.seq_logp(prompt, seq), len(seq)

    for _ in range(length):
        nxt = {}
        for beams, prob in states.items():
            joint = []
            for b in beams:
                if ended(b):
                    row = torch.full((vocab,), float("-inf"))
                    row[eos] = logp(b)[0]
                else:
                    row = logp(b)[0] + scorer.next_logp(tuple(prompt) + b)
                joint.append(row)
            p_beam = beam_distribution(torch.stack(joint), warp).double()
            support = torch.nonzero(p_beam > 0).flatten().tolist()
            for draw in itertools.product(support, repeat=width):
                key = tuple(beams[o // vocab] + (o % vocab,) for o in draw)
                nxt[key] = nxt.get(key, 0.0) + prob * math.prod(float(p_beam[o]) for o in draw)
        states = nxt
    out = {}
    for beams, prob in states.items():
        scored = [logp(b) for b in beams]
        best = min(range(width), key=lambda i: (-scored[i][0] / scored[i][1], i))
        b = beams[best]
        seq = b[: b.index(eos) + 1] if ended(b) else b
        out[seq] = out.get(seq, 0.0) + prob
    return out


CASES = {  # fixed width W_L (§3.1): the output must follow target beam sampling exactly (Theorem 3.1)
    "two_layers": dict(vocab=4, eos=None, length=3, params=dict(width=2, draft_width=3, gamma=2, top_k=0, top_p=1.0)),
    "warped_eos_multi_iteration": dict(vocab=4, eos=3, length=4,
                                       params=dict(width=2, draft_width=2, gamma=1, top_k=3, top_p=1.0)),
}


@pytest.mark.parametrize("case", [c if c == "two_layers" else pytest.param(c, marks=pytest.mark.slow) for c in CASES])
def test_fixed_width_dsbd_follows_beam_sampling(case):
    c = CASES[case]
    pair = toy_pair(vocab_size=c["vocab"], eos_token_id=c["eos"], sharpness=0.6)
    dec = build_decoder("dsbd", pair, **c["params"])
    prompt = [1, 2]
    exact = exact_beam_sampling_output(pair.target, prompt, c["params"]["width"], c["length"],
                                       dec.params.warp, c["eos"])
    n = 1500
    samples = [tuple(dec.generate(prompt, c["length"], seed=s).output_ids) for s in range(n)]
    assert chi_square_pvalue(samples, exact) > 1e-3
    assert total_variation(samples, exact) < tv_bound(exact, n)


CONFIGS = [dict(), dict(width=2), dict(width=3, draft_width=5), dict(memory_constrained=True, threshold=0.5),
           dict(gamma=1, draft_width=2), dict(threshold=0.3, draft_width=6, gamma=2, min_width=2)]


@pytest.mark.parametrize("eos", [None, 2])
def test_beam_scores_match_full_forwards(eos):
    """After every iteration, each beam's target and draft joint log-likelihoods equal uncached full
    forwards: the forest masks, positions and per-row cache gathers are right."""
    pair = toy_pair(vocab_size=6, eos_token_id=eos)
    target, draft = Scorer(pair.target), Scorer(pair.draft)

    def until_eos(tokens):
        return tokens[: tokens.index(eos) + 1] if eos in tokens else tokens

    checked = {"p": 0, "q": 0}
    for i, params in enumerate(CONFIGS):
        dec = build_decoder("dsbd", pair, top_k=0, top_p=1.0, **params)
        advance = dec._advance

        def checked_advance(*args, **kw):
            beams = advance(*args, **kw)
            for b in range(beams.tokens.size(0)):
                tokens = beams.tokens[b].tolist()
                assert float(beams.logp[b]) == pytest.approx(target.seq_logp(prompt, until_eos(tokens)), abs=1e-4)
                drafted = until_eos(tokens[:-1] if beams.deferred_finished is not None else tokens)
                if not torch.isnan(beams.q_logp[b]):
                    assert float(beams.q_logp[b]) == pytest.approx(draft.seq_logp(prompt, drafted), abs=1e-4)
                    checked["q"] += 1
                checked["p"] += 1
            return beams

        dec._advance = checked_advance
        for s in range(3):
            prompt = [1, 3, 4, 0][: 1 + (s + i) % 4]
            dec.generate(prompt, 8, seed=s)
    assert checked["q"] > 50 and checked["p"] > checked["q"]


def test_one_target_call_per_iteration_and_stats():
    pair = toy_pair(vocab_size=6)
    dec = build_decoder("dsbd", pair, draft_width=4, gamma=3, threshold=0.7, top_k=0, top_p=1.0)
    gen = dec.generate([1, 2, 3], 12, seed=0)
    st = gen.stats
    assert len(gen.output_ids) == 12
    assert st.target_calls == st.rounds  # ONE forest call per round (§3.3), the prompt prefilled in the first
    assert sum(st.accept_lengths) == 12 and st.accepted_tokens == 12 - st.rounds
    assert st.extras.avg_width >= 1 and st.mean_acceptance_length >= 1
    assert st.draft_positions == sum(st.round_gammas) and st.draft_nodes == 4 * st.draft_positions


def test_bad_parameters_are_rejected():
    pair = toy_pair(vocab_size=4)
    for bad in (dict(draft_width=0), dict(threshold=1.5), dict(width=0), dict(temperature=0.0), dict(beams=3)):
        with pytest.raises(ConfigError):
            build_decoder("dsbd", pair, **bad)


class CacheRecorder:
    """Wraps a CountedModel; records (batch rows, bytes) of the KV cache after every call."""

    def __init__(self, counted):
        self.counted, self.rows, self.bytes = counted, [], []

    def __getattr__(self, name):
        return getattr(self.counted, name)

    def __call__(self, input_ids, cache=None, **kw):
        out = self.counted(input_ids, cache, **kw)
        if cache is not None:
            self.rows.append(cache.layers[0].keys.size(0))
            self.bytes.append(cache_bytes(cache))
        return out


def test_memory_constrained_mode_keeps_one_cache_and_less_memory(tiny_pair, heldout_prompts):
    """§3.4: one KV-cache row for the target (and the draft) throughout; peak KV memory below beam
    sampling's with W = 4 (the paper's comparison), on the tiny pair."""
    prompt = heldout_prompts[0]
    dsbd = build_decoder("dsbd", tiny_pair, memory_constrained=True, draft_width=4, gamma=3, threshold=0.7)
    dsbd.target, dsbd.draft = CacheRecorder(dsbd.target), CacheRecorder(dsbd.draft)
    gen = dsbd.generate(prompt, 40, seed=0)
    assert set(dsbd.target.rows) == {1} and set(dsbd.draft.rows) == {1}
    assert gen.stats.extras.peak_kv_rows == 1
    beam = build_decoder("beam_sampling", tiny_pair, width=4)
    beam.target = CacheRecorder(beam.target)
    beam.generate(prompt, 40, seed=0)
    assert max(dsbd.target.bytes) < max(beam.target.bytes)
    assert max(dsbd.target.bytes) + max(dsbd.draft.bytes) < max(beam.target.bytes)


def test_full_mode_keeps_one_cache_row_per_input_beam():
    pair = toy_pair(vocab_size=6)
    dec = build_decoder("dsbd", pair, width=3, draft_width=4, gamma=2, top_k=0, top_p=1.0)
    dec.target = CacheRecorder(dec.target)
    beams = dec.generate([1, 2], 6, seed=0).beams
    assert len(beams) == 3
    assert dec.target.rows[0] == 1 and set(dec.target.rows[1:]) == {3}  # the prompt's one beam, then W_L = 3 rows
