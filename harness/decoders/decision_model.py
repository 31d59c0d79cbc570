"""Early-stop decision models for dynamic multi-candidate drafting (mcsd §3.3, §4.1, App. A.2), and their loader:
``mcsd_dynamic`` and ``mcsd_target_init`` load a committed model by name (:func:`decision_rule`).

While the draft extends W candidate sequences one turn at a time, a small MLP predicts, for
every sequence, the probability that the target accepts the sequence's latest (T1) or next
(T2) draft token; if the prediction is below the threshold β for EVERY sequence, drafting
stops early (§3.3; β = 0.4 for both models, §3.3 and Fig. 2). The decision model only chooses
the draft depth γ of a round; verification is untouched. Because both kinds decide from what
exists before the tokens they gate are drawn, the tree's shape is a stopping time of the
drafting, and a lossless verification stays lossless whatever the model predicts.

Two kinds (§3.3):

* ``t1`` — P_T1 = MLP(y_i^H), a three-layer MLP on the draft's hidden state, trained toward the
  acceptance probability of the drafted token, min(1, p(x|I) / q(x|I)). The seed prints
  max(1, p/q), which is ≥ 1 everywhere and cannot be a probability label; the acceptance
  probability of speculative sampling (Leviathan et al. 2023) is the min, used here.
* ``t2`` — P_T2 = MLP(ConCat(Topk(y_i^D), Ent(y_i^D))), a two-layer MLP on the draft
  distribution's top-k probabilities and its entropy (after Tandem transformers), trained on
  the sampled verification outcome (1 accepted, 0 rejected).

Features (mcsd §3.3 says "for token i"; where exactly is this project's reading):

* T1's y_i^H is the draft's last hidden state (after the final norm, the LM head's input) at
  token i's own position — the draft forward that feeds x_i computes it. It knows x_i, so it
  judges the token just drafted: after the draft forward of x_d, T1 predicts whether x_d is
  accepted (``lookahead`` 0); drafting on past a token the target will reject is wasted.
* T2's y_i^D is T∘q (warped, as tokens are drawn from it) at the position x_i is drawn from,
  available from the forward of x_{i−1}: after the draft forward of x_d, T2 predicts whether
  the next token x_{d+1} would be accepted (``lookahead`` 1).

Either way the rule is evaluated once per drafting turn, after turn d's draft forward, for
d = 1 … D − 1 (every round drafts at least one turn, Fig. 2's smallest slice); when it fires,
the round's depth is γ = d. (On the tiny pair, in an exploratory run, the own-position hidden
state gave a held-out AUC of 0.645 against 0.62 for the hidden state x_i is drawn from.) The seed gives
neither k nor the layer widths: k = 10 and the widths in :data:`ARCHITECTURES` are this
project's choices (recorded with each saved model).

Saved models are a safetensors file (weights and the feature standardisation) plus a JSON
file with the architecture, feature spec, training data and held-out AUCs, under
``harness/assets/decision_models/<name>.*`` (trained by ``scripts/train_decision_models.py``).
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import torch

from harness.decoders.params.mcsd_dynamic import DEFAULT_THRESHOLD, check_threshold
from harness.errors import ConfigError
from harness.resources import assets_dir

DEFAULT_TOP_K = 10  # not given in the paper
ASSETS_DIR = assets_dir() / "decision_models"

# Hidden widths between the input and the single output logit: T1 has three linear layers, T2 two (§3.3).
ARCHITECTURES = {"t1": (64, 64), "t2": (32,)}
# Which token a prediction made after turn d's draft forward is about: d + LOOKAHEAD[kind] (see above).
LOOKAHEAD = {"t1": 0, "t2": 1}


def topk_entropy_features(probs: torch.Tensor, top_k: int = DEFAULT_TOP_K) -> torch.Tensor:
    """ConCat(Topk(y), Ent(y)) of mcsd §3.3: (..., V) distribution → (..., top_k + 1).

    The top-k probabilities in descending order, then the entropy in nats (0 · log 0 = 0).
    """
    if top_k < 1 or top_k > probs.size(-1):
        raise ValueError(f"top_k must be in [1, {probs.size(-1)}], got {top_k}")
    probs = probs.float()
    top = torch.topk(probs, top_k, dim=-1).values
    ent = -(probs * torch.log(probs.clamp_min(1e-30))).sum(-1, keepdim=True)
    return torch.cat([top, ent], dim=-1)


def early_stop(predicted: torch.Tensor, threshold: float = DEFAULT_THRESHOLD) -> bool:
    """The seed's rule (§3.3): stop drafting when every sequence's predicted acceptance is below β."""
    check_threshold(threshold)
    return bool((predicted < threshold).all())


def stop_depth(predicted: torch.Tensor, threshold: float = DEFAULT_THRESHOLD, lookahead: int = 1) -> torch.Tensor:
    """The draft depth γ the rule reaches in a round of at most D turns.

    ``predicted`` (..., W, D): ``predicted[..., w, j]`` is the predicted acceptance of token j+1 of
    sequence w. After turn d's draft forward (d = 1 … D − 1) the model has judged token
    d + ``lookahead`` of every sequence (:data:`LOOKAHEAD`: 0 for T1, 1 for T2); if all W are
    below β drafting stops and γ = d, else γ = D. Returns (...) long.
    """
    check_threshold(threshold)
    depth = predicted.size(-1)
    if lookahead not in (0, 1):
        raise ValueError(f"lookahead must be 0 or 1, got {lookahead}")
    fires = (predicted < threshold).all(-2)[..., lookahead:depth - 1 + lookahead]  # index d−1: after turn d
    first = torch.where(fires.any(-1), fires.long().argmax(-1), torch.full(fires.shape[:-1], fires.size(-1)))
    return first + 1


def roc_auc(scores, labels) -> float:
    """Area under the ROC curve of ``scores`` for binary ``labels`` (ties count ½): the Mann-Whitney U
    statistic ÷ (positives × negatives). NaN when either class is absent (no AUC is defined)."""
    from scipy.stats import mannwhitneyu

    s = torch.as_tensor(scores, dtype=torch.float64).reshape(-1)
    y = torch.as_tensor(labels).reshape(-1).bool()
    pos, neg = s[y], s[~y]
    if pos.numel() == 0 or neg.numel() == 0:
        return float("nan")
    return float(mannwhitneyu(pos.numpy(), neg.numpy(), alternative="two-sided").statistic) / (pos.numel() * neg.numel())


class DecisionModel(torch.nn.Module):
    """An MLP from decision features to the logit of the acceptance probability (mcsd §3.3).

    ``kind`` "t1" (features: draft hidden state, ``in_features`` = its width) or "t2" (features:
    :func:`topk_entropy_features` with ``top_k``, ``in_features`` = top_k + 1). Inputs are
    standardised with the training set's mean and std (stored with the weights).
    """

    def __init__(self, kind: str, in_features: int, hidden: tuple[int, ...] | None = None, top_k: int | None = None,
                 info: dict | None = None):
        super().__init__()
        if kind not in ARCHITECTURES:
            raise ConfigError(f"unknown decision model kind '{kind}'; valid: {', '.join(ARCHITECTURES)}")
        if kind == "t2" and (top_k is None or in_features != top_k + 1):
            raise ValueError(f"a t2 model takes top_k + 1 features, got in_features={in_features}, top_k={top_k}")
        self.kind, self.in_features, self.top_k = kind, int(in_features), top_k
        self.hidden = tuple(ARCHITECTURES[kind] if hidden is None else hidden)
        self.info = dict(info or {})
        widths = [self.in_features, *self.hidden, 1]
        layers: list[torch.nn.Module] = []
        for i in range(len(widths) - 1):
            layers.append(torch.nn.Linear(widths[i], widths[i + 1]))
            if i < len(widths) - 2:
                layers.append(torch.nn.ReLU())
        self.net = torch.nn.Sequential(*layers)
        self.register_buffer("feature_mean", torch.zeros(self.in_features))
        self.register_buffer("feature_std", torch.ones(self.in_features))

    @property
    def lookahead(self) -> int:
        return LOOKAHEAD[self.kind]

    @property
    def threshold(self) -> float:
        return float(self.info.get("threshold", DEFAULT_THRESHOLD))

    def set_standardisation(self, features: torch.Tensor) -> None:
        self.feature_mean.copy_(features.float().mean(0))
        self.feature_std.copy_(features.float().std(0).clamp_min(1e-6))

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """Logits (...,) of the acceptance probability."""
        x = (features.float() - self.feature_mean) / self.feature_std
        return self.net(x).squeeze(-1)

    def features(self, hidden: torch.Tensor | None = None, probs: torch.Tensor | None = None) -> torch.Tensor:
        """This kind's input: the draft's last hidden state (..., H) at the token just fed for t1, its
        warped output distribution (..., V) there (the next token's) for t2."""
        if self.kind == "t1":
            if hidden is None:
                raise ValueError("a t1 decision model needs the draft's hidden states")
            return hidden
        if probs is None:
            raise ValueError("a t2 decision model needs the draft's output distributions")
        return topk_entropy_features(probs, self.top_k)

    @torch.no_grad()
    def predict(self, features: torch.Tensor) -> torch.Tensor:
        """Predicted acceptance probabilities (...,) in [0, 1] for features (..., in_features)."""
        if features.size(-1) != self.in_features:
            raise ValueError(f"decision model '{self.info.get('name', self.kind)}' takes {self.in_features} "
                             f"features, got {features.size(-1)}")
        p = next(self.parameters())
        return torch.sigmoid(self(features.to(p.device)))

    def should_stop(self, hidden: torch.Tensor | None = None, probs: torch.Tensor | None = None,
                    threshold: float | None = None) -> bool:
        """The early-stop rule for W sequences (rows): True when all predictions are below β."""
        pred = self.predict(self.features(hidden, probs))
        return early_stop(pred, self.threshold if threshold is None else threshold)

    def spec(self) -> dict:
        return {"kind": self.kind, "in_features": self.in_features, "hidden": list(self.hidden), "top_k": self.top_k,
                "lookahead": self.lookahead}

    def save(self, directory, name: str, info: dict | None = None) -> Path:
        """Write ``<directory>/<name>.safetensors`` and ``<name>.json`` (spec + ``info``); returns the JSON path."""
        from safetensors.torch import save_file

        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.info = {**self.info, **(info or {}), "name": name}
        state = {k: v.detach().float().contiguous().cpu() for k, v in self.state_dict().items()}
        save_file(state, str(directory / f"{name}.safetensors"), metadata={"kind": self.kind})
        path = directory / f"{name}.json"
        record = _nan_to_null({**self.info, "architecture": self.spec()})
        path.write_text(json.dumps(record, indent=2, allow_nan=False) + "\n")
        return path

    @classmethod
    def load(cls, name_or_path, device=None) -> DecisionModel:
        """Load a saved model by name (in ``harness/assets/decision_models``) or by path (either file,
        or the common stem)."""
        from safetensors.torch import load_file

        stem = str(name_or_path)
        for suffix in (".json", ".safetensors"):  # names hold dots (temp0.7): strip only these
            stem = stem[: -len(suffix)] if stem.endswith(suffix) else stem
        if not Path(stem + ".json").exists():
            stem = str(ASSETS_DIR / stem)
        meta_path, weights_path = Path(stem + ".json"), Path(stem + ".safetensors")
        if not meta_path.exists() or not weights_path.exists():
            raise ConfigError(f"decision model '{name_or_path}' not found (need {Path(stem).name}.json and "
                              f".safetensors); available: {', '.join(available_decision_models()) or 'none'}")
        meta = json.loads(meta_path.read_text())
        arch = meta.pop("architecture")
        if arch.get("lookahead", LOOKAHEAD.get(arch["kind"])) != LOOKAHEAD.get(arch["kind"]):
            raise ConfigError(f"decision model '{name_or_path}': lookahead {arch['lookahead']} does not match kind "
                              f"'{arch['kind']}' (expects {LOOKAHEAD.get(arch['kind'])})")
        model = cls(arch["kind"], arch["in_features"], tuple(arch["hidden"]), arch.get("top_k"), info=meta)
        model.load_state_dict(load_file(str(weights_path)))
        return model.to(device).eval() if device is not None else model.eval()


def available_decision_models() -> list[str]:
    return sorted(p.stem for p in ASSETS_DIR.glob("*.json")) if ASSETS_DIR.exists() else []


def _nan_to_null(x):
    """JSON has no NaN: write null (readers turn it back into NaN)."""
    if isinstance(x, dict):
        return {k: _nan_to_null(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_nan_to_null(v) for v in x]
    if isinstance(x, float) and math.isnan(x):
        return None
    return x


class EarlyStopRule:
    """A decision model as drafting's per-turn stop hook (:class:`~harness.primitives.drafting.DraftStop`).

    After draft turn d (1 ≤ d < the round's depth) it predicts the acceptance of every frontier
    sequence — T1 from the hidden states of the tokens just fed, T2 from ConCat(Topk, Ent) of the
    distribution the next tokens come from — and stops when all are below β (§3.3). T2's features use
    the decoder's warp T∘q, as in training; under greedy decoding (T∘q one-hot, featureless) the plain
    softmax of the draft's logits, as ``scripts/train_decision_models.py`` trains the T = 0 models.
    ``checks`` and ``stops`` count the evaluations and the early stops since the last :meth:`reset`;
    ``predictions`` holds, per round (opened by :meth:`new_round`, one per drafting round), the rule's own
    quantity at each check d = 1, 2, …: the largest predicted acceptance over the W sequences (the rule stops
    when it is below β) — what mcsd Fig. 7 sets against the verification's outcome (``stat.decision_predictions``).
    """

    def __init__(self, model: DecisionModel, threshold: float | None = None, warp=None):
        self.model = model
        self.threshold = model.threshold if threshold is None else check_threshold(threshold)
        self.warp = warp
        self.needs_hidden = model.kind == "t1"
        self.reset()

    def reset(self) -> None:
        self.checks = self.stops = 0
        self.predictions: list[list[float]] = []

    def new_round(self) -> None:
        """A drafting round begins: its checks' predictions go into a list of their own (empty if it has none)."""
        self.predictions.append([])

    reads_alive = True  # rows that are not real draws (dead nodes a drafting kept, draft_tree) do not count

    def __call__(self, depth: int, hidden: torch.Tensor | None, logits: torch.Tensor,
                 alive: torch.Tensor | None = None) -> bool:
        probs = None
        if not self.needs_hidden:
            greedy = self.warp is None or self.warp.is_greedy
            probs = torch.softmax(logits.float(), -1) if greedy else self.warp.probs(logits)
        pred = self.model.predict(self.model.features(hidden, probs)).reshape(-1)
        if alive is not None:
            pred = torch.where(alive.to(pred.device), pred, float("-inf"))
        top = float(pred.max())  # the one host read of a check
        stop = top < self.threshold  # = every sequence's prediction below β (early_stop)
        if not self.predictions:
            self.new_round()
        self.predictions[-1].append(round(top, 4))
        self.checks += 1
        self.stops += int(stop)
        return stop


#: ``decision_model: t1 | t2`` means the committed model of that kind for the embedded tiny draft at the
#: decoding's temperature: ``tiny_<kind>_temp<T>`` (scripts/train_decision_models.py).
KIND_SHORTHANDS = ("t1", "t2")
TINY_DRAFT = "tiny/draft"


def decision_rule(name: str | None, threshold: float, warp, pair, draft) -> EarlyStopRule | None:
    """The stop hook for a ``decision_model`` key (None when it is null), loaded on the draft's device."""
    if name is None:
        return None
    if name in KIND_SHORTHANDS:
        if pair.draft_id != TINY_DRAFT:
            raise ConfigError(f"decision_model={name} names the committed model for draft '{TINY_DRAFT}', but the "
                              f"pair's draft is '{pair.draft_id}': give a model name or path "
                              f"(available: {', '.join(available_decision_models())})")
        name = f"tiny_{name}_temp{warp.temperature:g}"
    model = DecisionModel.load(name, device=draft.device)
    if model.kind == "t1" and model.in_features != draft.config.hidden_size:
        raise ConfigError(f"decision_model '{name}' (t1) reads hidden states of width {model.in_features}, but the "
                          f"draft's hidden size is {draft.config.hidden_size}")
    return EarlyStopRule(model, threshold, warp)
