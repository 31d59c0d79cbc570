"""The device (row) form of DSBD's verification (harness.primitives.beam_verify, second half) against its
definitions, the host functions of the same module: Eq. 2-7 for every survivor count, the width, and one
layer's law (Theorem 3.1) and decisions."""
import pytest
import torch

from harness.primitives.beam_verify import (acceptance_count_distribution, acceptance_rates, count_distributions,
                                            dynamic_width, dynamic_width_rows, rates_of_chain, residual_chain,
                                            verify_layer, verify_layer_rows)
from harness.primitives.sampling import sample
from harness.testing import chi_square_pvalue


def uneven(n: int, seed: int, zero: int | None = None) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = (-torch.log(torch.rand(n, generator=g))) ** 2
    if zero is not None:
        x[zero] = 0.0
    return x / x.sum()


@pytest.mark.parametrize("seed", range(6))
def test_rates_counts_and_widths_equal_the_definitions(seed):
    p, q = uneven(7, seed), uneven(7, 100 + seed, zero=seed % 7)
    n = 5
    chain = residual_chain(p, q, n)
    alphas = rates_of_chain(chain, q)
    assert alphas.tolist() == pytest.approx(acceptance_rates(p, q, n), abs=1e-12)
    table = count_distributions(alphas)
    for m in range(n + 1):
        host = acceptance_count_distribution(acceptance_rates(p, q, m))
        assert table[m].tolist() == pytest.approx(host + [0.0] * (n - m), abs=1e-12)
        for threshold in (0.0, 0.3, 0.5, 0.7, 0.9, 1.0):
            for min_width in (1, 2, 6):
                row = dynamic_width_rows(table[m], torch.tensor(m), threshold, min_width)
                assert int(row) == dynamic_width(acceptance_rates(p, q, m), threshold, min_width)


def run_rows(p, q, survivor, width, size, n, seed=0):
    g = torch.Generator().manual_seed(seed)
    chain, outs = residual_chain(p, q, survivor.numel()), []
    for _ in range(n):
        v = verify_layer_rows(chain, q, sample(q, g, survivor.numel()), survivor, torch.tensor(width), size, g)
        outs.append(tuple(v.outcomes[:width].tolist()))
    return outs


@pytest.mark.parametrize("survive,width,size", [((1, 1, 1), 2, 3), ((1, 0, 1, 1), 1, 4), ((0, 1, 0), 2, 2),
                                                ((1, 1, 0, 1, 1), 3, 5), ((0, 0), 2, 2)])
def test_row_layer_outputs_are_iid_p_beam(survive, width, size):
    """Theorem 3.1 for the row form, with drafts whose parent was rejected skipped (line 10)."""
    import itertools
    import math

    p, q = uneven(5, 1), uneven(5, 2, zero=4)  # outcome 4 only through the residual
    outs = run_rows(p, q, torch.tensor(survive, dtype=torch.bool), width, size, 5000)
    law = {t: math.prod(float(p[i]) for i in t) for t in itertools.product(range(5), repeat=width)}
    assert chi_square_pvalue(outs, law) > 1e-3


def test_row_layer_decides_as_the_host_on_the_same_uniforms():
    """Every draft surviving, the same stream: the same accepted drafts and the same verdict as verify_layer."""
    p, q = uneven(6, 3), uneven(6, 4)
    chain = residual_chain(p, q, 4)
    for seed in range(300):
        cands = sample(q, torch.Generator().manual_seed(1000 + seed), 4)
        for width in (1, 2, 3, 4):
            host = verify_layer(p, q, cands, width, torch.Generator().manual_seed(seed))
            rows = verify_layer_rows(chain, q, cands, torch.ones(4, dtype=torch.bool), torch.tensor(width), 4,
                                     torch.Generator().manual_seed(seed))
            accepted = sum(s >= 0 for s in host.draft_slot)
            assert bool(rows.passed) == host.passed and int(rows.accepted) == accepted
            assert rows.draft[:accepted].tolist() == host.draft_slot[:accepted]
            if host.passed:
                assert rows.outcomes[:width].tolist() == host.outcomes.tolist()
