"""Ref locks whose owner is known dead are broken at once, with real processes killed while they
hold them: ``<ref>.lock`` of a checkpoint write, ``packed-refs.lock`` and the per-ref locks of
gitstate's ``pack_refs``. A live owner's lock is never broken, however old; git's own locks (no
owner record) only by age. The stores here wait an hour before breaking a lock by age, so a write
that succeeds must have recognised the dead owner."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import bounded, git

import gitstate
from gitstate.errors import LockTimeoutError
from gitstate.git import lockfile, refs
from gitstate.store import base

ROOT = Path(__file__).resolve().parents[2]
HOUR = 3600.0

# Takes the lock of run "held" (a checkpoint write that stops inside the lock), or packed-refs.lock
# and the loose refs' locks (pack_refs stopped after it locked them), says so, and waits.
_HOLDER = r"""
import sys, time
import gitstate
from gitstate.git import refs
mode, path = sys.argv[1:3]
def stop(*args, **kwargs):
    print("holding", flush=True)
    time.sleep(600)
if mode == "write":
    store = gitstate.open_store(path)
    run = store.get_run("held")
    refs._append_reflog = stop
    run.checkpoint({"n": "never"})
else:
    store = gitstate.open_store(path)
    refs._install_packed = stop
    refs.pack_refs(store.location.common_dir)
"""


def _holder(repo: Path, mode: str) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-c", _HOLDER, mode, str(repo)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    line = bounded(proc.stdout.readline, 60)
    if line.strip() != "holding":
        proc.kill()
        raise AssertionError(f"holder did not take the lock: {proc.communicate()[1]}")
    return proc


def _kill(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)


def _locks(repo: Path) -> list[str]:
    common = repo / ".git"
    return sorted(str(p.relative_to(common)) for p in common.rglob("*.lock") if "refs" in p.parts or
                  p.name == "packed-refs.lock")


def test_a_killed_writers_ref_lock_is_broken_at_once(repo: Path) -> None:
    store = gitstate.open_store(repo, stale_lock_age=HOUR, lock_timeout=30)
    run = store.create_run(run_id="held")
    first = run.checkpoint({"n": 1})
    holder = _holder(repo, "write")
    lock = Path(store.location.common_dir, run.ref("main") + ".lock")
    try:
        owner = lockfile.read_owner(str(lock))
        assert owner is not None and owner.pid == holder.pid and owner.flock
        assert not lockfile.is_stale(str(lock), 0)  # alive: never broken, even with no age limit
    finally:
        _kill(holder)
    assert lockfile.is_stale(str(lock), HOUR)  # dead: broken at once
    second = bounded(lambda: run.checkpoint({"n": 2}), 30)
    assert second.parent_ids == (first.id,)
    assert [c.state["n"] for c in run.history()] == [2, 1]
    assert _locks(repo) == []
    git(repo, "fsck", "--strict")
    git(repo, "gc", "--quiet")


def test_a_live_writers_ref_lock_is_never_broken(repo: Path) -> None:
    store = gitstate.open_store(repo, stale_lock_age=0.0, lock_timeout=0.5)
    run = store.create_run(run_id="held")
    first = run.checkpoint({"n": 1})
    holder = _holder(repo, "write")
    try:
        old = time.time() - HOUR  # older than any age rule: only the flock says it is alive
        os.utime(Path(store.location.common_dir, run.ref("main") + ".lock"), (old, old))
        with pytest.raises(LockTimeoutError):
            bounded(lambda: run.checkpoint({"n": 2}), 30)
        assert refs.stale_locks(store.location.common_dir, 0.0) == []
        assert refs.remove_stale_locks(store.location.common_dir, 0.0) == []
        assert run.head().id == first.id  # type: ignore[union-attr]
    finally:
        _kill(holder)
    assert bounded(lambda: run.checkpoint({"n": 3}), 30).parent_ids == (first.id,)


def test_gits_own_lock_is_broken_only_by_age(repo: Path) -> None:
    store = gitstate.open_store(repo, stale_lock_age=HOUR, lock_timeout=0.3)
    run = store.create_run(run_id="held")
    run.checkpoint({"n": 1})
    lock = Path(store.location.common_dir, run.ref("main") + ".lock")
    lock.write_text("")  # as git leaves it: no owner record, no flock
    with pytest.raises(LockTimeoutError):
        bounded(lambda: run.checkpoint({"n": 2}), 30)
    old = time.time() - 2 * HOUR
    os.utime(lock, (old, old))
    bounded(lambda: run.checkpoint({"n": 2}), 30)
    assert not lock.exists()


def test_a_killed_pack_refs_locks_are_broken_at_once(repo: Path) -> None:
    store = gitstate.open_store(repo, stale_lock_age=HOUR, lock_timeout=30)
    runs = [store.create_run(run_id=f"r{i}") for i in range(3)]
    for run in runs:
        run.checkpoint({"n": 1})
    holder = _holder(repo, "pack")
    common = store.location.common_dir
    try:
        held = _locks(repo)
        assert "packed-refs.lock" in held and len(held) > 3  # packed-refs.lock and the loose refs'
        assert refs.stale_locks(common, 0.0) == []
    finally:
        _kill(holder)
    assert sorted(refs.stale_locks(common, HOUR)) == sorted(str(Path(common, p)) for p in _locks(repo))
    Path(repo, ".git", "agentos", "locks-swept").touch()  # a long sweep noted a moment ago: skipped
    gitstate.open_store(repo, stale_lock_age=HOUR)
    assert _locks(repo) != []
    _age_sweep_stamp(repo)  # a store opened a minute after the last sweep sweeps them
    gitstate.open_store(repo, stale_lock_age=HOUR)
    assert _locks(repo) == []
    for run in runs:
        run.checkpoint({"n": 2})
    store.delete_run("r0")
    assert refs.pack_refs(common) > 0
    git(repo, "pack-refs", "--all")
    assert sorted(r.id for r in store.list_runs()) == ["r1", "r2"]
    git(repo, "fsck", "--strict")


@pytest.fixture(autouse=True)
def _every_sweep_noted(monkeypatch: pytest.MonkeyPatch) -> None:
    """These repositories are small: their sweeps are quick and would not be noted."""
    monkeypatch.setattr(base, "SWEEP_NOTED_AFTER", 0.0)


def _age_sweep_stamp(repo: Path) -> None:
    stamp = Path(repo, ".git", "agentos", "locks-swept")
    assert stamp.exists()
    old = time.time() - 61
    os.utime(stamp, (old, old))


def test_stores_opening_within_a_minute_of_a_sweep_skip_it(repo: Path) -> None:
    """The sweep walks every folder of loose refs: one store a minute does it, the others skip it,
    and a lock left by a dead writer goes at the first open after that minute."""
    store = gitstate.open_store(repo, stale_lock_age=HOUR, lock_timeout=30)
    store.create_run(run_id="r0").checkpoint({"n": 1})
    gitstate.open_store(repo)  # sweeps (gitstate's folder exists now), and notes when
    lock = Path(repo, ".git", "refs", "agentos", "left.lock")
    lock.write_text("")  # no owner record: judged by age
    old = time.time() - 2 * HOUR
    os.utime(lock, (old, old))
    calls: list[str] = []
    sweep = refs.remove_stale_locks

    def counted(*args: Any, **kwargs: Any) -> list[str]:
        calls.append("sweep")
        return sweep(*args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(refs, "remove_stale_locks", counted)
        gitstate.open_store(repo)
        assert calls == [] and lock.exists()
        _age_sweep_stamp(repo)
        gitstate.open_store(repo)
        gitstate.open_store(repo)
    assert calls == ["sweep"] and not lock.exists()


_FORKER = r"""
import os, sys, time
from gitstate.git import lockfile
fd = lockfile.create_held(sys.argv[1])
if os.fork() == 0:
    print(os.getpid(), flush=True)  # after the fork hooks ran in this child
    time.sleep(600)
    os._exit(0)
time.sleep(600)
"""


def test_a_forked_child_does_not_keep_a_dead_parents_lock_alive(tmp_path: Path) -> None:
    path = tmp_path / "x.lock"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    parent = subprocess.Popen([sys.executable, "-c", _FORKER, str(path)], stdout=subprocess.PIPE,
                              text=True, env=env)
    assert parent.stdout is not None
    child = int(bounded(parent.stdout.readline, 60))
    try:
        assert not lockfile.is_stale(str(path), 0)
        _kill(parent)
        os.kill(child, 0)  # the child still runs ...
        assert lockfile.is_stale(str(path), HOUR)  # ... and the lock is known dead all the same
    finally:
        try:
            os.kill(child, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_gits_packed_refs_lock_is_never_broken_by_a_multi_ref_write(repo: Path) -> None:
    """A multi-ref write waits for packed-refs.lock; one git left (no owner record), however old,
    is never removed: the write times out and changes nothing."""
    store = gitstate.open_store(repo, stale_lock_age=0.0, lock_timeout=0.5)
    run = store.create_run(run_id="held")
    with run.node("plan"):
        first = run.checkpoint({"n": 1})  # the branch has a node log: a fork moves two refs
    lock = Path(store.location.common_dir, "packed-refs.lock")
    lock.write_text("")  # as git leaves it
    old = time.time() - 10 * HOUR
    os.utime(lock, (old, old))
    with pytest.raises(LockTimeoutError):
        bounded(lambda: run.fork(first.id, "side"), 30)
    assert lock.exists() and lock.read_text() == ""
    assert run.tip("side") is None
    lock.unlink()
    run.fork(first.id, "side")
    assert run.tip("side") == first.id
