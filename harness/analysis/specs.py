"""Method specs: a method with parameters, as baselines and families are named.

``sd`` is every ``sd`` cell; ``sd[gamma=4,gamma_policy=fixed]`` only those whose parameters have these
values; ``dsbd[memory_constrained=false]`` DSBD's unconstrained cells (dsbd §4.2) without its §4.3
memory-constrained ones. Specs name baselines (``--baseline 'sampling=sd[gamma=4,gamma_policy=fixed]'``,
``report.baselines.sampling`` in a config) and the families of an iso-quality comparison
(``--iso 'dsbd[memory_constrained=false]:beam_sampling'``, ``report.iso``). A cell whose summary lacks a
parameter the spec names does not match it (a cell from before the parameter existed is not guessed).

Values compare as YAML/JSON would read them: ``4`` = 4 = 4.0, ``false`` = False, ``[4,2,2,1]`` = the
list, anything else as text.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import pandas as pd

_SPEC = re.compile(r"^\s*([A-Za-z_][\w.-]*)\s*(?:\[(.*)\])?\s*$")


class SpecError(ValueError):
    """A malformed spec or one naming a parameter no cell of the method has."""


def _norm(v: Any) -> Any:
    """A comparable form of a parameter value (see the module docstring)."""
    if isinstance(v, str):
        text = v.strip()
        try:
            v = json.loads(text.lower() if text.lower() in ("true", "false", "null") else text)
        except ValueError:
            return text
    if v is None or (isinstance(v, float) and v != v):
        return None
    if isinstance(v, bool):
        return v
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, (list, tuple)):
        return tuple(_norm(x) for x in v)
    return str(v)


def _name_column(cells: pd.DataFrame) -> str:
    return "method_name" if "method_name" in cells else "family"


def _split_params(body: str) -> list[str]:
    """``a=1,b=[1,2]`` → ['a=1', 'b=[1,2]'] (commas inside brackets kept)."""
    out, depth, cur = [], 0, ""
    for ch in body:
        depth += (ch in "[(") - (ch in "])")
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur)
    return out


@dataclass(frozen=True)
class MethodSpec:
    method: str
    params: tuple[tuple[str, str], ...] = ()

    @classmethod
    def parse(cls, text: str | MethodSpec) -> MethodSpec:
        if isinstance(text, MethodSpec):
            return text
        m = _SPEC.match(str(text))
        if not m:
            raise SpecError(f"a method spec is NAME or NAME[key=value,...], e.g. 'sd[gamma=4,gamma_policy=fixed]'; "
                            f"got {text!r}")
        params = []
        for item in _split_params(m.group(2) or ""):
            key, sep, value = item.partition("=")
            if not sep or not key.strip():
                raise SpecError(f"method spec {text!r}: parameter {item.strip()!r} must be key=value")
            params.append((key.strip(), value.strip()))
        return cls(m.group(1), tuple(sorted(params)))

    def __str__(self) -> str:
        return self.method + (f"[{','.join(f'{k}={v}' for k, v in self.params)}]" if self.params else "")

    def mask(self, cells: pd.DataFrame) -> pd.Series:
        """The cells this spec names."""
        out = cells[_name_column(cells)].astype(str) == self.method
        for key, value in self.params:
            col = f"param.{key}"
            if col not in cells:
                return pd.Series(False, index=cells.index)
            want = _norm(value)
            out &= cells[col].map(lambda v, w=want: _norm(v) == w)
        return out

    def check(self, cells: pd.DataFrame) -> None:
        """Raise :class:`SpecError` when a parameter is one none of the method's cells has."""
        mine = cells[cells[_name_column(cells)].astype(str) == self.method]
        if mine.empty:
            return
        known = sorted(c[6:] for c in mine.columns if c.startswith("param.") and mine[c].notna().any())
        unknown = [k for k, _ in self.params if k not in known]
        if unknown:
            raise SpecError(f"method spec '{self}': {self.method} cells have no parameter {', '.join(unknown)}; "
                            f"its parameters: {', '.join(known)}")


def parse_pair(text: str) -> tuple[MethodSpec, MethodSpec]:
    """``A:B`` (each a method spec) → the two specs."""
    depth, cut = 0, -1
    for i, ch in enumerate(text):
        depth += (ch == "[") - (ch == "]")
        if ch == ":" and depth == 0:
            if cut >= 0:
                cut = -2
                break
            cut = i
    if cut < 0:
        raise SpecError(f"an iso-quality pair is FAMILY_A:FAMILY_B (each a method spec, e.g. "
                        f"'dsbd[memory_constrained=false]:beam_sampling'); got {text!r}")
    return MethodSpec.parse(text[:cut]), MethodSpec.parse(text[cut + 1:])


def parse_baseline(text: str) -> tuple[str, MethodSpec]:
    """``MODE=SPEC`` (mode greedy or sampling) → (mode, spec)."""
    mode, sep, spec = text.partition("=")
    if not sep or mode.strip() not in ("greedy", "sampling"):
        raise SpecError(f"--baseline must be MODE=METHOD_SPEC with MODE greedy or sampling, e.g. "
                        f"'sampling=sd[gamma=4,gamma_policy=fixed]'; got {text!r}")
    return mode.strip(), MethodSpec.parse(spec)
