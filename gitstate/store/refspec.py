"""Checkpoint references as people type them (the CLI's REF and TARGET arguments).

Grammar::

    REF    := ID | RUN [ '@' BRANCH ] [ '~' N | ':node:' NAME ]
    TARGET := REF of the same run | ID | '~' N | '@' BRANCH [ '~' N ] | 'node:' NAME

``ID`` is a full checkpoint id or a unique prefix of 4+ hex digits; ``RUN`` alone is the tip of its
``main`` branch; ``~N`` goes N checkpoints back along first parents; ``:node:NAME`` is the latest
exit checkpoint of node NAME on that branch. A TARGET is read relative to a run and a branch:
``~2`` is two back from that branch's tip, ``@fix`` the tip of branch ``fix`` of the same run.

Run ids may contain any character, including ``@``, ``~`` and ``:``, so the text is read in this
order, the first match winning:

1. the whole text is an existing run id of this worktree → its main tip (an exact run id wins);
2. the text ends in ``~N`` or contains ``:node:``, and what precedes it is a run id or a
   ``RUN@BRANCH`` whose run exists → that; among several splits the one with the longest existing
   run id wins (``a@b@c`` is branch ``c`` of run ``a@b`` when that run exists, else branch ``b@c``
   of run ``a``);
3. the text is 4–40 hex digits → a checkpoint id or unique prefix (ambiguous prefixes are an error);
4. otherwise :class:`RunNotFound` (when the text has the shape of a run reference) or
   :class:`InvalidReferenceError`.

Resolution only reads; it never changes the store."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gitstate.errors import (
    BranchNotFound,
    CheckpointNotFound,
    InvalidReferenceError,
    RunNotFound,
)

if TYPE_CHECKING:
    from gitstate.format.checkpoint import Checkpoint
    from gitstate.store.run import Run
    from gitstate.store.store import Store

__all__ = ["Parsed", "parse", "resolve", "resolve_target"]

_STEPS = re.compile(r"~(\d+)$")
_NODE = ":node:"
_HEX = re.compile(r"[0-9a-fA-F]{4,40}")


@dataclass(frozen=True)
class Parsed:
    """A reference split into its parts (``run`` is ``None`` for a bare checkpoint id)."""

    run: str | None
    branch: str = "main"
    back: int = 0
    node: str | None = None
    oid: str | None = None


def _split_base(store: Store, base: str) -> tuple[str, str] | None:
    """``RUN`` or ``RUN@BRANCH`` with an existing run, preferring the longest run id."""
    if store.has_run(base):
        return base, "main"
    positions = [i for i, ch in enumerate(base) if ch == "@"]
    for i in reversed(positions):  # rightmost '@' first = longest run id
        run, branch = base[:i], base[i + 1:]
        if branch and store.has_run(run):
            return run, branch
    return None


def parse(store: Store, text: str) -> Parsed:
    """Split ``text`` into run, branch, steps back and node, by the rules of the module docstring
    (runs are looked up in ``store`` to settle how separators inside run ids are read)."""
    if not isinstance(text, str) or not text:
        raise InvalidReferenceError(str(text), "empty reference")
    if store.has_run(text):
        return Parsed(text)
    candidates: list[Parsed] = []
    m = _STEPS.search(text)
    if m:
        split = _split_base(store, text[: m.start()])
        if split:
            candidates.append(Parsed(split[0], split[1], back=int(m.group(1))))
    start = 0
    while (i := text.find(_NODE, start)) >= 0:
        name = text[i + len(_NODE):]
        split = _split_base(store, text[:i])
        if split and name:
            candidates.append(Parsed(split[0], split[1], node=name))
        start = i + 1
    if not m and _NODE not in text:
        split = _split_base(store, text)
        if split:
            candidates.append(Parsed(split[0], split[1]))
    if candidates:
        return max(candidates, key=lambda p: len(p.run or ""))
    if _HEX.fullmatch(text):
        return Parsed(None, oid=text)
    if m or _NODE in text or "@" in text:
        base = (text[: m.start()] if m else text).split(_NODE, 1)[0].split("@", 1)[0]
        if base and store.has_run(base):  # the run is there; the rest is malformed ("r@", "r:node:")
            raise InvalidReferenceError(text, "expected RUN, RUN@BRANCH, RUN~N or RUN:node:NAME")
        raise RunNotFound(base or text, store.worktree)
    raise InvalidReferenceError(
        text, "no run of that id in this worktree, and not a checkpoint id (4-40 hex digits)")


def _walk_back(run: Run, branch: str, back: int, text: str) -> Checkpoint:
    tip = run.head(branch)
    if tip is None:
        raise BranchNotFound(run.id, branch)
    cp = tip
    for taken in range(back):
        if cp.parent_id is None:
            raise InvalidReferenceError(text, f"branch {branch!r} has only {taken + 1} checkpoint(s)")
        cp = run.store.read_checkpoint(cp.parent_id)
    return cp


def _resolve_parsed(store: Store, p: Parsed, text: str) -> Checkpoint:
    if p.run is None:
        assert p.oid is not None
        return store.checkpoint(p.oid)
    run = store.get_run(p.run)
    if p.node is not None:
        return run.load("node:" + p.node, branch=p.branch)
    return _walk_back(run, p.branch, p.back, text)


def resolve(store: Store, text: str) -> Checkpoint:
    """The checkpoint a REF names (see the module docstring)."""
    return _resolve_parsed(store, parse(store, text), text)


def resolve_target(store: Store, run: Run, text: str, branch: str = "main") -> Checkpoint:
    """The checkpoint a TARGET names, relative to ``run`` (of ``store``) and its ``branch``: ``~N``, ``@B[~N]``,
    ``node:NAME``, an id of this run, or any REF that names a checkpoint of this run."""
    if not isinstance(text, str) or not text:
        raise InvalidReferenceError(str(text), "empty reference")
    if text.startswith("~"):
        if not _STEPS.fullmatch(text):
            raise InvalidReferenceError(text, "expected ~N with N a number")
        return _walk_back(run, branch, int(text[1:]), text)
    if text.startswith("@"):
        other, back = text[1:], 0
        m = _STEPS.search(other)
        if m:
            other, back = other[: m.start()], int(m.group(1))
        if not other:
            raise InvalidReferenceError(text, "branch name missing after '@'")
        return _walk_back(run, other, back, text)
    if text.startswith("node:"):
        return run.load(text, branch=branch)
    if _HEX.fullmatch(text) and not store.has_run(text):
        return run.load(text)
    cp = resolve(store, text)
    if cp.run_id != run.id:
        raise CheckpointNotFound(text, run.id)
    return cp
