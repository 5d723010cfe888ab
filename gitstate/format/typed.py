"""Typed values as plain data: Python values that CBOR cannot hold directly (tuples, sets, dates,
UUIDs, enums, dataclasses, pydantic models, plain objects, dicts with non-text keys) written as
marked maps, and read back without pickle.

A marked map has the key ``$gitstate`` naming its kind::

    {"$gitstate": "tuple", "items": [...]}                      also "set", "frozenset"
    {"$gitstate": "dict", "items": [[key, value], ...]}         a dict whose keys are not all text,
                                                                or that holds the key "$gitstate"
    {"$gitstate": "datetime" | "date" | "time", "iso": "..."}
    {"$gitstate": "timedelta", "dsu": [days, seconds, microseconds]}
    {"$gitstate": "uuid", "hex": "..."}     {"$gitstate": "decimal", "text": "..."}
    {"$gitstate": "enum", "type": "module:qualname", "name": "MEMBER"}
    {"$gitstate": "class", "type": "module:qualname"}           a class itself (e.g. a response type)
    {"$gitstate": "dataclass" | "model" | "object", "type": "module:qualname", "fields": {...}}

Everything else (None, bool, int, float, text, bytes, lists, dicts with text keys) is stored as
itself. Decoding builds tuples, sets, datetimes, UUIDs and decimals itself and asks a *resolver* for
every class named by ``type``; the resolver decides which classes are allowed (an integration passes
its framework's own types and the ones the user allows) and never imports a module. An instance is
built without calling its ``__init__`` (``cls.__new__`` and the stored fields set as they were, as
pickle does), a pydantic model with ``model_construct``. Nothing is unpickled, no code named by the
data is imported."""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import enum
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from gitstate.errors import CorruptObjectError, EncodingError

MARK = "$gitstate"
MAX_DEPTH = 100

KINDS = frozenset({"tuple", "set", "frozenset", "dict", "datetime", "date", "time", "timedelta", "uuid",
                   "decimal", "enum", "class", "dataclass", "model", "object"})
#: Classes a ``class`` value may name without asking the resolver.
BUILTIN_CLASSES = {f"builtins:{c.__name__}": c for c in (str, int, float, bool, bytes, bytearray, list, dict, tuple,
                                                       set, frozenset, complex, object, type(None))}

#: ``allow(cls)`` returns the ``module:qualname`` key of a class that may be stored, else ``None``.
Allow = Callable[[type], "str | None"]
#: ``resolve(key)`` returns the class a ``module:qualname`` key names, or raises.
Resolve = Callable[[str], type]


def type_key(cls: type) -> str:
    """``module:qualname`` of a class (the form marked maps name classes by)."""
    return f"{cls.__module__}:{cls.__qualname__}"


def _is_model(value: Any) -> bool:
    """A pydantic v2 model instance (duck-typed: no pydantic import here)."""
    cls = type(value)
    return hasattr(cls, "model_fields") and hasattr(cls, "model_construct") and hasattr(value, "__dict__")


def encode(value: Any, allow: Allow, path: str = "", depth: int = 0) -> Any:
    """``value`` as plain data (see the module docs). Classes are stored only if ``allow`` gives them
    a key; anything else raises :class:`EncodingError` naming where it is."""
    if depth > MAX_DEPTH:
        raise EncodingError(path, f"nested deeper than {MAX_DEPTH} levels (a cycle?)")
    kind = type(value)
    if value is None or kind in (str, bytes, bool, int, float):
        return value
    if kind is list:
        return [encode(v, allow, f"{path}[{i}]", depth + 1) for i, v in enumerate(value)]
    if kind is dict:
        if MARK not in value and all(type(k) is str for k in value):
            return {k: encode(v, allow, f"{path}.{k}" if path else k, depth + 1) for k, v in value.items()}
        return {MARK: "dict", "items": [[encode(k, allow, f"{path}<key>", depth + 1),
                                         encode(v, allow, f"{path}[{k!r}]", depth + 1)] for k, v in value.items()]}
    if kind in (tuple, set, frozenset):
        items = sorted(value, key=repr) if kind is not tuple else value
        return {MARK: kind.__name__, "items": [encode(v, allow, f"{path}[{i}]", depth + 1)
                                               for i, v in enumerate(items)]}
    if kind is dt.datetime or kind is dt.date or kind is dt.time:
        return {MARK: kind.__name__, "iso": value.isoformat()}
    if kind is dt.timedelta:
        return {MARK: "timedelta", "dsu": [value.days, value.seconds, value.microseconds]}
    if kind is uuid.UUID:
        return {MARK: "uuid", "hex": value.hex}
    if kind is decimal.Decimal:
        return {MARK: "decimal", "text": str(value)}
    if isinstance(value, type):
        name = type_key(value)
        if name not in BUILTIN_CLASSES and allow(value) is None:
            raise EncodingError(path, f"class {value.__module__}.{value.__qualname__} is not an allowed class")
        return {MARK: "class", "type": name}
    key = allow(kind)
    if key is None:
        raise EncodingError(path, f"type {kind.__module__}.{kind.__qualname__} is not storable (not plain data "
                                  "and not an allowed class)")
    if isinstance(value, enum.Enum):
        return {MARK: "enum", "type": key, "name": value.name}
    if dataclasses.is_dataclass(value):
        fields = {f.name: encode(getattr(value, f.name), allow, f"{path}.{f.name}", depth + 1)
                  for f in dataclasses.fields(value)}
        return {MARK: "dataclass", "type": key, "fields": fields}
    if _is_model(value):
        names = list(kind.model_fields)
        extra = getattr(value, "__pydantic_extra__", None) or {}
        fields = {n: encode(getattr(value, n), allow, f"{path}.{n}", depth + 1) for n in names}
        fields.update({n: encode(v, allow, f"{path}.{n}", depth + 1) for n, v in extra.items()})
        return {MARK: "model", "type": key, "fields": fields}
    attrs = _attributes(value)
    if attrs is None:
        raise EncodingError(path, f"type {kind.__qualname__} has no fields gitstate can store")
    return {MARK: "object", "type": key,
            "fields": {n: encode(v, allow, f"{path}.{n}", depth + 1) for n, v in attrs.items()}}


def _attributes(value: Any) -> dict[str, Any] | None:
    """The instance attributes of a plain object (``__dict__`` and ``__slots__``)."""
    out: dict[str, Any] = {}
    found = False
    if hasattr(value, "__dict__"):
        out.update(vars(value))
        found = True
    for cls in type(value).__mro__:
        slots = cls.__dict__.get("__slots__", ())
        for name in (slots,) if isinstance(slots, str) else slots:
            if name in ("__dict__", "__weakref__"):
                continue
            found = True
            if hasattr(value, name):
                out[name] = getattr(value, name)
    if not found or not all(isinstance(k, str) for k in out):
        return None
    return out


def decode(data: Any, resolve: Resolve, oid: str = "?", depth: int = 0) -> Any:
    """Inverse of :func:`encode`; classes come from ``resolve`` only. A malformed marked map raises
    :class:`CorruptObjectError`."""
    if depth > MAX_DEPTH:
        raise CorruptObjectError(oid, f"typed value nested deeper than {MAX_DEPTH} levels")
    if isinstance(data, list):
        return [decode(v, resolve, oid, depth + 1) for v in data]
    if not isinstance(data, dict):
        return data
    kind = data.get(MARK)
    if kind is None:
        return {k: decode(v, resolve, oid, depth + 1) for k, v in data.items()}
    problem = check(data, depth)
    if problem:
        raise CorruptObjectError(oid, problem)
    if kind == "dict":
        return {_hashable(decode(k, resolve, oid, depth + 1), oid): decode(v, resolve, oid, depth + 1)
                for k, v in data["items"]}
    if kind in ("tuple", "set", "frozenset"):
        items = [decode(v, resolve, oid, depth + 1) for v in data["items"]]
        if kind == "tuple":
            return tuple(items)
        try:
            return set(items) if kind == "set" else frozenset(items)
        except TypeError as exc:
            raise CorruptObjectError(oid, f"set of unhashable items: {exc}") from None
    try:
        if kind in ("datetime", "date", "time"):
            return getattr(dt, kind).fromisoformat(data["iso"])
        if kind == "timedelta":
            days, seconds, micro = data["dsu"]
            return dt.timedelta(days=days, seconds=seconds, microseconds=micro)
        if kind == "uuid":
            return uuid.UUID(hex=data["hex"])
        if kind == "decimal":
            return decimal.Decimal(data["text"])
    except (ValueError, TypeError, OverflowError, decimal.InvalidOperation) as exc:
        raise CorruptObjectError(oid, f"bad {kind} value: {exc}") from None
    if kind == "class" and data["type"] in BUILTIN_CLASSES:
        return BUILTIN_CLASSES[data["type"]]
    cls = resolve(data["type"])
    if kind == "class":
        return cls
    if kind == "enum":
        if not isinstance(cls, enum.EnumMeta) or data["name"] not in cls.__members__:
            raise CorruptObjectError(oid, f"{data['type']} has no member {data['name']!r}")
        return cls.__members__[data["name"]]
    fields = {k: decode(v, resolve, oid, depth + 1) for k, v in data["fields"].items()}
    if kind == "model":
        construct = getattr(cls, "model_construct", None)
        if construct is None:
            raise CorruptObjectError(oid, f"{data['type']} is not a pydantic model")
        return construct(**fields)
    if kind == "dataclass" and not dataclasses.is_dataclass(cls):
        raise CorruptObjectError(oid, f"{data['type']} is not a dataclass")
    try:
        obj = object.__new__(cls) if cls.__new__ is object.__new__ else cls.__new__(cls)  # type: ignore[call-overload]
        for name, value in fields.items():
            object.__setattr__(obj, name, value)
    except (TypeError, AttributeError) as exc:
        raise CorruptObjectError(oid, f"cannot rebuild {data['type']}: {exc}") from None
    return obj


def _hashable(key: Any, oid: str) -> Any:
    try:
        hash(key)
    except TypeError:
        raise CorruptObjectError(oid, f"dict key {key!r} is not hashable") from None
    return key


_FIELDS: Mapping[str, tuple[tuple[str, type | tuple[type, ...]], ...]] = {
    "tuple": (("items", list),), "set": (("items", list),), "frozenset": (("items", list),),
    "dict": (("items", list),), "datetime": (("iso", str),), "date": (("iso", str),), "time": (("iso", str),),
    "timedelta": (("dsu", list),), "uuid": (("hex", str),), "decimal": (("text", str),),
    "enum": (("type", str), ("name", str)), "class": (("type", str),), "dataclass": (("type", str), ("fields", dict)),
    "model": (("type", str), ("fields", dict)), "object": (("type", str), ("fields", dict)),
}


def check(data: Mapping[str, Any], depth: int = 0) -> str | None:
    """Why one marked map is malformed (its own keys only), or ``None``."""
    kind = data.get(MARK)
    if kind not in KINDS:
        return f"unknown typed value kind {kind!r}"
    wanted = _FIELDS[kind]
    if set(data) != {MARK, *(name for name, _ in wanted)}:
        return f"typed value {kind!r} has keys {sorted(data)}"
    for name, typ in wanted:
        if not isinstance(data[name], typ):
            return f"typed value {kind!r}: {name} is not a {getattr(typ, '__name__', typ)}"
    if kind == "dict" and not all(isinstance(p, list) and len(p) == 2 for p in data["items"]):
        return "typed dict items are not [key, value] pairs"
    if kind == "timedelta" and not (len(data["dsu"]) == 3 and all(type(x) is int for x in data["dsu"])):
        return "typed timedelta is not [days, seconds, microseconds]"
    if kind in ("dataclass", "model", "object") and not all(isinstance(k, str) for k in data["fields"]):
        return f"typed {kind} has non-text field names"
    return None


def check_tree(data: Any, depth: int = 0) -> str | None:
    """Why a stored typed value (anywhere inside ``data``) is malformed, or ``None``: the check
    ``verify`` runs, which never resolves a class."""
    if depth > MAX_DEPTH:
        return f"typed value nested deeper than {MAX_DEPTH} levels"
    if isinstance(data, list):
        for item in data:
            problem = check_tree(item, depth + 1)
            if problem:
                return problem
        return None
    if not isinstance(data, dict):
        return None
    if MARK in data:
        problem = check(data, depth)
        if problem:
            return problem
        children: list[Any] = []
        kind = data[MARK]
        if kind in ("tuple", "set", "frozenset", "dict"):
            children = list(data["items"])
        elif kind in ("dataclass", "model", "object"):
            children = list(data["fields"].values())
        return check_tree(children, depth + 1)
    return check_tree(list(data.values()), depth + 1)
