"""The workflow state adapter of the Workflow Test Bench design (``IStateAdapter``) on
gitstate runs.

A *session* is one branch of one run: the session id of a run's first line is the run id; a branch
created by :meth:`GitStateAdapter.create_branch` has the session id ``<run id>#<branch>``. Run ids
may contain any character, ``#`` included, so a session id is read like a CLI reference
(gitstate.refspec): an exact existing run id wins; otherwise it is split at the ``#`` whose prefix
is the longest existing run id. ``create_branch`` never picks a branch whose session id is also a
run id, so the ids it returns always read back to the same session. A
*snapshot* is a checkpoint (its id is the commit id). What the seed kept in side tables is in git:
node boundaries (``wtb_node_boundaries``) are the entry/exit checkpoints :meth:`Run.node` writes,
and the workspace snapshot of a checkpoint (``wtb_checkpoint_files``) is its ``files/`` tree."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from pygit2.enums import ObjectType

from gitstate.errors import CorruptObjectError, GitStateError, UsageError
from gitstate.format import checkpoint as cpfmt
from gitstate.format.checkpoint import Checkpoint
from gitstate.store.run import NodeBoundary, NodeScope, Run
from gitstate.store.store import Store, open_store

SESSION_SEP = "#"
WORKFLOW = "wtb"


@dataclass
class ExecutionState:
    """Snapshot of a workflow execution: where it is, its variables, the path taken
    and each node's result."""

    current_node_id: str | None = None
    workflow_variables: dict[str, Any] = field(default_factory=dict)
    execution_path: list[str] = field(default_factory=list)
    node_results: dict[str, Any] = field(default_factory=dict)

    def clone(self) -> ExecutionState:
        """A copy whose containers are independent of this one."""
        return ExecutionState(self.current_node_id, dict(self.workflow_variables), list(self.execution_path),
                              dict(self.node_results))

    def to_dict(self) -> dict[str, Any]:
        """The stored form (a plain mapping; values must be storable by gitstate)."""
        return {"current_node_id": self.current_node_id, "workflow_variables": dict(self.workflow_variables),
                "execution_path": list(self.execution_path), "node_results": dict(self.node_results)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ExecutionState:
        """Inverse of :meth:`to_dict` (missing keys take their defaults)."""
        return cls(data.get("current_node_id"), dict(data.get("workflow_variables") or {}),
                   list(data.get("execution_path") or []), dict(data.get("node_results") or {}))


def _session(run_id: str, branch: str) -> str:
    return run_id if branch == "main" else f"{run_id}{SESSION_SEP}{branch}"


def _parse_session(store: Store, session_id: str) -> tuple[str, str]:
    """``(run id, branch)`` of a session id: an exact run id is its ``main`` session; otherwise the
    split at the ``#`` leaving the longest existing run id; otherwise the whole id (→ RunNotFound)."""
    if not isinstance(session_id, str) or not session_id:
        raise UsageError("session id must be a non-empty string")
    if store.has_run(session_id):
        return session_id, "main"
    cuts = [i for i, ch in enumerate(session_id) if ch == SESSION_SEP]
    for i in reversed(cuts):  # rightmost '#' first = longest run id
        run_id, branch = session_id[:i], session_id[i + 1:]
        if branch and store.has_run(run_id):
            return run_id, branch
    return session_id, "main"


def _is_tree(store: Store, oid: str) -> bool:
    try:
        return store.core.reader.header(store.expand(oid))[0] == ObjectType.TREE
    except GitStateError:
        return False


class GitStateAdapter:
    """``IStateAdapter`` on a gitstate store: sessions are run branches, snapshots are checkpoints.

    The adapter keeps a *current session* (set by :meth:`initialize_session` and
    :meth:`create_branch`); :meth:`save_snapshot` and :meth:`rollback` act on it."""

    def __init__(self, store: Store | None = None, *, workflow: str = WORKFLOW) -> None:
        self.store = store if store is not None else open_store()
        self.workflow = workflow
        self._run: Run | None = None
        self._branch = "main"

    @classmethod
    def from_path(cls, path: str, *, workflow: str = WORKFLOW) -> GitStateAdapter:
        """An adapter on the repository at (or above) ``path``."""
        return cls(open_store(path), workflow=workflow)

    # -- sessions -----------------------------------------------------------------------------

    @property
    def session_id(self) -> str | None:
        """The current session id (``None`` before :meth:`initialize_session`)."""
        return None if self._run is None else _session(self._run.id, self._branch)

    def _current(self) -> Run:
        if self._run is None:
            raise UsageError("no active session: call initialize_session first")
        return self._run

    def _use(self, session_id: str) -> tuple[Run, str]:
        run_id, branch = _parse_session(self.store, session_id)
        return self.store.get_run(run_id), branch

    def initialize_session(self, execution_id: str, initial_state: ExecutionState) -> str:
        """Start a session for an execution: a run whose id is ``execution_id`` (created if new; an
        existing run is continued) and a first snapshot of ``initial_state``. Returns the session id."""
        run = self.store.open_run(execution_id, workflow=self.workflow)
        self._run, self._branch = run, "main"
        run.checkpoint(initial_state.to_dict(), node=initial_state.current_node_id, trigger="session_start",
                       metadata={"name": "initial", "wtb_execution_id": execution_id}, mark_node=False)
        return _session(run.id, "main")

    def save_snapshot(self, state: ExecutionState, name: str | None = None,
                      metadata: Mapping[str, Any] | None = None, *, files_tree: str | None = None) -> str:
        """Checkpoint ``state`` on the current session; returns the snapshot id. ``files_tree`` (the
        id of a tree holding a workspace snapshot) is linked to the checkpoint as its ``files/``."""
        run = self._current()
        meta = dict(metadata or {})
        if name is not None:
            meta["name"] = name
        if files_tree is not None and not _is_tree(self.store, files_tree):
            raise CorruptObjectError(files_tree, "workspace snapshot must be an existing tree")
        cp = run.checkpoint(state.to_dict(), branch=self._branch, node=state.current_node_id,
                            trigger="snapshot", metadata=meta, files_tree=files_tree, mark_node=False)
        return cp.id

    def load_snapshot(self, snapshot_id: str) -> ExecutionState:
        """The state stored in a snapshot."""
        return self._state(self._checkpoint(snapshot_id))

    def _checkpoint(self, snapshot_id: str) -> Checkpoint:
        if self._run is not None:
            return self._run.load(snapshot_id)
        return self.store.checkpoint(snapshot_id)

    @staticmethod
    def _state(cp: Checkpoint) -> ExecutionState:
        state = cp.state
        if not isinstance(state, Mapping):
            raise CorruptObjectError(cp.id, "snapshot state is not an execution state")
        return ExecutionState.from_dict(state)

    def create_branch(self, from_snapshot_id: str) -> str:
        """A new session starting at a snapshot (the current session becomes it); its history is
        the snapshot's lineage. Returns the new session id."""
        cp = self._checkpoint(from_snapshot_id)
        run = self.store.get_run(cp.run_id)
        taken = set(run.branches())
        n = 1
        while f"branch-{n}" in taken or self.store.has_run(_session(run.id, f"branch-{n}")):
            n += 1
        run.fork(cp.id, f"branch-{n}")
        self._run, self._branch = run, f"branch-{n}"
        return _session(run.id, self._branch)

    def rollback(self, to_snapshot_id: str) -> ExecutionState:
        """Move the current session back to a snapshot (any checkpoint: a node's exit checkpoint for
        node-level rollback, any tool checkpoint for tool-level rollback; ``node:NAME`` names the
        latest exit of a node) and return its state. The abandoned checkpoints stay in the branch's
        reflog: ``Run.undo`` restores them."""
        run = self._current()
        cp = run.rollback(to_snapshot_id, branch=self._branch)
        return self._state(cp)

    def get_snapshots(self, session_id: str) -> list[dict[str, Any]]:
        """The snapshots of a session, oldest first: ``id``, ``name``, ``created_at``, ``node_id``,
        ``is_auto`` (written by a node boundary rather than :meth:`save_snapshot`), ``parent_id``."""
        run, branch = self._use(session_id)
        out = [{
            "id": cp.id, "name": cp.metadata.get("name"), "created_at": cp.created_at.isoformat(),
            "node_id": cp.node, "is_auto": cp.trigger in (cpfmt.NODE_START, cpfmt.NODE_END),
            "parent_id": cp.parent_id, "trigger": cp.trigger,
        } for cp in run.history(branch)]
        out.reverse()
        return out

    def cleanup(self, session_id: str, keep_latest: int = 5) -> int:
        """Keep only the newest ``keep_latest`` snapshots of a session; returns how many were removed.
        Kept snapshots get new ids (their parent links are rewritten); the old line stays in the
        reflog until it expires."""
        run, branch = self._use(session_id)
        return run.prune(keep_latest, branch=branch).removed

    # -- node boundaries and workspace links (the seed's side tables) ------------------------

    @contextmanager
    def node(self, node_id: str, state: ExecutionState | None = None) -> Iterator[NodeScope]:
        """Mark a node boundary on the current session: an entry checkpoint now, an exit checkpoint
        (status ``completed`` or ``failed``) when the block ends."""
        run = self._current()
        with run.node(node_id, branch=self._branch, state=state.to_dict() if state else None) as scope:
            yield scope

    def node_boundaries(self, session_id: str | None = None) -> list[NodeBoundary]:
        """Entry/exit checkpoint and status of each node of a session (current one by default)."""
        run, branch = self._use(session_id) if session_id else (self._current(), self._branch)
        return run.nodes(branch)

    def checkpoint_files(self, snapshot_id: str) -> str | None:
        """Id of the workspace snapshot tree linked to a snapshot, if any."""
        return self._checkpoint(snapshot_id).files_tree_id
