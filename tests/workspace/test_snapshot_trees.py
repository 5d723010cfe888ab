"""Workspace snapshots give the same trees as the libgit2 ``add_all`` implementation they replaced.

The ids below were recorded with that implementation (``git_index_add_all`` on a private index
reached through pygit2's C pointers) on the worktree :func:`build` makes; a tree id depends on
names, modes and contents only, so they hold on any machine. Each is also checked against plain
git: ``git add -A`` into a new index, gitlinks dropped, ``git write-tree``."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import gitstate
from tests.conftest import git

#: Tree ids of the old implementation, by step of :func:`test_trees_match_the_old_implementation`.
OLD = {
    "first": "926970ad29729a976ab23aac48cf386f058d7e5e",
    "partial": "0c6ae1761a22e4657c32f4840bbcc88aa57d0efb",
    "edited": "71126a9cbaaf947a457090bf9156a8d10522a330",
    "partial-edited": "548fa31a0db02a6a352bffe26eedd75f6ce6f9cf",
    "rules": "0dcf647b0383eb331f04acdb7aae6293039b58d4",
}


def build(repo: Path) -> None:
    """A varied worktree: committed, staged, untracked, ignored and tracked-but-ignored files,
    nested folders, exec bits, links to a file and to a folder, an empty folder, names with spaces
    and non-ASCII letters, a FIFO, and a nested repository."""
    (repo / ".gitignore").write_text("*.log\nbuild/\n")
    (repo / "src" / "pkg" / "deep").mkdir(parents=True)
    (repo / "src" / "pkg" / "deep" / "a.py").write_text("a\n")
    (repo / "src" / "b.py").write_text("b\n")
    (repo / "run.sh").write_text("#!/bin/sh\n")
    (repo / "run.sh").chmod(0o755)
    os.symlink("src/b.py", repo / "link")
    os.symlink("src", repo / "dirlink")
    (repo / "keep.log").write_text("tracked although ignored\n")
    git(repo, "add", "-A")
    git(repo, "add", "-f", "keep.log")
    git(repo, "commit", "-q", "-m", "tree")
    (repo / "staged.txt").write_text("staged only\n")
    git(repo, "add", "staged.txt")
    (repo / "debug.log").write_text("ignored\n")
    (repo / "build").mkdir()
    (repo / "build" / "out.o").write_text("ignored\n")
    (repo / "spaced name ü.txt").write_text("unicode\n")
    (repo / "emptydir").mkdir()
    (repo / "untracked" / "sub").mkdir(parents=True)
    (repo / "untracked" / "sub" / "u.txt").write_text("u\n")
    (repo / "untracked" / "tool").write_text("#!/bin/sh\n")
    (repo / "untracked" / "tool").chmod(0o755)
    os.mkfifo(repo / "untracked" / "pipe")
    nested = repo / "vendor" / "lib"
    nested.mkdir(parents=True)
    git(nested, "init", "-q")
    (nested / "x").write_text("x\n")
    git(nested, "add", "x")
    git(nested, "-c", "user.name=n", "-c", "user.email=n@x", "commit", "-q", "-m", "x")
    (repo / "vendor" / "other.txt").write_text("o\n")


def edit(repo: Path) -> None:
    (repo / "src" / "b.py").write_text("b, edited after the first snapshot\n")
    (repo / "src" / "pkg" / "deep" / "a.py").unlink()
    (repo / "run.sh").chmod(0o644)
    (repo / "untracked" / "sub" / "new file.txt").write_text("new\n")
    (repo / "link").unlink()
    os.symlink("run.sh", repo / "link")


def plain_git(repo: Path, tmp: Path) -> str:
    """The worktree's tree as plain git makes it from nothing (nested repositories left out)."""
    env = {**os.environ, "GIT_INDEX_FILE": str(tmp / "fresh-index")}
    Path(env["GIT_INDEX_FILE"]).unlink(missing_ok=True)
    subprocess.run(["git", "-c", "advice.addEmbeddedRepo=false", "add", "-A", "--ignore-errors"], cwd=repo,
                   env=env, capture_output=True, check=False)
    subprocess.run(["git", "add", "-f", "keep.log"], cwd=repo, env=env, check=True, capture_output=True)
    links = [line.split("\t", 1)[1] for line in subprocess.run(
        ["git", "ls-files", "-s"], cwd=repo, env=env, check=True, capture_output=True, text=True).stdout.splitlines()
        if line.startswith("160000 ")]
    if links:
        subprocess.run(["git", "update-index", "--force-remove", "--", *links], cwd=repo, env=env, check=True)
    return subprocess.run(["git", "write-tree"], cwd=repo, env=env, check=True, capture_output=True,
                          text=True).stdout.strip()


def test_trees_match_the_old_implementation(repo: Path, tmp_path: Path) -> None:
    build(repo)
    store = gitstate.open_store(repo)
    ws = store.core.workspace
    found = {}
    first = ws.snapshot()
    assert first.skipped == ("vendor/lib",)
    assert first.tree == plain_git(repo, tmp_path)
    found["first"] = first.tree
    found["partial"] = ws.snapshot(["src", "spaced name ü.txt", "untracked/sub"]).tree
    edit(repo)
    edited = ws.snapshot()
    assert edited.tree == plain_git(repo, tmp_path)
    found["edited"] = edited.tree
    found["partial-edited"] = ws.snapshot([repo / "src" / "pkg", "untracked"]).tree
    # a new ignore rule drops an untracked file the earlier snapshots captured
    (repo / ".gitignore").write_text("*.log\nbuild/\nuntracked/tool\n")
    found["rules"] = ws.snapshot().tree
    listing = git(repo, "ls-tree", "-r", "--name-only", found["rules"]).splitlines()
    assert "untracked/tool" not in listing and "keep.log" in listing and "debug.log" not in listing
    assert found == OLD
