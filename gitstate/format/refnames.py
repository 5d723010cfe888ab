"""Reversible encoding of any string (a run id, a branch name, a state key, a worktree's admin
name) into one git ref component or tree entry name.

Bytes outside ``[A-Za-z0-9_+=,@-]`` are written as ``%XX`` (UTF-8), so the result never holds
``/``, ``.``, spaces, control characters or anything ``git check-ref-format`` rejects, and two
different names never collide (no directory/file conflicts between refs)."""

from __future__ import annotations

import re

MAX_COMPONENT = 200  # bytes; file systems cap one name at 255 and git adds ".lock"

_SAFE = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_+=,@-")
_ESCAPED = re.compile(r"%([0-9A-F]{2})")
# Names made only of safe characters encode to themselves (the common case: ids, keys, "main").
_PLAIN = re.compile(r"[A-Za-z0-9_+=,@-]+")


def encode_component(name: str) -> str:
    """Encode any string as one ref component / tree entry name (``""`` becomes ``%``)."""
    if name == "":
        return "%"
    if _PLAIN.fullmatch(name):
        return name
    out = []
    for byte in name.encode("utf-8", "surrogatepass"):
        out.append(chr(byte) if byte in _SAFE else f"%{byte:02X}")
    return "".join(out)


def decode_component(text: str) -> str:
    """Invert :func:`encode_component`; raises ``ValueError`` on text it could not have produced."""
    if text == "%":
        return ""
    if _PLAIN.fullmatch(text) or not text:
        return text  # "" stays "" (a session file's empty suffix after its hashed name)
    raw = bytearray()
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "%":
            m = _ESCAPED.match(text, i)
            if not m:
                raise ValueError(f"bad escape in {text!r}")
            raw.append(int(m.group(1), 16))
            i += 3
        else:
            if ord(ch) > 127 or ord(ch) not in _SAFE:
                raise ValueError(f"unexpected character {ch!r} in {text!r}")
            raw.append(ord(ch))
            i += 1
    value = raw.decode("utf-8", "surrogatepass")
    if encode_component(value) != text:  # e.g. "%41" for "A": two ref names must never mean one name
        raise ValueError(f"{text!r} is not how {value!r} is encoded")
    return value
