"""zlib streams of git objects, hand-made where ``scripts/bench_langgraph.py`` showed zlib's
defaults dominating a checkpoint's object writing.

:func:`compress` is the one-shot compression of every object gitstate writes, sized to the object
(``zlib.compress`` sets up a 32 KiB window and a 64 Ki-entry table per call: about 50 µs even for
40 bytes, more than the rest of writing a small object).

:class:`AppendDeflater` serves objects that grow by appending (a list's last chunk, written anew,
one item longer, at every step): each part is compressed once, with the history of the parts
before it and a ``Z_SYNC_FLUSH`` after it, and :meth:`AppendDeflater.stream` wraps a short ``head``
(as a stored block) and the parts' blocks into one complete zlib stream. Back-references never
reach before the first part, so they mean the same behind any ``head``; any inflater reads it."""

from __future__ import annotations

import struct
import zlib

_ZLIB_HEADER = b"\x78\x01"  # deflate, 32 KiB window, "fastest" level
_FINAL_EMPTY_BLOCK = b"\x03\x00"  # a final, empty block with fixed codes (after a byte boundary)
_ADLER_BASE = 65521
MAX_HEAD = 0xFFFF  # one stored block
_SMALL = 1 << 15  # objects below this size get a window and hash table sized to them
STORED_BELOW = 1024  # objects below this size are stored in their zlib stream, not deflated
_SMALL_TABLE = 2048  # objects below this size are deflated with a small hash table


def _stored_block(data: bytes, final: bool) -> bytes:
    """One deflate stored block holding ``data`` (at most :data:`MAX_HEAD` bytes), byte-aligned."""
    if len(data) > MAX_HEAD:
        raise ValueError(f"{len(data)} bytes: a stored block holds at most {MAX_HEAD}")
    return (b"\x01" if final else b"\x00") + struct.pack("<HH", len(data), len(data) ^ 0xFFFF) + data


def stored(data: bytes) -> bytes:
    """The zlib stream of ``data`` (at most :data:`MAX_HEAD` bytes) as one final stored block."""
    return b"".join((_ZLIB_HEADER, _stored_block(data, final=True), struct.pack(">I", zlib.adler32(data))))


def compress(data: bytes, level: int = 1) -> bytes:
    """The zlib stream of ``data``: below :data:`STORED_BELOW` bytes one stored (uncompressed)
    block, which costs no deflate at all; else deflated at ``level`` with, below 32 KiB, a window
    of the next power of two above the object's size, and below 2 KiB a smaller hash table (within
    a few percent of ``zlib.compress``'s size, up to twice as fast for small objects).

    Small objects are stored: deflating a checkpoint's ten or so small objects took 30-50 µs apiece,
    a fifth of the write (``scripts/bench_langgraph.py``), to save about 300 bytes each, which the
    background merge (``git pack-objects``) mostly stores as deltas anyway."""
    size = len(data)
    if size < STORED_BELOW:
        return stored(data)
    if size >= _SMALL:
        return zlib.compress(data, level)
    wbits = max(10, size.bit_length())  # 2**wbits > size (zlib's smallest usable window is 2**10)
    # a small hash table (memLevel 4) pays below 2 KiB; above, data that does not compress (trees,
    # binary files) took two to six times as long as with zlib's default table
    deflater = zlib.compressobj(level, zlib.DEFLATED, wbits, 4 if size < _SMALL_TABLE else 8)
    return deflater.compress(data) + deflater.flush()


def adler32_combine(adler1: int, adler2: int, len2: int) -> int:
    """The Adler-32 of ``a + b`` from that of ``a``, that of ``b`` and ``len(b)`` (zlib's
    ``adler32_combine``, which Python's zlib does not expose)."""
    rem = len2 % _ADLER_BASE
    sum1 = adler1 & 0xFFFF
    sum2 = (rem * sum1) % _ADLER_BASE
    sum1 += (adler2 & 0xFFFF) + _ADLER_BASE - 1
    sum2 += ((adler1 >> 16) & 0xFFFF) + ((adler2 >> 16) & 0xFFFF) + _ADLER_BASE - rem
    sum1 %= _ADLER_BASE
    sum2 %= _ADLER_BASE
    return sum1 | (sum2 << 16)


class AppendDeflater:
    """Parts appended one by one, compressed once each; :meth:`stream` gives the zlib stream of
    ``head + b"".join(parts)`` for any ``head`` of at most :data:`MAX_HEAD` bytes."""

    def __init__(self, level: int = 1) -> None:
        self._deflate = zlib.compressobj(level, zlib.DEFLATED, -15)  # raw deflate: no header
        self._out: list[bytes] = []
        self.parts: list[bytes] = []  # what was appended (kept by reference), in order
        self.length = 0  # total bytes of the parts
        self._adler = 1  # Adler-32 of the parts

    def append(self, part: bytes) -> None:
        """Compress ``part`` after those appended before (an empty part costs nothing)."""
        self.parts.append(part)
        if not part:
            return
        self._out.append(self._deflate.compress(part) + self._deflate.flush(zlib.Z_SYNC_FLUSH))
        self.length += len(part)
        self._adler = zlib.adler32(part, self._adler)

    def joined(self) -> bytes:
        """Every part appended so far, as one ``bytes``."""
        return b"".join(self.parts)

    def stream(self, head: bytes) -> bytes:
        """The zlib stream of ``head`` followed by every part appended so far."""
        adler = adler32_combine(zlib.adler32(head), self._adler, self.length)
        return b"".join((_ZLIB_HEADER, _stored_block(head, final=False), *self._out, _FINAL_EMPTY_BLOCK,
                         struct.pack(">I", adler)))
