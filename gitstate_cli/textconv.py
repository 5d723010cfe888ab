"""The textconv git runs for every stored payload it shows (``git agentos setup`` registers it):
CBOR in, readable JSON out.

git starts one process per blob, so this imports only ``gitstate.encoding`` (cbor2, no pygit2):
the library's own decoder, which refuses every CBOR tag except big integers, so nothing but plain
data is ever built. Input that is not such CBOR is printed
unchanged, so a user's own file matching a pattern still diffs as before."""

from __future__ import annotations

from gitstate.errors import CorruptObjectError
from gitstate.format.encoding import loads
from gitstate_cli.output import dumps


def convert(data: bytes) -> bytes:
    """Readable text for one blob: decoded CBOR as JSON (sorted keys, two-space indent; byte
    strings as ``{"$bytes": hex}``), or ``data`` unchanged when it is not gitstate CBOR."""
    try:
        value = loads(data)
    except CorruptObjectError:  # not gitstate CBOR: show the bytes as they are
        return data
    return (dumps(value) + "\n").encode("utf-8")
