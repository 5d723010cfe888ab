"""gitstate's own locks (flocks the kernel releases when their holder dies), the owner records of
the git lock files gitstate holds, and the stale-lock breaker, with real processes where the
owner's life matters."""

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

_HOLDER = r"""
import sys, time
from gitstate.git import lockfile
lock = lockfile.acquire(sys.argv[1])
print("held" if lock is not None else "busy", flush=True)
time.sleep(60)
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


def _leftovers(directory: Path, lock: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p != lock)


# --------------------------------------------------------------------------------------------


def test_a_file_lock_of_a_killed_holder_is_free_at_once(tmp_path: Path) -> None:
    """gitstate's own locks are flocks: the kernel releases a killed holder's, and the file stays."""
    path = tmp_path / "work.lock"
    holder = _spawn(_HOLDER, str(path))
    try:
        assert _line(holder) == "held"
        assert lockfile.acquire(str(path)) is None  # a live holder: never taken, whatever its age
        old = time.time() - 10 * 86400
        os.utime(path, (old, old))
        assert lockfile.acquire(str(path)) is None
        assert lockfile.holder(str(path)) == holder.pid
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.communicate(timeout=30)
    lock = lockfile.acquire(str(path))
    assert lock is not None and lock.held() and lockfile.holder(str(path)) == os.getpid()
    assert lockfile.acquire(str(path)) is None  # held by this process's other lock (one per open file)
    lock.release()
    lock.release()  # twice is fine
    assert not lock.held() and path.exists()
    again = lockfile.acquire(str(path))
    assert again is not None
    again.release()


def test_a_file_lock_taken_in_a_forked_child_is_the_childs(tmp_path: Path) -> None:
    """A child forked while the parent holds a lock does not keep it (its copy is closed at the
    fork), and its release leaves the parent's lock alone."""
    path = tmp_path / "work.lock"
    lock = lockfile.acquire(str(path))
    assert lock is not None
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            lock.release()  # the parent's: not the child's to release
            code = 0 if not lock.held() and lockfile.acquire(str(path)) is None else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert lock.held() and lockfile.acquire(str(path)) is None
    lock.release()


def test_a_fifo_in_a_file_locks_place_never_blocks(tmp_path: Path) -> None:
    """No holder makes its lock a FIFO; opening one would wait for ever for a writer."""
    path = tmp_path / "housekeeping.lock"
    os.mkfifo(path)
    assert bounded(lambda: lockfile.read_owner(str(path)), 5) is None
    assert bounded(lambda: lockfile.is_stale(str(path), 3600), 5) is True
    lock = bounded(lambda: lockfile.acquire(str(path)), 5)
    assert lock is not None and path.is_file() and lock.held()
    lock.release()


def test_a_record_without_flock_is_judged_by_age(tmp_path: Path) -> None:
    """A record no flock stands for (an older gitstate's, naming a pid) proves nothing: by age."""
    path = tmp_path / "work.lock"
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    path.write_bytes(dataclasses.replace(Owner.current(), pid=int(done.stdout)).to_bytes())
    assert not lockfile.is_stale(str(path), 3600)
    then = time.time() - 7200
    os.utime(path, (then, then))
    assert lockfile.is_stale(str(path), 3600)


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


def test_create_held_makes_the_lock_appear_with_its_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The record is written into a private file that is then linked to the lock's name: the lock
    never exists without it (a kill there would leave what looks like git's lock), and the private
    file is gone afterwards."""
    path = tmp_path / "packed-refs.lock"
    seen: list[bytes] = []
    real_link = os.link

    def link(src: str, dst: str) -> None:
        seen.append(Path(src).read_bytes())  # what the lock holds the instant it appears
        real_link(src, dst)

    monkeypatch.setattr(lockfile.os, "link", link)
    fd = lockfile.create_held(str(path))
    try:
        assert len(seen) == 1 and Owner.parse(seen[0]) is not None
        assert sorted(p.name for p in tmp_path.iterdir()) == ["packed-refs.lock"]
        with pytest.raises(FileExistsError):
            lockfile.create_held(str(path))
        assert sorted(p.name for p in tmp_path.iterdir()) == ["packed-refs.lock"]
    finally:
        lockfile.release_held(str(path), fd)
