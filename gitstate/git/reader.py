"""The one guarded object reader: every object gitstate reads goes through :class:`ObjectReader`.

libgit2 1.9 loops forever when it inflates a truncated loose object, and its lazily loaded objects
(``commit.tree``, ``tree[name]``) read more objects behind the caller's back. So this reader checks
each loose copy with zlib before libgit2 touches it (:func:`check_loose`), reads raw bytes through
the object database, and parses commits and trees itself into plain, immutable values
(:class:`CommitData`, :class:`TreeData`) that never read anything later. A missing, truncated,
zero-length or wrong-type object, or a damaged pack, is a :class:`CorruptObjectError` that names the
object, in bounded time."""

from __future__ import annotations

import os
import time
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pygit2
from pygit2.enums import ObjectType

from gitstate.errors import (
    AmbiguousReferenceError,
    CheckpointNotFound,
    CorruptObjectError,
    GitStateError,
    InvalidReferenceError,
)
from gitstate.git import command
from gitstate.git.location import check_present
from gitstate.git.objects import MODE_TREE, objects_dir
from gitstate.git.packs import reindex_orphans

_CHUNK = 1 << 16
_READ = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
_ATTEMPTS = 8  # reads of one object while the pack directory keeps changing under a repack
_KINDS = {int(kind): kind for kind in ObjectType}  # a dict lookup: ObjectType(n) costs a few µs per object
_KIND_NAMES = {ObjectType.COMMIT: "commit", ObjectType.TREE: "tree", ObjectType.BLOB: "blob",
               ObjectType.TAG: "tag"}


def check_loose(repo: pygit2.Repository, oid: str) -> str | None:
    """Why the loose copy of ``oid`` is unreadable, or ``None`` (also when it is not loose).

    Streams the file through zlib (a huge object is never held in memory, compressed or not)."""
    try:
        # os.open: a miss (the usual case: the object is packed) costs a third of ``open``'s
        fd = os.open(f"{objects_dir(repo)}/{oid[:2]}/{oid[2:]}", _READ)
    except OSError:
        return None
    try:
        fh = open(fd, "rb")  # noqa: SIM115 - closed below
    except OSError:  # a directory where the object would be: not a loose object either
        os.close(fd)
        return None
    inflater = zlib.decompressobj()
    with fh:
        try:
            while not inflater.eof:
                pending = inflater.unconsumed_tail or fh.read(_CHUNK)
                if not pending:
                    return "loose object is truncated"
                inflater.decompress(pending, _CHUNK)
        except (OSError, zlib.error):
            return "loose object does not inflate"
    return None


@dataclass(frozen=True)
class Signature:
    """An author or committer line of a commit."""

    name: str
    email: str
    time: int
    offset: int  # minutes east of UTC

    def to_git(self) -> str:
        """The ``Name <email> time +hhmm`` form git stores."""
        sign = "-" if self.offset < 0 else "+"
        off = abs(self.offset)
        return f"{self.name} <{self.email}> {self.time} {sign}{off // 60:02d}{off % 60:02d}"


@dataclass(frozen=True)
class CommitData:
    """A commit, parsed: ids as hex strings, the message as text."""

    id: str
    tree_id: str
    parent_ids: tuple[str, ...]
    author: Signature
    committer: Signature
    message: str

    @property
    def commit_time(self) -> int:
        """The committer time (seconds since the epoch)."""
        return self.committer.time


@dataclass(frozen=True)
class TreeItem:
    """One entry of a tree."""

    name: str
    id: str
    filemode: int

    @property
    def type_str(self) -> str:
        """``tree``, ``commit`` (a gitlink) or ``blob``, as the mode says."""
        if self.filemode == MODE_TREE:
            return "tree"
        if self.filemode == 0o160000:
            return "commit"
        return "blob"


@dataclass(frozen=True)
class TreeData:
    """A tree, parsed: entries in git's order, looked up by name."""

    id: str
    items: tuple[TreeItem, ...]

    def __iter__(self) -> Iterator[TreeItem]:
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)

    def get(self, name: str) -> TreeItem | None:
        """The entry called ``name``, or ``None``."""
        for item in self.items:
            if item.name == name:
                return item
        return None

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.get(name) is not None

    def __getitem__(self, name: str) -> TreeItem:
        item = self.get(name)
        if item is None:
            raise KeyError(name)
        return item


def parse_tree(oid: str, data: bytes) -> TreeData:
    """Parse raw tree bytes (``<mode> <name>\\0<20-byte id>`` entries)."""
    items: list[TreeItem] = []
    pos, end = 0, len(data)
    while pos < end:
        space = data.find(b" ", pos)
        nul = data.find(b"\0", space + 1)
        if space < 0 or nul < 0 or nul + 21 > end:
            raise CorruptObjectError(oid, "malformed tree entry")
        try:
            mode = int(data[pos:space], 8)
        except ValueError:
            raise CorruptObjectError(oid, "malformed tree entry mode") from None
        name = data[space + 1:nul].decode("utf-8", "surrogateescape")
        items.append(TreeItem(name, data[nul + 1:nul + 21].hex(), mode))
        pos = nul + 21
    return TreeData(oid, tuple(items))


def _signature(oid: str, text: str) -> Signature:
    lt, gt = text.find("<"), text.rfind(">")
    if lt < 0 or gt < lt:
        raise CorruptObjectError(oid, "malformed signature in commit")
    name, email = text[:lt].strip(), text[lt + 1:gt]
    parts = text[gt + 1:].split()
    try:
        when = int(parts[0])
        tz = parts[1]
        offset = (int(tz[1:3]) * 60 + int(tz[3:5])) * (-1 if tz[0] == "-" else 1)
    except (IndexError, ValueError):
        raise CorruptObjectError(oid, "malformed signature time in commit") from None
    return Signature(name, email, when, offset)


def parse_commit(oid: str, data: bytes) -> CommitData:
    """Parse raw commit bytes (headers, a blank line, the message)."""
    head, sep, body = data.partition(b"\n\n")
    if not sep:
        head, body = data.rstrip(b"\n"), b""
    tree: str | None = None
    parents: list[str] = []
    author = committer = None
    for line in head.decode("utf-8", "surrogateescape").split("\n"):
        if line.startswith(" "):
            continue  # continuation of a multi-line header (gpgsig, mergetag)
        key, _, value = line.partition(" ")
        if key == "tree":
            tree = value
        elif key == "parent":
            parents.append(value)
        elif key == "author":
            author = _signature(oid, value)
        elif key == "committer":
            committer = _signature(oid, value)
    if tree is None or author is None or committer is None or len(tree) != 40:
        raise CorruptObjectError(oid, "malformed commit")
    return CommitData(oid, tree, tuple(parents), author, committer, body.decode("utf-8", "replace"))


class ObjectReader:
    """Reads objects of one repository, guarded (see the module docstring)."""

    def __init__(self, repo: pygit2.Repository) -> None:
        self.repo = repo
        self._listed: dict[str, frozenset[str]] | None = None  # see listing_loose

    @contextmanager
    def listing_loose(self) -> Iterator[ObjectReader]:
        """Within the block, whether an object is loose is looked up in a listing of its fan-out
        folder, taken once, instead of one failed ``open`` per packed object (a restore reads
        thousands). One written loose after the listing skips the zlib check: loose objects are
        written whole, by rename; the check is for damage already on disk. Blocks nest."""
        if self._listed is not None:
            yield self
            return
        self._listed = {}
        try:
            yield self
        finally:
            self._listed = None

    def _guard(self, oid: str) -> None:
        listed = self._listed
        if listed is not None:
            names = listed.get(oid[:2])
            if names is None:
                try:
                    names = frozenset(os.listdir(f"{objects_dir(self.repo)}/{oid[:2]}"))
                except OSError:  # no such fan-out directory: nothing loose there
                    names = frozenset()
                listed[oid[:2]] = names
            if oid[2:] not in names:
                return
        damage = check_loose(self.repo, oid)
        if damage:
            raise CorruptObjectError(oid, damage)

    def _odb(self, key: str, call: Callable[[str], tuple[Any, Any]]) -> tuple[Any, Any]:
        """``call(key)`` on the object database, after the loose-object guard. A miss or a read
        error is retried after the pack list is refreshed and orphan packs are indexed again, while
        the pack folder keeps changing (a merge or repack under way; at most :data:`_ATTEMPTS`
        attempts, a few ms apart), then raised as :class:`CorruptObjectError`."""
        self._guard(key)
        try:
            return call(key)
        except (KeyError, pygit2.GitError, ValueError, OSError, MemoryError):
            pass  # the retries below (the pack directory is looked at only after a miss)
        pack_dir = os.path.join(objects_dir(self.repo), "pack")
        # taken after the first miss, before the pack list is refreshed: the refresh sees at least
        # what this stamp saw, so an unchanged stamp after a second miss means nothing moved since
        seen = _stamp(pack_dir)
        refresh_packs(self.repo)
        for attempt in range(1, _ATTEMPTS):
            try:
                return call(key)
            except (KeyError, pygit2.GitError, ValueError, OSError, MemoryError) as exc:
                error: Exception = exc
                reason = ("missing from the object database" if isinstance(exc, KeyError) else
                          # libgit2 allocates what a loose object's header claims
                          "unreadable: its size does not fit in memory (a damaged header can claim any size)"
                          if isinstance(exc, MemoryError) else f"unreadable: {exc}")
            repaired = bool(reindex_orphans(os.path.join(objects_dir(self.repo), "pack")))
            now = _stamp(pack_dir)
            if attempt == _ATTEMPTS - 1 or (not repaired and now == seen):
                check_present(self.repo.path)
                raise CorruptObjectError(key, reason) from error
            seen = now
            time.sleep(0.001 * attempt)
            refresh_packs(self.repo)
        raise AssertionError("unreachable")  # pragma: no cover

    def read(self, oid: str | pygit2.Oid, expect: ObjectType | None = None) -> tuple[ObjectType, bytes]:
        """The type and raw body of an object, checked: present, undamaged, of type ``expect``."""
        key = str(oid)
        kind, data = self._odb(key, self.repo.odb.read)
        kind = _KINDS.get(kind) or ObjectType(kind)
        if expect is not None and kind != expect:
            raise CorruptObjectError(key, f"expected a {_KIND_NAMES[expect]}, found {_KIND_NAMES.get(kind, kind)}")
        return kind, data

    def header(self, oid: str | pygit2.Oid) -> tuple[ObjectType, int]:
        """The type and size of an object without reading its body."""
        kind, size = self._odb(str(oid), self.repo.odb.read_header)
        return _KINDS.get(kind) or ObjectType(kind), int(size)

    def exists(self, oid: str) -> bool:
        """Whether the object database has ``oid`` (not checked for damage); a miss is retried as
        :meth:`header` retries one."""
        try:
            if oid in self.repo.odb:
                return True
        except (pygit2.GitError, ValueError, OSError):
            pass
        try:
            self.header(oid)
        except CorruptObjectError:
            return False
        return True

    def blob(self, oid: str | pygit2.Oid) -> bytes:
        """The bytes of a blob."""
        return self.read(oid, ObjectType.BLOB)[1]

    def tree(self, oid: str | pygit2.Oid) -> TreeData:
        """A parsed tree."""
        key = str(oid)
        return parse_tree(key, self.read(key, ObjectType.TREE)[1])

    def commit(self, oid: str | pygit2.Oid) -> CommitData:
        """A parsed commit."""
        key = str(oid)
        return parse_commit(key, self.read(key, ObjectType.COMMIT)[1])

    def first_parents(self, tip: str | None) -> Iterator[CommitData]:
        """The commits from ``tip`` down its first parents, newest first, each once (a loop in a
        damaged history ends the walk)."""
        seen: set[str] = set()
        oid = tip
        while oid is not None and oid not in seen:
            seen.add(oid)
            commit = self.commit(oid)
            yield commit
            oid = commit.parent_ids[0] if commit.parent_ids else None

    def is_ancestor(self, ancestor: str, descendant: str) -> bool:
        """Whether ``ancestor`` is reachable from ``descendant`` through parents (or equal)."""
        seen: set[str] = set()
        todo = [descendant]
        while todo:
            oid = todo.pop()
            if oid == ancestor:
                return True
            if oid in seen:
                continue
            seen.add(oid)
            todo.extend(self.commit(oid).parent_ids)
        return False

    def walk_tree(self, oid: str, max_depth: int) -> Iterator[tuple[str, TreeItem]]:
        """Every entry below a tree as ``(path, item)``, depth first, iteratively; a tree nested
        deeper than ``max_depth`` is a :class:`CorruptObjectError` (hostile trees end cleanly)."""
        todo: list[tuple[str, str, int]] = [("", oid, 0)]
        while todo:
            prefix, tree_id, depth = todo.pop()
            if depth > max_depth:
                raise CorruptObjectError(tree_id, f"tree nested deeper than {max_depth} levels")
            for item in self.tree(tree_id):
                path = f"{prefix}{item.name}"
                yield path, item
                if item.filemode == MODE_TREE:
                    todo.append((path + "/", item.id, depth + 1))


def _stamp(directory: str) -> tuple[int, int] | None:
    """Changes whenever a file is added to, renamed in or removed from ``directory``."""
    try:
        st = os.stat(directory)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_ino


def refresh_packs(repo: pygit2.Repository) -> None:
    """Make libgit2 rescan the pack folder now (it adds packs written by other processes)."""
    for backend in repo.odb.backends:
        try:
            backend.refresh()
        except (pygit2.GitError, OSError):
            pass


def _is_hex(text: str) -> bool:
    return all(c in "0123456789abcdef" for c in text.lower())


def expand_id(repo: pygit2.Repository, ref: str) -> str:
    """Expand a full id or unique prefix (4+ hex digits) to a full commit id."""
    if len(ref) < 4 or len(ref) > 40 or not _is_hex(ref):
        raise InvalidReferenceError(
            ref, "expected a checkpoint id, a unique prefix of 4+ hex digits, or node:NAME")
    if len(ref) < 40:
        # libgit2 rescans the pack folder only on a miss: a prefix that one known pack matches would
        # hide a newer pack's object with the same prefix (a wrong answer, or a missed ambiguity)
        refresh_packs(repo)
    try:
        oid = str(repo.expand_id(ref.lower()))
    except KeyError:
        raise CheckpointNotFound(ref) from None
    except (ValueError, pygit2.GitError) as exc:
        if "ambiguous" in str(exc).lower():
            raise AmbiguousReferenceError(ref, [(o, "") for o in ambiguous_ids(repo, ref)]) from None
        raise CheckpointNotFound(ref) from None
    return oid


#: Candidates of an ambiguous short id listed at most (:func:`ambiguous_ids`).
AMBIGUOUS_LISTED = 100


def ambiguous_ids(repo: pygit2.Repository, prefix: str, limit: int = AMBIGUOUS_LISTED) -> list[str]:
    """Every object id starting with ``prefix`` (at most ``limit``, sorted), as git lists the
    candidates of an ambiguous short id. libgit2 reports only that a prefix is ambiguous, so this
    asks ``git rev-parse --disambiguate`` (called only once a prefix proved ambiguous); an empty
    list when git cannot say."""
    try:
        out = command.run_git(repo.path, ["rev-parse", f"--disambiguate={prefix.lower()}"])
    except GitStateError:  # no usable git: the error stands without its candidates
        return []
    ids = sorted(line.strip() for line in out.stdout.splitlines() if _is_hex(line.strip()))
    return ids[:limit]
