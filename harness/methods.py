"""Methods by name: the registered decoders and the aliases that follow the decoding, resolved under a decoding
with a γ policy and a draft selection into a validated :class:`MethodSpec`, and built into decoders.

Every method follows one decoding setting (:mod:`harness.decoding`: ``greedy``, ``sampling`` = mtad App. F,
``sampling_dsbd`` = dsbd §4.1): :func:`resolve_method` applies its warp to the method's Params. Methods say
which decodings they support (``Decoder.decodings``): ``ar_greedy`` and ``beam_search`` are greedy only,
``beam_sampling``, ``dsbd`` and ``mtad`` sampling only; the aliases ``ar`` (ar_greedy | ar_sampling) and
``beam`` (beam_search | beam_sampling) follow the decoding, so a sweep over decodings pairs every method
with the right baseline. A method asked to decode a way it cannot, or given a γ policy or draft selection
it has none of, raises :class:`~harness.errors.NotApplicable` (a sweep skips that cell).

The γ policy (``gamma_policy`` group, :mod:`harness.adaptive.policies`) and draft selection
(``draft_selection`` group, :mod:`harness.selection`) are their own config groups; deprecated names of
earlier releases are mapped by the one table in :mod:`harness.config.legacy`.
"""
from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping

from harness.adaptive.columns import policy_columns, selection_columns
from harness.adaptive.policies import PolicyParams, policy_params
from harness.decoders.base import Decoder, DecoderParams, registry
from harness.decoding import SAMPLING, WARP_KEYS, Decoding, as_decoding
from harness.errors import ConfigError, NotApplicable
from harness.config.legacy import preset_name, upgrade_method_params
from harness.models import ModelPair
from harness.primitives.gamma_policy import GammaPolicy
from harness.selection import SELECTIONS, DraftSelection, SelectionParams

from harness.config.aliases import ALIASES  # alias -> {decoding kind: decoder}; torch-free (the cell identity)


def method_names() -> list[str]:
    """Every method name the CLI and the API accept: registered decoders and the aliases."""
    return sorted([*registry(), *ALIASES])


def sweep_methods() -> list[str]:
    """The default sweep's methods (``make sweep``), by declaration: the aliases, then every decoder that is in
    the default sweep (``Decoder.in_default_sweep``) and not one an alias resolves to."""
    targets = {t for alias in ALIASES.values() for t in alias.values()}
    return [*ALIASES, *(m for m, c in sorted(registry().items()) if c.in_default_sweep and m not in targets)]


def decoder_class(name: str) -> type[Decoder]:
    from harness.decoders.base import DECODERS

    return DECODERS.get(name)


def resolve_method(method: str, params: Mapping[str, Any] | None = None,
                   decoding: str | Mapping[str, Any] | Decoding | None = None) -> tuple[type[Decoder], dict]:
    """The decoder class and its parameters for ``method`` under ``decoding`` (as the CLI and the API do it).

    The decoding's warp (temperature, top_k, top_p) becomes the method's, unless ``params`` sets one
    explicitly; ``ar`` and ``beam`` resolve by the decoding's kind (greedy | sampling). Without a
    decoding, explicit parameters and the Params defaults apply (aliases then follow ``temperature``,
    default sampling). A method that cannot decode the requested kind raises :class:`NotApplicable`.
    """
    params = dict(params or {})
    explicit = {k: params.pop(k) for k in WARP_KEYS if k in params}
    explicit = {k: v for k, v in explicit.items() if v is not None}
    dec = read_decoding(decoding) if decoding is not None else None
    warp = {**(dec.warp_params() if dec is not None else {}), **explicit}
    kind = "greedy" if warp.get("temperature", SAMPLING.temperature) == 0 else "sampling"
    name = ALIASES[method][kind] if method in ALIASES else method
    cls = decoder_class(name)
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
        defaults = {f.name: f.default for f in dataclasses.fields(decoder_class(target).Params)}
        for key, value in list(extra.items()):
            if key in defaults and defaults[key] == value:
                extra.pop(key)
                params.pop(key)
    if extra:
        raise ConfigError(f"method={alias} resolved to '{cls.method}', which has no parameter(s) "
                          f"{sorted(extra)}; they apply under another decoding")
    return params


def make_params(cls: type[Decoder], params: Mapping[str, Any] | None) -> DecoderParams:
    """``cls.Params`` from a dict, with a clear error naming the valid keys."""
    return cls.Params.create(dict(params or {}), f"method '{cls.method}'")


def _capable(kind: str) -> str:
    return ", ".join(m for m, c in sorted(registry().items()) if getattr(c, kind, False))


@dataclass(frozen=True)
class MethodSpec:
    """A method resolved under a decoding, with its γ policy and draft selection: typed, validated, nothing
    loaded. ``gamma_policy``: the policy's Params (None: the decoder's default, ``fixed``)."""

    cls: type[Decoder]
    params: DecoderParams
    gamma_policy: PolicyParams | None = None
    draft_selection: SelectionParams | None = None

    def __post_init__(self):
        if self.gamma_policy is not None and not self.cls.uses_gamma_policy:
            raise NotApplicable(f"method '{self.cls.method}' has no draft-length policy: not applicable under "
                                f"gamma_policy={self.gamma_policy.name} (gamma_policy is for "
                                f"{_capable('uses_gamma_policy')})")
        if (self.gamma_policy is not None and self.gamma_policy.stops_drafting
                and not getattr(self.cls, "supports_draft_stop", False)):
            raise NotApplicable(f"method '{self.cls.method}' drafts no chain a γ policy could stop: not applicable "
                                f"under gamma_policy={self.gamma_policy.name} (it is for "
                                f"{_capable('supports_draft_stop')})")
        if self.draft_selection is not None and not self.cls.supports_draft_selection:
            raise NotApplicable(f"method '{self.cls.method}' cannot switch drafts per prompt: not applicable under "
                                f"draft_selection={self.draft_selection.name} (draft_selection is for "
                                f"{_capable('supports_draft_selection')})")

    @property
    def method(self) -> str:
        return self.cls.method

    @property
    def needs_draft(self) -> bool:
        """Whether the method with these parameters runs a draft model (the pair must name one)."""
        return self.cls.needs_draft(self.params)

    @property
    def lookahead(self) -> int:
        """Positions a generation may touch beyond its output: the method's own, or its γ policy's deepest round + 1."""
        policy = 0 if self.gamma_policy is None else self.gamma_policy.max_gamma(int(self.params.gamma)) + 1
        return max(self.params.lookahead, policy)

    def build(self, pair: ModelPair, *, sync_timing: bool = False, gamma_policy: GammaPolicy | None = None):
        """The decoder on ``pair`` (a :class:`~harness.selection.DraftSelection` of one decoder per draft when
        draft selection is on). ``gamma_policy``: a runtime policy object instead of the Params' (tests)."""
        policy = gamma_policy if gamma_policy is not None else self.gamma_policy
        if policy is not None and not self.cls.uses_gamma_policy:
            raise ConfigError(f"method '{self.cls.method}' has no draft-length policy (gamma_policy is for "
                              f"{_capable('uses_gamma_policy')})")

        def make(p: ModelPair, own: bool = False) -> Decoder:
            kw = {} if policy is None else {"gamma_policy": copy.deepcopy(policy) if own else policy}
            return self.cls(p, self.params, sync_timing=sync_timing, **kw)

        if self.draft_selection is None:
            return make(pair)
        return DraftSelection(pair, lambda p: make(p, own=isinstance(policy, GammaPolicy)), self.draft_selection)

    def params_dict(self) -> dict[str, Any]:
        """The parameters a built decoder reports (``summary.json["params"]``), without building it."""
        out = self.params.as_dict()
        if self.cls.uses_gamma_policy:
            policy = None if self.gamma_policy is None else {"name": self.gamma_policy.name,
                                                             **self.gamma_policy.as_dict()}
            out.update(policy_columns(policy))
        if self.draft_selection is not None:
            out.update(selection_columns({"name": self.draft_selection.name, **self.draft_selection.as_dict()}))
        return out


def _values(value: Any) -> dict[str, Any]:
    """A group value (None, a name, a mapping with ``name``, or Params) as ``{"name": ..., **keys}`` ({}: none)."""
    if value is None:
        return {}
    if isinstance(value, (PolicyParams, SelectionParams)):
        return {"name": value.name, **value.as_dict()}
    return {"name": value} if isinstance(value, str) else dict(value)


def _policy(value: Any) -> PolicyParams | None:
    values = _values(value)
    name = values.pop("name", None)
    return None if name in (None, "null") else policy_params(name, values)


def _selection(value: Any) -> SelectionParams | None:
    values = _values(value)
    name = values.pop("name", None)
    if name in (None, "none", "null"):
        return None
    if name not in SELECTIONS:
        raise ConfigError(f"unknown draft_selection '{name}'; valid: {', '.join(SELECTIONS)}")
    return SELECTIONS[name].create(values, f"draft_selection '{name}'")


def read_decoding(decoding: str | Mapping[str, Any] | Decoding) -> Decoding:
    """A decoding as a caller or a composed config gives it (:func:`~harness.decoding.as_decoding`), a deprecated
    preset name mapped to its name now, with its message (:mod:`harness.config.legacy`)."""
    if isinstance(decoding, str):
        return as_decoding(preset_name(decoding))
    if isinstance(decoding, Decoding) or "name" not in decoding:
        return as_decoding(decoding)
    return as_decoding({**decoding, "name": preset_name(decoding["name"])})


def method_spec(method: str, params: Mapping[str, Any] | None = None, *,
                decoding: str | Mapping[str, Any] | Decoding | None = None, gamma_policy: Any = None,
                draft_selection: Any = None) -> MethodSpec:
    """A validated :class:`MethodSpec` (deprecated parameter names mapped by :mod:`harness.config.legacy`)."""
    base = ALIASES[method]["greedy"] if method in ALIASES else method
    params, moved_policy, moved_selection = upgrade_method_params(decoder_class(base).method, params or {})
    if moved_policy:
        gamma_policy = {"name": "fixed", **_values(gamma_policy), **moved_policy}
    if moved_selection:
        draft_selection = {"name": "ols", **_values(draft_selection), **moved_selection}
    cls, params = resolve_method(method, params, decoding)
    return MethodSpec(cls, make_params(cls, params), _policy(gamma_policy), _selection(draft_selection))


def cell_method_spec(cfg: Mapping[str, Any]) -> MethodSpec:
    """The :class:`MethodSpec` of a composed cell config (its ``method``, ``decoding``, ``gamma_policy`` and
    ``draft_selection`` nodes). Raises NotApplicable / ConfigError; loads nothing."""
    method = dict(cfg["method"])
    name = method.pop("name")
    return method_spec(name, method, decoding=cfg.get("decoding"), gamma_policy=cfg.get("gamma_policy"),
                       draft_selection=cfg.get("draft_selection"))


def build_decoder(method: str, pair: ModelPair, *, decoding: str | Mapping[str, Any] | Decoding | None = None,
                  gamma_policy: Any = None, draft_selection: Any = None, sync_timing: bool = False, **params):
    """Decoder for a method name or alias, e.g. ``build_decoder("sd", pair, gamma=4, decoding="greedy")``.

    ``decoding``: a preset name (``greedy``, ``sampling``, ``sampling_dsbd``), a mapping or a
    :class:`~harness.decoding.Decoding`, as the CLI's ``decoding`` group; explicit warp parameters win.
    ``gamma_policy``: a policy name, ``{"name": ..., **keys}`` (the ``gamma_policy`` group), its Params, or a
    runtime :class:`~harness.primitives.gamma_policy.GammaPolicy` (tests, studies). ``draft_selection``:
    ``"ols"`` or ``{"name": "ols", **keys}``.
    """
    runtime = gamma_policy if isinstance(gamma_policy, GammaPolicy) else None
    spec = method_spec(method, params, decoding=decoding, gamma_policy=None if runtime else gamma_policy,
                       draft_selection=draft_selection)
    return spec.build(pair, sync_timing=sync_timing, gamma_policy=runtime)
