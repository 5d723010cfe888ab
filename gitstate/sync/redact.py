"""``git agentos scan --redact``: stored runs rewritten without the credentials they hold.

Every object the refs of a run reach is read once and rewritten only where it changes: gitstate's
CBOR records (a checkpoint's state, metadata, tool invocations and audit; run records; node logs;
LangGraph's pending writes, whose serde bytes are msgpack), LangGraph's channel values (typed
blobs and msgpack list chunks), the text files of workspace snapshots and session files. Each
credential becomes its marker (:func:`gitstate.secrets.marker`), as the ``redact`` policy writes it.
Commits are copied with the same messages, authors and times onto their rewritten parents; a
commit id another record names (a node log's entry and exit, a ``Node-Entry`` trailer) is renamed
with it. All refs move in one transaction (compare-and-swap on each), so ids change as after a
prune; the entries of their reflogs that only reached the old objects are dropped, so the next
``git gc`` (``git agentos gc``) can remove them. With ``now`` they go at once
(:func:`drop_replaced`)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pygit2
from pygit2.enums import ObjectType, SortMode

from gitstate.errors import CorruptObjectError
from gitstate.format import checkpoint as cpfmt
from gitstate.format import encoding
from gitstate.format.lgserde import parse_typed, typed_blob
from gitstate.format.lgtree import LIST, VALUE
from gitstate.format.names import run_prefix
from gitstate.git.objects import MODE_TREE, TreeEntry
from gitstate.git.refs import list_refs
from gitstate.secrets import Finding, Policy, Rules
from gitstate.store import housekeeping
from gitstate.store import reclaim as reclaiming
from gitstate.store.retention import expire_unreachable_reflog, reachable_objects
from gitstate.store.store import Store
from gitstate.store.transaction import Transaction
from gitstate.workspace.snapshot import forget_private_indexes

_HEX40 = re.compile(r"\b[0-9a-f]{40}\b")
_GITLINK = 0o160000


@dataclass
class RedactResult:
    """What :func:`redact_runs` did: ``renamed`` maps old commit ids to new ones, ``refs`` the refs
    it moved, ``objects`` how many objects it rewrote."""

    renamed: dict[str, str] = field(default_factory=dict)
    refs: list[str] = field(default_factory=list)
    objects: int = 0
    #: The ids of the objects the rewrite replaced (blobs, trees and commits).
    replaced: set[str] = field(default_factory=set)
    #: With ``now``: how many replaced objects were dropped, and how many are still stored (in a
    #: pack gitstate does not own, or loose without being gitstate's: ``git gc --prune=now``).
    dropped: int | None = None
    remaining: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` shape."""
        doc: dict[str, Any] = {"renamed": self.renamed, "refs": self.refs, "objects": self.objects}
        if self.dropped is not None:
            doc["dropped"], doc["remaining"] = self.dropped, self.remaining
        return doc


class _Rewrite:
    """The rewrite of one transaction: objects by id, each rewritten once."""

    def __init__(self, store: Store, tx: Transaction, policy: Policy) -> None:
        self.store = store
        self.reader = store.core.reader
        self.tx = tx
        self.policy = policy
        self.blobs: dict[tuple[str, str], str] = {}
        self.trees: dict[tuple[str, str], str] = {}
        self.renamed: dict[str, str] = {}
        self.objects = 0

    def _ids(self, value: Any) -> Any:
        """``value`` with every string that is a renamed commit id renamed."""
        if isinstance(value, str):
            return self.renamed.get(value, value)
        if isinstance(value, dict):
            out = {k: self._ids(v) for k, v in value.items()}
            return value if all(out[k] is value[k] for k in value) else out
        if isinstance(value, list):
            items = [self._ids(v) for v in value]
            return value if all(a is b for a, b in zip(items, value, strict=True)) else items
        return value

    def blob(self, oid: str, kind: str, path: str) -> str:
        key = (oid, kind)
        hit = self.blobs.get(key)
        if hit is not None:
            return hit
        data = self.reader.blob(oid)
        new = data
        found: list[Finding] = []
        if kind == "file":
            new = self.policy.file(data, path, found)
        elif kind == "typed":
            try:
                typed_kind, payload = parse_typed(data, oid)
            except CorruptObjectError:
                typed_kind, payload = "", b""
            if typed_kind:
                fresh = self.policy.typed(typed_kind, payload, path, found)
                if fresh is not payload:
                    new = typed_blob((typed_kind, fresh))
        elif kind == "msgpack":
            new = self.policy.msgpack(data, path, found)
        else:  # gitstate's CBOR, or a file that is not
            try:
                value = encoding.loads(data, oid)
            except CorruptObjectError:
                new = self.policy.file(data, path, found)
            else:
                fresh = self._ids(self.policy.value(value, path, found))
                if fresh is not value:
                    new = encoding.dumps(fresh, path, ordered=True)
        out = oid if new == data else self.tx.blob(new)
        if out != oid:
            self.objects += 1
        self.blobs[key] = out
        return out

    def tree(self, oid: str, path: str, kind: str) -> str:
        """A tree rewritten; ``kind`` says what its blobs hold (``root``: a commit's tree)."""
        key = (oid, kind)
        hit = self.trees.get(key)
        if hit is not None:
            return hit
        entries: list[TreeEntry] = []
        changed = False
        for e in self.reader.tree(oid):
            name, eid, mode = e.name, str(e.id), int(e.filemode)
            sub = f"{path}/{name}" if path else name
            if mode == _GITLINK:  # a node log's link to a checkpoint: renamed with it
                new = self.renamed.get(eid, eid)
            elif mode == MODE_TREE:
                if kind == "root" and name == cpfmt.FILES:
                    inner = "file"
                elif kind == "file":
                    inner = "file"
                elif name.endswith(LIST) or kind == "msgpack":
                    inner = "msgpack" if name.endswith(LIST) or kind == "msgpack" else "cbor"
                else:
                    inner = "cbor"
                new = self.tree(eid, sub, inner)
            elif kind == "file" or (kind == "root" and name == "content"):
                new = self.blob(eid, "file", sub)
            elif kind == "msgpack":
                new = self.blob(eid, "msgpack", sub)
            elif name.endswith(VALUE):
                new = self.blob(eid, "typed", sub)
            else:
                new = self.blob(eid, "cbor", sub)
            changed = changed or new != eid
            entries.append((name, new, mode))
        out = self.tx.tree(entries) if changed else oid
        if out != oid:
            self.objects += 1
        self.trees[key] = out
        return out

    def commit(self, oid: str) -> str:
        commit = self.reader.commit(oid)
        tree = self.tree(str(commit.tree_id), "", "root")
        parents = [self.renamed.get(str(p), str(p)) for p in commit.parent_ids]
        message = _HEX40.sub(lambda m: self.renamed.get(m.group(0), m.group(0)), commit.message)
        if tree == str(commit.tree_id) and parents == [str(p) for p in commit.parent_ids] and message == commit.message:
            return oid
        new = self.tx.commit(tree, parents, message, author=commit.author, committer=commit.committer)
        self.renamed[oid] = new
        self.objects += 1
        return new

    def target(self, oid: str) -> str:
        kind = self.reader.header(oid)[0]
        if kind == ObjectType.COMMIT:
            return self.renamed.get(oid, oid)
        if kind == ObjectType.TREE:
            return self.tree(oid, "", "root")
        if kind == ObjectType.BLOB:
            return self.blob(oid, "cbor", "")
        return oid


def _is_checkpoint(store: Store, commit_id: str) -> bool:
    reader = store.core.reader
    entry = reader.tree(str(reader.commit(commit_id).tree_id)).get(cpfmt.META)
    if entry is None:
        return False
    try:
        meta = encoding.loads(reader.blob(str(entry.id)), str(entry.id))
    except CorruptObjectError:
        return False
    return isinstance(meta, dict) and meta.get("format") == cpfmt.CHECKPOINT_KIND


def redact_runs(store: Store, run_ids: Sequence[str], rules: Rules, *, now: bool = False) -> RedactResult:
    """Rewrite the runs ``run_ids`` of this worktree without the credentials ``rules`` find (see
    the module doc); one transaction. Returns what changed (nothing when nothing was found).
    ``now``: then drop the replaced objects at once (:func:`drop_replaced`)."""
    prefixes = [run_prefix(store.worktree, r) for r in run_ids]
    refs = [(name, oid) for p in prefixes for name, oid in list_refs(store.repo, p)]
    repo = store.repo
    walker = repo.walk(None, SortMode.TOPOLOGICAL | SortMode.REVERSE)
    pushed = False
    for _name, oid in refs:
        obj = repo.get(oid)
        if obj is not None and obj.type == ObjectType.COMMIT:
            walker.push(obj.id)
            pushed = True
    commits = [str(c.id) for c in walker] if pushed else []
    # checkpoints first (parents before children), then the records that name them
    first = [c for c in commits if _is_checkpoint(store, c)]
    checkpoints = set(first)
    others = [c for c in commits if c not in checkpoints]
    policy = Policy("redact", rules, packed_bytes=True)

    def build(tx: Transaction) -> RedactResult:
        rw = _Rewrite(store, tx, policy)
        for oid in first + others:
            rw.commit(oid)
        moved: list[str] = []
        for name, oid in refs:
            new = rw.target(oid)
            if new != oid:
                tx.set_ref(name, oid, new, "gitstate: scan --redact", strict=True)
                moved.append(name)
        replaced = {k[0] for k, v in (*rw.blobs.items(), *rw.trees.items()) if v != k[0]} | set(rw.renamed)
        return RedactResult(dict(rw.renamed), moved, rw.objects, replaced)

    result = store.core.write(build)
    store.core.forget_objects()
    for name in result.refs:
        expire_unreachable_reflog(store.location.common_dir, name)
    if now and result.replaced:
        result.dropped, result.remaining = drop_replaced(store, result.replaced)
    return result


def drop_replaced(store: Store, replaced: set[str]) -> tuple[int, int]:
    """Drop the objects a rewrite replaced, now, as ``git agentos gc --now`` drops what it
    removed: the private indexes (the stat caches of workspace snapshots) that name one of them
    are deleted (the next snapshot starts again from the user's index), gitstate's journaled loose
    objects are packed, then gitstate's own packs are rewritten without every object that no ref,
    reflog or index reaches (:func:`gitstate.store.reclaim.reclaim`). The user's packs and loose
    objects are not touched: a replaced object found there (a ``git gc`` had packed it, or the
    user's git wrote it) stays until ``git gc --prune=now``. Returns how many replaced objects are
    gone and how many are still stored."""
    common = store.location.common_dir
    forget_private_indexes(common, replaced)
    housekeeping.pack_journaled(store.repo, common)
    reclaiming.reclaim(common, lambda: reachable_objects(store))
    store.core.forget_objects()
    odb = pygit2.Repository(common).odb  # a fresh handle: no pack list from before
    remaining = sum(1 for oid in replaced if oid in odb)
    return len(replaced) - remaining, remaining


def changed_runs(findings: Iterable[Finding]) -> list[str]:
    """The runs of ``findings``, each once, in order."""
    return list(dict.fromkeys(f.run for f in findings if f.run is not None))
