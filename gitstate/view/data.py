"""The data the view's pages are built from, read-only, as JSON-friendly dicts: the runs page
(sorted, filtered, paged), a run's commit graph (every branch, rolled-back lines from the reflog,
laid out in lanes), node spans, one checkpoint (state, metadata, tools, audit, files, plain-git
commands), the diff of two checkpoints, workspace files and session files.

Nothing here writes to the repository (not even the summary cache of :meth:`Store.list_runs`).
Commits are immutable, so what was read of them is kept in memory: a page shown again, or refreshed
after an agent wrote one more checkpoint, reads only what is new."""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import re
import shlex
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pygit2.enums import ObjectType

from gitstate.errors import (
    AmbiguousReferenceError,
    BranchNotFound,
    CheckpointNotFound,
    CorruptObjectError,
    GitStateError,
    InvalidNameError,
    InvalidReferenceError,
    RunNotFound,
    SessionFileNotFound,
    UsageError,
)
from gitstate.format import checkpoint as cpfmt
from gitstate.format import lgtree
from gitstate.format.checkpoint import Checkpoint, parse_time, summary_line
from gitstate.format.names import NAMESPACE, decode_component, parse_ref, run_prefix, worktree_prefix
from gitstate.format.statetree import StateReader
from gitstate.git import safeopen
from gitstate.git.command import popen_git, run_git
from gitstate.git.objects import MODE_TREE
from gitstate.secrets import masked, masked_text
from gitstate.store import refspec, sessionfiles
from gitstate.store.run import Run
from gitstate.store.store import RunSummary, Store, derive_status
from gitstate.view import values
from gitstate.view.layout import Row, layout
from gitstate.view.values import SERVER, Limits
from gitstate.workspace.views import snapshot_files

MAX_COMMITS_CACHED = 200_000
MAX_TEXT_DIFF = 512 * 1024  # bytes per side above which a file is not diffed line by line
MAX_FILE_SHOWN = 1024 * 1024  # bytes of a file's content sent to the page
FILTER_BUDGET = 0.5  # seconds one filtered runs request may scan before it returns a cursor
MAX_SNAPSHOT_FILES = 20_000

#: Reflog moves whose old and new values may be lines no branch holds any more.
LINE_MOVES = ("gitstate: rollback", "gitstate: undo", "gitstate: prune", "gitstate: delete branch")


def iso(when: datetime) -> str:
    """A time as the page shows it (ISO 8601, UTC)."""
    return when.astimezone(UTC).isoformat()


def checkpoint_label(cp: Checkpoint) -> dict[str, Any]:
    """The fields of a checkpoint every page shows."""
    return {"id": cp.id, "short": cp.short_id, "run": cp.run_id, "branch": cp.branch, "node": cp.node,
            "step": cp.display_step, "trigger": cp.trigger, "status": cp.status, "node_status": cp.node_status,
            "created_at": iso(cp.created_at)}


def trailers(message: str) -> dict[str, str]:
    """The ``Key: value`` trailers of a checkpoint commit message (the last paragraph), unescaped."""
    out: dict[str, str] = {}
    paragraphs = message.rstrip("\n").split("\n\n")
    if len(paragraphs) < 2:
        return out
    for line in paragraphs[-1].split("\n"):
        key, sep, value = line.partition(": ")
        if sep and key and " " not in key:
            out[key] = _unescape(value)
    return out


def _unescape(text: str) -> str:
    if "\\" not in text:
        return text
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            out.append({"n": "\n", "r": "\r", "\\": "\\"}.get(text[i + 1], text[i + 1]))
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def row_label(commit: CommitInfo) -> dict[str, Any]:
    """What a graph row says of a checkpoint, read from its commit alone (subject and trailers,
    which repeat ``meta.cbor`` for people): no payload is decoded to draw the graph."""
    t = trailers(commit.message)
    step: int | None
    try:  # a LangGraph checkpoint by LangGraph's step: named by commits written since it heads the
        # subject too; an older one shows none rather than another numbering
        step = int(t["LangGraph-Step"] if "LangGraph-Checkpoint" in t else t["Step"])
    except (KeyError, ValueError):
        step = None
    return {"subject": commit.message.split("\n", 1)[0], "step": step, "node": t.get("Node"),
            "trigger": t.get("Trigger"), "status": t.get("Status"), "node_status": t.get("Node-Status"),
            "branch": t.get("Branch"), "langgraph": t.get("LangGraph-Checkpoint"),
            "time": commit.time}


def git_quote(text: str) -> str:
    """A shell word (for the plain-git commands the page shows)."""
    return shlex.quote(text)


@dataclass
class RunRefs:
    """The refs of one run: its record commit and its branch tips."""

    worktree: str
    run_id: str
    record: str | None = None
    heads: dict[str, str] = field(default_factory=dict)
    times: dict[str, int] = field(default_factory=dict)

    @property
    def key(self) -> tuple[Any, ...]:
        """Changes whenever one of the run's refs moves."""
        return (self.worktree, self.run_id, self.record, tuple(sorted(self.heads.items())))


@dataclass
class GraphData:
    """A laid-out run graph (cached per set of tips and reflog lines)."""

    rows: list[Row]
    width: int
    index: dict[str, int]
    refs: dict[str, list[dict[str, Any]]]
    dimmed: set[str]
    branches: list[dict[str, Any]]
    tips: frozenset[str] = frozenset()
    failed_exits: frozenset[str] = frozenset()  # exits of failed nodes, also on rolled-back lines


@dataclass(frozen=True)
class CommitInfo:
    """What the graph needs of a commit: parents, committer time, message."""

    parents: tuple[str, ...]
    time: int
    message: str


@dataclass
class Listing:
    """Refs under a prefix as last listed, with the hint they were listed under."""

    hint: tuple[Any, ...]
    checked: float
    refs: list[tuple[str, str, int | None]]


RECHECK = 10.0  # seconds after which a listing is redone even if the refs' files look unchanged


class ViewData:
    """Everything the view reads, for one store. Safe to use from several threads (each reads
    through its own repository handle, as the store arranges).

    Refs are listed by ``git for-each-ref`` (with each tip's commit time, so the runs page is
    sorted without reading 10,000 commits here) and listed again only when the files that hold
    them changed (``packed-refs`` and the loose refs' directories under the prefix) or
    :data:`RECHECK` seconds passed; a run's commits are walked by ``git log`` (only the new ones
    after a refresh). Where git fails (a damaged object), the guarded reader takes over."""

    def __init__(self, store: Store, limits: Limits = SERVER) -> None:
        self.store = store
        self.limits = limits
        self._lock = threading.Lock()
        self._commits: OrderedDict[str, CommitInfo] = OrderedDict()
        self._listings: dict[str, Listing] = {}
        self._summaries: dict[tuple[Any, ...], tuple[RunSummary, dict[str, Any], str]] = {}
        self._graphs: dict[tuple[str, str], tuple[tuple[Any, ...], GraphData]] = {}
        self._reflogs: dict[str, tuple[tuple[Any, ...], list[tuple[str, str, int]]]] = {}
        self._nodes: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
        self._sorted: tuple[Any, list[RunRefs]] | None = None
        self._grouped: dict[str, tuple[list[tuple[str, str, int | None]], list[RunRefs]]] = {}
        self._tokens: dict[str, tuple[list[tuple[str, str, int | None]], str]] = {}

    # -- objects ------------------------------------------------------------------------------

    def _keep(self, oid: str, info: CommitInfo) -> None:
        with self._lock:
            self._commits[oid] = info
            if len(self._commits) > MAX_COMMITS_CACHED:
                self._commits.popitem(last=False)

    def commit(self, oid: str) -> CommitInfo:
        """A commit, read once (through the guarded reader, unless ``git log`` brought it) and kept."""
        hit = self._commits.get(oid)
        if hit is None:
            data = self.store.core.reader.commit(oid)
            hit = CommitInfo(data.parent_ids, data.committer.time, data.message)
            self._keep(oid, hit)
        return hit

    def _git(self, args: list[str]) -> str | None:
        """git's output (``None`` when it failed); the user's ``log.showSignature`` would add lines."""
        proc = run_git(self.store.location.git_dir, ["-c", "log.showSignature=false", *args], text=False)
        if proc.returncode != 0:
            return None
        out = proc.stdout
        return out.decode("utf-8", "replace") if isinstance(out, bytes) else str(out)

    def _walk_git(self, starts: list[str], known: list[str]) -> bool:
        """Read the commits reachable from ``starts`` but not from ``known`` with one ``git log``
        (``False`` if git could not: the caller walks with the guarded reader)."""
        if not starts:
            return True
        out = self._git(["log", "-z", "--format=%H%x01%P%x01%ct%x01%B", *starts, *("^" + k for k in known), "--"])
        if out is None:
            return False
        found: list[tuple[str, CommitInfo]] = []
        for record in out.split("\0"):
            if not record.strip():
                continue
            parts = record.lstrip("\n").split("\x01", 3)
            if len(parts) != 4 or not _is_oid(parts[0]) or not all(_is_oid(p) for p in parts[1].split()):
                return False
            try:
                when = int(parts[2])
            except ValueError:
                return False
            found.append((parts[0], CommitInfo(tuple(parts[1].split()), when, parts[3])))
        for oid, info in found:
            self._keep(oid, info)
        return True

    # -- refs ---------------------------------------------------------------------------------

    def _hint(self, prefix: str) -> tuple[Any, ...]:
        """What changes when a ref under ``prefix`` moves: ``packed-refs`` and the loose refs'
        directories (a ref is written by renaming its lock over it, which touches its directory)."""
        common = self.store.location.common_dir
        parts: list[Any] = []
        try:
            st = os.stat(os.path.join(common, "packed-refs"))
            parts.append((st.st_mtime_ns, st.st_size, st.st_ino))
        except OSError:
            parts.append(None)
        root = os.path.join(common, *prefix.rstrip("/").split("/"))
        for dirpath, _dirs, _files in os.walk(root):
            try:
                st = os.stat(dirpath)
            except OSError:
                continue
            parts.append((dirpath, st.st_mtime_ns, st.st_ino))
        return tuple(parts)

    def list_refs(self, prefix: str) -> list[tuple[str, str, int | None]]:
        """``(ref, id, commit time or None)`` of every ref under ``prefix``; listed afresh only when
        the hint changed or :data:`RECHECK` seconds passed."""
        hint = self._hint(prefix)
        now = time.monotonic()
        hit = self._listings.get(prefix)
        if hit is not None and hit.hint == hint and now - hit.checked < RECHECK:
            return hit.refs
        refs: list[tuple[str, str, int | None]] = []
        out = self._git(["for-each-ref", "--format=%(objectname) %(objecttype) %(committerdate:unix) %(refname)",
                         prefix])
        if out is not None:
            for line in out.splitlines():
                parts = line.split(" ", 3)
                if len(parts) != 4 or not _is_oid(parts[0]):
                    out = None
                    break
                when = int(parts[2]) if parts[1] == "commit" and parts[2].isdigit() else None
                refs.append((parts[3], parts[0], when))
        if out is None:
            refs = [(name, oid, None) for name, oid in self.store.core.list_refs(prefix)]
        with self._lock:
            self._listings[prefix] = Listing(hint, now, refs)
            if len(self._listings) > 256:
                self._listings.pop(next(iter(self._listings)))
        return refs

    # -- runs ---------------------------------------------------------------------------------

    def run_refs(self, all_worktrees: bool = False, worktree: str | None = None) -> list[RunRefs]:
        """Every run of the store's worktree (or ``worktree``, or all) with its refs."""
        prefix = NAMESPACE if all_worktrees else worktree_prefix(worktree or self.store.worktree)
        listing = self.list_refs(prefix)
        cached = self._grouped.get(prefix)
        if cached is not None and cached[0] is listing:
            return cached[1]
        grouped: dict[tuple[str, str], RunRefs] = {}
        for name, oid, when in listing:
            parsed = parse_ref(name)
            if parsed is None or parsed.kind not in ("run", "heads"):
                continue
            entry = grouped.get((parsed.worktree, parsed.run_id))
            if entry is None:
                entry = grouped[(parsed.worktree, parsed.run_id)] = RunRefs(parsed.worktree, parsed.run_id)
            if parsed.kind == "run":
                entry.record = oid
            elif parsed.name is not None:
                entry.heads[parsed.name] = oid
            if when is not None:
                entry.times[oid] = when
        out = list(grouped.values())
        with self._lock:
            self._grouped[prefix] = (listing, out)
        return out

    def _updated(self, refs: RunRefs) -> int:
        """Sort key of a run: the newest commit time of its tips (or of its record)."""
        best = 0
        for oid in [*refs.heads.values(), *([refs.record] if refs.record and not refs.heads else [])]:
            when = refs.times.get(oid)
            if when is None:
                try:
                    when = self.commit(oid).time
                except GitStateError:
                    continue
            best = max(best, when)
        return best

    def summary(self, refs: RunRefs) -> tuple[RunSummary, dict[str, Any], str]:
        """A run's summary (as :meth:`Store.list_runs` gives it, without its cache file), its
        metadata and the lower-case text the filter searches."""
        key = refs.key
        hit = self._summaries.get(key)
        if hit is not None:
            return hit
        epoch = datetime.fromtimestamp(0, UTC)
        workflow: str | None = None
        created = epoch
        metadata: dict[str, Any] = {}
        tip_meta: dict[str, Any] = {}
        try:
            if refs.record is None:
                raise RunNotFound(refs.run_id, refs.worktree)
            record = self.store.read_run_record(refs.record)
            workflow = record.get("workflow")
            created = parse_time(record.get("created_at"))
            found = record.get("metadata")
            metadata = found if isinstance(found, dict) else {}
            tips = {name: self.store.read_checkpoint(oid) for name, oid in refs.heads.items()}
        except GitStateError as exc:
            summary = RunSummary(refs.run_id, workflow, None, None, None, "corrupt", created, 0, refs.worktree,
                                 created, len(refs.heads), error=str(exc))
        else:
            if not tips:
                summary = RunSummary(refs.run_id, workflow, None, None, None, derive_status(None), created, 0,
                                     refs.worktree, created, 0)
            else:
                branch = summary_line(tips)
                tip = tips[branch]
                tip_meta = tip.metadata
                error: str | None = None
                try:
                    status = derive_status(tip)
                except GitStateError as exc:
                    status, error = "corrupt", f"pending writes: {exc}"
                summary = RunSummary(refs.run_id, workflow or tip.workflow, branch, tip.node, tip.display_step,
                                     status, max(cp.created_at for cp in tips.values()),
                                     tip.step - tip.base + 1, refs.worktree, created, len(tips), error=error)
        text = " ".join(str(x) for x in (summary.id, summary.workflow or "", summary.status, summary.node or "",
                                          summary.branch or "", summary.worktree,
                                          _json_text(metadata), _json_text(tip_meta))).lower()
        out = (summary, metadata, text)
        with self._lock:
            if len(self._summaries) > 100_000:
                self._summaries.clear()
            self._summaries[key] = out
        return out

    def run_row(self, refs: RunRefs) -> dict[str, Any]:
        """One line of the runs page."""
        summary, metadata, _ = self.summary(refs)
        row = summary.to_dict()
        row["metadata"] = values.encode(metadata, Limits(items=20, chars=200, depth=3))
        return row

    def runs(self, query: str = "", cursor: int = 0, limit: int = 100, all_worktrees: bool = False,
             budget: float = FILTER_BUDGET) -> dict[str, Any]:
        """One page of the runs page, most recently updated first. ``query`` filters: every word
        must occur in the run's id, workflow, status, node, branch, worktree or metadata (words
        ``status:failed``, ``workflow:x``, ``id:x``, ``node:x``, ``worktree:x`` match that field
        only). ``cursor`` is where the previous page stopped; a filtered page that took longer
        than ``budget`` seconds stops early and says where to go on (``next``)."""
        limit = max(1, min(int(limit), 1000))
        all_refs = self.run_refs(all_worktrees)
        key = (all_worktrees, id(all_refs))
        cached = self._sorted
        if cached is not None and cached[0] == key:
            ordered = cached[1]
        else:
            ordered = sorted(all_refs, key=lambda r: (self._updated(r), r.run_id), reverse=True)
            self._sorted = (key, ordered)
        terms = _parse_query(query)
        out: list[dict[str, Any]] = []
        start = time.monotonic()
        pos = max(0, int(cursor))
        while pos < len(ordered) and len(out) < limit:
            refs = ordered[pos]
            pos += 1
            if terms and not _matches(terms, refs, self.summary(refs)):
                if time.monotonic() - start > budget:
                    break
                continue
            out.append(self.run_row(refs))
        return {"worktree": self.store.worktree, "all": all_worktrees, "total": len(ordered), "query": query,
                "runs": out, "cursor": cursor, "next": pos if pos < len(ordered) else None}

    def get_run(self, run_id: str, worktree: str | None = None) -> Run:
        """The run (in the store's worktree unless another is named)."""
        return self.store.get_run(run_id, worktree or self.store.worktree)

    def run_info(self, run: Run) -> dict[str, Any]:
        """The run's own fields."""
        return {"id": run.id, "worktree": run.worktree, "workflow": run.workflow,
                "created_at": iso(run.created_at),
                "metadata": values.encode(run.metadata, self.limits)}

    # -- the graph ----------------------------------------------------------------------------

    def _heads(self, run: Run) -> dict[str, str]:
        prefix = run_prefix(run.worktree, run.id) + "heads/"
        out: dict[str, str] = {}
        for name, oid, _ in self.list_refs(prefix):
            try:
                out[decode_component(name[len(prefix):])] = oid
            except ValueError:
                continue
        return out

    def _reflog_lines(self, ref: str, tip: str) -> list[tuple[str, str, int]]:
        """``(commit, message, time)`` for each value a branch held before a rollback, undo or
        prune moved it (candidates for lines no branch holds any more). The reflog file is read
        again only when it changed."""
        path = os.path.join(self.store.location.common_dir, "logs", *ref.split("/"))
        try:
            st = os.stat(path)
        except OSError:
            return []
        key: tuple[Any, ...] = (tip, st.st_size, st.st_mtime_ns, st.st_ino)
        hit = self._reflogs.get(ref)
        if hit is not None and hit[0] == key:
            return hit[1]
        found: list[tuple[str, str, int]] = []
        try:
            with safeopen.open_file(path, encoding="utf-8", errors="replace") as fh:
                lines = fh.read().splitlines()
        except OSError:
            lines = []
        for line in lines:  # "<old> <new> <name> <<email>> <time> <tz>\t<message>", oldest first
            head, _, message = line.partition("\t")
            if not message.startswith(LINE_MOVES):
                continue
            fields = head.split(" ")
            if len(fields) < 4 or not _is_oid(fields[0]) or not _is_oid(fields[1]):
                continue
            try:
                when = int(fields[-2])
            except ValueError:
                when = 0
            for oid in (fields[0], fields[1]):
                if oid.strip("0"):
                    found.append((oid, message, when))
        with self._lock:
            self._reflogs[ref] = (key, found)
        return found

    def _walk(self, starts: list[str]) -> dict[str, tuple[str, ...]]:
        """Parents of every commit reachable from ``starts`` (from memory; what ``git log`` did not
        bring is read through the guarded reader)."""
        parents: dict[str, tuple[str, ...]] = {}
        todo = list(starts)
        while todo:
            oid = todo.pop()
            if oid in parents:
                continue
            try:
                info = self.commit(oid)
            except GitStateError:
                continue  # a missing or damaged commit ends its line (verify reports it)
            parents[oid] = info.parents
            todo.extend(info.parents)
        return parents

    def _graph(self, run: Run) -> GraphData:
        heads = self._heads(run)
        lines: dict[str, tuple[str, str, int]] = {}
        for branch, tip in heads.items():
            for oid, message, when in self._reflog_lines(run.ref(branch), tip):
                lines.setdefault(oid, (branch, message, when))
        key = (tuple(sorted(heads.items())), tuple(sorted(lines)))
        cached = self._graphs.get((run.worktree, run.id))
        if cached is not None and cached[0] == key:
            return cached[1]
        # one `git log` for what is new (after a refresh: only the commits the old tips lack)
        known = [t for t in (cached[1].tips if cached is not None else ()) if t in self._commits]
        reader = self.store.core.reader
        fresh = [oid for oid in dict.fromkeys([*heads.values(), *lines])
                 if oid not in self._commits and reader.exists(oid)]  # reflog lines may be gone (gc)
        if fresh:
            self._walk_git(fresh, known[:200])

        current = self._current_line(run)

        def tip_order(item: tuple[str, str]) -> tuple[int, int, str]:
            name, oid = item
            try:
                when = self.commit(oid).time
            except GitStateError:
                when = 0
            return (0 if name == current else 1, -when, name)

        ordered_heads = sorted(heads.items(), key=tip_order)
        parents = self._walk([oid for _, oid in ordered_heads])
        reachable = set(parents)
        dimmed_starts = [oid for oid in lines if oid not in reachable]
        parents.update(self._walk(dimmed_starts))
        dimmed = set(parents) - reachable
        starts = [oid for _, oid in ordered_heads]
        starts += sorted((o for o in dimmed_starts if o in parents), key=lambda o: -lines[o][2])
        rows, width = layout(parents, starts, dimmed)
        refs: dict[str, list[dict[str, Any]]] = {}
        branches: list[dict[str, Any]] = []
        for name, oid in ordered_heads:
            kind = _branch_kind(name)
            refs.setdefault(oid, []).append({"name": name, "kind": kind})
            branches.append({"name": name, "tip": oid, "kind": kind, "ref": run.ref(name)})
        below = {p for c in dimmed for p in parents[c]}
        for oid in dimmed_starts:
            if oid in dimmed and oid not in below:  # the tip of a line only the reflog holds
                branch, message, when = lines[oid]
                refs.setdefault(oid, []).append({"name": f"{branch} (reflog)", "kind": "reflog",
                                                 "message": message, "time": when})
        failed: set[str] = set()
        for name, _oid in ordered_heads:  # node logs keep failed nodes whose line was rolled back
            try:
                failed.update(r.exit for r in run.node_log(name).records() if r.status == "failed" and r.exit)
            except GitStateError:
                continue
        data = GraphData(rows, width, {r.id: i for i, r in enumerate(rows)}, refs, dimmed, branches,
                         frozenset(starts), frozenset(failed))
        with self._lock:
            self._graphs[(run.worktree, run.id)] = (key, data)
        return data

    def graph(self, run_id: str, worktree: str | None = None, offset: int = 0, limit: int = 300,
              around: str | None = None) -> dict[str, Any]:
        """One page of a run's graph: ``rows[offset:offset+limit]`` of every checkpoint on every
        branch and on lines only the reflog still holds, children first, with lanes. ``around``
        (a checkpoint id) moves the page to include that checkpoint."""
        run = self.get_run(run_id, worktree)
        data = self._graph(run)
        limit = max(1, int(limit))
        offset = max(0, int(offset))
        if around and around in data.index:
            offset = max(0, data.index[around] - limit // 2)
        rows = []
        for row in data.rows[offset:offset + limit]:
            item = row.to_dict()
            info = self.commit(row.id)
            item.update(row_label(info))
            item["parents"] = list(info.parents)
            item["short"] = row.id[:12]
            refs = data.refs.get(row.id, [])
            item["refs"] = refs
            if item.get("langgraph") and item.get("status") == "running" \
                    and any(r["kind"] != "reflog" for r in refs):
                # a thread's line stopped with a task to run is interrupted (Checkpoint.tip_status)
                item["status"] = self.store.read_checkpoint(row.id).tip_status
            item["reflog"] = row.id in data.dimmed
            if row.id in data.failed_exits:
                item["node_status"] = "failed"
            rows.append(item)
        refnames = " ".join(git_quote(b["ref"]) for b in data.branches)
        current = data.branches[0]["name"] if data.branches else "main"
        return {"run": self.run_info(run), "total": len(data.rows), "offset": offset, "width": data.width,
                "rows": rows, "branches": data.branches,
                "reflog_lines": sum(1 for refs in data.refs.values() for r in refs if r["kind"] == "reflog"),
                "git": [{"label": "the graph", "command": f"git log --graph --oneline {refnames}"},
                        {"label": f"every move of {current}", "command": f"git reflog {git_quote(run.ref(current))}"}]}

    def _current_line(self, run: Run) -> str:
        """The branch shown first (its tip the first row, the lane on the left): the one a bare RUN
        names (``main``; a LangGraph thread's latest line, :func:`refspec.default_branch`)."""
        try:
            return refspec.default_branch(run)
        except GitStateError:  # a damaged tip: the graph shows it as unreadable; main first
            return "main"

    def nodes(self, run_id: str, worktree: str | None = None) -> dict[str, Any]:
        """Node boundaries of every branch (``Run.nodes``), each once: spans over checkpoints."""
        run = self.get_run(run_id, worktree)
        heads = self._heads(run)
        key = (run.worktree, run.id, tuple(sorted(heads.items())))
        hit = self._nodes.get(key)
        if hit is None:
            seen: set[tuple[str | None, str | None, str]] = set()
            hit = []
            current = self._current_line(run)
            for branch in sorted(heads, key=lambda b: (b != current, b)):
                try:
                    boundaries = run.nodes(branch)
                except GitStateError:
                    continue
                for nb in boundaries:
                    ident = (nb.entry, nb.exit, nb.node)
                    if ident in seen:
                        continue
                    seen.add(ident)
                    hit.append({"node": nb.node, "entry": nb.entry, "exit": nb.exit, "status": nb.status,
                                "branch": branch})
            with self._lock:
                self._nodes[key] = hit
        return {"nodes": hit}

    # -- one checkpoint -----------------------------------------------------------------------

    def checkpoint_of(self, ref: str) -> Checkpoint:
        """A checkpoint by full id or unique prefix."""
        return self.store.checkpoint(ref)

    def checkpoint(self, ref: str) -> dict[str, Any]:
        """Everything the page shows of one checkpoint."""
        cp = self.checkpoint_of(ref)
        limits = self.limits
        out = checkpoint_label(cp)
        if self._is_tip(cp) and cp.tip_status != cp.status:
            out["status"] = cp.tip_status  # the newest checkpoint of its line shows the line's status
        out.update(parents=list(cp.parent_ids), workflow=cp.workflow, node_entry=cp.node_entry,
                   base=cp.base, tree=cp.tree_id, metadata=values.encode(cp.metadata, limits),
                   files_paths=None if cp.files_paths is None else list(cp.files_paths))
        errors: dict[str, str] = {}
        for name, read in (("state", lambda: cp.state), ("tools", lambda: cp.tools), ("audit", lambda: cp.audit)):
            try:
                out[name] = values.encode(read(), limits)
            except GitStateError as exc:
                out[name] = None
                errors[name] = str(exc)
        try:
            files = snapshot_files(cp)
            out["files_tree"] = cp.files_tree_id
            out["files"] = [f.to_dict() for f in files[:MAX_SNAPSHOT_FILES]]
            out["files_total"] = len(files)
        except GitStateError as exc:
            out["files_tree"], out["files"], out["files_total"] = None, [], 0
            errors["files"] = str(exc)
        out["errors"] = errors
        out["git"] = checkpoint_commands(cp.id[:12], [f["path"] for f in out["files"][:1]],
                                         langgraph=cp.workflow == lgtree.WORKFLOW)
        return out

    def _is_tip(self, cp: Checkpoint) -> bool:
        """Whether ``cp`` is the tip of the branch it was written on (in this worktree)."""
        try:
            return self.store.get_run(cp.run_id).tip(cp.branch) == cp.id
        except GitStateError:
            return False

    def value(self, ref: str, path: list[Any], offset: int = 0, limit: int | None = None) -> dict[str, Any]:
        """More of a value the checkpoint page showed in part: the items (or characters) from
        ``offset`` of the list, mapping or text at ``path`` (keys and indexes from the state's
        root; the first element may be ``"$tools"``/``"$audit"``/``"$metadata"`` for those)."""
        cp = self.checkpoint_of(ref)
        limit = min(limit or self.limits.items, 5000)
        root_name = path[0] if path and path[0] in ("$tools", "$audit", "$metadata") else None
        if root_name == "$tools":
            value: Any = cp.tools
        elif root_name == "$audit":
            value = cp.audit
        elif root_name == "$metadata":
            value = cp.metadata
        else:
            value = _state_part(StateReader(self.store.core.reader), cp, path)
        for step in path[(1 if root_name else 0):]:
            if isinstance(value, dict) and step in value:
                value = value[step]
            elif isinstance(value, list) and isinstance(step, int) and not isinstance(step, bool) \
                    and 0 <= step < len(value):
                value = value[step]
            else:
                raise UsageError(f"no value at {path!r}")
        offset = max(0, int(offset))
        if isinstance(value, str):
            chunk = self.limits.chars * 10
            return {"kind": "str", "offset": offset, "total": len(value), "value": value[offset:offset + chunk]}
        if isinstance(value, list):
            return {"kind": "list", "offset": offset, "total": len(value),
                    "value": [values.encode(v, self.limits) for v in value[offset:offset + limit]]}
        if isinstance(value, dict):
            items = list(value.items())[offset:offset + limit]
            return {"kind": "map", "offset": offset, "total": len(value),
                    "value": [[values.encode(k, self.limits), values.encode(v, self.limits)] for k, v in items]}
        return {"kind": "value", "offset": 0, "total": 1, "value": values.encode(value, self.limits)}

    def file(self, ref: str, path: str) -> dict[str, Any]:
        """One file of a checkpoint's workspace snapshot: its text, or a hex preview if binary."""
        cp = self.checkpoint_of(ref)
        tree = cp.files_tree_id
        if tree is None:
            raise UsageError(f"checkpoint {cp.short_id} has no workspace snapshot")
        reader = self.store.core.reader
        parts = [p for p in path.split("/") if p]
        item = None
        for i, part in enumerate(parts):
            item = reader.tree(tree).get(part)
            if item is None or (i < len(parts) - 1 and item.filemode != MODE_TREE):
                raise UsageError(f"no file {path!r} in checkpoint {cp.short_id}")
            tree = item.id
        if item is None or item.filemode == MODE_TREE:
            raise UsageError(f"no file {path!r} in checkpoint {cp.short_id}")
        head, size = self.blob_head(item.id, MAX_FILE_SHOWN)
        out = blob_view(head, MAX_FILE_SHOWN, size)
        out.update(path=path, id=item.id, mode=f"{item.filemode:06o}", checkpoint=cp.id,
                   git=[{"label": "this file", "command": f"git show {cp.id[:12]}:{git_quote('files/' + path)}"}])
        return out

    def blob_head(self, oid: str, limit: int) -> tuple[bytes, int]:
        """The first ``limit`` bytes of blob ``oid`` and its size, without ever holding more: a
        blob of at most ``limit`` bytes is read through the guarded reader; a larger one (a file
        of hundreds of MiB) is streamed from ``git cat-file blob`` and cut, git stopping at the
        closed pipe. :class:`CorruptObjectError` when it is not a readable blob."""
        reader = self.store.core.reader
        kind, size = reader.header(oid)  # checks a loose copy first, streaming it through zlib
        if kind != ObjectType.BLOB:
            raise CorruptObjectError(oid, "expected a blob")
        if size <= limit:
            return reader.blob(oid), size
        with popen_git(self.store.location.git_dir, ["cat-file", "blob", oid]) as proc:
            assert proc.stdout is not None
            head = proc.stdout.read(limit)
        if len(head) < limit:
            raise CorruptObjectError(oid, f"unreadable: {proc.error or f'git cat-file exited {proc.returncode}'}")
        return head, size

    # -- diffs --------------------------------------------------------------------------------

    def diff(self, a: str, b: str | None = None) -> dict[str, Any]:
        """What changed from checkpoint ``a`` to ``b`` (default: from ``a``'s parent to ``a``):
        state changes (appends as appends) and files with unified diffs."""
        if b is None:
            second = self.checkpoint_of(a)
            if second.parent_id is None:
                first = None
            else:
                first = self.checkpoint_of(second.parent_id)
        else:
            first, second = self.checkpoint_of(a), self.checkpoint_of(b)
        if first is None:
            added = [c.to_dict(self.limits) for c in values.changes(None, second.state)] \
                if not isinstance(second.state, dict) else \
                [values.Change((k,), "added", new=v).to_dict(self.limits) for k, v in second.state.items()]
            files = [{"path": f.path, "status": "added", "old_path": None, "similarity": None,
                      **self._file_diff(None, f.id)} for f in snapshot_files(second)]
            return {"a": None, "b": checkpoint_label(second), "state": added, "files": files,
                    "files_compared": second.files_tree_id is not None,
                    "git": [{"label": "this checkpoint", "command": f"git show --stat {second.id[:12]}"}]}
        result = self.store.diff(first, second)
        state: list[dict[str, Any]] = []
        for change in result.state:
            path: tuple[Any, ...] = (change.key,) if change.key else ()
            if change.kind == "added":
                state.append(values.Change(path, "added", new=change.new).to_dict(self.limits))
            elif change.kind == "removed":
                state.append(values.Change(path, "removed", old=change.old).to_dict(self.limits))
            else:
                state += [c.to_dict(self.limits) for c in values.changes(change.old, change.new, path)]
        files = []
        for f in result.files:
            item = f.to_dict()
            item.update(self._file_diff(f.old_id, f.new_id, f.old_path or f.path, f.path))
            files.append(item)
        return {"a": checkpoint_label(first), "b": checkpoint_label(second), "state": state, "files": files,
                "files_compared": result.files_compared,
                "git": [{"label": "the same diff",
                         "command": f"git diff --stat {first.id[:12]} {second.id[:12]} -- state files"},
                        {"label": "readable (after git agentos setup)",
                         "command": f"git diff {first.id[:12]} {second.id[:12]}"}]}

    def _file_diff(self, old: str | None, new: str | None, old_path: str = "", new_path: str = "") -> dict[str, Any]:
        reader = self.store.core.reader
        sizes = [reader.header(o)[1] if o else 0 for o in (old, new)]
        out: dict[str, Any] = {"old_size": sizes[0] if old else None, "new_size": sizes[1] if new else None,
                               "binary": False, "diff": None, "too_large": False}
        if max(sizes) > MAX_TEXT_DIFF:
            out["too_large"] = True
            return out
        texts = []
        for oid in (old, new):
            data = reader.blob(oid) if oid else b""
            if values.is_binary(data):
                out["binary"] = True
                return out
            texts.append(masked_text(data.decode("utf-8", "replace")))  # what warn stored shows as markers
        out["diff"] = unified(texts[0], texts[1], old_path or new_path, new_path or old_path,
                              old is None, new is None)
        return out

    # -- session files ------------------------------------------------------------------------

    def session_files(self, run_id: str, worktree: str | None = None) -> dict[str, Any]:
        """The run's session files: path, latest version, author, reason."""
        run = self.get_run(run_id, worktree)
        listing = run.files.list()
        return {"files": [{**fv.to_dict(), "key": key} for key, fv in listing.items()],
                "errors": dict(listing.errors)}

    def session_file(self, run_id: str, path: str, worktree: str | None = None,
                     limit: int = 100) -> dict[str, Any]:
        """One session file's versions, newest first, each with its diff against the one before."""
        run = self.get_run(run_id, worktree)
        history = run.files.history(path)
        reader = self.store.core.reader
        contents: dict[int, tuple[bytes, int]] = {}  # each version's first MAX_FILE_SHOWN bytes, its size
        start = max(0, len(history) - limit - 1)
        for fv in history[start:]:
            item = reader.tree(reader.commit(fv.commit).tree_id).get(sessionfiles.CONTENT)
            contents[fv.version] = self.blob_head(item.id, MAX_FILE_SHOWN) if item is not None else (b"", 0)
        versions = []
        previous: bytes | None = None
        previous_size = 0
        for fv in history[start:]:
            data, size = contents[fv.version]
            entry = fv.to_dict()
            binary = values.is_binary(data) or (previous is not None and values.is_binary(previous))
            entry.update(binary=binary, too_large=max(size, previous_size) > MAX_TEXT_DIFF)
            if fv is not history[start] or start == 0:
                if binary or entry["too_large"]:
                    entry["diff"] = None
                else:
                    entry["diff"] = unified(masked_text((previous or b"").decode("utf-8", "replace")),
                                            masked_text(data.decode("utf-8", "replace")), path, path,
                                            previous is None, False)
                entry.update(blob_view(data, MAX_FILE_SHOWN, size))
                versions.append(entry)
            previous, previous_size = data, size
        versions.reverse()
        ref = run.files.ref(path)
        return {"path": path, "versions": versions, "total": len(history),
                "git": [{"label": "versions", "command": f"git log --format='%h %an: %s' {git_quote(ref)}"},
                        {"label": "latest content", "command": f"git show {git_quote(ref)}:content"}]}

    # -- live updates -------------------------------------------------------------------------

    def token(self, run_id: str | None = None, worktree: str | None = None, all_worktrees: bool = False) -> str:
        """A short fingerprint of the refs a page shows (a run's, or every run's): it changes when
        a checkpoint is written, a branch moves or a run appears. Costs a look at the refs' files
        (``packed-refs`` and the loose refs' directories) unless they changed."""
        if run_id is not None:
            prefix = run_prefix(worktree or self.store.worktree, run_id)
        else:
            prefix = NAMESPACE if all_worktrees else worktree_prefix(worktree or self.store.worktree)
        listing = self.list_refs(prefix)
        hit = self._tokens.get(prefix)
        if hit is not None and hit[0] is listing:
            return hit[1]
        digest = hashlib.sha1(usedforsecurity=False)
        for name, oid, _ in sorted(listing):
            digest.update(f"{name} {oid}\n".encode("utf-8", "surrogateescape"))
        token = digest.hexdigest()[:16]
        with self._lock:
            self._tokens[prefix] = (listing, token)
        return token


def _state_part(reader: StateReader, cp: Checkpoint, path: list[Any]) -> Any:
    """The state, or only its top-level key ``path[0]`` decoded (a long list of one key is paged
    without decoding the other keys)."""
    if path and isinstance(path[0], str):
        root = reader.tree(cp.tree_id).get(cpfmt.STATE_TREE)
        if root is not None:
            entries = reader.entries(root.id)
            if path[0] not in entries:
                raise UsageError(f"no state key {path[0]!r}")
            kind, oid = entries[path[0]]
            return {path[0]: reader.value(kind, oid)}
    return cp.state


def blob_view(data: bytes, limit: int, size: int | None = None) -> dict[str, Any]:
    """A file's content as the page shows it: text (up to ``limit`` bytes) or, when binary, its
    size and a hex preview. ``data`` may be only the file's first ``limit`` bytes (``size``: the
    whole file's)."""
    size = len(data) if size is None else size
    shown = data[:limit]
    if values.is_binary(shown):
        return {"size": size, "binary": True, "text": None, "hex": data[:256].hex(), "truncated": size > 256}
    return {"size": size, "binary": False, "text": masked(shown.decode("utf-8", "replace")), "hex": None,
            "truncated": size > limit}


def unified(old: str, new: str, old_path: str, new_path: str, added: bool = False, deleted: bool = False) -> str:
    """A unified diff of two texts, as ``git diff`` prints one."""
    a = "/dev/null" if added else f"a/{old_path}"
    b = "/dev/null" if deleted else f"b/{new_path}"
    lines = difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True), a, b, n=3)
    out = []
    for line in lines:
        out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)


def checkpoint_commands(short: str, sample_files: Iterable[str] = (), langgraph: bool = False) -> list[dict[str, str]]:
    """Plain-git commands that show what the page shows of a checkpoint (``short``: its id;
    ``langgraph``: a LangGraph checkpoint, whose channels are under ``langgraph/``)."""
    decode = "python3 -c 'import cbor2,sys; print(cbor2.loads(sys.stdin.buffer.read()))'"
    out = [
        {"label": "message and trailers", "command": f"git log -1 --format=%B {short}"},
        {"label": "what it holds", "command": f"git ls-tree -r --name-only {short}"},
        {"label": "metadata", "command": f"git cat-file blob {short}:meta.cbor | {decode}"},
        {"label": "LangGraph channels (one entry per channel)", "command": f"git ls-tree {short} langgraph/"}
        if langgraph else {"label": "state (one entry per key)", "command": f"git ls-tree {short} state/"},
        {"label": "with git agentos setup", "command": f"git show {short}"},
    ]
    for path in sample_files:
        out.append({"label": "a snapshot file", "command": f"git show {short}:{git_quote('files/' + path)}"})
    return out


_OID = re.compile(r"[0-9a-f]{40}")


def _is_oid(text: str) -> bool:
    return _OID.fullmatch(text) is not None


def _branch_kind(name: str) -> str:
    if "~" in name:
        return "langgraph"
    if "@" in name:
        return "remote"
    return "branch"


def _json_text(value: Any) -> str:
    if not value:
        return ""
    try:
        return json.dumps(values.encode(value, Limits(items=50, chars=500, depth=6)), ensure_ascii=False)
    except (TypeError, ValueError):
        return ""


def _parse_query(query: str) -> list[tuple[str | None, str]]:
    out: list[tuple[str | None, str]] = []
    for word in query.lower().split():
        field_name, sep, rest = word.partition(":")
        if sep and field_name in ("id", "workflow", "status", "node", "worktree", "wt", "branch") and rest:
            out.append(("worktree" if field_name == "wt" else field_name, rest))
        else:
            out.append((None, word))
    return out


def _matches(terms: list[tuple[str | None, str]], refs: RunRefs,
             summary: tuple[RunSummary, dict[str, Any], str]) -> bool:
    s, _, text = summary
    for field_name, word in terms:
        if field_name is None:
            if word not in text:
                return False
        else:
            value = getattr(s, field_name)
            if value is None or word not in str(value).lower():
                return False
    return True


def not_found(exc: Exception) -> bool:
    """Whether an error means "no such run, checkpoint or file" (a 404) rather than damage."""
    return isinstance(exc, RunNotFound | CheckpointNotFound | UsageError | SessionFileNotFound | BranchNotFound
                      | InvalidReferenceError | InvalidNameError | AmbiguousReferenceError)
