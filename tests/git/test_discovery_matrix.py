"""Repository discovery checked against git itself: for each layout of a matrix (plain, bare and
separate git dirs, core.worktree, linked worktrees, GIT_DIR / GIT_WORK_TREE, nested repositories,
`.git` files and links, a cwd inside a git dir, GIT_CEILING_DIRECTORIES, no repository at all),
what gitstate finds (git dir, common dir, work tree or none, or an error) is what
``git rev-parse --absolute-git-dir --git-common-dir --show-toplevel`` says in the same place with
the same environment. Every layout lives in one shared folder built once per session."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from gitstate.errors import NotARepositoryError
from gitstate.git.location import locate, open_repository

#: The git environment the layouts are built in: no user or system config.
_BUILD_ENV = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
              "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t", "LC_ALL": "C"}


def _git(cwd: Path, *args: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(_BUILD_ENV, HOME=str(cwd))
    done = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True)
    assert done.returncode == 0, (args, done.stderr)


def _out(cwd: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    return subprocess.run(["git", *args], cwd=cwd, env={**env, **_BUILD_ENV, "HOME": str(cwd)},
                          capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture(scope="session")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every layout, side by side in one folder (which is itself no repository)."""
    b = tmp_path_factory.mktemp("layouts").resolve()
    for d in ("plain/sub/deeper", "plain/sub/inner/.git", "plain/nested/x", "plain/badgf", "plain/dangling",
              "elsewhere", "sepgd", "cwabs-tree/sub", "cwrel-tree/sub", "lnkdir", "lwt/sub", "relgf/sub", "gfbare/sub", "lbare", "notrepo", "crlf", "space",
              "lwc/sub"):
        (b / d).mkdir(parents=True)
    _git(b, "init", "-q", "plain")
    _git(b / "plain", "init", "-q", "nested")  # a repository inside another's subdirectory
    # submodule-like: a `.git` file with a relative gitdir into the outer repository's modules/,
    # whose config names the work tree back (as `git submodule` writes them)
    _git(b, "init", "-q", "--bare", "plain/.git/modules/mod")
    _git(b / "plain/.git/modules/mod", "config", "core.bare", "false")
    _git(b / "plain/.git/modules/mod", "config", "core.worktree", "../../../mod")
    (b / "plain/mod/sub").mkdir(parents=True)
    (b / "plain/mod/.git").write_text("gitdir: ../.git/modules/mod\n")
    (b / "plain/badgf/.git").write_text("this is no gitfile\n")
    (b / "plain/dangling/.git").write_text(f"gitdir: {b / 'nowhere'}\n")
    _git(b, "init", "-q", "--bare", "bare.git")
    _git(b, "init", "-q", "--separate-git-dir", str(b / "sepgd/repo.git"), "sepwt")  # absolute gitdir:
    (b / "sepwt/sub").mkdir()
    _git(b, "init", "-q", "--bare", "relgf-store/repo.git")
    _git(b / "relgf-store/repo.git", "config", "core.bare", "false")
    (b / "relgf/.git").write_text("gitdir: ../relgf-store/repo.git\n")
    _git(b, "init", "-q", "--bare", "lwt-store/real.git")
    _git(b / "lwt-store/real.git", "config", "core.bare", "false")
    (b / "lwt/.git").symlink_to(b / "lwt-store/real.git")
    _git(b, "init", "-q", "cwabs")
    _git(b / "cwabs", "config", "core.worktree", str(b / "cwabs-tree"))
    (b / "cwabs/sub").mkdir()
    _git(b, "init", "-q", "cwrel")
    _git(b / "cwrel", "config", "core.worktree", "../../cwrel-tree")  # relative to the git dir
    _git(b, "init", "-q", "wtmain")
    _git(b / "wtmain", "commit", "-q", "--allow-empty", "-m", "c")
    _git(b / "wtmain", "worktree", "add", "-q", "--detach", "../linked")
    (b / "linked/sub").mkdir()
    _git(b, "init", "-q", "--bare", "gfbare-store/repo.git")  # core.bare stays true
    (b / "gfbare/.git").write_text("gitdir: ../gfbare-store/repo.git\n")
    (b / "lbare/.git").symlink_to(b / "gfbare-store/repo.git")
    (b / "notrepo/.git").write_text("gitdir: ../plain/sub\n")  # a folder that is no git dir
    _git(b, "init", "-q", "cbare")
    _git(b / "cbare", "config", "core.bare", "true")
    _git(b, "init", "-q", "--bare", "bmain.git")  # a bare repository with a linked worktree
    tree = subprocess.run(["git", "mktree"], cwd=b / "bmain.git", input="", capture_output=True, text=True,
                          env={**os.environ, **_BUILD_ENV}, check=True).stdout.strip()
    _git(b / "bmain.git", "update-ref", "refs/heads/main", _out(b / "bmain.git", "commit-tree", tree, "-m", "c"))
    _git(b / "bmain.git", "worktree", "add", "-q", "--detach", "../blinked", "main")
    _git(b, "init", "-q", "--bare", "lwc-store/real.git")
    _git(b / "lwc-store/real.git", "config", "core.bare", "false")
    _git(b / "lwc-store/real.git", "config", "core.worktree", "..")  # relative to the git dir as reached
    (b / "lwc/.git").symlink_to(b / "lwc-store/real.git")
    _git(b / "wtmain", "worktree", "add", "-q", "--detach", "../moved-from")
    (b / "moved-from").rename(b / "moved")  # moved by hand: its admin dir names the old place
    _git(b, "init", "-q", "wtcfg")  # core.worktree in a linked worktree's config.worktree
    _git(b / "wtcfg", "commit", "-q", "--allow-empty", "-m", "c")
    _git(b / "wtcfg", "worktree", "add", "-q", "--detach", "../wtcfg-linked")
    _git(b / "wtcfg", "config", "extensions.worktreeConfig", "true")
    _git(b / "wtcfg-linked", "config", "--worktree", "core.worktree", str(b / "elsewhere"))
    _git(b, "init", "-q", "incl")  # core.worktree only through include.path
    (b / "incl.cfg").write_text(f"[core]\n\tworktree = {b / 'elsewhere'}\n")
    _git(b / "incl", "config", "include.path", str(b / "incl.cfg"))
    _git(b, "init", "-q", "bothbare")  # core.bare and core.worktree both set
    _git(b / "bothbare", "config", "core.bare", "true")
    _git(b / "bothbare", "config", "core.worktree", str(b / "elsewhere"))
    _git(b, "init", "-q", "cwgone")
    _git(b / "cwgone", "config", "core.worktree", str(b / "nowhere"))
    (b / "crlf/.git").write_text("gitdir: ../relgf-store/repo.git\r\n")
    (b / "space/.git").write_text("gitdir: ../relgf-store/repo.git \n")
    (b / "lnk").symlink_to(b / "plain")
    (b / "lnkdir/link").symlink_to(b / "plain/sub")  # lnkdir/link/.. is plain on disk, lnkdir as text
    return b


# name: (cwd, environment, path given to open_repository). In the environment and the path, "@x"
# is the layout folder x; anything else is taken as it is (a relative GIT_DIR is the cwd's).
CASES: dict[str, tuple[str, dict[str, str], str | None]] = {
    "plain, top": ("plain", {}, None),
    "plain, subdirectory": ("plain/sub/deeper", {}, None),
    "plain, path argument": ("elsewhere", {}, "@plain/sub"),
    "plain, AGENTOS_REPO": ("elsewhere", {"AGENTOS_REPO": "@plain/sub/deeper"}, None),
    "cwd inside .git": ("plain/.git", {}, None),
    "cwd inside .git/refs": ("plain/.git/refs", {}, None),
    "bare, top": ("bare.git", {}, None),
    "bare, inside refs": ("bare.git/refs", {}, None),
    "bare, path argument": ("elsewhere", {}, "@bare.git"),
    "bare, refused by safe.bareRepository": ("bare.git", {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "safe.bareRepository",
                                                         "GIT_CONFIG_VALUE_0": "explicit"}, None),
    "separate git dir, work tree top": ("sepwt", {}, None),
    "separate git dir, work tree subdirectory": ("sepwt/sub", {}, None),
    "separate git dir, inside the git dir": ("sepgd/repo.git", {}, None),
    "separate git dir, its parent": ("sepgd", {}, None),
    "separate git dir, path argument": ("elsewhere", {}, "@sepwt/sub"),
    "core.worktree absolute, from the git dir's folder": ("cwabs", {}, None),
    "core.worktree absolute, from a subdirectory there": ("cwabs/sub", {}, None),
    "core.worktree absolute, inside the git dir": ("cwabs/.git", {}, None),
    "core.worktree absolute, from the work tree": ("cwabs-tree/sub", {}, None),
    "core.worktree absolute, GIT_DIR": ("cwabs-tree/sub", {"GIT_DIR": "@cwabs/.git"}, None),
    "core.worktree relative, from the git dir's folder": ("cwrel", {}, None),
    "core.worktree relative, inside the git dir": ("cwrel/.git/refs", {}, None),
    "core.worktree relative, GIT_DIR": ("elsewhere", {"GIT_DIR": "@cwrel/.git"}, None),
    "linked worktree, top": ("linked", {}, None),
    "linked worktree, subdirectory": ("linked/sub", {}, None),
    "linked worktree, path argument": ("elsewhere", {}, "@linked/sub"),
    "linked worktree, AGENTOS_REPO": ("elsewhere", {"AGENTOS_REPO": "@linked"}, None),
    "linked worktree, from the main one": ("wtmain", {}, None),
    "linked worktree, inside its admin dir": ("wtmain/.git/worktrees/linked", {}, None),
    "linked worktree, GIT_DIR its admin dir": ("linked/sub", {"GIT_DIR": "@wtmain/.git/worktrees/linked"}, None),
    "GIT_DIR alone, from elsewhere": ("elsewhere", {"GIT_DIR": "@plain/.git"}, None),
    "GIT_DIR alone, from a subdirectory": ("plain/sub/deeper", {"GIT_DIR": "@plain/.git"}, None),
    "GIT_DIR relative": ("elsewhere", {"GIT_DIR": "../plain/.git"}, None),
    "GIT_DIR through a link": ("elsewhere", {"GIT_DIR": "@lnk/.git"}, None),
    "GIT_DIR of a bare repository": ("elsewhere", {"GIT_DIR": "@bare.git"}, None),
    "GIT_DIR of a separate git dir": ("sepwt/sub", {"GIT_DIR": "@sepgd/repo.git"}, None),
    "GIT_DIR names a work tree": ("elsewhere", {"GIT_DIR": "@plain"}, None),
    "GIT_DIR names a folder in a git dir": ("elsewhere", {"GIT_DIR": "@plain/.git/refs"}, None),
    "GIT_DIR names nothing": ("elsewhere", {"GIT_DIR": "@nowhere"}, None),
    "GIT_DIR names a `.git` file": ("elsewhere", {"GIT_DIR": "@sepwt/.git"}, None),
    "GIT_DIR and GIT_WORK_TREE": ("plain/sub", {"GIT_DIR": "@plain/.git", "GIT_WORK_TREE": "@elsewhere"}, None),
    "GIT_DIR and a relative GIT_WORK_TREE": ("elsewhere", {"GIT_DIR": "@plain/.git", "GIT_WORK_TREE": "."}, None),
    "GIT_DIR and GIT_WORK_TREE through a link and ..": (
        "elsewhere", {"GIT_DIR": "@plain/.git", "GIT_WORK_TREE": "@lnkdir/link/.."}, None),
    "GIT_DIR of a bare repository and GIT_WORK_TREE": (
        "elsewhere", {"GIT_DIR": "@bare.git", "GIT_WORK_TREE": "@elsewhere"}, None),
    "GIT_DIR with core.worktree and GIT_WORK_TREE": (
        "elsewhere", {"GIT_DIR": "@cwabs/.git", "GIT_WORK_TREE": "@elsewhere"}, None),
    "GIT_WORK_TREE alone, below": ("plain", {"GIT_WORK_TREE": "@plain/sub"}, None),
    "GIT_WORK_TREE alone, elsewhere": ("plain/sub", {"GIT_WORK_TREE": "@elsewhere"}, None),
    "GIT_WORK_TREE alone, relative": ("plain/sub", {"GIT_WORK_TREE": "deeper"}, None),
    "GIT_WORK_TREE alone, in a bare repository": ("bare.git", {"GIT_WORK_TREE": "@elsewhere"}, None),
    "GIT_WORK_TREE alone, inside a git dir": ("plain/.git/refs", {"GIT_WORK_TREE": "@plain"}, None),
    "GIT_WORK_TREE alone, no repository": ("elsewhere", {"GIT_WORK_TREE": "@plain"}, None),
    "nested repository, top": ("plain/nested", {}, None),
    "nested repository, subdirectory": ("plain/nested/x", {}, None),
    "submodule-like `.git` file, top": ("plain/mod", {}, None),
    "submodule-like `.git` file, subdirectory": ("plain/mod/sub", {}, None),
    "submodule-like, inside its git dir": ("plain/.git/modules/mod", {}, None),
    "`.git` file, absolute gitdir": ("sepwt", {}, None),
    "`.git` file, relative gitdir": ("relgf/sub", {}, None),
    "`.git` file, relative gitdir, path argument": ("elsewhere", {}, "@relgf"),
    "`.git` file, not a gitfile": ("plain/badgf", {}, None),
    "`.git` file naming nothing": ("plain/dangling", {}, None),
    "empty `.git` folder in a subdirectory": ("plain/sub/inner", {}, None),
    "inside an empty `.git` folder": ("plain/sub/inner/.git", {}, None),
    "`.git` a link to a git dir": ("lwt/sub", {}, None),
    "`.git` a link to a git dir with a relative core.worktree": ("lwc/sub", {}, None),
    "`.git` file naming a bare repository": ("gfbare/sub", {}, None),
    "`.git` a link to a bare repository": ("lbare", {}, None),
    "`.git` file naming a folder that is no git dir": ("notrepo", {}, None),
    "core.bare set in a repository's .git": ("cbare", {}, None),
    "bare repository with a linked worktree, from the worktree": ("blinked", {}, None),
    "bare repository with a linked worktree, from the bare one": ("bmain.git", {}, None),
    "bare repository with a linked worktree, GIT_DIR": ("blinked", {"GIT_DIR": "@bmain.git/worktrees/blinked"}, None),
    "linked worktree moved by hand": ("moved", {}, None),
    "core.worktree in a linked worktree's config.worktree": ("wtcfg-linked", {}, None),
    "core.worktree only through include.path": ("incl", {}, None),
    "core.worktree with core.bare": ("bothbare", {}, None),
    "core.worktree naming nothing": ("cwgone", {}, None),
    "`.git` file ending in CRLF": ("crlf", {}, None),
    "`.git` file with a trailing space": ("space", {}, None),
    "GIT_DIR empty": ("plain/sub", {"GIT_DIR": ""}, None),
    "GIT_WORK_TREE empty": ("plain/sub", {"GIT_WORK_TREE": ""}, None),
    "GIT_DIR through a link and ..": ("elsewhere", {"GIT_DIR": "@lnkdir/link/../.git"}, None),
    "a linked folder, path argument": ("elsewhere", {}, "@lnk/sub"),
    "a link and .., path argument": ("elsewhere", {}, "@lnkdir/link/.."),
    "a link and .., AGENTOS_REPO": ("elsewhere", {"AGENTOS_REPO": "@lnkdir/link/.."}, None),
    "ceiling at the repository, from it": ("plain", {"GIT_CEILING_DIRECTORIES": "@plain"}, None),
    "ceiling at the repository, from below": ("plain/sub/deeper", {"GIT_CEILING_DIRECTORIES": "@plain"}, None),
    "ceiling below the repository": ("plain/sub/deeper", {"GIT_CEILING_DIRECTORIES": "@plain/sub"}, None),
    "ceiling through a link": ("plain/sub", {"GIT_CEILING_DIRECTORIES": "@lnk"}, None),
    "ceiling through a link, not resolved": ("plain/sub", {"GIT_CEILING_DIRECTORIES": ":@lnk"}, None),
    "ceiling relative, ignored": ("plain/sub", {"GIT_CEILING_DIRECTORIES": "plain"}, None),
    "ceiling among others": ("plain/sub", {"GIT_CEILING_DIRECTORIES": "@elsewhere:@plain"}, None),
    "no repository": ("elsewhere", {}, None),
    "no repository, path argument": ("plain", {}, "@elsewhere"),
    "no repository, AGENTOS_REPO": ("plain", {"AGENTOS_REPO": "@elsewhere"}, None),
}

Found = tuple[str, str, str | None] | None


def _expand(value: str, base: Path) -> str:
    return ":".join(str(base / p[1:]) if p.startswith("@") else p for p in value.split(":"))


def _real(path: str, cwd: Path) -> str:
    return os.path.realpath(os.path.join(cwd, path))


def git_says(cwd: Path, env: dict[str, str]) -> tuple[Found, str]:
    """git's answer in ``cwd`` with ``env``: (git dir, common dir, work tree or None), or None
    when git finds no repository; and its stderr."""
    done = subprocess.run(["git", "rev-parse", "--absolute-git-dir", "--git-common-dir", "--show-toplevel"],
                          cwd=cwd, env={**os.environ, **env, "LC_ALL": "C"}, capture_output=True, text=True)
    lines = done.stdout.splitlines()
    if done.returncode == 0 and len(lines) == 3:
        return (_real(lines[0], cwd), _real(lines[1], cwd), _real(lines[2], cwd)), done.stderr
    if len(lines) == 2 and "must be run in a work tree" in done.stderr:
        return (_real(lines[0], cwd), _real(lines[1], cwd), None), done.stderr
    assert done.returncode != 0 and not lines, (done.stdout, done.stderr)
    return None, done.stderr


@pytest.mark.parametrize("case", list(CASES))
def test_discovery_agrees_with_git(base: Path, monkeypatch: pytest.MonkeyPatch, case: str) -> None:
    cwd_name, env_spec, path_spec = CASES[case]
    cwd = base / cwd_name
    env = {"GIT_CEILING_DIRECTORIES": str(base), **{k: _expand(v, base) for k, v in env_spec.items()}}
    # git is asked where gitstate starts: the path given (AGENTOS_REPO or an argument) or the cwd
    start = path_spec or env.get("AGENTOS_REPO")
    git_cwd = Path(_expand(start, base)) if start else cwd
    want, stderr = git_says(git_cwd, {k: v for k, v in env.items() if k != "AGENTOS_REPO"})
    monkeypatch.chdir(cwd)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    path = _expand(path_spec, base) if path_spec else None
    if want is None or (want[2] is not None and not os.path.isdir(want[2])):
        # no repository, or a work tree that is no directory (git refuses every command that
        # needs the work tree there: "this operation must be run in a work tree")
        with pytest.raises(NotARepositoryError):
            found = locate(open_repository(path))
            pytest.fail(f"git: {stderr.strip()}; gitstate found {found}")
        return
    loc = locate(open_repository(path))
    got = (os.path.realpath(loc.git_dir), os.path.realpath(loc.common_dir),
           None if loc.workdir is None else os.path.realpath(loc.workdir))
    assert got == want, stderr
