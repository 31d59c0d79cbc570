"""The cell's warm-up: every set-up cost a method pays once, paid before its first measured prompt (issue 28 item 4).

Time to first token of draft-model methods on a GPU was 80-90 ms against AR's 9 ms: whatever a method does for the
first time — a draft's first forward, a shape first met (a round at full depth: the draft's γ one-token steps and the
target's γ + 1-token verification), the caching allocator growing for the larger KV footprint of two caches, a kernel
first launched (CUDA loads modules lazily) — lands in the first timed window unless the warm-up did it already. The
warm-up is therefore, for every method:

* ``runner.warmup_generations`` generations (or the decoder's own need when larger: the Q-learning γ policy's
  trials) on the cell's first prompt, each long enough for two full-depth rounds
  (:func:`warmup_new_tokens`: the speculative loop clips a round's depth to the tokens still needed, so 8 tokens
  never run a γ = 10 round);
* with draft selection (adaptive §5, several drafts), the same for every draft the selection may choose, not only
  the one it starts with.

Untimed and unrecorded: :func:`warm_up` returns the warm-up generations (for tests), nothing else keeps them.
"""
from __future__ import annotations

from harness.config.schema import RunnerConfig


def warmup_generations(runner: RunnerConfig, decoder) -> int:
    """Unrecorded, untimed generations before the first measured prompt: ``runner.warmup_generations``, or the
    decoder's own need when larger (the Q-learning γ policy's warm-up trials, adaptive App. C.1)."""
    return max(runner.warmup_generations, decoder.warmup_generations())


def warmup_new_tokens(runner: RunnerConfig, decoder, max_new_tokens: int) -> int:
    """New tokens of each warm-up generation: ``runner.warmup_new_tokens``, raised to two full-depth rounds of the
    method (2 × its lookahead, the deepest draft plus the bonus token) and capped at the cell's own budget."""
    lookahead = int(decoder.params.lookahead)
    return max(1, min(max_new_tokens, max(runner.warmup_new_tokens, 2 * lookahead)))


def _decoders(decoder) -> list:
    """The decoder, and with draft selection every per-draft decoder it may hand a prompt to."""
    return [decoder, *getattr(decoder, "decoders", {}).values()]


def warm_up(decoder, prompt_ids, runner: RunnerConfig, seed: int, max_new_tokens: int) -> list:
    """Run the cell's warm-up (module docstring) on ``prompt_ids``; returns the warm-up generations."""
    n = warmup_generations(runner, decoder)
    tokens = warmup_new_tokens(runner, decoder, max_new_tokens)
    out = [decoder.generate(prompt_ids, tokens, seed=seed) for _ in range(n)]
    for sub in _decoders(decoder)[1:] if n else ():
        out.append(sub.generate(prompt_ids, tokens, seed=seed))
    return out
