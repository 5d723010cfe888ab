"""Retention: which runs, branches and checkpoints go (:func:`plan`, which writes nothing), taking
them away through the store's transactions (:func:`apply`), and giving their bytes back
(:func:`gitstate.store.reclaim.reclaim`). Pins (:func:`pin`) keep a run out of every policy.

A :class:`Policy` selects among *finished* runs (status ``completed`` or ``failed``; a ``running``
or ``interrupted`` run only when named): ``older_than`` removes whole runs not updated since,
``max_size`` removes the oldest until the store's own bytes fit, ``keep_last`` prunes every
branch of a remaining run to its newest N checkpoints (as :meth:`Run.prune` does: node boundaries
of the kept checkpoints stay). Named runs without any criterion are removed whole.

Removed refs are moved to ``refs/agentos-trash/<unix time>/<ref without "refs/">`` (no reflog),
outside ``refs/agentos/`` so listings, push and verify skip them; a later gc drops those older
than the grace period (``agentos.gc.graceDays``, default 7). With ``now`` they go at once. A pin
is the ref ``refs/agentos-pins/<worktree>/<run>`` (pointing at the run's record commit): pinning
rewrites no history and deleting the pin ref unpins."""

from __future__ import annotations

import dataclasses
import os
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pygit2

from gitstate.errors import ConflictError, GitStateError, RunNotFound, UsageError
from gitstate.format import checkpoint as cpfmt
from gitstate.format import nodes as nodefmt
from gitstate.format.names import (
    NAMESPACE,
    branch_ref,
    check_name,
    decode_component,
    encode_component,
    node_log_ref,
    parse_ref,
    run_prefix,
    worktree_prefix,
)
from gitstate.format.nodes import NodeRecord
from gitstate.git import lockfile, packs
from gitstate.git.command import run_git
from gitstate.git.objects import MODE_BLOB, MODE_COMMIT, TreeEntry
from gitstate.git.reader import CommitData, ObjectReader
from gitstate.git.refs import list_refs, pack_refs, peek, read_ref, remove_empty_dirs, scan_refs
from gitstate.store import housekeeping
from gitstate.store import reclaim as reclaiming
from gitstate.store.nodes import listed, read_record
from gitstate.store.store import RunSummary, Store
from gitstate.store.transaction import Transaction

TRASH = "refs/agentos-trash/"
PINS = "refs/agentos-pins/"
FINISHED = frozenset({"completed", "failed"})
# every status a run shows: "stopped" ended unfinished without an error, "saved" is an
# integration's run that never says it finished (an OpenAI session: `--status saved` ages them out)
STATUSES = frozenset({"completed", "failed", "running", "interrupted", "stopped", "saved"})
DEFAULT_GRACE_DAYS = 7.0
IDX_BYTES_PER_OBJECT = 28  # a version-2 .idx entry: id, CRC, offset
PACK_OVERHEAD = 12 + 20 + 8 + 1024 + 40  # a pack's header and checksum, its index's header, fan-out and checksums


@dataclass(frozen=True)
class Policy:
    """What may go. ``keep_last``: newest checkpoints kept per branch; ``older_than``: whole runs
    last updated before this time go; ``max_size``: bytes the store's own objects may take (the
    oldest runs go until they fit); ``statuses``: the statuses a run must have to be touched
    (named runs are touched whatever their status); ``runs``: limit gc to these runs (named);
    ``all_worktrees``: runs of every worktree, not only this one's."""

    keep_last: int | None = None
    older_than: datetime | None = None
    statuses: frozenset[str] = FINISHED
    max_size: int | None = None
    runs: tuple[str, ...] = ()
    all_worktrees: bool = False

    def is_empty(self) -> bool:
        """Whether no criterion is set (and no run named): gc then removes nothing but old trash."""
        return self.keep_last is None and self.older_than is None and self.max_size is None and not self.runs


@dataclass
class RunRemoval:
    """A whole run that goes: its refs (name, id) and what it held."""

    run: str
    worktree: str
    status: str
    updated_at: datetime
    branches: list[str]
    checkpoints: int
    refs: list[tuple[str, str]]
    reason: str

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly form."""
        return {"run": self.run, "worktree": self.worktree, "status": self.status,
                "updated_at": self.updated_at.isoformat(), "branches": self.branches,
                "checkpoints": self.checkpoints, "reason": self.reason}


@dataclass
class BranchPrune:
    """A branch cut to its newest ``keep`` checkpoints (``removed`` older ones go); ``line``: the
    ids of the kept ones, newest first (rewritten onto a new root when the plan is applied)."""

    run: str
    worktree: str
    branch: str
    tip: str
    keep: int
    removed: int
    line: list[str]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly form."""
        return {"run": self.run, "worktree": self.worktree, "branch": self.branch, "tip": self.tip,
                "kept": self.keep, "removed": self.removed}


@dataclass
class Plan:
    """What a gc would do: runs removed, branches pruned, trash refs past their grace period
    dropped, runs skipped (and why), and, when asked, an estimate of the bytes given back."""

    runs: list[RunRemoval] = field(default_factory=list)
    prunes: list[BranchPrune] = field(default_factory=list)
    expired_trash: list[tuple[str, str]] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    estimate_bytes: int | None = None
    estimate_objects: int | None = None

    @property
    def checkpoints(self) -> int:
        """How many checkpoints go (those of removed runs' summarised lines and of prunes)."""
        return sum(r.checkpoints for r in self.runs) + sum(p.removed for p in self.prunes)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly form (the CLI's ``gc --dry-run --json`` shape)."""
        return {"runs": [r.to_dict() for r in self.runs], "branches": [p.to_dict() for p in self.prunes],
                "checkpoints": self.checkpoints, "expired_trash": [name for name, _oid in self.expired_trash],
                "skipped": [{"run": run, "reason": why} for run, why in self.skipped],
                "estimated_bytes": self.estimate_bytes, "estimated_objects": self.estimate_objects}


@dataclass
class Result:
    """What :func:`apply` did: the plan's parts that were done, those that could not be (``failed``:
    run and why), the bytes of the git directory before and after, and the packs rewritten."""

    plan: Plan
    failed: list[tuple[str, str]]
    bytes_before: int
    bytes_after: int
    reclaimed: reclaiming.Reclaimed | None
    trashed: list[str]

    @property
    def bytes_freed(self) -> int:
        """Bytes given back (the git directory's size before minus after)."""
        return self.bytes_before - self.bytes_after

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly form (the CLI's ``gc --json`` shape)."""
        out = self.plan.to_dict()
        out.update({"failed": [{"run": run, "reason": why} for run, why in self.failed],
                    "bytes_before": self.bytes_before, "bytes_after": self.bytes_after,
                    "bytes_freed": self.bytes_freed, "trash": self.trashed,
                    "packs": self.reclaimed.to_dict() if self.reclaimed else None})
        return out


# -- parsing ---------------------------------------------------------------------------------------

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d|w)\s*$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)\s*$", re.IGNORECASE)


def parse_cutoff(text: str, now: datetime | None = None) -> datetime:
    """A time from ``14d``/``12h``/``30m``/``2w`` (that long before ``now``) or an ISO date or time
    (``2024-05-01``, ``2024-05-01T12:00:00+00:00``; UTC when no zone is given)."""
    now = now or datetime.now(UTC)
    match = _DURATION.match(text)
    if match:
        return now - timedelta(seconds=float(match.group(1)) * _UNITS[match.group(2)])
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise UsageError(f"not a duration (14d, 12h) or an ISO date: {text!r}") from None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def parse_size(text: str) -> int:
    """Bytes from ``500M``, ``2G``, ``10k``, ``1.5GiB`` or a plain number (powers of 1024)."""
    match = _SIZE.match(text)
    if not match:
        raise UsageError(f"not a size (500M, 2G): {text!r}")
    factor = 1024 ** " kmgt".index(match.group(2).lower() or " ")
    return int(float(match.group(1)) * factor)


def parse_statuses(text: str) -> frozenset[str]:
    """A status list (``completed,failed``); each must be a run status."""
    found = frozenset(s.strip() for s in text.split(",") if s.strip())
    unknown = sorted(found - STATUSES)
    if unknown or not found:
        raise UsageError(f"unknown status {', '.join(unknown) or text!r} (one of: {', '.join(sorted(STATUSES))})")
    return found


def config_policy(store: Store) -> tuple[Policy, float]:
    """The policy of ``agentos.gc.keepLast``, ``agentos.gc.olderThan``, ``agentos.gc.maxSize``
    (each unset by default: nothing goes) and the grace period ``agentos.gc.graceDays`` (7)."""
    config = store.repo.config

    def get(name: str) -> str | None:
        try:
            return str(config[name]) if name in config else None
        except (KeyError, pygit2.GitError):
            return None

    keep = get("agentos.gc.keepLast")
    older = get("agentos.gc.olderThan")
    size = get("agentos.gc.maxSize")
    grace = get("agentos.gc.graceDays")
    try:
        keep_last = int(keep) if keep else None
        grace_days = float(grace) if grace else DEFAULT_GRACE_DAYS
    except ValueError:
        raise UsageError(f"agentos.gc.keepLast/graceDays must be numbers (got {keep!r}, {grace!r})") from None
    if keep_last is not None and keep_last < 1:
        raise UsageError("agentos.gc.keepLast must be at least 1")
    if grace_days < 0:
        raise UsageError("agentos.gc.graceDays must not be negative")
    return Policy(keep_last=keep_last, older_than=parse_cutoff(older) if older else None,
                  max_size=parse_size(size) if size else None), grace_days


# -- pins ------------------------------------------------------------------------------------------

def pin_ref(worktree: str, run_id: str) -> str:
    """The ref that pins a run."""
    return f"{PINS}{worktree}/{encode_component(run_id)}"


def pinned(store: Store, worktree: str | None = None) -> set[tuple[str, str]]:
    """The pinned runs, as (worktree, run id), of one worktree (``None``: of all)."""
    prefix = PINS if worktree is None else f"{PINS}{worktree}/"
    out = set()
    for name, _oid in scan_refs(store.location.common_dir, prefix)[0]:  # reads only the pins' refs
        parts = name[len(PINS):].split("/")
        if len(parts) == 2:
            try:
                out.add((parts[0], decode_component(parts[1])))
            except ValueError:
                continue
    return out


def pin(store: Store, run_id: str) -> bool:
    """Pin a run of this worktree (gc never touches it); ``False`` if it was pinned already."""
    check_name("run id", run_id)
    tips = list_refs(store.repo, run_prefix(store.worktree, run_id))
    if not tips:
        raise RunNotFound(run_id, store.worktree)
    ref = pin_ref(store.worktree, run_id)
    if read_ref(store.repo, ref) is not None:
        return False
    target = dict(tips).get(run_prefix(store.worktree, run_id) + "run", tips[0][1])
    store.core.move_ref(ref, None, target, f"gitstate: pin run {run_id}")
    return True


def unpin(store: Store, run_id: str) -> bool:
    """Unpin a run of this worktree; ``False`` if it was not pinned."""
    check_name("run id", run_id)
    ref = pin_ref(store.worktree, run_id)
    old = read_ref(store.repo, ref)
    if old is None:
        return False
    store.core.move_ref(ref, old, None, f"gitstate: unpin run {run_id}")
    return True


# -- planning --------------------------------------------------------------------------------------

BATCH = 250  # runs or branches changed per transaction (one pack, one packed-refs rewrite)
ZERO = "0" * 40
WALK_LIMIT = 100_000  # commits walked from a ref's tip when its reflog is rewritten
TIDY_CHUNK = 200  # pruned branches whose reflogs are rewritten in one hold of the gc gate
TIDY_WAIT = 2.0  # seconds gc waits for the gate before it rewrites reflogs under their refs' locks


def trash_refs(store: Store) -> list[tuple[str, str, float]]:
    """The refs gc moved aside: (name, id, when they were moved, unix time)."""
    out = []
    for name, oid in list_refs(store.repo, TRASH):
        stamp = name[len(TRASH):].split("/", 1)[0]
        try:
            out.append((name, oid, float(stamp)))
        except ValueError:
            continue
    return out


def _refs_by_run(store: Store, all_worktrees: bool) -> dict[tuple[str, str], list[tuple[str, str]]]:
    """Every gitstate ref of this worktree's runs (or of all), by (worktree, run id): one listing."""
    out: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for name, oid in list_refs(store.repo, NAMESPACE if all_worktrees else worktree_prefix(store.worktree)):
        parsed = parse_ref(name)
        if parsed is not None:
            out.setdefault((parsed.worktree, parsed.run_id), []).append((name, oid))
    return out


def _heads(refs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """(branch, tip) of a run's ``heads/`` refs, by branch name."""
    out = []
    for name, oid in refs:
        parsed = parse_ref(name)
        if parsed is not None and parsed.kind == "heads" and parsed.name is not None:
            out.append((parsed.name, oid))
    return sorted(out)


def plan(store: Store, policy: Policy, *, grace_days: float = DEFAULT_GRACE_DAYS, now: bool = False,
         estimate: bool = False, at: float | None = None) -> Plan:
    """What a gc with ``policy`` would remove; writes nothing. ``now``: trash goes whatever its
    age; ``estimate``: measure the bytes given back (objects reachable only from what goes that
    sit in gitstate's own packs, at their packed size, and the reflogs, ref files and folders
    that go). The refs are listed once; a branch's length is read from its tip (step and base),
    and only the kept part of a line is walked."""
    at = time.time() if at is None else at
    result = Plan()
    for name, oid, when in trash_refs(store):
        if now or at - when >= grace_days * 86400:
            result.expired_trash.append((name, oid))
    summaries = store.list_runs(all_worktrees=policy.all_worktrees)
    named = set(policy.runs)
    if named:
        known = {s.id for s in summaries if s.worktree == store.worktree}
        missing = sorted(named - known)
        if missing:
            raise RunNotFound(missing[0], store.worktree)
        summaries = [s for s in summaries if s.id in named and s.worktree == store.worktree]
    pins = pinned(store, None if policy.all_worktrees else store.worktree)
    candidates: list[RunSummary] = []
    for s in summaries:
        if (s.worktree, s.id) in pins:
            result.skipped.append((s.id, "pinned"))
        elif s.status == "corrupt":
            result.skipped.append((s.id, "corrupt (see git agentos verify)"))
        elif s.id in named or s.status in policy.statuses:
            candidates.append(s)
    criteria = policy.keep_last is not None or policy.older_than is not None or policy.max_size is not None
    going: dict[tuple[str, str], str] = {}
    for s in candidates:
        if named and not criteria:
            going[(s.worktree, s.id)] = "named"
        elif policy.older_than is not None and s.updated_at < policy.older_than:
            going[(s.worktree, s.id)] = f"not updated since {policy.older_than.isoformat(timespec='seconds')}"
    if policy.max_size is not None:
        _over_size(store, policy.max_size, candidates, going)
    by_run = _refs_by_run(store, policy.all_worktrees)
    by_key = {(s.worktree, s.id): s for s in candidates}
    reader = store.core.reader
    with reader.listing_loose():
        for key, reason in going.items():
            s = by_key[key]
            found = by_run.get(key, [])
            heads = _heads(found)
            result.runs.append(RunRemoval(s.id, s.worktree, s.status, s.updated_at, [b for b, _t in heads],
                                          _count_all(store, reader, heads, s), found, reason))
        result.runs.sort(key=lambda r: (r.updated_at, r.run))
        if policy.keep_last is not None:
            for s in candidates:
                key = (s.worktree, s.id)
                if key in going:
                    continue
                for branch, tip in _heads(by_run.get(key, [])):
                    try:
                        pr = _branch_prune(store, reader, s, branch, tip, policy.keep_last)
                    except GitStateError as exc:
                        result.skipped.append((f"{s.id}@{branch}", f"unreadable: {exc}"))
                        continue
                    if pr is not None:
                        result.prunes.append(pr)
        if estimate:
            result.estimate_bytes, result.estimate_objects = _estimate(store, reader, result, now)
    return result


def _line_length(store: Store, tip: str) -> int:
    """How many checkpoints a branch's line holds, from its tip's step and base."""
    cp = store.read_checkpoint(tip)
    return cp.step - cp.base + 1


def _branch_prune(store: Store, reader: ObjectReader, s: RunSummary, branch: str, tip: str,
                  keep: int) -> BranchPrune | None:
    """The prune of one branch to its ``keep`` newest checkpoints, ``None`` when it has no more."""
    count = _line_length(store, tip)
    if count <= keep:
        return None
    line: list[str] = []
    for commit in reader.first_parents(tip):
        line.append(commit.id)
        if len(line) > keep:
            break
    if len(line) <= keep:  # (a line shorter than its tip says: nothing older to remove)
        return None
    return BranchPrune(s.id, s.worktree, branch, tip, keep, count - keep, line[:keep])


def _count_all(store: Store, reader: ObjectReader, heads: list[tuple[str, str]], s: RunSummary) -> int:
    """Checkpoints of every branch of a run (distinct commits; one branch: read from its tip),
    ``s.checkpoints`` when unreadable."""
    try:
        if len(heads) == 1:
            return _line_length(store, heads[0][1])
        seen: set[str] = set()
        for _branch, tip in heads:
            for commit in reader.first_parents(tip):
                if commit.id in seen:
                    break
                seen.add(commit.id)
        return len(seen)
    except GitStateError:
        return s.checkpoints


LogIndex = dict[str, tuple[str | None, str]]  # commit -> (its first parent, its message)


def _log_index(common_dir: str, tips: list[str]) -> LogIndex:
    """The first parent and message of every commit ``tips`` reach, from one ``git log`` (empty
    when git fails: the commits are then read one by one)."""
    if not tips:
        return {}
    done = run_git(common_dir, ["-c", "log.showSignature=false", "log", "--stdin", "--no-color", "--encoding=UTF-8",
                                "--format=%H %P%n%B%x00"], stdin="".join(t + "\n" for t in tips).encode("ascii"),
                   text=False)
    out: LogIndex = {}
    if done.returncode != 0:
        return out
    raw: bytes = done.stdout  # type: ignore[assignment]  # (text=False: bytes)
    for chunk in raw.split(b"\x00"):
        head, _nl, body = chunk.lstrip(b"\n").partition(b"\n")
        ids = head.decode("ascii", "replace").split()
        if ids:
            out[ids[0]] = (ids[1] if len(ids) > 1 else None, body.decode("utf-8", "replace"))
    return out


def _kept_records(reader: ObjectReader, log_tip: str, kept: set[str],
                  index: LogIndex | None = None) -> list[tuple[CommitData, NodeRecord]]:
    """The records of a node log that a pruned branch keeps, oldest first: of each boundary the
    branch still shows once only ``kept`` remains (as :func:`gitstate.store.nodes.listed` shows
    them), its latest record, and the record that opened it when the boundaries were opened in
    another order than their latest records were written, so the boundaries, their order and the
    log's newest record read as before.

    A record's id, status and exit are read from its commit's trailers (``Node-Id``,
    ``Node-Status``, ``Node-Exit``, written from the same record), its ``node.cbor`` only when the
    trailers do not say enough (an open boundary's anchor is its base) and for the records kept,
    which must agree with their trailers (else every record is read, as ``listed`` reads them)."""
    chain: list[tuple[str, str, str, str | None]] = []  # newest first: (commit id, id, status, anchor)
    seen: set[str] = set()
    oid: str | None = log_tip
    while oid is not None and oid not in seen:
        seen.add(oid)
        hit = (index or {}).get(oid)
        if hit is None:
            commit = reader.commit(oid)
            hit = (commit.parent_ids[0] if commit.parent_ids else None, commit.message)
        found = _record_trailers(hit[1])
        if found is None or found[1] == "running":
            record = read_record(reader, reader.commit(oid))
            found = (record.id, record.status, record.exit if record.status != "running" else record.base)
        chain.append((oid, *found))
        oid = hit[0]
    latest: dict[str, int] = {}
    first: dict[str, int] = {}
    for pos, (_commit, rid, _status, _anchor) in enumerate(chain):
        latest.setdefault(rid, pos)
        first[rid] = pos
    shown = [rid for rid, pos in latest.items() if chain[pos][3] is None or chain[pos][3] in kept]
    positions = {latest[rid] for rid in shown}
    if sorted(shown, key=lambda i: -first[i]) != sorted(shown, key=lambda i: -latest[i]):
        positions.update(first[rid] for rid in shown)
    out = []
    for pos in sorted(positions, reverse=True):
        oid, rid, status, anchor = chain[pos]
        commit = reader.commit(oid)
        record = read_record(reader, commit)
        if (record.id, record.status, record.exit if record.status != "running" else record.base) != (rid, status, anchor):
            return _kept_records_read(reader, log_tip, kept)
        out.append((commit, record))
    return out


def _record_trailers(message: str) -> tuple[str, str, str | None] | None:
    """(id, status, exit) from a node-log commit's trailers, ``None`` when one is missing."""
    found: dict[str, str] = {}
    for line in message.splitlines():
        key, sep, value = line.partition(": ")
        if sep and key in ("Node-Id", "Node-Status", "Node-Exit"):
            found[key] = value.strip()
    if "Node-Id" not in found or "Node-Status" not in found:
        return None
    return found["Node-Id"], found["Node-Status"], found.get("Node-Exit")


def _kept_records_read(reader: ObjectReader, log_tip: str, kept: set[str]) -> list[tuple[CommitData, NodeRecord]]:
    """:func:`_kept_records` with every record read from its ``node.cbor``."""
    chain = [(commit, read_record(reader, commit)) for commit in reader.first_parents(log_tip)]  # newest first
    shown = {record.id for record, _b in listed((r for _c, r in chain), kept)}
    latest: dict[str, int] = {}
    first: dict[str, int] = {}
    for pos, (_commit, record) in enumerate(chain):
        if record.id in shown:
            latest.setdefault(record.id, pos)
            first[record.id] = pos
    positions = set(latest.values())
    if sorted(shown, key=lambda i: -first[i]) != sorted(shown, key=lambda i: -latest[i]):
        positions.update(first.values())
    return [chain[pos] for pos in sorted(positions, reverse=True)]


def _over_size(store: Store, max_size: int, candidates: list[RunSummary], going: dict[tuple[str, str], str]) -> None:
    """Add the oldest candidates to ``going`` until the store's own objects (those only
    ``refs/agentos/`` reaches) fit in ``max_size`` bytes; each run counts the objects no other ref
    reaches (shared objects count once the last run sharing them goes: an overestimate of size)."""
    common = store.location.common_dir
    by_run = _refs_by_run(store, True)
    mine: dict[tuple[str, str], set[str]] = {}
    owners: dict[str, int] = {}
    for s in candidates:
        objs = _reach(common, [o for _n, o in by_run.get((s.worktree, s.id), [])]) or set()
        mine[(s.worktree, s.id)] = objs
        for o in objs:
            owners[o] = owners.get(o, 0) + 1
    agentos = _reach(common, [o for _n, o in list_refs(store.repo, NAMESPACE)]) or set()
    user = _reach(common, ["--exclude=refs/agentos/*", "--exclude=refs/agentos-trash/*",
                           "--exclude=refs/agentos-pins/*", "--all"], stdin=False) or set()
    sizes = _disk_sizes(common, agentos - user)
    total = sum(sizes.values())
    for s in sorted(candidates, key=lambda c: (c.updated_at, c.id)):
        if total <= max_size:
            break
        key = (s.worktree, s.id)
        if key not in going:
            going[key] = f"store over {max_size} bytes"
        total -= sum(sizes.get(o, 0) for o in mine[key] if owners.get(o) == 1)


def _reach(common_dir: str, tips: list[str], stdin: bool = True) -> set[str] | None:
    """Every object reachable from ``tips`` (ids, or rev-list arguments when ``stdin`` is False)."""
    if stdin and not tips:
        return set()
    args = ["rev-list", "--objects", "--no-object-names"]
    done = run_git(common_dir, [*args, "--stdin"], stdin="".join(t + "\n" for t in tips)) if stdin \
        else run_git(common_dir, [*args, *tips])
    if done.returncode != 0:
        return None
    return set(done.stdout.split())


def _disk_sizes(common_dir: str, oids: Iterable[str]) -> dict[str, int]:
    data = "".join(o + "\n" for o in oids)
    if not data:
        return {}
    done = run_git(common_dir, ["cat-file", "--batch-check=%(objectname) %(objectsize:disk)"], stdin=data)
    out = {}
    for line in done.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            out[parts[0]] = int(parts[1])
    return out


def _reflog_lines(path: str) -> list[str]:
    try:
        with open(path, encoding="utf-8", errors="surrogateescape", newline="") as fh:
            return fh.read().splitlines(keepends=True)
    except OSError:
        return []


def _reflog_ids(lines: list[str]) -> list[str]:
    ids = []
    for line in lines:
        parts = line.split(" ", 2)
        if len(parts) >= 2:
            ids += [p for p in parts[:2] if len(p) == 40 and p.strip("0")]
    return ids


def _all_reflogs(common_dir: str) -> dict[str, str]:
    """Every reflog of the repository (its worktrees' HEAD logs too): ``root:ref`` -> its path."""
    out: dict[str, str] = {}
    roots = [os.path.join(common_dir, "logs")]
    wt_dir = os.path.join(common_dir, "worktrees")
    if os.path.isdir(wt_dir):
        roots += [os.path.join(wt_dir, w, "logs") for w in os.listdir(wt_dir)]
    for root in roots:
        for folder, _dirs, files in os.walk(root):
            for name in files:
                path = os.path.join(folder, name)
                out[f"{root}:{os.path.relpath(path, root).replace(os.sep, '/')}"] = path
    return out


def _filtered_reflog(lines: list[str], renamed: dict[str, str], survivors: set[str]) -> list[str]:
    """A rewritten reflog's lines: an entry both of whose ids stay (``survivors``, or ``renamed``:
    a checkpoint rewritten, named by its new id; ``old`` may be zeros, a creation) is kept, the
    others go (an entry whose ``old`` is gone would make ``undo`` delete the branch)."""
    out = []
    for line in lines:
        head, tab, message = line.partition("\t")
        parts = head.split(" ", 2)
        if len(parts) < 3 or not tab:
            continue
        old, new, who = parts
        new = renamed.get(new, new)
        old = renamed.get(old, old)
        if new in survivors and (old == ZERO or old in survivors):
            out.append(f"{old} {new} {who}\t{message}")
    return out


def _path_of(common_dir: str, *parts: str) -> str:
    return os.path.join(common_dir, *[p for part in parts for p in part.split("/")])


def _emptied(paths: set[str], stop: str) -> set[str]:
    """The folders (below ``stop``) that removing ``paths`` leaves empty, and those above them
    that become empty in turn."""
    gone = set(paths)
    out: set[str] = set()
    todo = sorted({os.path.dirname(p) for p in paths}, key=len, reverse=True)
    while todo:
        folder = todo.pop(0)
        if folder in out or not folder.startswith(stop + os.sep):
            continue
        try:
            entries = os.listdir(folder)
        except OSError:
            continue
        if all(os.path.join(folder, e) in gone for e in entries):
            out.add(folder)
            gone.add(folder)
            parent = os.path.dirname(folder)
            todo.append(parent)
            todo.sort(key=len, reverse=True)
    return out


def _sizes(paths: Iterable[str]) -> int:
    total = 0
    for path in paths:
        try:
            total += os.lstat(path).st_size
        except OSError:
            continue
    return total


def _estimate(store: Store, reader: ObjectReader, p: Plan, now: bool) -> tuple[int, int]:
    """Bytes and objects the plan gives back, measured: the objects of gitstate's own packs that
    nothing staying reaches (no ref, reflog or index once the plan's refs are gone and the pruned
    lines' reflogs rewritten) go; the others are packed as gc would pack them (``git pack-objects
    --stdout``, counted, not written), and the estimate is the old packs' size minus that pack's
    and its index's, plus the reflogs, ref files and folders that go, minus what the prunes write
    anew (the kept checkpoints' commits, root trees and metadata, and their node records)."""
    common = store.location.common_dir
    removed = {name for r in p.runs for name, _o in r.refs}
    pruned: dict[str, list[str]] = {}  # ref -> the lines its rewritten reflog keeps
    stay_tips: list[str] = []
    again: list[str] = []  # old objects of which the prunes write a new copy
    by_run = _refs_by_run(store, True)
    values = {name: oid for refs in by_run.values() for name, oid in refs}
    index = _log_index(common, [oid for pr in p.prunes
                                if (oid := values.get(node_log_ref(pr.worktree, pr.run, pr.branch)))])
    packed_growth = 0
    for pr in p.prunes:
        ref = branch_ref(pr.worktree, pr.run, pr.branch)
        log_ref = node_log_ref(pr.worktree, pr.run, pr.branch)
        line = set(pr.line)
        keeps_reflog = len(_heads(by_run.get((pr.worktree, pr.run), []))) > 1
        pruned[ref] = _filtered_reflog(_reflog_lines(_path_of(common, "logs", ref)), {}, line) if keeps_reflog else []
        for oid in pr.line:
            commit = reader.commit(oid)
            again += [oid, commit.tree_id]
            for e in reader.tree(commit.tree_id):
                (again.append(str(e.id)) if e.name == cpfmt.META else stay_tips.append(str(e.id)))
        log_tip = store.core.read_ref(log_ref)
        if log_tip is not None:
            records = _kept_records(reader, log_tip, line, index)
            for commit, _record in records:
                again += [commit.id, commit.tree_id]
            pruned[log_ref] = []
            if not now:
                stay_tips.append(log_tip)
                packed_growth += len(f"{log_tip} {_trash_name(0, log_ref)}\n") + 9
        if not now:
            stay_tips.append(pr.tip)
            packed_growth += len(f"{pr.tip} {_trash_name(0, ref)}\n") + 9
    for name, oid in [ro for r in p.runs for ro in r.refs] + p.expired_trash:
        packed_growth -= len(f"{oid} {name}\n")
    if not now:
        stay_tips += [o for r in p.runs for _n, o in r.refs]
        packed_growth += sum(len(f"{o} {_trash_name(0, n)}\n") + 9 for r in p.runs for n, o in r.refs)
    affected = removed | set(pruned)
    log_root = os.path.join(common, "logs") + ":"
    ref_bytes = 0
    gone_paths: set[str] = set()
    for key, path in _all_reflogs(common).items():
        ref = key[len(log_root):] if key.startswith(log_root) else ""
        if ref in removed:
            gone_paths.add(path)
        elif ref in pruned and not pruned[ref]:
            gone_paths.add(path)
        elif ref in pruned:
            ref_bytes += _sizes([path]) - sum(len(line.encode("utf-8", "surrogateescape")) for line in pruned[ref])
        else:
            stay_tips.extend(_reflog_ids(_reflog_lines(path)))
    # every loose ref of gitstate's is packed (or deleted)
    loose = set()
    for folder, _dirs, files in os.walk(_path_of(common, NAMESPACE.rstrip("/"))):
        for name in files:
            path = os.path.join(folder, name)
            loose.add(path)
            ref = os.path.relpath(path, common).replace(os.sep, "/")
            if ref not in removed:
                packed_growth += _sizes([path]) + len(ref) + 1
    gone_paths |= loose
    folders = _emptied({p for p in gone_paths if "logs" in p}, os.path.join(common, "logs", "refs", "agentos"))
    folders |= _emptied(loose, os.path.join(common, "refs", "agentos"))
    ref_bytes += _sizes(gone_paths) + _sizes(folders) - packed_growth
    sized = _disk_sizes(common, set(again))
    ref_bytes -= sum(sized.values()) + IDX_BYTES_PER_OBJECT * len(sized) + \
        PACK_OVERHEAD * -(-len(p.prunes) // BATCH)
    expired = {name for name, _o in p.expired_trash}
    for name, oid in list_refs(store.repo, "refs/"):
        if name not in affected and name not in expired and name.startswith((NAMESPACE, TRASH, PINS)):
            stay_tips.append(oid)
    stay = _reach(common, stay_tips) or set()
    user = _reach(common, ["--exclude=refs/agentos/*", "--exclude=refs/agentos-trash/*",
                           "--exclude=refs/agentos-pins/*", "--all", "--indexed-objects"], stdin=False)
    if user is None:
        return 0, 0
    stay |= user | _private_index_objects(common)
    pack_dir = os.path.join(common, "objects", "pack")
    ids: set[str] = set()
    old_bytes = 0
    for name in reclaiming.own_packs(common):
        try:
            ids.update(packs.index_id_lines(os.path.join(pack_dir, name + ".idx")).split())
            old_bytes += sum(os.stat(os.path.join(pack_dir, name + ext)).st_size for ext in (".pack", ".idx"))
        except (OSError, GitStateError):
            continue
    kept = ids & stay
    if not ids:
        return max(ref_bytes, 0), 0
    new_bytes = 0
    if kept:
        done = run_git(common, ["-c", "pack.packSizeLimit=0", "pack-objects", "-q", "--threads=1",
                                "--delta-base-offset", "--depth=20", "--stdout"],
                       stdin="".join(o + "\n" for o in sorted(kept)).encode("ascii"), text=False)
        new_bytes = len(done.stdout) + 8 + 256 * 4 + IDX_BYTES_PER_OBJECT * len(kept) + 40
    return max(old_bytes - new_bytes + ref_bytes, 0), len(ids - kept)


# -- applying --------------------------------------------------------------------------------------

def git_dir_size(common_dir: str) -> int:
    """Bytes the repository's git directory takes, as ``du -sb`` counts them (the apparent sizes
    of its files and folders, a file of several links once)."""
    total = 0
    seen: set[tuple[int, int]] = set()
    for folder, _dirs, files in os.walk(common_dir):
        for path in [folder, *(os.path.join(folder, name) for name in files)]:
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if st.st_nlink > 1 and not os.path.isdir(path):
                if (st.st_dev, st.st_ino) in seen:
                    continue
                seen.add((st.st_dev, st.st_ino))
            total += st.st_size
    return total


def _trash_name(stamp: int, ref: str) -> str:
    return f"{TRASH}{stamp}/{ref[len('refs/'):]}"


def reachable_objects(store: Store) -> set[str] | None:
    """Every object a ref, a reflog or an index reaches (the user's, gitstate's private indexes
    too); ``None`` when git could not list them (a missing object: nothing may then be dropped)."""
    common = store.location.common_dir
    found = _reach(common, ["--all", "--reflog", "--indexed-objects"], stdin=False)
    if found is None:
        return None
    return found | _private_index_objects(common)


def _private_index_objects(common_dir: str) -> set[str]:
    """The ids gitstate's private indexes (``agentos/index-<worktree>``) name."""
    found: set[str] = set()
    agentos = os.path.join(common_dir, "agentos")
    try:
        names = [n for n in os.listdir(agentos) if n.startswith("index-") and "." not in n]
    except OSError:
        names = []
    for name in names:
        try:
            found.update(str(entry.id) for entry in pygit2.Index(os.path.join(agentos, name)))
        except (OSError, pygit2.GitError, ValueError):
            continue
    return found


@dataclass
class _Pruned:
    """What the prune of one branch wrote: old -> new ids of its checkpoints and node records."""

    prune: BranchPrune
    renamed: dict[str, str]
    tip: str
    log_renamed: dict[str, str]
    log_tip: str | None
    keep_reflog: bool = True


def _write_batches(store: Store, items: list[Any], refs_of: Callable[[Any], set[str]],
                   stage: Callable[[Transaction, Any], None], label: Callable[[Any], str],
                   failed: list[tuple[str, str]]) -> list[Any]:
    """Stage ``items`` in transactions of :data:`BATCH` each (strict compare-and-swaps): an item
    whose ref moved since it was planned, or that cannot be staged, is left out and reported in
    ``failed``, and its transaction is built again without it. Returns the items written."""
    done: list[Any] = []
    for start in range(0, len(items), BATCH):
        pending = list(items[start:start + BATCH])
        while pending:
            bad: list[tuple[Any, str]] = []

            def build(tx: Transaction, pending: list[Any] = pending, bad: list[tuple[Any, str]] = bad) -> None:
                bad.clear()
                for item in pending:
                    mark = len(tx.updates)
                    try:
                        stage(tx, item)
                    except GitStateError as exc:  # (its objects stay unnamed: the repack drops them)
                        del tx.updates[mark:]
                        bad.append((item, str(exc)))
            try:
                store.core.write(build)
            except ConflictError as exc:
                owner = next((i for i in pending if exc.ref in refs_of(i)), None)
                if owner is None:
                    failed.extend((label(i), str(exc)) for i in pending)
                    break
                failed.append((label(owner), "changed since planned"))
                pending = [i for i in pending if i is not owner]
                continue
            except GitStateError as exc:  # a lock held past the timeout, a file-system error
                failed.extend((label(i), str(exc)) for i in pending)
                break
            failed.extend((label(i), why) for i, why in bad)
            done += [i for i in pending if not any(i is b for b, _w in bad)]
            break
    return done


def apply(store: Store, p: Plan, *, now: bool = False, reclaim: bool = True) -> Result:
    """Carry out a plan: drop expired trash, remove the runs (moved to the trash unless ``now``),
    prune the branches (their old lines and node logs to the trash unless ``now``), each in
    transactions of many runs or branches; rewrite the pruned lines' reflogs (entries of kept
    checkpoints name their new ids, the others go), remove the folders left empty and pack
    gitstate's loose refs; then
    rewrite gitstate's packs without what nothing reaches any more (``reclaim``). A run or branch
    that changed since the plan was made is left as it is and reported in ``failed``."""
    common = store.location.common_dir
    before = git_dir_size(common)
    failed: list[tuple[str, str]] = []
    trashed: list[str] = []
    stamp = int(time.time())
    if p.expired_trash:
        _write_batches(store, p.expired_trash, lambda t: {t[0]},
                       lambda tx, t: tx.delete_ref(t[0], t[1], "gitstate: gc drops old trash", strict=True),
                       lambda _t: "trash", failed)
    current = _refs_by_run(store, True)
    runs = []
    for r in p.runs:
        if set(current.get((r.worktree, r.run), [])) - set(r.refs):
            failed.append((r.run, "changed since planned"))
        else:
            runs.append(r)

    def remove(tx: Transaction, r: RunRemoval) -> None:
        for name, oid in r.refs:
            tx.delete_ref(name, oid, f"gitstate: gc removes run {r.run}", strict=True)
            if not now:
                tx.set_ref(_trash_name(stamp, name), None, oid, "gitstate: gc", strict=True, log=False)

    removed = _write_batches(store, runs, lambda r: {n for n, _o in r.refs}, remove, lambda r: r.run, failed)
    if not now:
        trashed += [_trash_name(stamp, name) for r in removed for name, _o in r.refs]
    written: dict[int, _Pruned] = {}
    reader = store.core.reader
    values = {name: oid for refs in current.values() for name, oid in refs}
    index = _log_index(common, [oid for pr in p.prunes
                                if (oid := values.get(node_log_ref(pr.worktree, pr.run, pr.branch)))])

    def prune(tx: Transaction, pr: BranchPrune) -> None:
        written[id(pr)] = _stage_prune(store, reader, tx, pr, stamp, now, index)

    with reader.listing_loose():
        pruned = _write_batches(
            store, p.prunes,
            lambda pr: {branch_ref(pr.worktree, pr.run, pr.branch), node_log_ref(pr.worktree, pr.run, pr.branch)},
            prune, lambda pr: f"{pr.run}@{pr.branch}", failed)
    done = [written[id(pr)] for pr in pruned]
    for d in done:  # a run of one branch: its reflog only repeats what the checkpoints say
        d.keep_reflog = len(_heads(current.get((d.prune.worktree, d.prune.run), []))) > 1
    if not now:
        for d in done:
            trashed.append(_trash_name(stamp, branch_ref(d.prune.worktree, d.prune.run, d.prune.branch)))
            if d.log_tip is not None:
                trashed.append(_trash_name(stamp, node_log_ref(d.prune.worktree, d.prune.run, d.prune.branch)))
    store.core.forget_objects()
    _tidy(store, removed, done)
    try:
        pack_refs(common)  # (a ref's own folder costs more than its packed line)
    except OSError:
        pass
    reclaimed = None
    if reclaim:
        # what small writes left loose (journaled) goes into gitstate's packs first, to be reclaimed
        housekeeping.pack_journaled(store.repo, common)
        reclaimed = reclaiming.reclaim(common, lambda: reachable_objects(store))
    return Result(p, failed, before, git_dir_size(common), reclaimed, trashed)


def _stage_prune(store: Store, reader: ObjectReader, tx: Transaction, pr: BranchPrune, stamp: int,
                 now: bool, index: LogIndex) -> _Pruned:
    """Stage the prune of one branch: its kept checkpoints rewritten onto a new root (same trees
    but ``meta.cbor``'s base, same messages and times, as :meth:`gitstate.Run.prune` writes them),
    its node log rewritten to the records of the boundaries they keep (:func:`_kept_records`,
    naming the new ids), both refs moved by strict compare-and-swap without a reflog line (gc
    rewrites the reflogs afterwards), and, unless ``now``, the old tips kept in the trash."""
    ref = branch_ref(pr.worktree, pr.run, pr.branch)
    log_ref = node_log_ref(pr.worktree, pr.run, pr.branch)
    kept = list(reversed(pr.line))
    renamed: dict[str, str] = {}
    parent: str | None = None
    base = None
    for oid in kept:
        commit = reader.commit(oid)
        meta = cpfmt.read_meta(reader, commit)
        base = meta["step"] if base is None else base
        meta["base"] = base or None
        if meta.get("node_entry") in renamed:
            meta["node_entry"] = renamed[meta["node_entry"]]
        entries: list[TreeEntry] = [(e.name, e.id, e.filemode) for e in reader.tree(commit.tree_id)
                                    if e.name != cpfmt.META]
        entries.append((cpfmt.META, tx.blob(cpfmt.encode_meta(meta)), MODE_BLOB))
        message = commit.message
        if meta.get("node_entry") and meta["node_entry"] != cpfmt.trailer(message, "Node-Entry"):
            message = cpfmt.replace_trailer(message, "Node-Entry", meta["node_entry"])
        parent = tx.commit(tx.tree(entries), [parent] if parent else [], message,
                           author=commit.author, committer=commit.committer)
        renamed[oid] = parent
    assert parent is not None
    tx.set_ref(ref, pr.tip, parent, f"gitstate: gc prune to the {pr.keep} newest checkpoints", strict=True, log=False)
    log_tip = store.core.read_ref(log_ref)
    log_renamed: dict[str, str] = {}
    new_log: str | None = None
    if log_tip is not None:
        for commit, record in _kept_records(reader, log_tip, set(pr.line), index):
            record = dataclasses.replace(record, entry=renamed.get(record.entry or "", record.entry),
                                         exit=renamed.get(record.exit or "", record.exit),
                                         base=renamed.get(record.base or "", record.base))
            log_entries: list[TreeEntry] = [(nodefmt.RECORD, tx.blob(nodefmt.encode(record, pr.run)), MODE_BLOB)]
            if record.entry:
                log_entries.append((nodefmt.ENTRY_LINK, record.entry, MODE_COMMIT))
            if record.exit:
                log_entries.append((nodefmt.EXIT_LINK, record.exit, MODE_COMMIT))
            new_log = tx.commit(tx.tree(log_entries), [new_log] if new_log else [], nodefmt.message(record, pr.run),
                                author=commit.author, committer=commit.committer)
            log_renamed[commit.id] = new_log
        if new_log is not None:
            tx.set_ref(log_ref, log_tip, new_log, "gitstate: gc prune", strict=True, log=False)
        else:
            tx.delete_ref(log_ref, log_tip, "gitstate: gc prune", strict=True)
    if not now:
        tx.set_ref(_trash_name(stamp, ref), None, pr.tip, "gitstate: gc", strict=True, log=False)
        if log_tip is not None:
            tx.set_ref(_trash_name(stamp, log_ref), None, log_tip, "gitstate: gc", strict=True, log=False)
    return _Pruned(pr, renamed, parent, log_renamed, log_tip if new_log is None else new_log)


def _tidy(store: Store, removed: list[RunRemoval], pruned: list[_Pruned]) -> None:
    """Rewrite the reflogs of the pruned branches and node logs (:func:`_rewrite_reflog`) and
    remove the reflog folders the removed runs left empty. Writers append to a reflog while they
    hold the gc gate shared and the ref's lock: the reflogs are rewritten :data:`TIDY_CHUNK` at a
    time with the gate held exclusive (writers wait a moment between chunks), or, when writers
    keep the gate busy past :data:`TIDY_WAIT`, each under its ref's lock."""
    common = store.location.common_dir
    logs = _path_of(common, "logs", NAMESPACE.rstrip("/"))
    gate = os.path.join(common, "agentos", "gc.lock")
    reader = store.core.reader
    with reader.listing_loose():
        for start in range(0, len(pruned), TIDY_CHUNK):
            with lockfile.Gate.exclusive(gate, TIDY_WAIT) as free:
                for d in pruned[start:start + TIDY_CHUNK]:
                    pr = d.prune
                    _rewrite_reflog(common, reader, branch_ref(pr.worktree, pr.run, pr.branch),
                                    d.renamed if d.keep_reflog else {}, set(d.renamed.values()), d.tip, lock=not free)
                    if d.log_renamed and d.log_tip is not None:
                        _rewrite_reflog(common, reader, node_log_ref(pr.worktree, pr.run, pr.branch), {},
                                        set(d.log_renamed.values()), d.log_tip, lock=not free)
    folders = set()
    for r in removed:
        top = _path_of(common, "logs", run_prefix(r.worktree, r.run).rstrip("/"))
        for folder, _dirs, _files in os.walk(top):
            folders.add(folder)
    remove_empty_dirs(logs, folders)


def _rewrite_reflog(common_dir: str, reader: ObjectReader, ref: str, renamed: dict[str, str], written: set[str],
                    ours: str, *, lock: bool = True) -> None:
    """Rewrite the reflog of a pruned ref (:func:`_filtered_reflog`) under the ref's lock (writers
    append to a reflog under it), keeping its modification time (which tells lines that moved
    within one second apart): entries of the kept checkpoints name their new ids (``renamed``;
    empty: they go too), entries of lines that are gone go, entries written since gc moved the ref
    (to ``ours``; ``written``: the ids gc wrote) stay. An empty reflog is removed, with the folders
    it leaves empty. Left as it is when the ref no longer descends from what gc wrote (moved back
    since) or its lock is held: it then keeps its objects, and nothing else is lost. ``lock``:
    take the ref's lock (not needed while the gc gate is held exclusive)."""
    path = _path_of(common_dir, "logs", ref)
    if not os.path.isfile(path):
        return
    ref_path = _path_of(common_dir, ref)
    made = lock and not os.path.isdir(os.path.dirname(ref_path))
    fd = -1
    try:
        if lock:
            os.makedirs(os.path.dirname(ref_path), exist_ok=True)
            fd = lockfile.create_held(ref_path + ".lock")
    except OSError:  # held, or its folder removed meanwhile by a writer's cleanup: left as it is
        if made:
            remove_empty_dirs(_path_of(common_dir, "refs"), {os.path.dirname(ref_path)})
        return
    try:
        survivors = _survivors(common_dir, reader, ref, written, ours)
        if survivors is None:
            return
        st = os.stat(path)
        lines = _filtered_reflog(_reflog_lines(path), renamed, survivors)
        if not lines:
            os.unlink(path)
            remove_empty_dirs(_path_of(common_dir, "logs", NAMESPACE.rstrip("/")), {os.path.dirname(path)})
        else:
            tmp = f"{path}.{os.getpid()}.gc.tmp"
            with open(tmp, "w", encoding="utf-8", errors="surrogateescape", newline="") as fh:
                fh.writelines(lines)
            os.utime(tmp, ns=(st.st_atime_ns, st.st_mtime_ns))
            os.replace(tmp, path)
    except OSError:
        pass
    finally:
        if fd >= 0:
            lockfile.release_held(ref_path + ".lock", fd)
        if made:
            remove_empty_dirs(_path_of(common_dir, "refs"), {os.path.dirname(ref_path)})


def _survivors(common_dir: str, reader: ObjectReader, ref: str, written: set[str], ours: str) -> set[str] | None:
    """The ids a pruned ref's reflog may keep (read under the ref's lock): what gc wrote, and the
    checkpoints written on top of it since; ``None`` when the ref no longer descends from it."""
    value = peek(common_dir, ref)
    if value == ours:
        return set(written)
    if not isinstance(value, str):
        return None
    newer: set[str] = set()
    try:
        for commit in reader.first_parents(value):
            if commit.id in written:
                return written | newer
            newer.add(commit.id)
            if len(newer) > WALK_LIMIT:
                return None
    except GitStateError:
        return None
    return None


def expire_unreachable_reflog(common_dir: str, ref: str) -> None:
    """Drop the entries of ``ref``'s reflog that its tip does not reach (a rewritten line), keeping
    the others; only this ref's log is touched (``git reflog expire`` on that ref alone)."""
    run_git(common_dir, ["reflog", "expire", "--expire=never", "--expire-unreachable=now", "--rewrite", ref])


def gc(store: Store, policy: Policy, *, grace_days: float = DEFAULT_GRACE_DAYS, now: bool = False,
       dry_run: bool = False) -> Plan | Result:
    """Plan, then (unless ``dry_run``: the plan, with an estimate of the bytes given back) apply."""
    p = plan(store, policy, grace_days=grace_days, now=now, estimate=dry_run)
    if dry_run:
        return p
    return apply(store, p, now=now)


__all__ = ["DEFAULT_GRACE_DAYS", "FINISHED", "PINS", "TRASH", "BranchPrune", "Plan", "Policy", "Result",
           "RunRemoval", "apply", "config_policy", "expire_unreachable_reflog", "gc", "git_dir_size", "parse_cutoff",
           "parse_size", "parse_statuses", "pin", "pin_ref", "pinned", "plan", "reachable_objects", "trash_refs",
           "unpin"]
