"""Channel values of LangGraph checkpoints as git objects, with structural sharing.

A value is serialised with the saver's serde (``dumps_typed`` → ``(type, bytes)``) and stored as a
blob ``<type> NUL <bytes>`` (entry ``<channel>.v``). A ``list`` whose items all serialise to msgpack
is stored item by item instead (entry ``<channel>.l/``): chunks of :data:`CHUNK` items aligned to
the start of the list, each chunk a blob holding the msgpack array of its items, named
``<index of first item, 10 digits>``; beyond :data:`FANOUT` chunks they are grouped into subtrees of
``FANOUT`` entries, recursively. Appending to a list rewrites only its last chunk and the trees above
it, so a growing message history costs about the appended message per checkpoint. Reading joins the
chunks back into one msgpack array (msgpack arrays concatenate item by item) and decodes it once.
The layout's names and byte helpers live in :mod:`gitstate.format.lgtree` and
:mod:`gitstate.format.lgserde`, which also read it for display.

Nothing is ever unpickled here: decoding goes through the saver's serde, whose policy applies."""

from __future__ import annotations

import copy
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pygit2.enums import ObjectType

from gitstate.errors import CorruptObjectError, GitStateError, UnsafeValueError
from gitstate.format.lgserde import MSGPACK, array_header, parse_typed, split_array, typed_blob
from gitstate.format.lgtree import CHUNK, FANOUT, LIST, VALUE
from gitstate.format.names import decode_component, encode_component
from gitstate.format.statetree import MAX_TREE_DEPTH
from gitstate.git.deflate import AppendDeflater
from gitstate.git.objects import MODE_BLOB, MODE_TREE, ObjectWriter, TreeEntry, entry_bytes
from gitstate.git.reader import ObjectReader

MEMO_LISTS = 256  # lists remembered for appending (one per thread, namespace and channel)
MEMO_BYTES = 64 << 20  # at most this many bytes of encoded lists remembered (see _ListMemo.encoded)

Typed = tuple[str, bytes]
#: ``scrub(kind, data, start, count)``: the bytes to store of a serde-typed value (the store's
#: secrets policy); for a msgpack array whose first items were checked before, ``count`` items
#: from byte ``start`` on are the new ones (``count`` is ``None``: all of ``data`` is new).
Scrub = Callable[[str, bytes, int, "int | None"], bytes]
# per chunk size (a constant, but a test may patch it): the name of chunk i of a list (its first
# item's index, 10 digits), made once
_CHUNK_NAMES: dict[int, list[str]] = {}
_CHUNK_NAMES_LOCK = threading.Lock()


def decode(loads: Callable[[Typed], Any], typed: Typed, oid: str) -> Any:
    """``loads(typed)``, with every failure naming the object ``oid`` the value came from: a stored
    value that does not decode is damage (:class:`CorruptObjectError`); one naming a type the
    serializer refuses to build is a policy refusal (:class:`~gitstate.errors.UnsafeValueError`).
    Never a crash."""
    try:
        return loads(typed)
    except UnsafeValueError as exc:
        raise UnsafeValueError(oid, exc.type_name) from None
    except GitStateError:
        raise
    except Exception as exc:  # the serde's own errors (unknown type, bad msgpack, a failing constructor)
        raise CorruptObjectError(oid, f"value does not decode ({type(exc).__name__}: {exc})") from exc


def _const(value: bytes) -> Callable[[], bytes]:
    return lambda: value


@dataclass
class _ListMemo:
    """What was written last for one list channel: the stored tree, its chunk ids, its last chunk
    compressed so far, and the chunk tree's serialised entries."""

    tree: str
    chunks: list[str]
    deflater: AppendDeflater | None = None  # the last chunk's bytes compressed so far
    entry_bytes: list[bytes] = field(default_factory=list)  # the chunk tree's entries, serialised
    # the items' msgpack bytes (without the array header), if kept: a view of the list's whole
    # encoding (no copy of it)
    encoded: memoryview | None = None


class ByteLRU:
    """A small thread-safe LRU keyed by object id, bounded by total payload bytes."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.size = 0
        self.data: OrderedDict[str, tuple[int, bytes]] = OrderedDict()
        self.lock = threading.Lock()

    def get(self, key: str) -> tuple[int, bytes] | None:
        with self.lock:
            hit = self.data.get(key)
            if hit is not None:
                self.data.move_to_end(key)
            return hit

    def put(self, key: str, value: tuple[int, bytes]) -> None:
        with self.lock:
            if key in self.data:
                return
            self.data[key] = value
            self.size += len(value[1])
            while self.size > self.max_bytes and self.data:
                _k, (_, old) = self.data.popitem(last=False)
                self.size -= len(old)


class LRU:
    """A small thread-safe LRU of immutable values (parsed objects) keyed by object id, bounded by
    count."""

    def __init__(self, max_items: int) -> None:
        self.max_items = max_items
        self.data: OrderedDict[str, Any] = OrderedDict()
        self.lock = threading.Lock()

    def get(self, key: str) -> Any:
        """The value of ``key``, or ``None``."""
        with self.lock:
            hit = self.data.get(key)
            if hit is not None:
                self.data.move_to_end(key)
            return hit

    def put(self, key: str, value: Any) -> None:
        """Remember ``value`` under ``key``."""
        with self.lock:
            self.data[key] = value
            self.data.move_to_end(key)
            while len(self.data) > self.max_items:
                self.data.popitem(last=False)


class ValueCodec:
    """Writes and reads channel values for one saver (``dumps``/``loads`` are the serde's typed
    methods). Caches: the last list written per (thread, namespace, channel), and raw chunk bytes."""

    def __init__(self, dumps: Callable[[Any], Typed], loads: Callable[[Typed], Any],
                 cache_bytes: int = 64 << 20, check: Callable[[str, bytes], None] | None = None) -> None:
        self.dumps = dumps
        self.loads = loads
        # ``check``: the serde's write-time refusal (see StrictSerializer.check_typed), when
        # ``dumps`` does not run it itself; applied to what is stored anew, not to unchanged chunks
        self.check = check
        self._memo: OrderedDict[tuple[str, str, str], _ListMemo] = OrderedDict()  # bounded: MEMO_LISTS
        self._memo_bytes = [0]  # of the memos' ``encoded`` (bounded: MEMO_BYTES); a list: clones share it
        self._memo_lock = threading.Lock()
        self._chunks = ByteLRU(cache_bytes)
        self._trees: OrderedDict[str, list[tuple[str, str, int]]] = OrderedDict()
        self._trees_lock = threading.Lock()
        # chunks whose stored bytes are not the serde's (a credential was redacted): never taken as
        # a checked prefix of a chunk that grew
        self._scrubbed: set[str] = set()

    def with_serde(self, dumps: Callable[[Any], Typed], loads: Callable[[Typed], Any],
                   check: Callable[[str, bytes], None] | None = None) -> ValueCodec:
        """A codec using other serde methods but sharing this one's caches (they hold only bytes
        and ids)."""
        clone = copy.copy(self)
        clone.dumps, clone.loads, clone.check = dumps, loads, check
        return clone

    def forget(self, thread_id: str) -> None:
        """Drop the write memos of a thread (after it was deleted or rewritten)."""
        with self._memo_lock:
            for key in [k for k in self._memo if k[0] == thread_id]:
                self._memo_bytes[0] -= len(self._memo.pop(key).encoded or b"")

    # -- writing ------------------------------------------------------------------------------

    def write(self, w: ObjectWriter, key: tuple[str, str, str], value: Any, parent: TreeEntry | None,
              scrub: Scrub | None = None) -> TreeEntry:
        """Store one channel value; ``parent`` is the entry the same channel had in the parent
        checkpoint (lets an appended list reuse its chunks); ``scrub`` makes the bytes stored of
        what is new (see :data:`Scrub`). Returns the values-tree entry."""
        name = encode_component(key[2])
        kind, data = self.dumps(value)
        if type(value) is list and value and kind == MSGPACK:
            tree = self._write_list(w, key, value, bytes(data), parent, scrub)
            if tree is not None:
                return (name + LIST, tree, MODE_TREE)
        if self.check is not None:
            self.check(kind, data)
        if scrub is not None:
            data = scrub(kind, bytes(data), 0, None)
        return (name + VALUE, w.blob(typed_blob((kind, data))), MODE_BLOB)

    def _write_list(self, w: ObjectWriter, key: tuple[str, str, str], items: list[Any], whole: bytes,
                    parent: TreeEntry | None, scrub: Scrub | None = None) -> str | None:
        """Store a list chunk by chunk (``whole``: its msgpack encoding); ``None`` when a chunk does
        not serialise to msgpack.

        The whole list is encoded again on every write, as the other LangGraph savers serialise it
        (the items may have been changed in place: an earlier message edited by a node is the same
        Python object with other contents). When the list written last (the parent's) encodes to
        a prefix of it (items were only appended), every chunk before that list's last one keeps
        its blob; otherwise each chunk is encoded and compared on its own, and one whose bytes are
        unchanged keeps its blob too (not hashed, checked, compressed or stored again). The last
        chunk's compression goes on from the previous one's."""
        with self._memo_lock:
            memo = self._memo.get(key)
        if memo is not None and (parent is None or parent[1] != memo.tree):
            memo = None
        total = len(items)
        head = array_header(total)
        if not whole.startswith(head):
            return None
        old = memo.chunks if memo is not None else []
        first = 0  # chunks known unchanged without encoding them apart
        if memo is not None and memo.encoded is not None and whole.startswith(memo.encoded, len(head)):
            first = max(len(old) - 1, 0)
        chunks: list[str] = list(old[:first])
        kept = first  # leading chunks unchanged since the memo's tree (their tree entries are reused)
        deflater: AppendDeflater | None = None
        for number, offset in enumerate(range(first * CHUNK, total, CHUNK), start=first):
            part = items[offset:offset + CHUNK]
            kind, data = self.dumps(part)
            if kind != MSGPACK:
                return None
            data = bytes(data)
            header = array_header(len(part))
            if not data.startswith(header):
                return None
            final = offset + CHUNK >= total
            previous = old[number] if number < len(old) else None
            if previous is not None and self._holds(previous, data, len(header)):
                oid = previous
                if final and memo is not None and number == len(old) - 1:
                    deflater = memo.deflater
            else:
                body = data[len(header):]
                if self.check is not None:
                    self.check(kind, data)
                stored = data
                if scrub is not None:
                    stored = self._scrub(scrub, kind, data, body, len(header), len(part), previous)
                stream: bytes | None = None
                if final and stored is data:
                    reuse = memo.deflater if memo is not None and number == len(old) - 1 else None
                    deflater = self._deflater(reuse, body)
                    stream = deflater.stream(header)
                oid = w.blob(stored, _const(stream) if stream is not None else None)
                if stored is not data:
                    if len(self._scrubbed) > 65536:
                        self._scrubbed.clear()
                    self._scrubbed.add(oid)
                    body = stored[len(header):]
                self._chunks.put(oid, (len(part), body))
            if kept == number and oid == previous:
                kept += 1
            chunks.append(oid)
        known = memo.entry_bytes[:kept] if memo is not None else []
        tree, serialised = self._chunk_tree(w, chunks, known)
        encoded = memoryview(whole)[len(head):] if len(whole) <= MEMO_BYTES // 8 else None
        with self._memo_lock:
            replaced = self._memo.pop(key, None)
            if replaced is not None:
                self._memo_bytes[0] -= len(replaced.encoded or b"")
            self._memo[key] = _ListMemo(tree, chunks, deflater, serialised, encoded)
            self._memo_bytes[0] += len(encoded or b"")
            while len(self._memo) > MEMO_LISTS or (self._memo_bytes[0] > MEMO_BYTES and len(self._memo) > 1):
                _key, dropped = self._memo.popitem(last=False)
                self._memo_bytes[0] -= len(dropped.encoded or b"")
        return tree

    def _scrub(self, scrub: Scrub, kind: str, data: bytes, body: bytes, head: int, count: int,
               previous: str | None) -> bytes:
        """``scrub`` of a chunk: only its items after those of ``previous`` (the chunk it grew
        from, stored as the serde wrote it) when they are a prefix of it, else all of it."""
        if previous is not None and previous not in self._scrubbed:
            hit = self._chunks.get(previous)
            if hit is not None and hit[0] < count and body.startswith(hit[1]):
                return scrub(kind, data, head + len(hit[1]), count - hit[0])
        return scrub(kind, data, 0, None)

    def _holds(self, oid: str, data: bytes, head: int) -> bool:
        """Whether the chunk ``oid`` is known (cached) to hold exactly ``data`` after its first
        ``head`` bytes (compared in place: no copy)."""
        hit = self._chunks.get(oid)
        return hit is not None and len(hit[1]) + head == len(data) and data.endswith(hit[1])

    @staticmethod
    def _deflater(known: AppendDeflater | None, body: bytes) -> AppendDeflater:
        """A deflater holding ``body``: ``known`` (the previous last chunk's) with the rest appended
        when what it holds is a prefix of ``body`` (an append), else a new one."""
        if known is not None:
            held = known.joined()
            if body.startswith(held):
                known.append(body[len(held):])
                return known
        deflater = AppendDeflater()
        deflater.append(body)
        return deflater

    def _chunk_tree(self, w: ObjectWriter, chunks: list[str], known: list[bytes]) -> tuple[str, list[bytes]]:
        """The tree of ``chunks`` (and the serialised entries of one level of them); ``known``:
        the serialised entries of a prefix of ``chunks``, from the list's previous tree."""
        size = CHUNK
        names = _CHUNK_NAMES.get(size)
        if names is None or len(names) < len(chunks):
            with _CHUNK_NAMES_LOCK:  # (only ever appended to: entries read without it never change)
                names = _CHUNK_NAMES.setdefault(size, [])
                while len(names) < len(chunks):
                    names.append(f"{len(names) * size:010d}")
        level: list[TreeEntry] = [(names[i], oid, MODE_BLOB) for i, oid in enumerate(chunks)]
        if len(level) <= FANOUT:
            # names of one width and one mode: already in git's order, and the entries the
            # previous tree had are serialised already
            serialised = known + [entry_bytes(*e) for e in level[len(known):]]
            oid = w.write(ObjectType.TREE, b"".join(serialised))
            self._remember_tree(oid, level)
            return oid, serialised
        while len(level) > FANOUT:
            level = [(level[g][0], self.tree(w, level[g:g + FANOUT]), MODE_TREE)
                     for g in range(0, len(level), FANOUT)]
        return self.tree(w, level), []

    def tree(self, w: ObjectWriter, entries: list[TreeEntry]) -> str:
        """Write a tree and remember its entries (so reading it back costs no object lookup)."""
        oid = w.tree(entries)
        ordered = sorted(entries, key=lambda e: e[0] + "/" if e[2] == MODE_TREE else e[0])
        self._remember_tree(oid, [(n, o, int(m)) for n, o, m in ordered])
        return oid

    def _remember_tree(self, oid: str, entries: list[TreeEntry]) -> None:
        """Cache a tree's entries, in git's order."""
        with self._trees_lock:
            self._trees[oid] = entries
            if len(self._trees) > 16384:
                self._trees.popitem(last=False)

    # -- reading ------------------------------------------------------------------------------

    def read(self, reader: ObjectReader, name: str, oid: str, mode: int,
             decoded: dict[str, list[Any]] | None = None) -> tuple[str, Any]:
        """Decode one values-tree entry into ``(channel, value)``. ``decoded`` (optional) caches
        decoded chunks by id for the duration of one listing, so checkpoints sharing chunks share
        their decoded items."""
        if name.endswith(LIST) and mode == MODE_TREE:
            return decode_component(name[: -len(LIST)]), self._read_list(reader, oid, decoded)
        if name.endswith(VALUE) and mode != MODE_TREE:
            data = reader.blob(oid)
            return decode_component(name[: -len(VALUE)]), decode(self.loads, parse_typed(data, oid), oid)
        raise CorruptObjectError(oid, f"unexpected entry {name!r} in a values tree")

    def _chunk(self, reader: ObjectReader, oid: str) -> tuple[int, bytes]:
        hit = self._chunks.get(oid)
        if hit is None:
            hit = split_array(reader.blob(oid), oid)
            self._chunks.put(oid, hit)
        return hit

    def entries(self, reader: ObjectReader, oid: str) -> list[tuple[str, str, int]]:
        """``(name, id, mode)`` of a tree's entries, cached by tree id (trees never change)."""
        with self._trees_lock:
            hit = self._trees.get(oid)
            if hit is not None:
                self._trees.move_to_end(oid)
                return hit
        out = [(e.name, e.id, e.filemode) for e in reader.tree(oid)]
        with self._trees_lock:
            self._trees[oid] = out
            if len(self._trees) > 16384:
                self._trees.popitem(last=False)
        return out

    def _chunk_ids(self, reader: ObjectReader, oid: str, out: list[str], depth: int = 0) -> None:
        if depth > MAX_TREE_DEPTH:
            raise CorruptObjectError(oid, f"list chunk trees nested deeper than {MAX_TREE_DEPTH} levels")
        for _name, sub, mode in self.entries(reader, oid):
            if mode == MODE_TREE:
                self._chunk_ids(reader, sub, out, depth + 1)
            else:
                out.append(sub)

    def _read_list(self, reader: ObjectReader, oid: str, decoded: dict[str, list[Any]] | None) -> list[Any]:
        ids: list[str] = []
        if decoded is not None:
            self._chunk_ids(reader, oid, ids)
            items: list[Any] = []
            for cid in ids:
                part = decoded.get(cid)
                if part is None:
                    count, data = self._chunk(reader, cid)
                    part = decode(self.loads, (MSGPACK, array_header(count) + data), cid)
                    decoded[cid] = part
                items.extend(part)
            return items
        whole = self._chunks.get("list:" + oid)  # the complete msgpack array of the list
        if whole is None:
            self._chunk_ids(reader, oid, ids)
            parts = [self._chunk(reader, cid) for cid in ids]
            total = sum(c for c, _ in parts)
            whole = (total, b"".join([array_header(total), *(d for _, d in parts)]))
            self._chunks.put("list:" + oid, whole)
        value = decode(self.loads, (MSGPACK, whole[1]), oid)
        if not isinstance(value, list):
            raise CorruptObjectError(oid, "list chunks do not decode to a list")
        return value
