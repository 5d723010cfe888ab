"""Workspace snapshots: the worktree captured as a git tree without touching anything of the user's.

Capture goes through a *private* index, ``<common git dir>/agentos/index-<worktree key>``, never
``.git/index``: a second ``pygit2.Repository`` is opened on the same git dir with the private index
attached by libgit2's ``git_repository_set_index`` (see :mod:`gitstate.privateindex`; where that
call cannot be reached, the fallback sets ``GIT_DIR``/``GIT_WORK_TREE``/``GIT_INDEX_FILE`` in
``os.environ`` for a moment under a lock, so another thread spawning git at that instant could see
them). ``git_index_add_all`` then adds tracked
and untracked files, honours ``.gitignore``/``info/exclude``/``core.excludesFile``, applies clean
filters as ``git add`` does, streams file contents into the object store (a 1 GiB file is never held
in memory), and keeps a stat cache: an unchanged file costs one ``lstat``, not a hash.

Choices:

- Tracked files that match an ignore rule are captured (git keeps them too): the paths of the
  user's index are read (read-only) whenever that file changes and added to the private index.
- Nested repositories (an untracked directory holding its own ``.git``) and submodules are **not
  captured**: ``add_all`` would fail on them, a gitlink records only a commit id that may exist
  nowhere else, and restore refuses gitlinks from untrusted trees anyway. They are listed in
  :attr:`Snapshot.skipped`, and restore never writes into them.
- New blobs and trees (those not in the previous snapshot; for the first one, not in the user's
  HEAD tree, whose objects are the user's) are appended to gitstate's housekeeping journal so they
  get packed; blobs
  larger than :data:`BIG_BLOB` are left loose (packing would read them whole into memory; git's
  own ``gc`` streams them with ``core.bigFileThreshold``)."""

from __future__ import annotations

import contextlib
import os
import struct
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from stat import S_ISDIR, S_ISLNK, S_ISREG
from typing import Any, TypeVar

import pygit2
from pygit2.enums import FilterMode, ObjectType
from pygit2.errors import check_error
from pygit2.ffi import C, ffi
from pygit2.utils import StrArray

from gitstate.errors import (
    CorruptObjectError,
    FileChangingError,
    StoreWriteError,
    UsageError,
    WorktreeBusyError,
)
from gitstate.git import lockfile, privateindex, safeopen
from gitstate.git.command import run_git
from gitstate.git.location import Location
from gitstate.git.objects import MODE_COMMIT, MODE_TREE, gc_epoch, objects_dir
from gitstate.git.reader import ObjectReader
from gitstate.workspace import scan

BIG_BLOB = 32 * 1024 * 1024  # bytes; larger blobs are not packed by gitstate
PACK_BATCH = 64 * 1024 * 1024  # bytes of new objects a fast snapshot holds in memory per pack
_ADD_LITERAL = 2  # GIT_INDEX_ADD_DISABLE_PATHSPEC_MATCH
_ENTRY_UPTODATE = 1 << 2  # GIT_INDEX_ENTRY_UPTODATE: in memory only; libgit2 skips its racy check
#: Seconds a restore waits for another restore of the same worktree to finish.
RESTORE_WAIT = 10.0
#: Age after which a restore lock whose owner cannot be checked (another machine) is broken; a lock
#: of a live process on this machine is never broken, one of a dead process at once.


@dataclass(frozen=True)
class Snapshot:
    """A captured worktree: the id of its tree, the nested repositories left out, and the
    worktree-relative paths it was limited to (``None``: the whole worktree)."""

    tree: str
    skipped: tuple[str, ...] = ()
    paths: tuple[str, ...] | None = None
    scanned: bool = False  # captured by gitstate's own scan (the worktree then holds no .gitattributes)


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
        self.index_path = os.path.join(agentos, f"index-{loc.worktree}")
        self._local = threading.local()
        self._tracked_sig: tuple[Any, ...] | None = None
        self._user_cache: tuple[tuple[int, int, int] | None, frozenset[str]] | None = None

    # -- the private repository handle ---------------------------------------------------------

    def _repo(self, check_rules: bool = False) -> pygit2.Repository:
        """This thread's handle on the private index. ``check_rules``: first open a new one if the
        global excludes file changed since this one was opened (libgit2 settles which file that is,
        and whether it exists, once per handle; it notices later edits of that file by itself)."""
        repo = getattr(self._local, "repo", None)
        if repo is not None:
            if not check_rules or self._local.excludes == self._excludes_state(repo):
                return repo
            self._local.repo = None
        loc = self.location
        try:
            repo = privateindex.open_with_index(loc.git_dir, self.workdir, self.index_path)
        except (pygit2.GitError, OSError) as exc:
            raise StoreWriteError(self.index_path, f"cannot open the private index: {exc}") from exc
        self._local.repo = repo
        self._local.excludes = self._excludes_state(repo)
        return repo

    def _reread(self, index: pygit2.Index, force: bool) -> None:
        """``index.read(force)``, once the private index file is checked to be one libgit2 may
        open (:func:`privateindex.check_file`: a FIFO put there is removed, and the index in
        memory dropped as it would be for a damaged file); :class:`OSError` when it is not."""
        if not safeopen.regular_or_absent(self.index_path):
            index.clear()
            privateindex.check_file(self.index_path)
        index.read(force)

    def _excludes_state(self, repo: pygit2.Repository) -> tuple[str, tuple[int, int, int] | None]:
        """The global excludes file's path and ``(mtime_ns, size, inode)`` (``None``: absent)."""
        path = self._excludes_file(repo)
        return path, _file_state(path)

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
                 announce: Callable[[int], None] | None = None) -> Snapshot:
        """Capture the worktree (or only ``paths``: files or directories, see
        :meth:`resolve_paths`) and return its tree. ``progress`` is called with ``1`` per file
        that has to be hashed (new or changed since the last snapshot), for a progress display.

        ``fast`` (a whole-worktree snapshot only): capture with :func:`gitstate.workspace.scan.capture`
        where it applies (one ``lstat`` per file, new objects stored as one pack through the store),
        else as usual; ``announce`` is then told first how many files will be hashed. That pack is
        unreferenced until a checkpoint names the tree: take the snapshot and write that checkpoint
        inside :meth:`Store.keeping_objects`, as a restore does with its safety checkpoint, so a
        concurrent ``git repack -a -d`` cannot drop it.

        Nothing of the user's is written: not ``.git/index``, not HEAD, not a file of the worktree."""
        prefixes = self.resolve_paths(paths)
        repo = self._repo(check_rules=True)
        index = repo.index
        if fast and prefixes is None and self._store_objects is not None:
            snap = self._fast_snapshot(repo, index, announce, progress)
            if snap is not None:
                return snap
        try:
            self._reread(index, False)  # pick up a newer private index written by another process
        except (pygit2.GitError, OSError):
            index.clear()  # unreadable (torn by a crash, not a file): rebuilt from the worktree
        epoch = gc_epoch(objects_dir(repo))
        cleared = epoch != self._saved_epoch()
        if cleared:
            # The index trusts the blob and tree ids of earlier snapshots (its stat and tree caches);
            # a `git gc` since may have pruned those no checkpoint keeps: hash everything again.
            index.clear()
        self._forget_changed_big(index)
        big: list[str] = []
        for attempt in (1, 2):
            hashed: set[str] = set()
            since = time.time_ns()
            skipped, ignore_changed = self._add_all_retrying(index, prefixes or [], progress, hashed)
            rules_changed, added = self._add_tracked(repo, index, cleared=cleared)
            self._settle(index, [*sorted(hashed), *added], since)
            if rules_changed or ignore_changed:
                self._drop_ignored(repo, index)
            self._write_index(index, epoch)
            try:
                tree = self._write_tree(repo, index, prefixes)
                break
            except pygit2.GitError as exc:
                if "invalid object" not in str(exc) or attempt == 2:
                    raise StoreWriteError(self.location.git_dir, f"cannot write the snapshot: {exc}") from None
            # An id the index trusted is gone (a `git gc` the epoch did not reveal pruned it):
            # hash everything again, once.
            index.clear()
            cleared = True
            progress = None
        if prefixes is None:
            self._journal(repo, tree, self._last_tree() or head_tree(repo), big)
            self._save_last_tree(tree)
        else:
            self._journal(repo, tree, head_tree(repo), big)
        if big or self._big_stats():
            self._save_big(index, big)
        return Snapshot(tree, tuple(sorted(skipped)), None if prefixes is None else tuple(prefixes))

    @staticmethod
    def _write_tree(repo: pygit2.Repository, index: pygit2.Index, prefixes: list[str] | None) -> str:
        """The tree of the private index (or of its entries under ``prefixes``), written by libgit2."""
        if prefixes is None:
            return str(index.write_tree())
        subset = pygit2.Index()
        for entry in index:
            if matches(entry.path, prefixes):
                subset.add(entry)
        return str(subset.write_tree(repo))

    def _add_all_retrying(self, index: pygit2.Index, pathspecs: list[str],
                          progress: Callable[[int], None] | None,
                          hashed: set[str] | None = None) -> tuple[list[str], bool]:
        """:meth:`_add_all`, again after a failure: a file that another program rewrites or
        removes while libgit2 hashes it fails the pass ("failed to read file into stream"), and the
        next pass sees it settled. A lasting failure (an unreadable file) is raised after the last."""
        handled: set[str] = set()  # files libgit2 failed to read, added by gitstate's own read

        def attempt() -> tuple[list[str], bool]:
            while True:
                try:
                    return self._add_all(index, pathspecs, progress=progress, hashed=hashed, handled=handled)
                except _AddFailed as exc:
                    name = exc.name
                    if name is None or name in handled or len(handled) >= SELF_READ_MAX \
                            or not self._add_read(index, name):
                        raise
                    handled.add(name)
                    if hashed is not None:
                        hashed.add(name)

        return _retrying(attempt)

    def _add_read(self, index: pygit2.Index, name: str) -> bool:
        """Add the file ``name`` to ``index`` from gitstate's own read of it (:func:`scan.read_settled`:
        a file that only grew while read, a log being written, is stored as read; one that keeps
        changing is :class:`FileChangingError`), where libgit2's read failed because the file
        changed between its ``stat`` and its read. ``False`` (libgit2's pass tries again) for what
        gitstate leaves to libgit2: not a regular file, a big one, or one a filter applies to."""
        full = os.path.join(self.workdir, name)
        repo = self._repo()
        try:
            filters = repo.load_filter_list(name, FilterMode.TO_ODB)
        except (pygit2.GitError, ValueError):
            return False
        if filters is not None and len(filters):
            return False
        raw = os.fsencode(full)
        try:
            with scan.open_regular(raw) as opened:
                if opened is None or opened[1].st_size > BIG_BLOB:
                    return False
                data, st = scan.read_settled(opened[0], raw, opened[1])
        except OSError:
            return False
        try:
            oid = repo.odb.write(ObjectType.BLOB, data)
        except (pygit2.GitError, OSError) as exc:  # a read-only repository, a full disk
            raise StoreWriteError(objects_dir(repo), str(exc)) from exc
        add_entry(index, os.fsencode(name), oid.raw, scan.git_mode(st.st_mode), st)
        return True

    def _settle(self, index: pygit2.Index, names: Iterable[str], since_ns: int) -> None:
        """Make sure of what libgit2 read for ``names`` (paths it added to ``index`` after
        ``since_ns``, ``time.time_ns()``). libgit2 checks only that a file's size did not change
        while it read it: a file rewritten in place meanwhile, or under a single ``write`` that
        began before, could be stored as a mix of two versions. A regular file modified since
        :data:`scan.RECENT_NS` before ``since_ns`` is read again once no write to it runs
        (:func:`scan.settled_blob_id`) and kept if those bytes hash to the id libgit2 stored; else
        (another program wrote it since, or a filter applies) libgit2 adds it again and it is kept
        when that read agrees with the one before (a wait for writers lies between any two), after
        the pauses of :data:`scan.SETTLE_DELAYS`, then :class:`FileChangingError`. Files not
        modified recently cost one ``lstat``."""
        for name in names:
            full = os.path.join(self.workdir, name)
            try:
                st = os.lstat(full)
                if not S_ISREG(st.st_mode) or not scan.recently_modified(st, since_ns):
                    continue
                before = index[name].id
            except (OSError, KeyError, ValueError):
                continue
            for delay in (*scan.SETTLE_DELAYS, None):
                if scan.settled_blob_id(full) == before.raw:
                    break  # read again after any write running then: the same bytes
                if self._only_grew(full, before):
                    break  # a log appended to since libgit2 read it: what it stored is a version the file had
                try:
                    index.add(name)  # read again by libgit2 (filters apply), after that wait
                except (pygit2.GitError, OSError):
                    if not os.path.isfile(full) or os.path.islink(full):  # gone meanwhile, or no longer a file
                        index.remove(name)
                        break
                    raise StoreWriteError(full, "cannot snapshot it: it could not be read again") from None
                again = index[name].id
                if again == before:
                    break
                if delay is None:
                    raise FileChangingError(full)
                time.sleep(delay)
                before = again

    def _only_grew(self, full: str, oid: pygit2.Oid) -> bool:
        """Whether the file at ``full`` begins with the bytes of blob ``oid`` and is longer (it only
        grew by appending since they were read; the stat data libgit2 recorded then name the shorter
        file, so the next snapshot reads it again). A filtered file (``core.autocrlf``) never
        matches: its blob's bytes are not its bytes on disk."""
        try:
            data = self._repo().odb.read(oid)[1]
        except (KeyError, ValueError, pygit2.GitError):
            return False
        return scan.starts_with(full, data)

    def _add_all(self, index: pygit2.Index, pathspecs: list[str], flags: int = 0,
                 progress: Callable[[int], None] | None = None,
                 hashed: set[str] | None = None, handled: set[str] | None = None) -> tuple[list[str], bool]:
        """``git_index_add_all``; ``hashed`` collects the paths it read and added; paths in
        ``handled`` are passed over (added already). A failure is :class:`_AddFailed`, naming the
        path libgit2 was adding."""
        skipped: list[str] = []
        state: dict[str, Any] = {"ignore": False, "last": None}

        @ffi.callback("int(*)(const char *, const char *, void *)")
        def visit(path: Any, _spec: Any, _payload: Any) -> int:
            name = ffi.string(path).decode("utf-8", "surrogateescape")
            if name.endswith("/"):  # a directory git will not descend into: a nested repository
                skipped.append(name.rstrip("/"))
                return 1
            if handled and name in handled:
                return 1
            state["last"] = name
            base = name.rsplit("/", 1)[-1]
            if base == ".gitignore":
                state["ignore"] = True
            if hashed is not None:
                hashed.add(name)
            if progress is not None:
                progress(1)
            return 0

        with StrArray(pathspecs) as arr:
            err = C.git_index_add_all(index._index, arr.ptr, flags | _ADD_LITERAL, visit, ffi.NULL)
        if err < 0:
            try:
                check_error(err, io=True)
            except (pygit2.GitError, OSError) as exc:
                raise _AddFailed(self.workdir, f"cannot snapshot the worktree: {exc}", state["last"]) from exc
        return skipped, state["ignore"]

    def _signature(self) -> tuple[Any, ...]:
        """``(mtime_ns, size, inode)`` (``None`` when absent) of the user's index, ``info/exclude``
        and the global excludes file (``core.excludesFile``, else git's default), in that order; the
        last as :meth:`_repo` found it when it last checked (each snapshot and survey starts so)."""
        loc = self.location
        self._repo()
        return (_file_state(os.path.join(loc.git_dir, "index")),
                _file_state(os.path.join(loc.common_dir, "info", "exclude")), self._local.excludes[1])

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

    def _add_tracked(self, repo: pygit2.Repository, index: pygit2.Index,
                     captured: Callable[[], set[str]] | None = None,
                     cleared: bool = False) -> tuple[bool, list[str]]:
        """Tracked-but-ignored files are captured as git captures them: paths that appeared in the
        user's index since the last look are added to the private index (libgit2 then keeps them
        even though they match an ignore rule). Returns whether ignore rules must be applied again
        (see :meth:`_tracked_news`), and the paths added. ``captured`` gives the
        paths already in the private index (cheaper than asking it one by one).

        The last look survives the process (``index-<wt>.user``): a fresh process whose user index,
        ``info/exclude`` and global excludes file did not change since does not read the user's
        index again."""
        rules_changed, todo = self._tracked_news(len(index) > 0 and not cleared, remember=True)
        added: list[str] = []
        if todo and captured is not None:
            todo -= captured()
        for path in todo:
            if path not in index and _in_real_dirs(self.workdir, path) \
                    and _file_or_link(os.path.join(self.workdir, path)):
                try:
                    index.add(path)  # add by path: ignore rules do not apply
                except (pygit2.GitError, OSError):
                    continue  # a directory now, or unreadable: left out as git would
                added.append(path)
        return rules_changed, added

    def _tracked_news(self, cached: bool, remember: bool) -> tuple[bool, frozenset[str]]:
        """Whether ignore rules must be applied again to the private index, and the paths of the
        user's index to make sure of in it (none while the user's index is unchanged since the last
        look, else all of them). Rules apply again when ``info/exclude`` or the global excludes
        file changed, or when the user's index changed: a path may have left it (``git rm --cached``
        of a tracked-but-ignored file: ignored from then on), and another process may have added
        or dropped any of them in the private index since this one looked (so no list of the
        user's paths is kept between looks). ``.gitignore`` files are the scan's and ``add_all``'s
        to notice. With ``remember``, this look becomes the last one."""
        sig = self._signature()
        old = self._tracked_sig
        if old is None and cached:
            old = self._saved_signature()
        if remember:
            self._tracked_sig = sig
        rules_changed = old is not None and sig[1:] != old[1:]
        if old is not None and sig[0] == old[0] and cached:
            return rules_changed, frozenset()
        return rules_changed or cached, self._user_paths()

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
        text = " ".join("-" if v is None else ",".join(str(x) for x in v) for v in sig) + "\n"
        tmp = f"{self.index_path}.user.{os.getpid()}.{threading.get_ident()}"
        try:
            with safeopen.open_file(tmp, "w", encoding="ascii", replace_special=True) as fh:
                fh.write(text)
            os.replace(tmp, self.index_path + ".user")
        except OSError:
            pass

    def _drop_ignored(self, repo: pygit2.Repository, index: pygit2.Index) -> list[str]:
        """After ignore rules changed: forget files that became ignored and are not user-tracked
        (returns their paths)."""
        dropped = self._ignored(repo, [entry.path for entry in index])
        for path in dropped:
            index.remove(path)
        return dropped

    def _ignored(self, repo: pygit2.Repository, names: list[str]) -> list[str]:
        """The ``names`` an ignore rule matches now that the user's git does not track."""
        tracked = self._user_paths()
        return [name for name in names if name not in tracked and _is_ignored(repo, name)]

    def _write_index(self, index: pygit2.Index, epoch: str | None = None) -> None:
        """Save the private index (and ``epoch``, the :func:`gc_epoch` its ids were checked against)."""
        try:
            index.write()
        except (pygit2.GitError, OSError):
            # another process holds index.lock: the tree is right, only the stat cache is not
            # saved; the next look at the user's index starts afresh (what was added is not on disk)
            self._local.unsaved = True
            self._tracked_sig = None
            try:
                os.unlink(self.index_path + ".user")
            except OSError:
                pass
        else:
            self._save_signature()
            if epoch is not None:
                self._save_epoch(epoch)

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
        rules_changed, todo = self._tracked_news(True, remember=False)
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
        cache was checked (:func:`gc_epoch`), the private index on disk is what this process holds,
        and no big file has its own stat record. ``None`` otherwise."""
        if (getattr(self._local, "unsaved", False) or self._big_stats()
                or gc_epoch(objects_dir(repo)) != self._saved_epoch()):
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
        """``(blob id, mode)`` of a worktree file or link as libgit2 would add it with no filter
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

    def _fast_snapshot(self, repo: pygit2.Repository, index: pygit2.Index,
                       announce: Callable[[int], None] | None,
                       progress: Callable[[int], None] | None) -> Snapshot | None:
        """:func:`scan.capture` and what ``snapshot`` does around ``add_all``, with the new blobs
        and trees stored as one pack; ``None`` where the scan does not apply (nothing written)."""
        assert self._store_objects is not None
        epoch = gc_epoch(objects_dir(repo))
        if epoch != self._saved_epoch():
            return None  # a `git gc` may have pruned ids the stat cache trusts: the full path rehashes
        try:
            # the scan reads the file: memory must hold exactly that (it holds more only after a
            # write failed; otherwise re-reading is needed only if another process wrote the file)
            self._reread(index, bool(getattr(self._local, "unsaved", False)))
        except (pygit2.GitError, OSError):
            return None
        self._local.unsaved = False
        cap = scan.capture(repo, self.index_path, self.workdir, self.location.common_dir, BIG_BLOB,
                           announce=announce, progress=progress, store=self._store_objects, batch=PACK_BATCH)
        if cap is None:
            return None
        entries = cap.entries
        odb = repo.odb
        # libgit2 adds an index entry only for a stored object: blobs first, with the trees when
        # nothing else can change them (no big file for libgit2 to add)
        pending: list[tuple[int, bytes]] = list(cap.objects)
        tree = None
        if not cap.big:
            tree = self._new_trees(entries, odb, pending)
        self._store_in_batches(pending)
        for raw in cap.removed:
            index.remove(os.fsdecode(raw))
        for raw, st in cap.stats.items():
            mode, oid = entries[raw]
            add_entry(index, raw, oid, mode, st)
        changed = bool(cap.big)
        since = time.time_ns()
        for raw in cap.big:  # streamed into loose objects by libgit2, never read whole here
            name = os.fsdecode(raw)
            if name in index:
                index.remove(name)
            self._add_big(index, name)
            entry = index[name]
            entries[raw] = (int(entry.mode), entry.id.raw)
        rules_changed, added = self._add_tracked(
            repo, index, lambda: {os.fsdecode(p) for p in entries})
        self._settle(index, [*map(os.fsdecode, cap.big), *added], since)
        for raw in [*cap.big, *map(os.fsencode, added)]:  # as settled: one gone meanwhile left the index
            name = os.fsdecode(raw)
            if name in index:
                entry = index[name]
                entries[raw] = (int(entry.mode), entry.id.raw)
            else:
                entries.pop(raw, None)
        changed = changed or bool(added)
        if rules_changed or cap.ignore_changed:
            for name in self._drop_ignored(repo, index):
                entries.pop(os.fsencode(name), None)
                changed = True
        if tree is None or changed:
            pending = []
            tree = self._new_trees(entries, odb, pending)
            self._store_in_batches(pending)
        self._write_index(index, epoch)
        loose = [str(index[p].id) for p in added if p in index]
        new_loose = [oid for oid in loose if _loose_size(self.location.common_dir, oid) is not None
                     and _blob_size(repo, oid) <= BIG_BLOB]
        if new_loose and self._on_new_objects is not None:
            self._on_new_objects(new_loose)
        self._save_last_tree(tree)
        big = [os.fsdecode(p) for p in cap.big]
        if big or self._big_stats():
            self._save_big(index, big)
        return Snapshot(tree, tuple(cap.skipped), None, scanned=True)

    def _add_big(self, index: pygit2.Index, name: str) -> None:
        """Add a file above :data:`BIG_BLOB` through libgit2 (streamed), again after a failure as
        :meth:`_add_all_retrying` does (a file rewritten while libgit2 reads it fails the read);
        a lasting failure is :class:`StoreWriteError`."""

        def add() -> None:
            try:
                index.add(name)
            except (pygit2.GitError, OSError) as exc:
                raise StoreWriteError(os.path.join(self.workdir, name), f"cannot snapshot it: {exc}") from exc

        _retrying(add)

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

    def record(self, written: dict[str, tuple[str, int, os.stat_result]], removed: Iterable[str]) -> None:
        """Tell the stat cache what a restore just wrote (path → (blob id, mode, ``lstat`` after the
        write)) and removed, as git's checkout updates its index: the next snapshot then costs one
        ``lstat`` for those files instead of hashing them again. Best effort (another process may
        hold the index lock: the next snapshot hashes them then)."""
        repo = self._repo()
        index = repo.index
        try:
            self._reread(index, False)
            for path in removed:
                if path in index:
                    index.remove(path)
            for path, (oid, mode, st) in written.items():
                add_entry(index, os.fsencode(path), bytes.fromhex(oid), mode, st)
            index.write()
        except (pygit2.GitError, OSError):
            self._local.unsaved = True
            self._tracked_sig = None

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

    # Big files: libgit2 hashes a tracked file whose stat changed but whose size did not by reading
    # it whole (with a second copy for filters). For files above BIG_BLOB gitstate keeps its own
    # stat record; when one changed, its index entry is dropped first, so add_all streams it in as a
    # new file instead.

    def _big_path(self) -> str:
        return self.index_path + ".big"

    def _big_stats(self) -> dict[str, tuple[int, ...]]:
        out: dict[str, tuple[int, ...]] = {}
        try:
            with safeopen.open_file(self._big_path(), encoding="utf-8", errors="surrogateescape") as fh:
                for line in fh:
                    parts = line.rstrip("\n").split(" ", 4)
                    if len(parts) == 5:
                        out[parts[4]] = tuple(int(x) for x in parts[:4])
        except (OSError, ValueError):
            return {}
        return out

    def _forget_changed_big(self, index: pygit2.Index) -> None:
        for path, stat in self._big_stats().items():
            if _stat_key(os.path.join(self.workdir, path)) != stat and path in index:
                index.remove(path)

    def _save_big(self, index: pygit2.Index, found: list[str]) -> None:
        lines = []
        for path in sorted(set(found) | set(self._big_stats())):
            stat = _stat_key(os.path.join(self.workdir, path))
            if stat is not None and stat[0] > BIG_BLOB and path in index:
                lines.append(" ".join(str(x) for x in stat) + " " + path + "\n")
        tmp = f"{self._big_path()}.{os.getpid()}.{threading.get_ident()}"
        try:
            with safeopen.open_file(tmp, "w", encoding="utf-8", errors="surrogateescape",
                                    replace_special=True) as fh:
                fh.write("".join(lines))
            os.replace(tmp, self._big_path())
        except OSError:
            pass

    def _journal(self, repo: pygit2.Repository, tree: str, old: str | None, big: list[str]) -> None:
        """Journal the objects of ``tree`` not in ``old`` (unchanged subtrees share ids: skipped);
        collect the paths of new blobs too big to pack into ``big``."""
        common = self.location.common_dir
        found: list[str] = []
        _new_objects(repo, tree, old, common, found, "", big)
        if found and self._on_new_objects is not None:
            self._on_new_objects(found)


T = TypeVar("T")

#: Files of one snapshot that gitstate reads itself where libgit2's read failed (a file changing
#: between libgit2's ``stat`` and its read, a log being written): more than this, and the failure
#: stands (after :func:`_retrying`'s pauses).
SELF_READ_MAX = 64


class _AddFailed(StoreWriteError):
    """``git_index_add_all`` failed; ``name``: the path it was adding (``None``: not known)."""

    def __init__(self, path: str, reason: str, name: str | None) -> None:
        super().__init__(path, reason)
        self.name = name


def _take_lock(path: str) -> lockfile.FileLock | None:
    """:func:`lockfile.acquire`, a failure to make the lock file (a read-only repository, a full
    disk) being :class:`StoreWriteError`."""
    try:
        return lockfile.acquire(path)
    except OSError as exc:
        raise StoreWriteError(path, str(exc)) from exc

def _retrying(call: Callable[[], T]) -> T:
    """``call()``, again after a :class:`StoreWriteError`, a few times with growing pauses (a file
    another program rewrites while libgit2 reads it fails the read; the next try sees it settled);
    the last failure is raised."""
    for delay in (0.02, 0.1, 0.3):
        try:
            return call()
        except StoreWriteError:
            time.sleep(delay)
    return call()


def _is_ignored(repo: pygit2.Repository, name: str) -> bool:
    """Whether an ignore rule matches ``name``; a name that is not UTF-8 (pygit2 cannot pass it to
    libgit2) is kept, as ``add_all`` kept it."""
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


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    byte = data[pos]
    pos += 1
    value = byte & 0x7F
    while byte & 0x80:
        value += 1
        byte = data[pos]
        pos += 1
        value = (value << 7) + (byte & 0x7F)
    return value, pos


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
                strip, start = _varint(data, start)
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


def _int32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def add_entry(index: pygit2.Index, path: bytes, oid: bytes, mode: int, st: os.stat_result) -> None:
    """Put ``path`` into ``index`` with its blob id, mode and the stat data libgit2 records
    (``git_index_entry__init_from_stat``), marked up to date: the content was just read or
    written, so libgit2 need not hash it again when it writes the index."""
    centry = ffi.new("git_index_entry *")
    centry.ctime.seconds = _int32(st.st_ctime_ns // 1_000_000_000)
    centry.ctime.nanoseconds = st.st_ctime_ns % 1_000_000_000
    centry.mtime.seconds = _int32(st.st_mtime_ns // 1_000_000_000)
    centry.mtime.nanoseconds = st.st_mtime_ns % 1_000_000_000
    centry.dev = st.st_rdev & 0xFFFFFFFF
    centry.ino = st.st_ino & 0xFFFFFFFF
    centry.mode = mode
    centry.uid = st.st_uid & 0xFFFFFFFF
    centry.gid = st.st_gid & 0xFFFFFFFF
    centry.file_size = st.st_size & 0xFFFFFFFF
    centry.flags_extended = _ENTRY_UPTODATE
    ffi.buffer(ffi.addressof(centry, "id"))[:20] = oid
    cpath = ffi.new("char[]", path)
    centry.path = cpath
    check_error(C.git_index_add(index._index, centry))


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


def _new_objects(repo: pygit2.Repository, tree: str, old: str | None, common: str, out: list[str],
                 prefix: str, big: list[str]) -> None:
    if tree == old:
        return
    if _loose_size(common, tree) is not None:
        out.append(tree)
    reader = ObjectReader(repo)
    before: dict[str, str] = {}
    if old is not None:
        try:
            before = {e.name: e.id for e in reader.tree(old)}
        except CorruptObjectError:
            before = {}
    for entry in reader.tree(tree):
        oid = entry.id
        prev = before.get(entry.name)
        if oid == prev:
            continue
        if entry.filemode == MODE_TREE:
            _new_objects(repo, oid, prev, common, out, f"{prefix}{entry.name}/", big)
        elif entry.filemode != MODE_COMMIT and _loose_size(common, oid) is not None:
            if _blob_size(repo, oid) <= BIG_BLOB:
                out.append(oid)
            else:
                big.append(prefix + entry.name)
