"""A run: its branches (refs), the checkpoints on them (commits), node boundaries, rollback, undo,
fork and prune. Every write builds objects first and then moves one ref by compare-and-swap."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal

import pygit2

from gitstate.errors import (
    AmbiguousReferenceError,
    BranchExistsError,
    BranchNotFound,
    CheckpointNotFound,
    ConflictError,
    CorruptObjectError,
    InvalidReferenceError,
    LockTimeoutError,
    NothingToUndoError,
    UsageError,
)
from gitstate.format import checkpoint as cpfmt
from gitstate.format.checkpoint import Checkpoint, read_commit, read_meta
from gitstate.format.names import branch_ref, check_name, decode_component, run_prefix
from gitstate.format.statetree import StateWriter
from gitstate.git.objects import MODE_BLOB, MODE_TREE, TreeEntry
from gitstate.git.refs import list_refs, read_ref, reflog

if TYPE_CHECKING:
    import os

    from gitstate.store.sessionfiles import SessionFiles
    from gitstate.store.store import Store
    from gitstate.workspace.diff import Diff
    from gitstate.workspace.restore import RestoreResult

NODE_PREFIX = "node:"


@dataclass(frozen=True)
class NodeBoundary:
    """Where a node was entered and left: entry and exit checkpoint ids and the node's status
    (``completed``, ``failed``, or ``running`` while it has no exit checkpoint)."""

    node: str
    entry: str | None
    exit: str | None
    status: str


@dataclass(frozen=True)
class PruneResult:
    """What :meth:`Run.prune` did: how many checkpoints it kept and dropped from the branch, and the
    new id of each kept checkpoint (pruning rewrites their parent links, so their ids change)."""

    kept: int
    removed: int
    renamed: dict[str, str] = field(default_factory=dict)


class Run:
    """One run of a workflow (one agent thread) in a store. Obtain it from
    :meth:`Store.create_run` or :meth:`Store.get_run`."""

    def __init__(self, store: Store, run_id: str, worktree: str, workflow: str | None,
                 created_at: datetime, metadata: dict[str, Any] | None = None) -> None:
        self.store = store
        self.id = run_id
        self.worktree = worktree
        self.workflow = workflow
        self.created_at = created_at
        self.metadata = metadata or {}
        self.last_restore: RestoreResult | None = None

    def __repr__(self) -> str:
        return f"<Run {self.id!r} workflow={self.workflow!r} worktree={self.worktree!r}>"

    # -- refs ---------------------------------------------------------------------------------

    def ref(self, branch: str = "main") -> str:
        """The full ref name of a branch of this run."""
        return branch_ref(self.worktree, self.id, branch)

    def _tip(self, branch: str) -> str | None:
        return read_ref(self.store.repo, self.ref(branch))

    def _cas(self, branch: str, expected: str | None, new: str | None, message: str) -> None:
        self.store._cas(self.ref(branch), expected, new, message)

    # -- reading ------------------------------------------------------------------------------

    def _checkpoint(self, oid: str) -> Checkpoint:
        return self.store._checkpoint(oid)

    def head(self, branch: str = "main") -> Checkpoint | None:
        """The tip checkpoint of a branch, or ``None`` if the branch has no checkpoint yet."""
        tip = self._tip(branch)
        return None if tip is None else self._checkpoint(tip)

    def history(self, branch: str = "main", limit: int | None = None) -> Iterator[Checkpoint]:
        """Checkpoints of a branch, newest first, following first parents."""
        oid = self._tip(branch)
        count = 0
        while oid is not None and (limit is None or count < limit):
            cp = self._checkpoint(oid)
            yield cp
            count += 1
            oid = cp.parent_id

    def branches(self) -> dict[str, Checkpoint]:
        """Every branch of the run with its tip checkpoint."""
        prefix = run_prefix(self.worktree, self.id) + "heads/"
        out: dict[str, Checkpoint] = {}
        for name, oid in list_refs(self.store.repo, prefix):
            try:
                out[decode_component(name[len(prefix):])] = self._checkpoint(oid)
            except ValueError:
                continue
        return out

    def load(self, ref: str, branch: str | None = None) -> Checkpoint:
        """Resolve a checkpoint of this run: a full id, a unique prefix (4+ hex digits), or
        ``node:NAME`` (the latest exit checkpoint of that node on ``branch``, default ``main``)."""
        if not isinstance(ref, str) or not ref:
            raise InvalidReferenceError(str(ref), "empty reference")
        if ref.startswith(NODE_PREFIX):
            name = ref[len(NODE_PREFIX):]
            if not name:
                raise InvalidReferenceError(ref, "node name missing after 'node:'")
            branch = branch or "main"
            if self._tip(branch) is None:
                raise BranchNotFound(self.id, branch)
            for cp in self.history(branch):
                if cp.trigger == cpfmt.NODE_END and cp.node == name:
                    return cp
            raise InvalidReferenceError(ref, f"node {name!r} has no exit checkpoint on branch {branch!r}")
        cp = self.store.checkpoint(ref)
        if cp.run_id != self.id:
            raise CheckpointNotFound(ref, self.id)
        return cp

    # -- writing ------------------------------------------------------------------------------

    def _state_entry(self, state: Any, writer: StateWriter) -> TreeEntry:
        if isinstance(state, Mapping) and all(isinstance(k, str) for k in state):
            return (cpfmt.STATE_TREE, writer.mapping(dict(state)), MODE_TREE)
        return (cpfmt.STATE_LEAF, writer.leaf(state, ""), MODE_BLOB)

    def _head_entries(self, branch: str) -> tuple[TreeEntry, list[TreeEntry], tuple[str, ...] | None] | None:
        """The tip's state entry, its workspace snapshot entry (if any) and the paths that snapshot
        is limited to (``None``: whole worktree), to carry forward."""
        tip = self._tip(branch)
        if tip is None:
            return None
        commit = read_commit(self.store.repo, tip)
        root = commit.tree
        files: list[TreeEntry] = []
        scope: tuple[str, ...] | None = None
        if cpfmt.FILES in root:
            files = [(cpfmt.FILES, str(root[cpfmt.FILES].id), MODE_TREE)]
            scope = cpfmt.files_paths(read_meta(self.store.repo, commit), tip)
        for name, mode in ((cpfmt.STATE_TREE, MODE_TREE), (cpfmt.STATE_LEAF, MODE_BLOB)):
            if name in root:
                return (name, str(root[name].id), mode), files, scope
        raise CorruptObjectError(tip, "checkpoint has no state")

    def checkpoint(
        self,
        state: Any,
        *,
        node: str | None = None,
        trigger: str | None = None,
        status: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        branch: str = "main",
        expect: str | None = None,
        tools: Sequence[Any] | None = None,
        audit: Sequence[Any] | None = None,
        files: bool | Sequence[str | os.PathLike[str]] | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> Checkpoint:
        """Write a checkpoint of ``state`` on ``branch`` and return it.

        Without ``expect`` it appends to the branch tip as it is at write time (concurrent writers
        all land, in some order). With ``expect`` (a checkpoint id or prefix) it is a strict
        compare-and-swap: if the tip is not that checkpoint, :class:`ConflictError` is raised and
        nothing becomes visible. ``tools`` (tool invocations) and ``audit`` (audit events) are
        lists stored beside the state as ``tools.cbor`` and ``audit.cbor``.

        ``files=True`` also captures the worktree (tracked and untracked files, ``.gitignore``
        honoured) as the checkpoint's ``files/`` tree; ``files=[paths]`` captures only those files
        or directories (relative to the worktree root; each must exist on disk or in the user's
        index, else :class:`UsageError`) and records them as :attr:`Checkpoint.files_paths`, so a
        restore touches only them. Without ``files`` the checkpoint carries no workspace snapshot (it does not
        inherit its parent's), so it cannot be restored from. ``progress``, if given, is called
        with ``1`` per file the snapshot has to hash (for a progress display)."""
        check_name("branch name", branch)
        for kind, value in (("node", node), ("trigger", trigger), ("status", status)):
            _check_label(kind, value)
        with self.store._writing() as w:
            state_entry = self._state_entry(state, StateWriter(w))
            extra = self._extra_entries(w, tools, audit)
        scope: tuple[str, ...] | None = None
        if files:
            snap = self.store.workspace.snapshot(None if files is True else list(files), progress=progress)
            extra.append((cpfmt.FILES, snap.tree, MODE_TREE))
            scope = snap.paths
        return self._commit_checkpoint(
            state_entry, extra, branch=branch, expect=expect, node=node, trigger=trigger,
            status=cpfmt.normalize_status(status), metadata=metadata, files_paths=scope)

    def _extra_entries(self, w: Any, tools: Sequence[Any] | None, audit: Sequence[Any] | None) -> list[TreeEntry]:
        extra: list[TreeEntry] = []
        sw = StateWriter(w)
        if tools:
            extra.append((cpfmt.TOOLS, sw.leaf(list(tools), "tools"), MODE_BLOB))
        if audit:
            extra.append((cpfmt.AUDIT, sw.leaf(list(audit), "audit"), MODE_BLOB))
        return extra

    def _commit_checkpoint(
        self,
        state_entry: TreeEntry,
        extra: list[TreeEntry],
        *,
        branch: str,
        expect: str | None,
        node: str | None,
        trigger: str | None,
        status: str | None,
        metadata: Mapping[str, Any] | None,
        node_status: str | None = None,
        node_entry: str | None = None,
        files_paths: Sequence[str] | None = None,
    ) -> Checkpoint:
        """The single write path: objects first, then one compare-and-swap of the branch ref.
        ``files_paths`` records the paths a partial ``files/`` snapshot is limited to."""
        store = self.store
        scope = None if files_paths is None else sorted(set(files_paths))
        if expect is not None:
            expect = self.load(expect).id
        ref = self.ref(branch)
        meta_user = dict(metadata or {})
        deadline = time.monotonic() + store.lock_timeout
        while True:
            tip = read_ref(store.repo, ref)
            if expect is not None and tip != expect:
                raise ConflictError(ref, expect, tip)
            step, base = (0, 0) if tip is None else store._step_base(tip)
            if tip is not None:
                step += 1
            now = time.time()
            meta = {
                "format": cpfmt.CHECKPOINT_KIND, "v": cpfmt.FORMAT_VERSION, "run": self.id,
                "branch": branch, "workflow": self.workflow, "worktree": self.worktree, "node": node,
                "step": step, "base": base or None, "trigger": trigger, "status": status,
                "node_status": node_status, "node_entry": node_entry, "metadata": meta_user or None,
                "files_paths": scope,
                "created_at": datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            }
            with store._writing() as w:
                meta_oid = w.blob(cpfmt.encode_meta(meta))
                root = w.tree([(cpfmt.META, meta_oid, MODE_BLOB), state_entry, *extra])
                oid = store._write_commit(w, root, [tip] if tip else [], cpfmt.message(meta), now)
            try:
                self._cas(branch, tip, oid, "gitstate: checkpoint " + cpfmt.subject(node, step, trigger, status))
            except ConflictError:
                if expect is not None:
                    raise
                if time.monotonic() > deadline:
                    raise LockTimeoutError(ref, store.lock_timeout) from None
                time.sleep(random.random() * 0.002)
                continue
            store._written(oid, step, base)
            return Checkpoint(
                id=oid, run_id=self.id, branch=branch, node=node, step=step, trigger=trigger, status=status,
                metadata=meta_user, created_at=datetime.fromtimestamp(now, UTC),
                parent_ids=(tip,) if tip else (), workflow=self.workflow, node_status=node_status,
                node_entry=node_entry, tree_id=root, base=base, _repo=store.repo,
                files_paths=None if scope is None else tuple(scope),
            )

    # -- moving branches ----------------------------------------------------------------------

    def fork(self, ref: str, new_branch: str, from_branch: str | None = None) -> Checkpoint:
        """Create ``new_branch`` whose tip is the checkpoint ``ref``; returns that checkpoint."""
        check_name("branch name", new_branch)
        target = self.load(ref, branch=from_branch)
        try:
            self._cas(new_branch, None, target.id, f"gitstate: fork {new_branch} from {target.short_id}")
        except ConflictError:
            raise BranchExistsError(self.id, new_branch) from None
        return target

    def rollback(self, target: str, branch: str = "main", *, expect: str | None = None,
                 restore: bool = False, force: bool = False,
                 progress: Callable[[int], None] | None = None) -> Checkpoint:
        """Move ``branch`` back (or to any checkpoint of the run) and return the new tip. The old tip
        stays reachable through the branch's reflog, and :meth:`undo` moves it back.

        ``restore=True`` also restores the checkpoint's workspace snapshot (see :meth:`restore`;
        ``force`` is passed on) before the branch moves; the result is kept in
        :attr:`last_restore`. If the restore is refused, the branch does not move."""
        tip = self._tip(branch)
        if tip is None:
            raise BranchNotFound(self.id, branch)
        if expect is not None and self.load(expect).id != tip:
            raise ConflictError(self.ref(branch), self.load(expect).id, tip)
        cp = self.load(target, branch=branch)
        if restore:
            self.last_restore = self.restore(cp, force=force, progress=progress)
        if cp.id != tip:  # rolling back to the tip moves nothing and logs nothing
            self._cas(branch, tip, cp.id, f"gitstate: rollback to {cp.short_id} ({target})")
        return cp

    # -- workspace ----------------------------------------------------------------------------

    def restore(self, checkpoint: str | Checkpoint, paths: Sequence[str | os.PathLike[str]] | None = None,
                dry_run: bool = False, force: bool = False,
                progress: Callable[[int], None] | None = None) -> RestoreResult:
        """Make the worktree match a checkpoint's workspace snapshot (only ``paths`` if given).

        Modified files are rewritten, deleted ones brought back, files created since removed —
        within the snapshot's :attr:`Checkpoint.files_paths` when it is partial (``paths`` then
        narrows that scope; a path wholly outside it is a :class:`UsageError`);
        ignored files, nested repositories, HEAD and the user's index are never touched. The
        snapshot is validated first (:class:`UnsafeTreeError`); files whose current content is in no
        checkpoint are not overwritten unless ``force`` (:class:`RestoreConflictError` lists them).
        Before writing, the current worktree is saved as a checkpoint on branch
        ``restore-safety`` (:attr:`RestoreResult.safety`), so ``run.restore(result.safety)`` undoes
        it. ``dry_run`` reports what would change and changes nothing."""
        from gitstate.workspace.restore import restore_checkpoint

        cp = checkpoint if isinstance(checkpoint, Checkpoint) else self.load(checkpoint)
        if cp.run_id != self.id:
            raise CheckpointNotFound(cp.id, self.id)
        return restore_checkpoint(self, cp, paths, dry_run, force, progress)

    def _safety_checkpoint(self, files_tree: str, target: Checkpoint,
                           files_paths: Sequence[str] | None = None) -> Checkpoint:
        from gitstate.workspace.restore import SAFETY_BRANCH, SAFETY_TRIGGER

        head = self._head_entries(target.branch)
        if head is not None:
            state_entry = head[0]
        else:
            with self.store._writing() as w:
                state_entry = self._state_entry({}, StateWriter(w))
        return self._commit_checkpoint(
            state_entry, [(cpfmt.FILES, files_tree, MODE_TREE)], branch=SAFETY_BRANCH, expect=None,
            node=None, trigger=SAFETY_TRIGGER, status=None,
            metadata={"restore_of": target.id, "branch": target.branch}, files_paths=files_paths)

    def diff(self, a: str | Checkpoint, b: str | Checkpoint | None = None, branch: str = "main") -> Diff:
        """Changed state keys and files from checkpoint ``a`` to ``b`` (default: the tip of
        ``branch``); references may be ids, prefixes or ``node:NAME``."""
        from gitstate.workspace.diff import diff_checkpoints

        first = a if isinstance(a, Checkpoint) else self.load(a, branch=branch)
        if b is None:
            head = self.head(branch)
            if head is None:
                raise BranchNotFound(self.id, branch)
            second = head
        else:
            second = b if isinstance(b, Checkpoint) else self.load(b, branch=branch)
        return diff_checkpoints(self.store.repo, first, second)

    @property
    def files(self) -> SessionFiles:
        """The run's versioned session files (seed 004), kept apart from the workspace."""
        from gitstate.store.sessionfiles import SessionFiles

        return SessionFiles(self)

    def undo(self, branch: str = "main") -> Checkpoint | None:
        """Revert the last move of ``branch`` recorded in its reflog (a checkpoint, rollback, fork,
        prune, or an earlier undo) and return the new tip (``None`` if the branch is gone)."""
        ref = self.ref(branch)
        entries = reflog(self.store.repo, ref)
        if not entries:
            if read_ref(self.store.repo, ref) is None:
                raise BranchNotFound(self.id, branch)
            raise NothingToUndoError(ref)
        last = entries[0]
        current = read_ref(self.store.repo, ref)
        if current != last.new:
            raise ConflictError(ref, last.new, current)
        if last.old is None:
            self._cas(branch, current, None, "gitstate: undo branch creation")
            return None
        self._cas(branch, current, last.old, f"gitstate: undo ({last.message})")
        return self._checkpoint(last.old)

    def delete_branch(self, branch: str) -> None:
        """Remove a branch ref (its checkpoints stay in other branches and the object store)."""
        tip = self._tip(branch)
        if tip is None:
            raise BranchNotFound(self.id, branch)
        self._cas(branch, tip, None, "gitstate: delete branch")

    # -- node boundaries ----------------------------------------------------------------------

    def node(self, name: str, *, branch: str = "main", state: Any = None,
             metadata: Mapping[str, Any] | None = None,
             files: bool | Sequence[str | os.PathLike[str]] | None = None) -> NodeScope:
        """Context manager marking a node boundary: an entry checkpoint on enter, an exit checkpoint
        on exit (status ``completed``, or ``failed`` if the block raised; the exception propagates).

        Both carry the branch's current state (``state`` replaces it for the entry) and the tip's
        workspace snapshot, if it has one; with ``files`` (as for :meth:`checkpoint`) both capture
        the worktree afresh, so ``rollback("node:NAME", restore=True)`` brings back the files as the
        node left them."""
        if not isinstance(name, str) or not name:
            raise UsageError("node name must be a non-empty string")
        return NodeScope(self, name, branch, state, metadata, files)

    def nodes(self, branch: str = "main") -> list[NodeBoundary]:
        """Node boundaries of a branch, in execution order."""
        found: list[tuple[int, NodeBoundary]] = []
        closed: set[str] = set()
        for cp in self.history(branch):
            if cp.trigger == cpfmt.NODE_END and cp.node is not None:
                if cp.node_entry:
                    closed.add(cp.node_entry)
                found.append((cp.step, NodeBoundary(cp.node, cp.node_entry, cp.id, cp.node_status or "completed")))
            elif cp.trigger == cpfmt.NODE_START and cp.node is not None and cp.id not in closed:
                found.append((cp.step, NodeBoundary(cp.node, cp.id, None, "running")))
        found.reverse()
        return [nb for _, nb in found]

    # -- pruning ------------------------------------------------------------------------------

    def prune(self, keep_latest: int = 5, branch: str = "main") -> PruneResult:
        """Keep only the ``keep_latest`` newest checkpoints of ``branch``.

        The kept checkpoints are rewritten onto a new root (same trees, messages and times), so their
        ids change (see :attr:`PruneResult.renamed`); the branch moves by compare-and-swap and the old
        line stays in the reflog, so :meth:`undo` reverts a prune until the reflog expires."""
        if not isinstance(keep_latest, int) or keep_latest < 1:
            raise UsageError("keep_latest must be a positive integer")
        tip = self._tip(branch)
        if tip is None:
            raise BranchNotFound(self.id, branch)
        chain = list(self.history(branch, limit=keep_latest + 1))
        if len(chain) <= keep_latest:
            return PruneResult(kept=len(chain), removed=0)
        removed = sum(1 for _ in self.history(branch)) - keep_latest
        kept = list(reversed(chain[:keep_latest]))
        store = self.store
        renamed: dict[str, str] = {}
        parent: str | None = None
        base = kept[0].step
        with store._writing() as w:
            for cp in kept:
                commit = read_commit(store.repo, cp.id)
                meta = read_meta(store.repo, commit)
                meta["base"] = base or None
                if meta.get("node_entry") in renamed:
                    meta["node_entry"] = renamed[meta["node_entry"]]
                root = commit.tree
                entries: list[TreeEntry] = [
                    (e.name or "", str(e.id), e.filemode) for e in root if e.name != cpfmt.META]
                entries.append((cpfmt.META, w.blob(cpfmt.encode_meta(meta)), MODE_BLOB))
                new_root = w.tree(entries)
                message = commit.message
                if meta.get("node_entry") and meta["node_entry"] != commit_meta_entry(commit.message):
                    message = _replace_trailer(message, "Node-Entry", meta["node_entry"])
                parent = store._write_commit(w, new_root, [parent] if parent else [], message,
                                             commit.commit_time, author=commit.author, committer=commit.committer)
                renamed[cp.id] = parent
        assert parent is not None
        self._cas(branch, tip, parent, f"gitstate: prune to the {keep_latest} newest checkpoints")
        return PruneResult(kept=keep_latest, removed=removed, renamed=renamed)


class NodeScope:
    """The node boundary opened by :meth:`Run.node`; ``entry`` and ``exit`` are its checkpoints."""

    def __init__(self, run: Run, name: str, branch: str, state: Any, metadata: Mapping[str, Any] | None,
                 files: bool | Sequence[str | os.PathLike[str]] | None = None) -> None:
        self.run = run
        self.name = name
        self.branch = branch
        self._state = state
        self._metadata = dict(metadata or {})
        self._files = files
        self.entry: Checkpoint | None = None
        self.exit: Checkpoint | None = None

    def _current(self, state: Any = None) -> tuple[TreeEntry, list[TreeEntry], tuple[str, ...] | None]:
        """State and files entries for a boundary checkpoint (the tip's, unless given/captured),
        and the paths the files snapshot is limited to."""
        head = self.run._head_entries(self.branch)
        state_entry, files, scope = head if head is not None else (None, [], None)
        if state is not None or state_entry is None:
            with self.run.store._writing() as w:
                state_entry = self.run._state_entry({} if state is None else state, StateWriter(w))
        if self._files:
            snap = self.run.store.workspace.snapshot(None if self._files is True else list(self._files))
            files, scope = [(cpfmt.FILES, snap.tree, MODE_TREE)], snap.paths
        return state_entry, files, scope

    def __enter__(self) -> NodeScope:
        state_entry, files, scope = self._current(self._state)
        self.entry = self.run._commit_checkpoint(
            state_entry, files, branch=self.branch, expect=None, node=self.name, trigger=cpfmt.NODE_START,
            status=None, metadata=self._metadata, node_status="running", files_paths=scope)
        return self

    def checkpoint(self, state: Any, **kwargs: Any) -> Checkpoint:
        """A checkpoint inside the node (``node`` and ``branch`` filled in)."""
        kwargs.setdefault("node", self.name)
        kwargs.setdefault("branch", self.branch)
        return self.run.checkpoint(state, **kwargs)

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> Literal[False]:
        assert self.entry is not None
        failed = exc_type is not None
        metadata = dict(self._metadata)
        if failed:
            metadata["error"] = f"{exc_type.__name__ if exc_type else 'Error'}: {exc}"
        state_entry, files, scope = self._current()
        self.exit = self.run._commit_checkpoint(
            state_entry, files, branch=self.branch, expect=None, node=self.name,
            trigger=cpfmt.NODE_END, status=None, metadata=metadata,
            node_status="failed" if failed else "completed", node_entry=self.entry.id, files_paths=scope)
        return False


def commit_meta_entry(message: str) -> str | None:
    """The ``Node-Entry:`` trailer of a checkpoint message, if any."""
    for line in reversed(message.splitlines()):
        if line.startswith("Node-Entry: "):
            return line[len("Node-Entry: "):].strip()
    return None


def _replace_trailer(message: str, key: str, value: str) -> str:
    """The message with the value of trailer ``key`` replaced (other lines, e.g. integrations'
    own trailers, kept as they are)."""
    lines = message.split("\n")
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].startswith(f"{key}: "):
            lines[i] = f"{key}: {value}"
            break
    return "\n".join(lines)


def _check_label(kind: str, value: object) -> None:
    if value is not None and not isinstance(value, str):
        raise UsageError(f"{kind} must be a string or None, not {type(value).__name__}")


def _is_hex(text: str) -> bool:
    return all(c in "0123456789abcdef" for c in text.lower())


def expand_id(repo: pygit2.Repository, ref: str) -> str:
    """Expand a full id or unique prefix (4+ hex digits) to a full commit id."""
    if len(ref) < 4 or len(ref) > 40 or not _is_hex(ref):
        raise InvalidReferenceError(
            ref, "expected a checkpoint id, a unique prefix of 4+ hex digits, or node:NAME")
    try:
        oid = str(repo.expand_id(ref.lower()))
    except KeyError:
        raise CheckpointNotFound(ref) from None
    except (ValueError, pygit2.GitError) as exc:
        if "ambiguous" in str(exc).lower():
            raise AmbiguousReferenceError(ref) from None
        raise CheckpointNotFound(ref) from None
    return oid
