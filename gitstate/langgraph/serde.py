"""The saver's default serializer: LangGraph's ``JsonPlusSerializer`` locked down so that decoding a
checkpoint never imports or calls code it was not told to trust.

LangGraph's msgpack format stores objects as ``(module, name, args)`` extension records and, by
default, *imports and calls* ``module.name(*args)`` on load: a channel blob fetched from an untrusted
remote (``os.system`` with a shell command) would run on ``get_tuple``. :class:`StrictSerializer`
checks every such record, nested ones included, before anything is constructed:

* allowed: LangGraph's built-in safe list (datetime, uuid, decimal, set, pathlib, ``re.compile``,
  LangChain messages and documents, ``Send``/``Command``/``Interrupt`` …) and the types the caller
  opts in to (``StrictSerializer(allowed=[MyModel, ("pkg.mod", "Name")])``, or
  ``GitCheckpointSaver(store, allowed_types=[...])``; LangGraph's own ``with_allowlist`` also works);
* anything else raises :class:`~gitstate.errors.UnsafeValueError` instead of being constructed or
  silently degraded to its raw arguments;
* ``pickle`` payloads are never unpickled, and ``json`` payloads only revive LangGraph's safe types.

The same check runs when a value is written (:meth:`StrictSerializer.dumps_typed`): a value that
names a type this serializer would refuse to read back raises
:class:`~gitstate.errors.TypeNotAllowedError` (naming the type and the ``allowed_types=`` fix) before
anything is stored, instead of being written and then making the thread unreadable.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import ormsgpack
from langgraph.checkpoint.serde import _msgpack as lg_msgpack
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from gitstate.errors import TypeNotAllowedError, UnsafeValueError

__all__ = ["StrictSerializer"]

_CONSTRUCTORS = frozenset({0, 1, 2, 4, 5})  # single arg, positional, keyword, pydantic v1, pydantic v2
_METHOD = 3  # (module, name, arg, method): module.name.method(arg)
_OPTS = ormsgpack.OPT_NON_STR_KEYS


class StrictSerializer(JsonPlusSerializer):
    """``JsonPlusSerializer`` that refuses to construct types outside an allowlist (see module doc).

    ``allowed`` adds types (classes or ``(module, name)`` tuples) to LangGraph's built-in safe list.
    Pickle is never used, neither to write nor to read."""

    def __init__(self, *, allowed: Iterable[type | tuple[str, ...]] = ()) -> None:
        extra = tuple(allowed)
        super().__init__(pickle_fallback=False, allowed_json_modules=None,
                         allowed_msgpack_modules=extra or None)

    def _allows(self, key: tuple[str, ...]) -> bool:
        if key in lg_msgpack.SAFE_MSGPACK_TYPES:
            return True
        extra = self._allowed_msgpack_modules
        return isinstance(extra, set) and key in extra

    def _checker(self, blocked: list[str], malformed: list[str]) -> Callable[[int, bytes], None]:
        """An ext hook that checks a record and everything nested in it, building nothing: a
        refused type is noted in ``blocked``, a malformed record in ``malformed``, and either
        aborts the decode (``ValueError``)."""

        def check(code: int, data: bytes) -> None:
            record = ormsgpack.unpackb(data, ext_hook=check, option=_OPTS)
            if code not in _CONSTRUCTORS and code != _METHOD:
                return None  # numpy arrays, delta snapshots (contents checked above), unknown codes
            if (not isinstance(record, (list, tuple)) or len(record) < 3
                    or not all(isinstance(part, str) for part in record[:2])):
                malformed.append(f"malformed extension record {code}")
                raise ValueError(malformed[-1])
            if code == _METHOD:
                ok = len(record) > 3 and (record[0], record[1], record[3]) in lg_msgpack.SAFE_MSGPACK_METHODS
            else:
                ok = self._allows((record[0], record[1]))
            if not ok:
                # a method record names module.type.method; a constructor's (pydantic's too) the type
                blocked.append(".".join(str(p) for p in (record[0], record[1], *(record[3:4] if code == _METHOD else ()))))
                raise ValueError(blocked[-1])
            return None

        return check

    def _gate(self, blocked: list[str], malformed: list[str]) -> Callable[[int, bytes], Any]:
        """An ext hook that checks a record (:meth:`_checker`) before LangGraph's own hook builds it."""
        check = self._checker(blocked, malformed)

        def gate(code: int, data: bytes) -> Any:
            check(code, data)
            return self._unpack_ext_hook(code, data)

        return gate

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        """Encode a value, refusing (:class:`TypeNotAllowedError`, nothing written) one that names a
        type :meth:`loads_typed` would refuse to read back."""
        kind, data = self.dumps_typed_unchecked(obj)
        self.check_typed(kind, data)
        return kind, data

    def dumps_typed_unchecked(self, obj: Any) -> tuple[str, bytes]:
        """LangGraph's encoding of a value, without :meth:`check_typed` (for a caller that checks
        only what it stores anew)."""
        return super().dumps_typed(obj)

    def check_typed(self, kind: str, data: bytes) -> None:
        """Raise :class:`TypeNotAllowedError` when an encoded value names a type :meth:`loads_typed`
        would refuse to build (one C-speed parse: a few µs per message)."""
        if kind == "msgpack":
            blocked: list[str] = []
            try:
                ormsgpack.unpackb(data, ext_hook=self._checker(blocked, []), option=_OPTS)
            except ValueError:
                if blocked:
                    raise TypeNotAllowedError(blocked[0]) from None
                raise

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        """Decode a typed value; raises :class:`UnsafeValueError` for a type outside the allowlist
        and for pickle payloads (a malformed extension record is a ``ValueError``: damage)."""
        kind, payload = data
        if kind == "msgpack":
            blocked: list[str] = []
            try:
                return ormsgpack.unpackb(payload, ext_hook=self._gate(blocked, []), option=_OPTS)
            except ValueError:
                if blocked:
                    raise UnsafeValueError("", blocked[0]) from None
                raise
        if kind == "pickle":
            raise UnsafeValueError("", "pickle")
        return super().loads_typed(data)
