"""Capturing the worktree from the private index's stat cache, for a restore's safety snapshot,
without starting git.

A restore must save every changed file before it overwrites it. :func:`capture` does that for the
common case with one ``lstat`` per file and one read per changed file: it compares the worktree
with the stat data of the private index (as git's index refresh does), hashes only files whose stat
data changed (or that are racily clean: modified in the same instant the index was written), and
returns the new blobs and trees for the caller to store as one pack. It gives up (returns ``None``,
and the caller runs ``git add`` on the private index, :mod:`gitstate.workspace.snapshot`) wherever
git would do something it does not: any attributes file (filters: ``.gitattributes``,
``info/attributes``, ``core.attributesFile``, the global and system files), ``core.autocrlf``,
``core.filemode`` or ``core.symlinks`` off, ``core.ignorecase`` or ``core.precomposeUnicode`` on, an
index with conflicts, extended flags or a version other than 2, a directory that is tracked and
holds a ``.git``, a file it cannot read, a platform other than POSIX, an empty private index (the
first snapshot hashes everything anyway). What it captures is what ``git add -A`` captures: tracked
and untracked files, ignore rules through libgit2's matcher (an ignored directory is not entered, an
untracked directory holding ``.git`` is skipped and reported), exec bits and symbolic links as git
records them; ``tests/workspace/test_scan.py`` compares the two on the same worktrees. Files larger than
``big`` bytes are left to git (streamed, never read whole): they are returned in
:attr:`Capture.big`, still to be added.

This module also reads and writes the private index file itself (version 2: :func:`read_entries`,
:func:`write_index`)."""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import struct
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pygit2
from pygit2.enums import ConfigLevel, ObjectType, Option

from gitstate.errors import FileChangingError
from gitstate.git import safeopen
from gitstate.git.objects import MODE_BLOB, MODE_EXEC, MODE_LINK, MODE_TREE

# One index entry of version 2: ctime s, ns, mtime s, ns, dev, ino, mode, uid, gid, size, id, flags.
# The stat data is compared as bytes: everything but ``dev`` (libgit2 stored ``st_rdev`` there).
_STAT = struct.Struct(">9I")  # ctime s, ns, mtime s, ns, ino, mode, uid, gid, size
_HEADER = struct.Struct(">II")
_FLAGS = struct.Struct(">H")
_STAGE_AND_EXTENDED = 0x3000 | 0x4000
_ATTRIBUTES = b".gitattributes"
_M32 = 0xFFFFFFFF
_IFMT, _IFREG, _IFLNK = 0o170000, stat.S_IFREG, stat.S_IFLNK  # stat.S_IFMT(mode) == mode & _IFMT


@dataclass
class Capture:
    """The worktree as :func:`capture` found it.

    ``entries``: every captured path (bytes, ``/``-separated) with its mode and 20-byte id;
    ``stats``: the ``lstat``/``fstat`` of each path that was hashed (to record in the index);
    ``removed``: index paths no longer in the worktree; ``objects``: new blobs as
    ``(type, body)``; ``big``: changed or new files above the size limit, for git to add;
    ``skipped``: untracked directories holding their own repository; ``ignore_changed``: a
    ``.gitignore`` was added, changed or removed; ``redacted``: paths whose blob a scrub replaced
    (it holds other bytes than the file)."""

    entries: dict[bytes, tuple[int, bytes]]
    stats: dict[bytes, os.stat_result] = field(default_factory=dict)
    removed: list[bytes] = field(default_factory=list)
    objects: list[tuple[int, bytes]] = field(default_factory=list)
    big: list[bytes] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    ignore_changed: bool = False
    redacted: set[bytes] = field(default_factory=set)


class _GiveUp(Exception):
    """A case :func:`capture` leaves to ``git add``."""


def read_stat_cache(index_path: str) -> dict[bytes, tuple[bytes, bytes]] | None:
    """The entries of a version-2 index file: path → (stat key, 20-byte id), the stat key being
    the entry's stat data without ``dev`` as :func:`stat_key` packs it (the git mode included).
    ``None`` when the file is missing, not version 2, or holds conflicts or extended flags."""
    try:
        with safeopen.open_file(index_path, "rb") as fh:  # a FIFO there: None, never a wait
            data = fh.read()
    except OSError:
        return None
    if len(data) < 12 or data[:4] != b"DIRC":
        return None
    version, count = _HEADER.unpack_from(data, 4)
    if version != 2:
        return None
    out: dict[bytes, tuple[bytes, bytes]] = {}
    pos = 12
    flags_at = _FLAGS.unpack_from
    find = data.index
    try:
        for _ in range(count):
            flags = flags_at(data, pos + 60)[0]
            if flags & _STAGE_AND_EXTENDED:
                return None
            start = pos + 62
            length = flags & 0xFFF
            end = start + length if length < 0xFFF else find(b"\0", start)  # git stores short lengths
            out[data[start:end]] = (data[pos:pos + 16] + data[pos + 20:pos + 40], data[pos + 40:pos + 60])
            pos += (62 + end - start + 8) & ~7
    except (struct.error, ValueError):
        return None
    return out


_EXTENDED = 0x4000
_SKIP_OR_ADD = 0x4000 | 0x2000  # extended flags: skip-worktree, intent-to-add
_ENTRY = struct.Struct(">10I")  # ctime s, ns, mtime s, ns, dev, ino, mode, uid, gid, size


def read_entries(index_path: str) -> dict[bytes, bytes] | None:
    """The regular file and link entries of a git index file (versions 2 to 4) at stage 0: path →
    the entry's first 60 bytes (stat data, mode, id), laid out alike in every version. Entries git
    keeps but does not look at in the worktree (skip-worktree, intent-to-add), gitlinks and sparse
    directories are left out. ``None`` when the file is missing, not an index, damaged, or a split
    index (its entries are in another file). Never blocks on a FIFO, never writes."""
    try:
        with safeopen.open_file(index_path, "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    if len(data) < 32 or data[:4] != b"DIRC":
        return None
    version, count = _HEADER.unpack_from(data, 4)
    if version not in (2, 3, 4):
        return None
    out: dict[bytes, bytes] = {}
    pos = 12
    prev = b""
    find = data.index
    try:
        for _ in range(count):
            flags = _FLAGS.unpack_from(data, pos + 60)[0]
            start = pos + 62
            extended = 0
            if flags & _EXTENDED and version >= 3:
                extended = _FLAGS.unpack_from(data, start)[0]
                start += 2
            if version == 4:
                strip, start = index_varint(data, start)
                end = find(b"\0", start)
                name = prev[: len(prev) - strip] + data[start:end]
                after = end + 1
            else:
                end = find(b"\0", start)
                name = data[start:end]
                after = pos + ((start - pos + len(name) + 8) & ~7)
            kind = data[pos + 24:pos + 28]
            if (not flags & 0x3000 and not extended & _SKIP_OR_ADD and name
                    and kind[2] & 0xF0 in (0x80, 0xA0) and kind[:2] == b"\0\0"):
                out[name] = data[pos:pos + 60]
            prev = name
            pos = after
    except (struct.error, ValueError, IndexError):
        return None
    if pos > len(data) - 20:
        return None
    ext = pos
    while ext + 8 <= len(data) - 20:  # extensions, up to the trailing checksum
        if data[ext:ext + 4] == b"link":
            return None
        ext += 8 + struct.unpack_from(">I", data, ext + 4)[0]
    return out


def index_varint(data: bytes, pos: int) -> tuple[int, int]:
    """A git index's offset varint at ``pos`` (index version 4's path compression): its value and
    the position after it."""
    byte = data[pos]
    pos += 1
    value = byte & 0x7F
    while byte & 0x80:
        value += 1
        byte = data[pos]
        pos += 1
        value = (value << 7) + (byte & 0x7F)
    return value, pos


def entry_bytes(st: os.stat_result, oid: bytes, mode: int) -> bytes:
    """The first 60 bytes of an index entry for a file with this ``lstat``, blob id and git mode,
    as git records them (32-bit fields)."""
    ctime, mtime = st.st_ctime_ns, st.st_mtime_ns
    return _ENTRY.pack((ctime // 1_000_000_000) & _M32, ctime % 1_000_000_000,
                       (mtime // 1_000_000_000) & _M32, mtime % 1_000_000_000, st.st_dev & _M32,
                       st.st_ino & _M32, mode, st.st_uid & _M32, st.st_gid & _M32, st.st_size & _M32) + oid


def entry_mode(entry: bytes) -> int:
    """The git mode of an entry of :func:`read_entries`."""
    return int.from_bytes(entry[24:28], "big")


def index_bytes(entries: dict[bytes, bytes]) -> bytes:
    """A version-2 index file holding ``entries`` (path → :func:`entry_bytes`), in git's order,
    with no extension (git rebuilds its caches), checksum included."""
    parts = [b"DIRC", _HEADER.pack(2, len(entries))]
    for name in sorted(entries):
        length = len(name)
        parts.append(entries[name])
        parts.append(_FLAGS.pack(min(length, 0xFFF)))
        parts.append(name)
        parts.append(b"\0" * (8 - (62 + length) % 8))
    body = b"".join(parts)
    return body + hashlib.sha1(body, usedforsecurity=False).digest()


def write_index(path: str, entries: dict[bytes, bytes], mtime_ns: int | None = None) -> tuple[int, ...]:
    """Replace the index file at ``path`` with one holding ``entries`` (:func:`index_bytes`), whole:
    written beside it, then renamed over it (a FIFO in its place is replaced, never opened).
    ``mtime_ns``: the file's modification time (git takes entries modified at or after it as racily
    clean and looks at their content: a copy keeps the time of the index it copies). Returns the
    :func:`file_identity` of the file written (taken before the rename, so it is never another
    writer's). Raises :class:`OSError`."""
    tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.new"
    try:
        with safeopen.open_file(tmp, "wb", replace_special=True) as fh:
            fh.write(index_bytes(entries))
        if mtime_ns is not None:
            os.utime(tmp, ns=(mtime_ns, mtime_ns))
        written = file_identity(os.lstat(tmp))
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return written


def file_identity(st: os.stat_result) -> tuple[int, ...]:
    """What tells one version of a file from another without reading it: device, inode, size and
    modification time (not the change time, which a rename moves)."""
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def stat_key(st: os.stat_result) -> bytes:
    """An ``lstat`` result as :func:`read_stat_cache` keys it (git's 32-bit fields, git's mode)."""
    ctime, mtime = st.st_ctime_ns, st.st_mtime_ns
    return _STAT.pack((ctime // 1_000_000_000) & _M32, ctime % 1_000_000_000,
                      (mtime // 1_000_000_000) & _M32, mtime % 1_000_000_000,
                      st.st_ino & _M32, git_mode(st.st_mode), st.st_uid & _M32, st.st_gid & _M32,
                      st.st_size & _M32)


def git_mode(st_mode: int) -> int:
    """The mode git records for a file, link or directory with this ``st_mode``."""
    if stat.S_ISLNK(st_mode):
        return MODE_LINK
    if stat.S_ISDIR(st_mode):
        return MODE_TREE
    return MODE_EXEC if st_mode & 0o100 else MODE_BLOB


def _config_allows(repo: pygit2.Repository) -> bool:
    """Whether the configuration asks for nothing :func:`capture` leaves out (filters, a file
    system that cannot be trusted with modes, links or case)."""
    try:
        config = repo.config

        def flag(name: str, default: bool) -> bool:
            return config.get_bool(name) if name in config else default

        if not flag("core.filemode", True) or not flag("core.symlinks", True):
            return False
        if flag("core.ignorecase", False) or flag("core.precomposeunicode", False):
            return False
        if "core.autocrlf" in config and str(config["core.autocrlf"]).lower() not in ("false", "0", "no", "off"):
            return False
        if "core.attributesfile" in config:
            return False
    except (pygit2.GitError, KeyError, ValueError):
        return False
    return True


def attribute_files(common_dir: str) -> list[str]:
    """The attribute files outside the worktree that libgit2 reads: ``info/attributes``, the
    global (XDG) file and the system file; only those that exist."""
    places = [os.path.join(common_dir, "info", "attributes")]
    for level, name in ((ConfigLevel.XDG, "attributes"), (ConfigLevel.SYSTEM, "gitattributes")):
        try:
            folders = str(pygit2.option(Option.GET_SEARCH_PATH, level) or "")
        except (pygit2.GitError, ValueError):
            folders = "/etc" if level == ConfigLevel.SYSTEM else ""
        places.extend(os.path.join(folder, name) for folder in folders.split(os.pathsep) if folder)
    return [p for p in places if os.path.lexists(p)]


def filters_possible(repo: pygit2.Repository, common_dir: str) -> bool:
    """Whether a filter (``core.autocrlf``, or any attribute outside the worktree) could apply to
    some file of this repository; ``.gitattributes`` files inside the worktree are not looked at."""
    return not _config_allows(repo) or bool(attribute_files(common_dir))


def capture(repo: pygit2.Repository, index_path: str, workdir: str, common_dir: str, big: int,
            announce: Callable[[int], None] | None = None,
            progress: Callable[[int], None] | None = None,
            store: Callable[[list[tuple[int, bytes]]], None] | None = None,
            batch: int = 64 << 20, scope: Callable[[bytes], bool] | None = None,
            scrub: Callable[[bytes, str], bytes] | None = None, scrub_max: int = 0) -> Capture | None:
    """Scan the worktree against the private index at ``index_path`` (as ``repo`` sees it: its
    workdir is the worktree, its index that file). ``announce`` is told how many files will be
    hashed, ``progress`` gets ``1`` per file hashed. ``None``: a case left to ``add_all`` (see the
    module docstring). Nothing is written but objects: when the new blobs held in memory reach
    ``batch`` bytes they are handed to ``store`` (and the rest are returned in
    :attr:`Capture.objects`), so memory stays bounded however much changed. ``scope``: hash only
    the changed files it accepts (a dry run limited to some paths); the others are left out of
    :attr:`Capture.entries`, so such a capture describes only that part of the worktree.
    ``scrub`` (the secrets policy, see :data:`gitstate.workspace.snapshot.Scrub`) sees each file
    of at most ``scrub_max`` bytes whose bytes are not in the object database yet; what it returns
    is the blob kept instead."""
    if os.name != "posix" or not _config_allows(repo) or attribute_files(common_dir):
        return None
    cache = read_stat_cache(index_path)
    if not cache:
        return None
    try:
        index_mtime = os.stat(index_path).st_mtime_ns
        scanner = _Scanner(repo, os.fsencode(workdir), cache, index_mtime, big)
        scanner.store, scanner.batch = store, batch
        scanner.scrub, scanner.scrub_max = scrub, scrub_max
        return scanner.run(announce, progress, scope)
    except (_GiveUp, OSError):
        return None


class _Scanner:
    def __init__(self, repo: pygit2.Repository, root: bytes, cache: dict[bytes, tuple[bytes, bytes]],
                 index_mtime: int, big: int) -> None:
        self.repo = repo
        self.root = root
        self.cache = cache
        self.index_mtime = index_mtime
        self.big = big
        folders = {path.rpartition(b"/")[0] for path in cache}
        if _ATTRIBUTES in cache or any((f + b"/" + _ATTRIBUTES) in cache for f in folders if f):
            raise _GiveUp
        self.tracked_dirs: set[bytes] = set()
        for folder in folders:
            while folder and folder not in self.tracked_dirs:
                self.tracked_dirs.add(folder)
                folder = folder.rpartition(b"/")[0]
        self.seen: set[bytes] = set()
        self.entries: dict[bytes, tuple[int, bytes]] = {}  # unchanged files: (mode, id) as cached
        self.todo: list[tuple[bytes, os.stat_result]] = []
        self.skipped: list[str] = []
        self.store: Callable[[list[tuple[int, bytes]]], None] | None = None
        self.batch = 64 << 20
        self.held = 0  # bytes of new blobs not handed to ``store`` yet
        self.scrub: Callable[[bytes, str], bytes] | None = None
        self.scrub_max = 0

    def ignored(self, rel: bytes) -> bool:
        try:
            return bool(self.repo.path_is_ignored(os.fsdecode(rel)))
        except UnicodeError:
            raise _GiveUp from None  # a name that is not UTF-8: pygit2 cannot pass it; add_all can

    def walk(self) -> None:
        cache, seen, todo, entries = self.cache, self.seen, self.todo, self.entries
        racy = self.index_mtime
        pack = _STAT.pack
        add = seen.add
        stack: list[bytes] = [b""]
        while stack:
            folder = stack.pop()
            prefix = folder + b"/" if folder else b""
            with os.scandir(self.root + b"/" + folder if folder else self.root) as it:
                for entry in it:
                    name = entry.name
                    rel = prefix + name
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            if folder or name != b".git":
                                self.directory(rel, stack)
                            continue
                        st = entry.stat(follow_symlinks=False)
                    except FileNotFoundError:
                        continue  # gone meanwhile: as if it had never been there
                    mode = st.st_mode
                    kind = mode & _IFMT
                    if kind == _IFREG:
                        gmode = MODE_EXEC if mode & 0o100 else MODE_BLOB
                    elif kind == _IFLNK:
                        gmode = MODE_LINK
                    else:
                        continue  # sockets, fifos, devices: git records none of them
                    known = cache.get(rel)
                    if known is None:
                        if self.ignored(rel):
                            continue
                        if name == _ATTRIBUTES:
                            raise _GiveUp
                        todo.append((rel, st))
                        continue
                    add(rel)
                    mtime = st.st_mtime_ns
                    if mtime >= racy:  # racily clean: look at the bytes (hash_one records it)
                        todo.append((rel, st))
                        continue
                    ctime = st.st_ctime_ns
                    # stat_key(st), inline: this runs once per file of the worktree
                    if known[0] != pack((ctime // 1_000_000_000) & _M32, ctime % 1_000_000_000,
                                        (mtime // 1_000_000_000) & _M32, mtime % 1_000_000_000,
                                        st.st_ino & _M32, gmode, st.st_uid & _M32, st.st_gid & _M32,
                                        st.st_size & _M32):
                        todo.append((rel, st))  # hash_one records it
                    else:
                        entries[rel] = (gmode, known[1])  # the key holds the mode: it is gmode

    def directory(self, rel: bytes, stack: list[bytes]) -> None:
        full = os.path.join(self.root, rel)
        if rel in self.tracked_dirs:
            if os.path.lexists(os.path.join(full, b".git")):
                raise _GiveUp  # a tracked directory turned into a repository
            stack.append(rel)
        elif not self.ignored(rel + b"/"):
            if os.path.lexists(os.path.join(full, b".git")):
                self.skipped.append(os.fsdecode(rel))
            else:
                stack.append(rel)

    def run(self, announce: Callable[[int], None] | None,
            progress: Callable[[int], None] | None,
            scope: Callable[[bytes], bool] | None = None) -> Capture:
        self.walk()
        todo = self.todo if scope is None else [(p, st) for p, st in self.todo if scope(p)]
        if announce is not None:
            announce(len(todo))
        result = Capture(entries=self.entries, skipped=sorted(self.skipped))
        result.removed = sorted(p for p in self.cache if p not in self.seen)
        for path in (*result.removed, *(p for p, _ in self.todo)):
            if path.rsplit(b"/", 1)[-1] == b".gitignore":
                result.ignore_changed = True
        for path, st in todo:
            self.hash_one(path, st, result)
            if progress is not None:
                progress(1)
        return result

    def hash_one(self, path: bytes, st: os.stat_result, result: Capture) -> None:
        full = self.root + b"/" + path
        if stat.S_ISLNK(st.st_mode):
            data = os.readlink(full)
            mode = MODE_LINK
        else:
            with open_regular(full) as opened:
                if opened is None:  # not a regular file any more (or gone): libgit2's add_all decides
                    raise _GiveUp
                fd, st = opened
                if st.st_size > self.big:
                    result.big.append(path)
                    result.entries.pop(path, None)
                    return
                data, st = read_settled(fd, full, st)
            mode = git_mode(st.st_mode)
        oid = hashlib.sha1(b"blob %d\0" % len(data), usedforsecurity=False)
        oid.update(data)
        raw = oid.digest()
        known = self.cache.get(path)
        if (self.scrub is not None and (known is None or known[1] != raw) and len(data) <= self.scrub_max
                and pygit2.Oid(raw=raw) not in self.repo.odb):
            new = self.scrub(data, os.fsdecode(path))
            if new is not data:
                data = new
                raw = hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).digest()
                result.redacted.add(path)
        if known is None or known[1] != raw:
            result.objects.append((int(ObjectType.BLOB), data))
            self.held += len(data)
            if self.store is not None and self.held >= self.batch:
                self.store(result.objects)
                result.objects = []
                self.held = 0
        result.entries[path] = (mode, raw)
        result.stats[path] = st


#: Pauses before reading again a file seen changing while it was read (then it is an error).
SETTLE_DELAYS = (0.01, 0.05, 0.2)

#: A file modified less than this long (ns) before it is read may be under a write that began
#: before its first ``fstat``: one ``write`` sets the mtime when it starts and not when it ends, so
#: the stat data before and after the read agree while the read sees half of the old bytes and half
#: of the new. Such a file is read twice and kept only if both reads agree. Writes lasting longer
#: than this (a single ``write`` call stalled for seconds) are assumed not to happen; so are clocks
#: of a network file system more than this much behind the local one.
RECENT_NS = 5_000_000_000


def recently_modified(st: os.stat_result, now_ns: int) -> bool:
    """Whether the file of ``st`` was modified so recently before ``now_ns`` (``time.time_ns()``)
    that a write begun before ``st`` was taken may still be running (see :data:`RECENT_NS`); an
    mtime in the future (a clock set back) counts as recent."""
    return now_ns - st.st_mtime_ns < RECENT_NS


def read_settled(fd: int, full: bytes, st: os.stat_result) -> tuple[bytes, os.stat_result]:
    """The bytes of the open file ``fd`` and the stat data that go with them, read whole while no
    one changed them. A file another program changes during the read (its size, mtime or ctime
    differ after it, or the bytes read are not its size) is accepted if it only grew and the bytes
    read are still its beginning (a log being appended to: what was read is a version the file
    had; the stat data returned are those before the read, so the next snapshot reads it again);
    else it is read again after a pause, a few times, and one that never settles is a
    :class:`FileChangingError` (before a restore has written anything). A file modified just
    before the read (:func:`recently_modified`) is read a second time and kept only if both reads
    agree: a single ``write`` that began before the first ``fstat`` changes no stat data while it
    runs. Without this a snapshot could store half of the old bytes and half of the new as a
    version that never existed."""
    for delay in (*SETTLE_DELAYS, None):
        started = time.time_ns()
        data = _read_all(fd, st.st_size)
        after = os.fstat(fd)
        if (len(data) == after.st_size == st.st_size and after.st_mtime_ns == st.st_mtime_ns
                and after.st_ctime_ns == st.st_ctime_ns):
            if not recently_modified(st, started):
                return data, after
            # a write that set this mtime may still be running: wait for it, then read again
            wait_for_writers(fd)
            again = _pread_all(fd, len(data) + 1)
            last = os.fstat(fd)
            if again == data and last.st_mtime_ns == st.st_mtime_ns and last.st_ctime_ns == st.st_ctime_ns:
                return data, last
            if len(again) > len(data) and again.startswith(data):
                return data, st  # grew by appending since (a log being written): what was read is a version it had
        elif len(data) == st.st_size <= after.st_size and _pread_all(fd, len(data)) == data:
            return data, st  # grew by appending (checked again after the growth was seen)
        if delay is None:
            break
        time.sleep(delay)
        os.lseek(fd, 0, os.SEEK_SET)
        st = os.fstat(fd)
    raise FileChangingError(os.fsdecode(full))


def wait_for_writers(fd: int) -> None:
    """Return once no ``write`` to the open file ``fd`` is running, where the file system lets a
    reader wait for that: ``lseek(SEEK_HOLE)`` takes the inode lock a buffered write holds for its
    whole length on Linux ext4, tmpfs and btrfs (and overlayfs over them). Elsewhere (xfs, network
    and FUSE file systems, other kernels) it may return at once. Moves the file offset."""
    seek_hole = getattr(os, "SEEK_HOLE", None)
    if seek_hole is not None:
        with contextlib.suppress(OSError):  # ENXIO: an empty file; EINVAL: not supported
            os.lseek(fd, 0, seek_hole)


@contextlib.contextmanager
def open_regular(full: str | bytes) -> Iterator[tuple[int, os.stat_result] | None]:
    """The open descriptor and ``fstat`` of the regular file at ``full`` (never through a link),
    closed on leaving; ``None`` when it is not a regular file, gone or unreadable."""
    try:
        fd = os.open(full, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        yield None
        return
    try:
        st = os.fstat(fd)
        yield (fd, st) if stat.S_ISREG(st.st_mode) else None
    finally:
        os.close(fd)


def starts_with(full: str | bytes, data: bytes) -> bool:
    """Whether the regular file at ``full`` is longer than ``data`` and begins with it, read once no
    write to it runs (:func:`wait_for_writers`): it only grew by appending since ``data`` was read
    (a log being written), so ``data`` is a version the file had."""
    try:
        with open_regular(full) as opened:
            if opened is None:
                return False
            wait_for_writers(opened[0])
            head = _pread_all(opened[0], len(data) + 1)
    except OSError:
        return False
    return len(head) > len(data) and head.startswith(data)


def settled_blob_id(full: str | bytes) -> bytes | None:
    """The 20-byte blob id of the regular file at ``full`` (no filter), read once no write to it
    runs (see :func:`wait_for_writers`), streamed; ``None`` if it is not a regular file (or gone,
    or unreadable) or changed size while it was read."""
    try:
        with open_regular(full) as opened:
            if opened is None:
                return None
            fd, st = opened
            wait_for_writers(fd)
            size = st.st_size
            digest = hashlib.sha1(b"blob %d\0" % size, usedforsecurity=False)
            pos = 0
            while True:  # one read of a small file (asked for one byte more: a short read is its end)
                ask = min(size + 1 - pos, 1 << 20)
                chunk = os.pread(fd, ask, pos)
                digest.update(chunk)
                pos += len(chunk)
                if pos > size:
                    return None  # grew meanwhile
                if len(chunk) < ask:
                    break
            return digest.digest() if pos == size else None
    except OSError:
        return None


def _pread_all(fd: int, size: int) -> bytes:
    """Up to ``size`` bytes of an open file from its start (fewer at its end)."""
    chunks = []
    pos = 0
    while pos < size:
        chunk = os.pread(fd, size - pos, pos)
        if not chunk:
            break
        chunks.append(chunk)
        pos += len(chunk)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _read_all(fd: int, size: int) -> bytes:
    """The rest of an open file (``size`` is what ``fstat`` said; a file growing meanwhile is read
    to its end). A first read that returns exactly ``size`` bytes when asked for more was at the
    end: no second read to find it (a thousand changed files, a thousand system calls fewer)."""
    chunk = os.read(fd, max(size + 1, 1 << 16))
    if len(chunk) == size or not chunk:
        return chunk
    chunks = [chunk]
    while True:
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def build_trees(entries: dict[bytes, tuple[int, bytes]]) -> tuple[bytes, dict[bytes, bytes]]:
    """The trees of a flat listing (path → (mode, 20-byte id)): the root tree's id and every tree's
    body by id, entries ordered as git orders them (a directory sorts as ``name/``)."""
    children: dict[bytes, list[tuple[bytes, int, bytes]]] = {b"": []}
    for path, (mode, oid) in entries.items():
        folder, _, name = path.rpartition(b"/")
        kids = children.get(folder)
        if kids is None:
            kids = children[folder] = []
            # register the folder with each missing ancestor (its id is filled in below)
            child = folder
            while True:
                parent = child.rpartition(b"/")[0]
                known = parent in children
                if not known:
                    children[parent] = []
                children[parent].append((child.rpartition(b"/")[2], MODE_TREE, b""))
                if known:
                    break
                child = parent
        kids.append((name, mode, oid))
    trees: dict[bytes, bytes] = {}
    ids: dict[bytes, bytes] = {}
    for folder in sorted(children, key=lambda f: -f.count(b"/") - (1 if f else 0)):
        parts = []
        items = [(n, m, ids[(folder + b"/" + n) if folder else n] if m == MODE_TREE else o)
                 for n, m, o in children[folder]]
        items.sort(key=lambda item: item[0] + b"/" if item[1] == MODE_TREE else item[0])
        for name, mode, oid in items:
            parts.append(b"%o %s\0%s" % (mode, name, oid))
        body = b"".join(parts)
        digest = hashlib.sha1(b"tree %d\0" % len(body), usedforsecurity=False)
        digest.update(body)
        ids[folder] = digest.digest()
        trees[ids[folder]] = body
    return ids[b""], trees
