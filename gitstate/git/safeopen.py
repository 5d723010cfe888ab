"""Opening gitstate's private files under ``.git`` (``agentos/*``, lock files, the stat cache)
without ever blocking.

A FIFO in the place of such a file would make a plain ``open`` wait forever, and a device or
socket is no file of ours either. So private files are opened with ``O_NONBLOCK`` (cleared once
``fstat`` says the file is regular), and anything else raises an :class:`OSError`
(:class:`NotRegularFileError`, or :class:`IsADirectoryError`), which callers treat as an unreadable
file. Before handing a private path to libgit2 (which opens it blocking), check it with
:func:`regular_or_absent`.

Only the standard library: :mod:`gitstate.git.lockfile` sits on it."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
from collections.abc import Callable
from typing import IO, Any, TypeVar

__all__ = ["NotRegularFileError", "describe", "in_folder", "open_fd", "open_file", "regular_or_absent",
           "remove_special", "write_all"]

_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_MODES = {"r": os.O_RDONLY, "w": os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
          "a": os.O_WRONLY | os.O_CREAT | os.O_APPEND, "x": os.O_WRONLY | os.O_CREAT | os.O_EXCL}


class NotRegularFileError(OSError):
    """A private file is there, but it is not a regular file (a FIFO, a device, a socket)."""

    def __init__(self, path: str | bytes, mode: int) -> None:
        super().__init__(errno.EINVAL, f"not a regular file but {describe(mode)}", os.fsdecode(path))


def describe(mode: int) -> str:
    """What kind of file ``st_mode`` names, in words (``a FIFO``, ``a directory``, …)."""
    for test, words in ((stat.S_ISREG, "a regular file"), (stat.S_ISDIR, "a directory"),
                        (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                        (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
                        (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return words
    return "not a file"


def open_fd(path: str | bytes, flags: int = os.O_RDONLY, mode: int = 0o666, *, follow: bool = True,
            replace_special: bool = False) -> int:
    """``os.open(path, flags, mode)`` (with ``O_CLOEXEC``) that never blocks and returns a
    descriptor of a regular file only: raises :class:`NotRegularFileError` for a FIFO, device or
    socket, :class:`IsADirectoryError` for a directory, and whatever ``os.open`` raises (a FIFO
    opened for writing with no reader: ``ENXIO``). ``follow=False``: never through a symbolic
    link (``O_NOFOLLOW``). ``replace_special``: a FIFO, device or socket in the file's place is
    removed first and the open done again (for private files written in place: such a thing there
    is never ours, and the file is made anew as when it is missing)."""
    try:
        return _open_regular(path, flags, mode, follow)
    except OSError:
        if not (replace_special and remove_special(path)):
            raise
    return _open_regular(path, flags, mode, follow)


def _open_regular(path: str | bytes, flags: int, mode: int, follow: bool) -> int:
    fd = os.open(path, flags | _NONBLOCK | _CLOEXEC | (0 if follow else _NOFOLLOW), mode)
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), os.fsdecode(path))
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFileError(path, st.st_mode)
        if _NONBLOCK and not flags & _NONBLOCK:
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~_NONBLOCK)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_file(path: str | bytes, mode: str = "r", *, encoding: str | None = None, errors: str | None = None,
              newline: str | None = None, follow: bool = True, replace_special: bool = False) -> IO[Any]:
    """The built-in ``open`` for the modes ``r``, ``w``, ``a``, ``x`` (text or ``b``), through
    :func:`open_fd`: never blocks, a regular file only (permissions of a created file: ``0o666``
    less the umask, as ``open``'s)."""
    kind = mode.replace("b", "").replace("t", "")
    if kind not in _MODES:
        raise ValueError(f"unsupported mode {mode!r}")
    fd = open_fd(path, _MODES[kind], follow=follow, replace_special=replace_special)
    try:
        return open(fd, mode, encoding=encoding, errors=errors, newline=newline)  # noqa: SIM115 - the caller's
    except BaseException:
        os.close(fd)
        raise


def regular_or_absent(path: str | bytes) -> bool:
    """Whether ``path`` is a regular file (through links) or names nothing: what may be handed to
    libgit2, which opens a file it reads without ``O_NONBLOCK``."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except FileNotFoundError:
        return True
    except OSError:
        return False


def remove_special(path: str | bytes) -> bool:
    """Remove a FIFO, device node or socket at ``path`` (never a regular file, a directory or a
    symbolic link); True when one was removed."""
    try:
        mode = os.lstat(path).st_mode
        if stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode):
            return False
        os.unlink(path)
    except OSError:
        return False
    return True


def write_all(fd: int, data: bytes | memoryview) -> None:
    """``os.write`` until every byte is out (one call writes at most about 2 GiB)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


FOLDER_ATTEMPTS = 50  # tries to create a file in a folder that keeps vanishing
T = TypeVar("T")


def in_folder(folder: str, make: Callable[[], T], make_folder: Callable[[], None] | None = None) -> T:
    """``make()``, which creates a file in ``folder``: on ``FileNotFoundError`` the folder is made
    (``make_folder()``, else one ``mkdir``) and ``make`` tried again, up to :data:`FOLDER_ATTEMPTS`
    times in all; the last attempt's error is raised.

    The folder may not exist yet, or git removed it, empty, since it was made: ``git prune`` and
    ``prune-packed`` (the user's ``git gc``, ``git repack -d``) remove empty loose-object folders
    (``objects/xx``), ``git pack-refs`` the empty folders of the refs it packs. git itself tries
    again once."""
    for _ in range(FOLDER_ATTEMPTS - 1):
        try:
            return make()
        except FileNotFoundError:
            if make_folder is not None:
                make_folder()
            else:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(folder)
    return make()
