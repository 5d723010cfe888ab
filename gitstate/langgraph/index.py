"""Finding LangGraph checkpoints of a thread fast: the commit trailers that name them, the refs of a
run read straight from the ref store, and an in-memory index (checkpoint id → commit) rebuilt from
git whenever the run's refs differ from what the index last saw (another process wrote the thread).

Every checkpoint commit carries trailers ``LangGraph-Checkpoint``, ``LangGraph-Namespace`` (absent
for the root namespace), ``LangGraph-Parent`` and ``LangGraph-Run`` after the core trailers, so the
index is built from commit messages alone, without decoding any tree."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import pygit2

from gitstate.format.names import decode_component, run_prefix
from gitstate.git.reader import CommitData, ObjectReader
from gitstate.git.refs import list_refs

T_ID = "LangGraph-Checkpoint"
T_NS = "LangGraph-Namespace"
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


class RefReader:
    """Reads the branch refs of one run without iterating every ref of the repository: loose refs
    from their directory, packed ones from ``packed-refs`` (parsed once per change of the file).
    Repositories with another ref backend fall back to libgit2's iteration."""

    def __init__(self, common_dir: str, worktree: str) -> None:
        self.common_dir = common_dir
        self.worktree = worktree
        self._packed_stamp: tuple[int, int] | None = None
        self._packed: dict[str, str] = {}
        self.files_backend = os.path.isdir(os.path.join(common_dir, "refs")) and not self._reftable()
        self._paths: dict[str, tuple[str, str]] = {}  # run id -> (ref prefix, loose folder)

    def _reftable(self) -> bool:
        return os.path.isdir(os.path.join(self.common_dir, "reftable"))

    def _packed_refs(self) -> dict[str, str]:
        path = os.path.join(self.common_dir, "packed-refs")
        try:
            st = os.stat(path)
        except FileNotFoundError:
            self._packed_stamp, self._packed = None, {}
            return self._packed
        stamp = (st.st_mtime_ns, st.st_size)
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

    def branches(self, repo: pygit2.Repository, run_id: str) -> dict[str, str]:
        """``{branch: tip}`` of a run."""
        paths = self._paths.get(run_id)
        if paths is None:
            prefix = run_prefix(self.worktree, run_id) + "heads/"
            paths = (prefix, os.path.join(self.common_dir, *prefix.rstrip("/").split("/")))
            if len(self._paths) > 4096:
                self._paths.clear()
            self._paths[run_id] = paths
        prefix, folder = paths
        out: dict[str, str] = {}
        if not self.files_backend:
            for name, oid in list_refs(repo, prefix):
                out[decode_component(name[len(prefix):])] = oid
            return out
        for name, oid in self._packed_refs().items():
            if name.startswith(prefix):
                out[decode_component(name[len(prefix):])] = oid
        try:
            names = os.listdir(folder)
        except (FileNotFoundError, NotADirectoryError):
            return out
        for enc in names:
            if enc.endswith(".lock") or enc.startswith("."):
                continue
            try:
                with open(os.path.join(folder, enc), encoding="ascii", errors="replace") as fh:
                    text = fh.read().strip()
            except (FileNotFoundError, IsADirectoryError):
                continue
            if len(text) == 40:
                out[decode_component(enc)] = text
        return out


@dataclass
class ThreadIndex:
    """Checkpoints of one thread (a run): ``(namespace, checkpoint id) → Entry``, plus the branch
    tips the index was built from."""

    tips: dict[str, str] = field(default_factory=dict)
    entries: dict[tuple[str, str], Entry] = field(default_factory=dict)
    tip_of: dict[str, str] = field(default_factory=dict)  # commit -> branch
    newest: dict[str, Entry] = field(default_factory=dict)  # namespace -> entry of greatest id

    def rebuild(self, reader: ObjectReader, tips: dict[str, str]) -> None:
        """Walk every branch from its tip (each commit visited once)."""
        entries: dict[tuple[str, str], Entry] = {}
        seen: set[str] = set()
        for branch in sorted(tips):
            oid: str | None = tips[branch]
            while oid is not None and oid not in seen:
                seen.add(oid)
                entry = parse_entry(reader.commit(oid))
                if entry is None:
                    break
                key = (entry.ns, entry.checkpoint_id)
                entries.setdefault(key, entry)
                oid = entry.parents[0] if entry.parents else None
        self.entries = entries
        self.newest = {}
        for entry in entries.values():
            self._note(entry)
        self.set_tips(tips)

    def _note(self, entry: Entry) -> None:
        best = self.newest.get(entry.ns)
        if best is None or entry.checkpoint_id >= best.checkpoint_id:
            self.newest[entry.ns] = entry

    def set_tips(self, tips: dict[str, str]) -> None:
        """Record the branch tips (as just read or just written)."""
        self.tips = dict(tips)
        self.tip_of = {oid: b for b, oid in self.tips.items()}

    def add(self, entry: Entry, branch: str, old_tip: str | None) -> None:
        """Record a commit this process just put on ``branch``."""
        self.entries[(entry.ns, entry.checkpoint_id)] = entry
        self._note(entry)
        if old_tip is not None:
            self.tip_of.pop(old_tip, None)
        self.tips[branch] = entry.oid
        self.tip_of[entry.oid] = branch

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
