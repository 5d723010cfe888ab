"""A run: its branches (refs), the checkpoints on them (commits), node boundaries, rollback, undo,
fork, prune and restore. Every write is one :class:`Transaction` through :meth:`StoreCore.write`:
objects first, then one compare-and-swap of the branch ref."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal

from pygit2.enums import ObjectType

from gitstate.errors import (
    BranchExistsError,
    BranchNotFound,
    CheckpointNotFound,
    ConflictError,
    CorruptObjectError,
    InvalidReferenceError,
    NoSnapshotError,
    NothingToUndoError,
    RestoreConflictError,
    RunExistsError,
    StoreWriteError,
    UsageError,
    WorktreeWriteError,
)
from gitstate.format import checkpoint as cpfmt
from gitstate.format import lgtree
from gitstate.format.checkpoint import Checkpoint, read_meta
from gitstate.format.names import (
    branch_ref,
    check_name,
    decode_component,
    node_log_ref,
    run_info_ref,
    run_prefix,
)
from gitstate.format.nodes import NodeRecord
from gitstate.git.objects import MODE_BLOB, MODE_TREE, TreeEntry
from gitstate.git.reader import CommitData
from gitstate.secrets import META_KEY, Finding, Policy, secrets_record
from gitstate.store.base import StoreCore
from gitstate.store.nodes import (
    NodeBoundary,
    NodeLog,
    Written,
    block_bounds,
    block_open,
    blocks_open,
    close_block,
    legacy_boundaries,
    new_record,
    note_written,
    now_iso,
    open_block,
    written_since,
)
from gitstate.store.processes import this_process
from gitstate.store.transaction import Transaction
from gitstate.workspace import restore as restoring
from gitstate.workspace.restore import SAFETY_BRANCH, SAFETY_TRIGGER, RestoreResult
from gitstate.workspace.snapshot import head_tree, normalize_path

if TYPE_CHECKING:  # branches, session files and diffs are imported where used: not every command needs them
    import os

    from gitstate.store.branches import BranchInfo
    from gitstate.store.sessionfiles import SessionFiles
    from gitstate.workspace.diff import Diff

NODE_PREFIX = "node:"


class _NoChange:
    """What a :meth:`Run.update` function returns to write nothing."""

    def __repr__(self) -> str:
        return "NO_CHANGE"


NO_CHANGE: Any = _NoChange()

# What a checkpoint's tree holds besides meta.cbor: written inside the transaction (retries reuse the
# writer's cache), returning the state entry and any extra entries (tools, audit, files).
EntriesBuilder = Callable[[Transaction], tuple[TreeEntry, list[TreeEntry]]]


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

    #: What a :meth:`update` function returns to write nothing.
    NO_CHANGE: Any = NO_CHANGE

    def __init__(self, store: StoreCore, run_id: str, worktree: str, workflow: str | None,
                 created_at: datetime, metadata: dict[str, Any] | None = None, *, saved: bool = True) -> None:
        self.store = store
        self.id = run_id
        self.worktree = worktree
        self.workflow = workflow
        self.created_at = created_at
        self.metadata = metadata or {}
        self.last_restore: RestoreResult | None = None
        self.saved = saved  # False: from Store.new_run, the record is written with the first checkpoint

    def stage_record(self, tx: Transaction) -> str:
        """Stage the run's record (``run.cbor`` in a commit of its own) and the creation of its
        ref, strict: a run of this id must not exist. Returns the record's commit id."""
        created = self.created_at
        record = {
            "format": cpfmt.RUN_KIND, "v": cpfmt.FORMAT_VERSION, "id": self.id, "workflow": self.workflow,
            "worktree": self.worktree, "created_at": created.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            "metadata": self.store.secrets.value(self.metadata, "run metadata", []) or None,
        }
        tree = tx.tree([(cpfmt.RUN_RECORD, tx.blob(cpfmt.encode_meta(record)), MODE_BLOB)])
        workflow = self.workflow
        subject = f"run {self.id}" + (f" · {workflow}" if workflow else "")
        msg = f"{subject}\n\nRun: {self.id}\n" + (f"Workflow: {workflow}\n" if workflow else "")
        msg += f"Gitstate-Format: {cpfmt.FORMAT_VERSION}\n"
        oid = tx.commit(tree, [], msg, when=created.timestamp())
        tx.set_ref(run_info_ref(self.worktree, self.id), None, oid, f"gitstate: create run {self.id}", strict=True)
        return oid

    @contextlib.contextmanager
    def _first_write(self) -> Iterator[None]:
        """Around a write that may create the run (see :meth:`gitstate.Store.new_run`): a run of
        this id created meanwhile is :class:`RunExistsError`."""
        try:
            yield
        except ConflictError as exc:
            if not self.saved and exc.ref == run_info_ref(self.worktree, self.id):
                raise RunExistsError(self.id) from None
            raise

    def __repr__(self) -> str:
        return f"<Run {self.id!r} workflow={self.workflow!r} worktree={self.worktree!r}>"

    # -- refs ---------------------------------------------------------------------------------

    def ref(self, branch: str = "main") -> str:
        """The full ref name of a branch of this run."""
        return branch_ref(self.worktree, self.id, branch)

    def tip(self, branch: str = "main") -> str | None:
        """The id of a branch's tip checkpoint, or ``None`` when the branch does not exist."""
        return self.store.read_ref(self.ref(branch))

    def _move(self, branch: str, old: str | None, new: str | None, message: str) -> None:
        """One strict compare-and-swap of a branch (fork, rollback, undo, delete, prune)."""
        self.store.move_ref(self.ref(branch), old, new, message)

    def _remove(self, branch: str, tip: str, message: str) -> None:
        """Delete a branch (strict compare-and-swap from ``tip``) and its node log, in one
        transaction: markers of a branch that no longer exists would only travel with a push."""
        store = self.store
        log_ref = node_log_ref(self.worktree, self.id, branch)

        def build(tx: Transaction) -> None:
            tx.delete_ref(self.ref(branch), tip, message, strict=True)
            log = store.read_ref(log_ref)
            if log is not None:
                tx.delete_ref(log_ref, log, message)  # with the branch, in one transaction

        store.write(build)
        store.forget_objects()  # what only the branch reached may now be pruned by git gc

    # -- reading ------------------------------------------------------------------------------

    def head(self, branch: str = "main") -> Checkpoint | None:
        """The tip checkpoint of a branch, or ``None`` if the branch has no checkpoint yet."""
        tip = self.tip(branch)
        return None if tip is None else self.store.read_checkpoint(tip)

    def history(self, branch: str = "main", limit: int | None = None, *,
                start: str | Checkpoint | None = None) -> Iterator[Checkpoint]:
        """Checkpoints of a branch, newest first, following first parents; from ``start`` (a
        checkpoint, id or prefix of this run) instead of the branch tip when given."""
        if start is None:
            oid = self.tip(branch)
        else:
            oid = start.id if isinstance(start, Checkpoint) else self.load(start).id
        count = 0
        while oid is not None and (limit is None or count < limit):
            cp = self.store.read_checkpoint(oid)
            yield cp
            count += 1
            oid = cp.parent_id

    def branch_list(self) -> list[BranchInfo]:
        """Every branch of the run (``main`` first) with its tip, where it came from (a fork, a pull
        that kept a diverged remote line, a restore's safety copy) and its fork point."""
        from gitstate.store.branches import list_branches

        return list_branches(self.store, self.worktree, self.id)

    def branches(self) -> dict[str, Checkpoint]:
        """Every branch of the run with its tip checkpoint."""
        prefix = run_prefix(self.worktree, self.id) + "heads/"
        out: dict[str, Checkpoint] = {}
        for name, oid in self.store.list_refs(prefix):
            try:
                out[decode_component(name[len(prefix):])] = self.store.read_checkpoint(oid)
            except ValueError:
                continue
        return out

    def load(self, ref: str, branch: str | None = None) -> Checkpoint:
        """Resolve a checkpoint of this run: a full id, a unique prefix (4+ hex digits), or
        ``node:NAME`` (the latest exit checkpoint of that node on ``branch``, default ``main``)."""
        if not isinstance(ref, str):
            raise InvalidReferenceError(repr(ref), "a reference is text: an id, a prefix or node:NAME")
        if not ref:
            raise InvalidReferenceError(ref, "empty reference")
        if ref.startswith(NODE_PREFIX):
            name = ref[len(NODE_PREFIX):]
            if not name:
                raise InvalidReferenceError(ref, "node name missing after 'node:'")
            branch = branch or "main"
            if self.tip(branch) is None:
                raise BranchNotFound(self.id, branch)
            return self._node_exit(ref, name, branch)
        cp = self.store.checkpoint(ref)
        if cp.run_id != self.id:
            raise CheckpointNotFound(ref, self.id)
        return self.current_copy(cp)

    def current_copy(self, cp: Checkpoint) -> Checkpoint:
        """``cp`` itself, except for a LangGraph checkpoint that is on no branch's line while a copy
        of it is: the saver rewrote its commit when it folded its pending writes in (the next step
        of the thread did; docs/FORMAT.md), so an id printed before that names the copy on the line
        (a branch's copy before another's, ``main`` first)."""
        if cp.workflow != lgtree.WORKFLOW or cp.run_id != self.id:
            return cp
        reader = self.store.reader
        key = lgtree.checkpoint_key(reader.commit(cp.id).message)
        if key is None:
            return cp
        copy: str | None = None
        seen: set[str] = set()  # history shared with a branch walked before is not walked again
        tips = self.branches()
        for name in sorted(tips, key=lambda name: name != "main"):
            for commit in reader.first_parents(tips[name].id):
                if commit.id == cp.id:
                    return cp
                if commit.id in seen:
                    break
                seen.add(commit.id)
                if copy is None and lgtree.checkpoint_key(commit.message) == key:
                    copy = commit.id
        return cp if copy is None else self.store.read_checkpoint(copy)

    def _node_exit(self, ref: str, name: str, branch: str) -> Checkpoint:
        """``node:NAME``: the exit of the newest closed boundary of NAME on the branch; for a node
        that never recorded a boundary (checkpoints only labelled with it: ``mark_node=False``, or
        written before ``node=`` recorded steps), its newest checkpoint."""
        for boundary in reversed(self.nodes(branch)):
            if boundary.node == name and boundary.status != "running" and boundary.exit is not None:
                return self.store.read_checkpoint(boundary.exit)
        for cp in self.history(branch):
            if cp.node == name:
                return cp
        raise InvalidReferenceError(ref, f"node {name!r} has no checkpoint on branch {branch!r}")

    # -- writing ------------------------------------------------------------------------------

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
        files_tree: str | None = None,
        progress: Callable[[int], None] | None = None,
        mark_node: bool | None = None,
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
        restore touches only them. ``files_tree`` links an existing tree (e.g. one an integration
        built) as the snapshot instead. Without either the checkpoint carries no workspace snapshot
        (it does not inherit its parent's), so it cannot be restored from. ``progress``, if given,
        is called with ``1`` per file the snapshot has to hash (for a progress display).

        ``node`` names the node that wrote the checkpoint and records it as a step of that node
        in the branch's node log, in the same write (as ``git agentos checkpoint --node`` does):
        it extends the newest boundary of the log when that is a closed boundary of the same node
        ending at this checkpoint's parent, else it starts one whose entry and exit are this
        checkpoint (``failed`` when ``status`` is), so ``nodes()`` lists it and ``node:NAME``
        names it. Inside a :meth:`node` block on ``branch`` the block is the boundary, so no step
        is recorded there. ``mark_node=False`` only labels the checkpoint with ``node`` (no step);
        ``mark_node=True`` records the step even inside a block."""
        check_name("branch name", branch)
        if mark_node and not node:
            raise UsageError("mark_node needs a node name")
        if mark_node is None:
            mark_node = node is not None and not block_open(self.block_key(), branch)
        for kind, value in (("node", node), ("trigger", trigger), ("status", status)):
            _check_label(kind, value)
        if files and files_tree is not None:
            raise UsageError("give files or files_tree, not both")
        if metadata is not None and not isinstance(metadata, Mapping):
            raise UsageError(f"metadata must be a mapping, not {type(metadata).__name__}")
        tools_list = _optional_list("tools", tools)
        audit_list = _optional_list("audit", audit)
        # the write-time secrets policy, before any object is written (a refusal writes nothing)
        found: list[Finding] = []
        policy = self.store.secrets
        state = policy.value(state, "state", found)
        tools_list = policy.value(tools_list, "tools", found)
        audit_list = policy.value(audit_list, "audit", found)
        metadata = policy.value(metadata, "metadata", found)
        extra: list[TreeEntry] = []
        scope: tuple[str, ...] | None = None
        if files:
            snap = self.store.workspace.snapshot(None if files is True else list(files), progress=progress,
                                                 scrub=_file_scrub(policy, found))
            extra.append((cpfmt.FILES, snap.tree, MODE_TREE))
            scope = snap.paths
        elif files_tree is not None:
            if self.store.reader.header(files_tree)[0] != ObjectType.TREE:
                raise UsageError(f"files_tree {files_tree} is not a tree")
            extra.append((cpfmt.FILES, files_tree, MODE_TREE))

        def entries(tx: Transaction) -> tuple[TreeEntry, list[TreeEntry]]:
            more = list(extra)
            if tools_list:
                more.append((cpfmt.TOOLS, tx.blob(cpfmt.encode_list(tools_list, "tools")), MODE_BLOB))
            if audit_list:
                more.append((cpfmt.AUDIT, tx.blob(cpfmt.encode_list(audit_list, "audit")), MODE_BLOB))
            return cpfmt.state_entry(tx.writer, state), more

        return self.commit_checkpoint(
            entries, branch=branch, expect=expect, node=node, trigger=trigger,
            status=cpfmt.normalize_status(status), metadata=metadata, files_paths=scope, mark_node=mark_node,
            secrets=found)

    def commit_checkpoint(
        self,
        entries: EntriesBuilder,
        *,
        branch: str,
        expect: str | None = None,
        node: str | None = None,
        trigger: str | None = None,
        status: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        node_status: str | None = None,
        node_entry: str | None = None,
        files_paths: Sequence[str] | None = None,
        mark_node: bool = False,
        secrets: Sequence[Finding] = (),
    ) -> Checkpoint:
        """The checkpoint write every other one goes through: ``entries`` stages the state and any
        extra tree entries, then ``meta.cbor`` and the commit, then one compare-and-swap of the
        branch ref (strict when ``expect`` is given). ``files_paths`` records the paths a partial
        ``files/`` snapshot is limited to; ``mark_node`` the node step (see :meth:`checkpoint`);
        ``secrets`` the findings the ``warn`` policy let through (see :meth:`stage_checkpoint`)."""
        store = self.store
        if expect is not None:
            expect = self.load(expect).id
        ref = self.ref(branch)

        def build(tx: Transaction) -> Checkpoint:
            tip = store.read_ref(ref)
            if expect is not None and tip != expect:
                raise ConflictError(ref, expect, tip)
            state_entry, extra = entries(tx)
            cp = self.stage_checkpoint(
                tx, tip, state_entry, extra, branch=branch, node=node, trigger=trigger, status=status,
                metadata=metadata, node_status=node_status, node_entry=node_entry, files_paths=files_paths,
                strict=expect is not None, secrets=secrets)
            if mark_node and node:
                self.node_log(branch).stage_step(tx, node, cp.id, tip, failed=status == "failed")
            return cp

        with self._first_write():
            cp = store.write(build)
        store.remember(cp)
        return cp

    def _now_saved(self) -> None:
        self.saved = True

    def stage_checkpoint(
        self,
        tx: Transaction,
        tip: str | None,
        state_entry: TreeEntry,
        extra: Sequence[TreeEntry] = (),
        *,
        branch: str = "main",
        node: str | None = None,
        trigger: str | None = None,
        status: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        node_status: str | None = None,
        node_entry: str | None = None,
        files_paths: Sequence[str] | None = None,
        strict: bool = False,
        fork_from: str | None = None,
        secrets: Sequence[Finding] = (),
    ) -> Checkpoint:
        """Stage one checkpoint on ``branch`` inside a transaction: ``meta.cbor``, the root tree
        (``state_entry`` and ``extra`` entries), the commit whose parent is ``tip`` (the branch tip
        the caller read in this transaction, ``None`` for a new branch), and the compare-and-swap
        of the branch ref from ``tip``. ``fork_from`` (only for a new branch, ``tip is None``) makes
        the commit's parent that checkpoint, as if the branch had been forked there. For writers
        that build several checkpoints or refs in one :meth:`StoreCore.write` (integrations); the
        caller remembers the returned view once the write succeeded (:meth:`StoreCore.remember`).

        ``metadata`` goes through the store's secrets policy here; the caller has passed the state
        and the other entries through it (:attr:`StoreCore.secrets`) and gives the findings the
        ``warn`` policy let through as ``secrets``: they are recorded in ``meta.cbor``."""
        store = self.store
        if not self.saved and not any(u.ref == run_info_ref(self.worktree, self.id) for u in tx.updates):
            self.stage_record(tx)
            tx.after(self._now_saved)
        scope = None if files_paths is None else sorted(set(files_paths))
        found = list(secrets)
        meta_user = dict(store.secrets.value(metadata, "metadata", found) or {})
        if fork_from is not None and tip is not None:
            raise UsageError("fork_from is only for a new branch")
        parent = tip if tip is not None else fork_from
        step, base = (0, 0) if parent is None else store.position(parent)
        if parent is not None:
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
        if found:
            meta[META_KEY] = secrets_record(found)
        root = tx.tree([(cpfmt.META, tx.blob(cpfmt.encode_meta(meta)), MODE_BLOB), state_entry, *extra])
        oid = tx.commit(root, [parent] if parent else [], cpfmt.message(meta), when=now)
        tx.set_ref(self.ref(branch), tip, oid, "gitstate: checkpoint " + cpfmt.subject(node, step, trigger, status),
                   strict=strict)
        if blocks_open():  # a Run.node block of this thread counts it once the branch has moved
            tx.after(functools.partial(note_written, self.block_key(), branch, oid))
        return Checkpoint(
            id=oid, run_id=self.id, branch=branch, node=node, step=step, trigger=trigger, status=status,
            metadata=meta_user, created_at=datetime.fromtimestamp(now, UTC),
            parent_ids=(parent,) if parent else (), workflow=self.workflow, node_status=node_status,
            node_entry=node_entry, tree_id=root, base=base, repo_path=store.location.git_dir,
            files_paths=None if scope is None else tuple(scope),
        )

    def update(
        self,
        change: Callable[[Checkpoint | None, Transaction], Any],
        *,
        branch: str = "main",
        node: str | None = None,
        trigger: str | None = None,
        status: str | None = None,
        metadata: Mapping[str, Any] | Callable[[Any], Mapping[str, Any]] | None = None,
    ) -> Checkpoint | None:
        """A read-modify-write checkpoint: ``change(tip, tx)`` gets the tip of ``branch`` as it is
        at write time (``None`` while the branch has no checkpoint) and returns the new state, or
        :data:`NO_CHANGE` to write nothing (then ``None`` is returned). When another writer moves
        the branch first, ``change`` runs again on the new tip, so concurrent updates (other
        threads, other processes) never lose each other's changes. ``tx`` stages objects the state
        refers to (:class:`gitstate.statetree.Written` values); ``metadata`` may be a function of
        the new state. ``change`` must not have side effects it cannot repeat. ``node`` here
        only labels the checkpoint (an integration's operation name): it records no node step."""
        check_name("branch name", branch)
        for kind, value in (("node", node), ("trigger", trigger), ("status", status)):
            _check_label(kind, value)
        store = self.store
        ref = self.ref(branch)

        def build(tx: Transaction) -> Checkpoint | None:
            tip = store.read_ref(ref)
            state = change(None if tip is None else store.read_checkpoint(tip), tx)
            if state is NO_CHANGE:
                return None
            meta = metadata(state) if callable(metadata) else metadata
            found: list[Finding] = []
            state = store.secrets.value(state, "state", found)
            return self.stage_checkpoint(
                tx, tip, cpfmt.state_entry(tx.writer, state), branch=branch, node=node, trigger=trigger,
                status=cpfmt.normalize_status(status), metadata=meta, secrets=found)

        with self._first_write():
            cp = store.write(build)
        if cp is not None:
            store.remember(cp)
        return cp

    def tip_entries(self, branch: str) -> tuple[TreeEntry, list[TreeEntry], tuple[str, ...] | None] | None:
        """The tip's state entry, its workspace snapshot entry (if any) and the paths that snapshot
        is limited to (``None``: whole worktree), to carry forward."""
        tip = self.tip(branch)
        if tip is None:
            return None
        reader = self.store.reader
        commit = reader.commit(tip)
        root = reader.tree(commit.tree_id)
        files: list[TreeEntry] = []
        scope: tuple[str, ...] | None = None
        snapshot = root.get(cpfmt.FILES)
        if snapshot is not None:
            files = [(cpfmt.FILES, snapshot.id, MODE_TREE)]
            scope = cpfmt.files_paths(read_meta(reader, commit), tip)
        for name, mode in ((cpfmt.STATE_TREE, MODE_TREE), (cpfmt.STATE_LEAF, MODE_BLOB)):
            found = root.get(name)
            if found is not None:
                return (name, found.id, mode), files, scope
        raise CorruptObjectError(tip, "checkpoint has no state")

    # -- moving branches ----------------------------------------------------------------------

    def fork(self, ref: str, new_branch: str, from_branch: str | None = None) -> Checkpoint:
        """Create ``new_branch`` whose tip is the checkpoint ``ref``; returns that checkpoint. The
        new branch's node log starts as that of the branch whose line holds ``ref`` (``from_branch``
        first, then ``main``), so :meth:`nodes` of the fork lists the boundaries up to the fork point."""
        check_name("branch name", new_branch)
        target = self.load(ref, branch=from_branch)
        head = self.ref(new_branch)
        source = self._line_of(target.id, from_branch)
        log_tip = None if source is None else self.store.read_ref(self.node_log(source).ref)
        new_log = self.node_log(new_branch).ref
        stale_log = self.store.read_ref(new_log)
        message = f"gitstate: fork {new_branch} from {target.short_id}"

        def build(tx: Transaction) -> None:
            tx.set_ref(head, None, target.id, message, strict=True)
            # the fork's node log starts as the source branch's: boundaries of its line up to the
            # fork point show on the fork (those after it are off the fork's line, so not listed)
            if log_tip is not None and log_tip != stale_log:
                tx.set_ref(new_log, stale_log, log_tip, message, strict=True)

        try:
            self.store.write(build)
        except ConflictError as exc:
            if exc.ref == head:
                raise BranchExistsError(self.id, new_branch) from None
            raise
        return target

    def _line_of(self, oid: str, branch: str | None) -> str | None:
        """The branch whose line (first-parent history) holds checkpoint ``oid``: ``branch`` when
        its line does, else the first such branch, ``main`` first; ``None`` when none does."""
        reader = self.store.reader
        tips = self.branches()
        for name in sorted(tips, key=lambda name: (name != branch, name != "main")):
            if any(commit.id == oid for commit in reader.first_parents(tips[name].id)):  # no checkpoint decoded
                return name
        return None

    def rollback(self, target: str, branch: str = "main", *, expect: str | None = None,
                 restore: bool = False, force: bool = False,
                 progress: restoring.Progress | None = None) -> Checkpoint:
        """Move ``branch`` back (or to any checkpoint of the run) and return the new tip. The old tip
        stays reachable through the branch's reflog, and :meth:`undo` moves it back.

        ``restore=True`` also restores the checkpoint's workspace snapshot (see :meth:`restore`;
        ``force`` is passed on) before the branch moves; the result is kept in
        :attr:`last_restore`. If the restore is refused, the branch does not move."""
        tip = self.tip(branch)
        if tip is None:
            raise BranchNotFound(self.id, branch)
        if expect is not None and self.load(expect).id != tip:
            raise ConflictError(self.ref(branch), self.load(expect).id, tip)
        cp = self.load(target, branch=branch)
        if restore:
            self.last_restore = self.restore(cp, force=force, progress=progress)
        if cp.id != tip:  # rolling back to the tip moves nothing and logs nothing
            self._move(branch, tip, cp.id, f"gitstate: rollback to {cp.short_id} ({target})")
        return cp

    def undo(self, branch: str = "main") -> Checkpoint | None:
        """Revert the last move of ``branch`` recorded in its reflog (a checkpoint, rollback, fork,
        prune, or an earlier undo) and return the new tip. Undoing the branch's creation deletes it
        with its reflog and node log (returns ``None``): that undo cannot be undone."""
        ref = self.ref(branch)
        entries = self.store.reflog(ref)
        current = self.store.read_ref(ref)
        if not entries:
            if current is None:
                raise BranchNotFound(self.id, branch)
            raise NothingToUndoError(ref)
        last = entries[0]
        if current != last.new:
            raise ConflictError(ref, last.new, current)
        if last.old is None:
            assert current is not None
            self._remove(branch, current, "gitstate: undo branch creation")
            return None
        self._move(branch, current, last.old, f"gitstate: undo ({last.message})")
        return self.store.read_checkpoint(last.old)

    def delete_branch(self, branch: str, *, force: bool = False) -> str:
        """Remove a branch ref and return the tip it had. Refused (:class:`BranchDeleteRefused`)
        for ``main`` and for a branch whose checkpoints no other branch of the run reaches, unless
        ``force``; the checkpoints other branches share stay. The branch's reflog and its node log
        go with it."""
        from gitstate.store.branches import check_deletable

        tip = check_deletable(self.store, self.worktree, self.id, branch, force)
        self._remove(branch, tip, "gitstate: delete branch")
        return tip

    # -- workspace ----------------------------------------------------------------------------

    def restore(self, checkpoint: str | Checkpoint, paths: Sequence[str | os.PathLike[str]] | None = None,
                dry_run: bool = False, force: bool = False,
                progress: restoring.Progress | None = None) -> RestoreResult:
        """Make the worktree match a checkpoint's workspace snapshot (only ``paths`` if given).

        Modified files are rewritten, deleted ones brought back, files created since removed —
        within the snapshot's :attr:`Checkpoint.files_paths` when it is partial (``paths`` then
        narrows that scope; a path wholly outside it, or in neither the snapshot nor the worktree, is
        a :class:`UsageError`);
        ignored files, nested repositories, HEAD and the user's index are never touched. The
        snapshot is validated first (:class:`UnsafeTreeError`); files whose current content is in no
        checkpoint are not overwritten unless ``force`` (:class:`RestoreConflictError` lists them).
        Before writing, the current worktree is saved as a checkpoint on branch
        ``restore-safety`` (:attr:`RestoreResult.safety`), so ``run.restore(result.safety)`` undoes
        it. Files are written as ``git checkout`` writes them, except that a small, plain,
        singly linked file is rewritten in place (it keeps its inode and permission bits; see
        "Restore safety checkpoints" in docs/FORMAT.md). ``dry_run`` changes nothing and returns
        the plan: what would be written and removed, and
        in :attr:`RestoreResult.unsaved` the files a real restore would refuse to overwrite; it
        writes nothing under ``.git`` either (it works on a read-only repository), except where
        only a snapshot can tell what the worktree holds (no stat cache yet, or checkout filters or
        attribute files: see :meth:`Workspace.survey`); then it snapshots as a restore does
        (unreferenced objects and the stat cache are written, no ref moves).
        ``progress(phase, done, total)`` follows the work (see :data:`restoring.Progress`)."""
        cp = checkpoint if isinstance(checkpoint, Checkpoint) else self.load(checkpoint)
        if cp.run_id != self.id:
            raise CheckpointNotFound(cp.id, self.id)
        target = cp.files_tree_id
        if target is None:
            raise NoSnapshotError(cp.id)
        store = self.store
        reader = store.reader
        restoring.validate_tree(reader, target)
        workspace = store.workspace
        workdir = workspace.workdir
        wanted = None if paths is None else [normalize_path(p, workdir) for p in paths]
        if wanted is not None:
            restoring.check_paths_known(reader, cp, target, workdir, wanted)
        prefixes = restoring.restore_scope(cp, wanted)
        # one restore of a worktree at a time; the safety snapshot's objects stay kept from a
        # concurrent `git repack -a -d` until the safety checkpoint names them
        with contextlib.nullcontext() if dry_run else workspace.restoring(), store.keeping_objects():
            reading = _Counter("reading", progress)
            # a dry run writes nothing, not even the objects of a snapshot, where the scan can tell
            # without one (else it snapshots as a restore does: unreferenced objects, no ref moved)
            survey = workspace.survey(progress=reading.tick, announce=reading.announce,
                                      prefixes=prefixes) if dry_run else None
            checked: tuple[dict[str, int], list[str]] | None = None
            snap = None
            found: list[Finding] = []  # what the warn policy let through into the safety snapshot
            if not dry_run and not force:
                # a restore refused for unsaved changes or files in the way writes nothing either:
                # found by a scan first, where it can tell (the snapshot below checks again, unless
                # the scan found the worktree just as the stat cache holds it: that is the snapshot)
                checking = _Counter("checking", progress)
                early = workspace.survey(progress=checking.tick, announce=checking.announce, prefixes=prefixes)
                if early is not None:
                    # a tree diff in libgit2 where the survey has the worktree's tree
                    plan = (restoring.plan_against(store.repo, early.entries, target, prefixes) if early.tree is None
                            else restoring.make_plan(store.repo, early.tree, target, prefixes))
                    checked = self._refusals(plan, early.skipped, force, current=early.tree)
                    snap = workspace.settled(early)
                    if snap is None:
                        checked = None
            if survey is not None:
                plan = restoring.plan_against(store.repo, survey.entries, target, prefixes)
                skipped = survey.skipped
            elif snap is not None:
                skipped = snap.skipped  # the plan and its checks are the survey's
            else:
                # the whole worktree: the safety checkpoint covers any scope
                try:
                    snap = workspace.snapshot(progress=reading.tick, fast=True, announce=reading.announce,
                                              scrub=_file_scrub(store.secrets, found))
                except StoreWriteError as exc:
                    if not dry_run or isinstance(exc, WorktreeWriteError):
                        raise
                    raise StoreWriteError(exc.path, "a dry run of this worktree needs a snapshot (no stat cache yet, "
                                          f"or checkout filters apply), which cannot be written: {exc.reason}") from exc
                plan = restoring.make_plan(store.repo, snap.tree, target, prefixes)
                skipped = snap.skipped
            # one listing of the loose objects for both passes over the blobs (sizes, then contents),
            # taken before the writer threads start
            with restoring.reading_many(reader, len(plan.writes)):
                sizes, lost = checked or self._refusals(plan, skipped, force, refuse_unsaved=not dry_run,
                                                        current=None if snap is None else snap.tree,
                                                        redacted=() if snap is None else snap.redacted)
                unchanged = restoring.count_files(store.repo, target, prefixes) - len(plan.writes)
                result = RestoreResult(checkpoint=cp.id, changed=tuple(plan.changed), added=tuple(plan.added),
                                       removed=tuple(plan.deletes), dry_run=dry_run, skipped=skipped,
                                       unsaved=tuple(lost), unchanged=unchanged)
                if dry_run or not (plan.writes or plan.deletes):
                    return result
                assert snap is not None  # only a dry run plans from a survey alone
                safety = self._safety_checkpoint(snap.tree, cp, found)
                filters = not snap.scanned or restoring.filters_possible(store.repo, store.location.common_dir, plan)
                written = restoring.apply(store.repo, store.location.common_dir, workdir, plan, progress,
                                          filters=filters, sizes=sizes, reader=reader)
                workspace.record(written, plan.deletes)
                return dataclasses.replace(result, safety=safety.id, safety_branch=SAFETY_BRANCH, unsaved=())

    def _refusals(self, plan: restoring.Plan, skipped: Sequence[str], force: bool, *,
                  refuse_unsaved: bool = True, current: str | None = None,
                  redacted: Sequence[str] = ()) -> tuple[dict[str, int], list[str]]:
        """Check a restore's plan: :class:`RestoreConflictError` when files are in the way, or (not
        ``force``, ``refuse_unsaved``) hold changes saved in no checkpoint (``current``: the
        worktree's tree, when known; ``redacted``: files of it whose snapshot holds only their
        redacted text, so no checkpoint holds their bytes either). Returns the blob sizes
        (:func:`restoring.check_blobs`) and those unsaved files (none with ``force``)."""
        store = self.store
        reader = store.reader
        sizes = restoring.check_blobs(reader, plan)
        nested = [p for p in (*plan.writes, *plan.deletes) if any(restoring.matches(p, [s]) for s in skipped)]
        blocked = sorted(set(restoring.find_obstacles(store.workspace.workdir, plan)) | set(nested))
        if blocked:
            raise RestoreConflictError(
                blocked, "ignored files, nested repositories, directories, symbolic links or special files "
                "(FIFOs, sockets, devices) are in the way")
        lost = [] if force else restoring.unsaved(reader, plan, self._saved_trees(head_tree(store.repo)), current)
        if redacted and not force:
            touched = {*plan.writes, *plan.deletes}
            lost = sorted({*lost, *(p for p in redacted if p in touched)})
        if lost and refuse_unsaved:
            raise RestoreConflictError(lost, "these files hold changes saved in no checkpoint", forceable=True,
                                       run_id=self.id)
        return sizes, lost

    def _saved_trees(self, user_head_tree: str | None) -> Iterator[str]:
        """Files trees of every checkpoint of the run (each distinct tree once), then HEAD's tree."""
        reader = self.store.reader
        seen_commits: set[str] = set()
        seen_trees: set[str] = set()
        for tip in self.branches().values():
            oid: str | None = tip.id
            while oid is not None and oid not in seen_commits:
                seen_commits.add(oid)
                commit = reader.commit(oid)
                files = reader.tree(commit.tree_id).get(cpfmt.FILES)
                if files is not None and files.id not in seen_trees:
                    seen_trees.add(files.id)
                    yield files.id
                oid = commit.parent_ids[0] if commit.parent_ids else None
        if user_head_tree is not None and user_head_tree not in seen_trees:
            yield user_head_tree

    def _safety_checkpoint(self, files_tree: str, target: Checkpoint, found: Sequence[Finding] = ()) -> Checkpoint:
        tip = self.tip_entries(target.branch)

        def entries(tx: Transaction) -> tuple[TreeEntry, list[TreeEntry]]:
            state = tip[0] if tip is not None else cpfmt.state_entry(tx.writer, {})
            return state, [(cpfmt.FILES, files_tree, MODE_TREE)]

        return self.commit_checkpoint(
            entries, branch=SAFETY_BRANCH, trigger=SAFETY_TRIGGER,
            metadata={"restore_of": target.id, "branch": target.branch}, secrets=found)

    def diff(self, a: str | Checkpoint, b: str | Checkpoint | None = None, branch: str = "main") -> Diff:
        """Changed state keys and files from checkpoint ``a`` to ``b`` (default: the tip of
        ``branch``); references may be ids, prefixes or ``node:NAME``."""
        first = a if isinstance(a, Checkpoint) else self.load(a, branch=branch)
        if b is None:
            head = self.head(branch)
            if head is None:
                raise BranchNotFound(self.id, branch)
            second = head
        else:
            second = b if isinstance(b, Checkpoint) else self.load(b, branch=branch)
        return self.store.diff(first, second)

    @property
    def files(self) -> SessionFiles:
        """The run's versioned session files, kept apart from the workspace."""
        from gitstate.store.sessionfiles import SessionFiles

        return SessionFiles(self.store, self.id, self.worktree)

    # -- node boundaries ----------------------------------------------------------------------

    def node(self, name: str, *, branch: str = "main", state: Any = None,
             metadata: Mapping[str, Any] | None = None,
             files: bool | Sequence[str | os.PathLike[str]] | None = None) -> NodeScope:
        """Context manager marking a node boundary: a marker (not a checkpoint) in the branch's node
        log, ``running`` while the block runs, then ``completed`` (or ``failed`` if the block raised;
        the exception propagates). Its entry and exit are the first and the last checkpoint the
        block wrote on the branch (both the tip as it was when it wrote none), so history holds
        exactly the checkpoints the caller wrote; ``node:NAME`` names the exit. The block's are
        those written in the thread that entered it (through any ``Run`` of this run; asyncio tasks
        started inside it count too), never those of another process or thread writing on the same
        branch meanwhile.

        ``state``, if given, is written as the node's first checkpoint; ``files`` (as for
        :meth:`checkpoint`) is the default for checkpoints written through the scope's
        :meth:`NodeScope.checkpoint`."""
        if not isinstance(name, str) or not name:
            raise UsageError("node name must be a non-empty string")
        check_name("branch name", branch)
        return NodeScope(self, name, branch, state, metadata, files)

    def block_key(self) -> tuple[str, str, str]:
        """What identifies this run across ``Run`` objects (for :class:`NodeScope`)."""
        return (self.store.location.common_dir, self.worktree, self.id)

    def node_log(self, branch: str = "main") -> NodeLog:
        """The node log (boundary markers) of a branch."""
        return NodeLog(self.store, self.id, self.worktree, branch)

    def nodes(self, branch: str = "main") -> list[NodeBoundary]:
        """Node boundaries of a branch whose checkpoints are on its current line, in the order the
        nodes were entered (boundaries of the earlier checkpoint-pair format first). A LangGraph
        thread's are derived from its checkpoints: each node step is a boundary whose entry and
        exit are the checkpoint it produced, or the checkpoint where it failed or called ``interrupt()``
        (status ``failed``/``interrupted`` until it completes; see
        :func:`gitstate.format.lgtree.boundaries`)."""
        history = list(self.history(branch))
        line = {cp.id for cp in history}
        legacy = legacy_boundaries(history) if any(cp.trigger in (cpfmt.NODE_START, cpfmt.NODE_END)
                                                  for cp in history) else []
        if any(cp.workflow == lgtree.WORKFLOW for cp in history):  # LangGraph: one boundary per node step
            legacy += [NodeBoundary(b.node, b.entry, b.exit, b.status)
                       for b in lgtree.boundaries(self.store.reader, history[::-1])]
        return legacy + [b for _record, b in self.node_log(branch).boundaries(line)]

    # -- pruning ------------------------------------------------------------------------------

    def prune(self, keep_latest: int = 5, branch: str = "main") -> PruneResult:
        """Keep only the ``keep_latest`` newest checkpoints of ``branch``.

        The kept checkpoints are rewritten onto a new root (same trees, messages and times), so their
        ids change (see :attr:`PruneResult.renamed`); the branch moves by compare-and-swap and the old
        line stays in the reflog, so :meth:`undo` reverts a prune until the reflog expires."""
        if not isinstance(keep_latest, int) or isinstance(keep_latest, bool) or keep_latest < 1:
            raise UsageError("keep_latest must be a positive integer")
        tip = self.tip(branch)
        if tip is None:
            raise BranchNotFound(self.id, branch)
        chain = list(self.history(branch, limit=keep_latest + 1))
        if len(chain) <= keep_latest:
            return PruneResult(kept=len(chain), removed=0)
        removed = sum(1 for _ in self.history(branch)) - keep_latest
        kept = list(reversed(chain[:keep_latest]))
        store = self.store
        reader = store.reader
        ref = self.ref(branch)
        log = self.node_log(branch)
        boundaries = [record for record, _b in log.boundaries({cp.id for cp in self.history(branch)})]

        def build(tx: Transaction) -> dict[str, str]:
            renamed: dict[str, str] = {}
            parent: str | None = None
            base = kept[0].step
            for cp in kept:
                commit = reader.commit(cp.id)
                meta = read_meta(reader, commit)
                meta["base"] = base or None
                if meta.get("node_entry") in renamed:
                    meta["node_entry"] = renamed[meta["node_entry"]]
                entries: list[TreeEntry] = [
                    (e.name, e.id, e.filemode) for e in reader.tree(commit.tree_id) if e.name != cpfmt.META]
                entries.append((cpfmt.META, tx.blob(cpfmt.encode_meta(meta)), MODE_BLOB))
                message = commit.message
                if meta.get("node_entry") and meta["node_entry"] != cpfmt.trailer(commit.message, "Node-Entry"):
                    message = cpfmt.replace_trailer(message, "Node-Entry", meta["node_entry"])
                parent = _recommit(tx, commit, tx.tree(entries), [parent] if parent else [], message)
                renamed[cp.id] = parent
            assert parent is not None
            tx.set_ref(ref, tip, parent, f"gitstate: prune to the {keep_latest} newest checkpoints", strict=True)
            # boundaries on the kept part now name the rewritten checkpoints; the others go with theirs
            log.stage(tx, [dataclasses.replace(r, entry=renamed.get(r.entry or "", r.entry),
                                               exit=renamed.get(r.exit or "", r.exit),
                                               base=renamed.get(r.base or "", r.base))
                           for r in boundaries if (r.exit or r.base) in renamed])
            return renamed

        renamed = store.write(build)
        store.forget_objects()
        return PruneResult(kept=keep_latest, removed=removed, renamed=renamed)


def _recommit(tx: Transaction, commit: CommitData, tree: str, parents: list[str], message: str) -> str:
    """A copy of ``commit`` with another tree, parents and message (same author and committer)."""
    return tx.commit(tree, parents, message, author=commit.author, committer=commit.committer)


class NodeScope:
    """The node boundary opened by :meth:`Run.node`; ``entry`` and ``exit`` are the first and the
    last checkpoint written inside it (set when the block ends; ``None`` if the branch had none)."""

    def __init__(self, run: Run, name: str, branch: str, state: Any, metadata: Mapping[str, Any] | None,
                 files: bool | Sequence[str | os.PathLike[str]] | None = None) -> None:
        self.run = run
        self.name = name
        self.branch = branch
        self._state = state
        self._metadata = dict(metadata or {})
        self._files = files
        self._record: NodeRecord | None = None
        self._written: Written | None = None
        self.entry: Checkpoint | None = None
        self.exit: Checkpoint | None = None

    def __enter__(self) -> NodeScope:
        log = self.run.node_log(self.branch)
        self._record = new_record(self.run.id, self.name, self.branch, self.run.tip(self.branch),
                                  self.run.store.read_ref(log.ref), self._metadata, owner=this_process())
        log.append(self._record)
        self._written = open_block(self.run.block_key(), self.branch)
        if self._state is not None:
            try:
                self.checkpoint(self._state)
            except BaseException:
                close_block(self._written)
                raise
        return self

    def checkpoint(self, state: Any, **kwargs: Any) -> Checkpoint:
        """A checkpoint inside the node (``node``, ``branch`` and the node's ``files`` filled in)."""
        kwargs.setdefault("node", self.name)
        kwargs.setdefault("branch", self.branch)
        if self._files:
            kwargs.setdefault("files", self._files)
        return self.run.checkpoint(state, **kwargs)

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> Literal[False]:
        record, written = self._record, self._written
        assert record is not None and written is not None, "NodeScope.__exit__ without __enter__"
        close_block(written)
        # the block's own checkpoints: with other writers on the branch (processes, threads), the
        # branch's newest and oldest since the block began may be theirs
        bounds = None
        if written.ids:
            bounds = block_bounds(written.ids, written_since(self.run.history(self.branch), record.base,
                                                             record.started_at))
        if bounds is not None:
            self.entry, self.exit = (self.run.store.read_checkpoint(oid) for oid in bounds)
        elif record.base is not None:
            self.entry = self.exit = self.run.store.read_checkpoint(record.base)
        failed = exc_type is not None
        closed = dataclasses.replace(
            record, status="failed" if failed else "completed",
            entry=self.entry.id if self.entry else None, exit=self.exit.id if self.exit else None,
            ended_at=now_iso(), error=f"{exc_type.__name__ if exc_type else 'Error'}: {exc}" if failed else None)
        self.run.node_log(self.branch).append(closed)
        return False


def _check_label(kind: str, value: object) -> None:
    if value is not None and not isinstance(value, str):
        raise UsageError(f"{kind} must be a string or None, not {type(value).__name__}")


def _optional_list(kind: str, value: Sequence[Any] | None) -> list[Any] | None:
    if value is None:
        return None
    if isinstance(value, str | bytes | Mapping):
        raise UsageError(f"{kind} must be a list, not {type(value).__name__}")
    return list(value)



class _Counter:
    """Adapts a snapshot's per-file ticks to a restore's ``progress(phase, done, total)``."""

    def __init__(self, phase: str, progress: restoring.Progress | None) -> None:
        self.phase = phase
        self.progress = progress
        self.done = 0
        self.total = 0

    def announce(self, total: int) -> None:
        self.total = total
        if self.progress is not None and total:
            self.progress(self.phase, 0, total)

    def tick(self, n: int) -> None:
        self.done += n
        if self.progress is not None:
            self.progress(self.phase, self.done, max(self.total, self.done) if self.total else 0)


class _FileScrub:
    """What a workspace snapshot stores for a new file (:class:`gitstate.workspace.snapshot.Scrub`):
    its bytes as the store's secrets policy stores them, findings of ``warn`` appended to ``found``
    at ``files['PATH']``."""

    def __init__(self, policy: Policy, found: list[Finding]) -> None:
        self.policy = policy
        self.found = found

    def __call__(self, data: bytes, path: str) -> bytes:
        return self.policy.file(data, f"files[{path!r}]", self.found)

    def finds(self, data: bytes) -> bool:
        return self.policy.finds_in_file(data)


def _file_scrub(policy: Policy, found: list[Finding]) -> _FileScrub | None:
    """The snapshot's :class:`_FileScrub`; ``None`` with the policy off."""
    return _FileScrub(policy, found) if policy.active else None
