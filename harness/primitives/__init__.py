"""Shared decoding primitives, each written once: warping, sampling, counted model calls, KV-cache ops."""
