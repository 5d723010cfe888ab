"""Restoring a workspace snapshot into the worktree, safely.

The plan is the tree diff between the worktree as it is now (captured through the private index, see
:mod:`gitstate.workspace`) and the snapshot, so unchanged subtrees cost nothing. Before anything is
written:

1. the whole snapshot tree is validated (:mod:`gitstate.pathsafety`): a tree fetched from an
   untrusted remote cannot write outside the worktree, into ``.git``, through a symbolic link, or a
   gitlink;
2. obstacles are refused even with ``force``: a path to write where an *ignored* file, a nested
   repository or a non-empty directory sits (ignored files are never touched);
3. without ``force``, every file the restore would overwrite or delete must hold content that some
   checkpoint of the run (or the user's HEAD commit) already has at that path, otherwise
   :class:`RestoreConflictError` lists the unsaved paths.

Then the caller takes a safety checkpoint of the current worktree, and only then files are
written, as ``git checkout`` writes them: the old file is unlinked and the new one created with
``O_CREAT | O_EXCL | O_NOFOLLOW`` (so nothing that appeared meanwhile, a symbolic link least of all,
is written through), relative to directory descriptors opened one component at a time with
``O_NOFOLLOW``: no write goes through a symbolic link, even one swapped in while the restore runs.
A restore cut off half way leaves some files old and some new (as git's checkout does); the safety
checkpoint has the old ones and the restore can simply run again. HEAD and the user's index are
never touched.

Memory: a blob above :data:`~gitstate.workspace.snapshot.BIG_BLOB` is streamed into its file, never
held whole, neither here nor in git (:func:`_stream_big`): a loose one is inflated here 1 MiB at a
time, a packed one is written by ``git cat-file`` with ``core.bigFileThreshold`` and small pack
windows, so git streams it too (a big blob stored as a delta, which only a user's ``git gc`` or a
fetch makes, is rebuilt whole by git, as git's own checkout does). Those are written without
checkout filters. Smaller blobs are read whole, filtered and written.

Costs are git's: the safety snapshot is one ``lstat`` per file plus one read per changed file
(:mod:`gitstate.workspace.scan`), and each restored file one unlink, one create and its write, done
by four writer threads in a large restore (as git's ``checkout.workers`` would), since the kernel's
unlink and create are most of a restore's time; ``scripts/bench_files.py`` measures a restore
against ``git read-tree -u``/``git checkout``."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import subprocess
import threading
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from queue import Queue
from typing import Any

import pygit2
from pygit2.enums import FilterMode, ObjectType

from gitstate.errors import (
    CorruptObjectError,
    UnsafeTreeError,
    UsageError,
    WorktreeWriteError,
)
from gitstate.format.checkpoint import Checkpoint
from gitstate.git.objects import MODE_BLOB, MODE_COMMIT, MODE_EXEC, MODE_LINK, MODE_TREE, write_all
from gitstate.git.reader import ObjectReader
from gitstate.workspace import scan
from gitstate.workspace.pathsafety import NAME_MAX, WRITABLE_MODES, check_name, hfs_fold
from gitstate.workspace.snapshot import BIG_BLOB, matches

_CHUNK = 1 << 20

#: A restore's progress callback: ``(phase, done, total)``. Phases: ``"checking"`` (changed files
#: read to find unsaved changes before anything is written; not with ``force``), ``"reading"``
#: (changed files read for the safety checkpoint; ``total`` is 0 when not known in advance) and
#: ``"writing"`` (files written or removed).
Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class RestoreResult:
    """What a restore changed (or, with ``dry_run``, would change): worktree-relative paths of files
    rewritten (content, mode or type), created and removed; ``unsaved`` (on a dry run) the paths whose
    current content is in no checkpoint, which a real restore refuses without ``force``; ``safety`` is
    the checkpoint holding the
    worktree as it was before (``None`` on a dry run or when nothing had to change), on branch
    ``safety_branch`` of the run: ``run.restore(result.safety)`` undoes the restore."""

    checkpoint: str
    changed: tuple[str, ...] = ()
    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    safety: str | None = None
    safety_branch: str | None = None
    dry_run: bool = False
    skipped: tuple[str, ...] = field(default=())
    unsaved: tuple[str, ...] = ()
    unchanged: int = 0

    @property
    def paths(self) -> tuple[str, ...]:
        """Every path the restore touches, sorted."""
        return tuple(sorted({*self.changed, *self.added, *self.removed}))

    @property
    def written(self) -> int:
        """How many files were (or would be) written: rewritten plus created."""
        return len(self.changed) + len(self.added)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly form (the file lists, and the counts ``written``, ``deleted``,
        ``unchanged``)."""
        return {
            "checkpoint": self.checkpoint, "changed": list(self.changed), "added": list(self.added),
            "removed": list(self.removed), "safety": self.safety, "safety_branch": self.safety_branch,
            "dry_run": self.dry_run, "skipped": list(self.skipped), "unsaved": list(self.unsaved),
            "written": self.written, "deleted": len(self.removed), "unchanged": self.unchanged,
        }


@dataclass
class Plan:
    """The file operations a restore needs: ``writes`` (path → (blob id, mode)) and ``deletes``;
    ``current`` holds the worktree's (blob id, mode) of each path that changes."""

    writes: dict[str, tuple[str, int]]
    deletes: list[str]
    current: dict[str, tuple[str, int]]

    @property
    def changed(self) -> list[str]:
        return sorted(p for p in self.writes if p in self.current)

    @property
    def added(self) -> list[str]:
        return sorted(p for p in self.writes if p not in self.current)


# -- validation of untrusted trees ----------------------------------------------------------------

MAX_TREE_DEPTH = 512  # directory levels a snapshot may have; deeper trees are refused as hostile


_VALID: dict[str, None] = {}  # snapshot trees found safe in this process (an id names its content)
_VALID_MAX = 256


def validate_tree(reader: ObjectReader, tree_id: str) -> None:
    """Raise :class:`UnsafeTreeError` unless every entry of the tree may be written: safe names,
    no duplicates, no case-folding collisions with links, directories that are trees, file entries
    that are blobs, at most :data:`MAX_TREE_DEPTH` levels. Iterative; each tree is read once. A tree
    found safe is remembered for the process (its id names its whole content): restoring the
    same snapshot again does not walk it again."""
    if tree_id in _VALID:
        return
    _walk_valid(reader, tree_id)
    if len(_VALID) >= _VALID_MAX:
        _VALID.clear()
    _VALID[tree_id] = None


def _walk_valid(reader: ObjectReader, tree_id: str) -> None:
    seen: set[str] = set()
    todo: list[tuple[str, str, int]] = [(tree_id, "", 0)]
    modes: dict[bytes, int] = {}
    while todo:
        current, prefix, depth = todo.pop()
        if current in seen:
            continue
        if depth > MAX_TREE_DEPTH:
            raise UnsafeTreeError(prefix.rstrip("/"), f"directories nested deeper than {MAX_TREE_DEPTH} levels")
        kind, data = reader.read(current)
        if kind != ObjectType.TREE:
            if prefix:
                raise UnsafeTreeError(prefix.rstrip("/"), "directory entry does not point at a tree")
            raise CorruptObjectError(current, "snapshot is not a tree")
        names: set[str] = set()
        folded: dict[str, int] = {}
        pos, end = 0, len(data)
        find = data.find
        while pos < end:  # parsed here: parse_tree's object per entry and hex ids cost three times more
            space = find(b" ", pos)
            nul = find(b"\0", space + 1)
            if space < 0 or nul < 0 or nul + 21 > end:
                raise CorruptObjectError(current, "malformed tree entry")
            text = data[pos:space]
            mode = modes.get(text)
            if mode is None:
                try:
                    mode = modes[text] = int(text, 8)
                except ValueError:
                    raise CorruptObjectError(current, "malformed tree entry mode") from None
            name = data[space + 1:nul].decode("utf-8", "surrogateescape")
            if name[:1] not in ".gG" and mode in WRITABLE_MODES and name.isascii() and "/" not in name \
                    and "\\" not in name and len(name) <= NAME_MAX:
                key = name.lower()  # plainly fine: every name check_name refuses fails a test here
            else:
                reason = check_name(name, mode)
                if reason is not None:
                    raise UnsafeTreeError(prefix + name, reason)
                key = hfs_fold(name)
            if name in names:
                raise UnsafeTreeError(prefix + name, "duplicate entry name in one tree")
            other = folded.get(key)
            if other is not None and MODE_LINK in (mode, other):
                raise UnsafeTreeError(prefix + name,
                                      "entry collides with a symbolic link on a case-insensitive file system")
            names.add(name)
            folded[key] = mode
            if mode == MODE_TREE:
                todo.append((data[nul + 1:nul + 21].hex(), prefix + name + "/", depth + 1))
            pos = nul + 21
        seen.add(current)


def check_blobs(reader: ObjectReader, plan: Plan) -> dict[str, int]:
    """Refuse a plan that would write a file or link from an object that is not a blob (a crafted
    tree can give a file mode to a tree id; its raw bytes must never land on disk). Returns the
    size of each blob to write, by id."""
    sizes: dict[str, int] = {}
    with reading_many(reader, len(plan.writes)):
        for path, (oid, mode) in plan.writes.items():
            if mode == MODE_COMMIT or oid in sizes:
                continue
            kind, size = reader.header(oid)
            if kind != ObjectType.BLOB:
                raise UnsafeTreeError(path, "file entry does not point at a blob")
            sizes[oid] = size
    return sizes


def reading_many(reader: ObjectReader, count: int) -> AbstractContextManager[object]:
    """Reads of ``count`` objects: from :data:`PARALLEL_MIN` on, through a listing of the loose
    objects (:meth:`ObjectReader.listing_loose`) rather than one failed ``open`` per packed one.
    Nested blocks share the outer listing."""
    return reader.listing_loose() if count >= PARALLEL_MIN else nullcontext()


# -- planning ------------------------------------------------------------------------------------

def make_plan(repo: pygit2.Repository, current: str, target: str, prefixes: Sequence[str] | None) -> Plan:
    """The diff from the current worktree tree to the snapshot tree, limited to ``prefixes``."""
    old_tree, new_tree = repo[current], repo[target]
    assert isinstance(old_tree, pygit2.Tree) and isinstance(new_tree, pygit2.Tree)
    diff = old_tree.diff_to_tree(new_tree)
    old: dict[str, tuple[str, int]] = {}
    new: dict[str, tuple[str, int]] = {}
    for delta in diff.deltas:
        status = delta.status_char()
        if status != "A":
            before = delta.old_file
            mode = int(before.mode)
            if mode:
                old[before.path] = (str(before.id), mode)
        if status != "D":
            after = delta.new_file
            mode = int(after.mode)
            if mode:
                new[after.path] = (str(after.id), mode)
    return _scoped_plan(old, new, prefixes)


def plan_against(repo: pygit2.Repository, current: Mapping[str, tuple[str, int]], target: str,
                 prefixes: Sequence[str] | None) -> Plan:
    """:func:`make_plan` from the worktree's files as ``{path: (blob id, mode)}`` (a
    :class:`~gitstate.workspace.snapshot.Survey`, which stored no tree) instead of a tree."""
    obj = repo[target]
    assert isinstance(obj, pygit2.Tree)
    index = pygit2.Index()
    index.read_tree(obj)  # libgit2 walks the (already validated) tree in C
    wanted = {entry.path: (str(entry.id), int(entry.mode)) for entry in index}
    old = {p: v for p, v in current.items() if wanted.get(p) != v}
    new = {p: v for p, v in wanted.items() if current.get(p) != v}
    return _scoped_plan(old, new, prefixes)


def _scoped_plan(old: dict[str, tuple[str, int]], new: dict[str, tuple[str, int]],
                 prefixes: Sequence[str] | None) -> Plan:
    """The plan from the paths that differ (``old``: as they are, ``new``: as they must become),
    limited to ``prefixes``."""
    if prefixes is not None:
        old = {p: v for p, v in old.items() if matches(p, prefixes)}
        new = {p: v for p, v in new.items() if matches(p, prefixes)}
    deletes = sorted(p for p in old if p not in new)
    return Plan(writes=new, deletes=deletes, current=old)


def count_files(repo: pygit2.Repository, tree: str, prefixes: Sequence[str] | None) -> int:
    """How many files (and links) ``tree`` holds, only those under ``prefixes`` if given."""
    obj = repo[tree]
    assert isinstance(obj, pygit2.Tree)
    index = pygit2.Index()
    index.read_tree(obj)  # libgit2 walks the (already validated) tree in C
    if prefixes is None:
        return len(index)
    return sum(1 for entry in index if matches(entry.path, prefixes))


def filters_possible(repo: pygit2.Repository, common_dir: str, plan: Plan) -> bool:
    """Whether a checkout filter could apply to a file the plan writes, for a worktree that holds
    no ``.gitattributes`` (what :func:`gitstate.workspace.scan.capture` found): the configuration,
    an attributes file outside the worktree, or a ``.gitattributes`` the plan itself writes."""
    if scan.filters_possible(repo, common_dir):
        return True
    return any(p.rpartition("/")[2] == ".gitattributes" for p in plan.writes)


def _ancestors(path: str) -> list[str]:
    parts = path.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts))]


def check_lengths(workdir: str, plan: Plan) -> None:
    """Raise :class:`UnsafeTreeError` for a path the plan writes that is too long for the system
    once joined to ``workdir`` (``PATH_MAX``; each name is checked by :func:`validate_tree`)."""
    try:
        limit = os.pathconf(workdir, "PC_PATH_MAX")
    except (OSError, ValueError):
        limit = 4096
    if limit <= 0:
        limit = 4096
    base = len(os.fsencode(workdir)) + 1
    for path in plan.writes:
        if base + 4 * len(path) >= limit and base + len(path.encode("utf-8", "surrogateescape")) >= limit:
            raise UnsafeTreeError(path, f"path longer than this system allows ({limit:,} bytes with the worktree's)")


def find_obstacles(workdir: str, plan: Plan) -> list[str]:
    """Paths in the way of a write that are not the user's captured files (ignored files, nested
    repositories, non-empty directories, a symlink or file where a directory must go that the plan
    does not delete). A captured file or symbolic link where a directory must go is no obstacle:
    the plan deletes it first (it is in the safety snapshot, and without ``force`` it must be saved
    in a checkpoint), and what lies below a link is never looked at. Each directory is looked at
    once, however many files go into it. A path too long for the system is refused first
    (:func:`check_lengths`)."""
    check_lengths(workdir, plan)
    deleting = set(plan.deletes)
    blocked: list[str] = []
    kinds: dict[str, str] = {}  # directory -> "dir", "missing", "other" or "repo"

    def kind(anc: str) -> str:
        found = kinds.get(anc)
        if found is None:
            full = os.path.join(workdir, anc)
            try:
                mode = os.lstat(full).st_mode
            except (FileNotFoundError, NotADirectoryError):
                found = "missing"
            else:
                if not stat.S_ISDIR(mode):
                    found = "other"
                else:
                    found = "repo" if os.path.lexists(os.path.join(full, ".git")) else "dir"
            kinds[anc] = found
        return found

    for path in plan.writes:
        inside = True  # every folder above the path is a real directory now
        for anc in _ancestors(path):
            found = kind(anc)
            if found != "dir":
                inside = False
            if found == "missing":
                break
            if found == "other":  # a file or a symbolic link: deleted first (saved), else in the way
                if anc not in deleting:
                    blocked.append(anc)
                break
            if found == "repo":
                blocked.append(anc)
                break
        if path in plan.current or not inside:
            continue  # below a file or link, nothing is in the worktree as git sees it: never look through
        full = os.path.join(workdir, path)
        try:
            mode = os.lstat(full).st_mode
        except (FileNotFoundError, NotADirectoryError):  # absent, or below a file being deleted
            continue
        if stat.S_ISDIR(mode):
            for root, _dirs, files in os.walk(full):
                for name in files:
                    rel = os.path.relpath(os.path.join(root, name), workdir).replace(os.sep, "/")
                    if rel not in deleting:
                        blocked.append(rel)
        else:
            blocked.append(path)
    return sorted(set(blocked))


def find_entry(reader: ObjectReader, tree_id: str, path: str,
               trees: dict[str, dict[str, tuple[str, int]]] | None = None) -> tuple[str, int] | None:
    """The ``(id, mode)`` of the file or folder at ``path`` in a tree, or ``None``. ``trees``: parsed
    trees kept across lookups (``{tree id: {name: (id, mode)}}``), for callers that look up many."""
    found: tuple[str, int] | None = None
    for part in path.split("/"):
        if found is not None and found[1] != MODE_TREE:
            return None
        tree = trees.get(tree_id) if trees is not None else None
        if tree is None:
            tree = {e.name: (e.id, e.filemode) for e in reader.tree(tree_id)}
            if trees is not None:
                trees[tree_id] = tree
        found = tree.get(part)
        if found is None:
            return None
        tree_id = found[0]
    return found


def unsaved(reader: ObjectReader, plan: Plan, saved_trees: Iterable[str], current: str | None = None) -> list[str]:
    """Paths the restore would overwrite or delete whose current content no saved tree holds.
    ``current``: the tree of the worktree as the plan found it, when known (a saved tree that is
    that tree holds every such path, with no lookup)."""
    pending = {p: plan.current[p] for p in (*plan.changed, *plan.deletes)}
    trees: dict[str, dict[str, tuple[str, int]]] = {}
    for tree_id in saved_trees:
        if not pending:
            break
        if tree_id == current:
            return []
        for path in list(pending):
            if find_entry(reader, tree_id, path, trees) == pending[path]:
                del pending[path]
    return sorted(pending)


# -- applying ------------------------------------------------------------------------------------

Written = dict[str, tuple[str, int, os.stat_result]]

_OPEN_DIR = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
_CREATE = (os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
           | getattr(os, "O_BINARY", 0))


def apply(repo: pygit2.Repository, common_dir: str, workdir: str, plan: Plan,
          progress: Progress | None = None, *, filters: bool = True,
          sizes: dict[str, int] | None = None, reader: ObjectReader | None = None) -> Written:
    """Carry the plan out: deletions first (deepest first, emptied directories removed), then the
    writes in path order; ``progress("writing", done, total)`` as they go, always on the calling
    thread. ``filters``: look up checkout filters (``core.autocrlf``, ``.gitattributes``) per file;
    ``False`` when none can apply. ``sizes`` (from :func:`check_blobs`) saves reading each blob's
    header again. ``reader``: the reader to read the blobs with (one already
    :meth:`~ObjectReader.listing_loose` goes on with its listings), else a new one.

    A plan of :data:`PARALLEL_MIN` writes or more uses :data:`WRITERS` threads (as git's
    ``checkout.workers`` does): the calling thread reads each blob from the object store, in path
    order, rewrites in place the files that can be (:func:`_overwrite`: a few system calls that
    do not wait), and hands the others to the writers, whose unlink, create and write of each file
    mostly wait in the kernel. Every file is still written as :func:`_place` says, whichever
    thread writes it.

    Returns what was written: path → (blob id, mode, ``lstat`` of the new file), for the stat
    cache. An ``OSError`` becomes :class:`WorktreeWriteError` naming the path."""
    total = len(plan.deletes) + len(plan.writes)
    done = 0
    if reader is None:
        reader = ObjectReader(repo)
    with _Directories(workdir) as dirs, reading_many(reader, len(plan.writes)):
        for path in sorted(plan.deletes, key=lambda p: (-p.count("/"), p)):
            _guarded(workdir, path, dirs.delete, path)
            done += 1
            if progress is not None:
                progress("writing", done, total)
        dirs.close_all()  # directories were removed: look them up afresh
        known = sizes if sizes is not None else {}
        jobs = (_prepare(reader, path, *plan.writes[path], filters, known.get(plan.writes[path][0]))
                for path in sorted(plan.writes))
        if len(plan.writes) >= PARALLEL_MIN and WRITERS > 1:
            return _write_parallel(workdir, common_dir, jobs, progress, done, total, dirs)
        written: Written = {}
        for job in jobs:
            written[job.path] = (job.oid, job.mode, _guarded(workdir, job.path, _place, dirs, common_dir, job))
            done += 1
            if progress is not None:
                progress("writing", done, total)
    return written


#: Writes from which a restore uses :data:`WRITERS` threads; fewer are written by the caller's.
PARALLEL_MIN = 64
#: Threads writing files in a large restore: each unlink and create waits in the kernel (for the
#: file system journal as much as for a core), not for the GIL, so more threads than cores help.
WRITERS = 4
_QUEUED = 256  # files read ahead of the writers at most (each at most BIG_BLOB; big ones streamed)


@dataclass(frozen=True)
class _Job:
    """One file to write: its blob's bytes, filtered for the worktree (``None``: a big blob, streamed
    from the object store by the writer)."""

    path: str
    oid: str
    mode: int
    data: bytes | None


def _prepare(reader: ObjectReader, path: str, oid: str, mode: int, filters: bool, size: int | None) -> _Job:
    """Read what ``path`` gets, on the thread that owns ``reader`` (libgit2's handle)."""
    if mode == MODE_LINK:
        return _Job(path, oid, mode, reader.blob(oid))
    if size is None:
        size = reader.header(oid)[1]
    if size > BIG_BLOB:
        return _Job(path, oid, mode, None)
    data = reader.blob(oid)
    if filters:
        found = reader.repo.load_filter_list(git_path(path), FilterMode.TO_WORKTREE)
        if found is not None and len(found) and b"\0" not in data:
            data = found.apply_to_buffer(data)
    return _Job(path, oid, mode, data)


def git_path(path: str) -> Any:
    """``path`` (as pygit2 gives tree paths: bytes that are not UTF-8 decoded as lone surrogates)
    as the bytes git stores, for a libgit2 call that takes a path: pygit2 encodes ``str`` paths
    strictly, which fails on such a name."""
    return path.encode("utf-8", "surrogateescape")


def _write_parallel(workdir: str, common_dir: str, jobs: Iterable[_Job], progress: Progress | None,
                    done: int, total: int, dirs: _Directories) -> Written:
    """Rewrite in place on this thread (through ``dirs``) the files of ``jobs`` (read in order on
    this thread) that can be, hand the others to :data:`WRITERS` writer threads, each with its
    own directory descriptors. The first failure stops the writing (jobs still queued are dropped)
    and is raised here once every writer has stopped; so is an exception of this thread's reading
    or writing (or a ``KeyboardInterrupt``)."""
    queue: Queue[_Job | None] = Queue(maxsize=_QUEUED)
    written: Written = {}
    failures: list[BaseException] = []
    stop = threading.Event()

    def fail(exc: BaseException) -> None:
        failures.append(exc)
        stop.set()

    def writer() -> None:
        dirs: _Directories | None = None
        try:
            dirs = _Directories(workdir)
        except OSError as exc:
            fail(WorktreeWriteError(workdir, exc.strerror or str(exc)))
        try:
            # a writer takes jobs until told to end, even after a failure: the reader never waits
            # on a full queue that nobody empties
            while (job := queue.get()) is not None:
                if dirs is None or stop.is_set():
                    continue
                try:
                    written[job.path] = (job.oid, job.mode,
                                         _guarded(workdir, job.path, _place, dirs, common_dir, job, False))
                except BaseException as exc:  # noqa: BLE001 - handed to the calling thread
                    fail(exc)
        finally:
            if dirs is not None:
                dirs.__exit__(None, None, None)

    threads = [threading.Thread(target=writer, name=f"gitstate-restore-{i}", daemon=True) for i in range(WRITERS)]
    for thread in threads:
        thread.start()
    reported = done
    try:
        for job in jobs:
            if stop.is_set():
                break
            st = _guarded(workdir, job.path, _in_place, dirs, job)
            if st is not None:
                written[job.path] = (job.oid, job.mode, st)
            else:
                queue.put(job)
            finished = done + len(written)
            if progress is not None and finished != reported:
                progress("writing", finished, total)
                reported = finished
    except BaseException:
        stop.set()
        raise
    finally:
        for _ in threads:
            queue.put(None)
        for thread in threads:
            thread.join()
    if failures:
        raise failures[0]
    if progress is not None and done + len(written) != reported:
        progress("writing", done + len(written), total)
    return written


def _guarded(workdir: str, path: str, call: Callable[..., Any], *args: Any) -> Any:
    try:
        return call(*args)
    except OSError as exc:
        raise WorktreeWriteError(os.path.join(workdir, path), exc.strerror or str(exc)) from exc


class _Directories:
    """Descriptors of the directories a restore writes into, opened one component at a time from
    the worktree root with ``O_NOFOLLOW``; the chain to the current directory stays open, so files
    written in path order cost one ``open`` per directory, not per file."""

    def __init__(self, workdir: str) -> None:
        self.root = os.open(workdir, _OPEN_DIR)
        self.chain: list[tuple[str, int]] = []  # (component, descriptor), each inside the previous
        self.last: str | None = None  # the folder the chain leads to (None: not known)

    def __enter__(self) -> _Directories:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close_all()
        os.close(self.root)

    def close_all(self) -> None:
        self.last = None
        while self.chain:
            os.close(self.chain.pop()[1])

    def _trim(self, keep: int) -> None:
        self.last = None
        while len(self.chain) > keep:
            os.close(self.chain.pop()[1])

    def open(self, path: str, folder: str, create: bool) -> int | None:
        """The descriptor of ``folder`` (``""``: the root), creating missing directories when
        ``create``; ``None`` when it does not exist and ``create`` is false. A symbolic link or a
        file where a directory must be is :class:`UnsafeTreeError` (``path`` is the file wanted)."""
        if folder == self.last:  # files written in path order: mostly the folder of the one before
            return self.chain[-1][1] if self.chain else self.root
        parts = folder.split("/") if folder else []
        keep = 0
        while keep < len(self.chain) and keep < len(parts) and self.chain[keep][0] == parts[keep]:
            keep += 1
        self._trim(keep)
        for i in range(keep, len(parts)):
            parent = self.chain[-1][1] if self.chain else self.root
            name = parts[i]
            try:
                fd = _open_dir(name, parent, create)
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
                    raise
                anc = "/".join(parts[:i + 1])
                if stat.S_ISLNK(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode):
                    raise UnsafeTreeError(path, f"{anc} is a symbolic link; refusing to write through it") from None
                raise UnsafeTreeError(path, f"{anc} is a file where a directory is needed") from None
            if fd is None:
                return None
            self.chain.append((name, fd))
        self.last = folder
        return self.chain[-1][1] if self.chain else self.root

    def delete(self, path: str) -> None:
        """Remove the file or link ``path`` (never following a link), then the directories it
        leaves empty."""
        folder, _, name = path.rpartition("/")
        fd = self.open(path, folder, create=False)
        if fd is None:
            return
        try:
            os.unlink(name, dir_fd=fd)
        except (FileNotFoundError, IsADirectoryError):
            return  # gone, or a directory now: not the file the plan saw
        except PermissionError:
            if not stat.S_ISDIR(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode):
                raise
            return
        while self.chain:
            name, child = self.chain[-1]
            parent = self.chain[-2][1] if len(self.chain) > 1 else self.root
            try:
                os.rmdir(name, dir_fd=parent)
            except OSError:
                return  # not empty (or not ours to remove): stop climbing
            os.close(child)
            self.chain.pop()
            self.last = None


def _remove_empty_tree(parent: int, name: str) -> None:
    """Remove the directory ``name`` in ``parent`` and the empty directories below it (never
    following a link); a file left inside makes it fail with ``OSError``."""
    for _root, dirs, _files, fd in os.fwalk(name, topdown=False, dir_fd=parent):
        for sub in dirs:
            os.rmdir(sub, dir_fd=fd)
    os.rmdir(name, dir_fd=parent)


def _open_dir(name: str, parent: int, create: bool) -> int | None:
    """A descriptor of directory ``name`` in ``parent`` (never through a link), made when missing
    and ``create`` (``None`` when missing otherwise)."""
    try:
        return os.open(name, _OPEN_DIR, dir_fd=parent)
    except FileNotFoundError:
        if not create:
            return None
    try:
        os.mkdir(name, 0o777, dir_fd=parent)
    except FileExistsError:
        pass  # made meanwhile (by the other writer of a parallel restore), or not a directory: the open says
    return os.open(name, _OPEN_DIR, dir_fd=parent)


#: Largest file (before and after) a restore rewrites in place (see :func:`_overwrite`).
INPLACE_MAX = 1 << 20
_OPEN_EXISTING = (os.O_WRONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
                  | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))


def _overwrite(parent: int, name: str, job: _Job) -> os.stat_result | None:
    """Rewrite an existing small file in place: write the new bytes over the old ones, then cut
    the file to their length; returns its ``fstat``, or ``None`` where this does not apply and the
    file is replaced as git's checkout replaces it (:func:`_place`).

    Why: freeing a file's blocks is what an unlink costs most (on a file system mounted with
    ``discard`` each freed block is trimmed, some 0.1 ms a file), and rewriting the blocks a file
    has frees none. It applies only where the result holds what git's checkout would leave: a
    regular, non-executable file (mode 100644 before and after: a mode change, an executable that
    may be running, a link or anything else is replaced), with one link (the bytes of another name
    of it stay as they are), at most :data:`INPLACE_MAX` bytes before and after, its owner allowed
    to write it (a read-only file is replaced, as git replaces it, and comes back with the usual
    permissions even for root, whom no mode stops). Such a file keeps its inode, owner and
    permission bits (git's new file would get the umask's). The descriptor is checked to be that
    file (``O_NOFOLLOW``, ``O_NONBLOCK`` so a FIFO swapped in never blocks). A failed write leaves
    the file removed, as a failed create does."""
    if os.name != "posix" or job.mode != MODE_BLOB or job.data is None or len(job.data) > INPLACE_MAX:
        return None
    try:
        before = os.stat(name, dir_fd=parent, follow_symlinks=False)
    except OSError:
        return None
    if not _rewritable(before):
        return None
    try:
        fd = os.open(name, _OPEN_EXISTING, dir_fd=parent)
    except OSError:
        return None  # not writable, gone, swapped for a link: replaced instead
    try:
        st = os.fstat(fd)
        if not (_rewritable(st) and (st.st_dev, st.st_ino) == (before.st_dev, before.st_ino)):
            return None
        try:
            write_all(fd, job.data)
            os.ftruncate(fd, len(job.data))
            return os.fstat(fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=parent)
            raise
    finally:
        os.close(fd)


def _rewritable(st: os.stat_result) -> bool:
    """A regular, non-executable, owner-writable file with one link, at most :data:`INPLACE_MAX`."""
    return (stat.S_ISREG(st.st_mode) and not st.st_mode & 0o111 and st.st_mode & 0o200 != 0
            and st.st_nlink == 1 and st.st_size <= INPLACE_MAX)


def _in_place(dirs: _Directories, job: _Job) -> os.stat_result | None:
    """:func:`_overwrite` of the file of ``job`` in its folder, where both exist."""
    folder, _, name = job.path.rpartition("/")
    parent = dirs.open(job.path, folder, create=False)
    return None if parent is None else _overwrite(parent, name, job)


def _place(dirs: _Directories, common_dir: str, job: _Job, in_place: bool = True) -> os.stat_result:
    """Write one file: a small one in place where the result is what git's checkout would leave
    (:func:`_overwrite`; not tried again when ``in_place`` is false), else as git's checkout does:
    unlink what is there, create it ``O_EXCL`` with ``O_NOFOLLOW`` in its directory's descriptor,
    write. Returns its ``lstat``."""
    path = job.path
    folder, _, name = path.rpartition("/")
    parent = dirs.open(path, folder, create=True)
    assert parent is not None
    if in_place:
        done = _overwrite(parent, name, job)
        if done is not None:
            return done
    try:
        os.unlink(name, dir_fd=parent)
    except FileNotFoundError:
        pass
    except (IsADirectoryError, PermissionError) as exc:
        if not stat.S_ISDIR(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode):
            raise
        try:
            _remove_empty_tree(parent, name)  # a directory replaced by a file: its files were deleted above
        except OSError:
            raise exc from None
    if job.mode == MODE_LINK:
        assert job.data is not None
        os.symlink(job.data, name, dir_fd=parent)
        return os.stat(name, dir_fd=parent, follow_symlinks=False)
    fd = os.open(name, _CREATE, 0o777 if job.mode == MODE_EXEC else 0o666, dir_fd=parent)
    try:
        if job.data is not None:
            write_all(fd, job.data)
        else:
            _stream_big(common_dir, job.oid, fd)
        st = os.fstat(fd)
    except BaseException:
        os.close(fd)
        os.unlink(name, dir_fd=parent)
        raise
    os.close(fd)
    return st


#: What ``git cat-file`` is given to stream a packed big blob: git streams an undeltified packed
#: blob above ``core.bigFileThreshold`` (its default, 512 MiB, would have it read the blob whole,
#: twice over), through pack windows of ``core.packedGitWindowSize`` that it unmaps beyond
#: ``core.packedGitLimit`` (by default it keeps the whole pack mapped and resident).
_STREAM_CONFIG = ("-c", f"core.bigFileThreshold={BIG_BLOB}", "-c", "core.packedGitWindowSize=1m",
                  "-c", "core.packedGitLimit=16m")


def _stream_big(common_dir: str, oid: str, fd: int) -> None:
    """Stream a blob larger than :data:`BIG_BLOB` into ``fd``: a loose one inflated here in 1 MiB
    chunks, a packed one written by ``git cat-file`` (:data:`_STREAM_CONFIG`: streamed by git
    unless stored as a delta). Neither process holds the blob whole."""
    loose = os.path.join(common_dir, "objects", oid[:2], oid[2:])
    if os.path.exists(loose):
        _stream_loose(loose, fd)
    else:
        proc = subprocess.run(["git", *_STREAM_CONFIG, f"--git-dir={common_dir}", "cat-file", "blob", oid],
                              stdout=fd, stderr=subprocess.PIPE, check=False)
        if proc.returncode != 0:
            raise CorruptObjectError(oid, proc.stderr.decode(errors="replace").strip() or "unreadable blob")


def _stream_loose(loose: str, fd: int) -> None:
    inflater = zlib.decompressobj()
    header_done = False
    with open(loose, "rb") as fh:
        while True:
            chunk = fh.read(_CHUNK)
            if not chunk:
                break
            out = inflater.decompress(chunk, _CHUNK)
            while True:
                if not header_done:
                    nul = out.find(b"\0")
                    if nul < 0:
                        raise CorruptObjectError(os.path.basename(loose), "loose object header too long")
                    out = out[nul + 1:]
                    header_done = True
                write_all(fd, out)
                if not inflater.unconsumed_tail:
                    break
                out = inflater.decompress(inflater.unconsumed_tail, _CHUNK)
        write_all(fd, inflater.flush())


SAFETY_BRANCH = "restore-safety"
SAFETY_TRIGGER = "restore_safety"


def check_paths_known(reader: ObjectReader, cp: Checkpoint, tree: str, workdir: str, wanted: Sequence[str]) -> None:
    """Refuse (:class:`UsageError`) a path given to a restore that names nothing: neither a file or
    folder of the snapshot ``tree`` nor anything in the worktree (a mistyped path would otherwise
    restore nothing and say so quietly, where ``git checkout`` reports a pathspec that matched no
    file)."""
    for path in wanted:
        if path and not os.path.lexists(os.path.join(workdir, *path.split("/"))) and find_entry(reader, tree, path) is None:
            raise UsageError(f"path {path!r} is neither in the snapshot of checkpoint {cp.short_id} "
                             "nor in the worktree")


def restore_scope(cp: Checkpoint, wanted: Sequence[str] | None) -> list[str] | None:
    """The worktree paths a restore of ``cp`` may touch (``None``: all of them).

    A partial snapshot (``files=[paths]``, recorded as :attr:`Checkpoint.files_paths`) says nothing
    about files outside its paths, so the restore is limited to them; ``wanted`` (normalised
    user paths, ``""`` for the whole worktree) narrows that further. A wanted path that lies wholly
    outside the snapshot's paths is refused (:class:`UsageError`) rather than silently skipped."""
    scope = cp.files_paths
    if scope is not None and "" in scope:
        scope = None
    if wanted is None or "" in wanted:
        return None if scope is None else sorted(set(scope))
    if scope is None:
        return sorted(set(wanted))
    out: set[str] = set()
    for path in wanted:
        inside = [s for s in scope if matches(s, [path])]  # captured paths under the wanted one
        if matches(path, scope):
            out.add(path)
        elif inside:
            out.update(inside)
        else:
            raise UsageError(f"checkpoint {cp.short_id} captured only {', '.join(sorted(scope))}; "
                             f"{path!r} is not in its snapshot")
    return sorted(out)
