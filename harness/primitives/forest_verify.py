"""Algorithm 1 of dsbd over a whole draft forest, on the device (dsbd §3.1-3.2; issue 28 item 2).

DSBD verifies a forest layer by layer: layer l's drafts whose parent was rejected are dropped (line 10), the
survivors are tested against p_beam over the previous layer's accepted beams (lines 12-31) with the width
W_L^(l) (fixed, or Eq. 2-7), and the first layer with fewer than W_L^(l) accepted drafts is filled up and ends the
iteration; after γ passed layers an extra layer is drawn from p_beam^(γ+1) (lines 32-34). Here every quantity is
a tensor of a fixed shape — each frontier after the first (the input beams) has ``slots`` beams, of which the
first are valid — so that no value is read on the host: every layer is verified (in row form:
:func:`~harness.primitives.beam_verify.verify_layer_rows`) and the first to fail is kept, the later ones' draws
being discarded (the same law: each layer's draws are fresh). Each layer's outcome is kept in a list and the one
that ends the iteration is chosen once at the end (no per-layer merge). The summary is what the host needs to carry
on (the steps, the output beams, whether all finished, per-layer statistics), read once per iteration.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from functools import lru_cache

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
    """A layer's output beams as flat outcomes (frontier slot · V + token; the first ``width`` valid), each with what
    the iteration needs of it: its joint log p, its length, whether its parent had finished, and its parent's index
    within the parent's layer (0 = the input beams). Once chosen (§3.4: the lowest-perplexity one alone) the
    iteration's output beams."""

    outcomes: torch.Tensor
    logp: torch.Tensor
    length: torch.Tensor
    parent_finished: torch.Tensor
    parent: torch.Tensor
    width: torch.Tensor

    @classmethod
    def of(cls, front: Frontier, joint: torch.Tensor, outcomes: torch.Tensor, width: torch.Tensor) -> Outcome:
        """The outcomes drawn over ``front`` × V (``joint``: their joint log p) with their per-beam quantities."""
        slot = outcomes // joint.size(-1)  # index_select, not [ ]: fewer host cycles per call
        finished = front.finished.index_select(0, slot)
        return cls(outcomes, joint.reshape(-1).index_select(0, outcomes),
                   front.length.index_select(0, slot) + (~finished).long(), finished, front.node.index_select(0, slot),
                   width)

    def select(self, index: torch.Tensor) -> Outcome:
        """The outcomes at ``index`` (a tensor of positions), every field alike."""
        return Outcome(self.outcomes[index], self.logp[index], self.length[index], self.parent_finished[index],
                       self.parent[index], self.width)


def drawable(p: torch.Tensor) -> torch.Tensor:
    """``p`` unchanged when it is a distribution; uniform in a layer past the one that ended the iteration, whose
    frontier may be empty (its draws are never used, but must not fail)."""
    # an empty frontier's p (a softmax over −inf only) is NaN throughout; a distribution has no NaN
    return torch.nan_to_num(p, nan=1.0 / p.numel(), posinf=float("inf"), neginf=float("-inf"))


@lru_cache(maxsize=32)
def _positions(size: int, device: str) -> torch.Tensor:
    return torch.arange(size, device=device)


def verify_forest(front: Frontier, layers: list[ForestLayer], rule: ForestRule,
                  generator) -> tuple[Outcome, torch.Tensor]:
    """Verify layer by layer: the first layer that fails ends the iteration (its outcome kept, the later layers'
    discarded), else the extra layer (lines 32-34) with the last layer's width. Every layer is verified; the kept
    outcome is chosen once at the end (the number of leading layers that passed, as a tensor). Returns the outcome
    and its summary (float64, the one thing the host reads): steps, output beams, all finished, then per layer its
    width, then its accepted drafts, then its β_{W_min}, then the first output beam's tokens (:func:`_first_tokens`:
    the round's committed tokens)."""
    outcomes, passed, widths, accepted, betas = [], [], [], [], []
    slot_of: torch.Tensor | None = None
    for layer in layers:
        out, verdict, beta, front, slot_of = _verify_layer(front, slot_of, layer, rule, generator)
        outcomes.append(out)
        passed.append(verdict.passed)
        widths.append(out.width)
        accepted.append(verdict.accepted)
        betas.append(beta)
    joint = beam_joint_logprobs(front.logp, front.next_logp, front.finished, rule.eos)  # lines 32-34: extra layer
    drawn = sample(drawable(beam_distribution(joint, rule.warp)), generator, front.node.numel())
    outcomes.append(Outcome.of(front, joint, drawn, front.valid.sum()))
    vocab = joint.size(-1)
    if not layers:
        return _summarise(outcomes[0], outcomes[0].width.new_ones(()), [], layers, rule, vocab)
    passes = torch.stack(passed).long().cumprod(0).sum()  # layers passed before the first to fail
    index = passes.reshape(1)
    kept = Outcome(*(torch.stack([getattr(o, f.name) for o in outcomes]).index_select(0, index)[0]
                     for f in fields(Outcome)))
    stats = [torch.stack(widths).double(), torch.stack(accepted).double(), torch.stack(betas)]
    return _summarise(kept, passes + 1, stats, layers, rule, vocab)


def _verify_layer(front: Frontier, slot_of: torch.Tensor | None, layer: ForestLayer, rule: ForestRule, generator):
    """Algorithm 1, lines 10-31, for one layer in row form: (the outcome, the verdict, β_{W_min}^(l), the next
    frontier: the accepted drafts in ``rule.slots`` slots, valid if the layer passed, and every draft's slot in it
    or −1). ``slot_of``: the previous layer's drafts' slots in ``front`` (None: ``front`` is the input beams)."""
    slots, vocab = rule.slots, front.next_logp.size(-1)
    joint = beam_joint_logprobs(front.logp, front.next_logp, front.finished, rule.eos)
    p_beam = beam_distribution(joint, rule.warp)  # line 12: p_beam over the accepted beams × V
    p_beam = p_beam if slot_of is None else drawable(p_beam)  # the input beams are never empty
    q_beam = (layer.q_flat if slot_of is None else
              (layer.q_flat.reshape(-1, vocab).index_select(0, front.node) * front.valid.unsqueeze(1)).reshape(-1))
    q_beam = q_beam / q_beam.sum().clamp_min(1e-30)  # the drafts' law given their parent survived
    assert layer.target_next_logp is not None, "the target's forward comes before the verification"
    parent_slot = layer.parent if slot_of is None else slot_of.index_select(0, layer.parent)
    survivor = parent_slot >= 0  # line 10
    n = layer.token.numel()
    m = survivor.sum() if slot_of is not None else n
    candidates = parent_slot.clamp_min(0) * vocab + layer.token
    chain = residual_chain(p_beam, q_beam, n)
    table = count_distributions(rates_of_chain(chain, q_beam))
    counts = table[-1] if slot_of is None else table.index_select(0, m.reshape(1))[0]
    width = (_constant(rule.width, str(front.node.device)) if rule.width else
             dynamic_width_rows(counts, m, rule.threshold, rule.min_width))  # line 14, Eq. 2-7
    beta = 1.0 - counts[: rule.min_width].sum()  # β_{W_min}^(l)
    verdict = verify_layer_rows(chain, q_beam, candidates, survivor, width, slots, generator)
    out = Outcome.of(front, joint, verdict.outcomes, width)
    kept, valid = verdict.draft.clamp_min(0), _positions(slots, str(front.node.device)) < width
    nxt = Frontier(node=kept, valid=valid, logp=torch.where(valid, out.logp, float("-inf")),
                   finished=layer.finished.index_select(0, kept), length=out.length,
                   next_logp=layer.target_next_logp.index_select(0, kept))
    return out, verdict, beta, nxt, verdict.slot


@lru_cache(maxsize=32)
def _constant(value: int, device: str) -> torch.Tensor:
    return torch.full((), value, dtype=torch.long, device=device)


def _summarise(kept: Outcome, steps: torch.Tensor, stats: list[torch.Tensor], layers: list[ForestLayer],
               rule: ForestRule, vocab: int) -> tuple[Outcome, torch.Tensor]:
    """The output beams first (§3.4: only the lowest-perplexity one, ``width`` 1), and the summary."""
    width = kept.width
    valid = _positions(kept.outcomes.numel(), str(width.device)) < width
    if rule.memory_constrained:  # §3.4: only the lowest-perplexity output beam continues
        score = torch.where(valid, -kept.logp / kept.length.clamp_min(1), float("inf"))
        best = torch.argmin(score).reshape(1)
        kept, valid = kept.select(best), valid[best]
        kept.width = torch.ones_like(width)
    done = ((kept.parent_finished | (kept.outcomes % vocab == rule.eos)) | ~valid).all()
    head = torch.stack([steps, kept.width, done.long()]).double()
    first = _first_tokens(kept, vocab, steps, layers).double()
    return kept, torch.cat([head, *stats, first])


def _first_tokens(kept: Outcome, vocab: int, steps: torch.Tensor, layers: list[ForestLayer]) -> torch.Tensor:
    """(γ + 1,): the first output beam's tokens through the forest (its path's; the first steps − 1 are valid), then
    its new token: what the iteration commits to it. The path is its parent's ancestors (the layer at depth
    steps − 1 chosen on the device)."""
    token = kept.outcomes[:1] % vocab
    if not layers:
        return token
    anc = torch.stack([torch.nn.functional.pad(layer.ancestors, (0, len(layers) - layer.ancestors.size(1)))
                       for layer in layers])  # (γ, W_S, γ)
    at_depth = anc.index_select(0, (steps - 2).clamp_min(0).reshape(1))[0]
    node = kept.parent[:1].clamp_max(at_depth.size(0) - 1)  # (steps 1: an input beam, unused)
    path = at_depth.index_select(0, node)[0]  # (γ,) its slot in every layer
    return torch.cat([torch.stack([layer.token for layer in layers]).gather(1, path[:, None])[:, 0], token])
