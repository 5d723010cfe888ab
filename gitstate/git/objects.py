"""Writing git objects: blobs and trees built in Python (tree bytes exactly as git makes them, so
ids match git's and ``git fsck --strict`` accepts them), with a cache of ids known to exist so that
unchanged state costs neither encoding nor a write. Each loose id written is reported to a
callback (housekeeping packs them)."""

from __future__ import annotations

import hashlib
import os
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable

import pygit2
from pygit2.enums import ObjectType

from gitstate.errors import StoreWriteError
from gitstate.git import deflate, lockfile, safeopen
from gitstate.git.packs import freshen, write_pack
from gitstate.git.safeopen import write_all  # also imported from here by its callers

MODE_BLOB = 0o100644
MODE_EXEC = 0o100755
MODE_LINK = 0o120000
MODE_TREE = 0o040000
MODE_COMMIT = 0o160000

# Ids stay trusted this long; after that they are checked again, since `git gc` may prune an
# unreachable object (it never prunes one younger than gc.pruneExpire, two weeks by default).
_TRUST_SECONDS = 3600.0

TreeEntry = tuple[str, str, int]  # (name, hex id, mode)


class ObjectWriter:
    """Writes objects into one repository, skipping those it already knows exist.

    Between :meth:`begin` and :meth:`flush` (a store transaction) new objects are only staged in
    memory, and :meth:`flush` writes them as one pack (:func:`gitstate.git.packs.write_pack`): two
    file creations per transaction instead of one per object. Outside a transaction each object is
    written loose, as git writes it."""

    def __init__(self, repo: pygit2.Repository, on_write: Callable[[str], None] | None = None,
                 cache_size: int = 65536, fsync: bool = False) -> None:
        self.repo = repo
        self.odb = repo.odb
        self.objects = objects_dir(repo)
        self.fsync = fsync
        self.on_write = on_write
        self._known: OrderedDict[str, None] = OrderedDict()
        self._cache_size = cache_size
        self._born = time.monotonic()
        # digest of a value's exact Python form -> blob id of its canonical encoding (see statetree)
        self.value_cache: OrderedDict[Hashable, str] = OrderedDict()
        # set while a transaction stages: id -> (type, body, its zlib stream's maker or None)
        self._staged: dict[str, tuple[int, bytes, Callable[[], bytes] | None]] | None = None
        self.pack_dir = os.path.join(self.objects, "pack")
        # Packs flushed by a write whose refs have not moved yet: their objects are unreachable, so
        # each pack is kept (a .keep file) from a concurrent `git repack -a -d` until the write is
        # over, and what they hold is trusted only once it is published (see published/abandoned).
        self._unpublished: set[str] = set()
        self._keeps: list[tuple[str, int]] = []
        # while held (see hold_keeps): .keep files of published writes, and what their packs hold
        self._holding = 0
        self._held_keeps: list[tuple[str, int]] = []
        self._held: set[str] = set()
        self._epoch = gc_epoch(self.objects)
        self._left_loose: set[str] = set()  # what the last transaction left loose (see flush_loose)
        # objects flush_loose(journal=True) left loose: of the write under way, and of published
        # writes, until the store takes them (take_left_loose) to pack them (pack_loose_copies)
        self._loose_unpublished: list[LooseObject] = []
        self._loose_published: list[LooseObject] = []

    def _expire(self) -> None:
        if time.monotonic() - self._born > _TRUST_SECONDS:
            self._known.clear()
            self.value_cache.clear()
            self._born = time.monotonic()

    def forget(self) -> None:
        """Trust nothing remembered so far (refs were deleted or rewritten: what only they reached
        may be pruned by ``git gc`` from now on)."""
        self._known.clear()
        self.value_cache.clear()
        self._born = time.monotonic()

    def remember(self, oid: str) -> None:
        """Record that ``oid`` exists (read from the repository, or just written)."""
        known = self._known
        known[oid] = None
        if len(known) > self._cache_size:
            known.popitem(last=False)

    def knows(self, oid: str) -> bool:
        """Whether ``oid`` is known to exist without asking the object database."""
        return oid in self._known

    def write(self, kind: ObjectType, data: bytes, *, again: bool = False,
              deflated: Callable[[], bytes] | None = None) -> str:
        """Write one object (unless it exists) and return its hex id. ``again``: stage it even if
        known to exist (to pack a loose copy, see :meth:`drop_loose`). ``deflated``: makes the zlib
        stream of ``data`` cheaper than compressing it (:mod:`gitstate.git.deflate`), for a pack."""
        self._expire()
        header = b"%s %d\x00" % (_TYPE_NAMES[kind], len(data))
        digest = hashlib.sha1(header, usedforsecurity=False)
        digest.update(data)
        oid = digest.hexdigest()
        if oid in self._known and not (again and self._staged is not None):
            self._known.move_to_end(oid)
            return oid
        if self._staged is not None:
            # no existence check: an object already stored costs a few bytes in the new pack, and
            # writing it again keeps it alive however the repository was pruned meanwhile
            self._staged.setdefault(oid, (int(kind), data, deflated))
            return oid
        raw = header + data
        loose = os.path.join(self.objects, oid[:2], oid[2:])
        try:
            existed = freshen(loose) or oid in self.odb
            if not existed:
                self._write_loose(loose, raw)
        except (pygit2.GitError, OSError) as exc:
            raise StoreWriteError(self.repo.path, str(exc)) from exc
        if not existed and self.on_write is not None:
            self.on_write(oid)
        self.remember(oid)
        return oid

    def _write_loose(self, path: str, raw: bytes) -> None:
        """Write a loose object as git does: its zlib stream (:func:`gitstate.git.deflate.compress`)
        in a read-only temporary file of the fan-out folder, renamed into place.

        Hand-written rather than ``Odb.write`` for control, not speed (``scripts/bench_packs.py``
        times both, ``loose files`` and ``Odb.write``: creating the file dominates each): the flush
        follows ``core.fsync``, the temporary name is one housekeeping sweeps (``tmp_obj_``), and a
        fan-out folder removed meanwhile by ``git prune-packed`` is made again."""
        directory = os.path.dirname(path)
        tmp = os.path.join(directory, f"tmp_obj_{os.getpid()}_{secrets.token_hex(6)}")
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
        fd = safeopen.in_folder(directory, lambda: os.open(tmp, flags, 0o444))
        try:
            write_all(fd, deflate.compress(raw))
            if self.fsync:
                os.fsync(fd)
        except BaseException:
            os.close(fd)
            os.unlink(tmp)
            raise
        os.close(fd)
        os.replace(tmp, path)  # an identical object written meanwhile is replaced by the same bytes

    def begin(self) -> None:
        """Start staging new objects in memory (a transaction)."""
        if self._staged is not None:
            raise RuntimeError("a transaction is already staging objects in this thread")
        epoch = gc_epoch(self.objects)
        if epoch != self._epoch:  # a `git gc`/`repack` ran: what it dropped may be in the caches
            self.forget()
            self._epoch = epoch
        self._staged = {}
        self._left_loose = set()

    def staged_count(self) -> int:
        """How many objects are staged."""
        return len(self._staged or {})

    def staged_size(self) -> int:
        """How many bytes the staged objects' bodies hold."""
        return sum(len(body) for _kind, body, _z in (self._staged or {}).values())

    def flush(self, fsync: bool, sync_dir: bool = False) -> str | None:
        """Write the staged objects as one pack (with its index; both flushed to disk when
        ``fsync``), remember them as existing, stop staging; returns the pack's name (``None`` when
        nothing was staged)."""
        staged, self._staged = self._staged, None
        if not staged:
            return None
        written = write_pack(self.pack_dir, [(oid, kind, data) for oid, (kind, data, _z) in staged.items()],
                             fsync=fsync, sync_dir=sync_dir, keep=KEEP_PREFIX,
                             compressed={oid: z() for oid, (_k, _d, z) in staged.items() if z is not None})
        if written.keep is not None:
            self._keeps.append(written.keep)
        for oid in staged:
            self.remember(oid)
        self._unpublished.update(staged)
        return written.name

    def published(self) -> None:
        """The write's refs moved: what its packs hold is reachable now; drop their ``.keep``
        (unless held: :meth:`hold_keeps`). What it left loose waits for :meth:`take_left_loose`."""
        self._loose_published.extend(self._loose_unpublished)
        self._loose_unpublished = []
        if self._holding:
            self._held.update(self._unpublished)
            self._held_keeps.extend(self._keeps)
            self._keeps = []
        self._unpublished.clear()
        self._drop_keeps()

    def hold_keeps(self) -> None:
        """From now until the matching :meth:`release_keeps`, packs of writes that move no ref
        (objects a later write will name, such as a workspace snapshot's before its checkpoint)
        keep their ``.keep``: a concurrent ``git repack -a -d`` would drop their objects, which
        nothing names yet. Holds nest."""
        self._holding += 1

    def release_keeps(self, reached: bool) -> None:
        """End a :meth:`hold_keeps`; at the outermost one, drop the held ``.keep`` files.
        ``reached``: the write that names the held objects was published; if not, they are
        forgotten (nothing names them: a ``git repack -a -d`` may drop them from now on)."""
        self._holding -= 1
        if self._holding:
            return
        held, self._held = self._held, set()
        if not reached:
            for oid in held:
                self._known.pop(oid, None)
        keeps, self._held_keeps = self._held_keeps, []
        self._keeps.extend(keeps)
        if self._staged is None:
            self._drop_keeps()

    def abandoned(self) -> None:
        """The write failed: forget the objects its packs hold (nothing names them, so a
        ``git repack -a -d`` may drop them once their ``.keep`` is gone) and drop the ``.keep``."""
        gone, self._unpublished = self._unpublished, set()
        self._staged = None
        self._loose_unpublished = []
        if gone:
            for oid in gone:
                self._known.pop(oid, None)
            for key in [k for k, oid in self.value_cache.items() if oid in gone]:
                del self.value_cache[key]
        self._drop_keeps()

    def _drop_keeps(self) -> None:
        keeps, self._keeps = self._keeps, []
        for path, fd in keeps:
            try:
                lockfile.release_held(path, fd)
            except OSError:
                pass  # housekeeping removes a .keep whose owner is gone

    def flush_loose(self, journal: bool = False) -> int:
        """Write the staged objects as loose files (flushed when ``fsync`` is set), remember them,
        stop staging; returns how many were written. For small transactions: no pack, so no
        ``fdatasync`` under git's default ``core.fsync``. An existing loose file is only freshened.

        ``journal``: each staged object is reported to ``on_write`` (housekeeping packs it later),
        also one that was already loose, and :meth:`drop_loose` leaves them all in place until the
        next transaction. Without it they are not reported: the caller packs them with a later
        transaction (:meth:`drop_loose`), as the LangGraph saver does with its pending writes."""
        staged, self._staged = self._staged, None
        if not staged:
            return 0
        written = 0
        try:
            for oid, (kind, data, _z) in staged.items():
                loose = os.path.join(self.objects, oid[:2], oid[2:])
                if not freshen(loose):
                    self._write_loose(loose, b"%s %d\x00" % (_TYPE_NAMES[ObjectType(kind)], len(data)) + data)
                    written += 1
                if journal and self.on_write is not None:
                    self.on_write(oid)
        except OSError as exc:
            raise StoreWriteError(self.repo.path, str(exc)) from exc
        if journal:
            self._left_loose = set(staged)
            self._loose_unpublished.extend((oid, kind, data, z) for oid, (kind, data, z) in staged.items())
        for oid in staged:
            self.remember(oid)
        self._unpublished.update(staged)
        return written

    def take_left_loose(self) -> list[LooseObject]:
        """The objects that published writes left loose (:meth:`flush_loose` with ``journal``),
        with their bodies, handed over once (to be packed by :func:`pack_loose_copies`)."""
        taken, self._loose_published = self._loose_published, []
        return taken

    def drop_loose(self, oids: Iterable[str]) -> None:
        """Remove the loose copies of ``oids``, which a pack this writer published holds (as
        ``git prune-packed`` does: an object in a pack loses nothing when its loose copy goes).
        Objects the last transaction left loose (:meth:`flush_loose` with ``journal``) stay: no
        pack holds them yet."""
        left = self._left_loose
        unlink_loose(self.objects, (oid for oid in oids if oid not in left))

    def discard(self) -> None:
        """Drop the staged objects (the transaction failed before publishing them): nothing that
        names them may be trusted afterwards."""
        staged, self._staged = self._staged, None
        if staged:
            for key in [k for k, oid in self.value_cache.items() if oid in staged]:
                del self.value_cache[key]

    def blob(self, data: bytes, deflated: Callable[[], bytes] | None = None) -> str:
        """Write a blob (``deflated``: see :meth:`write`)."""
        return self.write(ObjectType.BLOB, data, deflated=deflated)

    def tree(self, entries: Iterable[TreeEntry]) -> str:
        """Write a tree from ``(name, hex id, mode)`` entries in any order."""
        return self.write(ObjectType.TREE, tree_bytes(entries))

    def cached_value(self, key: Hashable) -> str | None:
        """Object id stored for a value digest (or another exact key), if still trusted."""
        self._expire()
        oid = self.value_cache.get(key)
        if oid is not None:
            self.value_cache.move_to_end(key)
        return oid

    def cache_value(self, key: Hashable, oid: str) -> None:
        """Remember the object id of a value digest (or another exact key)."""
        cache = self.value_cache
        cache[key] = oid
        if len(cache) > self._cache_size:
            cache.popitem(last=False)


def gc_epoch(objects: str) -> str:
    """Changes whenever ``git gc`` or a ``git repack`` that changed the set of packs has run, which
    may have pruned objects no ref reaches: caches of objects that exist are dropped then.

    It is the identity (inode, mtime, size) of ``objects/info/packs`` (rewritten by a repack that
    changed the packs) and of the commit-graph (written anew by every ``git gc``, also when its
    repack left the same packs). ``packed-refs`` is not part of it: gitstate rewrites that file for
    every multi-ref transaction, which would drop the caches at every node step."""
    paths = _EPOCH_PATHS.get(objects)
    if paths is None:
        paths = _EPOCH_PATHS[objects] = (
            os.path.join(objects, "info", "packs"), os.path.join(objects, "info", "commit-graph"),
            os.path.join(objects, "info", "commit-graphs", "commit-graph-chain"))
    parts = []
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            parts.append("-")
            continue
        parts.append(f"{st.st_ino}:{st.st_mtime_ns}:{st.st_size}")
    return "/".join(parts)


#: An object written loose, kept in memory: (hex id, type 1-4, body, its zlib stream's maker or None)
LooseObject = tuple[str, int, bytes, Callable[[], bytes] | None]


def pack_loose_copies(objects: str, items: list[LooseObject], *, fsync: bool, sync_dir: bool = False) -> str:
    """Write objects that are stored loose as one pack, from their bodies in memory (compressed as
    a transaction's pack is), flushed as ``fsync`` says, then remove their loose copies, as ``git
    prune-packed`` does; returns the pack's name. For objects that refs reach (no ``.keep``): what
    housekeeping would do with ``git pack-objects``, without reading them back or starting a
    process."""
    written = write_pack(os.path.join(objects, "pack"), [(oid, kind, body) for oid, kind, body, _z in items],
                         fsync=fsync, sync_dir=sync_dir,
                         compressed={oid: z() for oid, _kind, _body, z in items if z is not None})
    unlink_loose(objects, (oid for oid, _kind, _body, _z in items))
    return written.name


def unlink_loose(objects: str, oids: Iterable[str]) -> None:
    """Remove the loose copies of ``oids`` (a missing one is fine)."""
    for oid in oids:
        try:
            os.unlink(os.path.join(objects, oid[:2], oid[2:]))
        except OSError:
            pass


_EPOCH_PATHS: dict[str, tuple[str, str, str]] = {}  # objects dir -> the files gc_epoch looks at

KEEP_PREFIX = b"gitstate transaction "  # how a transaction's .keep starts; its owner record follows


_TYPE_NAMES = {ObjectType.BLOB: b"blob", ObjectType.TREE: b"tree", ObjectType.COMMIT: b"commit",
               ObjectType.TAG: b"tag"}


def _sort_key(entry: TreeEntry) -> bytes:
    name, _oid, mode = entry
    raw = name.encode("utf-8", "surrogateescape")
    return raw + b"/" if mode == MODE_TREE else raw


def tree_bytes(entries: Iterable[TreeEntry]) -> bytes:
    """Serialise tree entries exactly as git does."""
    return b"".join([entry_bytes(name, oid, mode) for name, oid, mode in sorted(entries, key=_sort_key)])


def entry_bytes(name: str, oid: str, mode: int) -> bytes:
    """One tree entry as git serialises it (a tree's bytes are its entries' in git's order)."""
    return b"%o %s\x00" % (mode, name.encode("utf-8", "surrogateescape")) + bytes.fromhex(oid)


_OBJECT_DIRS: dict[str, str] = {}


def objects_dir(repo: pygit2.Repository) -> str:
    """The object directory of a repository (the shared one for a linked worktree)."""
    key = repo.path
    found = _OBJECT_DIRS.get(key)
    if found is None:
        common = key
        try:
            with open(os.path.join(key, "commondir"), encoding="utf-8") as fh:
                common = os.path.join(key, fh.read().strip())
        except OSError:
            pass
        found = _OBJECT_DIRS[key] = os.path.realpath(os.path.join(common, "objects"))
    return found
