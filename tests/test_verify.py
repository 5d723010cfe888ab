"""gitstate.verify on sound and deliberately damaged stores."""

from __future__ import annotations

from pathlib import Path

import cbor2
import pygit2

import gitstate
from gitstate.verify import verify


def _healthy(store: gitstate.Store) -> gitstate.Run:
    run = store.create_run(workflow="w", run_id="r")
    run.checkpoint({"messages": list(range(100))})
    with run.node("plan") as scope:
        scope.checkpoint({"messages": list(range(101))})
    run.fork("node:plan", "alt")
    run.checkpoint({"alt": 1}, branch="alt")
    return run


def _commit(store: gitstate.Store, entries: dict[str, bytes], parents: list[str] | None = None) -> str:
    repo = store.repo
    tb = repo.TreeBuilder()
    for name, data in entries.items():
        tb.insert(name, repo.create_blob(data), pygit2.enums.FileMode.BLOB)
    sig = pygit2.Signature("t", "t@example.com", 0, 0)
    return str(repo.create_commit(None, sig, sig, "crafted", tb.write(), parents or []))


def _meta(**over: object) -> bytes:
    meta = {"format": "gitstate/checkpoint", "v": 1, "run": "r", "branch": "main", "step": 0}
    meta.update(over)
    return cbor2.dumps(meta, canonical=True)


def _problems(store: gitstate.Store) -> list[str]:
    return [str(p) for p in verify(store).problems]


def test_healthy_store_is_ok(store: gitstate.Store) -> None:
    _healthy(store)
    report = verify(store)
    assert report.ok, report.problems
    assert report.refs == 3 and report.checkpoints == 5
    assert report.to_dict()["ok"] is True


def test_missing_object_and_wrong_type(store: gitstate.Store, repo: Path) -> None:
    _healthy(store)
    ref_dir = repo / ".git" / "refs" / "agentos" / "main" / "runs" / "r" / "heads"
    (ref_dir / "ghost").write_text("1" * 40 + "\n")
    blob = store.repo.create_blob(b"not a commit")
    store.repo.references.create("refs/agentos/main/runs/r/heads/blob", blob)
    problems = _problems(store)
    assert any("heads/ghost" in p and "does not resolve" in p for p in problems)
    assert any("heads/blob" in p and "expected a commit" in p for p in problems)


def test_unknown_format_and_undecodable_payload(store: gitstate.Store) -> None:
    _healthy(store)
    future = _commit(store, {"meta.cbor": _meta(v=99), "state.cbor": cbor2.dumps({})})
    store.repo.references.create("refs/agentos/main/runs/r/heads/future", future)
    garbage = _commit(store, {"meta.cbor": _meta(), "state.cbor": b"\xff\xff\x00garbage"})
    store.repo.references.create("refs/agentos/main/runs/r/heads/garbage", garbage)
    problems = _problems(store)
    assert any("heads/future" in p and "format version 99" in p for p in problems)
    assert any("heads/garbage" in p and "does not decode" in p for p in problems)


def test_node_entry_must_be_an_ancestor(store: gitstate.Store) -> None:
    run = _healthy(store)
    stranger = run.checkpoint({"x": 1}, branch="other")
    first = _commit(store, {"meta.cbor": _meta(), "state.cbor": cbor2.dumps({})})
    bad = _commit(store, {"meta.cbor": _meta(step=1, trigger="node_end", node="n", node_entry=stranger.id),
                          "state.cbor": cbor2.dumps({})}, [first])
    store.repo.references.create("refs/agentos/main/runs/r/heads/badnode", bad)
    problems = _problems(store)
    assert any("heads/badnode" in p and "node_entry" in p for p in problems)


def test_foreign_ref_names(store: gitstate.Store) -> None:
    run = _healthy(store)
    tip = run.head()
    assert tip is not None
    store.repo.references.create("refs/agentos/stray", tip.id)
    store.repo.references.create("refs/agentos/main/runs/bad%zz/run", tip.id)
    problems = _problems(store)
    assert any("refs/agentos/stray" in p and "not a gitstate ref" in p for p in problems)
    assert any("bad%zz" in p for p in problems)
