"""The error hierarchy of gitstate: every error the library raises on purpose derives from
:class:`GitStateError`, and each subclass carries the data a caller needs (the ref, the expected and
actual ids, the path). The CLI turns any of them into one ``error: …`` line."""

from __future__ import annotations


class GitStateError(Exception):
    """Root of every error gitstate raises on purpose."""


class NotARepositoryError(GitStateError):
    """No git repository was found where the store was looked for."""

    def __init__(self, path: str, reason: str | None = None) -> None:
        self.path = path
        detail = f" ({reason})" if reason else ""
        super().__init__(
            f"not a git repository: {path}{detail}; run inside a repository or set AGENTOS_REPO "
            "to the repository to use"
        )


class RepositoryGoneError(NotARepositoryError):
    """The store's repository was deleted or moved after the store was opened."""

    def __init__(self, path: str) -> None:
        self.path = path
        GitStateError.__init__(self, f"the repository at {path} was deleted or moved while the store was open")


class UnsupportedRepositoryError(GitStateError):
    """The repository exists but uses a format libgit2 cannot open (SHA-256 objects, reftable refs)."""

    def __init__(self, path: str, feature: str) -> None:
        self.path = path
        self.feature = feature
        super().__init__(f"repository {path} uses {feature}, which gitstate (libgit2) cannot open")


class SpecialFileError(UnsupportedRepositoryError):
    """A FIFO, socket or device is where the repository keeps a file git reads (libgit2 and git
    would wait on it for ever)."""

    def __init__(self, path: str, name: str, kind: str) -> None:
        GitStateError.__init__(self, f"cannot open the repository at {path}: its {name} is {kind}, not a file "
                                     "(git would wait on it for ever too); remove it")
        self.path = path
        self.feature = f"{kind} in place of {name}"


class GitVersionError(GitStateError):
    """The ``git`` command is missing or older than gitstate needs (see README, "Install")."""


class RunNotFound(GitStateError):
    """The run id names no run of this store's worktree."""

    def __init__(self, run_id: str, worktree: str | None = None) -> None:
        self.run_id = run_id
        self.worktree = worktree
        where = f" in worktree {worktree!r}" if worktree else ""
        super().__init__(f"no run {run_id!r}{where}")


class RunExistsError(GitStateError):
    """A run with this id already exists."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        super().__init__(f"run {run_id!r} already exists")


class BranchNotFound(GitStateError):
    """The run has no branch of that name."""

    def __init__(self, run_id: str, branch: str) -> None:
        self.run_id = run_id
        self.branch = branch
        super().__init__(f"run {run_id!r} has no branch {branch!r}")


class BranchExistsError(GitStateError):
    """A branch of that name already exists in the run."""

    def __init__(self, run_id: str, branch: str) -> None:
        self.run_id = run_id
        self.branch = branch
        super().__init__(f"run {run_id!r} already has a branch {branch!r}")


class BranchDeleteRefused(GitStateError):
    """A branch was not deleted because that would lose something (``force=True`` overrides):
    ``main`` (the run's line), or checkpoints that no other branch of the run reaches."""

    def __init__(self, run_id: str, branch: str, reason: str) -> None:
        self.run_id = run_id
        self.branch = branch
        self.reason = reason
        super().__init__(f"refusing to delete branch {branch!r} of run {run_id!r}: {reason} "
                         "(use force=True to delete it anyway)")

    def without_hint(self) -> str:
        """The message without the library's ``force=True`` hint (for callers naming their own)."""
        return f"refusing to delete branch {self.branch!r} of run {self.run_id!r}: {self.reason}"


class InvalidReferenceError(GitStateError):
    """A checkpoint reference is malformed or names nothing that exists (bad prefix, unknown node)."""

    def __init__(self, ref: str, reason: str) -> None:
        self.ref = ref
        self.reason = reason
        super().__init__(f"invalid checkpoint reference {ref!r}: {reason}")


class CheckpointNotFound(InvalidReferenceError):
    """No checkpoint of this run matches the reference."""

    def __init__(self, ref: str, run_id: str | None = None) -> None:
        self.run_id = run_id
        where = f" in run {run_id!r}" if run_id is not None else ""
        super().__init__(ref, f"no such checkpoint{where}")


class AmbiguousReferenceError(InvalidReferenceError):
    """A short id matches more than one object. ``candidates`` lists them as git does: ``(id,
    description)`` pairs (a checkpoint's run, branch and step, or the object's type), possibly
    empty when they could not be listed."""

    def __init__(self, ref: str, candidates: list[tuple[str, str]] | tuple[tuple[str, str], ...] = ()) -> None:
        self.candidates = [(str(oid), str(what)) for oid, what in candidates]
        listed = ""
        if self.candidates:
            shown = [f"{oid[:12]} {what}" for oid, what in self.candidates[:10]]
            more = len(self.candidates) - len(shown)
            listed = "; candidates: " + ", ".join(shown) + (f" … and {more} more" if more > 0 else "")
        super().__init__(ref, f"ambiguous short id{listed}; give more hex digits")


class InvalidNameError(GitStateError):
    """A run id, branch name or state key cannot be stored (empty, too long)."""

    def __init__(self, kind: str, name: str, reason: str) -> None:
        self.kind = kind
        self.name = name
        super().__init__(f"invalid {kind} {name!r}: {reason}")


class ConflictError(GitStateError):
    """A compare-and-swap lost: the ref (or session-file version) is not what the caller expected."""

    def __init__(self, ref: str, expected: str | None, actual: str | None, what: str = "ref") -> None:
        self.ref = ref
        self.what = what
        self.expected = expected
        self.actual = actual
        super().__init__(
            f"conflict on {what} {ref}: expected {expected or 'nothing'}, found {actual or 'nothing'}"
        )


class LockTimeoutError(GitStateError):
    """A ref stayed locked by another writer for longer than the store waits."""

    def __init__(self, ref: str, seconds: float) -> None:
        self.ref = ref
        self.seconds = seconds
        super().__init__(f"{ref} stayed locked for {seconds:.1f}s; another writer is holding it")


class NothingToUndoError(GitStateError):
    """The branch's reflog has no move that can be reverted."""

    def __init__(self, ref: str) -> None:
        self.ref = ref
        super().__init__(f"nothing to undo on {ref}")


class CorruptObjectError(GitStateError):
    """A stored object is missing, of the wrong type, or does not decode."""

    def __init__(self, oid: str, reason: str) -> None:
        self.oid = oid
        self.reason = reason
        super().__init__(f"corrupt object {oid}: {reason}")


class UnsafeValueError(GitStateError):
    """A stored value names a Python type the reader is not allowed to build (building it could
    import and run arbitrary code), or is a pickle: a policy refusal, not damage. The value may have
    been written when the type was allowed, or come from an untrusted remote. ``oid`` is the object
    it was read from, ``type_name`` is ``module.name`` (or ``pickle``)."""

    def __init__(self, oid: str, type_name: str) -> None:
        self.oid = oid or "<value>"
        self.type_name = type_name
        where = f" (in object {oid})" if oid else ""
        if type_name == "pickle":
            text = f"refusing to unpickle a stored value{where}: gitstate never decodes pickle"
        else:
            text = (f"refusing to decode type {type_name}{where}: it is not in this reader's allowed types; "
                    "if you trust it, add it to allowed_types (e.g. GitCheckpointSaver(..., allowed_types=[...]))")
        super().__init__(text)


class UnsupportedFormatError(CorruptObjectError):
    """A payload carries a format version this gitstate does not know."""


class EncodingError(GitStateError):
    """A value cannot be stored (a type CBOR/gitstate does not support, a cycle, a non-str key)."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"cannot encode state at {path or '<root>'}: {reason}")


class IntegerTooLargeError(EncodingError):
    """An integer beyond the stored bound (``|n| < 2**MAX_INT_BITS`` of
    :mod:`gitstate.format.encoding`); nothing was written."""

    def __init__(self, path: str, bits: int, limit: int) -> None:
        self.bits = bits
        self.limit = limit
        super().__init__(path, f"integer of {bits:,} bits is larger than the {limit:,} bits stored")


class NotSerializableError(EncodingError, TypeError):
    """A value a framework integration stores as JSON-like data is not (an object ``json.dumps``
    refuses, a type the integration does not allow); nothing was written. A ``TypeError`` as well,
    as the framework's own backend raises one for the same value."""


class TypeNotAllowedError(NotSerializableError):
    """A value to store names a type its reader would refuse to build (not in the allowed types),
    so it could never be read back: refused before anything is written. ``type_name`` is
    ``module.name``."""

    def __init__(self, type_name: str) -> None:
        self.type_name = type_name
        module, _, name = type_name.rpartition(".")
        alt = f" (or the tuple ({module!r}, {name!r}))" if module else ""
        super().__init__("", f"type {type_name} is not allowed")
        self.args = (f"refusing to store a value of type {type_name}: it is not in the allowed types, so it "
                     f"could not be read back; allow it with GitCheckpointSaver(..., allowed_types=[{name}]){alt}",)


class ForeignRunError(GitStateError):
    """A framework integration found a run of the same id written by another workflow (e.g. an
    OpenAI Agents session id that names a LangGraph thread); it neither reads nor writes it."""

    def __init__(self, run_id: str, workflow: str | None, expected: str) -> None:
        self.run_id = run_id
        self.workflow = workflow
        self.expected = expected
        super().__init__(f"run {run_id!r} belongs to workflow {workflow or 'none'!r}, not {expected!r}; "
                         "use another id")


class StoreWriteError(GitStateError):
    """The repository could not be written (read-only .git, disk full, permissions)."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"cannot write the store at {path}: {reason}")


class OutputWriteError(GitStateError):
    """A file gitstate was asked to write outside the store (``view --html``) could not be written;
    ``path`` is that file. Nothing is left half-written in its place."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"cannot write {path}: {reason}")


class WorktreeWriteError(StoreWriteError):
    """A restore could not write or remove a file of the worktree (permissions, disk full, a file
    made meanwhile in its place); ``path`` is that file. A :class:`StoreWriteError` (as it was
    reported before this class existed), worded for the worktree."""

    def __init__(self, path: str, reason: str) -> None:
        GitStateError.__init__(self, f"cannot write {path} in the worktree: {reason}")
        self.path = path
        self.reason = reason


class FileChangingError(StoreWriteError):
    """A worktree file kept changing while a snapshot read it (another program is writing it): it
    was read again a few times and never settled, so no version of it could be saved. Nothing was
    changed (a restore stops before it writes)."""

    def __init__(self, path: str) -> None:
        GitStateError.__init__(self, f"cannot save {path}: it kept changing while it was read (another "
                               "program is writing it); nothing was changed, try again when it is written")
        self.path = path
        self.reason = "it kept changing while it was read"


class WorktreeBusyError(LockTimeoutError):
    """Another restore of the same worktree (another process or thread) held it for longer than a
    restore waits; ``pid`` is its process when known. Nothing was changed."""

    def __init__(self, workdir: str, seconds: float, pid: int | None) -> None:
        holder = f" (pid {pid})" if pid is not None else ""
        GitStateError.__init__(self, f"another restore of the worktree {workdir} is running{holder}; waited "
                               f"{seconds:.0f}s, nothing was changed: try again when it has finished")
        self.ref = workdir
        self.seconds = seconds
        self.pid = pid


class UsageError(GitStateError, ValueError):
    """An argument is out of range or of the wrong kind (``keep_latest=0``, an empty node name)."""


class NoSnapshotError(GitStateError):
    """The checkpoint carries no workspace snapshot (it was written without ``files=``)."""

    def __init__(self, checkpoint: str) -> None:
        self.checkpoint = checkpoint
        super().__init__(f"checkpoint {checkpoint[:12]} has no workspace snapshot (written without files=)")


class UnsafeTreeError(GitStateError):
    """A snapshot tree holds an entry that must never be written (``..``, ``.git``, a gitlink, a
    write through a symbolic link); nothing was written."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"refusing to restore unsafe snapshot entry {path!r}: {reason}")


class RestoreConflictError(GitStateError):
    """A restore would overwrite or delete work that exists in no checkpoint (``forceable``:
    ``force=True`` overrides), or would touch ignored files or nested repositories (never
    overridden)."""

    def __init__(self, paths: list[str], reason: str, forceable: bool = False, run_id: str | None = None) -> None:
        self.paths = list(paths)
        self.reason = reason
        self.forceable = forceable
        self.run_id = run_id  # the run restored (None: not known)
        hint = " (use force=True to overwrite them)" if forceable else ""
        super().__init__(f"restore refused: {reason}{hint}: {self.shown_paths()}")

    def shown_paths(self, limit: int = 20) -> str:
        """The paths as one line: the first ``limit`` of them and how many more."""
        more = len(self.paths) - limit
        return ", ".join(self.paths[:limit]) + (f" … and {more} more" if more > 0 else "")


class SessionFileNotFound(GitStateError):
    """The run has no session file at that path (or not that version of it)."""

    def __init__(self, path: str, version: int | None = None) -> None:
        self.path = path
        self.version = version
        which = f" version {version}" if version is not None else ""
        super().__init__(f"no session file {path!r}{which}")


class RemoteError(GitStateError):
    """A git transport command (push, fetch, ls-remote, bundle) failed as a whole; ``detail`` is
    git's own last error line."""

    def __init__(self, remote: str, action: str, detail: str) -> None:
        self.remote = remote
        self.action = action
        self.detail = detail
        super().__init__(f"{action} {remote!r} failed: {detail}")


class BrokenObjectError(RemoteError):
    """A fetch (pull, bundle import) was refused because what it would bring in fails git's own
    object checks (``fetch.fsckObjects``: a tree with duplicate or unsorted entries, a malformed
    commit, ...), so that the repository's ``git fsck`` keeps passing; nothing was brought in."""

    def __init__(self, remote: str, action: str, oid: str | None, check: str) -> None:
        self.oid = oid
        self.check = check
        what = f"object {oid}: {check}" if oid else check
        super().__init__(remote, action, f"it sends a broken object ({what}; git fsck would report it), so "
                                         "nothing was brought in")


class PushNotAllowedError(GitStateError):
    """The remote is not listed in ``agentos.pushRemotes``: checkpoints may hold prompts, tool outputs
    and secrets, so gitstate pushes them only where the user allowed it."""

    def __init__(self, remote: str, urls: tuple[str, ...] = ()) -> None:
        self.remote = remote
        self.urls = urls  # the remote's push URLs that agentos.pushRemotes does not allow, when known
        which = ""
        if urls:
            which = f" (its push URL{'s' if len(urls) > 1 else ''} {', '.join(repr(u) for u in urls)} "
            which += "not allowed)"
        super().__init__(
            f"pushing checkpoints to {remote!r} is not allowed{which}; allow it with: "
            f"git config --add agentos.pushRemotes {remote}"
        )


class HookInstallError(GitStateError):
    """A git hook could not be installed without replacing something silently."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"cannot install hook {path}: {reason}")


class SecretRefusedError(GitStateError):
    """A write found a credential and the policy (git config ``agentos.secrets``) is ``refuse``:
    nothing was written. ``path`` is the key path where it sits, ``kind`` what it is and
    ``fingerprint`` its fingerprint (8 hex digits, what an allowlist takes); the secret itself is
    never part of the error. Also raised when a value to redact cannot be read
    (``unreadable``), so a credential is never stored because redacting it failed."""

    def __init__(self, path: str, kind: str, fingerprint: str | None = None, *, unreadable: bool = False) -> None:
        self.path = path
        self.kind = kind
        self.fingerprint = fingerprint
        where = path or "the value"
        if unreadable:
            msg = f"cannot redact credentials in {where}: it is not readable as {kind}; nothing was written"
        else:
            named = f"{kind}, fingerprint {fingerprint}" if fingerprint else kind
            msg = (f"refusing to store a credential ({named}) at {where}: git config agentos.secrets is "
                   f"'refuse'; nothing was written. Remove it, or let a known false positive through "
                   f"with git config --add agentos.secrets.allow {fingerprint or 'FINGERPRINT'}")
        super().__init__(msg)
