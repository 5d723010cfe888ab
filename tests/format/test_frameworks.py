"""gitstate.format.frameworks: the shape checks of the integrations' states, as ``verify`` runs
them on decoded states (here the langgraph-store's, flat and sharded)."""

from __future__ import annotations

from typing import Any

import pytest

from gitstate.format import frameworks

KIND = frameworks.KINDS[frameworks.LANGGRAPH_STORE]
ITEM = {"value": {"a": 1}, "created_at": "t", "updated_at": "t", "seq": 1}


def state(ns: dict[str, Any], v: int = 2) -> dict[str, Any]:
    return {"format": KIND, "v": v, "namespaces": {"users": {"namespace": ["users"], "seq": 1, **ns}}}


def test_flat_and_sharded_namespaces_are_sound() -> None:
    assert frameworks.check_state(frameworks.LANGGRAPH_STORE, state({"items": {"k": ITEM}})) is None
    assert frameworks.check_state(frameworks.LANGGRAPH_STORE, state({"shards": {"0a": {"k": ITEM}}}, 3)) is None


@pytest.mark.parametrize(("ns", "problem"), [
    ({}, "neither items nor shards"),
    ({"items": {}, "shards": {}}, "neither items nor shards"),
    ({"items": []}, "items is not a map"),
    ({"shards": {"zz": {"k": ITEM}}}, "shard 'zz' is malformed"),
    ({"shards": {"0a": ["k"]}}, "shard '0a' is malformed"),
    ({"shards": {"0a": {"k": {"value": 1}}}}, "an item has no value map"),
])
def test_malformed_namespaces_are_named(ns: dict[str, Any], problem: str) -> None:
    found = frameworks.check_state(frameworks.LANGGRAPH_STORE, state(ns, 3))
    assert found is not None and problem in found


def test_versions_past_what_this_reads_are_refused() -> None:
    found = frameworks.check_state(frameworks.LANGGRAPH_STORE, state({"items": {}}, frameworks.VERSION + 1))
    assert found is not None and "not supported" in found
    assert frameworks.WRITTEN < frameworks.VERSION  # what needs nothing newer stays readable by earlier versions
