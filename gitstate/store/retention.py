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

import os
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pygit2

from gitstate.errors import ConflictError, GitStateError, RunNotFound, UsageError
from gitstate.format import checkpoint as cpfmt
from gitstate.format.names import (
    branch_ref,
    check_name,
    decode_component,
    encode_component,
    node_log_ref,
    run_prefix,
)
from gitstate.git import packs
from gitstate.git.command import run_git
from gitstate.git.refs import list_refs, read_ref, scan_refs
from gitstate.store import reclaim as reclaiming
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
    """A branch cut to its newest ``keep`` checkpoints (``removed`` older ones go)."""

    run: str
    worktree: str
    branch: str
    tip: str
    keep: int
    removed: int
    kept_entries: list[str]
    rewritten: list[str]

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
    store.move_ref(ref, None, target, f"gitstate: pin run {run_id}")
    return True


def unpin(store: Store, run_id: str) -> bool:
    """Unpin a run of this worktree; ``False`` if it was not pinned."""
    check_name("run id", run_id)
    ref = pin_ref(store.worktree, run_id)
    old = read_ref(store.repo, ref)
    if old is None:
        return False
    store.move_ref(ref, old, None, f"gitstate: unpin run {run_id}")
    return True


# -- planning --------------------------------------------------------------------------------------

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


def plan(store: Store, policy: Policy, *, grace_days: float = DEFAULT_GRACE_DAYS, now: bool = False,
         estimate: bool = False, at: float | None = None) -> Plan:
    """What a gc with ``policy`` would remove; writes nothing. ``now``: trash goes whatever its
    age; ``estimate``: measure the bytes given back (objects reachable only from what goes that
    sit in gitstate's own packs, at their packed size)."""
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
    by_key = {(s.worktree, s.id): s for s in candidates}
    for key, reason in going.items():
        s = by_key[key]
        prefix = run_prefix(s.worktree, s.id)
        found = list_refs(store.repo, prefix)
        heads = prefix + "heads/"
        branches = sorted(decode_component(n[len(heads):]) for n, _o in found if n.startswith(heads))
        result.runs.append(RunRemoval(s.id, s.worktree, s.status, s.updated_at, branches, _count_all(store, s),
                                      found, reason))
    result.runs.sort(key=lambda r: (r.updated_at, r.run))
    if policy.keep_last is not None:
        for s in candidates:
            if (s.worktree, s.id) in going:
                continue
            run = store.get_run(s.id, s.worktree)
            for info in run.branch_list():
                if info.checkpoints > policy.keep_last:
                    kept = list(run.history(info.name, limit=policy.keep_last))
                    result.prunes.append(BranchPrune(s.id, s.worktree, info.name, info.tip.id, policy.keep_last,
                                                     info.checkpoints - policy.keep_last,
                                                     *_kept_entries(store, [cp.id for cp in kept])))
    if estimate:
        result.estimate_bytes, result.estimate_objects = _estimate(store, result, now)
    return result


def _kept_entries(store: Store, checkpoints: list[str]) -> tuple[list[str], list[str]]:
    """The ids a pruned branch's kept checkpoints keep (their trees' entries but the metadata),
    and those the prune writes anew (commits, root trees, metadata blobs)."""
    reader = store.reader
    kept: set[str] = set()
    rewritten: list[str] = []
    for oid in checkpoints:
        tree_id = reader.commit(oid).tree_id
        rewritten += [oid, str(tree_id)]
        for e in reader.tree(tree_id):
            (rewritten.append(str(e.id)) if e.name == cpfmt.META else kept.add(str(e.id)))
    return sorted(kept), rewritten


def _count_all(store: Store, s: RunSummary) -> int:
    """Checkpoints of every branch of a run (distinct commits), ``s.checkpoints`` when unreadable."""
    try:
        run = store.get_run(s.id, s.worktree)
        seen: set[str] = set()
        for info in run.branch_list():
            seen.update(cp.id for cp in run.history(info.name))
        return len(seen)
    except GitStateError:
        return s.checkpoints


def _over_size(store: Store, max_size: int, candidates: list[RunSummary], going: dict[tuple[str, str], str]) -> None:
    """Add the oldest candidates to ``going`` until the store's own objects (those only
    ``refs/agentos/`` reaches) fit in ``max_size`` bytes; each run counts the objects no other ref
    reaches (shared objects count once the last run sharing them goes: an overestimate of size)."""
    common = store.location.common_dir
    mine: dict[tuple[str, str], set[str]] = {}
    owners: dict[str, int] = {}
    for s in candidates:
        objs = _reach(common, [o for _n, o in list_refs(store.repo, run_prefix(s.worktree, s.id))]) or set()
        mine[(s.worktree, s.id)] = objs
        for o in objs:
            owners[o] = owners.get(o, 0) + 1
    agentos = _reach(common, [o for _n, o in list_refs(store.repo, "refs/agentos/")]) or set()
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


def _reflog_ids(path: str) -> list[str]:
    ids = []
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                parts = line.split(" ", 2)
                if len(parts) >= 2:
                    ids += [p for p in parts[:2] if len(p) == 40 and p.strip("0")]
    except OSError:
        pass
    return ids


def _all_reflogs(common_dir: str) -> dict[str, list[str]]:
    """Every reflog of the repository (its worktrees' HEAD logs too): log name -> ids it names."""
    out: dict[str, list[str]] = {}
    roots = [os.path.join(common_dir, "logs")]
    wt_dir = os.path.join(common_dir, "worktrees")
    if os.path.isdir(wt_dir):
        roots += [os.path.join(wt_dir, w, "logs") for w in os.listdir(wt_dir)]
    for root in roots:
        for folder, _dirs, files in os.walk(root):
            for name in files:
                path = os.path.join(folder, name)
                rel = os.path.relpath(path, root).replace(os.sep, "/")
                out[f"{root}:{rel}"] = _reflog_ids(path)
    return out


def _estimate(store: Store, p: Plan, now: bool) -> tuple[int, int]:
    """Bytes and objects the plan gives back, measured: the objects of gitstate's own packs that
    nothing staying reaches (no ref, reflog or index once the plan's refs and pruned lines are
    gone) go; the others are packed as gc would pack them (``git pack-objects --stdout``, counted,
    not written), and the estimate is the old packs' size minus that pack's and its index's."""
    common = store.location.common_dir
    affected = {name for r in p.runs for name, _o in r.refs} | {name for name, _o in p.expired_trash}
    for pr in p.prunes:
        affected.add(branch_ref(pr.worktree, pr.run, pr.branch))
        affected.add(node_log_ref(pr.worktree, pr.run, pr.branch))
    log_root = os.path.join(common, "logs") + ":"
    stay_tips: list[str] = []
    ref_bytes = 0  # the reflogs and loose ref files that go
    for key, logged in _all_reflogs(common).items():
        if not (key.startswith(log_root) and key[len(log_root):] in affected):
            stay_tips.extend(logged)
    pruned = {branch_ref(pr.worktree, pr.run, pr.branch) for pr in p.prunes} | {
        node_log_ref(pr.worktree, pr.run, pr.branch) for pr in p.prunes}
    for name in affected:
        paths = [os.path.join(common, "logs", *name.split("/"))]
        if name not in pruned and now:  # (a pruned branch keeps its ref; the trash holds the others)
            paths.append(os.path.join(common, *name.split("/")))
        for path in paths:
            try:
                ref_bytes += os.stat(path).st_size
            except OSError:
                continue
    # a prune writes its kept checkpoints again (commits, root trees, metadata): one pack each
    again = _disk_sizes(common, [o for pr in p.prunes for o in pr.rewritten])
    ref_bytes -= sum(again.values()) + IDX_BYTES_PER_OBJECT * len(again) + PACK_OVERHEAD * len(p.prunes)
    for name, oid in list_refs(store.repo, "refs/"):
        if name not in affected and name.startswith(("refs/agentos/", TRASH, PINS)):
            stay_tips.append(oid)
    for pr in p.prunes:
        stay_tips += pr.kept_entries
    if not now:  # what goes is kept in the trash for the grace period
        stay_tips += [o for r in p.runs for _n, o in r.refs] + [pr.tip for pr in p.prunes]
        stay_tips += [o for pr in p.prunes if (o := store.read_ref(node_log_ref(pr.worktree, pr.run, pr.branch)))]
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
    """Bytes the repository's git directory takes (apparent sizes of its files)."""
    total = 0
    for folder, _dirs, files in os.walk(common_dir):
        for name in files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
            except OSError:
                continue
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


def apply(store: Store, p: Plan, *, now: bool = False, reclaim: bool = True) -> Result:
    """Carry out a plan: drop expired trash, remove the runs (moved to the trash unless ``now``),
    prune the branches (their old lines to the trash unless ``now``; the reflog entries of the
    pruned lines expire), then rewrite gitstate's packs without what nothing reaches any more
    (``reclaim``). A run or branch that changed since the plan was made is left as it is and
    reported in ``failed``."""
    common = store.location.common_dir
    before = git_dir_size(common)
    failed: list[tuple[str, str]] = []
    trashed: list[str] = []
    stamp = int(time.time())
    if p.expired_trash:
        def drop(tx: Transaction) -> None:
            for name, oid in p.expired_trash:
                tx.delete_ref(name, oid, "gitstate: gc drops old trash")
        try:
            store.write(drop)
        except ConflictError as exc:
            failed.append(("trash", str(exc)))
    for r in p.runs:
        def remove(tx: Transaction, r: RunRemoval = r) -> None:
            for name, oid in r.refs:
                tx.delete_ref(name, oid, f"gitstate: gc removes run {r.run}", strict=True)
                if not now:
                    tx.set_ref(_trash_name(stamp, name), None, oid, "gitstate: gc", strict=True, log=False)
        extra = set(list_refs(store.repo, run_prefix(r.worktree, r.run))) - set(r.refs)
        if extra:
            failed.append((r.run, "changed since planned"))
            continue
        try:
            store.write(remove)
        except ConflictError:
            failed.append((r.run, "changed since planned"))
            continue
        if not now:
            trashed += [_trash_name(stamp, name) for name, _o in r.refs]
    for pr in p.prunes:
        run = store.get_run(pr.run, pr.worktree)
        if run.tip(pr.branch) != pr.tip:
            failed.append((f"{pr.run}@{pr.branch}", "changed since planned"))
            continue
        log_ref = run.node_log(pr.branch).ref
        old_log = store.read_ref(log_ref)
        try:
            run.prune(keep_latest=pr.keep, branch=pr.branch)
        except ConflictError:
            failed.append((f"{pr.run}@{pr.branch}", "changed since planned"))
            continue
        if not now:
            olds = [(run.ref(pr.branch), pr.tip)] + ([(log_ref, old_log)] if old_log else [])

            def keep_old(tx: Transaction, olds: list[tuple[str, str]] = olds) -> None:
                for name, oid in olds:
                    tx.set_ref(_trash_name(stamp, name), None, oid, "gitstate: gc", strict=True, log=False)
            try:
                store.write(keep_old)
                trashed += [_trash_name(stamp, name) for name, _o in olds]
            except ConflictError as exc:
                failed.append((f"{pr.run}@{pr.branch}", f"not kept in the trash: {exc}"))
        for name in (run.ref(pr.branch), log_ref):
            expire_unreachable_reflog(common, name)
    store.forget_objects()
    reclaimed = None
    if reclaim:
        reclaimed = reclaiming.reclaim(common, lambda: reachable_objects(store))
    return Result(p, failed, before, git_dir_size(common), reclaimed, trashed)


def expire_unreachable_reflog(common_dir: str, ref: str) -> None:
    """Drop the entries of ``ref``'s reflog that its tip does not reach (a pruned line), keeping
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
