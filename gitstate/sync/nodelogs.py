"""Node logs follow the branch they describe when runs are shared (docs/FORMAT.md, "Sharing").

A node log (``.../nodes/<branch>``) is an append-only chain of records, one chain per branch. Two
clones that both wrote node steps on a branch have two chains that no fast-forward joins. Two rules
keep them consistent with the branches:

* a pull that keeps the remote's line of a branch as ``<branch>@<remote>`` keeps the remote's node
  log as the node log of that copy (``nodes/<branch>@<remote>``);
* when a branch holds the line whose node log is ``theirs`` (the remote's branch tip, or a kept
  copy's, is on the branch's line), the branch's own log ``ours`` is *replayed onto* ``theirs``:
  the new log is ``theirs`` followed by copies of the records of ``ours`` that ``theirs`` lacks and
  whose boundary is on the branch's current line. Records of boundaries that are not on the line
  (a rollback left them) are the ones readers already leave out (``Run.nodes`` lists a boundary
  only when its exit, or while running its base, is on the line), so what the log shows for the
  branch is kept, and ``theirs`` is an ancestor of the new log: a push is a fast-forward again. The
  old log stays in the ref's reflog.
"""

from __future__ import annotations

from gitstate.errors import CorruptObjectError
from gitstate.format import nodes as nodefmt
from gitstate.git.reader import ObjectReader
from gitstate.store.store import Store
from gitstate.store.transaction import Transaction


def first_parent_chain(reader: ObjectReader, tip: str | None) -> list[str]:
    """The commits from ``tip`` down its first parents, newest first."""
    return [commit.id for commit in reader.first_parents(tip)]


def _on_line(reader: ObjectReader, oid: str, line: set[str]) -> bool:
    """Whether the record commit ``oid`` describes a boundary on the branch's line (``line``: the
    ids of its first-parent history), as ``Run.nodes`` reads it."""
    found = reader.tree(reader.commit(oid).tree_id).get(nodefmt.RECORD)
    if found is None:
        raise CorruptObjectError(oid, f"node log entry has no {nodefmt.RECORD}")
    record = nodefmt.decode(reader.blob(found.id), found.id)
    anchor = record.exit if record.status != "running" else record.base
    return anchor is None or anchor in line


def stage_replay(reader: ObjectReader, tx: Transaction, ours: str | None, theirs: str,
                 branch_tip: str | None) -> str:
    """Stage on ``tx`` the commits of a node log that is ``theirs`` followed by copies of the
    records of ``ours`` that ``theirs`` lacks and whose boundary is on the line of ``branch_tip``
    (see the module docs); returns its tip (``theirs`` itself when nothing of ours is to keep).
    Moves no ref. :class:`CorruptObjectError` when a record cannot be read."""
    their_chain = first_parent_chain(reader, theirs)
    theirs_set = set(their_chain)
    their_trees = {reader.commit(oid).tree_id for oid in their_chain}
    line = set(first_parent_chain(reader, branch_tip))
    extra: list[str] = []  # ours' records theirs lacks, oldest first
    for oid in first_parent_chain(reader, ours):
        if oid in theirs_set:
            break
        extra.append(oid)
    extra.reverse()
    keep = [oid for oid in extra
            if reader.commit(oid).tree_id not in their_trees and _on_line(reader, oid, line)]
    tip = theirs
    for oid in keep:
        commit = reader.commit(oid)
        tip = tx.commit(commit.tree_id, [tip], commit.message, author=commit.author, committer=commit.committer)
    return tip


def replay_onto(store: Store, ref: str, ours: str | None, theirs: str, branch_tip: str | None,
                message: str) -> str:
    """Move the node log ``ref`` from ``ours`` to ``theirs`` followed by copies of the records of
    ``ours`` that ``theirs`` lacks and whose boundary is on the line of ``branch_tip``
    (:func:`stage_replay`); objects first, then one compare-and-swap from ``ours`` (reflogged with
    ``message``). Returns the new tip. :class:`ConflictError` when the log moved meanwhile;
    :class:`CorruptObjectError` when a record cannot be read."""

    def build(tx: Transaction) -> str:
        tip = stage_replay(store.core.reader, tx, ours, theirs, branch_tip)
        tx.set_ref(ref, ours, tip, message, strict=True)
        return tip

    new = store.core.write(build)
    if ours is not None:
        store.core.forget_objects()  # what only the old log reached may now be pruned by git gc
    return new
