"""gitstate.format.encoding: ``loads`` accepts exactly what ``dumps`` writes (CBOR of plain data,
maps in canonical order or, with ``ordered``, in their own order) and refuses everything else with
a CorruptObjectError that names the problem; ``dumps`` output stays byte-identical; depth limits
hold on write and on read without RecursionError."""

from __future__ import annotations

import math
import random
import struct
import sys
from typing import Any

import cbor2
import pytest

from gitstate.errors import CorruptObjectError, EncodingError
from gitstate.format import encoding
from gitstate.format.encoding import MAX_DEPTH, check_value, dumps, loads, loads_mapping

# -- round trips ------------------------------------------------------------------------------------

ROUND_TRIPS: list[Any] = [
    None, True, False,
    0, 1, 23, 24, 255, 256, 65535, 65536, 2**32 - 1, 2**32, 2**63, 2**64 - 1,
    -1, -24, -25, -256, -257, -2**32, -2**63, -2**64,
    2**64, -2**64 - 1, 2**64 + 1, 2**200, -2**200, 2**1000,
    0.0, -0.0, 1.5, -1.5, 0.1, 1e300, -1e300, 65504.0, 65536.0, 1e-40, 5e-324, 5.960464477539063e-08,
    3.4028234663852886e38, math.inf, -math.inf,
    "", "a", "é", "€" * 10, "😀", "x" * 23, "x" * 24, "x" * 255, "x" * 256, "x" * 70000,
    b"", b"\x00", b"\xff" * 23, b"\xff" * 24, b"\x00" * 256, b"\x01" * 70000,
    [], {}, [[]], [{}], {"": {}}, list(range(24)), list(range(300)),
    {1: "int key"}, {-1: "a", 0: "b", 23: "c", 24: "d", 2**64: "e", -2**64 - 1: "f"},
    {"a": 1, 1: "a", "1": 1.0, -1: True, "": None, 2**70: b"x"},
    {str(i): i for i in range(300)}, {i: str(i) for i in range(-300, 300)},
    {"messages": [{"role": "user", "content": "hi " * 100, "step": 1}], "vars": {"ok": True, "x": 0.5}},
]


@pytest.mark.parametrize("value", ROUND_TRIPS, ids=lambda v: repr(v)[:40])
def test_round_trip(value: Any) -> None:
    data = dumps(value)
    back = loads(data)
    assert back == value and type(back) is type(value)
    if isinstance(value, float):
        assert math.copysign(1, back) == math.copysign(1, value)  # -0.0 stays -0.0
    assert dumps(back) == data


def test_nan_round_trip() -> None:
    data = dumps(math.nan)
    assert data == b"\xf9\x7e\x00" and math.isnan(loads(data))


def test_tuples_read_back_as_lists_and_types_stay_distinct() -> None:
    assert loads(dumps((1, (2, 3)))) == [1, [2, 3]]
    values = loads(dumps([1, 1.0, True]))
    assert [type(v) for v in values] == [int, float, bool]


def test_dumps_output_is_unchanged() -> None:
    """Stored object ids depend on these bytes (cbor2's canonical form: shortest heads and floats,
    map keys by encoded length, then bytewise), so they must never change."""
    value = {"z": 1, 1000: 2, -1: 3, "aa": [1.5, None, True, b"\x00"], 2**64: "big"}
    assert dumps(value) == cbor2.dumps(value, canonical=True)
    assert dumps(value).hex() == "a52003617a011903e80262616184f93e00f6f54100c24901000000000000000063626967"
    assert dumps({"b": 1, "aa": 2, 1: 3}).hex() == "a3010361620162616102"
    assert dumps([1.5, 0.1, 2**64, -2**64 - 1]).hex() == (
        "84f93e00fb3fb999999999999ac249010000000000000000c349010000000000000000")


def test_bytes_like_input() -> None:
    data = dumps({"k": [1, "v"]})
    assert loads(bytearray(data)) == loads(memoryview(data)) == {"k": [1, "v"]}


# -- refusals -------------------------------------------------------------------------------------

REFUSED = [
    # indefinite lengths
    ("9f01ff", "indefinite-length array"),
    ("bf616101ff", "indefinite-length map"),
    ("5f4101ff", "indefinite-length byte string"),
    ("7f616161ff", "indefinite-length text string"),
    # integers and lengths not in their shortest form
    ("1801", "non-canonical integer encoding"),
    ("190018", "non-canonical integer encoding"),
    ("1900ff", "non-canonical integer encoding"),
    ("1a0000ffff", "non-canonical integer encoding"),
    ("1b00000000ffffffff", "non-canonical integer encoding"),
    ("3817", "non-canonical integer encoding"),
    ("5801ff", "non-canonical length encoding"),
    ("780161", "non-canonical length encoding"),
    ("790001" + "61", "non-canonical length encoding"),
    ("7a00000001" + "61", "non-canonical length encoding"),
    ("980101", "non-canonical length encoding"),
    ("b80161610" + "1", "non-canonical length encoding"),
    # tags: only 2/3 (big integers), and only for values that do not fit 64 bits
    ("c07818" + "32303236" * 6, "CBOR tag 0 is not allowed"),
    ("c100", "CBOR tag 1 is not allowed"),
    ("c4820001", "CBOR tag 4 is not allowed"),
    ("c5820001", "CBOR tag 5 is not allowed"),
    ("d81c00", "CBOR tag 28 is not allowed"),
    ("d81d00", "CBOR tag 29 is not allowed"),
    ("d8376161", "CBOR tag 55 is not allowed"),
    ("d901028101", "CBOR tag 258 is not allowed"),
    ("d9d9f700", "CBOR tag 55799 is not allowed"),
    ("db000000010000000000", "CBOR tag 4294967296 is not allowed"),
    ("81d82000", "CBOR tag 32 is not allowed"),
    ("d80249010000000000000000", "non-canonical integer encoding"),
    ("c24101", "non-canonical big integer"),
    ("c3480102030405060708", "non-canonical big integer"),
    ("c24a00010000000000000000", "non-canonical big integer"),
    ("c26161", "not a byte string"),
    ("c2c249010000000000000000", "not a byte string"),
    # simple values other than false/true/null
    ("f7", "undefined/simple value"),
    ("f0", "undefined/simple value"),
    ("e0", "undefined/simple value"),
    ("f820", "undefined/simple value"),
    ("f8ff", "undefined/simple value"),
    ("82f5f7", "undefined/simple value"),
    # maps: keys in any order (ORDERED_MAPS), never repeated, also far apart or out of order
    ("a2616101616102", "duplicate map key"),
    ("a2010201" + "03", "duplicate map key"),
    ("a3616101616202616103", "duplicate map key"),
    ("a3616201616102616203", "duplicate map key"),
    ("a32001c24901000000000000000002" + "2003", "duplicate map key"),
    ("a2c24901000000000000000001" + "c249010000000000000000" + "03", "duplicate map key"),
    ("a261610161", "truncated"),
    ("a1400001"[:6], "map key of type byte string"),
    ("a1f500", "map key of type float/simple value"),
    ("a1f600", "map key of type float/simple value"),
    ("a1f93e0000", "map key of type float/simple value"),
    ("a18000", "map key of type array"),
    ("a1a000", "map key of type map"),
    ("a1c10000", "map key of type tag"),
    # floats: only the form cbor2's canonical encoder writes
    ("fb3ff8000000000000", "non-canonical float encoding"),  # 1.5 as float64
    ("fa3fc00000", "non-canonical float encoding"),  # 1.5 as float32
    ("fb0000000000000000", "non-canonical float encoding"),  # 0.0 as float64
    ("fb3fb99999a0000000", "non-canonical float encoding"),  # a float32 value as float64
    ("fb7ff0000000000000", "non-canonical float encoding"),  # infinity as float64
    ("fa7f800000", "non-canonical float encoding"),  # infinity as float32
    ("fb7ff8000000000001", "non-canonical float encoding"),  # NaN as float64
    ("f97e01", "non-canonical float encoding"),  # NaN with a payload
    ("f9fe00", "non-canonical float encoding"),  # negative NaN
    # text must be valid UTF-8
    ("62c328", "invalid UTF-8"),
    ("63eda080", "invalid UTF-8"),  # a surrogate
    ("62c080", "invalid UTF-8"),  # overlong
    ("64f4908080", "invalid UTF-8"),  # beyond U+10FFFF
    ("a161ff01", "invalid UTF-8"),  # in a key
    # framing
    ("0100", "trailing bytes"),
    ("a0a0", "trailing bytes"),
    ("", "truncated"),
    ("830102", "truncated"),
    ("6461", "truncated"),
    ("1901", "truncated"),
    ("c2", "truncated"),
    ("c2490100", "truncated"),
    ("fb3ff8", "truncated"),
    ("a2616101", "truncated"),
    ("a16161", "truncated"),
    ("1c", "reserved or invalid additional information 28"),
    ("fe", "reserved or invalid additional information 30"),
    ("ff", "unexpected break code"),
    ("1f", "reserved or invalid additional information 31"),
    ("df00", "reserved or invalid additional information 31"),
]


@pytest.mark.parametrize("hexdata,needle", REFUSED, ids=[f"{h[:24]}-{n[:24]}" for h, n in REFUSED])
def test_refused(hexdata: str, needle: str) -> None:
    with pytest.raises(CorruptObjectError) as info:
        loads(bytes.fromhex(hexdata), "blob-id")
    assert needle in info.value.reason, info.value.reason
    assert info.value.oid == "blob-id" and needle in str(info.value)


#: Maps whose keys are not in canonical order, and the key order they decode to: format 2 keeps a
#: map's own order (``dumps(..., ordered=True)``), format 1 wrote canonical order only.
ORDERED_MAPS = [
    ("a2616201616102", ["b", "a"]),
    ("a2626161016162" + "02", ["aa", "b"]),
    ("a2616101" + "2002", ["a", -1]),
    ("a21864012002", [100, -1]),
    ("a3616303616201616102", ["c", "b", "a"]),
    ("a2c249010000000000000000016161" + "02", [2**64, "a"]),
]


@pytest.mark.parametrize("hexdata,keys", ORDERED_MAPS, ids=[h for h, _ in ORDERED_MAPS])
def test_maps_in_any_key_order_are_read_in_that_order(hexdata: str, keys: list[Any]) -> None:
    data = bytes.fromhex(hexdata)
    value = loads(data)
    assert list(value) == keys
    assert dumps(value, ordered=True) == data  # written back byte for byte
    assert dumps(value) == cbor2.dumps(value, canonical=True) != data  # the canonical form sorts them


def test_ordered_dumps_keeps_the_order_of_every_map() -> None:
    value = {"z": 1, "a": {"y": [1.5, {"q": 0, "b": None}], "c": 2**70}, 3: "int", "m": (1, {"k": "v", "e": b""})}
    data = dumps(value, ordered=True)
    back = loads(data)
    assert back == {**value, "m": [1, {"k": "v", "e": b""}]}  # (a tuple reads back as a list)
    assert list(back) == ["z", "a", 3, "m"] and list(back["a"]) == ["y", "c"]
    assert list(back["a"]["y"][1]) == ["q", "b"] and list(back["m"][1]) == ["k", "e"]
    assert data.hex() == ("a4617a016161a2617982f93e00a26171006162f66163c249400000000000000000"
                          "0363696e74616d8201a2616b61766165" + "40")
    reordered = dict(reversed(list(value.items())))
    assert dumps(reordered, ordered=True) != data and loads(dumps(reordered, ordered=True)) == back
    assert dumps(value) == dumps(reordered)  # the canonical form does not depend on the order


def test_ordered_dumps_of_canonically_ordered_maps_is_the_canonical_form() -> None:
    """A value whose keys are all in canonical order encodes as format 1 wrote it (same ids)."""
    rng = random.Random(20260301)
    for _ in range(300):
        value = loads(dumps(_random_value(rng)))  # keys in canonical order, as format 1 stored them
        assert dumps(value, ordered=True) == dumps(value)


def test_refused_forms_never_reach_cbor2(monkeypatch: pytest.MonkeyPatch) -> None:
    """The allow-list scan runs first: cbor2 never sees a tag, a simple value, a deep nest."""
    def boom(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("cbor2 decoded a payload the scan should have refused")

    monkeypatch.setattr(encoding.cbor2, "loads", boom)
    for hexdata, _ in REFUSED:
        if "UTF-8" not in _:
            with pytest.raises(CorruptObjectError):
                loads(bytes.fromhex(hexdata))
    with pytest.raises(CorruptObjectError):
        loads(b"\x81" * 3000 + b"\x00")


def test_loads_mapping() -> None:
    assert loads_mapping(dumps({"a": 1})) == {"a": 1}
    for value in ([1], {1: "a"}, "text"):
        with pytest.raises(CorruptObjectError, match="not a map with string keys"):
            loads_mapping(dumps(value))


# -- depth ------------------------------------------------------------------------------------------


def _nested_list(levels: int) -> Any:
    value: Any = []
    for _ in range(levels - 1):
        value = [value]
    return value


def _nested_dict(levels: int) -> Any:
    value: Any = {}
    for _ in range(levels - 1):
        value = {"k": value}
    return value


@pytest.mark.parametrize("nest,head", [(_nested_list, b"\x81"), (_nested_dict, b"\xa1\x61k")])
def test_depth_limit_is_the_same_on_write_and_read(nest: Any, head: bytes) -> None:
    deepest = nest(MAX_DEPTH + 1)  # containers at levels 0..MAX_DEPTH
    data = dumps(deepest)
    assert loads(data) == deepest
    with pytest.raises(EncodingError, match=f"nested deeper than {MAX_DEPTH} levels"):
        dumps(nest(MAX_DEPTH + 2))
    with pytest.raises(CorruptObjectError, match=f"nested deeper than {MAX_DEPTH} levels"):
        loads(head + data)  # the same, one level deeper


def test_big_integer_at_the_deepest_level() -> None:
    value: Any = [2**70]
    for _ in range(MAX_DEPTH):
        value = [value]
    assert loads(dumps(value)) == value


@pytest.mark.parametrize("head", [b"\x81", b"\xa1\x61k", b"\x98\x18" + b"\x00" * 23])
def test_hostile_depth_on_read_is_refused_without_recursion(head: bytes) -> None:
    for levels in (3000, 100_000):
        with pytest.raises(CorruptObjectError, match=f"nested deeper than {MAX_DEPTH} levels"):
            loads(head * levels + b"\x00")


@pytest.mark.parametrize("nest", [_nested_list, _nested_dict])
def test_hostile_depth_on_write_is_an_encoding_error(nest: Any) -> None:
    with pytest.raises(EncodingError, match=f"nested deeper than {MAX_DEPTH} levels"):
        dumps(nest(3000))
    with pytest.raises(EncodingError, match=f"nested deeper than {MAX_DEPTH} levels"):
        check_value(nest(3000))


def test_check_value_does_not_recurse() -> None:
    """check_value needs no Python stack per level: called with little stack left it still ends in
    an EncodingError (a recursive walk would raise RecursionError here)."""
    cyclic: list[Any] = []
    cyclic.append(cyclic)

    def at_depth(n: int) -> BaseException | None:
        if n:
            return at_depth(n - 1)
        try:
            check_value(cyclic)
        except EncodingError as exc:
            return exc
        return None

    assert isinstance(at_depth(sys.getrecursionlimit() - 60), EncodingError)


def test_check_value_reports_paths_and_types() -> None:
    with pytest.raises(EncodingError) as info:
        check_value({"a": [1, {"b": object()}]})
    assert info.value.path == "a[1].b" and "type object is not storable" in info.value.reason
    with pytest.raises(EncodingError, match="dict key True of type bool"):
        check_value({"a": {True: 1}})
    with pytest.raises(EncodingError, match="dict key 1.5 of type float"):
        check_value([{1.5: 1}])
    check_value({"a": [1, (2, {3: b"x"})], 4: None})


# -- the memo of checked payloads -------------------------------------------------------------------


def test_checked_payloads_are_scanned_once_per_object(monkeypatch: pytest.MonkeyPatch) -> None:
    data = dumps([{"content": "x" * 100, "step": i} for i in range(32)])
    assert len(data) >= encoding._MEMO_MIN
    value = loads(data)
    calls: list[bytes] = []
    real_scan = encoding._scan
    monkeypatch.setattr(encoding, "_scan", lambda d, utf8=False: calls.append(d) or real_scan(d, utf8))
    assert loads(data) == value and calls == []  # the same bytes object again: not rescanned
    copy = bytes(bytearray(data))
    assert loads(copy) == value and calls == [copy]  # equal bytes, another object: scanned


def test_refused_payloads_are_not_remembered() -> None:
    bad = dumps(["x" * 2000]).replace(b"x", b"\xff", 1)  # invalid UTF-8: refused by cbor2 after the scan
    for _ in range(2):
        with pytest.raises(CorruptObjectError, match="invalid UTF-8"):
            loads(bad)
    assert encoding._MEMO.get(id(bad)) is not bad


# -- properties -------------------------------------------------------------------------------------


def _random_value(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.random()
    if depth >= 4 or roll < 0.55:
        kind = rng.randrange(9)
        if kind == 0:
            return rng.choice([None, True, False])
        if kind == 1:
            return rng.randint(-30, 30)
        if kind == 2:
            return rng.getrandbits(rng.choice((8, 16, 32, 64))) * rng.choice((1, -1))
        if kind == 3:
            return rng.randint(-2**80, 2**80)
        if kind == 4:
            return rng.choice((0.0, -0.0, 1.5, 0.1, math.inf, -math.inf, 1e300, 5e-324))
        if kind == 5:
            return rng.uniform(-1e6, 1e6) * 10 ** rng.randint(-40, 40)
        if kind == 6:
            return struct.unpack(">f", struct.pack(">f", rng.uniform(-1e6, 1e6)))[0]
        if kind == 7:
            return "".join(rng.choice("ab é€😀\x00") for _ in range(rng.choice((0, 3, 30, 300))))
        return rng.randbytes(rng.choice((0, 5, 30, 300)))
    if roll < 0.8:
        return [_random_value(rng, depth + 1) for _ in range(rng.randint(0, 30 if depth == 0 else 5))]
    keys = [rng.choice((rng.randint(-1000, 1000), rng.randint(2**64, 2**70),
                        "".join(rng.choice("abcé") for _ in range(rng.randint(0, 5)))))
            for _ in range(rng.randint(0, 6))]
    return {k: _random_value(rng, depth + 1) for k in keys}


def _key_orders(value: Any) -> Any:
    """The keys of every map in ``value``, in their order (nested lists of keys and children)."""
    if isinstance(value, dict):
        return [(k, _key_orders(v)) for k, v in value.items()]
    if isinstance(value, list | tuple):
        return [_key_orders(v) for v in value]
    return None


def test_random_values_round_trip() -> None:
    rng = random.Random(20260101)
    for _ in range(400):
        value = _random_value(rng)
        data = dumps(value)
        back = loads(data)
        assert back == value
        assert dumps(back) == data
        data = dumps(value, ordered=True)
        back = loads(data)
        assert back == value and _key_orders(back) == _key_orders(value)
        assert dumps(back, ordered=True) == data


def _str_keyed(rng: random.Random, depth: int = 0) -> Any:
    """A value dumps' fast path takes: no floats, every key a str (multi-byte, empty, same lengths)."""
    roll = rng.random()
    if depth >= 4 or roll < 0.5:
        return rng.choice([None, True, False, rng.randint(-2**70, 2**70), rng.randint(-30, 30), rng.randbytes(rng.randrange(40)),
                           "".join(rng.choice("ab é€😀\x00") for _ in range(rng.randrange(30)))])
    if roll < 0.7:
        return [_str_keyed(rng, depth + 1) for _ in range(rng.randint(0, 6))]
    if roll < 0.75:
        return tuple(_str_keyed(rng, depth + 1) for _ in range(rng.randint(0, 3)))
    keys = ["".join(rng.choice("abzé€😀") for _ in range(rng.randint(0, 4))) for _ in range(rng.randint(0, 8))]
    return {k: _str_keyed(rng, depth + 1) for k in keys}


def test_fast_path_writes_exactly_cbor2_canonical_bytes() -> None:
    rng = random.Random(20261123)
    for _ in range(2000):
        value = _str_keyed(rng)
        assert dumps(value) == cbor2.dumps(value, canonical=True)
    for _ in range(300):  # floats and int keys take the general path, same bytes
        value = _random_value(rng)
        assert dumps(value) == cbor2.dumps(value, canonical=True)


def test_ordered_fast_path_writes_what_the_general_path_writes() -> None:
    rng = random.Random(20261124)
    for _ in range(2000):
        value = _str_keyed(rng)
        fast = dumps(value, ordered=True)
        assert fast == cbor2.dumps(value)  # cbor2 keeps the order outside its canonical mode
        assert fast == b"".join(encoding._ordered_bytes(value, []))


def test_fast_path_refuses_what_check_value_refuses() -> None:
    class Sub(str):
        pass

    for bad, where in (({"a": {1.5j}}, "x.a"), ({"a": [object()]}, "x.a[0]"), ({(1,): 1}, "x")):
        with pytest.raises(EncodingError) as info:
            dumps(bad, "x")
        assert info.value.path == where
    assert dumps({Sub("k"): Sub("v")}) == cbor2.dumps({"k": "v"}, canonical=True)
    with pytest.raises(EncodingError):
        dumps({"a": "\udc80"})  # a lone surrogate is not UTF-8
    with pytest.raises(EncodingError, match="lone surrogate") as info:
        dumps({"b": {"\ud800": 1}}, "x")  # nor in a key
    assert info.value.path == "x.b"


def test_mutated_payloads_are_refused_or_canonical() -> None:
    """Whatever loads accepts, dumps writes back byte for byte (keeping its maps' key order): it
    accepts only the forms dumps writes."""
    rng = random.Random(7)
    accepted = 0
    for i in range(3000):
        data = bytearray(dumps(_random_value(rng), ordered=bool(i % 2)))
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(len(data) + 1)
            roll = rng.random()
            if roll < 0.5 and data:
                data[min(at, len(data) - 1)] = rng.getrandbits(8)
            elif roll < 0.75:
                data.insert(at, rng.getrandbits(8))
            elif data:
                del data[min(at, len(data) - 1)]
        try:
            value = loads(bytes(data))
        except CorruptObjectError as exc:
            assert "does not decode as CBOR" not in exc.reason  # the scan explained every refusal
            continue
        accepted += 1
        assert dumps(value, ordered=True) == bytes(data)
    assert accepted > 100


def _float_accepted(raw: bytes) -> bool:
    try:
        loads(raw)
    except CorruptObjectError as exc:
        assert "non-canonical float encoding" in exc.reason
        return False
    return True


def test_floats_accepted_exactly_in_cbor2_canonical_form() -> None:
    rng = random.Random(3)
    candidates = [b"\xf9" + h.to_bytes(2, "big") for h in range(1 << 16)]
    for h in range(0, 1 << 16, 7):
        half = struct.unpack(">e", h.to_bytes(2, "big"))[0]
        candidates += [b"\xfa" + struct.pack(">f", half), b"\xfb" + struct.pack(">d", half)]
    for _ in range(5000):
        single = struct.unpack(">f", rng.getrandbits(32).to_bytes(4, "big"))[0]
        candidates += [b"\xfa" + rng.getrandbits(32).to_bytes(4, "big"),
                       b"\xfb" + rng.getrandbits(64).to_bytes(8, "big"), b"\xfb" + struct.pack(">d", single),
                       b"\xfa" + (rng.getrandbits(24) << 8).to_bytes(4, "big"),
                       b"\xfb" + (rng.getrandbits(56) << 8).to_bytes(8, "big")]
    for raw in candidates:
        assert _float_accepted(raw) == (cbor2.dumps(cbor2.loads(raw), canonical=True) == raw), raw.hex()
