"""A snapshot's git writes loose objects; when the user's ``git gc`` (``prune``, ``prune-packed``)
removes an empty fan-out folder between git's ``mkdir`` and its temporary file, git fails once
with ``unable to create temporary file``. The snapshot runs that git command again instead of
failing the checkpoint (the soak beside the user's git caught this in ``git write-tree``), except
``git add -A``, which names the file it missed (added again on its own); libgit2's writes of the
snapshot are tried again the same way."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

import gitstate
from gitstate.workspace import snapshot

VANISHED = (b"error: unable to create temporary file: No such file or directory\n"
            b"fatal: git-write-tree: error building trees\n")


def _failing(monkeypatch: pytest.MonkeyPatch, command: str, times: int, stderr: bytes) -> list[str]:
    """Make the snapshot's first ``times`` runs of ``git <command>`` fail with ``stderr``; the
    commands run are recorded."""
    real = snapshot.run_git
    ran: list[str] = []

    def run_git(git_dir: str | None, args: list[str], **kw: Any) -> subprocess.CompletedProcess[Any]:
        name = next(a for a in args[args.index("--literal-pathspecs") + 1:] if not a.startswith("-"))
        ran.append(name)
        if name == command and ran.count(command) <= times:
            return subprocess.CompletedProcess(args, 128, b"", stderr)
        return real(git_dir, args, **kw)

    monkeypatch.setattr(snapshot, "run_git", run_git)
    return ran


def test_write_tree_runs_again_when_its_folder_vanished(store: gitstate.Store, repo: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    (repo / "a.txt").write_text("a\n")
    ran = _failing(monkeypatch, "write-tree", 2, VANISHED)
    cp = store.create_run(run_id="vanished").checkpoint({"n": 1}, files=True)
    assert ran.count("write-tree") == 3
    tree = cp.files_tree_id
    assert tree is not None
    assert subprocess.run(["git", "-C", str(repo), "show", f"{tree}:a.txt"], capture_output=True,
                          check=True).stdout == b"a\n"


def test_another_failure_is_not_repeated(store: gitstate.Store, repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (repo / "b.txt").write_text("b\n")
    ran = _failing(monkeypatch, "write-tree", 1, b"fatal: git-write-tree: error building trees\n")
    run = store.create_run(run_id="broken")
    with pytest.raises(gitstate.StoreWriteError, match="error building trees"):
        run.checkpoint({"n": 1}, files=True)
    assert ran.count("write-tree") == 1
    assert run.head() is None  # nothing written


def test_a_folder_that_keeps_vanishing_fails_in_bounded_tries(store: gitstate.Store, repo: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    (repo / "c.txt").write_text("c\n")
    ran = _failing(monkeypatch, "write-tree", 100, VANISHED)
    with pytest.raises(gitstate.StoreWriteError, match="error building trees"):
        store.create_run(run_id="gone").checkpoint({"n": 1}, files=True)
    assert ran.count("write-tree") == len(snapshot._VANISHED_DELAYS) + 1


def test_add_everything_is_not_repeated_but_the_file_it_missed_is_added(store: gitstate.Store, repo: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """``git add -A --ignore-errors`` writes the index with what it could add and names the file it
    could not; running it again would list only what was left. It runs once, and the file it
    missed is added on its own."""
    (repo / "a.txt").write_text("a\n")
    (repo / "b.txt").write_text("b\n")
    real = snapshot.run_git
    ran: list[list[str]] = []

    def run_git(git_dir: str | None, args: list[str], **kw: Any) -> subprocess.CompletedProcess[Any]:
        command = args[args.index("--literal-pathspecs") + 1:]
        ran.append(command)
        done = real(git_dir, args, **kw)
        if command[:2] == ["add", "-A"] and sum(c[:2] == ["add", "-A"] for c in ran) == 1:
            # git added a.txt, then found the folder for b.txt's object gone
            out = b"".join(line + b"\n" for line in done.stdout.splitlines() if b"b.txt" not in line)
            return subprocess.CompletedProcess(done.args, 1, out, VANISHED.splitlines(keepends=True)[0]
                                               + b"error: unable to index file 'b.txt'\n")
        return done

    monkeypatch.setattr(snapshot, "run_git", run_git)
    cp = store.create_run(run_id="partial").checkpoint({"n": 1}, files=True)
    assert sum(c[:2] == ["add", "-A"] for c in ran) == 1
    assert ["add", "--", "b.txt"] in ran
    listed = subprocess.run(["git", "-C", str(repo), "ls-tree", "--name-only", str(cp.files_tree_id)],
                            capture_output=True, text=True, check=True).stdout.split()
    assert {"a.txt", "b.txt"} <= set(listed)


class _Odb:
    """An object database whose writes fail with ``errors`` first."""

    def __init__(self, errors: list[OSError]) -> None:
        self.errors, self.calls = errors, 0

    def write(self, kind: int, body: bytes) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "written"


def test_libgit2_writes_run_again_when_the_folder_vanished() -> None:
    vanished = OSError("failed to rename lockfile to '.git/objects/ab/cd': No such file or directory")
    odb = _Odb([vanished, vanished])
    assert snapshot._odb_write(odb, 3, b"x") == "written" and odb.calls == 3  # type: ignore[arg-type]


def test_libgit2_writes_refused_otherwise_fail_at_once() -> None:
    odb = _Odb([OSError(30, "Read-only file system")])
    with pytest.raises(OSError, match="Read-only"):
        snapshot._odb_write(odb, 3, b"x")  # type: ignore[arg-type]
    assert odb.calls == 1
