"""Integration states written by the format-1 code (tests/compat/fixtures/integrations-format1.tar.gz,
made by make_integrations_fixture.py), which stored every map with its keys in canonical order, read
with the current code: the same values, keys in the order they were stored, and the current code
continues them (its own writes keep their key order; format-2 checkpoints on top of format-1 ones).
The expectations are hard-coded; a new format gets a new fixture file and a new test beside this one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from agent_framework import WorkflowCheckpoint
from compat_support import git, unpack
from make_integrations_fixture import AF_STATE, CHECKPOINT_ID, ITEMS, MEMORY, NAMESPACE, SESSION, WORKFLOW

import gitstate
from gitstate.agent_framework import GitCheckpointStorage
from gitstate.format.checkpoint import read_meta
from gitstate.langgraph import GitStore
from gitstate.openai_agents import GitSession
from gitstate.verify import verify

FIXTURE = Path(__file__).parent / "fixtures" / "integrations-format1.tar.gz"
REFS = """\
42deb6aa7185ba7c5fe4b0bdd2ee1b72aa34d21d refs/agentos/main/runs/chat/heads/main
926973eb0c73cbd87193fb581ce8ad319cf4fd6d refs/agentos/main/runs/chat/run
5b05ac9711713976f0c8d7c646c11e80c8ab39d7 refs/agentos/main/runs/langgraph-store/heads/users
856248f28e240d8cdb12bc382e6a8d6fc39d427c refs/agentos/main/runs/langgraph-store/run
f5517c190cbb79db14a595d9598ae5e24ca97a56 refs/agentos/main/runs/ordered/heads/main
4d624dcefd5c449b2b3dc3c4e12908f5c00d3168 refs/agentos/main/runs/ordered/run
"""


def order(value: Any) -> Any:
    """The keys of every map in ``value``, in their order, with the values."""
    if isinstance(value, dict):
        return [(k, order(v)) for k, v in value.items()]
    return [order(v) for v in value] if isinstance(value, list) else value


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return unpack(FIXTURE, tmp_path)


def _version(store: gitstate.Store, oid: str) -> int:
    return int(read_meta(store.core.reader, store.core.reader.commit(oid))["v"])


def test_fixture_is_as_written(repo: Path) -> None:
    assert git(repo, "for-each-ref", "--format=%(objectname) %(refname)", "refs/agentos/") == REFS
    with gitstate.open_store(repo) as store:
        assert verify(store).ok


async def test_a_session_of_format_1_reads_and_goes_on(repo: Path) -> None:
    session = GitSession(SESSION, repo)
    items = await session.get_items()
    assert items == ITEMS
    # as format 1 stored them: canonical order (shorter keys first, then bytewise)
    assert list(items[0]) == ["role", "type", "content"]
    assert list(items[1]) == ["name", "type", "extra", "call_id", "arguments"]
    assert list(items[1]["extra"]) == ["zeta", "alpha"]
    new = {"type": "message", "role": "assistant", "content": "an answer", "meta": {"z": 1, "a": 2}}
    await session.add_items([new])
    fresh = GitSession(SESSION, repo)
    after = await fresh.get_items()
    assert after == [*ITEMS, new] and order(after[:-1]) == order(items)
    assert json.dumps(after[-1]) == json.dumps(new)  # the current code's write keeps its order
    assert await fresh.pop_item() == new and await fresh.get_items() == ITEMS
    run = fresh.store.get_run(SESSION)
    assert [_version(fresh.store, cp.id) for cp in run.history()] == [2, 2, 1, 1]
    assert verify(fresh.store).ok


def test_memory_of_format_1_reads_and_goes_on(repo: Path) -> None:
    store = GitStore.from_path(repo)
    item = store.get(NAMESPACE, "prefs")
    assert item is not None and item.value == MEMORY
    assert order(item.value) == [("mid", "x"), ("zeta", 1), ("alpha", [("c", None), ("y", [[("b", 1.5), ("q", 0)]])])]
    store.put(NAMESPACE, "more", {"zeta": 2, "alpha": 1})
    again = GitStore.from_path(repo)
    assert list(again.get(NAMESPACE, "more").value) == ["zeta", "alpha"]  # type: ignore[union-attr]
    assert again.get(NAMESPACE, "prefs").value == MEMORY  # type: ignore[union-attr]
    assert verify(again.store).ok


async def test_an_agent_framework_checkpoint_of_format_1_reads_and_goes_on(repo: Path) -> None:
    storage = GitCheckpointStorage(repo)
    loaded = await storage.load(CHECKPOINT_ID)
    assert loaded.state == AF_STATE
    # a .map/ tree (20 keys below "alpha"): the order of its entries; maps in blobs: canonical order
    assert list(loaded.state) == ["alpha", "mid", "zeta"] and list(loaded.state["zeta"]) == ["b", "y"]
    assert list(loaded.state["alpha"]) == sorted(AF_STATE["alpha"])
    assert list(loaded.state["alpha"]["key01"]) == ["a", "z"]
    nxt = WorkflowCheckpoint(workflow_name=WORKFLOW, graph_signature_hash="h", previous_checkpoint_id=CHECKPOINT_ID,
                             state={**AF_STATE, "new": {"z": 1, "a": 2}})
    await storage.save(nxt)
    back = await GitCheckpointStorage(repo).load(nxt.checkpoint_id)
    assert order(back.state) == order(nxt.state)
    assert [cid for cid in await storage.list_checkpoint_ids(workflow_name=WORKFLOW)] == [CHECKPOINT_ID,
                                                                                         nxt.checkpoint_id]
    assert verify(storage.store).ok
