"""Writing objects as small pack files, and merging those packs geometrically, without libgit2.

One write transaction's new objects become ONE pack + ``.idx`` (two file creations) instead of one
loose file per object. Packs are then rolled up as ``git repack --geometric=2`` would, by copying
each entry's bytes (no recompression, no deltas), so their number stays logarithmic in the number of
objects and well below git's ``gc.autoPackLimit`` (50).

Formats (git's ``Documentation/gitformat-pack.txt``): a version-2 pack is ``PACK``, version, object
count, then per object a type/size varint header and the zlib stream of the body, then the SHA-1 of
all that. Only whole objects are written (types 1-4: commit, tree, blob, tag); never deltas. The
version-2 ``.idx`` has the magic ``\\377tOc``, version 2, a 256-entry fan-out table, the sorted object
names, the CRC-32 of each entry's packed bytes, 32-bit offsets (an offset above ``0x7fffffff`` goes to
a table of 64-bit offsets and the 32-bit slot holds its position with the top bit set), the pack's
checksum and the index's own checksum. For a given pack our ``.idx`` is byte for byte what
``git index-pack`` writes (the tests compare them).

Files are installed as git installs them: written to ``tmp_pack_*`` / ``tmp_idx_*`` in the pack
directory (optionally fsynced), read-only (0444 less the umask; ``core.sharedRepository`` is not
applied), then the ``.pack`` is renamed into place and the ``.idx`` last, since readers (git and
libgit2) find packs through their ``.idx``. The name is ``pack-<hex of the pack's trailing SHA-1>``
as modern git names packs, so identical packs have identical names: when ``<name>.idx`` exists the
new files are dropped and the existing ``.pack`` only has its mtime refreshed (as git "freshens" an
object it reuses, so a concurrent ``git gc`` does not treat it as old).

Ids are trusted: :func:`write_pack` does not hash the bodies again (the caller computed each id to
decide what to write); an id that does not match its body makes a pack that ``git fsck`` reports.

Errors: a malformed argument raises :class:`~gitstate.errors.UsageError` (a ``ValueError``); an
inconsistent ``.idx``/``.pack`` (damaged, truncated, a version-1 index, which gitstate never writes,
a ``.pack`` missing beside its ``.idx``) raises :class:`~gitstate.errors.CorruptObjectError` whose
``oid`` is the file's path (or the object's id for an entry whose CRC-32 is wrong); a pack holding
deltas raises :class:`DeltaPackError` (a ``UsageError``: such packs are not ours to merge). Any
other ``OSError`` of :func:`write_pack` and :func:`merge_packs` becomes
:class:`~gitstate.errors.StoreWriteError`; :func:`read_index` and :func:`object_count` let it
through.

Concurrency: writers need no lock (temp names are unique, the final rename is atomic and identical
names mean identical bytes). :func:`merge_packs` and :func:`remove_orphans` delete files, so callers
run them under one lock (housekeeping's), and :func:`remove_orphans` must get a ``max_age_seconds``
far above the time a writer takes between its two renames (minutes at least; git uses two weeks).

What an open ``pygit2.Repository`` sees (pygit2 1.21.0, libgit2 1.9.7; each point is asserted by
``tests/git/test_packs.py::test_libgit2_*``, the figures come from ``scripts/bench_packs.py`` on the
2-core test machine):

- A pack written after the handle was opened is found without reopening: ``repo.get(oid)``,
  ``oid in repo.odb`` and ``repo.odb.read(oid)`` all return its objects at the first try. On a miss
  libgit2 refreshes its pack list (``git_odb_refresh`` rescans ``objects/pack``) and looks again,
  so every lookup of an absent id costs a directory scan (about 19 µs here).
- libgit2 never forgets a pack: its refresh only adds packs. When it finds an id in a pack's index
  it opens the ``.pack`` (to check it still exists) and keeps that descriptor and the index mapping
  until the object database is freed. So a handle that outlives merges keeps every merged-away
  pack open and listed: their objects stay readable through it, the disk space of the deleted files
  is not given back, and lookups walk the dead packs. After 400 one-pack writes and 200 geometric
  merges one handle held 397 deleted packs open; an absent id cost 192 µs against 19 µs on a fresh
  handle (10x), ``id in odb`` 10.7 against 0.5 µs (22x), ``odb.read`` 23.6 against 9.0 µs (2.6x)
  (three runs on the shared machine: 10-17x, 14-22x and 2-2.6x).
  The descriptors are a hard limit too: with ``ulimit -n 128`` a process writing one pack per step
  could no longer create files after about 120 packs. (``pygit2.settings.mwindow_file_limit``
  caps the open ``.pack`` descriptors but not the index mappings nor the slow lookups.)
- pygit2's ``Odb`` has no ``refresh`` method. ``OdbBackend.refresh()`` exists (for each of
  ``repo.odb.backends``) but only adds packs, like libgit2's own refresh. What drops dead packs,
  closing their descriptors and mappings, is a new object database:
  ``repo.set_odb(pygit2.Odb(objects_dir))`` (or reopening the repository); afterwards lookups cost
  what they cost on a fresh handle. A long-lived handle should do that after each merge (and any
  object kept from the old ``repo.odb``, such as ``ObjectWriter.odb``, must be replaced too).
"""

from __future__ import annotations

import hashlib
import mmap
import operator
import os
import re
import secrets
import stat
import struct
import time
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO

from gitstate.errors import CorruptObjectError, GitStateError, StoreWriteError, UsageError
from gitstate.git import deflate, safeopen
from gitstate.git.command import run_git
from gitstate.git.durability import start_writeback

OBJ_COMMIT = 1
OBJ_TREE = 2
OBJ_BLOB = 3
OBJ_TAG = 4
OBJ_OFS_DELTA = 6
OBJ_REF_DELTA = 7
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


class DeltaPackError(UsageError):
    """A pack given to :func:`merge_packs` holds a delta entry: it was not written by
    :func:`write_pack` (nor by a merge of such packs), and its entries cannot be copied alone."""

    def __init__(self, name: str, oid: str, kind: int) -> None:
        self.name = name
        self.oid = oid
        self.kind = kind
        super().__init__(f"{name} holds a delta entry for {oid} (type {kind}); only packs of whole "
                         "objects (types 1-4) can be merged by copying")


@dataclass(frozen=True)
class PackWritten:
    """A pack that :func:`write_pack` or :func:`merge_packs` installed.

    ``name`` is ``pack-<40 hex>`` (the files are ``<pack_dir>/<name>.pack`` and ``.idx``),
    ``count`` the number of objects, ``oids`` their hex ids in index (sorted) order, and
    ``existed`` whether a pack of that name was already installed (then nothing was written)."""

    name: str
    count: int
    oids: tuple[str, ...]
    existed: bool = False
    keep: str | None = None  # the .keep file written with the pack (write_pack's ``keep``)


# -- writing ---------------------------------------------------------------------------------------


def write_pack(pack_dir: str, objects: Sequence[tuple[str, int, bytes]], *, fsync: bool = False,
               compression: int = 1, sync_dir: bool = False, keep: bytes | None = None,
               compressed: Mapping[str, bytes] | None = None) -> PackWritten:
    """Write ``objects`` as one version-2 pack with its version-2 index in ``pack_dir``.

    Each object is ``(hex id, type, body)``: type 1 commit, 2 tree, 3 blob, 4 tag, and the body
    without git's ``"<type> <size>\\0"`` header. The id is trusted, not recomputed (see the module
    documentation). An id given twice is written once (its first occurrence). ``compression`` is the
    zlib level of objects of 1 KiB or more (1, git's ``core.looseCompression`` default, is fast
    and small enough); smaller ones are stored (:func:`gitstate.git.deflate.compress`). With ``fsync`` both files' contents are flushed (``fdatasync``, as git flushes the
    packs it writes) before they are renamed into place; with ``sync_dir`` the directory is flushed
    after the renames too, so the names survive a power loss as well (``core.fsync=all``).

    With ``keep`` a ``<name>.keep`` file holding those bytes is created before the ``.pack`` is
    put in place (as ``git receive-pack`` keeps the pack it received until its refs are updated):
    ``git repack -a -d`` and ``git gc`` neither delete a kept pack nor drop its objects, which are
    unreachable until the caller's refs name them. The caller removes the file afterwards
    (:attr:`PackWritten.keep`; ``None`` when a ``.keep`` of that name existed already).

    ``compressed`` maps ids to the zlib stream of their body, made already by the caller
    (:mod:`gitstate.git.deflate`): the entry holds it as it is (it must inflate to the body)."""
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


# The temporary files gitstate writes here are named prefix + secrets.token_hex(8) (_open_temp,
# _write_temp, _write_merged); git's own are tmp_pack_XXXXXX, tmp_idx_XXXXXX (mkstemp: six
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
        _write_all(fd, data)
    except BaseException:
        os.close(fd)
        _unlink(path)
        raise
    return path, fd


def _write_temp(pack_dir: str, prefix: str, parts: Sequence[bytes | memoryview], fsync: bool) -> str:
    path = os.path.join(pack_dir, prefix + secrets.token_hex(8))
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o444)
    try:
        for part in parts:
            _write_all(fd, part)
        if fsync:
            os.fdatasync(fd)
    except BaseException:
        os.close(fd)
        _unlink(path)
        raise
    os.close(fd)
    return path


def _write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _install(pack_dir: str, name: str, tmp_pack: str, tmp_idx: str, fsync: bool,
             keep: bytes | None = None) -> tuple[bool, str | None]:
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
        if os.path.exists(base + ".idx") and _freshen(base + ".pack"):
            _unlink(tmp_pack)
            _unlink(tmp_idx)
            return True, kept
        os.replace(tmp_pack, base + ".pack")
        os.replace(tmp_idx, base + ".idx")
    except BaseException:
        _unlink(tmp_pack)
        _unlink(tmp_idx)
        if kept is not None:
            _unlink(kept)
        raise
    if fsync:
        _fsync_dir(pack_dir)
    return False, kept


def _create_keep(path: str, content: bytes) -> str | None:
    """Create a ``.keep`` file; ``None`` when one exists already (another writer's: not ours)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    except FileExistsError:
        return None
    try:
        _write_all(fd, content)
    finally:
        os.close(fd)
    return path


def _freshen(path: str) -> bool:
    """Whether ``path`` exists; if so its mtime is set to now (kept as it was where that is not
    allowed, e.g. a read-only repository)."""
    try:
        os.utime(path)
    except FileNotFoundError:
        return False
    except OSError:
        return os.path.exists(path)
    return True


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _unlink(path: str) -> bool:
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    return True


# -- reading indexes -------------------------------------------------------------------------------


def read_index(idx_path: str) -> list[tuple[str, int, int]]:
    """``(hex id, offset, crc32)`` of every object in a version-2 ``.idx``, in id order.

    Checks the magic, the version, the fan-out table, the file's size and its trailing checksum;
    anything else (a version-1 index, a truncated or damaged file) raises
    :class:`~gitstate.errors.CorruptObjectError` with the path as ``oid``. A file that cannot be
    read raises ``OSError`` (``FileNotFoundError`` when absent)."""
    entries, _checksum = _parse_index(idx_path)
    return [(raw.hex(), offset, crc) for raw, offset, crc in entries]


def index_ids(idx_path: str) -> list[str]:
    """The hex ids a version-2 ``.idx`` lists, in id order: :func:`read_index` without the offsets
    and CRCs, with the same checks. Raises like :func:`read_index`."""
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


def _parse_index(idx_path: str) -> tuple[list[tuple[bytes, int, int]], bytes]:
    """Entries ``(raw id, offset, crc)`` of a version-2 ``.idx`` and the pack checksum it names."""
    data, count = _checked_index(idx_path)
    names_at = _IDX_HEADER
    crcs_at = names_at + 20 * count
    small_at = crcs_at + 4 * count
    large_at = small_at + 4 * count
    crcs = struct.unpack_from(f">{count}I", data, crcs_at)
    small = struct.unpack_from(f">{count}I", data, small_at)
    n_large = len(data) - 40 - large_at
    if n_large % 8:
        raise CorruptObjectError(idx_path, "pack index has a partial 64-bit offset")
    large = struct.unpack_from(f">{n_large // 8}Q", data, large_at)
    entries: list[tuple[bytes, int, int]] = []
    for i in range(count):
        offset = small[i]
        if offset & 0x80000000:
            slot = offset & 0x7FFFFFFF
            if slot >= len(large):
                raise CorruptObjectError(idx_path, "pack index names a missing 64-bit offset")
            offset = large[slot]
        entries.append((data[names_at + 20 * i: names_at + 20 * i + 20], offset, crcs[i]))
    return entries, data[-40:-20]


def entry_types(pack_dir: str, name: str) -> dict[str, int]:
    """``{hex id: type}`` of every entry of a pack, read from each entry's header byte (1-4 for
    whole objects, 6 and 7 for deltas, whose object type is their base's). Raises like
    :func:`read_index` (and :class:`~gitstate.errors.CorruptObjectError` for an offset beyond the
    pack)."""
    base = os.path.join(pack_dir, name)
    index, _checksum = _parse_index(base + ".idx")
    with _map(base + ".pack") as mm:
        size = len(mm)
        out: dict[str, int] = {}
        for raw, offset, _crc in index:
            if not _PACK_HEADER.size <= offset < size - 20:
                raise CorruptObjectError(base + ".pack", f"entry {raw.hex()} has a bad offset {offset}")
            out[raw.hex()] = (mm[offset] >> 4) & 0x07
    return out


# -- merging ---------------------------------------------------------------------------------------


@dataclass
class _Source:
    name: str
    path: str  # of the .pack
    size: int
    entries: list[tuple[bytes, int, int, int]]  # (raw id, start, end, crc) in pack order


def merge_packs(pack_dir: str, names: Sequence[str], *, fsync: bool = False) -> PackWritten:
    """Copy every object of the packs ``names`` (``pack-<hex>``) into one new pack + index, then
    remove the merged-away packs.

    Each entry's bytes (header and zlib stream, located through the index: an entry ends where the
    next one starts, or at the pack's trailer) are copied as they are, never recompressed, after
    their CRC-32 is checked against the source index. An object in several packs is copied once,
    from the first pack named that holds it. Every source must hold whole objects only; a delta
    entry (type 6 or 7) raises :class:`DeltaPackError` before anything is written. Afterwards each
    source's ``.idx``, ``.pack``, ``.rev`` and ``.bitmap`` are removed (index first), except for a
    pack with a ``.keep`` file and the new pack itself (merging packs whose union is one of them
    yields that pack's name). One source file is open at a time, so any number can be merged.

    Callers serialize merges (and :func:`remove_orphans`) under one lock."""
    unique = list(dict.fromkeys(names))
    if not unique:
        raise UsageError("merge_packs needs at least one pack")
    for name in unique:
        if not _NAME.match(name):
            raise UsageError(f"not a pack name (pack-<40 hex>): {name!r}")
    try:
        sources = [_scan_source(pack_dir, name) for name in unique]
        written = _write_merged(pack_dir, sources, fsync)
    except OSError as exc:
        raise StoreWriteError(pack_dir, str(exc)) from exc
    remove_packs(pack_dir, [name for name in unique if name != written.name])
    return written


MIDX = "multi-pack-index"  # git's multi-pack-index file in the pack directory
_MIDX_HEADER = struct.Struct(">4sBBBBI")  # signature, version, hash version, chunks, base files, packs


def remove_packs(pack_dir: str, names: Iterable[str]) -> None:
    """Delete the packs ``names`` (``pack-<hex>``) that have no ``.keep``: each one's files, its
    index first (readers find packs by it); files already gone are fine. Before that, as git's
    ``repack -d`` does (its ``clear_midx_file``), a multi-pack-index naming one of them is removed
    with its bitmap and reverse index: git would find it naming a pack that is gone (its commands
    print ``packfile ... index unavailable`` and ``git fsck`` fails); git reads the packs without
    one, and ``git multi-pack-index write`` (or ``git maintenance``) writes a new one. A concurrent
    ``git multi-pack-index write`` can still list a pack just before it goes (git's own repack has
    that race too): a multi-pack-index naming a pack that is gone is removed as well, here before
    and after the deletions, so such a one lasts until the next merge at most. Callers serialize
    this under the housekeeping lock."""
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
    return len(head) < 5 or (head[:4] == b"MIDX" and head[4] in (1, 2)) or head[:4] != b"MIDX"


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


def _map(pack_path: str) -> mmap.mmap:
    try:
        fh = open(pack_path, "rb")  # noqa: SIM115 - closed below, the mapping outlives it
    except FileNotFoundError as exc:
        raise CorruptObjectError(pack_path, "the pack file of this index is missing") from exc
    with fh:
        if os.fstat(fh.fileno()).st_size < _PACK_HEADER.size + 20:
            raise CorruptObjectError(pack_path, "pack is truncated")
        return mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)


def _scan_source(pack_dir: str, name: str) -> _Source:
    """Read a source's index and check its pack: header, count, checksum, offsets, entry types."""
    base = os.path.join(pack_dir, name)
    if not os.path.exists(base + ".idx"):
        raise UsageError(f"no pack {name} in {pack_dir}")
    index, checksum = _parse_index(base + ".idx")
    pack_path = base + ".pack"
    with _map(pack_path) as mm:
        size = len(mm)
        signature, version, count = _PACK_HEADER.unpack_from(mm, 0)
        if signature != b"PACK" or version not in (2, 3):
            raise CorruptObjectError(pack_path, "not a version 2 pack")
        if count != len(index):
            raise CorruptObjectError(pack_path, f"pack has {count} objects, its index {len(index)}")
        if mm[size - 20:] != checksum:
            raise CorruptObjectError(pack_path, "pack checksum differs from the one its index names")
        by_offset = sorted(index, key=lambda item: item[1])
        entries: list[tuple[bytes, int, int, int]] = []
        end_of_data = size - 20
        for i, (raw, start, crc) in enumerate(by_offset):
            end = by_offset[i + 1][1] if i + 1 < len(by_offset) else end_of_data
            if not _PACK_HEADER.size <= start < end <= end_of_data:
                raise CorruptObjectError(pack_path, f"entry {raw.hex()} has a bad offset {start}")
            kind = (mm[start] >> 4) & 0x07
            if kind not in _WHOLE_TYPES:
                if kind in (OBJ_OFS_DELTA, OBJ_REF_DELTA):
                    raise DeltaPackError(name, raw.hex(), kind)
                raise CorruptObjectError(pack_path, f"entry {raw.hex()} has invalid type {kind}")
            entries.append((raw, start, end, crc))
    return _Source(name, pack_path, size, entries)


def _write_merged(pack_dir: str, sources: Sequence[_Source], fsync: bool) -> PackWritten:
    seen: set[bytes] = set()
    plan: list[tuple[_Source, list[tuple[bytes, int, int, int]]]] = []
    for source in sources:
        taken = [entry for entry in source.entries if entry[0] not in seen]
        seen.update(entry[0] for entry in taken)
        plan.append((source, taken))
    path = os.path.join(pack_dir, "tmp_pack_" + secrets.token_hex(8))
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o444)
    index: list[tuple[bytes, int, int]] = []
    try:
        with os.fdopen(fd, "wb", buffering=1 << 20) as out:
            hasher = hashlib.sha1(usedforsecurity=False)
            header = _PACK_HEADER.pack(b"PACK", 2, len(seen))
            hasher.update(header)
            out.write(header)
            offset = len(header)
            for source, taken in plan:
                if taken:
                    offset = _copy_entries(source, taken, out, hasher, offset, index)
            checksum = hasher.digest()
            out.write(checksum)
            out.flush()
            if fsync:
                os.fsync(out.fileno())
        index.sort()
        tmp_idx = _write_temp(pack_dir, "tmp_idx_", [_idx_bytes(index, checksum)], fsync)
    except BaseException:
        _unlink(path)
        raise
    name = "pack-" + checksum.hex()
    existed, _kept = _install(pack_dir, name, path, tmp_idx, fsync)
    return PackWritten(name, len(index), tuple(raw.hex() for raw, _, _ in index), existed)


def _copy_entries(source: _Source, taken: Sequence[tuple[bytes, int, int, int]], out: BinaryIO,
                  hasher: Any, offset: int, index: list[tuple[bytes, int, int]]) -> int:
    """Append ``taken`` entries of one source to ``out``; return the offset after them."""
    with _map(source.path) as mm:
        if len(mm) != source.size:
            raise CorruptObjectError(source.path, "pack changed while it was being merged")
        with memoryview(mm) as whole:
            for raw, start, end, crc in taken:
                with whole[start:end] as view:
                    if zlib.crc32(view) != crc:
                        raise CorruptObjectError(raw.hex(), f"CRC-32 mismatch in {source.name}")
                    hasher.update(view)
                    out.write(view)
                index.append((raw, offset, crc))
                offset += end - start
    return offset


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


def remove_orphans(pack_dir: str, max_age_seconds: float) -> int:
    """Remove what dead writers left in ``pack_dir``: gitstate's ``tmp_pack_*`` and ``tmp_idx_*``
    files (:func:`is_temp_name`; git's own are git's to remove), and ``.pack`` files without their
    ``.idx`` (and without a ``.keep``) that :func:`reindex_orphans` cannot index, when last modified
    more than ``max_age_seconds`` ago. Nothing else is touched. Returns how many files were removed.

    A live writer's files are younger than that as long as ``max_age_seconds`` is far above the
    time between its writes and its last rename (use minutes at least; git prunes its temporary
    files after two weeks)."""
    if max_age_seconds < 0:
        raise UsageError(f"max_age_seconds cannot be negative, not {max_age_seconds}")
    reindex_orphans(pack_dir)  # a complete pack that lost its index is repaired, never removed
    try:
        listing = os.listdir(pack_dir)
    except FileNotFoundError:
        return 0
    present = set(listing)
    now = time.time()
    removed = 0
    for entry in listing:
        is_pack = False
        if is_temp_name(entry):
            pass
        elif entry.endswith(".pack") and entry[:-5].startswith("pack-"):
            stem = entry[:-5]
            if stem + ".idx" in present or stem + ".keep" in present:
                continue
            is_pack = True
        else:
            continue
        path = os.path.join(pack_dir, entry)
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            continue
        if not stat.S_ISREG(info.st_mode) or now - info.st_mtime <= max_age_seconds:
            continue
        if is_pack:
            stem = path[:-5]
            if os.path.exists(stem + ".idx") or os.path.exists(stem + ".keep"):
                continue  # its writer finished after the listing
        try:
            if _unlink(path):
                removed += 1
        except OSError:
            pass
    return removed
