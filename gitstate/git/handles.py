"""Per-thread repository handles by git dir, for values that outlive the call that made them.

libgit2 objects must not be shared between threads, so plain values (a :class:`Checkpoint` that
decodes its state on first access) carry the repository's *path*, and read through this thread's
handle for it. A handle is reopened when an object is missing (:func:`refresh`): libgit2 does not
always see packs written, or merged away, by other processes after it opened the repository."""

from __future__ import annotations

import threading
from collections import OrderedDict

import pygit2

from gitstate.errors import NotARepositoryError
from gitstate.git.reader import ObjectReader

_MAX_PER_THREAD = 8
_local = threading.local()


def _handles() -> OrderedDict[str, pygit2.Repository]:
    found: OrderedDict[str, pygit2.Repository] | None = getattr(_local, "repos", None)
    if found is None:
        found = _local.repos = OrderedDict()
    return found


def repository(git_dir: str) -> pygit2.Repository:
    """This thread's handle for the repository at ``git_dir``."""
    handles = _handles()
    repo = handles.get(git_dir)
    if repo is None:
        try:
            repo = pygit2.Repository(git_dir)
        except (pygit2.GitError, ValueError, KeyError) as exc:
            raise NotARepositoryError(git_dir, str(exc).strip() or "it no longer opens") from exc
        handles[git_dir] = repo
        while len(handles) > _MAX_PER_THREAD:
            handles.popitem(last=False)
    else:
        handles.move_to_end(git_dir)
    return repo


def refresh(git_dir: str) -> pygit2.Repository:
    """Drop this thread's handle for ``git_dir`` and open a new one."""
    _handles().pop(git_dir, None)
    return repository(git_dir)


def reader(git_dir: str) -> ObjectReader:
    """A guarded reader on this thread's handle for ``git_dir``."""
    return ObjectReader(repository(git_dir))
