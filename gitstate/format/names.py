"""Reversible encoding of user-chosen names (run ids, branch names, state keys) into single git ref
components and tree entry names, and the layout of gitstate's refs under ``refs/agentos/``.

Any string round-trips: bytes outside ``[A-Za-z0-9_+=,@-]`` are written as ``%XX`` (UTF-8), so the
result never holds ``/``, ``.``, spaces, control characters or anything ``git check-ref-format``
rejects, and two different names never collide (no directory/file conflicts between refs)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from gitstate.errors import InvalidNameError

NAMESPACE = "refs/agentos/"
#: Where a pull stages fetched refs before merging them (never a place runs live).
STAGING = "refs/agentos-incoming/"
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
    if _PLAIN.fullmatch(text):
        return text
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
    return raw.decode("utf-8", "surrogatepass")


def check_name(kind: str, name: object) -> str:
    """Validate a run id or branch name and return its encoded component."""
    if not isinstance(name, str):
        raise InvalidNameError(kind, repr(name), "must be a string")
    if name == "":
        raise InvalidNameError(kind, name, "must not be empty")
    enc = encode_component(name)
    if len(enc) > MAX_COMPONENT:
        raise InvalidNameError(kind, name, f"too long once encoded ({len(enc)} > {MAX_COMPONENT} bytes)")
    return enc


def worktree_prefix(worktree: str) -> str:
    """``refs/agentos/<worktree>/runs/``."""
    return f"{NAMESPACE}{worktree}/runs/"


def run_prefix(worktree: str, run_id: str) -> str:
    """``refs/agentos/<worktree>/runs/<run>/``."""
    return f"{worktree_prefix(worktree)}{check_name('run id', run_id)}/"


def run_info_ref(worktree: str, run_id: str) -> str:
    """The ref of the run's record commit (workflow name, creation time)."""
    return run_prefix(worktree, run_id) + "run"


def branch_ref(worktree: str, run_id: str, branch: str) -> str:
    """The ref of a branch tip of a run."""
    return run_prefix(worktree, run_id) + "heads/" + check_name("branch name", branch)


@dataclass(frozen=True)
class ParsedRef:
    """What a ref under ``refs/agentos/`` names: worktree, run and kind (``run``, ``heads`` …)."""

    worktree: str
    run_id: str
    kind: str
    name: str | None  # branch name for kind == "heads"


def parse_ref(refname: str) -> ParsedRef | None:
    """Parse a gitstate ref name; ``None`` for anything that is not one (foreign or malformed refs)."""
    if not refname.startswith(NAMESPACE):
        return None
    parts = refname[len(NAMESPACE):].split("/")
    if len(parts) < 4 or parts[1] != "runs":
        return None
    try:
        run_id = decode_component(parts[2])
        if parts[3] == "run" and len(parts) == 4:
            return ParsedRef(parts[0], run_id, "run", None)
        if parts[3] == "heads" and len(parts) == 5:
            return ParsedRef(parts[0], run_id, "heads", decode_component(parts[4]))
    except ValueError:
        return None
    return ParsedRef(parts[0], run_id, parts[3], "/".join(parts[4:]) or None)
