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
