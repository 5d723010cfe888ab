"""Differences between two checkpoints: which state keys were added, removed or changed (with the
old and new values) and which workspace files were added, modified, deleted or renamed.

State trees are compared entry by entry: a key whose entry keeps its object id is unchanged and is
neither read nor decoded, so comparing two checkpoints of a large state costs about the size of what
changed. Files are compared with libgit2's tree diff (equal subtrees skipped the same way) and its
rename detection (``find_similar``), after :func:`check_changed` read what differs through the
guarded reader."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pygit2

from gitstate.errors import CorruptObjectError
from gitstate.format import checkpoint as cpfmt
from gitstate.format import lgtree
from gitstate.format.checkpoint import Checkpoint
from gitstate.format.statetree import StateReader
from gitstate.git.reader import ObjectReader

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
    empty worktree)."""

    a: str
    b: str
    state: tuple[KeyChange, ...] = ()
    files: tuple[FileChange, ...] = ()
    files_compared: bool = True

    @property
    def empty(self) -> bool:
        """True when neither state nor files differ."""
        return not self.state and not self.files

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly form (``--json`` shape)."""
        return {
            "a": self.a, "b": self.b, "state": [c.to_dict() for c in self.state],
            "files": [f.to_dict() for f in self.files], "files_compared": self.files_compared,
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


def check_changed(reader: ObjectReader, a: str | None, b: str | None, max_depth: int = 512) -> None:
    """Read, through the guarded reader, every tree and blob header that differs between two trees
    (equal subtrees skipped), so libgit2's diff and rename detection only touch sound objects: a
    damaged one is a :class:`CorruptObjectError` here instead of a hang there."""
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
                if entry is not None and entry.type_str == "blob":
                    reader.header(entry.id)


def diff_files(reader: ObjectReader, a: str | None, b: str | None) -> list[FileChange]:
    """Files that differ between two snapshot trees (``None``: no snapshot, an empty tree)."""
    if a == b:
        return []
    check_changed(reader, a, b)
    repo = reader.repo
    if a is None:
        diff = _tree(repo, b).diff_to_tree(swap=True)
    elif b is None:
        diff = _tree(repo, a).diff_to_tree()
    else:
        diff = _tree(repo, a).diff_to_tree(_tree(repo, b))
    diff.find_similar()
    out: list[FileChange] = []
    for delta in diff.deltas:
        status = _STATUS.get(delta.status_char(), "modified")
        old, new = delta.old_file, delta.new_file
        added, deleted = status == "added", status == "deleted"
        out.append(FileChange(
            path=old.path if deleted else new.path, status=status,
            old_path=old.path if status == "renamed" else None,
            old_id=None if added else str(old.id), new_id=None if deleted else str(new.id),
            old_mode=None if added else int(old.mode), new_mode=None if deleted else int(new.mode),
            similarity=delta.similarity if status == "renamed" else None,
        ))
    out.sort(key=lambda c: c.path)
    return out


def diff_checkpoints(reader: ObjectReader, a: Checkpoint, b: Checkpoint) -> Diff:
    """The full difference from ``a`` to ``b``."""
    fa, fb = a.files_tree_id, b.files_tree_id
    return Diff(a=a.id, b=b.id, state=tuple(diff_state(reader, a, b)),
                files=tuple(diff_files(reader, fa, fb)), files_compared=fa is not None or fb is not None)
