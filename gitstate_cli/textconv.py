"""The textconv git runs for every stored payload it shows (``git agentos setup`` registers it):
CBOR and LangGraph's serialised values in, readable JSON out.

git starts one process per blob, so this imports only ``gitstate.format`` modules that need no
pygit2: the library's CBOR decoder (which refuses every CBOR tag except big integers, so nothing but
plain data is ever built) and the LangGraph display decoder (pure Python, no ormsgpack: it imports
and builds nothing the data names). What is converted:

* gitstate CBOR payloads (``meta.cbor``, ``state/…``, ``node.cbor`` …) as JSON; in a LangGraph
  checkpoint's ``meta.cbor`` the serde-typed checkpoint and metadata are shown decoded, and
  ``langgraph-writes.cbor`` as ``{"task", "path", "node", "channel", "idx", "value"}`` records;
* LangGraph channel values under ``langgraph/``: a ``<channel>.v`` blob (``type NUL bytes``) and a
  list chunk (a file named by 10 digits holding a msgpack array) as their values shown the way
  ``git agentos show`` shows them (messages as ``{type, content, ...}``).

Anything else is printed unchanged, so a user's own file matching a pattern still diffs as before."""

from __future__ import annotations

import os
import re

from gitstate.errors import CorruptObjectError
from gitstate.format import lgserde
from gitstate.format.encoding import loads
from gitstate_cli.output import dumps, readable

_CHUNK_NAME = re.compile(r"(?:^|_)\d{10}$")  # git names the temp file <dir>/<name> or XXXXXX_<name>
_LG_KIND = "gitstate/checkpoint"


def _text(value: object) -> bytes:
    return (dumps(readable(value)) + "\n").encode("utf-8")


def _langgraph_value(data: bytes, name: str) -> bytes | None:
    """A LangGraph channel value blob or list chunk shown, or ``None`` when ``data`` is neither."""
    kind, sep, payload = data.partition(b"\x00")
    if sep and 0 < len(kind) <= 16 and kind.decode("ascii", "replace") in lgserde.TYPED_KINDS:
        return _text(lgserde.show_typed(kind.decode("ascii"), payload))
    if _CHUNK_NAME.search(os.path.basename(name)) and data[:1] and (0x90 <= data[0] <= 0x9F or data[0] in (0xDC, 0xDD)):
        return _text(lgserde.show_msgpack(data))  # a list chunk (one that does not decode: an $error stub)
    return None


def convert(data: bytes, name: str = "") -> bytes:
    """Readable text for one blob (``name``: the file git handed over, for its base name): see the
    module docstring; ``data`` unchanged when it is none of those."""
    shown = _langgraph_value(data, name)
    if shown is not None:
        return shown
    try:
        value = loads(data)
    except CorruptObjectError:  # not gitstate CBOR: show the bytes as they are
        return data
    if isinstance(value, dict) and value.get("format") == _LG_KIND and isinstance(value.get("langgraph"), dict):
        value = {**value, "langgraph": lgserde.show_payload(value["langgraph"])}
    elif lgserde.is_write_records(value):
        value = lgserde.show_writes(value)
    return _text(value)
