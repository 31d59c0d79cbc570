"""SpecDec++'s acceptance-prediction head and stop rule (Huang et al. 2024, arXiv:2405.19715).

The head. A small residual MLP (``num_layers`` applications of one shared residual block, then
Linear(H → 2); :mod:`harness.heads.resnet`) on the DRAFT model's last hidden state at a token's own
position: softmax(logits)[1] is the predicted probability that the target accepts that token. It is
trained (``scripts/train_specdecpp_head.py``) with the reference's soft-label cross-entropy, the
rejected class weighted (``weight_mismatch``, 6 in the reference's recipe).

The stop rule (the paper's threshold policy; the reference's ``hf_generation.py``, schedule ``ada``).
While the draft proposes candidates, stop the round as soon as the predicted probability that at least
one candidate so far is rejected,

    P(reject) = 1 − ∏_j p̂_j,

exceeds the threshold h, within bounds [min_gamma, max_gamma] on the candidates drafted. Timing, as
in the reference loop: the draft forward that consumes candidate k − 1 yields both its hidden state
(so p̂_{k−1}) and the distribution candidate k is drawn from; candidate k is drawn, then the rule
decides with p̂_1 … p̂_{k−1} — the newest candidate is never judged, and the first forward's hidden
state (at the last verified token, which is no candidate) counts as p̂ = 1. :class:`SpecDecPPStop`
follows one round this way; :func:`stop_drafting` is the rule itself.

Checkpoint layout (``hacky/acchead-llama2-chat-7bx70b``, saved by huggingface_hub's
``PyTorchModelHubMixin``): ``config.json`` ``{"hidden_size": H, "num_layers": L}`` and
``pytorch_model.bin`` or ``model.safetensors`` with ``model.{j}.linear.weight``/``.bias`` (j < L) and
``model.{L}.weight``/``.bias``.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from harness.errors import ConfigError, HarnessError
from harness.heads.defaults import DEFAULT_MAX_GAMMA, DEFAULT_MIN_GAMMA, DEFAULT_THRESHOLD
from harness.heads.checkpoints import check_keys, read_config, read_weights, write_checkpoint
from harness.heads.resnet import load_residual_stack, residual_stack, stack_keys

WEIGHTS_NAMES = ("model.safetensors", "pytorch_model.bin")


class AcceptanceHead(nn.Module):
    """``forward(hidden (..., H)) -> logits (..., 2)``; class 1 = accepted."""

    def __init__(self, hidden_size: int, num_layers: int = 3):
        super().__init__()
        self.hidden_size, self.num_layers = int(hidden_size), int(num_layers)
        self.model = residual_stack(self.hidden_size, self.num_layers, 2, bias=True)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.model(hidden)

    def accept_probability(self, hidden: torch.Tensor) -> torch.Tensor:
        """p̂ (...,): the predicted probability that the token at this hidden state's position is accepted."""
        return torch.softmax(self.forward(hidden.to(self.model[-1].weight.dtype)).float(), dim=-1)[..., 1]

    def save_pretrained(self, directory, dtype: torch.dtype = torch.float16, extra: dict | None = None):
        """Write the published layout (``config.json`` + ``model.safetensors``)."""
        config = {"hidden_size": self.hidden_size, "num_layers": self.num_layers, **(extra or {})}
        return write_checkpoint(directory, config, self, WEIGHTS_NAMES[0], dtype)


def load_acceptance_head(ref: str, dtype: torch.dtype = torch.float32,
                         device: str | torch.device = "cpu") -> AcceptanceHead:
    """A SpecDec++ acceptance head from ``tiny/specdecpp``, a local directory or a hub id."""
    cfg = read_config(ref)
    if "hidden_size" not in cfg:
        raise HarnessError(f"'{ref}' is no SpecDec++ acceptance head: its config.json has no hidden_size")
    head = AcceptanceHead(int(cfg["hidden_size"]), int(cfg.get("num_layers", 0)))
    state = read_weights(ref, WEIGHTS_NAMES)
    check_keys(ref, state, stack_keys("model.", head.num_layers, bias=True))
    load_residual_stack(head.model, state, "model.", ref)
    return head.to(device=device, dtype=dtype).eval()


def rejection_probability(accept_probs: torch.Tensor) -> torch.Tensor:
    """1 − ∏ p̂ along the last dimension: the probability that at least one of these tokens is rejected
    (the acceptances treated as the head predicts them, each conditional on the ones before)."""
    return 1.0 - torch.prod(accept_probs.float(), dim=-1)


def check_rule(threshold: float, min_gamma: int, max_gamma: int) -> None:
    """Refuse a rule that cannot work, naming the valid values."""
    if not 0.0 <= threshold <= 1.0:
        raise ConfigError(f"the SpecDec++ stop threshold must be in [0, 1], got {threshold}")
    if not 1 <= min_gamma <= max_gamma:
        raise ConfigError(f"SpecDec++ bounds need 1 <= min_gamma <= max_gamma, got [{min_gamma}, {max_gamma}]")


def stop_drafting(drafted: int, reject_probability: float, threshold: float = DEFAULT_THRESHOLD,
                  min_gamma: int = DEFAULT_MIN_GAMMA, max_gamma: int = DEFAULT_MAX_GAMMA) -> bool:
    """Stop after ``drafted`` candidates? At max_gamma always, below min_gamma never, else iff the
    predicted probability of a rejection exceeds the threshold (strictly, as the reference compares)."""
    check_rule(threshold, min_gamma, max_gamma)
    if drafted >= max_gamma:
        return True
    if drafted < min_gamma:
        return False
    return reject_probability > threshold


@dataclass
class SpecDecPPStop:
    """One speculation round's stop decisions, in the reference's timing (see the module doc).

    Call :meth:`after_draft` after each draft forward that drew a candidate, with that forward's last
    hidden state (at the token it consumed); it returns True when the round should stop with the
    candidates drafted so far. The first call of a round has the last verified token's hidden state,
    which is no candidate: its prediction is not used (p̂ = 1), as in the reference."""

    head: AcceptanceHead
    threshold: float = DEFAULT_THRESHOLD
    min_gamma: int = DEFAULT_MIN_GAMMA
    max_gamma: int = DEFAULT_MAX_GAMMA
    drafted: int = 0
    accept_probs: list[float] = field(default_factory=list)

    def __post_init__(self):
        check_rule(self.threshold, self.min_gamma, self.max_gamma)

    def reset(self) -> None:
        """A new round starts."""
        self.drafted, self.accept_probs = 0, []

    @torch.no_grad()
    def after_draft(self, hidden: torch.Tensor) -> bool:
        self.drafted += 1
        if self.drafted > 1:  # the hidden state at candidate drafted − 1
            self.accept_probs.append(float(self.head.accept_probability(hidden.reshape(-1, hidden.size(-1))[-1])))
        p_reject = float(rejection_probability(torch.tensor(self.accept_probs))) if self.accept_probs else 0.0
        return stop_drafting(self.drafted, p_reject, self.threshold, self.min_gamma, self.max_gamma)
