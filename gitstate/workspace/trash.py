"""Files a large restore replaces or removes, moved aside by a rename and deleted beside it.

Freeing a file's blocks is most of what a restore waits for: on ext4 here an ``unlink`` of a file
whose data reached the disk takes 0.1 ms or more (a journal update; ``git checkout`` pays it too),
two thirds of a 1,000-file restore's writing time. A rename into another directory of the same file
system takes a few microseconds. So a restore of :data:`MIN_FILES` files or more moves each file it
replaces or removes into a directory of its own, ``<git common dir>/agentos/trash/<pid>-<random>/``
(as ``0``, ``1``, ...), and a background thread unlinks them from there while the restore goes on
and after it returned (:func:`wait` waits for that; it runs at interpreter exit, so a process does
not leave its trash behind on purpose).

What stays as it was:

- The worktree ends as with an unlink: the name is gone and the new file is created ``O_EXCL``; an
  open descriptor or another hard link still sees the old content.
- Only files and symbolic links are deleted there, one ``unlink`` each: nothing in a trash is ever
  deleted recursively. A directory found at the name after the rename (one made there meanwhile)
  is renamed back and handled as before; if that fails, it stays in the trash, untouched, and
  :class:`~gitstate.errors.WorktreeWriteError` says where.
- There is no trash (the restore unlinks as before) where the rename cannot work: not POSIX, the
  worktree on another file system than the git directory, or the trash directory cannot be made. A
  rename that fails for one file (a mount point below the worktree) leaves that file to an unlink.
- A trash left by a process that died (killed mid-restore) is emptied by the next large restore in
  the repository, once no process of its pid lives on this machine. Its files are also in that
  restore's safety checkpoint, which was taken before anything moved."""

from __future__ import annotations

import atexit
import os
import queue
import secrets
import stat
import threading

from gitstate.errors import WorktreeWriteError

#: Restores that replace or remove at least this many files use a trash (fewer: plain unlinks).
MIN_FILES = 64

_OPEN_DIR = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
_pending: list[threading.Thread] = []
_unclosed: set[queue.SimpleQueue[str | None]] = set()  # of trashes not closed yet (ended at exit)
_pending_lock = threading.Lock()


class Trash:
    """The trash directory of one restore (see the module documentation). Use :meth:`open`; call
    :meth:`close` when the restore's writing is over (also after a failure)."""

    def __init__(self, root: str, path: str, fd: int) -> None:
        self.root = root  # <common dir>/agentos/trash
        self.path = path
        self.fd = fd
        self.count = 0
        self.off = False  # takes nothing more (its directory went away, or it holds a directory)
        self._queue: queue.SimpleQueue[str | None] | None = None

    @classmethod
    def open(cls, common_dir: str, workdir: str) -> Trash | None:
        """A new trash for a restore of ``workdir``, or ``None`` where renames into it cannot work
        (see the module documentation)."""
        if os.name != "posix":
            return None
        root = os.path.join(common_dir, "agentos", "trash")
        path = os.path.join(root, f"{os.getpid()}-{secrets.token_hex(4)}")
        try:
            os.makedirs(root, exist_ok=True)
            if os.stat(root).st_dev != os.stat(workdir).st_dev:
                return None
            os.mkdir(path, 0o700)
            fd = os.open(path, _OPEN_DIR)
        except OSError:
            return None
        return cls(root, path, fd)

    def discard(self, parent: int, name: str) -> bool:
        """Move the file or symbolic link ``name`` of the directory ``parent`` into the trash (to be
        unlinked there); ``False`` when it stays where it is (a directory, or the rename failed: the
        caller unlinks as before). ``FileNotFoundError`` when there is nothing at ``name``."""
        if self.off:
            return False
        target = str(self.count)
        try:
            os.rename(name, target, src_dir_fd=parent, dst_dir_fd=self.fd)
        except FileNotFoundError:
            if self._gone():
                self.off = True
                return False
            raise
        except OSError:
            return False  # another file system below the worktree, permissions: an unlink decides
        self.count += 1
        try:
            moved = os.lstat(target, dir_fd=self.fd)
        except OSError:
            return True
        if stat.S_ISDIR(moved.st_mode):
            self._put_back(parent, name, target)
            return False
        if self._queue is None:
            self._queue = queue.SimpleQueue()
            with _pending_lock:
                _unclosed.add(self._queue)
            _start(self._queue, self.path, self.root)
        self._queue.put(target)
        return True

    def _put_back(self, parent: int, name: str, target: str) -> None:
        """A directory was made at ``name`` meanwhile and moved here: it goes back, for the caller's
        rules about directories; one that cannot stays here, never deleted."""
        try:
            os.rename(target, name, src_dir_fd=self.fd, dst_dir_fd=parent)
        except OSError as exc:
            self.off = True
            raise WorktreeWriteError(os.path.join(self.path, target),
                                     f"a directory that appeared at {name} while the restore ran was moved "
                                     f"here and could not be put back ({exc.strerror or exc}); move it back "
                                     "by hand") from exc

    def _gone(self) -> bool:
        """Whether the trash directory itself was removed."""
        try:
            return os.fstat(self.fd).st_nlink == 0
        except OSError:
            return True

    def close(self) -> None:
        """The restore's writing is over: the background thread unlinks what is left and then
        removes the trash directory (with what dead processes left); nothing to wait for here."""
        try:
            os.close(self.fd)
        except OSError:
            pass
        if self._queue is not None:
            with _pending_lock:
                _unclosed.discard(self._queue)
            self._queue.put(None)
            return
        _empty(self.path)  # nothing was moved here
        if _abandoned(self.root, self.path):
            _start(None, self.path, self.root)


def _start(names: queue.SimpleQueue[str | None] | None, path: str, root: str) -> None:
    """Start the thread that unlinks ``names`` in ``path`` as they come (until ``None``), then
    removes ``path`` and empties the trash of dead processes under ``root``."""
    thread = threading.Thread(target=_drain, args=(names, path, root), name="gitstate-trash", daemon=True)
    with _pending_lock:
        _pending[:] = [t for t in _pending if t.is_alive()]
        _pending.append(thread)
    thread.start()


def _drain(names: queue.SimpleQueue[str | None] | None, path: str, root: str) -> None:
    if names is not None:
        try:
            fd = os.open(path, _OPEN_DIR)
        except OSError:
            fd = None
        while (name := names.get()) is not None:
            if fd is not None:
                try:
                    os.unlink(name, dir_fd=fd)  # (a directory is refused: only files come here)
                except OSError:
                    pass
        if fd is not None:
            os.close(fd)
        _empty(path)
    for other in _abandoned(root, path):
        _empty(other)


def _empty(path: str) -> None:
    """Unlink the files and links of the trash directory ``path``, then remove it; a directory
    inside (one that could not be put back) is left, and with it the trash directory."""
    try:
        with os.scandir(path) as entries:
            for entry in entries:
                try:
                    if not entry.is_dir(follow_symlinks=False):
                        os.unlink(entry.path)
                except OSError:
                    pass
        os.rmdir(path)
    except OSError:
        pass


def _abandoned(root: str, mine: str) -> list[str]:
    """Trash directories under ``root`` (other than ``mine``) whose process is gone."""
    try:
        names = os.listdir(root)
    except OSError:
        return []
    found = []
    for name in names:
        path = os.path.join(root, name)
        pid, _, _token = name.partition("-")
        if path != mine and pid.isdigit() and not _alive(int(pid)):
            found.append(path)
    return found


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True  # another restore of this process: its own thread empties it
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # someone else's process
    return True


def wait(timeout: float | None = None) -> None:
    """Wait until the trash of every restore of this process is deleted (each background thread
    for at most ``timeout`` seconds; also run at interpreter exit, without a limit)."""
    with _pending_lock:
        threads = list(_pending)
    for thread in threads:
        thread.join(timeout)


def _at_exit() -> None:
    """At interpreter exit: end the threads of trashes never closed, then wait for all."""
    with _pending_lock:
        unclosed = list(_unclosed)
        _unclosed.clear()
    for names in unclosed:
        names.put(None)
    wait()


atexit.register(_at_exit)
