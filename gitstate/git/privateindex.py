"""Opening the repository with gitstate's *private* index instead of ``.git/index``.

pygit2 leaves out libgit2's ``git_repository_set_index``; it is reached through :mod:`ctypes` on
pygit2's own extension module (``dlsym`` there finds the very libgit2 pygit2 uses), with the
pointers of ``Repository._pointer`` and ``pygit2.Index(path)``; a handle whose ``repo.index`` is
not then that index is dropped. Where that lookup is impossible (e.g. Windows), the repository is
opened with ``FROM_ENV`` while ``GIT_DIR``, ``GIT_WORK_TREE`` and ``GIT_INDEX_FILE`` are set in
``os.environ`` for a moment, under a lock (another thread starting git at that instant, outside
gitstate, would see them). :data:`NATIVE` says which way is in use."""

from __future__ import annotations

import ctypes
import errno
import os
import threading
from typing import Any

import pygit2
from pygit2.enums import RepositoryOpenFlag
from pygit2.ffi import ffi

from gitstate.git import safeopen
from gitstate.git.environ import scoped_environ

_ENV_LOCK = threading.Lock()


def _load() -> tuple[Any, Any] | None:
    """``git_repository_set_index`` and ``git_repository_set_workdir`` of pygit2's libgit2."""
    try:
        from pygit2 import _libgit2

        lib = ctypes.CDLL(_libgit2.__file__)
        set_index = lib.git_repository_set_index
        set_workdir = lib.git_repository_set_workdir
    except (ImportError, OSError, AttributeError, TypeError):
        return None
    set_index.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    set_index.restype = ctypes.c_int
    set_workdir.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int]
    set_workdir.restype = ctypes.c_int
    return set_index, set_workdir


_NATIVE = _load()
#: Whether the private index is attached without touching ``os.environ``.
NATIVE = _NATIVE is not None


def _address(cdata: Any) -> int:
    return int(ffi.cast("uintptr_t", cdata))


def _repo_address(repo: pygit2.Repository) -> int:
    holder = ffi.new("git_repository **")
    ffi.buffer(holder)[:] = repo._pointer[:]
    return _address(holder[0])


def _open_native(git_dir: str, workdir: str, index_path: str) -> pygit2.Repository | None:
    if _NATIVE is None:
        return None
    set_index, set_workdir = _NATIVE
    repo = pygit2.Repository(git_dir, flags=RepositoryOpenFlag.NO_SEARCH)
    index = pygit2.Index(index_path)  # created on first write when absent
    wanted = _address(index._index)
    address = _repo_address(repo)
    if set_workdir(address, os.fsencode(workdir), 0) != 0 or set_index(address, wanted) != 0:
        return None
    if _address(repo.index._index) != wanted:  # not the libgit2 pygit2 uses: never trust it
        return None
    return repo


def _open_env(git_dir: str, workdir: str, index_path: str) -> pygit2.Repository:
    env = {"GIT_DIR": git_dir, "GIT_WORK_TREE": workdir, "GIT_INDEX_FILE": index_path}
    with _ENV_LOCK, scoped_environ(env):
        repo = pygit2.Repository(git_dir, flags=RepositoryOpenFlag.FROM_ENV)
        repo.index  # noqa: B018 -- libgit2 reads GIT_INDEX_FILE here, so load it now
    return repo


def check_file(index_path: str) -> None:
    """Make sure the private index file may be handed to libgit2, which opens a file it reads
    without ``O_NONBLOCK`` (a FIFO there would block it for ever): a regular file or nothing. A
    FIFO, device or socket in its place is removed (the private index is derived data, rebuilt by
    the next snapshot as when it is missing); anything else left there (a directory, a link to a
    FIFO) raises :class:`OSError`."""
    if safeopen.regular_or_absent(index_path):
        return
    safeopen.remove_special(index_path)
    if not safeopen.regular_or_absent(index_path):
        raise OSError(errno.EINVAL, "the private index is not a regular file", index_path)


def open_with_index(git_dir: str, workdir: str, index_path: str) -> pygit2.Repository:
    """A new handle on the repository at ``git_dir`` with worktree ``workdir`` whose index is the
    file ``index_path`` (first checked by :func:`check_file`). Raises :class:`pygit2.GitError`
    (or :class:`OSError`) when it cannot be opened."""
    check_file(index_path)
    repo = _open_native(git_dir, workdir, index_path)
    return repo if repo is not None else _open_env(git_dir, workdir, index_path)
