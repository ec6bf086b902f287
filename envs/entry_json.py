"""A Reasoning Gym entry as JSON text and back, without losing what its scorer may look at.

A file (parquet, JSON lines) cannot hold entries as typed columns: their metadata differs from task to task (nested
dicts, lists, None, tuples, integer dict keys). So an exported item carries its entry as one JSON string, and the
reward decodes it. Plain JSON would turn tuples into lists and integer keys into strings, which scorers can see, so
the few Python types JSON lacks are tagged with a one-key object:

    tuple -> {"__tuple__": [...]}            set / frozenset -> {"__set__": [...]} / {"__frozenset__": [...]}
    dict with a non-string key (or a key that looks like a tag) -> {"__dict__": [[key, value], ...]}
    nan / inf / -inf -> {"__float__": "nan" | "inf" | "-inf"}

Everything else is plain JSON, so other tools can read the text with any JSON parser. numpy scalars become Python
scalars; any other type is refused with its path in the entry. `decode_entry(encode_entry(e)) == e`, types included
(`same_value` checks it).
"""

from __future__ import annotations

import json
import math
from typing import Any

_TAGS = ("__tuple__", "__set__", "__frozenset__", "__dict__", "__float__")


def _plain_scalar(value: Any) -> Any:
    """Returns numpy scalars as Python scalars (the stream's entries hold a few numpy strings and integers)."""
    if type(value).__module__ == "numpy" and hasattr(value, "item") and getattr(value, "shape", None) == ():
        return value.item()
    return value


def _encode(value: Any, path: str) -> Any:
    value = _plain_scalar(value)
    if value is None or isinstance(value, (bool, int, str)):
        return str(value) if isinstance(value, str) and type(value) is not str else value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"__float__": repr(value)}
    if isinstance(value, list):
        return [_encode(v, f"{path}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, tuple):
        return {"__tuple__": [_encode(v, f"{path}[{i}]") for i, v in enumerate(value)]}
    if isinstance(value, (set, frozenset)):
        items = [_encode(v, f"{path}{{}}") for v in value]
        items.sort(key=lambda v: json.dumps(v, sort_keys=True))  # set order follows PYTHONHASHSEED; the text must not
        return {"__frozenset__" if isinstance(value, frozenset) else "__set__": items}
    if isinstance(value, dict):
        keys = [_plain_scalar(k) for k in value]
        if all(type(k) is str for k in keys) and not (len(keys) == 1 and keys[0] in _TAGS):
            return {k: _encode(v, f"{path}.{k}") for k, v in zip(keys, value.values())}
        return {"__dict__": [[_encode(k, f"{path}<key>"), _encode(v, f"{path}[{k!r}]")]
                             for k, v in zip(keys, value.values())]}
    raise TypeError(f"entry value at {path or '<entry>'} has type {type(value).__name__}, which has no JSON form "
                    "here; add it to envs.entry_json")


def _decode_object(obj: dict[str, Any]) -> Any:
    if len(obj) == 1:
        (tag, value), = obj.items()
        if tag == "__tuple__":
            return tuple(value)
        if tag == "__set__":
            return set(value)
        if tag == "__frozenset__":
            return frozenset(value)
        if tag == "__dict__":
            return {k: v for k, v in value}
        if tag == "__float__":
            return float(value)
    return obj


def encode_entry(entry: Any) -> str:
    """Returns the entry as JSON text (tagged where JSON lacks the type); the same entry always gives the same text."""
    return json.dumps(_encode(entry, ""), ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def decode_entry(text: str) -> Any:
    """Returns the entry that `encode_entry` wrote as `text`."""
    return json.loads(text, object_hook=_decode_object)


def same_value(a: Any, b: Any) -> bool:
    """True when `b` equals `a` with the same container types, key order and key types (numpy scalars as Python's)."""
    a, b = _plain_scalar(a), _plain_scalar(b)
    if isinstance(a, str) or isinstance(b, str):
        return isinstance(a, str) and isinstance(b, str) and str(a) == str(b)
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if type(a) is not type(b) and not (isinstance(a, dict) and isinstance(b, dict)):
        return False
    if isinstance(a, dict):
        return len(a) == len(b) and all(same_value(ka, kb) and same_value(va, vb)
                                         for (ka, va), (kb, vb) in zip(a.items(), b.items()))
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
    return a == b
