"""gitstate.langgraph.values: a list written append by append (chunks, deflate streams and chunk
trees reused from the previous write) is stored exactly as the same list written from scratch."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
from conftest import git

import gitstate
from gitstate.langgraph import values
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

        entry = store.write(write)
        if i + 1 in checks:
            fresh = ValueCodec(serde.dumps_typed, serde.loads_typed)  # no memo: the whole list written anew
            assert store.write(functools.partial(write, codec=fresh, items=items, parent=None)) == entry, i
            reader = ValueCodec(serde.dumps_typed, serde.loads_typed)
            assert reader.read(store.reader, entry[0], entry[1], entry[2]) == ("messages", items)
    store.wait_for_housekeeping()  # a background merge replacing packs under fsck makes it fail to open one
    git(repo, "fsck", "--strict", "--no-dangling")
