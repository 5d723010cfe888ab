"""A snapshot's git writes loose objects; when the user's ``git gc`` (``prune``, ``prune-packed``)
removes an empty fan-out folder between git's ``mkdir`` and its temporary file, git fails once
with ``unable to create temporary file``. The snapshot runs that git command again instead of
failing the checkpoint (the soak beside the user's git caught this in ``git write-tree``)."""

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
