"""The decoder contract: prompt ids in, :class:`Generation` (ids + stats) out.

Every decoder is one class in its own file, registered under a method name with :func:`register`,
typed by its parameters: ``class SD(SpeculativeDecoder[SDParams])``. ``Params`` is a frozen dataclass
(:mod:`harness.params`; fields declared with :func:`param` are the method's config: the CLI's
``method.<name>`` keys come from them through Hydra's ConfigStore). A decoder declares what it is:
``lossless`` (its output follows its decoding's AR distribution exactly; greedy: token-identical),
``decodings`` (greedy, sampling), ``uses_draft``, ``uses_gamma_policy``, ``supports_draft_selection``,
and method-specific statistics as a dataclass ``Extras``.

``_decode`` takes one typed :class:`DecodeRequest` (prompt ids, token budget, random stream, stopping
check, γ policy) and returns a :class:`Decoded`: the new tokens, the declared extras, the final beams
(beam decoders) and the rounds it ran. Decoders never write statistics: the base times the whole
generation (after a device sync), counts forward calls through
:class:`~harness.primitives.forward.CountedModel`, and records the returned rounds
(:meth:`~harness.stats.GenerationStats.observe_round`).

Glossary — one name per concept, in every decoder:

=====================  ========================================================================
``gamma``              draft length / depth γ per round (chain length; tree depth; DSBD layers;
                       MTJD tokens per joint step). MCSD's tree shape is ``k_config`` (γ = its length).
``width``              beams of the method's own beam search (beam_search, beam_sampling, MTJD;
                       DSBD's fixed W_L, ``None`` = dynamic width)
``draft_width``        beams of the draft's beam sampling (DSBD's W_S, MTAD)
``num_drafts``         number of draft sequences (SpecInfer / Spectr m)
``temperature``,       the warp T (mtad App. F): temperature → top-k → top-p; temperature 0 is
``top_k``, ``top_p``   greedy. Written once in :class:`SamplingParams`; set by the ``decoding`` group.
=====================  ========================================================================

Method names, aliases, the decoding's warp and building a decoder from a config are
:mod:`harness.methods`; the speculative template is :mod:`harness.decoders.speculative`.
"""
from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Generic, Sequence, TypeVar, get_args, get_origin

import torch

from harness.decoders.params import DecoderParams, SamplingParams, method_params, param
from harness.errors import ConfigError
from harness.models import ModelPair
from harness.primitives.forward import CountedModel, synchronize
from harness.primitives.graphs import graph_runner
from harness.primitives.gamma_policy import GammaPolicy
from harness.primitives.round import Round
from harness.primitives.device import make_generator
from harness.primitives.stopping import StopCondition
from harness.registry import Registry
from harness.stats import GenerationStats, NoExtras

__all__ = ["Beam", "DecodeRequest", "Decoded", "Decoder", "DecoderParams", "Generation", "SamplingParams", "param",
           "register", "registry"]


@dataclass(frozen=True)
class DecodeRequest:
    """One generation's inputs: everything ``_decode`` may read besides the decoder's parameters."""

    prompt_ids: torch.Tensor  # (1, n) on the decoder's device
    max_new_tokens: int
    generator: torch.Generator | None  # the generation's random stream (None: torch's global one)
    stop: StopCondition  # EOS and stop strings, checked after every committed block
    gamma_policy: GammaPolicy | None = None  # the draft-length policy (decoders that run speculative rounds)
    prompt_tokens: tuple[int, ...] | None = None  # the prompt on the host, where the caller gave it so

    @property
    def prompt(self) -> list[int]:
        """The prompt's ids on the host (read from the device only if the caller gave a tensor)."""
        return list(self.prompt_tokens) if self.prompt_tokens is not None else self.prompt_ids[0].tolist()


@dataclass
class Decoded:
    """What ``_decode`` returns: new token ids, the decoder's declared extras, (beam decoders) final beams,
    and the rounds it ran (recorded into the statistics by the base, in order)."""

    tokens: list[int]
    extras: Any = None
    beams: list[Beam] | None = None
    rounds: list[Round] = field(default_factory=list)


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
        order = torch.argsort(-score, stable=True)
        rows = tokens.tolist()  # two reads in all: the tokens, and the numbers
        o, lp, sc, n = torch.stack([order.to(logp.dtype), logp, score, length.to(logp.dtype)]).tolist()
        return [Beam(rows[int(i)][: int(n[int(i)])], lp[int(i)], sc[int(i)]) for i in o]


@dataclass
class Generation:
    """Output of one decoder call: new token ids only (prompt excluded), and what it cost."""

    prompt_ids: list[int]
    output_ids: list[int]
    stats: GenerationStats
    stopped_by_eos: bool = False
    text: str | None = None
    beams: list[Beam] | None = None
    selection: dict | None = None  # draft selection (adaptive §5): chosen draft, predicted/realised α, fit R²
    stopped_by_stop: bool = False  # ended by a stop string (the output ends with the token completing it)


P = TypeVar("P", bound=DecoderParams)


class Decoder(ABC, Generic[P]):
    """Base class. Subclasses set ``method`` (registry name), subclass ``Decoder[TheirParams]`` and
    implement ``_decode``; they declare ``lossless`` and, where it applies, ``decodings``, ``uses_draft``
    and ``Extras``. Decoders that draft and verify in rounds subclass
    :class:`~harness.decoders.speculative.SpeculativeDecoder` instead."""

    method: ClassVar[str] = ""
    Params: ClassVar[type] = DecoderParams
    Extras: ClassVar[type] = NoExtras
    #: the output follows the decoding's AR distribution exactly (greedy: token-identical to AR greedy),
    #: for every parameter setting; :meth:`is_lossless` refines it for one decoder's settings
    lossless: ClassVar[bool] = False
    #: lossless under greedy decoding only, where the target's argmax decides every token (typical, BiLD)
    lossless_when_greedy: ClassVar[bool] = False
    uses_draft: ClassVar[bool] = False
    uses_gamma_policy: ClassVar[bool] = False  # runs speculative rounds whose depth a γ policy chooses
    supports_draft_selection: ClassVar[bool] = False  # a draft may be chosen per prompt (adaptive §5)
    decodings: ClassVar[tuple[str, ...]] = ("greedy", "sampling")  # the decodings the method supports
    in_default_sweep: ClassVar[bool] = True  # run by `make sweep` (harness.methods.sweep_methods)
    #: why the method cannot run in the ``graphs`` execution mode (None: it can; harness.primitives.graphs)
    graphs_refusal: ClassVar[str | None] = None
    params: P

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        for base in getattr(cls, "__orig_bases__", ()):  # class X(Decoder[XParams]) sets Params = XParams
            if get_origin(base) is not None and issubclass(get_origin(base), Decoder):
                args = get_args(base)
                if args and isinstance(args[0], type):
                    cls.Params = args[0]

    def __init__(self, pair: ModelPair, params: P | None = None, *, sync_timing: bool = False):
        if self.graphs_refusal and graph_runner(pair.target) is not None:
            raise ConfigError(f"method '{self.method}' cannot run with pair.execution=graphs: {self.graphs_refusal}",
                              key="pair.execution")
        self.pair = pair
        self.params = params if params is not None else self.Params()
        self.sync_timing = sync_timing or self.needs_timing()
        self.target = CountedModel(pair.target, pair.vocab_size, sync=self.sync_timing)
        self.draft = (CountedModel(pair.require_draft(self.method), pair.vocab_size, sync=self.sync_timing)
                      if self.needs_draft(self.params) else None)
        self.eos_token_id = pair.tokenizer.eos_token_id

    @classmethod
    def needs_draft(cls, params: DecoderParams) -> bool:
        """Whether the decoder with ``params`` runs a draft model (``uses_draft``; a method where a parameter
        decides overrides it: ``hf_assisted`` with prompt lookup needs none)."""
        return cls.uses_draft

    def needs_timing(self) -> bool:
        """Device-synchronise at the draft/verify boundaries (a no-op on CPU) because what drives the
        decoder reads the measured times (e.g. the online γ policy)."""
        return False

    def counted(self) -> dict[str, Any]:
        """The counted callables by role: ``target`` and, where the method drafts, ``draft`` (the draft model, or a
        draft-free method's trained head, :class:`~harness.primitives.forward.CountedHead`): their calls are the
        statistics' ``target_calls``/``draft_calls``, their spans the energy attribution's."""
        return {"target": self.target, **({"draft": self.draft} if self.draft else {})}

    def is_lossless(self) -> bool:
        """Whether this decoder, with its parameters and decoding, is lossless (``lossless`` or better)."""
        return self.lossless or (self.lossless_when_greedy and self.decoding == "greedy")

    def warmup_generations(self) -> int:
        """Generations to run unrecorded and untimed before the first measured prompt (e.g. a learning
        γ policy's warm-up trials, adaptive App. C.1); the runner runs at least its own."""
        return 0

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

    def prepare(self, prompts: list[list[int]]) -> None:
        """Called once with a cell's prompts (token ids) before any generation (draft selection fits its
        prompt features on them). A no-op here."""

    @abstractmethod
    def _decode(self, request: DecodeRequest) -> Decoded:
        """The new token ids (≤ max_new_tokens; ending at EOS or a stop string), extras and rounds."""

    def request(self, ids: torch.Tensor, max_new_tokens: int, generator, stop: Sequence[str] | None) -> DecodeRequest:
        """The generation's :class:`DecodeRequest` (speculative decoders add their γ policy)."""
        return DecodeRequest(ids, max_new_tokens, generator, self.stop_condition(stop))

    def stop_condition(self, stop: Sequence[str] | None = None) -> StopCondition:
        """The generation's stopping check: EOS and ``stop`` strings on the decoded output."""
        tok = self.pair.tokenizer
        return StopCondition(self.eos_token_id, tuple(stop or ()),
                             lambda ids: tok.decode(ids, skip_special_tokens=True))

    def generate(self, prompt_ids, max_new_tokens: int, seed: int | None = None,
                 stop: Sequence[str] | None = None) -> Generation:
        """Decode from ``prompt_ids`` (list or 1-D/2-D tensor, batch 1). Timed end to end.

        ``stop``: stop strings. Decoders check them inside their loops (after each committed block:
        :mod:`harness.primitives.stopping`), so no token past the one completing a stop string is
        generated, timed or counted; the output is cut there once more as a safeguard."""
        ids = torch.as_tensor(prompt_ids, dtype=torch.long, device=self.device).reshape(1, -1)
        host = _host_ids(prompt_ids)
        request = replace(self.request(ids, max_new_tokens, make_generator(seed, self.device), stop),
                          prompt_tokens=host)
        stats = GenerationStats()
        models = self.counted()
        t_calls, d_calls = self.target.calls, (models["draft"].calls if "draft" in models else 0)
        for m in models.values():
            m.spans = []
        synchronize(self.device)
        start = time.perf_counter()
        decoded = self._decode(request)
        synchronize(self.device)
        end = time.perf_counter()
        stats.wall_time_s = end - start
        stats.set_spans(start, end, {name: m.spans for name, m in models.items()})
        for rnd in decoded.rounds:
            stats.observe_round(rnd)
        out, by_stop = self.stop_condition(stop).trim([int(t) for t in decoded.tokens][:max_new_tokens])
        stats.new_tokens = len(out)
        stats.target_calls = self.target.calls - t_calls
        stats.draft_calls = (models["draft"].calls - d_calls) if "draft" in models else 0
        extras = decoded.extras if decoded.extras is not None else self.Extras()
        if not isinstance(extras, self.Extras):
            raise TypeError(f"{type(self).__name__} returned extras of type {type(extras).__name__}, "
                            f"not its declared {self.Extras.__name__}")
        stats.extras = extras
        eos = self.eos_token_id is not None and len(out) > 0 and out[-1] == self.eos_token_id
        return Generation(prompt_ids=list(host) if host is not None else ids[0].tolist(), output_ids=out, stats=stats, stopped_by_eos=eos,
                          beams=decoded.beams, stopped_by_stop=by_stop)

    def params_dict(self) -> dict[str, Any]:
        """Every parameter, for summaries: ``summary.json["params"]``."""
        return self.params.as_dict()

    def facts(self) -> dict[str, Any]:
        """What else identifies the run besides the parameters (e.g. a library version): ``summary.json["facts"]``."""
        return {}

    def execution_facts(self) -> dict[str, Any]:
        """The execution mode and its runners' counters (:meth:`~harness.models.ModelPair.execution_facts`), and
        those of any model of the decoder's own (a trained head): the run's facts record them."""
        return self.pair.execution_facts()


def _host_ids(prompt_ids) -> tuple[int, ...] | None:
    """A prompt given as host ints (a flat list, or a batch of one), as a tuple; None for a tensor."""
    if isinstance(prompt_ids, torch.Tensor):
        return None
    rows = list(prompt_ids)
    if len(rows) == 1 and isinstance(rows[0], (list, tuple)):
        rows = list(rows[0])
    return tuple(int(t) for t in rows)


DECODERS: Registry[type[Decoder]] = Registry("method", "method", "harness.decoders", entry_points="harness.decoders",
                                             base=Decoder)


def register(cls: type[Decoder]) -> type[Decoder]:
    """Class decorator: register a decoder under its ``method``. A decoder of this package takes the Params its
    torch-free params module names (``harness/decoders/params/<method>.py``: what the CLI's config lists)."""
    if cls.__module__.startswith(f"{__package__}."):
        declared = method_params().get(cls.method)
        if declared is not cls.Params:
            raise TypeError(f"{cls.__name__} (method '{cls.method}') takes {cls.Params.__name__}, but "
                            f"harness/decoders/params/{cls.method}.py names "
                            f"{getattr(declared, '__name__', 'no Params')}: the CLI would list other keys")
    return DECODERS.register(cls)


def registry() -> dict[str, type[Decoder]]:
    """Every registered decoder class by method name (imports every decoder module once)."""
    return DECODERS.all()
