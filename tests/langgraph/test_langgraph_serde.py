"""Decoding LangGraph checkpoints never runs code named by the data: a value whose
msgpack asks for ``os.system(...)``, stored as a channel value, a list item, metadata or a pending
write (as a blob fetched from an untrusted remote would), is refused with an UnsafeValueError (a
policy refusal, not "corrupt") and nothing runs; LangChain messages and opted-in types still
round-trip. Writing a value the reader would refuse is refused before anything is stored."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph.checkpoint.base")

import ormsgpack  # noqa: E402
from langchain_core.messages import AIMessage, HumanMessage  # noqa: E402
from langgraph.checkpoint.base import empty_checkpoint  # noqa: E402
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer  # noqa: E402
from pydantic import BaseModel  # noqa: E402

import gitstate  # noqa: E402
from gitstate.format.lgserde import array_header  # noqa: E402
from gitstate.langgraph import GitCheckpointSaver, StrictSerializer  # noqa: E402


@dataclasses.dataclass
class Point:
    """A user type kept in a channel (needs opting in)."""

    x: int
    y: int


class Evil:
    """Marker the crafting serializer replaces by a payload calling ``os.system``."""


def evil_ext(command: str) -> ormsgpack.Ext:
    return ormsgpack.Ext(1, ormsgpack.packb(("os", "system", [command])))


class CraftingSerde(JsonPlusSerializer):
    """Writes what an attacker would: an ``os.system`` extension record wherever ``Evil`` is."""

    def __init__(self, command: str) -> None:
        super().__init__(allowed_msgpack_modules=None)
        self.command = command

    def _swap(self, obj: Any) -> Any:
        if isinstance(obj, Evil):
            return evil_ext(self.command)
        if isinstance(obj, dict):
            return {k: self._swap(v) for k, v in obj.items()}
        return obj

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        if isinstance(obj, Evil) or (isinstance(obj, dict) and any(isinstance(v, Evil) for v in obj.values())):
            return "msgpack", ormsgpack.packb(self._swap(obj))
        if isinstance(obj, list) and any(isinstance(v, Evil) for v in obj):
            # a msgpack array is its header and its items, each encoded as if alone
            return "msgpack", array_header(len(obj)) + b"".join(self.dumps_typed(v)[1] for v in obj)
        return super().dumps_typed(obj)


def _put(saver: GitCheckpointSaver, values: dict[str, Any], metadata: dict[str, Any] | None = None,
         writes: list[tuple[str, Any]] | None = None, thread: str = "t") -> dict[str, Any]:
    cp = empty_checkpoint()
    cp["channel_values"] = values
    cp["channel_versions"] = {k: 1 for k in values}
    config = saver.put({"configurable": {"thread_id": thread, "checkpoint_ns": ""}}, cp,
                       {"source": "input", "step": -1, **(metadata or {})}, {k: 1 for k in values})
    if writes:
        saver.put_writes(config, writes, task_id="task-1")
    return dict(config)


PLACES = {
    "channel value": lambda: {"values": {"x": Evil()}},
    "list item": lambda: {"values": {"messages": [HumanMessage("hi", id="1"), Evil()]}},
    "metadata": lambda: {"values": {"x": 1}, "metadata": {"evil": Evil()}},
    "pending write": lambda: {"values": {"x": 1}, "writes": [("x", Evil())]},
}


@pytest.mark.parametrize("place", sorted(PLACES))
def test_stored_code_is_never_run(repo: Path, tmp_path: Path, place: str) -> None:
    pwned = tmp_path / "pwned"
    store = gitstate.open_store(repo)
    config = _put(GitCheckpointSaver(store, serde=CraftingSerde(f"touch {pwned}")), **PLACES[place]())
    reader = GitCheckpointSaver(gitstate.open_store(repo))  # default: strict
    with pytest.raises(gitstate.UnsafeValueError) as err:
        reader.get_tuple(config)
    assert err.value.type_name == "os.system" and len(err.value.oid) == 40
    assert not isinstance(err.value, gitstate.CorruptObjectError) and "corrupt" not in str(err.value)
    assert "os.system" in str(err.value) and "allowed_types" in str(err.value)
    with pytest.raises(gitstate.UnsafeValueError):
        list(reader.list(config))
    assert not pwned.exists()


def test_unknown_and_pickle_payloads_are_refused_not_crashes(repo: Path) -> None:
    store = gitstate.open_store(repo)

    class Raw(JsonPlusSerializer):
        def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
            if obj == "PICKLE":
                return "pickle", b"cos\nsystem\n(S'true'\ntR."
            if obj == "BAD":
                return "msgpack", b"\xc1"
            return super().dumps_typed(obj)

    reader = GitCheckpointSaver(store)
    config = _put(GitCheckpointSaver(store, serde=Raw()), {"x": "PICKLE"}, thread="p")
    with pytest.raises(gitstate.UnsafeValueError, match="never decodes pickle") as err:
        reader.get_tuple(config)
    assert err.value.type_name == "pickle"
    config = _put(GitCheckpointSaver(store, serde=Raw()), {"x": "BAD"}, thread="b")
    with pytest.raises(gitstate.CorruptObjectError, match="does not decode"):
        reader.get_tuple(config)


def test_messages_and_safe_types_round_trip(repo: Path) -> None:
    saver = GitCheckpointSaver(gitstate.open_store(repo))
    assert isinstance(saver.serde, StrictSerializer) and not saver.serde.pickle_fallback
    msgs = [HumanMessage("hi", id="1"), AIMessage("yo", id="2", tool_calls=[])]
    config = _put(saver, {"messages": msgs, "tags": {"a", "b"}})
    got = GitCheckpointSaver(gitstate.open_store(repo)).get_tuple(config)
    assert got is not None
    assert got.checkpoint["channel_values"] == {"messages": msgs, "tags": {"a", "b"}}


def test_user_types_need_opting_in(repo: Path) -> None:
    store = gitstate.open_store(repo)
    config = _put(GitCheckpointSaver(store, allowed_types=[Point]), {"p": Point(1, 2)})
    with pytest.raises(gitstate.UnsafeValueError, match="Point"):
        GitCheckpointSaver(store).get_tuple(config)
    for reader in (GitCheckpointSaver(store, allowed_types=[Point]),
                   GitCheckpointSaver(store, allowed_types=[(Point.__module__, "Point")]),
                   GitCheckpointSaver(store).with_allowlist([(Point.__module__, "Point")])):
        got = reader.get_tuple(config)
        assert got is not None and got.checkpoint["channel_values"] == {"p": Point(1, 2)}


class Plan(BaseModel):
    steps: list[str]


def test_a_pydantic_model_is_named_as_its_type(repo: Path) -> None:
    """A pydantic v2 record also names the method that rebuilds it; the refusals name the type, and
    the fix they suggest works."""
    store = gitstate.open_store(repo)
    name = f"{Plan.__module__}.Plan"
    with pytest.raises(gitstate.TypeNotAllowedError) as refused:
        _put(GitCheckpointSaver(store), {"plan": Plan(steps=["a"])})
    assert refused.value.type_name == name
    assert f"allowed_types=[Plan]) (or the tuple ({Plan.__module__!r}, 'Plan'))" in str(refused.value)
    config = _put(GitCheckpointSaver(store, allowed_types=[(Plan.__module__, "Plan")]), {"plan": Plan(steps=["a"])})
    with pytest.raises(gitstate.UnsafeValueError) as unread:
        GitCheckpointSaver(store).get_tuple(config)
    assert unread.value.type_name == name
    got = GitCheckpointSaver(store, allowed_types=[Plan]).get_tuple(config)
    assert got is not None and got.checkpoint["channel_values"] == {"plan": Plan(steps=["a"])}


def test_pickle_fallback_is_refused(repo: Path) -> None:
    with pytest.raises(gitstate.UsageError):
        GitCheckpointSaver(gitstate.open_store(repo), serde=JsonPlusSerializer(pickle_fallback=True))
