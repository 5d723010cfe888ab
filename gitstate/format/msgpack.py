"""Msgpack read for display: a small pure-Python decoder, bounded in nesting and in work, used to
show stored msgpack (LangGraph's channel values) where ormsgpack may be missing and where nothing the
data names may ever be built.

Every msgpack type decodes to plain data: nil, booleans, integers, floats and byte strings as
themselves, text as ``str`` (invalid UTF-8 replaced, never refused), arrays as lists and maps as
dicts (a key that cannot be a dict key, an array or a map, becomes its ``repr``). An extension
record is handed to the caller's ``ext`` function with its code, its payload and a function that
decodes a nested payload under the same bounds, and shown as whatever that returns (by default
``{"$ext": code, "size": n}``); the timestamp extension (-1) is shown as its ISO 8601 text.

Bounds: containers nested deeper than ``max_depth`` (extension payloads count as a level) are
skipped, iteratively, and shown as ``{"$more": "..."}``; at most ``max_items`` items are decoded in
one call, extension payloads included; a container claims no more items than there are bytes left.
Malformed input (truncated, trailing bytes, the reserved byte ``0xc1``, too many items) raises
:class:`MsgpackError`, a ``ValueError``, with the offset; nothing else escapes."""

from __future__ import annotations

import struct
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

__all__ = ["MAX_DEPTH", "MAX_ITEMS", "Ext", "MsgpackError", "timestamp", "unpack"]

MAX_DEPTH = 64
MAX_ITEMS = 2_000_000

#: ``ext(code, payload, nested)`` → what to show for an extension record; ``nested(data)`` decodes
#: msgpack inside the payload one level deeper, under the same budget.
Ext = Callable[[int, bytes, Callable[[bytes], Any]], Any]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class MsgpackError(ValueError):
    """The bytes are not (bounded) msgpack."""


def _default_ext(code: int, payload: bytes, nested: Callable[[bytes], Any]) -> Any:
    if code == -1:
        return timestamp(payload)
    return {"$ext": code, "size": len(payload)}


def timestamp(data: bytes) -> Any:
    """The payload of a timestamp extension (-1) as ISO 8601 text (UTC), or a stub if malformed."""
    try:
        if len(data) == 4:
            seconds, nanos = struct.unpack(">I", data)[0], 0
        elif len(data) == 8:
            word = struct.unpack(">Q", data)[0]
            seconds, nanos = word & 0x3FFFFFFFF, word >> 34
        elif len(data) == 12:
            nanos, seconds = struct.unpack(">Iq", data)
        else:
            return {"$ext": -1, "size": len(data)}
        return (_EPOCH + timedelta(seconds=seconds, microseconds=nanos // 1000)).isoformat()
    except (OverflowError, ValueError):
        return {"$ext": -1, "size": len(data)}


class _Decoder:
    """One decoding run: the item budget and the extension hook, shared by nested payloads."""

    def __init__(self, ext: Ext, max_depth: int, max_items: int) -> None:
        self.ext = ext
        self.max_depth = max_depth
        self.items = max_items

    def run(self, data: bytes, depth: int) -> Any:
        reader = _Reader(self, bytes(data))
        value = reader.value(depth)
        if reader.pos != len(reader.data):
            raise MsgpackError(f"{len(reader.data) - reader.pos} bytes after the value at byte {reader.pos}")
        return value


class _Reader:
    def __init__(self, decoder: _Decoder, data: bytes) -> None:
        self.d = decoder
        self.data = data
        self.pos = 0
        self.scalar: Any = None
        self.code = 0

    def take(self, n: int) -> bytes:
        start = self.pos
        end = start + n
        if end > len(self.data):
            raise MsgpackError(f"truncated at byte {start} (needs {n} more bytes)")
        self.pos = end
        return self.data[start:end]

    def uint(self, size: int) -> int:
        return int.from_bytes(self.take(size), "big")

    def count(self, n: int) -> int:
        """Charge ``n`` items to the budget (a container cannot hold more items than bytes left)."""
        if n > len(self.data) - self.pos:
            raise MsgpackError(f"a container at byte {self.pos} claims {n} items but fewer bytes remain")
        self.d.items -= n
        if self.d.items < 0:
            raise MsgpackError("more items than the display decoder reads")
        return n

    def head(self) -> tuple[str, int]:
        """Read one header: ``(kind, argument)``; kinds ``v`` (a scalar already read, in
        ``self.scalar``), ``a``/``m`` (array/map of n items), ``s``/``b`` (text/bytes of n bytes),
        ``x`` (extension of n bytes, code in ``self.code``)."""
        pos = self.pos
        if pos >= len(self.data):
            raise MsgpackError(f"truncated at byte {pos}")
        b = self.data[pos]
        self.pos = pos + 1
        if b <= 0x7F:
            self.scalar = b
            return "v", 0
        if b >= 0xE0:
            self.scalar = b - 0x100
            return "v", 0
        if 0x80 <= b <= 0x8F:
            return "m", b & 0x0F
        if 0x90 <= b <= 0x9F:
            return "a", b & 0x0F
        if 0xA0 <= b <= 0xBF:
            return "s", b & 0x1F
        simple = _SIMPLE.get(b)
        if simple is not None:
            self.scalar = simple[0]
            return "v", 0
        if b in _FIXED:
            fmt, size = _FIXED[b]
            self.scalar = struct.unpack(fmt, self.take(size))[0]
            return "v", 0
        if b in _SIZED:
            kind, size = _SIZED[b]
            return kind, self.uint(size)
        if b in _FIXEXT:
            self.code = struct.unpack(">b", self.take(1))[0]
            return "x", _FIXEXT[b]
        if b in _EXT:
            n = self.uint(_EXT[b])
            self.code = struct.unpack(">b", self.take(1))[0]
            return "x", n
        raise MsgpackError(f"reserved byte 0x{b:02x} at byte {pos}")

    def value(self, depth: int) -> Any:
        kind, n = self.head()
        if kind == "v":
            return self.scalar
        if kind == "s":
            return self.take(n).decode("utf-8", "replace")
        if kind == "b":
            return self.take(n)
        if kind == "x":
            code = self.code
            payload = self.take(n)
            return self.extension(code, payload, depth)
        if depth >= self.d.max_depth:
            self.skip(kind, n)
            return {"$more": f"nested deeper than {self.d.max_depth} levels"}
        if kind == "a":
            self.count(n)
            return [self.value(depth + 1) for _ in range(n)]
        self.count(2 * n)
        out: dict[Any, Any] = {}
        for _ in range(n):
            key = self.value(depth + 1)
            item = self.value(depth + 1)
            try:
                out[key] = item
            except TypeError:  # an array or map as a key
                out[repr(key)] = item
        return out

    def extension(self, code: int, payload: bytes, depth: int) -> Any:
        if depth >= self.d.max_depth:
            return {"$more": f"nested deeper than {self.d.max_depth} levels", "ext": code}
        return self.d.ext(code, payload, lambda data: self.d.run(data, depth + 1))

    def skip(self, kind: str, n: int) -> None:
        """Skip a container's items without building anything (iteratively: no recursion)."""
        pending = self.count(n * (2 if kind == "m" else 1))
        while pending:
            pending -= 1
            sub, m = self.head()
            if sub in ("s", "b", "x"):
                self.take(m)
            elif sub == "a":
                pending += self.count(m)
            elif sub == "m":
                pending += self.count(2 * m)


_SIMPLE = {0xC0: (None,), 0xC2: (False,), 0xC3: (True,)}
_FIXED = {
    0xCA: (">f", 4), 0xCB: (">d", 8),
    0xCC: (">B", 1), 0xCD: (">H", 2), 0xCE: (">I", 4), 0xCF: (">Q", 8),
    0xD0: (">b", 1), 0xD1: (">h", 2), 0xD2: (">i", 4), 0xD3: (">q", 8),
}
_SIZED = {
    0xC4: ("b", 1), 0xC5: ("b", 2), 0xC6: ("b", 4),
    0xD9: ("s", 1), 0xDA: ("s", 2), 0xDB: ("s", 4),
    0xDC: ("a", 2), 0xDD: ("a", 4), 0xDE: ("m", 2), 0xDF: ("m", 4),
}
_FIXEXT = {0xD4: 1, 0xD5: 2, 0xD6: 4, 0xD7: 8, 0xD8: 16}
_EXT = {0xC7: 1, 0xC8: 2, 0xC9: 4}


def unpack(data: bytes, ext: Ext | None = None, *, max_depth: int = MAX_DEPTH, max_items: int = MAX_ITEMS) -> Any:
    """Decode one msgpack value for display (see the module docstring); ``ext`` shows extension
    records. Raises :class:`MsgpackError` for malformed input."""
    return _Decoder(ext or _default_ext, max_depth, max_items).run(data, 0)
