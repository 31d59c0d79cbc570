"""The decoder interface: prompt ids in, :class:`Generation` (ids + stats) out.

Every decoder is one class in its own file, registered under a method name with
:func:`register`, with a frozen dataclass of parameters (``Params``). Decoders call
models only through :class:`~harness.primitives.forward.CountedModel`, so forward counts
are uniform; wall time is taken here, around the whole generation, after a device sync.
"""
from __future__ import annotations

import dataclasses
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import ClassVar

import torch

from harness.errors import ConfigError
from harness.models import ModelPair
from harness.primitives.forward import CountedModel
from harness.primitives.sampling import make_generator


@dataclass
class GenerationStats:
    """What one generation cost, and (for speculative methods) what drafting bought.

    Conventions (GUIDE §3): draft acceptance rate = accepted ÷ drafted (vLLM); mean
    acceptance length = 1 + accepted ÷ drafting rounds; block efficiency = new tokens ÷
    target calls (MTAD code); ``accept_lengths`` per iteration as in Spec-Bench.
    """

    new_tokens: int = 0
    target_calls: int = 0
    draft_calls: int = 0
    wall_time_s: float = 0.0
    iterations: int = 0
    drafted_tokens: int = 0
    accepted_tokens: int = 0
    accept_lengths: list[int] = field(default_factory=list)
    extra: dict = field(default_factory=dict)

    @property
    def tokens_per_s(self) -> float:
        return self.new_tokens / self.wall_time_s if self.wall_time_s > 0 else float("nan")

    @property
    def block_efficiency(self) -> float:
        return self.new_tokens / self.target_calls if self.target_calls else float("nan")

    @property
    def acceptance_rate(self) -> float:
        return self.accepted_tokens / self.drafted_tokens if self.drafted_tokens else float("nan")

    @property
    def mean_acceptance_length(self) -> float:
        return 1 + self.accepted_tokens / self.iterations if self.iterations and self.drafted_tokens else float("nan")

    def as_record(self) -> dict:
        rec = {k: getattr(self, k) for k in ("new_tokens", "target_calls", "draft_calls", "wall_time_s", "iterations",
                                             "drafted_tokens", "accepted_tokens", "tokens_per_s", "block_efficiency",
                                             "acceptance_rate", "mean_acceptance_length")}
        rec["accept_lengths"] = list(self.accept_lengths)
        rec.update({f"stat.{k}": v for k, v in self.extra.items()})
        return rec


@dataclass
class Generation:
    """Output of one decoder call: new token ids only (prompt excluded), and what it cost."""

    prompt_ids: list[int]
    output_ids: list[int]
    stats: GenerationStats
    stopped_by_eos: bool = False
    text: str | None = None


def sync(device: torch.device) -> None:
    """Wait for queued device work so wall-clock timing covers it (Spec-Bench convention)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@dataclass(frozen=True)
class NoParams:
    pass


class Decoder(ABC):
    """Base class. Subclasses set ``method`` (registry name), ``Params`` and implement ``_decode``."""

    method: ClassVar[str] = ""
    Params: ClassVar[type] = NoParams
    uses_draft: ClassVar[bool] = False

    def __init__(self, pair: ModelPair, params=None):
        self.pair = pair
        self.params = params if params is not None else self.Params()
        self.target = CountedModel(pair.target, pair.vocab_size)
        self.draft = CountedModel(pair.require_draft(self.method), pair.vocab_size) if self.uses_draft else None
        self.eos_token_id = pair.tokenizer.eos_token_id

    @property
    def device(self) -> torch.device:
        return self.pair.device

    @abstractmethod
    def _decode(self, prompt_ids: torch.Tensor, max_new_tokens: int, generator: torch.Generator | None,
                stats: GenerationStats) -> list[int]:
        """Return new token ids (≤ max_new_tokens; ending at EOS if produced). Fill method stats."""

    def generate(self, prompt_ids, max_new_tokens: int, seed: int | None = None) -> Generation:
        """Decode from ``prompt_ids`` (list or 1-D/2-D tensor, batch 1). Timed end to end."""
        ids = torch.as_tensor(prompt_ids, dtype=torch.long, device=self.device).reshape(1, -1)
        generator = make_generator(seed, self.device)
        stats = GenerationStats()
        t_calls, d_calls = self.target.calls, (self.draft.calls if self.draft else 0)
        sync(self.device)
        start = time.perf_counter()
        out = self._decode(ids, max_new_tokens, generator, stats)
        sync(self.device)
        stats.wall_time_s = time.perf_counter() - start
        out = [int(t) for t in out][:max_new_tokens]
        stats.new_tokens = len(out)
        stats.target_calls = self.target.calls - t_calls
        stats.draft_calls = (self.draft.calls - d_calls) if self.draft else 0
        eos = self.eos_token_id is not None and len(out) > 0 and out[-1] == self.eos_token_id
        return Generation(prompt_ids=ids[0].tolist(), output_ids=out, stats=stats, stopped_by_eos=eos)

    def describe(self) -> dict:
        """Method name and every parameter, for result records."""
        return {"method": self.method, **dataclasses.asdict(self.params)}


_REGISTRY: dict[str, type[Decoder]] = {}


def register(cls: type[Decoder]) -> type[Decoder]:
    if not cls.method:
        raise TypeError(f"{cls.__name__} has no method name")
    if cls.method in _REGISTRY and _REGISTRY[cls.method] is not cls:
        raise TypeError(f"method '{cls.method}' registered twice ({_REGISTRY[cls.method].__name__}, {cls.__name__})")
    _REGISTRY[cls.method] = cls
    return cls


def registry() -> dict[str, type[Decoder]]:
    from harness import decoders  # noqa: F401  (imports every decoder module)

    return dict(_REGISTRY)


def make_params(cls: type[Decoder], params: dict | None):
    """Build ``cls.Params`` from a dict, with a clear error naming the valid keys."""
    params = dict(params or {})
    valid = {f.name for f in dataclasses.fields(cls.Params)}
    unknown = sorted(set(params) - valid)
    if unknown:
        raise ConfigError(f"unknown parameter(s) {unknown} for method '{cls.method}'. "
                          f"Valid parameters: {', '.join(sorted(valid)) or '(none)'}")
    try:
        return cls.Params(**params)
    except TypeError as e:
        raise ConfigError(f"bad parameters for method '{cls.method}': {e}") from e


def build_decoder(method: str, pair: ModelPair, **params) -> Decoder:
    """Decoder for a registered method name, e.g. ``build_decoder("sd", pair, gamma=4)``."""
    methods = registry()
    if method not in methods:
        raise ConfigError(f"unknown method '{method}'. Valid methods: {', '.join(sorted(methods))}")
    cls = methods[method]
    return cls(pair, make_params(cls, params))
