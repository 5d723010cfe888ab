"""gitstate.format.frameworks: the shape checks of the integrations' states, as ``verify`` runs
them on decoded states (here the langgraph-store's, flat and sharded)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pygit2
import pytest

from gitstate.format import frameworks
from gitstate.format.statetree import MAP, StateReader, StateWriter, Written
from gitstate.git.objects import ObjectWriter

KIND = frameworks.KINDS[frameworks.LANGGRAPH_STORE]
ITEM = {"value": {"a": 1}, "created_at": "t", "updated_at": "t", "seq": 1}
MANY = frameworks.MEMORY_SHARD_AT + 1


def state(ns: dict[str, Any], v: int = 2) -> dict[str, Any]:
    return {"format": KIND, "v": v, "namespaces": {"users": {"namespace": ["users"], "seq": 1, **ns}}}


def sharded(keys: list[str], item: Any = ITEM) -> dict[str, Any]:
    shards: dict[str, Any] = {}
    for key in keys:
        shards.setdefault(hashlib.sha1(key.encode()).hexdigest()[:2], {})[key] = item
    return {"shards": shards}


def problem(ns: dict[str, Any], v: int = 3) -> str:
    found = frameworks.check_state(frameworks.LANGGRAPH_STORE, state(ns, v))
    assert found is not None
    return found


def test_flat_and_sharded_namespaces_are_sound() -> None:
    assert frameworks.check_state(frameworks.LANGGRAPH_STORE, state({"items": {"k": ITEM}})) is None
    keys = [f"k{i}" for i in range(MANY)]
    assert frameworks.check_state(frameworks.LANGGRAPH_STORE, state(sharded(keys), 3)) is None
    assert frameworks.memory_shard("k7") == hashlib.sha1(b"k7").hexdigest()[:2]


@pytest.mark.parametrize(("ns", "message"), [
    ({}, "has neither items nor shards"),
    ({"items": {}, "shards": {}}, "has both items and shards"),
    ({"items": []}, "items is not a map"),
    ({"shards": {"zz": {"k": ITEM}}}, "shard 'zz' is malformed"),
    ({"shards": {"0a": ["k"]}}, "shard '0a' is malformed"),
    ({"shards": {"00": {"k": ITEM}}}, "item 'k' is in shard 00, not 13"),
    (sharded(["k1", "k2"]), "2 items are sharded"),
    ({"shards": {**sharded([f"k{i}" for i in range(MANY)])["shards"], "ff": {}}}, "shard ff is empty"),
    (sharded([f"k{i}" for i in range(MANY)], {"value": 1}), "an item has no value map"),
])
def test_malformed_namespaces_are_named(ns: dict[str, Any], message: str) -> None:
    assert message in problem(ns)


def test_shards_need_version_3() -> None:
    assert "is sharded in a state of version 2" in problem(sharded([f"k{i}" for i in range(MANY)]), v=2)


def test_versions_past_what_this_reads_are_refused() -> None:
    found = frameworks.check_state(frameworks.LANGGRAPH_STORE, state({"items": {}}, frameworks.VERSION + 1))
    assert found is not None and "not supported" in found
    assert frameworks.WRITTEN < frameworks.VERSION  # what needs nothing newer stays readable by earlier versions


def many_namespaces(count: int, v: int = 3, shard: Any = None) -> dict[str, Any]:
    shards: dict[str, Any] = {}
    for i in range(count):
        name = f"u{i}"
        where = shard or hashlib.sha1(name.encode()).hexdigest()[:2]
        shards.setdefault(where, {})[name] = {"namespace": [name], "seq": i, "items": {"k": ITEM}}
    return {"format": KIND, "v": v, "namespace_shards": shards}


def test_a_root_of_many_namespaces_in_shards() -> None:
    assert frameworks.check_state(frameworks.LANGGRAPH_STORE, many_namespaces(MANY)) is None
    for state_, message in [(many_namespaces(3), "3 namespaces are sharded"),
                            (many_namespaces(MANY, v=2), "namespaces are sharded in a state of version 2"),
                            (many_namespaces(MANY, shard="00"), "is in shard 00"),
                            ({**many_namespaces(MANY), "namespaces": {}}, "has namespaces and namespace_shards")]:
        found = frameworks.check_state(frameworks.LANGGRAPH_STORE, state_)
        assert found is not None and message in found, (message, found)


def test_memory_layout_wants_trees_where_the_reader_reads_trees(repo: Path) -> None:
    handle = pygit2.Repository(str(repo))
    sw, reader = StateWriter(ObjectWriter(handle)), StateReader(handle)
    ns = {"namespace": ["u", "a"], "seq": 1, "items": Written(MAP, sw.mapping({"k": {"value": {}}}))}
    good = sw.mapping({"format": KIND, "namespaces": Written(MAP, sw.mapping({"u.a": Written(MAP, sw.mapping(ns))})),
                       "v": 2})
    assert frameworks.memory_layout(reader, good) is None
    shard = Written(MAP, sw.mapping({"u.a": Written(MAP, sw.mapping(ns))}))
    sharded = sw.mapping({"format": KIND, "namespace_shards": Written(MAP, sw.mapping({"0a": shard})), "v": 3})
    assert frameworks.memory_layout(reader, sharded) is None
    # the same maps stored as values (blobs) where the reader wants trees
    cases = {
        "namespaces is not a tree": {"namespaces": {"u.a": {"namespace": ["u", "a"], "seq": 1, "items": {}}}},
        "namespace_shards '0a': 'u.a' is not a tree": {"namespace_shards": Written(MAP, sw.mapping(
            {"0a": Written(MAP, sw.mapping({"u.a": {"namespace": ["u", "a"], "seq": 1, "items": {}}}))}))},
        "'0a' is not a tree": {"namespace_shards": Written(MAP, sw.mapping({"0a": {"u.a": {}}}))},
        "items is not a tree": {"namespaces": Written(MAP, sw.mapping(
            {"u.a": Written(MAP, sw.mapping({**ns, "items": {"k": {"value": {}}}}))}))},
        "item 'k' is not a blob": {"namespaces": Written(MAP, sw.mapping({"u.a": Written(MAP, sw.mapping(
            {**ns, "items": Written(MAP, sw.mapping({"k": Written(MAP, sw.mapping({"value": 1}))}))}))}))},
    }
    for message, body in cases.items():
        found = frameworks.memory_layout(reader, sw.mapping({"format": KIND, **body, "v": 3}))
        assert found is not None and message in found, (message, found)
