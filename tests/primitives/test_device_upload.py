"""harness.primitives.device's copies to the device without waiting (issue 28 item 2)."""
import pytest
import torch

from harness.primitives.device import host_constant, upload
from harness.testing.host_sync import counting


@pytest.mark.parametrize("values", [[3, 1, 2], [[1, 2], [3, 4]], ((0, 1, 1), (1, 0, 1)), [], [7]])
def test_upload_is_the_values_as_a_long_tensor(values):
    with counting() as c:
        t = upload(values, "cpu")
    assert t.dtype == torch.long and torch.equal(t, torch.tensor(values, dtype=torch.long))
    assert c.total == 0 and c.by_name["async:to"] == 1  # a queued copy: recorded, not a synchronisation


def test_a_host_constant_is_copied_once_and_without_waiting():
    values = (11, 12, 13, 14, 5150)
    with counting() as c:
        a = host_constant(values, "cpu")
        b = host_constant(values, "cpu")
    assert a is b and a.tolist() == list(values)
    assert c.total == 0 and c.by_name["async:to"] <= 1


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (what the CPU counter stands for)")
def test_on_a_gpu_the_upload_does_not_synchronise():
    """On CUDA, torch's sync debug mode raises on a call that waits for the stream: the upload must not, a blocking
    copy must (else this check proves nothing)."""
    busy = torch.randn(2048, 2048, device="cuda")
    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(3):
            busy = busy @ busy / 2048  # queued work the copy lands behind
            t = upload([[1, 2, 3], [4, 5, 6]], "cuda")
        with pytest.raises(RuntimeError):
            torch.tensor([1, 2, 3], device="cuda")
    finally:
        torch.cuda.set_sync_debug_mode(previous)
    assert t.device.type == "cuda" and t.tolist() == [[1, 2, 3], [4, 5, 6]]
