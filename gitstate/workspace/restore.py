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
written: each through a temporary file in the same directory and an atomic rename, parents checked
with ``lstat`` so no write follows a symbolic link. HEAD and the user's index are never touched.
Large blobs are streamed from the object store, never read whole into memory."""

from __future__ import annotations

import os
import secrets
import subprocess
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pygit2
from pygit2.enums import FilterMode, ObjectType

from gitstate.errors import (
    CorruptObjectError,
    UnsafeTreeError,
    UsageError,
)
from gitstate.format.checkpoint import Checkpoint
from gitstate.git.objects import MODE_COMMIT, MODE_EXEC, MODE_LINK, MODE_TREE, write_all
from gitstate.git.reader import ObjectReader, TreeData
from gitstate.workspace.pathsafety import check_name, hfs_fold
from gitstate.workspace.snapshot import BIG_BLOB, matches

_CHUNK = 1 << 20


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

    @property
    def paths(self) -> tuple[str, ...]:
        """Every path the restore touches, sorted."""
        return tuple(sorted({*self.changed, *self.added, *self.removed}))

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly form."""
        return {
            "checkpoint": self.checkpoint, "changed": list(self.changed), "added": list(self.added),
            "removed": list(self.removed), "safety": self.safety, "safety_branch": self.safety_branch,
            "dry_run": self.dry_run, "skipped": list(self.skipped), "unsaved": list(self.unsaved),
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


def validate_tree(reader: ObjectReader, tree_id: str) -> None:
    """Raise :class:`UnsafeTreeError` unless every entry of the tree may be written: safe names,
    no duplicates, no case-folding collisions with links, directories that are trees, file entries
    that are blobs, at most :data:`MAX_TREE_DEPTH` levels. Iterative; each tree is read once."""
    seen: set[str] = set()
    todo: list[tuple[str, str, int]] = [(tree_id, "", 0)]
    while todo:
        current, prefix, depth = todo.pop()
        if current in seen:
            continue
        if depth > MAX_TREE_DEPTH:
            raise UnsafeTreeError(prefix.rstrip("/"), f"directories nested deeper than {MAX_TREE_DEPTH} levels")
        kind, _size = reader.header(current)
        if kind != ObjectType.TREE:
            if prefix:
                raise UnsafeTreeError(prefix.rstrip("/"), "directory entry does not point at a tree")
            raise CorruptObjectError(current, "snapshot is not a tree")
        names: dict[str, int] = {}
        folded: dict[str, int] = {}
        for entry in reader.tree(current):
            name = entry.name
            path = prefix + name
            reason = check_name(name, entry.filemode)
            if reason is not None:
                raise UnsafeTreeError(path, reason)
            if name in names:
                raise UnsafeTreeError(path, "duplicate entry name in one tree")
            key = hfs_fold(name)
            if key in folded and MODE_LINK in (entry.filemode, folded[key]):
                raise UnsafeTreeError(path, "entry collides with a symbolic link on a case-insensitive file system")
            names[name] = entry.filemode
            folded[key] = entry.filemode
            if entry.filemode == MODE_TREE:
                todo.append((entry.id, path + "/", depth + 1))
        seen.add(current)


def check_blobs(reader: ObjectReader, plan: Plan) -> None:
    """Refuse a plan that would write a file or link from an object that is not a blob (a crafted
    tree can give a file mode to a tree id; its raw bytes must never land on disk)."""
    for path, (oid, mode) in plan.writes.items():
        if mode != MODE_COMMIT and reader.header(oid)[0] != ObjectType.BLOB:
            raise UnsafeTreeError(path, "file entry does not point at a blob")


# -- planning ------------------------------------------------------------------------------------

def make_plan(repo: pygit2.Repository, current: str, target: str, prefixes: Sequence[str] | None) -> Plan:
    """The diff from the current worktree tree to the snapshot tree, limited to ``prefixes``."""
    old_tree, new_tree = repo[current], repo[target]
    assert isinstance(old_tree, pygit2.Tree) and isinstance(new_tree, pygit2.Tree)
    diff = old_tree.diff_to_tree(new_tree)
    old: dict[str, tuple[str, int]] = {}
    new: dict[str, tuple[str, int]] = {}
    for delta in diff.deltas:
        if delta.old_file.mode and delta.status_char() != "A":
            old[delta.old_file.path] = (str(delta.old_file.id), int(delta.old_file.mode))
        if delta.new_file.mode and delta.status_char() != "D":
            new[delta.new_file.path] = (str(delta.new_file.id), int(delta.new_file.mode))
    if prefixes is not None:
        old = {p: v for p, v in old.items() if matches(p, prefixes)}
        new = {p: v for p, v in new.items() if matches(p, prefixes)}
    deletes = sorted(p for p in old if p not in new)
    return Plan(writes=new, deletes=deletes, current=old)


def _ancestors(path: str) -> list[str]:
    parts = path.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts))]


def find_obstacles(workdir: str, plan: Plan) -> list[str]:
    """Paths in the way of a write that are not the user's captured files (ignored files, nested
    repositories, non-empty directories, a symlink or file where a directory must go)."""
    deleting = set(plan.deletes)
    blocked: list[str] = []
    for path in plan.writes:
        full = os.path.join(workdir, path)
        for anc in _ancestors(path):
            afull = os.path.join(workdir, anc)
            if not os.path.lexists(afull):
                break
            if os.path.islink(afull) or not os.path.isdir(afull):
                if anc not in deleting:
                    blocked.append(anc)
                break
            if os.path.lexists(os.path.join(afull, ".git")):
                blocked.append(anc)
                break
        if path in plan.current or not os.path.lexists(full):
            continue
        if os.path.isdir(full) and not os.path.islink(full):
            for root, _dirs, files in os.walk(full):
                for name in files:
                    rel = os.path.relpath(os.path.join(root, name), workdir).replace(os.sep, "/")
                    if rel not in deleting:
                        blocked.append(rel)
        else:
            blocked.append(path)
    return sorted(set(blocked))


def unsaved(reader: ObjectReader, plan: Plan, saved_trees: Iterable[str]) -> list[str]:
    """Paths the restore would overwrite or delete whose current content no saved tree holds."""
    pending = {p: plan.current[p] for p in (*plan.changed, *plan.deletes)}
    trees: dict[str, TreeData] = {}

    def lookup(tree_id: str, path: str) -> tuple[str, int] | None:
        for part in path.split("/"):
            tree = trees.get(tree_id)
            if tree is None:
                tree = trees[tree_id] = reader.tree(tree_id)
            entry = tree.get(part)
            if entry is None:
                return None
            tree_id, found = entry.id, (entry.id, entry.filemode)
        return found

    for tree_id in saved_trees:
        if not pending:
            break
        for path in list(pending):
            if lookup(tree_id, path) == pending[path]:
                del pending[path]
    return sorted(pending)


# -- applying ------------------------------------------------------------------------------------

def apply(repo: pygit2.Repository, common_dir: str, workdir: str, plan: Plan,
          progress: Callable[[int], None] | None = None) -> None:
    """Carry the plan out: deletions first (deepest first), then writes (``progress(1)`` per path)."""
    tick = progress or (lambda n: None)
    for path in sorted(plan.deletes, key=lambda p: (-p.count("/"), p)):
        full = os.path.join(workdir, path)
        _check_parents(workdir, path)
        try:
            os.unlink(full)
        except FileNotFoundError:
            pass
        _prune_empty_dirs(workdir, path)
        tick(1)
    for path in sorted(plan.writes):
        oid, mode = plan.writes[path]
        _write(repo, common_dir, workdir, path, oid, mode)
        tick(1)


def _check_parents(workdir: str, path: str) -> None:
    for anc in _ancestors(path):
        full = os.path.join(workdir, anc)
        if os.path.islink(full):
            raise UnsafeTreeError(path, f"{anc} is a symbolic link; refusing to write through it")


def _prune_empty_dirs(workdir: str, path: str) -> None:
    for anc in reversed(_ancestors(path)):
        try:
            os.rmdir(os.path.join(workdir, anc))
        except OSError:
            return


def _make_parents(workdir: str, path: str) -> None:
    for anc in _ancestors(path):
        full = os.path.join(workdir, anc)
        if os.path.islink(full):
            raise UnsafeTreeError(path, f"{anc} is a symbolic link; refusing to write through it")
        if not os.path.lexists(full):
            os.mkdir(full)
        elif not os.path.isdir(full):
            raise UnsafeTreeError(path, f"{anc} is a file where a directory is needed")


def _remove_empty_tree(full: str) -> None:
    for root, dirs, _files in os.walk(full, topdown=False):
        for name in dirs:
            os.rmdir(os.path.join(root, name))
    os.rmdir(full)


def _write(repo: pygit2.Repository, common_dir: str, workdir: str, path: str, oid: str, mode: int) -> None:
    _make_parents(workdir, path)
    full = os.path.join(workdir, path)
    if os.path.isdir(full) and not os.path.islink(full):
        _remove_empty_tree(full)  # a directory replaced by a file: its files were deleted above
    tmp = os.path.join(os.path.dirname(full), f".gitstate-restore-{secrets.token_hex(6)}")
    if mode == MODE_LINK:
        target = _blob_bytes(repo, oid)
        os.symlink(target, tmp)
    else:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0),
                     0o777 if mode == MODE_EXEC else 0o666)
        try:
            _write_blob(repo, common_dir, path, oid, fd)
        except BaseException:
            os.close(fd)
            os.unlink(tmp)
            raise
        os.close(fd)
    os.replace(tmp, full)


def _blob_bytes(repo: pygit2.Repository, oid: str) -> bytes:
    return ObjectReader(repo).blob(oid)


def _write_blob(repo: pygit2.Repository, common_dir: str, path: str, oid: str, fd: int) -> None:
    _kind, size = ObjectReader(repo).header(oid)
    if size <= BIG_BLOB:
        data = _blob_bytes(repo, oid)
        filters = repo.load_filter_list(path, FilterMode.TO_WORKTREE)
        if filters is not None and len(filters) and b"\0" not in data:
            data = filters.apply_to_buffer(data)
        write_all(fd, data)
        return
    loose = os.path.join(common_dir, "objects", oid[:2], oid[2:])
    if os.path.exists(loose):
        _stream_loose(loose, fd)
    else:  # packed: git streams undeltified big blobs (core.bigFileThreshold)
        proc = subprocess.run(["git", f"--git-dir={common_dir}", "cat-file", "blob", oid], stdout=fd,
                              stderr=subprocess.PIPE, check=False)
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
