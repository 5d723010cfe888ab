"""Differences between two checkpoints: which state keys were added, removed or changed (with the
old and new values) and which workspace files were added, modified, deleted or renamed.

State trees are compared entry by entry: a key whose entry keeps its object id is unchanged and is
neither read nor decoded, so comparing two checkpoints of a large state costs about the size of what
changed. Files are compared with libgit2's tree diff (equal subtrees skipped the same way), after
:func:`check_changed` read what differs through the guarded reader (trees, and blob headers only).

Renames are found as git's diff finds them, bounded as git bounds them: a deleted file and an added
file with the same blob are a rename (matched by id, no content read); the files left are compared
by content (libgit2's ``find_similar``, which reads each candidate blob whole to sign it, one or
two at a time) only when ``deleted × added ≤ limit²`` (git's bound) and ``deleted + added ≤ 4 × limit``
(libgit2 signs every candidate: 100,000 added files took seconds against a handful deleted), where the
limit is the repository's ``diff.renameLimit`` (default :data:`RENAME_LIMIT`, git's; 0: no limit). Above it that comparison is skipped and the
result says so (:attr:`Diff.renames_skipped`): those files show as deleted and added. Blobs larger
than :data:`RENAME_MAX_BLOB` are never compared by content (a renamed and edited one shows as
deleted and added): a diff reads no blob larger than that, and no file's content is shown (the
result holds ids, modes and paths)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pygit2
from pygit2.enums import DiffFind

from gitstate.errors import CorruptObjectError
from gitstate.format import checkpoint as cpfmt
from gitstate.format import lgtree
from gitstate.format.checkpoint import Checkpoint
from gitstate.format.statetree import StateReader
from gitstate.git.objects import MODE_BLOB, MODE_EXEC
from gitstate.git.reader import ObjectReader
from gitstate.workspace.snapshot import BIG_BLOB

#: Rename limit when the repository sets no ``diff.renameLimit`` (git's default for diff).
RENAME_LIMIT = 1000
#: Largest blob compared by content to find a rename (exact renames of larger ones are still found).
RENAME_MAX_BLOB = BIG_BLOB

_STATUS = {"A": "added", "D": "deleted", "M": "modified", "R": "renamed", "T": "modified", "C": "added"}


@dataclass(frozen=True)
class KeyChange:
    """One top-level state key that differs: ``kind`` is ``added``, ``removed`` or ``changed``;
    ``old``/``new`` are the decoded values (``None`` on the side where the key is absent). A state
    that is not a mapping is reported as the single key ``""``."""

    key: str
    kind: str
    old: Any = None
    new: Any = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly form (values as decoded)."""
        return {"key": self.key, "kind": self.kind, "old": self.old, "new": self.new}


@dataclass(frozen=True)
class FileChange:
    """One workspace file that differs: ``status`` is ``added``, ``modified``, ``deleted`` or
    ``renamed`` (then ``old_path`` is where it came from and ``similarity`` the percentage)."""

    path: str
    status: str
    old_path: str | None = None
    old_id: str | None = None
    new_id: str | None = None
    old_mode: int | None = None
    new_mode: int | None = None
    similarity: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly form (modes as octal strings)."""
        return {
            "path": self.path, "status": self.status, "old_path": self.old_path, "old_id": self.old_id,
            "new_id": self.new_id, "old_mode": None if self.old_mode is None else f"{self.old_mode:o}",
            "new_mode": None if self.new_mode is None else f"{self.new_mode:o}", "similarity": self.similarity,
        }


@dataclass(frozen=True)
class Diff:
    """Differences from checkpoint ``a`` to checkpoint ``b``. ``files_compared`` is false when
    neither checkpoint carries a workspace snapshot (a missing snapshot on one side counts as an
    empty worktree). ``renames_skipped`` is true when too many files were added and deleted to
    compare them by content for renames (``diff.renameLimit``, as git's diff): only files that
    kept their exact content are shown as renamed, the others as deleted and added."""

    a: str
    b: str
    state: tuple[KeyChange, ...] = ()
    files: tuple[FileChange, ...] = ()
    files_compared: bool = True
    renames_skipped: bool = False

    @property
    def empty(self) -> bool:
        """True when neither state nor files differ."""
        return not self.state and not self.files

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly form (``--json`` shape)."""
        return {
            "a": self.a, "b": self.b, "state": [c.to_dict() for c in self.state],
            "files": [f.to_dict() for f in self.files], "files_compared": self.files_compared,
            "renames_skipped": self.renames_skipped,
        }


def _state_root(reader: ObjectReader, tree_id: str) -> tuple[str, str] | None:
    root = reader.tree(tree_id)
    for kind, name in (("tree", cpfmt.STATE_TREE), ("langgraph", lgtree.LG_TREE), ("leaf", cpfmt.STATE_LEAF)):
        entry = root.get(name)
        if entry is not None and (kind != "langgraph" or entry.type_str == "tree"):
            return (kind, entry.id)
    return None


def _diff_channels(reader: ObjectReader, a: str, b: str) -> list[KeyChange]:
    """Channels that differ between two LangGraph values trees (values as shown for display; the
    scheduling channels left out, as :func:`gitstate.format.lgtree.shown_entries`); an entry that
    keeps its id is unchanged and not read."""
    ea, eb = lgtree.shown_entries(reader, a), lgtree.shown_entries(reader, b)
    out: list[KeyChange] = []
    for key in sorted(set(ea) | set(eb)):
        va, vb = ea.get(key), eb.get(key)
        if va == vb:
            continue
        old = None if va is None else lgtree.show_entry(reader, *va)
        new = None if vb is None else lgtree.show_entry(reader, *vb)
        if va is None:
            out.append(KeyChange(key, "added", None, new))
        elif vb is None:
            out.append(KeyChange(key, "removed", old, None))
        elif old != new or type(old) is not type(new):
            out.append(KeyChange(key, "changed", old, new))
    return out


def diff_state(objects: ObjectReader, a: Checkpoint, b: Checkpoint) -> list[KeyChange]:
    """Top-level state keys (a LangGraph checkpoint's channels) that differ between two checkpoints."""
    reader = StateReader(objects)
    ra, rb = _state_root(objects, a.tree_id), _state_root(objects, b.tree_id)
    if ra == rb:
        return []
    if ra is not None and rb is not None and ra[0] == rb[0] == "langgraph":
        return _diff_channels(objects, ra[1], rb[1])
    if ra is None or rb is None or ra[0] != "tree" or rb[0] != "tree":
        old = None if ra is None else a.state
        new = None if rb is None else b.state
        return [KeyChange("", "changed", old, new)]
    ea, eb = reader.entries(ra[1]), reader.entries(rb[1])
    out: list[KeyChange] = []
    for key in sorted(set(ea) | set(eb)):
        va, vb = ea.get(key), eb.get(key)
        if va == vb:
            continue  # same id: unchanged, not decoded
        if va is None:
            assert vb is not None
            out.append(KeyChange(key, "added", None, reader.value(*vb)))
        elif vb is None:
            out.append(KeyChange(key, "removed", reader.value(*va), None))
        else:
            old, new = reader.value(*va), reader.value(*vb)
            if old != new or type(old) is not type(new):
                out.append(KeyChange(key, "changed", old, new))
    return out


def _tree(repo: pygit2.Repository, oid: str | None) -> pygit2.Tree:
    tree = repo[oid]  # type: ignore[index]
    assert isinstance(tree, pygit2.Tree)
    return tree


def check_changed(reader: ObjectReader, a: str | None, b: str | None, max_depth: int = 512) -> dict[str, int]:
    """Read, through the guarded reader, every tree and blob header that differs between two trees
    (equal subtrees skipped), so libgit2's diff and rename detection only touch sound objects: a
    damaged one is a :class:`CorruptObjectError` here instead of a hang there. Returns the size of
    each of those blobs, by id (no blob content is read)."""
    sizes: dict[str, int] = {}
    todo: list[tuple[str | None, str | None, int]] = [(a, b, 0)]
    while todo:
        left, right, depth = todo.pop()
        if depth > max_depth:
            raise CorruptObjectError(right or left or "?", f"trees nested deeper than {max_depth} levels")
        ta = {e.name: e for e in reader.tree(left)} if left else {}
        tb = {e.name: e for e in reader.tree(right)} if right else {}
        for name in ta.keys() | tb.keys():
            ea, eb = ta.get(name), tb.get(name)
            if ea is not None and eb is not None and ea.id == eb.id:
                continue
            sub_a = ea.id if ea is not None and ea.type_str == "tree" else None
            sub_b = eb.id if eb is not None and eb.type_str == "tree" else None
            if sub_a or sub_b:
                todo.append((sub_a, sub_b, depth + 1))
            for entry in (ea, eb):
                if entry is not None and entry.type_str == "blob" and entry.id not in sizes:
                    sizes[entry.id] = reader.header(entry.id)[1]
    return sizes


def rename_limit(repo: pygit2.Repository) -> int:
    """The repository's ``diff.renameLimit`` (0: no limit), else :data:`RENAME_LIMIT`."""
    try:
        value = repo.config.get_int("diff.renameLimit")
    except (KeyError, ValueError, pygit2.GitError):
        return RENAME_LIMIT
    return value if value >= 0 else RENAME_LIMIT


_FILE_MODES = (MODE_BLOB, MODE_EXEC)  # what git's rename detection pairs (not links, not gitlinks)


@dataclass(frozen=True)
class FileDiff:
    """What :func:`diff_files` found: the changes, sorted by path, and whether the comparison by
    content for renames was skipped (too many added × deleted files for the rename limit)."""

    changes: tuple[FileChange, ...]
    renames_skipped: bool = False


def _change(delta: Any, status: str) -> FileChange:
    old, new = delta.old_file, delta.new_file
    added, deleted = status == "added", status == "deleted"
    return FileChange(
        path=old.path if deleted else new.path, status=status,
        old_id=None if added else str(old.id), new_id=None if deleted else str(new.id),
        old_mode=None if added else int(old.mode), new_mode=None if deleted else int(new.mode),
    )


def diff_files(reader: ObjectReader, a: str | None, b: str | None, limit: int | None = None) -> FileDiff:
    """Files that differ between two snapshot trees (``None``: no snapshot, an empty tree), renames
    found as the module docstring says; ``limit``: the rename limit (default: :func:`rename_limit`)."""
    if a == b:
        return FileDiff(())
    sizes = check_changed(reader, a, b)
    repo = reader.repo
    if a is None or b is None:  # one side empty: every file added, or every one deleted
        whole = _tree(repo, b if a is None else a).diff_to_tree(swap=a is None)
        return FileDiff(tuple(sorted((_change(d, _STATUS.get(d.status_char(), "modified")) for d in whole.deltas),
                                     key=lambda c: c.path)))
    raw = _tree(repo, a).diff_to_tree(_tree(repo, b))
    out: dict[tuple[str, bool], FileChange] = {}  # (path, deleted) -> change: a type change is both
    sources: dict[str, Any] = {}  # deleted files that may have been renamed, by path
    targets: dict[str, Any] = {}  # added files that may be renames
    for delta in raw.deltas:
        status = _STATUS.get(delta.status_char(), "modified")
        change = _change(delta, status)
        out[(change.path, status == "deleted")] = change
        if status == "deleted" and change.old_mode in _FILE_MODES:
            sources[change.path] = delta.old_file
        elif status == "added" and change.new_mode in _FILE_MODES:
            targets[change.path] = delta.new_file
    renames: dict[str, tuple[str, int]] = {}  # target path -> (source path, similarity)
    by_id: dict[str, list[str]] = {}
    for path in sorted(sources):
        by_id.setdefault(str(sources[path].id), []).append(path)
    for path in sorted(targets):  # exact renames: the same blob, no content read (git pairs these first)
        same = by_id.get(str(targets[path].id))
        if same:
            renames[path] = (same.pop(0), 100)
    if limit is None:
        limit = rename_limit(repo)
    paired = {source for source, _ in renames.values()}
    left_src = {p: f for p, f in sources.items() if p not in paired}
    left_tgt = {p: f for p, f in targets.items() if p not in renames}
    # git's bound on the comparisons (sources x targets <= limit squared), and one on the files
    # compared (libgit2 reads and signs every candidate, so 100,000 added files cost seconds even
    # against a handful of deleted ones): at most four times the limit in all
    skipped = bool(left_src and left_tgt and limit and (len(left_src) * len(left_tgt) > limit * limit
                                                        or len(left_src) + len(left_tgt) > 4 * limit))
    if left_src and left_tgt and not skipped:
        renames.update(_similar(repo, a, b, sources, targets, renames, sizes, limit))
    for target, (source, similarity) in renames.items():
        gone, new = out.pop((source, True)), out[(target, False)]
        out[(target, False)] = FileChange(path=target, status="renamed", old_path=source, old_id=gone.old_id,
                                          new_id=new.new_id, old_mode=gone.old_mode, new_mode=new.new_mode,
                                          similarity=similarity)
    return FileDiff(tuple(sorted(out.values(), key=lambda c: c.path)), skipped)


def _similar(repo: pygit2.Repository, a: str, b: str, sources: dict[str, Any], targets: dict[str, Any],
             exact: dict[str, tuple[str, int]], sizes: dict[str, int], limit: int) -> dict[str, tuple[str, int]]:
    """Renames found by content (libgit2's ``find_similar``) among the deleted ``sources`` and added
    ``targets`` that are not ``exact`` renames and hold at most :data:`RENAME_MAX_BLOB` bytes.

    libgit2 is shown only those files: its diff goes from tree ``a`` to an in-memory index of ``b``
    in which every other added file is left out and every other deleted file is put back as it
    was, so its work (it reads each candidate blob whole to sign it, then compares signatures) is
    theirs, not the whole diff's. (A put-back file where ``b`` has a folder of that name replaces
    the folder's entries in the index: those are then not compared, which costs a rename at most.)"""
    paired = {source for source, _ in exact.values()}

    def candidate(f: Any) -> bool:
        return sizes.get(str(f.id), RENAME_MAX_BLOB + 1) <= RENAME_MAX_BLOB

    cand_src = {p for p, f in sources.items() if p not in paired and candidate(f)}
    cand_tgt = {p for p, f in targets.items() if p not in exact and candidate(f)}
    if not cand_src or not cand_tgt:
        return {}
    index = pygit2.Index()
    index.read_tree(_tree(repo, b))
    for path in targets:
        if path not in cand_tgt:
            index.remove(path)
    for path, f in sources.items():
        if path not in cand_src:
            index.add(pygit2.IndexEntry(path, f.id, f.mode))
    diff = _tree(repo, a).diff_to_index(index)
    diff.find_similar(flags=DiffFind.FIND_RENAMES, rename_limit=max(limit, len(cand_src), len(cand_tgt)))
    found: dict[str, tuple[str, int]] = {}
    for delta in diff.deltas:
        if delta.status_char() == "R" and delta.new_file.path in cand_tgt and delta.old_file.path in cand_src:
            found[delta.new_file.path] = (delta.old_file.path, int(delta.similarity))
    return found


def diff_checkpoints(reader: ObjectReader, a: Checkpoint, b: Checkpoint) -> Diff:
    """The full difference from ``a`` to ``b``."""
    fa, fb = a.files_tree_id, b.files_tree_id
    files = diff_files(reader, fa, fb)
    return Diff(a=a.id, b=b.id, state=tuple(diff_state(reader, a, b)), files=files.changes,
                files_compared=fa is not None or fb is not None, renames_skipped=files.renames_skipped)
