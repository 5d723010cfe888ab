"""The layout of gitstate's refs under ``refs/agentos/`` (``<worktree>/runs/<run>/run``,
``.../heads/<branch>``, ``.../files/<path>``) and the checks on the names users choose. Names are
encoded into ref components by :mod:`gitstate.format.refnames` (re-exported here)."""

from __future__ import annotations

from dataclasses import dataclass

from gitstate.errors import InvalidNameError
from gitstate.format.refnames import MAX_COMPONENT, decode_component, encode_component

NAMESPACE = "refs/agentos/"
#: Where a pull stages fetched refs before merging them (never a place runs live).
STAGING = "refs/agentos-incoming/"
def check_name(kind: str, name: object) -> str:
    """Validate a run id or branch name and return its encoded component."""
    if not isinstance(name, str):
        raise InvalidNameError(kind, repr(name), "must be a string")
    if name == "":
        raise InvalidNameError(kind, name, "must not be empty")
    if not name.isascii():
        try:
            name.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: bytes that were not UTF-8 (a command line's \xff)
            raise InvalidNameError(kind, _shown_bytes(name), "is not UTF-8 text") from None
    enc = encode_component(name)
    if len(enc) > MAX_COMPONENT:
        raise InvalidNameError(kind, name, f"too long once encoded ({len(enc)} > {MAX_COMPONENT} bytes)")
    return enc


def _shown_bytes(name: str) -> str:
    """``name`` with each byte that is not UTF-8 shown as ``\\xNN`` (other lone surrogates as
    ``\\uNNNN``), printable ASCII as it is."""
    try:
        raw = name.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return name.encode("ascii", "backslashreplace").decode("ascii")
    return raw.decode("ascii", "backslashreplace")


MAIN_WORKTREE = "main"  # the worktree key of a repository's main worktree
LINKED_PREFIX = "wt-"  # + the encoded id of a linked worktree's admin dir (<common>/worktrees/<id>)


def worktree_key(linked_id: str | None) -> str:
    """The key of a worktree in ref names: ``main``, or ``wt-<id>`` for the linked worktree whose
    admin dir is ``<common dir>/worktrees/<id>`` (the id is unique per repository)."""
    return MAIN_WORKTREE if linked_id is None else LINKED_PREFIX + encode_component(linked_id)


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


def node_log_ref(worktree: str, run_id: str, branch: str) -> str:
    """The ref of a branch's node log (node boundary markers)."""
    return run_prefix(worktree, run_id) + "nodes/" + check_name("branch name", branch)


@dataclass(frozen=True)
class ParsedRef:
    """What a ref under ``refs/agentos/`` names: worktree, run and kind (``run``, ``heads`` …)."""

    worktree: str
    run_id: str
    kind: str
    name: str | None  # branch name for kind == "heads"


#: The kinds of refs under ``refs/agentos/<worktree>/runs/<run>/``: the run record, branch tips,
#: node logs, session files and (the LangGraph saver's) pending writes.
REF_KINDS = frozenset({"run", "heads", "nodes", "files", "writes"})


def is_kept_copy(branch: str) -> bool:
    """Whether a branch name is one a pull gives a remote's diverged line, ``<branch>@<remote>``
    (``-<n>`` appended when taken): an ``@`` followed by a remote's name (no ``:`` or ``~``, which
    LangGraph's namespace and fork lines hold)."""
    at = branch.rfind("@")
    return at > 0 and bool(branch[at + 1:]) and not any(c in branch[at + 1:] for c in ":~")


def parse_ref(refname: str) -> ParsedRef | None:
    """Parse a gitstate ref name; ``None`` for anything that is not one (foreign or malformed refs,
    a kind not in :data:`REF_KINDS`)."""
    if not refname.startswith(NAMESPACE):
        return None
    parts = refname[len(NAMESPACE):].split("/")
    if len(parts) < 4 or parts[1] != "runs":
        return None
    try:
        run_id = decode_component(parts[2])
        if parts[3] == "run":  # exactly .../runs/<run>/run
            return ParsedRef(parts[0], run_id, "run", None) if len(parts) == 4 else None
        if parts[3] in ("heads", "nodes"):  # exactly .../runs/<run>/<kind>/<branch>: no "/" in names
            return ParsedRef(parts[0], run_id, parts[3], decode_component(parts[4])) if len(parts) == 5 else None
    except ValueError:
        return None
    if parts[3] not in REF_KINDS:
        return None
    return ParsedRef(parts[0], run_id, parts[3], "/".join(parts[4:]) or None)


__all__ = ["MAX_COMPONENT", "NAMESPACE", "REF_KINDS", "STAGING", "ParsedRef", "branch_ref", "check_name",
           "is_kept_copy",
           "decode_component", "encode_component", "node_log_ref", "parse_ref", "run_info_ref", "run_prefix", "worktree_prefix"]
