"""The snapshot quarantine's folders in the temporary directory: what a killed process left goes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gitstate.workspace import quarantine


def _dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    return int(done.stdout)


def _aged(path: Path, seconds: float) -> Path:
    old = time.time() - seconds
    os.utime(path, (old, old))
    return path


def test_leftovers_of_dead_processes_are_removed_others_kept(tmp_path: Path) -> None:
    dead = _dead_pid()
    gone = tmp_path / f"{quarantine.ROOT_PREFIX}{dead}-abc123"
    (gone / "ab").mkdir(parents=True)
    young = tmp_path / f"{quarantine.ROOT_PREFIX}{dead}-young1"
    young.mkdir()  # a dead process's, but just made: left for now
    mine = tmp_path / f"{quarantine.ROOT_PREFIX}{os.getpid()}-live01"
    other = tmp_path / "gitstate-something-else"
    for path in (gone, mine, other):
        path.mkdir(exist_ok=True)
        _aged(path, 3600)
    a_file = tmp_path / f"{quarantine.ROOT_PREFIX}{dead}-file"
    a_file.write_text("not a folder")
    _aged(a_file, 3600)
    removed = quarantine.remove_leftovers(str(tmp_path))
    assert removed == [str(gone)]
    assert not gone.exists() and young.exists() and mine.exists() and other.exists() and a_file.exists()


def test_a_threads_quarantine_is_named_by_its_process(tmp_path: Path) -> None:
    root = quarantine.thread_root()
    assert os.path.basename(root).startswith(f"{quarantine.ROOT_PREFIX}{os.getpid()}-")


def test_a_move_whose_fanout_folder_vanishes_makes_it_again(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The user's ``git gc`` removes the empty fan-out folder between the move's ``mkdir`` and its
    rename: made again, and the object lands."""
    objects = tmp_path / "objects"
    objects.mkdir()
    oid = "ab" + "0" * 38
    real_rename = os.rename
    renames: list[str] = []

    def rename(src: str, dst: str) -> None:
        renames.append(dst)
        folder = os.path.dirname(dst)
        if len(renames) == 1 and os.path.isdir(folder) and not os.listdir(folder):
            os.rmdir(folder)  # a prune, just before our rename
        real_rename(src, dst)

    with quarantine.Quarantine(str(objects)) as q:
        os.makedirs(os.path.join(q.path, "ab"), exist_ok=True)  # (the thread's quarantine may have it)
        with open(os.path.join(q.path, "ab", oid[2:]), "wb") as fh:
            fh.write(b"x")
        os.mkdir(objects / "ab")
        monkeypatch.setattr(quarantine.os, "rename", rename)
        q.move(oid)
        monkeypatch.undo()
    assert (objects / "ab" / oid[2:]).read_bytes() == b"x"
    assert len(renames) == 2
