"""A LangGraph checkpoint as the saver (``gitstate.langgraph``) lays it out in git, read for display.

The checkpoint commit's tree holds ``meta.cbor`` (with key :data:`LG_META`: the LangGraph
checkpoint and metadata as serde-typed pairs), ``langgraph/`` (:data:`LG_TREE`, one entry per channel:
``<channel>.v`` a typed blob, ``<channel>.l/`` a list in msgpack chunks of :data:`CHUNK` items,
grouped :data:`FANOUT` to a subtree) and, when tasks wrote something, ``langgraph-writes.cbor``
(:data:`WRITES_BLOB`). docs/FORMAT.md ("LangGraph checkpoints") is the contract.

Everything here reads through the guarded reader and shows values with
:mod:`gitstate.format.lgserde`: plain data, nothing the data names is imported or built. A value
whose bytes do not decode is shown as an ``{"$error": ...}`` stub in its place; a damaged or missing
git object is a :class:`~gitstate.errors.CorruptObjectError`, as everywhere else."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from gitstate.errors import CorruptObjectError
from gitstate.format import encoding, frameworks, lgserde, lgwrites
from gitstate.format.names import decode_component
from gitstate.git.objects import MODE_TREE
from gitstate.git.reader import ObjectReader, TreeData

__all__ = [
    "CHUNK", "FANOUT", "JOIN_PREFIX", "LG_META", "LG_TREE", "LIST", "VALUE", "WORKFLOW", "WRITES_BLOB", "Boundary",
    "LineCheckpoint", "boundaries", "channel_entries", "checkpoint_key", "scheduling_channel", "shown_entries", "checkpoint_problem", "details", "join_target",
    "metadata_problem", "next_nodes", "read_writes", "seen_since", "show_chunk", "show_entry", "show_values",
    "stored_problem", "subgraph_node", "tasks_pending", "values_tree", "START", "TASKS",
    "TRIGGER_PREFIX",
]

WORKFLOW = frameworks.LANGGRAPH
LG_TREE = "langgraph"
LG_META = "langgraph"
WRITES_BLOB = lgwrites.WRITES_BLOB
VALUE = ".v"
LIST = ".l"
CHUNK = 32
FANOUT = 64
MAX_CHUNK_DEPTH = 64  # chunk subtrees a reader follows (64**64 chunks is far beyond any list)
TRIGGER_PREFIX = "branch:to:"  # LangGraph's per-node trigger channels (a value: the node runs next)
START = "__start__"  # the input channel (and the node that reads it)
TASKS = "__pregel_tasks"  # pending Send packets
T_ID = "LangGraph-Checkpoint"  # the commit trailers naming a checkpoint (see gitstate.langgraph.index)
T_NS = "LangGraph-Namespace"
JOIN_PREFIX = "join:"  # LangGraph's barrier of an edge from several nodes: join:<a>+<b>:<node>
_SET_TYPES = ("builtins.set", "builtins.frozenset")


def checkpoint_key(message: str) -> tuple[str, str] | None:
    """The LangGraph identity of a checkpoint commit, from its message: the escaped values of its
    ``LangGraph-Namespace`` (empty for the root namespace) and ``LangGraph-Checkpoint`` trailers;
    ``None`` for a commit the LangGraph saver did not write. Two commits with one identity are one
    checkpoint before and after the saver folded its pending writes in (docs/FORMAT.md)."""
    found: dict[str, str] = {}
    for line in message.splitlines():
        key, sep, value = line.partition(": ")
        if sep and key in (T_ID, T_NS):
            found[key] = value
    return (found.get(T_NS, ""), found[T_ID]) if T_ID in found else None


def join_target(channel: str, value: Any) -> str | None:
    """The node a join channel (``join:<a>+<b>:<node>``, the barrier LangGraph puts before a node
    reached by an edge from several nodes) triggers now: ``<node>`` when the channel's value holds
    every name it waits for (a deferred node's value, ``(names, finished)``, also needs
    ``finished``), else ``None``. ``value`` is the channel's value as LangGraph holds it (a set) or
    as :func:`show_entry` shows it (``{"$type": "builtins.set", "value": [...]}``)."""
    if not channel.startswith(JOIN_PREFIX):
        return None
    starts, sep, node = channel[len(JOIN_PREFIX):].rpartition(":")
    if not sep or not node:
        return None
    if isinstance(value, (tuple, list)) and len(value) == 2 and isinstance(value[1], bool):
        if not value[1]:
            return None
        value = value[0]
    if isinstance(value, dict) and value.get("$type") in _SET_TYPES:
        value = value.get("value")
    if not isinstance(value, (set, frozenset, list)):
        return None
    if not all(isinstance(name, str) for name in value):
        return None  # not a barrier LangGraph wrote
    # compared piece by piece: the channel joins the names with "+", which a node name may hold
    pieces = {piece for name in value for piece in name.split("+")}
    return node if pieces == set(starts.split("+")) else None


def values_tree(root: TreeData) -> str | None:
    """The id of a checkpoint tree's ``langgraph/`` values tree, or ``None`` (not a LangGraph
    checkpoint)."""
    entry = root.get(LG_TREE)
    return entry.id if entry is not None and entry.filemode == MODE_TREE else None


def channel_entries(reader: ObjectReader, tree_id: str) -> dict[str, tuple[str, str, int]]:
    """The channels of a values tree: channel name → ``(entry name, id, mode)``. Entries that are
    neither ``.v`` blobs nor ``.l/`` trees are kept under their entry name (shown as errors)."""
    out: dict[str, tuple[str, str, int]] = {}
    for item in reader.tree(tree_id):
        name = item.name
        if name.endswith(VALUE) and item.filemode != MODE_TREE:
            channel = decode_component(name[: -len(VALUE)])
        elif name.endswith(LIST) and item.filemode == MODE_TREE:
            channel = decode_component(name[: -len(LIST)])
        else:
            channel = name
        out[channel] = (name, item.id, item.filemode)
    return out


def scheduling_channel(channel: str) -> bool:
    """Whether ``channel`` is one of LangGraph's scheduling channels, which only say what runs
    next: a trigger (``branch:to:<node>``) or a join barrier (``join:<a>+<b>:<node>``).
    LangGraph's ``get_state`` leaves them out of ``values`` and names what they schedule in
    ``next``; so does every display here (:func:`shown_entries`). The input (``__start__``) and
    pending ``Send`` packets (``__pregel_tasks``) carry data and are shown."""
    return channel.startswith((TRIGGER_PREFIX, JOIN_PREFIX))


def shown_entries(reader: ObjectReader, tree_id: str) -> dict[str, tuple[str, str, int]]:
    """:func:`channel_entries` without the scheduling channels (:func:`scheduling_channel`): the
    channels a display shows."""
    return {ch: entry for ch, entry in channel_entries(reader, tree_id).items() if not scheduling_channel(ch)}


def show_entry(reader: ObjectReader, name: str, oid: str, mode: int) -> Any:
    """One channel's value for display (see :mod:`gitstate.format.lgserde`)."""
    if name.endswith(LIST) and mode == MODE_TREE:
        return _show_list(reader, oid)
    if name.endswith(VALUE) and mode != MODE_TREE:
        data = reader.blob(oid)
        try:
            kind, payload = lgserde.parse_typed(data, oid)
        except CorruptObjectError as exc:
            return {"$error": exc.reason, "size": len(data)}
        return lgserde.show_typed(kind, payload)
    return {"$error": f"unexpected entry {name!r} in a values tree"}


def _show_list(reader: ObjectReader, oid: str) -> list[Any]:
    chunks = sorted((path, item.id) for path, item in reader.walk_tree(oid, MAX_CHUNK_DEPTH)
                    if item.filemode != MODE_TREE)
    items: list[Any] = []
    for _path, cid in chunks:
        shown = show_chunk(reader.blob(cid))
        if isinstance(shown, list):
            items.extend(shown)
        else:
            items.append(shown)
    return items


def show_chunk(data: bytes) -> Any:
    """A list chunk (a msgpack array of items) for display: its items, or an ``$error`` stub."""
    if not data or not (0x90 <= data[0] <= 0x9F or data[0] in (0xDC, 0xDD)):
        return {"$error": "list chunk is not a msgpack array", "size": len(data)}
    return lgserde.show_msgpack(data)


def show_values(reader: ObjectReader, tree_id: str) -> dict[str, Any]:
    """The channels of a values tree a display shows (:func:`shown_entries`: LangGraph's scheduling
    channels left out, as ``get_state`` leaves them out): channel name → shown value."""
    return {channel: show_entry(reader, *entry) for channel, entry in sorted(shown_entries(reader, tree_id).items())}


def read_writes(reader: ObjectReader, root: TreeData) -> list[Any]:
    """The raw write records of a checkpoint (``[]`` when it has none)."""
    entry = root.get(WRITES_BLOB)
    if entry is None:
        return []
    records = encoding.loads(reader.blob(entry.id), entry.id)
    if not isinstance(records, list):
        raise CorruptObjectError(entry.id, "writes are not a list of write records")
    return records


#: Write channels that are not a task's output (LangGraph's ``CONTROL_WRITES``): a task that wrote
#: only these (an error, an interrupt, a resume value) has not run to its end.
CONTROL_CHANNELS = frozenset(("__error__", "__error_source_node__", "__interrupt__", "__resume__"))
_PULL, _PUSH = "~__pregel_pull", "~__pregel_push"


def next_nodes(reader: ObjectReader, values: str, records: Sequence[Any] = ()) -> list[str]:
    """The nodes a checkpoint schedules next, as LangGraph's ``StateSnapshot.next`` names them: those
    its trigger channels (``branch:to:<node>``) name, those whose join channel is complete
    (:func:`join_target`), ``__start__`` while the input is pending, and the targets of pending
    ``Send`` packets (``__pregel_tasks``); less the tasks that have run already, as ``get_state``
    leaves them out: those with an output among the write ``records`` (a write to a channel not in
    :data:`CONTROL_CHANNELS`, LangGraph's ``__no_writes__`` marker included), found by their task
    path (``~__pregel_pull, <node>``; ``~__pregel_push, <n>[, 0000000000]`` for the n-th ``Send``
    packet)."""
    entries = channel_entries(reader, values)
    pulled, pushed = ran_tasks(records)
    names = {ch[len(TRIGGER_PREFIX):] for ch in entries if ch.startswith(TRIGGER_PREFIX)}
    for channel, entry in entries.items():
        if channel.startswith(JOIN_PREFIX):
            node = join_target(channel, show_entry(reader, *entry))
            if node is not None:
                names.add(node)
    if START in entries:
        names.add(START)
    names -= pulled
    if TASKS in entries:
        names.update(send_targets(show_entry(reader, *entries[TASKS]), skip=pushed))
    return sorted(names)


def ran_tasks(records: Sequence[Any]) -> tuple[set[str], set[int]]:
    """The tasks that wrote an output among write ``records`` (``[task_id, channel, type, bytes,
    task_path, idx]``): the nodes of pull tasks, and the packet numbers of ``Send`` tasks."""
    pulled: set[str] = set()
    pushed: set[int] = set()
    for record in records:
        if not (isinstance(record, list) and len(record) == 6 and isinstance(record[4], str)) \
                or record[1] in CONTROL_CHANNELS:
            continue
        parts = [p.strip() for p in record[4].split(",")]
        if len(parts) == 2 and parts[0] == _PULL and parts[1]:
            pulled.add(parts[1])  # (a longer pull path is another task: a node's error handler)
        elif parts[0] == _PUSH and all(p.isdigit() for p in parts[1:3]) and len(parts) in (2, 3):
            pushed.add(int(parts[1]))  # (PUSH, n), run as (PUSH, n, False): "…, 0000000000"
    return pulled, pushed


def send_targets(packets: Any, skip: set[int] | frozenset[int] = frozenset()) -> set[str]:
    """The nodes that pending ``Send`` packets (``__pregel_tasks`` as :func:`show_entry` shows it)
    are addressed to (those at the positions ``skip`` left out)."""
    names: set[str] = set()
    for i, packet in enumerate(packets if isinstance(packets, list) else []):
        args = packet.get("args") if isinstance(packet, dict) else None
        if i not in skip and isinstance(args, list) and args and isinstance(args[0], str):
            names.add(args[0])
    return names


def tasks_pending(reader: ObjectReader, tree_id: str, pending: Mapping[tuple[str, int], list[Any]] | None) -> bool:
    """Whether a LangGraph checkpoint still has a task to run (:func:`next_nodes` with the write
    records of its commit and ``pending``, those of its writes refs, is not empty)."""
    root = reader.tree(tree_id)
    values = values_tree(root)
    return values is not None and bool(next_nodes(reader, values, _with_pending(read_writes(reader, root), pending)))


def seen_since(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    """The nodes that ran between two checkpoints of a namespace, read from LangGraph's
    ``versions_seen`` (node → the versions of its trigger channels when it last ran) of each: those
    whose entry is new or changed, LangGraph's own (``__start__``, ``__input__``, ``__interrupt__``)
    left out, in the order of their last runs (a later step saw greater versions: the saver's
    versions are text that sorts by their counter), then by name. A node reached only by ``Send``
    records no version (an empty entry): it is named only the first time it runs, after the
    others (when it ran is not recorded)."""

    def last(name: str) -> tuple[int, Any]:
        versions = after[name]
        found = list(versions.values()) if isinstance(versions, Mapping) else []
        if found and all(isinstance(v, int | float) and not isinstance(v, bool) for v in found):
            return (0, max(found))
        if found and all(isinstance(v, str) for v in found):
            return (1, max(found))
        return (2, "")

    names = [name for name, versions in after.items()
             if isinstance(name, str) and not (name.startswith("__") and name.endswith("__"))
             and (name not in before or before[name] != versions)]
    return sorted(names, key=lambda n: (*last(n), n))


def subgraph_node(ns: str) -> str | None:
    """The node of the parent graph a subgraph namespace runs in (``child:<task id>`` → ``child``;
    the innermost of nested ones), ``None`` for the root namespace."""
    if not ns:
        return None
    return ns.split("|")[-1].split(":")[0] or None


# -- the shape LangGraph needs (langgraph.checkpoint.base: Checkpoint, CheckpointMetadata) --------

def _named(key: Any) -> str:
    text = repr(key)
    return text if len(text) <= 60 else text[:57] + "..."


def _versions_problem(versions: Any, what: str) -> str | None:
    """Why ``versions`` is not a ``ChannelVersions`` map (channel → str, int or float version)."""
    if not isinstance(versions, dict):
        return f"{what} is not a map"
    for channel, version in versions.items():
        if not isinstance(channel, str):
            return f"{what} has a channel name that is not text ({_named(channel)})"
        if not isinstance(version, str | int | float) or isinstance(version, bool):
            return f"{what}[{_named(channel)}] is not a version (text or a number)"
    return None


def checkpoint_problem(checkpoint: Any) -> str | None:
    """Why a stored LangGraph checkpoint (the saver keeps it without ``channel_values``) is not one
    LangGraph can load, or ``None``: it must be a map whose ``v`` is an integer, ``id`` and ``ts``
    text, ``channel_versions`` a map of channel → version (text or a number), ``versions_seen`` a
    map of node → such a map, ``updated_channels`` (optional) null or a list of text, and
    ``pending_sends`` (optional, before LangGraph's checkpoint v4) a list. The same check runs on
    the value LangGraph's serde decoded (the saver) and on its display form (``verify``: see
    :func:`stored_problem`); both are plain maps, lists, text and numbers there."""
    if not isinstance(checkpoint, dict):
        return "checkpoint is not a map"
    for key in ("v", "id", "ts", "channel_versions", "versions_seen"):
        if key not in checkpoint:
            return f"checkpoint has no {key}"
    if not isinstance(checkpoint["v"], int) or isinstance(checkpoint["v"], bool):
        return "checkpoint v is not an integer"
    for key in ("id", "ts"):
        if not isinstance(checkpoint[key], str):
            return f"checkpoint {key} is not text"
    problem = _versions_problem(checkpoint["channel_versions"], "checkpoint channel_versions")
    if problem:
        return problem
    seen = checkpoint["versions_seen"]
    if not isinstance(seen, dict):
        return "checkpoint versions_seen is not a map"
    for node, versions in seen.items():
        if not isinstance(node, str):
            return f"checkpoint versions_seen has a node name that is not text ({_named(node)})"
        problem = _versions_problem(versions, f"checkpoint versions_seen[{_named(node)}]")
        if problem:
            return problem
    updated = checkpoint.get("updated_channels")
    if updated is not None and not (isinstance(updated, list) and all(isinstance(c, str) for c in updated)):
        return "checkpoint updated_channels is not a list of channel names"
    if "pending_sends" in checkpoint and not isinstance(checkpoint["pending_sends"], list):
        return "checkpoint pending_sends is not a list"
    return None


def metadata_problem(metadata: Any) -> str | None:
    """Why stored LangGraph checkpoint metadata is not what LangGraph reads, or ``None``: a map
    whose ``step`` (when present) is an integer, ``source`` text and ``parents`` a map of namespace
    → checkpoint id (text). Other keys are the caller's."""
    if not isinstance(metadata, dict):
        return "checkpoint metadata is not a map"
    step = metadata.get("step", 0)
    if not isinstance(step, int) or isinstance(step, bool):
        return "checkpoint metadata step is not an integer"
    if not isinstance(metadata.get("source", ""), str):
        return "checkpoint metadata source is not text"
    parents = metadata.get("parents", {})
    if not isinstance(parents, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in parents.items()):
        return "checkpoint metadata parents is not a map of namespace to checkpoint id"
    return None


def stored_problem(meta: Mapping[str, Any]) -> str | None:
    """Why the LangGraph payload of a checkpoint's ``meta.cbor`` (key :data:`LG_META`: the
    checkpoint and its metadata as ``[type, bytes]`` pairs) is not one the saver returns, or
    ``None``: read with the display decoder (nothing it names is imported or built), then
    :func:`checkpoint_problem` and :func:`metadata_problem`, the saver's own checks."""
    payload = meta.get(LG_META)
    if not isinstance(payload, dict) or "checkpoint" not in payload:
        return "not a LangGraph checkpoint (meta.cbor has no langgraph checkpoint)"
    for key, check in (("checkpoint", checkpoint_problem), ("metadata", metadata_problem)):
        pair = payload.get(key)
        if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str)
                and isinstance(pair[1], bytes)):
            return f"LangGraph {key}: not a [type, bytes] pair"
        shown = lgserde.show_typed(pair[0], pair[1])
        if isinstance(shown, dict) and "$error" in shown:
            return f"LangGraph {key} does not decode: {shown['$error']}"
        if isinstance(shown, dict) and "$pickle" in shown:
            return f"LangGraph {key} is pickled (gitstate never unpickles)"
        problem = check(shown)
        if problem:
            return f"LangGraph {problem}"
    return None


def _with_pending(records: list[Any], pending: Mapping[tuple[str, int], list[Any]] | None) -> list[Any]:
    """The commit's write records, then those of ``pending`` whose key (task id, index) it lacks
    (the saver's union: the first record of a key wins)."""
    if not pending:
        return records
    own = {(r[0], r[5]) for r in records
           if isinstance(r, list) and len(r) == 6 and isinstance(r[0], str) and type(r[5]) is int}
    return records + [record for key, record in pending.items() if key not in own]


def _mapping(value: Any) -> dict[Any, Any]:
    return value if isinstance(value, dict) else {}


def details(reader: ObjectReader, tree_id: str, meta: Mapping[str, Any],
            pending: Mapping[tuple[str, int], list[Any]] | None = None, *, live: bool = False) -> dict[str, Any] | None:
    """LangGraph's own view of a checkpoint (``None`` if it is not one): ``checkpoint_id``,
    ``checkpoint_ns``, ``source``, ``step`` (LangGraph's numbering: -1 for the input), ``parents``,
    ``next`` (nodes scheduled, as ``get_state_history`` names them; ``live``: as ``get_state`` of
    the thread's latest checkpoint names them, less the tasks that wrote: see :func:`next_nodes`),
    ``metadata`` (the rest of LangGraph's metadata) and ``writes`` (pending writes, values shown),
    all plain data."""
    root = reader.tree(tree_id)
    values = values_tree(root)
    if values is None:
        return None
    payload = meta.get(LG_META)
    shown = _mapping(lgserde.show_payload(payload))
    md = _mapping(shown.get("metadata"))
    info = _mapping(meta.get("metadata"))
    rest = {k: v for k, v in md.items() if k not in ("source", "step", "parents", "writes")}
    records = _with_pending(read_writes(reader, root), pending)
    out: dict[str, Any] = {
        "checkpoint_id": info.get("checkpoint_id"), "checkpoint_ns": info.get("checkpoint_ns", ""),
        "source": md.get("source"), "step": md.get("step", info.get("langgraph_step")),
        "parents": md.get("parents") or {}, "next": next_nodes(reader, values, records if live else ()),
        "metadata": rest, "writes": lgserde.show_writes(records),
    }
    if isinstance(md.get("writes"), dict):  # LangGraph before 0.4 recorded the writes of the step
        out["step_writes"] = md["writes"]
    return out


@dataclass(frozen=True)
class Boundary:
    """A node of a LangGraph line: ``entry`` and ``exit`` are the checkpoint the node produced (a
    LangGraph node writes one per step), or the checkpoint it stopped at when it failed or was
    interrupted; ``status`` is ``completed``, ``failed`` (it wrote an error) or ``interrupted``
    (it stopped at an ``interrupt`` and has not been resumed)."""

    node: str
    entry: str
    exit: str
    status: str


class LineCheckpoint(Protocol):
    """What :func:`boundaries` needs of one checkpoint (a :class:`~gitstate.format.checkpoint.
    Checkpoint` has it): its id, the nodes that produced it (the core ``node`` field,
    comma-separated), its status, its tree, its trigger (LangGraph's ``source``) and its core
    metadata (``checkpoint_ns``, ``langgraph_step``)."""

    @property
    def id(self) -> str: ...  # noqa: D102

    @property
    def node(self) -> str | None: ...  # noqa: D102

    @property
    def status(self) -> str | None: ...  # noqa: D102

    @property
    def tree_id(self) -> str: ...  # noqa: D102

    @property
    def trigger(self) -> str | None: ...  # noqa: D102

    @property
    def metadata(self) -> Mapping[str, Any]: ...  # noqa: D102


def _ran(reader: ObjectReader, cp: LineCheckpoint, parent: LineCheckpoint | None) -> list[str]:
    """The nodes ``cp`` names as having produced it. A checkpoint of a subgraph namespace written
    before the saver stopped doing so names the subgraph's node in its parent graph where none of
    the subgraph's nodes ran (its input, an update, its first step after the input): such a name
    is dropped when that is certain: not a ``loop`` checkpoint, or one a LangGraph step after its
    parent whose next nodes did not include it."""
    names = [n for n in (cp.node or "").split(",") if n]
    info = cp.metadata if isinstance(cp.metadata, Mapping) else {}
    ns = info.get("checkpoint_ns")
    own = subgraph_node(ns) if isinstance(ns, str) else None
    if own is None or names != [own]:
        return names
    if cp.trigger != "loop":
        return []
    step = info.get("langgraph_step")
    before = parent.metadata.get("langgraph_step") if parent is not None and isinstance(parent.metadata, Mapping) \
        else None
    if parent is None or not isinstance(step, int) or not isinstance(before, int) or step != before + 1:
        return names  # not certain (durability "exit" left steps out): as recorded
    values = values_tree(reader.tree(parent.tree_id))
    return names if values is not None and own in next_nodes(reader, values) else []


def _stopped(reader: ObjectReader, cp: LineCheckpoint) -> list[tuple[str, str]]:
    """``(node, failed|interrupted)`` for the nodes of ``cp``'s tasks that wrote an error or an
    interrupt, in the order of their first such write. A node that wrote both failed, as the
    checkpoint's status says: it stopped at an ``interrupt``, was resumed, then raised (its
    interrupt write stays beside the error), and LangGraph reports the task's error."""
    out: dict[str, str] = {}
    for record in read_writes(reader, reader.tree(cp.tree_id)):
        if not isinstance(record, list) or len(record) != 6:
            continue
        kind = {"__error__": "failed", "__interrupt__": "interrupted"}.get(record[1])
        node = lgserde.task_node(record[4])
        if kind is not None and node is not None and out.get(node) != "failed":
            out[node] = kind
    return list(out.items())


def boundaries(reader: ObjectReader, line: Sequence[LineCheckpoint]) -> list[Boundary]:
    """The node boundaries of a LangGraph line (``line`` oldest first), in execution order: each
    node that produced a checkpoint, and each node that stopped at a checkpoint with an error or an
    interrupt (a node that completes later, resumed, replaces its stopped boundary; one that stops
    again at a later checkpoint moves it there, with the status of that stop)."""
    out: list[Boundary] = []
    open_: dict[str, int] = {}  # node -> index in out of its failed/interrupted boundary
    parent: LineCheckpoint | None = None
    for cp in line:
        names, parent = _ran(reader, cp, parent), cp
        for name in names:
            at = open_.pop(name, None)
            if at is not None:
                out[at] = Boundary(name, cp.id, cp.id, "completed")
            else:
                out.append(Boundary(name, cp.id, cp.id, "completed"))
        if cp.status in ("failed", "interrupted"):
            for name, kind in _stopped(reader, cp):
                at = open_.get(name)
                if at is not None:  # stopped again (resumed after an update_state): the latest stop
                    out[at] = Boundary(name, cp.id, cp.id, kind)
                    continue
                open_[name] = len(out)
                out.append(Boundary(name, cp.id, cp.id, kind))
    return out

