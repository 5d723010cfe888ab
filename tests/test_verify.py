"""gitstate.verify on sound and deliberately damaged stores."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import cbor2
import pygit2

import gitstate
from gitstate.verify.checks import verify
from tests.conftest import git, loosen


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
    assert report.refs == 5 and report.checkpoints == 3  # run record, 2 branches, 2 node logs (the fork took one)
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


def _file_meta(version: int, path: str = "f", **over: object) -> bytes:
    meta: dict[str, object] = {"format": "gitstate/session-file", "v": 1, "run": "r", "path": path,
                               "version": version, "author": "t", "reason": "", "size": 1,
                               "created_at": "2026-01-01T00:00:00.000000Z"}
    meta.update(over)
    return cbor2.dumps(meta, canonical=True)


def test_session_file_chains_are_checked(store: gitstate.Store) -> None:
    run = _healthy(store)
    run.files.write("good.md", "1", author="a")
    run.files.write("good.md", "2", author="a")
    report = verify(store)
    assert report.ok, report.problems
    files = "refs/agentos/main/runs/r/files/"
    v1 = _commit(store, {"meta.cbor": _file_meta(1), "content": b"x"})
    v3 = _commit(store, {"meta.cbor": _file_meta(3), "content": b"x"}, [v1])
    store.repo.references.create(files + "gap", v3)
    store.repo.references.create(files + "future", _commit(store, {"meta.cbor": _file_meta(1, v=99), "content": b"x"}))
    store.repo.references.create(files + "nocontent", _commit(store, {"meta.cbor": _file_meta(1)}))
    store.repo.references.create(files + "late", _commit(store, {"meta.cbor": _file_meta(2), "content": b"x"}))
    store.repo.references.create(files + "undecodable", _commit(store, {"meta.cbor": b"\xff\x00", "content": b""}))
    store.repo.references.create(files + "blob", store.repo.create_blob(b"not a commit"))
    problems = _problems(store)
    expect = {"gap": "consecutive", "future": "format version 99", "nocontent": "no content blob",
              "late": "first version is 2", "undecodable": "session file", "blob": "expected a commit"}
    for name, text in expect.items():
        assert any(f"files/{name} " in p and text in p for p in problems), (name, problems)
    assert not any("files/good" in p for p in problems)

    # the listing still shows the sound files and says which ones it left out
    listing = run.files.list()
    assert set(listing) == {"good.md", "gap", "nocontent", "late"}
    assert listing["good.md"].version == 2
    assert set(listing.errors) == {"future", "undecodable", "blob"}
    assert "format version 99" in listing.errors["future"]


_VERIFY = """
import json, sys
import gitstate
from gitstate.verify.checks import verify
print(json.dumps([str(p) for p in verify(gitstate.open_store(sys.argv[1])).problems]))
"""


def test_truncated_loose_objects_are_reported_not_hung(store: gitstate.Store, repo: Path) -> None:
    run = _healthy(store)
    run.files.write("notes.md", "hello " * 1000, author="a")
    head = run.head()
    assert head is not None
    commit = store.repo[head.id]
    content = str(store.repo[run.files.latest("notes.md").commit].tree["content"].id)  # type: ignore[union-attr]
    targets = {"tree": str(commit.tree_id), "content": content}
    loosen(repo)  # transactions write packs: give each victim a loose file of its own
    for oid in targets.values():
        path = repo / ".git" / "objects" / oid[:2] / oid[2:]
        assert path.exists(), "expected a loose object"
        data = path.read_bytes()
        path.chmod(0o644)
        path.write_bytes(data[: len(data) // 2])
    # libgit2 1.9 never returns from inflating a truncated loose object: run verify in a child
    # process so a regression shows up as a failed test, not a hung suite
    out = subprocess.run([sys.executable, "-c", _VERIFY, str(repo)], capture_output=True, text=True,
                         timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    problems = json.loads(out.stdout)
    assert any("heads/main" in p and "truncated" in p for p in problems), problems
    assert any("files/notes%2Emd" in p and "truncated" in p and targets["content"][:12] in p for p in problems)


def test_stale_ref_locks_are_reported_repaired_and_swept(store: gitstate.Store, repo: Path) -> None:
    import os
    import time

    run = store.create_run(run_id="locks")
    run.checkpoint({"a": 1})
    lock = repo / ".git" / "refs" / "agentos" / "main" / "runs" / "locks" / "heads" / "main.lock"
    lock.write_text("")
    old = time.time() - 30
    os.utime(lock, (old, old))
    report = verify(store)
    assert any("stale lock" in p.message for p in report.problems) and not report.ok
    assert verify(store, repair=True).repaired == [os.path.relpath(lock, repo / ".git")] and not lock.exists()
    assert verify(store).ok
    lock.write_text("")
    ancient = time.time() - 120
    os.utime(lock, (ancient, ancient))
    gitstate.open_store(repo)  # any command that opens the store sweeps locks older than a minute
    assert not lock.exists()
    git(repo, "gc", "-q")  # the user's git gc works again
