"""Token trees and tree attention: masks, positions, and logits equal to sequential forwards."""
import pytest
import torch

from harness.primitives.forward import CountedModel
from harness.primitives.kv_cache import cache_length, new_cache
from harness.primitives.tree import (TokenTree, ancestor_matrix, commit_path, node_depths, path_to, tree_attention_mask,
                                     tree_position_ids, with_stem)
from harness.primitives.tree_attention import tree_forward
from harness.testing import toy_model

# A forest in depth-first order:   root0 ─ 1 ─ 2        root4 ─ 5
#                                       └ 3                  └ 6 ─ 7
PARENTS = [-1, 0, 1, 0, -1, 4, 4, 6]
TOKENS = torch.tensor([3, 1, 4, 1, 5, 9, 2, 6]) % 7


def test_depths_paths_positions():
    assert node_depths(PARENTS).tolist() == [1, 2, 3, 2, 1, 2, 2, 3]
    assert path_to(PARENTS, 7) == [4, 6, 7]
    assert path_to(PARENTS, 3) == [0, 3]
    assert tree_position_ids(PARENTS, 10).tolist() == [[10, 11, 12, 11, 10, 11, 11, 12]]


def test_mask_is_topology_aware():
    mask = tree_attention_mask(PARENTS, prefix_len=3, dtype=torch.float32)
    assert mask.shape == (1, 1, 8, 11)
    allowed = mask[0, 0] == 0
    assert allowed[:, :3].all()  # every node sees the whole prefix
    for i in range(8):
        assert set(torch.nonzero(allowed[i, 3:]).flatten().tolist()) == set(path_to(PARENTS, i))
    assert (mask[0, 0][~allowed] == torch.finfo(torch.float32).min).all()
    assert torch.equal(ancestor_matrix(PARENTS), allowed[:, 3:])


def test_bad_parents_rejected():
    with pytest.raises(ValueError, match="parent"):
        node_depths([-1, 2, 0])


def test_with_stem_chains_then_hangs_tree():
    assert with_stem(2, [-1, 0, -1]) == [-1, 0, 1, 2, 1]


@torch.no_grad()
def _sequential_logits(model, ids: list[int]) -> torch.Tensor:
    return model(input_ids=torch.tensor([ids])).logits[0].float()


@pytest.mark.parametrize("stem_len", [1, 2])
def test_tree_forward_matches_sequential_paths(stem_len):
    """HF Llama + DynamicCache + our 4-D mask: every node's logits equal a plain forward of its path."""
    model = toy_model(vocab_size=7, seed=3, hidden=32, layers=2)
    counted = CountedModel(model, 7)
    prefix = [1, 2, 3, 4, 5]
    stem = [6, 0][:stem_len]
    cache = new_cache(model)
    counted(torch.tensor([prefix]), cache)
    tree = TokenTree(TOKENS, PARENTS)
    calls = counted.calls
    stem_logits, node_logits = tree_forward(counted, cache, torch.tensor([stem]), tree)
    assert counted.calls == calls + 1
    assert cache_length(cache) == len(prefix) + stem_len + len(tree)
    ref_stem = _sequential_logits(model, prefix + stem)[-stem_len:]
    torch.testing.assert_close(stem_logits, ref_stem, atol=1e-5, rtol=1e-5)
    for node in range(len(tree)):
        ref = _sequential_logits(model, prefix + stem + tree.path_tokens(node))[-1]
        torch.testing.assert_close(node_logits[node], ref, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("accepted_node", [2, 3, 7, None])
def test_commit_path_equals_from_scratch_cache(accepted_node):
    """After rolling back to the accepted path, the next forward equals a from-scratch forward."""
    model = toy_model(vocab_size=7, seed=4, hidden=32, layers=2)
    counted = CountedModel(model, 7)
    prefix, stem = [1, 2, 3], [4]
    cache = new_cache(model)
    counted(torch.tensor([prefix]), cache)
    tree = TokenTree(TOKENS, PARENTS)
    tree_forward(counted, cache, torch.tensor([stem]), tree)
    path = tree.path(accepted_node) if accepted_node is not None else []
    keep_len = len(prefix) + len(stem)
    commit_path(cache, keep_len, [keep_len + n for n in path])
    committed = prefix + stem + tree.tokens[path].tolist()
    assert cache_length(cache) == len(committed)
    nxt = counted(torch.tensor([[2]]), cache)[0, -1]
    ref = _sequential_logits(model, committed + [2])[-1]
    torch.testing.assert_close(nxt, ref, atol=1e-5, rtol=1e-5)


def test_tree_forward_of_a_chain_uses_plain_causal_attention():
    model = toy_model(vocab_size=7, seed=3, hidden=32, layers=2)
    counted = CountedModel(model, 7)
    cache = new_cache(model)
    chain = TokenTree.chain(torch.tensor([2, 5, 1]))
    assert chain.is_chain and not TokenTree(TOKENS, PARENTS).is_chain
    stem_logits, node_logits = tree_forward(counted, cache, torch.tensor([[1, 2, 3]]), chain)  # prompt as the stem
    ref = _sequential_logits(model, [1, 2, 3, 2, 5, 1])
    torch.testing.assert_close(torch.cat([stem_logits, node_logits]), ref, atol=1e-5, rtol=1e-5)


def test_rollback_index_of_a_root_chain_or_an_evenly_spaced_path_is_not_copied_per_path():
    """commit_path's index (issue 28 item 2): a fork's sequence (evenly spaced) is an arange, a root chain of a
    k-config tree a row of its chain table (one copy per tree shape); both equal the path."""
    from harness.primitives.tree import chain_table, path_index
    from harness.primitives.tree_attention import level_order_parents
    from harness.testing.host_sync import counting

    parents = level_order_parents([3, 2, 2, 1])
    chain_table(tuple(parents), "cpu")
    paths = [path_to(parents, node) for node in range(len(parents))]
    paths += [p[:-1] for p in paths if len(p) > 1]
    with counting() as c:
        got = [path_index(p, parents) for p in paths] + [path_index([2, 7, 12, 17])]
    assert c.total == 0
    assert [g.tolist() for g in got] == paths + [[2, 7, 12, 17]]
