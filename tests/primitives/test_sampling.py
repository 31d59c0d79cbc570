"""One-token draws on a CPU (``harness.primitives.sampling.sample``, issue 28 item 2 "on CPU no regression"): the same
draw as ``torch.multinomial(probs, 1)`` and the same advance of the generator, without multinomial's scalar
exponentials (one C-library log1p per vocabulary entry: ~1 ms per 16k entries, the largest cost of DSBD's per-layer
fill-up on the tiny pair)."""
import pytest
import torch
from torch.overrides import TorchFunctionMode

from harness.primitives.sampling import sample


def _probs(shape, seed: int, sparse: bool) -> torch.Tensor:
    p = torch.softmax(3 * torch.randn(shape, generator=torch.Generator().manual_seed(seed)), -1)
    if sparse:  # a warped distribution: zeros outside the top few (a softmax over −inf)
        p = torch.where(p < p.topk(min(5, shape[-1]), -1).values[..., -1:], 0.0, p)
    return p


@pytest.mark.parametrize("shape", [(7,), (64,), (4096,), (1, 300), (3, 50), (2, 2, 33)])
def test_a_one_token_draw_is_multinomials_draw_with_the_same_advance(shape):
    for seed in range(150):
        p = _probs(shape, seed, sparse=seed % 2 == 0)
        ref, ours = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)
        want = torch.multinomial(p.reshape(-1, shape[-1]), 1, replacement=True, generator=ref)
        got = sample(p, ours)
        assert got.shape == (*shape[:-1], 1) and got.dtype == torch.long
        assert torch.equal(got.reshape(-1, 1), want), seed
        assert torch.equal(torch.rand(4, generator=ours), torch.rand(4, generator=ref)), "the generator advanced alike"


def test_a_one_token_draw_on_a_cpu_skips_multinomials_exponentials():
    class Seen(TorchFunctionMode):
        def __init__(self):
            super().__init__()
            self.names: set[str] = set()

        def __torch_function__(self, func, types, args=(), kwargs=None):
            self.names.add(getattr(func, "__name__", str(func)))
            return func(*args, **(kwargs or {}))

    p = _probs((4096,), 0, sparse=True)
    with Seen() as seen:
        sample(p, torch.Generator().manual_seed(0))
    assert not {"multinomial", "exponential_"} & seen.names, seen.names


def test_several_draws_and_other_dtypes_still_use_multinomial():
    p = _probs((2, 40), 1, sparse=False)
    for probs, k in ((p, 3), (p.double(), 1)):
        ref, ours = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
        assert torch.equal(sample(probs, ours, k), torch.multinomial(probs, k, replacement=True, generator=ref))


@pytest.mark.parametrize("bad", ["nan", "inf", "zeros"])
def test_a_distribution_without_a_valid_draw_is_a_clear_error_as_with_multinomial(bad):
    probs = torch.full((2, 16), 1 / 16)
    probs[1] = {"nan": float("nan"), "inf": float("inf"), "zeros": 0.0}[bad]
    with pytest.raises(RuntimeError, match="nan or inf, or a row has no mass"):
        sample(probs, torch.Generator().manual_seed(0))
