"""Locks: gitstate's own, and gitstate's hold on git's lock files.

:class:`FileLock` is the one lock primitive for gitstate's own locks (the housekeeping lock, a
worktree's restore lock): a ``flock`` on a file that stays, released by the kernel when its holder
dies, so it is never stale and never broken.

:func:`create_held` makes the lock files of git's own protocol (``<ref>.lock``, ``packed-refs.lock``)
that gitstate takes: created exclusively as git creates them, then held with ``flock`` for as long
as gitstate owns them, and only then given an owner record (with ``"flock": true``). git writes no
such record and takes no flock, and the kernel drops a flock when its holder dies, so a contender
can tell the cases apart: a flock held, a live gitstate owner (never broken), with its record or
without one (in the two system calls before the record is written, or once the holder replaced it
by the ref's new value before renaming the lock over the ref); a record and no flock, a dead one
(broken at once); neither (git's lock, or ours left in one of those instants by a killed holder),
judged by age alone (``packed-refs.lock``: never, see :mod:`gitstate.git.refs`).

:func:`break_stale` removes such a lock file that a predicate calls stale without ever removing one
a live process holds: the file is renamed aside (atomic), judged again where nobody else can touch
it, and put back with ``os.link`` if it turned out fresh. :class:`Owner` records also mark the
``.keep`` files of transaction packs, whose owner's life is told by its pid and start time.

Only the standard library (and :mod:`gitstate.git.safeopen`, itself only that): this module sits
at the bottom of the git layer."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from types import TracebackType

from gitstate.git import safeopen

__all__ = ["FileLock", "Gate", "Owner", "acquire", "break_stale", "create_held", "holder", "holds_flock", "is_stale",
           "read_owner", "release_held"]


def break_stale(path: str, is_stale: Callable[[str], bool]) -> bool:
    """Remove the lock file ``path`` if ``is_stale`` calls it stale; True when a stale lock was removed.

    ``is_stale(p)`` judges the file at ``p`` by its content or age (a missing file is not stale).
    The file judged is pinned first (opened), and everything after is about that file only:

    1. the verdict on ``path`` counts only if ``path`` still names the pinned file afterwards (another
       breaker may have removed it and a live writer locked ``path`` again meanwhile);
    2. the breaker then takes an exclusive flock on it without waiting: a live gitstate holder, or
       another breaker at the same file, holds one, and the lock is left alone; and checks again
       that ``path`` names it. No other breaker can move it now, and its owner is gone, so
       ``path`` is not replaced before
    3. the rename aside to a unique name (where no other process can replace or remove it), the
       flock released and ``is_stale`` asked again about it there. Only that second verdict
       decides: a lock judged fresh is put back by ``os.link``, which fails harmlessly when another
       process locked ``path`` meanwhile.

    So a live writer's lock is never moved aside and replaced under it (it would then rename
    another writer's lock over the ref). Where no flock can be had (a file system without it)
    step 2 is skipped, as such locks are judged by age alone. A lock that is not a regular file
    (a FIFO) is pinned without waiting for a writer (``O_NONBLOCK``)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return False  # gone (or not a file): nothing to break
    try:
        pinned = os.fstat(fd)
        try:
            if not is_stale(path) or not _names(path, pinned):
                return False
        except OSError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False  # held: its owner lives, or another breaker is at it
        except OSError:
            pass  # no flock on this file system
        if not _names(path, pinned):
            return False
        # The aside name ends in ".lock" so git and libgit2, which skip "*.lock" when listing loose
        # refs, never see it as a ref while it exists.
        aside = f"{path}.stale-{os.getpid()}-{secrets.token_hex(4)}.lock"
        try:
            os.rename(path, aside)
        except OSError:
            return False
    finally:
        os.close(fd)  # releases the flock: the second verdict must not see it as the owner's
    stale = False
    try:
        try:
            stale = is_stale(aside)
        except OSError:
            stale = False
    finally:
        if not stale:
            try:
                os.link(aside, path)  # fresh after all: put it back, unless someone locked again
            except OSError:
                pass
        try:
            os.unlink(aside)
        except OSError:
            pass
    return stale


def _names(path: str, pinned: os.stat_result) -> bool:
    """Whether ``path`` is (still) the file ``pinned`` was taken of."""
    try:
        now = os.stat(path, follow_symlinks=False)
    except OSError:
        return False
    return (now.st_dev, now.st_ino) == (pinned.st_dev, pinned.st_ino)


# ---------------------------------------------------------------------------------------------
# owners


def _read_text(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as fh:
            return fh.read().strip() or None
    except OSError:
        return None


def _boot_id() -> str | None:
    """This kernel's boot id (Linux), which tells a reboot or another machine of the same name."""
    return _read_text("/proc/sys/kernel/random/boot_id")


_PROCESS: tuple[int, str, str | None] | None = None


def _this_process() -> tuple[int, str, str | None]:
    """``(pid, host, boot id)`` of this process, read once per process (a forked child reads them
    anew)."""
    global _PROCESS
    found = _PROCESS
    pid = os.getpid()
    if found is None or found[0] != pid:
        found = _PROCESS = (pid, socket.gethostname(), _boot_id())
    return found


@dataclass(frozen=True)
class Owner:
    """Who holds a lock file of git's protocol (or a transaction's ``.keep``): written by
    :func:`create_held` once the holder has the file's flock (``flock``), so while the holder lives
    its flock says so. ``token`` is random per record, so two records never compare equal."""

    pid: int
    host: str
    time: float  # when the lock was taken (seconds since the epoch)
    boot: str | None = None  # kernel boot id (Linux)
    token: str = ""
    flock: bool = False  # the owner holds a flock on the file while it lives

    @classmethod
    def current(cls, *, flock: bool = False) -> Owner:
        """A record for this process, now."""
        pid, host, boot = _this_process()
        return cls(pid=pid, host=host, time=time.time(), boot=boot, token=secrets.token_hex(8), flock=flock)

    def to_bytes(self) -> bytes:
        return (json.dumps(asdict(self), sort_keys=True) + "\n").encode()

    @classmethod
    def parse(cls, data: bytes) -> Owner | None:
        """The record in a lock file's content, or None when it is not one (empty, half-written,
        another program's lock). Records of older versions (with more fields) parse too."""
        try:
            raw = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            return None
        if not isinstance(raw, dict):
            return None
        pid, host, when = raw.get("pid"), raw.get("host"), raw.get("time")
        boot, token, flock = raw.get("boot"), raw.get("token", ""), raw.get("flock", False)
        if (type(pid) is not int or pid <= 0 or not isinstance(host, str)
                or not isinstance(when, int | float) or isinstance(when, bool)
                or not (boot is None or isinstance(boot, str))
                or not isinstance(token, str) or type(flock) is not bool):
            return None
        return cls(pid=pid, host=host, time=float(when), boot=boot, token=token, flock=flock)

    def same_kernel(self) -> bool:
        """Whether the owner ran under this kernel (same boot id; where there is none, the same
        host name), so that its flocks and this process's are the same kernel's."""
        if self.boot is not None:
            return self.boot == _boot_id()
        return self.host == socket.gethostname()


def read_owner(path: str) -> Owner | None:
    """The owner recorded in lock file ``path`` (None: no such file, or no readable record)."""
    try:
        with safeopen.open_file(path, "rb") as fh:
            return Owner.parse(fh.read(4096))
    except OSError:
        return None


def is_stale(path: str, stale_after: float, prefix: bytes = b"") -> bool:
    """Whether the lock file at ``path`` may be broken: its owner is provably dead, or it cannot
    be proven alive and the file is older than ``stale_after`` seconds. A missing file is not stale.
    ``prefix``: what the file holds before its owner record (a ``.keep`` file's first words).

    A record written by :func:`create_held` under this kernel is judged by its flock: held, the
    owner lives (or a process it forked does); free, the owner is gone. Anything else (git's own
    locks, which hold no record; a record of another machine, or of an older gitstate) by age,
    except that a file without a record whose flock is held is never stale (a gitstate holder in
    the instant before its record is written, or after it replaced the record by the ref's new
    value, see :func:`gitstate.git.refs.set_if_equals`; git takes no flock). A FIFO, device or
    socket is stale at once: no holder, neither git nor gitstate, makes its lock file one."""
    try:
        with safeopen.open_file(path, "rb") as fh:
            data = fh.read(4096)
            mtime = os.fstat(fh.fileno()).st_mtime
            owner = Owner.parse(data[len(prefix):]) if data.startswith(prefix) else None
            flocked = owner is not None and owner.flock and owner.same_kernel()
            alive = _flock_alive(fh.fileno()) if flocked or owner is None else None
    except FileNotFoundError:
        return False
    except safeopen.NotRegularFileError:
        return True
    except OSError:
        try:
            mtime, flocked, alive = os.stat(path).st_mtime, False, None  # unreadable: judged by age alone
        except OSError:
            return False
    if flocked and alive is not None:
        return not alive
    if alive is True:
        return False  # no record, but a flock held: a gitstate holder between its record and rename
    return time.time() - mtime >= stale_after


def _flock_alive(fd: int) -> bool | None:
    """Whether another open file holds a flock on ``fd``'s file (None: flock unsupported here)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return None
    fcntl.flock(fd, fcntl.LOCK_UN)
    return False


# ---------------------------------------------------------------------------------------------
# git's lock files, held by gitstate

_HELD: set[int] = set()  # descriptors of lock files this process holds (create_held); no mutex, so
# that a fork while another thread holds one cannot leave the child's copy locked (set ops are atomic)
_FLOCKED: set[int] = set()  # those of them held by flock (their owner record was written)
_FLOCK_PATIENCE = 0.2  # seconds to wait for a flock that a contender's judge holds for a moment


def create_held(path: str, mode: int = 0o644, prefix: bytes = b"") -> int:
    """Create the lock file ``path`` as git does (exclusively: :class:`FileExistsError` when it is
    held) and hold it: a flock on it and an owner record with ``"flock": true`` (after ``prefix``;
    see the module documentation). Returns the descriptor; the caller keeps it until
    :func:`release_held`.

    The record is written, under the flock, into a private file ``<path>.<12 hex>.lock`` that is
    then hard-linked to ``path`` (which fails when ``path`` exists) and unlinked: the lock appears
    with its record and its flock, so no kill leaves a lock of gitstate's without a record, which
    would be taken for git's (never broken, in the case of ``packed-refs.lock``). A killed
    creator may leave the private file; its name ends in ``.lock`` (never listed as a ref) and it is
    removed with the lock or as a stale lock itself. Where hard links or flocks cannot be had, the
    lock is created directly and the record written after (without a flock it stays empty, as
    git's are, and is judged by its age). A holder that has the flock (:func:`holds_flock`) may
    replace the record by the ref's new value and rename the lock over the ref, as git does: while
    the flock is held, a lock without a record is still judged alive. Without the flock the new
    value goes through a file of its own (:func:`gitstate.git.refs.set_if_equals`)."""
    private = f"{path}.{secrets.token_hex(6)}.lock"
    fd = os.open(private, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC, mode)
    linked = False
    try:
        if _flock_within(fd, _FLOCK_PATIENCE):
            safeopen.write_all(fd, prefix + _held_record())
            _FLOCKED.add(fd)
            try:
                os.link(private, path)
                linked = True
            except OSError as exc:
                if exc.errno not in _NO_LINK:
                    raise
    except BaseException:
        _FLOCKED.discard(fd)
        os.close(fd)
        os.unlink(private)
        raise
    if not linked:  # no flock or no hard links here: the lock made directly
        _FLOCKED.discard(fd)
        os.close(fd)
        os.unlink(private)
        fd = _create_direct(path, mode, prefix)
    else:
        try:
            os.unlink(private)  # the lock names the file now
        except OSError:
            pass
    _HELD.add(fd)
    return fd


_NO_LINK = {errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS, errno.EMLINK}


def _create_direct(path: str, mode: int, prefix: bytes) -> int:
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC, mode)
    try:
        if _flock_within(fd, _FLOCK_PATIENCE):
            safeopen.write_all(fd, prefix + _held_record())
            _FLOCKED.add(fd)
    except BaseException:
        try:
            os.unlink(path)
        finally:
            os.close(fd)
        raise
    return fd


def holds_flock(fd: int) -> bool:
    """Whether the lock :func:`create_held` returned as ``fd`` is held by flock (and so carries
    an owner record): a holder may then replace the record by other content and still be judged
    alive (see :func:`is_stale`)."""
    return fd in _FLOCKED


_HELD_RECORD: tuple[int, bytes] | None = None


def _held_record() -> bytes:
    """The owner record of the locks this process holds by flock: one per process (made when it
    first takes one), since the flock, not the record, tells whether the owner lives, and the
    lock's mtime tells its age; so a ref move pays for no JSON encoding."""
    global _HELD_RECORD
    found = _HELD_RECORD
    if found is None or found[0] != os.getpid():
        found = _HELD_RECORD = (os.getpid(), Owner.current(flock=True).to_bytes())
    return found[1]


def _flock_within(fd: int, seconds: float) -> bool:
    """An exclusive flock on ``fd`` within ``seconds``; False also where flocks cannot be had."""
    try:
        return _flock_for(fd, fcntl.LOCK_EX, seconds)
    except OSError:
        return False


def release_held(path: str | None, fd: int) -> None:
    """Give up a lock taken by :func:`create_held`: remove the file (unless ``path`` is None: the
    caller renamed or removed it) and only then close the descriptor, which drops the flock."""
    try:
        if path is not None:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
    finally:
        _HELD.discard(fd)
        _FLOCKED.discard(fd)
        os.close(fd)


def _close_inherited() -> None:
    """In a forked child: close the lock descriptors inherited from the parent, so a child that
    outlives a killed parent does not keep its locks looking alive (closing a copy does not drop
    the parent's flock)."""
    for fd in list(_HELD):
        try:
            os.close(fd)
        except OSError:
            pass
    _HELD.clear()
    _FLOCKED.clear()


os.register_at_fork(after_in_child=_close_inherited)


# ---------------------------------------------------------------------------------------------
# gitstate's own locks


class FileLock:
    """A lock of gitstate's own (``agentos/housekeeping.lock``, a worktree's restore lock): an
    exclusive ``flock`` on a file that stays in place. The kernel drops it when the holder's
    descriptor closes, also when the holder is killed, so such a lock is never stale: nothing
    judges or breaks it. The file holds the holder's pid, for messages only."""

    def __init__(self, path: str, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd
        self._pid = os.getpid()  # a forked child's copy is closed at the fork (_close_inherited)

    @classmethod
    def acquire(cls, path: str) -> FileLock | None:
        """Take the lock at ``path`` without waiting; None while another process (or another
        :class:`FileLock` of this one) holds it. :class:`OSError` when the file cannot be made."""
        fd = safeopen.open_fd(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644, replace_special=True)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        except BaseException:
            os.close(fd)
            raise
        try:
            record = f"{os.getpid()}\n".encode("ascii")
            os.pwrite(fd, record, 0)
            os.ftruncate(fd, len(record))
        except OSError:
            pass  # the pid is for messages only
        _HELD.add(fd)
        return cls(path, fd)

    def held(self) -> bool:
        """Whether this lock is still held (not released; by this process, not a forked child)."""
        return self._fd is not None and self._pid == os.getpid()

    def release(self) -> None:
        """Give the lock up (the file stays, for the next holder). Safe to call twice."""
        fd, self._fd = self._fd, None
        if fd is not None and self._pid == os.getpid():
            _HELD.discard(fd)
            os.close(fd)

    def __enter__(self) -> FileLock:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"FileLock({self.path!r}, held={self.held()})"


class Gate:
    """A flock on one file that writers hold shared while a transaction runs (from choosing its
    objects to moving its refs) and that gc holds exclusive for a moment: when gc has it, no
    transaction that may have reused an object gc is about to drop is still under way. One per
    store and process; the threads of a process share one descriptor, counted, so one thread's
    end does not drop another's hold (a forked child starts with none)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._mutex = threading.Lock()
        self._fd: int | None = None
        self._count = 0
        self._pid = os.getpid()

    def enter_shared(self, wait: float) -> bool:
        """Hold the gate shared, waiting up to ``wait`` seconds while gc holds it; False when it
        could not be had in time. A gate that cannot be made (a read-only repository: no write
        succeeds there anyway) is passed as held."""
        with self._mutex:
            if self._pid != os.getpid():
                self._fd, self._count, self._pid = None, 0, os.getpid()
            if self._count == 0:
                try:
                    if self._fd is None:
                        os.makedirs(os.path.dirname(self.path), exist_ok=True)
                        self._fd = safeopen.open_fd(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644,
                                                    replace_special=True)
                    if not _flock_for(self._fd, fcntl.LOCK_SH, wait):
                        return False
                except OSError:
                    return True
            self._count += 1
            return True

    def leave_shared(self) -> None:
        """End one :meth:`enter_shared`."""
        with self._mutex:
            if self._pid != os.getpid() or self._count == 0:
                return
            self._count -= 1
            if self._count == 0 and self._fd is not None:
                fcntl.flock(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        """Close the gate's descriptor when no transaction holds it (its store closes; a later
        :meth:`enter_shared` opens it again)."""
        with self._mutex:
            if self._fd is not None and self._count == 0 and self._pid == os.getpid():
                fd, self._fd = self._fd, None
                with contextlib.suppress(OSError):
                    os.close(fd)

    def __del__(self) -> None:
        fd = getattr(self, "_fd", None)
        if fd is not None and getattr(self, "_pid", None) == os.getpid():
            with contextlib.suppress(OSError):
                os.close(fd)

    @staticmethod
    @contextlib.contextmanager
    def exclusive(path: str, wait: float) -> Iterator[bool]:
        """Hold the gate at ``path`` exclusive for the block (once every transaction under way has
        ended), waiting up to ``wait`` seconds; yields False when writers kept it."""
        fd = safeopen.open_fd(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644, replace_special=True)
        try:
            yield _flock_for(fd, fcntl.LOCK_EX, wait)
        finally:
            os.close(fd)


def _flock_for(fd: int, kind: int, wait: float) -> bool:
    deadline = time.monotonic() + wait
    pause = 0.001
    while True:
        try:
            fcntl.flock(fd, kind | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(pause)
            pause = min(pause * 2, 0.02)


def holder(path: str) -> int | None:
    """The pid the lock file at ``path`` names (its holder, or its last one), if any."""
    try:
        with safeopen.open_file(path, "rb") as fh:
            text = fh.read(32).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def acquire(path: str) -> FileLock | None:
    """Take gitstate's own lock at ``path`` (non-blocking); see :meth:`FileLock.acquire`."""
    return FileLock.acquire(path)
