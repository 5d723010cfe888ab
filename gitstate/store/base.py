"""The plumbing every part of a store shares: per-thread repository handles, the guarded reader,
the one write path (:meth:`StoreCore.write`: a :class:`Transaction` under one retry and deadline
policy), ref reads, checkpoints by id (decoded views kept, immutable), identity and housekeeping.
Runs, branches and session files are built on it; :class:`gitstate.Store` adds the runs."""

from __future__ import annotations

import copy
import dataclasses
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING, Self, TypeVar

import pygit2
from pygit2.enums import ObjectType

from gitstate.errors import (
    AmbiguousReferenceError,
    CheckpointNotFound,
    ConflictError,
    GitStateError,
    LockTimeoutError,
    StoreWriteError,
)
from gitstate.format import checkpoint as cpfmt
from gitstate.format.checkpoint import Checkpoint
from gitstate.format.names import worktree_key
from gitstate.git import durability, handles, lockfile, packs, refs, safeopen
from gitstate.git.command import check_git_version
from gitstate.git.durability import Durability
from gitstate.git.location import Location, check_present, locate
from gitstate.git.objects import LooseObject, ObjectWriter, objects_dir, pack_loose_copies
from gitstate.git.reader import AMBIGUOUS_LISTED, ObjectReader, expand_id
from gitstate.git.refs import (
    DEFAULT_STALE_LOCK_AGE,
    BrokenRef,
    ReflogEntry,
    broken_refs,
    list_refs,
    read_ref,
    reflog,
)
from gitstate.store import housekeeping
from gitstate.store.transaction import Backoff, RefUpdate, Transaction, apply_updates, failed_update
from gitstate.workspace.snapshot import Workspace

if TYPE_CHECKING:
    from gitstate.secrets.policy import Policy
    from gitstate.workspace.diff import Diff

T = TypeVar("T")
STALE_LOCK_SWEEP_AGE = 60.0  # seconds: ref locks this old are removed when a store opens
SWEEP_NOTED_AFTER = 0.15  # seconds: a sweep this long is noted, and the next minute's opens skip it
DEFAULT_LOCK_TIMEOUT = 10.0  # seconds a write retries held locks and moving refs before giving up
MERGE_WAIT = 2.0  # seconds a pack merge waits for another process's housekeeping before giving up
MERGE_RETRY = 10.0  # seconds without merges after one gave up waiting for the housekeeping lock
SELF_PACK_AT = 64  # objects small writes left loose before the store packs them itself
LOOSE_BUFFER_BYTES = 8 << 20  # bodies of those objects kept in memory to be packed
SELF_PACK_MERGE_AT = 2  # packs written since the last merge when one of those starts a merge
_FALLBACK_NAME = "gitstate"
_FALLBACK_EMAIL = "gitstate@localhost"



class StoreCore:
    """The plumbing of a store: repository handles, the guarded reader, the one write path
    (:meth:`write`), refs, checkpoints by id, housekeeping. :class:`Store` adds runs."""

    def __init__(self, repo: pygit2.Repository, *, lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
                 stale_lock_age: float = DEFAULT_STALE_LOCK_AGE, pack_in_background: bool = True,
                 fsync: bool | None = None) -> None:
        self.location: Location = locate(repo)
        # The git version is remembered beside the store's private files once that folder exists
        # (not created just for it), so each git executable is asked once, not every open.
        check_git_version(os.path.join(self.location.common_dir, "agentos", "git-version"))
        # Durable objects when asked, or when the repository asks git for them.
        # What is flushed to disk: the repository's core.fsync as git reads it, unless told.
        self.durability = (durability.from_config(repo) if fsync is None
                           else Durability.everything(fsync, durability.loose_limit(repo)))
        self.fsync = self.durability.loose_objects
        self.fsync_refs = self.durability.refs
        self._merger: threading.Thread | None = None
        self._merge_retry_at = 0.0  # (monotonic) no merge before then: another process held the lock too long
        self._gc_seen = False  # whether a `git gc` ran when this store last wrote
        self._gc_pid = os.path.join(self.location.common_dir, "gc.pid")
        self._gc_gate = lockfile.Gate(os.path.join(self.location.common_dir, "agentos", "gc.lock"))
        self._merged_stamp = os.path.join(self.location.common_dir, "agentos", "merged")
        self._main_seen = _stamp(self._merged_stamp)
        # A killed writer's ref lock blocks git's own gc on a ref nobody writes again: a store that
        # opens recovers those older than a minute (a live writer holds one for milliseconds), unless
        # another did within the last minute and that walk of every folder of loose refs took long
        # (only then is the time noted: opening a small store for reading writes nothing).
        try:
            stamp = os.path.join(self.location.common_dir, "agentos", "locks-swept")
            if _sweep_due(stamp):
                started = time.monotonic()
                refs.remove_stale_locks(self.location.common_dir, STALE_LOCK_SWEEP_AGE)
                if time.monotonic() - started >= SWEEP_NOTED_AFTER:
                    _note_sweep(stamp)
            housekeeping.remove_dead_keeps(self.location.common_dir)
            packs.reindex_orphans(os.path.join(self.location.common_dir, "objects", "pack"))
        except OSError:
            pass  # a read-only repository: verify reports them
        self.lock_timeout = lock_timeout
        self.stale_lock_age = stale_lock_age
        self._owner_thread = threading.get_ident()
        self._main_repo = repo
        self._local = threading.local()
        self._step_cache: OrderedDict[str, tuple[int, int]] = OrderedDict()
        self._cp_cache: dict[str, Checkpoint] = {}
        self._identity = self._read_identity(repo)
        self._workspace: Workspace | None = None
        self._secrets: Policy | None = None
        # Packing of loose objects (housekeeping) runs in a worker thread instead of inside the
        # write that crossed the threshold, so no single write pays for it (False: inline).
        self.pack_in_background = pack_in_background
        self._packer: threading.Thread | None = None
        # what small writes of every thread left loose, waiting to be packed (_collect_loose)
        self._loose_lock = threading.Lock()
        self._loose_waiting: list[LooseObject] = []
        self._loose_bytes = 0
        self._loose_packer: threading.Thread | None = None

    # -- plumbing shared by runs --------------------------------------------------------------

    @property
    def repo(self) -> pygit2.Repository:
        """This thread's ``pygit2.Repository`` for the store."""
        if threading.get_ident() == self._owner_thread:
            return self._main_repo
        return handles.repository(self.location.git_dir)

    def _refresh_after_merges(self) -> None:
        """Give this thread's handle a new object database when packs were merged since it last
        looked (one stat): libgit2 keeps merged-away packs open and searches them forever."""
        stamp = _stamp(self._merged_stamp)
        owner = threading.get_ident() == self._owner_thread
        seen = self._main_seen if owner else getattr(self._local, "merged_seen", None)
        if stamp == seen:
            return
        if seen is not None or not owner:
            repo = self.repo
            repo.set_odb(pygit2.Odb(objects_dir(repo)))
            writer = getattr(self._local, "writer", None)
            if writer is not None and writer.repo is repo:
                writer.odb = repo.odb
        if owner:
            self._main_seen = stamp
        else:
            self._local.merged_seen = stamp

    @property
    def reader(self) -> ObjectReader:
        """This thread's guarded object reader (the only way gitstate reads objects)."""
        return ObjectReader(self.repo)

    @property
    def identity(self) -> tuple[str, str]:
        """Name and email written as author/committer of checkpoints and in reflogs."""
        return self._identity

    @property
    def worktree(self) -> str:
        """The worktree key used in this store's ref names (``main`` or ``wt-<id>``)."""
        return worktree_key(self.location.linked_id)

    @property
    def path(self) -> str:
        """The work tree of the store's repository (the git dir for a bare repository)."""
        return self.location.workdir or self.location.git_dir

    @property
    def workspace(self) -> Workspace:
        """Snapshots of this store's worktree through its private index (see :mod:`gitstate.workspace`)."""
        if self._workspace is None:
            self._workspace = Workspace(self.location, on_new_objects=self._journal_when_published,
                                        store_objects=self.store_objects)
        return self._workspace

    @property
    def secrets(self) -> Policy:
        """What a write does with a credential (git config ``agentos.secrets``, default
        ``redact``; see :mod:`gitstate.secrets.policy`), read once per store."""
        from gitstate.secrets import policy  # (imported where used: most commands only read)

        if self._secrets is None:
            repo, workdir = self._main_repo, self.location.workdir
            self._secrets = policy.Policy(policy.read_mode(repo), lambda: policy.read_rules(repo, workdir))
        return self._secrets

    @contextmanager
    def keeping_objects(self) -> Iterator[None]:
        """Inside the block, packs this thread writes without moving a ref (:meth:`store_objects`)
        stay kept (their ``.keep``) until the block ends, so a concurrent ``git repack -a -d``
        cannot drop objects that a later write of the block will name (a workspace snapshot, then
        the checkpoint holding it). If the block raises, the writer forgets those objects."""
        writer = self.object_writer()
        writer.hold_keeps()
        reached = False
        try:
            yield
            reached = True
        finally:
            writer.release_keeps(reached)

    def store_objects(self, objects: list[tuple[int, bytes]]) -> None:
        """Store ``(type, body)`` objects as one pack through :meth:`write` (no ref moves: like any
        object no ref names yet, they are ``git gc``'s to prune until one does, unless written
        inside :meth:`keeping_objects`)."""

        def build(tx: Transaction) -> None:
            for kind, body in objects:
                tx.writer.write(ObjectType(kind), body)

        self.write(build)

    def object_writer(self) -> ObjectWriter:
        """This thread's object writer (objects it writes are journaled for housekeeping once a
        transaction publishes them). Use :meth:`write` to write; this is for the transaction."""
        writer = getattr(self._local, "writer", None)
        if writer is None or writer.repo is not self.repo:
            pending: list[str] = []
            writer = ObjectWriter(self.repo, on_write=pending.append, fsync=self.fsync)
            self._local.writer = writer
            self._local.pending = pending
        return writer

    def write(self, build: Callable[[Transaction], T], *, loose: bool = False) -> T:
        """Run one write: ``build`` stages objects and ref moves on a :class:`Transaction`, then the
        refs move by compare-and-swap. The one retry policy: ``build`` runs again while refs move
        underneath it (non-strict updates); held locks are waited for (objects already written);
        both with jittered backoff, until ``lock_timeout``; then :class:`LockTimeoutError` (a lock stayed held) or
        :class:`ConflictError` (the ref kept moving). Transient races with a concurrent
        ``git pack-refs``/``gc`` are retried the same way (see :mod:`gitstate.store.transaction`).

        The staged objects become one pack (flushed as ``core.fsync`` flushes packs), or, with
        ``agentos.looseObjects`` set, when they are few and ``core.fsync`` leaves loose objects
        unflushed (git's default), loose files journaled for housekeeping
        (:meth:`Durability.loose <gitstate.git.durability.Durability.loose>`).
        ``loose``: loose files and not journaled, for a write of one or two small objects that a
        later write folds into a pack anyway (the LangGraph saver's pending writes)."""
        backoff = Backoff(self.lock_timeout)
        common = self.location.common_dir
        check_present(self.location.git_dir)  # a deleted repository is an error, not recreated
        # gc waits for this transaction before it bumps the epoch that makes writers stop reusing
        # objects it may drop (see gitstate.store.reclaim)
        if not self._gc_gate.enter_shared(self.lock_timeout):
            raise LockTimeoutError(os.path.relpath(self._gc_gate.path, common), self.lock_timeout)
        try:
            return self._write(build, backoff, loose)
        finally:
            self._gc_gate.leave_shared()

    def _write(self, build: Callable[[Transaction], T], backoff: Backoff, loose: bool) -> T:
        common = self.location.common_dir
        self._after_git_gc()
        self._refresh_after_merges()
        writer = self.object_writer()
        try:
            while True:
                tx = Transaction(writer, self._identity)
                writer.begin()
                try:
                    result = build(tx)
                    # (a loose write's few objects cost less than the look: the CAS alone tells)
                    stale = None if loose else _moved_already(common, tx)
                    if stale is not None and (stale.strict or backoff.expired()):
                        raise ConflictError(stale.ref, stale.old, _hint(refs.peek(common, stale.ref)))
                except BaseException:
                    writer.discard()
                    raise
                if stale is not None:
                    # a ref moved while build ran: rebuild now rather than write a pack that the
                    # compare-and-swap would leave unreachable (garbage a `git gc` makes loose)
                    writer.discard()
                    backoff.pause()
                    continue
                if loose:
                    writer.flush_loose()
                elif self.durability.loose_max and self.durability.loose(writer.staged_count(), writer.staged_size()):
                    writer.flush_loose(journal=True)  # as git writes a commit (see durability)
                else:
                    self._published(writer.flush(fsync=self.durability.packs, sync_dir=self.durability.refs))
                if self._move_refs(tx, backoff):
                    writer.published()
                    self.written()
                    self._collect_loose(writer)
                    tx.finished()
                    return result
                backoff.pause()
        except BaseException:
            # Objects of the failed attempts were flushed into packs kept (.keep) from a concurrent
            # `git repack -a -d` until now; a retry may have relied on them. Nothing names them.
            # (Loose objects waiting to be journaled wait for this thread's next published write.)
            writer.abandoned()
            raise

    def _after_git_gc(self) -> None:
        """When a ``git gc`` has ended since the last write (its ``gc.pid`` is gone; one stat), give
        back their index to packs whose ``.idx`` it removed: its last directory scan can miss a
        ``.pack`` renamed into place while it runs and then takes the new ``.idx`` for garbage."""
        running = os.path.exists(self._gc_pid)
        if self._gc_seen and not running:
            try:
                packs.reindex_orphans(os.path.join(self.location.common_dir, "objects", "pack"))
            except OSError:
                pass
        self._gc_seen = running

    def _move_refs(self, tx: Transaction, backoff: Backoff) -> bool:
        """Move the transaction's refs (those not moved yet); True when all moved, False when one
        had moved underneath (a non-strict update: ``build`` runs again). A held lock or a transient
        race is waited out here, the objects already written: only a moved ref needs a rebuild."""
        common = self.location.common_dir
        while True:
            try:
                apply_updates(common, tx, fsync=self.fsync_refs)
                return True
            except ConflictError as exc:
                update = failed_update(tx, exc.ref)
                if update is None or update.strict or backoff.expired():
                    raise
                return False
            except refs.LockBusy as exc:
                if refs.break_stale_locks(common, exc.ref, self.stale_lock_age):
                    continue
                if backoff.expired():
                    raise LockTimeoutError(exc.ref, self.lock_timeout) from None
            except refs.TransientRefError as exc:
                if backoff.expired():
                    raise StoreWriteError(common, str(exc)) from exc
            backoff.pause()

    def _collect_loose(self, writer: ObjectWriter) -> None:
        """Gather what small writes left loose, from every thread of this store; once
        :data:`SELF_PACK_AT` objects wait, pack them from memory (:func:`gitstate.git.objects.pack_loose_copies`,
        in a background thread unless ``pack_in_background`` is off) as a transaction's pack, so the
        journal's ``git pack-objects`` finds nothing left to do. Bodies beyond
        :data:`LOOSE_BUFFER_BYTES` are not kept: those objects wait loose, journaled, for it."""
        items = writer.take_left_loose()
        if not items:
            return
        with self._loose_lock:
            for item in items:
                if self._loose_bytes + len(item[2]) <= LOOSE_BUFFER_BYTES:
                    self._loose_waiting.append(item)
                    self._loose_bytes += len(item[2])
            if len(self._loose_waiting) < SELF_PACK_AT and self._loose_bytes < LOOSE_BUFFER_BYTES:
                return
            packer = self._loose_packer
            if self.pack_in_background and packer is not None and packer.is_alive():
                return  # the running one is still at it: these go with the next batch
            batch, self._loose_waiting, self._loose_bytes = self._loose_waiting, [], 0
            if self.pack_in_background:
                self._loose_packer = threading.Thread(target=self._pack_left_loose, args=(batch,),
                                                      name="gitstate-pack-loose")
                self._loose_packer.start()
                return
        self._pack_left_loose(batch)

    def _pack_left_loose(self, batch: list[LooseObject], merge: bool = True) -> None:
        """Pack ``batch`` (objects small writes left loose) and list the pack as a transaction's;
        ``merge``: start a merge once two such packs wait (each holds some writes' objects whole). A
        failure leaves them loose, journaled, for housekeeping."""
        try:
            pack = pack_loose_copies(objects_dir(self.repo), batch, fsync=self.durability.packs,
                                     sync_dir=self.durability.refs)
            if merge:
                self._published(pack, merge_at=SELF_PACK_MERGE_AT)
            else:
                housekeeping.record_tx_pack(self.location.common_dir, pack)
        except (OSError, GitStateError):
            pass

    def _published(self, pack: str | None, merge_at: int = housekeeping.TX_MERGE_AT) -> None:
        """A transaction's pack is in place: list it, and merge packs when ``merge_at`` or more
        were written since the last merge."""
        if pack is None:
            return
        try:
            count = housekeeping.record_tx_pack(self.location.common_dir, pack)
        except OSError:
            return  # an unlisted pack is only merged later by a user's git gc
        if count >= merge_at and time.monotonic() >= self._merge_retry_at:
            # The merge waits for the housekeeping lock while another process merges (up to
            # MERGE_WAIT seconds; when it was held all that time, merges pause for MERGE_RETRY
            # seconds, so that a lock held long by a long merge in another process does not slow
            # every write down), and a writer that has written TX_MERGE_AT more packs
            # while its merge runs or waits waits for it before the next one: so a writer faster
            # than the merges, or several processes writing at once, cannot pile up packs (this
            # bounds the pack count at the geometric series plus about 2 * TX_MERGE_AT: the packs
            # being merged and those written meanwhile, and the packs of transactions under way).
            wait = min(self.lock_timeout, MERGE_WAIT)
            if self.pack_in_background:
                merger = self._merger
                if merger is not None and merger.is_alive():
                    merger.join()
                self._merger = threading.Thread(target=self._merge_quietly, args=(wait,), name="gitstate-merge")
                self._merger.start()
            else:
                self._merge_quietly(wait)

    def _merge_quietly(self, wait: float = 0.0) -> None:
        try:
            if housekeeping.merge_tx_packs(self.location.common_dir, wait=wait) is not None:
                os.makedirs(os.path.dirname(self._merged_stamp), exist_ok=True)
                with safeopen.open_file(self._merged_stamp, "a", encoding="ascii", replace_special=True):
                    pass
                os.utime(self._merged_stamp)
        except housekeeping.HousekeepingBusy:
            self._merge_retry_at = time.monotonic() + MERGE_RETRY
        except (GitStateError, OSError):
            pass  # housekeeping is retried by a later write; a failed merge leaves every pack in place

    def written(self) -> None:
        """After a transaction's refs moved: journal the new loose objects for housekeeping."""
        pending: list[str] = getattr(self._local, "pending", [])
        if pending:
            self._journal(pending)
            pending.clear()

    def _journal_when_published(self, oids: list[str]) -> None:
        """A snapshot's new loose objects are journaled (and so packed) only once a write of this
        thread has moved its refs (normally the one that names them): packed while unreachable,
        they would be dropped by a concurrent ``git repack -a -d``, whereas loose they are kept
        (for ``gc.pruneExpire``). Those of a write that failed follow with the next one: packed
        as garbage then, which a repack may drop (the private index is checked against that)."""
        self.object_writer()  # this thread's pending list
        self._local.pending.extend(oids)

    def _journal(self, oids: list[str]) -> None:
        # after the refs moved: the write is done, so housekeeping that cannot write (a read-only
        # agentos/ folder) leaves the objects loose (for the user's git gc) but fails nothing
        try:
            size = housekeeping.record(self.location.common_dir, oids)
            if self.pack_in_background and size >= housekeeping.PACK_THRESHOLD:
                self._pack_soon()
            else:
                housekeeping.maybe_pack(self.repo, self.location.common_dir, size, self._auto_min_age())
        except (OSError, StoreWriteError):
            pass

    def forget_objects(self) -> None:
        """Stop trusting this thread's cache of objects known to exist (after refs were deleted or
        rewritten, their objects may be pruned by ``git gc``)."""
        writer = getattr(self._local, "writer", None)
        if writer is not None:
            writer.forget()

    def _pack_soon(self) -> None:
        """Start a (non-daemon, so never cut off at exit) packing thread unless one is running."""
        if self._packer is not None and self._packer.is_alive():
            return
        self._packer = threading.Thread(target=self._pack_quietly, name="gitstate-pack")
        self._packer.start()

    def _auto_min_age(self) -> float:
        """How old a journaled loose object must be for the automatic packing to take it: with
        small writes written loose, their store packs them itself soon (:meth:`_collect_loose`),
        so young ones are left to it; otherwise (snapshots' objects) none is left."""
        return housekeeping.AUTO_MIN_AGE if self.durability.loose_max > 0 else 0.0

    def _pack_quietly(self) -> None:
        try:
            housekeeping.pack_loose(self.repo, self.location.common_dir, self._auto_min_age())
        except (GitStateError, OSError, pygit2.GitError):
            pass  # housekeeping is retried by the next write that crosses the threshold

    def wait_for_housekeeping(self, timeout: float | None = None) -> None:
        """Wait until background packing and merging threads, if any, have finished."""
        for worker in (self._loose_packer, self._packer, self._merger):
            if worker is not None:
                worker.join(timeout)

    def pack(self) -> int:
        """Pack gitstate's loose objects now; returns how many were packed."""
        check_present(self.location.git_dir)
        try:
            return housekeeping.pack_loose(self.repo, self.location.common_dir)
        except (OSError, pygit2.GitError) as exc:
            raise StoreWriteError(self.location.common_dir, f"cannot pack: {exc}") from exc

    def _read_identity(self, repo: pygit2.Repository) -> tuple[str, str]:
        """Who writes checkpoints: ``GIT_COMMITTER_NAME``/``EMAIL``, else the repository's
        ``user.name``/``user.email``, else ``gitstate <gitstate@localhost>`` (as git would, but
        never failing for lack of an identity)."""
        name = os.environ.get("GIT_COMMITTER_NAME", "")
        email = os.environ.get("GIT_COMMITTER_EMAIL", "")
        try:
            config = repo.config
            if not name and "user.name" in config:
                name = str(config["user.name"])
            if not email and "user.email" in config:
                email = str(config["user.email"])
        except (pygit2.GitError, KeyError, ValueError):
            pass
        name = name.replace("<", "").replace(">", "").replace("\n", " ").strip() or _FALLBACK_NAME
        email = email.replace("<", "").replace(">", "").replace("\n", "").strip() or _FALLBACK_EMAIL
        return name, email

    # -- refs (read side; writes go through :meth:`write`) --------------------------------------

    def read_ref(self, name: str) -> str | None:
        """The id a ref points at, or ``None``."""
        return read_ref(self.repo, name)

    def list_refs(self, prefix: str) -> list[tuple[str, str]]:
        """Direct refs under ``prefix`` with their targets."""
        return list_refs(self.repo, prefix)

    def broken_refs(self, prefix: str) -> list[BrokenRef]:
        """Refs under ``prefix`` that hold no object id (symbolic, or unparsable loose files), which
        :meth:`list_refs` leaves out."""
        return broken_refs(self.repo, self.location.common_dir, prefix)

    def reflog(self, name: str) -> list[ReflogEntry]:
        """A ref's reflog, newest first."""
        return reflog(self.repo, name)

    def move_ref(self, ref: str, old: str | None, new: str | None, message: str) -> None:
        """One strict compare-and-swap of a ref that publishes no new objects (fork, rollback,
        undo, delete, a pull's fast-forward): :class:`ConflictError` if it does not hold ``old``."""

        def build(tx: Transaction) -> None:
            if new is None:
                assert old is not None
                tx.delete_ref(ref, old, message, strict=True)
            else:
                tx.set_ref(ref, old, new, message, strict=True)

        self.write(build)
        if old is not None and new != old:
            self.forget_objects()  # what only the old value reached may now be pruned by git gc

    # -- checkpoints by id --------------------------------------------------------------------

    def remember_position(self, oid: str, step: int, base: int) -> None:
        """Record a checkpoint's step and base (the step of its line's first kept checkpoint)."""
        cache = self._step_cache
        cache[oid] = (step, base)
        if len(cache) > 4096:
            cache.popitem(last=False)

    def position(self, oid: str) -> tuple[int, int]:
        """A checkpoint's ``(step, base)``, from memory when this store wrote or read it."""
        hit = self._step_cache.get(oid)
        if hit is None:
            cp = self.read_checkpoint(oid)
            hit = (cp.step, cp.base)
            self.remember_position(oid, *hit)
        return hit

    def read_checkpoint(self, oid: str) -> Checkpoint:
        """The checkpoint of a full commit id (:class:`CorruptObjectError` if it is not a sound
        checkpoint). Commits never change, so decoded views are kept (bounded) and handed out as
        copies with fresh metadata."""
        hit = self._cp_cache.get(oid)
        if hit is None:
            reader = self.reader
            hit = Checkpoint.from_commit(reader, reader.commit(oid), self.location.git_dir)
            self.remember(hit)
        return dataclasses.replace(hit, metadata=copy.deepcopy(hit.metadata))

    def remember(self, cp: Checkpoint) -> None:
        """Keep the decoded view of a checkpoint this process just wrote or read."""
        if len(self._cp_cache) >= 8192:
            self._cp_cache.clear()
        self._cp_cache[cp.id] = cp
        self.remember_position(cp.id, cp.step, cp.base)

    def expand(self, ref: str) -> str:
        """A full commit id from a full id or a prefix of 4+ hex digits. A prefix shared by other
        objects names the one checkpoint among them, as ``git log PREFIX`` takes the one commit (a
        checkpoint's state blobs and trees make such collisions common); a prefix of several
        checkpoints, or of none but several objects, is an :class:`AmbiguousReferenceError` that
        lists the candidates (checkpoints with their run, branch and step, other objects by type)."""
        try:
            return expand_id(self.repo, ref)
        except AmbiguousReferenceError as exc:
            found = [oid for oid, _ in exc.candidates]
            described = [(oid, self.describe_object(oid)) for oid in found]
            checkpoints = [oid for oid in found if self._is_checkpoint(oid)]
            if len(checkpoints) == 1 and len(found) < AMBIGUOUS_LISTED:  # the list is whole
                return checkpoints[0]
            raise AmbiguousReferenceError(ref, described) from None

    def _is_checkpoint(self, oid: str) -> bool:
        """Whether ``oid`` is a commit with a checkpoint's tree (``False`` when unreadable)."""
        reader = self.reader
        try:
            kind, _size = reader.header(oid)
            return kind == ObjectType.COMMIT and cpfmt.META in reader.tree(reader.commit(oid).tree_id)
        except GitStateError:
            return False

    def describe_object(self, oid: str) -> str:
        """A few words on what an object is: ``checkpoint (run 'r', branch 'main', step 3)`` for a
        checkpoint, else its type (``commit``, ``tree``, ``blob``, ``tag``)."""
        reader = self.reader
        try:
            kind, _size = reader.header(oid)
            if self._is_checkpoint(oid):
                cp = self.read_checkpoint(oid)
                return f"checkpoint (run {cp.run_id!r}, branch {cp.branch!r}, step {cp.step})"
        except GitStateError:
            return "unreadable object"
        return {ObjectType.COMMIT: "commit", ObjectType.TREE: "tree", ObjectType.BLOB: "blob",
                ObjectType.TAG: "tag"}.get(kind, "object")

    def checkpoint(self, ref: str) -> Checkpoint:
        """Any checkpoint of the store by full id or unique prefix (:class:`CheckpointNotFound` when
        the id names nothing, or an object that is not a gitstate checkpoint)."""
        oid = self.expand(ref)
        reader = self.reader
        if not reader.exists(oid):
            raise CheckpointNotFound(ref)
        kind, _size = reader.header(oid)
        if kind != ObjectType.COMMIT or cpfmt.META not in reader.tree(reader.commit(oid).tree_id):
            raise CheckpointNotFound(ref)
        return self.read_checkpoint(oid)

    def diff(self, a: str | Checkpoint, b: str | Checkpoint) -> Diff:
        """Changed state keys and workspace files from checkpoint ``a`` to ``b`` (ids or prefixes,
        possibly of different runs)."""
        first = a if isinstance(a, Checkpoint) else self.checkpoint(a)
        second = b if isinstance(b, Checkpoint) else self.checkpoint(b)
        from gitstate.workspace.diff import diff_checkpoints  # only diffs need it

        return diff_checkpoints(self.reader, first, second)

    def close(self) -> None:
        """Pack what small writes left loose (one pack), then release the repository handles (the
        store must not be used afterwards)."""
        writer = getattr(self._local, "writer", None)
        if self._loose_packer is not None:
            self._loose_packer.join()
        with self._loose_lock:
            batch = self._loose_waiting + (writer.take_left_loose() if writer is not None else [])
            self._loose_waiting, self._loose_bytes = [], 0
        if batch:  # listed for the next merge (none starts here: the store closes)
            self._pack_left_loose(batch, merge=False)
        self._gc_gate.close()
        self._main_repo.free()
        self._local = threading.local()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Store {self.path!r} worktree={self.worktree!r}>"


def _moved_already(common_dir: str, tx: Transaction) -> RefUpdate | None:
    """The first staged update whose ref no longer holds the value it expects (read without the
    lock: a hint; the compare-and-swap under the lock decides). Deletions of short-lived refs that
    may be gone already (``missing_ok``) are not looked at: they succeed either way."""
    updates = [u for u in tx.updates if not u.missing_ok]
    if len(updates) > 4:  # packed-refs read once, not once per ref
        current = refs.peek_many(common_dir, [u.ref for u in updates])
        return next((u for u in updates if current[u.ref] is not False and current[u.ref] != u.old), None)
    for update in updates:
        value = refs.peek(common_dir, update.ref)
        if value is not False and value != update.old:
            return update
    return None


def _hint(value: str | None | bool) -> str | None:
    return value if isinstance(value, str) else None


def _sweep_due(stamp: str) -> bool:
    """Whether the stale lock sweep is due: the file ``stamp`` is missing or older than
    :data:`STALE_LOCK_SWEEP_AGE` (see :func:`_note_sweep`)."""
    try:
        return time.time() - os.stat(stamp).st_mtime >= STALE_LOCK_SWEEP_AGE
    except OSError:
        return True


def _note_sweep(stamp: str) -> None:
    """Note that a long sweep just ran: ``stamp`` (in gitstate's private folder, not made just for
    it) gets the time now, so stores opening in the next minute skip the walk."""
    now = time.time()
    try:
        os.utime(stamp, (now, now))
    except FileNotFoundError:
        if os.path.isdir(os.path.dirname(stamp)):
            with suppress(OSError), open(stamp, "a", encoding="ascii"):
                pass
    except OSError:
        pass  # not writable here: sweep every time, as before


def _stamp(path: str) -> int | None:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None
