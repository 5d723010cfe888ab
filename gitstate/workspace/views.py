"""Read-only views of checkpoints for display: the files a workspace snapshot holds."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gitstate.format.checkpoint import Checkpoint
from gitstate.git import handles
from gitstate.workspace.restore import MAX_TREE_DEPTH


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
    reader = handles.reader(cp.repo_path)
    out: list[SnapshotFile] = []
    for path, entry in reader.walk_tree(tree_id, MAX_TREE_DEPTH):
        if entry.type_str == "blob":
            out.append(SnapshotFile(path, reader.header(entry.id)[1], entry.id, entry.filemode))
    out.sort(key=lambda f: f.path)
    return out
