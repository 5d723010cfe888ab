"""gitstate.langgraph.values: a list written append by append (chunks, deflate streams and chunk
trees reused from the previous write) is stored exactly as the same list written from scratch."""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Annotated, TypedDict

import pytest
from conftest import git
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

import gitstate
from gitstate.errors import TypeNotAllowedError
from gitstate.langgraph import GitCheckpointSaver, values
from gitstate.langgraph.serde import StrictSerializer
from gitstate.langgraph.values import ValueCodec


@pytest.mark.parametrize("chunk,fanout", [(4, 3), (32, 64)])
def test_appended_list_trees_equal_trees_written_from_scratch(repo: Path, monkeypatch: pytest.MonkeyPatch,
                                                              chunk: int, fanout: int) -> None:
    """Small chunks and fan-out (patched) reach the grouped chunk trees in a few writes; the real
    sizes check the first chunks."""
    monkeypatch.setattr(values, "CHUNK", chunk)
    monkeypatch.setattr(values, "FANOUT", fanout)
    store = gitstate.open_store(repo)
    serde = StrictSerializer()
    codec = ValueCodec(serde.dumps_typed, serde.loads_typed)
    key = ("t", "", "messages")
    items: list[dict[str, object]] = []
    entry: tuple[str, str, int] | None = None
    checks = {1, chunk - 1, chunk, chunk + 1, 2 * chunk + 1} if chunk == 32 else \
        {1, chunk - 1, chunk, chunk + 1, 5 * chunk, fanout * chunk, fanout * chunk + 1, fanout * fanout * chunk + 1,
         (fanout * fanout + 1) * chunk + 3}
    last = max(checks)
    for i in range(last):
        items = [*items, {"role": "user", "n": i, "content": f"message {i} " + "lorem " * (i % 7)}]

        def write(tx: gitstate.Transaction, codec: ValueCodec = codec, items: list[dict[str, object]] = items,
                  parent: tuple[str, str, int] | None = entry) -> tuple[str, str, int]:
            return codec.write(tx.writer, key, items, parent)

        entry = store.core.write(write)
        if i + 1 in checks:
            fresh = ValueCodec(serde.dumps_typed, serde.loads_typed)  # no memo: the whole list written anew
            assert store.core.write(functools.partial(write, codec=fresh, items=items, parent=None)) == entry, i
            reader = ValueCodec(serde.dumps_typed, serde.loads_typed)
            assert reader.read(store.core.reader, entry[0], entry[1], entry[2]) == ("messages", items)
    store.wait_for_housekeeping()  # a background merge replacing packs under fsck makes it fail to open one
    git(repo, "fsck", "--strict", "--no-dangling")


def _chunk_ids(store: gitstate.Store, tree: str) -> list[str]:
    return [entry.id for entry in store.core.reader.tree(tree)]


def _checking_codec(repo: Path) -> tuple[gitstate.Store, StrictSerializer, ValueCodec, tuple[str, str, str]]:
    """A store, the saver's default serde and a codec wired as the saver wires it (the type check
    apart from the encoding), and a list channel's key."""
    store = gitstate.open_store(repo)
    serde = StrictSerializer()
    return store, serde, ValueCodec(serde.dumps_typed_unchecked, serde.loads_typed, check=serde.check_typed), \
        ("t", "", "items")


def test_items_changed_in_place_are_stored(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An earlier item edited in place (the same Python object, other contents) is stored as it is
    now: only the chunks whose bytes changed get new blobs, the others keep theirs."""
    monkeypatch.setattr(values, "CHUNK", 4)
    store, serde, codec, key = _checking_codec(repo)
    items: list[dict[str, object]] = [{"n": i} for i in range(10)]
    first = store.core.write(lambda tx: codec.write(tx.writer, key, items, None))
    items[1]["seen"] = True  # chunk 0, in place
    items = [*items, {"n": 10}]  # and an append (chunk 2)
    second = store.core.write(lambda tx: codec.write(tx.writer, key, items, first))
    reader = ValueCodec(serde.dumps_typed, serde.loads_typed)
    assert reader.read(store.core.reader, second[0], second[1], second[2]) == ("items", items)
    before, after = _chunk_ids(store, first[1]), _chunk_ids(store, second[1])
    assert after[0] != before[0] and after[1] == before[1] and after[2] != before[2]
    fresh = ValueCodec(serde.dumps_typed, serde.loads_typed)
    assert store.core.write(lambda tx: fresh.write(tx.writer, key, items, None)) == second


def test_an_item_changed_in_place_to_a_refused_type_is_refused(repo: Path) -> None:
    """The write-time type check covers chunks stored anew, however the item changed."""
    store, _serde, codec, key = _checking_codec(repo)
    items: list[dict[str, object]] = [{"n": i} for i in range(3)]
    first = store.core.write(lambda tx: codec.write(tx.writer, key, items, None))
    items[0]["when"] = Path("/x")  # allowed (LangGraph's safe list)
    store.core.write(lambda tx: codec.write(tx.writer, key, [*items, {"n": 3}], first))
    items[0]["plan"] = _Plan(1)
    with pytest.raises(TypeNotAllowedError, match="_Plan"):
        store.core.write(lambda tx: codec.write(tx.writer, key, [*items, {"n": 4}], first))


class _State(TypedDict):
    items: list[dict[str, int]]
    messages: Annotated[list[AnyMessage], add_messages]
    n: int


@dataclasses.dataclass
class _Plan:
    step: int


def test_a_graph_that_edits_earlier_state_in_place_reads_back_as_in_memory(tmp_path: Path) -> None:
    """A node that changes an earlier list item and an earlier message in place, then appends: every
    checkpoint of the history reads back as LangGraph's own in-memory saver has it."""
    def step(state: _State) -> dict[str, object]:
        n = state["n"] + 1
        state["items"][0]["seen"] = n
        state["messages"][0].content = f"edited {n}"
        return {"items": [*state["items"], {"k": n}], "messages": [AIMessage(f"reply {n}", id=f"a{n}")], "n": n}

    def build(saver: object) -> object:
        graph = StateGraph(_State)
        graph.add_node("step", step)
        graph.add_edge(START, "step")
        graph.add_conditional_edges("step", lambda s: "step" if s["n"] < 40 else END, ["step", END])
        return graph.compile(checkpointer=saver)

    git(tmp_path, "init", "-q")
    config = {"configurable": {"thread_id": "t"}}
    histories = []
    for saver in (InMemorySaver(), GitCheckpointSaver.from_path(tmp_path)):
        app = build(saver)
        app.invoke({"items": [{"seen": 0}], "messages": [HumanMessage("hi", id="h")], "n": 0},  # type: ignore[attr-defined]
                   config, durability="sync")
        histories.append([s.values for s in app.get_state_history(config)])  # type: ignore[attr-defined]
    fresh = build(GitCheckpointSaver.from_path(tmp_path))
    histories.append([s.values for s in fresh.get_state_history(config)])  # type: ignore[attr-defined]
    assert histories[0][0]["messages"][0].content == "edited 40"
    assert histories[1] == histories[0]
    assert histories[2] == histories[0]
