"""A stored LangGraph checkpoint that decodes but is not of the shape LangGraph reads (a pull from an
untrusted remote can bring one): the saver refuses it with a CorruptObjectError naming the commit,
where it returned it and LangGraph failed later with KeyError or TypeError, and ``verify`` reports
it without importing LangGraph (the display decoder reads the same shape)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypedDict

import pytest

pytest.importorskip("langgraph.checkpoint.base")

import cbor2  # noqa: E402
import ormsgpack  # noqa: E402
from langgraph.graph import START, StateGraph  # noqa: E402

import gitstate  # noqa: E402
from gitstate.errors import CorruptObjectError  # noqa: E402
from gitstate.format import lgtree  # noqa: E402
from gitstate.langgraph import GitCheckpointSaver  # noqa: E402
from gitstate.verify import verify  # noqa: E402

REF = "refs/agentos/main/runs/t1/heads/main"
CONFIG: Any = {"configurable": {"thread_id": "t1"}}


class State(TypedDict):
    messages: list[str]


def _graph(repo: Path) -> Any:
    graph = StateGraph(State)
    graph.add_node("reply", lambda s: {"messages": [*s["messages"], "hello"]})
    graph.add_edge(START, "reply")
    return graph.compile(checkpointer=GitCheckpointSaver.from_path(repo))


def _stored(store: gitstate.Store) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """The tip commit of the thread, and its stored LangGraph checkpoint and metadata, decoded."""
    tip = store.repo.references[REF].target
    meta = cbor2.loads(store.repo[tip].tree["meta.cbor"].data)  # type: ignore[attr-defined]
    lg = meta["langgraph"]
    assert lg["checkpoint"][0] == lg["metadata"][0] == "msgpack"
    return str(tip), ormsgpack.unpackb(lg["checkpoint"][1]), ormsgpack.unpackb(lg["metadata"][1])


def _replace_tip(store: gitstate.Store, checkpoint: Any = None, metadata: Any = None) -> str:
    """Rewrite the thread's tip commit (same parents and message) with another stored checkpoint
    or metadata (msgpack of the given plain data), as a crafted remote's would arrive."""
    repo = store.repo
    tip = repo[repo.references[REF].target]
    meta = cbor2.loads(tip.tree["meta.cbor"].data)  # type: ignore[attr-defined]
    if checkpoint is not None:
        meta["langgraph"]["checkpoint"] = ["msgpack", ormsgpack.packb(checkpoint)]
    if metadata is not None:
        meta["langgraph"]["metadata"] = ["msgpack", ormsgpack.packb(metadata)]
    builder = repo.TreeBuilder(tip.tree)  # type: ignore[attr-defined]
    builder.insert("meta.cbor", repo.create_blob(cbor2.dumps(meta, canonical=True)), 0o100644)
    new = repo.create_commit(None, tip.author, tip.committer, tip.message,  # type: ignore[attr-defined]
                             builder.write(), tip.parent_ids)  # type: ignore[attr-defined]
    repo.references.create(REF, new, force=True)
    return str(new)


def _without(value: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in value.items() if k != key}


# (what is wrong, how to make it wrong from the sound checkpoint / metadata, the reason given)
CHECKPOINTS = [
    ("only v", lambda cp: {"v": 4}, "checkpoint has no id"),
    ("no channel_versions", lambda cp: _without(cp, "channel_versions"), "has no channel_versions"),
    ("no versions_seen", lambda cp: _without(cp, "versions_seen"), "has no versions_seen"),
    ("no ts", lambda cp: _without(cp, "ts"), "has no ts"),
    ("channel_versions a list", lambda cp: {**cp, "channel_versions": [1]}, "channel_versions is not a map"),
    ("a version a list", lambda cp: {**cp, "channel_versions": {"messages": [1]}}, "is not a version"),
    ("a version a bool", lambda cp: {**cp, "channel_versions": {"messages": True}}, "is not a version"),
    ("versions_seen of numbers", lambda cp: {**cp, "versions_seen": {"reply": 5}},
     "versions_seen['reply'] is not a map"),
    ("id a number", lambda cp: {**cp, "id": 5}, "checkpoint id is not text"),
    ("v text", lambda cp: {**cp, "v": "4"}, "checkpoint v is not an integer"),
    ("updated_channels text", lambda cp: {**cp, "updated_channels": "messages"}, "updated_channels is not a list"),
    ("not a map", lambda cp: [1, 2], "checkpoint is not a map"),
]
METADATA = [
    ("step text", lambda md: {**md, "step": "x"}, "metadata step is not an integer"),
    ("step null", lambda md: {**md, "step": None}, "metadata step is not an integer"),
    ("source a number", lambda md: {**md, "source": 5}, "metadata source is not text"),
    ("parents a list", lambda md: {**md, "parents": []}, "metadata parents is not a map"),
    ("a parent a number", lambda md: {**md, "parents": {"": 5}}, "metadata parents is not a map"),
    ("not a map", lambda md: 1, "metadata is not a map"),
]


@pytest.mark.parametrize(("part", "edit", "reason"),
                         [("checkpoint", edit, reason) for _what, edit, reason in CHECKPOINTS]
                         + [("metadata", edit, reason) for _what, edit, reason in METADATA],
                         ids=[what for what, _e, _r in CHECKPOINTS] + [f"metadata {what}" for what, _e, _r in METADATA])
def test_a_malformed_stored_checkpoint_is_corrupt_for_the_saver_and_verify(
        repo: Path, part: str, edit: Any, reason: str) -> None:
    _graph(repo).invoke({"messages": ["hi"]}, CONFIG)
    store = gitstate.open_store(repo)
    assert verify(store).ok
    _tip, cp, md = _stored(store)
    bad = _replace_tip(store, checkpoint=edit(cp)) if part == "checkpoint" else _replace_tip(store, metadata=edit(md))
    saver = GitCheckpointSaver.from_path(repo)
    for read in (lambda: saver.get_tuple(CONFIG), lambda: list(saver.list(CONFIG)),
                 lambda: _graph(repo).get_state(CONFIG)):
        with pytest.raises(CorruptObjectError) as caught:
            read()
        assert caught.value.oid == bad and reason in caught.value.reason, caught.value
    problems = verify(store).problems
    assert [(p.ref, p.oid) for p in problems] == [(REF, bad)], problems
    assert reason in problems[0].message and "LangGraph" in problems[0].message
    store.close()


def test_sound_threads_pass_the_shape_checks(repo: Path) -> None:
    """What LangGraph writes passes: a graph's checkpoints of every step (interrupted and resumed
    too), and the shape check sees the same on the saver's decoded value and the display form."""
    graph = _graph(repo)
    graph.invoke({"messages": ["hi"]}, CONFIG)
    graph.invoke({"messages": ["again"]}, CONFIG)
    graph.update_state(CONFIG, {"messages": ["edited"]})
    store = gitstate.open_store(repo)
    report = verify(store)
    assert report.ok and report.checkpoints >= 5, report.problems
    saver = GitCheckpointSaver.from_path(repo)
    for tup in saver.list(CONFIG):
        stored = dict(tup.checkpoint)
        del stored["channel_values"]
        assert lgtree.checkpoint_problem(stored) is None and lgtree.metadata_problem(dict(tup.metadata)) is None
    store.close()
