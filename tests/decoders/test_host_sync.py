"""Host-device synchronisations per token and per round, for every registered decoder (issue 28 item 2).

On a GPU every call that reads a device value on the host (``.item()``, ``.tolist()``, ``int(t)``…), makes a
data-dependent shape (``nonzero``, a bool mask) or copies host data to the device stops the host until the device
has drained its queue. Counted on this CPU by :class:`~harness.testing.host_sync.SyncCounter` over whole
generations on a toy pair with each method's default parameters, and held to a stated budget: autoregressive
decoding at most 1 per token (HF ``generate``'s loop reads one stopping flag per token), a speculative round at
most 2 (the round's outcome in one read, plus a lookup's upload), and for the methods below that genuinely need
more, a budget per round with its reason. Every registered method must have a row: a new decoder states its
budget here. A generation may add ``FIXED`` once (the prompt's upload and the speculative state's read of it).
"""
import pytest

from harness.decoders import registry
from harness.methods import build_decoder
from harness.testing import near_pair
from harness.testing.heads import random_head_params
from harness.testing.host_sync import SyncCounter, counting

FIXED = 3
AR, ROUND = 1, 2  # the rules: per token, per speculative round
_TREE = "a tree's mask and positions are built on the host (where its parents are) and copied once per draft level and once for the verification"
_WALK = "the sampling walk draws at each visited node in turn (the selection rules read p̃(x), q̃(x) per candidate)"
_HOST_RULE = "the rule computes its accepted count on the host (not moved to the device this session)"
#: (method, decoding) -> (unit, budget per unit, reason); decoding None: both decodings
BUDGETS = {
    ("ar_greedy", None): ("token", AR, "the rule"),
    ("ar_sampling", None): ("token", AR, "the rule"),
    ("sd", None): ("round", ROUND, "the rule"),
    ("pld", None): ("round", ROUND, "the rule: the outcome's read and the lookup's upload"),
    ("typical", None): ("round", ROUND, "the rule"),
    ("bild", "greedy"): ("round", ROUND, "the rule"),
    ("bild", "sampling"): ("round", 6, _HOST_RULE + "; BiLD's fallback test reads the draft's confidence"),
    ("mtad", "sampling"): ("round", 12, _HOST_RULE + "; the draft's beam search reads scores per step"),
    ("beam_search", "greedy"): ("token", 7, "beam bookkeeping per step on the host: finished beams, scores (as HF's)"),
    ("beam_sampling", "sampling"): ("token", 3, "beam bookkeeping per step on the host: finished beams, scores"),
    ("mtjd", None): ("round", 7, "the joint step's beam bookkeeping reads scores per token"),
    ("hf_assisted", None): ("round", 19, "transformers' own assisted loop (the reference; not ours to change)"),
    ("specinfer", "greedy"): ("round", 9, _TREE),
    ("spectr", "greedy"): ("round", 9, _TREE),
    ("mcsd", "greedy"): ("round", 10, _TREE),
    ("mcsd_dynamic", "greedy"): ("round", 3, _TREE + "; the decision model reads its verdict per level"),
    ("mcsd_target_init", "greedy"): ("round", 9, _TREE + "; the target-sampled roots are read"),
    ("eagle2", "greedy"): ("round", 7, _TREE + "; EAGLE-2 re-ranks its tree on the host"),
    ("medusa", "greedy"): ("round", 4, _TREE + "; the heads' top-k are read to build the tree"),
    ("medusa_typical", "greedy"): ("round", 4, _TREE + "; the heads' top-k are read to build the tree"),
    ("lookahead", "greedy"): ("round", 5, _TREE + "; the n-gram pool is kept on the host"),
    ("specinfer", "sampling"): ("round", 27, _TREE + "; " + _WALK),
    ("spectr", "sampling"): ("round", 34, _TREE + "; " + _WALK),
    ("mcsd", "sampling"): ("round", 35, _TREE + "; " + _WALK),
    ("mcsd_dynamic", "sampling"): ("round", 37, _TREE + "; " + _WALK),
    ("mcsd_target_init", "sampling"): ("round", 42, _TREE + "; " + _WALK),
    ("eagle2", "sampling"): ("round", 16, _TREE + "; " + _WALK),
    ("medusa", "sampling"): ("round", 14, _TREE + "; " + _WALK),
    ("medusa_typical", "sampling"): ("round", 8, _TREE + "; Medusa's typical acceptance walks the tree on the host"),
    ("lookahead", "sampling"): ("round", 11, _TREE + "; " + _WALK),
    ("dsbd", "sampling"): ("round", 60, "a beam forest per round: per-beam bookkeeping and tree rollback on the host"),
}
CASES = [(m, d) for m in sorted(registry()) for d in registry()[m].decodings]


def budget(method: str, decoding: str) -> tuple[str, int, str]:
    return BUDGETS.get((method, decoding)) or BUDGETS[(method, None)]


@pytest.fixture(scope="module")
def pair():
    return near_pair(vocab_size=16)


def test_every_method_states_a_budget():
    missing = [c for c in CASES if (c not in BUDGETS and (c[0], None) not in BUDGETS)]
    assert not missing, f"state a host-sync budget (and why) for {missing}"
    for (method, _), (unit, n, reason) in BUDGETS.items():
        assert method in registry() and unit in ("token", "round") and n >= 1 and reason
    for key, (unit, n, _) in BUDGETS.items():  # the rules are the ceiling wherever a method meets them
        if key[0] in ("ar_greedy", "ar_sampling"):
            assert (unit, n) == ("token", AR)
        if key[0] in ("sd", "pld", "typical"):
            assert (unit, n) == ("round", ROUND)


@pytest.mark.parametrize("method,decoding", CASES)
def test_syncs_per_token_and_round_stay_within_budget(pair, method, decoding):
    decoder = build_decoder(method, pair, decoding=decoding, **random_head_params(method, pair))
    decoder.generate([1, 2, 3], 4, seed=0)  # first-call set-up is not the loop's
    with counting() as counter:
        gen = decoder.generate([1, 2, 3, 4, 5, 1, 2, 3, 4, 6, 7], 40, seed=3)
    unit, per, reason = budget(method, decoding)
    units = gen.stats.new_tokens if unit == "token" else gen.stats.rounds
    assert units > 0
    assert counter.total <= per * units + FIXED, (
        f"{method} ({decoding}): {counter.total} synchronising calls for {units} {unit}s, budget {per}/{unit} "
        f"+ {FIXED} ({reason}); by call: {dict(counter.by_name)}")


def test_the_counter_sees_what_synchronises():
    import torch

    t = torch.arange(6)
    with counting() as c:
        t.sum().item()
        t.tolist()
        int(t[0])
        bool(t[1] > 0)
        t[t > 2]
        torch.nonzero(t)
        torch.tensor([1, 2])
        torch.tensor([])  # an empty copy moves nothing
        t.argmax()  # stays on the device
        t[1:3]
    assert c.by_kind == {"read": 4, "shape": 2, "upload": 1}
    assert isinstance(c, SyncCounter) and c.total == 7
