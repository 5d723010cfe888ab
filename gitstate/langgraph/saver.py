"""``GitCheckpointSaver``: LangGraph's checkpoint saver interface on a gitstate store.

A thread is a gitstate run (run id = thread id, workflow ``langgraph``); each checkpoint is a commit
on a branch of that run. The root namespace's first line is branch ``main``; a subgraph namespace
``ns`` starts on branch ``ns:<ns>``; a checkpoint whose parent is not the tip of a branch (time
travel, ``update_state`` from an earlier checkpoint, a second root) starts a new branch
``<line>~<checkpoint id>``, so every checkpoint stays reachable by a ref. See docs/FORMAT.md."""

from __future__ import annotations

import asyncio
import hashlib
import os
import random
import threading
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_checkpoint_metadata,
    writes_sort_key,
)
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.types import ERROR, INTERRUPT
from pygit2.enums import ObjectType

from gitstate.errors import CorruptObjectError, RunNotFound, UsageError
from gitstate.format import checkpoint as cpfmt
from gitstate.format import encoding, lgtree
from gitstate.format import lgwrites as wr
from gitstate.format.checkpoint import read_meta
from gitstate.format.names import (
    MAX_COMPONENT,
    branch_ref,
    decode_component,
    encode_component,
    parse_ref,
    run_prefix,
    worktree_prefix,
)
from gitstate.git.objects import MODE_BLOB, MODE_TREE, ObjectWriter, TreeEntry, tree_bytes
from gitstate.git.reader import CommitData, ObjectReader, Signature, TreeData, parse_tree
from gitstate.git.refs import list_refs
from gitstate.langgraph.index import Entry, RefReader, ThreadIndex, parse_entry, trailers
from gitstate.langgraph.serde import StrictSerializer
from gitstate.langgraph.values import LRU, ByteLRU, Scrub, ValueCodec, decode
from gitstate.secrets import META_KEY as SECRETS_META
from gitstate.secrets import Finding, Policy, secrets_record
from gitstate.store.store import Store, open_store
from gitstate.store.transaction import Transaction

WORKFLOW = lgtree.WORKFLOW
LG_TREE = "langgraph"  # the values tree: one entry per channel
WRITES_BLOB = wr.WRITES_BLOB  # pending writes of the checkpoint
LG_META = "langgraph"  # key in meta.cbor: serde-typed checkpoint (without values) and metadata
MAX_INDEXES = 1024  # thread indexes kept in memory (others are rebuilt from git on use)
_STATE = {"format": "langgraph", "values": "langgraph/ (serde typed bytes)", "meta": "meta.cbor 'langgraph'"}


def line_name(ns: str) -> str:
    """The branch of a namespace's first line: ``main`` for the root, ``ns:<ns>`` otherwise."""
    if not ns:
        return "main"
    name = f"ns:{ns}"
    if len(encode_component(name)) > MAX_COMPONENT - 60:
        name = "ns:" + hashlib.sha1(ns.encode("utf-8"), usedforsecurity=False).hexdigest()
    return name


def fork_name(ns: str, checkpoint_id: str) -> str:
    """The branch of a line started by ``checkpoint_id`` (a fork or a second root)."""
    name = f"{line_name(ns)}~{checkpoint_id}"
    if len(encode_component(name)) > MAX_COMPONENT:
        name = f"{line_name(ns)}~" + hashlib.sha1(checkpoint_id.encode("utf-8"), usedforsecurity=False).hexdigest()
    return name


def _typed(value: Any, oid: str) -> tuple[str, bytes]:
    if not isinstance(value, list) or len(value) != 2 or not isinstance(value[0], str) or not isinstance(value[1], bytes):
        raise CorruptObjectError(oid, "malformed serde-typed value")
    return value[0], value[1]


def _serializer(serde: SerializerProtocol | None, allowed: Iterable[type | tuple[str, ...]]) -> SerializerProtocol:
    """The saver's serializer: strict unless the caller brings one; never with pickle fallback."""
    extra = tuple(allowed)
    if serde is None:
        return StrictSerializer(allowed=extra)
    if getattr(serde, "pickle_fallback", False):
        raise UsageError("a serializer with pickle_fallback would unpickle stored data; gitstate refuses it")
    if extra:
        widen = getattr(serde, "with_msgpack_allowlist", None)
        if widen is None:
            raise UsageError("allowed_types needs a serializer with with_msgpack_allowlist (or serde=None)")
        return cast(SerializerProtocol, widen(extra))
    return serde


def _codec_serde(serde: SerializerProtocol) -> tuple[Callable[[Any], tuple[str, bytes]], Callable[[tuple[str, bytes]], Any],
                                                     Callable[[str, bytes], None] | None]:
    """``ValueCodec``'s ``dumps``, ``loads`` and ``check`` for ``serde``: a :class:`StrictSerializer`'s
    refusal check runs apart from its encoding, so the codec checks only the chunks it stores anew."""
    if isinstance(serde, StrictSerializer):
        return serde.dumps_typed_unchecked, serde.loads_typed, serde.check_typed
    return serde.dumps_typed, serde.loads_typed, None



class _ThreadGone(Exception):
    """A put found the thread it knew deleted by another process (its branches are gone)."""


def _status(values: Mapping[str, object], writes: Mapping[tuple[str, int], list[Any]]) -> str:
    """A checkpoint's run status as LangGraph left it: ``failed`` or ``interrupted`` when a task
    wrote an error or an interrupt, ``running`` while a trigger channel (``branch:to:<node>``,
    ``__start__``) holds a value, ``Send`` packets are pending (a non-empty ``__pregel_tasks``:
    LangGraph keeps it as an empty list once they ran) or a join channel is complete
    (:func:`lgtree.join_target`), so a next task is pending, else ``completed`` (the graph reached
    END)."""
    from_writes = _status_of_writes(writes)
    if from_writes is not None:
        return from_writes
    pending = any(ch.startswith(lgtree.TRIGGER_PREFIX) or ch == lgtree.START or (ch == lgtree.TASKS and bool(value))
                  or lgtree.join_target(ch, value) is not None for ch, value in values.items())
    return "running" if pending else "completed"


def _status_of_writes(writes: Mapping[tuple[str, int], list[Any]]) -> str | None:
    channels = {record[1] for record in writes.values()}
    if ERROR in channels:
        return "failed"
    if INTERRUPT in channels:
        return "interrupted"
    return None


def _own_trailers(message: str) -> str:
    """The saver's trailer lines of a checkpoint message (``LangGraph-Checkpoint`` …): the lines
    after the core ``Gitstate-Format`` trailer, which ends the core message whatever its subject
    (commits written before LangGraph's step was the subject's have another one)."""
    lines = message.splitlines(keepends=True)
    for i in range(len(lines) - 1, 0, -1):  # the last one: a subject never counts
        if lines[i].startswith("Gitstate-Format: "):
            return "".join(lines[i + 1:])
    return ""


@dataclass(frozen=True)
class _Fold:
    """A parent checkpoint whose writes refs a put folds into its commit."""

    entry: Entry  # the checkpoint as indexed (its current commit)
    commit: CommitData  # its commit with the writes folded in
    refs: tuple[tuple[str, str], ...]  # the writes refs folded: (name, blob id)


class GitCheckpointSaver(BaseCheckpointSaver[str]):
    """A LangGraph checkpoint saver that stores threads as gitstate runs in a git repository.

    ``store`` is a :class:`Store`, or a path inside a repository (default: the current directory)
    whose store is opened. All sync and
    async methods are implemented (async ones run the sync code in a worker thread). One instance may
    be shared by several threads; several processes may write different threads at once.

    Decoding is strict by default: values are read by a :class:`StrictSerializer`, which
    builds only LangGraph's safe types (datetime, uuid, LangChain messages, ``Send`` …) and the
    ``allowed_types`` given here (classes or ``(module, name)`` tuples, e.g. a pydantic model kept in
    a channel); any other type named by a stored value raises :class:`UnsafeValueError` instead of
    being imported and called. A caller-supplied ``serde`` applies its own policy, except that pickle
    fallback is refused."""

    def __init__(self, store: Store | str | os.PathLike[str] | None = None, *, serde: SerializerProtocol | None = None,
                 allowed_types: Iterable[type | tuple[str, ...]] = ()) -> None:
        super().__init__(serde=_serializer(serde, allowed_types))
        self.store = store if isinstance(store, Store) else open_store(store)
        self.store.core.pack_in_background = True
        dumps, loads, check = _codec_serde(self.serde)
        self.value_codec = ValueCodec(dumps, loads, check=check)
        self._refs = RefReader(self.store.location.common_dir, self.store.worktree)
        self._indexes: OrderedDict[str, ThreadIndex] = OrderedDict()  # bounded: MAX_INDEXES
        self._locks: dict[str, threading.RLock] = {}
        self._guard = threading.Lock()
        self._versions: dict[str, dict[str, Any]] = {}  # commit id -> channel_versions
        self._orphan_writes: dict[tuple[str, str, str], dict[tuple[str, int], list[Any]]] = {}
        self._state_entry: TreeEntry | None = None
        self._blobs = ByteLRU(16 << 20)  # small immutable blobs (meta, writes) by id, written or read here
        # Parsed immutable objects by id, written or read here, so a put never reads back what this
        # process just wrote: commits and trees (CommitData / TreeData), the serde-typed payload of
        # meta blobs (and, keyed "shown:<id>", the shown value of a join or Send channel's entry), the records
        # of writes blobs and of writes-ref blobs.
        self._objects = LRU(8192)
        self._payloads = LRU(8192)
        self._records = LRU(8192)
        self._writes_prefixes: dict[str, str] = {}  # thread id -> refs/agentos/<wt>/runs/<thread>/writes/

    @classmethod
    def from_path(cls, path: str | os.PathLike[str], *, serde: SerializerProtocol | None = None,
                  allowed_types: Iterable[type | tuple[str, ...]] = ()) -> GitCheckpointSaver:
        """A saver on the repository at (or above) ``path``."""
        return cls(open_store(path), serde=serde, allowed_types=allowed_types)

    def with_allowlist(self, extra_allowlist: Collection[tuple[str, ...]]) -> GitCheckpointSaver:
        """A shallow clone whose serializer also allows ``extra_allowlist`` (LangGraph calls this
        with a graph's state types in strict mode). The clone shares this saver's caches."""
        clone = cast(GitCheckpointSaver, super().with_allowlist(extra_allowlist))
        if clone is not self:
            clone.value_codec = self.value_codec.with_serde(*_codec_serde(clone.serde))
        return clone

    # -- plumbing -----------------------------------------------------------------------------

    def _lock(self, thread_id: str) -> threading.RLock:
        with self._guard:
            lock = self._locks.get(thread_id)
            if lock is None:
                lock = self._locks[thread_id] = threading.RLock()
            return lock

    def _index(self, thread_id: str) -> ThreadIndex:
        """The thread's index, rebuilt if its branches changed behind our back, its pending writes
        re-read if its writes refs did (caller holds the lock)."""
        tips, writes = self._refs.read(self.store.repo, thread_id)
        idx = self._indexes.get(thread_id)
        if idx is None or idx.tips != tips:
            idx = ThreadIndex()
            idx.rebuild(self.store.core.reader, tips)
            self._indexes[thread_id] = idx
            while len(self._indexes) > MAX_INDEXES:
                self._indexes.popitem(last=False)
        else:
            try:
                self._indexes.move_to_end(thread_id)
            except KeyError:
                pass
        self._learn_writes(idx, writes)
        return idx

    def _learn_writes(self, idx: ThreadIndex, writes: dict[str, str]) -> None:
        """Give ``idx`` the writes refs just read, when they changed."""
        if idx.writes != writes:
            idx.set_writes(writes, {name: self._pending_blob(oid)[:2] for name, oid in writes.items()})

    def _known_index(self, thread_id: str, key: tuple[str, str] | None) -> ThreadIndex:
        """The thread's index as this process last knew it, if it knows the checkpoint ``key``,
        without reading its branch refs; else (or with no ``key``) :meth:`_index`. Only for a write
        that appends to a known checkpoint (a put with a parent, a regular ``put_writes``): each ref
        it moves is a compare-and-swap on the value this index holds, and one that moved meanwhile
        (another process wrote, rolled back or deleted the thread) makes the store run the write
        again on refs read afresh, so a stale index costs a retry. Writes that rewrite descendants
        on every branch (a re-put, a special write) read the refs first: a branch this index does
        not know would be left out. Its pending writes refs are listed afresh (one directory
        listing), so a put folds those another process added too."""
        idx = self._indexes.get(thread_id)
        if idx is None or key is None or key not in idx.entries:
            return self._index(thread_id)
        self._learn_writes(idx, self._refs.writes(self.store.repo, thread_id))
        return idx

    def _pending_blob(self, oid: str) -> tuple[str, str, dict[tuple[str, int], list[Any]]]:
        """``(namespace, checkpoint id, records)`` of a writes-ref blob."""
        hit = self._records.get("ref:" + oid)
        if hit is None:
            hit = wr.decode_pending(self._blob(oid), oid)
            self._records.put("ref:" + oid, hit)
        return cast(tuple[str, str, dict[tuple[str, int], list[Any]]], hit)

    def _writes_ref(self, thread_id: str, name: str) -> str:
        prefix = self._writes_prefixes.get(thread_id)
        if prefix is None:
            if len(self._writes_prefixes) > 4096:
                self._writes_prefixes.clear()
            prefix = self._writes_prefixes[thread_id] = run_prefix(self.store.worktree, thread_id) + wr.REF_KIND + "/"
        return prefix + name

    def _writes_of(self, idx: ThreadIndex, entry: Entry, commit: CommitData) -> dict[tuple[str, int], list[Any]]:
        """A checkpoint's pending writes: those in its commit, then those of its writes refs."""
        refs = idx.pending.get((entry.ns, entry.checkpoint_id))
        own = self._read_writes(commit)
        if not refs:
            return dict(own)
        return wr.union([own, *(self._pending_blob(oid)[2] for _name, oid in refs)])

    def _state(self, tx: Transaction) -> TreeEntry:
        if self._state_entry is None or not tx.writer.knows(self._state_entry[1]):
            self._state_entry = (cpfmt.STATE_LEAF, tx.blob(encoding.dumps(_STATE, "state")), MODE_BLOB)
        return self._state_entry

    def _channel_versions(self, oid: str) -> dict[str, Any]:
        hit = self._versions.get(oid)
        if hit is None:
            cp, _md = self._payload(self._commit(oid))
            hit = dict(cp.get("channel_versions", {}))
            self._remember_versions(oid, hit)
        return hit

    def _commit(self, oid: str) -> CommitData:
        hit = self._objects.get(oid)
        if isinstance(hit, CommitData):
            return hit
        commit = self.store.core.reader.commit(oid)
        self._objects.put(oid, commit)
        return commit

    def _root(self, commit: CommitData) -> TreeData:
        return self._root_tree(commit.tree_id)

    def _root_tree(self, oid: str) -> TreeData:
        """A root tree, parsed (those staged by :meth:`_tree` included)."""
        hit = self._objects.get(oid)
        if isinstance(hit, TreeData):
            return hit
        tree = self.store.core.reader.tree(oid)
        self._objects.put(oid, tree)
        return tree

    def _tree(self, tx: Transaction, entries: list[TreeEntry]) -> str:
        """Stage a tree and keep it parsed (a later put or read of it costs no object read)."""
        data = tree_bytes(entries)
        oid = tx.writer.write(ObjectType.TREE, data)
        self._objects.put(oid, parse_tree(oid, data))
        return oid

    def _new_commit(self, tx: Transaction, tree: str, parents: list[str], message: str,
                    author: Signature, committer: Signature) -> CommitData:
        """Stage a commit and keep it parsed."""
        oid = tx.commit(tree, parents, message, author=author, committer=committer)
        commit = CommitData(oid, tree, tuple(parents), author, committer, message)
        self._objects.put(oid, commit)
        return commit

    def _payload(self, commit: CommitData, *, metadata: bool = False) -> tuple[dict[str, Any], dict[str, Any]]:
        """The checkpoint (without values) and, if asked, the metadata stored in ``meta.cbor``;
        :class:`CorruptObjectError` naming the commit when either is not of the shape LangGraph
        reads (:func:`lgtree.checkpoint_problem`, :func:`lgtree.metadata_problem`)."""
        oid = commit.id
        entry = self._root(commit).get(cpfmt.META)
        if entry is None:
            raise CorruptObjectError(oid, f"no {cpfmt.META}")
        typed = self._payloads.get(entry.id)
        if typed is None:
            meta = encoding.loads(self._blob(entry.id), oid)
            lg = meta.get(LG_META) if isinstance(meta, dict) else None
            if not isinstance(lg, dict) or "checkpoint" not in lg:
                raise CorruptObjectError(oid, "not a LangGraph checkpoint")
            typed = (_typed(lg["checkpoint"], oid), lg.get("metadata"))
            self._payloads.put(entry.id, typed)
        cp = decode(self.serde.loads_typed, typed[0], oid)
        md = decode(self.serde.loads_typed, _typed(typed[1], oid), oid) if metadata else {}
        # the shape LangGraph reads (a stored {"v": 4} made get_state fail with KeyError later)
        problem = lgtree.checkpoint_problem(cp) or (lgtree.metadata_problem(md) if metadata else None)
        if problem:
            raise CorruptObjectError(oid, f"LangGraph {problem}")
        return cp, dict(md)

    def _remember_versions(self, oid: str, versions: dict[str, Any]) -> None:
        cache = self._versions
        if len(cache) > 8192:
            cache.clear()
        cache[oid] = versions

    def _blob(self, oid: str) -> bytes:
        hit = self._blobs.get(oid)
        if hit is None:
            data = self.store.core.reader.blob(oid)
            self._blobs.put(oid, (0, data))
            return data
        return hit[1]

    def _put_blob(self, tx: Transaction, data: bytes) -> str:
        oid = tx.blob(data)
        self._blobs.put(oid, (0, data))
        return oid

    def _values_tree(self, commit: CommitData) -> list[TreeEntry]:
        sub = self._root(commit).get(LG_TREE)
        if sub is None:
            raise CorruptObjectError(commit.id, f"not a LangGraph checkpoint (no {LG_TREE}/)")
        return self.value_codec.entries(self.store.core.reader, sub.id)

    def _values_entries(self, oid: str) -> dict[str, TreeEntry]:
        return {decode_component(e[0][:-2]): e for e in self._values_tree(self._commit(oid))}

    def _ensure_run(self, thread_id: str) -> None:
        self.store.open_run(thread_id, workflow=WORKFLOW)

    # -- put ----------------------------------------------------------------------------------

    def put(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
            new_versions: ChannelVersions) -> RunnableConfig:
        """Store a checkpoint; returns the config that addresses it."""
        conf = config["configurable"]
        thread_id = str(conf["thread_id"])
        ns = str(conf.get("checkpoint_ns", "") or "")
        parent_id = conf.get("checkpoint_id")
        c: dict[str, Any] = dict(checkpoint)
        values: dict[str, Any] = dict(checkpoint.get("channel_values") or {})
        c.pop("channel_values", None)
        md: dict[str, Any] = dict(get_checkpoint_metadata(config, metadata))
        # the store's secrets policy, on the python values here and on the serde's bytes of the
        # channel values as they are written (a refusal raises before anything is written)
        policy = self.store.core.secrets
        found: list[Finding] = []
        if policy.active:
            c = policy.value(c, "langgraph.checkpoint", found)
            md = policy.value(md, "langgraph.metadata", found)
            if policy.mode == "refuse":  # before the thread's run record is made: nothing is written
                for ch in new_versions:
                    if ch in values:
                        policy.typed(*self.serde.dumps_typed(values[ch]), f"state.{ch}", found)
        cid = str(c["id"])
        payload = {"checkpoint": list(self.serde.dumps_typed(c)), "metadata": list(self.serde.dumps_typed(md))}
        run_md = md.get("run_id")
        lg_trailers = trailers(ns, cid, parent_id, str(run_md) if run_md is not None else None)
        versions = dict(checkpoint["channel_versions"])
        with self._lock(thread_id):
            first = self._known_index(thread_id, (ns, parent_id) if parent_id else None)
            if (ns, cid) in first.entries:
                first = self._index(thread_id)  # a re-put rewrites its descendants on every branch
            if not first.tips:
                self._ensure_run(thread_id)
                first = self._index(thread_id)
            fresh = [first]  # the first attempt uses that index; a retry reads the refs again
            had_tips = [bool(first.tips)]
            seen = len(found)

            def build(tx: Transaction) -> str:
                idx = fresh.pop() if fresh else self._index(thread_id)
                if had_tips[0] and not idx.tips:
                    raise _ThreadGone  # deleted by another process meanwhile: its run is made again first
                parent = idx.entries.get((ns, parent_id)) if parent_id else None
                existing = idx.entries.get((ns, cid))
                del found[seen:]  # a retry scans the values again
                values_tree = self._values(tx.writer, thread_id, ns, c, values, new_versions, parent, found)
                writes: TreeEntry | None = None
                pending = self._orphan_writes.get((thread_id, ns, cid))
                if existing is not None:
                    old = self._root(self._commit(existing.oid)).get(WRITES_BLOB)
                    if old is not None:
                        writes = (WRITES_BLOB, old.id, MODE_BLOB)
                    return self._stage_replace(tx, thread_id, idx, existing, values_tree, payload, writes,
                                               lg_trailers, found)
                status = _status(values, pending or {})
                if pending:
                    writes = (WRITES_BLOB, self._put_blob(tx, wr.encode_records(pending)), MODE_BLOB)
                fold = (self._stage_fold(tx, thread_id, idx, parent)
                        if parent is not None and parent.oid in idx.tip_of else None)
                return self._stage_append(tx, thread_id, idx, ns, cid, parent, values_tree, payload, writes, md,
                                          lg_trailers, parent_id, status, fold, c.get("versions_seen"), found)

            while True:
                try:
                    oid = self.store.core.write(build)
                    break
                except _ThreadGone:
                    self._ensure_run(thread_id)
                    had_tips[0] = False
            self._orphan_writes.pop((thread_id, ns, cid), None)
            self._remember_versions(oid, versions)
        return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": cid}}

    def _values(self, w: ObjectWriter, thread_id: str, ns: str, c: dict[str, Any], values: dict[str, Any],
                new_versions: ChannelVersions, parent: Entry | None, secrets: list[Finding] | None = None) -> str:
        """The values tree: changed channels written (what is new in them through the store's
        secrets policy; ``warn`` findings appended to ``secrets``), unchanged ones reused from the
        parent."""
        policy = self.store.core.secrets
        versions: dict[str, Any] = dict(c.get("channel_versions", {}))
        parent_entries = self._values_entries(parent.oid) if parent is not None else {}
        parent_versions = self._channel_versions(parent.oid) if parent is not None else {}
        entries: list[TreeEntry] = []
        for ch, ver in versions.items():
            if ch in new_versions:
                if ch in values:
                    prev = parent_entries.get(ch)
                    scrub = _scrubber(policy, f"state.{ch}", secrets) if policy.active else None
                    entries.append(self.value_codec.write(w, (thread_id, ns, ch), values[ch], prev, scrub))
                continue
            if parent is not None and parent_versions.get(ch) == ver:
                found = parent_entries.get(ch)
            else:
                found = self._find_stored(thread_id, ns, ch, ver)
            if found is not None:
                entries.append(found)
        return self.value_codec.tree(w, entries)

    def _find_stored(self, thread_id: str, ns: str, channel: str, version: Any) -> TreeEntry | None:
        """The stored value of ``channel`` at ``version`` anywhere in the namespace (slow path:
        LangGraph normally finds it in the parent)."""
        idx = self._indexes.get(thread_id)
        if idx is None:
            return None
        for entry in idx.namespace(ns):
            if self._channel_versions(entry.oid).get(channel) == version:
                found = self._values_entries(entry.oid).get(channel)
                if found is not None:
                    return found
        return None

    def _meta(self, thread_id: str, ns: str, cid: str, branch: str, step: int, base: int,
              md: dict[str, Any], payload: dict[str, Any], now: float, node: str | None,
              status: str, found: Sequence[Finding] = ()) -> dict[str, Any]:
        lg_step = md.get("step")
        source = md.get("source")
        info: dict[str, Any] = {"checkpoint_id": cid}
        if ns:
            info["checkpoint_ns"] = ns
        if isinstance(lg_step, int) and not isinstance(lg_step, bool):
            info["langgraph_step"] = lg_step
        meta = {
            "format": cpfmt.CHECKPOINT_KIND, "v": cpfmt.FORMAT_VERSION, "run": thread_id, "branch": branch,
            "workflow": WORKFLOW, "worktree": self.store.worktree,
            "node": node if source == "loop" else None, "step": step,  # only a loop step ran nodes
            "base": base or None, "trigger": str(source) if isinstance(source, str) else None, "status": status,
            "metadata": info, "created_at": datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            LG_META: payload,
        }
        if found:
            meta[SECRETS_META] = secrets_record(found)
        return meta

    def _stage_fold(self, tx: Transaction, thread_id: str, idx: ThreadIndex, parent: Entry) -> _Fold | None:
        """Stage the parent checkpoint's commit with the pending writes of its writes refs folded
        into its tree (same parents, message and dates), so the step's one ref move carries them;
        ``None`` when it has no writes refs."""
        refs = idx.pending.get((parent.ns, parent.checkpoint_id))
        checked = set(idx.unchecked)
        stale = self._stale_writes(idx, checked, skip=(parent.ns, parent.checkpoint_id))
        self._stage_drop_writes(tx, thread_id, [(name, oid) for _key, name, oid in stale])

        def learned() -> None:
            idx.unchecked.difference_update(checked)
            for key, name, _oid in stale:  # gone from the index too: one back (a pack-refs) is new to it
                idx.drop_writes(key, {name})

        tx.after(learned)
        if not refs:
            return None
        commit = self._commit(parent.oid)
        root, message = self._amended_tree(tx, commit, self._writes_of(idx, parent, commit))
        folded = self._new_commit(tx, root, list(commit.parent_ids), message, commit.author, commit.committer)
        return _Fold(parent, folded, tuple(refs))

    def _stale_writes(self, idx: ThreadIndex, keys: Iterable[tuple[str, str]],
                      skip: tuple[str, str]) -> list[tuple[tuple[str, str], str, str]]:
        """Writes refs whose records the commit of their checkpoint already holds (a writer died
        between moving the branch and deleting them, or a concurrent ``pack-refs`` brought one
        back): deleted with the next put. Only the checkpoints ``keys`` are looked at (those whose
        writes refs or commit changed since the last look: :attr:`ThreadIndex.unchecked`; writes that
        came for a checkpoint after its child was put stay as refs, and a look at all of them on
        every put made a long thread's puts slower and slower). A writes ref of a checkpoint this
        index does not know is kept (it may be newer than what the index read). Returns
        ``(checkpoint key, ref name, blob id)`` of each."""
        stale: list[tuple[tuple[str, str], str, str]] = []
        for key in keys:
            refs = idx.pending.get(key)
            entry = idx.entries.get(key)
            if key == skip or entry is None or not refs:
                continue
            own = self._read_writes(self._commit(entry.oid))
            stale.extend((key, name, oid) for name, oid in refs
                         if all(k in own for k in self._pending_blob(oid)[2]))
        return stale

    def _amended_tree(self, tx: Transaction, commit: CommitData,
                      records: dict[tuple[str, int], list[Any]]) -> tuple[str, str]:
        """The root tree and message of ``commit`` with ``records`` as its pending writes (and the
        status they imply: an error write makes it ``failed``, an interrupt ``interrupted``)."""
        keep = [(e.name, e.id, e.filemode) for e in self._root(commit) if e.name != WRITES_BLOB]
        message = commit.message
        if _status_of_writes(records) is not None:
            meta, message = self._with_status(commit, records)
            keep = [e for e in keep if e[0] != cpfmt.META]
            keep.append((cpfmt.META, self._put_blob(tx, cpfmt.encode_meta(meta)), MODE_BLOB))
        keep.append((WRITES_BLOB, self._put_blob(tx, wr.encode_records(records)), MODE_BLOB))
        return self._tree(tx, keep), message

    def _stage_drop_writes(self, tx: Transaction, thread_id: str, refs: Iterable[tuple[str, str]]) -> None:
        """Stage the deletion of writes refs whose records are now in a commit (after the ref moves
        that publish that commit; one already deleted by another writer is fine). Their blobs, loose
        until now, go into this transaction's pack, and their loose copies are removed once it is
        published (so pending writes never pile up as loose objects)."""
        dropped = list(refs)
        for name, oid in dropped:
            tx.writer.write(ObjectType.BLOB, self._blob(oid), again=True)
            tx.delete_ref(self._writes_ref(thread_id, name), oid, "gitstate: langgraph writes folded",
                          missing_ok=True)
        if dropped:
            writer = tx.writer
            tx.after(lambda: writer.drop_loose(oid for _name, oid in dropped))

    def _stage_append(self, tx: Transaction, thread_id: str, idx: ThreadIndex, ns: str, cid: str,
                      parent: Entry | None, values_tree: str, payload: dict[str, Any], writes: TreeEntry | None,
                      md: dict[str, Any], lg_trailers: str, parent_id: str | None, status: str,
                      fold: _Fold | None = None, seen: Any = None, found: Sequence[Finding] = ()) -> str:
        """Stage a new checkpoint: on its parent's branch when the parent is a tip, else on a new
        branch (a fork line). With ``fold``, the new commit's parent is the parent checkpoint's
        commit with its pending writes folded in, and the folded writes refs are deleted after the
        branch moved. The index learns it once the ref moved; a lost race re-runs the transaction,
        which re-reads the refs (and then forks instead of overwriting). ``seen`` is the new
        checkpoint's ``versions_seen`` (:meth:`_nodes_ran`)."""
        store = self.store
        if parent is not None and parent.oid in idx.tip_of:
            branch, expected = idx.tip_of[parent.oid], parent.oid
        elif parent is None and line_name(ns) not in idx.tips:
            branch, expected = line_name(ns), None
        else:
            branch, expected = fork_name(ns, cid), None
        step, base = (0, 0)
        if parent is not None:
            step, base = store.core.position(parent.oid)
            step += 1
        now = time.time()
        ran = self._nodes_ran(parent, md, seen)
        meta = self._meta(thread_id, ns, cid, branch, step, base, md, payload, now, ran, status, found)
        entries = [(cpfmt.META, self._put_blob(tx, cpfmt.encode_meta(meta)), MODE_BLOB), self._state(tx),
                   (LG_TREE, values_tree, MODE_TREE)]
        if writes is not None:
            entries.append(writes)
        parents = [fold.commit.id if fold is not None else parent.oid] if parent else []
        me = Signature(*tx.identity, int(now), 0)
        oid = self._new_commit(tx, self._tree(tx, entries), parents, cpfmt.message(meta) + lg_trailers, me, me).id
        tx.set_ref(self._ref(thread_id, branch), expected, oid, f"gitstate: langgraph put {cid}")
        if fold is not None:
            self._stage_drop_writes(tx, thread_id, fold.refs)
        entry = Entry(oid, ns, cid, parent_id, str(md["run_id"]) if md.get("run_id") is not None else None,
                      tuple(parents))

        def learned() -> None:
            store.core.remember_position(oid, step, base)
            if fold is not None:
                self._learn_rewritten(idx, fold.entry, fold.commit.id)
                idx.drop_writes((fold.entry.ns, fold.entry.checkpoint_id), {name for name, _ in fold.refs})
            idx.add(entry, branch, expected)

        tx.after(learned)
        return oid

    def _nodes_ran(self, parent: Entry | None, md: Mapping[str, Any], seen: Any) -> str | None:
        """The nodes that ran to produce a ``loop`` checkpoint (``None`` for another source: no node
        ran), comma-separated. Its parent stored one LangGraph step before it: :meth:`_ran`. Steps
        in between not stored (``durability="exit"`` puts one checkpoint per invocation) or no
        parent: the nodes whose ``versions_seen`` changed since the parent
        (:func:`lgtree.seen_since`), after the parent's next nodes that are not among them (its
        pending ``Send`` targets: a node only ``Send`` reaches records no version)."""
        if md.get("source") != "loop":
            return None
        step = md.get("step")
        if parent is not None:
            before = self._lg_step(parent.oid)
            if before is None or not isinstance(step, int) or step == before + 1:
                return self._ran(parent.oid)
        prior = self._payload(self._commit(parent.oid))[0].get("versions_seen") if parent is not None else None
        names = lgtree.seen_since(prior if isinstance(prior, Mapping) else {}, seen if isinstance(seen, Mapping) else {})
        if parent is not None:
            first = [n for n in (self._ran(parent.oid) or "").split(",") if n and n not in names]
            names = first + names
        return ",".join(names) or None

    def _lg_step(self, oid: str) -> int | None:
        """A stored checkpoint's LangGraph step: its commit's ``LangGraph-Step`` trailer (the meta of
        a commit written before it had one)."""
        message = self._commit(oid).message
        at = message.rfind("\nLangGraph-Step: ")
        if at >= 0:
            text = message[at + len("\nLangGraph-Step: "):].split("\n", 1)[0]
            return int(text) if text.lstrip("-").isdigit() else None
        meta = read_meta(self.store.core.reader, self._commit(oid))
        return cpfmt.langgraph_step(meta.get("workflow"), meta.get("metadata"))

    def _ran(self, parent: str) -> str | None:
        """The nodes that ran between the checkpoint ``parent`` and its child: those its pending
        trigger channels (``branch:to:<node>``), complete join channels and pending ``Send``
        packets named, comma-separated."""
        entries = self._values_entries(parent)
        names = {ch[len(lgtree.TRIGGER_PREFIX):] for ch in entries if ch.startswith(lgtree.TRIGGER_PREFIX)}
        for channel, entry in entries.items():
            if channel.startswith(lgtree.JOIN_PREFIX):
                node = lgtree.join_target(channel, self._shown(entry))
                if node is not None:
                    names.add(node)
            elif channel == lgtree.TASKS:
                names.update(lgtree.send_targets(self._shown(entry)))
        return ",".join(sorted(names)) or None

    def _shown(self, entry: TreeEntry) -> Any:
        """A values-tree entry as :func:`lgtree.show_entry` shows it (cached by object id)."""
        shown = self._payloads.get("shown:" + entry[1])
        if shown is None:
            shown = (lgtree.show_entry(self.store.core.reader, *entry),)
            self._payloads.put("shown:" + entry[1], shown)
        return shown[0]

    def _forget_index(self, thread_id: str) -> None:
        self._indexes.pop(thread_id, None)

    def _ref(self, thread_id: str, branch: str) -> str:
        return branch_ref(self.store.worktree, thread_id, branch)

    # -- rewriting (writes added to a checkpoint, re-put, delete_for_runs) ---------------------

    def _stage_rewrite(self, tx: Transaction, thread_id: str, idx: ThreadIndex,
                       change: dict[str, tuple[str, str] | None]) -> dict[str, str]:
        """Stage a rewrite of the branches of a thread: each commit in ``change`` gets a new (tree,
        message) or is dropped (``None``, its children move to its parent); descendants are
        re-parented. Every branch moves by compare-and-swap from the tip ``idx`` read (a lost race
        re-runs the caller's transaction on fresh refs). Returns old → new commit ids."""
        reader = self.store.core.reader
        renamed: dict[str, str | None] = {}

        def rebuilt(oid: str | None) -> str | None:
            for old, commit in _unvisited_line(reader, oid, renamed):
                old_parent = commit.parent_ids[0] if commit.parent_ids else None
                new_parent = renamed.get(old_parent) if old_parent is not None else None
                if old_parent is not None and old_parent not in renamed:
                    new_parent = old_parent
                if old in change and change[old] is None:
                    renamed[old] = new_parent
                    continue
                tree, message = change.get(old) or (commit.tree_id, commit.message)
                if tree == commit.tree_id and message == commit.message and new_parent == old_parent:
                    renamed[old] = old
                    continue
                renamed[old] = tx.commit(tree, [new_parent] if new_parent else [], message,
                                         author=commit.author, committer=commit.committer)
            return renamed.get(oid) if oid is not None else None

        for branch, tip in sorted(idx.tips.items()):
            new_tip = rebuilt(tip)
            if new_tip == tip:
                continue
            ref = self._ref(thread_id, branch)
            if new_tip is None:
                tx.delete_ref(ref, tip, "gitstate: langgraph rewrite")
            else:
                tx.set_ref(ref, tip, new_tip, "gitstate: langgraph rewrite")
        tx.after(lambda: self._forget_index(thread_id))
        return {k: v for k, v in renamed.items() if v is not None and v != k}

    def _stage_replace(self, tx: Transaction, thread_id: str, idx: ThreadIndex, existing: Entry, values_tree: str,
                       payload: dict[str, Any], writes: TreeEntry | None, lg_trailers: str,
                       found: Sequence[Finding] = ()) -> str:
        """A checkpoint id put a second time: its commit is rewritten in place (same line)."""
        old = self._commit(existing.oid)
        meta = read_meta(self.store.core.reader, old)
        meta[LG_META] = payload
        meta.pop(SECRETS_META, None)
        if found:
            meta[SECRETS_META] = secrets_record(found)
        entries = [(cpfmt.META, tx.blob(cpfmt.encode_meta(meta)), MODE_BLOB), self._state(tx),
                   (LG_TREE, values_tree, MODE_TREE)]
        if writes is not None:
            entries.append(writes)
        renamed = self._stage_rewrite(tx, thread_id, idx,
                                      {existing.oid: (tx.tree(entries), cpfmt.message(meta) + lg_trailers)})
        return renamed.get(existing.oid, existing.oid)

    # -- writes -------------------------------------------------------------------------------

    def put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                   task_path: str = "") -> None:
        """Store intermediate writes of a task, linked to the checkpoint ``config`` names.

        Regular writes go into a new *writes ref* (a blob of the records this call adds, loose,
        under ``.../writes/<blob id>``): a ref created, never moved, so no branch moves and the
        checkpoint's commit is untouched; the next ``put`` on this checkpoint folds them into its
        commit, with the step's one ref move, and deletes the writes ref. Writes to the special
        channels (error, interrupt, scheduled, resume: they replace earlier writes and set the
        status) amend the checkpoint's commit at once, its branch moving by compare-and-swap. A
        concurrent writer that moved the branch or took the name makes the write run again on what
        is there now, so no write is lost; only the store's lock timeout ends the retries
        (:class:`LockTimeoutError`)."""
        conf = config["configurable"]
        thread_id = str(conf["thread_id"])
        ns = str(conf.get("checkpoint_ns", "") or "")
        cid = str(conf["checkpoint_id"])
        key = (ns, cid)
        encoded = [(channel, self.serde.dumps_typed(value)) for channel, value in writes]
        policy = self.store.core.secrets
        if policy.active:  # (warn: the push check finds them in the writes; nothing recorded here)
            encoded = [(channel, (kind, policy.typed(kind, bytes(data), f"langgraph.writes[{i}]", [])))
                       for i, (channel, (kind, data)) in enumerate(encoded)]
        special = any(channel in WRITES_IDX_MAP for channel, _ in writes)
        with self._lock(thread_id):
            # a special write may rewrite descendants on every branch: it reads them all
            fresh = [self._index(thread_id) if special else self._known_index(thread_id, key)]

            def build(tx: Transaction) -> None:
                idx = fresh.pop() if fresh else self._index(thread_id)
                entry = idx.entries.get(key)
                commit = self._commit(entry.oid) if entry is not None else None
                current = (self._writes_of(idx, entry, commit) if entry is not None and commit is not None
                           else self._orphan_writes.setdefault((thread_id, ns, cid), {}))
                added: dict[tuple[str, int], list[Any]] = {}
                for i, (channel, (kind, data)) in enumerate(encoded):
                    widx = WRITES_IDX_MAP.get(channel, i)
                    if widx >= 0 and (task_id, widx) in current:
                        continue
                    added[(task_id, widx)] = [task_id, channel, kind, bytes(data), task_path, widx]
                if not added:
                    return
                if entry is None or commit is None:
                    current.update(added)  # the checkpoint is not stored yet: its put carries them
                    return
                if not special:
                    self._stage_writes_ref(tx, thread_id, idx, key, added, task_id)
                    return
                refs = tuple(idx.pending.get(key, ()))
                root, message = self._amended_tree(tx, commit, {**current, **added})
                branch = idx.tip_of.get(entry.oid)
                if branch is None:
                    self._stage_rewrite(tx, thread_id, idx, {entry.oid: (root, message)})
                    self._stage_drop_writes(tx, thread_id, refs)
                    return
                new = self._new_commit(tx, root, list(commit.parent_ids), message, commit.author,
                                       commit.committer).id
                tx.set_ref(self._ref(thread_id, branch), entry.oid, new, f"gitstate: langgraph writes {task_id}")
                self._stage_drop_writes(tx, thread_id, refs)

                def learned() -> None:
                    self._learn_rewritten(idx, entry, new)
                    idx.add(idx.entries[key], branch, entry.oid)
                    idx.drop_writes(key, {name for name, _ in refs})

                tx.after(learned)

            self.store.core.write(build, loose=not special)

    def _stage_writes_ref(self, tx: Transaction, thread_id: str, idx: ThreadIndex, key: tuple[str, str],
                          added: dict[tuple[str, int], list[Any]], task_id: str) -> None:
        """Stage a writes ref for ``added`` (created: a name taken meanwhile re-runs the write)."""
        blob = self._put_blob(tx, wr.encode_pending(key[0], key[1], added))
        self._records.put("ref:" + blob, (key[0], key[1], added))
        tx.set_ref(self._writes_ref(thread_id, blob), None, blob, f"gitstate: langgraph writes {task_id}",
                   log=False)
        tx.after(lambda: idx.add_writes(key, blob, blob))

    def _learn_rewritten(self, idx: ThreadIndex, entry: Entry, new: str) -> None:
        """The index and caches learn that ``entry``'s checkpoint now has the commit ``new``."""
        self.store.core.remember_position(new, *self.store.core.position(entry.oid))
        versions = self._versions.get(entry.oid)
        if versions is not None:
            self._remember_versions(new, versions)
        idx.replace(entry, Entry(new, entry.ns, entry.checkpoint_id, entry.parent_id, entry.run_id, entry.parents))

    def _with_status(self, commit: CommitData, writes: dict[tuple[str, int], list[Any]]) -> tuple[dict[str, Any], str]:
        """The checkpoint's ``meta.cbor`` and message with the status its pending writes imply
        (an error write: ``failed``; an interrupt: ``interrupted``); unchanged otherwise."""
        meta = read_meta(self.store.core.reader, commit)
        status = _status_of_writes(writes)
        if status is None or meta.get("status") == status:
            return meta, commit.message
        meta["status"] = status
        return meta, cpfmt.message(meta) + _own_trailers(commit.message)

    def _read_writes(self, commit: CommitData) -> dict[tuple[str, int], list[Any]]:
        """The pending writes stored in a checkpoint's commit (shared: do not modify)."""
        found = self._root(commit).get(WRITES_BLOB)
        if found is None:
            return {}
        oid = found.id
        hit = self._records.get(oid)
        if hit is None:
            hit = wr.decode_records(self._blob(oid), oid)
            self._records.put(oid, hit)
        return cast(dict[tuple[str, int], list[Any]], hit)

    # -- reading ------------------------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint ``config`` names, or the latest of its thread and namespace."""
        conf = config["configurable"]
        thread_id = str(conf["thread_id"])
        ns = str(conf.get("checkpoint_ns", "") or "")
        cid = get_checkpoint_id(config)
        with self._lock(thread_id):
            idx = self._index(thread_id)
            entry = idx.entries.get((ns, cid)) if cid else idx.latest(ns)
            if entry is None:
                return None
            refs = tuple(idx.pending.get((entry.ns, entry.checkpoint_id), ()))
        return self._tuple(thread_id, entry, refs)

    def _tuple(self, thread_id: str, entry: Entry, refs: tuple[tuple[str, str], ...],
               decoded: dict[str, list[Any]] | None = None) -> CheckpointTuple:
        """The checkpoint tuple of ``entry``; ``refs``: its writes refs (as the index listed them)."""
        reader = self.store.core.reader
        commit = self._commit(entry.oid)
        cp, metadata = self._payload(commit, metadata=True)
        channel_values: dict[str, Any] = {}
        for name, sub, mode in self._values_tree(commit):
            channel, value = self.value_codec.read(reader, name, sub, mode, decoded)
            channel_values[channel] = value
        cp["channel_values"] = channel_values
        own = self._read_writes(commit)
        found = self._root(commit).get(WRITES_BLOB) if own else None
        sources: dict[tuple[str, int], str] = {k: found.id for k in own} if found is not None else {}
        records_by_key = dict(own)
        for _name, oid in refs:
            for k, r in self._pending_blob(oid)[2].items():
                if k not in records_by_key:
                    records_by_key[k] = r
                    sources[k] = oid
        records = sorted(records_by_key.values(), key=lambda r: writes_sort_key(r[4], r[0], r[5]))
        pending = [(r[0], r[1], decode(self.serde.loads_typed, (r[2], r[3]), sources[(r[0], r[5])]))
                   for r in records]
        conf = {"thread_id": thread_id, "checkpoint_ns": entry.ns, "checkpoint_id": entry.checkpoint_id}
        parent_config: RunnableConfig | None = None
        if entry.parent_id:
            parent_config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": entry.ns,
                                              "checkpoint_id": entry.parent_id}}
        return CheckpointTuple(config={"configurable": conf}, checkpoint=cp,  # type: ignore[arg-type]
                               metadata=metadata,  # type: ignore[arg-type]
                               parent_config=parent_config, pending_writes=pending)

    def _thread_ids(self) -> list[str]:
        found: set[str] = set()
        for name, _oid in list_refs(self.store.repo, worktree_prefix(self.store.worktree)):
            parsed = parse_ref(name)
            if parsed is not None and parsed.kind == "heads":
                found.add(parsed.run_id)
        return sorted(found)

    def list(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
             before: RunnableConfig | None = None, limit: int | None = None) -> Iterator[CheckpointTuple]:
        """Checkpoints matching ``config`` (thread, namespace, id), ``filter`` (metadata equality)
        and ``before`` (a checkpoint id), newest first within a namespace."""
        conf = config["configurable"] if config else {}
        thread_ids = [str(conf["thread_id"])] if conf.get("thread_id") is not None else self._thread_ids()
        ns_filter = conf.get("checkpoint_ns") if config else None
        want_id = get_checkpoint_id(config) if config else None
        before_id = get_checkpoint_id(before) if before else None
        remaining = limit
        decoded: dict[str, list[Any]] = {}
        for thread_id in thread_ids:
            with self._lock(thread_id):
                idx = self._index(thread_id)
                namespaces = idx.namespaces() if ns_filter is None else [str(ns_filter)]
                selected = [e for ns in namespaces for e in idx.namespace(ns)]
                pending = dict(idx.pending)
            for entry in selected:
                if want_id and entry.checkpoint_id != want_id:
                    continue
                if before_id and entry.checkpoint_id >= before_id:
                    continue
                if filter:
                    _cp, metadata = self._payload(self._commit(entry.oid), metadata=True)
                    if not all(metadata.get(k) == v for k, v in filter.items()):
                        continue
                if remaining is not None:
                    if remaining <= 0:
                        return
                    remaining -= 1
                yield self._tuple(thread_id, entry, tuple(pending.get((entry.ns, entry.checkpoint_id), ())),
                                  decoded)

    # -- deleting, copying, pruning -----------------------------------------------------------

    def delete_thread(self, thread_id: str) -> None:
        """Delete every checkpoint and write of a thread (its run's refs)."""
        thread_id = str(thread_id)
        with self._lock(thread_id):
            try:
                self.store.delete_run(thread_id)
            except RunNotFound:
                pass
            self._indexes.pop(thread_id, None)
            self.value_codec.forget(thread_id)
            for key in [k for k in self._orphan_writes if k[0] == thread_id]:
                del self._orphan_writes[key]

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints (and their writes) whose metadata ``run_id`` is one of ``run_ids``;
        their children are re-parented in git (their LangGraph parent id is kept, as other savers do)."""
        wanted = {str(r) for r in run_ids}
        if not wanted:
            return
        for thread_id in self._thread_ids():
            with self._lock(thread_id):

                def build(tx: Transaction, thread_id: str = thread_id) -> None:
                    idx = self._index(thread_id)
                    dropped = [e for e in idx.entries.values() if e.run_id in wanted]
                    if dropped:
                        self._stage_rewrite(tx, thread_id, idx, {e.oid: None for e in dropped})
                        for e in dropped:
                            self._stage_drop_writes(tx, thread_id, idx.pending.get((e.ns, e.checkpoint_id), ()))

                self.store.core.write(build)
                self.store.core.forget_objects()

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint and write of a thread to another thread (same ids, same lines)."""
        src, dst = str(source_thread_id), str(target_thread_id)
        first, second = sorted((src, dst))
        with self._lock(first), self._lock(second):
            idx = self._index(src)
            if not idx.tips:
                return
            self._ensure_run(dst)
            reader = self.store.core.reader

            def build(tx: Transaction) -> None:
                copied: dict[str, str] = {}
                source = self._index(src)

                def copy(oid: str) -> str:
                    for old, commit in _unvisited_line(reader, oid, copied):
                        meta = read_meta(reader, commit)
                        meta["run"] = dst
                        entry = parse_entry(commit)
                        skip = {cpfmt.META}
                        extra_entries: list[TreeEntry] = []
                        if entry is not None and source.pending.get((entry.ns, entry.checkpoint_id)):
                            # pending writes of the source's writes refs land in the copy's commit
                            skip.add(WRITES_BLOB)
                            merged = self._writes_of(source, entry, commit)
                            extra_entries.append((WRITES_BLOB, tx.blob(wr.encode_records(merged)), MODE_BLOB))
                        entries = [(e.name, e.id, e.filemode) for e in reader.tree(commit.tree_id)
                                   if e.name not in skip]
                        root = tx.tree([*entries, *extra_entries,
                                        (cpfmt.META, tx.blob(cpfmt.encode_meta(meta)), MODE_BLOB)])
                        extra = ""
                        if entry is not None:
                            extra = trailers(entry.ns, entry.checkpoint_id, entry.parent_id, entry.run_id)
                        parents = [copied[p] for p in commit.parent_ids[:1]]
                        copied[old] = tx.commit(root, parents, cpfmt.message(meta) + extra,
                                                author=commit.author, committer=commit.committer)
                    return copied[oid]

                target = self._index(dst)
                for branch, tip in sorted(self._index(src).tips.items()):
                    name = branch if branch not in target.tips else f"{branch}~copy-{src}"
                    tx.set_ref(self._ref(dst, name), None, copy(tip), f"gitstate: langgraph copy of thread {src}",
                               strict=True)

            self.store.core.write(build)
            self._indexes.pop(dst, None)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``keep_latest``: keep only the newest checkpoint of each namespace (with its writes);
        ``delete``: delete the threads."""
        if strategy not in ("keep_latest", "delete"):
            raise ValueError(f"unknown prune strategy {strategy!r} (expected 'keep_latest' or 'delete')")
        for thread_id in (str(t) for t in thread_ids):
            if strategy == "delete":
                self.delete_thread(thread_id)
                continue
            with self._lock(thread_id):
                idx = self._index(thread_id)
                if not idx.tips:
                    continue
                def build(tx: Transaction, thread_id: str = thread_id) -> None:
                    reader = self.store.core.reader
                    idx = self._index(thread_id)
                    keep: dict[str, str] = {}
                    for ns in idx.namespaces():
                        latest = idx.namespace(ns)[0]
                        commit = reader.commit(latest.oid)
                        tree, message = commit.tree_id, commit.message
                        meta = read_meta(reader, commit)
                        if idx.pending.get((latest.ns, latest.checkpoint_id)):
                            records = self._writes_of(idx, latest, commit)
                            tree, message = self._amended_tree(tx, commit, records)
                            meta = self._with_status(commit, records)[0]  # the meta the amended tree holds
                        if meta.get("step") != 0 or meta.get("base"):
                            tree, message = self._first_of_line(tx, tree, message, meta)
                        if not commit.parent_ids and tree == commit.tree_id:
                            keep[line_name(ns)] = latest.oid
                            continue
                        keep[line_name(ns)] = tx.commit(tree, [], message,
                                                        author=commit.author, committer=commit.committer)
                    for branch, oid in keep.items():
                        current = idx.tips.get(branch)
                        if current != oid:
                            tx.set_ref(self._ref(thread_id, branch), current, oid,
                                       "gitstate: langgraph prune (keep latest)", strict=True)
                    for branch, tip in idx.tips.items():
                        if branch not in keep:
                            tx.delete_ref(self._ref(thread_id, branch), tip, "gitstate: langgraph prune",
                                          strict=True)
                    self._stage_drop_writes(tx, thread_id, sorted(idx.writes.items()))

                self.store.core.write(build)
                self.store.core.forget_objects()
                self._indexes.pop(thread_id, None)

    def _first_of_line(self, tx: Transaction, tree: str, message: str, meta: dict[str, Any]) -> tuple[str, str]:
        """``tree`` (whose ``meta.cbor`` is ``meta``) and ``message`` of a checkpoint that becomes
        the first of its line (a prune kept it alone): its core ``step`` (the position on the
        line, which ``runs`` and ``branches`` count checkpoints by) is 0."""
        meta = {**meta, "step": 0}
        meta.pop("base", None)
        entries = [(e.name, e.id, e.filemode) for e in self._root_tree(tree) if e.name != cpfmt.META]
        entries.append((cpfmt.META, self._put_blob(tx, cpfmt.encode_meta(meta)), MODE_BLOB))
        return self._tree(tx, entries), cpfmt.message(meta) + _own_trailers(message)

    # -- versions -----------------------------------------------------------------------------

    def get_next_version(self, current: str | None, channel: None) -> str:
        """Monotonic string versions (``<counter>.<random>``), as the first-party savers use."""
        if current is None:
            current_v = 0
        elif isinstance(current, int):
            current_v = current
        else:
            current_v = int(str(current).split(".")[0])
        return f"{current_v + 1:032}.{random.random():016}"

    # -- async twins --------------------------------------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """Async :meth:`get_tuple`."""
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
                    before: RunnableConfig | None = None, limit: int | None = None) -> AsyncIterator[CheckpointTuple]:
        """Async :meth:`list` (the listing runs in a worker thread)."""
        items = await asyncio.to_thread(lambda: list(self.list(config, filter=filter, before=before, limit=limit)))
        for item in items:
            yield item

    async def aput(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
                   new_versions: ChannelVersions) -> RunnableConfig:
        """Async :meth:`put`."""
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                          task_path: str = "") -> None:
        """Async :meth:`put_writes`."""
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        """Async :meth:`delete_thread`."""
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Async :meth:`delete_for_runs`."""
        await asyncio.to_thread(self.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Async :meth:`copy_thread`."""
        await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Async :meth:`prune`."""
        await asyncio.to_thread(self.prune, thread_ids, strategy=strategy)


def _scrubber(policy: Policy, path: str, found: list[Finding] | None) -> Scrub:
    """The policy applied to the serde's bytes of one channel value (see :data:`Scrub`)."""
    sink = found if found is not None else []

    def scrub(kind: str, data: bytes, start: int, count: int | None) -> bytes:
        if kind == "msgpack":
            return policy.msgpack(data, path, sink, start, count)
        return policy.typed(kind, data, path, sink)

    return scrub


def _unvisited_line(reader: ObjectReader, oid: str | None,
                    done: Mapping[str, object]) -> list[tuple[str, CommitData]]:
    """The first-parent line from ``oid`` down to the first commit already in ``done``, oldest
    first, so a rewrite can handle each commit after its parent."""
    chain: list[tuple[str, CommitData]] = []
    cur = oid
    while cur is not None and cur not in done:
        commit = reader.commit(cur)
        chain.append((cur, commit))
        cur = commit.parent_ids[0] if commit.parent_ids else None
    chain.reverse()
    return chain
