"""The one write path, StoreCore.write with a Transaction: a lost compare-and-swap re-runs ``build``
(non-strict) or fails at once (strict); a lock held by a live writer ends in LockTimeoutError after
about ``lock_timeout`` (never a RecursionError, never a hang); a stale lock is broken; ``tx.after``
callbacks run only once the refs moved; a multi-ref transaction moves and logs every ref. Also the
LangGraph saver's put_writes under a held lock."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from conftest import bounded, git

import gitstate
from gitstate.errors import ConflictError, LockTimeoutError, StoreWriteError
from gitstate.git.objects import MODE_BLOB
from gitstate.store.transaction import Transaction

REF = "refs/agentos/main/runs/tx/heads/main"
OTHER = "refs/agentos/main/runs/tx/heads/other"
TIMEOUT = 0.5


@contextmanager
def held_lock(path: Path) -> Iterator[None]:
    """A ``.lock`` held by a live writer: created, and touched in a thread so it never looks stale."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("")
    stop = threading.Event()

    def touch() -> None:
        while not stop.wait(0.05):
            try:
                os.utime(path)
            except FileNotFoundError:
                return

    toucher = threading.Thread(target=touch, daemon=True)
    toucher.start()
    try:
        yield
    finally:
        stop.set()
        toucher.join(5)
        path.unlink(missing_ok=True)


def rev_parse(repo: Path, name: str) -> str | None:
    return git(repo, "rev-parse", "--verify", "-q", name, check=False).strip() or None


def reflog(repo: Path, name: str) -> list[str]:
    return git(repo, "reflog", "show", "--format=%H %gs", name).splitlines()


def stage(tx: Transaction, parent: str | None, label: str) -> str:
    tree = tx.tree([("label", tx.blob(label.encode()), MODE_BLOB)])
    return tx.commit(tree, [parent] if parent else [], f"{label}\n")


@pytest.fixture
def quick(repo: Path) -> Iterator[gitstate.Store]:
    store = gitstate.open_store(repo, lock_timeout=TIMEOUT)
    yield store
    store.close()


def seed(store: gitstate.Store, ref: str = REF) -> str:
    return store.core.write(lambda tx: _create(tx, ref))


def _create(tx: Transaction, ref: str) -> str:
    oid = stage(tx, None, f"seed {ref}")
    tx.set_ref(ref, None, oid, "gitstate: seed")
    return oid


def test_a_lost_race_reruns_build_and_succeeds(quick: gitstate.Store, repo: Path) -> None:
    first = seed(quick)
    racer = git(repo, "commit-tree", git(repo, "rev-parse", f"{first}^{{tree}}").strip(), "-p", first,
                "-m", "racer").strip()
    calls: list[str | None] = []

    def build(tx: Transaction) -> str:
        tip = quick.core.read_ref(REF)
        calls.append(tip)
        oid = stage(tx, tip, f"attempt {len(calls)}")
        if len(calls) == 1:  # another writer moves the ref after we read it
            git(repo, "update-ref", REF, racer, first)
        tx.set_ref(REF, tip, oid, "gitstate: checkpoint")
        return oid

    oid = quick.core.write(build)
    assert calls == [first, racer]
    assert rev_parse(repo, REF) == oid
    assert git(repo, "rev-parse", f"{oid}^").strip() == racer  # built on what was there, nothing lost
    git(repo, "fsck", "--strict", "--no-dangling")


def test_a_strict_update_fails_at_once(quick: gitstate.Store, repo: Path) -> None:
    first = seed(quick)
    racer = git(repo, "commit-tree", git(repo, "rev-parse", f"{first}^{{tree}}").strip(), "-m", "racer").strip()
    calls = 0

    def build(tx: Transaction) -> None:
        nonlocal calls
        calls += 1
        oid = stage(tx, first, "strict")
        git(repo, "update-ref", REF, racer)
        tx.set_ref(REF, first, oid, "gitstate: rollback", strict=True)

    with pytest.raises(ConflictError) as info:
        quick.core.write(build)
    assert calls == 1
    assert (info.value.ref, info.value.expected, info.value.actual) == (REF, first, racer)
    assert rev_parse(repo, REF) == racer


def test_a_ref_that_keeps_moving_ends_in_conflict_after_the_timeout(quick: gitstate.Store, repo: Path) -> None:
    first = seed(quick)
    tree = git(repo, "rev-parse", f"{first}^{{tree}}").strip()
    calls = 0

    def build(tx: Transaction) -> None:
        nonlocal calls
        calls += 1
        tip = quick.core.read_ref(REF)
        oid = stage(tx, tip, "never lands")
        moved = git(repo, "commit-tree", tree, "-m", f"racer {calls}").strip()
        git(repo, "update-ref", REF, moved)
        tx.set_ref(REF, tip, oid, "gitstate: checkpoint")

    start = time.monotonic()
    with pytest.raises(ConflictError):
        bounded(lambda: quick.core.write(build), TIMEOUT + 20)
    assert calls > 1
    assert time.monotonic() - start < TIMEOUT + 10


def test_a_held_lock_ends_in_lock_timeout(quick: gitstate.Store, repo: Path) -> None:
    first = seed(quick)
    lock = Path(quick.location.common_dir, REF + ".lock")
    calls = 0

    def build(tx: Transaction) -> None:
        nonlocal calls
        calls += 1
        tx.set_ref(REF, first, stage(tx, first, "blocked"), "gitstate: checkpoint")

    with held_lock(lock):
        start = time.monotonic()
        with pytest.raises(LockTimeoutError) as info:
            bounded(lambda: quick.core.write(build), TIMEOUT + 20)
        elapsed = time.monotonic() - start
        assert lock.exists()  # a live writer's lock is never broken
    assert info.value.ref == REF and info.value.seconds == TIMEOUT
    assert TIMEOUT * 0.9 <= elapsed < TIMEOUT + 3, elapsed
    assert calls == 1  # the lock is waited for (retried under the deadline), the objects not rebuilt
    assert rev_parse(repo, REF) == first
    assert len(reflog(repo, REF)) == 1


def test_a_held_lock_ends_in_lock_timeout_through_the_public_api(quick: gitstate.Store, repo: Path) -> None:
    run = quick.create_run(run_id="tx")
    cp = run.checkpoint({"n": 1})
    with held_lock(Path(quick.location.common_dir, run.ref("main") + ".lock")):
        start = time.monotonic()
        with pytest.raises(LockTimeoutError):
            bounded(lambda: run.checkpoint({"n": 2}), TIMEOUT + 20)
        assert time.monotonic() - start < TIMEOUT + 3
    assert run.head().id == cp.id  # type: ignore[union-attr]


def test_a_stale_lock_is_broken_and_the_write_succeeds(quick: gitstate.Store, repo: Path) -> None:
    first = seed(quick)
    lock = Path(quick.location.common_dir, REF + ".lock")
    lock.write_text("left by a killed writer")
    old = time.time() - 3600
    os.utime(lock, (old, old))

    def build(tx: Transaction) -> str:
        oid = stage(tx, first, "after the stale lock")
        tx.set_ref(REF, first, oid, "gitstate: checkpoint")
        return oid

    oid = bounded(lambda: quick.core.write(build), TIMEOUT + 20)
    assert rev_parse(repo, REF) == oid
    assert not lock.exists()
    assert reflog(repo, REF)[0] == f"{oid} gitstate: checkpoint"


def test_after_callbacks_run_only_once_the_refs_moved(quick: gitstate.Store, repo: Path) -> None:
    first = seed(quick)
    racer = git(repo, "commit-tree", git(repo, "rev-parse", f"{first}^{{tree}}").strip(), "-p", first,
                "-m", "racer").strip()
    seen: list[tuple[int, str | None, str]] = []
    calls = 0

    def build(tx: Transaction) -> str:
        nonlocal calls
        calls += 1
        attempt = calls
        tip = quick.core.read_ref(REF)
        oid = stage(tx, tip, f"attempt {attempt}")
        if attempt == 1:
            git(repo, "update-ref", REF, racer, first)
        tx.set_ref(REF, tip, oid, "gitstate: checkpoint")
        tx.after(lambda: seen.append((attempt, rev_parse(repo, REF), oid)))
        return oid

    oid = quick.core.write(build)
    assert seen == [(2, oid, oid)]  # the lost attempt's callback never ran

    def strict_build(tx: Transaction) -> None:
        tx.set_ref(REF, first, stage(tx, first, "strict"), "gitstate: x", strict=True)
        tx.after(lambda: seen.append((-1, None, "")))

    with pytest.raises(ConflictError):
        quick.core.write(strict_build)
    lock = Path(quick.location.common_dir, REF + ".lock")

    def blocked_build(tx: Transaction) -> None:
        tx.set_ref(REF, oid, first, "gitstate: y")
        tx.after(lambda: seen.append((-2, None, "")))

    with held_lock(lock), pytest.raises(LockTimeoutError):
        bounded(lambda: quick.core.write(blocked_build), TIMEOUT + 20)
    assert seen == [(2, oid, oid)]


def test_a_multi_ref_transaction_moves_and_logs_every_ref(quick: gitstate.Store, repo: Path) -> None:
    first = seed(quick)
    doomed = seed(quick, "refs/agentos/main/runs/tx/heads/doomed")
    third = "refs/agentos/main/runs/tx2/run"

    def build(tx: Transaction) -> tuple[str, str, str]:
        a = stage(tx, first, "a")
        b = stage(tx, None, "b")
        c = stage(tx, None, "c")
        tx.set_ref(REF, first, a, "gitstate: move main")
        tx.set_ref(OTHER, None, b, "gitstate: create other")
        tx.set_ref(third, None, c, "gitstate: create run tx2")
        tx.delete_ref("refs/agentos/main/runs/tx/heads/doomed", doomed, "gitstate: delete doomed")
        return a, b, c

    a, b, c = quick.core.write(build)
    assert (rev_parse(repo, REF), rev_parse(repo, OTHER), rev_parse(repo, third)) == (a, b, c)
    assert rev_parse(repo, "refs/agentos/main/runs/tx/heads/doomed") is None
    assert reflog(repo, REF) == [f"{a} gitstate: move main", f"{first} gitstate: seed"]
    assert reflog(repo, OTHER) == [f"{b} gitstate: create other"]
    assert reflog(repo, third) == [f"{c} gitstate: create run tx2"]
    assert [e.message for e in quick.core.reflog(OTHER)] == ["gitstate: create other"]
    git(repo, "fsck", "--strict", "--no-dangling")


def test_a_ref_file_at_a_parent_name_fails_at_once(quick: gitstate.Store, repo: Path) -> None:
    """A foreign ref where a directory of ours must go is a StoreWriteError straight away, not a
    lock to wait out (LockTimeoutError after lock_timeout)."""
    run = quick.create_run(run_id="clash")
    git(repo, "update-ref", "refs/agentos/main/runs/clash/heads", git(repo, "rev-parse", "HEAD").strip())
    start = time.monotonic()
    with pytest.raises(StoreWriteError):
        bounded(lambda: run.checkpoint({"n": 1}), TIMEOUT + 20)
    assert time.monotonic() - start < TIMEOUT
    assert not Path(quick.location.common_dir, "refs/agentos/main/runs/clash/heads.lock").exists()


# -- the LangGraph saver under a held lock ------------------------------------------------------


def test_saver_under_a_held_branch_lock_ends_in_lock_timeout(repo: Path) -> None:
    """Regular pending writes move no branch (a writes ref is created), so they land while the
    branch's lock is held; what must move the branch -- an error write amending the checkpoint, the
    next put -- ends in LockTimeoutError, and lands once the lock is gone (the put folding the
    pending writes into the checkpoint's commit)."""
    pytest.importorskip("langgraph.checkpoint.base")
    from langgraph.checkpoint.base import empty_checkpoint

    from gitstate.langgraph import GitCheckpointSaver

    store = gitstate.open_store(repo, lock_timeout=TIMEOUT)
    saver = GitCheckpointSaver(store=store)

    def checkpoint(n: int) -> Any:
        cp = empty_checkpoint()
        cp["channel_values"] = {"n": n}
        cp["channel_versions"] = {"n": str(n)}
        return cp

    cfg = saver.put({"configurable": {"thread_id": "held", "checkpoint_ns": ""}}, checkpoint(1),
                    {"source": "loop", "step": 0}, {"n": "1"})
    ref = store.get_run("held").ref("main")
    tip = store.core.read_ref(ref)
    assert tip is not None
    with held_lock(Path(store.location.common_dir, ref + ".lock")):
        saver.put_writes(cfg, [("n", 2)], "task-1")  # a new writes ref: no branch lock needed
        start = time.monotonic()
        with pytest.raises(LockTimeoutError):
            bounded(lambda: saver.put_writes(cfg, [("__error__", ValueError("boom"))], "task-2"), TIMEOUT + 30)
        with pytest.raises(LockTimeoutError):
            bounded(lambda: saver.put(cfg, checkpoint(2), {"source": "loop", "step": 1}, {"n": "2"}),
                    TIMEOUT + 30)
        elapsed = time.monotonic() - start
    assert elapsed < 2 * TIMEOUT + 5, elapsed
    assert store.core.read_ref(ref) == tip
    got = saver.get_tuple(cfg)
    assert got is not None and got.pending_writes == [("task-1", "n", 2)]
    nxt = saver.put(cfg, checkpoint(2), {"source": "loop", "step": 1}, {"n": "2"})  # lands now
    assert store.core.read_ref(ref) != tip and store.core.list_refs(store.get_run("held").ref("main")[:-len("heads/main")]
                                                           + "writes/") == []
    got = saver.get_tuple(cfg)
    assert got is not None and got.pending_writes == [("task-1", "n", 2)]
    assert got.config["configurable"]["checkpoint_id"] == cfg["configurable"]["checkpoint_id"]
    latest = saver.get_tuple({"configurable": {"thread_id": "held", "checkpoint_ns": ""}})
    assert latest is not None and latest.config == nxt


def test_a_journal_that_cannot_be_written_never_fails_a_written_checkpoint(repo: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A snapshot's loose objects are journaled for housekeeping after the refs moved: where that
    cannot be written (a read-only ``agentos/`` folder) the checkpoint stands, and no error (nor
    traceback) says otherwise; the objects stay loose for the user's ``git gc``."""
    from gitstate.store import housekeeping

    def refuse(common_dir: str, oids: object) -> int:
        raise PermissionError(13, "Permission denied", os.path.join(common_dir, "agentos", "loose.journal"))

    store = gitstate.open_store(repo)
    run = store.create_run(run_id="journal")
    monkeypatch.setattr(housekeeping, "record", refuse)
    (repo / "new.txt").write_text("new\n")
    cp = run.checkpoint({"a": 1}, files=["new.txt"])  # a partial snapshot: loose objects, journaled
    head = run.head()
    assert head is not None and head.id == cp.id and cp.files_tree_id is not None
    git(repo, "fsck", "--strict")
