"""gitstate: git-native storage for agent and workflow checkpoints.

Runs, branches, checkpoints, node boundaries and rollback are git objects under ``refs/agentos/``
in the user's own repository::

    import gitstate
    store = gitstate.open_store()
    run = store.create_run(workflow="triage")
    cp = run.checkpoint({"messages": []}, node="plan", trigger="tool_end")
"""

from .checkpoint import Checkpoint
from .diff import Diff, FileChange, KeyChange
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
    UnsupportedFormatError,
    UnsupportedRepositoryError,
    UsageError,
)
from .hooks import HookInstall
from .remote import PullResult, PushResult, RefResult
from .restore import RestoreResult
from .run import NodeBoundary, PruneResult, Run
from .sessionfiles import FileVersion, SessionFiles
from .store import RunSummary, Store, open_store
from .workspace import Snapshot, Workspace

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
    "UnsupportedFormatError",
    "UnsupportedRepositoryError",
    "UsageError",
    "Workspace",
    "open_store",
]
