"""Which writes gitstate flushes to disk, read from the user's git configuration as git reads it:
``core.fsync`` (git 2.36+: a comma-separated list of components, ``-`` removing one) and the older
``core.fsyncObjectFiles``. Defaults follow git: packs and their indexes are flushed, loose objects
and refs are not.

How a write stores its objects follows from that: one pack, flushed as packs are (two flushes
for the whole write instead of one per object). With ``agentos.looseObjects`` set to N > 0, a
write of at most N new objects (and :data:`LOOSE_BYTES` in all) is written as loose objects
instead, as ``git commit`` writes, when loose objects are not flushed: no flush at all, more
files. Either way a killed process loses no write that returned; only a crash of the machine can
lose what git's configuration does not flush."""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass

import pygit2

from gitstate.errors import UsageError

_COMPONENTS = {
    "loose-object": {"loose-object"}, "pack": {"pack"}, "pack-metadata": {"pack-metadata"},
    "commit-graph": {"commit-graph"}, "index": {"index"}, "reference": {"reference"},
    "objects": {"loose-object", "pack"}, "derived-metadata": {"pack-metadata", "commit-graph"},
    "committed": {"loose-object", "pack", "reference"},
    "added": {"loose-object", "pack", "reference", "index"},
    "all": {"loose-object", "pack", "pack-metadata", "commit-graph", "index", "reference"},
}
_DEFAULT = {"pack", "pack-metadata", "commit-graph"}  # git's FSYNC_COMPONENTS_DEFAULT


LOOSE_OBJECTS = 0  # new objects a write may write loose (when loose objects are not flushed): off
LOOSE_KEY = "agentos.looseObjects"
LOOSE_BYTES = 64 * 1024  # bytes of new objects a write may write loose


@dataclass(frozen=True)
class Durability:
    """What gitstate flushes: loose objects, packs (with their indexes), refs and reflogs; and the
    most new objects a write writes loose rather than as a pack (``loose_max``)."""

    loose_objects: bool
    packs: bool
    refs: bool
    loose_max: int = LOOSE_OBJECTS

    @classmethod
    def everything(cls, on: bool, loose_max: int = LOOSE_OBJECTS) -> Durability:
        """All flushed (``fsync=True``) or none (``fsync=False``)."""
        return cls(on, on, on, loose_max)

    def loose(self, count: int, size: int = 0) -> bool:
        """Whether a write of ``count`` new objects of ``size`` bytes in all writes them loose:
        loose objects are not flushed (so they cost no flush, where a pack costs two), they are
        few, and small (a pack compresses a growing object's new part only; a loose object is
        compressed whole, every time)."""
        return not self.loose_objects and 0 < count <= self.loose_max and size <= LOOSE_BYTES


def parse_fsync(value: str | None, object_files: bool = False) -> set[str]:
    """The components a ``core.fsync`` value names (``None``: git's default), plus loose objects
    when ``core.fsyncObjectFiles`` is true. Unknown words are ignored, as git ignores them."""
    found = set(_DEFAULT) if value is None else set()
    for word in (value or "").split(","):
        word = word.strip()
        if not word:
            continue
        if word == "none":
            found = set()
        elif word.startswith("-"):
            found -= _COMPONENTS.get(word[1:], set())
        else:
            found |= _COMPONENTS.get(word, set())
    if object_files:
        found.add("loose-object")
    return found


def from_config(repo: pygit2.Repository) -> Durability:
    """The durability the repository's configuration asks git for."""
    value: str | None = None
    object_files = False
    try:
        config = repo.config
        if "core.fsync" in config:
            value = str(config["core.fsync"])
        if "core.fsyncObjectFiles" in config:
            object_files = config.get_bool("core.fsyncObjectFiles")
    except (pygit2.GitError, KeyError, ValueError):
        pass
    found = parse_fsync(value, object_files)
    return Durability(loose_objects="loose-object" in found, packs="pack" in found, refs="reference" in found,
                      loose_max=loose_limit(repo))


def loose_limit(repo: pygit2.Repository) -> int:
    """``agentos.looseObjects``: at most how many new objects a write writes loose (0, the default
    :data:`LOOSE_OBJECTS`: every write is a pack). A value that is not a whole number is an error."""
    try:
        config = repo.config
        if LOOSE_KEY not in config:
            return LOOSE_OBJECTS
        text = str(config[LOOSE_KEY]).strip()
    except (pygit2.GitError, KeyError, ValueError):
        return LOOSE_OBJECTS
    if not text.isdigit():
        raise UsageError(f"{LOOSE_KEY} must be a whole number of objects (0 or more), not {text!r}")
    return int(text)


def fsync_dir(path: str) -> None:
    """Flush a directory, so renames into it survive a power loss (best effort: a file system that
    cannot flush directories is left as it is)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _sync_file_range() -> Callable[[int], None] | None:
    """``sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE)`` of the C library, where Linux has it."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        call = libc.sync_file_range
    except (OSError, AttributeError):
        return None
    call.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    call.restype = ctypes.c_int

    def start(fd: int) -> None:
        call(fd, 0, 0, 2)  # SYNC_FILE_RANGE_WRITE: start writing the dirty pages, do not wait

    return start


_START = _sync_file_range()


def start_writeback(fd: int) -> None:
    """Start writing a file's data to the disk without waiting (Linux ``sync_file_range``; nothing
    elsewhere). A hint that lets the data of several files go out together before each is
    flushed; it makes nothing durable by itself (an ``fdatasync`` must follow), and its failures
    are ignored."""
    if _START is not None:
        _START(fd)
