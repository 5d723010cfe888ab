"""Microsoft Agent Framework workflow checkpoints on gitstate: :class:`GitCheckpointStorage`
implements the framework's ``CheckpointStorage`` protocol (install the
``agent-framework`` extra of ``git-agentos``).

A workflow name is a gitstate run (run id = ``workflow_name``, workflow ``agent-framework``); each
saved ``WorkflowCheckpoint`` is a commit whose parent is the commit of its
``previous_checkpoint_id``. A checkpoint whose previous one is a branch tip extends that branch;
the first chain of a workflow is branch ``main``, any other (a second run of the workflow, a resume
from an older checkpoint) starts a branch named after its first checkpoint id, forked at its
previous checkpoint, so ``git log`` shows where a resumed run branched off.

Values are kept as plain data, never pickled: JSON-like values as themselves, the framework's own
types, tuples, sets, dates, dataclasses, enums and pydantic models as typed values
(:mod:`gitstate.format.typed`). Loading never imports a module and never calls code named by the
data: it builds the framework's types (``agent_framework.*``, ``openai.types.*``), the classes you
allow — ``allowed_checkpoint_types`` (classes or ``"module:qualname"`` strings, as for
``FileCheckpointStorage``) or ``agent_framework.register_checkpoint_type`` — and, unless
``strict=True``, plain data classes (dataclasses, pydantic models, enums without a ``__del__``) of
modules already imported, set field by field without running their code. A checkpoint holding any
other type is refused when it is saved, as ``FileCheckpointStorage`` refuses it."""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import os
import sys
import threading
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any, TypeVar

try:
    from agent_framework import WorkflowCheckpoint
    from agent_framework.exceptions import WorkflowCheckpointException
except ImportError as exc:  # pragma: no cover - exercised only without the extra installed
    # not "pip install gitstate[...]": that name on PyPI is another project's
    raise ImportError("gitstate.agent_framework needs Microsoft Agent Framework: install the agent-framework extra of git-agentos "
                      f"(from a checkout: pip install '.[agent-framework]') ({exc})") from exc

from gitstate.errors import (
    CheckpointNotFound,
    CorruptObjectError,
    EncodingError,
    GitStateError,
    UnsafeValueError,
)
from gitstate.format import checkpoint as cpfmt
from gitstate.format import frameworks, typed
from gitstate.format.checkpoint import Checkpoint, read_meta
from gitstate.format.names import parse_ref, worktree_prefix
from gitstate.integrations import SEQUENCE, RunHandle, check_payload, store_at
from gitstate.store.run import Run
from gitstate.store.store import Store
from gitstate.store.transaction import Transaction

__all__ = ["CheckpointDecodeError", "CheckpointEncodingError", "DisallowedTypeError", "GitCheckpointStorage",
           "UnknownCheckpointError"]

WORKFLOW = frameworks.AGENT_FRAMEWORK
KIND = frameworks.KINDS[WORKFLOW]
FRAMEWORK_PREFIXES = ("agent_framework.", "agent_framework_", "openai.types.")
T = TypeVar("T")


class UnknownCheckpointError(CheckpointNotFound, WorkflowCheckpointException):
    """No checkpoint of that id is stored (a ``WorkflowCheckpointException`` as well, as the
    framework's storages raise)."""

    def __init__(self, checkpoint_id: str) -> None:
        super().__init__(checkpoint_id)
        self.args = (f"No checkpoint found with ID {checkpoint_id}",)


class CheckpointEncodingError(EncodingError, WorkflowCheckpointException):
    """A checkpoint holds a value gitstate cannot store as data, or a class that is not allowed;
    nothing was written."""


class CheckpointDecodeError(CorruptObjectError, WorkflowCheckpointException):
    """A stored checkpoint does not decode (damaged, or not a checkpoint of this kind)."""


class DisallowedTypeError(UnsafeValueError, WorkflowCheckpointException):
    """A stored checkpoint names a class that is neither the framework's nor allowed."""

    def __init__(self, oid: str, type_name: str) -> None:
        super().__init__(oid, type_name)
        self.args = (f"checkpoint {oid}: refusing to build type {type_name}; allow it with "
                     "GitCheckpointStorage(allowed_checkpoint_types=[...]) or "
                     "agent_framework.register_checkpoint_type",)


def _registered_keys() -> frozenset[str]:
    """Types registered with ``agent_framework.register_checkpoint_type`` (read, never changed)."""
    module = sys.modules.get("agent_framework._workflows._checkpoint_encoding")
    keys = getattr(module, "_REGISTERED_CHECKPOINT_TYPE_KEYS", None)
    return frozenset(keys) if isinstance(keys, set | frozenset) else frozenset()


def _loaded_class(key: str) -> type | None:
    """The class a ``module:qualname`` key names in an already imported module (nothing is
    imported), or ``None``."""
    module_name, _, qualname = key.partition(":")
    obj: Any = sys.modules.get(module_name)
    if obj is None or not qualname or "<" in qualname:
        return None
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj if isinstance(obj, type) else None


@dataclasses.dataclass(frozen=True)
class _Entry:
    """One checkpoint commit as the index knows it (commits never change, so entries are kept)."""

    checkpoint_id: str
    commit: str
    parent: str | None
    saved: int
    timestamp: str


class _Index:
    """A workflow run's checkpoints by id, built from ``meta.cbor`` metadata alone by walking the
    run's branches; kept while the branch tips stay as they were seen."""

    def __init__(self, tips: dict[str, str]) -> None:
        self.tips = tips
        self.by_id: dict[str, _Entry] = {}
        self.by_commit: dict[str, _Entry] = {}

    def ordered(self) -> list[_Entry]:
        return sorted(self.by_id.values(), key=lambda e: (e.saved, e.commit))


class GitCheckpointStorage:
    """Workflow checkpoints in a git repository (``agent_framework.CheckpointStorage``).

    ``path`` finds the repository as :func:`gitstate.open_store` does (default: the current
    directory); ``store`` passes an open store instead. Every method is async (work runs in a
    worker thread) and returns what the framework's ``InMemoryCheckpointStorage`` returns for the
    same calls: copies of the checkpoints as saved, listed in the order they were first saved,
    ``None`` from :meth:`get_latest` when there is none, ``False`` from :meth:`delete` for an
    unknown id, :class:`UnknownCheckpointError` (a ``WorkflowCheckpointException``) from
    :meth:`load`. Several processes may save checkpoints of the same workflow at once.

    ``strict=True`` builds only the framework's types and the allowed ones (as
    ``FileCheckpointStorage``); by default, dataclasses, pydantic models and enums of imported
    modules are stored and rebuilt too (see the module docs)."""

    def __init__(self, path: str | os.PathLike[str] | None = None, *, store: Store | None = None,
                 allowed_checkpoint_types: Iterable[type | str] = (), strict: bool = False) -> None:
        self.store = store_at(path, store)
        self.strict = strict
        self._own_store = store is None
        self._classes: dict[str, type] = {}
        self._keys: set[str] = set()
        for item in allowed_checkpoint_types:
            if isinstance(item, type):
                self._classes[typed.type_key(item)] = item
            elif isinstance(item, str) and ":" in item:
                self._keys.add(item)
            else:
                raise CheckpointEncodingError("allowed_checkpoint_types",
                                              f"{item!r} is neither a class nor a 'module:qualname' string")
        self._handles: dict[str, RunHandle] = {}
        self._indexes: dict[str, _Index] = {}
        self._records: dict[str, str] = {}
        self._lock = threading.RLock()

    def __repr__(self) -> str:
        return f"<GitCheckpointStorage {self.store.path!r}>"

    def close(self) -> None:
        """Release the store if this storage opened it."""
        if self._own_store:
            self.store.close()

    # -- types --------------------------------------------------------------------------------

    def _allowed_key(self, key: str) -> bool:
        return (key in self._classes or key in self._keys or key in _registered_keys()
                or key.startswith(FRAMEWORK_PREFIXES))

    def _data_class(self, cls: type | None) -> bool:
        """A plain data class (dataclass, pydantic model, enum) that may be stored and rebuilt
        without being allowed by name, unless ``strict``: rebuilding one sets its fields and runs
        none of its code; a class with a finalizer (``__del__``) is never taken this way."""
        if self.strict or cls is None:
            return False
        if not (dataclasses.is_dataclass(cls) or isinstance(cls, enum.EnumMeta)
                or (hasattr(cls, "model_fields") and hasattr(cls, "model_construct"))):
            return False
        return not any("__del__" in vars(base) for base in cls.__mro__ if base is not object)

    def _allow(self, cls: type) -> str | None:
        key = typed.type_key(cls)
        if key in self._classes:
            return key
        if _loaded_class(key) is cls and (self._allowed_key(key) or self._data_class(cls)):
            return key
        return None

    def _resolver(self, oid: str) -> Callable[[str], type]:
        def resolve(key: str) -> type:
            cls = self._classes.get(key)
            if cls is None:
                found = _loaded_class(key)
                if found is not None and (self._allowed_key(key) or self._data_class(found)):
                    cls = found
            if cls is None:
                raise DisallowedTypeError(oid, key)
            return cls

        return resolve

    # -- runs and the index -------------------------------------------------------------------

    def _handle(self, workflow_name: str) -> RunHandle:
        with self._lock:
            handle = self._handles.get(workflow_name)
            if handle is None:
                handle = self._handles[workflow_name] = RunHandle(self.store, workflow_name, WORKFLOW)
            return handle

    def _workflow_runs(self) -> list[str]:
        """Ids of this worktree's runs written by this integration."""
        found: set[str] = set()
        for name, oid in self.store.list_refs(worktree_prefix(self.store.worktree)):
            parsed = parse_ref(name)
            if parsed is None or parsed.kind != "run":
                continue
            workflow = self._records.get(oid)
            if workflow is None:
                try:
                    workflow = str(self.store.read_run_record(oid).get("workflow"))
                except GitStateError:
                    continue
                self._records[oid] = workflow  # run records never change
            if workflow == WORKFLOW:
                found.add(parsed.run_id)
        return sorted(found)

    def _index(self, run: Run) -> _Index:
        """The run's index, brought up to date with its branch tips."""
        tips = {name: cp.id for name, cp in run.branches().items()}
        with self._lock:
            index = self._indexes.get(run.id)
            if index is not None and index.tips == tips:
                return index
            fresh = _Index(tips)
            for tip in tips.values():
                oid: str | None = tip
                while oid is not None and oid not in fresh.by_commit:
                    entry = index.by_commit.get(oid) if index is not None else None
                    if entry is None:
                        entry = self._entry(self.store.read_checkpoint(oid))
                    fresh.by_commit[oid] = entry
                    fresh.by_id.setdefault(entry.checkpoint_id, entry)
                    oid = entry.parent
            self._indexes[run.id] = fresh
            return fresh

    @staticmethod
    def _entry(cp: Checkpoint) -> _Entry:
        md = cp.metadata
        cid, saved, stamp = md.get("checkpoint_id"), md.get("saved"), md.get("timestamp")
        if not isinstance(cid, str) or not isinstance(saved, int) or not isinstance(stamp, str):
            raise CheckpointDecodeError(cp.id, "not an agent-framework checkpoint (metadata lacks its id)")
        return _Entry(cid, cp.id, cp.parent_id, saved, stamp)

    def _find(self, checkpoint_id: str) -> tuple[Run, _Entry] | None:
        for run_id in self._workflow_runs():
            run = self._handle(run_id).get()
            if run is None:
                continue
            entry = self._index(run).by_id.get(checkpoint_id)
            if entry is not None:
                return run, entry
        return None

    # -- encoding -----------------------------------------------------------------------------

    def _state(self, checkpoint: WorkflowCheckpoint, saved: int) -> dict[str, Any]:
        fields: dict[str, Any] = {}
        for f in dataclasses.fields(checkpoint):
            if f.name in frameworks.AF_OWN_KEYS:
                raise CheckpointEncodingError(f.name, "field name collides with gitstate's own keys")
            try:
                fields[f.name] = typed.encode(getattr(checkpoint, f.name), self._allow, f.name)
            except EncodingError as exc:
                raise CheckpointEncodingError(exc.path, exc.reason + "; allow classes with "
                                              "allowed_checkpoint_types=[...]") from None
        return {"format": KIND, "v": frameworks.VERSION, "saved": saved, **fields}

    def _decode(self, cp: Checkpoint) -> WorkflowCheckpoint:
        try:
            state = cp.state
            check_payload(WORKFLOW, state, cp.id)
            resolve = self._resolver(cp.id)
            fields = {k: typed.decode(v, resolve, cp.id) for k, v in state.items()
                      if k not in frameworks.AF_OWN_KEYS}
        except DisallowedTypeError:
            raise
        except CorruptObjectError as exc:
            raise CheckpointDecodeError(cp.id, exc.reason) from None
        known = {f.name for f in dataclasses.fields(WorkflowCheckpoint)}
        try:
            return WorkflowCheckpoint(**{k: v for k, v in fields.items() if k in known})
        except TypeError as exc:
            raise CheckpointDecodeError(cp.id, f"not a WorkflowCheckpoint: {exc}") from None

    # -- writing ------------------------------------------------------------------------------

    def _save(self, checkpoint: WorkflowCheckpoint) -> str:
        if not isinstance(checkpoint, WorkflowCheckpoint):
            raise CheckpointEncodingError("checkpoint", f"expected a WorkflowCheckpoint, got {type(checkpoint).__name__}")
        cid = checkpoint.checkpoint_id
        if not isinstance(cid, str) or not cid:
            raise CheckpointEncodingError("checkpoint_id", "must be a non-empty string")
        run = self._handle(checkpoint.workflow_name).ensure()
        existing = self._index(run).by_id.get(cid)
        saved = existing.saved if existing is not None else SEQUENCE.next()
        state = self._state(checkpoint, saved)
        if existing is not None:
            self._rewrite(run, drop={existing.commit})
        metadata = {"checkpoint_id": cid, "previous_checkpoint_id": checkpoint.previous_checkpoint_id,
                    "timestamp": checkpoint.timestamp, "iteration_count": checkpoint.iteration_count,
                    "saved": saved}
        store = self.store

        def build(tx: Transaction) -> Checkpoint:
            index = self._index(run)
            previous = index.by_id.get(checkpoint.previous_checkpoint_id or "")
            parent = previous.commit if previous is not None else None
            branch = next((name for name, tip in index.tips.items() if parent is not None and tip == parent), None)
            tip = parent if branch is not None else None
            if branch is None:
                branch = "main" if not index.tips else cid
            return run.stage_checkpoint(
                tx, tip, cpfmt.state_entry(tx.writer, state), branch=branch, node="superstep",
                trigger=f"iteration {checkpoint.iteration_count}", metadata=metadata,
                fork_from=parent if tip is None else None)

        with self._lock:
            cp = store.write(build)
            store.remember(cp)
            index = self._indexes.get(run.id)
            if index is not None:  # extend the index instead of walking the run again
                entry = _Entry(cid, cp.id, cp.parent_id, saved, checkpoint.timestamp)
                tips = dict(index.tips)
                tips[cp.branch] = cp.id
                index.tips = tips
                index.by_commit[cp.id] = entry
                index.by_id[cid] = entry
        return cid

    def _rewrite(self, run: Run, drop: set[str]) -> None:
        """Rewrite the run's branches without the commits in ``drop``: their children get the
        nearest kept ancestor as parent (steps renumbered, trees, messages and dates kept); a
        branch left with nothing is deleted. One write, every branch by compare-and-swap."""
        store = self.store
        reader = store.reader

        def build(tx: Transaction) -> None:
            tips = {name: cp.id for name, cp in run.branches().items()}
            memo: dict[str, str | None] = {}

            def new_id(oid: str) -> str | None:
                chain: list[str] = []
                walk: str | None = oid
                while walk is not None and walk not in memo:
                    chain.append(walk)
                    parents = reader.commit(walk).parent_ids
                    walk = parents[0] if parents else None
                for old in reversed(chain):
                    commit = reader.commit(old)
                    parent = memo.get(commit.parent_ids[0]) if commit.parent_ids else None
                    if old in drop:
                        memo[old] = parent
                        continue
                    if commit.parent_ids and parent == commit.parent_ids[0]:
                        memo[old] = old
                        continue
                    meta = read_meta(reader, commit)
                    meta["step"] = 0 if parent is None else store.position(parent)[0] + 1
                    meta.pop("base", None)
                    entries = [(e.name, e.id, e.filemode) for e in reader.tree(commit.tree_id) if e.name != cpfmt.META]
                    entries.append((cpfmt.META, tx.blob(cpfmt.encode_meta(meta)), 0o100644))
                    memo[old] = tx.commit(tx.tree(entries), [parent] if parent else [], cpfmt.message(meta),
                                          author=commit.author, committer=commit.committer)
                    store.remember_position(memo[old] or "", meta["step"], 0)
                return memo[oid]

            for name, tip in tips.items():
                new = new_id(tip)
                if new is None:
                    tx.delete_ref(run.ref(name), tip, "gitstate: agent-framework delete checkpoint")
                elif new != tip:
                    tx.set_ref(run.ref(name), tip, new, "gitstate: agent-framework delete checkpoint")

        store.write(build)
        store.forget_objects()

    def _delete(self, checkpoint_id: str) -> bool:
        found = self._find(checkpoint_id)
        if found is None:
            return False
        run, entry = found
        self._rewrite(run, {entry.commit})
        return True

    # -- the protocol -------------------------------------------------------------------------

    async def _thread(self, fn: Callable[[], T]) -> T:
        return await asyncio.to_thread(fn)

    async def save(self, checkpoint: WorkflowCheckpoint) -> str:
        """Store a copy of the checkpoint (one commit) and return its id. Saving an id again
        replaces that checkpoint, keeping its place in the listing."""
        return await self._thread(lambda: self._save(checkpoint))

    async def load(self, checkpoint_id: str) -> WorkflowCheckpoint:
        """The checkpoint of that id (a fresh copy); :class:`UnknownCheckpointError` if none."""

        def load() -> WorkflowCheckpoint:
            found = self._find(checkpoint_id) if isinstance(checkpoint_id, str) else None
            if found is None:
                raise UnknownCheckpointError(str(checkpoint_id))
            return self._decode(self.store.read_checkpoint(found[1].commit))

        return await self._thread(load)

    def _entries(self, workflow_name: str) -> list[_Entry]:
        run = self._handle(workflow_name).get() if isinstance(workflow_name, str) and workflow_name else None
        return [] if run is None else self._index(run).ordered()

    async def list_checkpoints(self, *, workflow_name: str) -> list[WorkflowCheckpoint]:
        """Copies of the workflow's checkpoints, in the order they were first saved."""
        return await self._thread(lambda: [self._decode(self.store.read_checkpoint(e.commit))
                                           for e in self._entries(workflow_name)])

    async def list_checkpoint_ids(self, *, workflow_name: str) -> list[str]:
        """The workflow's checkpoint ids, in the order they were first saved."""
        return await self._thread(lambda: [e.checkpoint_id for e in self._entries(workflow_name)])

    async def get_latest(self, *, workflow_name: str) -> WorkflowCheckpoint | None:
        """The checkpoint with the latest ``timestamp`` (the first saved of equal ones), or
        ``None``."""

        def latest() -> WorkflowCheckpoint | None:
            entries = self._entries(workflow_name)
            if not entries:
                return None
            best = max(entries, key=lambda e: datetime.fromisoformat(e.timestamp))
            return self._decode(self.store.read_checkpoint(best.commit))

        return await self._thread(latest)

    async def delete(self, checkpoint_id: str) -> bool:
        """Delete a checkpoint (``False`` if there is none of that id). Its commit leaves the
        branches: later checkpoints get the one before it as parent."""
        return await self._thread(lambda: self._delete(checkpoint_id))
