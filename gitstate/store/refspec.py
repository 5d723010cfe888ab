"""Checkpoint references as people type them: the one grammar every ``git agentos`` command reads
for a run, a branch or a checkpoint.

Grammar::

    REF    := ID [ '~' N ] | RUN [ '@' BRANCH ] [ '~' N | ':node:' NAME ]
    TARGET := REF of the same run | ID | '~' N | '@' BRANCH [ '~' N | ':node:' NAME ] | 'node:' NAME

``ID`` is a full checkpoint id or a prefix of 4+ hex digits naming one checkpoint, or a LangGraph
checkpoint id or a prefix of 8+ characters of one (other objects
sharing it are passed over; a prefix of several checkpoints is an error that lists the candidates); ``RUN`` alone is the tip of its ``main`` branch, or for a LangGraph
thread of the line holding its latest checkpoint (:func:`default_branch`; for ``undo``, the line
that moved last, :func:`moved_branch`); ``~N`` goes N
checkpoints back along first parents; ``:node:NAME`` is the latest exit checkpoint of node NAME on
that branch. A TARGET is read relative to a run and a branch: ``~2`` is two back from that branch's
tip, ``@fix`` the tip of branch ``fix`` of the same run.

Run ids and branch names may contain any character, including ``@``, ``~`` and ``:`` (LangGraph's
fork branches are ``main~<checkpoint id>``, a pull keeps a diverged line as ``main@origin``), so
the text is read in this order, the first match winning:

1. the whole text is an existing run id of this worktree → the tip of its default branch (an
   exact run id wins);
2. every way of reading the text as ``RUN@BRANCH``, ``…~N`` or ``…:node:NAME`` with an existing
   run is a candidate; the winner is the one whose branch exists, then the one with the longest
   run id (``a@b@c`` is branch ``c`` of run ``a@b`` when that run exists, else branch ``b@c`` of run
   ``a``), then the literal branch name (``r@b~3`` is branch ``b~3`` when it exists, else three
   back from ``b``);
3. the text is 4–40 hex digits (optionally followed by ``~N``) → a checkpoint id or unique prefix;
4. the text is a LangGraph checkpoint id (a UUID, as ``get_state`` gives it) or 8+ characters of
   one (optionally followed by ``~N``) → that checkpoint of this worktree's LangGraph threads
   (after rule 3 found no checkpoint, for a prefix that is all hex digits);
5. otherwise :class:`RunNotFound` (when the text has the shape of a run reference) or
   :class:`InvalidReferenceError`.

Resolution only reads; it never changes the store."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from gitstate.errors import (
    AmbiguousReferenceError,
    BranchNotFound,
    CheckpointNotFound,
    CorruptObjectError,
    InvalidNameError,
    InvalidReferenceError,
    RunNotFound,
)
from gitstate.format import lgtree
from gitstate.format.checkpoint import latest_line
from gitstate.format.names import check_name, parse_ref, worktree_prefix
from gitstate.git.refs import reflog_mtime

if TYPE_CHECKING:
    from gitstate.format.checkpoint import Checkpoint
    from gitstate.store.base import StoreCore
    from gitstate.store.run import Run
    from gitstate.store.store import Store

__all__ = ["Located", "Parsed", "branch_text", "default_branch", "locate", "locate_branch", "moved_branch", "parse",
           "resolve", "resolve_target"]

_STEPS = re.compile(r"~(\d+)$")
_NODE = ":node:"
_HEX = re.compile(r"[0-9a-fA-F]{4,40}")
_LG_ID = re.compile(r"[0-9a-fA-F][0-9a-fA-F-]{7,}")  # a LangGraph checkpoint id, or 8+ characters of one
#: ``N`` of a ``~N`` of more than 18 significant digits: a count past any line (int() refuses
#: text of more than ``sys.get_int_max_str_digits()`` digits, so the text is not converted).
_FAR = 10**18


def _count(digits: str) -> int:
    """``N`` of ``~N``, for a run of digits of any length (never ValueError)."""
    significant = digits.lstrip("0")
    return int(significant or "0") if len(significant) <= 18 else _FAR


@dataclass(frozen=True)
class Parsed:
    """A reference split into its parts (``run`` is ``None`` for a checkpoint id); ``named`` is
    whether the text named the branch (``RUN@BRANCH``) rather than taking the default one."""

    run: str | None
    branch: str = "main"
    back: int = 0
    node: str | None = None
    oid: str | None = None
    named: bool = False

    @property
    def is_branch(self) -> bool:
        """Whether the reference names a branch tip itself (``RUN`` or ``RUN@BRANCH``)."""
        return self.run is not None and self.back == 0 and self.node is None


@dataclass(frozen=True)
class Located:
    """What a reference names, for commands that act on a run or a branch: the run, the branch
    (the run's :func:`default_branch` unless named or given), whether the text named that branch, whether it names the branch tip
    itself (``RUN`` or ``RUN@BRANCH``, not ``~N``, ``:node:`` or an id), and the checkpoint
    (``None`` for a branch or run that does not exist yet, see :func:`locate_branch`)."""

    run: str
    branch: str
    named_branch: bool
    is_branch: bool
    checkpoint: Checkpoint | None


def default_branch(run: Run) -> str:
    """The branch a bare ``RUN`` names: ``main``, except for a LangGraph thread (a run of workflow
    ``langgraph``), whose bare ``RUN`` is the line holding its latest checkpoint of the root
    namespace (:func:`~gitstate.format.checkpoint.latest_line`: the checkpoint LangGraph's
    ``get_state`` returns, the line ``git agentos runs`` summarises), which after time travel is a
    fork line ``main~<checkpoint id>``; ``main`` when no tip is such a checkpoint. Reads the
    thread's branch tips (a damaged one is an error: the latest line cannot be told)."""
    if run.workflow != lgtree.WORKFLOW:
        return "main"
    return latest_line(run.branches()) or "main"


def moved_branch(run: Run) -> str:
    """The branch a bare ``RUN`` of ``undo`` names: ``main``, except for a LangGraph thread, whose
    bare ``RUN`` there is the line that moved last: of its branches (subgraph lines left out), the
    one whose newest reflog entry is the newest; entries of the same second are ordered by when
    each reflog file last changed, and a tie goes to :func:`default_branch`, then ``main``. Where
    only the saver moved the lines that is the line it wrote last, which holds the latest
    checkpoint (:func:`default_branch`); after a rollback, fork, prune or undo it is the line that
    command moved, so ``rollback RUN ~N`` then ``undo RUN`` is no change even when the rollback left
    another line holding the latest checkpoint. :func:`default_branch` when no line has a reflog."""
    if run.workflow != lgtree.WORKFLOW:
        return "main"
    tips = run.branches()
    latest = latest_line(tips) or "main"
    common = run.store.location.common_dir
    best: tuple[int, int, bool, bool, str] | None = None
    for name, cp in tips.items():
        if cp.workflow == lgtree.WORKFLOW and cp.metadata.get("checkpoint_ns"):
            continue  # a subgraph's line: moved by the saver with its parent's, never the thread's line
        ref = run.ref(name)
        log = run.store.reflog(ref)
        if not log:
            continue
        key = (log[0].time, reflog_mtime(common, ref), name == latest, name == "main", name)
        if best is None or key > best:
            best = key
    return best[4] if best is not None else latest


def branch_text(run: Run, branch: str) -> str:
    """How to name a branch of ``run`` on the command line so that the text keeps naming it: the
    run id alone for a plain run's ``main``, else ``RUN@BRANCH`` (a LangGraph thread's bare
    ``RUN`` follows its latest line, which another write or a rollback may move elsewhere)."""
    if branch == "main" and run.workflow != lgtree.WORKFLOW:
        return run.id
    return f"{run.id}@{branch}"


def _default_of(store: Store, run_id: str, moved: bool = False) -> str:
    """:func:`default_branch` of a run by id, or its :func:`moved_branch` when ``moved`` (``main``
    when its record is damaged: resolving it then reports the damage)."""
    try:
        run = store.get_run(run_id)
        return moved_branch(run) if moved else default_branch(run)
    except CorruptObjectError:
        return "main"


def _branch_exists(store: Store, run: str, branch: str) -> bool:
    from gitstate.format.names import branch_ref

    try:
        return store.core.read_ref(branch_ref(store.worktree, run, branch)) is not None
    except (InvalidNameError, ValueError):
        return False


def _splits(store: Store, base: str, default: str | None = None, moved: bool = False) -> Iterator[Parsed]:
    """``base`` read as ``RUN`` (branch ``default``, else the run's :func:`default_branch`, or its
    :func:`moved_branch` when ``moved``) or ``RUN@BRANCH`` with an existing run (an exact run id
    alone)."""
    if store.has_run(base):
        yield Parsed(base, default if default is not None else _default_of(store, base, moved))
        return
    for i, ch in enumerate(base):
        if ch == "@" and i + 1 < len(base) and store.has_run(base[:i]):
            yield Parsed(base[:i], base[i + 1:], named=True)


def _candidates(store: Store, text: str, default: str | None) -> list[Parsed]:
    out = list(_splits(store, text, default))
    m = _STEPS.search(text)
    if m:
        out += [replace(p, back=_count(m.group(1))) for p in _splits(store, text[: m.start()], default)]
    start = 0
    while (i := text.find(_NODE, start)) >= 0:
        name = text[i + len(_NODE):]
        if name:
            out += [replace(p, node=name) for p in _splits(store, text[:i], default)]
        start = i + 1
    return out


def parse(store: Store, text: str, branch: str | None = None) -> Parsed:
    """Split ``text`` into run, branch, steps back and node, by the rules of the module docstring
    (runs and branches are looked up in ``store`` to settle how separators inside names are read).
    ``branch`` is the branch of a reference that names none (``RUN``, ``RUN~N``); ``None``: the
    run's :func:`default_branch`."""
    if not isinstance(text, str) or not text:
        raise InvalidReferenceError(str(text), "empty reference")
    if store.has_run(text):
        return Parsed(text, branch if branch is not None else _default_of(store, text))
    candidates = _candidates(store, text, branch)
    if candidates:
        exists: dict[tuple[str, str], bool] = {}
        for p in candidates:
            assert p.run is not None
            exists.setdefault((p.run, p.branch), _branch_exists(store, p.run, p.branch))
        return max(candidates, key=lambda p: (exists[(p.run or "", p.branch)], len(p.run or ""), p.is_branch))
    m = _STEPS.search(text)
    if _HEX.fullmatch(text):
        return Parsed(None, oid=text)
    if m and _HEX.fullmatch(text[: m.start()]):
        return Parsed(None, oid=text[: m.start()], back=_count(m.group(1)))
    base = text[: m.start()] if m else text
    if _LG_ID.fullmatch(base):
        found = _langgraph_checkpoint(store, base)
        if found is not None:
            return Parsed(None, oid=found, back=_count(m.group(1)) if m else 0)
    if m or _NODE in text or "@" in text:
        base = (text[: m.start()] if m else text).split(_NODE, 1)[0].split("@", 1)[0]
        if base and store.has_run(base):  # the run is there; the rest is malformed ("r@", "r:node:")
            raise InvalidReferenceError(text, "expected RUN, RUN@BRANCH, RUN~N or RUN:node:NAME")
        raise RunNotFound(base or text, store.worktree)
    raise InvalidReferenceError(
        text, "no run of that id in this worktree, and not a checkpoint id (4-40 hex digits) or a "
              "LangGraph checkpoint id")


def _langgraph_checkpoint(store: Store, text: str) -> str | None:
    """The commit of the LangGraph checkpoint of this worktree whose LangGraph id (a UUID such as
    ``1f1eb4d5-9c6c-6e2a-8001-…``) is ``text``, or starts with it (8 characters or more); ``None``
    when none is. Several threads holding one id (copies) or a prefix of several ids:
    :class:`AmbiguousReferenceError`. Walks the lines of the worktree's LangGraph threads, so it is
    tried only after everything else."""
    text = text.lower()  # LangGraph writes its ids in lower case; a user may copy one in upper case
    exact: dict[str, str] = {}  # commit -> what it is
    prefixed: dict[str, str] = {}
    seen: set[tuple[str, str, str]] = set()  # (run, namespace, id): the newest commit of each wins
    for name, tip in store.core.list_refs(worktree_prefix(store.worktree)):
        parsed = parse_ref(name)
        if parsed is None or parsed.kind != "heads":
            continue
        for commit in store.core.reader.first_parents(tip):
            key = lgtree.checkpoint_key(commit.message)
            if key is None:
                break  # not a LangGraph line
            ns, cid = key
            if not cid.startswith(text) or (parsed.run_id, ns, cid) in seen:
                continue
            seen.add((parsed.run_id, ns, cid))
            what = f"run {parsed.run_id} branch {parsed.name}" + (f" namespace {ns}" if ns else "")
            (exact if cid == text else prefixed)[commit.id] = f"{what}: {cid}"
    found = exact or prefixed
    if len(found) > 1:
        raise AmbiguousReferenceError(text, sorted(found.items(), key=lambda item: item[1]))
    return next(iter(found), None)


def _back_from(store: StoreCore, start: Checkpoint, back: int, text: str, what: str) -> Checkpoint:
    cp = start
    for taken in range(back):
        if cp.parent_id is None:
            raise InvalidReferenceError(text, f"{what} has only {taken + 1} checkpoint(s)")
        cp = store.read_checkpoint(cp.parent_id)
    return cp


def _walk_back(run: Run, branch: str, back: int, text: str) -> Checkpoint:
    tip = run.head(branch)
    if tip is None:
        raise BranchNotFound(run.id, branch)
    return _back_from(run.store, tip, back, text, f"branch {branch!r}")


def _resolve_parsed(store: Store, p: Parsed, text: str) -> Checkpoint:
    if p.run is None:
        assert p.oid is not None
        try:
            cp = store.checkpoint(p.oid)
        except CheckpointNotFound:
            # 8+ hex digits may also begin a LangGraph checkpoint id (a UUID)
            found = _langgraph_checkpoint(store, p.oid) if _LG_ID.fullmatch(p.oid) else None
            if found is None:
                raise
            cp = store.checkpoint(found)
        if cp.workflow == lgtree.WORKFLOW and store.has_run(cp.run_id):
            cp = store.get_run(cp.run_id).current_copy(cp)
        return _back_from(store.core, cp, p.back, text, f"the line of {cp.short_id}") if p.back else cp
    run = store.get_run(p.run)
    if p.node is not None:
        return run.load("node:" + p.node, branch=p.branch)
    return _walk_back(run, p.branch, p.back, text)


def resolve(store: Store, text: str) -> Checkpoint:
    """The checkpoint a REF names (see the module docstring)."""
    return _resolve_parsed(store, parse(store, text), text)


def locate(store: Store, text: str, branch: str | None = None) -> Located:
    """The run, branch and checkpoint a REF names (``branch`` when it names none; ``None``: the
    run's :func:`default_branch`). For a checkpoint
    id, the run and branch are the ones the checkpoint recorded when it was written. A plain word
    that names nothing is an unknown run (:class:`RunNotFound`)."""
    if isinstance(text, str) and text and not _HEX.fullmatch(text) and not any(c in text for c in "@~:") \
            and not store.has_run(text) and not (_LG_ID.fullmatch(text) and _langgraph_checkpoint(store, text)):
        raise RunNotFound(text, store.worktree)
    p = parse(store, text, branch)
    cp = _resolve_parsed(store, p, text)
    if p.run is None:
        return Located(cp.run_id, cp.branch, False, False, cp)
    return Located(p.run, p.branch, p.named, p.is_branch, cp)


def locate_branch(store: Store, text: str, branch: str | None = None, *, create: bool = False,
                  read_tip: bool = True, moved: bool = False) -> Located:
    """The run and branch ``RUN`` or ``RUN@BRANCH`` names, for commands that act on a branch
    (undo, prune, rollback, checkpoint, nodes, branch deletion). Other forms (``~N``,
    ``:node:``, ids) are an :class:`InvalidReferenceError`. With ``create`` (checkpoint) the run
    or branch need not exist yet: a text that names no existing run is a new run id, and
    ``RUN@BRANCH`` of an existing run may name a new branch. ``checkpoint`` is the branch tip, or
    ``None`` when the branch has none (or when not ``read_tip``: a branch deletion reads no
    object, so a branch whose tip is missing or damaged can still be deleted). ``branch`` is the
    branch of a bare ``RUN`` (``None``: the run's :func:`default_branch`, or with ``moved`` (undo)
    its :func:`moved_branch`; ``main`` for a new run)."""
    if not isinstance(text, str) or not text:
        raise InvalidReferenceError(str(text), "empty reference")
    splits = list(_splits(store, text, branch, moved))
    if not splits:
        if create:
            return Located(text, branch if branch is not None else "main", False, True, None)
        candidates = _candidates(store, text, branch or "main")  # only for the message: no tip read
        if not candidates:
            raise RunNotFound(text, store.worktree)
        p = max(candidates, key=lambda c: len(c.run or ""))
        at = f"@{p.branch}" if p.named else ""
        raise InvalidReferenceError(
            text, f"expected RUN or RUN@BRANCH (here: {p.run}{at}), not a checkpoint reference")
    found = max(splits, key=lambda p: (_branch_exists(store, p.run or "", p.branch), len(p.run or "")))
    assert found.run is not None
    run = store.get_run(found.run)
    if not read_tip:
        if run.tip(found.branch) is None and not create:
            raise BranchNotFound(run.id, found.branch)
        return Located(run.id, found.branch, found.named, True, None)
    tip = run.head(found.branch)
    if tip is None and not create:
        raise BranchNotFound(run.id, found.branch)
    return Located(run.id, found.branch, found.named, True, tip)


def resolve_target(store: Store, run: Run, text: str, branch: str = "main") -> Checkpoint:
    """The checkpoint a TARGET names, relative to ``run`` (of ``store``) and its ``branch``: ``~N``,
    ``@B[~N|:node:NAME]`` (an existing branch name is read literally first), ``node:NAME``, an id
    of this run, or any REF that names a checkpoint of this run."""
    if not isinstance(text, str) or not text:
        raise InvalidReferenceError(str(text), "empty reference")
    if text.startswith("~"):
        if not _STEPS.fullmatch(text):
            raise InvalidReferenceError(text, "expected ~N with N a number")
        return _walk_back(run, branch, _count(text[1:]), text)
    if text.startswith("@"):
        return _other_branch(run, text)
    if text.startswith("node:"):
        return run.load(text, branch=branch)
    if _HEX.fullmatch(text) and not store.has_run(text):
        return run.load(text)
    cp = resolve(store, text)
    if cp.run_id != run.id:
        raise CheckpointNotFound(text, run.id)
    return cp


def _other_branch(run: Run, text: str) -> Checkpoint:
    """``@BRANCH``, ``@BRANCH~N`` or ``@BRANCH:node:NAME`` of ``run`` (a literal branch first)."""
    rest = text[1:]
    if not rest:
        raise InvalidReferenceError(text, "branch name missing after '@'")
    if _has_tip(run, rest):
        return _walk_back(run, rest, 0, text)
    m = _STEPS.search(rest)
    if m and m.start() > 0 and _has_tip(run, rest[: m.start()]):
        return _walk_back(run, rest[: m.start()], _count(m.group(1)), text)
    start = 0
    while (i := rest.find(_NODE, start)) >= 0:
        if i > 0 and rest[i + len(_NODE):] and _has_tip(run, rest[:i]):
            return run.load("node:" + rest[i + len(_NODE):], branch=rest[:i])
        start = i + 1
    missing = rest[: m.start()] if m and m.start() > 0 else rest.split(_NODE, 1)[0] or rest
    check_name("branch name", missing)  # a name no branch can have is an InvalidNameError
    raise BranchNotFound(run.id, missing)


def _has_tip(run: Run, branch: str) -> bool:
    """Whether ``branch`` of ``run`` has a tip; ``False`` for a name no branch can have (too long
    once encoded, not UTF-8), so that the text's other readings are tried."""
    try:
        return run.tip(branch) is not None
    except InvalidNameError:
        return False
