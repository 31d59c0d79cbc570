"""SpecDec++ as a γ policy (Huang et al. 2024; the adaptive paper's Table 4 baseline): the rounds end where the
reference's loop ends them, greedy output is AR's with the embedded head, and misuse is a clear error.
Its exactness under sampling (a random head) is in the policy × decoder matrix of test_policy_decoders.py."""
import math

import pytest
import torch

from harness.errors import ConfigError
from harness.heads.specdecpp import AcceptanceHead
from harness.methods import build_decoder
from harness.testing import near_pair

PROMPT = [1, 2, 3]
WARP = {"temperature": 0.9, "top_k": 3, "top_p": 0.95}


def constant_head(hidden: int, p_accept: float, path) -> str:
    """An acceptance head that predicts p̂ = ``p_accept`` for every token."""
    head = AcceptanceHead(hidden, num_layers=0)
    with torch.no_grad():
        head.model[-1].weight.zero_()
        head.model[-1].bias.copy_(torch.tensor([0.0, math.log(p_accept / (1 - p_accept))]))
    head.save_pretrained(path, dtype=torch.float32)
    return str(path)


@pytest.mark.parametrize("p_accept,threshold,bounds,expected", [
    (0.8, 0.5, (2, 8), 5),  # 1 − 0.8^k > 0.5 first at k = 4 judged candidates: the 5th is drawn, unjudged
    (0.8, 0.5, (1, 3), 3),  # capped at gamma_max
    (0.5, 0.3, (2, 8), 2),  # 1 − 0.5 > 0.3 at once, but never below gamma_min
    (0.99, 0.9, (1, 6), 6),  # never confident of a rejection: gamma_max
])
def test_rounds_end_where_the_reference_loop_ends_them(tmp_path, p_accept, threshold, bounds, expected):
    pair = near_pair()
    head = constant_head(pair.draft.config.hidden_size, p_accept, tmp_path)
    policy = {"name": "specdecpp", "head": head, "threshold": threshold, "gamma_min": bounds[0],
              "gamma_max": bounds[1]}
    st = build_decoder("sd", pair, gamma_policy=policy, **WARP).generate(PROMPT, 40, seed=0).stats
    before = [sum(st.accept_lengths[:i]) for i in range(st.rounds)]
    unclipped = [g for g, b in zip(st.round_gammas, before) if 40 - b - 1 >= bounds[1]]  # the loop clips the last
    assert unclipped and set(unclipped) == {expected}
    assert st.draft_calls == sum(g for g in st.round_gammas)  # one draft forward per candidate: stopping costs none


def test_greedy_is_token_identical_to_ar_with_the_embedded_head(tiny_pair, heldout_prompts, tiny_ar_greedy):
    with pytest.warns(UserWarning, match="trained under decoding=sampling"):
        dec = build_decoder("sd", tiny_pair, decoding="greedy", gamma_policy={"name": "specdecpp", "threshold": 0.9})
        gens = [dec.generate(ids, 40) for ids in heldout_prompts[:2]]
    assert [g.output_ids for g in gens] == tiny_ar_greedy[:2]
    gammas = {g for gen in gens for g in gen.stats.round_gammas}
    assert len(gammas) >= 2 and max(gammas) <= 8  # the head ended rounds at different depths
    assert dec.is_lossless() and dec.params_dict()["gamma_policy"] == "specdecpp"


def test_misuse_is_a_clear_error(tmp_path):
    pair = near_pair()
    with pytest.raises(ConfigError, match="gamma_policy=specdecpp.*it is for .*sd"):
        build_decoder("mcsd", pair, k_config=(2, 1), gamma_policy="specdecpp")
    with pytest.raises(ConfigError, match="threshold"):
        build_decoder("sd", pair, gamma_policy={"name": "specdecpp", "threshold": 1.5})
    dec = build_decoder("sd", pair, gamma_policy="specdecpp", **WARP)  # tiny/specdecpp reads tiny/draft's 192
    with pytest.raises(ConfigError, match="gamma_policy.head=tiny/specdecpp.*size 192, this draft's are 24"):
        dec.generate(PROMPT, 12, seed=0)
