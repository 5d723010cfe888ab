"""Read-only views of checkpoints for display: the files a workspace snapshot holds."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pygit2

from gitstate.format.checkpoint import Checkpoint
from gitstate.format.statetree import StateReader


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
