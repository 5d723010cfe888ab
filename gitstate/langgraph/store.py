"""``GitStore``: LangGraph's long-term memory (``langgraph.store.base.BaseStore``) in git.

Memory is one gitstate run (run id ``langgraph-store`` unless named otherwise, workflow
``langgraph-store``) with one branch per namespace root: the items of every namespace starting with
``("users", ...)`` live on branch ``users`` (a label push would keep back, ``restore-safety`` or one
holding "@", is escaped: :func:`_branch`). Every batch that changes memory adds one commit per root
it touches, so memory has history (``git log``, ``git agentos log langgraph-store -b users``) and
travels with ``git agentos push``/``pull`` like runs. Memory is read from those branches only: the
run's other branches (a pull's kept copy ``users@origin`` of a diverged line, a fork) are not.

Results are what LangGraph's ``InMemoryStore`` returns for the same operations: items, namespaces,
search order (namespaces in the order they were first used, items in the order they were first
put), ``filter`` with the same operators, ``limit``/``offset``, and semantic ``query`` when an
``index`` with an embedding function is given (vectors are stored with the items). TTL is
supported as LangGraph's SQL stores do it (``ttl=`` on put, refresh on read, ``sweep_ttl``).
Memory never finishes, so ``git agentos runs`` lists it as ``saved`` (not ``running``). See
docs/FORMAT.md, "Framework integrations"."""

from __future__ import annotations

import asyncio
import copy
import hashlib
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from importlib import util
from typing import Any, cast

from langchain_core.embeddings import Embeddings
from langgraph.store.base import (
    BaseStore,
    GetOp,
    IndexConfig,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
    ensure_embeddings,
    get_text_at_path,
    tokenize_path,
)

from gitstate.errors import CorruptObjectError, EncodingError, UnsupportedFormatError
from gitstate.format import checkpoint as cpfmt
from gitstate.format import encoding, frameworks
from gitstate.format.names import MAX_COMPONENT, decode_component, encode_component, run_prefix
from gitstate.format.statetree import LEAF, MAP, StateReader, StateWriter, Written
from gitstate.git.objects import MODE_BLOB, MODE_TREE, TreeEntry
from gitstate.integrations import SEQUENCE, RunHandle, store_at
from gitstate.store.store import Store
from gitstate.store.transaction import Transaction
from gitstate.workspace.restore import SAFETY_BRANCH

try:  # LangGraph validates op namespaces with this helper in recent versions
    from langgraph.store.base import validate_op_namespace
except ImportError:  # pragma: no cover - older langgraph-checkpoint
    validate_op_namespace = None  # type: ignore[assignment]

__all__ = ["GitStore"]

WORKFLOW = frameworks.LANGGRAPH_STORE
KIND = frameworks.KINDS[WORKFLOW]
DEFAULT_NAME = "langgraph-store"
_LONG = re.compile(r"[0-9a-f]{40}\.long")


#: A namespace of more items than this is stored in shards (``shards.map/<2 hex>.map/``, by the
#: first byte of the SHA-1 of the key), so a put rewrites one shard of it, not every item's entry.
SHARD_AT = frameworks.MEMORY_SHARD_AT
#: The state version of a root holding a sharded namespace (a root without one is written as
#: before, :data:`frameworks.WRITTEN`, so that earlier gitstate versions keep reading it).
SHARDED_VERSION = 3


def _shard(key: str, _cache: dict[str, str] = {}) -> str:  # noqa: B006 - a cache on purpose
    """:func:`frameworks.memory_shard`, remembered per key."""
    hit = _cache.get(key)
    if hit is None:
        if len(_cache) > 1 << 18:
            _cache.clear()
        hit = _cache[key] = frameworks.memory_shard(key)
    return hit


def _by_shard(keys: Iterable[str]) -> dict[str, frozenset[str]]:
    """``keys`` grouped by their shard (:func:`_shard`)."""
    members: dict[str, set[str]] = {}
    for key in keys:
        members.setdefault(_shard(key), set()).add(key)
    return {shard: frozenset(group) for shard, group in members.items()}


@dataclass
class _Ns:
    """A namespace as stored: labels, creation order and item blobs by key; edits go through
    :meth:`assign` and :meth:`drop`, which forget the trees they make stale."""

    labels: tuple[str, ...]
    seq: int
    items: dict[str, str] = field(default_factory=dict)
    tree: str | None = None  # the namespace's tree while it is unchanged
    # shard trees unchanged since read or written, and the keys of each shard once asked for
    # (:meth:`groups`): caches, not what the namespace holds, so equality leaves them out
    shards: dict[str, str] = field(default_factory=dict, compare=False)
    members: dict[str, frozenset[str]] | None = field(default=None, compare=False)

    def copy(self) -> _Ns:
        # (the key sets are frozen and replaced on edit: a copy shares them)
        members = None if self.members is None else dict(self.members)
        return _Ns(self.labels, self.seq, dict(self.items), self.tree, dict(self.shards), members)

    def assign(self, key: str, oid: str) -> None:
        """Store item ``key`` as the blob ``oid``."""
        if self.members is not None and key not in self.items:
            shard = _shard(key)
            self.members[shard] = self.members.get(shard, frozenset()) | {key}
        self.items[key] = oid
        self._changed(key)

    def drop(self, key: str) -> None:
        """Delete item ``key``."""
        del self.items[key]
        if self.members is not None:
            shard = _shard(key)
            self.members[shard] = self.members.get(shard, frozenset()) - {key}
        self._changed(key)

    def _changed(self, key: str) -> None:
        self.tree = None
        self.shards.pop(_shard(key), None)

    def groups(self) -> dict[str, frozenset[str]]:
        """The keys of each shard (empty shards may be listed)."""
        if self.members is None:
            self.members = _by_shard(self.items)
        return self.members

    @property
    def sharded(self) -> bool:
        """Whether the namespace is stored in shards (more than :data:`SHARD_AT` items)."""
        return len(self.items) > SHARD_AT


@dataclass
class _Root:
    """One root's branch tip, parsed (trees only; item blobs are decoded on use), with what a
    write reuses: the trees of its namespace shards (past :data:`SHARD_AT` namespaces), the
    namespace names of each shard (frozen, shared by writes that copy them) and the names of its
    sharded namespaces."""

    tip: str | None
    namespaces: dict[str, _Ns] = field(default_factory=dict)
    shard_trees: dict[str, str] = field(default_factory=dict, compare=False)
    members: dict[str, frozenset[str]] | None = field(default=None, compare=False)
    sharded: frozenset[str] | None = field(default=None, compare=False)


class _Namespaces:
    """The namespaces of a root while a write edits them: the tip's (shared, never edited) and
    the copies and new ones of this write, a namespace being copied at its first use, so a put
    copies the namespace it changes, not every namespace of the root."""

    def __init__(self, root: _Root, keep: Callable[[_Ns], bool] | None = None) -> None:
        if keep is None:
            self.base = root.namespaces
            self.shard_trees = dict(root.shard_trees)
            self.members, self.sharded = root.members, root.sharded
        else:  # a subset: nothing of the root's caches holds
            self.base = {k: ns for k, ns in root.namespaces.items() if keep(ns)}
            self.shard_trees, self.members, self.sharded = {}, None, None
        self.own: dict[str, _Ns] = {}

    def get(self, key: str) -> _Ns | None:
        """Namespace ``key`` to edit (a copy of the tip's at first use), or ``None``."""
        ns = self.own.get(key)
        if ns is None:
            base = self.base.get(key)
            if base is None:
                return None
            ns = self.own[key] = base.copy()
        return ns

    def __setitem__(self, key: str, ns: _Ns) -> None:
        """Add a new namespace."""
        if key not in self.base and key not in self.own and self.members is not None:
            shard = _shard(key)
            self.members = {**self.members, shard: self.members.get(shard, frozenset()) | {key}}
        self.own[key] = ns

    def keys(self) -> list[str]:
        return [*self.base, *(k for k in self.own if k not in self.base)]

    def values(self) -> list[_Ns]:
        """Every namespace, to edit (each copied)."""
        return [ns for ns in map(self.get, self.keys()) if ns is not None]

    def __len__(self) -> int:
        return len(self.base) + sum(1 for k in self.own if k not in self.base)

    def view(self) -> dict[str, _Ns]:
        """The namespaces as they are now (not to edit)."""
        return {**self.base, **self.own}

    def groups(self) -> dict[str, frozenset[str]]:
        """The namespace names of each shard."""
        if self.members is None:
            self.members = _by_shard(self.keys())
        return self.members

    def sharded_names(self) -> frozenset[str]:
        """The names of the sharded namespaces."""
        if self.sharded is None:
            self.sharded = frozenset(k for k, ns in self.view().items() if ns.sharded)
        names = set(self.sharded)
        for key, ns in self.own.items():
            if ns.sharded:
                names.add(key)
            else:
                names.discard(key)
        self.sharded = frozenset(names)
        return self.sharded


def _ns_key(namespace: tuple[str, ...]) -> str:
    return ".".join(namespace)


def _namespace_tree(tx: Transaction, writer: StateWriter, ns: _Ns) -> str:
    """The tree of a namespace: its items in ``items.map/``, or past :data:`SHARD_AT` items in
    ``shards.map/<shard>.map/``, where only the shards changed since they were read or written are
    built again. Keys are given in the order of the tree's entries, so no ``.order.cbor``."""
    labels = list(ns.labels)
    if not ns.sharded:
        items = tx.tree([(encode_component(k) + LEAF, oid, MODE_BLOB) for k, oid in ns.items.items()])
        return writer.mapping({"items": Written(MAP, items), "namespace": labels, "seq": ns.seq})
    entries = _shard_entries(tx, ns.groups(), ns.shards, lambda k: (encode_component(k) + LEAF, ns.items[k], MODE_BLOB))
    return writer.mapping({"namespace": labels, "seq": ns.seq, "shards": Written(MAP, tx.tree(entries))})


def _shard_entries(tx: Transaction, groups: dict[str, frozenset[str]], known: dict[str, str],
                   entry: Callable[[str], TreeEntry | None]) -> list[TreeEntry]:
    """The entries of a tree of shards: each non-empty shard of ``groups`` (shard → keys) as the
    tree in ``known``, or else built of ``entry(key)`` for its keys and added to ``known``."""
    out: list[TreeEntry] = []
    for shard, keys in sorted(groups.items()):
        if not keys:
            continue
        tree = known.get(shard)
        if tree is None:
            tree = known[shard] = tx.tree([e for e in map(entry, keys) if e is not None])
        out.append((shard + MAP, tree, MODE_TREE))
    return out


def _state_tree(tx: Transaction, writer: StateWriter, namespaces: _Namespaces) -> str:
    """The state tree of a root: its namespaces in ``namespaces.map/``, or past :data:`SHARD_AT`
    namespaces in ``namespace_shards.map/<shard>.map/``, where only the shards holding a namespace
    this write changed are built again. Version 3 when either kind of shard is there."""
    for key, ns in namespaces.own.items():
        if ns.tree is None:  # changed (unchanged namespaces keep the tree read from the tip)
            ns.tree = _namespace_tree(tx, writer, ns)
            namespaces.shard_trees.pop(_shard(key), None)
    many = len(namespaces) > SHARD_AT
    sharded = namespaces.sharded_names()  # (kept up to date for the next write, too)
    # (so a GitStore of format 1 reads this tree, finds the newer v and refuses it as such; and
    # one of version 2 refuses a root holding shards as newer, too)
    version = SHARDED_VERSION if many or sharded else frameworks.WRITTEN
    if not many:
        entries = [(encode_component(k) + MAP, ns.tree, MODE_TREE) for k, ns in namespaces.view().items()
                   if ns.tree is not None]
        return writer.mapping({"format": KIND, "namespaces": Written(MAP, tx.tree(entries)), "v": version})
    base, own = namespaces.base, namespaces.own

    def entry(key: str) -> TreeEntry | None:
        tree = (own[key] if key in own else base[key]).tree
        return None if tree is None else (encode_component(key) + MAP, tree, MODE_TREE)

    shards = _shard_entries(tx, namespaces.groups(), namespaces.shard_trees, entry)
    return writer.mapping({"format": KIND, "namespace_shards": Written(MAP, tx.tree(shards)), "v": version})


def _read_items(reader: StateReader, oid: str, items: dict[str, str], shard: str | None) -> None:
    """Add the item blobs of the items tree (or shard ``shard``) ``oid`` to ``items``."""
    for item_key, (kind, blob) in reader.entries(oid).items():
        if kind != "cbor":
            raise CorruptObjectError(oid, f"item {item_key!r} is not a blob")
        if shard is not None and _shard(item_key) != shard:  # (so no key is in two shards)
            raise CorruptObjectError(oid, f"item {item_key!r} is in shard {shard}, not {_shard(item_key)}")
        items[item_key] = blob


#: Branch names a namespace root must not be stored on: restore's safety branch stays local (push
#: leaves it out), so memory there would never be shared.
RESERVED_BRANCHES = frozenset({SAFETY_BRANCH})


def _branch(root: str) -> str:
    """The branch of a namespace root: the root label itself; ``<label with each "@" written as
    ".">.ns`` for a label that is a reserved branch name or holds "@" (a pull keeps a diverged
    branch ``<b>`` as ``<b>@<remote>[-<n>]``, and push never sends such names back to that
    remote); ``<sha1 of the label>.long`` when the name is too long for a ref. Labels never contain
    ".", so the three forms cannot collide (and ``.ns`` names read back to their label)."""
    name = root
    if root in RESERVED_BRANCHES or "@" in root:
        name = root.replace("@", ".") + ".ns"
    if len(encode_component(name)) <= MAX_COMPONENT:
        return name
    return _hashed(root)


def _legacy_branch(root: str) -> str:
    """The branch earlier versions stored a root on (the label itself unless too long): still read
    while the root has no branch of :func:`_branch`'s name."""
    return root if len(encode_component(root)) <= MAX_COMPONENT else _hashed(root)


def _hashed(root: str) -> str:
    return hashlib.sha1(root.encode("utf-8"), usedforsecurity=False).hexdigest() + ".long"


def _may_hold_roots(branch: str) -> bool:
    """Whether :func:`_branch` or :func:`_legacy_branch` can give ``branch`` (other branches of
    the run, e.g. ``users.b``, are not read at all)."""
    return "." not in branch or branch.endswith(".ns") or _LONG.fullmatch(branch) is not None


def _now() -> datetime:
    return datetime.now(UTC)


class GitStore(BaseStore):
    """LangGraph long-term memory kept in a git repository.

    ``GitStore(store=None, *, name="langgraph-store", index=None, ttl=None)`` uses the store of
    the current directory's repository unless ``store`` is given; :meth:`from_path` opens the
    repository at ``path`` (as the saver's ``from_path``). ``index`` is LangGraph's
    ``IndexConfig`` (``dims``, ``embed``, ``fields``) for semantic search, ``ttl`` its
    ``TTLConfig``. Values are plain data (mappings, lists, text, numbers, ...); a value gitstate
    cannot store raises :class:`gitstate.EncodingError` before anything is written. One instance may
    be shared by threads; several processes may write the same memory."""

    supports_ttl: bool = True

    def __init__(self, store: Store | None = None, *, name: str = DEFAULT_NAME, index: IndexConfig | None = None,
                 ttl: TTLConfig | None = None) -> None:
        self.store = store_at(None, store)
        self.name = name
        self.ttl_config = ttl
        self._handle = RunHandle(self.store, name, WORKFLOW)
        self.index_config: dict[str, Any] | None = None
        self.embeddings: Embeddings | None = None
        if index:
            config: dict[str, Any] = dict(index)
            self.embeddings = ensure_embeddings(config.get("embed"))
            fields: list[str] = list(config.get("fields") or ["$"])
            config["__tokenized_fields"] = [(p, tokenize_path(p)) if p != "$" else (p, p) for p in fields]
            self.index_config = config
        self._roots: dict[str, _Root] = {}
        self._ns_trees: OrderedDict[str, _Ns] = OrderedDict()
        self._items: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._touched: dict[tuple[str, ...], int] = {}
        self._lock = threading.RLock()
        self._sweeper: threading.Thread | None = None
        self._stop = threading.Event()

    @classmethod
    def from_path(cls, path: str | os.PathLike[str], *, name: str = DEFAULT_NAME, index: IndexConfig | None = None,
                  ttl: TTLConfig | None = None) -> GitStore:
        """A store on the repository at (or above) ``path``."""
        return cls(store_at(path, None), name=name, index=index, ttl=ttl)

    def __repr__(self) -> str:
        return f"<GitStore {self.name!r} {self.store.path!r}>"

    # -- reading git --------------------------------------------------------------------------

    def _branch_ref(self, branch: str) -> str:
        return run_prefix(self.store.worktree, self.name) + "heads/" + encode_component(branch)

    def _branch_names(self) -> dict[str, str]:
        """Every branch of the run, with its tip (memory's own branches and any other: kept copies
        a pull made, forks)."""
        prefix = run_prefix(self.store.worktree, self.name) + "heads/"
        out = {}
        for name, oid in self.store.core.list_refs(prefix):
            try:
                out[decode_component(name[len(prefix):])] = oid
            except ValueError:
                continue
        return out

    @staticmethod
    def _owns(branch: str, root: str, branches: Iterable[str]) -> bool:
        """Whether ``branch`` is where root ``root`` is stored: its :func:`_branch`, or (a store
        written by an earlier version) its :func:`_legacy_branch` while the run has no branch of the
        new name. Namespaces on any other branch are not memory: a kept copy ``<b>@<remote>``, a
        fork."""
        new = _branch(root)
        return branch == new or (branch == _legacy_branch(root) and new not in branches)

    def _root_branch(self, root: str) -> str:
        """The branch holding root ``root`` now: its :func:`_branch`, else its legacy branch when
        only that exists."""
        new = _branch(root)
        legacy = _legacy_branch(root)
        if legacy != new and self.store.core.read_ref(self._branch_ref(new)) is None \
                and self.store.core.read_ref(self._branch_ref(legacy)) is not None:
            return legacy
        return new

    def _root(self, branch: str) -> _Root:
        """The branch's tip as it is now (parsed once per tip)."""
        return self._root_at(branch, self.store.core.read_ref(self._branch_ref(branch)))

    def _root_at(self, branch: str, tip: str | None) -> _Root:
        """The branch at ``tip``, which the caller just read."""
        with self._lock:
            hit = self._roots.get(branch)
            if hit is not None and hit.tip == tip:
                return hit
        parsed = _Root(tip) if tip is None else self._parse(tip)
        with self._lock:
            self._roots[branch] = parsed
        return parsed

    def _parse(self, tip: str) -> _Root:
        reader = StateReader(self.store.core.reader)
        entry = reader.tree(reader.reader.commit(tip).tree_id).get(cpfmt.STATE_TREE)
        if entry is None or entry.type_str != "tree":
            raise CorruptObjectError(tip, "not a langgraph-store checkpoint (no state tree)")
        top = reader.entries(entry.id)
        fmt = reader.value(*top["format"]) if "format" in top else None
        version = reader.value(*top["v"]) if "v" in top else None
        if fmt != KIND:
            raise CorruptObjectError(tip, f"not a {KIND} payload")
        if not isinstance(version, int) or version < 1:
            raise CorruptObjectError(tip, "langgraph-store state has no format version")
        if version > frameworks.VERSION:
            raise UnsupportedFormatError(tip, f"langgraph-store format version {version} is not supported")
        kind, oid = top.get("namespaces", ("", ""))
        shards_kind, shards_oid = top.get("namespace_shards", ("", ""))
        out = _Root(tip)
        if kind and shards_kind:
            raise CorruptObjectError(tip, "langgraph-store state has both namespaces and namespace_shards")
        if kind == "map":
            self._namespaces(reader, oid, out, version, None)
        elif shards_kind == "map":
            if version < SHARDED_VERSION:
                raise CorruptObjectError(tip, f"langgraph-store namespaces are sharded in a state of version {version}")
            members: dict[str, frozenset[str]] = {}
            for shard, (entry_kind, shard_oid) in reader.entries(shards_oid).items():
                if entry_kind != "map" or not frameworks.is_memory_shard(shard):
                    raise CorruptObjectError(shards_oid, f"{shard!r} is not a shard of namespaces")
                members[shard] = frozenset(self._namespaces(reader, shard_oid, out, version, shard))
                if not members[shard]:
                    raise CorruptObjectError(shard_oid, f"shard {shard} of namespaces is empty")
                out.shard_trees[shard] = shard_oid
            if len(out.namespaces) <= SHARD_AT:
                raise CorruptObjectError(tip, f"{len(out.namespaces)} namespaces are sharded")
            out.members = members
        else:
            raise CorruptObjectError(tip, "langgraph-store state has no namespaces tree")
        out.sharded = frozenset(k for k, ns in out.namespaces.items() if ns.sharded)
        return out

    def _namespaces(self, reader: StateReader, oid: str, out: _Root, version: int, shard: str | None) -> list[str]:
        """Read the namespaces of the tree ``oid`` (of shard ``shard``) into ``out``; their names."""
        names = []
        for key, (ns_kind, ns_oid) in reader.entries(oid).items():
            if ns_kind != "map":
                raise CorruptObjectError(ns_oid, f"namespace {key!r} is not a tree")
            if shard is not None and _shard(key) != shard:
                raise CorruptObjectError(oid, f"namespace {key!r} is in shard {shard}, not {_shard(key)}")
            ns = out.namespaces[key] = self._namespace(reader, key, ns_oid)
            if ns.shards and version < SHARDED_VERSION:
                raise CorruptObjectError(ns_oid, f"namespace {key!r} is sharded in a state of version {version}")
            names.append(key)
        return names

    def _namespace(self, reader: StateReader, key: str, oid: str) -> _Ns:
        with self._lock:
            hit = self._ns_trees.get(oid)
        if hit is not None:
            return hit.copy()
        entries = reader.entries(oid)
        labels = reader.value(*entries["namespace"]) if "namespace" in entries else None
        seq = reader.value(*entries["seq"]) if "seq" in entries else None
        items_kind, items_oid = entries.get("items", ("", ""))
        shards_kind, shards_oid = entries.get("shards", ("", ""))
        if not (isinstance(labels, list) and labels and all(isinstance(x, str) and x for x in labels)
                and _ns_key(tuple(labels)) == key and isinstance(seq, int)
                and (items_kind, shards_kind) in (("map", ""), ("", "map"))):
            raise CorruptObjectError(oid, f"namespace {key!r} is malformed")
        items: dict[str, str] = {}
        shards: dict[str, str] = {}
        if shards_kind:
            for shard, (kind, shard_oid) in reader.entries(shards_oid).items():
                if kind != "map" or not frameworks.is_memory_shard(shard):
                    raise CorruptObjectError(shards_oid, f"namespace {key!r}: {shard!r} is not a shard")
                before = len(items)
                _read_items(reader, shard_oid, items, shard)
                if len(items) == before:
                    raise CorruptObjectError(shard_oid, f"namespace {key!r}: shard {shard} is empty")
                shards[shard] = shard_oid
            if len(items) <= SHARD_AT:
                raise CorruptObjectError(oid, f"namespace {key!r} of {len(items)} items is sharded")
        else:
            _read_items(reader, items_oid, items, None)
        ns = _Ns(tuple(labels), seq, items, oid, shards)
        with self._lock:
            self._ns_trees[oid] = ns
            while len(self._ns_trees) > 4096:
                self._ns_trees.popitem(last=False)
        return ns.copy()

    def _item(self, oid: str) -> dict[str, Any]:
        """A stored item (decoded once per blob; callers copy what they hand out)."""
        with self._lock:
            hit = self._items.get(oid)
        if hit is not None:
            return hit
        item = StateReader(self.store.core.reader).blob_value(oid)
        problem = frameworks.check_item(item)
        if problem:
            raise CorruptObjectError(oid, f"langgraph-store item: {problem}")
        self._remember_item(oid, item)
        return cast(dict[str, Any], item)

    def _all_namespaces(self, prefix: tuple[str, ...] = ()) -> list[tuple[_Ns, str]]:
        """Stored namespaces (under ``prefix``'s root when it has one) with their branch, in the
        order they were first used. Only each root's own branch is read (:meth:`_owns`)."""
        if prefix:
            branch = self._root_branch(prefix[0])
            found = [(ns, branch) for ns in self._root(branch).namespaces.values() if ns.labels[0] == prefix[0]]
        else:
            tips = self._branch_names()
            found = [(ns, branch) for branch, tip in tips.items() if _may_hold_roots(branch)
                     for ns in self._root_at(branch, tip).namespaces.values() if self._owns(branch, ns.labels[0], tips)]
        found.sort(key=lambda pair: pair[0].seq)
        return found

    def _expired(self, item: dict[str, Any], now: datetime) -> bool:
        if not (self.ttl_config and self.ttl_config.get("omit_expired")):
            return False
        expires = item.get("expires_at")
        return isinstance(expires, str) and datetime.fromisoformat(expires) <= now

    @staticmethod
    def _to_item(ns: _Ns, key: str, item: dict[str, Any], score: float | None = None,
                 search: bool = False) -> Item:
        value = copy.deepcopy(item["value"])
        created = datetime.fromisoformat(item["created_at"])
        updated = datetime.fromisoformat(item["updated_at"])
        if search:
            return SearchItem(namespace=ns.labels, key=key, value=value, created_at=created, updated_at=updated,
                              score=score)
        return Item(value=value, key=key, namespace=ns.labels, created_at=created, updated_at=updated)

    # -- batches ------------------------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run operations as LangGraph defines them: reads see the store as it was before the
        batch, then the batch's puts and deletes are written (the last one per item wins)."""
        plan = self._plan(ops)
        texts = self._texts(plan.puts)
        queries = {op.query for op, _ in plan.searches.values() if op.query}
        vectors = (self.embeddings.embed_documents(list(texts)) if texts and self.embeddings else [])
        query_vectors = ({q: self.embeddings.embed_query(q) for q in queries}
                         if queries and self.embeddings and self.index_config else {})
        return self._finish(plan, texts, vectors, query_vectors)

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """:meth:`batch`, with async embeddings; the git work runs in a worker thread."""
        plan = await asyncio.to_thread(self._plan, list(ops))
        texts = self._texts(plan.puts)
        vectors: list[list[float]] = []
        query_vectors: dict[str, list[float]] = {}
        if self.embeddings is not None:
            if texts:
                vectors = await self.embeddings.aembed_documents(list(texts))
            queries = [q for q in {op.query for op, _ in plan.searches.values() if op.query}]
            if queries and self.index_config:
                found = await asyncio.gather(*(self.embeddings.aembed_query(q) for q in queries))
                query_vectors = dict(zip(queries, found, strict=True))
        return await asyncio.to_thread(self._finish, plan, texts, vectors, query_vectors)

    def _plan(self, ops: Iterable[Op]) -> _Plan:
        plan = _Plan()
        now = _now()
        for i, op in enumerate(ops):
            if validate_op_namespace is not None:
                validate_op_namespace(op)
            if isinstance(op, GetOp):
                plan.results.append(self._get(op, now, plan))
            elif isinstance(op, SearchOp):
                plan.searches[i] = (op, self._candidates(op, now, plan))
                plan.results.append(None)
            elif isinstance(op, ListNamespacesOp):
                plan.results.append(self._list_namespaces(op, now))
            elif isinstance(op, PutOp):
                if not op.namespace:
                    raise InvalidNamespaceError("Namespace cannot be empty.")
                if op.value is not None:
                    if not isinstance(op.value, dict):
                        raise EncodingError(f"{op.namespace}/{op.key}", "a stored value must be a dict")
                    encoding.check_value(dict(op.value), f"{'.'.join(op.namespace)}/{op.key}")
                plan.puts[(tuple(op.namespace), str(op.key))] = op
                plan.results.append(None)
            else:
                raise ValueError(f"Unknown operation type: {type(op)}")
        return plan

    def _lookup(self, namespace: tuple[str, ...]) -> _Ns | None:
        if not namespace:
            return None
        return self._root(self._root_branch(namespace[0])).namespaces.get(_ns_key(namespace))

    def _touch(self, namespace: tuple[str, ...]) -> None:
        """Remember a namespace read or deleted from before it holds anything: ``InMemoryStore``
        lists such namespaces (and orders them by that first use), so this instance does too."""
        if namespace and self._lookup(namespace) is None:
            with self._lock:
                self._touched.setdefault(tuple(namespace), SEQUENCE.next())

    def _get(self, op: GetOp, now: datetime, plan: _Plan) -> Item | None:
        namespace = tuple(op.namespace)
        ns = self._lookup(namespace)
        if ns is None:
            self._touch(namespace)
            return None
        blob = ns.items.get(str(op.key))
        if blob is None:
            return None
        item = self._item(blob)
        if self._expired(item, now):
            return None
        if op.refresh_ttl:
            plan.refresh(namespace, str(op.key), item)
        return self._to_item(ns, str(op.key), item)

    def _candidates(self, op: SearchOp, now: datetime, plan: _Plan) -> list[tuple[_Ns, str, dict[str, Any]]]:
        prefix = tuple(op.namespace_prefix)
        n = len(prefix)
        out = []
        for ns, _root in self._all_namespaces(prefix):
            if ns.labels[:n] != prefix:
                continue
            rows = [(key, self._item(blob)) for key, blob in ns.items.items()]
            rows.sort(key=lambda row: row[1]["seq"])
            for key, item in rows:
                if self._expired(item, now):
                    continue
                if op.filter and not all(_compare_values(item["value"].get(k), v) for k, v in op.filter.items()):
                    continue
                out.append((ns, key, item))
        return out

    def _list_namespaces(self, op: ListNamespacesOp, now: datetime) -> list[tuple[str, ...]]:
        names = [ns.labels for ns, _root in self._all_namespaces()
                 if not (self.ttl_config and self.ttl_config.get("omit_expired") and ns.items
                         and all(self._expired(self._item(b), now) for b in ns.items.values()))]
        with self._lock:
            names += [t for t in self._touched if self._lookup(t) is None]
        if op.match_conditions:
            names = [ns for ns in names if all(_does_match(c, ns) for c in op.match_conditions)]
        if op.max_depth is not None:
            names = sorted({ns[: op.max_depth] for ns in names})
        else:
            names = sorted(names)
        return names[op.offset: op.offset + op.limit]

    def _texts(self, puts: dict[tuple[tuple[str, ...], str], PutOp]) -> dict[str, list[tuple[tuple[str, ...], str, str]]]:
        """Texts to embed, as ``InMemoryStore`` extracts them (one entry per distinct text)."""
        if not (puts and self.index_config and self.embeddings):
            return {}
        out: dict[str, list[tuple[tuple[str, ...], str, str]]] = {}
        for op in puts.values():
            if op.value is None or op.index is False:
                continue
            paths = (self.index_config["__tokenized_fields"] if op.index is None
                     else [(ix, tokenize_path(ix)) for ix in op.index])
            for path, tokens in paths:
                texts = get_text_at_path(op.value, tokens)
                if len(texts) > 1:
                    for i, text in enumerate(texts):
                        out.setdefault(text, []).append((tuple(op.namespace), str(op.key), f"{path}.{i}"))
                elif texts:
                    out.setdefault(texts[0], []).append((tuple(op.namespace), str(op.key), path))
        return out

    def _finish(self, plan: _Plan, texts: dict[str, list[tuple[tuple[str, ...], str, str]]],
                vectors: list[list[float]], query_vectors: dict[str, list[float]]) -> list[Result]:
        for i, (op, candidates) in plan.searches.items():
            page = self._rank(op, candidates, query_vectors)
            plan.results[i] = [self._to_item(ns, key, item, score, search=True) for score, (ns, key, item) in page]
            if op.refresh_ttl:
                for _score, (ns, key, item) in page:
                    plan.refresh(ns.labels, key, item)
        new_vectors: dict[tuple[tuple[str, ...], str], dict[str, list[float]]] = {}
        indices = [index for entries in texts.values() for index in entries]
        if len(indices) != len(vectors):
            raise ValueError(f"Number of embeddings ({len(vectors)}) does not match number of indices ({len(indices)})")
        for vector, (namespace, item_key, path) in zip(vectors, indices, strict=True):
            new_vectors.setdefault((namespace, item_key), {})[path] = [float(x) for x in vector]
        self._write_puts(plan.puts, new_vectors)
        if plan.refreshes and self.ttl_config and self.ttl_config.get("refresh_on_read", True):
            self._refresh(plan.refreshes)
        return plan.results

    def _rank(self, op: SearchOp, candidates: list[tuple[_Ns, str, dict[str, Any]]],
              query_vectors: dict[str, list[float]]) -> list[tuple[float | None, tuple[_Ns, str, dict[str, Any]]]]:
        """The page of results with scores, as ``InMemoryStore`` ranks: by best vector score (max
        pooling) when there is a query and embeddings, then items without vectors; otherwise in
        order."""
        if not candidates:
            return []
        if not (op.query and query_vectors):
            return [(None, cand) for cand in candidates[op.offset: op.offset + op.limit]]
        query = query_vectors[op.query]
        flat_items: list[tuple[_Ns, str, dict[str, Any]]] = []
        flat_vectors: list[list[float]] = []
        scoreless = []
        for cand in candidates:
            vecs = list((cand[2].get("vectors") or {}).values())
            for vec in vecs:
                flat_items.append(cand)
                flat_vectors.append(vec)
            if not vecs:
                scoreless.append(cand)
        scores = _cosine_similarity(query, flat_vectors)
        ranked = sorted(zip(scores, flat_items, strict=True), key=lambda x: x[0], reverse=True)
        seen: set[tuple[tuple[str, ...], str]] = set()
        kept: list[tuple[float | None, tuple[_Ns, str, dict[str, Any]]]] = []
        for score, cand in ranked:
            ident = (cand[0].labels, cand[1])
            if ident in seen:
                continue
            ix = len(seen)
            seen.add(ident)
            if ix >= op.offset + op.limit:
                break
            if ix < op.offset:
                continue
            kept.append((float(score), cand))
        if scoreless and len(kept) < op.limit:
            kept.extend((None, cand) for cand in scoreless[: op.limit - len(kept)])
        return kept

    # -- writing ------------------------------------------------------------------------------

    def _write_puts(self, puts: dict[tuple[tuple[str, ...], str], PutOp],
                    vectors: dict[tuple[tuple[str, ...], str], dict[str, list[float]]]) -> None:
        by_root: dict[str, list[PutOp]] = {}
        exists: dict[tuple[str, ...], bool] = {}
        by_put: list[tuple[str, ...]] = []  # new namespaces given their place in the order by a put
        for (namespace, _key), op in puts.items():
            if namespace not in exists:
                exists[namespace] = self._lookup(namespace) is not None
            if not exists[namespace]:
                # InMemoryStore makes a namespace at its first put or delete in the batch, across
                # roots; the roots are written one after another, so the order is taken here
                with self._lock:
                    if namespace not in self._touched:
                        self._touched[namespace] = SEQUENCE.next()
                        if op.value is not None:
                            by_put.append(namespace)
                if op.value is None:
                    continue  # deleting from a namespace that does not exist writes nothing
            by_root.setdefault(namespace[0], []).append(op)
        try:
            for root, ops in by_root.items():
                self._commit_root(root, lambda ns_map, tx, ops=ops: self._apply(ns_map, tx, ops, vectors),
                                  trigger=_trigger(ops), metadata={"puts": sum(op.value is not None for op in ops),
                                                                   "deletes": sum(op.value is None for op in ops)})
        except BaseException:
            with self._lock:  # a put that wrote nothing makes no namespace
                for namespace in by_put:
                    self._touched.pop(namespace, None)
            raise

    def _apply(self, namespaces: _Namespaces, tx: Transaction, ops: list[PutOp],
               vectors: dict[tuple[tuple[str, ...], str], dict[str, list[float]]]) -> bool:
        now = _now().isoformat()
        changed = False
        for op in ops:
            namespace = tuple(op.namespace)
            key = str(op.key)
            ns_key = _ns_key(namespace)
            ns = namespaces.get(ns_key)
            if op.value is None:
                if ns is not None and key in ns.items:
                    ns.drop(key)
                    changed = True
                continue
            if ns is None:
                with self._lock:
                    seq = self._touched.pop(namespace, None)
                ns = namespaces[ns_key] = _Ns(namespace, seq if seq is not None else SEQUENCE.next())
            old = self._item(ns.items[key]) if key in ns.items else None
            # the store's secrets policy (warn: the push check finds them in the state)
            policy = self.store.core.secrets
            where = f"memory{policy.scanner.key_segment(ns_key, 0)}{policy.scanner.key_segment(key, 1)}.value"
            value = policy.value(dict(op.value), where, [])  # (a key path never prints a credential)
            item: dict[str, Any] = {
                "value": value, "created_at": old["created_at"] if old else now, "updated_at": now,
                "seq": old["seq"] if old else SEQUENCE.next(),
            }
            merged = {**((old or {}).get("vectors") or {}), **vectors.get((namespace, key), {})}
            if merged:
                item["vectors"] = merged  # as InMemoryStore, vectors of earlier puts stay unless replaced
            ttl = getattr(op, "ttl", None)
            if ttl is not None:
                item["ttl"] = ttl
                item["expires_at"] = (_now() + timedelta(minutes=ttl)).isoformat()
            data = encoding.dumps(item, f"{ns_key}/{key}", ordered=True)
            oid = tx.blob(data)
            ns.assign(key, oid)
            self._remember_item(oid, encoding.loads(data, oid))
            changed = True
        return changed

    def _remember_item(self, oid: str, item: dict[str, Any]) -> None:
        with self._lock:
            self._items[oid] = item
            while len(self._items) > 65536:
                self._items.popitem(last=False)

    def _commit_root(self, root: str, change: Any, *, trigger: str, metadata: dict[str, Any]) -> None:
        """One checkpoint on the branch of root label ``root``: ``change(namespaces, tx)`` edits the
        parsed namespaces of the tip read at write time (re-run if another writer moved it). A root
        an earlier version stored on another branch (:func:`_legacy_branch`) is continued on its
        new branch: the first checkpoint there has the old tip as parent and its namespaces."""
        run = self._handle.ensure()
        store = self.store
        branch = _branch(root)
        ref = self._branch_ref(branch)
        legacy = _legacy_branch(root)
        written: list[_Namespaces] = []  # the namespaces the last build wrote

        def build(tx: Transaction) -> Any:
            written.clear()
            tip = store.core.read_ref(ref)
            base = tip
            if tip is None and legacy != branch:
                base = store.core.read_ref(self._branch_ref(legacy))
            # a tip this instance wrote or read is parsed already (kept by tip id: a tip another
            # writer moved the branch to is parsed here)
            parsed = _Root(base) if base is None else self._root_at(branch, base) if base == tip else self._parse(base)
            if base != tip:  # the legacy branch (the root's namespaces only: it may be a kept copy of another)
                namespaces = _Namespaces(parsed, keep=lambda ns: ns.labels[0] == root)
                if not len(namespaces):
                    base = None
            else:
                namespaces = _Namespaces(parsed)
            if not change(namespaces, tx):
                return None
            state = _state_tree(tx, StateWriter(tx.writer), namespaces)
            written.append(namespaces)
            return run.stage_checkpoint(tx, tip, (cpfmt.STATE_TREE, state, MODE_TREE), branch=branch, node="memory",
                                        trigger=trigger, metadata=metadata, fork_from=base if base != tip else None)

        cp = store.core.write(build)
        if cp is not None:
            store.core.remember(cp)
            done = written[0]
            with self._lock:  # the new tip as a parse of it gives it: the next put parses nothing
                self._roots[branch] = _Root(cp.id, done.view(), done.shard_trees, done.members, done.sharded)

    def _refresh(self, refreshes: dict[tuple[tuple[str, ...], str], str]) -> None:
        by_root: dict[str, list[tuple[tuple[str, ...], str]]] = {}
        for namespace, key in refreshes:
            by_root.setdefault(namespace[0], []).append((namespace, key))

        for root, wanted in by_root.items():
            def change(namespaces: _Namespaces, tx: Transaction, wanted: list[Any] = wanted) -> bool:
                changed = False
                for namespace, key in wanted:
                    ns = namespaces.get(_ns_key(namespace))
                    if ns is None or key not in ns.items:
                        continue
                    item = dict(self._item(ns.items[key]))
                    if item.get("ttl") is None:
                        continue
                    item["expires_at"] = (_now() + timedelta(minutes=item["ttl"])).isoformat()
                    ns.assign(key, tx.blob(encoding.dumps(item, key, ordered=True)))
                    changed = True
                return changed

            self._commit_root(root, change, trigger="refresh_ttl", metadata={"refreshed": len(wanted)})

    # -- TTL ----------------------------------------------------------------------------------

    def sweep_ttl(self) -> int:
        """Delete the items whose TTL has expired (one commit per root); returns how many."""
        now = _now()
        removed = 0
        for root in dict.fromkeys(ns.labels[0] for ns, _where in self._all_namespaces()):
            count = [0]

            def change(namespaces: _Namespaces, _tx: Transaction, count: list[int] = count) -> bool:
                count[0] = 0
                for ns in namespaces.values():
                    for key, blob in list(ns.items.items()):
                        expires = self._item(blob).get("expires_at")
                        if isinstance(expires, str) and datetime.fromisoformat(expires) < now:
                            ns.drop(key)
                            count[0] += 1
                return count[0] > 0

            self._commit_root(root, change, trigger="sweep_ttl", metadata={})
            removed += count[0]
        return removed

    def start_ttl_sweeper(self, sweep_interval_minutes: int | None = None) -> threading.Thread | None:
        """Sweep expired items every ``sweep_interval_minutes`` (default: the TTL config's, else 5)
        in a daemon thread, until :meth:`stop_ttl_sweeper`."""
        if self._sweeper is not None and self._sweeper.is_alive():
            return self._sweeper
        interval = sweep_interval_minutes or (self.ttl_config or {}).get("sweep_interval_minutes") or 5
        self._stop.clear()

        def loop() -> None:
            while not self._stop.wait(interval * 60):
                try:
                    self.sweep_ttl()
                except Exception:  # noqa: BLE001 - a failed sweep is retried at the next interval
                    continue

        self._sweeper = threading.Thread(target=loop, name="gitstate-ttl-sweeper", daemon=True)
        self._sweeper.start()
        return self._sweeper

    def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        """Stop the sweeper thread; whether it has stopped."""
        if self._sweeper is None:
            return True
        self._stop.set()
        self._sweeper.join(timeout)
        stopped = not self._sweeper.is_alive()
        if stopped:
            self._sweeper = None
        return stopped


class _Plan:
    """What a batch read and what it will write."""

    def __init__(self) -> None:
        self.results: list[Result] = []
        self.puts: dict[tuple[tuple[str, ...], str], PutOp] = {}
        self.searches: dict[int, tuple[SearchOp, list[tuple[_Ns, str, dict[str, Any]]]]] = {}
        self.refreshes: dict[tuple[tuple[str, ...], str], str] = {}

    def refresh(self, namespace: tuple[str, ...], key: str, item: dict[str, Any]) -> None:
        if item.get("ttl") is not None:
            self.refreshes[(namespace, key)] = item["expires_at"]


def _trigger(ops: Sequence[PutOp]) -> str:
    puts = any(op.value is not None for op in ops)
    deletes = any(op.value is None for op in ops)
    return "put+delete" if puts and deletes else "put" if puts else "delete"


def _does_match(condition: MatchCondition, key: tuple[str, ...]) -> bool:
    """Whether a namespace matches a prefix/suffix condition (``*`` matches any label)."""
    path = condition.path
    if len(key) < len(path):
        return False
    if condition.match_type == "prefix":
        pairs = zip(key, path, strict=False)
    elif condition.match_type == "suffix":
        pairs = zip(reversed(key), reversed(path), strict=False)
    else:
        raise ValueError(f"Unsupported match type: {condition.match_type}")
    return all(p == "*" or k == p for k, p in pairs)


def _compare_values(item_value: Any, filter_value: Any) -> bool:
    """A filter value against an item value, JSONB-like (as ``InMemoryStore`` compares)."""
    if isinstance(filter_value, dict):
        if any(k.startswith("$") for k in filter_value):
            return all(_apply_operator(item_value, k, v) for k, v in filter_value.items())
        if not isinstance(item_value, dict):
            return False
        return all(_compare_values(item_value.get(k), v) for k, v in filter_value.items())
    if isinstance(filter_value, list | tuple):
        return (isinstance(item_value, list | tuple) and len(item_value) == len(filter_value)
                and all(_compare_values(i, f) for i, f in zip(item_value, filter_value, strict=False)))
    return bool(item_value == filter_value)


def _apply_operator(value: Any, operator: str, op_value: Any) -> bool:
    if operator == "$eq":
        return bool(value == op_value)
    if operator == "$gt":
        return float(value) > float(op_value)
    if operator == "$gte":
        return float(value) >= float(op_value)
    if operator == "$lt":
        return float(value) < float(op_value)
    if operator == "$lte":
        return float(value) <= float(op_value)
    if operator == "$ne":
        return bool(value != op_value)
    raise ValueError(f"Unsupported operator: {operator}")


def _cosine_similarity(x: list[float], ys: list[list[float]]) -> list[float]:
    """Cosine similarity of ``x`` with each of ``ys``, computed as ``InMemoryStore`` computes it
    (with NumPy when it is installed), so scores are equal."""
    if not ys:
        return []
    if util.find_spec("numpy") is not None:
        import numpy as np

        xa, ya = np.array(x), np.array(ys)
        x_norm = np.linalg.norm(xa)
        y_norm = np.linalg.norm(ya, axis=1)
        mask = y_norm != 0
        out = np.zeros_like(y_norm)
        out[mask] = np.dot(ya[mask], xa) / (y_norm[mask] * x_norm)
        return cast(list[float], out.tolist())
    scores = []
    for y in ys:
        dot = sum(a * b for a, b in zip(x, y, strict=False))
        n1 = sum(a * a for a in x) ** 0.5
        n2 = sum(a * a for a in y) ** 0.5
        scores.append(dot / (n1 * n2) if n1 > 0 and n2 > 0 else 0.0)
    return scores
