"""The cell's warm-up pays every method's set-up before the first measured prompt (issue 28 item 4).

For every method that runs a draft model (enumerated from the registry), the runner's warm-up
(:func:`harness.run.warmup.warm_up`, with the default ``runner`` settings) must call the draft and run the deepest
round a measured prompt of the cell runs (its shapes: γ one-token draft steps, a γ + 1-token verification), so
that no first-time work — a shape, an allocation, a kernel first launched — sits in the first timed window; and
with draft selection, every draft the selection may choose is warmed, not only the default one.
"""
import pytest

from harness.config.schema import RunnerConfig
from harness.decoders import registry
from harness.methods import build_decoder
from harness.models import ModelPair
from harness.run.warmup import warm_up, warmup_new_tokens
from harness.testing import ToyTokenizer, near_pair, toy_model

MAX_NEW = 48
DRAFT_METHODS = sorted(m for m, c in registry().items() if c.uses_draft)


@pytest.fixture(scope="module")
def pair():
    return near_pair(vocab_size=8)


@pytest.mark.parametrize("method", DRAFT_METHODS)
def test_the_draft_and_the_deepest_round_are_warmed_before_the_first_timed_prompt(pair, method):
    decoding = "greedy" if "greedy" in registry()[method].decodings else "sampling"
    prompt = [1, 2, 3, 4, 5]
    measured = build_decoder(method, pair, decoding=decoding).generate(prompt, MAX_NEW, seed=0)
    deepest = max(measured.stats.round_gammas)
    decoder = build_decoder(method, pair, decoding=decoding)
    calls = decoder.draft.calls
    warm = warm_up(decoder, prompt, RunnerConfig(), seed=0, max_new_tokens=MAX_NEW)
    assert decoder.draft.calls > calls, f"{method}: the warm-up never ran the draft"
    reached = max(g for w in warm for g in w.stats.round_gammas)
    assert reached >= deepest, f"{method}: warm-up rounds reach γ = {reached}, a measured prompt runs γ = {deepest}"


def test_warmup_tokens_cover_two_full_rounds_within_the_budget(pair):
    runner = RunnerConfig()
    assert warmup_new_tokens(runner, build_decoder("ar_greedy", pair), 64) == runner.warmup_new_tokens
    assert warmup_new_tokens(runner, build_decoder("bild", pair), 64) == 22  # γ = 10: two rounds of 11
    assert warmup_new_tokens(runner, build_decoder("bild", pair), 16) == 16  # never beyond the cell's own budget
    assert warm_up(build_decoder("sd", pair), [1, 2], RunnerConfig(warmup_generations=0), 0, 16) == []


def test_every_selectable_draft_is_warmed():
    target = toy_model(8, seed=0, hidden=24, layers=2)
    drafts = {"a": toy_model(8, seed=1, hidden=16, layers=1), "b": toy_model(8, seed=2, hidden=8, layers=1)}
    pair = ModelPair(target=target, draft=drafts["a"], tokenizer=ToyTokenizer(8), name="toy-multi",
                     target_id="toy/t", draft_id="a", drafts=drafts)
    decoder = build_decoder("sd", pair, decoding="greedy", gamma=3, draft_selection={"name": "ols", "fit_prompts": 2})
    decoder.prepare([[1, 2, 3], [3, 2, 1, 4]])  # as the runner does before its warm-up
    counts = {d: 0 for d in drafts}
    hooks = [m.register_forward_hook(lambda *_, d=d: counts.__setitem__(d, counts[d] + 1)) for d, m in drafts.items()]
    try:
        warm_up(decoder, [1, 2, 3], RunnerConfig(), seed=0, max_new_tokens=16)
    finally:
        for h in hooks:
            h.remove()
    assert all(n > 0 for n in counts.values()), counts
