"""SpecInfer's token-tree merge on the device (harness/primitives/tree_merge.py, issue 28 item 2): the classes are
the host merge's (same parent class and token: one node), every draw stays a candidate of its own, dead children
(short rows) are never candidates, and neither the merge nor the walk after it reads more than the walk's one read.
The law of the walk over merged trees is tested end to end against the enumerated target distribution in
tests/decoders/test_speculative.py (specinfer, spectr, mcsd with replacement: a 4-token vocabulary, so duplicates
are common)."""
import pytest
import torch

from harness.primitives.acceptance import multi_step_select
from harness.primitives.drafting import merge_duplicates
from harness.primitives.sampling import make_generator
from harness.primitives.spec_state import DraftTree
from harness.primitives.tree_attention import level_order_parents
from harness.primitives.tree_walk import Verified, walk_tree
from harness.primitives.warping import Warp
from harness.testing.host_sync import counting


def _host_classes(tokens: list[int], parents: list[int], valid: list[bool]) -> list[int]:
    """The host merge (the definition): node i is one node with the first earlier node of the same parent node and
    token; a node that is not a real draw, or below one, is dead (−2)."""
    classes: list[int] = []
    first: dict[tuple[int, int], int] = {}
    for i, (tok, par) in enumerate(zip(tokens, parents)):
        parent_class = -1 if par < 0 else classes[par]
        if not valid[i] or parent_class == -2:
            classes.append(-2)
            continue
        classes.append(first.setdefault((parent_class, tok), i))
    return classes


def test_duplicate_draws_share_a_class_and_stay_separate_candidates():
    # roots: 2, 2, 1 (two equal draws); children: one each → 5 under the first 2, 5 under the second 2, 0 under 1
    dtree = DraftTree(tokens=torch.tensor([2, 2, 1, 5, 5, 0]), parents=[-1, -1, -1, 0, 1, 2], root_q=None,
                      node_q=None, num_fed=3)
    merge = merge_duplicates(dtree).merge
    assert merge is not None and merge.classes[1:].tolist() == [0, 0, 2, 3, 3, 5]
    nodes = torch.tensor([-1, 0, 1, 2])
    cols = torch.tensor([merge.columns[u] for u in (-1, 0, 1, 2)])
    assert merge.valid(nodes, cols).tolist() == [[True, True, True],  # the roots: both 2s are candidates
                                                 [True, True, False],  # the 2s' class: both 5s, one per draw
                                                 [False, False, False],  # the second 2 is its class's first's
                                                 [False, False, True]]


@pytest.mark.parametrize("k_config,vocab", [((3, 1, 1), 3), ((2, 3, 2), 3), ((4, 2, 1), 2)])
def test_device_classes_are_the_host_merge_on_random_trees(k_config, vocab):
    g = torch.Generator().manual_seed(len(k_config) * vocab)
    parents = level_order_parents(k_config)
    for trial in range(40):
        tokens = torch.randint(0, vocab, (len(parents),), generator=g)
        valid = torch.rand(len(parents), generator=g) > (0.2 if trial % 2 else 0.0)
        dtree = DraftTree(tokens, parents, None, None, num_fed=0, valid=None if valid.all() else valid)
        merge = merge_duplicates(dtree).merge
        assert merge is not None
        want = _host_classes(tokens.tolist(), parents, valid.tolist())
        assert merge.classes[1:].tolist() == want
        for u, cols in merge.columns.items():  # a class's candidates: its members' live children, in draw order
            got = [c for c, ok in zip(cols, merge.valid(torch.tensor([u]), torch.tensor([cols]))[0].tolist()) if ok]
            members = [u] if u < 0 else ([m for m, c in enumerate(want) if c == u] if want[u] == u else [])
            assert got == [c for c, p in enumerate(parents) if p in members and want[c] != -2]


def test_distinct_siblings_merge_nothing_and_drop_the_dead():
    parents = level_order_parents((3, 2))
    valid = torch.tensor([True, True, False, True, False, True, True, True, True])
    dtree = DraftTree(torch.arange(9) % 4, parents, None, None, num_fed=3, valid=valid)
    merge = merge_duplicates(dtree, distinct=True).merge
    assert merge is not None and merge.classes[1:].tolist() == [0, 1, -2, 3, -2, 5, 6, -2, -2]
    assert merge.columns[0] == [3, 4]  # its own children


def _round(tokens: list[int], seed: int):
    """A (3, 1, 1) SpecInfer tree with these drafts, its q̃ and the target's logits; ``verify()`` merges and wraps."""
    g = torch.Generator().manual_seed(seed)
    parents = level_order_parents((3, 1, 1))
    q = torch.softmax(torch.randn(7, 4, generator=g), -1)
    dtree = DraftTree(torch.tensor(tokens), parents, q[0], q[1:], num_fed=6, depth=3)
    stem, nodes = torch.randn(1, 4, generator=g), torch.randn(9, 4, generator=g)
    return lambda: Verified(merge_duplicates(dtree), stem, nodes, Warp(1.0))


def test_merge_and_walk_read_once_and_the_path_is_a_drafted_chain():
    """Duplicates merged: no read in the merge, one in the walk, no copy for a tree shape seen before; the walk's
    path is the drafted chain to its last accepted node (the caches keep a chain the target scored), and n_dead
    comes from the same read."""
    g = make_generator(0, "cpu")
    walk_tree(_round([0] * 9, 99)(), multi_step_select, g, [-1], draw_next=True)  # the shape's constants, once
    for seed in range(30):
        verify = _round([1, 1, 2, 3, 3, 0, 2, 2, 1] if seed % 2 else [1, 1, 1, 3, 3, 3, 2, 2, 2], seed)
        with counting() as c:
            v = verify()
            walk = walk_tree(v, multi_step_select, g, [-1], draw_next=True)
        assert c.by_kind["read"] == 1 and c.by_kind["shape"] == 0 and c.by_kind["upload"] == 0, dict(c.by_name)
        path = walk.paths[0]
        assert all(v.proposal.tree.parents[b] == a for a, b in zip([-1] + path, path))
        assert v.proposal.dtree.n_dead == 0 and walk.next_token == int(walk.next_ids)


def test_k_sequential_with_a_bound_on_wide_rows_is_the_same_rule():
    """The walk of a merged tree tells Spectr's rows how many can have several candidates (``max_multi``): ρ* is
    found for that many rows only, and the rule's outcome is the same as with ρ* found for every row."""
    from harness.primitives.acceptance import k_sequential_rows

    g = torch.Generator().manual_seed(1)
    m, k, v = 7, 2, 5
    p, q = torch.softmax(torch.randn(m, v, generator=g), -1), torch.softmax(torch.randn(m, v, generator=g), -1)
    tokens = torch.randint(0, v, (m, k), generator=g)
    valid = torch.tensor([[1, 1], [1, 0], [0, 0], [1, 1], [0, 1], [0, 0], [1, 1]], dtype=torch.bool)  # 3 wide rows
    full = k_sequential_rows(p, q, tokens, valid, make_generator(5, "cpu"), counts=[k] * m)
    bounded = k_sequential_rows(p, q, tokens, valid, make_generator(5, "cpu"), counts=[k] * m, max_multi=3)
    assert torch.equal(full[0], bounded[0]) and torch.allclose(full[1], bounded[1])
