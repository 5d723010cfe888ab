"""Finding LangGraph checkpoints of a thread fast: the commit trailers that name them, the refs of a
run read straight from the ref store, and an in-memory index (checkpoint id → commit) rebuilt from
git whenever the run's refs differ from what the index last saw (another process wrote the thread).

Every checkpoint commit carries trailers ``LangGraph-Checkpoint``, ``LangGraph-Namespace`` (absent
for the root namespace), ``LangGraph-Parent`` and ``LangGraph-Run`` after the core trailers, so the
index is built from commit messages alone, without decoding any tree."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import pygit2

from gitstate.format import lgtree
from gitstate.format.lgwrites import REF_KIND
from gitstate.format.names import decode_component, is_kept_copy, run_prefix
from gitstate.git.location import check_present
from gitstate.git.reader import CommitData, ObjectReader
from gitstate.git.refs import list_refs

T_ID = lgtree.T_ID
T_NS = lgtree.T_NS
T_PARENT = "LangGraph-Parent"
T_RUN = "LangGraph-Run"


def escape(value: str) -> str:
    """Trailer value escaping (as the core trailers: backslash, newline, carriage return)."""
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")


def unescape(value: str) -> str:
    """Invert :func:`escape`."""
    out: list[str] = []
    i = 0
    while i < len(value):
        ch = value[i]
        if ch == "\\" and i + 1 < len(value):
            nxt = value[i + 1]
            out.append({"n": "\n", "r": "\r", "\\": "\\"}.get(nxt, nxt))
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def trailers(ns: str, checkpoint_id: str, parent_id: str | None, run_id: str | None) -> str:
    """The LangGraph trailer lines appended to a core commit message."""
    lines = [f"{T_ID}: {escape(checkpoint_id)}"]
    if ns:
        lines.append(f"{T_NS}: {escape(ns)}")
    if parent_id:
        lines.append(f"{T_PARENT}: {escape(parent_id)}")
    if run_id:
        lines.append(f"{T_RUN}: {escape(run_id)}")
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Entry:
    """One checkpoint as the index knows it."""

    oid: str
    ns: str
    checkpoint_id: str
    parent_id: str | None
    run_id: str | None
    parents: tuple[str, ...]


def parse_entry(commit: CommitData) -> Entry | None:
    """The LangGraph identity of a checkpoint commit (``None`` for a commit of another kind)."""
    found: dict[str, str] = {}
    for line in commit.message.splitlines():
        key, sep, value = line.partition(": ")
        if sep and key in (T_ID, T_NS, T_PARENT, T_RUN):
            found[key] = unescape(value)
    if T_ID not in found:
        return None
    return Entry(commit.id, found.get(T_NS, ""), found[T_ID], found.get(T_PARENT), found.get(T_RUN),
                 commit.parent_ids)


_HEX40 = re.compile(r"[0-9a-f]{40}")  # a writes ref's name (its blob's id)
RACY_SECONDS = 0.025  # a listing taken this long after its directories last changed is reused


def _stamp(path: str) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size)


class RefReader:
    """Reads the branch refs of one run without iterating every ref of the repository: loose refs
    from their directory, packed ones from ``packed-refs`` (parsed once per change of the file).
    Repositories with another ref backend fall back to libgit2's iteration.

    A run's listing is reused while its ``heads/`` and ``writes/`` directories and ``packed-refs``
    keep their inode, modification time and size (three ``stat`` calls instead of reading every
    ref): git and gitstate change a loose ref only by creating, renaming or deleting a file in its
    directory, which sets the directory's modification time. As git does for its index ("racy
    git"), a listing is reused only if it was taken at least :data:`RACY_SECONDS` after that time
    (so a change in the same clock tick cannot hide), and never on a file system whose times have
    whole-second resolution."""

    def __init__(self, common_dir: str, worktree: str) -> None:
        self.common_dir = common_dir
        self.worktree = worktree
        self._packed_stamp: tuple[int, int, int] | None = None
        self._packed: dict[str, str] = {}
        self._packed_path = os.path.join(common_dir, "packed-refs")
        self.files_backend = os.path.isdir(os.path.join(common_dir, "refs")) and not self._reftable()
        self._paths: dict[str, tuple[str, str]] = {}  # run id -> (ref prefix, loose folder)
        self._listed: dict[str, tuple[tuple[object, ...], dict[str, str], dict[str, str]]] = {}
        self._writes_paths: dict[str, tuple[str, str]] = {}  # run id -> (writes ref prefix, folder)
        self._under_table: dict[str, str] | None = None  # the packed table _under was made from
        self._under: dict[str, dict[str, str]] = {}  # ref prefix -> {rest of the name: id}, packed

    def _reftable(self) -> bool:
        return os.path.isdir(os.path.join(self.common_dir, "reftable"))

    def _packed_refs(self, stamp: tuple[int, int, int] | None) -> dict[str, str]:
        """The table of ``packed-refs``, whose stamp the caller just took (``None``: no file)."""
        path = self._packed_path
        if stamp is None:
            self._packed_stamp, self._packed = None, {}
            return self._packed
        if stamp != self._packed_stamp:
            table: dict[str, str] = {}
            with open(path, encoding="utf-8", errors="replace") as fh:
                for line in fh:
                    if line.startswith(("#", "^")):
                        continue
                    parts = line.split()
                    if len(parts) == 2:
                        table[parts[1]] = parts[0]
            self._packed_stamp, self._packed = stamp, table
        return self._packed

    def _packed_at(self, stamp: tuple[int, int, int] | None) -> dict[str, str]:
        """:meth:`_packed_refs`, or no table when the file was removed since its stamp was taken."""
        try:
            return self._packed_refs(stamp)
        except FileNotFoundError:
            return self._packed_refs(None)

    def _packed_under(self, stamp: tuple[int, int, int] | None, prefix: str) -> dict[str, str]:
        """The packed refs under ``prefix`` (the rest of each name → id), kept until ``packed-refs``
        changes: a repository with many packed refs is not scanned whole on every write."""
        table = self._packed_at(stamp)
        if table is not self._under_table:
            self._under_table, self._under = table, {}
        found = self._under.get(prefix)
        if found is None:
            if len(self._under) > 4096:
                self._under.clear()
            cut = len(prefix)
            found = self._under[prefix] = {name[cut:]: oid for name, oid in table.items() if name.startswith(prefix)}
        return found

    def branches(self, repo: pygit2.Repository, run_id: str) -> dict[str, str]:
        """``{branch: tip}`` of a run."""
        return self.read(repo, run_id)[0]

    def read(self, repo: pygit2.Repository, run_id: str) -> tuple[dict[str, str], dict[str, str]]:
        """``({branch: tip}, {writes ref name: blob id})`` of a run (the second: its pending-writes
        refs, ``.../writes/<name>``)."""
        paths = self._paths.get(run_id)
        if paths is None:
            prefix = run_prefix(self.worktree, run_id)
            folder = os.path.join(self.common_dir, *prefix.rstrip("/").split("/"))
            paths = (prefix, folder)
            if len(self._paths) > 4096:
                self._paths.clear()
            self._paths[run_id] = paths
        prefix, folder = paths
        heads: dict[str, str] = {}
        writes: dict[str, str] = {}
        heads_prefix, writes_prefix = prefix + "heads/", prefix + REF_KIND + "/"
        if not self.files_backend:
            for name, oid in list_refs(repo, prefix):
                if name.startswith(heads_prefix):
                    heads[decode_component(name[len(heads_prefix):])] = oid
                elif name.startswith(writes_prefix):
                    writes[name[len(writes_prefix):]] = oid
            return heads, writes
        heads_dir, writes_dir = os.path.join(folder, "heads"), os.path.join(folder, REF_KIND)
        stamps = (_stamp(heads_dir), _stamp(writes_dir), _stamp(self._packed_path))
        hit = self._listed.get(run_id)
        if hit is not None and hit[0] == stamps:
            return dict(hit[1]), dict(hit[2])
        started = time.time()
        # loose refs first, then packed-refs, as git reads them: `git pack-refs` writes packed-refs
        # before it deletes the loose files, so a ref is in one or the other whenever it is read
        _read_loose(heads_dir, heads, decode_component)
        _read_writes_names(writes_dir, writes)
        packed = _stamp(self._packed_path)
        for rest, oid in self._packed_under(packed, heads_prefix).items():
            heads.setdefault(decode_component(rest), oid)  # a loose ref wins over its packed copy
        for rest, oid in self._packed_under(packed, writes_prefix).items():
            writes.setdefault(rest, oid)
        if not heads:
            check_present(self.common_dir)  # no thread, or no repository any more (an error, not "empty")
        if self._settled(stamps, started):
            if len(self._listed) > 4096:
                self._listed.clear()
            self._listed[run_id] = (stamps, dict(heads), dict(writes))
        else:
            self._listed.pop(run_id, None)
        return heads, writes

    def writes(self, repo: pygit2.Repository, run_id: str) -> dict[str, str]:
        """``{writes ref name: blob id}`` of a run, without its branches (one directory listing,
        and ``packed-refs`` when it changed): what a write needs to know afresh when it trusts the
        branches it knows (see ``GitCheckpointSaver._known_index``)."""
        if not self.files_backend:
            return self.read(repo, run_id)[1]
        paths = self._writes_paths.get(run_id)
        if paths is None:
            prefix = run_prefix(self.worktree, run_id) + REF_KIND + "/"
            paths = (prefix, os.path.join(self.common_dir, *prefix.rstrip("/").split("/")))
            if len(self._writes_paths) > 4096:
                self._writes_paths.clear()
            self._writes_paths[run_id] = paths
        prefix, folder = paths
        writes: dict[str, str] = {}
        _read_writes_names(folder, writes)  # loose first, then packed-refs (see read)
        for rest, oid in self._packed_under(_stamp(self._packed_path), prefix).items():
            writes.setdefault(rest, oid)
        return writes

    @staticmethod
    def _settled(stamps: tuple[tuple[int, int, int] | None, ...], started: float) -> bool:
        """Whether a listing started at ``started`` may be reused while ``stamps`` hold."""
        for stamp in stamps:
            if stamp is None:
                continue
            mtime_ns = stamp[1]
            if mtime_ns % 1_000_000_000 == 0 or started - mtime_ns / 1e9 < RACY_SECONDS:
                return False
        return True


def _read_writes_names(folder: str, out: dict[str, str]) -> None:
    """Add the loose writes refs in ``folder`` to ``out``. A writes ref is named by the blob it
    holds and never moves, so its name is its value: the files are listed, not opened (a ref whose
    blob is missing or damaged is reported when the blob is read)."""
    try:
        names = os.listdir(folder)
    except (FileNotFoundError, NotADirectoryError):
        return
    for name in names:
        if _HEX40.fullmatch(name) is not None:
            out[name] = name


def _read_loose(folder: str, out: dict[str, str], decode: Callable[[str], str]) -> None:
    """Add the loose refs directly in ``folder`` to ``out`` (``decode(file name)`` → key)."""
    try:
        names = os.listdir(folder)
    except (FileNotFoundError, NotADirectoryError):
        return
    for enc in names:
        if enc.endswith(".lock") or enc.startswith("."):
            continue
        try:
            fd = os.open(os.path.join(folder, enc), os.O_RDONLY | os.O_CLOEXEC)
        except (FileNotFoundError, IsADirectoryError):
            continue
        try:
            text = os.read(fd, 128).strip()
        except IsADirectoryError:
            continue
        finally:
            os.close(fd)
        if len(text) == 40:
            out[decode(enc)] = text.decode("ascii", "replace")


def _rank(branch: str) -> tuple[int, str]:
    """Which of several branches sharing a tip a checkpoint put on that tip extends (the smallest):
    a namespace's first line (``main``, ``ns:<ns>``) before a fork line (``main~<id>``) or a branch
    made with the CLI or the library (``git agentos fork``), those before a line a pull kept, then
    by name."""
    first = "~" not in branch and (branch == "main" or branch.startswith("ns:"))
    return (0 if first else 2 if is_kept_copy(branch) else 1, branch)


@dataclass
class ThreadIndex:
    """Checkpoints of one thread (a run): ``(namespace, checkpoint id) → Entry``, plus the branch
    tips the index was built from."""

    tips: dict[str, str] = field(default_factory=dict)
    entries: dict[tuple[str, str], Entry] = field(default_factory=dict)
    tip_of: dict[str, str] = field(default_factory=dict)  # commit -> branch
    newest: dict[str, Entry] = field(default_factory=dict)  # namespace -> entry of greatest id
    writes: dict[str, str] = field(default_factory=dict)  # writes ref name -> blob id, as last read
    pending: dict[tuple[str, str], list[tuple[str, str]]] = field(default_factory=dict)
    # (namespace, checkpoint id) -> [(writes ref name, blob id)] in name order
    unchecked: set[tuple[str, str]] = field(default_factory=set)
    # keys of ``pending`` whose writes refs were not compared with their checkpoint's commit since
    # either changed (the saver's put looks for stale writes refs among these only)

    def rebuild(self, reader: ObjectReader, tips: dict[str, str]) -> None:
        """Walk every branch from its tip (each commit visited once). The thread's latest
        checkpoint of a namespace (:meth:`latest`) is taken from the lines it wrote itself: a
        line a pull kept (``<branch>@<remote>``, the remote's diverged line) is read, but
        continues the thread only where it holds the namespace's only checkpoints."""
        entries: dict[tuple[str, str], Entry] = {}
        own: set[tuple[str, str]] = set()  # reached from a line that is not a kept copy
        seen: set[str] = set()
        for branch in sorted(tips, key=lambda b: (is_kept_copy(b), b)):
            kept = is_kept_copy(branch)
            oid: str | None = tips[branch]
            while oid is not None and oid not in seen:
                seen.add(oid)
                entry = parse_entry(reader.commit(oid))
                if entry is None:
                    break
                key = (entry.ns, entry.checkpoint_id)
                entries.setdefault(key, entry)
                if not kept:
                    own.add(key)
                oid = entry.parents[0] if entry.parents else None
        self.entries = entries
        self.newest = {}
        for key in own:
            self._note(entries[key])
        own_ns = {ns for ns, _ in own}
        for key, entry in entries.items():
            if key not in own and entry.ns not in own_ns:
                self._note(entry)
        self.unchecked = set(self.pending)
        self.set_tips(tips)

    def _note(self, entry: Entry) -> None:
        best = self.newest.get(entry.ns)
        if best is None or entry.checkpoint_id >= best.checkpoint_id:
            self.newest[entry.ns] = entry

    def set_tips(self, tips: dict[str, str]) -> None:
        """Record the branch tips (as just read or just written)."""
        self.tips = dict(tips)
        self.tip_of = {}
        for branch, oid in sorted(self.tips.items(), key=lambda item: _rank(item[0]), reverse=True):
            self.tip_of[oid] = branch  # the best ranked of the branches sharing a tip is set last

    def add(self, entry: Entry, branch: str, old_tip: str | None) -> None:
        """Record a commit this process just put on ``branch``."""
        self.entries[(entry.ns, entry.checkpoint_id)] = entry
        if (entry.ns, entry.checkpoint_id) in self.pending:
            self.unchecked.add((entry.ns, entry.checkpoint_id))
        self._note(entry)
        self.tips[branch] = entry.oid
        self.tip_of[entry.oid] = branch
        if old_tip is not None:
            sharing = [b for b, oid in self.tips.items() if oid == old_tip]
            if sharing:
                self.tip_of[old_tip] = min(sharing, key=_rank)
            else:
                self.tip_of.pop(old_tip, None)

    def replace(self, old: Entry, new: Entry) -> None:
        """Record that the commit of a checkpoint that is not a tip was rewritten (its pending
        writes folded in): same checkpoint, new commit."""
        self.entries[(new.ns, new.checkpoint_id)] = new
        if (new.ns, new.checkpoint_id) in self.pending:
            self.unchecked.add((new.ns, new.checkpoint_id))
        if self.newest.get(new.ns) is old:
            self.newest[new.ns] = new

    def set_writes(self, writes: dict[str, str], keys: dict[str, tuple[str, str]]) -> None:
        """Record the writes refs as read (``keys``: ref name → its checkpoint's key)."""
        self.writes = dict(writes)
        pending: dict[tuple[str, str], list[tuple[str, str]]] = {}
        for name in sorted(writes):
            pending.setdefault(keys[name], []).append((name, writes[name]))
        self.pending = pending
        self.unchecked = set(pending)

    def add_writes(self, key: tuple[str, str], name: str, oid: str) -> None:
        """Record a writes ref this process just created."""
        self.writes[name] = oid
        found = self.pending.setdefault(key, [])
        found.append((name, oid))
        found.sort()
        self.unchecked.add(key)

    def drop_writes(self, key: tuple[str, str], names: set[str]) -> None:
        """Forget writes refs this process just deleted."""
        for name in names:
            self.writes.pop(name, None)
        left = [item for item in self.pending.get(key, []) if item[0] not in names]
        if left:
            self.pending[key] = left
        else:
            self.pending.pop(key, None)

    def namespace(self, ns: str) -> list[Entry]:
        """Entries of one namespace, newest checkpoint id first."""
        return sorted((e for (n, _), e in self.entries.items() if n == ns),
                      key=lambda e: e.checkpoint_id, reverse=True)

    def latest(self, ns: str) -> Entry | None:
        """The entry with the greatest checkpoint id in a namespace."""
        return self.newest.get(ns)

    def namespaces(self) -> list[str]:
        """Namespaces of the thread, sorted."""
        return sorted({n for n, _ in self.entries})
