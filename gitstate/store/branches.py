"""The branches of a run as a list a person can act on: each tip, where the branch came from (a
fork, a pull that kept a diverged remote line, a restore's safety copy, its first checkpoint), and
the rules for deleting one safely.

Where a branch came from is read from the oldest entry of its reflog (the message gitstate wrote
when it created the ref, see docs/FORMAT.md); the fork point is the newest checkpoint the branch
shares with ``main``. Reading only; deletion itself is :meth:`Run.delete_branch`."""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gitstate.errors import BranchDeleteRefused, BranchNotFound, CorruptObjectError, GitStateError
from gitstate.format.checkpoint import Checkpoint
from gitstate.format.names import branch_ref, decode_component, run_prefix
from gitstate.store.base import StoreCore
from gitstate.workspace.restore import SAFETY_BRANCH

#: How many first-parent steps the fork-point search walks per branch (bounded work on huge runs).
FORK_POINT_LIMIT = 100_000

_PULLED = re.compile(r"^gitstate: pull from (?P<label>.*) \((?P<how>new|fast-forward|diverged (?P<of>.*))\)$")
_FORKED = re.compile(r"^gitstate: fork .* from (?P<at>[0-9a-f]+)$")


@dataclass(frozen=True)
class BranchInfo:
    """One branch of a run: its ``tip``, how many checkpoints its line holds, ``origin`` (where it
    came from, in words), ``kind`` (``main``, ``fork``, ``pulled``, ``kept-copy`` of a diverged
    remote line, ``safety`` — the unsaved-work copy a restore made, kept local — ``created`` by a
    checkpoint, or ``unknown`` when the reflog is gone), ``fork_point`` (the newest checkpoint it
    shares with ``main``; ``None`` for ``main`` or a line unrelated to it), ``created_at`` (the
    reflog's first entry) and ``local_only`` (push and export leave it out unless asked)."""

    name: str
    tip: Checkpoint
    checkpoints: int
    kind: str
    origin: str
    fork_point: str | None
    created_at: datetime | None
    local_only: bool

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly form (the CLI's ``branches --json`` shape)."""
        return {
            "branch": self.name, "tip": self.tip.id, "step": self.tip.display_step, "checkpoints": self.checkpoints,
            "node": self.tip.node, "status": self.tip.tip_status, "updated_at": self.tip.created_at.isoformat(),
            "created_at": self.created_at.isoformat() if self.created_at else None, "kind": self.kind,
            "origin": self.origin, "fork_point": self.fork_point, "local_only": self.local_only,
        }


def _first_parent_line(store: StoreCore, tip: str, limit: int = FORK_POINT_LIMIT) -> list[str]:
    return [commit.id for commit in itertools.islice(store.reader.first_parents(tip), limit)]


def _origin(name: str, message: str | None, fork_point: str | None) -> tuple[str, str]:
    if name == SAFETY_BRANCH:
        return "safety", "the workspace as it was before a restore (unsaved work; stays local)"
    if name == "main":
        return "main", "the run's main line"
    if message is None:
        return "unknown", "unknown (no reflog)"
    pulled = _PULLED.match(message)
    if pulled:
        label = pulled.group("label")
        if pulled.group("of") is not None:
            return "kept-copy", f"{label}'s line of {pulled.group('of')}, kept by a pull (the branches diverged)"
        return "pulled", f"pulled from {label}"
    forked = _FORKED.match(message)
    if forked:
        # where the fork was made, as its reflog recorded it: the newest checkpoint it shares with
        # main moves when main is rolled back behind it, the fork's origin does not
        return "fork", f"forked at {forked.group('at')[:12]}"
    off = f" (off main at {fork_point[:12]})" if fork_point else ""
    if message.startswith("gitstate: checkpoint"):
        return "created", "created by its first checkpoint" + off
    if message.startswith("gitstate: langgraph"):
        return "created", "written by the LangGraph saver (a fork or a subgraph line)" + off
    return "created", message


def _tips(store: StoreCore, worktree: str, run_id: str) -> dict[str, str]:
    prefix = run_prefix(worktree, run_id) + "heads/"
    tips: dict[str, str] = {}
    for ref, oid in store.list_refs(prefix):
        try:
            tips[decode_component(ref[len(prefix):])] = oid
        except ValueError:
            continue
    return tips


def list_branches(store: StoreCore, worktree: str, run_id: str) -> list[BranchInfo]:
    """Every branch of a run, ``main`` first, then by name. :class:`CorruptObjectError` when a
    branch ref holds no checkpoint id (symbolic or unparsable), rather than a list without it."""
    for broken in store.broken_refs(run_prefix(worktree, run_id) + "heads/"):
        raise CorruptObjectError(broken.name, f"{broken.problem} (`git agentos verify --repair` removes it)")
    tips = _tips(store, worktree, run_id)
    main_line = set(_first_parent_line(store, tips["main"])) if "main" in tips else set()
    out: list[BranchInfo] = []
    for name in sorted(tips, key=lambda n: (n != "main", n)):
        tip = store.read_checkpoint(tips[name])
        fork_point = None
        if name != "main" and main_line:
            fork_point = next((oid for oid in _first_parent_line(store, tip.id) if oid in main_line), None)
        log = store.reflog(branch_ref(worktree, run_id, name))
        first = log[-1] if log else None
        kind, origin = _origin(name, first.message if first else None, fork_point)
        created = datetime.fromtimestamp(first.time, UTC) if first else None
        out.append(BranchInfo(name, tip, tip.step - tip.base + 1, kind, origin, fork_point, created,
                              name == SAFETY_BRANCH))
    return out


def check_deletable(store: StoreCore, worktree: str, run_id: str, branch: str, force: bool) -> str:
    """The tip of ``branch`` if it may be deleted, else :class:`BranchDeleteRefused`: ``main`` is
    refused unless ``force`` (the run's line), and so is a branch holding checkpoints that no other
    branch of the run reaches (they would be left to ``git gc``), as ``git branch -d`` refuses an
    unmerged branch."""
    tips = _tips(store, worktree, run_id)
    tip = tips.get(branch)
    if tip is None:
        raise BranchNotFound(run_id, branch)
    if force:
        return tip
    if branch == "main":
        raise BranchDeleteRefused(run_id, branch, "it is the run's main line")
    reader = store.reader
    try:
        merged = any(reader.is_ancestor(tip, other) for name, other in tips.items() if name != branch)
    except GitStateError:
        merged = False
    if not merged:
        raise BranchDeleteRefused(run_id, branch, "it holds checkpoints that no other branch reaches; "
                                                  "they would be lost")
    return tip
