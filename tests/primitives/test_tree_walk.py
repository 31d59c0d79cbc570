"""The tree walk on the device (issue 28 item 2): every selection rule's row form is exact row by row, rows of
different widths included, and a walk reads the device once (one upload of its index, none for a shape seen before).

The row rules run many independent nodes in one call, so N samples of one node are one call over N rows; each
group of rows must emit tokens distributed as p (TV below the n-sample bound and a chi-square test) while q is
far from p. The per-node rules of tests/primitives/test_acceptance.py are these rules on one row.
"""
import pytest
import torch

from harness.decoders.medusa_typical import TypicalTree
from harness.primitives.acceptance import (ROWS, greedy_select, k_sequential_select, multi_step_select,
                                           multi_step_select_without_replacement, point_mass_select, typical_mask,
                                           typical_select, typical_tree_keys)
from harness.primitives.drafting import Proposal, draw_children
from harness.primitives.sampling import make_generator, sample
from harness.primitives.tree_walk import Verified, walk_tree
from harness.primitives.spec_state import DraftTree
from harness.primitives.tree import tree_topology
from harness.primitives.warping import Warp
from harness.testing import chi_square_pvalue, total_variation, tv_bound
from harness.testing.host_sync import counting

V, N = 6, 6000
P = torch.tensor([0.05, 0.30, 0.0, 0.25, 0.40, 0.0])
Q = torch.tensor([0.35, 0.05, 0.30, 0.20, 0.10, 0.0])


def _check(samples: list[int]) -> None:
    exact = {(i,): float(P[i]) for i in range(V) if P[i] > 0}
    out = [(s,) for s in samples]
    tv = total_variation(out, exact)
    assert tv < tv_bound(exact, len(out)), (tv, tv_bound(exact, len(out)))
    assert chi_square_pvalue(out, exact) > 1e-4


def _candidates(rule, k: int, g) -> tuple[torch.Tensor, torch.Tensor]:
    """(N, k) candidates of N independent nodes as the rule's decoders draw them, and which are valid."""
    if rule is multi_step_select_without_replacement:
        kids, valid = draw_children(Q.expand(N, V), Q.log().expand(N, V), k, Warp(1.0), False, g)
        return kids, valid if valid is not None else torch.ones_like(kids, dtype=torch.bool)
    if rule is point_mass_select:  # deterministic candidates, a duplicate and a zero-probability one included
        kids = torch.tensor([3, 3, 2, 1][:k]).expand(N, k)
        return kids, torch.ones_like(kids, dtype=torch.bool)
    kids = sample(Q.expand(N, V), g, k)
    return kids, torch.ones_like(kids, dtype=torch.bool)


@pytest.mark.parametrize("with_counts", [False, True])
@pytest.mark.parametrize("rule", [multi_step_select, multi_step_select_without_replacement, k_sequential_select,
                                  point_mass_select])
def test_every_row_rule_follows_p_in_rows_of_different_widths(rule, with_counts):
    """Two groups of N nodes in one call: 3 candidates each, and 1 candidate padded to 3 (the padding never
    counts; with the walk's host ``counts`` the narrow rows skip the later steps). Both groups follow p."""
    g = make_generator(7, "cpu")
    wide, wide_ok = _candidates(rule, 3, g)
    narrow, narrow_ok = _candidates(rule, 1, g)
    tokens = torch.cat([wide, torch.cat([narrow, torch.zeros(N, 2, dtype=torch.long)], 1)])
    valid = torch.cat([wide_ok, torch.cat([narrow_ok, torch.zeros(N, 2, dtype=torch.bool)], 1)])
    p, q = P.expand(2 * N, V).clone(), Q.expand(2 * N, V).clone()
    acc, dist = ROWS[rule](p, q, tokens, valid, g, counts=[3] * N + [1] * N if with_counts else None)
    drawn = sample(dist, g)[:, 0]
    out = torch.where(acc >= 0, tokens.gather(1, acc.clamp_min(0)[:, None])[:, 0], drawn).tolist()
    assert bool((acc < 3).all()) and bool((acc[N:] < 1).all())
    _check(out[:N])
    _check(out[N:])


def _verified(warp: Warp, seed: int = 0) -> Verified:
    """A two-level tree (two roots, two children under the first, one under the second) with random logits."""
    g = torch.Generator().manual_seed(seed)
    parents = [-1, -1, 0, 0, 1]
    probs = torch.softmax(torch.randn(4, V, generator=g), -1)
    dtree = DraftTree(torch.tensor([1, 3, 0, 4, 1]), parents, probs[0], probs[1:3], num_fed=2, depth=2)
    return Verified(Proposal.of(dtree), torch.randn(1, V, generator=g), torch.randn(5, V, generator=g), warp)


@pytest.mark.parametrize("select", [multi_step_select, k_sequential_select, point_mass_select, greedy_select])
def test_a_walk_reads_once_and_copies_its_index_once(select):
    warp = Warp(0.0) if select is greedy_select else Warp(1.0)
    g = make_generator(3, "cpu")
    for seed in range(2):
        v = _verified(warp, seed)
        with counting() as c:
            walk = walk_tree(v, select, g, [-1], draw_next=True)
        assert c.by_kind["read"] == 1 and c.by_kind["shape"] == 0, dict(c.by_name)
        assert c.by_kind["upload"] <= (1 if seed == 0 else 0), dict(c.by_name)  # a shape seen before: no copy
        node, cands = -1, v.proposal.candidates
        for child in walk.paths[0]:  # the path goes from candidates to candidates
            assert child in cands[node]
            node = child
        assert walk.ends[0] == node and v.tree_tokens == [1, 3, 0, 4, 1]
        assert walk.next_token == int(walk.next_ids)


def test_the_greedy_walk_follows_the_argmax():
    v = _verified(Warp(0.0))
    walk = walk_tree(v, greedy_select, None, [-1], draw_next=True)
    best = torch.cat([v.stem_logits, v.node_logits]).argmax(-1).tolist()
    node, path = -1, []
    while True:
        hit = next((c for c in v.proposal.candidates.get(node, ()) if v.tree_tokens[c] == best[node + 1]), None)
        if hit is None:
            break
        path.append(hit)
        node = hit
    assert walk.paths[0] == path and walk.next_token == best[node + 1]


def _typical_path_on_host(parent_logits, tokens, parents, temperature, epsilon, delta) -> list[int]:
    """Medusa's typical acceptance walked on the host node by node (the definition): the longest root path whose
    every node passes ``typical_mask``, ties to the first end node in topological order."""
    ok = typical_mask(parent_logits, tokens, temperature, epsilon, delta).tolist()
    length, best = [0] * len(parents), -1
    for i, par in enumerate(parents):
        if ok[i] and (par < 0 or length[par] > 0):
            length[i] = 1 + (length[par] if par >= 0 else 0)
            if best < 0 or length[i] > length[best]:
                best = i
    path: list[int] = []
    while best >= 0:
        path.append(best)
        best = parents[best]
    return path[::-1]


@pytest.mark.parametrize("temperature", [0.7, 1.0])
def test_the_typical_walk_ends_where_the_host_definition_does(temperature):
    """Random trees (ties of length included): the device walk of Medusa's typical acceptance
    (``typical_tree_keys`` + ``typical_select``) takes the host definition's path, reads once, and draws the next
    token from p̃ after the path's end (checked through a one-hot warp)."""
    g = torch.Generator().manual_seed(5)
    for trial in range(60):
        n = 1 + trial % 12
        parents = [-1] + [int(torch.randint(-1, i, (1,), generator=g)) for i in range(1, n)]
        tokens = torch.randint(0, V, (n,), generator=g)
        stem, nodes = torch.randn(1, V, generator=g) * 2, torch.randn(n, V, generator=g) * 2
        dtree = DraftTree(tokens, parents, None, None, num_fed=1, depth=int(tree_topology(parents)[1].max()))
        v = Verified(Proposal.of(dtree), stem, nodes, Warp(temperature, top_k=1))
        logits = torch.cat([stem, nodes])
        parent_logits = logits[[p + 1 for p in parents]]
        eps, delta = 0.3, 0.09
        want = _typical_path_on_host(parent_logits, tokens, parents, temperature, eps, delta)
        keys = typical_tree_keys(parent_logits, tokens, tree_topology(parents)[0], temperature, eps, delta)
        with counting() as c:
            walk = walk_tree(v, typical_select, None, [-1], draw_next=True, keys=keys)
        assert c.by_kind["read"] == 1 and c.by_kind["shape"] == 0, dict(c.by_name)
        assert walk.paths[0] == want, (parents, walk.paths[0], want)
        assert walk.next_token == int(logits[(want[-1] if want else -1) + 1].argmax())  # top-1: p̃ is one-hot
        path, token = TypicalTree(eps, delta)(v, None)
        assert path == want and token == walk.next_token


def test_a_forks_walk_index_is_made_on_the_device_as_the_host_would_pack_it():
    """mcsd_dynamic's compact forks (their width varies with the short first level): the walk's index computed by
    arithmetic on the device equals the packed one it replaces (rows, q̃ rows, candidates, validity, node rows)."""
    import itertools

    from harness.primitives import tree_walk
    from harness.primitives.tree import children_lists
    from harness.primitives.tree_attention import fork_parents

    for n, depth, head in itertools.product(range(1, 7), range(1, 6), (None, 0, 1)):
        parents = fork_parents(n, depth)
        cands = children_lists(parents)
        rows = sorted(cands, key=lambda u: -len(cands[u]))
        row_of = {u: r for r, u in enumerate(rows)}
        width = max(len(cands[u]) for u in rows)
        packed = [x for u in rows for x in (u + 1, 0 if head is None else u + head, *cands[u],
                                            *[0] * (width - len(cands[u])), *[1] * len(cands[u]),
                                            *[0] * (width - len(cands[u])))]
        packed += [row_of.get(u, -1) for u in range(-1, len(parents))]
        table, node_rows = tree_walk._fork_index(n, depth, head, "cpu")
        assert torch.cat([table.reshape(-1), node_rows]).tolist() == packed
