"""The user's worktree as trees: snapshots through a private index, path safety, restore plans and
their application to disk, diffs and views of checkpoints. Knows nothing of runs or refs: the store
layer decides what to snapshot or restore and records it."""

import importlib
from typing import Any

# What users may use from this package (also exported by :mod:`gitstate` itself); imported on first
# use (PEP 562), so importing one module of the package does not import the others.
_PUBLIC = {"Diff": "diff", "FileChange": "diff", "KeyChange": "diff", "RestoreResult": "restore", "Snapshot": "snapshot", "Workspace": "snapshot"}
__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)
