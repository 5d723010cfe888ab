"""Writing a transaction's objects as one small pack, and looking after gitstate's packs.

One write transaction's new objects become ONE pack + ``.idx`` (two file creations) instead of one
loose file per object. :func:`write_pack` is hand-written because it is on every checkpoint's path:
``scripts/bench_packs.py`` times it against loose files, libgit2's writes and ``git index-pack`` of
the same pack, which multiplies the cost of a transaction's pack by 10-16 (a process start, 4 ms or
more on the 2-core test machine: more than a whole step of ``scripts/bench_langgraph.py``).
Merging packs is git's work (``git pack-objects``, see :mod:`gitstate.store.housekeeping`); this
module only plans merges (:func:`geometric_plan`) and removes the packs merged away.

Formats (git's ``Documentation/gitformat-pack.txt``): a version-2 pack of whole objects (types 1-4,
never deltas), each a type/size varint header and the zlib stream of the body; its version-2
``.idx`` is byte for byte what ``git index-pack`` writes for it (the tests compare them), 64-bit
offsets included. Ids are trusted, not hashed again: an id that does not match its body makes a
pack that ``git fsck`` reports.

Files are installed as git installs them: written to ``tmp_pack_*`` / ``tmp_idx_*`` (read-only,
optionally flushed), the ``.pack`` renamed into place and the ``.idx`` last, since readers find
packs through their ``.idx``. The name is ``pack-<hex of the pack's SHA-1 trailer>``, so identical
packs have identical names: an installed one is only freshened (its mtime, as git freshens an
object it reuses). Writers need no lock; :func:`remove_packs` and :func:`remove_orphans` delete
files, so callers run them under housekeeping's lock.

Errors: bad arguments raise :class:`~gitstate.errors.UsageError`; a damaged ``.idx`` raises
:class:`~gitstate.errors.CorruptObjectError` whose ``oid`` is its path; any other ``OSError`` of
:func:`write_pack` becomes :class:`~gitstate.errors.StoreWriteError`.

An open ``pygit2.Repository`` (libgit2 1.9) finds a pack written after it opened at the first miss
(it rescans ``objects/pack``), but never forgets one: a handle that outlives merges keeps every
merged-away pack open, its disk space held and its lookups slower (``scripts/bench_packs.py``:
``id in odb`` about 10 times a fresh handle's after 200 writes and their merges). Only a new object
database drops them: ``repo.set_odb(pygit2.Odb(objects_dir))`` (``tests/git/test_packs.py::
test_libgit2_*`` assert both).
"""

from __future__ import annotations

import hashlib
import operator
import os
import re
import secrets
import stat
import struct
import time
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from gitstate.errors import CorruptObjectError, GitStateError, StoreWriteError, UsageError
from gitstate.git import deflate, lockfile, safeopen
from gitstate.git.command import run_git
from gitstate.git.durability import fsync_dir, start_writeback
from gitstate.git.safeopen import write_all

OBJ_COMMIT = 1
OBJ_TREE = 2
OBJ_BLOB = 3
OBJ_TAG = 4
_WHOLE_TYPES = frozenset((OBJ_COMMIT, OBJ_TREE, OBJ_BLOB, OBJ_TAG))

_PACK_HEADER = struct.Struct(">4sII")
_U32 = struct.Struct(">I")
_IDX_MAGIC = b"\xfftOc"
_IDX_HEADER = 8 + 256 * 4
_NAME = re.compile(r"pack-[0-9a-f]{40}\Z")

# Offsets above this go to the 64-bit table. git's default; the tests lower it (git's own
# `index-pack --index-version=2,<offset>` does the same) to exercise the 64-bit path cheaply.
_OFF32_LIMIT = 0x7FFFFFFF

_REMOVE_EXTS = (".idx", ".pack", ".rev", ".bitmap")  # index first: readers find packs by it


@dataclass(frozen=True)
class PackWritten:
    """A pack that :func:`write_pack` installed.

    ``name`` is ``pack-<40 hex>`` (the files are ``<pack_dir>/<name>.pack`` and ``.idx``),
    ``count`` the number of objects, ``oids`` their hex ids in index (sorted) order, and
    ``existed`` whether a pack of that name was already installed (then nothing was written)."""

    name: str
    count: int
    oids: tuple[str, ...]
    existed: bool = False
    keep: tuple[str, int] | None = None  # the .keep held with the pack, and its descriptor (write_pack's ``keep``)


# -- writing ---------------------------------------------------------------------------------------


def write_pack(pack_dir: str, objects: Sequence[tuple[str, int, bytes]], *, fsync: bool = False,
               compression: int = 1, sync_dir: bool = False, keep: bytes | None = None,
               compressed: Mapping[str, bytes] | None = None) -> PackWritten:
    """Write ``objects`` as one version-2 pack with its version-2 index in ``pack_dir``.

    Each object is ``(hex id, type 1-4, body without git's header)``; an id given twice is written
    once. Bodies are compressed by :func:`gitstate.git.deflate.compress` at level ``compression``
    unless ``compressed`` maps the id to its zlib stream already. ``fsync``: both files are flushed
    (``fdatasync``, as git flushes its packs) before they are renamed into place; ``sync_dir``: the
    directory after the renames too, as far as the file system can (``core.fsync=all``).

    ``keep``: a ``<name>.keep`` is created before the ``.pack`` appears (as ``git receive-pack``
    keeps a received pack until its refs move), so ``git repack -a -d`` and ``git gc`` neither
    delete the pack nor drop its objects, unreachable until the caller's refs name them. It holds
    ``keep`` and then an owner record, and is held by flock (:func:`lockfile.create_held`), so
    housekeeping knows the ``.keep`` of a killed writer; the caller releases it
    (:attr:`PackWritten.keep`, with :func:`lockfile.release_held`; ``None`` when one existed)."""
    if not -1 <= compression <= 9:
        raise UsageError(f"compression must be a zlib level from -1 to 9, not {compression}")
    seen: set[str] = set()
    chunks: list[bytes] = []
    index: list[tuple[bytes, int, int]] = []
    offset = _PACK_HEADER.size
    first_head = 0  # the length of the first entry's header (before its zlib stream)
    for oid, kind, body in objects:
        if oid in seen:
            continue
        raw = _raw_oid(oid)
        if kind not in _WHOLE_TYPES:
            raise UsageError(f"object {oid}: type {kind} is not 1-4 (commit, tree, blob, tag)")
        seen.add(oid)
        deflated = compressed.get(oid) if compressed else None
        if deflated is None:
            deflated = deflate.compress(body, compression)
        head = _entry_header(kind, len(body))
        if not chunks:
            first_head = len(head)
        entry = head + deflated
        index.append((raw, offset, zlib.crc32(entry)))
        chunks.append(entry)
        offset += len(entry)
    if not chunks:
        raise UsageError("write_pack needs at least one object")
    header = _PACK_HEADER.pack(b"PACK", 2, len(chunks))
    checksum = _checksum(header, chunks)
    if keep is not None:
        # A transaction's pack is never an existing pack of the same bytes (its objects written
        # again): a `git repack -a -d` that listed that pack as unkept when it started deletes it
        # even after our .keep appears, and leaves out of its own pack what no ref named when it
        # walked, such as the objects our refs are about to name. The first entry's zlib header
        # takes another of its valid forms instead (the level hint, which inflaters ignore): other
        # bytes, checksum and name, the same objects.
        for other in _other_zlib_headers(chunks[0][first_head:first_head + 2]):
            if not os.path.exists(os.path.join(pack_dir, "pack-" + checksum.hex() + ".idx")):
                break
            chunks[0] = chunks[0][:first_head] + other + chunks[0][first_head + 2:]
            index[0] = (index[0][0], index[0][1], zlib.crc32(chunks[0]))
            checksum = _checksum(header, chunks)
    index.sort()
    idx = _idx_bytes(index, checksum)
    name = "pack-" + checksum.hex()
    body = b"".join((header, *chunks, checksum))
    try:
        try:
            tmp_pack, pack_fd = _open_temp(pack_dir, "tmp_pack_", body)
        except FileNotFoundError:
            try:
                os.mkdir(pack_dir)  # not its parents: a deleted repository is not brought back as a shell
            except FileExistsError:
                pass
            tmp_pack, pack_fd = _open_temp(pack_dir, "tmp_pack_", body)
        try:
            tmp_idx, idx_fd = _open_temp(pack_dir, "tmp_idx_", idx)
        except BaseException:
            os.close(pack_fd)
            _unlink(tmp_pack)
            raise
        try:
            if fsync:
                # both files' data go to the disk together, then each is flushed (one wait
                # instead of two in a row; the flushes alone make them durable)
                start_writeback(pack_fd)
                start_writeback(idx_fd)
                os.fdatasync(pack_fd)
                os.fdatasync(idx_fd)
        except BaseException:
            _unlink(tmp_pack)
            _unlink(tmp_idx)
            raise
        finally:
            os.close(pack_fd)
            os.close(idx_fd)
        existed, kept = _install(pack_dir, name, tmp_pack, tmp_idx, sync_dir, keep)
    except OSError as exc:
        raise StoreWriteError(pack_dir, str(exc)) from exc
    return PackWritten(name, len(index), tuple(raw.hex() for raw, _, _ in index), existed, kept)


def _checksum(header: bytes, chunks: Sequence[bytes]) -> bytes:
    """The SHA-1 trailer of a pack: of its header and entries."""
    hasher = hashlib.sha1(header, usedforsecurity=False)
    for chunk in chunks:
        hasher.update(chunk)
    return hasher.digest()


def _other_zlib_headers(current: bytes) -> list[bytes]:
    """The other valid two-byte zlib headers with the same method and window as ``current``: the
    four compression-level hints (``FLEVEL``), no preset dictionary, the check bits set so that the
    pair is a multiple of 31 (RFC 1950)."""
    cmf = current[0]
    out = []
    for level in range(4):
        flg = level << 6
        flg |= (31 - (cmf * 256 + flg) % 31) % 31
        if bytes((cmf, flg)) != current:
            out.append(bytes((cmf, flg)))
    return out


def is_pack_name(name: str) -> bool:
    """Whether ``name`` is a pack's name (``pack-<40 hex>``)."""
    return _NAME.match(name) is not None


def _raw_oid(oid: str) -> bytes:
    try:
        raw = bytes.fromhex(oid)
    except (ValueError, TypeError):
        raw = b""
    if len(raw) != 20 or len(oid) != 40:
        raise UsageError(f"not a 40-digit hex object id: {oid!r}")
    return raw


def _entry_header(kind: int, size: int) -> bytes:
    """A pack entry's header: type in bits 4-6 of the first byte, the size in 4 bits then 7 bits
    per byte, little-endian, the top bit of each byte saying another follows."""
    out = bytearray()
    byte = (kind << 4) | (size & 0x0F)
    size >>= 4
    while size:
        out.append(byte | 0x80)
        byte = size & 0x7F
        size >>= 7
    out.append(byte)
    return bytes(out)


def _idx_bytes(index: Sequence[tuple[bytes, int, int]], pack_checksum: bytes) -> bytes:
    """A version-2 ``.idx`` for ``(raw id, offset, crc32)`` entries sorted by id."""
    count = len(index)
    # the fan-out table (entry i: how many ids start with a byte <= i) as runs of equal entries, one
    # per distinct first byte (a pack of a write has a few objects; a loop over 256 slots cost more)
    fanout: list[bytes] = []
    filled = 0  # slots written so far
    for k, (raw, _offset, _crc) in enumerate(index):
        if raw[0] > filled:
            fanout.append(_U32.pack(k) * (raw[0] - filled))
            filled = raw[0]
    fanout.append(_U32.pack(count) * (256 - filled))
    small: list[int] = []
    large: list[int] = []
    for _raw, offset, _crc in index:
        if offset >> 31 or offset > _OFF32_LIMIT:
            small.append(0x80000000 | len(large))
            large.append(offset)
        else:
            small.append(offset)
    body = b"".join((
        _IDX_MAGIC, _U32.pack(2), *fanout,
        b"".join(raw for raw, _offset, _crc in index),
        struct.pack(f">{count}I", *(crc for _raw, _offset, crc in index)),
        struct.pack(f">{count}I", *small),
        struct.pack(f">{len(large)}Q", *large),
        pack_checksum,
    ))
    return body + hashlib.sha1(body, usedforsecurity=False).digest()


# The temporary files gitstate writes here are named prefix + secrets.token_hex(8) (_open_temp);
# git's own are tmp_pack_XXXXXX, tmp_idx_XXXXXX (mkstemp: six
# characters), so the two are told apart by name.
_TEMP_NAME = re.compile(r"tmp_(?:pack|idx)_[0-9a-f]{16}\Z")


def is_temp_name(name: str) -> bool:
    """Whether ``name`` (of a pack directory entry) is one of gitstate's temporary files:
    ``tmp_pack_`` or ``tmp_idx_`` and 16 hex digits. git's own temporary files there never match;
    git removes those itself (``git prune``, run by ``git gc``: ``tmp_*`` older than
    ``gc.pruneExpire``, two weeks by default)."""
    return _TEMP_NAME.match(name) is not None


def _open_temp(pack_dir: str, prefix: str, data: bytes) -> tuple[str, int]:
    """A new temporary file holding ``data``: its path and its (open) descriptor."""
    path = os.path.join(pack_dir, prefix + secrets.token_hex(8))
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o444)
    try:
        write_all(fd, data)
    except BaseException:
        os.close(fd)
        _unlink(path)
        raise
    return path, fd


def _install(pack_dir: str, name: str, tmp_pack: str, tmp_idx: str, fsync: bool,
             keep: bytes | None = None) -> tuple[bool, tuple[str, int] | None]:
    """Rename the temp files into place, ``.pack`` first and ``.idx`` last; return whether the pack
    was installed already (then the temps are removed and the pack's mtime is refreshed), and the
    ``.keep`` file created (``keep``: before the pack appears, so no ``git repack`` ever lists it
    unkept).

    A ``.pack`` without its ``.idx`` (another writer between its renames, or one that died) is
    replaced by ours: the bytes are the same, and the fresh file cannot be taken for an orphan.
    So is an ``.idx`` whose ``.pack`` is gone."""
    base = os.path.join(pack_dir, name)
    kept = None
    try:
        if keep is not None:
            kept = _create_keep(base + ".keep", keep)
        if os.path.exists(base + ".idx") and freshen(base + ".pack"):
            _unlink(tmp_pack)
            _unlink(tmp_idx)
            return True, kept
        os.replace(tmp_pack, base + ".pack")
        os.replace(tmp_idx, base + ".idx")
    except BaseException:
        _unlink(tmp_pack)
        _unlink(tmp_idx)
        if kept is not None:
            lockfile.release_held(*kept)
        raise
    if fsync:
        fsync_dir(pack_dir)
    return False, kept


def _create_keep(path: str, prefix: bytes) -> tuple[str, int] | None:
    """Create and hold a ``.keep`` file (``prefix`` and an owner record, under a flock); ``None``
    when one exists already (another writer's: not ours)."""
    try:
        return path, lockfile.create_held(path, prefix=prefix)
    except FileExistsError:
        return None


def freshen(path: str) -> bool:
    """Whether ``path`` exists; if so its mtime is set to now, as git freshens an object it reuses,
    so a concurrent ``git gc`` does not prune it as old (left as it was where that is not allowed,
    e.g. a read-only repository)."""
    try:
        os.utime(path)
    except FileNotFoundError:
        return False
    except OSError:
        return os.path.exists(path)
    return True


def _unlink(path: str) -> bool:
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    return True


# -- reading indexes -------------------------------------------------------------------------------


def index_ids(idx_path: str) -> list[str]:
    """The hex ids a version-2 ``.idx`` lists, in id order, once its head, fan-out table, size and
    checksum are checked: :class:`~gitstate.errors.CorruptObjectError` (with the path as ``oid``)
    for a version-1, truncated or damaged index, ``OSError`` for one that cannot be read."""
    return index_id_lines(idx_path).split()


def index_id_lines(idx_path: str) -> str:
    """:func:`index_ids` as text, one id per line (what ``git pack-objects`` reads), made at C
    speed (one ``hex()`` of the name table, a newline every 20 bytes), for packs of many objects."""
    data, count = _checked_index(idx_path)
    return data[_IDX_HEADER:_IDX_HEADER + 20 * count].hex("\n", 20) + "\n" if count else ""


def object_count(idx_path: str) -> int:
    """How many objects a version-2 ``.idx`` lists (its last fan-out entry; reads 1 KiB)."""
    with open(idx_path, "rb") as fh:
        head = fh.read(_IDX_HEADER)
    _check_idx_head(idx_path, head)
    return int(struct.unpack_from(">I", head, _IDX_HEADER - 4)[0])


def _checked_index(idx_path: str) -> tuple[bytes, int]:
    """A version-2 ``.idx``'s bytes and object count, once its head, fan-out table, size (up to
    its 32-bit offsets) and trailing checksum are checked."""
    with open(idx_path, "rb") as fh:
        data = fh.read()
    _check_idx_head(idx_path, data)
    fanout = struct.unpack_from(">256I", data, 8)
    if not all(map(operator.le, fanout, fanout[1:])):
        raise CorruptObjectError(idx_path, "pack index fan-out table is not monotonic")
    count = fanout[255]
    if len(data) < _IDX_HEADER + 28 * count + 40:
        raise CorruptObjectError(idx_path, "pack index is truncated")
    if hashlib.sha1(memoryview(data)[:-20], usedforsecurity=False).digest() != data[-20:]:
        raise CorruptObjectError(idx_path, "pack index checksum does not match")
    return data, count


def _check_idx_head(idx_path: str, data: bytes) -> None:
    if len(data) < _IDX_HEADER:
        raise CorruptObjectError(idx_path, "pack index is truncated")
    if data[:4] != _IDX_MAGIC:
        raise CorruptObjectError(idx_path, "not a version 2 pack index (version 1 indexes have no "
                                           "magic and are not supported)")
    version = struct.unpack_from(">I", data, 4)[0]
    if version != 2:
        raise CorruptObjectError(idx_path, f"pack index version {version} is not supported (only 2)")


MIDX = "multi-pack-index"  # git's multi-pack-index file in the pack directory
_MIDX_HEADER = struct.Struct(">4sBBBBI")  # signature, version, hash version, chunks, base files, packs


def remove_packs(pack_dir: str, names: Iterable[str]) -> None:
    """Delete the packs ``names`` (``pack-<hex>``) that have no ``.keep``, each one's index first;
    files already gone are fine. As git's ``repack -d`` does (``clear_midx_file``), a
    multi-pack-index naming one of them is removed first, with its bitmap and reverse index (git
    would print ``packfile ... index unavailable`` and ``git fsck`` fail; git reads the packs
    without one), and so is one naming a pack already gone, before and after the deletions (a
    concurrent ``git multi-pack-index write`` can list a pack just before it goes)."""
    doomed = [n for n in names if not os.path.exists(os.path.join(pack_dir, n + ".keep"))]
    if not doomed:
        return
    _clear_midx_naming(pack_dir, {n + ".idx" for n in doomed})
    for name in doomed:
        for ext in _REMOVE_EXTS:
            try:
                _unlink(os.path.join(pack_dir, name + ext))
            except OSError:
                pass
    _clear_midx_naming(pack_dir, set())


def _clear_midx_naming(pack_dir: str, doomed: set[str]) -> None:
    """Remove the multi-pack-index when it names one of the ``doomed`` index files or an index that
    is gone, or cannot be read."""
    listed = midx_pack_names(pack_dir)
    if listed is None or listed & doomed or _gone(pack_dir, listed):
        _clear_midx(pack_dir)


def damaged_midx(pack_dir: str) -> bool:
    """Whether the multi-pack-index of ``pack_dir`` is there, says it is version 1 or 2 of git's
    format (the ones gitstate reads), and still cannot be read: cut short, or a chunk table or pack
    name chunk that does not hold together (``git fsck`` fails on it too). One of another version
    is not called damaged (a newer git's)."""
    if midx_pack_names(pack_dir) is not None:
        return False
    try:
        with safeopen.open_file(os.path.join(pack_dir, MIDX), "rb") as fh:
            head = fh.read(_MIDX_HEADER.size)
    except OSError:
        return False
    return len(head) < 5 or head[:4] != b"MIDX" or head[4] in (1, 2)


def stale_midx(pack_dir: str) -> list[str]:
    """The packs (``pack-<hex>.idx``) the multi-pack-index of ``pack_dir`` names that are gone
    (``git fsck`` fails on such a file and git commands print ``packfile ... index unavailable``;
    git's own ``repack -d`` beside a ``git multi-pack-index write`` can leave one too)."""
    return _gone(pack_dir, midx_pack_names(pack_dir) or set())


def _gone(pack_dir: str, listed: set[str]) -> list[str]:
    """The index files of ``listed`` that are not in ``pack_dir``, sorted."""
    return sorted(n for n in listed if not os.path.exists(os.path.join(pack_dir, n)))


def clear_stale_midx(pack_dir: str) -> bool:
    """Remove the multi-pack-index (with its bitmap and reverse index) if it names packs that are
    gone or is damaged (:func:`damaged_midx`); True when it did. git reads the packs without one."""
    if not stale_midx(pack_dir) and not damaged_midx(pack_dir):
        return False
    _clear_midx(pack_dir)
    return True


def midx_pack_names(pack_dir: str) -> set[str] | None:
    """The pack index names (``pack-<hex>.idx``) the multi-pack-index of ``pack_dir`` covers: its
    ``PNAM`` chunk, read through the chunk table (the rest of the file, which grows with the
    objects, is not read). An empty set when there is none; ``None`` when one is there but cannot
    be read as version 1 or 2 of git's format (then it may name anything)."""
    path = os.path.join(pack_dir, MIDX)
    try:
        with safeopen.open_file(path, "rb") as fh:
            head = fh.read(_MIDX_HEADER.size)
            if len(head) < _MIDX_HEADER.size:
                return None
            signature, version, _hash, chunks, _base, _count = _MIDX_HEADER.unpack(head)
            if signature != b"MIDX" or version not in (1, 2):
                return None
            table = fh.read(12 * (chunks + 1))
            if len(table) < 12 * (chunks + 1):
                return None
            offsets = [(table[12 * i:12 * i + 4], int.from_bytes(table[12 * i + 4:12 * i + 12], "big"))
                       for i in range(chunks + 1)]
            for i, (chunk, start) in enumerate(offsets[:-1]):
                if chunk == b"PNAM":
                    end = offsets[i + 1][1]
                    if not 0 <= start <= end or end - start > 64 << 20:
                        return None
                    fh.seek(start)
                    data = fh.read(end - start)
                    if len(data) != end - start:
                        return None  # cut short
                    return {n.decode("utf-8", "replace") for n in data.split(b"\0") if n}
            return None
    except FileNotFoundError:
        return set()
    except OSError:
        return None


def _clear_midx(pack_dir: str) -> None:
    """Remove the multi-pack-index and its ``multi-pack-index-<hash>.bitmap``/``.rev`` files."""
    try:
        entries = os.listdir(pack_dir)
    except OSError:
        return
    for entry in entries:
        if entry == MIDX or (entry.startswith(MIDX + "-") and entry.endswith((".bitmap", ".rev"))):
            try:
                _unlink(os.path.join(pack_dir, entry))
            except OSError:
                pass


# -- planning --------------------------------------------------------------------------------------


def geometric_plan(packs: Sequence[tuple[str, int]], factor: int = 2) -> list[str]:
    """The packs to merge so that the packs left plus the merged one form a geometric progression
    (each at least ``factor`` times the previous, by weight), as ``git repack --geometric=<factor>``
    chooses them (git's ``split_pack_geometry``).

    ``packs`` are ``(name, weight)``, the weight being an object count (git's choice) or a size in
    bytes. Sorted by weight (ties keep their given order), the largest packs that already form a
    progression stay; everything below them is rolled up, and so is each next larger pack while it
    is less than ``factor`` times the rolled-up total. Returns those names, lightest first, or
    ``[]`` when nothing needs merging (never a single pack)."""
    if factor < 2:
        raise UsageError(f"factor must be at least 2, not {factor}")
    names = [name for name, _weight in packs]
    if len(set(names)) != len(names):
        raise UsageError("geometric_plan: a pack is named twice")
    if any(weight < 0 for _name, weight in packs):
        raise UsageError("geometric_plan: weights cannot be negative")
    ordered = sorted(packs, key=lambda item: item[1])
    weights = [weight for _name, weight in ordered]
    n = len(ordered)
    if n < 2:
        return []
    i = n - 1
    while i > 0 and weights[i] >= factor * weights[i - 1]:
        i -= 1
    split = i + 1 if i else 0
    total = sum(weights[:split])
    while split and split < n and weights[split] < factor * total:
        total += weights[split]
        split += 1
    if split < 2:
        return []
    return [name for name, _weight in ordered[:split]]


# -- orphan packs: a .pack whose .idx is gone ------------------------------------------------------

_UNINDEXABLE: set[tuple[str, int, int]] = set()  # (path, mtime, size) of packs git index-pack refused


def reindex_orphans(pack_dir: str) -> list[str]:
    """Give every ``pack-*.pack`` that has no ``.idx`` its index again (``git index-pack``); returns
    the names indexed. Such a pack is complete (a ``.pack`` is renamed into place only once written),
    so only its index is missing: ``git gc`` removes an ``.idx`` whose ``.pack`` its directory scan
    missed (its final scan can run while a pack's two files are renamed into place), which leaves
    every object of the pack unreadable although a ref names them. Safe at any time and from any
    process: the index is the one the pack's writer writes (identical bytes, renamed into place).
    A pack git cannot index (damaged, or thin) is left alone, and not tried again by this process."""
    try:
        listing = os.listdir(pack_dir)
    except FileNotFoundError:
        return []
    present = set(listing)
    done = []
    for entry in listing:
        stem = entry[: -len(".pack")]
        if not entry.endswith(".pack") or stem + ".idx" in present or not _NAME.match(stem):
            continue
        path = os.path.join(pack_dir, entry)
        tmp = os.path.join(pack_dir, "tmp_idx_" + secrets.token_hex(8))
        try:
            info = os.stat(path)
            key = (path, info.st_mtime_ns, info.st_size)
            if key in _UNINDEXABLE:
                continue
            try:
                made = run_git(None, ["-c", "pack.indexVersion=2", "-c", "pack.writeReverseIndex=false",
                                      "index-pack", "-o", tmp, path], cwd=pack_dir)
                if made.returncode != 0:
                    _UNINDEXABLE.add(key)
                    continue
                with open(tmp, "rb") as fh:
                    idx = fh.read()
            finally:
                _unlink(tmp)
            if os.path.exists(os.path.join(pack_dir, stem + ".idx")):
                continue  # its writer finished meanwhile
            tmp, fd = _open_temp(pack_dir, "tmp_idx_", idx)  # git's 0444 less the umask, as write_pack's
            os.close(fd)
            os.replace(tmp, os.path.join(pack_dir, stem + ".idx"))
            if not os.path.exists(path):  # removed meanwhile (a repack deletes the .idx first)
                _unlink(os.path.join(pack_dir, stem + ".idx"))
                continue
        except (OSError, GitStateError):
            continue  # gone meanwhile, or no usable git
        done.append(stem)
    return done


# -- cleaning up -----------------------------------------------------------------------------------


def old_files(directory: str, wanted: Callable[[str], bool], max_age: float) -> list[str]:
    """The regular files of ``directory`` whose name is ``wanted`` and that were last modified more
    than ``max_age`` seconds ago, sorted (``[]`` when the directory cannot be listed)."""
    try:
        names = [n for n in os.listdir(directory) if wanted(n)]
    except OSError:
        return []
    now = time.time()
    found = []
    for name in names:
        path = os.path.join(directory, name)
        try:
            info = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISREG(info.st_mode) and now - info.st_mtime > max_age:
            found.append(path)
    return sorted(found)


def remove_orphans(pack_dir: str, max_age_seconds: float) -> int:
    """Remove what dead writers left in ``pack_dir``: gitstate's ``tmp_pack_*`` and ``tmp_idx_*``
    files (:func:`is_temp_name`; git's own are git's to remove), and ``.pack`` files without their
    ``.idx`` (and without a ``.keep``) that :func:`reindex_orphans` cannot index, when last modified
    more than ``max_age_seconds`` ago (far above a live writer's time between its writes and its
    last rename: minutes at least). Nothing else is touched. Returns how many files were removed."""
    if max_age_seconds < 0:
        raise UsageError(f"max_age_seconds cannot be negative, not {max_age_seconds}")
    reindex_orphans(pack_dir)  # a complete pack that lost its index is repaired, never removed

    def orphan(entry: str) -> bool:
        stem = os.path.join(pack_dir, entry[:-5])
        return (entry.endswith(".pack") and entry.startswith("pack-") and not os.path.exists(stem + ".idx")
                and not os.path.exists(stem + ".keep"))

    removed = 0
    for path in old_files(pack_dir, lambda n: is_temp_name(n) or orphan(n), max_age_seconds):
        name = os.path.basename(path)
        if is_temp_name(name) or orphan(name):  # a pack's writer may have finished since the listing
            try:
                removed += _unlink(path)
            except OSError:
                pass
    return removed
