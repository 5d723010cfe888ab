"""gitstate.verify on sound and deliberately damaged stores."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import cbor2
import pygit2
import pytest

import gitstate
from gitstate.errors import CorruptObjectError
from gitstate.verify.checks import verify
from tests.conftest import git, loosen, packs_only


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


_LOG = "refs/agentos/main/runs/r/nodes/main"


def _record(store: gitstate.Store, ref: str = _LOG) -> dict[str, object]:
    """The newest record of a node log, decoded."""
    commit = store.repo[store.repo.references[ref].target]
    return dict(cbor2.loads(commit.tree["node.cbor"].data))  # type: ignore[attr-defined]


def _append_record(store: gitstate.Store, node_cbor: bytes | None, links: dict[str, str] | None = None,
                   ref: str = _LOG) -> str:
    """A record commit on top of the node log ``ref`` (as a pull of a crafted log would bring it):
    ``node.cbor`` holding ``node_cbor`` (none when ``None``) and the gitlinks ``links``."""
    repo = store.repo
    tip = str(repo.references[ref].target)
    tb = repo.TreeBuilder()
    if node_cbor is not None:
        tb.insert("node.cbor", repo.create_blob(node_cbor), pygit2.enums.FileMode.BLOB)
    for name, oid in (links or {}).items():
        tb.insert(name, pygit2.Oid(hex=oid), pygit2.enums.FileMode.COMMIT)
    sig = pygit2.Signature("t", "t@example.com", 0, 0)
    new = str(repo.create_commit(None, sig, sig, "node crafted · completed", tb.write(), [tip]))
    repo.references.create(ref, new, force=True)
    return new


def _with(record: dict[str, object], **over: object) -> bytes:
    return cbor2.dumps({**record, **over}, canonical=True)


_BAD_RECORDS: dict[str, Callable[[dict[str, object]], bytes | None]] = {
    "garbage": lambda r: b"\xff",
    "not a map": lambda r: cbor2.dumps([1], canonical=True),
    "v3": lambda r: _with(r, v=3),
    "unknown status": lambda r: _with(r, status="weird"),
    "status not text": lambda r: _with(r, status=7),
    "node not text": lambda r: _with(r, node=7),
    "id not text": lambda r: _with(r, id=7),
    "ended_at not text": lambda r: _with(r, ended_at=17),
    "entry not an id": lambda r: _with(r, entry="zz"),
    "no node.cbor": lambda r: None,
}


@pytest.mark.parametrize("what", sorted(_BAD_RECORDS))
def test_unreadable_node_log_record_is_reported_and_repaired(store: gitstate.Store, what: str) -> None:
    """A node log whose newest record does not decode makes ``nodes``, ``node:NAME`` and
    ``checkpoint --node`` fail: verify names the log and the record, and --repair moves the log
    back to what reads (the old one stays in the reflog)."""
    run = _healthy(store)
    before = run.nodes()
    sound = str(store.repo.references[_LOG].target)
    bad = _append_record(store, _BAD_RECORDS[what](_record(store)))
    with pytest.raises(CorruptObjectError):
        run.nodes()
    report = verify(store)
    assert not report.ok
    assert [(p.ref, p.oid) for p in report.problems] == [(_LOG, bad)], report.problems
    assert "node log record does not read" in report.problems[0].message

    repaired = verify(store, repair=True)
    assert repaired.ok and repaired.repaired == [_LOG], repaired.problems
    assert "1 unreadable record(s)" in repaired.repair_notes[_LOG]
    assert str(store.repo.references[_LOG].target) == sound
    assert run.nodes() == before
    assert verify(store).ok
    log = git(store.location.git_dir, "reflog", "show", "--format=%H %gs", _LOG).splitlines()
    assert log[0] == f"{sound} gitstate: verify --repair (node log without its unreadable records)"


def test_repair_keeps_the_records_above_an_unreadable_one(store: gitstate.Store) -> None:
    run = _healthy(store)
    record = _record(store)
    bad = _append_record(store, b"\xff")
    later = run.checkpoint({"messages": []}, node="act", mark_node=False)  # the record is appended by hand below
    _append_record(store, _with(record, id="00000000000000aa", node="act", entry=later.id, exit=later.id),
                   {"entry": later.id, "exit": later.id})
    with pytest.raises(CorruptObjectError):
        run.nodes()
    problems = verify(store).problems
    assert [(p.ref, p.oid) for p in problems] == [(_LOG, bad)], problems
    assert verify(store, repair=True).repaired == [_LOG]
    assert [(b.node, b.exit) for b in run.nodes()][-2:] == [("plan", run.load("node:plan").id), ("act", later.id)]
    assert len(git(store.location.git_dir, "rev-list", _LOG).split()) == 3  # plan running, completed; act
    assert verify(store).ok


def test_node_log_that_names_no_commit_is_removed_by_repair(store: gitstate.Store) -> None:
    run = _healthy(store)
    store.repo.references.create(_LOG, store.repo.create_blob(b"not a record"), force=True)
    assert any(p.ref == _LOG and "expected a commit" in p.message for p in verify(store).problems)
    report = verify(store, repair=True)
    assert report.ok and report.repaired == [_LOG] and "removed" in report.repair_notes[_LOG]
    assert _LOG not in store.repo.references
    assert [b.node for b in run.nodes()] == []


def test_node_log_gitlinks_and_listed_entries_are_checked(store: gitstate.Store) -> None:
    """A record's gitlinks name what its node.cbor names; a boundary the log lists (its exit on the
    branch's line) has its entry on that line too, not a missing commit."""
    run = _healthy(store)
    record = _record(store)
    exit_id = str(record["exit"])
    missing = "2" * 40
    odd = _append_record(store, _with(record), {"entry": exit_id})  # no exit gitlink
    listed_bad = _append_record(store, _with(record, id="0123456789abcdef", entry=missing),
                                {"entry": missing, "exit": exit_id})
    problems = verify(store).problems
    assert any(p.oid == odd and "gitlink exit names nothing" in p.message for p in problems), problems
    assert any(p.ref == _LOG and p.oid == missing and "a missing commit" in p.message for p in problems), problems
    assert listed_bad not in {p.oid for p in problems}
    assert run.nodes()  # readers are not bothered: these are reported, not repaired
    assert not verify(store, repair=True).repaired


def test_rolled_back_and_pruned_nodes_whose_checkpoints_git_gc_removed_are_no_problem(
        store: gitstate.Store, repo: Path) -> None:
    """Gitlinks keep nothing alive: once the reflogs expire, git gc removes the checkpoints of a
    node a rollback or a prune left behind, and the records naming them are not damage."""
    run = store.create_run(run_id="g")
    first = run.checkpoint({"n": 0})
    with run.node("gone") as scope:
        scope.checkpoint({"n": 1})
    run.rollback(first.id)
    run.checkpoint({"n": 2})
    cut = run.checkpoint({"n": 3}, node="long", mark_node=True)  # one boundary: entry n=3, exit n=5
    for n in range(4, 6):
        run.checkpoint({"n": n}, node="long", mark_node=True)
    run.prune(keep_latest=2)  # cuts the boundary's entry off the line
    assert [(b.node, b.entry) for b in run.nodes()] == [("long", cut.id)]
    gone = scope.exit
    assert gone is not None
    store.close()
    git(repo, "reflog", "expire", "--expire=now", "--expire-unreachable=now", "--all")
    git(repo, "gc", "-q", "--prune=now")
    for oid in (gone.id, cut.id):
        assert git(repo, "cat-file", "-t", oid, check=False) == "", oid  # removed by git gc
    store = gitstate.open_store(repo)
    report = verify(store)
    assert report.ok, report.problems
    store.close()


def test_a_multi_pack_index_naming_packs_that_are_gone_is_reported_and_repaired(repo: Path) -> None:
    """A multi-pack-index left naming packs a merge removed (a `git multi-pack-index write` that ran
    meanwhile) makes `git fsck` fail: verify reports it, and `--repair` removes it."""
    store = gitstate.open_store(packs_only(repo))
    run = store.create_run(run_id="m")
    for i in range(3):
        run.checkpoint({"i": i})
    pack_dir = repo / ".git" / "objects" / "pack"
    git(repo, "multi-pack-index", "write")
    gone = sorted(pack_dir.glob("*.idx"))[0]
    aside = repo / "aside.idx"
    gone.rename(aside)  # as if a merge had removed that pack after git listed it
    try:
        problems = [p for p in verify(store).problems if "multi-pack-index" in p.ref]
        assert len(problems) == 1 and "gone" in problems[0].message, problems
    finally:
        aside.rename(gone)
    gone.rename(aside)
    report = verify(store, repair=True)
    aside.rename(gone)
    assert "objects/pack/multi-pack-index" in report.repaired
    assert not [p for p in report.problems if "multi-pack-index" in p.ref]
    assert not (pack_dir / "multi-pack-index").exists()
    assert verify(store).ok
    git(repo, "fsck", "--strict")


def test_a_damaged_multi_pack_index_is_reported_and_repaired_one_of_a_newer_version_is_not(repo: Path) -> None:
    """A multi-pack-index cut short (git fsck fails on it) is reported and `--repair` removes it;
    one that says it is of a version gitstate does not read (a newer git's) is left alone."""
    store = gitstate.open_store(packs_only(repo))
    run = store.create_run(run_id="d")
    run.checkpoint({"i": 1})
    midx = repo / ".git" / "objects" / "pack" / "multi-pack-index"
    git(repo, "multi-pack-index", "write")
    whole = midx.read_bytes()
    midx.chmod(0o644)
    midx.write_bytes(whole[:40])
    problems = [p for p in verify(store).problems if "multi-pack-index" in p.ref]
    assert len(problems) == 1 and "damaged" in problems[0].message, problems
    report = verify(store, repair=True)
    assert "objects/pack/multi-pack-index" in report.repaired and not midx.exists()
    assert verify(store).ok
    midx.write_bytes(whole[:4] + bytes([9]) + whole[5:])  # version 9
    assert verify(store).ok and midx.exists()
    midx.unlink()
    git(repo, "fsck", "--strict")
