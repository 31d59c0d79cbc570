"""Warp T must equal HF's temperature → top-k → top-p warpers, so sampling matches HF generate."""
import pytest
import torch
from transformers.generation.logits_process import (LogitsProcessorList, TemperatureLogitsWarper,
                                                    TopKLogitsWarper, TopPLogitsWarper)

from harness.errors import ConfigError
from harness.primitives.sampling import residual
from harness.primitives.warping import Warp


@pytest.mark.parametrize("temperature,top_k,top_p", [(1.0, 20, 0.9), (0.7, 10, 0.8), (1.3, 0, 0.5),
                                                     (1.0, 5, 1.0), (2.0, 0, 1.0), (1.0, 1, 0.9)])
def test_warp_matches_hf_warpers(temperature, top_k, top_p):
    torch.manual_seed(0)
    logits = torch.randn(16, 300) * 3
    hf = LogitsProcessorList()
    if temperature != 1.0:
        hf.append(TemperatureLogitsWarper(temperature))
    if top_k:
        hf.append(TopKLogitsWarper(top_k))
    if top_p < 1.0:
        hf.append(TopPLogitsWarper(top_p))
    expected = torch.softmax(hf(None, logits.clone()), -1)
    got = Warp(temperature, top_k, top_p).probs(logits)
    torch.testing.assert_close(got, expected)


def test_top_p_keeps_the_crossing_token_and_at_least_one():
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05])
    kept = Warp(1.0, 0, 0.8).probs(probs.log()) > 0
    assert kept.tolist() == [True, True, False, False]  # 0.5 < 0.8 → keep next; 0.8 reached → stop
    kept = Warp(1.0, 0, 0.81).probs(probs.log()) > 0
    assert kept.tolist() == [True, True, True, False]
    assert (Warp(1.0, 0, 0.01).probs(probs.log()) > 0).tolist() == [True, False, False, False]


def test_greedy_is_one_hot_argmax():
    logits = torch.tensor([[0.1, 2.0, -1.0]])
    assert Warp(0.0).probs(logits).tolist() == [[0.0, 1.0, 0.0]]


@pytest.mark.parametrize("bad", [dict(temperature=-1), dict(top_k=-2), dict(top_p=0.0), dict(top_p=1.5)])
def test_bad_warp_values_are_rejected(bad):
    with pytest.raises(ConfigError):
        Warp(**bad)


def test_residual_distribution():
    p = torch.tensor([0.5, 0.3, 0.2, 0.0])
    q = torch.tensor([0.2, 0.5, 0.1, 0.2])
    torch.testing.assert_close(residual(p, q), torch.tensor([0.75, 0.0, 0.25, 0.0]))
    torch.testing.assert_close(residual(p, p), p)  # undefined case falls back to p


@pytest.mark.parametrize("top_k,top_p", [(20, 0.9), (5, 0.47), (8, 0.99), (3, 0.37), (50, 0.93), (10, 0.61)])
def test_top_p_within_top_k_keeps_what_the_full_sort_keeps_ties_included(top_k, top_p):
    """Top-p after top-k is computed without sorting the vocabulary: the same kept set as HF's warpers, and with
    values tied at the k-th place the same number of tokens kept, the untied ones exactly the same (which of the
    tied ones is HF's unstable sort's choice). The top-p values avoid sums of tied probabilities that meet them
    exactly (j/10 for ten tied tokens), where float rounding, not the law, decides."""
    torch.manual_seed(1)
    logits = (torch.randn(64, 200) * 2).round()  # integer logits: many ties, also at the k-th place
    hf = LogitsProcessorList([TopKLogitsWarper(top_k), TopPLogitsWarper(top_p)])
    expected = torch.isfinite(hf(None, logits.clone()))
    got = torch.isfinite(Warp(1.0, top_k, top_p).logits(logits))
    assert got.sum(-1).tolist() == expected.sum(-1).tolist()
    kept_values = lambda kept: sorted(v for v in logits[kept].tolist())  # noqa: E731
    for row in range(logits.size(0)):
        assert kept_values((row, got[row])) == kept_values((row, expected[row]))
    smooth = torch.randn(64, 200) * 3  # no ties: the very same tokens
    hf_smooth = torch.isfinite(hf(None, smooth.clone()))
    assert torch.equal(torch.isfinite(Warp(1.0, top_k, top_p).logits(smooth)), hf_smooth)
