"""The textconv git runs for every stored payload it shows (``git agentos setup`` registers it):
CBOR in, readable JSON out.

git starts one process per blob, so this module is kept apart from the gitstate package (whose
import loads pygit2, several times the cost of the conversion). It decodes with the same rule as
``gitstate.encoding.loads`` — every CBOR tag refused except big integers, so nothing but plain
data is ever built — and a test checks the two agree. Input that is not such CBOR is printed
unchanged, so a user's own file matching a pattern still diffs as before."""

from __future__ import annotations

import io
import json
from typing import Any, NoReturn

import cbor2

MAX_DEPTH = 256


def _refuse(decoder: Any, *args: Any) -> NoReturn:
    raise cbor2.CBORDecodeError("CBOR tags are not allowed in gitstate payloads")


# cbor2 decodes these tags itself unless told otherwise; every other tag reaches tag_hook.
_SEMANTIC_TAGS = (0, 1, 4, 5, 25, 28, 29, 30, 35, 36, 37, 52, 54, 100, 256, 258, 260, 261, 1004, 55799)
_SEMANTIC = {tag: _refuse for tag in _SEMANTIC_TAGS}


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes):
        return {"$bytes": value.hex()}
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def convert(data: bytes) -> bytes:
    """Readable text for one blob: decoded CBOR as JSON (sorted keys, two-space indent; byte
    strings as ``{"$bytes": hex}``), or ``data`` unchanged when it is not gitstate CBOR."""
    fp = io.BytesIO(data)
    try:
        value = cbor2.CBORDecoder(fp, semantic_decoders=_SEMANTIC, tag_hook=_refuse, max_depth=MAX_DEPTH).decode()
    except Exception:  # cbor2 raises several types on garbage; all mean "show the bytes as they are"
        return data
    if fp.tell() != len(data):  # one CBOR item and nothing after it, or it is not ours
        return data
    return (json.dumps(_jsonable(value), indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")
