"""The user's worktree as trees: snapshots through a private index, path safety, restore plans and
their application to disk, diffs and views of checkpoints. Knows nothing of runs or refs: the store
layer decides what to snapshot or restore and records it."""

from gitstate.exports import lazy_getattr

# What users may use from this package (also exported by :mod:`gitstate` itself); imported on first
# use (PEP 562), so importing one module of the package does not import the others.
_PUBLIC = {"Diff": "diff", "FileChange": "diff", "KeyChange": "diff", "RestoreResult": "restore", "Snapshot": "snapshot", "Workspace": "snapshot"}
__all__ = sorted(_PUBLIC)

__getattr__ = lazy_getattr(__name__, _PUBLIC)
