"""Read-only views of checkpoints for display: the files a snapshot holds, and a key-level state
diff (used when the store offers no richer :meth:`Store.diff`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pygit2

from .checkpoint import Checkpoint
from .statetree import StateReader


@dataclass(frozen=True)
class SnapshotFile:
    """One file of a checkpoint's workspace snapshot."""

    path: str
    size: int
    id: str
    mode: int

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return {"path": self.path, "size": self.size, "id": self.id, "mode": f"{self.mode:06o}"}


def snapshot_files(cp: Checkpoint) -> list[SnapshotFile]:
    """The files of ``cp``'s workspace snapshot (empty when it captured none), sorted by path."""
    tree_id = cp.files_tree_id
    if tree_id is None:
        return []
    repo = cp._repo
    out: list[SnapshotFile] = []
    stack: list[tuple[str, pygit2.Tree]] = [("", StateReader(repo).tree(tree_id))]
    while stack:
        prefix, tree = stack.pop()
        for entry in tree:
            path = prefix + (entry.name or "")
            if entry.type_str == "tree":
                stack.append((path + "/", StateReader(repo).tree(entry.id)))
            elif entry.type_str == "blob":
                size = repo.odb.read_header(entry.id)[1] if hasattr(repo.odb, "read_header") else 0
                out.append(SnapshotFile(path, size, str(entry.id), entry.filemode))
    out.sort(key=lambda f: f.path)
    return out


@dataclass(frozen=True)
class StateDiff:
    """Top-level state keys added, removed and changed between two checkpoints, and files."""

    a: str
    b: str
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    files_added: list[str] = field(default_factory=list)
    files_removed: list[str] = field(default_factory=list)
    files_changed: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form (the CLI's ``diff --json`` shape)."""
        return {
            "a": self.a, "b": self.b,
            "state": {"added": self.added, "removed": self.removed, "changed": self.changed},
            "files": {"added": self.files_added, "removed": self.files_removed, "changed": self.files_changed},
        }


def _keys(cp: Checkpoint) -> dict[str, str]:
    """Top-level key -> object id (equal ids mean equal values), without decoding values."""
    root = StateReader(cp._repo).tree(cp.tree_id)
    if "state" in root:
        return {k: oid for k, (_, oid) in StateReader(cp._repo).entries(root["state"].id).items()}
    state = cp.state
    return {"": repr(state)} if not isinstance(state, dict) else {k: repr(v) for k, v in state.items()}


def state_diff(a: Checkpoint, b: Checkpoint) -> StateDiff:
    """Compare two checkpoints key by key (by object id, so unchanged parts cost nothing)."""
    ka, kb = _keys(a), _keys(b)
    fa = {f.path: f.id for f in snapshot_files(a)}
    fb = {f.path: f.id for f in snapshot_files(b)}
    return StateDiff(
        a.id, b.id,
        added=sorted(set(kb) - set(ka)), removed=sorted(set(ka) - set(kb)),
        changed=sorted(k for k in set(ka) & set(kb) if ka[k] != kb[k]),
        files_added=sorted(set(fb) - set(fa)), files_removed=sorted(set(fa) - set(fb)),
        files_changed=sorted(p for p in set(fa) & set(fb) if fa[p] != fb[p]),
    )
