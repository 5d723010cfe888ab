"""Finding the repository a store lives in, and which worktree it is scoped to.

git itself is asked: ``git rev-parse --absolute-git-dir --git-common-dir --show-toplevel``, run
where the store is looked for with the caller's ``GIT_*`` environment (``GIT_DIR``,
``GIT_WORK_TREE``, ``GIT_CEILING_DIRECTORIES``, ``safe.*`` settings...), so the git dir and the
work tree (or none) are git's in every layout, and where git finds no repository neither does
gitstate. That costs one git process the first time a place is asked in a process (1.4 ms at
best, 4 ms typical on a busy 2-core machine, where libgit2's own search took 0.3 ms); the answer
is remembered per process, keyed by the place, the environment and the identity of the
``.git``/``HEAD`` entries on the way up and of the git dir's own config files.
libgit2 then opens that git dir itself, bare, and is given git's work tree: its own search and its
reading of ``core.worktree`` never decide anything.

``AGENTOS_REPO`` (empty means unset, ``~`` expanded) overrides everything: git is asked in that
folder, without ``GIT_DIR``/``GIT_WORK_TREE``. Otherwise git is asked in the path given, or in the
current directory (always there when ``GIT_DIR`` is set: git takes it, and ``GIT_WORK_TREE``,
relative to the current directory). A ``.git`` named means its folder, a file named its folder
(``AGENTOS_REPO`` naming a file that is no ``.git`` file is refused). Where git finds no
repository, or names a work tree that is no directory (git refuses every work-tree command there),
:class:`NotARepositoryError` is raised; its message names ``AGENTOS_REPO``.

Before git is started, a FIFO, socket or device where git (or libgit2) would open a file on the way
up (a ``.git``, a ``HEAD``, the files of :data:`READ_AS_FILES`) is refused in one line: opening it
would wait for a writer for ever."""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass

import pygit2
from pygit2.enums import RepositoryOpenFlag

from gitstate.errors import (
    GitStateError,
    NotARepositoryError,
    RepositoryGoneError,
    SpecialFileError,
    UnsupportedRepositoryError,
)
from gitstate.git.command import check_git_version, last_line, run_git


@dataclass(frozen=True)
class Location:
    """Where a store lives: the git dir of its worktree, the shared (common) git dir, the work tree
    (``None`` for a bare repository) and, for a linked worktree, the id of its admin dir
    (``<common>/worktrees/<id>``; ``None`` for the main worktree)."""

    git_dir: str
    common_dir: str
    workdir: str | None
    linked_id: str | None


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
    """``start`` and each of its parents up to the root."""
    folder = start
    while True:
        yield folder
        parent = os.path.dirname(folder)
        if parent == folder:
            return
        folder = parent


def _identity(path: str) -> tuple[int, ...] | None:
    """What a cached answer remembers of ``path``: its inode, kind, and for a file its size and
    change time (a ``.git`` file or a config rewritten); ``None`` when it is not there."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if stat.S_ISDIR(st.st_mode):
        return (st.st_ino, st.st_mode)
    return (st.st_ino, st.st_mode, st.st_size, st.st_mtime_ns)


def _gitfile_target(path: str) -> str | None:
    """The git dir a ``.git`` file names (``gitdir: <path>``, relative to its folder, as a linked
    worktree or a submodule has), or ``None`` when ``path`` is no such file (never opened if it is
    a FIFO or another special file: that open would wait)."""
    if _special(path) is not None:
        return None
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as fh:
            line = fh.readline(4096)
    except OSError:
        return None
    named = line[len("gitdir: "):].rstrip("\r\n") if line.startswith("gitdir: ") else ""
    return os.path.join(os.path.dirname(path), named) if named else None


def _looks_like_git_dir(folder: str) -> bool:
    """Whether git would take ``folder`` itself as a git dir (and stop searching there)."""
    return os.path.isfile(os.path.join(folder, "HEAD")) and (
        os.path.isfile(os.path.join(folder, "commondir"))
        or (os.path.isdir(os.path.join(folder, "objects")) and os.path.isdir(os.path.join(folder, "refs"))))


def _guard_git_dir(git_dir: str) -> None:
    """Refuse special files in the git dir ``git_dir`` names (itself, or as a ``.git`` file)."""
    target = _gitfile_target(git_dir) if os.path.isfile(git_dir) else git_dir
    if target is not None and os.path.isdir(target):
        check_git_files(target)


def _guard_search(start: str) -> tuple[object, ...]:
    """Refuse, before git searches upwards from ``start``, a FIFO, socket or device where the
    search would open a file, up to the first folder where git would stop (a ``.git`` that is one
    is refused too, though git passes it: anything taking it for a ``.git`` file would wait);
    return what was seen on the way (part of the cache's key)."""
    seen: list[object] = []
    for folder in _upwards(start):
        dot_git = os.path.join(folder, ".git")
        kind = _special(dot_git)
        if kind is not None:
            raise NotARepositoryError(start, f"{dot_git} is {kind}, not a repository")
        head = os.path.join(folder, "HEAD")
        kind = _special(head)
        if kind is not None:
            raise SpecialFileError(folder, "HEAD", kind)
        seen.append((_identity(dot_git), _identity(head)))
        if os.path.isdir(dot_git):
            check_git_files(dot_git)
            if _looks_like_git_dir(dot_git):
                break
        elif os.path.isfile(dot_git):
            _guard_git_dir(dot_git)
            break
        if _looks_like_git_dir(folder):
            check_git_files(folder)
            break
    return tuple(seen)


def _cwd() -> str:
    try:
        return os.getcwd()
    except OSError as exc:  # the current directory was deleted
        raise NotARepositoryError(".", f"the current directory is gone ({exc.strerror})") from None


def _start(path: str, via: str | None) -> str:
    """The folder git is asked in for a path given (``via``: the variable that gave it), resolved
    on disk as git's ``chdir`` would (``link/..`` is the link target's parent)."""
    full = os.path.join(_cwd(), path).rstrip(os.sep) or os.sep
    if not os.path.exists(full):
        raise NotARepositoryError(full, f"{via} points to a path that does not exist" if via else "no such path")
    if os.path.isdir(full) and os.path.basename(full) != ".git":
        return os.path.realpath(full)
    kind = _special(full)
    if via and os.path.basename(full) != ".git" and (kind is not None or _gitfile_target(full) is None):
        raise NotARepositoryError(full, f"{via} points to {kind or 'a file'}, not to a repository's directory")
    return os.path.realpath(os.path.dirname(full))  # a `.git` (or a file) named: its folder


#: git's answers in this process: (where, environment, what the guard saw) -> (git dir, work tree,
#: identities of the git dir's config files when asked).
_answers: dict[tuple[object, ...], tuple[str, str | None, tuple[object, ...]]] = {}

#: Outside ``GIT_*``, what changes git's answer: the user's global config (``safe.*``).
_ENV_KEYS = ("HOME", "XDG_CONFIG_HOME")


def _config_identities(git_dir: str) -> tuple[object, ...]:
    return tuple(_identity(os.path.join(git_dir, name)) for name in ("HEAD", "config", "config.worktree", "commondir"))


def _ask_git(cwd: str, git_dir: str | None, work_tree: str | None, seen: tuple[object, ...]) -> tuple[str, str | None]:
    """git's git dir and work tree (``None``: none) for ``cwd`` and the environment (``GIT_DIR``
    ``git_dir``, ``GIT_WORK_TREE`` ``work_tree``); raises what git refused as a gitstate error."""
    key = (cwd, git_dir, work_tree, seen,
           tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("GIT_") or k in _ENV_KEYS)))
    cached = _answers.get(key)
    if cached is not None and _config_identities(cached[0]) == cached[2]:
        return cached[0], cached[1]
    # no version check first (a second process): a git too old or missing is reported when it fails
    done = run_git(git_dir, ["rev-parse", "--absolute-git-dir", "--git-common-dir", "--show-toplevel"],
                   cwd=cwd, work_tree=work_tree, text=False, check_version=False)
    lines = [os.fsdecode(line) for line in os.fsencode(done.stdout).split(b"\n")[:-1]]  # bytes (text=False)
    if done.returncode == 0 and len(lines) == 3:
        found, top = lines[0], lines[2]
    elif done.returncode != 0 and len(lines) == 2:  # --show-toplevel refused: no work tree here
        found, top = lines[0], None
    else:
        raise _refusal(cwd, git_dir, last_line(done.stderr))
    _answers[key] = (found, top, _config_identities(found))
    return found, top


def _refusal(cwd: str, git_dir: str | None, message: str) -> GitStateError:
    """The error for a place where git found no repository it can use: git too old or missing, a
    repository format libgit2 (or this git) cannot read, else not a repository."""
    check_git_version()
    candidates = [git_dir] if git_dir else [p for f in _upwards(cwd) for p in (os.path.join(f, ".git"), f)]
    for candidate in candidates:
        if os.path.isfile(os.path.join(candidate, "HEAD")):  # the first repository on the way
            feature = _unsupported_feature(candidate, message)
            if feature:
                return UnsupportedRepositoryError(candidate, feature)
            break
    return NotARepositoryError(git_dir or cwd, f"git: {message.removeprefix('fatal: ')}" if message else None)


def _open(git_dir: str, work_tree: str | None) -> pygit2.Repository:
    """Open ``git_dir`` itself (no search, no ``/.git`` appended, no work tree of libgit2's
    choosing) and give it ``work_tree``."""
    check_git_files(git_dir)
    flags = RepositoryOpenFlag.NO_SEARCH | RepositoryOpenFlag.NO_DOTGIT | RepositoryOpenFlag.BARE
    try:
        repo = pygit2.Repository(git_dir, flags)
    except (pygit2.GitError, ValueError, KeyError) as exc:
        feature = _unsupported_feature(git_dir, str(exc))
        if feature:
            raise UnsupportedRepositoryError(git_dir, feature) from exc
        raise NotARepositoryError(git_dir, str(exc).strip() or None) from exc
    if work_tree is not None:
        repo.workdir = work_tree  # in memory only (libgit2 writes no core.worktree)
    return repo


def open_repository(path: str | os.PathLike[str] | None = None) -> pygit2.Repository:
    """Open the repository for a store, following the documented lookup order."""
    override = os.environ.get("AGENTOS_REPO", "")
    git_dir = None if override else os.environ.get("GIT_DIR")
    work_tree = None if override else os.environ.get("GIT_WORK_TREE")
    if override:
        cwd = _start(os.path.expanduser(override), "AGENTOS_REPO")
    elif path is not None and git_dir is None:
        cwd = _start(os.fspath(path), None)
    else:  # GIT_DIR, and a relative GIT_WORK_TREE, are the current directory's
        cwd = _cwd()
    # absolute, joined as text (the file system resolves `link/..` as git would); "" is git's to refuse
    git_dir, work_tree = (os.path.join(_cwd(), v) if v else v for v in (git_dir, work_tree))
    if git_dir:
        kind = _special(git_dir)
        if kind is not None:
            raise NotARepositoryError(git_dir, f"GIT_DIR names {kind}")
        _guard_git_dir(git_dir)
    seen = (_identity(git_dir),) if git_dir else _guard_search(cwd)
    found, top = _ask_git(cwd, git_dir, work_tree, seen)
    if top is not None and not os.path.isdir(top):
        source = "GIT_WORK_TREE" if work_tree else "core.worktree"
        raise NotARepositoryError(top, f"the work tree git names ({source}) is no directory")
    return _open(found, top)


def locate(repo: pygit2.Repository) -> Location:
    """Describe an open repository: its git dirs, work tree and linked worktree id."""
    git_dir = os.path.realpath(repo.path)
    commondir_file = os.path.join(git_dir, "commondir")
    if os.path.isfile(commondir_file):
        with open(commondir_file, encoding="utf-8") as fh:
            rel = fh.read().strip()
        common = os.path.realpath(os.path.join(git_dir, rel))
        linked: str | None = os.path.basename(git_dir)  # <common>/worktrees/<id>
    else:
        common = git_dir
        linked = None
    workdir = None if repo.is_bare or repo.workdir is None else os.path.realpath(repo.workdir)
    return Location(git_dir=git_dir, common_dir=common, workdir=workdir, linked_id=linked)


def check_present(git_dir: str) -> None:
    """Raise :class:`RepositoryGoneError` when the repository at ``git_dir`` no longer exists (its
    ``HEAD``, which every repository has and gitstate never writes, is gone): asked where a read
    found nothing, so that a deleted repository is reported as such, never as an empty store or
    missing objects."""
    if not os.path.isfile(os.path.join(git_dir, "HEAD")):
        raise RepositoryGoneError(git_dir.rstrip(os.sep))
