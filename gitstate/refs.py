"""Every write of a gitstate ref: a compare-and-swap under git's own ref lock, logged in the ref's
reflog, retried with jittered backoff while another writer holds the lock, with recovery of stale
``.lock`` files left by a killed process.

Nothing here writes a ref unconditionally: :func:`compare_and_swap` takes the value the caller
expects (``None`` for "must not exist yet") and raises :class:`ConflictError` when the ref holds
something else. Reflogs are created on first write because git only logs ``refs/agentos/*`` when the
log file exists."""

from __future__ import annotations

import os
import random
import time
from dataclasses import dataclass

import pygit2

from .errors import ConflictError, CorruptObjectError, LockTimeoutError, StoreWriteError

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


def _lock_paths(common_dir: str, name: str) -> list[str]:
    return [os.path.join(common_dir, *name.split("/")) + ".lock", os.path.join(common_dir, "packed-refs.lock")]


def break_stale_locks(common_dir: str, name: str, max_age: float) -> bool:
    """Remove ``.lock`` files of this ref (and packed-refs) older than ``max_age`` seconds.

    A lock is taken aside by an atomic rename before it is deleted, so a lock that a live writer
    created in the meantime is never removed: if the file we took aside turns out to be fresh, it is
    put back."""
    broke = False
    for path in _lock_paths(common_dir, name):
        try:
            if time.time() - os.stat(path).st_mtime < max_age:
                continue
            aside = f"{path}.stale.{os.getpid()}.{random.getrandbits(32):08x}"
            os.rename(path, aside)
        except FileNotFoundError:
            continue
        except OSError:
            continue
        try:
            if time.time() - os.stat(aside).st_mtime < max_age:
                try:
                    os.link(aside, path)  # fails if someone locked again meanwhile: then theirs stands
                except OSError:
                    pass
            else:
                broke = True
        finally:
            try:
                os.unlink(aside)
            except OSError:
                pass
    return broke


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
            with repo.transaction() as tx:
                tx.lock_ref(name)
                actual = read_ref(repo, name)
                if actual != expected:
                    raise ConflictError(name, expected, actual)
                if new is None:
                    tx.remove(name)
                else:
                    _ensure_reflog(common_dir, name)
                    tx.set_target(name, new, message=message)
            return
        except (ConflictError, CorruptObjectError):
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
