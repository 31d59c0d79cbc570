"""Algorithm 1 of dsbd over a whole draft forest, on the device (dsbd §3.1-3.2; issue 28 item 2).

DSBD verifies a forest layer by layer: layer l's drafts whose parent was rejected are dropped (line 10), the
survivors are tested against p_beam over the previous layer's accepted beams (lines 12-31) with the width
W_L^(l) (fixed, or Eq. 2-7), and the first layer with fewer than W_L^(l) accepted drafts is filled up and ends the
iteration; after γ passed layers an extra layer is drawn from p_beam^(γ+1) (lines 32-34). Here every quantity is
a tensor of a fixed shape — each frontier after the first (the input beams) padded to ``slots`` beams, of which
the first are valid — so that no
value is read on the host: every layer is verified (in row form:
:func:`~harness.primitives.beam_verify.verify_layer_rows`) and the first to fail is kept, the later ones' draws
being discarded (the same law: each layer's draws are fresh). :attr:`Outcome.summary` is what the host needs to
carry on (the steps, the output beams, whether all finished, per-layer statistics), read once per iteration.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from harness.primitives.beam_verify import (count_distributions, dynamic_width_rows, rates_of_chain, residual_chain,
                                            verify_layer_rows)
from harness.primitives.beams import beam_distribution, beam_joint_logprobs
from harness.primitives.sampling import sample
from harness.primitives.warping import Warp


@dataclass
class ForestLayer:
    """One drafted layer: W_S draft beams, each a (parent in the previous layer, token) pair."""

    parent: torch.Tensor  # (W_S,) index into the previous layer (layer 0 = the input beams)
    token: torch.Tensor  # (W_S,)
    tree: torch.Tensor  # (W_S,) input beam (KV-cache row) the beam descends from
    q_flat: torch.Tensor  # (n_prev · V,) T∘q_beam the layer was drawn from
    q_logp: torch.Tensor  # (W_S,) draft joint log-likelihood q(x_{1:t+1})
    finished: torch.Tensor  # (W_S,) the beam has produced EOS
    ancestors: torch.Tensor  # (W_S, d + 1) slot of the beam's ancestor in every layer up to its own (forest slots)
    draft_next_logq: torch.Tensor | None = None  # (W_S, V) log q(· | beam) (layers < γ only: fed to the draft)
    target_next_logp: torch.Tensor | None = None  # (W_S, V) log p(· | beam)


@dataclass
class Frontier:
    """Beams of one forest layer that carry on: the input beams, or a layer's accepted drafts; padded to a fixed
    number of slots, of which the first are ``valid`` (the others: joint log-likelihood −inf)."""

    node: torch.Tensor  # index within its layer
    valid: torch.Tensor
    logp: torch.Tensor  # target joint log-likelihood p(x_{1:t})
    finished: torch.Tensor
    length: torch.Tensor  # tokens up to and including EOS
    next_logp: torch.Tensor  # (slots, V) log p(· | beam)

    @classmethod
    def of_inputs(cls, logp: torch.Tensor, finished: torch.Tensor, length: torch.Tensor,
                  next_logp: torch.Tensor) -> Frontier:
        """The input beams as layer 0's frontier: all valid, unpadded (their number is known on the host)."""
        node = torch.arange(logp.numel(), device=logp.device)
        return cls(node, torch.ones_like(finished), logp, finished, length, next_logp)

    def padded(self, slots: int) -> Frontier:
        """The frontier padded to ``slots`` beams with invalid ones."""
        return Frontier(padded(self.node, slots, 0), padded(self.valid, slots, False),
                        padded(self.logp, slots, float("-inf")), padded(self.finished, slots, False),
                        padded(self.length, slots, 0), self.next_logp)


@dataclass(frozen=True)
class ForestRule:
    """What verifies a layer: the warp T, the EOS sentinel, W_S, W_L (None: dynamic, Eq. 2-7 with t and W_min),
    and §3.4's single output beam."""

    warp: Warp
    eos: int
    draft_width: int
    width: int | None
    threshold: float
    min_width: int
    memory_constrained: bool

    @property
    def slots(self) -> int:
        """A frontier's slots: the widest a layer's output can be (W_L; dynamic: max(W_S, W_min))."""
        return self.width or max(self.draft_width, self.min_width)


@dataclass
class Outcome:
    """Where an iteration ends: the frontier entering that layer, its joint log p (slots, V), the output beams as
    flat outcomes (the first ``width`` valid; §3.4: the lowest-perplexity one alone)."""

    front: Frontier
    joint: torch.Tensor
    outcomes: torch.Tensor
    width: torch.Tensor


def drawable(p: torch.Tensor) -> torch.Tensor:
    """``p`` unchanged when it is a distribution; uniform in a layer past the one that ended the iteration, whose
    frontier may be empty (its draws are never used, but must not fail)."""
    return torch.where(p.sum() > 0, p, 1.0 / p.numel())  # an empty frontier's p is NaN: its sum is not > 0


def padded(t: torch.Tensor, size: int, fill) -> torch.Tensor:
    """``t`` with its first dimension padded with ``fill`` to ``size``."""
    return torch.cat([t, t.new_full((size - t.size(0), *t.shape[1:]), fill)]) if t.size(0) < size else t


def verify_forest(front: Frontier, layers: list[ForestLayer], rule: ForestRule,
                  generator) -> tuple[Outcome, torch.Tensor]:
    """Verify layer by layer: the first layer that fails ends the iteration (its outcome kept, the later layers'
    discarded), else the extra layer (lines 32-34) with the last layer's width. Returns the outcome and its
    summary (float64, the one thing the host reads): steps, output beams, all finished, then per layer its
    width, then its accepted drafts, then its β_{W_min}, then the first output beam's tokens (:func:`_first_tokens`:
    the round's committed tokens)."""
    dev = front.node.device
    kept: Outcome | None = None
    ended = torch.zeros((), dtype=torch.bool, device=dev)
    steps = torch.full((), len(layers) + 1, dtype=torch.long, device=dev)
    per_layer = []
    for step, layer in enumerate(layers, start=1):
        joint, verdict, width, beta, nxt = _verify_layer(front, layer, rule, generator)
        take = ~ended & ~verdict.passed
        kept = _keep(kept, take, Outcome(front.padded(rule.slots), padded(joint, rule.slots, float("-inf")),
                                         verdict.outcomes, width))
        steps = torch.where(take, step, steps)
        ended = ended | take
        per_layer.append(torch.stack([width.double(), verdict.accepted.double(), beta]))
        front = nxt
    joint = beam_joint_logprobs(front.logp, front.next_logp, front.finished, rule.eos)  # lines 32-34: extra layer
    outcomes = sample(drawable(beam_distribution(joint, rule.warp)), generator, front.node.numel())
    kept = _keep(kept, ~ended, Outcome(front, joint, outcomes, front.valid.sum()))
    return _summarise(kept, steps, per_layer, layers, rule)


def _verify_layer(front: Frontier, layer: ForestLayer, rule: ForestRule, generator):
    """Algorithm 1, lines 10-31, for one layer in row form: (joint log p over frontier × V, the verdict, the
    width W_L^(l), β_{W_min}^(l), the next frontier: the accepted drafts in ``rule.slots`` slots, valid if the
    layer passed)."""
    slots, dev = rule.slots, front.node.device
    joint = beam_joint_logprobs(front.logp, front.next_logp, front.finished, rule.eos)
    vocab = joint.size(-1)
    p_beam = drawable(beam_distribution(joint, rule.warp))  # line 12: p_beam over the accepted beams × V
    q_beam = (layer.q_flat.reshape(-1, vocab)[front.node] * front.valid[:, None]).reshape(-1)
    q_beam = q_beam / q_beam.sum().clamp_min(1e-30)  # the drafts' law given their parent survived
    parents = layer.q_flat.numel() // vocab
    assert layer.target_next_logp is not None, "the target's forward comes before the verification"
    slot_of = torch.full((parents + 1,), -1, dtype=torch.long, device=dev).scatter_(
        0, torch.where(front.valid, front.node, parents), torch.arange(front.node.numel(), device=dev))[:parents]
    parent_slot = slot_of[layer.parent]
    survivor = parent_slot >= 0  # line 10
    m = survivor.sum()
    candidates = parent_slot.clamp_min(0) * vocab + layer.token
    chain = residual_chain(p_beam, q_beam, layer.token.numel())
    counts = count_distributions(rates_of_chain(chain, q_beam)).index_select(0, m.reshape(1))[0]
    width = (torch.full((), rule.width, dtype=torch.long, device=dev) if rule.width else
             dynamic_width_rows(counts, m, rule.threshold, rule.min_width))  # line 14, Eq. 2-7
    beta = 1.0 - counts[: rule.min_width].sum()  # β_{W_min}^(l)
    verdict = verify_layer_rows(chain, q_beam, candidates, survivor, width, slots, generator)
    kept, slot = verdict.draft.clamp_min(0), verdict.outcomes // vocab
    valid = torch.arange(slots, device=dev) < width
    nxt = Frontier(node=kept, valid=valid, logp=torch.where(valid, joint.reshape(-1)[verdict.outcomes], float("-inf")),
                   finished=layer.finished[kept], length=front.length[slot] + (~front.finished[slot]).long(),
                   next_logp=layer.target_next_logp[kept])
    return joint, verdict, width, beta, nxt


def _keep(kept: Outcome | None, take: torch.Tensor, new: Outcome) -> Outcome:
    """The iteration's outcome so far: ``new`` where ``take`` (the first layer to end it), else ``kept``."""
    if kept is None:
        return new

    def pick(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.where(take, a, b)

    f, k = new.front, kept.front
    front = Frontier(pick(f.node, k.node), pick(f.valid, k.valid), pick(f.logp, k.logp), pick(f.finished, k.finished),
                     pick(f.length, k.length), k.next_logp)  # next_logp: not needed past the verification
    return Outcome(front, pick(new.joint, kept.joint), pick(new.outcomes, kept.outcomes), pick(new.width, kept.width))


def _summarise(kept: Outcome, steps: torch.Tensor, per_layer: list[torch.Tensor], layers: list[ForestLayer],
               rule: ForestRule) -> tuple[Outcome, torch.Tensor]:
    """The output beams first in ``outcomes`` (§3.4: only the lowest-perplexity one), and the summary."""
    front, vocab, width = kept.front, kept.joint.size(-1), kept.width
    outcomes, n_out = kept.outcomes, width
    valid = torch.arange(outcomes.numel(), device=outcomes.device) < width
    if rule.memory_constrained:  # §3.4: only the lowest-perplexity output beam continues
        slot = outcomes // vocab
        length = front.length[slot] + (~front.finished[slot]).long()
        score = torch.where(valid, -kept.joint.reshape(-1)[outcomes] / length.clamp_min(1), float("inf"))
        best = torch.argmin(score).reshape(1)
        outcomes, n_out, valid = outcomes[best], torch.ones_like(width), valid[best]
    slot, token = outcomes // vocab, outcomes % vocab
    done = ((front.finished[slot] | (token == rule.eos)) | ~valid).all()
    head = torch.stack([steps, n_out, done.long()]).double()
    stats = [torch.stack(per_layer).T.reshape(-1)] if per_layer else []  # widths, then accepted, then β
    first = _first_tokens(front, outcomes, vocab, steps, layers).double()
    return Outcome(front, kept.joint, outcomes, n_out), torch.cat([head, *stats, first])


def _first_tokens(front: Frontier, outcomes: torch.Tensor, vocab: int, steps: torch.Tensor,
                  layers: list[ForestLayer]) -> torch.Tensor:
    """(γ + 1,): the first output beam's tokens through the forest (its path's; the first steps − 1 are valid), then
    its new token: what the iteration commits to it. The path is its parent's ancestors (the layer at depth
    steps − 1 chosen on the device)."""
    token = outcomes[:1] % vocab
    if not layers:
        return token
    anc = torch.stack([torch.nn.functional.pad(layer.ancestors, (0, len(layers) - layer.ancestors.size(1)))
                       for layer in layers])  # (γ, W_S, γ)
    at_depth = anc.index_select(0, (steps - 2).clamp_min(0).reshape(1))[0]
    node = front.node[outcomes[:1] // vocab].clamp_max(at_depth.size(0) - 1)  # (steps 1: an input beam, unused)
    path = at_depth.index_select(0, node)[0]  # (γ,) its slot in every layer
    return torch.cat([torch.stack([layer.token for layer in layers]).gather(1, path[:, None])[:, 0], token])
