"""``ar_greedy`` has no keys of its own."""
from harness.decoders.params import DecoderParams

Params = DecoderParams
