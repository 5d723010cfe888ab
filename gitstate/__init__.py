"""gitstate: git-native storage for agent and workflow checkpoints.

Runs, branches, checkpoints, node boundaries and rollback are git objects under ``refs/agentos/``
in the user's own repository::

    import gitstate
    store = gitstate.open_store()
    run = store.create_run(workflow="triage")
    cp = run.checkpoint({"messages": []}, node="plan", trigger="tool_end")
"""

import importlib
from typing import TYPE_CHECKING, Any

from .errors import (
    AmbiguousReferenceError,
    BranchExistsError,
    BranchNotFound,
    CheckpointNotFound,
    ConflictError,
    CorruptObjectError,
    EncodingError,
    GitStateError,
    HookInstallError,
    InvalidNameError,
    InvalidReferenceError,
    LockTimeoutError,
    NoSnapshotError,
    NotARepositoryError,
    NothingToUndoError,
    PushNotAllowedError,
    RemoteError,
    RestoreConflictError,
    RunExistsError,
    RunNotFound,
    SessionFileNotFound,
    StoreWriteError,
    UnsafeTreeError,
    UnsafeValueError,
    UnsupportedFormatError,
    UnsupportedRepositoryError,
    UsageError,
)

# Everything but the errors is imported on first use (PEP 562), so `import gitstate` and
# `gitstate.errors`/`gitstate.encoding` stay free of pygit2 (the CLI's --help and git's textconv
# start in milliseconds); type checkers see ordinary imports.
_LAZY = {
    "Checkpoint": "checkpoint",
    "Diff": "diff", "FileChange": "diff", "KeyChange": "diff",
    "HookInstall": "hooks",
    "PullResult": "remote", "PushResult": "remote", "RefResult": "remote",
    "RestoreResult": "restore",
    "NodeBoundary": "run", "PruneResult": "run", "Run": "run",
    "FileVersion": "sessionfiles", "SessionFiles": "sessionfiles",
    "RunSummary": "store", "Store": "store", "open_store": "store",
    "Snapshot": "workspace", "Workspace": "workspace",
}

if TYPE_CHECKING:
    from .checkpoint import Checkpoint
    from .diff import Diff, FileChange, KeyChange
    from .hooks import HookInstall
    from .remote import PullResult, PushResult, RefResult
    from .restore import RestoreResult
    from .run import NodeBoundary, PruneResult, Run
    from .sessionfiles import FileVersion, SessionFiles
    from .store import RunSummary, Store, open_store
    from .workspace import Snapshot, Workspace


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'gitstate' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


__version__ = "0.1.0"

__all__ = [
    "AmbiguousReferenceError",
    "BranchExistsError",
    "BranchNotFound",
    "Checkpoint",
    "CheckpointNotFound",
    "ConflictError",
    "CorruptObjectError",
    "Diff",
    "EncodingError",
    "FileChange",
    "FileVersion",
    "GitStateError",
    "HookInstall",
    "HookInstallError",
    "InvalidNameError",
    "InvalidReferenceError",
    "KeyChange",
    "LockTimeoutError",
    "NoSnapshotError",
    "NodeBoundary",
    "NotARepositoryError",
    "NothingToUndoError",
    "PruneResult",
    "RestoreConflictError",
    "RestoreResult",
    "PullResult",
    "PushNotAllowedError",
    "PushResult",
    "RefResult",
    "RemoteError",
    "Run",
    "RunExistsError",
    "RunNotFound",
    "RunSummary",
    "SessionFileNotFound",
    "SessionFiles",
    "Snapshot",
    "Store",
    "StoreWriteError",
    "UnsafeTreeError",
    "UnsafeValueError",
    "UnsupportedFormatError",
    "UnsupportedRepositoryError",
    "UsageError",
    "Workspace",
    "open_store",
]
