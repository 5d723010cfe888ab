"""Workspace snapshots: the worktree captured as a git tree without touching anything of the user's.

Capture goes through a *private* index, ``<common git dir>/agentos/index-<worktree key>``, never
``.git/index``, with git's own machinery, as ``git stash`` does: a copy of the private index is
made beside it (on first use, or after a ``git gc``, a copy of the *user's* index: git's stat cache
then makes every file the user's git already knows cost one ``lstat``), then
``GIT_INDEX_FILE=<copy> git add -A [-- paths]`` and ``git write-tree`` run on it (``LC_ALL=C``,
through :func:`gitstate.git.command.run_git`), and the copy is renamed over the private index. git
honours ``.gitignore``/``info/exclude``/``core.excludesFile``, applies clean filters (the user's
filter drivers too) as the user's ``git add`` does, streams files above :data:`BIG_BLOB` into a pack
(``core.bigFileThreshold``), never opens a FIFO, socket or device, and keeps the stat cache. Nothing
reaches into pygit2's or libgit2's private structures.

Choices:

- Tracked files that match an ignore rule are captured (git keeps them too): they come with the
  user's index when the private one is seeded from it, and paths that appear in the user's index
  later are added (``git update-index --add``) whenever that file changes; files that an ignore
  rule matches and the user does not track leave the private index when the rules change.
- Nested repositories (an untracked directory holding its own ``.git``) and submodules are **not
  captured**: a gitlink records only a commit id that may exist nowhere else, and restore refuses
  gitlinks from untrusted trees anyway. ``git add`` adds them as gitlinks (or refuses one without a
  commit): those are taken out again and listed in :attr:`Snapshot.skipped`, and restore never
  writes into them.
- A file modified in the last seconds that git read may have been read while another program was
  writing it: it is read again once no write runs, and git's result kept only if the two agree
  (:meth:`Workspace._settle`).
- New blobs and trees (those not in the previous snapshot; for the first one, not in the user's
  HEAD tree, whose objects are the user's) are appended to gitstate's housekeeping journal so they
  get packed; blobs larger than :data:`BIG_BLOB` are left as git wrote them.
- A restore's snapshot (``fast=True``) uses :func:`gitstate.workspace.scan.capture` instead where it
  applies, and the stat data of what a restore wrote is recorded in the private index
  (:meth:`Workspace.record`), which gitstate then writes itself (:func:`scan.write_index`).

Measured with ``scripts/bench_files.py --files 10000 --only snapshot --rounds 11`` (10,000
committed files, 100 MB; 2 shared cores; medians of interleaved rounds): the first snapshot (no
private index) 152 ms against 702 ms for ``GIT_INDEX_FILE=<new> git add -A``, ratio 0.22 (the
libgit2 ``add_all`` it replaces: 4.9x); ``checkpoint(files=True)`` after 10 edits (the user's index
changed by ``git add -u`` between rounds) 106 ms against 94 ms for ``git stash create``, ratio 1.13
of the medians, 0.99 the median of the per-round ratios. A snapshot runs ``git add`` and
``git write-tree``, plus two ``git ls-files`` when the user's index or an ignore rule changed and
one when a file modified in the last seconds was read."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import struct
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from stat import S_ISDIR, S_ISLNK, S_ISREG
from typing import Any, Protocol, TypeVar, cast

import pygit2
from pygit2.enums import ObjectType, RepositoryOpenFlag

from gitstate.errors import (
    CorruptObjectError,
    FileChangingError,
    StoreWriteError,
    UsageError,
    WorktreeBusyError,
)
from gitstate.format.names import worktree_key
from gitstate.git import lockfile, safeopen
from gitstate.git.command import last_line, run_git
from gitstate.git.location import Location
from gitstate.git.objects import MODE_COMMIT, MODE_TREE, gc_epoch, objects_dir
from gitstate.git.reader import ObjectReader
from gitstate.workspace import scan
from gitstate.workspace.quarantine import Quarantine


class Scrub(Protocol):
    """What a snapshot stores for a new file instead of its bytes (the store's secrets policy)."""

    def __call__(self, data: bytes, path: str) -> bytes:
        """The bytes to store for the file ``path`` (``data`` itself when they do not change), or
        an error that refuses the snapshot (nothing is written then)."""

    def finds(self, data: bytes) -> bool:
        """Whether the call would change, record or refuse ``data`` (whatever the path): a
        snapshot whose new files it finds nothing in stores them without naming them."""
#: New blobs larger than this are not handed to a :data:`Scrub` (the secrets policy reads text
#: files up to this size: :data:`gitstate.secrets.policy.MAX_FILE`).
SCRUB_MAX = 1 << 20
BIG_BLOB = 32 * 1024 * 1024  # bytes; larger files are streamed into a pack by git, not packed by gitstate
PACK_BATCH = 64 * 1024 * 1024  # bytes of new objects a fast snapshot holds in memory per pack
#: Seconds a restore waits for another restore of the same worktree to finish.
RESTORE_WAIT = 10.0
#: What ``git add --verbose`` prints per path it adds or removes (a name may hold a newline).
_VERBOSE = re.compile(rb"^(add|remove) '(.*?)'$", re.M | re.S)
_NO_COMMIT = re.compile(rb"^error: '(.*)/' does not have a commit checked out$", re.M)
_NOT_A_FILE = re.compile(rb"^error: (.*): can only add regular files, symbolic links or git-directories$", re.M)
_UNREADABLE = re.compile(rb"^error: unable to index file '(.*)'$", re.M)
#: What ``git add`` stops on when another program changes the worktree under it (tried again).
_RACES = (b"unstable object source data", b"fatal: unable to stat")
#: What git says when the fan-out folder of a loose object it writes vanished between its ``mkdir``
#: and its temporary file: a concurrent ``git prune`` or ``prune-packed`` (the user's ``git gc``,
#: ``git repack -d``) removed it while empty. git tries once; :meth:`Workspace._git` runs the command
#: again after these pauses (``write-tree``, ``update-index``, ``add`` of one path; not ``add -A``).
_VANISHED_FOLDER = b"unable to create temporary file: No such file or directory"
_VANISHED_DELAYS = (0.0, 0.01, 0.05, 0.2)


@dataclass(frozen=True)
class Snapshot:
    """A captured worktree: the id of its tree, the nested repositories left out, and the
    worktree-relative paths it was limited to (``None``: the whole worktree)."""

    tree: str
    skipped: tuple[str, ...] = ()
    paths: tuple[str, ...] | None = None
    scanned: bool = False  # captured by gitstate's own scan (the worktree then holds no .gitattributes)
    #: Paths whose snapshot holds other bytes than the worktree (a scrub redacted them).
    redacted: tuple[str, ...] = ()


@dataclass(frozen=True)
class Survey:
    """The worktree as a snapshot would capture it, found without writing anything: each file's
    ``(blob id, mode)`` by worktree-relative path, and the nested repositories left out."""

    entries: dict[str, tuple[str, int]]
    skipped: tuple[str, ...] = ()
    #: The worktree's tree when the survey found every file exactly as the stat cache holds it (no
    #: file to hash, none gone, no rule changed) and that tree is stored: a snapshot taken now would
    #: write nothing and return it (see :meth:`Workspace.settled`). ``None`` otherwise.
    tree: str | None = None


def normalize_path(path: str | os.PathLike[str], workdir: str) -> str:
    """A user-given path as a worktree-relative, ``/``-separated path; refuses paths outside."""
    text = os.fspath(path)
    full = os.path.normpath(text if os.path.isabs(text) else os.path.join(workdir, text))
    rel = os.path.relpath(full, workdir)
    if rel == ".":
        return ""
    if rel == ".." or rel.startswith(".." + os.sep) or os.path.isabs(rel):
        raise UsageError(f"path {text!r} is outside the worktree {workdir}")
    rel = rel.replace(os.sep, "/")
    if rel.split("/", 1)[0].lower() == ".git":
        raise UsageError(f"path {text!r} is inside .git")
    return rel


def _dropped(objects: list[tuple[int, bytes]]) -> None:
    """The store of :meth:`Workspace.survey`: hashed blobs are not kept (each is handed over as
    soon as it is read, the batch size being 0)."""


def matches(path: str, prefixes: Sequence[str]) -> bool:
    """Whether ``path`` is one of ``prefixes`` or lies under one of them (``""`` matches all)."""
    return any(p == "" or path == p or path.startswith(p + "/") for p in prefixes)


class _Pruned(Exception):
    """``git write-tree`` found an id of the private index missing (a ``git gc`` pruned it)."""


class Workspace:
    """Snapshots of one store's worktree through the store's private index."""

    def __init__(self, location: Location, on_new_objects: Callable[[list[str]], None] | None = None,
                 store_objects: Callable[[list[tuple[int, bytes]]], None] | None = None) -> None:
        """``on_new_objects`` is told the ids of loose objects a snapshot wrote (for housekeeping);
        ``store_objects`` stores ``(type, body)`` objects as one pack through the store's write path
        (needed by ``snapshot(fast=True)``)."""
        self.location = location
        self._on_new_objects = on_new_objects
        self._store_objects = store_objects
        loc = location
        if loc.workdir is None:
            raise UsageError("this repository has no work tree here to snapshot or restore (a bare "
                             "repository, or a git dir opened from inside it): run from the work tree, "
                             "or set GIT_WORK_TREE")
        self.workdir = loc.workdir
        agentos = os.path.join(loc.common_dir, "agentos")
        os.makedirs(agentos, exist_ok=True)
        self.index_path = os.path.join(agentos, f"index-{worktree_key(loc.linked_id)}")
        self._local = threading.local()
        self._tracked_sig: tuple[Any, ...] | None = None
        self._user_cache: tuple[tuple[int, int, int] | None, frozenset[str]] | None = None
        # the private index's entries as this process last wrote them, with that file's identity:
        # read back from memory while the file is still that one (a restore's snapshot writes it,
        # then the restore records what it wrote: one parse of 50,000 entries spared each time)
        self._index_memo: tuple[tuple[int, ...], dict[bytes, bytes]] | None = None

    # -- the repository handle and git ----------------------------------------------------------

    def _repo(self, check_rules: bool = False) -> pygit2.Repository:
        """This thread's handle on the repository with the worktree as its workdir (for ignore
        rules, configuration and objects; the private index is git's). ``check_rules``: first open
        a new one if the global excludes file changed since this one was opened (libgit2 settles
        which file that is, and whether it exists, once per handle)."""
        repo = getattr(self._local, "repo", None)
        if repo is not None:
            if not check_rules or self._local.excludes == self._excludes_state(repo):
                return repo
            self._local.repo = None
        try:
            repo = pygit2.Repository(self.location.git_dir, flags=RepositoryOpenFlag.NO_SEARCH)
            repo.workdir = self.workdir
        except (pygit2.GitError, OSError) as exc:
            raise StoreWriteError(self.location.git_dir, f"cannot open the repository: {exc}") from exc
        self._local.repo = repo
        self._local.excludes = self._excludes_state(repo)
        return repo

    def _excludes_state(self, repo: pygit2.Repository) -> tuple[str, tuple[int, int, int] | None]:
        """The global excludes file's path and ``(mtime_ns, size, inode)`` (``None``: absent)."""
        path = self._excludes_file(repo)
        return path, _file_state(path)

    def _git(self, index: str, args: Sequence[str], stdin: bytes | None = None, *,
             repeat: bool = True) -> subprocess.CompletedProcess[bytes]:
        """``git args`` on the worktree with ``index`` as its index (never the user's): pathspecs
        literal, no split index, no fsmonitor, files above :data:`BIG_BLOB` streamed into a pack.
        With ``repeat``, run again when a concurrent prune removed the folder git was writing a
        loose object in (:data:`_VANISHED_FOLDER`): for commands that change nothing when they
        fail, or whose output is not read."""
        options = ["-c", "core.splitIndex=false", "-c", "core.fsmonitor=false", "-c", "advice.addEmbeddedRepo=false",
                   "-c", f"core.bigFileThreshold={max(BIG_BLOB, 1)}", "--literal-pathspecs"]
        env = {"GIT_INDEX_FILE": index}
        quarantine: Quarantine | None = getattr(self._local, "quarantine", None)
        if quarantine is not None:
            env.update(quarantine.env())
        for delay in (*_VANISHED_DELAYS, None):
            proc = cast("subprocess.CompletedProcess[bytes]",  # text=False: bytes
                        run_git(self.location.git_dir, [*options, *args], cwd=self.workdir,
                                work_tree=self.workdir, text=False, stdin=stdin, env=env))
            if not repeat or delay is None or proc.returncode == 0 or _VANISHED_FOLDER not in proc.stderr:
                break
            time.sleep(delay)
        return proc

    def _git_paths(self, index: str, args: Sequence[str], names: Iterable[str]) -> subprocess.CompletedProcess[bytes]:
        """``git args -z --stdin`` (``update-index``) fed ``names``."""
        data = b"".join(os.fsencode(n) + b"\0" for n in names)
        return self._git(index, [*args, "-z", "--stdin"], stdin=data)

    @contextlib.contextmanager
    def restoring(self, wait: float | None = None) -> Iterator[None]:
        """Hold the worktree's restore lock (``<private index>.restore.lock``, a
        :class:`lockfile.FileLock`) for a restore's snapshot, writes and stat cache: two restores of
        one worktree at once (two processes, or two threads) would unlink and create the same files
        under each other. A second restore waits up to ``wait`` seconds (:data:`RESTORE_WAIT`) for
        the first to end, then raises :class:`WorktreeBusyError` having changed nothing; the kernel
        releases the lock of a killed restore. :class:`StoreWriteError` when the lock cannot be made
        (a read-only repository)."""
        path = self.index_path + ".restore.lock"
        limit = RESTORE_WAIT if wait is None else wait
        deadline = time.monotonic() + limit
        pause = 0.005
        while (lock := _take_lock(path)) is None:
            if time.monotonic() >= deadline:
                raise WorktreeBusyError(self.workdir, limit, lockfile.holder(path))
            time.sleep(pause)
            pause = min(pause * 2, 0.1)
        with lock:
            yield


    # -- capture ----------------------------------------------------------------------------------

    def resolve_paths(self, paths: Iterable[str | os.PathLike[str]] | None) -> list[str] | None:
        """The worktree-relative prefixes a snapshot of ``paths`` is limited to (``None``: all).

        Relative paths are taken relative to the worktree root (callers with a current directory,
        like the CLI, make them absolute first). :class:`UsageError` for a path outside the worktree,
        inside ``.git``, or that exists neither on disk nor in the user's index (a deleted tracked
        file is fine: the snapshot then records its absence), so a typo never yields an empty
        snapshot silently."""
        if paths is None:
            return None
        given = [(p, normalize_path(p, self.workdir)) for p in paths]
        prefixes = sorted({rel for _, rel in given})
        if "" in prefixes:
            return None
        tracked: frozenset[str] | None = None
        for text, rel in given:
            if os.path.lexists(os.path.join(self.workdir, rel)):
                continue
            if tracked is None:
                tracked = self._user_paths()
            if rel not in tracked and not any(t.startswith(rel + "/") for t in tracked):
                raise UsageError(f"path {os.fspath(text)!r} does not exist in the worktree {self.workdir}")
        return prefixes

    def snapshot(self, paths: Iterable[str | os.PathLike[str]] | None = None,
                 progress: Callable[[int], None] | None = None, *, fast: bool = False,
                 announce: Callable[[int], None] | None = None, scrub: Scrub | None = None) -> Snapshot:
        """Capture the worktree (or only ``paths``: files or directories, see
        :meth:`resolve_paths`) and return its tree. ``progress`` is called with ``1`` per file
        that had to be hashed (new or changed since the last snapshot), for a progress display.

        ``fast`` (a whole-worktree snapshot only): capture with :func:`gitstate.workspace.scan.capture`
        where it applies (one ``lstat`` per file, new objects stored as one pack through the store),
        else as usual; ``announce`` is then told first how many files will be hashed. That pack is
        unreferenced until a checkpoint names the tree: take the snapshot and write that checkpoint
        inside :meth:`Store.keeping_objects`, as a restore does with its safety checkpoint, so a
        concurrent ``git repack -a -d`` cannot drop it.

        ``scrub`` (the store's secrets policy) sees every file whose bytes would be a new blob (not
        in the object database yet) of at most :data:`SCRUB_MAX` bytes, before anything of it is
        stored: git's objects wait in a :class:`Quarantine` until then. What it returns is stored
        instead, and such a file is listed in :attr:`Snapshot.redacted` (its stat cache entry is
        left stale, so every snapshot reads it again); if it raises, nothing is stored.

        Nothing of the user's is written: not ``.git/index``, not HEAD, not a file of the worktree."""
        prefixes = self.resolve_paths(paths)
        repo = self._repo(check_rules=True)
        if fast and prefixes is None and self._store_objects is not None:
            snap = self._fast_snapshot(repo, announce, progress, scrub)
            if snap is not None:
                return snap
        epoch = gc_epoch(objects_dir(repo))
        # after a `git gc` the private index may name objects it pruned (those no checkpoint
        # keeps): start again from the user's index, whose objects git keeps
        seed = "private" if epoch == self._saved_epoch() else "user"
        while True:
            work, used = self._working_copy(seed)
            try:
                tree, skipped, redacted = self._capture(work, prefixes, progress, used, scrub)
            except _Pruned:
                if seed == "empty":
                    raise StoreWriteError(self.location.git_dir, "cannot write the snapshot: an object of "
                                          "the user's index is missing (git fsck tells more)") from None
                seed = "empty" if seed == "user" else "user"
                progress = None
                continue
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(work)  # (a refused snapshot leaves no index naming what it read)
                # nor a signature saying its look at the user's index was applied: the next one
                # compares with the last published (tracked-but-ignored files added then)
                self._tracked_sig = None
                raise
            finally:
                with contextlib.suppress(OSError):
                    os.unlink(work + ".lock")  # left only by a git that was killed
            self._publish(work, epoch)
            break
        if prefixes is None:
            self._journal(repo, tree, self._last_tree() or head_tree(repo))
            self._save_last_tree(tree)
        else:
            self._journal(repo, tree, head_tree(repo))
        return Snapshot(tree, tuple(sorted(skipped)), None if prefixes is None else tuple(prefixes),
                        redacted=tuple(redacted))

    def _working_copy(self, seed: str) -> tuple[str, str]:
        """A new index file for one snapshot, beside the private index, and what it was made from:
        a copy of the private index (``seed`` ``"private"``, when it is a regular file), else of the
        user's index (``"user"``: its regular entries at stage 0, see :func:`scan.read_entries`),
        else empty (``"empty"``; a split index is not read). The copy keeps the modification time
        of the index it copies, so git's racy-clean check still applies to it."""
        work = f"{self.index_path}.{os.getpid()}.{threading.get_ident()}.work"
        if seed == "private":
            if safeopen.remove_special(self.index_path):
                seed = "user"  # a FIFO (or device, socket) there: derived data, made again
            else:
                try:
                    with safeopen.open_file(self.index_path, "rb") as src:
                        st = os.fstat(src.fileno())
                        with safeopen.open_file(work, "wb", replace_special=True) as dst:
                            shutil.copyfileobj(src, dst, 1 << 20)
                    os.utime(work, ns=(st.st_atime_ns, st.st_mtime_ns))
                    return work, seed
                except OSError:
                    seed = "user"
        entries: dict[bytes, bytes] = {}
        mtime: int | None = None
        if seed == "user":
            user = os.path.join(self.location.git_dir, "index")
            found = scan.read_entries(user)
            try:
                mtime = os.stat(user).st_mtime_ns
            except OSError:
                found = None
            if found is None:
                seed = "empty"
            else:
                entries = found
        try:
            scan.write_index(work, entries, mtime)
        except OSError as exc:
            raise StoreWriteError(work, f"cannot write the private index: {exc}") from exc
        return work, seed

    def _publish(self, work: str, epoch: str) -> None:
        """Make the working copy the private index (renamed over it; best effort: a cache), then
        save ``epoch`` and the user files' signature it was made with."""
        try:
            os.replace(work, self.index_path)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(work)
            self._tracked_sig = None
            with contextlib.suppress(OSError):
                os.unlink(self.index_path + ".user")
            return
        self._save_signature()
        self._save_epoch(epoch)

    def _capture(self, work: str, prefixes: list[str] | None, progress: Callable[[int], None] | None,
                 seed: str, scrub: Scrub | None = None) -> tuple[str, list[str], list[str]]:
        """``git add -A`` into the index ``work``, then what git leaves to gitstate (nested
        repositories out, tracked-but-ignored files in, newly ignored ones out, recently modified
        files read again), then the tree; ``(tree, nested repositories skipped, paths redacted)``.
        With ``scrub`` git writes into a :class:`Quarantine` and :meth:`_admit` decides what of it
        is stored."""
        if scrub is None:
            return (*self._add_everything(work, prefixes, progress, seed), [])
        with Quarantine(objects_dir(self._repo())) as quarantine:
            self._local.quarantine, self._local.scrub = quarantine, scrub
            try:
                skipped = self._add_everything(work, prefixes, progress, seed)[1]
                redacted = self._admit(work, quarantine, scrub)
            finally:
                self._local.quarantine = self._local.scrub = None
        return self._write_tree(work, prefixes), skipped, redacted

    def _add_everything(self, work: str, prefixes: list[str] | None, progress: Callable[[int], None] | None,
                        seed: str) -> tuple[str, list[str]]:
        """:meth:`_capture` up to the tree (``""`` while a quarantine is open: the tree is written
        once :meth:`_admit` is done)."""
        since = time.time_ns()
        added, removed, skipped = self._add_all(work, prefixes or [])
        if progress is not None:
            for _ in added:
                progress(1)
        ignore_changed = any(p.rpartition("/")[2] == ".gitignore" for p in (*added, *removed))
        if seed == "user":  # the user's tracked files came with the seed
            self._tracked_sig = self._signature()
            news = list[str]()
        else:
            applied, news = self._add_tracked(work, cached=seed == "private")
            if ignore_changed and not applied:
                news = self._apply_rules(work)
        self._settle(work, [*added, *news], since)
        if getattr(self._local, "quarantine", None) is not None:
            return "", skipped
        return self._write_tree(work, prefixes), skipped

    def _admit(self, work: str, quarantine: Quarantine, scrub: Scrub) -> list[str]:
        """Move what git wrote into ``quarantine`` into the repository: each new blob of at most
        :data:`SCRUB_MAX` bytes that the index ``work`` names goes through ``scrub`` first, and
        where that changes it, the blob ``scrub`` returned is written instead and ``work`` names it
        with blank stat data (the next snapshot reads the file again). Blobs the index does not
        name (replaced by a second read) are dropped. Returns the paths redacted."""
        quarantine.move_packs()  # big files, streamed by git: never read by the policy
        ids = list(quarantine.loose())
        if not ids:
            return []
        try:
            if not any(scrub.finds(data) for oid in ids if (data := self._scrubbed_blob(quarantine, oid, work))):
                for oid in ids:  # nothing to find: no index to read for the paths
                    quarantine.move(oid)
                return []
        except (pygit2.GitError, OSError) as exc:
            raise StoreWriteError(self.location.git_dir, f"cannot write the snapshot: {exc}") from exc
        entries = scan.read_entries(work)
        if entries is None:
            raise StoreWriteError(work, "cannot write the snapshot: its index cannot be read")
        wanted = {bytes.fromhex(oid) for oid in ids}
        names: dict[bytes, list[bytes]] = {}
        for name, entry in entries.items():
            if entry[40:60] in wanted:
                names.setdefault(entry[40:60], []).append(name)
        odb = self._repo().odb
        renamed: dict[bytes, bytes] = {}
        try:
            for oid in ids:
                raw = bytes.fromhex(oid)
                if raw not in names:
                    continue
                data = self._scrubbed_blob(quarantine, oid, work)
                if data is not None:
                    new = data
                    for name in sorted(names[raw]):  # each path: a refusal or a warning names it
                        new = scrub(data, os.fsdecode(name))
                    if new is not data:
                        renamed[raw] = _odb_write(odb, ObjectType.BLOB, new).raw
                        continue
                quarantine.move(oid)
        except (pygit2.GitError, OSError) as exc:
            raise StoreWriteError(self.location.git_dir, f"cannot write the snapshot: {exc}") from exc
        if not renamed:
            return []
        redacted = []
        for name, entry in entries.items():
            new_id = renamed.get(entry[40:60])
            if new_id is not None:
                entries[name] = _stale_entry(entry, new_id)
                redacted.append(os.fsdecode(name))
        try:
            scan.write_index(work, entries, os.stat(work).st_mtime_ns)
        except OSError as exc:
            raise StoreWriteError(work, f"cannot write the snapshot's index: {exc}") from exc
        return sorted(redacted)

    @staticmethod
    def _scrubbed_blob(quarantine: Quarantine, oid: str, work: str) -> bytes | None:
        """The bytes of a quarantined object that a :class:`Scrub` reads: a blob of at most
        :data:`SCRUB_MAX` bytes (``None`` for another object)."""
        head = quarantine.header(oid)
        if head is None:
            raise StoreWriteError(work, f"cannot write the snapshot: git's object {oid} cannot be read")
        return quarantine.read(oid) if head[0] == ObjectType.BLOB and head[1] <= SCRUB_MAX else None

    def _add_all(self, work: str, pathspecs: list[str]) -> tuple[list[str], list[str], list[str]]:
        """``git add -A --verbose --ignore-errors`` into ``work``: the paths git added and removed,
        and the nested repositories, taken out again. A file git could not read is read again (a
        file rewritten meanwhile), then :class:`StoreWriteError`; one that is no longer a file or
        link (a FIFO in its place) leaves the index."""
        for delay in (*scan.SETTLE_DELAYS, None):
            # not repeated by _git on a vanished object folder: with --ignore-errors git writes the
            # index with what it could add and lists the file it could not as unreadable (added
            # again below), where a second run would print only what was left to add
            proc = self._git(work, ["add", "-A", "--verbose", "--ignore-errors", "--", *pathspecs], repeat=False)
            if proc.returncode in (0, 1) or not any(m in proc.stderr for m in _RACES):
                break
            # a file changed while git hashed and wrote it, or went away between git listing and
            # reading it (git stops there): again, after a pause
            if delay is None:
                raise FileChangingError(self.workdir)
            time.sleep(delay)
        if proc.returncode not in (0, 1):
            raise StoreWriteError(self.workdir, f"cannot snapshot the worktree: {last_line(proc.stderr)}")
        added, removed = [], []
        nested = [os.fsdecode(m) for m in _NO_COMMIT.findall(proc.stderr)]
        for kind, raw in _VERBOSE.findall(proc.stdout):
            name = os.fsdecode(raw)
            if kind == b"remove":
                removed.append(name)
            elif name.endswith("/"):
                nested.append(name.rstrip("/"))  # added as a gitlink
            else:
                added.append(name)
        if nested:
            self._git_paths(work, ["update-index", "--force-remove"], nested)
        failed = [os.fsdecode(m) for m in (*_NOT_A_FILE.findall(proc.stderr), *_UNREADABLE.findall(proc.stderr))]
        if proc.returncode == 1 and not failed and not _NO_COMMIT.search(proc.stderr):
            raise StoreWriteError(self.workdir, f"cannot snapshot the worktree: {last_line(proc.stderr)}")
        for name in dict.fromkeys(failed):
            if self._add_again(work, name):
                added.append(name)
        return added, removed, nested

    def _add_again(self, work: str, name: str) -> bool:
        """Add ``name``, which ``git add -A`` could not, to ``work``: by git again after pauses (a
        file another program rewrites while git reads it), else from gitstate's own read
        (:func:`scan.read_settled`: a log being written is stored as read); gone or no longer a file
        or link, it leaves the index (``False``). :class:`StoreWriteError` when it cannot be read."""
        full = os.path.join(self.workdir, name)

        def again() -> None:
            if not _file_or_link(full):
                return
            proc = self._git(work, ["add", "--", name])
            if proc.returncode != 0:
                raise StoreWriteError(full, f"cannot snapshot it: {last_line(proc.stderr)}")

        try:
            _retrying(again)
        except StoreWriteError:
            if not self._add_read(work, name):
                raise
        if _file_or_link(full):
            return True
        self._git_paths(work, ["update-index", "--force-remove"], [name])
        return False

    def _add_read(self, work: str, name: str) -> bool:
        """Add the regular file ``name`` to ``work`` from gitstate's own read of it (no filter
        applies to it); ``False`` when gitstate leaves it to git (a filter, a big file, not a
        regular file). :class:`FileChangingError` when it keeps changing."""
        repo = self._repo()
        try:
            filters = repo.load_filter_list(name, pygit2.enums.FilterMode.TO_ODB)
        except (pygit2.GitError, ValueError):
            return False
        if filters is not None and len(filters):
            return False
        raw = os.fsencode(os.path.join(self.workdir, name))
        try:
            with scan.open_regular(raw) as opened:
                if opened is None or opened[1].st_size > BIG_BLOB:
                    return False
                data, st = scan.read_settled(opened[0], raw, opened[1])
            scrub: Scrub | None = getattr(self._local, "scrub", None)
            if scrub is not None and len(data) <= SCRUB_MAX and pygit2.hash(data) not in repo.odb:
                data = scrub(data, name)  # (its stat data are then stale: the next snapshot reads it again)
            oid = _odb_write(repo.odb, ObjectType.BLOB, data)
        except (pygit2.GitError, OSError):
            return False
        info = f"{scan.git_mode(st.st_mode):o},{oid},{name}"
        return self._git(work, ["update-index", "--add", "--cacheinfo", info]).returncode == 0

    def _write_tree(self, work: str, prefixes: list[str] | None) -> str:
        """The tree of the index ``work`` (or of its entries under ``prefixes``): ``git write-tree``,
        or for some paths built here from the index's entries. :class:`_Pruned` when an id of the
        index is missing."""
        if prefixes is None:
            proc = self._git(work, ["write-tree"])
            if proc.returncode == 0:
                return proc.stdout.decode("ascii").strip()
            if b"invalid object" in proc.stderr:
                raise _Pruned
            raise StoreWriteError(self.location.git_dir, f"cannot write the snapshot: {last_line(proc.stderr)}")
        entries = scan.read_entries(work)
        if entries is None:
            raise StoreWriteError(work, "cannot write the snapshot: the private index cannot be read")
        odb = self._repo().odb
        subset: dict[bytes, tuple[int, bytes]] = {}
        for raw, entry in entries.items():
            if matches(os.fsdecode(raw), prefixes):
                oid = entry[40:60]
                if pygit2.Oid(raw=oid) not in odb:
                    raise _Pruned
                subset[raw] = (scan.entry_mode(entry), oid)
        pending: list[tuple[int, bytes]] = []
        tree = self._new_trees(subset, odb, pending)
        try:
            for kind, body in pending:
                _odb_write(odb, kind, body)
        except (pygit2.GitError, OSError) as exc:
            raise StoreWriteError(self.location.git_dir, f"cannot write the snapshot: {exc}") from exc
        return tree

    def _index_ids(self, work: str, names: Sequence[str]) -> dict[str, bytes]:
        """The blob ids ``work`` holds for ``names`` (those it holds, at stage 0)."""
        proc = self._git(work, ["ls-files", "-z", "-s", "--", *names])
        out = {}
        if proc.returncode == 0:
            for record in proc.stdout.split(b"\0"):
                info, _, raw = record.partition(b"\t")
                fields = info.split()
                if raw and len(fields) == 3 and fields[2] == b"0":
                    out[os.fsdecode(raw)] = bytes.fromhex(fields[1].decode("ascii"))
        return out

    def _settle(self, work: str, names: Iterable[str], since_ns: int) -> None:
        """Make sure of what git read for ``names`` (paths it added to ``work`` after ``since_ns``,
        ``time.time_ns()``). git checks only that a file's size did not change while it read it: a
        file rewritten in place meanwhile, or under a single ``write`` that began before, could be
        stored as a mix of two versions. A regular file modified since :data:`scan.RECENT_NS`
        before ``since_ns`` is read again once no write to it runs (:func:`scan.settled_blob_id`)
        and kept if those bytes hash to the id git stored, or if it only grew since (a log); else
        git adds it again and it is kept when that read agrees with the one before (a wait for
        writers lies between any two), after the pauses of :data:`scan.SETTLE_DELAYS`, then
        :class:`FileChangingError`. Files not modified recently cost one ``lstat``."""
        recent = []
        for name in dict.fromkeys(names):
            try:
                st = os.lstat(os.path.join(self.workdir, name))
            except OSError:
                continue
            if S_ISREG(st.st_mode) and scan.recently_modified(st, since_ns):
                recent.append(name)
        if not recent:
            return
        ids = self._index_ids(work, recent)
        for name in recent:
            before = ids.get(name)
            if before is None:
                continue
            full = os.path.join(self.workdir, name)
            for delay in (*scan.SETTLE_DELAYS, None):
                if scan.settled_blob_id(full) == before:
                    break  # read again after any write running then: the same bytes
                if self._only_grew(full, before):
                    break  # a log appended to since git read it: what it stored is a version the file had
                proc = self._git(work, ["add", "--", name])  # read again by git (filters apply), after that wait
                if proc.returncode != 0:
                    if not os.path.isfile(full) or os.path.islink(full):  # gone meanwhile, or no longer a file
                        self._git_paths(work, ["update-index", "--force-remove"], [name])
                        break
                    raise StoreWriteError(full, "cannot snapshot it: it could not be read again")
                again = self._index_ids(work, [name]).get(name)
                if again is None or again == before:
                    break
                if delay is None:
                    raise FileChangingError(full)
                time.sleep(delay)
                before = again

    def _only_grew(self, full: str, oid: bytes) -> bool:
        """Whether the file at ``full`` begins with the bytes of blob ``oid`` and is longer (it only
        grew by appending since they were read; the stat data git recorded then name the shorter
        file, so the next snapshot reads it again). A filtered file (``core.autocrlf``) never
        matches: its blob's bytes are not its bytes on disk."""
        try:
            data = self._repo().odb.read(pygit2.Oid(raw=oid))[1]
        except (KeyError, ValueError, pygit2.GitError):
            quarantine: Quarantine | None = getattr(self._local, "quarantine", None)
            found = quarantine.read(oid.hex()) if quarantine is not None else None
            if found is None:
                return False
            data = found
        return scan.starts_with(full, data)

    def record(self, written: dict[str, tuple[str, int, os.stat_result]], removed: Iterable[str]) -> None:
        """Tell the stat cache what a restore just wrote (path → (blob id, mode, ``lstat`` after the
        write)) and removed, as git's checkout updates its index: the next snapshot then costs one
        ``lstat`` for those files instead of hashing them again. Best effort (no private index yet,
        or one that cannot be read or written: the next snapshot hashes them then)."""
        entries = self._read_private()
        if not entries:
            return
        for path in removed:
            entries.pop(os.fsencode(path), None)
        for path, (oid, mode, st) in written.items():
            entries[os.fsencode(path)] = scan.entry_bytes(st, bytes.fromhex(oid), mode)
        with contextlib.suppress(OSError):
            self._write_private(entries)

    def _read_private(self) -> dict[bytes, bytes] | None:
        """The private index's entries (:func:`scan.read_entries`), from memory when the file is
        still the one this process last wrote; the caller may change the dict it gets."""
        memo = self._index_memo
        if memo is not None:
            try:
                if scan.file_identity(os.lstat(self.index_path)) == memo[0]:
                    return dict(memo[1])
            except OSError:
                pass
            self._index_memo = None
        return scan.read_entries(self.index_path)

    def _write_private(self, entries: dict[bytes, bytes]) -> None:
        """Replace the private index with ``entries`` (:func:`scan.write_index`; raises
        :class:`OSError`), remembering them (``entries`` must not change afterwards)."""
        self._index_memo = None
        self._index_memo = (scan.write_index(self.index_path, entries), entries)

    # -- the user's index and ignore rules -------------------------------------------------------

    def _signature(self) -> tuple[Any, ...]:
        """``(mtime_ns, size, inode)`` (``None`` when absent) of the user's index, ``info/exclude``
        and the global excludes file (``core.excludesFile``, else git's default), in that order."""
        loc = self.location
        return (_file_state(os.path.join(loc.git_dir, "index")),
                _file_state(os.path.join(loc.common_dir, "info", "exclude")),
                _file_state(self._excludes_file(self._repo())))

    def _excludes_file(self, repo: pygit2.Repository) -> str:
        """The global ignore file git reads: ``core.excludesFile`` (``~`` expanded, a relative path
        taken from the worktree's top, where git runs), else ``$XDG_CONFIG_HOME/git/ignore`` or
        ``~/.config/git/ignore``."""
        try:
            value = repo.config["core.excludesFile"]
        except (KeyError, pygit2.GitError, ValueError):
            value = None
        if value:
            return os.path.join(self.workdir, os.path.expanduser(str(value)))
        base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
        return os.path.join(base, "git", "ignore")

    def _user_paths(self) -> frozenset[str]:
        """The paths of the user's index, read again only when that file changed (git replaces it
        whole, so its stat data change): a snapshot asks for them more than once."""
        path = os.path.join(self.location.git_dir, "index")
        key = _file_state(path)
        cached = self._user_cache
        if key is not None and cached is not None and cached[0] == key:
            return cached[1]
        users = frozenset(read_index_paths(path, self.location.git_dir, self.workdir))
        self._user_cache = (key, users)
        return users

    def _add_tracked(self, work: str, cached: bool) -> tuple[bool, list[str]]:
        """Tracked-but-ignored files are captured as git captures them, and files an ignore rule
        matches that the user does not track are not. Whenever the user's index or an excludes file
        changed since the last look (or a ``.gitignore`` did: ``rules_changed`` of the caller), git
        lists the files an ignore rule matches in the user's index and in ``work``
        (``ls-files -c -i --exclude-standard``): those only the user's holds are added to ``work``
        (``update-index --add``: ignore rules do not apply), those only ``work`` holds leave it.
        Returns whether that was done, and the paths added.

        The last look survives the process (``index-<wt>.user``): a fresh process whose user index,
        ``info/exclude`` and global excludes file did not change since looks at nothing."""
        rules_changed, todo, sig = self._tracked_news(cached, paths=False)
        self._tracked_sig = sig
        if not (todo or rules_changed):
            return False, []
        return True, self._apply_rules(work)

    def _apply_rules(self, work: str) -> list[str]:
        """See :meth:`_add_tracked`; the paths added to ``work``."""
        users = self._ignored_in(os.path.join(self.location.git_dir, "index"))
        ours = self._ignored_in(work)
        dropped = sorted(ours - users)
        if dropped:
            self._git_paths(work, ["update-index", "--force-remove"], dropped)
        missing = [path for path in sorted(users - ours) if _in_real_dirs(self.workdir, path)
                   and _file_or_link(os.path.join(self.workdir, path))]
        if not missing:
            return []
        args = ["update-index", "--add", "--ignore-missing"]
        if self._git_paths(work, args, missing).returncode != 0:
            # git stops at the first path it cannot store and saves none: each path on its own,
            # so the one that cannot be stored is named instead of all of them left out
            for path in missing:
                one = self._git_paths(work, args, [path])
                if one.returncode != 0:
                    raise StoreWriteError(os.path.join(self.workdir, path), f"cannot snapshot it: {last_line(one.stderr)}")
        have = self._index_ids(work, missing)
        return [p for p in missing if p in have]  # one gone meanwhile is left out, as git would

    def _ignored_in(self, index: str) -> set[str]:
        """The paths of the index file ``index`` that an ignore rule matches (read only)."""
        proc = self._git(index, ["ls-files", "-z", "-c", "-i", "--exclude-standard"])
        if proc.returncode != 0:
            if not os.path.lexists(index):
                return set()
            raise StoreWriteError(self.workdir, f"cannot snapshot the worktree: {last_line(proc.stderr)}")
        return {os.fsdecode(r) for r in proc.stdout.split(b"\0") if r}

    def _tracked_news(self, cached: bool, paths: bool = True) -> tuple[bool, frozenset[str], tuple[Any, ...]]:
        """Whether ignore rules must be applied again to the private index, the paths of the
        user's index to make sure of in it (none while the user's index is unchanged since the last
        look, else all of them), and this look's signature. Rules apply again when
        ``info/exclude`` or the global excludes file changed, or when the user's index changed: a
        path may have left it (``git rm --cached`` of a tracked-but-ignored file: ignored from
        then on). ``.gitignore`` files are git's and the scan's to notice. Without ``paths`` the
        user's index is not read: a non-empty set (``{""}``) only says that it changed."""
        sig = self._signature()
        old = self._tracked_sig
        if old is None and cached:
            old = self._saved_signature()
        rules_changed = old is not None and sig[1:] != old[1:]
        if old is not None and sig[0] == old[0] and cached:
            return rules_changed, frozenset(), sig
        return rules_changed or cached, self._user_paths() if paths else frozenset({""}), sig

    def _saved_signature(self) -> tuple[Any, ...] | None:
        try:
            with safeopen.open_file(self.index_path + ".user", encoding="ascii") as fh:
                parts = fh.read().split()
        except OSError:
            return None
        try:
            values = [None if p == "-" else tuple(int(x) for x in p.split(",")) for p in parts]
        except ValueError:
            return None
        return tuple(values) if len(values) == 3 else None

    def _save_signature(self) -> None:
        sig = self._tracked_sig
        if sig is None or sig == self._saved_signature():
            return
        self._write_beside(".user", " ".join("-" if v is None else ",".join(str(x) for x in v) for v in sig))

    def _ignored(self, repo: pygit2.Repository, names: list[str]) -> list[str]:
        """The ``names`` an ignore rule matches now that the user's git does not track."""
        tracked = self._user_paths()
        return [name for name in names if name not in tracked and _is_ignored(repo, name)]

    # -- the fast path -------------------------------------------------------------------------

    def survey(self, announce: Callable[[int], None] | None = None,
               progress: Callable[[int], None] | None = None,
               prefixes: Sequence[str] | None = None) -> Survey | None:
        """The whole worktree as :meth:`snapshot` would capture it now, found by the same scan
        without writing anything: no object, not the stat cache (what a dry run plans with, so that
        it works on a read-only repository and leaves ``.git`` as it was). Changed files are read
        and hashed, not stored; files the user's git tracks although an ignore rule matches them
        are captured, and files that became ignored are left out, as :meth:`snapshot` does. The
        stat cache is only a cache here: ids it holds are the hashes of the unchanged files even
        when a ``git gc`` has pruned their objects since. ``None`` where only a real snapshot can
        tell: no stat cache yet, or filters or attribute files (see :func:`scan.capture`).
        ``prefixes``: hash only changed files under these paths (see :func:`matches`); the survey
        then describes only that part of the worktree."""
        repo = self._repo(check_rules=True)

        def wanted(name: str) -> bool:
            return prefixes is None or matches(name, prefixes)

        cap = scan.capture(repo, self.index_path, self.workdir, self.location.common_dir, BIG_BLOB,
                           announce=announce, progress=progress, store=_dropped, batch=0,
                           scope=None if prefixes is None else lambda raw: wanted(os.fsdecode(raw)))
        if cap is None:
            return None
        entries = {os.fsdecode(path): (raw.hex(), mode) for path, (mode, raw) in cap.entries.items()}
        for name in filter(wanted, map(os.fsdecode, cap.big)):
            found = self._hashed(name)
            if found is not None:
                entries[name] = found
        # what _add_tracked and _drop_ignored do to the private index, in memory
        rules_changed, todo, _ = self._tracked_news(True)
        news = todo - set(entries)
        for name in sorted(filter(wanted, news)):
            found = self._hashed(name)
            if found is not None:
                entries[name] = found
        if rules_changed or cap.ignore_changed:
            for name in self._ignored(repo, list(entries)):
                del entries[name]
        settled = (prefixes is None and not (cap.stats or cap.big or cap.removed or news or rules_changed
                                             or cap.ignore_changed))
        return Survey(entries, tuple(cap.skipped), self._stored_tree(repo, cap.entries) if settled else None)

    def _stored_tree(self, repo: pygit2.Repository, entries: dict[bytes, tuple[int, bytes]]) -> str | None:
        """The id of the tree of ``entries`` (a capture found nothing to hash) where a fast snapshot
        would return it without writing: the tree is stored, no ``git gc`` ran since the stat
        cache was checked (:func:`gc_epoch`). ``None`` otherwise."""
        if gc_epoch(objects_dir(repo)) != self._saved_epoch():
            return None
        root, _ = scan.build_trees(entries)
        return root.hex() if root.hex() in repo.odb else None

    def settled(self, survey: Survey) -> Snapshot | None:
        """The snapshot of the whole worktree from a :meth:`survey` that found it exactly as the
        stat cache holds it (:attr:`Survey.tree`), without scanning it again: what a fast
        :meth:`snapshot` would return then, having nothing to hash or write. ``None`` for any other
        survey (take a :meth:`snapshot`). A restore that surveyed the worktree to check it first
        uses this instead of a second scan."""
        if survey.tree is None:
            return None
        if self._last_tree() != survey.tree:
            self._save_last_tree(survey.tree)
        return Snapshot(survey.tree, survey.skipped, None, scanned=True)

    def _hashed(self, name: str) -> tuple[str, int] | None:
        """``(blob id, mode)`` of a worktree file or link as git would add it with no filter
        (a file is hashed as a stream); ``None`` for anything else, or gone meanwhile."""
        full = os.path.join(self.workdir, name)
        try:
            st = os.lstat(full)
            if S_ISLNK(st.st_mode):
                return str(pygit2.hash(os.readlink(os.fsencode(full)))), scan.git_mode(st.st_mode)
            if S_ISREG(st.st_mode):
                return str(pygit2.hashfile(full)), scan.git_mode(st.st_mode)
        except OSError:
            pass
        return None

    def _fast_snapshot(self, repo: pygit2.Repository, announce: Callable[[int], None] | None,
                       progress: Callable[[int], None] | None, scrub: Scrub | None = None) -> Snapshot | None:
        """:func:`scan.capture`, with the new blobs and trees stored as one pack and the stat data
        of what it hashed written into the private index; ``None`` where the scan does not apply,
        or finds something it leaves to git (a big file): then :meth:`snapshot` goes on through git. Paths the user's index gained
        that an ignore rule matches are read here; files that became ignored leave."""
        assert self._store_objects is not None
        epoch = gc_epoch(objects_dir(repo))
        if epoch != self._saved_epoch():
            return None  # a `git gc` may have pruned ids the stat cache trusts
        cap = scan.capture(repo, self.index_path, self.workdir, self.location.common_dir, BIG_BLOB,
                           announce=announce, progress=progress, store=self._store_objects, batch=PACK_BATCH,
                           scrub=scrub, scrub_max=SCRUB_MAX)
        if cap is None or cap.big:
            return None
        rules_changed, todo, sig = self._tracked_news(True)
        entries = cap.entries
        for path in sorted(todo):  # tracked by the user although ignored: the scan left them out
            raw = os.fsencode(path)
            if raw not in entries and _in_real_dirs(self.workdir, path) \
                    and _file_or_link(os.path.join(self.workdir, path)) and not self._read_into(raw, cap, scrub):
                return None
        removed = list(cap.removed)
        if rules_changed or cap.ignore_changed:
            for name in self._ignored(repo, [os.fsdecode(p) for p in entries]):
                raw = os.fsencode(name)
                del entries[raw]
                cap.stats.pop(raw, None)
                removed.append(raw)
        pending: list[tuple[int, bytes]] = list(cap.objects)
        tree = self._new_trees(entries, repo.odb, pending)
        self._store_in_batches(pending)
        if cap.stats or removed:
            index = self._read_private()
            if index is not None:
                for raw in removed:
                    index.pop(raw, None)
                for raw, st in cap.stats.items():
                    mode, oid = entries[raw]
                    index[raw] = scan.entry_bytes(st, oid, mode)
                    if raw in cap.redacted:  # the blob is not the file's bytes: read it again next time
                        index[raw] = _stale_entry(index[raw], oid)
                try:
                    self._write_private(index)
                except OSError:
                    pass  # the tree is right, only the stat cache is not saved
        self._tracked_sig = sig
        self._save_signature()
        self._save_last_tree(tree)
        return Snapshot(tree, tuple(cap.skipped), None, scanned=True,
                        redacted=tuple(sorted(os.fsdecode(p) for p in cap.redacted if p in entries)))

    def _read_into(self, raw: bytes, cap: scan.Capture, scrub: Scrub | None = None) -> bool:
        """Read the worktree file or link ``raw`` into ``cap`` (entry, stat data, new blob);
        ``False`` for what the scan leaves to git (a big file, not a file any more)."""
        full = os.path.join(os.fsencode(self.workdir), raw)
        try:
            st = os.lstat(full)
            if S_ISLNK(st.st_mode):
                data = os.readlink(full)
            else:
                with scan.open_regular(full) as opened:
                    if opened is None or opened[1].st_size > BIG_BLOB:
                        return False
                    data, st = scan.read_settled(opened[0], full, opened[1])
        except OSError:
            return False
        oid = pygit2.hash(data).raw
        if scrub is not None and len(data) <= SCRUB_MAX and pygit2.Oid(raw=oid) not in self._repo().odb:
            new = scrub(data, os.fsdecode(raw))
            if new is not data:
                data, oid = new, pygit2.hash(new).raw
                cap.redacted.add(raw)
        cap.objects.append((int(ObjectType.BLOB), data))
        cap.entries[raw] = (scan.git_mode(st.st_mode), oid)
        cap.stats[raw] = st
        return True

    @staticmethod
    def _new_trees(entries: dict[bytes, tuple[int, bytes]], odb: pygit2.Odb, out: list[tuple[int, bytes]]) -> str:
        """The root tree of ``entries`` (hex id); the trees not stored yet are appended to ``out``."""
        root, trees = scan.build_trees(entries)
        if root.hex() not in odb:  # else every tree below it is stored too (git's write-tree trusts the same)
            out.extend((int(ObjectType.TREE), body) for oid, body in trees.items() if oid.hex() not in odb)
        return root.hex()

    def _store_in_batches(self, objects: list[tuple[int, bytes]]) -> None:
        """Hand the objects to the store, at most :data:`PACK_BATCH` bytes of bodies per pack."""
        assert self._store_objects is not None
        batch: list[tuple[int, bytes]] = []
        size = 0
        for kind, body in objects:
            batch.append((kind, body))
            size += len(body)
            if size >= PACK_BATCH:
                self._store_objects(batch)
                batch, size = [], 0
        if batch:
            self._store_objects(batch)

    # -- housekeeping --------------------------------------------------------------------------

    def _read_beside(self, suffix: str) -> str | None:
        """The text of ``<private index><suffix>`` (stripped), or None when it cannot be read."""
        try:
            with safeopen.open_file(self.index_path + suffix, encoding="ascii") as fh:
                return fh.read().strip()
        except OSError:
            return None

    def _write_beside(self, suffix: str, text: str) -> None:
        """Replace ``<private index><suffix>`` with ``text`` (atomically; best effort: a cache)."""
        tmp = f"{self.index_path}{suffix}.{os.getpid()}.{threading.get_ident()}"
        try:
            with safeopen.open_file(tmp, "w", encoding="ascii", replace_special=True) as fh:
                fh.write(text + "\n")
            os.replace(tmp, self.index_path + suffix)
        except OSError:
            pass

    def _last_tree(self) -> str | None:
        text = self._read_beside(".tree")
        return text if text is not None and len(text) == 40 else None

    def _saved_epoch(self) -> str | None:
        return self._read_beside(".epoch")

    def _save_epoch(self, epoch: str) -> None:
        """Record the :func:`gc_epoch` the private index was checked against."""
        if self._saved_epoch() != epoch:
            self._write_beside(".epoch", epoch)

    def _save_last_tree(self, tree: str) -> None:
        self._write_beside(".tree", tree)

    def _journal(self, repo: pygit2.Repository, tree: str, old: str | None) -> None:
        """Journal the loose objects of ``tree`` not in ``old`` (unchanged subtrees share ids:
        skipped); blobs above :data:`BIG_BLOB` are in a pack git wrote (``core.bigFileThreshold``)."""
        found: list[str] = []
        _new_objects(repo, tree, old, self.location.common_dir, found)
        if found and self._on_new_objects is not None:
            self._on_new_objects(found)


T = TypeVar("T")


def forget_private_indexes(common_dir: str, oids: Iterable[str]) -> list[str]:
    """Delete the private indexes (``agentos/index-<worktree>``) that name one of ``oids``, so
    that they no longer keep those objects reachable (``scan --redact --now``); each one's next
    snapshot starts again from the user's index. Returns the files deleted."""
    wanted = {bytes.fromhex(o) for o in oids}
    agentos = os.path.join(common_dir, "agentos")
    try:
        names = [n for n in os.listdir(agentos) if n.startswith("index-") and "." not in n]
    except OSError:
        return []
    gone = []
    for name in names:
        path = os.path.join(agentos, name)
        entries = scan.read_entries(path)
        if entries is None or any(entry[40:60] in wanted for entry in entries.values()):
            with contextlib.suppress(OSError):
                os.unlink(path)
                gone.append(path)
    return gone


def _stale_entry(entry: bytes, oid: bytes) -> bytes:
    """An index entry (:func:`scan.read_entries`) naming ``oid`` with blank stat data (its mode
    kept): git and :func:`scan.capture` never take the file as unchanged, so they read it again."""
    return bytes(24) + entry[24:28] + bytes(12) + oid


def _take_lock(path: str) -> lockfile.FileLock | None:
    """:func:`lockfile.acquire`, a failure to make the lock file (a read-only repository, a full
    disk) being :class:`StoreWriteError`."""
    try:
        return lockfile.acquire(path)
    except OSError as exc:
        raise StoreWriteError(path, str(exc)) from exc


def _odb_write(odb: pygit2.Odb, kind: int, body: bytes) -> pygit2.Oid:
    """``odb.write(kind, body)``, again after the pauses of :data:`_VANISHED_DELAYS` when a file or
    folder was missing: libgit2 writes a temporary file in ``objects/``, makes the fan-out folder,
    then renames the file into it, and fails (an :class:`OSError`) when a concurrent ``git prune``
    removed the folder in between. Any other failure, and the last, is raised."""
    for delay in _VANISHED_DELAYS:
        try:
            return odb.write(kind, body)
        except OSError as exc:  # (pygit2 raises libgit2's OS errors as OSError)
            if not (isinstance(exc, FileNotFoundError) or "No such file or directory" in str(exc)):
                raise
            time.sleep(delay)
    return odb.write(kind, body)


def _retrying(call: Callable[[], T]) -> T:
    """``call()``, again after a :class:`StoreWriteError`, a few times with growing pauses (a file
    another program rewrites while git reads it fails the read; the next try sees it settled);
    the last failure is raised."""
    for delay in (0.02, 0.1, 0.3):
        try:
            return call()
        except StoreWriteError:
            time.sleep(delay)
    return call()


def _is_ignored(repo: pygit2.Repository, name: str) -> bool:
    """Whether an ignore rule matches ``name``; a name that is not UTF-8 (pygit2 cannot pass it to
    libgit2) is kept."""
    try:
        return bool(repo.path_is_ignored(name))
    except UnicodeError:
        return False


def _in_real_dirs(workdir: str, path: str) -> bool:
    """Whether every folder above ``path`` is a directory, not a link to one (git records a
    link to a directory as the link: nothing below it is in the worktree as git sees it)."""
    folder = path.rpartition("/")[0]
    while folder:
        try:
            if not S_ISDIR(os.lstat(os.path.join(workdir, folder)).st_mode):
                return False
        except OSError:
            return False
        folder = folder.rpartition("/")[0]
    return True


def read_index_paths(path: str, git_dir: str | None = None, workdir: str | None = None) -> set[str]:
    """Paths of the regular entries of a git index file (versions 2–4), read without libgit2 and
    without writing anything; gitlinks and sparse directory entries are left out. An absent or
    unreadable index gives an empty set.

    A split index (``core.splitIndex``: a ``link`` extension, most entries in a
    ``sharedindex.<id>`` file) is listed by ``git ls-files`` when ``git_dir`` and ``workdir`` are
    given: decoding the shared index and its EWAH bitmaps here would be more code than the one
    call, and neither libgit2 nor pygit2 reads split indexes."""
    try:
        with safeopen.open_file(path, "rb") as fh:
            data = fh.read()
    except OSError:
        return set()
    if len(data) < 12 or data[:4] != b"DIRC":
        return set()
    version, count = struct.unpack_from(">II", data, 4)
    if version not in (2, 3, 4):
        return set()
    out: set[str] = set()
    pos = 12
    prev = b""
    try:
        for _ in range(count):
            mode = struct.unpack_from(">I", data, pos + 24)[0]
            flags = struct.unpack_from(">H", data, pos + 60)[0]
            start = pos + 62 + (2 if version >= 3 and flags & 0x4000 else 0)
            if version == 4:
                strip, start = scan.index_varint(data, start)
                end = data.index(b"\0", start)
                name = prev[: len(prev) - strip] + data[start:end]
                pos = end + 1
            else:
                end = data.index(b"\0", start)
                name = data[start:end]
                pos += (start - pos + len(name) + 8) & ~7
            prev = name
            kind = mode & 0o170000
            if name and kind in (0o100000, 0o120000):  # a split index's replacing entries have no name
                out.add(name.decode("utf-8", "surrogateescape"))
    except (struct.error, ValueError, IndexError):
        return out
    if git_dir is not None and workdir is not None and _has_extension(data, pos, b"link"):
        return _listed_by_git(git_dir, workdir, path) or out
    return out


def _has_extension(data: bytes, pos: int, signature: bytes) -> bool:
    """Whether the index extensions from ``pos`` (up to the trailing checksum) hold ``signature``."""
    end = len(data) - 20
    while pos + 8 <= end:
        if data[pos:pos + 4] == signature:
            return True
        pos += 8 + struct.unpack_from(">I", data, pos + 4)[0]
    return False


def _listed_by_git(git_dir: str, workdir: str, index: str) -> set[str]:
    """The regular files and links of the index at ``index``, as ``git ls-files`` lists them (the
    fallback for a split index; empty when git fails)."""
    proc = run_git(git_dir, ["ls-files", "-z", "--stage"], cwd=workdir, work_tree=workdir, text=False,
                   env={"GIT_INDEX_FILE": index})
    if proc.returncode != 0:
        return set()
    listing: bytes = proc.stdout  # type: ignore[assignment]  # text=False: bytes
    out: set[str] = set()
    for record in listing.split(b"\0"):
        info, _, name = record.partition(b"\t")
        if name and info[:6] in (b"100644", b"100755", b"120000"):
            out.add(name.decode("utf-8", "surrogateescape"))
    return out


def head_tree(repo: pygit2.Repository) -> str | None:
    """The tree of the user's HEAD commit: its objects are the user's, not gitstate's to pack."""
    try:
        return str(repo.head.peel(pygit2.Tree).id)
    except (pygit2.GitError, KeyError, ValueError):
        return None


def _file_or_link(path: str) -> bool:
    """Whether ``path`` is a regular file or a symbolic link, what git adds (a FIFO, socket or
    device is not: libgit2 would open a FIFO to hash it and wait for a writer for ever)."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return False
    return S_ISREG(mode) or S_ISLNK(mode)


def _file_state(path: str) -> tuple[int, int, int] | None:
    """``(mtime_ns, size, inode)`` of the file at ``path`` (through links), ``None`` when absent:
    how the ``.user`` record tells that the user's index or an excludes file changed."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


def _stat_key(path: str) -> tuple[int, ...] | None:
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)


def _loose_size(common_dir: str, oid: str) -> int | None:
    try:
        return os.stat(os.path.join(common_dir, "objects", oid[:2], oid[2:])).st_size
    except OSError:
        return None


def _blob_size(repo: pygit2.Repository, oid: str) -> int:
    try:
        return ObjectReader(repo).header(oid)[1]
    except CorruptObjectError:
        return 0


def _tree_entries(repo: pygit2.Repository, oid: str) -> dict[str, tuple[str, int]]:
    """``name → (id, mode)`` of a tree a snapshot wrote (git wrote it: libgit2 parses it)."""
    try:
        tree = repo[oid]
    except (KeyError, ValueError, pygit2.GitError):
        return {}
    if not isinstance(tree, pygit2.Tree):
        return {}
    return {str(e.name): (str(e.id), int(e.filemode)) for e in tree}


def _new_objects(repo: pygit2.Repository, tree: str, old: str | None, common: str, out: list[str]) -> None:
    if tree == old:
        return
    if _loose_size(common, tree) is not None:
        out.append(tree)
    before = _tree_entries(repo, old) if old is not None else {}
    for name, (oid, mode) in _tree_entries(repo, tree).items():
        prev = before.get(name, ("", 0))[0] or None
        if oid == prev:
            continue
        if mode == MODE_TREE:
            _new_objects(repo, oid, prev, common, out)
        elif mode != MODE_COMMIT and _loose_size(common, oid) is not None and _blob_size(repo, oid) <= BIG_BLOB:
            out.append(oid)
