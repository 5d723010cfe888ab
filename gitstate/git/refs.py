"""Every write of a gitstate ref: a compare-and-swap under git's own ref lock, logged in the ref's
reflog, retried with jittered backoff while another writer holds the lock, with recovery of stale
``.lock`` files left by a killed process.

Nothing here writes a ref unconditionally: :func:`compare_and_swap` takes the value the caller
expects (``None`` for "must not exist yet") and raises :class:`ConflictError` when the ref holds
something else. Reflogs are created on first write because git only logs ``refs/agentos/*`` when the
log file exists."""

from __future__ import annotations

import functools
import os
import random
import subprocess
import time
from dataclasses import dataclass

import pygit2

from gitstate.errors import ConflictError, CorruptObjectError, LockTimeoutError, StoreWriteError
from gitstate.git import lockfile

DEFAULT_LOCK_TIMEOUT = 10.0  # seconds a writer waits for a held lock before giving up
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


class _LockBusy(OSError):
    """git could not take a lock another writer holds."""


def _delete(repo: pygit2.Repository, common_dir: str, name: str, expected: str | None) -> None:
    """Delete ``name`` if it holds ``expected``: through ``git update-ref -d <ref> <old>``.

    A narrow fallback to the git command, on purpose: libgit2 1.9 rewrites ``packed-refs`` from a
    copy it read before taking ``packed-refs.lock``, so two processes deleting packed refs (or one
    deleting while ``git gc`` packs) can bring deleted refs back or drop others; git re-reads the
    file under the lock. Updates and creations never touch ``packed-refs`` and stay in libgit2."""
    if expected is None:
        actual = read_ref(repo, name)
        if actual is not None:
            raise ConflictError(name, None, actual)
        return
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    done = subprocess.run(["git", "--git-dir", common_dir, "update-ref", "--no-deref", "-d", name, expected],
                          capture_output=True, text=True, env=env, check=False)
    if done.returncode == 0:
        return
    err = done.stderr.strip()
    low = err.lower()
    if ".lock" in low and ("exists" in low or "unable to create" in low):
        raise _LockBusy(err)
    if "permission denied" in low or "read-only" in low:
        raise PermissionError(err)
    actual = read_ref(repo, name)
    if actual != expected:
        raise ConflictError(name, expected, actual)
    raise StoreWriteError(common_dir, err or f"git update-ref -d {name} failed")


def _is_lock_error(exc: BaseException) -> bool:
    text = str(exc).lower()
    return "lock" in text or "exists" in text


def compare_and_swap(
    repo: pygit2.Repository,
    common_dir: str,
    name: str,
    expected: str | None,
    new: str | None,
    message: str,
    *,
    lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
    stale_lock_age: float = DEFAULT_STALE_LOCK_AGE,
) -> None:
    """Move ``name`` from ``expected`` to ``new`` (``None``: absent / delete), logged with ``message``.

    Raises :class:`ConflictError` when the ref does not hold ``expected``, :class:`LockTimeoutError`
    when another writer keeps it locked, :class:`StoreWriteError` when the repository is not
    writable. On any error the ref is unchanged."""
    deadline = time.monotonic() + lock_timeout
    delay = 0.001
    while True:
        try:
            if new is None:
                _delete(repo, common_dir, name, expected)
                return
            with repo.transaction() as tx:
                tx.lock_ref(name)
                actual = read_ref(repo, name)
                if actual != expected:
                    raise ConflictError(name, expected, actual)
                _ensure_reflog(common_dir, name)
                tx.set_target(name, new, message=message)
            return
        except (ConflictError, CorruptObjectError, StoreWriteError):
            raise
        except (pygit2.GitError, OSError) as exc:
            if isinstance(exc, PermissionError) or "permission" in str(exc).lower() or "read-only" in str(exc).lower():
                raise StoreWriteError(common_dir, str(exc)) from exc
            if not _is_lock_error(exc):
                raise StoreWriteError(common_dir, str(exc)) from exc
            if break_stale_locks(common_dir, name, stale_lock_age):
                continue
            if time.monotonic() >= deadline:
                raise LockTimeoutError(name, lock_timeout) from exc
            time.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, 0.05)


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
        for path in held:
            try:
                os.unlink(path)
            except OSError:
                pass
        _remove_empty_dirs(root, {os.path.dirname(p) for p in held})
        return len(held)
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
