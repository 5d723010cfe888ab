"""The display decoders of the format layer: ``format.msgpack`` (pure-Python msgpack, bounded) reads
what ormsgpack writes, and ``format.lgserde`` shows LangGraph's serialised values as plain data
(messages as {type, content, ...}, objects as {"$type", fields}) without importing or building
anything, and turns hostile bytes into bounded stubs instead of errors."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
import random
import struct
import sys
import uuid
from typing import Any

import ormsgpack
import pytest
from conftest import bounded
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.types import Interrupt, Send
from pydantic import BaseModel

from gitstate.format import lgserde, msgpack

SERDE = JsonPlusSerializer()


@dataclasses.dataclass
class Plan:
    steps: list[str]
    due: dt.datetime


class Model(BaseModel):
    x: int
    tags: list[str] = []


def _random_value(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(9 if depth < 4 else 6)
    if kind == 0:
        return rng.choice([None, True, False])
    if kind == 1:
        return rng.choice([0, 1, 127, 128, 255, 256, 65535, 65536, 2**32, 2**64 - 1, -1, -32, -33, -2**63])
    if kind == 2:
        return rng.choice([0.5, -1e300, float("inf")])
    if kind == 3:
        return "".join(rng.choice("aé€😀\n") for _ in range(rng.choice([0, 5, 31, 32, 300])))
    if kind == 4:
        return bytes(rng.randrange(256) for _ in range(rng.choice([0, 3, 300])))
    if kind == 5:
        return rng.randrange(-(2**40), 2**40)
    if kind == 6:
        return [_random_value(rng, depth + 1) for _ in range(rng.choice([0, 3, 15, 16, 40]))]
    if kind == 7:
        return {f"k{i}": _random_value(rng, depth + 1) for i in range(rng.choice([0, 2, 15, 16, 20]))}
    return {i: _random_value(rng, depth + 1) for i in range(3)}  # non-text keys (OPT_NON_STR_KEYS)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def test_reads_what_ormsgpack_writes() -> None:
    rng = random.Random(7)
    for _ in range(300):
        value = _random_value(rng)
        data = ormsgpack.packb(value, option=ormsgpack.OPT_NON_STR_KEYS)
        assert _same(msgpack.unpack(data), value), value
    assert msgpack.unpack(b"\xca" + struct.pack(">f", 1.5)) == 1.5  # float32 (ormsgpack writes float64)
    assert msgpack.unpack(b"\xd6\xff" + struct.pack(">I", 1_700_000_000)) == "2023-11-14T22:13:20+00:00"
    assert msgpack.unpack(b"\xd5\x09ab") == {"$ext": 9, "size": 2}


@pytest.mark.parametrize("data, why", [
    (b"", "truncated"), (b"\xc1", "reserved byte"), (b"\x92\x01", "claims 2 items"),
    (b"\xdd\xff\xff\xff\xff", "claims 4294967295 items"), (b"\xdb\xff\xff\xff\xff", "truncated"),
    (b"\x01\x02", "after the value"), (b"\xc7\x05\x01ab", "truncated"),
])
def test_malformed_msgpack_is_one_error(data: bytes, why: str) -> None:
    with pytest.raises(msgpack.MsgpackError, match=why):
        msgpack.unpack(data)


def test_nesting_and_work_are_bounded() -> None:
    deep = b"\x91" * 200_000 + b"\xc0"  # 200,000 nested arrays: skipped iteratively past the limit
    shown = bounded(lambda: msgpack.unpack(deep))
    for _ in range(msgpack.MAX_DEPTH):
        assert isinstance(shown, list) and len(shown) == 1
        shown = shown[0]
    assert shown == {"$more": f"nested deeper than {msgpack.MAX_DEPTH} levels"}
    maps = b"\x81\xa1k" * 100_000 + b"\xc0"
    assert "$more" in json.dumps(bounded(lambda: msgpack.unpack(maps)))
    with pytest.raises(msgpack.MsgpackError, match="more items"):
        msgpack.unpack(b"\xdc\x00\x10" + b"\x00" * 16, max_items=10)
    # extensions nested in extension payloads count as levels too (code 7 shows its payload as is)
    payload = b"\xc0"
    for _ in range(100):
        payload = b"\xc8" + len(payload).to_bytes(2, "big") + b"\x07" + payload
    shown = bounded(lambda: lgserde.show_msgpack(b"\x91" * 10 + payload))
    assert json.dumps(shown).count("[") == 10 and "$more" in json.dumps(shown)


def test_langgraph_values_are_shown_as_plain_data() -> None:
    when = dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    value = {
        "messages": [HumanMessage("hello", id="h1"),
                     AIMessage("", id="a1", tool_calls=[{"name": "search", "args": {"q": "x"}, "id": "c1"}]),
                     ToolMessage("42", tool_call_id="c1", id="t1")],
        "plan": Plan(["a", "b"], when), "model": Model(x=1), "id": uuid.UUID(int=5), "tags": {"x"},
        "send": Send("node", {"a": 1}), "stop": Interrupt(value={"q": "ok?"}, id="i1"), "raw": b"\x00\x01",
    }
    shown = lgserde.show_typed(*SERDE.dumps_typed(value))
    assert shown["messages"] == [
        {"type": "human", "content": "hello", "id": "h1"},
        {"type": "ai", "content": "", "id": "a1",
         "tool_calls": [{"name": "search", "args": {"q": "x"}, "id": "c1", "type": "tool_call"}]},
        {"type": "tool", "content": "42", "id": "t1", "tool_call_id": "c1", "status": "success"},
    ]
    assert shown["plan"] == {"$type": f"{__name__}.Plan", "steps": ["a", "b"],
                             "due": {"$type": "datetime.datetime", "value": when.isoformat()}}
    assert shown["model"] == {"$type": f"{__name__}.Model", "x": 1, "tags": []}
    assert shown["id"] == {"$type": "uuid.UUID", "value": str(uuid.UUID(int=5))}
    assert shown["tags"] == {"$type": "builtins.set", "value": ["x"]}
    assert shown["send"] == {"$type": "langgraph.types.Send", "args": ["node", {"a": 1}]}
    assert shown["stop"]["$type"] == "langgraph.types.Interrupt" and shown["stop"]["value"] == {"q": "ok?"}
    assert shown["raw"] == b"\x00\x01"
    assert lgserde.show_typed(*SERDE.dumps_typed(None)) is None
    assert lgserde.show_typed(*SERDE.dumps_typed(b"xy")) == b"xy"


def test_unknown_types_are_named_never_imported() -> None:
    def ext(code: int, *record: Any) -> ormsgpack.Ext:
        return ormsgpack.Ext(code, ormsgpack.packb(record))

    module = "gitstate_probe_never_imported"
    data = ormsgpack.packb({
        "a": ext(1, "os", "system", ["touch /tmp/pwned"]),
        "b": ext(2, module, "Thing", {"x": 1}),
        "c": ext(3, "builtins", "eval", "1+1", "__call__"),
        "d": ext(5, module, "Model", {"y": 2}, "model_validate_json"),
    })
    shown = lgserde.show_typed("msgpack", data)
    assert shown == {
        "a": {"$type": "os.system", "args": ["touch /tmp/pwned"]},
        "b": {"$type": f"{module}.Thing", "x": 1},
        "c": {"$type": "builtins.eval", "value": "1+1", "$method": "__call__"},
        "d": {"$type": f"{module}.Model", "y": 2},
    }
    assert module not in sys.modules


@pytest.mark.parametrize("kind, payload, expect", [
    ("msgpack", b"\xc1", "not msgpack"),
    ("msgpack", b"\x92\x01", "not msgpack"),
    ("msgpack", b"\xd5\x01\xc1\x00", "payload is not msgpack"),  # an extension whose payload is garbage
    ("msgpack", b"\xd4\x02\x07", "malformed record"),  # a constructor record that is not [module, name, ...]
    ("msgpack", b"\xd4\x06\x07", "malformed numpy record"),
    ("msgpack", b"\xd4\x63\x07", '"$ext": 99'),
    ("json", b"[" * 100_000, "not JSON"),
    ("json", b"1" * 100_000, '"digits": 100000'),
    ("json", b"\xff\xfe", "not JSON"),
    ("pickle", b"cos\nsystem\n(S'true'\ntR.", '"$pickle"'),
    ("weird", b"abc", "unknown serde type"),
])
def test_hostile_bytes_are_shown_as_bounded_stubs(kind: str, payload: bytes, expect: str) -> None:
    shown = bounded(lambda: lgserde.show_typed(kind, payload))
    text = json.dumps(shown, default=repr)
    assert expect in text and len(text) < 2000


def test_json_payloads_of_older_langgraph() -> None:
    lc = {"lc": 1, "type": "constructor", "id": ["langchain", "schema", "messages", "HumanMessage"],
          "kwargs": {"content": "hi", "type": "human", "additional_kwargs": {}}}
    other = {"lc": 2, "type": "constructor", "id": ["pkg", "mod", "Thing"], "kwargs": {"a": 1}}
    shown = lgserde.show_typed("json", json.dumps({"m": lc, "o": other, "n": [1, 2.5]}).encode())
    assert shown == {"m": {"type": "human", "content": "hi"}, "o": {"$type": "pkg.mod.Thing", "a": 1},
                     "n": [1, 2.5]}


def test_write_records_and_payloads() -> None:
    records = [["task", "messages", *SERDE.dumps_typed([HumanMessage("x", id="1")]), "~__pregel_pull, agent", 0],
               ["task", "__interrupt__", *SERDE.dumps_typed([Interrupt(value="why?", id="i")]),
                "~__pregel_pull, review", -3]]
    assert lgserde.is_write_records(records) and not lgserde.is_write_records([["x"]])
    shown = lgserde.show_writes(records)
    assert shown[0] == {"task": "task", "path": "~__pregel_pull, agent", "node": "agent", "channel": "messages",
                        "idx": 0, "value": [{"type": "human", "content": "x", "id": "1"}]}
    assert shown[1]["node"] == "review" and shown[1]["value"][0]["value"] == "why?"
    payload = {"checkpoint": list(SERDE.dumps_typed({"id": "c1"})), "metadata": list(SERDE.dumps_typed({"step": 2}))}
    assert lgserde.show_payload(payload) == {"checkpoint": {"id": "c1"}, "metadata": {"step": 2}}


def test_join_target_is_the_node_a_complete_barrier_triggers() -> None:
    from gitstate.format.lgtree import join_target

    shown = {"$type": "builtins.set", "value": ["a", "b"]}
    assert join_target("join:a+b:join", {"a", "b"}) == "join"
    assert join_target("join:a+b:join", shown) == "join"
    assert join_target("join:a+b:join", {"a"}) is None  # still waiting for b
    assert join_target("join:a+b:join", set()) is None  # consumed: the join ran
    assert join_target("join:a+b:d", ({"a", "b"}, True)) == "d"  # a deferred node, finished
    assert join_target("join:a+b:d", [["a", "b"], False]) is None  # not finished yet
    assert join_target("join:x+y+c:d", {"x+y", "c"}) == "d"  # a node name holding "+"
    assert join_target("branch:to:a", {"a"}) is None
    assert join_target("join:nocolon", {"nocolon"}) is None
    assert join_target("join:a+b:join", [["a"], "b"]) is None  # malformed: no exception
    assert join_target("join:a+b:join", {"$type": "builtins.set", "value": "ab"}) is None
