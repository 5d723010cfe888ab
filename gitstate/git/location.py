"""Finding the repository a store lives in, and which worktree it is scoped to.

Order: ``AGENTOS_REPO`` (empty means unset, ``~`` expanded) overrides everything; otherwise
``GIT_DIR`` is honoured as git honours it; otherwise the repository is discovered upwards from the
given path or the current directory. Outside any repository it fails closed with
:class:`NotARepositoryError`, whose message names ``AGENTOS_REPO``.

The work tree is git's. ``GIT_WORK_TREE`` wins (a bare repository's too). A discovered
repository's is then the first folder on the way up whose ``.git`` leads to it (a directory, a link
to one, or a file naming the git dir elsewhere; a ``.git`` that is no repository is passed, as git
passes it); searched from inside a git dir there is none (opened bare: git says "this operation
must be run in a work tree") unless the git dir has ``core.worktree``; ``AGENTOS_REPO`` (or a path)
naming a ``.git`` means its folder. ``GIT_DIR`` must name the git dir itself (no search, as git);
its work tree is the git dir's ``core.worktree``, else the current directory, whatever the git
dir's name or place. Paths given are resolved on disk as git resolves them (``link/..`` is the
link target's parent). Not followed: ``core.worktree`` set in ``config.worktree`` or through
``include.path`` (libgit2 reads the first not, the second where git does not)."""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass

import pygit2
from pygit2.enums import RepositoryOpenFlag

from gitstate.errors import (
    NotARepositoryError,
    RepositoryGoneError,
    SpecialFileError,
    UnsupportedRepositoryError,
)
from gitstate.git.refnames import encode_component

MAIN_WORKTREE = "main"
LINKED_PREFIX = "wt-"


@dataclass(frozen=True)
class Location:
    """Where a store lives: the git dir of its worktree, the shared (common) git dir, the work tree
    (``None`` for a bare repository) and the worktree key used in ref names."""

    git_dir: str
    common_dir: str
    workdir: str | None
    worktree: str


def _unsupported_feature(git_dir: str, message: str) -> str | None:
    text = message.lower()
    config = ""
    try:
        with open(os.path.join(git_dir, "config"), encoding="utf-8", errors="replace") as fh:
            config = fh.read().lower()
    except OSError:
        pass
    if "object format" in text or re.search(r"objectformat\s*=\s*sha256", config):
        return "the SHA-256 object format"
    if "refstorage" in text or "reftable" in text or re.search(r"refstorage\s*=\s*reftable", config):
        return "the reftable ref storage format"
    if "extension" in text:
        return f"a repository extension libgit2 does not support ({message.strip()})"
    return None


def _open(path: str, bare: bool = False, exact: bool = False) -> pygit2.Repository:
    flags = RepositoryOpenFlag(0)
    if bare:
        flags |= RepositoryOpenFlag.BARE
    if exact:  # the git dir itself: no search upwards, no `/.git` appended
        flags |= RepositoryOpenFlag.NO_SEARCH | RepositoryOpenFlag.NO_DOTGIT
    try:
        return pygit2.Repository(path, flags) if flags else pygit2.Repository(path)
    except (pygit2.GitError, ValueError, KeyError) as exc:
        feature = _unsupported_feature(path if os.path.isdir(path) else os.path.dirname(path), str(exc))
        if feature is None and os.path.isdir(os.path.join(path, ".git")):
            feature = _unsupported_feature(os.path.join(path, ".git"), str(exc))
        if feature:
            raise UnsupportedRepositoryError(path, feature) from exc
        raise NotARepositoryError(path, str(exc).strip() or None) from exc


def _is_gitfile(path: str) -> bool:
    """Whether ``path`` is a ``.git`` file naming a git dir elsewhere (``gitdir: <path>``, as a
    linked worktree or a submodule has): git opens the repository it names."""
    try:
        with open(path, "rb") as fh:
            return fh.read(8) == b"gitdir: "
    except OSError:
        return False


#: Files of a git dir that libgit2 (and git) open as plain files when they open the repository, read
#: its refs, its index or its ignore and attribute rules: a FIFO in one's place makes that open wait
#: for a writer for ever (git's too), so it is refused first, in bounded time.
READ_AS_FILES = ("HEAD", "config", "config.worktree", "commondir", "gitdir", "index", "packed-refs", "shallow",
                 "info/grafts", "info/exclude", "info/attributes", "info/sparse-checkout",
                 "objects/info/alternates", "objects/info/commit-graph", "objects/pack/multi-pack-index")


def _special(path: str) -> str | None:
    """What ``path`` is when it exists and is neither a file nor a directory (through links, as
    libgit2 opens it): ``"a FIFO"``, ``"a socket"``, ``"a device"``; else ``None``."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    return "a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else "a device"


def check_git_files(git_dir: str) -> None:
    """Raise :class:`UnsupportedRepositoryError` when a FIFO, socket or device is where ``git_dir``
    (or its common dir) keeps a file git reads (:data:`READ_AS_FILES`)."""
    dirs = [git_dir]
    commondir = os.path.join(git_dir, "commondir")
    if _special(commondir) is None and os.path.isfile(commondir):
        try:
            with open(commondir, encoding="utf-8", errors="replace") as fh:
                dirs.append(os.path.join(git_dir, fh.read(4096).strip()))
        except OSError:
            pass
    for folder in dirs:
        for name in READ_AS_FILES:
            kind = _special(os.path.join(folder, name))
            if kind is not None:
                raise SpecialFileError(git_dir.rstrip(os.sep), name, kind)


def _upwards(start: str) -> Iterator[str]:
    """The folders a search from ``start`` looks at, in order: ``start`` (its folder when it is
    not a directory), then each parent up to the root."""
    folder = start if os.path.isdir(start) else os.path.dirname(start)
    while True:
        yield folder
        parent = os.path.dirname(folder)
        if parent == folder:
            return
        folder = parent


def _check_dot_gits(start: str) -> None:
    """Refuse a FIFO, socket or device named ``.git`` on the way up from ``start`` (a search would
    open it as a `.git` file and wait for ever)."""
    for folder in _upwards(start):
        kind = _special(os.path.join(folder, ".git"))
        if kind is not None:
            raise NotARepositoryError(start, f"{os.path.join(folder, '.git')} is {kind}, not a repository")


def _explain_missing(start: str) -> None:
    """Where a search found no repository: a ``.git`` directory on the way up that libgit2 did not
    take because a FIFO, socket or device is in place of one of its files (``HEAD``) is reported
    as such (:func:`check_git_files`)."""
    for folder in _upwards(start):
        if os.path.isdir(os.path.join(folder, ".git")):
            check_git_files(os.path.join(folder, ".git"))
            return


def _discover(start: str, via: str | None = None, named: bool = False) -> pygit2.Repository:
    if not os.path.exists(start):
        raise NotARepositoryError(start, f"{via} points to a path that does not exist" if via else "no such path")
    if via and not os.path.isdir(start):
        kind = _special(start)  # never opened: a FIFO would wait for a writer
        if kind is not None or not _is_gitfile(start):
            raise NotARepositoryError(start, f"{via} points to {kind or 'a file'}, not to a repository's directory")
    _check_dot_gits(start)
    try:
        found = pygit2.discover_repository(start)
    except (pygit2.GitError, ValueError) as exc:
        feature = _unsupported_feature(os.path.join(start, ".git"), str(exc))
        if feature:
            raise UnsupportedRepositoryError(start, feature) from exc
        found = None
    if not found:
        _explain_missing(start)
        raise NotARepositoryError(start)
    check_git_files(found)
    work_tree = _discovered_work_tree(start, found, named or via is not None)
    if work_tree is None:
        # started inside a git dir that names no work tree: git has none there either ("this
        # operation must be run in a work tree"); its parent is not one (a separate git dir's)
        repo = _open(found, bare=not _has_core_worktree(found))
    else:
        repo = _open(work_tree)  # libgit2 follows its `.git` (a directory, a link to one, or a file)
        if os.path.realpath(repo.path) != os.path.realpath(found):  # pragma: no cover - the same search
            return _open(found)
    if work_tree is not None and not repo.is_bare and not _has_core_worktree(found) \
            and os.path.realpath(repo.workdir or "") != os.path.realpath(work_tree):
        repo.workdir = work_tree  # `.git` a link to a git dir elsewhere: libgit2 took that dir's parent
    return repo


def _discovered_work_tree(start: str, found: str, named: bool) -> str | None:
    """The work tree git uses for a repository found searching upwards from ``start`` (its git dir
    ``found``): the first folder on the way up whose ``.git`` leads to ``found`` (a directory, a
    link to one, or a file naming the git dir elsewhere); ``None`` when the search started inside
    the git dir itself (git: "this operation must be run in a work tree"). ``named``: ``start`` was
    given by name (``AGENTOS_REPO``, a path): a ``.git`` named so is its folder's, where that
    folder's ``.git`` leads to ``found``."""
    target = os.path.realpath(found)
    if named and os.path.basename(start) == ".git" and _dot_git_target(os.path.dirname(start)) == target:
        return os.path.dirname(start)
    for folder in _upwards(start):
        if _dot_git_target(folder) == target:  # a `.git` that is not a repository is passed, as git passes it
            return folder
        if os.path.realpath(folder) == target:
            return None
    return None  # pragma: no cover - libgit2 found the repository on this way up


def _dot_git_target(folder: str) -> str | None:
    """The real path of the git dir ``folder/.git`` leads to (a directory, a link to one, or a
    ``gitdir:`` file; it is no FIFO: :func:`_check_dot_gits` ran), or ``None``."""
    dot_git = os.path.join(folder, ".git")
    if os.path.isdir(dot_git):
        return os.path.realpath(dot_git)
    if not _is_gitfile(dot_git):
        return None
    try:
        with open(dot_git, encoding="utf-8", errors="surrogateescape") as fh:
            named = fh.readline(4096)[len("gitdir: "):].strip()
    except OSError:
        return None
    return os.path.realpath(os.path.join(folder, named)) if named else None


def _has_core_worktree(git_dir: str) -> bool:
    try:
        return "core.worktree" in pygit2.Config(os.path.join(git_dir, "config"))
    except (pygit2.GitError, OSError, ValueError):
        return False


def _physical(path: str) -> str:
    """``path`` made absolute as git resolves it on disk: ``..`` after a symbolic link is the
    link target's parent (``os.path.abspath`` would drop the link textually); the last component
    itself is kept (a ``.git`` named may be a link)."""
    full = path if os.path.isabs(path) else os.path.join(_cwd(), path)
    head, tail = os.path.split(full)
    if tail in ("", ".", ".."):
        return os.path.realpath(full)
    return os.path.join(os.path.realpath(head), tail)


def _cwd() -> str:
    try:
        return os.getcwd()
    except OSError as exc:  # the current directory was deleted
        raise NotARepositoryError(".", f"the current directory is gone ({exc.strerror})") from None


def _work_tree_env(repo: pygit2.Repository, value: str) -> None:
    """Make ``GIT_WORK_TREE`` (``value``) the work tree of ``repo``, as git does."""
    work_tree = os.path.realpath(value if os.path.isabs(value) else os.path.join(_cwd(), value))
    if not os.path.isdir(work_tree):
        raise NotARepositoryError(work_tree, "GIT_WORK_TREE names no directory")
    repo.workdir = work_tree  # a bare repository's too, as git


def open_repository(path: str | os.PathLike[str] | None = None) -> pygit2.Repository:
    """Open the repository for a store, following the documented lookup order."""
    override = os.environ.get("AGENTOS_REPO", "")
    if override:
        return _discover(_physical(os.path.expanduser(override)), via="AGENTOS_REPO")
    start = _physical(os.fspath(path)) if path is not None else _cwd()
    git_dir = os.environ.get("GIT_DIR")
    work_tree = os.environ.get("GIT_WORK_TREE")
    if git_dir:
        # pygit2 ignores GIT_DIR, and libgit2's FROM_ENV flag only reads it when no path is given,
        # which pygit2 cannot express: open the named git dir itself (no search, no `/.git`
        # appended: git takes GIT_DIR as the git dir or refuses it)
        named = _physical(os.path.expanduser(git_dir))
        kind = _special(named)
        if kind is not None:
            raise NotARepositoryError(named, f"GIT_DIR names {kind}")
        if os.path.isdir(named):
            check_git_files(named)
        repo = _open(named, exact=True)
        if work_tree:
            _work_tree_env(repo, work_tree)
        elif not repo.is_bare and not _has_core_worktree(repo.path):
            # git's rule: GIT_DIR with neither GIT_WORK_TREE nor core.worktree makes the current
            # directory the top of the work tree, whatever the git dir's name or place (libgit2
            # would take the git dir's parent)
            repo.workdir = _cwd()
        return repo
    repo = _discover(start, named=path is not None)
    if work_tree:  # git: found by searching, with GIT_WORK_TREE the work tree
        _work_tree_env(repo, work_tree)
    return repo


def locate(repo: pygit2.Repository) -> Location:
    """Describe an open repository: its git dirs, work tree and worktree key."""
    git_dir = os.path.realpath(repo.path)
    commondir_file = os.path.join(git_dir, "commondir")
    if os.path.isfile(commondir_file):
        with open(commondir_file, encoding="utf-8") as fh:
            rel = fh.read().strip()
        common = os.path.realpath(os.path.join(git_dir, rel))
        # A linked worktree's admin dir is <common>/worktrees/<id>; the id is unique per repository.
        worktree = LINKED_PREFIX + encode_component(os.path.basename(git_dir))
    else:
        common = git_dir
        worktree = MAIN_WORKTREE
    workdir = None if repo.is_bare or repo.workdir is None else os.path.realpath(repo.workdir)
    return Location(git_dir=git_dir, common_dir=common, workdir=workdir, worktree=worktree)


def check_present(git_dir: str) -> None:
    """Raise :class:`RepositoryGoneError` when the repository at ``git_dir`` no longer exists (its
    ``HEAD``, which every repository has and gitstate never writes, is gone): asked where a read
    found nothing, so that a deleted repository is reported as such, never as an empty store or
    missing objects."""
    if not os.path.isfile(os.path.join(git_dir, "HEAD")):
        raise RepositoryGoneError(git_dir.rstrip(os.sep))
