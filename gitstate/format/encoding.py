"""CBOR: the one encoding of every gitstate payload.

Encoding accepts plain data only (``None``, ``bool``, ``int`` of at most :data:`MAX_INT_BITS`
bits, ``float``, ``str``, ``bytes``, lists/tuples and dicts with ``str`` or ``int`` keys) and writes
deterministic CBOR: shortest heads, floats in their shortest exact width, definite lengths, so equal
values give equal bytes and so equal git object ids. Maps come in two forms (docs/FORMAT.md,
"Encoding"): :func:`dumps` writes their keys in canonical order (gitstate's own records: a value's
key order is lost, equal values give equal bytes), ``dumps(..., ordered=True)`` in the dict's own
order (state values, format 2: the same value with its keys in the same order gives the same bytes,
and it reads back with that order).

Decoding accepts exactly what :func:`dumps` can write in either form, as an allow-list, and nothing
else. Before ``cbor2`` sees a payload, an iterative scan of its bytes (:func:`_scan`) refuses every
item outside that list: CBOR tags other than 2/3 (big integers that do not fit 64 bits), undefined
and simple values, indefinite lengths, non-shortest integers, lengths and floats, map keys other
than text and integers, repeated keys, nesting deeper than :data:`MAX_DEPTH`, truncated input and
trailing bytes; cbor2 then decodes text as strict UTF-8 and keeps map keys in their stored order. A
payload fetched from an untrusted remote therefore decodes to plain data or raises
:class:`CorruptObjectError`; it never builds other objects, never runs code and never exhausts the
Python stack. Every accepted payload ``b`` satisfies ``dumps(loads(b), ordered=True) == b``, and
``dumps(loads(b)) == b`` when its keys are in canonical order.

Decoding is on the read path of every checkpoint, so the scan is written for speed, and a bytes
object already accepted (the state reader keeps the bytes of list chunks it read) is not scanned
again; ``scripts/bench_encoding.py`` measures the cost."""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any, NoReturn

import cbor2

from gitstate.errors import CorruptObjectError, EncodingError, IntegerTooLargeError

#: Deepest container nesting stored: the outermost array/map is level 0, so at most
#: ``MAX_DEPTH + 1`` arrays/maps are nested. Deeper values are refused on write
#: (:class:`EncodingError`) and on read (:class:`CorruptObjectError`).
MAX_DEPTH = 200

#: Largest integer stored, in bits: every stored integer ``n`` has ``abs(n) < 2**MAX_INT_BITS``
#: (at most 2,467 decimal digits, within Python's default limit of 4,300 for ``str(int)``). Larger
#: integers are refused on write (:class:`IntegerTooLargeError`). A reader still decodes larger ones
#: (written by an earlier version, or crafted), and every display shows them as a bounded stub
#: (:func:`big_int_stub`, :func:`big_int_text`): printing one in decimal costs time quadratic in
#: its size.
MAX_INT_BITS = 8192

_SCALARS = (str, int, float, bool, bytes, type(None))


def is_big_int(value: Any) -> bool:
    """Whether ``value`` is an integer beyond :data:`MAX_INT_BITS` (shown as a stub, never in decimal)."""
    return isinstance(value, int) and value.bit_length() > MAX_INT_BITS


def _big_int_head(value: int) -> str:
    """The sign and the leading 64 bits of ``value`` in hex (``-0x1234…``), in constant time."""
    bits = value.bit_length()
    head = format(abs(value) >> (bits - 64), "x")
    return f"{'-' if value < 0 else ''}0x{head}…"


def big_int_stub(value: int) -> dict[str, Any]:
    """The JSON form of an integer beyond :data:`MAX_INT_BITS`: ``{"$bigint": bits, "hex":
    "-0x1234…"}`` (its size in bits and its sign and leading 64 bits)."""
    return {"$bigint": value.bit_length(), "hex": _big_int_head(value)}


def big_int_text(value: int) -> str:
    """The text form of an integer beyond :data:`MAX_INT_BITS`: ``<integer of 2,097,152 bits:
    0x1234…>``."""
    return f"<integer of {value.bit_length():,} bits: {_big_int_head(value)}>"


def _check_int(value: int, path: str) -> None:
    bits = value.bit_length()
    if bits > MAX_INT_BITS:
        raise IntegerTooLargeError(path, bits, MAX_INT_BITS)


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
        if isinstance(value, int):
            _check_int(value, path)
        return
    stack = [_frame(value, path, depth)]
    while stack:
        is_dict, items, where, level = stack[-1]
        if is_dict:
            for key, item in items:
                if not isinstance(key, str | int) or isinstance(key, bool):
                    # (a number is named; other keys, which may hold a credential, only by type)
                    shown = f"{key!r} " if key is None or isinstance(key, bool | float | complex) else ""
                    raise EncodingError(where, f"dict key {shown}of type {type(key).__name__}; use str or int")
                if isinstance(key, str) and not _is_text(key):
                    raise EncodingError(where, "a dict key is not valid Unicode text (a lone surrogate)")
                if isinstance(key, int) and key.bit_length() > MAX_INT_BITS:
                    _check_int(key, where)
                if not isinstance(item, _SCALARS):
                    stack.append(_frame(item, _key_path(where, key), level + 1))
                    break
                if isinstance(item, int):
                    _check_int(item, _key_path(where, key))
            else:
                stack.pop()
        else:
            for index, item in items:
                if not isinstance(item, _SCALARS):
                    stack.append(_frame(item, f"{where}[{index}]", level + 1))
                    break
                if isinstance(item, int):
                    _check_int(item, f"{where}[{index}]")
            else:
                stack.pop()


def _key_path(where: str, key: str | int) -> str:
    if isinstance(key, int) and key.bit_length() > MAX_INT_BITS:
        key = big_int_text(key)
    return f"{where}.{key}" if where else str(key)


def dumps(value: Any, path: str = "", *, ordered: bool = False) -> bytes:
    """Validate and encode ``value`` as CBOR: map keys in canonical order, or with ``ordered`` in
    each dict's own order (see the module docstring).

    The common case (no floats, every map key a ``str``) takes a fast path: one walk checks the
    value (and copies its dicts with their keys in canonical order, unless ``ordered``), then cbor2
    encodes it without its (slower) canonical mode, which for such values writes the same bytes.
    Anything else (floats, whose canonical form is their shortest exact width; int keys; a value to
    refuse) goes through :func:`check_value` and cbor2's canonical mode (:func:`_ordered_bytes`
    when ``ordered``). An integer beyond :data:`MAX_INT_BITS` raises :class:`IntegerTooLargeError`."""
    try:
        if ordered:
            _check_plain(value, 0)
            plain = value
        else:
            plain = _in_canonical_order(value, 0)
    except _Slow:
        pass
    else:
        try:
            return cbor2.dumps(plain)
        except (cbor2.CBOREncodeError, ValueError, TypeError, OverflowError):
            pass  # e.g. a lone surrogate in a string: the canonical path below says where
    check_value(value, path)
    try:
        if ordered:
            return b"".join(_ordered_bytes(value, []))
        return cbor2.dumps(value, canonical=True)
    except (cbor2.CBOREncodeError, ValueError, TypeError, OverflowError) as exc:  # pragma: no cover
        raise EncodingError(path, str(exc)) from exc


def _head(major: int, count: int) -> bytes:
    """The shortest CBOR head of major type ``major`` with argument ``count``."""
    if count < 24:
        return bytes((major << 5 | count,))
    if count < 0x100:
        return bytes((major << 5 | 24, count))
    if count < 0x10000:
        return bytes((major << 5 | 25,)) + count.to_bytes(2, "big")
    if count < 0x100000000:
        return bytes((major << 5 | 26,)) + count.to_bytes(4, "big")
    return bytes((major << 5 | 27,)) + count.to_bytes(8, "big")


def _ordered_bytes(value: Any, out: list[bytes]) -> list[bytes]:
    """Append the CBOR of a value :func:`check_value` accepted to ``out``: maps in their own key
    order, everything else as cbor2's canonical mode writes it (a list without containers in one
    call, so a long vector of floats costs one cbor2 call). Recursive: the value is at most
    :data:`MAX_DEPTH` deep."""
    if isinstance(value, dict):
        out.append(_head(5, len(value)))
        for key, item in value.items():
            out.append(cbor2.dumps(key, canonical=True))
            _ordered_bytes(item, out)
    elif isinstance(value, list | tuple):
        if not any(isinstance(item, dict | list | tuple) for item in value):
            out.append(cbor2.dumps(list(value), canonical=True))
        else:
            out.append(_head(4, len(value)))
            for item in value:
                _ordered_bytes(item, out)
    else:
        out.append(cbor2.dumps(value, canonical=True))
    return out


def _is_text(text: str) -> bool:
    """Whether ``text`` encodes as UTF-8 (no lone surrogate)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


#: ``str.translate`` table writing each lone surrogate as its JSON escape (``\\udc80``): applied
#: to JSON text, whose strings are the only place one can be, it makes the text encodable as UTF-8
#: and still the same JSON (data pulled from elsewhere may hold such keys or strings).
JSON_SURROGATE_ESCAPES = {code: f"\\u{code:04x}" for code in range(0xD800, 0xE000)}


def escape_surrogates(json_text: str) -> str:
    """``json_text`` with :data:`JSON_SURROGATE_ESCAPES` applied, when it holds a lone surrogate
    (the common case costs one C-speed scan)."""
    if json_text.isascii() or _is_text(json_text):
        return json_text
    return json_text.translate(JSON_SURROGATE_ESCAPES)


class _Slow(Exception):
    """Raised by :func:`_in_canonical_order`: the value needs the general path."""


def _key_order(key: str) -> tuple[int, bytes]:
    raw = key.encode("utf-8")
    return len(raw), raw  # canonical CBOR: shorter encoded keys first, then bytewise


def _in_canonical_order(value: Any, depth: int) -> Any:
    """``value`` with every dict's keys in canonical CBOR order (lists become lists); raises
    :class:`_Slow` for a float, an integer beyond :data:`MAX_INT_BITS`, a non-``str`` key, a type other than the plain ones (subclasses
    included) or nesting deeper than :data:`MAX_DEPTH` (then :func:`check_value` decides)."""
    kind = type(value)
    if kind is int:
        if value.bit_length() > MAX_INT_BITS:
            raise _Slow  # check_value names where
        return value
    if kind is str or kind is bytes or kind is bool or value is None:
        return value
    if depth > MAX_DEPTH:
        raise _Slow
    if kind is list or kind is tuple:
        return [_in_canonical_order(item, depth + 1) for item in value]
    if kind is dict:
        for key in value:
            if type(key) is not str:
                raise _Slow
        try:
            keys = sorted(value, key=_key_order)
        except UnicodeEncodeError:
            raise _Slow from None
        return {key: _in_canonical_order(value[key], depth + 1) for key in keys}
    raise _Slow


def _check_plain(value: Any, depth: int) -> None:
    """Raise :class:`_Slow` unless ``value`` takes the fast path of ``dumps(..., ordered=True)``:
    the same test as :func:`_in_canonical_order`, without the copy (keys stay in their order)."""
    kind = type(value)
    if kind is str or kind is bytes or kind is bool or value is None:
        return
    if kind is int:
        if value.bit_length() > MAX_INT_BITS:
            raise _Slow  # check_value names where
        return
    if depth > MAX_DEPTH:
        raise _Slow
    if kind is list or kind is tuple:
        for item in value:
            _check_plain(item, depth + 1)
        return
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str:
                raise _Slow
            _check_plain(item, depth + 1)
        return
    raise _Slow


# -- decoding -------------------------------------------------------------------------------------
#
# The scan below runs on every read, so it is written for speed: the common heads are checked
# inline from two lookup tables, everything else in helpers that also produce the refusal messages.


class _Refused(Exception):
    """Raised inside :func:`_scan`; its message is the reason given in CorruptObjectError."""


_MAJOR_NAMES = ("unsigned integer", "negative integer", "byte string", "text string", "array", "map", "tag",
                "float/simple value")
# Smallest argument that needs additional information 24, 25, 26, 27 (1, 2, 4, 8 bytes).
_ARG_MIN = {24: 24, 25: 0x100, 26: 0x10000, 27: 0x100000000}
_TRUNCATED = "truncated (the CBOR value ends early)"
_F16, _F32, _F64 = struct.Struct(">e"), struct.Struct(">f"), struct.Struct(">d")

# ``sizes[ib]``: the size of a whole item that its initial byte ``ib`` alone describes and that needs
# no check (small integers, false/true/null, strings of at most 23 bytes), else 0. ``kinds[ib]``,
# for the other heads the scan checks inline: 1/2 string with a 1/2-byte length, 3/4/5/6 integer
# with a 1/2/4/8-byte argument, 7 array/map of at most 23 items, 8 array/map with a 1-byte count,
# 9 float. 0 sends the byte to :func:`_item_end` (long strings, big integers, refusals).


def _tables(*, keys: bool, utf8: bool) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The (sizes, kinds) tables for map keys or values. With ``utf8`` every text string goes to
    the helpers, which check its UTF-8 (only used to explain why cbor2 refused a payload)."""
    sizes = [0] * 256
    kinds = [0] * 256
    for ib in (*range(0x00, 0x18), *range(0x20, 0x38)):
        sizes[ib] = 1
    if not utf8:
        for ib in range(0x60, 0x78):
            sizes[ib] = 1 + ib - 0x60
    if not keys:
        for ib in range(0x40, 0x58):
            sizes[ib] = 1 + ib - 0x40
        for ib in (0xF4, 0xF5, 0xF6):
            sizes[ib] = 1
        for kind, heads in ((1, (0x58, 0x78)), (2, (0x59, 0x79)), (3, (0x18, 0x38)), (4, (0x19, 0x39)),
                            (5, (0x1A, 0x3A)), (6, (0x1B, 0x3B)), (7, (*range(0x80, 0x98), *range(0xA0, 0xB8))),
                            (8, (0x98, 0xB8)), (9, (0xF9, 0xFA, 0xFB))):
            for ib in heads:
                kinds[ib] = kind
        if utf8:
            kinds[0x78] = kinds[0x79] = 0
    return tuple(sizes), tuple(kinds)


_VALUE_SIZES, _KINDS = _tables(keys=False, utf8=False)
_KEY_SIZES = _tables(keys=True, utf8=False)[0]
_VALUE_SIZES_UTF8, _KINDS_UTF8 = _tables(keys=False, utf8=True)
_KEY_SIZES_UTF8 = _tables(keys=True, utf8=True)[0]


def _bad_head(data: bytes, pos: int, ai: int, major: int) -> NoReturn:
    """Refuse a head with additional information 28-31 (reserved, indefinite length, break)."""
    if ai == 31 and 2 <= major <= 5:
        raise _Refused(f"indefinite-length {_MAJOR_NAMES[major]}")
    if ai == 31 and major == 7:
        raise _Refused("unexpected break code (0xff)")
    raise _Refused(f"reserved or invalid additional information {ai} ({_MAJOR_NAMES[major]}, initial byte "
                   f"0x{data[pos]:02x})")


def _not_shortest(data: bytes, pos: int, width: int) -> NoReturn:
    """Refuse the head at ``pos`` (``width`` argument bytes): its argument fits a shorter head."""
    if pos + 1 + width > len(data):
        raise _Refused(_TRUNCATED)
    what = "length" if 2 <= data[pos] >> 5 <= 5 else "integer"
    raise _Refused(f"non-canonical {what} encoding (0x{data[pos:pos + 1 + width].hex()} is not the shortest "
                   "form)")


def _argument(data: bytes, pos: int, ai: int, major: int) -> tuple[int, int]:
    """The argument of the head at ``pos`` with additional information ``ai`` >= 24, and the
    position after the head; refuses non-shortest, reserved and indefinite forms."""
    if ai > 27:
        _bad_head(data, pos, ai, major)
    width = 1 << (ai - 24)
    if pos + 1 + width > len(data):
        raise _Refused(_TRUNCATED)
    arg = int.from_bytes(data[pos + 1:pos + 1 + width], "big")
    if arg < _ARG_MIN[ai]:
        _not_shortest(data, pos, width)
    return arg, pos + 1 + width


def _string_end(data: bytes, pos: int, ib: int, utf8: bool) -> int:
    """End of the byte or text string at ``pos`` (checking its UTF-8 if ``utf8``)."""
    ai = ib & 31
    length, begin = (ai, pos + 1) if ai < 24 else _argument(data, pos, ai, ib >> 5)
    end = begin + length
    if end > len(data):
        raise _Refused(_TRUNCATED)
    if utf8 and ib >> 5 == 3:
        try:
            data[begin:end].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _Refused(f"invalid UTF-8 in a text string (byte {begin + exc.start})") from None
    return end


def _bignum_end(data: bytes, pos: int) -> int:
    """End of the big integer at ``pos`` (tag 2/3 at ``pos``): a byte string of at least 9 bytes
    without leading zeros (anything smaller is written as a plain integer)."""
    start = pos + 1
    if start >= len(data):
        raise _Refused(_TRUNCATED)
    ib = data[start]
    if ib >> 5 != 2:
        raise _Refused("big integer (tag 2/3) whose content is not a byte string")
    ai = ib & 31
    length, begin = (ai, start + 1) if ai < 24 else _argument(data, start, ai, 2)
    end = begin + length
    if end > len(data):
        raise _Refused(_TRUNCATED)
    if length < 9 or data[begin] == 0:
        raise _Refused("non-canonical big integer (tag 2/3 for a value that fits 64 bits, or leading zero "
                       "bytes)")
    return end


def _float_end(data: bytes, pos: int, ib: int) -> int:
    """End of the float at ``pos``, refused unless it is the form cbor2's canonical encoder writes
    for its value: NaN only as 0xf97e00, infinities as half floats, any other value in the shortest of
    half/single/double precision that holds it exactly."""
    if ib == 0xF9:
        high, low = data[pos + 1], data[pos + 2]
        if high & 0x7C == 0x7C and (high & 3 or low) and (high != 0x7E or low):  # a NaN but 0x7e00
            _float_refused(data, pos, 3)
        return pos + 3
    wide, narrow, end = (_F32, _F16, pos + 5) if ib == 0xFA else (_F64, _F32, pos + 9)
    if end > len(data):
        raise _Refused(_TRUNCATED)
    (value,) = wide.unpack_from(data, pos + 1)
    if value - value != 0:  # NaN or infinity: written as half floats
        _float_refused(data, pos, end - pos)
    try:
        fits = narrow.unpack(narrow.pack(value))[0] == value
    except OverflowError:
        fits = False
    if fits:
        _float_refused(data, pos, end - pos)
    return end


def _float_refused(data: bytes, pos: int, size: int) -> NoReturn:
    if pos + size > len(data):
        raise _Refused(_TRUNCATED)
    raw = data[pos:pos + size]
    (value,) = (_F16, _F32, _F64)[size // 4].unpack(raw[1:])
    raise _Refused(f"non-canonical float encoding (0x{raw.hex()}; {value!r} is written as "
                   f"0x{cbor2.dumps(value, canonical=True).hex()})")


def _item_end(data: bytes, pos: int, ib: int, utf8: bool) -> int:
    """End of an item the scan does not check inline (never an array or map): long strings, big
    integers, text in ``utf8`` mode; every other item that reaches here is refused."""
    major, ai = ib >> 5, ib & 31
    if major < 2:
        return pos + 1 if ai < 24 else _argument(data, pos, ai, major)[1]
    if major < 4:
        return _string_end(data, pos, ib, utf8)
    if major == 6:
        if ib == 0xC2 or ib == 0xC3:
            return _bignum_end(data, pos)
        tag = ai if ai < 24 else _argument(data, pos, ai, major)[0]
        raise _Refused(f"CBOR tag {tag} is not allowed (only 2/3, big integers)")
    if major == 7:
        if 25 <= ai <= 27:
            return _float_end(data, pos, ib)
        if ai <= 24:
            raise _Refused("undefined/simple value (only false, true and null are stored)")
    _bad_head(data, pos, ai, major)


def _key_end(data: bytes, pos: int, utf8: bool) -> int:
    """End of a map key that is not a one-byte integer or short text string: an integer, a big
    integer or a text string; any other key is refused."""
    ib = data[pos]
    major = ib >> 5
    if major in (0, 1, 3) or ib == 0xC2 or ib == 0xC3:
        return _item_end(data, pos, ib, utf8)
    raise _Refused(f"map key of type {_MAJOR_NAMES[major]} (keys are text strings or integers)")


def _scan(data: bytes, utf8: bool = False) -> None:
    """Refuse (raise :class:`_Refused`) anything :func:`dumps` cannot have written; see the module
    docstring. One pass, no recursion: the containers being read are kept on an explicit stack.
    Text is left to cbor2's strict UTF-8 decoding unless ``utf8`` (used to explain a failure)."""
    n = len(data)
    sizes, kinds = (_VALUE_SIZES_UTF8, _KINDS_UTF8) if utf8 else (_VALUE_SIZES, _KINDS)
    key_sizes = _KEY_SIZES_UTF8 if utf8 else _KEY_SIZES
    pos = 0
    left = 1  # items (array) or entries (map) still to read in the current container
    is_map = False
    keys: set[bytes] = set()  # the encoded keys of the current map read so far
    stack: list[tuple[int, bool, set[bytes]]] = []
    try:
        while True:
            if not left:
                if not stack:
                    break
                left, is_map, keys = stack.pop()
                continue
            left -= 1
            if is_map:  # the key (in any order, never repeated: one encoding per value), then its value
                size = key_sizes[data[pos]] or _key_end(data, pos, utf8) - pos
                key = data[pos:pos + size]
                if key in keys:  # (a truncated key is shorter than any complete key of its head)
                    raise _Refused("duplicate map key")
                keys.add(key)
                pos += size
            ib = data[pos]
            size = sizes[ib]
            if size:
                pos += size
                continue
            kind = kinds[ib]  # tested roughly by frequency
            if kind == 2:
                size = data[pos + 1] << 8 | data[pos + 2]
                if size < 0x100:
                    _not_shortest(data, pos, 2)
                pos += 3 + size
                continue
            if kind == 7:
                count = ib & 31
                pos += 1
            elif kind == 1:
                size = data[pos + 1]
                if size < 24:
                    _not_shortest(data, pos, 1)
                pos += 2 + size
                continue
            elif kind == 3:
                if data[pos + 1] < 24:
                    _not_shortest(data, pos, 1)
                pos += 2
                continue
            elif kind == 4:
                if not data[pos + 1]:
                    _not_shortest(data, pos, 2)
                pos += 3
                continue
            elif kind == 9:  # common floats accepted here, the rest checked by _float_end
                if ib == 0xFB:  # low byte set: not a float32 value; and not NaN/infinity
                    if data[pos + 8] and (data[pos + 1] & 0x7F != 0x7F or data[pos + 2] < 0xF0):
                        pos += 9
                        continue
                elif ib == 0xF9:  # every half float but NaN and infinity
                    if data[pos + 1] & 0x7C != 0x7C:
                        pos += 3
                        continue
                elif data[pos + 4] and (data[pos + 1] & 0x7F != 0x7F or data[pos + 2] < 0x80):
                    pos += 5  # float32 with its low byte set: not a half float; not NaN/infinity
                    continue
                pos = _float_end(data, pos, ib)
                continue
            elif kind == 5:
                if not (data[pos + 1] or data[pos + 2]):
                    _not_shortest(data, pos, 4)
                pos += 5
                continue
            elif kind == 6:
                if not (data[pos + 1] or data[pos + 2] or data[pos + 3] or data[pos + 4]):
                    _not_shortest(data, pos, 8)
                pos += 9
                continue
            elif kind == 8:
                count = data[pos + 1]
                if count < 24:
                    _not_shortest(data, pos, 1)
                pos += 2
            elif 0x80 <= ib < 0xC0:
                count, pos = _argument(data, pos, ib & 31, ib >> 5)
            else:
                pos = _item_end(data, pos, ib, utf8)
                continue
            # an array (ib < 0xa0) or map of ``count`` items/entries starts at pos
            if len(stack) > MAX_DEPTH:  # the new container's level is len(stack)
                raise _Refused(f"nested deeper than {MAX_DEPTH} levels")
            if count:
                stack.append((left, is_map, keys))
                left = count
                is_map = ib >= 0xA0
                if is_map:
                    keys = set()
    except IndexError:
        raise _Refused(_TRUNCATED) from None
    if pos > n:
        raise _Refused(_TRUNCATED)
    if pos < n:
        raise _Refused(f"trailing bytes ({n - pos} after the CBOR value)")


# Payloads already scanned and decoded, by object identity (each entry holds its bytes object, so its
# id cannot be reused while it is here): reading a cached blob again (the state reader keeps the
# bytes of list chunks) costs the cbor2 decoding only. Bytes are immutable, so a hit is exact. Only
# payloads of _MEMO_MIN bytes or more, within about _MEMO_BUDGET bytes (then it starts over).
_MEMO: dict[int, bytes] = {}
_MEMO_MIN = 1024
_MEMO_BUDGET = 32 << 20
_memo_size = 0


def _remember(data: bytes) -> None:
    global _memo_size
    if _memo_size + len(data) > _MEMO_BUDGET:
        _MEMO.clear()
        _memo_size = 0
    if len(data) <= _MEMO_BUDGET:
        _MEMO[id(data)] = data
        _memo_size += len(data)


def loads(data: bytes, oid: str = "?") -> Any:
    """Decode CBOR written by :func:`dumps` (maps in canonical or in any other order, their keys
    kept in the order stored); any other input raises CorruptObjectError."""
    if type(data) is not bytes:
        data = bytes(data)
    known = _MEMO.get(id(data)) is data
    if not known:
        try:
            _scan(data)
        except _Refused as exc:
            raise CorruptObjectError(oid, str(exc)) from None
    try:
        value = cbor2.loads(data)
    except Exception as exc:  # after the scan only text can fail: name the bad string if so
        try:
            _scan(data, utf8=True)
        except _Refused as refused:
            raise CorruptObjectError(oid, str(refused)) from exc
        raise CorruptObjectError(oid, f"does not decode as CBOR: {exc}") from exc
    if not known and len(data) >= _MEMO_MIN:
        _remember(data)
    return value


def loads_mapping(data: bytes, oid: str = "?") -> dict[str, Any]:
    """Decode a payload that must be a map with string keys."""
    value = loads(data, oid)
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise CorruptObjectError(oid, "payload is not a map with string keys")
    return dict(value)
