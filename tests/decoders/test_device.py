"""Every tensor and random stream a decoder makes lives on its model's device (issue 28 item 1).

On a GPU, a tensor made without ``device=`` lands on the host and a generator made for one device cannot draw on
another (``hf_assisted`` failed on every CUDA cell: ``Expected a 'cpu' device type for generator but found
'cuda'``). On this CPU-only suite the same mistake is made visible: the default device is set to ``meta`` while
the models stay on the CPU (:func:`~harness.testing.host_sync.foreign_default_device`), so a forgotten ``device=``
makes a tensor without data on the wrong device, and :class:`~harness.testing.host_sync.DeviceGuard` fails the
project call that made it. Enumerated from the registry: every registered method, in every decoding it supports.
"""
import pytest
import torch

from harness.decoders import registry
from harness.methods import build_decoder
from harness.primitives.device import device_of, ids_on, make_generator, seed_from
from harness.testing import near_pair
from harness.testing.heads import random_head_params
from harness.testing.host_sync import DeviceGuard, DeviceMismatch, foreign_default_device

#: generations whose draws happen in library code that builds host index tensors on purpose (transformers'
#: ``_speculative_sampling`` indexes with ``torch.arange(n)``, legal on a GPU): under a ``meta`` default those become
#: data-less and the draws differ, so only the project's own calls are checked there, not the output
LIBRARY_DRAWS = {("hf_assisted", "sampling")}
CASES = [(m, d) for m in sorted(registry()) for d in registry()[m].decodings]


@pytest.fixture(scope="module")
def pair():
    return near_pair(vocab_size=8)


@pytest.mark.parametrize("method,decoding", CASES)
def test_every_tensor_a_decoder_makes_is_on_its_models_device(pair, method, decoding):
    decoder = build_decoder(method, pair, decoding=decoding, **random_head_params(method, pair))
    expected = decoder.generate([1, 2, 3, 1, 2], 12, seed=1).output_ids
    guard = DeviceGuard(device_of(pair.target))
    with foreign_default_device(), guard:
        got = decoder.generate([1, 2, 3, 1, 2], 12, seed=1).output_ids
    assert not guard.violations
    if (method, decoding) not in LIBRARY_DRAWS:
        assert got == expected  # the same generation: nothing was made, or drawn, elsewhere


def test_the_guard_catches_a_forgotten_device():
    """The check itself: a factory call without ``device=`` in project code fails; with it, passes."""
    g = make_generator(0, "cpu")
    with foreign_default_device(), DeviceGuard("cpu"), pytest.raises((DeviceMismatch, RuntimeError)):
        int(torch.randint(0, 2**62, (1,), generator=g))  # hf_assisted's old seed draw
    with foreign_default_device(), DeviceGuard("cpu"):
        assert isinstance(seed_from(g), int)
        assert ids_on([1, 2], "cpu").device.type == "cpu"


def test_device_helpers():
    pair = near_pair(vocab_size=4)
    assert device_of(pair.target) == torch.device("cpu")
    assert ids_on([3, 4], "cpu").shape == (1, 2) and ids_on([3, 4], "cpu", rows=False).shape == (2,)
    assert make_generator(None, "cpu") is None
    a, b = make_generator(5, "cpu"), make_generator(5, "cpu")
    assert seed_from(a) == seed_from(b) and 0 <= seed_from(a) < 2**62
