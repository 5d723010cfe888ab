"""Run.update (read-modify-write checkpoints, retried on the tip written meanwhile), stage_checkpoint
with fork_from, and Written state values built outside StateWriter."""

from __future__ import annotations

import threading
from typing import Any

import gitstate
from gitstate.format.statetree import LIST, StateReader, StateWriter, Written
from gitstate.store.run import NO_CHANGE


def test_update_appends_from_every_thread(store: gitstate.Store) -> None:
    run = store.create_run(run_id="u")

    def worker(tag: str) -> None:
        for i in range(15):
            run.update(lambda tip, _tx, i=i: {"log": ([] if tip is None else tip.state["log"]) + [f"{tag}{i}"]})

    threads = [threading.Thread(target=worker, args=(t,)) for t in "ab"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    head = run.head()
    assert head is not None and head.step == 29
    log = head.state["log"]
    assert sorted(log) == sorted(f"{t}{i}" for t in "ab" for i in range(15))
    for tag in "ab":
        assert [x for x in log if x[0] == tag] == [f"{tag}{i}" for i in range(15)]


def test_update_can_write_nothing(store: gitstate.Store) -> None:
    run = store.create_run(run_id="n")
    assert run.update(lambda tip, tx: NO_CHANGE) is None
    assert run.tip() is None
    cp = run.update(lambda tip, tx: {"x": 1}, node="n", trigger="t", metadata=lambda s: {"keys": len(s)})
    assert cp is not None and cp.metadata == {"keys": 1} and cp.node == "n"
    assert run.update(lambda tip, tx: run.NO_CHANGE) is None
    assert run.tip() == cp.id


def test_written_values_and_fork_from(store: gitstate.Store) -> None:
    run = store.create_run(run_id="w")
    items = list(range(100))
    first = run.checkpoint({"items": items})

    def change(tip: Any, tx: gitstate.Transaction) -> dict[str, Any]:
        w = StateWriter(tx.writer)
        chunks = [w.leaf(items[i:i + 32], "items") for i in range(0, 100, 32)]
        return {"items": Written(LIST, w.list_tree(chunks))}

    second = run.update(change)
    assert second is not None and second.state_id == first.state_id  # same layout, same ids
    reader = StateReader(store.core.reader)
    kind, tree = reader.entries(second.state_id or "")["items"]
    assert kind == "list" and len(reader.list_chunks(tree)) == 4 and reader.chunk(reader.list_chunks(tree)[3]) == items[96:]

    def fork(tx: gitstate.Transaction) -> gitstate.Checkpoint:
        from gitstate.format import checkpoint as cpfmt

        return run.stage_checkpoint(tx, None, cpfmt.state_entry(tx.writer, {"items": [1]}), branch="side",
                                    fork_from=first.id, strict=True)

    side = store.core.write(fork)
    assert side.parent_id == first.id and side.step == first.step + 1
    assert run.head("side") is not None and run.head("side").state == {"items": [1]}  # type: ignore[union-attr]
