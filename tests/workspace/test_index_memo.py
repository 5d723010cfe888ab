"""The private index a process just wrote is read back from memory while the file is still that one
(a restore's snapshot writes it, then the restore records what it wrote), and from the file as soon
as another writer replaced it."""

from __future__ import annotations

from pathlib import Path

import pytest

import gitstate
from gitstate.workspace import scan


def _snapshot_that_hashes(store: gitstate.Store, repo: Path) -> None:
    store.create_run(run_id="r").checkpoint({}, files=True)  # the private index exists
    (repo / "new.txt").write_text("new\n")
    store.core.workspace.snapshot(fast=True)  # hashes new.txt: writes the private index


def test_record_after_a_snapshot_reads_no_index_file(store: gitstate.Store, repo: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    _snapshot_that_hashes(store, repo)
    on_disk = scan.read_entries(store.core.workspace.index_path)
    assert on_disk is not None and b"new.txt" in on_disk

    def no_read(path: str) -> None:
        raise AssertionError(f"read {path} again")

    monkeypatch.setattr(scan, "read_entries", no_read)
    store.core.workspace.record({}, [])
    monkeypatch.undo()
    assert scan.read_entries(store.core.workspace.index_path) == on_disk


def test_an_index_another_writer_replaced_is_read_from_the_file(store: gitstate.Store, repo: Path) -> None:
    _snapshot_that_hashes(store, repo)
    path = store.core.workspace.index_path
    theirs = scan.read_entries(path)
    assert theirs is not None
    theirs[b"zz-other.txt"] = theirs[b"new.txt"]
    scan.write_index(path, theirs)  # another process's snapshot, say
    store.core.workspace.record({}, ["new.txt"])
    after = scan.read_entries(path)
    assert after is not None and b"zz-other.txt" in after and b"new.txt" not in after
