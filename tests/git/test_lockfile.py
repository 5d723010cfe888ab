"""Owned lock files and the stale-lock breaker, with real processes where the owner's life matters:
a killed owner's lock is broken at once, a live owner's never, another machine's only by age; a
release never removes a lock someone else retook; two processes racing for a stale lock never both
win."""

from __future__ import annotations

import dataclasses
import fcntl
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import bounded

from gitstate.git import lockfile
from gitstate.git.lockfile import Owner

ROOT = Path(__file__).resolve().parents[2]
LINUX_PROC = lockfile.process_start_time(os.getpid()) is not None
needs_proc = pytest.mark.skipif(not LINUX_PROC, reason="process start times need Linux /proc")

_HOLDER = r"""
import sys, time
from gitstate.git import lockfile
lock = lockfile.acquire(sys.argv[1], stale_after=3600)
print("held" if lock is not None else "busy", flush=True)
time.sleep(60)
"""

_RACER = r"""
import sys
from gitstate.git import lockfile
path = sys.argv[1]
for line in sys.stdin:
    cmd = line.split()
    if cmd[0] == "go":
        start = float(cmd[1])
        while lockfile.time.time() < start:
            pass
        lock = lockfile.acquire(path, stale_after=3600)
        print(1 if lock is not None else 0, flush=True)
    elif cmd[0] == "release":
        print(1 if lock is not None and lock.release() else 0, flush=True)
    elif cmd[0] == "quit":
        break
"""


def _spawn(code: str, *args: str) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen([sys.executable, "-c", code, *args], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _line(proc: subprocess.Popen[str], timeout: float = 30.0) -> str:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    if not ready:
        proc.kill()
        raise AssertionError(f"no answer from child within {timeout} s")
    line = proc.stdout.readline()
    if not line:
        _out, err = proc.communicate(timeout=10)
        raise AssertionError(f"child ended: {err}")
    return line.strip()


def _send(proc: subprocess.Popen[str], text: str) -> None:
    assert proc.stdin is not None
    proc.stdin.write(text + "\n")
    proc.stdin.flush()


def _dead_owner() -> Owner:
    """An owner on this machine that provably does not run: this process's pid with another
    start time (a later process that reused the pid)."""
    me = Owner.current()
    assert me.start is not None
    return dataclasses.replace(me, start=me.start + 1)


def _leftovers(directory: Path, lock: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p != lock)


# --------------------------------------------------------------------------------------------


@needs_proc
def test_lock_of_killed_process_is_broken_at_once(tmp_path: Path) -> None:
    path = tmp_path / "work.lock"
    holder = _spawn(_HOLDER, str(path))
    try:
        assert _line(holder) == "held"
        owner = lockfile.read_owner(str(path))
        assert owner is not None and owner.pid == holder.pid
        assert owner.start == lockfile.process_start_time(holder.pid)
        # alive: never broken, however small stale_after (its life is proven, not guessed)
        assert lockfile.acquire(str(path), stale_after=3600) is None
        assert lockfile.acquire(str(path), stale_after=0) is None
        assert lockfile.read_owner(str(path)) == owner
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
    finally:
        holder.kill()
        holder.communicate(timeout=30)
    started = time.monotonic()
    lock = lockfile.acquire(str(path), stale_after=3600)
    assert lock is not None, "the lock of a killed process must be broken at once"
    assert time.monotonic() - started < 5
    assert lockfile.read_owner(str(path)) == lock.owner and lock.owner.pid == os.getpid()
    assert lock.release() and not path.exists()
    assert _leftovers(tmp_path, path) == []


@needs_proc
def test_lock_of_killed_unreaped_process_is_broken(tmp_path: Path) -> None:
    """A killed child its parent has not waited for yet is a zombie: dead, although its pid exists."""
    path = tmp_path / "work.lock"
    holder = _spawn(_HOLDER, str(path))
    try:
        assert _line(holder) == "held"
        os.kill(holder.pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while (stat := lockfile._proc_stat(holder.pid)) is not None and stat[0] != "Z":
            assert time.monotonic() < deadline
            time.sleep(0.01)
        lock = lockfile.acquire(str(path), stale_after=3600)
        assert lock is not None
        lock.release()
    finally:
        holder.kill()
        holder.communicate(timeout=30)


def test_lock_of_this_live_process_is_not_broken(tmp_path: Path) -> None:
    path = str(tmp_path / "work.lock")
    first = lockfile.acquire(path, stale_after=0)
    assert first is not None
    with first:
        assert first.held()
        assert lockfile.acquire(path, stale_after=0) is None or not LINUX_PROC
        assert first.held() or not LINUX_PROC
    assert not os.path.exists(path)


@pytest.mark.parametrize("content", ["other-host", "garbage", "empty"])
def test_lock_of_other_host_or_unreadable_is_broken_only_after_stale_after(tmp_path: Path, content: str) -> None:
    path = tmp_path / "work.lock"
    if content == "other-host":
        # a dead pid there says nothing: it is another machine's
        path.write_bytes(dataclasses.replace(Owner.current(), host="elsewhere.invalid", pid=2**22 + 7).to_bytes())
    elif content == "garbage":
        path.write_bytes(b"12345\n")  # the old format, or another program's lock
    else:
        path.write_bytes(b"")  # a half-written lock
    before = path.read_bytes()
    assert lockfile.acquire(str(path), stale_after=60) is None
    assert path.read_bytes() == before
    old = time.time() - 59
    os.utime(path, (old, old))
    assert lockfile.acquire(str(path), stale_after=60) is None
    old = time.time() - 61
    os.utime(path, (old, old))
    lock = lockfile.acquire(str(path), stale_after=60)
    assert lock is not None and lockfile.read_owner(str(path)) == lock.owner
    assert lock.release()
    assert _leftovers(tmp_path, path) == []


def test_a_fifo_in_a_locks_place_is_stale_at_once_and_never_blocks(tmp_path: Path) -> None:
    """No holder makes its lock a FIFO; reading one would wait for ever for a writer."""
    path = tmp_path / "housekeeping.lock"
    os.mkfifo(path)
    assert bounded(lambda: lockfile.read_owner(str(path)), 5) is None
    assert bounded(lambda: lockfile.is_stale(str(path), 3600), 5) is True
    lock = bounded(lambda: lockfile.acquire(str(path), stale_after=3600), 5)
    assert lock is not None and path.is_file() and lock.held()
    assert lock.release()
    assert _leftovers(tmp_path, path) == []


def test_dead_pid_on_this_host_is_stale_even_without_start_time(tmp_path: Path) -> None:
    path = tmp_path / "work.lock"
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    dead = dataclasses.replace(Owner.current(), pid=int(done.stdout), start=None)
    path.write_bytes(dead.to_bytes())
    assert lockfile.is_stale(str(path), 3600)
    assert lockfile.acquire(str(path), stale_after=3600) is not None


def test_release_leaves_a_lock_retaken_by_another_owner(tmp_path: Path) -> None:
    path = tmp_path / "work.lock"
    mine = lockfile.acquire(str(path), stale_after=60)
    assert mine is not None
    # someone judged it stale, broke it and took it: often on the very same inode number
    assert lockfile.break_stale(str(path), lambda p: True)
    theirs = lockfile.acquire(str(path), stale_after=60)
    assert theirs is not None
    assert not mine.held() and theirs.held()
    assert mine.release() is False
    assert path.exists() and lockfile.read_owner(str(path)) == theirs.owner
    assert mine.refresh() is False
    assert theirs.release() and not path.exists()


def test_release_leaves_a_lock_another_process_retook(tmp_path: Path) -> None:
    path = tmp_path / "work.lock"
    mine = lockfile.acquire(str(path), stale_after=60)
    assert mine is not None
    assert lockfile.break_stale(str(path), lambda p: True)
    holder = _spawn(_HOLDER, str(path))
    try:
        assert _line(holder) == "held"
        with mine:
            pass  # __exit__ releases: must not remove the child's lock
        owner = lockfile.read_owner(str(path))
        assert owner is not None and owner.pid == holder.pid
    finally:
        holder.kill()
        holder.communicate(timeout=30)


def test_release_keeps_a_lock_whose_content_was_replaced(tmp_path: Path) -> None:
    path = tmp_path / "work.lock"
    mine = lockfile.acquire(str(path), stale_after=60)
    assert mine is not None
    other = dataclasses.replace(mine.owner, token="f" * 16).to_bytes()
    with open(path, "r+b") as fh:  # same inode, not our record
        fh.write(other)
        fh.truncate()
    assert mine.release() is False and path.read_bytes() == other


@needs_proc
def test_two_processes_racing_for_a_stale_lock_never_both_win(tmp_path: Path) -> None:
    path = tmp_path / "work.lock"
    racers = [_spawn(_RACER, str(path)) for _ in range(2)]
    try:
        for round_ in range(50):
            stale = round_ % 5 != 4  # mostly a dead owner's lock, sometimes a free path
            if stale:
                path.write_bytes(_dead_owner().to_bytes())
            start = time.time() + 0.05
            for r in racers:
                _send(r, f"go {start}")
            won = [_line(r) == "1" for r in racers]
            assert sum(won) == 1, f"round {round_}: {won}"
            winner = racers[won.index(True)]
            owner = lockfile.read_owner(str(path))
            assert owner is not None and owner.pid == winner.pid, round_
            assert _leftovers(tmp_path, path) == [], round_
            answers = []
            for r in racers:
                _send(r, "release")
                answers.append(_line(r))
            assert answers == ["1" if w else "0" for w in won], round_
            assert not path.exists()
        for r in racers:
            _send(r, "quit")
            r.wait(timeout=30)
    finally:
        for r in racers:
            r.kill()
            r.communicate(timeout=30)


# --------------------------------------------------------------------------------------------
# break_stale


def test_break_stale_removes_a_stale_lock(tmp_path: Path) -> None:
    path = tmp_path / "x.lock"
    path.write_text("old")
    assert lockfile.break_stale(str(path), lambda p: True)
    assert not path.exists() and _leftovers(tmp_path, path) == []
    assert lockfile.break_stale(str(path), lambda p: True) is False  # nothing there


def test_break_stale_leaves_a_fresh_lock_untouched(tmp_path: Path) -> None:
    path = tmp_path / "x.lock"
    path.write_text("new")
    seen: list[str] = []
    assert lockfile.break_stale(str(path), lambda p: bool(seen.append(p))) is False
    assert seen == [str(path)] and path.read_text() == "new"


def test_break_stale_puts_back_a_lock_that_became_fresh(tmp_path: Path) -> None:
    """Stale at the first look, but the file renamed aside is a new owner's (it locked between the
    look and the rename): it goes back, the very same file."""
    path = tmp_path / "x.lock"
    path.write_text("retaken")
    ino = path.stat().st_ino
    seen: list[str] = []

    def judge(p: str) -> bool:
        seen.append(p)
        return p == str(path)  # stale at the lock's name, fresh once moved aside

    assert lockfile.break_stale(str(path), judge) is False
    assert len(seen) == 2 and seen[1] != str(path) and not os.path.exists(seen[1])
    assert path.read_text() == "retaken" and path.stat().st_ino == ino
    assert _leftovers(tmp_path, path) == []


def test_break_stale_does_not_put_back_over_a_newer_lock(tmp_path: Path) -> None:
    path = tmp_path / "x.lock"
    path.write_text("moved aside")

    def judge(p: str) -> bool:
        if p != str(path):
            path.write_text("newest")  # someone locked the free name meanwhile
            return False
        return True

    assert lockfile.break_stale(str(path), judge) is False
    assert path.read_text() == "newest" and _leftovers(tmp_path, path) == []


def test_break_stale_puts_back_when_the_judge_fails(tmp_path: Path) -> None:
    path = tmp_path / "x.lock"
    path.write_text("kept")

    def judge(p: str) -> bool:
        if p != str(path):
            raise RuntimeError("boom")
        return True

    with pytest.raises(RuntimeError):
        lockfile.break_stale(str(path), judge)
    assert path.read_text() == "kept" and _leftovers(tmp_path, path) == []


def test_refresh_renews_the_age(tmp_path: Path) -> None:
    path = tmp_path / "work.lock"
    lock = lockfile.acquire(str(path), stale_after=60)
    assert lock is not None
    old = time.time() - 600
    os.utime(path, (old, old))
    assert lock.refresh() and time.time() - path.stat().st_mtime < 60
    assert lock.release()


def test_owner_record_round_trips_and_rejects_junk() -> None:
    me = Owner.current()
    assert Owner.parse(me.to_bytes()) == me
    assert me.pid == os.getpid() and me.host
    for junk in (b"", b"123", b"{}", b'{"pid": 0, "host": "h", "time": 1}', b'{"pid": true, "host": "h", "time": 1}',
                 b"\xff\xfe", b"[1, 2]"):
        assert Owner.parse(junk) is None, junk


# --------------------------------------------------------------------------------------------
# git's lock files held by gitstate (create_held)


def test_create_held_writes_a_flock_record_and_release_removes_it(tmp_path: Path) -> None:
    path = tmp_path / "ref.lock"
    fd = lockfile.create_held(str(path))
    try:
        owner = lockfile.read_owner(str(path))
        assert owner is not None and owner.flock and owner.pid == os.getpid()
        assert not lockfile.is_stale(str(path), 0)  # held: alive whatever its age
        with pytest.raises(FileExistsError):
            lockfile.create_held(str(path))  # git's protocol: exclusive
    finally:
        lockfile.release_held(str(path), fd)
    assert not path.exists()


def test_a_flock_record_of_another_kernel_is_judged_by_age(tmp_path: Path) -> None:
    path = tmp_path / "ref.lock"
    other = dataclasses.replace(Owner.current(flock=True), boot="another-kernel", host="elsewhere")
    path.write_bytes(other.to_bytes())  # nobody here holds a flock on it: that proves nothing there
    assert not lockfile.is_stale(str(path), 60)
    then = time.time() - 120
    os.utime(path, (then, then))
    assert lockfile.is_stale(str(path), 60)


def test_a_flock_record_whose_flock_is_free_is_stale_at_once(tmp_path: Path) -> None:
    path = tmp_path / "ref.lock"
    path.write_bytes(Owner.current(flock=True).to_bytes())  # as a dead holder leaves it
    assert lockfile.is_stale(str(path), 3600)
    assert lockfile.break_stale(str(path), lambda p: lockfile.is_stale(p, 3600))
    assert not path.exists()


def test_a_lock_without_record_is_alive_while_its_flock_is_held(tmp_path: Path) -> None:
    path = tmp_path / "ref.lock"
    fd = lockfile.create_held(str(path))
    try:
        assert lockfile.holds_flock(fd)
        os.ftruncate(fd, 0)
        os.pwrite(fd, b"0" * 40 + b"\n", 0)  # the record replaced by a ref's new value, as set_if_equals does
        then = time.time() - 3600
        os.utime(path, (then, then))
        assert lockfile.read_owner(str(path)) is None
        assert not lockfile.is_stale(str(path), 60)  # old and without a record, but its flock is held
        assert not lockfile.break_stale(str(path), lambda p: lockfile.is_stale(p, 60))
        assert path.exists()
    finally:
        lockfile.release_held(str(path), fd)
    assert not lockfile.holds_flock(fd)
    path.write_bytes(b"0" * 40 + b"\n")  # the same content, nobody holding it: git's lock, judged by age
    os.utime(path, (time.time() - 3600,) * 2)
    assert lockfile.is_stale(str(path), 60)


def test_break_stale_never_moves_a_lock_taken_after_the_verdict(tmp_path: Path) -> None:
    """A breaker judged a stale lock; another breaker removed it and a live writer locked again
    before this one acted. Its lock must stay where it is: moved aside while a third process locked
    the path, the writer would rename that process's lock file over the ref."""
    path = str(tmp_path / "ref.lock")
    Path(path).write_bytes(b"")
    os.utime(path, (time.time() - 3600,) * 2)  # stale: no record, old
    held: list[int] = []
    calls = [0]

    def judge(p: str) -> bool:
        calls[0] += 1
        verdict = lockfile.is_stale(p, stale_after=5.0)
        if calls[0] == 1:  # the other breaker removes it; the writer locks the path again
            os.unlink(path)
            held.append(lockfile.create_held(path))
        elif calls[0] == 2:  # (only if the writer's lock was moved aside) a third process locks
            held.append(lockfile.create_held(path))
        return verdict

    try:
        assert lockfile.break_stale(path, judge) is False
        writer = os.fstat(held[0])
        assert (os.stat(path).st_dev, os.stat(path).st_ino) == (writer.st_dev, writer.st_ino)
        assert len(held) == 1 and os.listdir(tmp_path) == ["ref.lock"]
    finally:
        for fd in held:
            lockfile.release_held(None, fd)


def test_break_stale_leaves_a_lock_another_breaker_is_at(tmp_path: Path) -> None:
    path = str(tmp_path / "ref.lock")
    Path(path).write_bytes(b"")
    os.utime(path, (time.time() - 3600,) * 2)
    other = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a breaker between its flock and its rename
        assert lockfile.break_stale(path, lambda p: True) is False
        assert os.path.exists(path)
    finally:
        os.close(other)
    assert lockfile.break_stale(path, lambda p: lockfile.is_stale(p, stale_after=5.0)) is True
    assert not os.path.exists(path)
