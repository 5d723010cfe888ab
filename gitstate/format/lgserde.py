"""LangGraph's serialised values as the saver stores them, and as gitstate shows them.

Stored bytes: a value is LangGraph's serde ``dumps_typed`` result ``(type, bytes)``, kept as a blob
``<type> NUL <bytes>`` (:func:`typed_blob`); a list may be kept as msgpack arrays of its items
(:func:`array_header`, :func:`split_array`). Types: ``msgpack`` (the usual one), ``json`` (older
LangGraph), ``null``, ``bytes``, ``bytearray``, and ``pickle`` (never written by gitstate, never
read).

Shown values (:func:`show_typed`): plain data decoded by the bounded pure-Python reader of
:mod:`gitstate.format.msgpack`, **without importing or constructing anything** the data names, so
it is safe on a blob fetched from an untrusted remote and needs neither LangGraph nor ormsgpack.
LangGraph's msgpack extension records (``langgraph/checkpoint/serde/jsonplus.py``) are shown as:

* a LangChain message (a pydantic record of a ``langchain_core.messages`` module): its fields
  without the empty ones, ``{"type": "human", "content": "...", "id": ..., "tool_calls": ...}``;
* any other object: ``{"$type": "module.Name", <field>: <value>, ...}`` for keyword and pydantic
  records (dataclasses, named tuples, models), ``{"$type": ..., "value": arg}`` for single-argument
  and method records (UUID, Decimal, Enum, set, datetime …), ``{"$type": ..., "args": [...]}`` for
  positional ones (Send, date, timedelta, Path …); a numpy array as its dtype, shape and size;
* what cannot be shown: ``{"$ext": code, "size": n}`` (an unknown extension),
  ``{"$error": why, "size": n}`` (bytes that do not decode), ``{"$pickle": n}``.

LangChain's JSON serialisation (``{"lc": 1, "type": "constructor", "id": [...], "kwargs": {...}}``)
is shown the same way. Integers in JSON longer than 4,300 digits are shown by size only."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from gitstate.errors import CorruptObjectError
from gitstate.format import msgpack

__all__ = [
    "MSGPACK", "TYPED_KINDS", "array_header", "is_write_records", "parse_typed",
    "show_msgpack", "show_pair", "show_payload", "show_typed", "show_writes", "split_array", "task_node",
    "typed_blob",
]

MSGPACK = "msgpack"
#: The serde types LangGraph writes (``pickle`` only with ``pickle_fallback``, which gitstate refuses).
TYPED_KINDS = frozenset({MSGPACK, "json", "null", "bytes", "bytearray", "pickle"})

Typed = tuple[str, bytes]

# LangGraph's extension codes (langgraph.checkpoint.serde.jsonplus)
EXT_SINGLE_ARG, EXT_POS_ARGS, EXT_KW_ARGS, EXT_METHOD, EXT_PYDANTIC_V1, EXT_PYDANTIC_V2 = 0, 1, 2, 3, 4, 5
EXT_NUMPY, EXT_DELTA_SNAPSHOT = 6, 7
TYPE = "$type"
MAX_JSON_DIGITS = 4300


# -- stored bytes ------------------------------------------------------------------------------

def typed_blob(typed: Typed) -> bytes:
    """The blob bytes of a serde-typed value: ``type NUL payload``."""
    kind, data = typed
    return kind.encode("utf-8") + b"\x00" + bytes(data)


def parse_typed(data: bytes, oid: str) -> Typed:
    """Invert :func:`typed_blob` (:class:`CorruptObjectError` naming ``oid`` when there is no type)."""
    kind, sep, payload = data.partition(b"\x00")
    if not sep:
        raise CorruptObjectError(oid, "typed value blob has no type")
    return kind.decode("utf-8", "replace"), payload


def array_header(count: int) -> bytes:
    """The msgpack array header for ``count`` items."""
    if count < 16:
        return bytes([0x90 | count])
    if count < 0x10000:
        return b"\xdc" + count.to_bytes(2, "big")
    return b"\xdd" + count.to_bytes(4, "big")


def split_array(data: bytes, oid: str) -> tuple[int, bytes]:
    """Item count and item bytes of a msgpack array blob."""
    if not data:
        raise CorruptObjectError(oid, "empty list chunk")
    first = data[0]
    if 0x90 <= first <= 0x9F:
        return first & 0x0F, data[1:]
    if first == 0xDC and len(data) >= 3:
        return int.from_bytes(data[1:3], "big"), data[3:]
    if first == 0xDD and len(data) >= 5:
        return int.from_bytes(data[1:5], "big"), data[5:]
    raise CorruptObjectError(oid, "list chunk is not a msgpack array")


# -- shown values ------------------------------------------------------------------------------

def _error(why: str, size: int) -> dict[str, Any]:
    return {"$error": why, "size": size}


def show_typed(kind: str, payload: bytes) -> Any:
    """A serde-typed value as plain data for display (see the module docstring); never raises for
    what the bytes hold."""
    payload = bytes(payload)
    if kind == "null":
        return None
    if kind in ("bytes", "bytearray"):
        return payload
    if kind == MSGPACK:
        return show_msgpack(payload)
    if kind == "json":
        return _show_json(payload)
    if kind == "pickle":
        return {"$pickle": len(payload)}
    return _error(f"unknown serde type {kind[:40]!r}", len(payload))


def show_msgpack(payload: bytes) -> Any:
    """LangGraph msgpack bytes as plain data for display."""
    try:
        return msgpack.unpack(payload, _show_ext)
    except msgpack.MsgpackError as exc:
        return _error(f"not msgpack: {exc}", len(payload))


def _type_name(record: Any) -> str | None:
    if isinstance(record, list) and len(record) >= 3 and isinstance(record[0], str) and isinstance(record[1], str):
        return f"{record[0]}.{record[1]}" if record[0] else record[1]
    return None


def _is_message(name: str) -> bool:
    return name.startswith(("langchain_core.messages.", "langchain.schema.messages.")) and name.rsplit(
        ".", 1)[-1].endswith(("Message", "MessageChunk"))


def _message(fields: Mapping[Any, Any]) -> dict[Any, Any]:
    """A message's fields without the empty ones (``type`` and ``content`` always kept)."""
    keep: dict[Any, Any] = {}
    for key, value in fields.items():
        if key in ("type", "content") or not (value is None or value is False or value == {} or value == []):
            keep[key] = value
    return keep


def _fields(name: str, fields: Any) -> dict[Any, Any]:
    """``{"$type": name, **fields}``, or ``{"$type": name, "fields": ...}`` when the fields are not a
    text-keyed map that leaves ``$type`` alone."""
    if isinstance(fields, dict) and TYPE not in fields and all(isinstance(k, str) for k in fields):
        return {TYPE: name, **fields}
    return {TYPE: name, "fields": fields}


def _show_ext(code: int, data: bytes, nested: Callable[[bytes], Any]) -> Any:
    if code == -1:
        return msgpack.timestamp(data)
    if code not in (EXT_SINGLE_ARG, EXT_POS_ARGS, EXT_KW_ARGS, EXT_METHOD, EXT_PYDANTIC_V1, EXT_PYDANTIC_V2,
                    EXT_NUMPY, EXT_DELTA_SNAPSHOT):
        return {"$ext": code, "size": len(data)}
    try:
        record = nested(data)
    except msgpack.MsgpackError as exc:
        return {"$ext": code, "error": f"payload is not msgpack: {exc}", "size": len(data)}
    if code == EXT_DELTA_SNAPSHOT:
        return record
    if code == EXT_NUMPY:
        if isinstance(record, list) and len(record) == 4:
            dtype, shape, order, buf = record
            return {TYPE: "numpy.ndarray", "dtype": dtype, "shape": shape, "order": order,
                    "size": len(buf) if isinstance(buf, bytes) else None}
        return {"$ext": code, "error": "malformed numpy record", "size": len(data)}
    name = _type_name(record)
    if name is None:
        return {"$ext": code, "error": "malformed record (expected [module, name, ...])", "size": len(data)}
    arg = record[2]
    if code in (EXT_PYDANTIC_V1, EXT_PYDANTIC_V2):
        if _is_message(name) and isinstance(arg, dict):
            return _message(arg)
        return _fields(name, arg)
    if code == EXT_KW_ARGS:
        return _fields(name, arg)
    if code == EXT_POS_ARGS:
        return {TYPE: name, "args": arg}
    if name == "uuid.UUID" and isinstance(arg, str) and len(arg) == 32:
        arg = f"{arg[:8]}-{arg[8:12]}-{arg[12:16]}-{arg[16:20]}-{arg[20:]}"
    out = {TYPE: name, "value": arg}
    if code == EXT_METHOD and (len(record) < 4 or record[3] != "fromisoformat"):
        out["$method"] = record[3] if len(record) > 3 else None
    return out


# -- JSON (older LangGraph, LangChain's serialisation) ------------------------------------------

def _json_int(text: str) -> Any:
    digits = len(text.lstrip("-"))
    if digits > MAX_JSON_DIGITS:
        return {"$int": f"{text[:20]}…", "digits": digits}
    return int(text)


def _lc_object(value: dict[str, Any]) -> Any:
    ident = value.get("id")
    if value.get("lc") not in (1, 2) or not isinstance(ident, list) or not all(isinstance(p, str) for p in ident):
        return value
    name = ".".join(ident)
    kind = value.get("type")
    if kind == "constructor":
        found = value.get("kwargs")
        kwargs: dict[str, Any] = found if isinstance(found, dict) else {}
        if _is_message(name) or (ident[-1].endswith("Message") and "messages" in ident):
            return _message({"type": kwargs.get("type", ident[-1]), **kwargs})
        out = _fields(name, kwargs)
        if value.get("args"):
            out["args"] = value["args"]
        return out
    if kind == "secret":
        return {TYPE: name, "secret": True}
    if kind == "not_implemented":
        return {TYPE: name, "repr": value.get("repr")}
    return value


def _bounded(value: Any, depth: int = 0) -> Any:
    """``value`` with containers nested deeper than :data:`msgpack.MAX_DEPTH` replaced by stubs."""
    if isinstance(value, dict | list) and depth >= msgpack.MAX_DEPTH:
        return {"$more": f"nested deeper than {msgpack.MAX_DEPTH} levels"}
    if isinstance(value, dict):
        return {k: _bounded(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [_bounded(v, depth + 1) for v in value]
    return value


def _show_json(payload: bytes) -> Any:
    try:
        value = json.loads(payload.decode("utf-8", "replace"), parse_int=_json_int, object_hook=_lc_object)
    except (ValueError, RecursionError) as exc:
        return _error(f"not JSON: {str(exc)[:200]}", len(payload))
    return _bounded(value)


# -- payloads of a checkpoint --------------------------------------------------------------------

def show_pair(pair: Any) -> Any:
    """A ``[type, bytes]`` pair as stored in ``meta.cbor`` and in write records, shown."""
    if isinstance(pair, list | tuple) and len(pair) == 2 and isinstance(pair[0], str) and isinstance(pair[1], bytes):
        return show_typed(pair[0], pair[1])
    return {"$error": "not a [type, bytes] pair"}


def show_payload(payload: Any) -> Any:
    """The ``langgraph`` entry of a checkpoint's ``meta.cbor`` (``{"checkpoint": [type, bytes],
    "metadata": [type, bytes]}``) with both values shown."""
    if not isinstance(payload, dict):
        return payload
    return {k: show_pair(v) if k in ("checkpoint", "metadata") else v for k, v in payload.items()}


def _is_record(r: Any) -> bool:
    return (isinstance(r, list) and len(r) == 6 and isinstance(r[0], str) and isinstance(r[1], str)
            and isinstance(r[2], str) and isinstance(r[3], bytes) and isinstance(r[4], str)
            and isinstance(r[5], int))


def is_write_records(value: Any) -> bool:
    """Whether a decoded CBOR value has the shape of ``langgraph-writes.cbor`` (a non-empty list of
    ``[task_id, channel, type, bytes, task_path, idx]`` records)."""
    return isinstance(value, list) and bool(value) and all(_is_record(r) for r in value)


def show_writes(records: Any) -> Any:
    """The records of ``langgraph-writes.cbor`` (``[task_id, channel, type, bytes, task_path,
    idx]``) as ``{"task", "path", "node", "channel", "idx", "value"}`` maps, values shown (``node``:
    the node the task ran, when its path names one)."""
    if not isinstance(records, list):
        return records
    out: list[Any] = []
    for r in records:
        if _is_record(r):
            out.append({"task": r[0], "path": r[4], "node": task_node(r[4]), "channel": r[1], "idx": r[5],
                        "value": show_typed(r[2], r[3])})
        else:
            out.append({"$error": "not a write record"})
    return out


def task_node(path: Any) -> str | None:
    """The node a write's task path names (``"~__pregel_pull, review"`` → ``review``), if any."""
    if not isinstance(path, str):
        return None
    parts = [p.strip() for p in path.split(",")]
    if len(parts) >= 2 and parts[0].endswith("__pregel_pull") and parts[1]:
        return parts[1]
    return None
