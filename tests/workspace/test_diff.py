"""Diffs between checkpoints: state keys and workspace files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import gitstate
from gitstate.git.objects import MODE_BLOB, MODE_TREE
from tests.conftest import git


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


def _lines(seed: int, edit: int = -1) -> bytes:
    """Forty distinct lines (line ``edit`` changed): files that are alike only when seeds match."""
    return "".join(f"{seed} line {k}\n" if k != edit else "edited\n" for k in range(40)).encode()


def _files_tree(store: gitstate.Store, files: dict[str, bytes]) -> str:
    """A snapshot tree of one folder ``d`` holding ``files``, written with TreeBuilder (no worktree)."""
    repo = store.repo
    sub = repo.TreeBuilder()
    for name, data in files.items():
        sub.insert(name, repo.create_blob(data), MODE_BLOB)
    root = repo.TreeBuilder()
    root.insert("d", sub.write(), MODE_TREE)
    return str(root.write())


def test_rename_detection_is_bounded_by_the_rename_limit(repo: Path) -> None:
    """3,000 deleted x 3,000 added files exceed git's default limit (1,000 squared): files that kept
    their content are still renames (matched by id), the others are not compared and the result
    says so; within the limit (a repository diff.renameLimit, as git's), edited renames are found."""
    store = gitstate.open_store(repo)
    run = store.create_run()
    old = {f"old{i}.txt": _lines(i) for i in range(3000)}
    new = {f"new{i}.txt": _lines(i, edit=7) for i in range(3000)}  # each an edited rename of old{i}
    new.update({"moved.txt": old.pop("old0.txt")})  # and one rename that kept its content
    old["old0.txt"] = _lines(0)
    a = run.checkpoint({}, branch="a", files_tree=_files_tree(store, old))
    b = run.checkpoint({}, branch="b", files_tree=_files_tree(store, new))

    d = store.diff(a, b)
    assert d.renames_skipped and d.to_dict()["renames_skipped"] is True
    by_status: dict[str, set[str]] = {}
    for f in d.files:
        by_status.setdefault(f.status, set()).add(f.path)
    assert by_status["renamed"] == {"d/moved.txt"}
    assert next(f for f in d.files if f.status == "renamed").old_path == "d/old0.txt"
    assert len(by_status["deleted"]) == 2999 and len(by_status["added"]) == 3000

    git(repo, "config", "diff.renameLimit", "3000")
    d = store.diff(a, b)
    assert not d.renames_skipped
    renamed = {f.path: (f.old_path, f.similarity) for f in d.files if f.status == "renamed"}
    assert len(renamed) == 3000 and [f.path for f in d.files if f.status != "renamed"] == ["d/new0.txt"]
    assert renamed["d/moved.txt"] == ("d/old0.txt", 100)
    assert renamed["d/new5.txt"][0] == "d/old5.txt" and 50 <= renamed["d/new5.txt"][1] < 100


def test_rename_detection_is_bounded_by_the_files_compared(repo: Path) -> None:
    """One deleted file against many added ones stays within git's bound on comparisons, but
    libgit2 reads every candidate: above four times the limit in files the comparison is skipped
    (a diff against a 100,000-file snapshot took 17 s)."""
    store = gitstate.open_store(repo)
    run = store.create_run()
    a = run.checkpoint({}, branch="a", files_tree=_files_tree(store, {"old.txt": _lines(0)}))
    new = {f"new{i}.txt": _lines(i + 100) for i in range(45)}
    new["renamed.txt"] = _lines(0, edit=7)
    b = run.checkpoint({}, branch="b", files_tree=_files_tree(store, new))
    git(repo, "config", "diff.renameLimit", "10")  # 1 x 46 <= 10 squared, 1 + 46 > 4 x 10
    d = store.diff(a, b)
    assert d.renames_skipped and not [f for f in d.files if f.status == "renamed"]
    git(repo, "config", "diff.renameLimit", "12")  # 1 + 46 <= 4 x 12
    d = store.diff(a, b)
    assert not d.renames_skipped
    assert [(f.old_path, f.path) for f in d.files if f.status == "renamed"] == [("d/old.txt", "d/renamed.txt")]


def test_cli_diff_says_when_renames_were_skipped(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from gitstate_cli.main import cli

    store = gitstate.open_store(repo)
    run = store.create_run("r")
    a = run.checkpoint({}, branch="a", files_tree=_files_tree(store, {f"o{i}": _lines(i) for i in range(3)}))
    b = run.checkpoint({}, branch="b", files_tree=_files_tree(store, {f"n{i}": _lines(i, 1) for i in range(3)}))
    monkeypatch.chdir(repo)
    found = CliRunner().invoke(cli, ["diff", a.id, b.id])
    assert found.exit_code == 0 and "d/o1 -> d/n1" in found.stdout and found.stderr == ""
    git(repo, "config", "diff.renameLimit", "2")  # 3 x 3 > 2 x 2
    skipped = CliRunner().invoke(cli, ["diff", a.id, b.id])
    assert skipped.exit_code == 0 and "- file  d/o1" in skipped.stdout and "+ file  d/n1" in skipped.stdout
    assert skipped.stderr.startswith("warning: ") and "diff.renameLimit" in skipped.stderr
    as_json = CliRunner().invoke(cli, ["diff", a.id, b.id, "--json"])
    assert json.loads(as_json.stdout)["renames_skipped"] is True
