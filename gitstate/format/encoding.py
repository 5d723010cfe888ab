"""Canonical CBOR: the one encoding of every gitstate payload.

Encoding accepts plain data only (``None``, ``bool``, ``int``, ``float``, ``str``, ``bytes``,
lists/tuples and dicts with ``str`` or ``int`` keys) and writes RFC 8949 canonical CBOR, so equal
values give equal bytes and so equal git object ids. Decoding never constructs anything else: every
CBOR tag is refused except 2/3 (big integers), so a payload fetched from an untrusted remote is data,
never code or arbitrary objects."""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import Any, NoReturn

import cbor2

from gitstate.errors import CorruptObjectError, EncodingError

#: Deepest container nesting stored: the outermost array/map is level 0, so at most
#: ``MAX_DEPTH + 1`` arrays/maps are nested. Deeper values are refused on write
#: (:class:`EncodingError`).
MAX_DEPTH = 200

_SCALARS = (str, int, float, bool, bytes, type(None))
# Tags cbor2 would otherwise turn into objects (dates, decimals, regexes, sets, shared refs, …).
_REFUSED_TAGS = (0, 1, 4, 5, 25, 28, 29, 30, 35, 36, 37, 52, 54, 100, 256, 258, 260, 261, 1004, 55799)


def _frame(value: Any, path: str, depth: int) -> tuple[bool, Any, str, int]:
    """What :func:`check_value` keeps per container it is inside: (is a dict, an iterator over its
    (key, item) pairs, its path, its depth)."""
    if depth > MAX_DEPTH:
        raise EncodingError(path, f"nested deeper than {MAX_DEPTH} levels (a cycle?)")
    if isinstance(value, list | tuple):
        return False, enumerate(value), path, depth
    if isinstance(value, dict):
        return True, iter(value.items()), path, depth
    raise EncodingError(
        path, f"type {type(value).__name__} is not storable; use None, bool, int, float, str, bytes, list or dict"
    )


def check_value(value: Any, path: str = "", depth: int = 0) -> None:
    """Raise :class:`EncodingError` unless ``value`` is plain data gitstate can store.

    Iterative (an explicit stack, visiting in the same depth-first order a recursive walk would), so
    hostile or cyclic nesting ends in an EncodingError at :data:`MAX_DEPTH`, never RecursionError."""
    if depth > MAX_DEPTH:
        raise EncodingError(path, f"nested deeper than {MAX_DEPTH} levels (a cycle?)")
    if isinstance(value, _SCALARS):
        return
    stack = [_frame(value, path, depth)]
    while stack:
        is_dict, items, where, level = stack[-1]
        if is_dict:
            for key, item in items:
                if not isinstance(key, str | int) or isinstance(key, bool):
                    raise EncodingError(where, f"dict key {key!r} of type {type(key).__name__}; use str or int")
                if not isinstance(item, _SCALARS):
                    stack.append(_frame(item, f"{where}.{key}" if where else str(key), level + 1))
                    break
            else:
                stack.pop()
        else:
            for index, item in items:
                if not isinstance(item, _SCALARS):
                    stack.append(_frame(item, f"{where}[{index}]", level + 1))
                    break
            else:
                stack.pop()


def dumps(value: Any, path: str = "") -> bytes:
    """Validate and encode ``value`` as canonical CBOR."""
    check_value(value, path)
    try:
        return cbor2.dumps(value, canonical=True)
    except (cbor2.CBOREncodeError, ValueError, TypeError, OverflowError) as exc:  # pragma: no cover
        raise EncodingError(path, str(exc)) from exc


def _refuse(decoder: Any) -> NoReturn:
    raise cbor2.CBORDecodeError("CBOR tags are not allowed in gitstate payloads")


def _refuse_unknown(decoder: Any, tag: Any) -> NoReturn:
    raise cbor2.CBORDecodeError(f"CBOR tag {tag.tag} is not allowed in gitstate payloads")


_SEMANTIC = {tag: _refuse for tag in _REFUSED_TAGS}


def loads(data: bytes, oid: str = "?") -> Any:
    """Decode canonical CBOR written by :func:`dumps`; any other input raises CorruptObjectError."""
    stream = io.BytesIO(data)
    try:
        value = cbor2.CBORDecoder(stream, semantic_decoders=_SEMANTIC, tag_hook=_refuse_unknown,
                                  max_depth=MAX_DEPTH + 8).decode()
    except Exception as exc:  # cbor2 raises several types on garbage; all mean "corrupt"
        raise CorruptObjectError(oid, f"does not decode as CBOR: {exc}") from exc
    if stream.tell() != len(data):
        raise CorruptObjectError(oid, f"{len(data) - stream.tell()} bytes of garbage after the CBOR value")
    return value


def loads_mapping(data: bytes, oid: str = "?") -> dict[str, Any]:
    """Decode a payload that must be a map with string keys."""
    value = loads(data, oid)
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise CorruptObjectError(oid, "payload is not a map with string keys")
    return dict(value)
