"""The checkpoint store of one repository, scoped to one worktree: creating, finding, listing and
deleting runs, and the plumbing every write shares (object writer, commit writer, compare-and-swap,
housekeeping). A store may be used from several threads: each thread gets its own
``pygit2.Repository`` (libgit2 objects must not be shared between threads)."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import secrets
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Self, TypeVar

import pygit2

from gitstate.errors import (
    ConflictError,
    CorruptObjectError,
    GitStateError,
    InvalidNameError,
    RunExistsError,
    RunNotFound,
)
from gitstate.format import checkpoint as cpfmt
from gitstate.format import encoding, frameworks
from gitstate.format import nodes as nodefmt
from gitstate.format.checkpoint import Checkpoint, parse_time
from gitstate.format.names import (
    NAMESPACE,
    check_name,
    decode_component,
    encode_component,
    parse_ref,
    run_info_ref,
    run_prefix,
    worktree_prefix,
)
from gitstate.format.nodes import NodeRecord
from gitstate.git import safeopen
from gitstate.git.location import Location, open_repository
from gitstate.git.refs import DEFAULT_STALE_LOCK_AGE, list_refs, read_ref, remove_broken, scan_refs
from gitstate.store.base import DEFAULT_LOCK_TIMEOUT, StoreCore
from gitstate.store.run import Run
from gitstate.store.transaction import Transaction

if TYPE_CHECKING:
    from gitstate.workspace.diff import Diff

T = TypeVar("T")


@dataclass(frozen=True)
class RunSummary:
    """One line of :meth:`Store.list_runs`.

    ``branch`` is the branch summarised (``main`` when it exists, else the most recently updated;
    for a LangGraph thread the line of its latest checkpoint, :func:`~gitstate.format.checkpoint.latest_line`);
    ``step`` is its tip's :attr:`~gitstate.format.checkpoint.Checkpoint.display_step` (LangGraph's
    own for a LangGraph thread);
    ``status`` is derived from what it recorded (:func:`derive_status`);
    ``corrupt`` when the run's objects cannot be read (``error`` says why)."""

    id: str
    workflow: str | None
    branch: str | None
    node: str | None
    step: int | None
    status: str
    updated_at: datetime
    checkpoints: int
    worktree: str
    created_at: datetime
    branches: int
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly form (the CLI's ``runs --json`` shape)."""
        return {
            "id": self.id, "workflow": self.workflow, "branch": self.branch, "node": self.node,
            "step": self.step, "status": self.status, "updated_at": self.updated_at.isoformat(),
            "checkpoints": self.checkpoints, "worktree": self.worktree,
            "created_at": self.created_at.isoformat(), "branches": self.branches, "error": self.error,
        }


SUMMARY_CACHE_VERSION = 6  # 2: status from recorded outcomes (node logs); 3: LangGraph's step and status rules;
# 4: a LangGraph thread whose tasks all wrote is running, not interrupted; 5: stopped (not interrupted) before
# a task that did not write, saved for integrations that never finish; 6: keyed by run id, each row led by
# a digest of the run's refs (names and ids)
SUMMARY_CACHE_MIN_RUNS = 64  # below this, listing reads every run afresh
_SUMMARY_FIELDS = ("workflow", "branch", "node", "step", "status", "updated_at", "checkpoints", "created_at",
                   "branches")


def _summary_row(s: RunSummary) -> list[Any]:
    return [s.workflow, s.branch, s.node, s.step, s.status, s.updated_at.timestamp(), s.checkpoints,
            s.created_at.timestamp(), s.branches]


def _summary_from_row(run_id: str, worktree: str, row: list[Any]) -> RunSummary | None:
    """The summary a cache row (its signature, then :data:`_SUMMARY_FIELDS`) holds, or ``None``."""
    if len(row) != len(_SUMMARY_FIELDS) + 1:
        return None
    _sig, workflow, branch, node, step, status, updated, checkpoints, created, branches = row
    try:
        updated_at = datetime.fromtimestamp(updated, UTC)
        created_at = datetime.fromtimestamp(created, UTC)
    except (TypeError, ValueError, OverflowError):
        return None
    return RunSummary(run_id, workflow, branch, node, step, status, updated_at, checkpoints, worktree,
                      created_at, branches)


def derive_status(cp: Checkpoint | None, last_node: NodeRecord | None = None,
                  writes: Iterable[str] | None = None) -> str:
    """The run status, from what the run recorded on its summarised branch: the tip's own status
    (:data:`gitstate.format.checkpoint.STATUSES`; integrations such as the LangGraph saver
    record theirs there; see :attr:`Checkpoint.tip_status` for a LangGraph thread), else
    ``failed`` when the tip closes a failed node, else ``saved`` for an integration that never
    says it finished (:data:`gitstate.format.frameworks.UNFINISHED`: a session, a memory store),
    else ``running`` (a run is running until it records a terminal status). ``writes``: the blob
    ids of the run's LangGraph writes refs, in name order (``None``: looked up when needed)."""
    if cp is None:
        return "running"
    status = cp.line_status(writes)  # LangGraph: a task to run at the latest checkpoint reads "stopped"
    if status in cpfmt.STATUSES:
        return status
    if cp.trigger == cpfmt.NODE_END and cp.node_status == "failed":  # the earlier node format
        return "failed"
    if last_node is not None and last_node.status == "failed" and last_node.exit == cp.id:
        return "failed"
    if cp.workflow in frameworks.UNFINISHED:
        return cpfmt.SAVED
    return "running"



def new_run_id() -> str:
    """A readable, time-sortable run id: ``20261121-231105-3f2a9c``."""
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(3)


class Store:
    """The checkpoint store of one repository and worktree: its runs, and checkpoints by id. Use
    :func:`open_store`. The plumbing it is built on (the one write path, the guarded reader, refs)
    is :attr:`core`, which gitstate's own layers and integrations use; it is not public API."""

    def __init__(self, repo: pygit2.Repository, *, lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
                 stale_lock_age: float = DEFAULT_STALE_LOCK_AGE, pack_in_background: bool = True,
                 fsync: bool | None = None) -> None:
        self.core = StoreCore(repo, lock_timeout=lock_timeout, stale_lock_age=stale_lock_age,
                              pack_in_background=pack_in_background, fsync=fsync)

    # -- the repository -----------------------------------------------------------------------

    @property
    def location(self) -> Location:
        """Where the repository's git dir, common dir and work tree are."""
        return self.core.location

    @property
    def repo(self) -> pygit2.Repository:
        """This thread's ``pygit2.Repository`` for the store."""
        return self.core.repo

    @property
    def path(self) -> str:
        """The work tree of the store's repository (the git dir for a bare repository)."""
        return self.core.path

    @property
    def worktree(self) -> str:
        """The worktree key used in this store's ref names (``main`` or ``wt-<id>``)."""
        return self.core.worktree

    # -- checkpoints by id --------------------------------------------------------------------

    def checkpoint(self, ref: str) -> Checkpoint:
        """Any checkpoint of the store by full id or unique prefix (:class:`CheckpointNotFound` when
        the id names nothing, or an object that is not a gitstate checkpoint)."""
        return self.core.checkpoint(ref)

    def read_checkpoint(self, oid: str) -> Checkpoint:
        """The checkpoint whose commit is ``oid`` (a full id)."""
        return self.core.read_checkpoint(oid)

    def expand(self, ref: str) -> str:
        """A full commit id from a full id or a unique prefix of 4+ hex digits
        (:class:`AmbiguousReferenceError` lists the candidates of a shared one)."""
        return self.core.expand(ref)

    def diff(self, a: str | Checkpoint, b: str | Checkpoint) -> Diff:
        """Changed state keys and workspace files from checkpoint ``a`` to ``b`` (ids or prefixes,
        possibly of different runs)."""
        return self.core.diff(a, b)

    # -- housekeeping and lifetime ------------------------------------------------------------

    def pack(self) -> int:
        """Pack gitstate's loose objects now; returns how many were packed."""
        return self.core.pack()

    def wait_for_housekeeping(self, timeout: float | None = None) -> None:
        """Wait until background packing and merging threads, if any, have finished."""
        self.core.wait_for_housekeeping(timeout)

    def close(self) -> None:
        """Release the repository handles (the store must not be used afterwards)."""
        self.core.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return repr(self.core)

    # -- runs ---------------------------------------------------------------------------------

    def create_run(self, workflow: str | None = None, run_id: str | None = None,
                   metadata: dict[str, Any] | None = None) -> Run:
        """Create a run (``run_id`` generated, time-sortable, when ``None``); raises
        :class:`RunExistsError` if a run of that id exists in this worktree."""
        run = self.new_run(workflow, run_id, metadata)
        try:
            self.core.write(run.stage_record)
        except ConflictError:
            raise RunExistsError(run.id) from None
        run.saved = True
        return run

    def new_run(self, workflow: str | None = None, run_id: str | None = None,
                metadata: dict[str, Any] | None = None) -> Run:
        """A run not written yet: its record is written by its first checkpoint, in the same
        transaction (so a first checkpoint that fails leaves no empty run behind), which raises
        :class:`RunExistsError` if a run of that id was created meanwhile. ``run_id`` as in
        :meth:`create_run`."""
        run_id = new_run_id() if run_id is None else run_id
        check_name("run id", run_id)
        created = datetime.fromtimestamp(time.time(), UTC)
        return Run(self.core, run_id, self.worktree, workflow, created, metadata or {}, saved=False)

    def read_run_record(self, oid: str) -> dict[str, Any]:
        """The decoded run record (``run.cbor``) of a run-record commit."""
        reader = self.core.reader
        return cpfmt.read_payload(reader, reader.commit(oid), cpfmt.RUN_RECORD, cpfmt.RUN_KIND, "run record")

    def get_run(self, run_id: str, worktree: str | None = None) -> Run:
        """The run of that id in this worktree (or ``worktree``); :class:`RunNotFound` if absent."""
        worktree = worktree or self.worktree
        check_name("run id", run_id)
        oid = read_ref(self.repo, run_info_ref(worktree, run_id))
        if oid is None:
            raise RunNotFound(run_id, worktree)
        record = self.read_run_record(oid)
        metadata = record.get("metadata") if isinstance(record.get("metadata"), dict) else {}
        return Run(self.core, run_id, worktree, record.get("workflow"), parse_time(record.get("created_at")), metadata)

    def has_run(self, run_id: str) -> bool:
        """Whether this worktree has a run of that id (``False`` for a name no run can have; a run
        whose record is damaged still exists: reading it reports the damage)."""
        if not run_id:
            return False
        try:
            self.get_run(run_id)
        except (RunNotFound, InvalidNameError):
            return False
        except CorruptObjectError:
            return True
        return True

    def open_run(self, run_id: str, workflow: str | None = None) -> Run:
        """The run of that id, created (with ``workflow``) if it does not exist yet."""
        try:
            return self.get_run(run_id)
        except RunNotFound:
            try:
                return self.create_run(workflow=workflow, run_id=run_id)
            except RunExistsError:
                return self.get_run(run_id)

    def has_run_refs(self, run_id: str) -> bool:
        """Whether any ref of this worktree lies under the run's prefix, a run record or not (refs
        of a run without a record, e.g. pulled by an earlier version, are deleted by
        :meth:`delete_run` like any run's)."""
        try:
            prefix = run_prefix(self.worktree, run_id)
        except InvalidNameError:
            return False
        return bool(list_refs(self.repo, prefix) or self.core.broken_refs(prefix))

    def delete_run(self, run_id: str) -> list[str]:
        """Delete every ref of a run in one transaction (each by compare-and-swap: all of them or,
        when one moved meanwhile, none) and return the names of the branches it had. Its objects become unreachable and are left to ``git gc``; none is read, so a run
        whose objects are missing or damaged is deleted too."""
        check_name("run id", run_id)
        prefix = run_prefix(self.worktree, run_id)
        found = list_refs(self.repo, prefix)
        broken = self.core.broken_refs(prefix)  # symbolic or unparsable: removed too, or a new run inherits them
        if not found and not broken:
            raise RunNotFound(run_id, self.worktree)
        message = f"gitstate: delete run {run_id}"
        for ref in broken:
            remove_broken(self.repo, self.location.common_dir, ref, message)

        def build(tx: Transaction) -> None:
            for name, oid in found:  # all at once or none (see Transaction)
                tx.delete_ref(name, oid, message, strict=True)

        if found:
            self.core.write(build)
        self.core.forget_objects()
        heads = prefix + "heads/"
        return sorted(decode_component(name[len(heads):]) for name, _oid in found if name.startswith(heads))

    def list_runs(self, all_worktrees: bool = False) -> list[RunSummary]:
        """Summaries of the runs of this worktree (or of all), most recently updated first. A run
        whose objects cannot be read, or one of whose refs holds no object id (symbolic, or
        unparsable), is listed with status ``corrupt`` and an ``error``.

        Summaries are derived from immutable objects, so they are cached in
        ``agentos/summaries-<worktree>.cbor`` keyed by the ids the run's refs point at: in a
        worktree with many runs (64 or more) a run is read again (and checked: its record, its tips'
        metadata and state objects) only when one of its refs moved; ``verify`` checks everything.
        Deleting the cache files loses nothing. A listing is one pass over the refs (loose files
        and ``packed-refs``) plus, per run, what its table row needs."""
        prefix = NAMESPACE if all_worktrees else worktree_prefix(self.worktree)
        listed, broken_refs = scan_refs(self.location.common_dir, prefix)  # one pass over the refs
        # the refs of each run, as (worktree, encoded run id) -> [(ref name, id)]: sorted by name,
        # a run's refs come together; which of them gitstate reads is settled per run (_entry)
        grouped: dict[tuple[str, str], list[tuple[str, str]]] = {}
        skip = len(NAMESPACE)
        last: tuple[str, str] | None = None
        refs: list[tuple[str, str]] = []
        for name, oid in listed:
            parts = name[skip:].split("/", 3)
            if len(parts) < 4 or parts[1] != "runs":
                continue
            key = (parts[0], parts[2])
            if key != last:
                refs = grouped.setdefault(key, [])
                last = key
            refs.append((name, oid))
        broken: dict[tuple[str, str], str] = {}
        for ref in broken_refs:  # skipped by the listing above, so named here
            parsed = parse_ref(ref.name)
            if parsed is not None:
                key = (parsed.worktree, encode_component(parsed.run_id))
                grouped.setdefault(key, [])
                broken.setdefault(key, f"corrupt object {ref.name}: {ref.problem} "
                                       "(`git agentos verify --repair` removes it)")
        by_worktree: dict[str, list[tuple[str, str, list[tuple[str, str]]]]] = {}
        for (wt, encoded), run_refs in grouped.items():
            try:
                run_id = decode_component(encoded)
            except ValueError:
                continue  # not a name gitstate writes: none of its refs parses
            by_worktree.setdefault(wt, []).append((run_id, encoded, run_refs))
        out: list[RunSummary] = []
        for wt, runs in by_worktree.items():
            for summary in self._summaries(wt, runs, {k[1] for k in broken if k[0] == wt}):
                error = broken.get((wt, encode_component(summary.id))) if broken else None
                out.append(dataclasses.replace(summary, status="corrupt", error=error) if error else summary)
        out.sort(key=lambda s: (s.updated_at, s.id), reverse=True)
        return out

    @staticmethod
    def _entry(refs: list[tuple[str, str]]) -> dict[str, Any] | None:
        """A run's refs as read for its summary (``None`` when none of them is a gitstate ref)."""
        entry: dict[str, Any] = {"record": None, "heads": {}, "nodes": {}, "writes": {}}
        any_parsed = False
        for name, oid in refs:
            parsed = parse_ref(name)
            if parsed is None:
                continue
            any_parsed = True
            if parsed.kind == "run":
                entry["record"] = oid
            elif parsed.kind in ("heads", "nodes", "writes") and parsed.name is not None:
                entry[parsed.kind][parsed.name] = oid
        return entry if any_parsed else None

    def _summaries(self, worktree: str, runs: list[tuple[str, str, list[tuple[str, str]]]],
                   broken: set[str]) -> list[RunSummary]:
        """Summaries of ``runs`` ((run id, encoded run id, its refs)); one with a broken ref
        (``broken``: encoded ids) is listed even when no other ref of it is a gitstate ref."""
        out: list[RunSummary] = []
        if len(runs) < SUMMARY_CACHE_MIN_RUNS:
            # few runs: read and check every one afresh (damage done since the last listing shows)
            for run_id, encoded, refs in runs:
                entry = self._entry(refs)
                if entry is None and encoded in broken:
                    entry = {"record": None, "heads": {}, "nodes": {}, "writes": {}}
                if entry is not None:
                    out.append(self._summary(worktree, run_id, entry))
            return out
        path = os.path.join(self.location.common_dir, "agentos", f"summaries-{worktree}.cbor")
        cache: dict[str, Any] = {}
        try:
            with safeopen.open_file(path, "rb") as fh:  # a FIFO there: OSError, never a wait
                loaded = encoding.loads(fh.read(), path)
            if isinstance(loaded, dict) and loaded.get("v") == SUMMARY_CACHE_VERSION:
                cache = loaded.get("runs") or {}
                if not isinstance(cache, dict):
                    cache = {}
        except (OSError, GitStateError):
            cache = {}  # missing or damaged: rebuilt below
        fresh: dict[str, Any] = {}
        changed = False
        for run_id, encoded, refs in runs:
            # the ids its refs point at, by name: a run is read again only when one of them moved
            signature = hashlib.blake2b("\n".join(f"{n} {o}" for n, o in refs).encode("utf-8", "surrogateescape"),
                                        digest_size=16).digest()
            row = cache.get(run_id)
            summary = None
            if isinstance(row, list) and row and row[0] == signature:
                summary = _summary_from_row(run_id, worktree, row)
            if summary is None:
                entry = self._entry(refs)
                if entry is None and encoded in broken:
                    entry = {"record": None, "heads": {}, "nodes": {}, "writes": {}}
                if entry is None:
                    continue
                summary = self._summary(worktree, run_id, entry)
                changed = True
                if summary.error is None:
                    row = [signature, *_summary_row(summary)]
                else:
                    row = None
            if row is not None:
                fresh[run_id] = row
            out.append(summary)
        if changed or fresh.keys() != cache.keys():
            try:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
                with safeopen.open_file(tmp, "wb", replace_special=True) as fh:
                    fh.write(encoding.dumps({"v": SUMMARY_CACHE_VERSION, "runs": fresh}))
                os.replace(tmp, path)
            except (OSError, GitStateError):
                pass  # a cache that cannot be written only costs speed
        return out

    def _summary(self, worktree: str, run_id: str, refs: dict[str, Any]) -> RunSummary:
        record_oid: str | None = refs["record"]
        heads: dict[str, str] = refs["heads"]
        epoch = datetime.fromtimestamp(0, UTC)
        workflow: str | None = None
        created = epoch
        try:
            if record_oid is None:
                raise CorruptObjectError(run_info_ref(worktree, run_id), "run has branches but no run record")
            record = self.read_run_record(record_oid)
            workflow = record.get("workflow")
            created = parse_time(record.get("created_at"))
            tips = {name: self.read_checkpoint(oid) for name, oid in heads.items()}
            for tip in tips.values():
                self._check_payload_objects(tip)
        except GitStateError as exc:
            return RunSummary(run_id, workflow, None, None, None, "corrupt", created, 0, worktree, created,
                              len(heads), error=str(exc))
        if not tips:
            return RunSummary(run_id, workflow, None, None, None, derive_status(None), created, 0, worktree,
                              created, 0)
        branch = cpfmt.summary_line(tips)
        tip = tips[branch]
        updated = max(cp.created_at for cp in tips.values())
        try:
            last_node = self._last_node(refs["nodes"].get(branch))
        except GitStateError as exc:
            return RunSummary(run_id, workflow, branch, tip.node, tip.step, "corrupt", updated, 0, worktree,
                              created, len(heads), error=f"node log: {exc}")
        try:
            status = derive_status(tip, last_node, [o for _n, o in sorted(refs["writes"].items())])
        except GitStateError as exc:
            return RunSummary(run_id, workflow, branch, tip.node, tip.step, "corrupt", updated, 0, worktree,
                              created, len(heads), error=f"pending writes: {exc}")
        return RunSummary(run_id, workflow or tip.workflow, branch, tip.node, tip.display_step, status,
                          updated, tip.step - tip.base + 1, worktree, created, len(tips))

    def _last_node(self, log_tip: str | None) -> NodeRecord | None:
        """The newest record of a node log (one commit read)."""
        if log_tip is None:
            return None
        reader = self.core.reader
        found = reader.tree(reader.commit(log_tip).tree_id).get(nodefmt.RECORD)
        if found is None:
            raise CorruptObjectError(log_tip, f"node log entry has no {nodefmt.RECORD}")
        return nodefmt.decode(reader.blob(found.id), found.id)

    def _check_payload_objects(self, cp: Checkpoint) -> None:
        """Read (without decoding) every object of a checkpoint's tree but its workspace snapshot,
        so a missing or damaged state blob is found; libgit2 verifies each object's hash."""
        reader = self.core.reader
        todo = [e for e in reader.tree(cp.tree_id) if e.name != cpfmt.FILES]
        while todo:
            entry = todo.pop()
            if entry.type_str == "tree":
                todo.extend(reader.tree(entry.id))
            elif entry.type_str == "blob":
                reader.header(entry.id)

    def latest_run(self) -> Run | None:
        """The most recently updated readable run of this worktree, or ``None``."""
        for summary in self.list_runs():
            if summary.error is None:
                return self.get_run(summary.id)
        return None

    def runs(self) -> Iterator[Run]:
        """Every run of this worktree (unordered)."""
        for summary in self.list_runs():
            if summary.error is None:
                yield self.get_run(summary.id)



def open_store(path: str | os.PathLike[str] | pygit2.Repository | None = None, **options: Any) -> Store:
    """Open the checkpoint store of the repository at (or above) ``path``.

    ``AGENTOS_REPO`` overrides the lookup, ``GIT_DIR`` is honoured as git honours it; outside a
    repository :class:`NotARepositoryError` is raised. An open ``pygit2.Repository`` may be passed
    instead of a path. ``options``: ``lock_timeout``, ``stale_lock_age`` (seconds),
    ``pack_in_background`` (default ``True``: housekeeping packs in a worker thread), ``fsync``
    (fsync every object written; default: git's ``core.fsyncObjectFiles``)."""
    repo = path if isinstance(path, pygit2.Repository) else open_repository(path)
    return Store(repo, **options)
