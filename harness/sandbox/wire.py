"""The wire between the checker and the program: plain data as JSON lines. The program encodes
its results (:func:`to_wire`), the checker decodes them (:func:`from_wire`) on untrusted input:
only None, bool, int, float, complex, str, bytes, list, tuple, dict, set and frozenset come out.
A subclass of a plain type crosses as its base type (through the base type's own methods) and is
noted, so a rigged ``__eq__`` never reaches the test. Standard library only: the program's
interpreter runs this file from its source (it cannot read the harness's files).
"""
from __future__ import annotations

import json

_BASES = (bool, int, float, complex, str, bytes, list, tuple, dict, set, frozenset)


def _as_base(value, base):
    """A subclass instance as its plain base type (through the base type's own methods)."""
    if base is int:
        return int.__index__(value)
    if base is float:
        return float.__float__(value)
    if base is complex:
        return complex(float.__float__(complex.real.__get__(value)), float.__float__(complex.imag.__get__(value)))
    if base is str:
        return str.__str__(value)
    if base is bytes:
        return b"".join([value])
    if base is dict:
        return dict(dict.items(value))
    return base(base.__iter__(value))


def to_wire(value, notes: set, depth: int = 0):
    """``value`` as JSON-ready data; tuples, sets, dicts, bytes, complex and big ints are tagged."""
    if depth > 200:
        raise ValueError("nested too deeply")
    t = type(value)
    if value is None or t is bool or t is float or t is str:
        return value
    if t is int:
        return value if -(1 << 63) <= value < (1 << 63) else {"int": hex(value)}
    if t is list:
        return [to_wire(v, notes, depth + 1) for v in value]
    if t in (tuple, set, frozenset):
        return {t.__name__: [to_wire(v, notes, depth + 1) for v in value]}
    if t is dict:
        return {"dict": [[to_wire(k, notes, depth + 1), to_wire(v, notes, depth + 1)] for k, v in value.items()]}
    if t is bytes:
        return {"bytes": value.hex()}
    if t is complex:
        return {"complex": [value.real, value.imag]}
    for base in _BASES:
        if isinstance(value, base) and base is not bool:
            notes.add(f"{t.__module__}.{t.__qualname__} sent as {base.__name__}")
            return to_wire(_as_base(value, base), notes, depth)
    raise TypeError(f"{t.__module__}.{t.__qualname__} is not plain data")


def from_wire(data):
    """Inverse of :func:`to_wire` on untrusted JSON: only plain data comes out, or ``ValueError``."""
    if data is None or type(data) in (bool, int, float, str):
        return data
    if type(data) is list:
        return [from_wire(v) for v in data]
    if type(data) is not dict or len(data) != 1:
        raise ValueError("malformed value")
    [(tag, body)] = data.items()
    if tag == "int" and type(body) is str:
        return int(body, 16)
    if tag == "bytes" and type(body) is str:
        return bytes.fromhex(body)
    if tag == "complex" and type(body) is list and len(body) == 2 and all(type(x) in (int, float) for x in body):
        return complex(*body)
    if type(body) is not list:
        raise ValueError("malformed value")
    if tag in ("tuple", "set", "frozenset"):
        return {"tuple": tuple, "set": set, "frozenset": frozenset}[tag](from_wire(v) for v in body)
    if tag == "dict" and all(type(kv) is list and len(kv) == 2 for kv in body):
        return {from_wire(k): from_wire(v) for k, v in body}
    raise ValueError(f"malformed value (tag {tag!r})")


def dumps(obj) -> bytes:
    return (json.dumps(obj, separators=(",", ":")) + "\n").encode()
