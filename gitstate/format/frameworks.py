"""The payloads of the framework integrations (OpenAI Agents SDK sessions, Microsoft Agent
Framework checkpoints, LangGraph long-term memory, CrewAI flow state): their workflow names, format
kinds and the shape of their states, checked by the integrations when they read and by ``verify``.

Each integration writes ordinary checkpoints whose run record and ``meta.cbor`` carry its workflow
name and whose state is a mapping holding ``format`` (the kind below) and ``v`` (the version), next
to the integration's own keys (docs/FORMAT.md, "Framework integrations")."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from typing import Any

from gitstate.format import typed
from gitstate.format.statetree import StateReader

#: The version of the integrations' states (their ``v``); a reader reads every version up to it.
#: 2: maps in the state keep their key order (so a GitStore of format 1, which reads the state
#: without ``meta.cbor``, refuses it as a newer version rather than as damaged).
#: 3: a langgraph-store namespace of many items is stored in shards (``shards.map/``); only a
#: langgraph-store root holding one is written as version 3.
VERSION = 3

#: The version the integrations write (a langgraph-store root holding a sharded namespace: 3), so
#: that a gitstate that reads up to version 2 keeps reading what needs nothing newer.
WRITTEN = 2

LANGGRAPH = "langgraph"
OPENAI_AGENTS = "openai-agents"
AGENT_FRAMEWORK = "agent-framework"
LANGGRAPH_STORE = "langgraph-store"
CREWAI = "crewai"

KINDS = {
    OPENAI_AGENTS: "gitstate/openai-agents-session",
    AGENT_FRAMEWORK: "gitstate/agent-framework-checkpoint",
    LANGGRAPH_STORE: "gitstate/langgraph-store",
    CREWAI: "gitstate/crewai-flow",
}


#: The workflows whose checkpoints only their integration writes: a plain checkpoint (the CLI's
#: ``checkpoint``) in such a run is one its reader cannot use (a LangGraph thread would start over).
INTEGRATION_WORKFLOWS = frozenset({LANGGRAPH, *KINDS})

#: The workflows whose writers never say that a run finished (a session, a memory store, a flow's
#: or a workflow's saved steps): such a run that recorded no status is ``saved``, not ``running``.
UNFINISHED = frozenset(KINDS)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _session(state: Mapping[str, Any]) -> str | None:
    items = state.get("items")
    turns = state.get("turns")
    if not isinstance(items, list):
        return "items is not a list"
    if not isinstance(turns, list):
        return "turns is not a list"
    last = -1
    for turn in turns:
        if not (isinstance(turn, list) and len(turn) == 2 and _is_int(turn[0]) and isinstance(turn[1], str)):
            return "a turn is not [item index, time]"
        if not last < turn[0] < len(items):
            return f"turn index {turn[0]} is out of order or beyond the {len(items)} items"
        last = turn[0]
    if not isinstance(state.get("created_at"), str):
        return "created_at is not text"
    return None


AF_TEXT_FIELDS = ("checkpoint_id", "workflow_name")
AF_OWN_KEYS = ("format", "v", "saved")  # the other keys of the state are the checkpoint's fields


def _agent_framework(state: Mapping[str, Any]) -> str | None:
    for name in AF_TEXT_FIELDS:
        if not isinstance(state.get(name), str):
            return f"{name} is not text"
    previous = state.get("previous_checkpoint_id")
    if previous is not None and not isinstance(previous, str):
        return "previous_checkpoint_id is not text"
    if not _is_int(state.get("saved")):
        return "saved is not an integer"
    return typed.check_tree({k: v for k, v in state.items() if k not in AF_OWN_KEYS})


def check_item(item: Any) -> str | None:
    """Why one stored langgraph-store item is malformed, or ``None``."""
    if not isinstance(item, dict) or not isinstance(item.get("value"), dict):
        return "an item has no value map"
    for name in ("created_at", "updated_at"):
        if not isinstance(item.get(name), str):
            return f"an item's {name} is not text"
    if not _is_int(item.get("seq")):
        return "an item's seq is not an integer"
    vectors = item.get("vectors")
    if vectors is not None and not (isinstance(vectors, dict) and all(
            isinstance(v, list) and all(isinstance(x, float | int) for x in v) for v in vectors.values())):
        return "an item's vectors are not lists of numbers"
    ttl = item.get("ttl")
    if ttl is not None and (not isinstance(ttl, float | int) or not isinstance(item.get("expires_at"), str)):
        return "an item's ttl or expires_at is malformed"
    return None


def _memory(state: Mapping[str, Any]) -> str | None:
    namespaces, problem = _memory_namespaces(state)
    if problem:
        return problem
    for name, ns in namespaces.items():
        if not isinstance(ns, dict):
            return f"namespace {name!r} is not a map"
        labels = ns.get("namespace")
        if not (isinstance(labels, list) and labels and all(isinstance(x, str) and x for x in labels)):
            return f"namespace {name!r} has no label list"
        if ".".join(labels) != name:
            return f"namespace {name!r} is stored under another name"
        if not _is_int(ns.get("seq")):
            return f"namespace {name!r} lacks seq"
        items, problem = _memory_items(ns, state.get("v"))
        if problem:
            return f"namespace {name!r}: {problem}"
        for item in items:
            problem = check_item(item)
            if problem:
                return f"namespace {name!r}: {problem}"
    return None


#: A langgraph-store namespace of more items than this, and a root of more namespaces, is stored
#: in shards (version 3).
MEMORY_SHARD_AT = 256


def _memory_namespaces(state: Mapping[str, Any]) -> tuple[dict[str, Any], str | None]:
    """The namespaces of a langgraph-store state: ``namespaces``, or (version 3) its
    ``namespace_shards`` (see :func:`_unshard`)."""
    if "namespace_shards" not in state:
        flat = state.get("namespaces")
        return (flat, None) if isinstance(flat, dict) else ({}, "namespaces is not a map")
    shards = state["namespace_shards"]
    if "namespaces" in state or not isinstance(shards, dict):
        return {}, "has namespaces and namespace_shards, or malformed shards"
    return _unshard(shards, state.get("v"), "namespace", "namespace shard", "namespaces are sharded")


def is_memory_shard(name: Any) -> bool:
    """Whether ``name`` names a langgraph-store shard: two lower-case hex digits."""
    return isinstance(name, str) and len(name) == 2 and all(c in "0123456789abcdef" for c in name)


def memory_shard(key: str) -> str:
    """The shard of a langgraph-store item key or namespace name: the first byte of the SHA-1 of
    its UTF-8, in hex."""
    return hashlib.sha1(key.encode("utf-8", "surrogatepass"), usedforsecurity=False).hexdigest()[:2]


def _memory_items(ns: Mapping[str, Any], version: Any) -> tuple[list[Any], str | None]:
    """The items of a langgraph-store namespace: ``items``, or (version 3) its ``shards`` (see
    :func:`_unshard`)."""
    if "items" in ns and "shards" in ns:
        return [], "has both items and shards"
    if "items" in ns:
        return (list(ns["items"].values()), None) if isinstance(ns["items"], dict) else ([], "items is not a map")
    shards = ns.get("shards")
    if not isinstance(shards, dict):
        return [], "has neither items nor shards"
    items, problem = _unshard(shards, version, "item", "shard", "is sharded")
    return list(items.values()), problem


def _unshard(shards: dict[Any, Any], version: Any, noun: str, shard_noun: str,
             sharded: str) -> tuple[dict[str, Any], str | None]:
    """The members of ``shards`` (shard → {key: member}) in a state of ``version``, or why they
    are not sound: a version below 3, a shard name that is not two hex digits or an empty shard,
    a key in a shard it does not name (so no key is in two), or :data:`MEMORY_SHARD_AT` members or
    fewer. ``noun``, ``shard_noun`` and ``sharded`` word the reasons (of items, or namespaces)."""
    if not _is_int(version) or version < 3:
        return {}, f"{sharded} in a state of version {version}"
    members: dict[str, Any] = {}
    for shard, group in shards.items():
        if not (is_memory_shard(shard) and isinstance(group, dict)):
            return {}, f"{shard_noun} {shard!r} is malformed"
        if not group:
            return {}, f"{shard_noun} {shard} is empty"
        for key, member in group.items():
            if memory_shard(key) != shard:
                return {}, f"{noun} {key!r} is in shard {shard}, not {memory_shard(key)}"
            members[key] = member
    if len(members) <= MEMORY_SHARD_AT:
        return {}, f"{len(members)} {noun}s are sharded (only more than {MEMORY_SHARD_AT} are)"
    return members, None


def memory_layout(reader: StateReader, state_tree: str) -> str | None:
    """Why the trees of a langgraph-store state are not laid out as its reader reads them, or
    ``None``: its namespaces (or namespace shards), each shard, each namespace and its items (or
    item shards) must be ``.map/`` trees, an item a blob; :func:`check_state`, given the decoded
    state, cannot tell a tree from a value that decodes to the same map."""
    top = reader.entries(state_tree)
    todo: list[tuple[str, str, str]] = []  # (what, tree id, its role)
    for name, role in (("namespaces", "namespaces"), ("namespace_shards", "namespace shards")):
        if name in top:
            if top[name][0] != "map":
                return f"{name} is not a tree"
            todo.append((name, top[name][1], role))
    while todo:
        what, oid, role = todo.pop()
        for key, (kind, child) in reader.entries(oid).items():
            if role == "items":
                if kind != "cbor":
                    return f"{what}: item {key!r} is not a blob"
                continue
            if role == "namespace":
                if key in ("items", "shards"):
                    if kind != "map":
                        return f"{what}: {key} is not a tree"
                    todo.append((f"{what} {key}", child, "items" if key == "items" else "item shards"))
                elif kind != "cbor":
                    return f"{what}: {key!r} is not a blob"
                continue
            if kind != "map":
                return f"{what}: {key!r} is not a tree"
            sub = {"namespaces": "namespace", "namespace shards": "namespaces", "item shards": "items"}[role]
            todo.append((f"namespace {key!r}" if sub == "namespace" else f"{what} {key!r}", child, sub))
    return None


def _crewai(state: Mapping[str, Any]) -> str | None:
    if not isinstance(state.get("state"), dict):
        return "state is not a map"
    pending = state.get("pending")
    if pending is not None and not (isinstance(pending, dict) and isinstance(pending.get("context"), dict)
                                    and isinstance(pending.get("state"), dict)):
        return "pending is not {context, state}"
    return None


_CHECKS: dict[str, Callable[[Mapping[str, Any]], str | None]] = {
    OPENAI_AGENTS: _session, AGENT_FRAMEWORK: _agent_framework, LANGGRAPH_STORE: _memory, CREWAI: _crewai,
}


def check_state(workflow: str | None, state: Any) -> str | None:
    """Why a checkpoint state of an integration's workflow is not a sound payload of its kind, or
    ``None`` (also for workflows of no integration)."""
    kind = KINDS.get(workflow or "")
    if kind is None:
        return None
    if not isinstance(state, dict):
        return f"{workflow} state is not a map"
    if state.get("format") != kind:
        return f"{workflow} state has format {state.get('format')!r}, expected {kind!r}"
    version = state.get("v")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        return f"{workflow} state has no format version"
    if version > VERSION:
        return f"{workflow} state format version {version} is not supported (this gitstate reads 1 to {VERSION})"
    problem = _CHECKS[workflow or ""](state)
    return None if problem is None else f"{workflow} state: {problem}"
