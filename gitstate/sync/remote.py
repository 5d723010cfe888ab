"""Sharing runs with other repositories: push and pull of ``refs/agentos/…``, fast-forward only,
and the merge rules that bundles reuse.

Transport is the ``git`` command, on purpose: it carries the user's own remote configuration —
URLs, ``insteadOf`` rewrites, credential helpers, ssh config and agents, proxies, http settings —
which a libgit2 (pygit2) remote does not see. gitstate only chooses explicit refspecs, so nothing
but ``refs/agentos/…`` moves and the user's branches, tags and remote-tracking refs are untouched.

Pull never lets git write ``refs/agentos/…``: it fetches the objects, keeps them reachable from a
private staging namespace, ``refs/agentos-incoming/<remote>/<session>/…`` (written straight into
``packed-refs`` and removed afterwards, in one go, see :func:`_fetch_packed`), then moves the local
refs itself, all of a pull's moves in one atomic transaction of compare-and-swaps (reflogged, the
new values written into ``packed-refs``, see :func:`merge_staged`): a new ref is created, a ref the remote advanced is
fast-forwarded, and a branch that advanced on both sides keeps the remote's line as a separate
branch ``<branch>@<remote>`` (a session file, as the session file ``<path>@<remote>``) — nothing
is overwritten, nothing is lost. Refs from the remote that
gitstate cannot read (odd names, objects that are not commits, missing objects) are skipped and
reported; nothing fetched is decoded or executed here."""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import subprocess
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pygit2
from pygit2.enums import ObjectType

from gitstate.errors import (
    BrokenObjectError,
    ConflictError,
    CorruptObjectError,
    GitStateError,
    InvalidNameError,
    RemoteError,
    RunNotFound,
)
from gitstate.format import lgwrites
from gitstate.format.names import (
    NAMESPACE,
    STAGING,
    branch_ref,
    encode_component,
    node_log_ref,
    parse_ref,
    run_prefix,
    worktree_prefix,
)
from gitstate.git import command
from gitstate.git.objects import objects_dir
from gitstate.git.pids import pid_alive
from gitstate.git.reader import ObjectReader
from gitstate.git.refs import LockBusy, break_stale_locks, list_refs, set_packed_namespace
from gitstate.store.nodes import read_record
from gitstate.store.sessionfiles import copy_ref, is_copy_of
from gitstate.store.store import Store
from gitstate.store.transaction import Backoff, Transaction
from gitstate.sync.hooks import check_push_allowed, git_cwd, remote_urls
from gitstate.sync.nodelogs import replay_onto, stage_replay
from gitstate.sync.pushqueue import (
    BUDGET_KEY,
    DEFAULT_CHUNK,
    PushQueue,
    chunk_size,
    chunks,
    halves,
    time_budget,
)
from gitstate.sync.pushshadow import Shadow, remove_stale
from gitstate.sync.secretscan import check_push
from gitstate.workspace.restore import SAFETY_BRANCH

_MAX_ARGV = 200_000  # bytes of refspecs per git push (Linux allows ~2 MB; stay far below)

# statuses a result reports; the ones in _FAILED make ``ok`` false
_FAILED = frozenset({"rejected", "error", "skipped", "conflict"})


@dataclass(frozen=True)
class RefResult:
    """What happened to one ref. Push statuses: ``pushed``, ``deleted``, ``up-to-date``,
    ``rejected`` (the remote has checkpoints we lack), ``error``, ``skipped`` (not pushed, a
    failure: a ref name gitstate cannot read, or a kept copy of the remote's line holding
    checkpoints the remote does not have), ``kept`` (a copy of the remote's own line kept by pull
    whose checkpoints the remote has: not pushed back, not a failure), ``behind`` (the remote's line went on from ours: nothing
    to push, not a failure; ``old`` is the remote's value; pull brings it), ``local`` (the
    unsaved-work safety branch, which stays
    local unless asked for; ``old`` is what the remote holds of it, when an earlier push sent one;
    a safety branch the remote already has as it is here is ``up-to-date``). Pull statuses:
    ``created``, ``fast-forward``, ``up-to-date``, ``ahead`` (ours is newer), ``diverged`` (the
    remote's line was kept as branch ``kept_as``, created or moved forward by this pull; for a
    session file, as the session file ``kept_as``), ``kept`` (the remote's line still differs from
    ours and ``kept_as``, kept by an earlier pull, already holds it: nothing changed), ``conflict``
    (kept ours), ``skipped``, ``error``."""

    ref: str
    status: str
    old: str | None = None
    new: str | None = None
    message: str = ""
    kept_as: str | None = None

    @property
    def ok(self) -> bool:
        """False when this ref did not reach the state asked for."""
        return self.status not in _FAILED

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly form."""
        return {"ref": self.ref, "status": self.status, "ok": self.ok, "old": self.old, "new": self.new,
                "message": self.message, "kept_as": self.kept_as}


@dataclass
class SyncResult:
    """The results of one run (``run_id`` ``None`` gathers refs that name no run)."""

    run_id: str | None
    worktree: str | None
    refs: list[RefResult] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when every ref of the run reached the state asked for."""
        return all(r.ok for r in self.refs)

    @property
    def status(self) -> str:
        """The most notable status of the run's refs (a failure before a change before a no-op)."""
        order = ["error", "rejected", "conflict", "skipped", "diverged", "deleted", "created",
                 "pushed", "fast-forward", "ahead", "behind", "up-to-date", "kept", "local"]
        found = {r.status for r in self.refs}
        return next((s for s in order if s in found), "up-to-date")

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly form (the CLI's ``--json`` shape)."""
        return {"run": self.run_id, "worktree": self.worktree, "status": self.status, "ok": self.ok,
                "refs": [r.to_dict() for r in self.refs]}


class PushResult(SyncResult):
    """Per-run result of :func:`push`."""


class PullResult(SyncResult):
    """Per-run result of :func:`pull`, :func:`gitstate.bundle.import_bundle`."""


# -- helpers ---------------------------------------------------------------------------------------

def run_git(store: Store, args: Sequence[str], *, action: str, remote: str, stdin: str | None = None,
            check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run ``git args`` on the store's repository; :class:`RemoteError` with git's last error line
    when it fails and ``check`` is set."""
    loc = store.location
    try:
        out = command.run_git(loc.git_dir, args, cwd=git_cwd(store), work_tree=loc.workdir, stdin=stdin)
    except GitStateError as exc:
        raise RemoteError(remote, action, str(exc)) from exc
    if check and out.returncode != 0:
        raise RemoteError(remote, action, command.last_line(out.stderr) or f"git exited {out.returncode}")
    return out


REMOTE_KEY = "agentos.remote"
#: the remote :func:`clone_runs` adds unless told another name
RUNS_REMOTE = "agentos"


def default_remote(store: Store) -> str:
    """The remote push and pull use when none is named: ``agentos.remote`` (a remote's name or a
    URL: runs kept in a repository of their own, apart from the code's), else ``origin``."""
    out = run_git(store, ["config", "--get", REMOTE_KEY], action="read config", remote=REMOTE_KEY, check=False)
    return out.stdout.strip() or "origin"


def clone_runs(store: Store, url: str, name: str = RUNS_REMOTE, runs: Iterable[str] | None = None) -> list[PullResult]:
    """Make ``url`` this repository's checkpoint remote and pull its runs (every worktree's, or
    the named runs of this worktree). Adds remote ``name`` (its URL only: no fetch refspec, no
    tags, so ``git fetch --all`` brings nothing of it), sets ``agentos.remote`` to it and allows
    pushing checkpoints to it (``agentos.pushRemotes``); the code's remote (``origin``) is left as
    it is, so checkpoints go there only if it is allowed by name. A remote ``name`` that exists
    with another URL is an error; with the same URL it is reused."""
    if not name or not valid_ref_name(f"refs/remotes/{name}") or name.startswith("-"):
        raise RemoteError(name, "add remote", f"{name!r} is not a usable remote name")
    have = run_git(store, ["config", "--get", f"remote.{name}.url"], action="read config", remote=name, check=False)
    current = have.stdout.strip()
    if current and current != url:
        raise RemoteError(name, "add remote", f"remote {name!r} exists with URL {current}; pick another name "
                                              "(--name) or remove it first (git remote remove)")
    if not current:
        run_git(store, ["config", f"remote.{name}.url", url], action="add remote", remote=name)
        run_git(store, ["config", f"remote.{name}.tagOpt", "--no-tags"], action="add remote", remote=name)
    run_git(store, ["config", REMOTE_KEY, name], action="set", remote=REMOTE_KEY)
    allowed = run_git(store, ["config", "--get-all", "agentos.pushRemotes"], action="read config",
                      remote="agentos.pushRemotes", check=False).stdout
    if name not in re.split(r"[,\s]+", allowed):
        run_git(store, ["config", "--add", "agentos.pushRemotes", name], action="set", remote="agentos.pushRemotes")
    run_list = list(runs or [])
    return pull(store, name, run_list or None, all_worktrees=not run_list)


@dataclass(frozen=True)
class RemoteRun:
    """A run as a remote lists it (nothing fetched): its refs ``{ref: object id}`` and how this
    repository's copy compares (``here``: ``same``, ``differs`` or ``absent``)."""

    run_id: str
    worktree: str
    refs: dict[str, str]
    here: str

    @property
    def branches(self) -> list[str]:
        """The run's branch names on the remote."""
        out = []
        for ref in self.refs:
            parsed = parse_ref(ref)
            if parsed is not None and parsed.kind == "heads" and parsed.name is not None:
                out.append(parsed.name)
        return sorted(out)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly form (``runs --remote --json``)."""
        return {"id": self.run_id, "worktree": self.worktree, "branches": self.branches, "refs": len(self.refs),
                "here": self.here}


def remote_runs(store: Store, remote: str | None = None, all_worktrees: bool = False) -> list[RemoteRun]:
    """The runs ``remote`` (default :func:`default_remote`) holds, from one ``git ls-remote``:
    nothing is fetched. This worktree's runs, or every worktree's."""
    remote = remote or default_remote(store)
    prefix = NAMESPACE if all_worktrees else worktree_prefix(store.worktree)
    listed = _ls_remote(store, remote, [prefix])
    grouped: dict[tuple[str, str], dict[str, str]] = {}
    for name, oid in listed.items():
        parsed = parse_ref(name)
        if parsed is not None:
            grouped.setdefault((parsed.worktree, parsed.run_id), {})[name] = oid
    local = {name: oid for name, oid in list_refs(store.repo, prefix)}
    out = []
    for (worktree, run_id), refs in sorted(grouped.items()):
        if "run" not in {getattr(parse_ref(r), "kind", None) for r in refs}:
            continue  # refs of no run (no run record): pull skips them too
        mine = {n: o for n, o in local.items() if n.startswith(run_prefix(worktree, run_id))}
        here = "absent" if not mine else "same" if all(mine.get(n) == o for n, o in refs.items()) else "differs"
        out.append(RemoteRun(run_id, worktree, refs, here))
    return out


def remote_label(store: Store, remote: str) -> str:
    """A short name for branch suffixes: the remote's name when it is a configured remote, else
    ``remote`` (a URL or a path makes a poor branch name)."""
    names = run_git(store, ["remote"], action="list remotes", remote=remote, check=False).stdout.split()
    return remote if remote in names else "remote"


def scope_prefixes(store: Store, runs: Iterable[str] | None, all_worktrees: bool) -> list[str]:
    """The ref prefixes a push or pull covers: named runs, the worktree's runs, or everything."""
    run_list = list(runs or [])
    if run_list:
        return [run_prefix(store.worktree, r) for r in run_list]
    return [NAMESPACE] if all_worktrees else [worktree_prefix(store.worktree)]


def _in_scope(name: str, prefixes: Sequence[str]) -> bool:
    return any(name.startswith(p) for p in prefixes)


def _group(results: Iterable[RefResult], cls: type[SyncResult]) -> list[Any]:
    grouped: dict[tuple[str | None, str | None], SyncResult] = {}
    for r in results:
        parsed = parse_ref(r.ref)
        key = (parsed.run_id, parsed.worktree) if parsed else (None, None)
        grouped.setdefault(key, cls(key[0], key[1])).refs.append(r)
    return sorted(grouped.values(), key=lambda s: (s.run_id is None, s.worktree or "", s.run_id or ""))


# -- push --------------------------------------------------------------------------------------------

_REJECT_HINT = ("the remote has checkpoints this repository lacks (the branch advanced on both sides?): "
                "pull first — the remote's line is kept as a separate branch — then share yours under "
                "its own name (fork it to a new branch)")
_REJECT_FILE_HINT = ("the remote has versions of this session file that this repository lacks (written on "
                     "both sides?): pull first — the remote's versions are kept as the session file "
                     "'<path>@<remote>' — then share yours under another path")


def push(store: Store, remote: str | None = None, runs: Iterable[str] | None = None, *,
         all_worktrees: bool = False, prune: bool = False, include_safety: bool = False,
         allow_secrets: Iterable[str] = (), timeout: float | None = None) -> list[PushResult]:
    """Push runs to ``remote`` (fast-forward only) and return one result per run.

    ``remote``: a remote's name, a URL or a path (default: :func:`default_remote`). ``runs``: run
    ids of this worktree (default: all its runs; ``all_worktrees``: every worktree).
    A branch that the remote advanced is rejected with a clear message while the others are pushed.
    ``prune`` deletes remote refs in scope that do not exist here, each with a lease on the value
    just seen on the remote (a ref someone moved meanwhile is not deleted). Branches named
    ``<branch>@<remote>`` are that remote's own lines kept by pull, so they are not pushed back to
    it (``kept`` while the remote still has their checkpoints, ``skipped`` otherwise). The
    unsaved-work safety branch a restore writes (``restore-safety``) holds files that were never
    checkpointed on purpose, so it stays local (``local``) unless ``include_safety``. Raises
    :class:`PushNotAllowedError` unless ``agentos.pushRemotes`` allows ``remote``. Every checkpoint
    the push would send (each commit the remote lacks, not only the tips) is scanned for
    credentials first: one finding refuses the whole push with :class:`SecretsFoundError` and
    nothing is sent; ``allow_secrets`` (fingerprints) and the allowlist let known false positives
    through (:mod:`gitstate.sync.secretscan`).

    Refs the remote already holds as they are here are not sent (when the remote pushes to one URL,
    the one it fetches from). The rest go in chunks of whole runs, at most ``agentos.pushChunk``
    ref updates each, from a push queue kept in the git dir (:mod:`gitstate.sync.pushqueue`): a
    push that was killed or lost its connection is resumed by the next push to the same remote.
    A chunk the server refuses as a whole is halved until the ref at fault is found (``rejected``,
    saying the server refused it even alone; the other refs are pushed) or the halves land (then
    the rest goes in chunks of that size). ``timeout``: the seconds the whole push may take
    (default ``agentos.pushTimeout``, 3600; 0: none); refs it leaves unsent are ``error`` and
    stay queued."""
    remote = remote or default_remote(store)
    check_push_allowed(store, remote)
    run_list = list(runs or [])
    prefixes = scope_prefixes(store, run_list, all_worktrees)
    label = remote_label(store, remote)
    _align_node_logs(store, prefixes, label)
    local = {name: oid for p in prefixes for name, oid in list_refs(store.repo, p)}
    if not prune:
        for run_id in run_list:
            p = run_prefix(store.worktree, run_id)
            if not any(n.startswith(p) for n in local):
                raise RunNotFound(run_id, store.worktree)
    results: dict[str, RefResult] = {}
    expected: dict[str, str | None] = {}  # remote ref -> local oid (None: a deletion)
    excluded: set[str] = set()
    kept: dict[str, str] = {}
    withheld: dict[str, str] = {}  # restore-safety refs not sent (include_safety not asked)
    for name, oid in sorted(local.items()):
        parsed = parse_ref(name)
        if parsed is None:
            results[name] = RefResult(name, "skipped", None, oid, "not a gitstate ref name")
            excluded.add(name)
        elif _is_kept_copy(name, parsed.kind, parsed.name, label):
            kept[name] = oid
            excluded.add(name)
        elif not include_safety and is_safety_ref(name):
            withheld[name] = oid
            excluded.add(name)
        else:
            expected[name] = oid
    if withheld:
        results.update(_withheld_safety(store, remote, withheld))
    _remove_stale_sessions(store)  # what a push or pull that was killed left: staging refs, shadows
    remove_stale(store, pid_alive)
    queue = PushQueue.load(store, remote)
    for name in queue.refs:  # what an interrupted push to this remote did not send yet
        current = _local_oid(store, name) if name not in expected and name not in excluded else None
        if current is not None and parse_ref(name) is not None:
            expected[name] = current
    deletions: list[str] = []
    leases: list[str] = []
    if prune:
        for name, oid in _ls_remote(store, remote, prefixes).items():
            if name not in local and parse_ref(name) is not None:
                leases.append(f"--force-with-lease={name}:{oid}")
                deletions.append(f":{name}")
                expected[name] = None
    pushes = {name: oid for name, oid in expected.items() if oid is not None}
    todo = dict(pushes)
    if pushes:  # before anything is sent: what the remote lacks, scanned whole
        there = _remote_values(store, remote)
        check_push(store, remote, pushes.values(), there.values(), allow_secrets)
        if _single_target(store, remote):  # refs the remote holds as they are here are not sent again
            todo = {name: oid for name, oid in pushes.items() if there.get(name) != oid}
            results.update({name: RefResult(name, "up-to-date", oid, oid) for name, oid in pushes.items()
                            if name not in todo})
    queue.refs = dict(todo)
    queue.save()  # before the first chunk: a push killed from here on is resumed by the next one
    if todo:
        results.update(_push_chunks(store, remote, label, todo, queue, timeout))
    for batch in _batches(deletions):
        args = [*_SCANNED, "push", "--porcelain", "--no-follow-tags", "--recurse-submodules=no",
                *[le for le in leases if _lease_in(le, batch)], remote, *batch]
        results.update(_push_run(store, remote, args, {spec[1:]: None for spec in batch}))
    if kept:  # after the push: a copy whose checkpoints a branch just pushed carries is on the remote now
        results.update(_kept_copies(store, remote, kept))
    refused = {name: r.new for name, r in results.items()
               if r.status == "rejected" and r.message in (_REJECT_HINT, _REJECT_FILE_HINT) and r.new is not None}
    behind, others = _behind(store, remote, label, refused)
    for name, theirs in behind.items():
        results[name] = RefResult(name, "behind", theirs, refused[name], BEHIND_MESSAGE.format(remote=remote))
    for name, result in list(results.items()):
        why = others.get(_run_record_of(name)) if result.status == "rejected" else None
        if why is not None:  # pulling cannot help: the remote's run of that id is another run
            results[name] = RefResult(name, "rejected", result.old, result.new, why)
    return _group(results.values(), PushResult)


BEHIND_MESSAGE = "{remote} has newer checkpoints on this line; nothing to push (pull to bring them here)"
_MAX_BEHIND_CHECK = 1000  # refused refs whose remote value one push fetches to tell "behind"


def _behind(store: Store, remote: str, label: str,
            refused: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """Of the refs a push refused as not fast-forward (``{ref: our oid}``), those whose value here
    is an ancestor of the remote's: the remote's line merely went on, nothing of ours is missing
    there. Their remote values are fetched into a private staging namespace (removed again) to
    tell; returns ``{ref: the remote's oid}``, and ``{run record ref: why}`` for refused run
    records whose remote run names another workflow (another run with the same id: no pull makes
    the push possible). A fetch that fails leaves them refused."""
    if not refused or len(refused) > _MAX_BEHIND_CHECK:
        return {}, {}
    session = f"{STAGING}{encode_component(label)}/{os.getpid()}-{secrets.token_hex(4)}/"
    specs = [f"+{name}:{session}{name[len(NAMESPACE):]}" for name in sorted(refused)]
    found: dict[str, str] = {}
    try:
        done = run_git(store, ["fetch", "--quiet", "--no-tags", "--no-write-fetch-head", "--no-auto-maintenance",
                               "--no-recurse-submodules", "--refmap=", remote, *specs],
                       action="fetch from", remote=remote, check=False)
        if done.returncode != 0:
            return {}, {}
        reader = store.core.reader
        others: dict[str, str] = {}
        for name, ours in refused.items():
            theirs = _read(store, session + name[len(NAMESPACE):])
            try:
                if theirs is not None and _check_commit(reader, theirs) is None and reader.is_ancestor(ours, theirs):
                    found[name] = theirs
            except CorruptObjectError:
                continue
            parsed = parse_ref(name)
            if theirs is not None and parsed is not None and parsed.kind == "run":
                why = _other_workflow(store, RefResult(name, "conflict", ours, theirs))
                if why is not None:
                    others[name] = f"{why}; this run cannot be pushed to {remote} under this id"
    finally:
        _delete_refs(store, [n for n, _ in list_refs(store.repo, session)])
    return found, others


SAFETY_MESSAGE = ("not pushed: the restore-safety branch holds workspace files a restore set aside without "
                  "checkpointing them; it stays in this repository unless you push with --include-safety")
SAFETY_ON_REMOTE = ("not pushed again: {remote} already has this restore-safety branch (an earlier push with "
                    "--include-safety sent it)")
SAFETY_OLDER_ON_REMOTE = (SAFETY_MESSAGE + "; {remote} still has an older restore-safety branch that an earlier "
                          "push with --include-safety sent")


def _withheld_safety(store: Store, remote: str, withheld: dict[str, str]) -> dict[str, RefResult]:
    """Results for restore-safety refs push leaves out: ``local`` (with what the remote holds of
    them, if an earlier ``include_safety`` push sent one), or ``up-to-date`` when the remote already
    has exactly this one. One ``ls-remote`` of the runs concerned."""
    runs = {run_prefix(p.worktree, p.run_id) for p in map(parse_ref, withheld) if p is not None}
    there = _ls_remote(store, remote, sorted(runs))
    out: dict[str, RefResult] = {}
    for name, oid in withheld.items():
        theirs = there.get(name)
        if theirs == oid:
            out[name] = RefResult(name, "up-to-date", theirs, oid, SAFETY_ON_REMOTE.format(remote=remote))
        elif theirs is not None:
            out[name] = RefResult(name, "local", theirs, oid, SAFETY_OLDER_ON_REMOTE.format(remote=remote))
        else:
            out[name] = RefResult(name, "local", None, oid, SAFETY_MESSAGE)
    return out


def is_safety_ref(name: str) -> bool:
    """Whether ``name`` is the unsaved-work safety branch of a run (or its node log): the refs that
    push and export leave out unless asked."""
    parsed = parse_ref(name)
    return parsed is not None and parsed.kind in ("heads", "nodes") and parsed.name == SAFETY_BRANCH


def _kept_copies(store: Store, remote: str, kept: dict[str, str]) -> dict[str, RefResult]:
    """Results for copies of ``remote``'s own lines kept by pull: ``kept`` (not a failure) when
    the remote has the copy's checkpoints (some remote ref of the same run is that checkpoint or
    descends from it, or is a checkpoint not fetched yet), else ``skipped`` — the copy holds
    checkpoints the remote lacks (written on it here, or the remote dropped that line), which
    should be shared under a name of its own. One ``ls-remote``, taken after the push (so a
    branch just pushed with the copy's checkpoints counts)."""
    runs = {run_prefix(p.worktree, p.run_id) for p in map(parse_ref, kept) if p is not None}
    remote_refs = _ls_remote(store, remote, sorted(runs))
    reader = store.core.reader
    out: dict[str, RefResult] = {}
    for name, oid in kept.items():
        parsed = parse_ref(name)
        prefix = run_prefix(parsed.worktree, parsed.run_id) if parsed is not None else name
        on_remote = moved_on = False
        for other, their in remote_refs.items():
            if not other.startswith(prefix):
                continue
            if not reader.exists(their):
                moved_on = True  # a line we have not fetched yet: most likely it grew from the copy
                continue
            try:
                if their == oid or reader.is_ancestor(oid, their):
                    on_remote = True
                    break
            except CorruptObjectError:
                continue
        if on_remote or moved_on:
            out[name] = RefResult(name, "kept", None, oid,
                                  f"a copy of {remote}'s own line kept by pull; {remote} has it, so it is not "
                                  "pushed back")
        else:
            out[name] = RefResult(name, "skipped", None, oid,
                                  f"a copy of {remote}'s own line kept by pull, holding checkpoints {remote} does "
                                  f"not have (written here since the pull, or dropped by {remote}); not pushed back "
                                  "under that name (fork it to a branch of its own to share it)")
    return out


def _copy_suffix(label: str) -> re.Pattern[str]:
    return re.compile("^(.+)@" + re.escape(label) + r"(-[0-9]+)?$")


def _is_kept_copy(ref: str, kind: str, name: str | None, label: str) -> bool:
    """Whether ``ref`` is a copy of ``label``'s own line kept by pull, or its node log (never
    pushed back to it)."""
    if kind in ("heads", "nodes"):
        return _copy_suffix(label).match(name or "") is not None
    return kind == "files" and is_copy_of(ref, label)


def _align_node_logs(store: Store, prefixes: Sequence[str], label: str) -> None:
    """Before a push: a branch put on the line of its kept copy ``<branch>@<label>`` (the copy's
    tip is on the branch's line, e.g. after ``rollback RUN @<branch>@<label>``) takes the copy's
    node log, ``label``'s, with its own boundaries still on the line replayed after it
    (:func:`gitstate.sync.nodelogs.replay_onto`), so its node log is a fast-forward of the
    remote's again. A log that cannot be read or moves meanwhile is left as it is (the push then
    reports it)."""
    reader = store.core.reader
    pattern = _copy_suffix(label)
    for name, copy_head in sorted(n for p in prefixes for n in list_refs(store.repo, p)):
        parsed = parse_ref(name)
        if parsed is None or parsed.kind != "heads" or parsed.name is None:
            continue
        match = pattern.match(parsed.name)
        if match is None:
            continue
        wt, run_id, branch = parsed.worktree, parsed.run_id, match.group(1)
        try:
            copy_log = _read(store, node_log_ref(wt, run_id, parsed.name))
            head = _read(store, branch_ref(wt, run_id, branch))
            log_ref = node_log_ref(wt, run_id, branch)
            ours = _read(store, log_ref)
            if (copy_log is None or head is None or not reader.is_ancestor(copy_head, head)
                    or (ours is not None and reader.is_ancestor(copy_log, ours))):
                continue
            replay_onto(store, log_ref, ours, copy_log, head,
                        f"gitstate: push to {label} (node log follows {branch} onto {parsed.name}'s line)")
        except (ConflictError, CorruptObjectError, InvalidNameError):
            continue


def _lease_in(lease: str, batch: list[str]) -> bool:
    ref = lease.split("=", 1)[1].rsplit(":", 1)[0]
    return f":{ref}" in batch


def _batches(specs: list[str]) -> list[list[str]]:
    out: list[list[str]] = []
    size = _MAX_ARGV + 1
    for spec in specs:
        if size + len(spec) > _MAX_ARGV:
            out.append([])
            size = 0
        out[-1].append(spec)
        size += len(spec) + 1
    return out


_BAD_REF_CHARS = frozenset(" ~^:?*[\\\x7f")


def valid_ref_name(name: str) -> bool:
    """Whether git accepts ``name`` as a ref name (the rules of ``git check-ref-format``): a ref
    a remote lists under another name is one git cannot fetch."""
    if (not name or name.endswith(("/", ".")) or "//" in name or ".." in name or "@{" in name or name == "@"
            or any(ord(c) < 0x20 or c in _BAD_REF_CHARS for c in name)):
        return False
    return all(part and not part.startswith(".") and not part.endswith(".lock") for part in name.split("/"))


MAX_REFS_KEY = "agentos.pullMaxRefs"
DEFAULT_MAX_PULL_REFS = 20_000


def max_pull_refs(store: Store) -> int:
    """How many refs one pull or import accepts: ``agentos.pullMaxRefs`` (0: no limit), default
    :data:`DEFAULT_MAX_PULL_REFS`. A hostile remote offering more would fill ``.git`` with loose
    refs."""
    out = run_git(store, ["config", "--get", MAX_REFS_KEY], action="read config", remote=MAX_REFS_KEY, check=False)
    text = out.stdout.strip()
    if out.returncode != 0 or not text:
        return DEFAULT_MAX_PULL_REFS
    try:
        value = int(text)
    except ValueError:
        raise RemoteError(MAX_REFS_KEY, "read config", f"{MAX_REFS_KEY} must be a whole number, not {text!r}") from None
    return max(value, 0)


def _ls_remote(store: Store, remote: str, prefixes: Sequence[str], *, action: str = "list refs of") -> dict[str, str]:
    out = run_git(store, ["ls-remote", "--refs", remote, NAMESPACE + "*"], action=action, remote=remote)
    refs: dict[str, str] = {}
    for line in out.stdout.splitlines():
        oid, _, name = line.partition("\t")
        if _in_scope(name, prefixes):
            refs[name] = oid
    return refs


def _push_run(store: Store, remote: str, args: list[str], expected: dict[str, str | None], *,
              timeout: float | None = None, said: list[str] | None = None,
              git_dir: str | None = None) -> dict[str, RefResult]:
    """Run one ``git push --porcelain`` and report each ref it covered (a ref git said nothing
    about gets git's overall error, so one failure never hides the others' results).

    A remote may push to several URLs (``git remote set-url --add --push``): git pushes to each in
    turn (a ``To <url>`` block of ref lines each) and fails when any fails, possibly saying nothing
    of a URL whose pre-push hook refused. A ref is then a failure when it failed at any URL, or
    went unreported at one while git failed; and when git failed but no ref says so, every ref
    carries git's error: a failed push never reads as pushed. ``timeout``: seconds git may run
    (then it is stopped and the push fails); ``said`` collects what the server said (its
    ``remote:`` lines, such as a refusing hook's message); ``git_dir``: the repository git
    pushes from (default: the store's)."""
    if timeout is None and git_dir is None:
        out = run_git(store, args, action="push to", remote=remote, check=False)
    else:
        out = _git_timed(store, args, timeout, git_dir)
    if said is not None:
        said += [line[len("remote:"):].strip() for line in out.stderr.splitlines()
                 if line.startswith("remote:") and line[len("remote:"):].strip()]
    reports: dict[str, list[RefResult]] = {}
    urls: list[str] = []
    for line in out.stdout.splitlines():
        if line.startswith("To "):
            urls.append(line[3:])
            continue
        parts = line.split("\t")
        if len(parts) < 3 or len(parts[0]) != 1:
            continue
        dst = parts[1].rpartition(":")[2]
        if dst not in expected:
            continue
        status, message = _push_status(parts[0], parts[2])
        if message == _REJECT_HINT and getattr(parse_ref(dst), "kind", None) == "files":
            message = _REJECT_FILE_HINT
        if len(urls) > 1 and status in _FAILED:
            message = f"{message} (at {urls[-1]})" if message else f"at {urls[-1]}"
        reports.setdefault(dst, []).append(RefResult(dst, status, None, expected[dst], message))
    failed = out.returncode != 0
    failure = command.last_line(out.stderr) or f"git push exited {out.returncode}"
    if "pre-push" in out.stderr or "gitstate: refusing" in out.stderr:
        failure = "refused by the pre-push hook: " + failure
    targets = max(len(urls), len(remote_urls(store, remote)) if failed else 1)
    results: dict[str, RefResult] = {}
    for dst, oid in expected.items():
        found = reports.get(dst, [])
        bad = [r for r in found if not r.ok]
        if bad:
            results[dst] = bad[0]
        elif found and not (failed and len(found) < targets):
            results[dst] = next((r for r in found if r.status != "up-to-date"), found[0])
        else:
            results[dst] = RefResult(dst, "error", None, oid, failure)
    if failed and all(r.ok for r in results.values()):
        results = {dst: RefResult(dst, "error", None, oid, failure) for dst, oid in expected.items()}
    return results


def _git_timed(store: Store, args: list[str], timeout: float | None,
               git_dir: str | None = None) -> subprocess.CompletedProcess[str]:
    """``git args`` on ``git_dir`` (default: the store's repository; run where the store's git
    commands run, so relative remote paths mean the same), stopped after ``timeout`` seconds (a
    failed result saying so)."""
    loc = store.location
    env = command.git_environment(git_dir, None) if git_dir else command.git_environment(loc.git_dir, loc.workdir)
    try:
        return subprocess.run(["git", *args], cwd=git_cwd(store), env=env, capture_output=True, text=True,
                              timeout=None if timeout is None else max(timeout, 0.1), check=False)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(["git", *args], -9, "", "the push ran out of its time budget")
    except OSError as exc:
        raise RemoteError("git", "run", f"cannot run git: {exc}") from exc


def _remote_values(store: Store, remote: str) -> dict[str, str]:
    """Every ref the remote advertises, ``{name: object id}`` (one ``git ls-remote``)."""
    out = run_git(store, ["ls-remote", remote], action="list refs of", remote=remote)
    refs: dict[str, str] = {}
    for line in out.stdout.splitlines():
        oid, _, name = line.partition("\t")
        if name:
            refs[name] = oid
    return refs


def _single_target(store: Store, remote: str) -> bool:
    """Whether ``remote`` pushes to one URL, the one it fetches from (so ``ls-remote`` tells what
    a push finds there)."""
    pushes = remote_urls(store, remote)
    out = run_git(store, ["remote", "get-url", remote], action="read the URL of", remote=remote, check=False)
    fetch = out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else remote
    return pushes == [fetch]


class _Stop(Exception):
    """Ends a chunked push early: the refs not sent yet are reported with ``why``."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


#: a push gives up after this many chunks refused as a whole (each halving costs one)
MAX_REFUSED_CHUNKS = 200
_PER_REF = (_REJECT_HINT, _REJECT_FILE_HINT, "the remote ref changed since it was looked at")


def _refused_whole(results: dict[str, RefResult]) -> bool:
    """Whether the server refused a chunk as a whole (its hook, an HTTP error, a dropped
    connection), not ref by ref (a branch that is not a fast-forward)."""
    return all(not r.ok and not r.message.startswith(_PER_REF) for r in results.values())


def _push_chunks(store: Store, remote: str, label: str, todo: dict[str, str], queue: PushQueue,
                 timeout: float | None) -> dict[str, RefResult]:
    """Push ``todo`` (``{ref: object id}``) in chunks (see :func:`push`), taking each chunk off
    ``queue`` once it reached a final state. Each chunk is one ``git push`` of one glob refspec from
    a shadow repository holding the chunk's refs alone (:mod:`gitstate.sync.pushshadow`)."""
    results: dict[str, RefResult] = {}
    budget = timeout if timeout is not None else time_budget(store)
    deadline = None if not budget else time.monotonic() + budget
    size = min(chunk_size(store), queue.chunk or DEFAULT_CHUNK * 1000)
    refused = 0
    shadow = Shadow(store)

    def left() -> float | None:
        if deadline is None:
            return None
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise _Stop(f"not pushed: the push ran out of its time budget ({budget:g} s, git config {BUDGET_KEY}); "
                        "push again to send the rest")
        return remaining

    def attempt(chunk: list[str]) -> bool:
        nonlocal size, refused
        said: list[str] = []
        out = _push_chunk(store, remote, shadow, {name: todo[name] for name in chunk}, left(), said)
        if not _refused_whole(out):
            results.update(out)
            queue.done(name for name, r in out.items() if r.status != "error")
            return True
        left()  # a push stopped by the budget is not halved
        refused += 1
        if refused > MAX_REFUSED_CHUNKS:
            raise _Stop(f"not pushed: {remote} refused {MAX_REFUSED_CHUNKS} pushes, the last: "
                        f"{next(iter(out.values())).message}; push again to retry")
        if len(chunk) == 1:
            only = out[chunk[0]]
            if only.status == "error":  # git failed as a whole for one ref: the connection, not this ref
                raise _Stop(f"not pushed: {only.message}; push again to resume")
            why = f"{said[-1]} ({only.message})" if said and said[-1] not in only.message else only.message
            results[chunk[0]] = RefResult(chunk[0], "rejected", None, todo[chunk[0]],
                                          f"{remote} refused this ref even when pushed alone: {why}")
            queue.done(chunk)
            return False
        first, second = halves(chunk)
        if attempt(first) & attempt(second):  # both halves landed: the chunk was too big for the server
            size = min(size, max(len(first), len(second)))
            queue.chunk = size
            queue.save()
        return False

    try:
        pending = chunks(todo, size)
        while pending:
            before = size
            attempt(pending.pop(0))
            if size < before and pending:  # the server takes less: cut what is left again
                pending = chunks([name for c in pending for name in c], size)
    except _Stop as stop:
        for name, oid in todo.items():
            if name not in results:
                results[name] = RefResult(name, "error", None, oid, stop.why)
    finally:
        shadow.close()
    failed = [name for name, r in results.items() if r.status in ("error", "rejected")]
    if failed and _single_target(store, remote):
        # a connection lost after the server took them, or refused because another push of the
        # same refs (a concurrent one, or one this resumes) landed them first
        try:
            there = _ls_remote(store, remote, [NAMESPACE])
        except RemoteError:
            there = {}
        landed = [name for name in failed if there.get(name) == todo[name]]
        results.update({name: RefResult(name, "pushed" if results[name].status == "error" else "up-to-date",
                                        None, todo[name]) for name in landed})
        queue.done(landed)
    return results


# check_push scanned what a push sends: the pre-push hook need not scan it again
_SCANNED = ["-c", "agentos.secretsChecked=true"]


def _push_chunk(store: Store, remote: str, shadow: Shadow, chunk: dict[str, str], timeout: float | None,
                said: list[str]) -> dict[str, RefResult]:
    """One ``git push`` of ``chunk`` from the shadow repository holding its refs alone
    (:mod:`gitstate.sync.pushshadow`), with one glob refspec."""
    shadow.load(chunk)
    args = [*_SCANNED, "push", "--porcelain", "--no-follow-tags", "--recurse-submodules=no", remote,
            f"{NAMESPACE}*:{NAMESPACE}*"]
    return _push_run(store, remote, args, dict(chunk), timeout=timeout, said=said, git_dir=shadow.path)


def _local_oid(store: Store, name: str) -> str | None:
    ref = store.repo.references.get(name)
    return str(ref.target) if ref is not None and isinstance(ref.target, pygit2.Oid) else None


def _push_status(flag: str, summary: str) -> tuple[str, str]:
    if flag == "=":
        return "up-to-date", ""
    if flag == "-":
        return "deleted", ""
    if flag in (" ", "*", "+"):
        return "pushed", summary
    reason = summary[summary.find("(") + 1:summary.rfind(")")] if "(" in summary else summary
    if "stale info" in summary:
        return "rejected", "the remote ref changed since it was looked at (lease); pull and retry"
    if "non-fast-forward" in summary or "fetch first" in summary:
        return "rejected", _REJECT_HINT
    return ("rejected" if "rejected" in summary else "error"), reason or summary


# -- pull and the shared merge ---------------------------------------------------------------------

def pull(store: Store, remote: str | None = None, runs: Iterable[str] | None = None, *,
         all_worktrees: bool = False) -> list[PullResult]:
    """Bring runs from ``remote`` in, fast-forward only, and return one result per run.

    ``runs``: run ids of this worktree (default: all of its runs on the remote; ``all_worktrees``:
    every worktree's). A branch that advanced on both sides keeps the remote's line as branch
    ``<branch>@<remote>`` (reported as ``diverged``); refs gitstate cannot read are skipped and
    reported; a run named here but absent on the remote is reported as an error.

    ``remote`` defaults to :func:`default_remote`. Named runs are fetched on their own: git asks
    the server for their refs only (protocol v2 ref prefixes), so pulling one run of a server
    holding thousands transfers that run, not the list of all the others. The run's objects come
    whole (no ``--filter=blob:none``: a blob-less fetch needs the repository made a partial clone
    and libgit2, which reads checkpoints, cannot fetch a missing blob later)."""
    remote = remote or default_remote(store)
    prefixes = scope_prefixes(store, runs, all_worktrees)
    results = fetch_and_merge(store, remote, remote_label(store, remote), prefixes, action="fetch from",
                              listed=not list(runs or []))
    names = {r.run_id for r in results}
    for run_id in runs or []:
        if run_id not in names:
            missing = PullResult(run_id, store.worktree)
            missing.refs.append(RefResult(run_prefix(store.worktree, run_id) + "run", "error",
                                          message=f"no run {run_id!r} on {remote}"))
            results.append(missing)
    return results


def fetch_and_merge(store: Store, source: str, label: str, prefixes: Sequence[str], *,
                    action: str, listed: bool = True) -> list[PullResult]:
    """Fetch ``prefixes`` (under ``refs/agentos/``) from ``source`` (a remote, URL, path or bundle
    file) into a fresh staging namespace, merge them by the no-overwrite rules, and remove the
    staging refs again (also when anything fails). ``listed=False``: fetch the prefixes straight
    away, without listing every ref of the remote first (a few named runs of a big remote); when
    that fetch fails, the listed way is taken."""
    _remove_stale_sessions(store)
    if not listed:
        direct = _fetch_direct(store, source, label, prefixes, action)
        if direct is not None:
            return direct
    offered = _ls_remote(store, source, prefixes, action=action)
    limit = max_pull_refs(store)
    if limit and len(offered) > limit:
        raise RemoteError(source, action, f"it offers {len(offered)} refs under refs/agentos/ in scope, more than one "
                                          f"pull accepts ({MAX_REFS_KEY} = {limit}); pull named runs, or raise the "
                                          f"limit: git config {MAX_REFS_KEY} <n> (0: no limit)")
    session = f"{STAGING}{encode_component(label)}/{os.getpid()}-{secrets.token_hex(4)}/"
    unreadable = {name: oid for name, oid in offered.items() if not valid_ref_name(name) or set(oid) == {"0"}}
    if unreadable:  # git would fail the whole fetch on one: fetch the others by name
        specs = [f"+{n}:{session}{n[len(NAMESPACE):]}" for n in sorted(offered) if n not in unreadable]
    else:
        specs = [f"+{p}*:{session}{p[len(NAMESPACE):]}*" for p in prefixes]
    skipped = [RefResult(name, "skipped", None, None if set(oid) == {"0"} else oid,
                         f"{source} cannot send this ref (a ref name git does not accept)") for name, oid in
               sorted(unreadable.items())]
    if not specs:
        return _group(skipped, PullResult)
    if not unreadable:
        packed = _fetch_packed(store, source, label, prefixes, offered, action)
        if packed is not None:
            return _group(packed, PullResult)
    try:
        fetch_checked(store, ["fetch", "--quiet", "--no-tags", "--no-write-fetch-head", "--no-auto-maintenance",
                              "--no-recurse-submodules", "--refmap=", source, *specs], action=action, remote=source)
        staged = list_refs(store.repo, session)
        results = merge_staged(store, staged, session, label) + skipped
    finally:
        _delete_refs(store, [n for n, _ in list_refs(store.repo, session)])
    return _group(results, PullResult)


def _fetch_direct(store: Store, source: str, label: str, prefixes: Sequence[str],
                  action: str) -> list[PullResult] | None:
    """Fetch ``prefixes`` with one glob refspec each and merge them, or ``None`` when git fails
    for another reason than its object checks (a ref name git refuses among them: the caller
    lists the remote's refs and fetches the readable ones by name)."""
    session = f"{STAGING}{encode_component(label)}/{os.getpid()}-{secrets.token_hex(4)}/"
    specs = [f"+{p}*:{session}{p[len(NAMESPACE):]}*" for p in prefixes]
    try:
        try:
            fetch_checked(store, ["fetch", "--quiet", "--no-tags", "--no-write-fetch-head", "--no-auto-maintenance",
                                  "--no-recurse-submodules", "--refmap=", source, *specs], action=action, remote=source)
        except BrokenObjectError:
            raise
        except RemoteError:
            return None
        staged = list_refs(store.repo, session)
        limit = max_pull_refs(store)
        if limit and len(staged) > limit:
            raise RemoteError(source, action, f"it offers {len(staged)} refs under refs/agentos/ in scope, more than "
                                              f"one pull accepts ({MAX_REFS_KEY} = {limit}); raise the limit: "
                                              f"git config {MAX_REFS_KEY} <n> (0: no limit)")
        return _group(merge_staged(store, staged, session, label), PullResult)
    finally:
        _delete_refs(store, [n for n, _ in list_refs(store.repo, session)])


def _fetch_packed(store: Store, source: str, label: str, prefixes: Sequence[str], offered: dict[str, str],
                  action: str) -> list[RefResult] | None:
    """Fetch the objects of ``offered`` (the remote's refs in scope, as listed) and merge them,
    without a loose ref: a fetch of one loose staging ref per remote ref (a file, its folders, and
    their removal afterwards) costs most of a pull of thousands of runs. ``git fetch --dry-run``
    stores the objects and writes no ref; the staging refs are then written straight into
    ``packed-refs`` (one rewrite; they keep the objects reachable, as loose staging refs do, until
    the pull's transaction has moved the refs) and removed the same way. Between the fetch and that
    rewrite the new pack is reachable from nothing, as git's own fetch leaves its pack for a moment
    (``git gc`` keeps unreachable objects for two weeks; only a ``git prune --expire=now`` or
    ``git repack -a -d`` run right then would drop them, which git documents as unsafe beside any
    concurrent writer).

    ``None`` when the objects of a listed ref are not all here afterwards (the remote moved it
    between the listing and the fetch) or ``packed-refs`` stayed locked: the caller then fetches
    into loose staging refs, which record what the fetch brought."""
    session = f"{STAGING}{encode_component(label)}/{os.getpid()}-{secrets.token_hex(4)}/"
    specs = [f"+{p}*:{session}{p[len(NAMESPACE):]}*" for p in prefixes]
    fetch_checked(store, ["fetch", "--dry-run", "--quiet", "--no-tags", "--no-write-fetch-head",
                          "--no-auto-maintenance", "--no-recurse-submodules", "--refmap=", source, *specs],
                  action=action, remote=source)
    staged = {session + name[len(NAMESPACE):]: oid for name, oid in offered.items()}
    if not _set_staging(store, session, staged):
        return None
    try:
        # every listed value and all it reaches is here (what is reachable from the local refs,
        # the staging refs aside, is not walked again)
        check = run_git(store, ["rev-list", "--objects", "--quiet", "--stdin", "--not", f"--exclude={STAGING}*",
                                "--all"], action=action, remote=source, stdin="".join(f"{oid}\n" for oid in
                                                                                     sorted(set(offered.values()))),
                        check=False)
        if check.returncode != 0:
            return None
        return merge_staged(store, sorted(staged.items()), session, label)
    finally:
        if not _set_staging(store, session, {}):
            _delete_refs(store, [n for n, _ in list_refs(store.repo, session)])


def _set_staging(store: Store, session: str, values: dict[str, str]) -> bool:
    """Make ``packed-refs`` hold exactly ``values`` under the staging namespace ``session`` (see
    :func:`gitstate.git.refs.set_packed_namespace`), waiting for a held ``packed-refs.lock`` as a
    store write does; False when it stayed held or the write failed."""
    common = store.location.common_dir
    backoff = Backoff(store.core.lock_timeout)
    while True:
        try:
            set_packed_namespace(common, session, values, fsync=store.core.fsync_refs)
            return True
        except LockBusy:
            if backoff.expired():
                return False
            break_stale_locks(common, "packed-refs", store.core.stale_lock_age)
            backoff.pause()
        except GitStateError:
            return False


#: git's object checks on every fetch: what a remote or bundle sends is refused, and nothing of it
#: kept, when ``git fsck`` would report it (a tree with duplicate or unsorted entries, a malformed
#: commit or tag, ...). The user's own ``fetch.fsck.<msg-id>`` and ``fetch.fsck.skipList`` apply.
FSCK_CONFIG = ("-c", "fetch.fsckObjects=true")
_FSCK_LINE = re.compile(r"^error: object ([0-9a-f]{40,64}): (\S+: .*)$", re.M)


def broken_object(remote: str, action: str, stderr: str) -> BrokenObjectError | None:
    """The :class:`BrokenObjectError` a failed fetch's stderr describes (git's object checks
    refused what it received), or ``None`` when it failed for another reason."""
    found = _FSCK_LINE.search(stderr)
    if found is not None:
        return BrokenObjectError(remote, action, found.group(1), found.group(2).strip())
    if "fsck error" in stderr:
        return BrokenObjectError(remote, action, None, command.last_line(stderr))
    return None


def fetch_checked(store: Store, args: Sequence[str], *, action: str, remote: str) -> None:
    """``git fetch`` (``args`` start with ``fetch``) with git's object checks on
    (:data:`FSCK_CONFIG`): :class:`BrokenObjectError` when they refuse what arrives (the partial
    pack git leaves behind is removed), :class:`RemoteError` for any other failure."""
    pack_dir = os.path.join(objects_dir(store.repo), "pack")
    before = _tmp_packs(pack_dir)
    out = run_git(store, [*FSCK_CONFIG, *args], action=action, remote=remote, check=False)
    if out.returncode == 0:
        return
    refused = broken_object(remote, action, out.stderr)
    if refused is None:
        raise RemoteError(remote, action, command.last_line(out.stderr) or f"git exited {out.returncode}")
    for name in _tmp_packs(pack_dir) - before:  # index-pack stopped half way: its temporary file
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(pack_dir, name))
    raise refused


def _tmp_packs(pack_dir: str) -> set[str]:
    try:
        return {n for n in os.listdir(pack_dir) if n.startswith("tmp_pack_")}
    except OSError:
        return set()


def _kind_order(name: str) -> int:
    parsed = parse_ref(name)
    return 0 if parsed is not None and parsed.kind == "run" else 1


#: ref moves one pull transaction holds at most (0: no limit, one transaction per pull); a smaller
#: value lands a big pull in batches of whole runs below this size. The locks of one transaction
#: share one file (see :func:`gitstate.git.refs.update_atomically`), so its size is not bounded by
#: the process's file descriptors.
MAX_TX_REFS = 0


class _Plan:
    """The local refs as one pull transaction leaves them: :meth:`read` sees the moves planned so
    far (a run's branches see its run record created by the same pull), :meth:`move` plans one
    (compare-and-swap from the value first read, reflogged); :meth:`stage` puts them on ``tx``."""

    def __init__(self, store: Store, tx: Transaction, known: dict[str, str] | None) -> None:
        self.store = store
        self.tx = tx
        self.known = known  # every local ref under the pull's namespace, read at once (None: ask)
        self.view: dict[str, str | None] = {}
        self.moves: dict[str, tuple[str | None, str, str]] = {}  # ref -> (old as read, new, message)

    def read(self, name: str) -> str | None:
        if name not in self.view:
            self.view[name] = self.known.get(name) if self.known is not None else _read(self.store, name)
        return self.view[name]

    def move(self, name: str, old: str | None, new: str, message: str) -> None:
        first = self.moves.get(name)
        self.moves[name] = (first[0] if first else old, new, message)
        self.view[name] = new

    def stage(self) -> bool:
        """Stage the moves on the transaction; True when one of them moves an existing ref."""
        rewrites = False
        for name, (old, new, message) in self.moves.items():
            if old != new:
                self.tx.set_ref(name, old, new, message)  # not strict: a ref moved meanwhile replans
                rewrites = rewrites or old is not None
        return rewrites


def merge_staged(store: Store, staged: list[tuple[str, str]], session: str, label: str) -> list[RefResult]:
    """Apply staged remote refs to ``refs/agentos/…`` by the no-overwrite rules, as one store write
    whose transaction holds every ref move (created refs, fast-forwards, kept copies
    ``<branch>@<label>``, their node logs, replayed node logs): it lands whole or not at all, also
    under ``kill -9``. (With :data:`MAX_TX_REFS` set, a pull of more refs lands in several such
    writes, each of whole runs, so every run lands whole or not at all.) A ref that moved here
    while the plan was made makes the write plan again from what is there now (the store's retry
    policy)."""
    pairs = [(NAMESPACE + name[len(session):], oid) for name, oid in staged]
    runs: dict[str, list[tuple[str, str]]] = {}
    for local, oid in pairs:
        runs.setdefault(_run_record_of(local), []).append((local, oid))
    batches: list[list[list[tuple[str, str]]]] = [[]]
    size = 0
    for key in sorted(runs):
        group = sorted(runs[key], key=lambda p: (_kind_order(p[0]), p[0]))  # record, then heads/ before nodes/
        if MAX_TX_REFS and size and size + len(group) > MAX_TX_REFS:
            batches.append([])
            size = 0
        batches[-1].append(group)
        size += len(group)
    worktrees = {local.split("/")[2] for local, _ in pairs}
    known: dict[str, str] | None = None
    if len(runs) > 50:  # one listing instead of a look-up per ref (and per run record)
        known = {name: oid for wt in worktrees for name, oid in list_refs(store.repo, f"{NAMESPACE}{wt}/")}
    out: list[RefResult] = []
    for batch in batches:
        out += _merge_batch(store, batch, label, dict(pairs), known)
    return out


def _merge_batch(store: Store, groups: list[list[tuple[str, str]]], label: str, remote_refs: dict[str, str],
                 known: dict[str, str] | None) -> list[RefResult]:
    """Merge the refs of whole runs in one store write; when that write fails for another reason
    than a ref that kept moving, each half of the runs is tried in a write of its own, and so on
    down to single runs (one run a hostile remote made unwritable fails alone, after a number of
    writes that grows with the logarithm of the number of runs, not with it)."""
    attempts: list[tuple[list[RefResult], bool]] = []

    def build(tx: Transaction) -> list[RefResult]:
        plan = _Plan(store, tx, known if not attempts else None)  # a replan reads what is there now
        results: list[RefResult] = []
        for group in groups:
            done: dict[str, RefResult] = {}
            for local, oid in group:
                try:
                    result = _merge_one(store, plan, local, oid, label, remote_refs, done)
                except GitStateError as exc:
                    result = RefResult(local, "error", None, oid, str(exc))
                done[local] = result
                results.append(result)
        attempts.append((results, plan.stage()))
        return results

    try:
        results = store.core.write(build, loose=True)  # loose: the few node-log records a replay copies
    except ConflictError:
        return _unmoved(groups, attempts, "changed locally during the pull; pull again")
    except GitStateError as exc:
        if len(groups) > 1:
            half = len(groups) // 2
            return [r for part in (groups[:half], groups[half:]) for r in _merge_batch(store, part, label, remote_refs,
                                                                                     known)]
        return _unmoved(groups, attempts, str(exc))
    if attempts[-1][1]:
        store.core.forget_objects()  # what only the old values reached may now be pruned by git gc
    return results


_MOVES = frozenset({"created", "fast-forward", "diverged"})


def _unmoved(groups: list[list[tuple[str, str]]], attempts: list[tuple[list[RefResult], bool]],
             why: str) -> list[RefResult]:
    """The results of a write that moved nothing: each ref its last plan would have moved (every
    ref, when it failed before planning) is an ``error`` saying ``why``."""
    if not attempts:
        return [RefResult(local, "error", None, oid, why) for group in groups for local, oid in group]
    results = attempts[-1][0]
    return [RefResult(r.ref, "error", r.old, r.new, why) if r.status in _MOVES else r for r in results]


def _check_commit(reader: ObjectReader, oid: str) -> str | None:
    """Why the object cannot be a checkpoint tip, or ``None`` (reads the header only: a huge blob
    at a ref is never loaded)."""
    try:
        kind, _size = reader.header(oid)
    except CorruptObjectError as exc:
        return exc.reason
    if kind != ObjectType.COMMIT:
        return f"object is a {ObjectType(kind).name.lower()}, not a commit"
    return None


def _relation(reader: ObjectReader, ours: str, theirs: str) -> str:
    if ours == theirs:
        return "same"
    if reader.is_ancestor(ours, theirs):
        return "behind"
    if reader.is_ancestor(theirs, ours):
        return "ahead"
    return "diverged"


def _merge_one(store: Store, plan: _Plan, local: str, theirs: str, label: str, remote_refs: dict[str, str],
               done: dict[str, RefResult]) -> RefResult:
    """Plan what the pull does with one remote ref (on ``plan``) and say what it did."""
    reader = store.core.reader
    parsed = parse_ref(local)
    if parsed is None:
        return RefResult(local, "skipped", None, theirs, "not a gitstate ref name")
    if parsed.kind == lgwrites.REF_KIND:
        return _merge_writes_ref(store, plan, local, parsed.name, theirs, label)
    problem = _check_commit(reader, theirs)
    if problem is not None:
        return RefResult(local, "skipped", None, theirs, problem)
    if parsed.kind != "run" and plan.read(_run_record_of(local)) is None:
        return RefResult(local, "skipped", None, theirs, NO_RECORD.format(remote=label))
    if parsed.kind != "run":
        other = _other_workflow(store, done.get(_run_record_of(local)))
        if other is not None:
            return RefResult(local, "skipped", plan.read(local), theirs, f"{other}; not pulled")
    ours = plan.read(local)
    if parsed.kind == "nodes":
        unreadable = _unreadable_record(reader, theirs, ours)
        if unreadable is not None:
            return RefResult(local, "skipped", ours, theirs,
                             f"the remote's node log holds a record that does not read ({unreadable}); not pulled")
    if ours is None:
        plan.move(local, None, theirs, f"gitstate: pull from {label} (new)")
        return RefResult(local, "created", None, theirs)
    try:
        relation = _relation(reader, ours, theirs)
    except CorruptObjectError as exc:
        return RefResult(local, "skipped", ours, theirs, f"history cannot be read: {exc}")
    if relation == "same":
        return RefResult(local, "up-to-date", ours, theirs)
    if parsed.kind == "nodes" and parsed.name is not None and relation != "ahead":
        copied = _node_log_of_copy(store, plan, local, parsed.worktree, parsed.run_id, parsed.name, ours, theirs,
                                   label, done)
        if copied is not None:
            return copied
    if relation == "ahead":
        return RefResult(local, "ahead", ours, theirs, "ours is newer; push to share it")
    if relation == "behind":
        plan.move(local, ours, theirs, f"gitstate: pull from {label} (fast-forward)")
        return RefResult(local, "fast-forward", ours, theirs)
    if parsed.kind == "heads" and parsed.name is not None:
        worktree, run_id, branch = parsed.worktree, parsed.run_id, parsed.name

        def branch_copy(n: int) -> tuple[str, str]:
            name = diverged_branch_name(branch, label, n)
            return branch_ref(worktree, run_id, name), name
        return _keep_diverged(store, plan, local, ours, theirs, label, branch_copy, "branch", branch)
    if parsed.kind == "nodes" and parsed.name is not None:
        return _merge_node_log(store, plan, local, parsed.worktree, parsed.run_id, parsed.name, ours, theirs, label,
                               remote_refs)
    if parsed.kind == "files" and parsed.name is not None and "/" not in parsed.name:
        return _keep_diverged(store, plan, local, ours, theirs, label,
                              lambda n: copy_ref(store.repo, local, label, n), "session file",
                              parsed.name)
    what = "run record" if parsed.kind == "run" else f"{parsed.kind} ref"
    return RefResult(local, "conflict", ours, theirs,
                     f"the remote's {what} differs (created independently?); kept ours")


def _merge_node_log(store: Store, plan: _Plan, local: str, worktree: str, run_id: str, branch: str, ours: str,
                    theirs: str, label: str, remote_refs: dict[str, str]) -> RefResult:
    """A node log that advanced on both sides, whose branch this pull did not keep as a copy,
    follows its branch (docs/FORMAT.md, "Sharing"): when the branch here holds the remote's line
    (the remote's tip is on it), ours is replayed onto the remote's log
    (:func:`gitstate.sync.nodelogs.stage_replay`, in the pull's transaction). Otherwise ours is
    kept (``conflict``)."""
    head = branch_ref(worktree, run_id, branch)
    try:
        their_head, our_head = remote_refs.get(head), plan.read(head)
        if (their_head is not None and our_head is not None and store.core.reader.exists(their_head)
                and store.core.reader.is_ancestor(their_head, our_head)):
            new = stage_replay(store.core.reader, plan.tx, ours, theirs, our_head)
            plan.move(local, ours, new, f"gitstate: pull from {label} (node log follows {branch})")
            return RefResult(local, "fast-forward", ours, new,
                             f"{branch} holds {label}'s line: its node log is {label}'s, followed by this "
                             f"repository's boundaries on {branch}")
    except CorruptObjectError as exc:
        return RefResult(local, "skipped", ours, theirs, f"node log cannot be read: {exc}")
    return RefResult(local, "conflict", ours, theirs,
                     "the remote's node log differs and its branch was not kept beside ours; kept ours")


def _node_log_of_copy(store: Store, plan: _Plan, local: str, worktree: str, run_id: str, branch: str, ours: str,
                      theirs: str, label: str, done: dict[str, RefResult]) -> RefResult | None:
    """When this pull kept the remote's line of ``branch`` as a copy (``diverged`` or ``kept``),
    the remote's node log (``theirs``, newer than ours or diverged from it) describes that line: it
    is kept as the copy's node log, created, moved forward, or already there (``kept``); ours is
    unchanged. ``None`` when the branch was not kept as a copy."""
    kept = done.get(branch_ref(worktree, run_id, branch))
    if kept is None or kept.status not in ("diverged", "kept") or kept.kept_as is None:
        return None
    copy = kept.kept_as
    try:
        return _keep_copy_node_log(store, plan, local, node_log_ref(worktree, run_id, copy), copy, ours, theirs,
                                   label)
    except CorruptObjectError as exc:
        return RefResult(local, "skipped", ours, theirs, f"history cannot be read: {exc}")


def _keep_copy_node_log(store: Store, plan: _Plan, local: str, ref: str, copy: str, ours: str, theirs: str,
                        label: str) -> RefResult:
    """Keep the remote's node log of a diverged branch as the node log of its kept copy ``copy``
    (ref ``ref``)."""
    held = plan.read(ref)
    msg = f"both sides advanced: kept {label}'s node log as the node log of branch {copy!r}; ours is unchanged"
    if held is None:
        plan.move(ref, None, theirs, f"gitstate: pull from {label} (diverged node log)")
        return RefResult(local, "diverged", ours, theirs, msg, kept_as=copy)
    relation = _relation(store.core.reader, held, theirs)
    if relation in ("same", "ahead"):
        return RefResult(local, "kept", ours, theirs,
                         f"already kept: {label}'s node log is the node log of branch {copy!r}; nothing new",
                         kept_as=copy)
    if relation == "behind":
        plan.move(ref, held, theirs, f"gitstate: pull from {label} (fast-forward node log of {copy})")
        return RefResult(local, "diverged", ours, theirs, msg, kept_as=copy)
    return RefResult(local, "conflict", ours, theirs,
                     f"the node log of branch {copy!r} holds another line than {label}'s; kept ours")


NO_RECORD = "its run has no run record on {remote} or here (not a run gitstate wrote); not pulled"


def _other_workflow(store: Store, record: RefResult | None) -> str | None:
    """Why a run's refs are not pulled when its run record conflicted because the remote's run of
    that id is another workflow's (a LangGraph thread there, a session here): its lines would be
    grafted onto a run whose readers refuse them. ``None`` when the records agree on the workflow
    (or either cannot be read: the conflict is reported on the record itself)."""
    if record is None or record.status != "conflict" or record.old is None or record.new is None:
        return None
    try:
        ours = store.read_run_record(record.old).get("workflow")
        theirs = store.read_run_record(record.new).get("workflow")
    except GitStateError:
        return None
    if ours == theirs:
        return None
    return f"the remote's run of this id is another run (workflow {theirs or 'none'} there, {ours or 'none'} here)"


def _unreadable_record(reader: ObjectReader, theirs: str, ours: str | None) -> str | None:
    """Why a record of the remote's node log that ours lacks does not read (as ``nodes`` and
    ``checkpoint --node`` would find it), or ``None``: its first-parent chain from ``theirs``,
    down to ``ours`` or to its root, each commit once."""
    try:
        for commit in reader.first_parents(theirs):
            if commit.id == ours:
                break
            read_record(reader, commit)
    except CorruptObjectError as exc:
        return str(exc)
    return None


def _run_record_of(ref: str) -> str:
    """The run record ref of the run a per-run ref belongs to (``…/runs/<run>/run``), from the ref
    name's own components (no decoding: any name the remote sent)."""
    return "/".join(ref.split("/")[:5]) + "/run"


def _merge_writes_ref(store: Store, plan: _Plan, local: str, name: str | None, theirs: str,
                      label: str) -> RefResult:
    """A LangGraph writes ref (``.../writes/<blob id>``, pending writes no put has folded yet):
    created here when absent. It is named by the blob it holds and never moves, so one that holds
    anything else (or a blob of another name) is refused, and one already here is up to date."""
    try:
        kind, _size = store.core.reader.header(theirs)
    except CorruptObjectError as exc:
        return RefResult(local, "skipped", None, theirs, exc.reason)
    if kind != ObjectType.BLOB or name != theirs:
        return RefResult(local, "skipped", None, theirs, "a writes ref must hold the blob it is named by")
    if plan.read(_run_record_of(local)) is None:
        return RefResult(local, "skipped", None, theirs, NO_RECORD.format(remote=label))
    ours = plan.read(local)
    if ours == theirs:
        return RefResult(local, "up-to-date", ours, theirs)
    if ours is not None:
        return RefResult(local, "conflict", ours, theirs, "the remote's writes ref differs; kept ours")
    plan.move(local, None, theirs, f"gitstate: pull from {label} (new)")
    return RefResult(local, "created", None, theirs)


def _read(store: Store, name: str) -> str | None:
    try:
        return store.core.read_ref(name)
    except CorruptObjectError:
        return None


def diverged_branch_name(branch: str, label: str, n: int = 1) -> str:
    """The branch a diverged remote line is kept as: ``<branch>@<label>``, then ``…-2``, ``…-3``."""
    return f"{branch}@{label}" + (f"-{n}" if n > 1 else "")


def _keep_diverged(store: Store, plan: _Plan, local: str, ours: str, theirs: str, label: str,
                   copy: Callable[[int], tuple[str, str]], what: str, subject: str) -> RefResult:
    """Keep the remote's line beside ours under the name ``copy(n)`` gives (``(ref, name)``,
    ``n`` = 1, 2, …): fast-forward that copy if it is an older copy of the remote's line, else try
    the next name. Never moves ``local`` itself."""
    for n in range(1, 100):
        try:
            ref, name = copy(n)
        except (InvalidNameError, ValueError) as exc:
            return RefResult(local, "skipped", ours, theirs, f"no {what} name to keep the remote's line: {exc}")
        kept = plan.read(ref)
        msg = f"both sides advanced: kept {label}'s line as {what} {name!r}; ours is unchanged"
        if kept is None:
            plan.move(ref, None, theirs, f"gitstate: pull from {label} (diverged {subject})")
            return RefResult(local, "diverged", ours, theirs, msg, kept_as=name)
        relation = _relation(store.core.reader, kept, theirs)
        if relation in ("same", "ahead"):  # an earlier pull kept it: nothing new
            return RefResult(local, "kept", ours, theirs,
                             f"already kept: {label}'s line has been kept as {what} {name!r} since an "
                             "earlier pull; nothing new, ours is unchanged", kept_as=name)
        if relation == "behind":
            plan.move(ref, kept, theirs, f"gitstate: pull from {label} (fast-forward {name})")
            return RefResult(local, "diverged", ours, theirs,
                             f"{label}'s line advanced: its copy, {what} {name!r}, moved forward with it; "
                             "ours is unchanged", kept_as=name)
    return RefResult(local, "conflict", ours, theirs, f"too many diverged copies of this {what}; kept ours")


def _delete_refs(store: Store, names: list[str]) -> None:
    """Delete staging refs (our private namespace: no compare-and-swap needed, nobody else writes
    there) in one go, and the empty directories they leave. The loose files ``git fetch`` wrote
    are unlinked directly (what git's deletion does, without a lock file and a ``packed-refs``
    look-up each: a fraction of its time for thousands of refs); a ref that is not a loose file
    (packed by a concurrent ``git pack-refs``, or locked right now) goes in one
    ``git update-ref --stdin``."""
    common = store.location.common_dir
    rest: list[str] = []
    for name in names:
        path = os.path.join(common, *name.split("/"))
        if not name.startswith(STAGING) or os.path.exists(path + ".lock"):
            rest.append(name)
            continue
        try:
            os.unlink(path)
        except OSError:
            rest.append(name)  # packed, not loose (or not removable here)
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(common, "logs", *name.split("/")))  # core.logAllRefUpdates=always
    left = [name for name in rest if _local_oid(store, name) is not None]
    if left:
        run_git(store, ["update-ref", "--no-deref", "--stdin"], action="remove staging refs", remote=STAGING,
                stdin="".join(f"delete {name}\n" for name in left), check=False)
    root = os.path.join(common, *STAGING.rstrip("/").split("/"))
    for top in (root, os.path.join(common, "logs", *STAGING.rstrip("/").split("/"))):
        for dirpath, _dirs, _files in os.walk(top, topdown=False):
            with contextlib.suppress(OSError):
                os.rmdir(dirpath)


def _remove_stale_sessions(store: Store) -> None:
    """Remove staging refs left by a pull that was killed (its process no longer exists): those in
    ``packed-refs`` with one rewrite of it per session, loose ones (and any left) by
    :func:`_delete_refs`."""
    stale: list[str] = []
    sessions: set[str] = set()
    for name, _ in list_refs(store.repo, STAGING):
        parts = name[len(STAGING):].split("/")
        if len(parts) < 2:
            continue
        pid_text = parts[1].split("-", 1)[0]
        if pid_text.isdigit() and int(pid_text) != os.getpid() and not pid_alive(int(pid_text)):
            stale.append(name)
            sessions.add(f"{STAGING}{parts[0]}/{parts[1]}/")
    if not stale:
        return
    for session in sorted(sessions):
        _set_staging(store, session, {})
    _delete_refs(store, [name for name in stale if _local_oid(store, name) is not None])
