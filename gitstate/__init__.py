"""gitstate: git-native storage for agent and workflow checkpoints.

Runs, branches, checkpoints, node boundaries and rollback are git objects under ``refs/agentos/``
in the user's own repository::

    import gitstate
    store = gitstate.open_store()
    run = store.create_run(workflow="triage")
    cp = run.checkpoint({"messages": []}, node="plan", trigger="tool_end")
"""

from .checkpoint import Checkpoint
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
    NotARepositoryError,
    NothingToUndoError,
    PushNotAllowedError,
    RemoteError,
    RunExistsError,
    RunNotFound,
    StoreWriteError,
    UnsupportedFormatError,
    UnsupportedRepositoryError,
    UsageError,
)
from .hooks import HookInstall
from .remote import PullResult, PushResult, RefResult
from .run import NodeBoundary, PruneResult, Run
from .store import RunSummary, Store, open_store

__version__ = "0.1.0"

__all__ = [
    "AmbiguousReferenceError",
    "BranchExistsError",
    "BranchNotFound",
    "Checkpoint",
    "CheckpointNotFound",
    "ConflictError",
    "CorruptObjectError",
    "EncodingError",
    "GitStateError",
    "HookInstall",
    "HookInstallError",
    "InvalidNameError",
    "InvalidReferenceError",
    "LockTimeoutError",
    "NodeBoundary",
    "NotARepositoryError",
    "NothingToUndoError",
    "PruneResult",
    "PullResult",
    "PushNotAllowedError",
    "PushResult",
    "RefResult",
    "RemoteError",
    "Run",
    "RunExistsError",
    "RunNotFound",
    "RunSummary",
    "Store",
    "StoreWriteError",
    "UnsupportedFormatError",
    "UnsupportedRepositoryError",
    "UsageError",
    "open_store",
]
