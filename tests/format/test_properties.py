"""Properties (hypothesis) of the encoding, the ref-name encoding and the reference
grammar, over generated input: plain values round-trip through ``dumps``/``loads`` in one form per
key order (``ordered``: maps keep their key order; the canonical form sorts them, as format 1
wrote every payload, and still decodes) and any other bytes are refused with a CorruptObjectError;
any text encodes to one valid ref component and back; any reference text resolves to a checkpoint
of the store or raises a GitStateError, and references built from the store's runs, branches,
nodes and ids resolve to the checkpoint they name.

Each property runs a modest number of examples with no deadline (the machine is shared). Failing
examples are kept in hypothesis's database, ``.hypothesis/`` (which ignores itself in git), and
tried first on the next run."""

from __future__ import annotations

import datetime
import math
import random
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import cbor2
import pygit2
import pytest
from conftest import make_repo, scrub_git_env
from hypothesis import HealthCheck, assume, given, reject, settings
from hypothesis import strategies as st

import gitstate
from gitstate.errors import (
    AmbiguousReferenceError,
    CheckpointNotFound,
    CorruptObjectError,
    EncodingError,
    GitStateError,
    InvalidNameError,
    InvalidReferenceError,
)
from gitstate.format.encoding import MAX_DEPTH, check_value, dumps, loads, loads_mapping
from gitstate.format.names import (
    MAX_COMPONENT,
    NAMESPACE,
    ParsedRef,
    branch_ref,
    check_name,
    decode_component,
    encode_component,
    node_log_ref,
    parse_ref,
    run_info_ref,
)
from gitstate.store import refspec


def props(examples: int) -> settings:
    """Settings of one property: ``examples`` examples, no deadline (generating the longest texts
    may take a while on a busy machine)."""
    return settings(max_examples=examples, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# -- encoding ---------------------------------------------------------------------------------------

BIG = 2**64
INTEGERS = st.one_of(
    st.integers(),
    st.integers(min_value=-(2**300), max_value=2**300),
    st.sampled_from([23, 24, 255, 256, 2**16, 2**32, BIG - 1, BIG, BIG + 1, -BIG, -BIG - 1, 2**63, -(2**63) - 1]),
)
FLOATS = st.one_of(st.floats(), st.floats(width=32), st.floats(width=16),
                   st.sampled_from([0.0, -0.0, math.inf, -math.inf, math.nan, 5e-324, 65504.0, 1e300]))
# text of any character, lone surrogates aside (text with one cannot be stored)
TEXT = st.text(max_size=30)
SCALARS = st.one_of(st.none(), st.booleans(), INTEGERS, FLOATS, TEXT, st.binary(max_size=40))
KEYS = st.one_of(st.text(max_size=10), INTEGERS)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=6), st.dictionaries(KEYS, inner, max_size=6)),
    max_leaves=40,
)


def same(a: Any, b: Any) -> bool:
    """Equal values of equal types (``True`` is not ``1``), floats bit for bit but NaN (whose
    canonical form is the one NaN), so ``-0.0`` is not ``0.0``."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return bool(a == b)


def same_order(a: Any, b: Any) -> bool:
    """:func:`same`, and every map's keys in the same order (tuples read back as lists)."""
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(same_order(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return list(a) == list(b) and all(same_order(a[k], b[k]) for k in a)
    return same(a, b)


def reordered(value: Any, rnd: random.Random) -> Any:
    """``value`` with every dict rebuilt in a shuffled insertion order and lists as tuples."""
    if isinstance(value, list):
        return tuple(reordered(item, rnd) for item in value)
    if isinstance(value, dict):
        keys = list(value)
        rnd.shuffle(keys)
        return {key: reordered(value[key], rnd) for key in keys}
    return value


def canonical_key(key: Any) -> tuple[int, bytes]:
    raw = cbor2.dumps(key)
    return len(raw), raw


def keys_in_canonical_order(value: Any) -> bool:
    if isinstance(value, list):
        return all(keys_in_canonical_order(item) for item in value)
    if isinstance(value, dict):
        keys = list(value)
        return keys == sorted(keys, key=canonical_key) and all(keys_in_canonical_order(v) for v in value.values())
    return True


@props(200)
@given(VALUES)
def test_plain_values_round_trip_in_one_canonical_form(value: Any) -> None:
    check_value(value)
    data = dumps(value)
    back = loads(data)
    assert same(back, value)
    assert dumps(back) == data  # the decoder's own check accepted it, and it is a fixed point
    assert data == cbor2.dumps(value, canonical=True)  # the fast path writes what canonical mode does
    assert keys_in_canonical_order(back)  # no insertion order kept: maps decode in canonical order


@props(150)
@given(VALUES, st.randoms(use_true_random=False))
def test_canonical_encoding_ignores_insertion_order_and_tuples(value: Any, rnd: random.Random) -> None:
    assert dumps(reordered(value, rnd)) == dumps(value)


@props(200)
@given(VALUES, st.randoms(use_true_random=False))
def test_ordered_encoding_keeps_key_order_deterministically(value: Any, rnd: random.Random) -> None:
    """Format 2: maps decode with their keys in the order written; the same value with its keys in
    the same order gives the same bytes (tuples are lists), another order other bytes."""
    shuffled = reordered(value, rnd)
    data = dumps(shuffled, ordered=True)
    back = loads(data)
    assert same_order(back, shuffled)
    assert dumps(back, ordered=True) == data  # a fixed point, so equal states keep equal ids
    assert dumps(reordered(value, random.Random(0)), ordered=True) == dumps(reordered(value, random.Random(0)),
                                                                           ordered=True)
    assert (data == dumps(value, ordered=True)) == same_order(shuffled, value)
    assert dumps(back) == dumps(value)  # and the canonical form of the value is unchanged


@props(150)
@given(VALUES)
def test_canonical_payloads_of_format_1_still_decode(value: Any) -> None:
    """Bytes format 1 wrote (cbor2's canonical form) decode as before, keys in canonical order,
    and the ordered encoder writes them back unchanged (same object ids)."""
    data = cbor2.dumps(value, canonical=True)
    back = loads(data)
    assert same(back, value) and keys_in_canonical_order(back)
    assert dumps(back, ordered=True) == data


@props(100)
@given(st.integers(min_value=0, max_value=MAX_DEPTH + 3), st.sampled_from(["list", "dict"]), SCALARS)
def test_depth_limit_on_write_and_read(levels: int, kind: str, leaf: Any) -> None:
    """``levels`` nested containers: stored up to MAX_DEPTH + 1 of them; deeper is an
    EncodingError on write, and its bytes (encoded by cbor2 itself) a CorruptObjectError on read."""
    value = leaf
    for _ in range(levels):
        value = [value] if kind == "list" else {"k": value}
    if levels <= MAX_DEPTH + 1:
        assert same(loads(dumps(value)), value)
    else:
        with pytest.raises(EncodingError):
            check_value(value)
        with pytest.raises(EncodingError):
            dumps(value)
        with pytest.raises(CorruptObjectError):
            loads(cbor2.dumps(value, canonical=True))


class Odd:
    """An object no payload may hold."""


UNSTORABLE = st.one_of(
    st.just(Odd()), st.just({1, 2}), st.just(1 + 2j), st.just(frozenset()), st.just(bytearray(b"x")),
    st.dictionaries(st.one_of(st.booleans(), st.floats(), st.tuples(st.integers()), st.none()), SCALARS,
                    min_size=1, max_size=2),
    st.dictionaries(st.integers(0xD800, 0xDFFF).map(chr), SCALARS, min_size=1, max_size=1),  # key not UTF-8
)
MAYBE_STORABLE = st.recursive(
    st.one_of(SCALARS, UNSTORABLE),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=4), inner, max_size=4)),
    max_leaves=12,
)


def storable(value: Any) -> bool:
    """Whether ``value`` is plain data (the model check_value is held to). Text values here hold no
    lone surrogate: check_value looks at types and keys, not inside text, which dumps refuses."""
    if value is None or type(value) in (bool, int, float, str, bytes):
        return True
    if type(value) is list:
        return all(storable(item) for item in value)
    if type(value) is dict:
        for key in value:
            if type(key) not in (str, int):
                return False
            if type(key) is str and any(0xD800 <= ord(c) < 0xE000 for c in key):
                return False
        return all(storable(item) for item in value.values())
    return False


@props(150)
@given(MAYBE_STORABLE)
def test_check_value_and_dumps_refuse_the_same_values(value: Any) -> None:
    if storable(value):
        check_value(value)
        assert same(loads(dumps(value)), value)
        return
    with pytest.raises(EncodingError):
        check_value(value)
    with pytest.raises(EncodingError):
        dumps(value)


def accepted_or_refused(data: bytes) -> None:
    """``loads`` either returns plain data that encodes back to exactly ``data`` or raises a
    CorruptObjectError (a GitStateError); same for ``loads_mapping``, which also wants a map."""
    try:
        value = loads(data)
    except CorruptObjectError:
        value = None
        ok = False
    else:
        ok = True
        assert dumps(value, ordered=True) == data
    try:
        mapping = loads_mapping(data)
    except CorruptObjectError:
        assert not ok or not isinstance(value, dict) or not all(isinstance(k, str) for k in value)
    else:
        assert ok and isinstance(mapping, dict) and all(isinstance(k, str) for k in mapping)


@props(200)
@given(st.binary(max_size=64))
def test_arbitrary_bytes_decode_or_raise_corrupt_object(data: bytes) -> None:
    accepted_or_refused(data)


MUTATION = st.tuples(st.sampled_from(["set", "insert", "delete", "truncate", "append", "splice"]),
                     st.integers(min_value=0), st.binary(min_size=1, max_size=9))


def mutate(data: bytes, mutations: list[tuple[str, int, bytes]]) -> bytes:
    out = bytearray(data)
    for kind, where, raw in mutations:
        at = where % (len(out) + 1)
        if kind == "set" and out:
            out[min(at, len(out) - 1)] = raw[0]
        elif kind == "insert":
            out[at:at] = raw[:1]
        elif kind == "delete" and out:
            del out[min(at, len(out) - 1)]
        elif kind == "truncate":
            del out[at:]
        elif kind == "append":
            out += raw
        elif kind == "splice":
            out[at:at + len(raw)] = raw
    return bytes(out)


@props(200)
@given(VALUES, st.lists(MUTATION, min_size=1, max_size=3))
def test_mutated_encodings_decode_or_raise_corrupt_object(value: Any, mutations: list[tuple[str, int, bytes]]) -> None:
    accepted_or_refused(mutate(dumps(value), mutations))
    accepted_or_refused(mutate(dumps(value, ordered=True), mutations))


HOSTILE_LEAVES = st.one_of(
    SCALARS,
    st.builds(cbor2.CBORTag, st.integers(0, 2**16), SCALARS),
    st.just(cbor2.undefined), st.builds(cbor2.CBORSimpleValue, st.integers(32, 255)),
    st.datetimes(timezones=st.just(datetime.UTC)), st.decimals(allow_nan=False),
    st.frozensets(st.integers(), max_size=3), st.fractions(),
)
HOSTILE = st.recursive(
    HOSTILE_LEAVES,
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.one_of(KEYS, st.floats(allow_nan=False), st.binary(max_size=3)), inner,
                                            max_size=4)),
    max_leaves=10,
)


@props(150)
@given(HOSTILE, st.booleans())
def test_other_cbor_decodes_as_plain_data_or_raises(value: Any, canonical: bool) -> None:
    """CBOR that cbor2 writes for other objects (tags, dates, sets, undefined, non-canonical
    floats and key orders) is refused, or when it is plain canonical data decodes as such."""
    try:
        data = cbor2.dumps(value, canonical=canonical)
    except (cbor2.CBOREncodeError, ValueError, TypeError):
        reject()
    accepted_or_refused(data)


# -- names -----------------------------------------------------------------------------------------

ANY_CHAR = st.one_of(st.characters(), st.integers(0xD800, 0xDFFF).map(chr),
                     st.sampled_from(list("%/.~^:?*[\\@{} \t\n\x00\x7f")))
ANY_TEXT = st.text(ANY_CHAR, max_size=40)
SAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_+=,@-%")


def valid_component(enc: str) -> bool:
    """git check-ref-format's rules for one component, re-stated: not empty, no '.' first or
    '.lock' last, no '..', '@{', control characters, space, ~ ^ : ? * [ \\ or '/' (a lone '@' is refused
    only as a whole ref name)."""
    if not enc or enc.startswith(".") or enc.endswith(".lock"):
        return False
    if ".." in enc or "@{" in enc:
        return False
    return not any(ord(c) < 0x20 or c in " ~^:?*[\\/\x7f" for c in enc)


@props(200)
@given(ANY_TEXT)
def test_component_encoding_round_trips_to_valid_components(name: str) -> None:
    enc = encode_component(name)
    assert decode_component(enc) == name
    assert enc and set(enc) <= SAFE  # also no '.', so none of git's dot rules can bite
    assert valid_component(enc)
    assert pygit2.reference_is_valid_name(f"{NAMESPACE}wt/runs/{enc}/heads/{enc}")


@props(60)
@given(ANY_TEXT)
def test_git_accepts_encoded_components(name: str) -> None:
    enc = encode_component(name)
    out = subprocess.run(["git", "check-ref-format", f"{NAMESPACE}wt/runs/{enc}/run"], capture_output=True,
                         check=False)
    assert out.returncode == 0, (name, enc, out.stderr)


@props(200)
@given(st.text(st.one_of(st.sampled_from(list("%0123456789ABCDEFabcdef")), ANY_CHAR), min_size=1, max_size=20))
def test_decoding_refuses_what_the_encoder_cannot_write(text: str) -> None:
    """(Not for ``""``, which no ref component is: it decodes to itself, for session files.)"""
    try:
        name = decode_component(text)
    except ValueError:
        return
    assert encode_component(name) == text  # so two components never decode to one name


@props(200)
@given(st.one_of(ANY_TEXT, st.text(ANY_CHAR, min_size=30, max_size=250), st.text(max_size=250)),
       st.one_of(st.text(max_size=20), ANY_TEXT))
def test_check_name_accepts_exactly_what_refs_can_hold(name: str, run_id: str) -> None:
    enc = encode_component(name)
    utf8 = not any(0xD800 <= ord(c) < 0xE000 for c in name)
    if name and utf8 and len(enc) <= MAX_COMPONENT:
        assert check_name("branch name", name) == enc
        try:
            check_name("run id", run_id)
        except InvalidNameError:
            return
        assert parse_ref(branch_ref("wt", run_id, name)) == ParsedRef("wt", run_id, "heads", name)
        assert parse_ref(node_log_ref("wt", run_id, name)) == ParsedRef("wt", run_id, "nodes", name)
        assert parse_ref(run_info_ref("wt", run_id)) == ParsedRef("wt", run_id, "run", None)
    else:
        with pytest.raises(InvalidNameError):
            check_name("branch name", name)
        with pytest.raises(InvalidNameError):
            branch_ref("wt", "r", name)


@props(50)
@given(st.one_of(st.none(), st.integers(), st.binary(), st.lists(st.text(), max_size=2)))
def test_check_name_refuses_other_types(name: Any) -> None:
    with pytest.raises(InvalidNameError):
        check_name("run id", name)


# -- the reference grammar --------------------------------------------------------------------------


@dataclass
class World:
    """One store and what it holds: each branch's line (ids, tip first), the exit of each node on
    each branch, each checkpoint's first-parent history (itself first) and run."""

    store: gitstate.Store
    lines: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    nodes: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)
    history: dict[str, list[str]] = field(default_factory=dict)
    run_of: dict[str, str] = field(default_factory=dict)
    refs: list[tuple[str, str]] = field(default_factory=list)

    def line(self, run: str, branch: str, ids: list[str]) -> None:
        self.lines[(run, branch)] = ids
        for i, oid in enumerate(ids):
            self.history.setdefault(oid, ids[i:])
            self.run_of[oid] = run


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    """Runs whose names hold the grammar's characters: ``r`` (branches ``main``, ``alt``, a
    literal ``fix~3``, a kept copy ``main@origin``; nodes ``plan`` and ``n:1``), ``a`` and ``a@b``
    (``a@b`` is a run, not branch ``b`` of ``a``), ``s:1`` (node ``x``) and the hex-looking
    ``deadbeef``."""
    with pytest.MonkeyPatch.context() as mp:
        scrub_git_env(mp, tmp_path_factory.mktemp("home"))
        path = make_repo(tmp_path_factory.mktemp("refs") / "repo")
        store = gitstate.open_store(path)
        w = World(store)
        r = store.open_run("r")
        c = [r.checkpoint({"i": 0}), r.checkpoint({"i": 1})]
        with r.node("plan") as plan:
            c += [plan.checkpoint({"i": 2}), plan.checkpoint({"i": 3})]
        with r.node("n:1") as n1:
            c.append(n1.checkpoint({"i": 4}))
        c.append(r.checkpoint({"i": 5}))
        ids = [cp.id for cp in reversed(c)]
        assert plan.exit is not None and n1.exit is not None
        w.line("r", "main", ids)
        w.nodes[("r", "main")] = {"plan": plan.exit.id, "n:1": n1.exit.id}
        r.fork(c[3].id, "alt")
        alt = [r.checkpoint({"alt": i}, branch="alt").id for i in range(2)]
        w.line("r", "alt", alt[::-1] + ids[2:])
        w.nodes[("r", "alt")] = {"plan": plan.exit.id}
        r.fork(c[1].id, "fix~3")
        w.line("r", "fix~3", [r.checkpoint({"fix": 0}, branch="fix~3").id] + ids[4:])
        w.nodes[("r", "fix~3")] = {}
        r.fork(c[4].id, "main@origin")
        w.line("r", "main@origin", ids[1:])
        w.nodes[("r", "main@origin")] = dict(w.nodes[("r", "main")])
        for run_id, n in (("a", 3), ("a@b", 2), ("deadbeef", 1)):
            run = store.open_run(run_id)
            w.line(run_id, "main", [run.checkpoint({run_id: i}).id for i in range(n)][::-1])
            w.nodes[(run_id, "main")] = {}
        a = store.get_run("a")
        a.fork(w.lines[("a", "main")][-1], "c")
        w.line("a", "c", [a.checkpoint({"c": 0}, branch="c").id, w.lines[("a", "main")][-1]])
        w.nodes[("a", "c")] = {}
        s = store.open_run("s:1")
        first = s.checkpoint({"s": 0})
        with s.node("x") as x:
            x.checkpoint({"s": 1})
        assert x.exit is not None
        w.line("s:1", "main", [x.exit.id, first.id])
        w.nodes[("s:1", "main")] = {"x": x.exit.id}
        store.wait_for_housekeeping()
        w.refs = store.core.list_refs(NAMESPACE)
        yield w
        store.wait_for_housekeeping()
        store.close()


RUNS = ["r", "a", "a@b", "s:1", "deadbeef"]
WORDS = ["r", "a", "b", "c", "a@b", "s:1", "s", "1", "deadbeef", "main", "alt", "fix", "fix~3", "origin",
         "main@origin", "plan", "n:1", "n", "x", "nope", "@", "@@", "~", "~~", ":", ":node:", "node:", "node",
         "~0", "~1", "~2", "~3", "~9", "0", "3", "12", "", " ", "\x00", "\n", "/", ".", "%", "é", "\udc80",
         "٣", "ABCD"]
# runs of digits of any length: short ones, and ones longer than int() converts from text
DIGITS = st.one_of(st.integers(0, 25), st.integers(4000, 2 * sys.get_int_max_str_digits())).map(lambda n: "1" * n)


def reference_texts(w: World) -> st.SearchStrategy[str]:
    """Text made of the grammar's pieces, the store's names and id prefixes, or anything."""
    prefixes = st.sampled_from(sorted(w.history)).flatmap(
        lambda oid: st.integers(1, 40).map(lambda n: oid[:n]))
    piece = st.one_of(st.sampled_from(WORDS), prefixes, DIGITS, st.text(ANY_CHAR, max_size=3))
    shaped = st.tuples(st.one_of(st.sampled_from(RUNS), piece), st.one_of(st.just(""), piece.map("@".__add__)),
                       st.one_of(st.just(""), DIGITS.map("~".__add__), piece.map(":node:".__add__)))
    return st.one_of(shaped.map("".join), st.lists(piece, max_size=7).map("".join), ANY_TEXT)


def unchanged(w: World) -> None:
    assert w.store.core.list_refs(NAMESPACE) == w.refs


@props(200)
@given(st.data())
def test_any_reference_resolves_or_raises_a_gitstate_error(world: World, data: st.DataObject) -> None:
    text = data.draw(reference_texts(world), label="text")
    for name, call in (("resolve", lambda: refspec.resolve(world.store, text)),
                       ("locate", lambda: refspec.locate(world.store, text).checkpoint)):
        try:
            cp = call()
        except GitStateError:
            continue
        assert cp is not None and cp.id in world.history, name
    try:
        found = refspec.locate_branch(world.store, text)
    except GitStateError:
        pass
    else:
        assert (found.run, found.branch) in world.lines
        assert found.checkpoint is not None and found.checkpoint.id == world.lines[(found.run, found.branch)][0]
    unchanged(world)


@props(150)
@given(st.data())
def test_any_target_resolves_or_raises_a_gitstate_error(world: World, data: st.DataObject) -> None:
    run_id = data.draw(st.sampled_from(RUNS), label="run")
    branch = data.draw(st.sampled_from(["main", "alt", "fix~3", "nope"]), label="branch")
    text = data.draw(st.one_of(reference_texts(world),
                               st.tuples(st.sampled_from(["~", "@", "node:"]), reference_texts(world)).map("".join)),
                     label="text")
    run = world.store.get_run(run_id)
    try:
        cp = refspec.resolve_target(world.store, run, text, branch)
    except GitStateError:
        pass
    else:
        assert world.run_of[cp.id] == run_id
    unchanged(world)


def expect(w: World, text: str, expected: str | type[GitStateError], call: Any = None) -> None:
    """``text`` resolves (by ``call``, default :func:`refspec.resolve`) to checkpoint ``expected``
    or raises that error."""
    call = call or (lambda t: refspec.resolve(w.store, t))
    if isinstance(expected, str):
        assert call(text).id == expected, text
    else:
        with pytest.raises(expected):
            call(text)


def counts(ids: list[str]) -> st.SearchStrategy[str]:
    """``N`` of ``~N`` along a line of ``ids``: within it, just past it, or of any length."""
    return st.one_of(st.integers(0, len(ids) + 1).map(str), DIGITS.filter(bool))


def back_from(ids: list[str], back: str) -> str | type[GitStateError]:
    return ids[int(back)] if len(back) < 4 and int(back) < len(ids) else InvalidReferenceError


def steps(draw: Any, back: str) -> str:
    return f"~{back}" if back != "0" or draw(st.booleans(), label="~0") else ""


def id_text(w: World, draw: Any, oid: str) -> tuple[str, str | type[GitStateError]]:
    """A prefix of ``oid`` (any case) and what it names alone: ``oid``, or an ambiguity when
    another checkpoint shares it."""
    prefix = oid[:draw(st.integers(4, 40), label="digits")]
    if draw(st.booleans(), label="upper"):
        prefix = prefix.upper()
    assume(prefix not in RUNS)
    shared = [other for other in w.history if other.startswith(prefix.lower())]
    return prefix, oid if shared == [oid] else AmbiguousReferenceError


@props(200)
@given(st.data())
def test_references_built_from_the_store_resolve_to_what_they_name(world: World, data: st.DataObject) -> None:
    draw = data.draw
    kind = draw(st.sampled_from(["branch", "node", "id"]), label="kind")
    run_id, branch = draw(st.sampled_from(sorted(world.lines)), label="line")
    line = world.lines[(run_id, branch)]
    named = branch != "main" or draw(st.booleans(), label="named")
    base = run_id + (f"@{branch}" if named else "")
    if kind == "branch":
        back = draw(counts(line), label="back")
        expect(world, base + steps(draw, back), back_from(line, back))
    elif kind == "node":
        known = world.nodes[(run_id, branch)]
        name = draw(st.sampled_from(sorted({*known, "plan", "n:1", "x", "nope"})), label="node")
        expect(world, f"{base}:node:{name}", known.get(name, InvalidReferenceError))
    else:
        oid = draw(st.sampled_from(sorted(world.history)), label="id")
        prefix, named_cp = id_text(world, draw, oid)
        back = draw(counts(world.history[oid]), label="back")
        expected = back_from(world.history[oid], back) if isinstance(named_cp, str) else named_cp
        expect(world, prefix + steps(draw, back), expected)
    unchanged(world)


@props(200)
@given(st.data())
def test_targets_built_from_the_store_resolve_to_what_they_name(world: World, data: st.DataObject) -> None:
    draw = data.draw
    run_id, branch = draw(st.sampled_from(sorted(world.lines)), label="line")
    run = world.store.get_run(run_id)
    branches = sorted(b for r, b in world.lines if r == run_id)

    def target(text: str) -> Any:
        return refspec.resolve_target(world.store, run, text, branch)

    kind = draw(st.sampled_from(["back", "branch", "node", "other node", "id"]), label="kind")
    if kind == "back":
        back = draw(counts(world.lines[(run_id, branch)]), label="back")
        expect(world, f"~{back}", back_from(world.lines[(run_id, branch)], back), target)
    elif kind == "branch":
        other = draw(st.sampled_from(branches), label="branch")
        back = draw(counts(world.lines[(run_id, other)]), label="back")
        expect(world, f"@{other}" + steps(draw, back), back_from(world.lines[(run_id, other)], back), target)
    elif kind in ("node", "other node"):
        other = branch if kind == "node" else draw(st.sampled_from(branches), label="branch")
        known = world.nodes[(run_id, other)]
        name = draw(st.sampled_from(sorted({*known, "plan", "n:1", "x", "nope"})), label="node")
        text = f"node:{name}" if kind == "node" else f"@{other}:node:{name}"
        expect(world, text, known.get(name, InvalidReferenceError), target)
    else:
        oid = draw(st.sampled_from(sorted(world.history)), label="id")
        prefix, named_cp = id_text(world, draw, oid)
        expected = named_cp if world.run_of[oid] == run_id or not isinstance(named_cp, str) else CheckpointNotFound
        expect(world, prefix, expected, target)
    unchanged(world)
