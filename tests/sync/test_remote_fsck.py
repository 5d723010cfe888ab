"""Pull and bundle import run git's object checks (``fetch.fsckObjects``) over what arrives: a
remote holding a checkpoint whose tree git calls broken (duplicate entries, entries out of order)
is refused in one line, nothing of it lands, and the user's ``git fsck`` keeps passing."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from conftest import agentos_process, git, make_repo

import gitstate

agentos = agentos_process


def raw_tree(repo: Path, names: list[bytes]) -> str:
    """A tree object written from raw bytes (``hash-object --literally``: git's checks skipped),
    each entry a file ``x\\n``, in the order given."""
    blob = subprocess.run(["git", "hash-object", "-w", "--stdin"], cwd=repo, input=b"x\n", capture_output=True,
                          check=True).stdout.decode().strip()
    data = b"".join(b"100644 " + name + b"\0" + bytes.fromhex(blob) for name in names)
    return subprocess.run(["git", "hash-object", "-t", "tree", "--literally", "-w", "--stdin"], cwd=repo,
                          input=data, capture_output=True, check=True).stdout.decode().strip()


BROKEN = {"duplicateEntries": [b"a.txt", b"a.txt"], "treeNotSorted": [b"b.txt", b"a.txt"]}


@pytest.mark.parametrize("check", sorted(BROKEN))
def test_pull_and_import_refuse_trees_git_calls_broken(tmp_path: Path, check: str) -> None:
    remote = make_repo(tmp_path / "remote")
    run = gitstate.open_store(remote).create_run(run_id="crafted")
    run.checkpoint({"n": 0})
    bad = raw_tree(remote, BROKEN[check])
    run.checkpoint({"n": 1}, files_tree=bad)
    assert check in git(remote, "fsck", check=False) + subprocess.run(
        ["git", "fsck"], cwd=remote, capture_output=True, text=True, check=False).stderr
    bundle = tmp_path / "crafted.bundle"
    git(remote, "bundle", "create", str(bundle), "--all")

    user = make_repo(tmp_path / "user")
    git(user, "remote", "add", "origin", str(remote))
    objects_before = git(user, "count-objects", "-v")
    done = agentos(user, "pull", "origin")
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("error: ") and check in done.stderr and "nothing was brought in" in done.stderr
    with pytest.raises(gitstate.BrokenObjectError) as info:
        gitstate.pull(gitstate.open_store(user), "origin")
    assert info.value.oid == bad and isinstance(info.value, gitstate.RemoteError)
    done = agentos(user, "import", str(bundle))
    assert done.returncode == 1 and check in done.stderr and done.stderr.count("\n") == 1, done.stderr

    assert git(user, "for-each-ref", "refs/agentos") == ""
    assert subprocess.run(["git", "cat-file", "-e", bad], cwd=user, check=False).returncode != 0
    assert git(user, "count-objects", "-v") == objects_before  # no object, no partial pack left
    git(user, "fsck", "--strict")


def test_pull_and_import_still_bring_sound_runs(tmp_path: Path) -> None:
    remote = make_repo(tmp_path / "remote")
    (remote / "a.txt").write_text("a\n")
    gitstate.open_store(remote).create_run(run_id="fine").checkpoint({"n": 1}, files=True)
    user = make_repo(tmp_path / "user")
    git(user, "remote", "add", "origin", str(remote))
    assert agentos(user, "pull", "origin").returncode == 0
    bundle = tmp_path / "fine.bundle"
    assert agentos(remote, "export", "-o", str(bundle)).returncode == 0
    other = make_repo(tmp_path / "other")
    done = agentos(other, "import", str(bundle))
    assert done.returncode == 0, done.stderr
    for repo in (user, other):
        assert "refs/agentos/main/runs/fine/" in git(repo, "for-each-ref", "refs/agentos")
        git(repo, "fsck", "--strict")
