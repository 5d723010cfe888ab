"""Microsoft Agent Framework workflow checkpoints on gitstate: :class:`GitCheckpointStorage`
implements the framework's ``CheckpointStorage`` protocol (install the
``agent-framework`` extra of ``git-agentos``).

A workflow name is a gitstate run (run id = ``workflow_name``, workflow ``agent-framework``); each
saved ``WorkflowCheckpoint`` is a commit whose parent is the commit of its
``previous_checkpoint_id``. A checkpoint whose previous one is a branch tip extends that branch;
the first chain of a workflow is branch ``main``, any other (a second run of the workflow, a resume
from an older checkpoint) starts a branch named after its first checkpoint id, forked at its
previous checkpoint, so ``git log`` shows where a resumed run branched off. A checkpoint with
pending requests (``pending_request_info_events``: the workflow waits for an answer) records the
status ``interrupted``; the framework never says a workflow finished, so a run whose latest
checkpoint waits for nothing is listed as ``saved`` (not ``running``).

Checkpoint ids are the storage's keys, as in the framework's own storages: an id is stored once
among all the workflows (of the worktree). Saving an id again, under its workflow or another one,
replaces it in one write: the new commit, and the old one leaves its run's branches (later
checkpoints get its parent as theirs); ``delete`` takes it out the same way. Every branch moves by
compare-and-swap, the branch of the new commit first, so a write cut off half way leaves an old
copy beside the new one, never none; where an id is found more than once (that, or a store written
by an earlier version, which kept one copy per workflow) the newest save is the checkpoint, listed
under its workflow only, and the next save or delete of the id removes every copy.

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
from gitstate.format.names import branch_ref, parse_ref, worktree_prefix
from gitstate.integrations import SEQUENCE, RunHandle, check_payload, store_at
from gitstate.store.store import Store
from gitstate.store.transaction import Transaction

__all__ = ["CheckpointDecodeError", "CheckpointEncodingError", "DisallowedTypeError", "GitCheckpointStorage",
           "UnknownCheckpointError"]

WORKFLOW = frameworks.AGENT_FRAMEWORK
KIND = frameworks.KINDS[WORKFLOW]
FRAMEWORK_PREFIXES = ("agent_framework.", "agent_framework_", "openai.types.")
T = TypeVar("T")
DROP_MESSAGE = "gitstate: agent-framework delete checkpoint"


class _Identity(dict[str, "str | None"]):
    """Old → new commit ids of branches rewritten without dropping anything: each its own."""

    def __missing__(self, key: str) -> str:
        return key


def _free_branch(checkpoint_id: str, taken: Iterable[str]) -> str:
    """A branch name for a chain that starts at this checkpoint: its id, or ``<id>-2``, … when a
    branch of that name holds other checkpoints."""
    names = set(taken)
    name, n = checkpoint_id, 1
    while name in names:
        n += 1
        name = f"{checkpoint_id}-{n}"
    return name


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
    created: datetime  # when the commit was written (``meta.cbor``'s ``created_at``, kept by rewrites)

    @property
    def order(self) -> tuple[datetime, int, str]:
        """Newest save last: of several copies of one checkpoint id, the greatest is the one read."""
        return (self.created, self.saved, self.commit)


class _Index:
    """A workflow run's checkpoints by id, built from ``meta.cbor`` metadata alone by walking the
    run's branches; kept while the branch tips stay as they were seen. ``by_id`` holds the newest
    copy of each id, ``older`` the other copies of an id stored more than once (a store written
    before saves replaced copies in other workflows, or a save cut off between two ref moves)."""

    def __init__(self, tips: dict[str, str]) -> None:
        self.tips = tips
        self.by_id: dict[str, _Entry] = {}
        self.by_commit: dict[str, _Entry] = {}
        self.older: dict[str, list[_Entry]] = {}

    def add(self, entry: _Entry) -> None:
        self.by_commit[entry.commit] = entry
        cid = entry.checkpoint_id
        known = self.by_id.get(cid)
        if known is None:
            self.by_id[cid] = entry
            return
        if entry.order > known.order:
            self.by_id[cid], entry = entry, known
        self.older.setdefault(cid, []).append(entry)

    def copies(self, checkpoint_id: str) -> list[_Entry]:
        newest = self.by_id.get(checkpoint_id)
        return [] if newest is None else [newest, *self.older.get(checkpoint_id, ())]

    def ordered(self) -> list[_Entry]:
        return sorted(self.by_id.values(), key=lambda e: (e.saved, e.commit))


class _View:
    """This worktree's agent-framework runs as seen at one moment: run id → index. A checkpoint id
    is stored once; where it is stored more than once (see :class:`_Index`) the newest copy is the
    checkpoint and the others are hidden. ``broken``: runs whose index could not be built."""

    def __init__(self, runs: dict[str, _Index], broken: dict[str, GitStateError]) -> None:
        self.runs = runs
        self.broken = broken

    def copies(self, checkpoint_id: str) -> list[tuple[str, _Entry]]:
        """Every copy of the id, oldest first."""
        found = [(run_id, e) for run_id, index in self.runs.items() for e in index.copies(checkpoint_id)]
        return sorted(found, key=lambda pair: pair[1].order)

    def newest(self, checkpoint_id: str) -> tuple[str, _Entry] | None:
        found = self.copies(checkpoint_id)
        return found[-1] if found else None

    def visible(self, run_id: str) -> list[_Entry]:
        """The run's checkpoints, in listing order, less those whose newest copy is in another run."""
        index = self.runs.get(run_id)
        if index is None:
            return []
        hidden: set[str] = set()
        for other_id, other in self.runs.items():
            if other_id == run_id:
                continue
            for cid in index.by_id.keys() & other.by_id.keys():
                if other.by_id[cid].order > index.by_id[cid].order:
                    hidden.add(cid)
        return [e for e in index.ordered() if e.checkpoint_id not in hidden]


class GitCheckpointStorage:
    """Workflow checkpoints in a git repository (``agent_framework.CheckpointStorage``).

    ``path`` finds the repository as :func:`gitstate.open_store` does (default: the current
    directory); ``store`` passes an open store instead. Every method is async (work runs in a
    worker thread) and returns what the framework's ``InMemoryCheckpointStorage`` returns for the
    same calls: copies of the checkpoints as saved, listed in the order they were first saved,
    ``None`` from :meth:`get_latest` when there is none, ``False`` from :meth:`delete` for an
    unknown id, :class:`UnknownCheckpointError` (a ``WorkflowCheckpointException``) from
    :meth:`load`. A checkpoint id names one checkpoint among all workflows: saving it again
    under another workflow moves it there. Several processes may save checkpoints at once.

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

    def _scan(self) -> dict[str, dict[str, str]]:
        """This worktree's runs written by this integration, each with its branch tips (one
        listing of the worktree's refs)."""
        runs: set[str] = set()
        heads: dict[str, dict[str, str]] = {}
        for name, oid in self.store.core.list_refs(worktree_prefix(self.store.worktree)):
            parsed = parse_ref(name)
            if parsed is None:
                continue
            if parsed.kind == "heads" and parsed.name is not None:
                heads.setdefault(parsed.run_id, {})[parsed.name] = oid
                continue
            if parsed.kind != "run":
                continue
            workflow = self._records.get(oid)
            if workflow is None:
                try:
                    workflow = str(self.store.read_run_record(oid).get("workflow"))
                except GitStateError:
                    continue
                self._records[oid] = workflow  # run records never change
            if workflow == WORKFLOW:
                runs.add(parsed.run_id)
        return {run_id: heads.get(run_id, {}) for run_id in sorted(runs)}

    def _view(self, need: str | None = None) -> _View:
        """Every run of this integration, indexed. A run whose index cannot be built (a damaged
        commit) is left out and named in ``broken``, except ``need``, whose error is raised."""
        runs: dict[str, _Index] = {}
        broken: dict[str, GitStateError] = {}
        scanned = self._scan()
        for run_id, tips in scanned.items():
            try:
                runs[run_id] = self._index(run_id, tips)
            except GitStateError as exc:
                if run_id == need:
                    raise
                broken[run_id] = exc
        with self._lock:
            for gone in set(self._indexes) - set(scanned):
                del self._indexes[gone]
        return _View(runs, broken)

    def _index(self, run_id: str, tips: dict[str, str]) -> _Index:
        """The run's index at these branch tips (from the last one when the branches only grew)."""
        with self._lock:
            index = self._indexes.get(run_id)
            if index is not None and index.tips == tips:
                return index
            fresh = None if index is None else self._grown(index, tips)
            if fresh is None:
                fresh = _Index(tips)
                for tip in tips.values():
                    oid: str | None = tip
                    while oid is not None and oid not in fresh.by_commit:
                        entry = index.by_commit.get(oid) if index is not None else None
                        if entry is None:
                            entry = self._entry(self.store.read_checkpoint(oid))
                        fresh.add(entry)
                        oid = entry.parent
            self._indexes[run_id] = fresh
            return fresh

    def _grown(self, index: _Index, tips: dict[str, str]) -> _Index | None:
        """``index`` extended to ``tips`` when every old tip is still reachable (the branches only
        grew: the usual save), else ``None`` (walk the run again)."""
        reached = set(tips.values())
        new: dict[str, _Entry] = {}
        for tip in tips.values():
            oid: str | None = tip
            while oid is not None and oid not in index.by_commit and oid not in new:
                entry = new[oid] = self._entry(self.store.read_checkpoint(oid))
                oid = entry.parent
            if oid is not None:
                reached.add(oid)
        if not set(index.tips.values()) <= reached:
            return None
        fresh = _Index(tips)
        fresh.by_id, fresh.by_commit = dict(index.by_id), dict(index.by_commit)
        fresh.older = {k: list(v) for k, v in index.older.items()}
        for entry in new.values():
            fresh.add(entry)
        return fresh

    @staticmethod
    def _entry(cp: Checkpoint) -> _Entry:
        md = cp.metadata
        cid, saved, stamp = md.get("checkpoint_id"), md.get("saved"), md.get("timestamp")
        if not isinstance(cid, str) or not isinstance(saved, int) or not isinstance(stamp, str):
            raise CheckpointDecodeError(cp.id, "not an agent-framework checkpoint (metadata lacks its id)")
        return _Entry(cid, cp.id, cp.parent_id, saved, stamp, cp.created_at)

    # -- encoding -----------------------------------------------------------------------------

    def _fields(self, checkpoint: WorkflowCheckpoint) -> dict[str, Any]:
        """The checkpoint's fields as typed values (the state less gitstate's own keys)."""
        fields: dict[str, Any] = {}
        for f in dataclasses.fields(checkpoint):
            if f.name in frameworks.AF_OWN_KEYS:
                raise CheckpointEncodingError(f.name, "field name collides with gitstate's own keys")
            try:
                fields[f.name] = typed.encode(getattr(checkpoint, f.name), self._allow, f.name)
            except EncodingError as exc:
                raise CheckpointEncodingError(exc.path, exc.reason + "; allow classes with "
                                              "allowed_checkpoint_types=[...]") from None
        return fields

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
        """One write: the new commit, and every other copy of its id (in this workflow's run or
        another's) dropped, as the framework's storages replace a checkpoint saved again under
        the same id. The branch that gets the new commit moves first, so a write cut off half way
        leaves an older copy beside the new one, never no copy; readers take the newest."""
        if not isinstance(checkpoint, WorkflowCheckpoint):
            raise CheckpointEncodingError("checkpoint", f"expected a WorkflowCheckpoint, got {type(checkpoint).__name__}")
        cid = checkpoint.checkpoint_id
        if not isinstance(cid, str) or not cid:
            raise CheckpointEncodingError("checkpoint_id", "must be a non-empty string")
        fields = self._fields(checkpoint)
        run = self._handle(checkpoint.workflow_name).ensure()
        fresh = SEQUENCE.next()
        store = self.store
        mine: set[str] = set()  # commits staged by this save (a rebuild finds one already published)
        result: list[Checkpoint] = []
        rewrote: list[bool] = []

        def build(tx: Transaction) -> None:
            result.clear()
            view = self._view(need=run.id)
            copies = view.copies(cid)
            if any(e.commit in mine for _, e in copies):
                # published by an earlier attempt, whose later ref moves lost a race: drop what is
                # left of the copies older than the newest (never a newer one another save wrote)
                rewrote.append(self._stage_drops(tx, view, copies[:-1]))
                return
            target = view.runs.get(run.id) or _Index({})
            saved = copies[-1][1].saved if copies else fresh  # a replaced checkpoint keeps its place
            drop = {e.commit for run_id, e in copies if run_id == run.id}
            tips, memo = self._stage_rewrite(tx, target.tips, drop)
            rewrote.append(bool(drop))
            previous = target.by_id.get(checkpoint.previous_checkpoint_id or "")
            parent = memo[previous.commit] if previous is not None and previous.commit not in drop else None
            branch = next((name for name, tip in tips.items() if parent is not None and tip == parent), None)
            tip = parent if branch is not None else None
            if branch is None:
                branch = "main" if not tips else _free_branch(cid, tips)
            metadata = {"checkpoint_id": cid, "previous_checkpoint_id": checkpoint.previous_checkpoint_id,
                        "timestamp": checkpoint.timestamp, "iteration_count": checkpoint.iteration_count,
                        "saved": saved}
            state = {"format": KIND, "v": frameworks.WRITTEN, "saved": saved, **fields}
            found: list[Any] = []  # the store's secrets policy (warn: recorded in meta.cbor)
            state = self.store.core.secrets.value(state, "state", found)
            cp = run.stage_checkpoint(
                tx, tip, cpfmt.state_entry(tx.writer, state), branch=branch, node="superstep",
                trigger=f"iteration {checkpoint.iteration_count}", metadata=metadata, secrets=found,
                status="interrupted" if checkpoint.pending_request_info_events else None,
                fork_from=parent if tip is None else None)
            moved = tx.updates.pop()  # the branch's move, staged again below from its current value
            assert moved.ref == run.ref(branch)
            mine.add(cp.id)
            result.append(cp)
            tips[branch] = cp.id
            self._stage_moves(tx, run.id, target.tips, tips, moved.message, first=branch)
            rewrote.append(self._stage_drops(tx, view, [(run_id, e) for run_id, e in copies if run_id != run.id]))

        with self._lock:
            store.core.write(build)
        if result:
            store.core.remember(result[0])
        if any(rewrote):
            store.core.forget_objects()
        return cid

    def _stage_rewrite(self, tx: Transaction, tips: dict[str, str],
                       drop: set[str]) -> tuple[dict[str, str], dict[str, str | None]]:
        """Stage the rewrite of branches (``tips``) without the commits in ``drop``: their children
        get the nearest kept ancestor as parent (steps renumbered; trees, messages and dates kept).
        Returns the new tips (a branch left with nothing is absent) and old → new commit ids for
        every commit of the branches (``None``: no commit is left below it). Moves no ref."""
        if not drop:
            return dict(tips), _Identity()
        store = self.store
        reader = store.core.reader
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
                meta["step"] = 0 if parent is None else store.core.position(parent)[0] + 1
                meta.pop("base", None)
                entries = [(e.name, e.id, e.filemode) for e in reader.tree(commit.tree_id) if e.name != cpfmt.META]
                entries.append((cpfmt.META, tx.blob(cpfmt.encode_meta(meta)), 0o100644))
                memo[old] = tx.commit(tx.tree(entries), [parent] if parent else [], cpfmt.message(meta),
                                      author=commit.author, committer=commit.committer)
                store.core.remember_position(memo[old] or "", meta["step"], 0)
            return memo[oid]

        new_tips: dict[str, str] = {}
        for name, tip in tips.items():
            new = new_id(tip)
            if new is not None:
                new_tips[name] = new
        return new_tips, memo

    def _stage_moves(self, tx: Transaction, run_id: str, old: dict[str, str], new: dict[str, str],
                     message: str = DROP_MESSAGE, first: str | None = None) -> None:
        """Stage the compare-and-swap of each branch of the run from ``old`` to ``new`` (absent:
        deleted); ``first`` (with ``message``) before the others (with :data:`DROP_MESSAGE`)."""
        names = sorted(set(old) | set(new), key=lambda name: (name != first, name))
        for name in names:
            before, after = old.get(name), new.get(name)
            if before == after:
                continue
            ref = branch_ref(self.store.worktree, run_id, name)
            text = message if name == first else DROP_MESSAGE
            if after is None:
                assert before is not None
                tx.delete_ref(ref, before, text)
            else:
                tx.set_ref(ref, before, after, text)

    def _stage_drops(self, tx: Transaction, view: _View, copies: list[tuple[str, _Entry]]) -> bool:
        """Stage the rewrite of the runs holding these copies without them, the run of the newest
        copy last (so a write cut off half way leaves it readable); whether there were any."""
        last: dict[str, tuple[datetime, int, str]] = {}
        for run_id, entry in copies:
            last[run_id] = max(last.get(run_id, entry.order), entry.order)
        for run_id in sorted(last, key=lambda r: last[r]):
            old = view.runs[run_id].tips
            tips, _ = self._stage_rewrite(tx, old, {e.commit for r, e in copies if r == run_id})
            self._stage_moves(tx, run_id, old, tips)
        return bool(copies)

    def _delete(self, checkpoint_id: str) -> bool:
        found: list[bool] = []

        def build(tx: Transaction) -> None:
            view = self._view()
            copies = view.copies(checkpoint_id)
            if copies:
                found.append(True)
            self._stage_drops(tx, view, copies)

        view = self._view()
        if not view.copies(checkpoint_id):
            if view.broken:  # it may be in a run that cannot be read
                raise next(iter(view.broken.values()))
            return False
        with self._lock:
            self.store.core.write(build)
        self.store.core.forget_objects()
        return bool(found)

    # -- the protocol -------------------------------------------------------------------------

    async def _thread(self, fn: Callable[[], T]) -> T:
        return await asyncio.to_thread(fn)

    async def save(self, checkpoint: WorkflowCheckpoint) -> str:
        """Store a copy of the checkpoint (one commit) and return its id. Saving an id again
        replaces that checkpoint, keeping its place in the listing, also when it was saved under
        another workflow (it is then listed under this one only)."""
        return await self._thread(lambda: self._save(checkpoint))

    async def load(self, checkpoint_id: str) -> WorkflowCheckpoint:
        """The checkpoint of that id (a fresh copy); :class:`UnknownCheckpointError` if none."""

        def load() -> WorkflowCheckpoint:
            if not isinstance(checkpoint_id, str):
                raise UnknownCheckpointError(str(checkpoint_id))
            view = self._view()
            found = view.newest(checkpoint_id)
            if found is None:
                if view.broken:  # it may be in a run that cannot be read
                    raise next(iter(view.broken.values()))
                raise UnknownCheckpointError(checkpoint_id)
            return self._decode(self.store.read_checkpoint(found[1].commit))

        return await self._thread(load)

    def _entries(self, workflow_name: str) -> list[_Entry]:
        """The workflow's checkpoints in listing order (those saved again under another workflow
        since are listed there)."""
        run = self._handle(workflow_name).get() if isinstance(workflow_name, str) and workflow_name else None
        return [] if run is None else self._view(need=run.id).visible(run.id)

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
        """Delete a checkpoint (``False`` if there is none of that id): a later :meth:`load`
        fails. Its commit leaves the branches (every copy's, in a store written by an earlier
        version): later checkpoints get the one before it as parent."""
        return await self._thread(lambda: self._delete(checkpoint_id))
