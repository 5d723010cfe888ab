"""Diffs between checkpoints: state keys and workspace files."""

from __future__ import annotations

import json
from pathlib import Path

import gitstate


def test_state_diff_reports_added_removed_changed(store: gitstate.Store) -> None:
    run = store.create_run()
    big = {f"k{i}": i for i in range(40)}
    a = run.checkpoint({"keep": big, "msgs": list(range(100)), "x": 1, "gone": "bye"})
    b = run.checkpoint({"keep": big, "msgs": list(range(101)), "x": 2, "new": [1, 2]})
    d = run.diff(a.id, b.id)
    by_key = {c.key: c for c in d.state}
    assert set(by_key) == {"msgs", "x", "gone", "new"}
    assert by_key["x"].kind == "changed" and (by_key["x"].old, by_key["x"].new) == (1, 2)
    assert by_key["gone"].kind == "removed" and by_key["gone"].old == "bye"
    assert by_key["new"].kind == "added" and by_key["new"].new == [1, 2]
    assert by_key["msgs"].new == list(range(101))
    assert d.files == () and not d.files_compared
    assert store.diff(a.id[:10], b.id).to_dict() == d.to_dict()
    assert run.diff(a.id, a.id).empty


def test_diff_defaults_to_head_and_handles_non_mapping_state(store: gitstate.Store) -> None:
    run = store.create_run()
    a = run.checkpoint([1, 2])
    run.checkpoint({"now": "a map"})
    d = run.diff(a.id)
    assert len(d.state) == 1 and d.state[0].key == "" and d.state[0].old == [1, 2]


def test_files_diff_added_modified_deleted_renamed(repo: Path) -> None:
    store = gitstate.open_store(repo)
    run = store.create_run()
    body = "".join(f"line {i}\n" for i in range(50))
    (repo / "old_name.txt").write_text(body)
    (repo / "mod.txt").write_text("v1\n")
    (repo / "gone.txt").write_text("bye\n")
    a = run.checkpoint({"s": 1}, files=True)
    (repo / "old_name.txt").rename(repo / "new_name.txt")
    (repo / "mod.txt").write_text("v2\n")
    (repo / "gone.txt").unlink()
    (repo / "fresh.txt").write_text("hi\n")
    b = run.checkpoint({"s": 1}, files=True)
    d = run.diff(a, b)
    assert d.state == ()
    got = {(f.status, f.path, f.old_path) for f in d.files}
    assert got == {
        ("renamed", "new_name.txt", "old_name.txt"), ("modified", "mod.txt", None),
        ("deleted", "gone.txt", None), ("added", "fresh.txt", None),
    }
    json.dumps(d.to_dict())  # JSON-friendly


def test_files_diff_against_checkpoint_without_files(repo: Path) -> None:
    run = gitstate.open_store(repo).create_run()
    a = run.checkpoint({})
    b = run.checkpoint({}, files=True)
    d = run.diff(a, b)
    assert d.files_compared and {f.path for f in d.files} == {"README"}
    assert all(f.status == "added" for f in d.files)
