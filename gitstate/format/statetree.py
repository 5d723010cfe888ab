"""State as a git tree, for structural sharing.

A state mapping becomes a tree whose entries are named after its keys (``names.encode_component``)
with a suffix saying what the entry holds:

- ``<key>.cbor``  a blob: the CBOR of the value (maps in their own key order);
- ``<key>.map/``  a tree: a nested mapping with string keys, split the same way (used when the
  mapping is large or holds something large);
- ``<key>.list/`` a tree: a long list in chunks of :data:`CHUNK` items, each chunk a blob
  ``<index>.cbor`` holding a CBOR array (``index`` = position of its first item, 10 digits); when a
  list has more than :data:`FANOUT` chunks they are grouped into subtrees ``<index>/`` of
  ``FANOUT`` entries, recursively;
- ``.order.cbor`` a blob, only when the mapping's keys are not in the order of their entries (git
  sorts a tree's entries by name): the CBOR array of the keys in the mapping's order. Readers
  return the mapping's keys in that order (format 2; no key's entry can have this name, as encoded
  keys never hold ``.``).

Chunks are aligned to the start of the list, so appending to a list rewrites only its last chunk and
the trees above it: a growing message history costs about the appended item per checkpoint. Equal
values give equal blobs, so an unchanged key keeps its id. The layout is a pure function of the
value (deterministic), documented in docs/FORMAT.md."""

from __future__ import annotations

import hashlib
import marshal
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pygit2

from gitstate.errors import CorruptObjectError
from gitstate.format import encoding
from gitstate.format.names import decode_component, encode_component
from gitstate.git.objects import MODE_BLOB, MODE_TREE, ObjectWriter, TreeEntry
from gitstate.git.reader import ObjectReader, TreeData

CHUNK = 32  # items per list chunk
FANOUT = 64  # entries per list subtree level
MAP_SPLIT_KEYS = 16  # a nested mapping with this many keys gets its own tree
MAX_MAP_DEPTH = 32  # .map/ trees nest at most this deep; deeper mappings stay in their parent's blob

LEAF = ".cbor"
MAP = ".map"
LIST = ".list"
ORDER = ".order.cbor"  # the key order of a mapping tree (an encoded key never holds ".")


def _is_long_list(value: Any) -> bool:
    return isinstance(value, list | tuple) and len(value) > CHUNK


def _splits(value: Any, depth: int = 0) -> bool:
    """Whether a nested mapping is stored as its own tree rather than one blob."""
    if not isinstance(value, dict) or not value or depth > 8:
        return False
    if not all(isinstance(k, str) for k in value):
        return False
    if len(value) >= MAP_SPLIT_KEYS:
        return True
    return any(_is_long_list(v) or _splits(v, depth + 1) for v in value.values())


def _entry_order(entry: TreeEntry) -> bytes:
    """Where git puts an entry in a tree: by name, a tree's name compared as if it ended in "/"."""
    name, _oid, mode = entry
    raw = name.encode("utf-8", "surrogateescape")
    return raw + b"/" if mode == MODE_TREE else raw


@dataclass(frozen=True)
class Written:
    """A state value already written in the store's layout: ``suffix`` is :data:`LEAF`, :data:`MAP`
    or :data:`LIST` and ``oid`` its blob or tree. A mapping given to :meth:`StateWriter.mapping`
    may hold these for values its writer built incrementally (e.g. a list tree extended by one
    chunk), so they are neither encoded nor hashed again."""

    suffix: str
    oid: str

    @property
    def mode(self) -> int:
        """The tree entry mode of the value."""
        return MODE_BLOB if self.suffix == LEAF else MODE_TREE


class StateWriter:
    """Writes state values as trees and blobs through an :class:`ObjectWriter`."""

    def __init__(self, writer: ObjectWriter) -> None:
        self.w = writer

    def leaf(self, value: Any, path: str) -> str:
        """Blob id of one value, reusing the id of an identical value written before.

        The cache key is a digest of ``marshal.dumps(value)``: marshal is exact about types (``1``,
        ``1.0`` and ``True`` differ) and fast, so a hit means the same value and therefore the same
        bytes (marshal writes a dict's items in their order, as :func:`encoding.dumps` with
        ``ordered`` does). Nothing is ever unmarshalled."""
        key = None
        try:
            key = hashlib.blake2b(marshal.dumps(value), digest_size=20).digest()
        except (ValueError, TypeError):
            pass  # a type marshal does not know: encode (and validate) without the cache
        if key is not None:
            hit = self.w.cached_value(key)
            if hit is not None:
                return hit
        oid = self.w.blob(encoding.dumps(value, path, ordered=True))
        if key is not None:
            self.w.cache_value(key, oid)
        return oid

    def mapping(self, value: Mapping[str, Any], path: str = "", depth: int = 0) -> str:
        """Tree id of a mapping with string keys; its key order is kept (an :data:`ORDER` entry
        when it is not the order of the tree's entries)."""
        entries: list[TreeEntry] = []
        for key, item in value.items():
            sub = f"{path}.{key}" if path else key
            if not key.isascii():  # a key that names a tree entry is checked as a map key in a value is
                encoding.check_value({key: None}, path)
            name = encode_component(key)
            if isinstance(item, Written):
                entries.append((name + item.suffix, item.oid, item.mode))
            elif _is_long_list(item):
                entries.append((name + LIST, self.list(item, sub), MODE_TREE))
            elif depth < MAX_MAP_DEPTH and _splits(item):
                entries.append((name + MAP, self.mapping(item, sub, depth + 1), MODE_TREE))
            else:
                entries.append((name + LEAF, self.leaf(item, sub), MODE_BLOB))
        if entries != sorted(entries, key=_entry_order):
            entries.append((ORDER, self.leaf(list(value), path + ".<order>" if path else "<order>"), MODE_BLOB))
        return self.w.tree(entries)

    def list(self, items: list[Any] | tuple[Any, ...], path: str) -> str:
        """Tree id of a long list, chunked as described in the module docstring."""
        chunks = [self.leaf(list(items[start:start + CHUNK]), f"{path}[{start}:]")
                  for start in range(0, len(items), CHUNK)]
        return self.list_tree(chunks)

    def list_tree(self, chunks: Sequence[str]) -> str:
        """Tree id of a long list from the blob ids of its chunks (each a CBOR array of
        :data:`CHUNK` items but the last), grouped as described in the module docstring. A full
        group of chunks written before is taken from the writer's cache, neither listed nor hashed
        again: a list that grows at its end costs its last group."""
        if len(chunks) <= FANOUT:
            return self.w.tree(_chunk_entries(0, chunks))
        level: list[TreeEntry] = [(f"{g * CHUNK:010d}", self._chunk_group(g, chunks[g:g + FANOUT]), MODE_TREE)
                                  for g in range(0, len(chunks), FANOUT)]
        while len(level) > FANOUT:
            level = [(level[g][0], self.w.tree(level[g:g + FANOUT]), MODE_TREE) for g in range(0, len(level), FANOUT)]
        return self.w.tree(level)

    def _chunk_group(self, start: int, ids: Sequence[str]) -> str:
        """Tree id of the group of chunks ``ids``, the first being chunk number ``start``."""
        if len(ids) < FANOUT:
            return self.w.tree(_chunk_entries(start, ids))
        key = ("list-group", start, *ids)  # exactly what the tree holds: names follow from start
        hit = self.w.cached_value(key)
        if hit is not None:
            return hit
        oid = self.w.tree(_chunk_entries(start, ids))
        self.w.cache_value(key, oid)
        return oid


def _chunk_entries(start: int, ids: Sequence[str]) -> list[TreeEntry]:
    return [(f"{(start + i) * CHUNK:010d}{LEAF}", oid, MODE_BLOB) for i, oid in enumerate(ids)]


class _BlobCache:
    """Bytes of large blobs already read (and hash-verified by libgit2), by id.

    An id names its content, so a hit is exact in any repository; only reads fill it (never writes),
    and only blobs of :attr:`MIN_SIZE` bytes or more (list chunks), within :attr:`BUDGET` bytes.
    Reading a head whose list grew by one item then costs one object read, not one per chunk (each
    read of an 11 kB chunk costs ~100-200 µs in libgit2, mostly SHA-1 verification and pack lookup).
    Values are still decoded on every access, so callers always get a fresh copy."""

    MIN_SIZE = 1024
    BUDGET = 32 << 20

    def __init__(self) -> None:
        self._data: OrderedDict[str, bytes] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()

    def get(self, key: str) -> bytes | None:
        with self._lock:
            data = self._data.get(key)
            if data is not None:
                self._data.move_to_end(key)
            return data

    def put(self, key: str, data: bytes) -> None:
        with self._lock:
            if key in self._data:
                return
            self._data[key] = data
            self._size += len(data)
            while self._size > self.BUDGET:
                _, old = self._data.popitem(last=False)
                self._size -= len(old)


_BLOBS = _BlobCache()


MAX_TREE_DEPTH = 64  # nested trees a reader follows: writers nest at most 32 .map/ levels + a .list/


class StateReader:
    """Reads state trees back into Python values, through the guarded reader."""

    def __init__(self, source: pygit2.Repository | ObjectReader) -> None:
        self.reader = source if isinstance(source, ObjectReader) else ObjectReader(source)

    def _blob(self, oid: str | pygit2.Oid) -> bytes:
        key = str(oid)
        hit = _BLOBS.get(key)
        if hit is not None:
            return hit
        data = self.reader.blob(key)
        if len(data) >= _BlobCache.MIN_SIZE:
            _BLOBS.put(key, data)
        return data

    def raw_blob(self, oid: str | pygit2.Oid) -> bytes:
        """The bytes of a blob (checked: present, undamaged, of type blob)."""
        return self._blob(oid)

    def blob_value(self, oid: str | pygit2.Oid) -> Any:
        """Decode one leaf blob."""
        return encoding.loads(self._blob(oid), str(oid))

    def tree(self, oid: str | pygit2.Oid) -> TreeData:
        """A tree object, parsed (a corrupt-object error if it is not one)."""
        return self.reader.tree(oid)

    def entries(self, oid: str | pygit2.Oid) -> dict[str, tuple[str, str]]:
        """The keys of a mapping tree: ``{key: (kind, id)}`` with kind ``cbor``/``map``/``list``,
        in the mapping's order (its :data:`ORDER` entry, else the order of the tree's entries)."""
        out: dict[str, tuple[str, str]] = {}
        order: str | None = None
        for entry in self.tree(oid):
            name = entry.name
            if name == ORDER:
                if entry.type_str != "blob":
                    raise CorruptObjectError(str(oid), f"state entry {name!r} has the wrong object type")
                order = entry.id
                continue
            stem, dot, suffix = name.rpartition(".")
            try:
                key = decode_component(stem)
            except ValueError as exc:
                raise CorruptObjectError(str(oid), f"bad state entry name {name!r}") from exc
            if not dot or "." + suffix not in (LEAF, MAP, LIST):
                raise CorruptObjectError(str(oid), f"bad state entry name {name!r}")
            if (suffix == "cbor") != (entry.type_str == "blob") or entry.type_str not in ("blob", "tree"):
                raise CorruptObjectError(str(oid), f"state entry {name!r} has the wrong object type")
            out[key] = (suffix, entry.id)
        return out if order is None else self._ordered(oid, out, order)

    def _ordered(self, oid: str | pygit2.Oid, found: dict[str, tuple[str, str]], order: str) -> dict[str, tuple[str, str]]:
        """``found`` in the order the :data:`ORDER` blob ``order`` gives: an array holding each key
        of the tree once and nothing else."""
        keys = self.blob_value(order)
        if not isinstance(keys, list) or len(keys) != len(found) or not all(isinstance(k, str) for k in keys):
            raise CorruptObjectError(str(oid), f"{ORDER} is not the list of the mapping's keys")
        try:
            out = {key: found[key] for key in keys}
        except KeyError:
            out = {}
        if len(out) != len(found):
            raise CorruptObjectError(str(oid), f"{ORDER} is not the list of the mapping's keys")
        return out

    def value(self, kind: str, oid: str, depth: int = 0) -> Any:
        """Decode one entry of a mapping tree."""
        if kind == "cbor":
            return self.blob_value(oid)
        if kind == "map":
            return self.mapping(oid, depth + 1)
        return self.list(oid, depth + 1)

    def mapping(self, oid: str | pygit2.Oid, depth: int = 0) -> dict[str, Any]:
        """Decode a mapping tree."""
        _check_depth(oid, depth)
        return {key: self.value(kind, sub, depth) for key, (kind, sub) in self.entries(oid).items()}

    def list_chunks(self, oid: str | pygit2.Oid, depth: int = 0) -> list[str]:
        """The blob ids of a list tree's chunks, in order (nothing is decoded)."""
        _check_depth(oid, depth)
        out: list[str] = []
        for entry in self.tree(oid):
            if entry.type_str == "tree":
                out.extend(self.list_chunks(entry.id, depth + 1))
            elif entry.type_str == "blob":
                out.append(entry.id)
            else:
                raise CorruptObjectError(str(oid), f"unexpected {entry.type_str} in a list tree")
        return out

    def chunk(self, oid: str | pygit2.Oid) -> list[Any]:
        """Decode one list chunk (a CBOR array)."""
        chunk = self.blob_value(oid)
        if not isinstance(chunk, list):
            raise CorruptObjectError(str(oid), "list chunk is not an array")
        return chunk

    def list(self, oid: str | pygit2.Oid, depth: int = 0) -> list[Any]:
        """Decode a chunked list tree."""
        _check_depth(oid, depth)
        items: list[Any] = []
        for entry in self.tree(oid):
            if entry.type_str == "tree":
                items.extend(self.list(entry.id, depth + 1))
            elif entry.type_str == "blob":
                chunk = self.blob_value(entry.id)
                if not isinstance(chunk, list):
                    raise CorruptObjectError(entry.id, "list chunk is not an array")
                items.extend(chunk)
            else:
                raise CorruptObjectError(str(oid), f"unexpected {entry.type_str} in a list tree")
        return items


def _check_depth(oid: str | pygit2.Oid, depth: int) -> None:
    if depth > MAX_TREE_DEPTH:
        raise CorruptObjectError(str(oid), f"state trees nested deeper than {MAX_TREE_DEPTH} levels")
