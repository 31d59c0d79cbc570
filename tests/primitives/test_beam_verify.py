"""DSBD verification math (seed 000 §3.1-3.2, App. A): Theorem 3.1 for one layer, Eq. 2-7 against
brute-force enumeration, Theorem 3.2 in simulation."""
import itertools
import math

import pytest
import torch

from harness.primitives.beam_verify import (acceptance_count_distribution, acceptance_rates, dynamic_width,
                                            verify_layer)
from harness.primitives.beams import beam_distribution, beam_joint_logprobs
from harness.primitives.sampling import residual, sample
from harness.primitives.warping import Warp
from harness.testing import chi_square_pvalue, toy_pair


def random_distribution(n: int, seed: int) -> torch.Tensor:
    """A random, fairly uneven distribution over n outcomes (float64)."""
    g = torch.Generator().manual_seed(seed)
    x = (-torch.log(torch.rand(n, generator=g, dtype=torch.float64))) ** 1.5
    return x / x.sum()


def run_layer_many(p_beam, q_beam, num_drafts, width, n, seed=0):
    g = torch.Generator().manual_seed(seed)
    outs = []
    for _ in range(n):
        cands = sample(q_beam, g, num_drafts)
        res = verify_layer(p_beam, q_beam, cands, width, g)
        outs.append(tuple(res.outcomes.tolist()))
    return outs


def product_law(p: torch.Tensor, width: int) -> dict:
    support = torch.nonzero(p > 0).flatten().tolist()
    return {tup: math.prod(float(p[i]) for i in tup) for tup in itertools.product(support, repeat=width)}


@pytest.mark.parametrize("num_drafts,width", [(3, 2), (4, 1), (1, 2), (5, 3)])
def test_theorem_3_1_one_layer_iid_p_beam(num_drafts, width):
    """The W_L output beams of a layer are i.i.d. p_beam (Theorem 3.1), whatever q_beam and W_S."""
    p, q = random_distribution(5, 1), random_distribution(5, 2)
    q[4] = 0.0  # a beam the draft can never propose: only reachable through the residual
    q = q / q.sum()
    outs = run_layer_many(p, q, num_drafts, width, 6000 if width < 3 else 4000)
    assert chi_square_pvalue(outs, product_law(p, width)) > 1e-3


def test_acceptance_test_of_algorithm_line_16_would_be_biased():
    """Sanity check of the test's power: Alg. 1 line 16 as printed (r ≤ q_beam/p') misses p_beam."""
    p, q = random_distribution(5, 1), random_distribution(5, 2)
    g = torch.Generator().manual_seed(0)
    outs = []
    for _ in range(6000):
        cands, p_res, out = sample(q, g, 3).tolist(), p, None
        for x in cands:
            if float(torch.rand(1, generator=g)) <= float(q[x] / p_res[x]):
                out = x
                break
            p_res = residual(p_res, q)
        outs.append((out if out is not None else int(sample(p_res, g)[0]),))
    assert chi_square_pvalue(outs, product_law(p, 1)) < 1e-6


@torch.no_grad()
def test_theorem_3_1_on_toy_lm_layer():
    """One verification step with p_beam / q_beam of a toy target / draft pair over two input beams."""
    pair = toy_pair(vocab_size=4)
    warp = Warp(1.0, 0, 1.0)
    beams = [[1, 2, 0], [1, 2, 3]]

    def beam_dist(model):
        logits = model(input_ids=torch.tensor(beams)).logits.float()
        logp = torch.log_softmax(logits, -1)
        prev = torch.stack([logp[i, 1, beams[i][2]] for i in range(2)])  # joint of the input beams' last token
        joint = beam_joint_logprobs(prev, logp[:, -1], torch.zeros(2, dtype=torch.bool), eos_token_id=0)
        return beam_distribution(joint, warp).double()

    p_beam, q_beam = beam_dist(pair.target), beam_dist(pair.draft)
    outs = run_layer_many(p_beam, q_beam, num_drafts=3, width=2, n=6000)
    assert chi_square_pvalue(outs, product_law(p_beam, 2)) > 1e-3


def brute_force_count_distribution(p: torch.Tensor, q: torch.Tensor, m: int) -> list[float]:
    """P(k of m accepted) by enumerating every draft value and every accept/reject outcome."""
    dist = [0.0] * (m + 1)
    support = torch.nonzero(q > 0).flatten().tolist()

    def walk(i, p_res, k, prob):
        if i == m:
            dist[k] += prob
            return
        for x in support:
            qx = float(q[x])
            acc = min(1.0, float(p_res[x]) / qx)
            if acc > 0:
                walk(i + 1, p, k + 1, prob * qx * acc)
            if acc < 1:
                walk(i + 1, residual(p_res, q), k, prob * qx * (1 - acc))

    walk(0, p, 0, 1.0)
    return dist


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_eq_2_to_5_match_enumeration(seed):
    p, q = random_distribution(4, 10 + seed), random_distribution(4, 20 + seed)
    for m in range(5):
        formula = acceptance_count_distribution(acceptance_rates(p, q, m))
        brute = brute_force_count_distribution(p, q, m)
        assert formula == pytest.approx(brute, abs=1e-9)


@pytest.mark.parametrize("threshold,min_width", [(0.9, 1), (0.7, 1), (0.5, 2), (0.3, 1), (1.0, 1), (0.0, 1)])
def test_eq_6_7_dynamic_width_by_enumeration(threshold, min_width):
    p, q = random_distribution(4, 3), random_distribution(4, 4)
    m = 4
    brute = brute_force_count_distribution(p, q, m)
    at_least = [sum(brute[k:]) for k in range(m + 1)]
    expected = max(min_width, max(k for k in range(m + 1) if at_least[k] >= threshold - 1e-12))
    assert dynamic_width(acceptance_rates(p, q, m), threshold, min_width) == expected


def test_verify_layer_accept_counts_follow_eq_2():
    """verify_layer without early stop (width > m) accepts k drafts with probability P(m, k)."""
    p, q = random_distribution(5, 7), random_distribution(5, 8)
    m, n = 4, 5000
    g = torch.Generator().manual_seed(3)
    counts = [sum(s >= 0 for s in verify_layer(p, q, sample(q, g, m), m + 1, g).draft_slot) for _ in range(n)]
    law = acceptance_count_distribution(acceptance_rates(p, q, m))
    assert chi_square_pvalue(counts, dict(enumerate(law))) > 1e-3


def simulate_steps(p, q, num_drafts, gamma, threshold, min_width, n, seed=0):
    """Generated steps per iteration with i.i.d. layers (Theorem 3.2's setting)."""
    g = torch.Generator().manual_seed(seed)
    width = dynamic_width(acceptance_rates(p, q, num_drafts), threshold, min_width)
    steps = []
    for _ in range(n):
        for layer in range(1, gamma + 1):
            if not verify_layer(p, q, sample(q, g, num_drafts), width, g).passed:
                steps.append(layer)
                break
        else:
            steps.append(gamma + 1)
    return steps, width


@pytest.mark.parametrize("threshold,min_width", [(0.9, 2), (0.7, 1)])
def test_theorem_3_2_expected_steps(threshold, min_width):
    """E[steps] = (1 − a^{γ+1}) / (1 − a) with a the layer-pass probability; Theorem 3.2's
    a = min(t, β_{W_min}) is exact when β_{W_min} < t and a lower bound on a otherwise."""
    p, q = random_distribution(6, 30), random_distribution(6, 31)
    num_drafts, gamma, n = 4, 3, 4000
    law = acceptance_count_distribution(acceptance_rates(p, q, num_drafts))
    steps, width = simulate_steps(p, q, num_drafts, gamma, threshold, min_width, n)
    a = sum(law[width:])  # P(at least W_L accepted) = P(layer passes)
    beta = sum(law[min_width:])
    theorem_a = min(threshold, beta)
    expected = (1 - a ** (gamma + 1)) / (1 - a)
    mean = sum(steps) / n
    sd = (sum((s - mean) ** 2 for s in steps) / (n - 1)) ** 0.5
    assert abs(mean - expected) < 4 * sd / n ** 0.5
    if beta < threshold:
        assert a == pytest.approx(theorem_a)
    else:
        assert a >= theorem_a - 1e-12
