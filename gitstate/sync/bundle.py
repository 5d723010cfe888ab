"""Runs as git bundles: one file any git can read (``git bundle verify``, ``git fetch``), for CI
artifacts and air-gapped hand-over. Export writes the runs' refs with ``git bundle create``; import
fetches them from the file into the staging namespace and applies the same no-overwrite rules as
:func:`gitstate.remote.pull` (the remote's label is ``bundle``)."""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import tempfile
from collections.abc import Iterable

from gitstate.errors import RemoteError, RunNotFound, UsageError
from gitstate.format.names import NAMESPACE, run_prefix, worktree_prefix
from gitstate.git import command
from gitstate.git.objects import objects_dir
from gitstate.git.refs import list_refs
from gitstate.store.store import Store
from gitstate.sync.hooks import git_cwd
from gitstate.sync.remote import (
    FSCK_CONFIG,
    PullResult,
    broken_object,
    fetch_and_merge,
    is_safety_ref,
    run_git,
)
from gitstate.sync.secretscan import check_push

BUNDLE_LABEL = "bundle"


class BundleExport(list[str]):
    """The ref names :func:`export_bundle` wrote (a list, sorted), with ``left_out``: the refs it
    did not write because they stay local (the unsaved-work safety branch ``restore-safety``)."""

    def __init__(self, refs: Iterable[str], left_out: Iterable[str] = ()) -> None:
        super().__init__(refs)
        self.left_out: list[str] = list(left_out)


def export_bundle(store: Store, runs: Iterable[str] | None, output: str | os.PathLike[str], *,
                  include_safety: bool = False, allow_secrets: Iterable[str] = ()) -> BundleExport:
    """Write a git bundle of the runs' refs (all runs of the worktree when ``runs`` is empty) to
    ``output`` and return the ref names it holds. The bundle is fetched into a scratch repository
    first (each object hashed, the refs' histories checked complete, as an import does), so a
    damaged object fails the export (:class:`RemoteError`) and ``output`` is left as it was. Raises :class:`RunNotFound` for an unknown run.
    The unsaved-work safety branch a restore writes (``restore-safety``, its node log too) holds
    files never checkpointed on purpose: it stays out (listed in :attr:`BundleExport.left_out`)
    unless ``include_safety``."""
    run_list = list(runs or [])
    refs: list[str] = []
    if run_list:
        for run_id in run_list:
            found = [name for name, _ in list_refs(store.repo, run_prefix(store.worktree, run_id))]
            if not found:
                raise RunNotFound(run_id, store.worktree)
            refs += found
    else:
        refs = [name for name, _ in list_refs(store.repo, worktree_prefix(store.worktree))]
        if not refs:
            raise UsageError(f"worktree {store.worktree!r} has no runs to export")
    left_out = [] if include_safety else sorted({name for name in refs if is_safety_ref(name)})
    chosen = sorted(set(refs) - set(left_out))
    if not chosen:
        raise UsageError("nothing to export: the runs hold only restore-safety branches, which stay local "
                         "unless you export with --include-safety")
    # written as a shell's > would: through a symbolic link (git would replace the link by a file),
    # and into a pipe or device by copying (git's lock file and rename would replace it)
    path = os.path.realpath(os.fspath(output))
    try:
        kind = os.stat(path).st_mode
    except OSError:
        kind = None
    names = "".join(f"{name}\n" for name in chosen)
    regular = kind is None or stat.S_ISREG(kind)
    if kind is not None and stat.S_ISDIR(kind):
        raise RemoteError(path, "write bundle", "is a directory")
    # staged beside the destination (renamed into place) or in a temporary folder (copied into a
    # pipe or device), and read back before it replaces anything
    try:
        folder = tempfile.TemporaryDirectory(prefix=".gitstate-bundle-", dir=os.path.dirname(path) if regular else None)
    except OSError as exc:
        raise RemoteError(path, "write bundle", exc.strerror or str(exc)) from exc
    with folder as tmp:
        staged = os.path.join(tmp, "runs.bundle")
        run_git(store, ["bundle", "create", "--quiet", staged, "--stdin"], action="write bundle", remote=path,
                stdin=names)
        _check_readable(staged, path)
        # a bundle leaves the machine as a push does: none holding a credential is written
        tips = [oid for name, oid in list_refs(store.repo, NAMESPACE) if name in set(chosen)]
        check_push(store, os.fspath(output), tips, (), allow_secrets, action="export to")
        try:
            if regular:
                os.replace(staged, path)
            else:
                with open(staged, "rb") as src, open(path, "wb") as dst:
                    shutil.copyfileobj(src, dst)
        except OSError as exc:
            raise RemoteError(path, "write bundle", exc.strerror or str(exc)) from exc
    return BundleExport(chosen, left_out)


def _check_readable(bundle: str, shown: str) -> None:
    """Fetch every ref of a written bundle into a scratch repository, as an import does: git
    hashes each object it holds and checks that the refs' histories are complete. A damaged object
    in the store (bytes that are not what its id names) is written into a bundle by ``git bundle
    create`` without a word and would only fail the import; here it fails the export
    (:class:`RemoteError`), before the file is written."""
    with tempfile.TemporaryDirectory(prefix="gitstate-bundle-check-") as scratch:
        for args in (["init", "--quiet", "--bare", scratch],
                     ["-C", scratch, "fetch", "--quiet", "--no-tags", "--no-write-fetch-head", bundle,
                      "refs/*:refs/*"]):
            done = command.run_git(None, args, cwd=scratch)
            if done.returncode != 0:
                raise RemoteError(shown, "write bundle", "the bundle does not read back, so the store holds a damaged "
                                  f"object (run git agentos verify): {command.last_line(done.stderr)}")


def import_bundle(store: Store, file: str | os.PathLike[str]) -> list[PullResult]:
    """Bring the runs of a bundle in (every ``refs/agentos/…`` it holds), fast-forward only; a
    branch that advanced on both sides keeps the bundle's line as ``<branch>@bundle``.
    :class:`RemoteError`, with nothing changed, when the file is not a whole git bundle (not a
    regular file, empty, not a bundle, its header or pack cut short or damaged) and what it is."""
    path = os.path.abspath(os.fspath(file))
    why = _not_a_bundle(path)
    if why:
        raise RemoteError(path, "read bundle", why)
    run_git(store, ["bundle", "verify", "--quiet", path], action="verify bundle", remote=path)
    check_bundle_objects(store, path)
    return fetch_and_merge(store, path, BUNDLE_LABEL, [NAMESPACE], action="import bundle")


def check_bundle_objects(store: Store, path: str) -> None:
    """Run git's object checks over the pack of the bundle at ``path`` (a whole bundle, see
    :func:`_not_a_bundle`) before anything of it enters the repository: :class:`BrokenObjectError`
    when ``git fsck`` would report an object it holds. ``git fetch`` from a bundle runs no object
    checks before git 2.46 (``fetch.fsckObjects`` covers only transports), so the pack goes through
    ``git index-pack --strict`` into a temporary object directory, with the repository's objects
    as alternates (a bundle's pack may be thin), which is then deleted: the import costs one more
    indexing of the pack."""
    action = "import bundle"
    with open(path, "rb") as header:
        while header.readline(_MAX_LINE) not in (b"\n", b""):  # the header, up to its empty line
            pass
        start = header.tell()
    with open(path, "rb", buffering=0) as fh, tempfile.TemporaryDirectory(prefix="gitstate-bundle-fsck-") as scratch:
        fh.seek(start)  # unbuffered: git reads the pack from exactly here
        os.mkdir(os.path.join(scratch, "pack"))
        env = {"GIT_OBJECT_DIRECTORY": scratch, "GIT_ALTERNATE_OBJECT_DIRECTORIES": objects_dir(store.repo),
               "GIT_QUARANTINE_PATH": scratch}
        loc = store.location
        done = command.run_git(loc.git_dir, [*FSCK_CONFIG, "index-pack", "--strict", "--fix-thin", "--stdin"],
                               cwd=git_cwd(store), stdin_file=fh, env=env)
    if done.returncode != 0:
        raise broken_object(path, action, done.stderr) or RemoteError(
            path, action, command.last_line(done.stderr) or f"git index-pack exited {done.returncode}")


_SIGNATURES = (b"# v2 git bundle\n", b"# v3 git bundle\n")
_HASHES = {"sha1": 20, "sha256": 32}
_MAX_LINE = 1 << 16  # a header line: an object id and a ref name


def _not_a_bundle(path: str) -> str | None:
    """Why ``path`` is not a whole git bundle file, or None: checked before git reads it, because
    ``git bundle verify`` reads only the header (a bundle whose header or pack was cut short
    passed it, and importing it said "no such file", imported nothing without a word, or failed
    with git's "index-pack died")."""
    try:
        st = os.stat(path)
    except OSError as exc:
        return "no such file" if isinstance(exc, FileNotFoundError) else (exc.strerror or str(exc))
    if stat.S_ISDIR(st.st_mode):
        return "not a git bundle: a directory"
    if not stat.S_ISREG(st.st_mode):
        kind = ("a pipe" if stat.S_ISFIFO(st.st_mode) else "a character device" if stat.S_ISCHR(st.st_mode)
                else "a block device" if stat.S_ISBLK(st.st_mode) else "a socket")
        return f"not a git bundle: {kind}, not a regular file (save the bundle to a file first)"
    if st.st_size == 0:
        return "not a git bundle: the file is empty"
    try:
        with open(path, "rb") as fh:
            first = fh.readline(64)
            if first not in _SIGNATURES:
                return "not a git bundle: it does not start with '# v2 git bundle' or '# v3 git bundle'"
            hash_size = _HASHES["sha1"]
            while True:  # capabilities (v3), prerequisites and refs, up to an empty line
                line = fh.readline(_MAX_LINE)
                if not line.endswith(b"\n"):
                    if len(line) == _MAX_LINE:
                        return "not a git bundle: a header line is too long"
                    return "truncated bundle: its header ends before the pack (the file was cut short)"
                if line == b"\n":
                    break
                if line.startswith(b"@object-format="):
                    hash_size = _HASHES.get(line[len(b"@object-format="):].strip().decode("ascii", "replace"), 0)
                    if not hash_size:
                        return f"unsupported bundle: object format {line.strip().decode('ascii', 'replace')!r}"
            size = st.st_size - fh.tell()
            if size < 12 + hash_size or fh.read(4) != b"PACK":
                return "truncated or damaged bundle: no whole pack after its header"
            fh.seek(-4, os.SEEK_CUR)
            digest = hashlib.sha256() if hash_size == 32 else hashlib.sha1()  # noqa: S324 - git's checksum
            left = size - hash_size
            while left > 0:
                chunk = fh.read(min(left, 1 << 20))
                if not chunk:
                    break
                digest.update(chunk)
                left -= len(chunk)
            if left or digest.digest() != fh.read(hash_size):
                return "truncated or damaged bundle: its pack's checksum does not match (the file was cut short or changed)"
    except OSError as exc:
        return f"cannot read it: {exc.strerror or exc}"
    return None
