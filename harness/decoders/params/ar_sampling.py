"""``ar_sampling``: the warp only (the decoding's)."""
from harness.decoders.params import SamplingParams

Params = SamplingParams
