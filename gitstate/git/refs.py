"""Refs, with a public contract named by what it guarantees (as dulwich names it):
:func:`read_ref`, :func:`list_refs`, :func:`reflog`, and the three compare-and-swap writes
:func:`set_if_equals`, :func:`add_if_new` and :func:`remove_if_equals`. Nothing here writes a ref
unconditionally. Each write is one attempt under git's own ``<ref>.lock`` protocol, logged in the
ref's reflog (written directly, since git only logs ``refs/agentos/*`` when the log exists); the
store's transaction owns the one retry loop. Also: recovery of stale ``.lock`` files left by killed
writers, and packing gitstate's loose refs into ``packed-refs`` without touching anyone else's."""

from __future__ import annotations

import functools
import os
import re
import time
from dataclasses import dataclass

import pygit2

from gitstate.errors import ConflictError, CorruptObjectError, GitStateError, StoreWriteError
from gitstate.git import lockfile
from gitstate.git.command import last_line, run_git
from gitstate.git.durability import fsync_dir
from gitstate.git.objects import write_all

DEFAULT_STALE_LOCK_AGE = 5.0  # a .lock older than this is taken as left by a killed writer


@dataclass(frozen=True)
class ReflogEntry:
    """One move of a ref, newest first in :func:`reflog`."""

    old: str | None
    new: str | None
    message: str
    time: int


def _hex_or_none(oid: pygit2.Oid | None) -> str | None:
    if oid is None:
        return None
    text = str(oid)
    return None if set(text) == {"0"} else text


def read_ref(repo: pygit2.Repository, name: str) -> str | None:
    """The object id a ref points at, or ``None`` when it does not exist."""
    try:
        ref = repo.references.get(name)
    except (pygit2.GitError, ValueError) as exc:
        raise CorruptObjectError(name, f"unreadable ref: {exc}") from exc
    if ref is None:
        return None
    target = ref.target
    if not isinstance(target, pygit2.Oid):
        raise CorruptObjectError(name, "symbolic ref where a checkpoint id was expected")
    return str(target)


def list_refs(repo: pygit2.Repository, prefix: str) -> list[tuple[str, str]]:
    """All direct refs whose name starts with ``prefix``, with their targets (symbolic ones skipped)."""
    out: list[tuple[str, str]] = []
    for ref in repo.references.iterator():
        name = ref.name
        if not name.startswith(prefix):
            continue
        target = ref.target
        if isinstance(target, pygit2.Oid):
            out.append((name, str(target)))
    return out


def reflog(repo: pygit2.Repository, name: str) -> list[ReflogEntry]:
    """The ref's reflog, newest entry first (empty when the ref or its log does not exist)."""
    ref = repo.references.get(name)
    if ref is None:
        return []
    return [
        ReflogEntry(_hex_or_none(e.oid_old), _hex_or_none(e.oid_new), e.message or "", e.committer.time)
        for e in ref.log()
    ]


def _ensure_reflog(common_dir: str, name: str) -> None:
    path = os.path.join(common_dir, "logs", *name.split("/"))
    if not os.path.exists(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "a"):
            pass


PACKED_LOCK_STALE_AGE = 120.0  # packed-refs.lock is held for whole batches by git and by pack_refs


def _lock_paths(common_dir: str, name: str, max_age: float) -> list[tuple[str, float]]:
    return [(os.path.join(common_dir, *name.split("/")) + ".lock", max_age),
            (os.path.join(common_dir, "packed-refs.lock"), max(max_age, PACKED_LOCK_STALE_AGE))]


def break_stale_locks(common_dir: str, name: str, max_age: float) -> bool:
    """Remove ``.lock`` files of this ref older than ``max_age`` seconds (``packed-refs.lock``:
    older than :data:`PACKED_LOCK_STALE_AGE`, since git holds it through whole batches).

    Through :func:`lockfile.break_stale`: a lock is taken aside by an atomic rename before it is
    deleted, so a lock that a live writer created in the meantime is never removed: if the file we
    took aside turns out to be fresh, it is put back."""
    broke = False
    for path, limit in _lock_paths(common_dir, name, max_age):
        if lockfile.break_stale(path, functools.partial(_older_than, limit=limit)):
            broke = True
    return broke


def _older_than(path: str, *, limit: float) -> bool:
    try:
        return time.time() - os.stat(path).st_mtime >= limit
    except FileNotFoundError:
        return False


def stale_locks(common_dir: str, max_age: float, prefix: str = "refs/agentos/") -> list[str]:
    """``.lock`` files under ``prefix`` (and ``packed-refs.lock``) older than ``max_age`` seconds:
    left by killed writers, they block git's own ``gc``/``pack-refs`` on refs nobody writes again."""
    root = os.path.join(common_dir, *prefix.rstrip("/").split("/"))
    found = [os.path.join(d, f) for d, _s, files in os.walk(root) for f in files if f.endswith(".lock")]
    packed = os.path.join(common_dir, "packed-refs.lock")
    if os.path.exists(packed):
        found.append(packed)
    now = time.time()
    out = []
    for path in found:
        limit = max(max_age, PACKED_LOCK_STALE_AGE) if path == packed else max_age
        try:
            if now - os.stat(path).st_mtime >= limit:
                out.append(path)
        except FileNotFoundError:
            continue
    return sorted(out)


def remove_stale_locks(common_dir: str, max_age: float, prefix: str = "refs/agentos/") -> list[str]:
    """Remove the locks :func:`stale_locks` finds (each moved aside first, so a lock a live writer
    took meanwhile is put back); returns the ones removed."""
    removed = []
    for path in stale_locks(common_dir, max_age, prefix):
        limit = max(max_age, PACKED_LOCK_STALE_AGE) if path.endswith("packed-refs.lock") else max_age
        if lockfile.break_stale(path, functools.partial(_older_than, limit=limit)):
            removed.append(path)
    return removed


class LockBusy(GitStateError):
    """Another writer holds the ref's lock (or ``packed-refs.lock``). Transient: the store's
    transaction retries it under its deadline and reports :class:`LockTimeoutError` when that passes;
    it never reaches a caller of the public API."""

    def __init__(self, name: str, detail: str = "") -> None:
        self.ref = name
        super().__init__(f"{name} is locked by another writer" + (f" ({detail})" if detail else ""))


class TransientRefError(GitStateError):
    """A ref write failed for a reason that goes away on retry: a directory removed or a file
    moved by a concurrent ``git pack-refs``/``gc`` between two steps of the protocol."""

    def __init__(self, name: str, detail: str) -> None:
        self.ref = name
        super().__init__(f"{name}: {detail}")


def _zero(oid: str | None) -> str:
    return oid if oid is not None else "0" * 40


def _read_loose_or_packed(common_dir: str, name: str, path: str) -> str | None:
    """The ref's value read from disk under its lock (loose file first, then ``packed-refs``)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return _packed_value(common_dir, name)
    try:
        raw = os.read(fd, 4096).strip()
    except IsADirectoryError:
        raise StoreWriteError(path, f"{name} cannot be written: refs exist below it") from None
    finally:
        os.close(fd)
    text = raw.decode("ascii", "replace")
    if text.startswith("ref:"):
        raise CorruptObjectError(name, "symbolic ref where a checkpoint id was expected")
    if _HEX40.fullmatch(text) is None:
        raise CorruptObjectError(name, "ref file does not hold an object id")
    return text


_HEX40 = re.compile(r"[0-9a-f]{40}")


_PACKED_CACHE: dict[str, tuple[tuple[int, int, int], dict[str, str]]] = {}


def _packed_value(common_dir: str, name: str) -> str | None:
    path = os.path.join(common_dir, "packed-refs")
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    key = (st.st_ino, st.st_size, st.st_mtime_ns)
    hit = _PACKED_CACHE.get(path)
    if hit is None or hit[0] != key:
        _header, entries = _read_packed(path)
        values = {n: lines[0].split(" ", 1)[0] for n, lines in entries.items()}
        _PACKED_CACHE[path] = hit = (key, values)
    return hit[1].get(name)


def set_if_equals(common_dir: str, name: str, old: str | None, new: str, message: str, *,
                  committer: tuple[str, str], fsync: bool = False, log: bool = True) -> None:
    """Compare-and-swap: move ``name`` from ``old`` (``None``: must not exist) to ``new``, with a
    reflog entry, by git's own file protocol: create ``<ref>.lock`` exclusively, read the value
    under the lock (loose file, else ``packed-refs``), compare, write the new value into the lock,
    append the reflog line, rename the lock over the ref. Compatible with git and libgit2 writers,
    which take the same lock. One attempt: raises :class:`ConflictError` (value differs),
    :class:`LockBusy` (lock held), :class:`TransientRefError` (a concurrent pack-refs moved things)
    or :class:`StoreWriteError` (not writable). On any error the ref is unchanged.

    Faster than libgit2's transaction here (about 0.3 ms against 1.4 ms on our test machine), and
    it never depends on the text of an error message. ``log=False`` writes no reflog line (for
    short-lived refs, such as the LangGraph saver's pending writes; git logs no ref outside
    ``refs/heads``, ``refs/remotes`` and ``refs/notes`` by default either)."""
    path = os.path.join(common_dir, *name.split("/"))
    lock = path + ".lock"
    try:
        fd = _create_lock(path, lock)
    except FileExistsError as exc:
        if os.path.isdir(lock):
            raise StoreWriteError(path, f"{name} cannot be written: refs exist below {name}.lock") from exc
        raise LockBusy(name) from exc  # held, or released a moment ago: either way, try again
    except (NotADirectoryError, FileNotFoundError) as exc:
        # a parent name is a ref file (refs a/b and a/b/c cannot both exist) -- or a concurrent
        # pack-refs removed the directory we just made: tell them apart by looking
        if any(os.path.isfile(p) for p in _parents(common_dir, name)):
            raise StoreWriteError(path, f"{name} cannot be written: a ref of a parent name exists") from exc
        raise TransientRefError(name, str(exc)) from exc
    except PermissionError as exc:
        raise StoreWriteError(path, str(exc)) from exc
    except OSError as exc:
        raise StoreWriteError(path, str(exc)) from exc
    renamed = False
    try:
        try:
            actual = _read_loose_or_packed(common_dir, name, path)
            if actual != old:
                raise ConflictError(name, old, actual)
            write_all(fd, f"{new}\n".encode("ascii"))
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        if log:
            _append_reflog(common_dir, name, old, new, message, committer, fsync)
        os.rename(lock, path)
        renamed = True
        if fsync:
            fsync_dir(os.path.dirname(path))
    except FileNotFoundError as exc:
        raise TransientRefError(name, str(exc)) from exc
    except PermissionError as exc:
        raise StoreWriteError(path, str(exc)) from exc
    except OSError as exc:
        raise StoreWriteError(path, str(exc)) from exc
    finally:
        if not renamed:
            try:
                os.unlink(lock)
            except OSError:
                pass


def add_if_new(common_dir: str, name: str, new: str, message: str, *, committer: tuple[str, str],
               fsync: bool = False) -> None:
    """Create ``name`` pointing at ``new``; :class:`ConflictError` if it exists."""
    set_if_equals(common_dir, name, None, new, message, committer=committer, fsync=fsync)


def _create_lock(path: str, lock: str) -> int:
    """Create ``lock`` exclusively (its directory first when missing: the common case, an existing
    directory, costs one system call instead of a ``makedirs`` walk)."""
    flags = os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC
    try:
        return os.open(lock, flags, 0o644)
    except FileNotFoundError:
        pass
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
    except FileExistsError as exc:
        # the parent name is a file: a ref (refs a/b and a/b/c cannot both exist), not a lock
        raise NotADirectoryError(str(exc)) from exc
    return os.open(lock, flags, 0o644)


def _parents(common_dir: str, name: str) -> list[str]:
    parts = name.split("/")
    return [os.path.join(common_dir, *parts[:i]) for i in range(2, len(parts))]


def _append_reflog(common_dir: str, name: str, old: str | None, new: str, message: str,
                   committer: tuple[str, str], fsync: bool) -> None:
    path = os.path.join(common_dir, "logs", *name.split("/"))
    who, email = committer
    text = " ".join(message.split())  # one line, as git writes it
    line = f"{_zero(old)} {new} {who} <{email}> {int(time.time())} +0000\t{text}\n"
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o644)
    except FileNotFoundError:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(path, flags, 0o644)
    try:
        write_all(fd, line.encode("utf-8", "surrogateescape"))
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)




def remove_if_equals(common_dir: str, name: str, old: str, message: str) -> None:
    """Delete ``name`` if it holds ``old`` (its reflog goes with it, as git does).

    A narrow fallback to the git command (``git update-ref --no-deref -d <ref> <old>``, with
    ``LC_ALL=C``), on purpose: a packed ref must be removed from ``packed-refs`` under
    ``packed-refs.lock`` with the file re-read under the lock; libgit2 1.9 rewrites it from a copy
    read before taking the lock, so concurrent deletes (or a ``git gc``) could bring deleted refs
    back. git's message is never parsed: a failure is classified by looking at the ref and its
    locks afterwards. Same errors as :func:`set_if_equals`."""
    done = run_git(common_dir, ["update-ref", "--no-deref", "-m", message, "-d", name, old])
    if done.returncode == 0:
        return
    path = os.path.join(common_dir, *name.split("/"))
    actual = _read_value(common_dir, name, path)
    if actual != old:
        raise ConflictError(name, old, actual)
    if os.path.exists(path + ".lock") or os.path.exists(os.path.join(common_dir, "packed-refs.lock")):
        raise LockBusy(name)
    if not os.access(os.path.dirname(path) if os.path.exists(os.path.dirname(path)) else common_dir, os.W_OK):
        raise StoreWriteError(common_dir, f"cannot delete {name}: the repository is not writable")
    raise StoreWriteError(common_dir, last_line(done.stderr) or f"git update-ref -d {name} failed")


def remove_transient_ref(common_dir: str, name: str, old: str, message: str) -> None:
    """Delete ``name``, a short-lived ref that is created once and never moved (the LangGraph
    saver's pending writes), if it holds ``old``; one already gone counts as deleted.

    Such a ref has one value for its whole life, so the only concurrent changes are another
    writer deleting it too and a ``pack-refs`` copying it: when it is loose only, reading its value
    and unlinking the file (and a reflog, if one exists) is enough, without git's ``<ref>.lock``
    and ``packed-refs.lock`` (which would cost four more file-system changes per delete). A
    ``pack-refs`` that copied the ref into ``packed-refs`` just before brings it back from there;
    callers tolerate that (a stale pending-writes ref is folded already, and deleted again later).
    A ref held in ``packed-refs`` goes through :func:`remove_if_equals`. A ref whose loose file
    is locked is reported busy, as :func:`set_if_equals` would."""
    path = os.path.join(common_dir, *name.split("/"))
    if _packed_value(common_dir, name) is not None:
        try:
            remove_if_equals(common_dir, name, old, message)
        except ConflictError as exc:
            if exc.actual is not None:
                raise
        return
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return
    except OSError as exc:
        raise StoreWriteError(path, str(exc)) from exc
    try:
        value = os.read(fd, 4096).strip().decode("ascii", "replace")
    except IsADirectoryError:
        raise StoreWriteError(path, f"{name} cannot be deleted: refs exist below it") from None
    finally:
        os.close(fd)
    if value != old:
        raise ConflictError(name, old, value if len(value) == 40 else None)
    if os.path.exists(path + ".lock"):
        raise LockBusy(name)
    try:
        os.unlink(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise StoreWriteError(path, str(exc)) from exc
    try:
        os.unlink(os.path.join(common_dir, "logs", *name.split("/")))
    except OSError:
        pass


def _read_value(common_dir: str, name: str, path: str) -> str | None:
    try:
        return _read_loose_or_packed(common_dir, name, path)
    except (StoreWriteError, CorruptObjectError):
        return None


PACKED_HEADER = "# pack-refs with: peeled fully-peeled sorted \n"


def _read_packed(path: str) -> tuple[str, dict[str, list[str]]]:
    """The header and ``{refname: [line, peeled lines…]}`` of a packed-refs file."""
    entries: dict[str, list[str]] = {}
    header = PACKED_HEADER
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as fh:
            lines = fh.readlines()
    except FileNotFoundError:
        return header, entries
    last: str | None = None
    for line in lines:
        if line.startswith("#"):
            header = line if "sorted" in line else line.rstrip("\n").rstrip() + " sorted \n"
        elif line.startswith("^") and last is not None:
            entries[last].append(line)
        elif line.strip():
            name = line.rstrip("\n").split(" ", 1)[1]
            entries[name] = [line]
            last = name
    return header, entries


def pack_refs(common_dir: str, prefix: str = "refs/agentos/", batch: int = 200) -> int:
    """Move the loose refs under ``prefix`` into ``packed-refs``, as ``git pack-refs`` does but for
    gitstate's namespace only (git 2.39 has no ``--include``; libgit2's compress packs the user's
    refs too). Returns how many refs were packed; stops early when another process holds
    ``packed-refs.lock``.

    Git's protocol, in batches so no lock is held long: take ``packed-refs.lock``, lock each loose
    ref of the batch before reading it (so no concurrent update or delete is lost or brought
    back), write the new file into the lock and rename it over ``packed-refs`` (after checking the
    lock is still ours), then remove the loose files and release their locks."""
    root = os.path.join(common_dir, *prefix.rstrip("/").split("/"))
    loose = []
    for dirpath, _dirs, files in os.walk(root):
        loose += [os.path.join(dirpath, f) for f in files if not f.endswith(".lock")]
    packed = 0
    for start in range(0, len(loose), batch):
        done = _pack_batch(common_dir, root, loose[start:start + batch])
        if done < 0:
            break
        packed += done
    return packed


def _pack_batch(common_dir: str, root: str, paths: list[str]) -> int:
    packed_path = os.path.join(common_dir, "packed-refs")
    lock_path = packed_path + ".lock"
    try:
        fd = os.open(lock_path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return -1
    renamed = False
    held: list[str] = []  # loose refs locked by us
    try:
        header, entries = _read_packed(packed_path)  # read under the lock, as git does
        for path in paths:
            try:
                ref_lock = os.open(path + ".lock", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except OSError:
                continue  # being updated right now: leave it loose
            os.close(ref_lock)
            held.append(path)
            try:
                with open(path, encoding="ascii", errors="replace") as fh:
                    value = fh.read().strip()
            except OSError:
                value = ""  # deleted meanwhile: nothing to pack
            if len(value) != 40 or any(c not in "0123456789abcdef" for c in value):
                held.pop()
                os.unlink(path + ".lock")  # gone, symbolic or odd: not ours to pack
                continue
            name = os.path.relpath(path, common_dir).replace(os.sep, "/")
            entries[name] = [f"{value} {name}\n"]
        if not held:
            return 0
        with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape") as fh:
            fd = -1
            fh.write(header)
            for name in sorted(entries, key=lambda n: n.encode("utf-8", "surrogateescape")):
                fh.writelines(entries[name])
            fh.flush()
            ours = os.fstat(fh.fileno()).st_ino
        if os.stat(lock_path).st_ino != ours:
            return -1  # our lock was broken and retaken by someone else: leave everything loose
        os.replace(lock_path, packed_path)
        renamed = True
        done = list(held)
        for path in done:
            for victim in (path, path + ".lock"):  # the loose ref, then our lock on it
                try:
                    os.unlink(victim)
                except OSError:
                    pass
        held.clear()
        _remove_empty_dirs(root, {os.path.dirname(p) for p in done})  # only empty once the locks are gone
        return len(done)
    finally:
        if fd >= 0:
            os.close(fd)
        for path in held:
            try:
                os.unlink(path + ".lock")
            except OSError:
                pass
        if not renamed:
            try:
                os.unlink(lock_path)  # only a lock we still own: after the rename it may be another's
            except OSError:
                pass


def _remove_empty_dirs(root: str, dirs: set[str]) -> None:
    """Remove now-empty ref directories below ``root`` (as git's pack-refs does), deepest first.
    A writer that recreates one concurrently just retries its lock."""
    for path in sorted(dirs, key=len, reverse=True):
        while path.startswith(root + os.sep):
            try:
                os.rmdir(path)
            except OSError:
                break
            path = os.path.dirname(path)


def count_loose_refs(common_dir: str, prefix: str = "refs/agentos/") -> int:
    """How many loose ref files exist under ``prefix``."""
    root = os.path.join(common_dir, *prefix.rstrip("/").split("/"))
    return sum(len([f for f in files if not f.endswith(".lock")]) for _d, _s, files in os.walk(root))
