"""Node boundaries as markers: each branch of a run has a node log, a chain of small commits under
``refs/agentos/<wt>/runs/<run>/nodes/<branch>``, one per change of a boundary (opened as
``running``, closed as ``completed`` or ``failed``). A record names the entry and exit checkpoints
(also as gitlinks, so ``git ls-tree`` shows them) instead of copying any state, so a node's
checkpoints are exactly the ones written inside it. Stores of the earlier format, whose node
boundaries were extra ``node_start``/``node_end`` checkpoints, are read too."""

from __future__ import annotations

import dataclasses
import hashlib
import time
import weakref
from collections.abc import Iterable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gitstate.errors import CorruptObjectError
from gitstate.format import checkpoint as cpfmt
from gitstate.format import nodes as nodefmt
from gitstate.format.checkpoint import Checkpoint
from gitstate.format.names import node_log_ref
from gitstate.format.nodes import NodeRecord
from gitstate.git.objects import MODE_BLOB, MODE_COMMIT, TreeEntry
from gitstate.git.reader import CommitData, ObjectReader
from gitstate.store import processes
from gitstate.store.base import StoreCore
from gitstate.store.transaction import Transaction


@dataclass(frozen=True)
class NodeBoundary:
    """Where a node was entered and left: the first and the last checkpoint written inside it
    (entry and exit; both the branch tip as it was when the node wrote none) and the node's status
    (``completed``, ``failed``, or ``running`` while it is open; ``stopped`` when the process
    that opened it provably ended without closing it, e.g. killed; a LangGraph node that called
    ``interrupt`` and waits to be resumed is ``interrupted``)."""

    node: str
    entry: str | None
    exit: str | None
    status: str


def now_iso() -> str:
    """The current UTC time as node records store it."""
    return datetime.fromtimestamp(time.time(), UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def new_record(run_id: str, node: str, branch: str, base: str | None, log_tip: str | None,
               metadata: dict[str, object] | None, owner: dict[str, Any] | None = None) -> NodeRecord:
    """The record of a node being entered now on ``branch`` whose tip is ``base``, the node log's
    tip being ``log_tip``, by process ``owner`` (:func:`gitstate.store.processes.this_process`). Its id is a digest of those
    (but the owner) and the time, so equal inputs give equal objects and two entries never share an
    id (each one moves the log)."""
    started = now_iso()
    seed = "\0".join([run_id, branch, node, base or "", log_tip or "", started])
    rid = hashlib.sha1(seed.encode("utf-8", "surrogatepass"), usedforsecurity=False).hexdigest()[:16]
    return NodeRecord(id=rid, node=node, branch=branch, status="running", entry=None, exit=None, base=base,
                      started_at=started, metadata=dict(metadata) if metadata else None, owner=owner)


class NodeLog:
    """The node log of one branch of a run."""

    def __init__(self, store: StoreCore, run_id: str, worktree: str, branch: str) -> None:
        self.store = store
        self.run_id = run_id
        self.branch = branch
        self.ref = node_log_ref(worktree, run_id, branch)

    def append(self, record: NodeRecord) -> None:
        """Add a record (a new boundary, or a new state of one) to the log."""
        self.store.write(lambda tx: self.stage(tx, [record]))

    def stage(self, tx: Transaction, records: list[NodeRecord]) -> None:
        """Stage records (in order) onto the log in ``tx``; a log moved by another writer makes the
        transaction run again."""
        if not records:
            return
        tip = old = self.store.read_ref(self.ref)
        policy = self.store.secrets
        for record in records:
            # an error's text and the metadata are free text: the write-time secrets policy applies
            found: list[Any] = []
            record = dataclasses.replace(record, error=policy.value(record.error, f"node {record.node}.error", found),
                                         metadata=policy.value(record.metadata, f"node {record.node}.metadata", found))
            entries: list[TreeEntry] = [(nodefmt.RECORD, tx.blob(nodefmt.encode(record, self.run_id)), MODE_BLOB)]
            if record.entry:
                entries.append((nodefmt.ENTRY_LINK, record.entry, MODE_COMMIT))
            if record.exit:
                entries.append((nodefmt.EXIT_LINK, record.exit, MODE_COMMIT))
            tip = tx.commit(tx.tree(entries), [tip] if tip else [], nodefmt.message(record, self.run_id))
        assert tip is not None
        last = records[-1]
        tx.set_ref(self.ref, old, tip, f"gitstate: node {last.node} {last.status}")

    def stage_step(self, tx: Transaction, node: str, checkpoint: str, parent: str | None, failed: bool) -> None:
        """Stage the record of a node step (a checkpoint written for ``node`` outside a
        :meth:`Run.node` block): the newest boundary of the log extended to ``checkpoint`` when it
        is a closed (completed) boundary of the same node whose exit is ``parent``, else a new
        boundary whose entry and exit are ``checkpoint`` (``failed`` if ``failed``)."""
        tip = self.store.read_ref(self.ref)
        last = self._record(tip) if tip is not None else None
        now = now_iso()
        if (last is not None and not failed and last.node == node and last.status == "completed"
                and parent is not None and last.exit == parent):
            record = dataclasses.replace(last, exit=checkpoint, ended_at=now)
        else:
            opened = new_record(self.run_id, node, self.branch, parent, tip, None)
            record = dataclasses.replace(opened, status="failed" if failed else "completed", entry=checkpoint,
                                         exit=checkpoint, ended_at=now)
        self.stage(tx, [record])

    def _record(self, oid: str) -> NodeRecord:
        reader = self.store.reader
        return read_record(reader, reader.commit(oid))

    def records(self) -> Iterator[NodeRecord]:
        """Every record, newest first."""
        reader = self.store.reader
        oid = self.store.read_ref(self.ref)
        seen: set[str] = set()
        while oid is not None and oid not in seen:
            seen.add(oid)
            commit = reader.commit(oid)
            yield read_record(reader, commit)
            oid = commit.parent_ids[0] if commit.parent_ids else None

    def boundaries(self, line: set[str]) -> list[tuple[NodeRecord, NodeBoundary]]:
        """The latest state of each boundary whose checkpoints are on the branch's current line
        (``line``: the ids of its history; a rolled-back node disappears with its checkpoints), in
        the order the nodes were entered: :func:`listed` of :meth:`records`."""
        return listed(self.records(), line)


def read_record(reader: ObjectReader, commit: CommitData) -> NodeRecord:
    """The record a node-log commit holds (its ``node.cbor``), as every reader decodes it:
    :class:`CorruptObjectError` when the tree or the blob cannot be read, there is no
    ``node.cbor``, or it does not decode (:func:`gitstate.format.nodes.decode`)."""
    found = reader.tree(commit.tree_id).get(nodefmt.RECORD)
    if found is None:
        raise CorruptObjectError(commit.id, f"node log entry has no {nodefmt.RECORD}")
    return nodefmt.decode(reader.blob(found.id), found.id)


def listed(records: Iterable[NodeRecord], line: set[str]) -> list[tuple[NodeRecord, NodeBoundary]]:
    """The boundaries a node log shows for its branch, from its ``records`` (newest first): the
    latest record of each id whose exit (while ``running``: base) is on the branch's current line
    (``line``: the ids of its history; a rolled-back node disappears with its checkpoints), in the
    order the nodes were entered. A ``running`` boundary whose process provably ended
    (:func:`gitstate.store.processes.gone`) is ``stopped``: it will never be closed."""
    latest: dict[str, NodeRecord] = {}
    order: list[str] = []
    for record in records:  # newest first: the first record seen of an id is its latest
        if record.id not in latest:
            latest[record.id] = record
        order.append(record.id)
    entered: list[str] = []
    for rid in reversed(order):  # oldest first: the first record of an id is its opening
        if rid not in entered:
            entered.append(rid)
    out: list[tuple[NodeRecord, NodeBoundary]] = []
    for rid in entered:
        record = latest[rid]
        anchor = record.exit if record.status != "running" else record.base
        if anchor is not None and anchor not in line:
            continue
        status = record.status
        if status == "running" and processes.gone(record.owner):
            status = "stopped"
        out.append((record, NodeBoundary(record.node, record.entry, record.exit, status)))
    return out


def written_since(history: Iterable[Checkpoint], base: str | None, started_at: str) -> list[Checkpoint]:
    """The checkpoints of a branch (``history``, newest first) written after ``base`` was its tip,
    newest first; if ``base`` left the line (a rollback inside the node), those made since the node
    started."""
    out: list[Checkpoint] = []
    for cp in history:
        if cp.id == base:
            return out
        out.append(cp)
    started = cpfmt.parse_time(started_at)
    return [cp for cp in out if cp.created_at >= started]


class Written:
    """The checkpoints one open :meth:`Run.node` block wrote, in order: those written on its branch
    of its run by the thread that opened it (through any ``Run`` object of that run, and by asyncio
    tasks started inside the block, which inherit its context), never another process's or
    thread's writes on the same branch."""

    def __init__(self, key: tuple[str, str, str], branch: str) -> None:
        self.key = key  # (common git dir, worktree, run id)
        self.branch = branch
        self.ids: list[str] = []


# The blocks open in this context (thread or asyncio task), innermost last; weak, so a block entered
# and never left (a caller that dropped it) is forgotten with its scope.
_OPEN: ContextVar[tuple[weakref.ref[Written], ...]] = ContextVar("gitstate_open_nodes", default=())


def open_block(key: tuple[str, str, str], branch: str) -> Written:
    """Start noting the checkpoints this context writes on ``branch`` of run ``key``."""
    written = Written(key, branch)
    _OPEN.set((*_OPEN.get(), weakref.ref(written)))
    return written


def close_block(written: Written) -> None:
    """Stop noting checkpoints for ``written`` (in the context that left the block)."""
    _OPEN.set(tuple(ref for ref in _OPEN.get() if ref() is not None and ref() is not written))


def blocks_open() -> bool:
    """Whether a node block is open in this context (else a checkpoint need not be noted)."""
    return bool(_OPEN.get())


def block_open(key: tuple[str, str, str], branch: str) -> bool:
    """Whether a node block of run ``key`` on ``branch`` is open in this context (its checkpoints
    then belong to that block's boundary, not to node steps of their own)."""
    return any((written := ref()) is not None and written.key == key and written.branch == branch
               for ref in _OPEN.get())


def note_written(key: tuple[str, str, str], branch: str, oid: str) -> None:
    """A checkpoint ``oid`` was written (its ref moved) on ``branch`` of run ``key`` in this
    context: each block open here on that branch of that run wrote it."""
    for ref in _OPEN.get():
        written = ref()
        if written is not None and written.key == key and written.branch == branch:
            written.ids.append(oid)


def block_bounds(written: list[str], inside: list[Checkpoint]) -> tuple[str, str] | None:
    """The entry and exit of a block that wrote ``written`` (oldest first), given the checkpoints
    of the branch written since the block began that are on its line when it ends (``inside``,
    newest first, :func:`written_since`): the first and the last of its own checkpoints still on
    the line; those it wrote but a rollback inside the block removed do not count, unless all did
    (then the boundary points at them and is listed no more, as a rolled-back node is not)."""
    if not written:
        return None
    on_line = {cp.id for cp in inside}
    kept = [oid for oid in written if oid in on_line] or written
    return kept[0], kept[-1]


def legacy_boundaries(history: list[Checkpoint]) -> list[NodeBoundary]:
    """Node boundaries of the earlier format (``node_start``/``node_end`` checkpoints), in order."""
    found: list[tuple[int, NodeBoundary]] = []
    closed: set[str] = set()
    for cp in history:
        if cp.trigger == cpfmt.NODE_END and cp.node is not None:
            if cp.node_entry:
                closed.add(cp.node_entry)
            found.append((cp.step, NodeBoundary(cp.node, cp.node_entry, cp.id, cp.node_status or "completed")))
        elif cp.trigger == cpfmt.NODE_START and cp.node is not None and cp.id not in closed:
            found.append((cp.step, NodeBoundary(cp.node, cp.id, None, "running")))
    found.reverse()
    return [nb for _, nb in found]
