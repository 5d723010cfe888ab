"""The one write path of gitstate: a :class:`Transaction` stages objects, then moves its refs by
compare-and-swap, all of them or none (also under ``kill -9``), each move logged in the ref's reflog.

Every writer (runs, node boundaries, prune, session files, run records, the LangGraph saver, remote
merges, adapters) writes through :meth:`gitstate.Store.write`, which owns the one retry policy::

    def build(tx: Transaction) -> str:
        tip = store.read_ref(ref)                       # read what the change is based on
        oid = tx.commit(tx.tree([...]), [tip] if tip else [], message)
        tx.set_ref(ref, tip, oid, "gitstate: checkpoint ...")
        return oid

    oid = store.write(build)

``build`` runs again whenever a ref moved underneath it (a lost compare-and-swap that is not
``strict``; seen before anything is written when the ref moved while ``build`` ran); a lock held by
another writer is waited for without rebuilding; both with jittered exponential backoff, until the
store's ``lock_timeout`` passes; then the caller gets :class:`LockTimeoutError` (a lock stayed held) or
:class:`ConflictError` (the ref kept moving). A ``strict`` update (the caller expected one exact
value) fails at once with :class:`ConflictError`. Nothing is visible before the refs move; objects
of a transaction that never moved its refs are left unreferenced, for ``git gc``."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from pygit2.enums import ObjectType

from gitstate.git import refs
from gitstate.git.objects import ObjectWriter, TreeEntry
from gitstate.git.reader import Signature


@dataclass(frozen=True)
class RefUpdate:
    """One staged ref move: ``old`` → ``new`` (``None``: absent / delete)."""

    ref: str
    old: str | None
    new: str | None
    message: str
    strict: bool
    log: bool = True  # append a reflog line (False: short-lived refs, see set_ref)
    missing_ok: bool = False  # a deletion of a ref already gone succeeds


class Transaction:
    """Objects staged for one write, and the ref moves that publish them (see the module docs)."""

    def __init__(self, writer: ObjectWriter, identity: tuple[str, str]) -> None:
        self.writer = writer
        self.identity = identity
        self.updates: list[RefUpdate] = []
        self.moved = 0  # steps of apply_updates done: the moves (as one), then each cleanup
        self._after: list[Callable[[], None]] = []

    # -- objects ------------------------------------------------------------------------------

    def blob(self, data: bytes) -> str:
        """Stage a blob; returns its id."""
        return self.writer.blob(data)

    def tree(self, entries: Iterable[TreeEntry]) -> str:
        """Stage a tree of ``(name, id, mode)`` entries; returns its id."""
        return self.writer.tree(entries)

    def commit(self, tree: str, parents: Iterable[str], message: str, *, when: float | None = None,
               author: Signature | None = None, committer: Signature | None = None) -> str:
        """Stage a commit (bytes built as git builds them); ``author``/``committer`` default to the
        store's identity at ``when`` (now), in UTC."""
        if author is None or committer is None:
            stamp = int(time.time() if when is None else when)
            mine = Signature(self.identity[0], self.identity[1], stamp, 0)
            author = author or mine
            committer = committer or mine
        lines = [f"tree {tree}", *(f"parent {p}" for p in parents),
                 f"author {author.to_git()}", f"committer {committer.to_git()}", "", message]
        return self.writer.write(ObjectType.COMMIT, "\n".join(lines).encode("utf-8"))

    # -- refs ---------------------------------------------------------------------------------

    def set_ref(self, ref: str, old: str | None, new: str, message: str, *, strict: bool = False,
                log: bool = True) -> None:
        """Stage a compare-and-swap of ``ref`` from ``old`` (``None``: must not exist) to ``new``.
        ``strict``: a ref that holds something else fails the write (no rebuild and retry).
        ``log=False``: no reflog line (only for short-lived refs that are created, never moved)."""
        self.updates.append(RefUpdate(ref, old, new, message, strict, log))

    def delete_ref(self, ref: str, old: str, message: str, *, strict: bool = False,
                   missing_ok: bool = False) -> None:
        """Stage the deletion of ``ref`` if it holds ``old``; ``missing_ok``: a short-lived ref that
        several writers may clean up (one already gone counts as deleted; see
        :func:`gitstate.git.refs.remove_transient_ref`)."""
        self.updates.append(RefUpdate(ref, old, None, message, strict, missing_ok=missing_ok))

    def after(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` once the refs have moved (e.g. to update an in-memory index)."""
        self._after.append(callback)

    def finished(self) -> None:
        """Called by the store after every ref moved."""
        for callback in self._after:
            callback()


class Backoff:
    """The retry policy: jittered exponential pauses (1 ms doubling to 50 ms) until a deadline."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.deadline = time.monotonic() + timeout
        self.delay = 0.001

    def expired(self) -> bool:
        """Whether the deadline has passed."""
        return time.monotonic() >= self.deadline

    def pause(self) -> None:
        """Sleep before the next attempt."""
        time.sleep(self.delay * (0.5 + random.random()))
        self.delay = min(self.delay * 2, 0.05)


def apply_updates(common_dir: str, tx: Transaction, *, fsync: bool) -> None:
    """Publish the transaction's ref moves, all or nothing: one move by one compare-and-swap
    (:func:`refs.set_if_equals`, :func:`refs.remove_if_equals`), several by
    :func:`refs.update_atomically` (a ``kill -9`` at any point leaves all of them or none moved).
    Then the deletions of short-lived refs (``missing_ok``: cleanup that may already have been done
    by another writer), one by one; ``tx.moved`` counts the steps done (the moves as one), so a retry
    after a held lock goes on where it stopped."""
    main = [u for u in tx.updates if not u.missing_ok]
    if tx.moved == 0:
        if len(main) == 1:
            apply_one(common_dir, tx, main[0], fsync)
        elif main:
            refs.update_atomically(common_dir, [refs.Move(u.ref, u.old, u.new, u.message, u.log) for u in main],
                                   committer=tx.identity, fsync=fsync)
        tx.moved = 1
    cleanup = [u for u in tx.updates if u.missing_ok]
    for update in cleanup[tx.moved - 1:]:
        assert update.old is not None
        refs.remove_transient_ref(common_dir, update.ref, update.old, update.message)
        tx.moved += 1


def apply_one(common_dir: str, tx: Transaction, update: RefUpdate, fsync: bool) -> None:
    """Move one staged ref by itself (a compare-and-swap of its own, not atomic with the others)."""
    if update.new is None:
        assert update.old is not None
        refs.remove_if_equals(common_dir, update.ref, update.old, update.message)
    else:
        refs.set_if_equals(common_dir, update.ref, update.old, update.new, update.message,
                           committer=tx.identity, fsync=fsync, log=update.log)


def failed_update(tx: Transaction, ref: str) -> RefUpdate | None:
    """The staged update of ``ref``, if any."""
    for update in tx.updates:
        if update.ref == ref:
            return update
    return None
