"""Dynamic sliced topology-aware causal mask (seed 003 §3.2): every slice equals the mask built from scratch."""
import pytest
import torch

from harness.primitives.forward import CountedModel
from harness.primitives.kv_cache import new_cache
from harness.primitives.tree_attention import SlicedTreeMask, fork_parents, level_order_parents
from harness.primitives.tree import (TokenTree, node_depths,
                                     tree_attention_mask, tree_position_ids, with_stem)
from harness.testing import toy_model

SHAPES = {  # name -> level-ordered parents of the largest tree
    "fork W=3 D=3 (Fig. 2)": fork_parents(3, 3),
    "fork W=16 D=5 (§4.1)": fork_parents(16, 5),
    "target-init fork 2×5 (§5)": fork_parents(2, 5),
    "MCSD (4,2,2,1)": level_order_parents((4, 2, 2, 1)),
    "target-init (2,4,3,1,1) (§4.1)": level_order_parents((2, 4, 3, 1, 1)),
    "target-init (3,1,1) (Fig. 1)": level_order_parents((3, 1, 1)),
}


def test_level_order_parents_sizes_match_the_seed():
    assert len(level_order_parents((2, 4, 3, 1, 1))) == 2 + 2 * 40  # §4.1: 40 draft tokens per target token
    assert len(level_order_parents((3, 1, 1))) == 3 + 6  # §3.1, Fig. 1: a (3 + 6)² mask
    assert fork_parents(3, 3) == [-1, -1, -1, 0, 1, 2, 3, 4, 5]
    assert node_depths(fork_parents(16, 5)).tolist() == [d for d in range(1, 6) for _ in range(16)]
    leaves = [i for i in range(len(fork_parents(16, 5))) if i not in fork_parents(16, 5)]
    assert len(leaves) == 16  # W sequences that never branch after the fork
    assert len([i for i in range(82) if i not in level_order_parents((2, 4, 3, 1, 1))]) == 24  # §4.1: 24 sequences


@pytest.mark.parametrize("name", list(SHAPES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_every_slice_equals_the_rebuilt_mask(name, dtype):
    parents = SHAPES[name]
    sliced = SlicedTreeMask(parents, dtype=dtype, capacity=8)
    for depth in range(1, sliced.max_depth + 1):
        sub = sliced.parents_at(depth)
        assert node_depths(sub).max() == depth and len(sub) == sliced.nodes(depth)
        for prefix_len in (0, 5, 8, 19):  # 19 > capacity: the buffer grows
            for stem_len in (0, 1, 3, 7):  # 7: a long stem, built to measure
                full = with_stem(stem_len, sub) if stem_len else sub
                ref = tree_attention_mask(full, prefix_len, dtype)
                got = sliced.mask(depth, prefix_len, stem_len)
                assert got.dtype == dtype and torch.equal(got, ref), (depth, prefix_len, stem_len)
                assert torch.equal(sliced.position_ids(depth, prefix_len, stem_len), tree_position_ids(full, prefix_len))
    assert sliced.capacity >= 19


@pytest.mark.parametrize("name", ["fork W=16 D=5 (§4.1)", "target-init (2,4,3,1,1) (§4.1)"])
def test_level_rows_equal_the_draft_level_mask(name):
    """The rows a drafting loop feeds per level (earlier levels cached) are a slice too."""
    parents = SHAPES[name]
    sliced = SlicedTreeMask(parents)
    for depth in range(2, sliced.max_depth + 1):
        first, sub = sliced.nodes(depth - 1), sliced.parents_at(depth)
        ref = tree_attention_mask(sub, 11)[:, :, first:]
        assert torch.equal(sliced.mask(depth, 11, first_node=first), ref)
        assert torch.equal(sliced.position_ids(depth, 11, first_node=first), tree_position_ids(sub, 11)[:, first:])


def test_slices_are_views_of_one_buffer():
    sliced = SlicedTreeMask.fork(16, 5, capacity=64)
    a, b = sliced.mask(2, 30, 1), sliced.mask(5, 40, 1)
    assert a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="level order"):
        SlicedTreeMask([-1, 0, -1])  # depth 1 after depth 2
    with pytest.raises(ValueError, match="depth must be in"):
        SlicedTreeMask.fork(3, 3).mask(4, 0)
    with pytest.raises(ValueError, match="first_node"):
        SlicedTreeMask.fork(3, 3).mask(2, 0, stem_len=1, first_node=3)
    with pytest.raises(ValueError, match="k_config"):
        level_order_parents([2, 0])
    with pytest.raises(ValueError, match="width"):
        fork_parents(0, 3)


@torch.no_grad()
def test_sliced_mask_view_gives_the_same_logits():
    """HF Llama takes the (non-contiguous) view: logits equal those with the rebuilt mask."""
    model = toy_model(vocab_size=7, seed=5, hidden=32, layers=2)
    counted = CountedModel(model, 7)
    sliced = SlicedTreeMask.for_k_config((2, 2, 1), capacity=4)
    prefix = [1, 2, 3, 4, 5, 6]
    depth = 2
    sub = sliced.parents_at(depth)
    tokens = torch.tensor([3, 1, 4, 1, 5, 0])[: len(sub)]
    stem = torch.tensor([[2]])
    outs = []
    for use_slice in (True, False):
        cache = new_cache(model)
        counted(torch.tensor([prefix]), cache)
        ids = torch.cat([stem, tokens[None]], dim=1)
        if use_slice:
            mask, pos = sliced.mask(depth, len(prefix), 1), sliced.position_ids(depth, len(prefix), 1)
            assert not mask.is_contiguous()
        else:
            full = with_stem(1, sub)
            mask, pos = tree_attention_mask(full, len(prefix)), tree_position_ids(full, len(prefix))
        outs.append(counted(ids, cache, position_ids=pos, attention_mask=mask)[0])
    torch.testing.assert_close(outs[0], outs[1], atol=0, rtol=0)
    tree = TokenTree(tokens, sub)
    ref = model(input_ids=torch.tensor([prefix + [2] + tree.path_tokens(len(sub) - 1)])).logits[0, -1]
    torch.testing.assert_close(outs[0][-1], ref, atol=1e-5, rtol=1e-5)


def test_a_narrower_fork_is_gathered_from_the_forks_mask_without_a_copy_from_the_host():
    """mcsd_dynamic's fork whose first level came short (fewer heads than W): its mask and positions come from the
    W-fork's buffer (no topology copied: issue 28 item 2) and equal the ones built for it, with stems and levels."""
    import itertools

    from harness.primitives.tree import tree_mask_and_positions, with_stem
    from harness.primitives.tree_attention import SlicedTreeMask, attention_inputs, fork_parents
    from harness.testing.host_sync import counting

    masks = SlicedTreeMask(fork_parents(5, 4), capacity=8)
    for width, depth, prefix, stem in itertools.product(range(1, 6), range(1, 5), (0, 3, 20), (0, 1, 2)):
        parents = fork_parents(width, depth)
        assert masks.shape_of(parents) == ((depth, None) if width == 5 else (depth, width))
        for first in [0] if stem else range(width * depth):
            with counting() as c:
                mask, pos = attention_inputs(parents, prefix, stem_len=stem, first_node=first, sliced=masks)
            assert c.total == 0
            want_mask, want_pos = tree_mask_and_positions(with_stem(stem, parents) if stem else parents, prefix)
            assert torch.equal(mask, want_mask[:, :, first:]) and torch.equal(pos, want_pos[:, first:])
    assert masks.shape_of(fork_parents(6, 2)) is None and masks.shape_of(fork_parents(2, 5)) is None
    assert masks.shape_of([-1, -1, 0, 0]) is None
