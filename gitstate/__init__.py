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

from gitstate.errors import (
    AmbiguousReferenceError,
    BranchDeleteRefused,
    BranchExistsError,
    BranchNotFound,
    BrokenObjectError,
    CheckpointNotFound,
    ConflictError,
    CorruptObjectError,
    EncodingError,
    FileChangingError,
    ForeignRunError,
    GitStateError,
    HookInstallError,
    IntegerTooLargeError,
    InvalidNameError,
    InvalidReferenceError,
    LockTimeoutError,
    NoSnapshotError,
    NotARepositoryError,
    NothingToUndoError,
    NotSerializableError,
    OutputWriteError,
    PushNotAllowedError,
    RemoteError,
    RepositoryGoneError,
    RestoreConflictError,
    RunExistsError,
    RunNotFound,
    SecretRefusedError,
    SessionFileNotFound,
    SpecialFileError,
    StoreWriteError,
    TypeNotAllowedError,
    UnsafeTreeError,
    UnsafeValueError,
    UnsupportedFormatError,
    UnsupportedRepositoryError,
    UsageError,
    WorktreeBusyError,
    WorktreeWriteError,
)

# Everything but the errors is imported on first use (PEP 562), so `import gitstate` and
# `gitstate.errors`/`gitstate.encoding` stay free of pygit2 (the CLI's --help and git's textconv
# start in milliseconds); type checkers see ordinary imports.
_LAZY = {
    "Checkpoint": "format.checkpoint",
    "Diff": "workspace.diff", "FileChange": "workspace.diff", "KeyChange": "workspace.diff",
    "HookInstall": "sync.hooks",
    "PullResult": "sync.remote", "PushResult": "sync.remote", "RefResult": "sync.remote",
    "RestoreResult": "workspace.restore",
    "BranchInfo": "store.branches",
    "NodeBoundary": "store.run", "PruneResult": "store.run", "Run": "store.run",
    "FileVersion": "store.sessionfiles", "SessionFiles": "store.sessionfiles",
    "RunSummary": "store.store", "Store": "store.store", "open_store": "store.store",
    "Snapshot": "workspace.snapshot", "Workspace": "workspace.snapshot",
    "push": "sync.remote", "pull": "sync.remote",
    "export_bundle": "sync.bundle", "import_bundle": "sync.bundle",
    "install_hooks": "sync.hooks",
    "Transaction": "store.transaction",
}

if TYPE_CHECKING:
    from gitstate.format.checkpoint import Checkpoint
    from gitstate.store.branches import BranchInfo
    from gitstate.store.run import NodeBoundary, PruneResult, Run
    from gitstate.store.sessionfiles import FileVersion, SessionFiles
    from gitstate.store.store import RunSummary, Store, open_store
    from gitstate.store.transaction import Transaction
    from gitstate.sync.bundle import export_bundle, import_bundle
    from gitstate.sync.hooks import HookInstall, install_hooks
    from gitstate.sync.remote import PullResult, PushResult, RefResult, pull, push
    from gitstate.workspace.diff import Diff, FileChange, KeyChange
    from gitstate.workspace.restore import RestoreResult
    from gitstate.workspace.snapshot import Snapshot, Workspace


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
    "BranchDeleteRefused",
    "BranchExistsError",
    "BranchInfo",
    "BranchNotFound",
    "BrokenObjectError",
    "Checkpoint",
    "CheckpointNotFound",
    "ConflictError",
    "CorruptObjectError",
    "Diff",
    "EncodingError",
    "FileChange",
    "FileChangingError",
    "FileVersion",
    "ForeignRunError",
    "GitStateError",
    "HookInstall",
    "HookInstallError",
    "IntegerTooLargeError",
    "InvalidNameError",
    "InvalidReferenceError",
    "KeyChange",
    "LockTimeoutError",
    "NoSnapshotError",
    "NodeBoundary",
    "NotARepositoryError",
    "NotSerializableError",
    "NothingToUndoError",
    "OutputWriteError",
    "PruneResult",
    "RestoreConflictError",
    "RestoreResult",
    "PullResult",
    "PushNotAllowedError",
    "PushResult",
    "RefResult",
    "RemoteError",
    "RepositoryGoneError",
    "Run",
    "RunExistsError",
    "RunNotFound",
    "SecretRefusedError",
    "RunSummary",
    "SessionFileNotFound",
    "SessionFiles",
    "Snapshot",
    "SpecialFileError",
    "Store",
    "StoreWriteError",
    "TypeNotAllowedError",
    "UnsafeTreeError",
    "UnsafeValueError",
    "UnsupportedFormatError",
    "UnsupportedRepositoryError",
    "UsageError",
    "WorktreeBusyError",
    "WorktreeWriteError",
    "Workspace",
    "Transaction",
    "export_bundle",
    "import_bundle",
    "install_hooks",
    "open_store",
    "pull",
    "push",
]
