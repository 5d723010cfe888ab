"""Stored values as the view shows them: a JSON form that keeps every type apart and bounds what is
sent (long lists paged, long strings folded, bytes as size + hex preview), and the structural
difference of two values (keys added/removed/changed, list appends as appends).

The JSON form ("view value") is unambiguous: JSON arrays are lists, and every JSON object is a
tagged value:

====================================  ===========================================================
``null``, ``true``, a number, a text  itself (numbers only when exact: integers within ±2**53,
                                      non-integral finite floats)
``{"$map": [[k, v], ...], "len": n}``  a mapping; ``"more": true`` when only the first entries
                                      are given
``{"$list": [...], "len": n}``         a list of which only the first items are given
``{"$str": "...", "len": n}``          a text of which only the first characters are given
``{"$bytes": n, "hex": "..."}``        a byte string: its size and the hex of its first bytes
``{"$int": "..."}``                    an integer beyond ±2**53, in decimal
``{"$bigint": bits, "hex": "..."}``    an integer beyond the stored bound (``MAX_INT_BITS``): its
                                      size in bits, its sign and leading hex digits (its decimal
                                      form would cost time quadratic in its size)
``{"$float": "..."}``                  a float that JSON cannot tell from an integer (1.0) or
                                      cannot hold (nan, inf), as Python's ``repr``
``{"$other": "type"}``                 anything else (never produced by gitstate's decoder)
====================================  ===========================================================
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gitstate.format.encoding import big_int_stub, is_big_int
from gitstate.secrets import masked

SAFE_INT = 2**53


@dataclass(frozen=True)
class Limits:
    """How much of a value is sent: items per list or mapping, characters per text, bytes shown
    of a byte string, and nesting depth (deeper values become ``{"$more": ...}`` stubs)."""

    items: int = 200
    chars: int = 100_000
    hex_bytes: int = 32
    depth: int = 48


SERVER = Limits()
#: The static file has no server to ask for more: larger pages, shorter texts.
STATIC = Limits(items=100_000, chars=20_000, hex_bytes=32, depth=48)


def encode(value: Any, limits: Limits = SERVER, depth: int = 0) -> Any:
    """The view value of ``value`` (see the module docstring)."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        if -SAFE_INT <= value <= SAFE_INT:
            return value
        return big_int_stub(value) if is_big_int(value) else {"$int": str(value)}
    if isinstance(value, float):
        if math.isfinite(value) and not value.is_integer():
            return value
        return {"$float": repr(value)}
    if isinstance(value, str):
        value = masked(value)  # a credential stored with the warn policy shows as its marker
        if len(value) > limits.chars:
            return {"$str": value[:limits.chars], "len": len(value)}
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        data = masked(bytes(value))
        return {"$bytes": len(data), "hex": data[:limits.hex_bytes].hex()}
    if depth >= limits.depth:
        return {"$more": "depth", "type": "map" if isinstance(value, dict) else type(value).__name__}
    if isinstance(value, dict):
        items = list(value.items())
        out: dict[str, Any] = {"$map": [[encode(k, limits, depth + 1), encode(v, limits, depth + 1)]
                                         for k, v in items[:limits.items]], "len": len(items)}
        if len(items) > limits.items:
            out["more"] = True
        return out
    if isinstance(value, list | tuple):
        shown = [encode(v, limits, depth + 1) for v in value[:limits.items]]
        if len(value) > limits.items:
            return {"$list": shown, "len": len(value)}
        return shown
    return {"$other": type(value).__name__}


def same(a: Any, b: Any) -> bool:
    """Equality that keeps types apart as the store does (``1``, ``1.0`` and ``True`` differ; a
    float nan equals itself)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, dict):
        return len(a) == len(b) and all(k in b and same(v, b[k]) for k, v in a.items())
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


@dataclass(frozen=True)
class Change:
    """One difference inside a state: at ``path`` (keys and list indexes from the state's root),
    ``kind`` is ``added``, ``removed``, ``changed``, ``appended`` (``items`` were added at the end
    of a list, from index ``start``) or ``truncated`` (the list lost its items from ``start``)."""

    path: tuple[Any, ...]
    kind: str
    old: Any = None
    new: Any = None
    items: Sequence[Any] = ()
    start: int = 0

    def to_dict(self, limits: Limits = SERVER) -> dict[str, Any]:
        """The JSON form (values as view values)."""
        out: dict[str, Any] = {"path": [encode(p, limits) for p in self.path], "kind": self.kind}
        if self.kind in ("appended", "truncated"):
            out.update(items=encode(list(self.items), limits), start=self.start)
        else:
            if self.kind != "added":
                out["old"] = encode(self.old, limits)
            if self.kind != "removed":
                out["new"] = encode(self.new, limits)
        return out


MAX_DIFF_DEPTH = 6  # mappings nested deeper than this are shown whole, side by side


def changes(old: Any, new: Any, path: tuple[Any, ...] = (), depth: int = 0) -> list[Change]:
    """What changed from ``old`` to ``new``: mappings are compared key by key (recursively, up to
    :data:`MAX_DIFF_DEPTH`), a list that only grew at its end is an ``appended`` change holding
    just the new items (and one that only lost its tail ``truncated``); anything else that differs
    is one ``changed`` entry with both values."""
    if same(old, new):
        return []
    if isinstance(old, dict) and isinstance(new, dict) and depth < MAX_DIFF_DEPTH:
        out: list[Change] = []
        for key in _union_keys(old, new):
            if key not in new:
                out.append(Change((*path, key), "removed", old=old[key]))
            elif key not in old:
                out.append(Change((*path, key), "added", new=new[key]))
            else:
                out += changes(old[key], new[key], (*path, key), depth + 1)
        return out
    if isinstance(old, list) and isinstance(new, list):
        n = min(len(old), len(new))
        if all(same(x, y) for x, y in zip(old[:n], new[:n], strict=True)):
            if len(new) > len(old):
                return [Change(path, "appended", items=new[n:], start=n)]
            return [Change(path, "truncated", items=old[n:], start=n)]
    return [Change(path, "changed", old=old, new=new)]


def _union_keys(a: dict[Any, Any], b: dict[Any, Any]) -> list[Any]:
    keys = list(a) + [k for k in b if k not in a]
    try:
        return sorted(keys, key=lambda k: (type(k).__name__, k))
    except TypeError:
        return keys


def is_binary(data: bytes) -> bool:
    """Whether bytes are shown as binary: a NUL in the first 8,000 bytes (git's rule) or not UTF-8."""
    if b"\0" in data[:8000]:
        return True
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        # a multi-byte character cut by a size limit at the very end is still text
        return not (exc.start >= len(data) - 3 and exc.reason == "unexpected end of data")
    return False
