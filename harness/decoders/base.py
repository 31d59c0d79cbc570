"""The decoder contract: prompt ids in, :class:`Generation` (ids + stats) out.

Every decoder is one class in its own file, registered under a method name with :func:`register`,
typed by its parameters: ``class SD(Decoder[SDParams])``. ``Params`` is a frozen dataclass (its
fields, with ``field(metadata={"help": ...})``, are the method's config: the CLI's ``method.<name>``
keys come from them through Hydra's ConfigStore). ``_decode`` returns a :class:`Decoded` (the new
tokens, the decoder's declared ``Extras``, and the final beams for beam decoders). Decoders call
models only through :class:`~harness.primitives.forward.CountedModel`, so forward counts are
uniform; wall time is taken here, around the whole generation, after a device sync. Rounds are
recorded by the loop drivers only (``stats.observe_round``), see :mod:`harness.stats`.

Glossary — one name per concept, in every decoder:

=====================  ========================================================================
``gamma``              draft length / depth γ per round (chain length; tree depth; DSBD layers;
                       MTJD tokens per joint step). MCSD's tree shape is ``k_config`` (γ = its length).
``width``              beams of the method's own beam search (beam_search, beam_sampling, MTJD;
                       DSBD's fixed W_L, ``None`` = dynamic width)
``draft_width``        beams of the draft's beam sampling (DSBD's W_S, MTAD)
``num_drafts``         number of draft sequences (SpecInfer / Spectr m)
``temperature``,       the warp T (seed 002 App. F): temperature → top-k → top-p; temperature 0 is
``top_k``, ``top_p``   greedy. Written once in :class:`SamplingParams`.
=====================  ========================================================================

Decoding: every method follows one decoding setting (:mod:`harness.decoding`: ``greedy``,
``sampling`` = seed 002 App. F, ``sampling_seed000``): :func:`resolve_method` applies its warp to the
method's Params. Methods say which decodings they support (``Decoder.decodings``): ``ar_greedy`` and
``beam_search`` are greedy only, ``beam_sampling``, ``dsbd`` and ``mtad`` sampling only; the aliases
``ar`` (ar_greedy | ar_sampling) and ``beam`` (beam_search | beam_sampling) follow the decoding, so
a sweep over decodings pairs every method with the right baseline. A method asked to decode a way it
cannot raises :class:`~harness.errors.NotApplicable` (a sweep skips that cell).

Renamed parameters keep working for one release (``Params.renamed``; retired ones through
``Params.upgrade``): the old name maps to the new one with a ``DeprecationWarning`` and a logged
message naming the new key.
"""
from __future__ import annotations

import dataclasses
import logging
import time
import warnings
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, Mapping, Sequence, TypeVar, get_args, get_origin

import torch

from harness.adaptive.draft_selection import DIM, N_FIT
from harness.adaptive.policies import GAMMA_LIMIT, GAMMA_MAX, GAMMA_MIN, POLICIES, make_gamma_policy
from harness.decoding import SAMPLING, WARP_KEYS, Decoding, as_decoding
from harness.errors import ConfigError, NotApplicable
from harness.models import ModelPair
from harness.primitives.forward import CountedModel, synchronize
from harness.primitives.gamma_policy import FixedGamma, GammaPolicy
from harness.primitives.sampling import make_generator
from harness.primitives.stopping import StopCondition
from harness.primitives.warping import Warp
from harness.registry import Registry
from harness.stats import GenerationStats, NoExtras

log = logging.getLogger("harness")


def param(default, help: str, **kwargs):  # noqa: A002 — the metadata key is Hydra/argparse's "help"
    """A Params field with its help text (shown in the README's method table and config errors)."""
    return field(default=default, metadata={"help": help, **kwargs})


@dataclass(frozen=True)
class DecoderParams:
    """Base of every decoder's parameters: a frozen dataclass whose fields are the method's config keys.

    ``renamed`` maps a deprecated parameter name to its name now (accepted for one release);
    ``retired`` names deprecated parameters with no new name, with their type (the CLI schema keeps a
    slot for them) — :meth:`upgrade` maps them.
    """

    renamed: ClassVar[Mapping[str, str]] = {}
    retired: ClassVar[Mapping[str, type]] = {}

    @classmethod
    def upgrade(cls, params: dict[str, Any], method: str) -> dict[str, Any]:
        """Map retired parameters in ``params`` (after renames) to what replaces them."""
        return params

    @property
    def decoding(self) -> str:
        """``"greedy"`` (deterministic) or ``"sampling"``."""
        return "greedy"

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def check_at_least(self, minimum: int, *names: str) -> None:
        """ConfigError naming the first of ``names`` whose value is below ``minimum``."""
        for name in names:
            value = getattr(self, name)
            if value < minimum:
                raise ConfigError(f"{name} ({_help(type(self), name)}) must be >= {minimum}, got {value}")


def _help(cls: type, name: str) -> str:
    for f in dataclasses.fields(cls):
        if f.name == name:
            return f.metadata.get("help", name).split(";")[0].split(" (")[0]
    return name


NoParams = DecoderParams


@dataclass(frozen=True)
class SamplingParams(DecoderParams):
    """The warp T of every method that can sample, with its checks, written once. Defaults: the
    ``sampling`` decoding preset (seed 002 App. F: temperature 1, top-20, top-p 0.9); on the command
    line these come from the ``decoding`` group, never from the method."""

    temperature: float = param(SAMPLING.temperature, "temperature of the warp T; 0 = greedy")
    top_k: int = param(SAMPLING.top_k, "keep the k most likely tokens (0 = off); seed 002 App. F: 20")
    top_p: float = param(SAMPLING.top_p, "nucleus: keep the smallest set of probability >= p (1 = off); "
                                         "seed 002 App. F: 0.9")

    @property
    def warp(self) -> Warp:
        return Warp(self.temperature, self.top_k, self.top_p)

    @property
    def decoding(self) -> str:
        return "greedy" if self.temperature == 0 else "sampling"

    def __post_init__(self):
        self.warp  # validates ranges  # noqa: B018

    def require_sampling(self, method: str, why: str) -> None:
        """ConfigError unless the warp samples (``method`` ``why``, e.g. "samples its draft beams")."""
        if self.warp.is_greedy:
            raise ConfigError(f"{method} {why}: it needs temperature > 0 (decoding=sampling)")


POLICY_NAMES = tuple(POLICIES)
SELECTIONS = ("none", "ols")


@dataclass(frozen=True)
class SpeculativeParams(SamplingParams):
    """The keys every decoder that drafts a chain or tree of some depth shares (seed 004): the γ policy
    (§4; :mod:`harness.adaptive.policies`) and draft-model selection (§5). One name and one default each,
    everywhere; ``gamma`` (the decoder's own draft depth) is the fixed γ and every adaptive policy's γ_init.

    ``gamma_policy=fixed`` (the default) is today's behaviour; the policy keys that do not belong to the
    chosen policy are ignored. ``draft_selection=ols`` picks a draft per prompt among ``pair.drafts``
    (Eq. 8 fitted online on the first ``selection_fit_prompts`` prompts, Theorem 2 / Eq. 1 choice).
    """

    gamma_policy: str = param("fixed", "γ policy (seed 004 §4): " + " | ".join(POLICIES) + "; fixed = γ every round")
    gamma_min: int = param(GAMMA_MIN, "adaptive γ floor (0 allows a plain target step, §4.2 FSM)")
    gamma_max: int = param(GAMMA_MAX, "adaptive γ ceiling γ_max (seed 004 §6.3, App. C.5 Table 10: 5..8)")
    acc_history: int = param(6, "online: h, rounds of history in the Eq. 2 accuracy estimate (App. C.5 Table 10: 6)")
    acc_max: float = param(0.95, "online: cap Acc_max on the accuracy estimate (§4.1; value ours, not in the seed)")
    acc_estimator: str = param("eq2", "online: eq2 (Eq. 2) | mle (exact MLE of App. B.2, Eq. 12)")
    time_window: int = param(32, "online: recent rounds whose times give a_q and b_p(γ) (§4.1; value ours)")
    q_state_len: int = param(1, "qlearning: previous γ values in the state (App. B.4)")
    q_lr: float = param(0.05, "qlearning: learning rate (not in the seed)")
    q_discount: float = param(0.2, "qlearning: discount (not in the seed)")
    q_epsilon: float = param(0.05, "qlearning: exploration after warm-up (not in the seed)")
    q_epsilon_warmup: float = param(0.3, "qlearning: exploration during warm-up (not in the seed)")
    q_warmup_trials: int = param(25, "qlearning: warm-up generations (App. C.1: 25)")
    q_reward: str = param("acceptance", "qlearning: acceptance (Alg. 2 line 18) | throughput (ours)")
    hf_transient: bool = param(False, "hf_heuristic: restart from γ every generation (HF heuristic_transient)")
    draft_selection: str = param("none", "draft-model selection (seed 004 §5): none | ols (Eq. 8 OLS per draft, "
                                         "Theorem 2 / Eq. 1 choice; needs a pair with several drafts)")
    selection_fit_prompts: int = param(N_FIT, "ols: prompts run with every draft to fit Eq. 8 (§6.1: 25)")
    selection_features: int = param(DIM, "ols: feature vector length r (App. C.5 Table 11: 4..16)")

    #: Params key -> the policy constructor's keyword.
    POLICY_KEYS: ClassVar[Mapping[str, str]] = {
        "gamma_min": "gamma_min", "gamma_max": "gamma_max", "acc_history": "h", "acc_max": "acc_max",
        "acc_estimator": "estimator", "time_window": "time_window", "q_state_len": "state_len", "q_lr": "lr",
        "q_discount": "discount", "q_epsilon": "epsilon", "q_epsilon_warmup": "epsilon_warmup",
        "q_warmup_trials": "warmup_trials", "q_reward": "reward", "hf_transient": "transient"}

    def __post_init__(self):
        super().__post_init__()
        if self.gamma_policy not in POLICIES:
            raise ConfigError(f"unknown gamma_policy '{self.gamma_policy}'; valid: {', '.join(POLICIES)}")
        if self.draft_selection not in SELECTIONS:
            raise ConfigError(f"unknown draft_selection '{self.draft_selection}'; valid: {', '.join(SELECTIONS)}")
        if not isinstance(self.selection_fit_prompts, int) or self.selection_fit_prompts < 2:
            raise ConfigError(f"selection_fit_prompts = {self.selection_fit_prompts!r} out of range; valid: an "
                              "integer >= 2 (prompts per draft)")
        if not isinstance(self.selection_features, int) or not 3 <= self.selection_features <= 64:
            raise ConfigError(f"selection_features = {self.selection_features!r} out of range; valid: an integer "
                              "in [3, 64]")
        if self.gamma_policy != "fixed":
            self.make_gamma_policy(None, gamma_init=None)  # checks every key (ConfigError naming it)

    def policy_kwargs(self) -> dict[str, Any]:
        """The chosen policy's keywords from these Params (those of other policies left out)."""
        if self.gamma_policy == "fixed":
            return {}
        valid = set(POLICIES[self.gamma_policy].params())
        out = {kw: getattr(self, key) for key, kw in self.POLICY_KEYS.items() if kw in valid}
        for key in ("gamma_min", "gamma_max"):
            v = out.get(key)
            if isinstance(v, int) and not isinstance(v, bool) and not 0 <= v <= GAMMA_LIMIT:
                raise ConfigError(f"{key} = {v} out of range; valid: an integer in [0, {GAMMA_LIMIT}]")
        return out

    def make_gamma_policy(self, depth_cap: int | None = None, gamma_init: int | None | str = "gamma") -> GammaPolicy:
        """A fresh policy object: ``fixed`` → γ every round; else the named policy with γ_init = ``gamma``
        clipped into [gamma_min, gamma_max]. ``depth_cap``: the deepest round the decoder can draft (a
        precomputed tree shape); γ_max is lowered to it."""
        if self.gamma_policy == "fixed":
            return make_gamma_policy("fixed", gamma=int(self.gamma))
        kw = self.policy_kwargs()
        if depth_cap is not None:
            kw["gamma_max"] = max(1, min(kw["gamma_max"], depth_cap))
            kw["gamma_min"] = min(kw["gamma_min"], kw["gamma_max"])
        if gamma_init == "gamma":
            kw["gamma_init"] = max(kw["gamma_min"], min(kw["gamma_max"], int(self.gamma)))
        elif gamma_init is not None:
            kw["gamma_init"] = gamma_init
        return make_gamma_policy(self.gamma_policy, **kw)


@dataclass
class Decoded:
    """What ``_decode`` returns: new token ids, the decoder's declared extras, and (beam decoders) final beams."""

    tokens: list[int]
    extras: Any = None
    beams: list[Beam] | None = None


@dataclass(frozen=True)
class Beam:
    """One final beam of a beam decoder: its new tokens (up to and including EOS), its joint
    log-likelihood under the target, and the score the decoder ranks beams by (higher is better:
    beam_search's length-penalised log-likelihood; −log perplexity = logp ÷ length for the sampling
    beam decoders)."""

    tokens: list[int]
    logp: float
    score: float

    @staticmethod
    def by_perplexity(tokens: torch.Tensor, logp: torch.Tensor, length: torch.Tensor) -> list[Beam]:
        """Final beams (W, t) with joint log-likelihoods and lengths (up to EOS), lowest perplexity first."""
        score = logp / length.clamp_min(1)
        order = torch.argsort(-score, stable=True).tolist()
        return [Beam(tokens[i, : int(length[i])].tolist(), float(logp[i]), float(score[i])) for i in order]


@dataclass
class Generation:
    """Output of one decoder call: new token ids only (prompt excluded), and what it cost."""

    prompt_ids: list[int]
    output_ids: list[int]
    stats: GenerationStats
    stopped_by_eos: bool = False
    text: str | None = None
    beams: list[Beam] | None = None
    selection: dict | None = None  # draft selection (seed 004 §5): chosen draft, predicted/realised α, fit R²
    stopped_by_stop: bool = False  # ended by a stop string (the output ends with the token completing it)


P = TypeVar("P", bound=DecoderParams)


class Decoder(ABC, Generic[P]):
    """Base class. Subclasses set ``method`` (registry name), subclass ``Decoder[TheirParams]`` and
    implement ``_decode``; optional: ``Extras`` (a dataclass of method-specific stats), ``uses_draft``,
    ``uses_gamma_policy`` (the decoder runs :func:`~harness.primitives.spec_loop.speculative_loop`)."""

    method: ClassVar[str] = ""
    Params: ClassVar[type] = NoParams
    Extras: ClassVar[type] = NoExtras
    uses_draft: ClassVar[bool] = False
    uses_gamma_policy: ClassVar[bool] = False
    decodings: ClassVar[tuple[str, ...]] = ("greedy", "sampling")  # the decodings the method supports
    params: P

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        for base in cls.__dict__.get("__orig_bases__", ()):
            if get_origin(base) is Decoder:
                (arg,) = get_args(base)
                if isinstance(arg, type) and "Params" not in cls.__dict__:
                    cls.Params = arg

    def __init__(self, pair: ModelPair, params: P | None = None, *, gamma_policy: GammaPolicy | None = None,
                 sync_timing: bool = False):
        self.pair = pair
        self.params = params if params is not None else self.Params()
        if gamma_policy is not None and not self.uses_gamma_policy:
            raise ConfigError(f"method '{self.method}' has no draft-length policy (gamma_policy is for "
                              f"{', '.join(m for m, c in registry().items() if c.uses_gamma_policy)})")
        self.gamma_policy = gamma_policy if gamma_policy is not None else self.default_gamma_policy()
        # device-synchronise at the draft/verify boundaries (a no-op on CPU); a policy that reads the
        # measured times (online) needs them attributed to the right phase
        self.sync_timing = sync_timing or bool(getattr(self.gamma_policy, "needs_timing", False))
        self.target = CountedModel(pair.target, pair.vocab_size, sync=self.sync_timing)
        self.draft = (CountedModel(pair.require_draft(self.method), pair.vocab_size, sync=self.sync_timing)
                      if self.uses_draft else None)
        self.eos_token_id = pair.tokenizer.eos_token_id
        self.stopping = self.stop_condition()  # this generation's stopping check (set by ``generate``)
        self.selection = None
        if getattr(self.params, "draft_selection", "none") != "none":
            from harness.selection import OLSDraftSelection

            if not self.supports_draft_selection:
                raise ConfigError(f"method '{self.method}' cannot switch drafts per prompt (draft_selection is for "
                                  f"{', '.join(m for m, c in registry().items() if c.supports_draft_selection)})")
            self.selection = OLSDraftSelection(self)

    #: the decoder keeps no per-draft state beyond ``self.draft``, so draft selection (§5) may swap it per prompt
    supports_draft_selection: ClassVar[bool] = False

    def max_depth(self) -> int | None:
        """The deepest round this decoder can draft (None: any); a γ policy's γ_max is lowered to it."""
        return None

    def default_gamma_policy(self) -> GammaPolicy | None:
        """The policy its Params name (:meth:`SpeculativeParams.make_gamma_policy`; ``fixed`` = ``FixedGamma(γ)``)
        for decoders that run the speculative loop."""
        if not self.uses_gamma_policy:
            return None
        if isinstance(self.params, SpeculativeParams):
            return self.params.make_gamma_policy(self.max_depth())
        return FixedGamma(self.params.gamma)

    def set_draft(self, draft_id: str) -> None:
        """Use the pair's loaded draft ``draft_id`` from the next generation on (draft selection)."""
        if draft_id not in self.pair.drafts:
            raise ConfigError(f"pair '{self.pair.name}' has no draft '{draft_id}'; loaded: {', '.join(self.pair.drafts)}")
        if self.pair.draft_id != draft_id:
            self.pair = self.pair.with_draft(draft_id)
            self.draft = CountedModel(self.pair.draft, self.pair.vocab_size, sync=self.sync_timing)

    def prepare(self, prompts: list[list[int]]) -> None:
        """Called once with a cell's prompts (token ids) before any generation: draft selection fits its
        prompt features (TF-IDF, length and perplexity z-scores) on them. A no-op otherwise."""
        if self.selection is not None:
            self.selection.prepare(prompts)

    @property
    def device(self) -> torch.device:
        return self.pair.device

    @property
    def eos_sentinel(self) -> int:
        """The EOS id, or −1 (a token no model produces) when the tokenizer has none."""
        return -1 if self.eos_token_id is None else int(self.eos_token_id)

    @property
    def decoding(self) -> str:
        """``"greedy"`` or ``"sampling"``, as the parameters make this decoder decode."""
        return self.params.decoding

    @abstractmethod
    def _decode(self, prompt_ids: torch.Tensor, max_new_tokens: int, generator: torch.Generator | None,
                stats: GenerationStats) -> Decoded:
        """Return the new token ids (≤ max_new_tokens; ending at EOS if produced) and declared extras.

        ``stats`` is for the loop drivers' ``observe_round``; decoders never write it themselves.
        """

    def stop_condition(self, stop: Sequence[str] | None = None) -> StopCondition:
        """The generation's stopping check: EOS and ``stop`` strings on the decoded output."""
        tok = self.pair.tokenizer
        return StopCondition(self.eos_token_id, tuple(stop or ()),
                             lambda ids: tok.decode(ids, skip_special_tokens=True))

    def generate(self, prompt_ids, max_new_tokens: int, seed: int | None = None,
                 stop: Sequence[str] | None = None) -> Generation:
        """Decode from ``prompt_ids`` (list or 1-D/2-D tensor, batch 1). Timed end to end.

        ``stop``: stop strings. Decoders check them inside their loops (``self.stopping``, after each
        committed block: :mod:`harness.primitives.stopping`), so no token past the one completing a
        stop string is generated, timed or counted; the output is cut there once more as a safeguard.

        With draft selection, the draft is chosen for this prompt first (``Generation.selection`` says which
        and why); while the selection is fitting, every draft runs on the prompt and the first one's
        generation is returned."""
        if self.selection is not None:
            return self.selection.generate(prompt_ids, max_new_tokens, seed, stop=stop)
        return self._generate(prompt_ids, max_new_tokens, seed, stop=stop)

    def _generate(self, prompt_ids, max_new_tokens: int, seed: int | None = None,
                  stop: Sequence[str] | None = None) -> Generation:
        ids = torch.as_tensor(prompt_ids, dtype=torch.long, device=self.device).reshape(1, -1)
        generator = make_generator(seed, self.device)
        stats = GenerationStats()
        self.stopping = self.stop_condition(stop)
        t_calls, d_calls = self.target.calls, (self.draft.calls if self.draft else 0)
        models = {"target": self.target, **({"draft": self.draft} if self.draft else {})}
        for m in models.values():
            m.spans = []
        synchronize(self.device)
        start = time.perf_counter()
        decoded = self._decode(ids, max_new_tokens, generator, stats)
        synchronize(self.device)
        end = time.perf_counter()
        stats.wall_time_s = end - start
        stats.set_spans(start, end, {name: m.spans for name, m in models.items()})
        out, by_stop = self.stop_condition(stop).trim([int(t) for t in decoded.tokens][:max_new_tokens])
        stats.new_tokens = len(out)
        stats.target_calls = self.target.calls - t_calls
        stats.draft_calls = (self.draft.calls - d_calls) if self.draft else 0
        extras = decoded.extras if decoded.extras is not None else self.Extras()
        if not isinstance(extras, self.Extras):
            raise TypeError(f"{type(self).__name__} returned extras of type {type(extras).__name__}, "
                            f"not its declared {self.Extras.__name__}")
        stats.extras = extras
        eos = self.eos_token_id is not None and len(out) > 0 and out[-1] == self.eos_token_id
        return Generation(prompt_ids=ids[0].tolist(), output_ids=out, stats=stats, stopped_by_eos=eos,
                          beams=decoded.beams, stopped_by_stop=by_stop)

    def params_dict(self) -> dict[str, Any]:
        """Every parameter (the Params fields), for summaries: ``summary.json["params"]``."""
        return self.params.as_dict()

    def facts(self) -> dict[str, Any]:
        """What else identifies the run besides the parameters (e.g. a library version): ``summary.json["facts"]``."""
        return {}


DECODERS: Registry[type[Decoder]] = Registry("method", "method", "harness.decoders")
register = DECODERS.register


def registry() -> dict[str, type[Decoder]]:
    """Every registered decoder class by method name (imports every decoder module once)."""
    return DECODERS.all()


def canonical_params(cls: type[Decoder], params: Mapping[str, Any] | None) -> dict[str, Any]:
    """Map deprecated parameter names to their names now (with a DeprecationWarning and a log line naming
    the new key) and retired parameters to what replaces them; drop unset (None) deprecated slots, which
    the CLI schema carries for every old name."""
    params = dict(params or {})
    renamed = getattr(cls.Params, "renamed", {})
    defaults = {f.name: f.default for f in dataclasses.fields(cls.Params)}
    for old, new in renamed.items():
        if old not in params:
            continue
        value = params.pop(old)
        if value is None:
            continue
        deprecation(f"method '{cls.method}': parameter '{old}' is deprecated and will be removed in the next "
                    f"release; use '{new}' (method.{new}={value} on the command line)")
        current = params.get(new, defaults.get(new))
        if new in params and current != value and current != defaults.get(new):
            raise ConfigError(f"method '{cls.method}': both '{new}'={current} and its deprecated name "
                              f"'{old}'={value} are set; keep '{new}' only")
        params[new] = value
    for old in (*getattr(cls.Params, "retired", {}), *WARP_KEYS):  # unset CLI slots (the warp is the decoding's)
        if old in params and params[old] is None:
            params.pop(old)
    return cls.Params.upgrade(params, cls.method)


def deprecation(message: str) -> None:
    """A DeprecationWarning for Python callers and a logged line for command-line users."""
    warnings.warn(message, DeprecationWarning, stacklevel=4)
    log.warning(message)


def make_params(cls: type[Decoder], params: Mapping[str, Any] | None):
    """Build ``cls.Params`` from a dict, with a clear error naming the valid keys."""
    params = canonical_params(cls, params)
    valid = {f.name for f in dataclasses.fields(cls.Params)}
    unknown = sorted(set(params) - valid)
    if unknown:
        raise ConfigError(f"unknown parameter(s) {unknown} for method '{cls.method}'. "
                          f"Valid parameters: {', '.join(sorted(valid)) or '(none)'}")
    try:
        return cls.Params(**params)
    except TypeError as e:
        raise ConfigError(f"bad parameters for method '{cls.method}': {e}") from e


#: Method aliases that follow the decoding: alias -> {decoding kind: decoder}.
ALIASES: dict[str, dict[str, str]] = {"ar": {"greedy": "ar_greedy", "sampling": "ar_sampling"},
                                      "beam": {"greedy": "beam_search", "sampling": "beam_sampling"}}


def method_names() -> list[str]:
    """Every method name the CLI and the API accept: registered decoders and the aliases."""
    return sorted([*registry(), *ALIASES])


def resolve_method(method: str, params: Mapping[str, Any] | None = None,
                   decoding: str | Mapping[str, Any] | Decoding | None = None) -> tuple[type[Decoder], dict]:
    """The decoder class and its parameters for ``method`` under ``decoding`` (as the CLI and the API do it).

    The decoding's warp (temperature, top_k, top_p) becomes the method's, unless ``params`` sets one
    explicitly; ``ar`` and ``beam`` resolve by the decoding's kind (greedy | sampling). Without a
    decoding, explicit parameters and the Params defaults apply (aliases then follow ``temperature``,
    default sampling). A method that cannot decode the requested kind raises
    :class:`~harness.errors.NotApplicable`.
    """
    params = dict(params or {})
    if method not in ALIASES:
        params = canonical_params(DECODERS.get(method), params)
    explicit = {k: params.pop(k) for k in WARP_KEYS if k in params}
    explicit = {k: v for k, v in explicit.items() if v is not None}
    dec = as_decoding(decoding) if decoding is not None else None
    warp = {**(dec.warp_params() if dec is not None else {}), **explicit}
    kind = "greedy" if warp.get("temperature", SAMPLING.temperature) == 0 else "sampling"
    name = ALIASES[method][kind] if method in ALIASES else method
    cls = DECODERS.get(name)
    fields = {f.name for f in dataclasses.fields(cls.Params)}
    if dec is not None and "temperature" not in explicit and kind not in cls.decodings:
        raise NotApplicable(_not_applicable(name, cls, dec))
    if set(WARP_KEYS) <= fields:
        params.update(warp)
    elif explicit:
        params.update(explicit)  # a method without the warp rejects it (unknown parameter)
    if method in ALIASES:
        params = _fit_alias_params(method, cls, params)
    return cls, params


def _not_applicable(name: str, cls: type[Decoder], dec: Decoding) -> str:
    alias = next((a for a, targets in ALIASES.items() if name in targets.values()), None)
    hint = f"; method={alias} follows the decoding" if alias else ""
    only = "greedily" if cls.decodings == ("greedy",) else "by sampling"
    return f"method '{name}' decodes {only} only: not applicable under decoding={dec.name}{hint}"


def _fit_alias_params(alias: str, cls: type[Decoder], params: dict) -> dict:
    """An alias's config carries the greedy target's keys: drop those the resolved decoder lacks while
    they hold that decoder's defaults; a changed one is an error naming the decoding it needs."""
    fields = {f.name for f in dataclasses.fields(cls.Params)}
    extra = {k: v for k, v in params.items() if k not in fields}
    for target in ALIASES[alias].values():
        other = DECODERS.get(target)
        defaults = {f.name: f.default for f in dataclasses.fields(other.Params)}
        for key, value in list(extra.items()):
            if key in defaults and defaults[key] == value:
                extra.pop(key)
                params.pop(key)
    if extra:
        raise ConfigError(f"method={alias} resolved to '{cls.method}', which has no parameter(s) "
                          f"{sorted(extra)}; they apply under another decoding")
    return params


def build_decoder(method: str, pair: ModelPair, *, decoding: str | Mapping[str, Any] | Decoding | None = None,
                  gamma_policy: GammaPolicy | str | None = None, sync_timing: bool = False, **params) -> Decoder:
    """Decoder for a method name or alias, e.g. ``build_decoder("sd", pair, gamma=4, decoding="greedy")``.

    ``decoding`` is a preset name (``greedy``, ``sampling``, ``sampling_seed000``), a mapping or a
    :class:`~harness.decoding.Decoding`, as the CLI's ``decoding`` group; explicit warp parameters win.
    ``gamma_policy``: a policy object (tests, studies), or a policy name (``method.gamma_policy``).
    """
    if isinstance(gamma_policy, str):  # a policy name is the Params key ``gamma_policy`` (as on the CLI)
        params["gamma_policy"], gamma_policy = gamma_policy, None
    cls, params = resolve_method(method, params, decoding)
    return cls(pair, make_params(cls, params), gamma_policy=gamma_policy, sync_timing=sync_timing)
