"""The checkpoint as stored: the ``meta.cbor`` payload, the readable commit message with trailers,
and :class:`Checkpoint`, the read-side view of one checkpoint commit (state decoded lazily).

Format (version :data:`FORMAT_VERSION`, see docs/FORMAT.md): a checkpoint is a commit whose tree
holds ``meta.cbor`` and the state (``state/`` tree or ``state.cbor``), optionally ``tools.cbor``,
``audit.cbor`` and ``files/``; its first parent is the previous checkpoint of its branch."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gitstate.errors import CorruptObjectError, UnsupportedFormatError
from gitstate.format import encoding, lgtree, lgwrites
from gitstate.format.names import is_kept_copy
from gitstate.format.statetree import StateReader, StateWriter
from gitstate.git import handles
from gitstate.git.objects import MODE_BLOB, MODE_TREE, ObjectWriter, TreeEntry
from gitstate.git.reader import CommitData, ObjectReader, TreeData

#: The format version every payload gitstate writes carries (``v``); a reader reads every version up
#: to it. 2: state values keep their maps' key order (docs/FORMAT.md, "Encoding").
FORMAT_VERSION = 2
CHECKPOINT_KIND = "gitstate/checkpoint"
RUN_KIND = "gitstate/run"

META = "meta.cbor"
STATE_TREE = "state"
STATE_LEAF = "state.cbor"
TOOLS = "tools.cbor"
AUDIT = "audit.cbor"
FILES = "files"
RUN_RECORD = "run.cbor"

NODE_START = "node_start"
NODE_END = "node_end"

#: The statuses a checkpoint records: ``interrupted`` waits for an answer (a pending approval, an
#: ``interrupt``), ``stopped`` ended without finishing and without an error (killed, cancelled).
STATUSES = ("running", "completed", "failed", "interrupted", "stopped")
#: The status of a run of an integration that never says it finished (a session, a memory store):
#: derived, never recorded; see :data:`gitstate.format.frameworks.UNFINISHED`.
SAVED = "saved"
_STATUS_SYNONYMS = {
    "done": "completed", "complete": "completed", "success": "completed", "succeeded": "completed",
    "ok": "completed", "error": "failed", "failure": "failed", "errored": "failed",
    "cancelled": "stopped", "canceled": "stopped", "aborted": "stopped", "killed": "stopped",
    "paused": "interrupted", "waiting": "interrupted",
    "active": "running", "in_progress": "running",
}
#: Every status word a writer may give (normalised to one of :data:`STATUSES` when stored).
STATUS_WORDS = (*STATUSES, *sorted(_STATUS_SYNONYMS))


def now_iso() -> str:
    """The current UTC time as stored in payloads (ISO 8601, microseconds, ``Z``)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# The exact shape :func:`now_iso` writes; such text takes the fast path (``strptime`` costs ~30 µs,
# a third of decoding a checkpoint's metadata in ``history``/``list_runs``).
_STORED_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")
_EPOCH = datetime.fromtimestamp(0, UTC)


def parse_time(text: Any) -> datetime:
    """Parse a stored timestamp (falls back to the epoch on garbage, never raises)."""
    if isinstance(text, str):
        try:
            if _STORED_TIME.fullmatch(text):
                return datetime.fromisoformat(text)  # 3.11+: reads the trailing Z as UTC
            return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
        except ValueError:
            pass
    return _EPOCH


def normalize_status(status: str | None) -> str | None:
    """Map a user status to one of :data:`STATUSES` (others kept as given)."""
    if status is None:
        return None
    low = status.strip().lower()
    return low if low in STATUSES else _STATUS_SYNONYMS.get(low, status)


def trailer_value(value: Any) -> str:
    """A value as it is written in a commit trailer (one line: backslash, CR and LF escaped)."""
    text = str(value)
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")


def trailer(message: str, key: str) -> str | None:
    """The value of the last trailer ``key`` of a commit message (``None`` when it has none)."""
    for line in reversed(message.splitlines()):
        if line.startswith(f"{key}: "):
            return line[len(key) + 2:].strip()
    return None


def replace_trailer(message: str, key: str, value: str) -> str:
    """The message with the value of its last trailer ``key`` replaced (other lines, e.g.
    integrations' own trailers, kept as they are)."""
    lines = message.split("\n")
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].startswith(f"{key}: "):
            lines[i] = f"{key}: {value}"
            break
    return "\n".join(lines)


def subject(node: str | None, step: int, trigger: str | None, status: str | None) -> str:
    """The readable first line of a checkpoint commit: ``plan · step 3 · tool_end``."""
    parts = [node or "checkpoint", f"step {step}", trigger or "save"]
    if status:
        parts.append(status)
    return " · ".join(trailer_value(p) for p in parts)


def langgraph_step(workflow: Any, metadata: Any) -> int | None:
    """LangGraph's own step of a checkpoint the LangGraph saver wrote (``metadata.langgraph_step``:
    -1 for the input, 0, 1 … per superstep), ``None`` for any other checkpoint."""
    if workflow != lgtree.WORKFLOW or not isinstance(metadata, Mapping):
        return None
    step = metadata.get("langgraph_step")
    return step if isinstance(step, int) and not isinstance(step, bool) else None


def shown_step(meta: Mapping[str, Any]) -> int:
    """The step people know a checkpoint by: LangGraph's for a LangGraph checkpoint
    (:func:`langgraph_step`), the position on its branch (``step``) otherwise."""
    found = langgraph_step(meta.get("workflow"), meta.get("metadata"))
    return found if found is not None else int(meta["step"])


def message(meta: Mapping[str, Any]) -> str:
    """The full commit message: subject, blank line, trailers. The subject's step is
    :func:`shown_step` (LangGraph's for a LangGraph checkpoint, which also gets a
    ``LangGraph-Step`` trailer); the ``Step`` trailer repeats ``meta.cbor``'s ``step``."""
    lines = [subject(meta.get("node"), shown_step(meta), meta.get("trigger"), meta.get("status")), ""]
    trailers = [
        ("Run", meta["run"]), ("Branch", meta["branch"]), ("Workflow", meta.get("workflow")),
        ("Node", meta.get("node")), ("Step", meta["step"]),
        ("LangGraph-Step", langgraph_step(meta.get("workflow"), meta.get("metadata"))),
        ("Trigger", meta.get("trigger")),
        ("Status", meta.get("status")), ("Node-Status", meta.get("node_status")),
        ("Node-Entry", meta.get("node_entry")), ("Gitstate-Format", FORMAT_VERSION),
    ]
    lines += [f"{k}: {trailer_value(v)}" for k, v in trailers if v is not None]
    return "\n".join(lines) + "\n"


def check_format(payload: Mapping[str, Any], kind: str, oid: str) -> None:
    """Refuse payloads of another kind or of a format version this code does not know."""
    if payload.get("format") != kind:
        raise CorruptObjectError(oid, f"not a {kind} payload")
    version = payload.get("v")
    if not isinstance(version, int) or isinstance(version, bool):
        raise CorruptObjectError(oid, "payload has no format version")
    if version > FORMAT_VERSION or version < 1:
        raise UnsupportedFormatError(oid, f"format version {version} is not supported "
                                          f"(this gitstate reads 1 to {FORMAT_VERSION})")


def _tree_entry(tree: TreeData, name: str) -> tuple[str, str] | None:
    item = tree.get(name)
    return None if item is None else (item.id, item.type_str)


def read_commit(reader: ObjectReader, oid: str) -> CommitData:
    """Look up a commit, as a corrupt-object error when missing, damaged or of another type."""
    return reader.commit(oid)


def read_payload(reader: ObjectReader, commit: CommitData, name: str, kind: str, what: str) -> dict[str, Any]:
    """Decode the payload blob ``name`` of a commit's tree as a map of format ``kind`` (a
    :class:`CorruptObjectError` naming ``what`` the commit should be when it is missing, not a
    map, or of another kind; :class:`UnsupportedFormatError` for a newer version)."""
    oid = commit.id
    entry = reader.tree(commit.tree_id).get(name)
    if entry is None or entry.type_str != "blob":
        raise CorruptObjectError(oid, f"not a {what} (no {name})")
    payload = StateReader(reader).blob_value(entry.id)
    if not isinstance(payload, dict):
        raise CorruptObjectError(oid, f"{name} of a {what} is not a map")
    check_format(payload, kind, oid)
    return payload


def read_meta(reader: ObjectReader, commit: CommitData) -> dict[str, Any]:
    """Decode and validate the ``meta.cbor`` of a checkpoint commit."""
    oid = commit.id
    meta = read_payload(reader, commit, META, CHECKPOINT_KIND, "gitstate checkpoint")
    step = meta.get("step")
    if (not isinstance(meta.get("run"), str) or not isinstance(step, int) or isinstance(step, bool) or step < 0
            or step.bit_length() > 63):
        raise CorruptObjectError(oid, f"{META} lacks a run id or a valid step")
    for key in _TEXT_KEYS:
        value = meta.get(key)
        if value is not None and not isinstance(value, str):
            raise CorruptObjectError(oid, f"{META}: {key} is not text")
    return meta


_TEXT_KEYS = ("branch", "node", "trigger", "status", "workflow", "node_status", "node_entry")  # or absent/null


def files_paths(meta: Mapping[str, Any], oid: str) -> tuple[str, ...] | None:
    """The paths a partial workspace snapshot was limited to (``meta.cbor`` key ``files_paths``);
    ``None`` for a full snapshot (or none). Malformed values count as corrupt, not as "everything":
    treating a partial snapshot as full would make a restore delete the files it never saw."""
    value = meta.get("files_paths")
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(p, str) for p in value):
        raise CorruptObjectError(oid, "files_paths is not a list of paths")
    return tuple(value)


@dataclass(frozen=True, eq=False)
class Checkpoint:
    """One checkpoint: an immutable snapshot of a run's state at one step.

    ``state``, ``tools`` and ``audit`` are decoded from git on first access; every access returns a
    fresh copy, so mutating it never changes what is stored. ``files_paths`` is set when the
    workspace snapshot (``files/``) holds only some paths of the worktree (``files=[paths]``)."""

    id: str
    run_id: str
    branch: str
    node: str | None
    step: int
    trigger: str | None
    status: str | None
    metadata: dict[str, Any]
    created_at: datetime
    parent_ids: tuple[str, ...]
    workflow: str | None
    node_status: str | None
    node_entry: str | None
    tree_id: str
    base: int
    repo_path: str
    files_paths: tuple[str, ...] | None = None

    @classmethod
    def from_commit(cls, reader: ObjectReader, commit: CommitData, repo_path: str) -> Checkpoint:
        """Build the view of a checkpoint commit (decodes only ``meta.cbor``); ``repo_path`` is the
        git dir its state is read from later, through the reading thread's own handle."""
        meta = read_meta(reader, commit)
        metadata = meta.get("metadata") or {}
        if not isinstance(metadata, dict):
            raise CorruptObjectError(commit.id, "metadata is not a map")
        return cls(
            id=commit.id,
            run_id=meta["run"],
            branch=str(meta.get("branch", "main")),
            node=meta.get("node"),
            step=meta["step"],
            trigger=meta.get("trigger"),
            status=meta.get("status"),
            metadata=metadata,
            created_at=parse_time(meta.get("created_at")),
            parent_ids=commit.parent_ids,
            workflow=meta.get("workflow"),
            node_status=meta.get("node_status"),
            node_entry=meta.get("node_entry"),
            tree_id=commit.tree_id,
            base=meta["base"] if isinstance(meta.get("base"), int) and meta["base"].bit_length() <= 63 else 0,
            repo_path=repo_path,
            files_paths=files_paths(meta, commit.id),
        )

    @property
    def display_step(self) -> int:
        """The step people know this checkpoint by, and the one the command line and the view
        print: LangGraph's own for a LangGraph checkpoint (-1 for the input; see
        :func:`langgraph_step`), :attr:`step` (the position on its branch) otherwise."""
        found = langgraph_step(self.workflow, self.metadata)
        return found if found is not None else self.step

    @property
    def tip_status(self) -> str | None:
        """The status of a line (a run's branch, a LangGraph thread) whose newest checkpoint this
        is: the recorded :attr:`status`, except that a LangGraph checkpoint recorded ``running``
        (tasks were pending when it was written) reads ``stopped`` when nothing came after it
        and a task is still to run without having written (LangGraph's ``get_state`` names it in
        ``next``): the graph stopped before it (an ``interrupt_before`` breakpoint, a process that
        ended) or is still running it, which the store cannot tell apart (``interrupted`` is kept
        for a task that called ``interrupt()``: its question is pending); it stays ``running``
        once every task wrote its output (kept in the commit or in writes refs: see
        :meth:`line_status`)."""
        return self.line_status()

    def line_status(self, writes: Iterable[str] | None = None) -> str | None:
        """:attr:`tip_status`; ``writes``: the blob ids of the run's LangGraph writes refs, in name
        order (``None``: looked up, which lists the repository's refs)."""
        if self.status != "running" or self.workflow != lgtree.WORKFLOW:
            return self.status
        reader = self._reader().reader
        pending = self._pending_writes(reader, None, writes)
        return "stopped" if lgtree.tasks_pending(reader, self.tree_id, pending) else "running"

    def _pending_writes(self, reader: ObjectReader, meta: Mapping[str, Any] | None,
                        writes: Iterable[str] | None = None,
                        index: lgwrites.WritesIndex | None = None) -> dict[tuple[str, int], list[Any]] | None:
        """The records the run's LangGraph writes refs hold for this checkpoint: from the blobs
        ``writes`` when given, else from ``index`` when given, else from the refs listed (``meta``:
        its ``meta.cbor``, read when ``None``, which names the worktree of the refs)."""
        cid, ns = self.metadata.get("checkpoint_id"), str(self.metadata.get("checkpoint_ns") or "")
        if not isinstance(cid, str):
            return None
        if writes is not None:
            return lgwrites.blob_records(reader, writes, ns, cid)
        worktree = (meta if meta is not None else read_meta(reader, reader.commit(self.id))).get("worktree")
        if not isinstance(worktree, str):
            return None
        if index is not None:
            return index.records(worktree, self.run_id, ns, cid)
        return lgwrites.ref_records(reader, worktree, self.run_id, ns, cid)

    @property
    def short_id(self) -> str:
        """The first 12 hex digits of the id."""
        return self.id[:12]

    @property
    def parent_id(self) -> str | None:
        """The previous checkpoint of the branch (``None`` for the first)."""
        return self.parent_ids[0] if self.parent_ids else None

    def _reader(self) -> StateReader:
        return StateReader(handles.reader(self.repo_path))

    def _root(self) -> TreeData:
        return self._reader().tree(self.tree_id)

    @property
    def state(self) -> Any:
        """The stored state (a fresh copy on every access). For a LangGraph checkpoint (written by
        ``gitstate.langgraph``): its channel values as plain data for display (messages as
        ``{type, content, ...}``, other objects as ``{"$type": ..., fields}``; see
        :mod:`gitstate.format.lgserde`), decoded without importing or building anything."""
        reader = self._reader()
        root = reader.tree(self.tree_id)
        tree = _tree_entry(root, STATE_TREE)
        if tree is not None:
            return reader.mapping(tree[0])
        values = lgtree.values_tree(root)
        if values is not None:
            return lgtree.show_values(reader.reader, values)
        leaf = _tree_entry(root, STATE_LEAF)
        if leaf is not None:
            return reader.blob_value(leaf[0])
        raise CorruptObjectError(self.id, "checkpoint has no state")

    @property
    def state_id(self) -> str | None:
        """Id of the state tree (or leaf blob; a LangGraph checkpoint's values tree): equal ids
        mean equal states."""
        root = self._root()
        for name in (STATE_TREE, lgtree.LG_TREE, STATE_LEAF):
            entry = _tree_entry(root, name)
            if entry is not None:
                return entry[0]
        return None

    def _optional_list(self, name: str) -> list[Any]:
        entry = _tree_entry(self._root(), name)
        if entry is None:
            return []
        value = self._reader().blob_value(entry[0])
        if not isinstance(value, list):
            raise CorruptObjectError(entry[0], f"{name} is not a list")
        return value

    @property
    def tools(self) -> list[Any]:
        """Tool invocations recorded with this checkpoint (``tools=`` of ``Run.checkpoint``)."""
        return self._optional_list(TOOLS)

    @property
    def audit(self) -> list[Any]:
        """Audit events recorded with this checkpoint (``audit=`` of ``Run.checkpoint``)."""
        return self._optional_list(AUDIT)

    @property
    def langgraph(self) -> dict[str, Any] | None:
        """LangGraph's own view of a checkpoint written by ``gitstate.langgraph`` (``None`` for
        others): ``checkpoint_id``, ``checkpoint_ns``, ``source``, ``step`` (-1 for the input),
        ``parents``, ``next`` (nodes scheduled, as LangGraph's ``get_state_history`` names them),
        ``metadata`` and pending ``writes`` (those of its commit and of the run's writes refs), as
        plain data (see :func:`gitstate.format.lgtree.details`)."""
        return self.langgraph_view()

    def langgraph_view(self, live: bool = False,
                       writes: lgwrites.WritesIndex | None = None) -> dict[str, Any] | None:
        """:attr:`langgraph`; ``live``: ``next`` as LangGraph's ``get_state`` of a thread names it
        at its latest checkpoint (the tasks that wrote already left out): for a line's tip.
        ``writes``: the run's writes refs read through this index (a loop over many checkpoints),
        not listed and decoded again for this one."""
        if self.workflow != lgtree.WORKFLOW:
            return None
        reader = self._reader().reader
        meta = read_meta(reader, reader.commit(self.id))
        return lgtree.details(reader, self.tree_id, meta, self._pending_writes(reader, meta, index=writes), live=live)

    @property
    def files_tree_id(self) -> str | None:
        """Id of the workspace snapshot tree, if the checkpoint captured files."""
        entry = _tree_entry(self._root(), FILES)
        return entry[0] if entry is not None else None

    def to_dict(self, with_state: bool = False, live: bool = False) -> dict[str, Any]:
        """A JSON-friendly summary (the CLI's ``--json`` shape); ``step`` is :attr:`display_step`;
        ``live``: its LangGraph view as the line's tip (:meth:`langgraph_view`)."""
        out: dict[str, Any] = {
            "id": self.id, "run": self.run_id, "branch": self.branch, "node": self.node, "step": self.display_step,
            "trigger": self.trigger, "status": self.status, "node_status": self.node_status,
            "node_entry": self.node_entry, "workflow": self.workflow, "metadata": self.metadata,
            "files_paths": list(self.files_paths) if self.files_paths is not None else None,
            "created_at": self.created_at.isoformat(), "parent_ids": list(self.parent_ids),
        }
        if with_state:
            out["state"] = self.state
            lg = self.langgraph_view(live)
            if lg is not None:
                out["langgraph"] = lg
        return out

    def __repr__(self) -> str:
        return f"<Checkpoint {self.short_id} run={self.run_id!r} branch={self.branch!r} step={self.step}>"


def latest_line(tips: Mapping[str, Checkpoint]) -> str | None:
    """The branch holding a LangGraph thread's latest checkpoint of its root namespace (the greatest
    LangGraph checkpoint id among the tips, the one LangGraph's ``get_state`` returns; ``main``
    first on a tie), or ``None`` when no tip is a LangGraph checkpoint of the root namespace. A
    line a pull kept (``<branch>@<remote>``: :func:`~gitstate.format.names.is_kept_copy`) counts
    only when no other line holds such a checkpoint, as for the saver."""
    best: tuple[bool, str, bool, str] | None = None
    for name, cp in tips.items():
        info = cp.metadata
        cid = info.get("checkpoint_id")
        if cp.workflow != lgtree.WORKFLOW or not isinstance(cid, str) or info.get("checkpoint_ns"):
            continue
        key = (not is_kept_copy(name), cid, name == "main", name)
        if best is None or key > best:
            best = key
    return best[3] if best is not None else None


def summary_line(tips: Mapping[str, Checkpoint]) -> str:
    """The branch a run is summarised on (``git agentos runs``, the view's runs page): a LangGraph
    thread's :func:`latest_line`, else ``main``, else the branch whose tip was written last.
    ``tips`` (branch name → tip checkpoint) must not be empty."""
    return latest_line(tips) or ("main" if "main" in tips else max(tips, key=lambda b: tips[b].created_at))


def state_entry(writer: ObjectWriter, state: Any) -> TreeEntry:
    """Write a state and return its entry in a checkpoint tree: a mapping with string keys becomes
    the ``state/`` tree (one entry per key, for structural sharing), anything else ``state.cbor``."""
    if isinstance(state, Mapping) and all(isinstance(k, str) for k in state):
        return (STATE_TREE, StateWriter(writer).mapping(dict(state)), MODE_TREE)
    return (STATE_LEAF, StateWriter(writer).leaf(state, ""), MODE_BLOB)


def encode_list(items: list[Any], path: str) -> bytes:
    """Encode ``tools.cbor``/``audit.cbor`` (a list; its maps keep their key order)."""
    return encoding.dumps(items, path, ordered=True)


def encode_meta(meta: Mapping[str, Any]) -> bytes:
    """Encode a meta payload (``None`` fields are left out), keys in canonical order: a gitstate
    of format 1 decodes it, finds the newer ``v`` and refuses it as such."""
    return encoding.dumps({k: v for k, v in meta.items() if v is not None}, "meta")
