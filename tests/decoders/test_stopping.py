"""Stop strings end generation inside every decoder family's loop (issue 14 item 3): the output stops at
the token completing the stop string, and the statistics (tokens, calls, rounds) describe that output."""
import pytest

from harness.methods import build_decoder
from harness.primitives.stopping import StopCondition

MAX_NEW = 40

FAMILIES = {
    "ar": ("ar_greedy", {}, "greedy"),
    "ar_sampling": ("ar_sampling", {}, "sampling"),
    "beam": ("beam_search", {"width": 2}, "greedy"),
    "beam_sampling": ("beam_sampling", {"width": 2}, "sampling"),
    "chain_sd": ("sd", {"gamma": 4}, "greedy"),
    "chain_sd_sampling": ("sd", {"gamma": 4}, "sampling"),
    "tree": ("specinfer", {"gamma": 3, "num_drafts": 2}, "greedy"),
    "mtad": ("mtad", {"gamma": 3}, "sampling"),
    "hf_assisted": ("hf_assisted", {"gamma": 4}, "greedy"),
    "mtjd": ("mtjd", {"gamma": 3, "width": 2}, "greedy"),
    "beam_dsbd": ("dsbd", {"gamma": 3, "draft_width": 2}, "sampling"),
    "draft_free_lookup": ("pld", {}, "greedy"),
    "draft_free_lookup_sampling": ("pld", {"prompt_lookup_num_tokens": 4}, "sampling"),
    "draft_free_lookahead": ("lookahead", {"window": 5, "ngram": 3, "guess": 5}, "sampling"),
    "hf_prompt_lookup": ("hf_assisted", {"prompt_lookup_num_tokens": 10}, "greedy"),
}


def _decode(tok, ids):
    return tok.decode(ids, skip_special_tokens=True)


def _stop_string(tok, out: list[int]) -> tuple[str, int]:
    """A stop string completed by a token in the middle of ``out`` (and not earlier): (string, tokens to keep)."""
    for k in range(MAX_NEW // 3, len(out)):
        head, full = _decode(tok, out[:k - 1]), _decode(tok, out[:k])
        piece = full[len(head):].strip()
        if len(piece) >= 2 and piece not in head:
            return piece, k
    pytest.skip("no usable stop string in this output")


@pytest.mark.parametrize("family", list(FAMILIES))
def test_generation_stops_at_the_stop_string(tiny_pair, heldout_prompts, family):
    method, params, decoding = FAMILIES[family]
    dec = build_decoder(method, tiny_pair, decoding=decoding, **params)
    tok = tiny_pair.tokenizer
    prompt = heldout_prompts[0]
    full = dec.generate(prompt, MAX_NEW, seed=3)
    stop, keep = _stop_string(tok, full.output_ids)
    cut = dec.generate(prompt, MAX_NEW, seed=3, stop=["@@never@@", stop])
    out = cut.output_ids
    if family.startswith("beam"):  # a stop string finishes a beam, like EOS: every final beam ends at one or runs full length
        for beam in cut.beams:
            text = _decode(tok, beam.tokens)
            assert (stop in text and stop not in _decode(tok, beam.tokens[:-1])) or len(beam.tokens) == MAX_NEW
        assert cut.stats.new_tokens == len(out)
        return
    assert out == full.output_ids[:keep]  # same decoding up to the stop (same seed), nothing past it
    assert stop in _decode(tok, out) and stop not in _decode(tok, out[:-1])
    assert cut.stopped_by_stop and not full.stopped_by_stop
    st = cut.stats
    assert st.new_tokens == len(out)
    assert st.target_calls < full.stats.target_calls  # the work past the stop was not done
    if st.rounds:
        assert sum(st.accept_lengths) == len(out) == st.new_tokens
        assert st.accepted_tokens <= st.draft_positions and len(st.round_gammas) == st.rounds


def test_stop_condition_cuts_a_block_after_the_completing_token():
    text = {1: "a", 2: "b", 3: "c", 4: "d", 9: "<eos>"}
    sc = StopCondition(9, ("bc",), lambda ids: "".join(text[i] for i in ids if i != 9))
    assert sc.cut([], [1]) is None
    assert sc.cut([1], [2, 3, 4]) == 2  # "b" + "c" completes "bc" at the block's 2nd token
    across = StopCondition(9, ("bc",), sc.decode)
    assert across.cut([1, 2], [3, 4]) == 1  # a stop string split across blocks
    assert StopCondition(9).cut([1], [2, 9, 3]) == 2  # EOS ends the block
    assert sc.trim([1, 2, 3, 4]) == ([1, 2, 3], True)
    assert StopCondition(9, ("zz",), sc.decode).trim([1, 9, 2]) == ([1, 9], False)
    assert sc.rows_stopped([[1, 2, 3], [3, 2]]) == [True, False]
    with pytest.raises(ValueError, match="decode"):
        StopCondition(None, ("x",))
