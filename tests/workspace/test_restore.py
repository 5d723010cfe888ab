"""Restoring workspace snapshots: correctness, refusal of unsaved work, safety of untrusted trees."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading
import zlib
from pathlib import Path
from typing import Any

import pytest

import gitstate
from gitstate.git.objects import MODE_BLOB, MODE_COMMIT, MODE_EXEC, MODE_LINK, MODE_TREE
from gitstate.workspace.restore import SAFETY_BRANCH
from gitstate.workspace.scan import build_trees
from tests.conftest import bounded, git, user_snapshot


def worktree_files(root: Path) -> dict[str, object]:
    """Everything in the worktree except .git: path -> (kind, content or link target, exec bit)."""
    out: dict[str, object] = {}
    for dirpath, dirs, files in os.walk(root):
        if ".git" in dirs and Path(dirpath) == root:
            dirs.remove(".git")
        for name in dirs + files:
            full = Path(dirpath) / name
            rel = str(full.relative_to(root))
            if full.is_symlink():
                out[rel] = ("link", os.readlink(full))
            elif full.is_file():
                out[rel] = ("file", full.read_bytes(), os.access(full, os.X_OK))
            elif full.is_dir():
                out[rel] = ("dir",)
    return out


@pytest.fixture
def work(repo: Path) -> Path:
    (repo / ".gitignore").write_text("*.log\n")
    (repo / "src").mkdir()
    (repo / "src" / "a.py").write_text("a = 1\n")
    (repo / "src" / "b.py").write_text("b = 1\n")
    (repo / "tool.sh").write_text("#!/bin/sh\n")
    (repo / "tool.sh").chmod(0o755)
    os.symlink("src/a.py", repo / "alink")
    (repo / "debug.log").write_text("ignored, never touched\n")
    return repo


def test_restore_brings_back_modified_deleted_and_removes_created(work: Path) -> None:
    store = gitstate.open_store(work)
    run = store.create_run()
    c1 = run.checkpoint({"step": 1}, files=True)
    state1 = worktree_files(work)
    status1 = git(work, "status", "--porcelain")
    (work / "src" / "a.py").write_text("a = 2\n")
    (work / "src" / "b.py").unlink()
    (work / "tool.sh").chmod(0o644)
    (work / "alink").unlink()
    os.symlink("src/b.py", work / "alink")
    (work / "new" / "deep").mkdir(parents=True)
    (work / "new" / "deep" / "c.py").write_text("c\n")
    (work / "debug.log").write_text("ignored, changed later\n")
    run.checkpoint({"step": 2}, files=True)
    before = user_snapshot(work)

    result = run.restore(c1.id)
    assert set(result.changed) == {"src/a.py", "tool.sh", "alink"}
    assert result.added == ("src/b.py",)
    assert result.removed == ("new/deep/c.py",)
    assert result.safety is not None and result.safety_branch == SAFETY_BRANCH
    expected = dict(state1)
    expected["debug.log"] = ("file", b"ignored, changed later\n", False)
    assert worktree_files(work) == expected
    after = user_snapshot(work)
    assert {k: after[k] for k in ("HEAD", "index", "config", "refs")} == {
        k: before[k] for k in ("HEAD", "index", "config", "refs")}
    assert git(work, "status", "--porcelain") == status1
    assert git(work, "fsck", "--strict", "--no-dangling") == ""


def test_dry_run_changes_nothing(work: Path) -> None:
    run = gitstate.open_store(work).create_run()
    c1 = run.checkpoint({}, files=True)
    (work / "src" / "a.py").write_text("changed\n")
    run.checkpoint({}, files=True)
    files = worktree_files(work)
    result = run.restore(c1, dry_run=True)
    assert result.dry_run and result.changed == ("src/a.py",) and result.safety is None
    assert worktree_files(work) == files
    assert SAFETY_BRANCH not in run.branches()


def test_unsaved_changes_refused_then_forced_and_recoverable(work: Path) -> None:
    run = gitstate.open_store(work).create_run()
    c1 = run.checkpoint({}, files=True)
    (work / "src" / "a.py").write_text("precious unsaved work\n")
    (work / "scratch.txt").write_text("also unsaved\n")
    files = worktree_files(work)
    with pytest.raises(gitstate.RestoreConflictError) as err:
        run.restore(c1)
    assert err.value.paths == ["scratch.txt", "src/a.py"]
    assert "scratch.txt" in str(err.value) and "src/a.py" in str(err.value)
    assert worktree_files(work) == files
    assert SAFETY_BRANCH not in run.branches()

    result = run.restore(c1, force=True)
    assert (work / "src" / "a.py").read_text() == "a = 1\n"
    assert not (work / "scratch.txt").exists()
    assert result.safety is not None
    # the forced-over work is in the safety checkpoint; restoring it undoes the restore
    undo = run.restore(result.safety)
    assert worktree_files(work) == files
    assert undo.safety is not None


def test_restore_of_only_some_paths(work: Path) -> None:
    run = gitstate.open_store(work).create_run()
    c1 = run.checkpoint({}, files=True)
    (work / "src" / "a.py").write_text("a2\n")
    (work / "tool.sh").write_text("t2\n")
    run.checkpoint({}, files=True)
    result = run.restore(c1, paths=["src"])
    assert result.changed == ("src/a.py",)
    assert (work / "src" / "a.py").read_text() == "a = 1\n"
    assert (work / "tool.sh").read_text() == "t2\n"


def test_ignored_file_in_the_way_is_never_touched(work: Path) -> None:
    run = gitstate.open_store(work).create_run()
    (work / "keep.log").write_text("snapshotted while not ignored\n")
    (work / ".gitignore").write_text("")
    c1 = run.checkpoint({}, files=True)
    (work / ".gitignore").write_text("*.log\n")
    (work / "keep.log").write_text("now ignored and different\n")
    run.checkpoint({}, files=True)
    with pytest.raises(gitstate.RestoreConflictError) as err:
        run.restore(c1, force=True)
    assert "keep.log" in err.value.paths
    assert (work / "keep.log").read_text() == "now ignored and different\n"


def test_rollback_with_restore(work: Path) -> None:
    run = gitstate.open_store(work).create_run()
    c1 = run.checkpoint({"n": 1}, files=True)
    (work / "src" / "a.py").write_text("two\n")
    c2 = run.checkpoint({"n": 2}, files=True)
    cp = run.rollback(c1.id, restore=True)
    assert cp.id == c1.id
    head = run.head()
    assert head is not None and head.id == c1.id
    assert (work / "src" / "a.py").read_text() == "a = 1\n"
    assert run.last_restore is not None and run.last_restore.changed == ("src/a.py",)
    # refused restore: the branch does not move
    (work / "src" / "a.py").write_text("unsaved\n")
    with pytest.raises(gitstate.RestoreConflictError):
        run.rollback(c2.id, restore=True)
    head = run.head()
    assert head is not None and head.id == c1.id


def test_checkpoint_without_files_cannot_be_restored(work: Path) -> None:
    run = gitstate.open_store(work).create_run()
    cp = run.checkpoint({})
    with pytest.raises(gitstate.NoSnapshotError):
        run.restore(cp)


def test_symlinked_directory_is_replaced_not_written_through(work: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    run = gitstate.open_store(work).create_run()
    (work / "d").mkdir()
    (work / "d" / "x").write_text("inside\n")
    c1 = run.checkpoint({}, files=True)
    (work / "d" / "x").unlink()
    (work / "d").rmdir()
    os.symlink(outside, work / "d")
    run.checkpoint({}, files=True)
    run.restore(c1)
    assert not (work / "d").is_symlink()
    assert (work / "d" / "x").read_text() == "inside\n"
    assert list(outside.iterdir()) == []


def test_big_blob_is_streamed(work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gitstate.workspace import restore
    from gitstate.workspace import snapshot as workspace

    monkeypatch.setattr(restore, "BIG_BLOB", 1000)
    monkeypatch.setattr(workspace, "BIG_BLOB", 1000)
    data = os.urandom(300_000)
    (work / "big.bin").write_bytes(data)
    run = gitstate.open_store(work).create_run()
    c1 = run.checkpoint({}, files=True)
    (work / "big.bin").write_bytes(b"small")
    run.checkpoint({}, files=True)
    run.restore(c1)
    assert (work / "big.bin").read_bytes() == data
    run.store.pack()  # now packed: streamed through git cat-file
    (work / "big.bin").write_bytes(b"small")
    run.checkpoint({}, files=True)
    run.restore(c1)
    assert (work / "big.bin").read_bytes() == data


# -- untrusted snapshots ---------------------------------------------------------------------------

def _blob(store: gitstate.Store, data: bytes) -> str:
    return store.core.object_writer().blob(data)


def _tree(store: gitstate.Store, entries: list[tuple[str, str, int]]) -> str:
    return store.core.object_writer().tree(entries)


def _checkpoint_with_files(run: gitstate.Run, files_tree: str) -> gitstate.Checkpoint:
    return run.checkpoint({}, branch="evil", files_tree=files_tree)


def _malicious_trees(store: gitstate.Store, outside: Path) -> dict[str, str]:
    payload = _blob(store, b"pwned\n")
    hooks = _tree(store, [("post-checkout", payload, MODE_EXEC)])
    link_out = _blob(store, str(outside).encode())
    commit_id = git(store.path, "rev-parse", "HEAD").strip()
    sub = lambda name, mode=MODE_BLOB, oid=payload: _tree(  # noqa: E731
        store, [("ok.txt", payload, MODE_BLOB), (name, oid, mode)])
    return {
        "dotdot": _tree(store, [("..", hooks, MODE_TREE)]),
        "dotdot-nested": _tree(store, [("a", _tree(store, [("..", _tree(store, [("..", hooks, MODE_TREE)]),
                                                            MODE_TREE)]), MODE_TREE)]),
        "slash-name": sub("../../evil"),
        "absolute": sub("/tmp/evil"),
        "dot": _tree(store, [(".", hooks, MODE_TREE)]),
        "dotgit": _tree(store, [(".git", hooks, MODE_TREE)]),
        "dotgit-upper": _tree(store, [(".GIT", hooks, MODE_TREE)]),
        "dotgit-nested": _tree(store, [("x", _tree(store, [(".Git", hooks, MODE_TREE)]), MODE_TREE)]),
        "dotgit-hfs": _tree(store, [(".g\u200cit", hooks, MODE_TREE)]),
        "dotgit-hfs-bom": _tree(store, [("\ufeff.git", hooks, MODE_TREE)]),
        "dotgit-ntfs-dot": _tree(store, [(".git.", hooks, MODE_TREE)]),
        "dotgit-ntfs-space": _tree(store, [(".git ", hooks, MODE_TREE)]),
        "dotgit-ntfs-short": _tree(store, [("GIT~1", hooks, MODE_TREE)]),
        "dotgit-ntfs-ads": _tree(store, [(".git::$INDEX_ALLOCATION", hooks, MODE_TREE)]),
        "backslash": sub("..\\evil"),
        "gitlink": sub("vendor", MODE_COMMIT, commit_id),
        "link-then-write": _tree(store, [("d", link_out, MODE_LINK),
                                         ("d", _tree(store, [("x", payload, MODE_BLOB)]), MODE_TREE)]),
        "link-case-collision": _tree(store, [("D", link_out, MODE_LINK),
                                             ("d", _tree(store, [("x", payload, MODE_BLOB)]), MODE_TREE)]),
        "link-gitmodules": sub(".gitmodules", MODE_LINK, link_out),
        "mode-mismatch": sub("f", MODE_TREE, payload),
    }


def test_malicious_trees_are_refused_and_nothing_is_written(work: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    store = gitstate.open_store(work)
    run = store.create_run()
    run.checkpoint({}, files=True)
    trees = _malicious_trees(store, outside)
    files = worktree_files(work)
    hooks = sorted(os.listdir(work / ".git" / "hooks"))
    for name, tree in trees.items():
        cp = _checkpoint_with_files(run, tree)
        for kwargs in ({}, {"force": True}, {"dry_run": True}):
            with pytest.raises(gitstate.UnsafeTreeError):
                run.restore(cp, **kwargs)  # type: ignore[arg-type]
        assert worktree_files(work) == files, name
        assert list(outside.iterdir()) == [], name
        assert sorted(os.listdir(work / ".git" / "hooks")) == hooks, name
        assert not (tmp_path / "evil").exists() and not Path("/tmp/evil").exists()
    assert SAFETY_BRANCH not in run.branches()


def test_benign_names_that_look_alike_are_fine(work: Path) -> None:
    store = gitstate.open_store(work)
    run = store.create_run()
    payload = _blob(store, b"fine\n")
    tree = _tree(store, [(name, payload, MODE_BLOB) for name in (".gitx", "git~2", ".github", "..foo", "a.git")])
    cp = _checkpoint_with_files(run, tree)
    result = run.restore(cp, force=True)
    assert set(result.added) == {".gitx", "git~2", ".github", "..foo", "a.git"}
    assert (work / "..foo").read_text() == "fine\n"


# -- speed-related paths: counts, the stat cache, writes through descriptors ------------------------

def test_counts_and_stat_cache_after_restore(work: Path) -> None:
    run = gitstate.open_store(work).create_run()
    for i in range(30):
        (work / "src" / f"m{i}.py").write_text(f"{i}\n")
    c1 = run.checkpoint({}, files=True)
    for i in range(10):
        (work / "src" / f"m{i}.py").write_text(f"changed {i}\n")
    (work / "src" / "m29.py").unlink()
    (work / "src" / "extra.py").write_text("new\n")
    result = run.restore(c1, force=True)
    assert (len(result.changed), len(result.added), len(result.removed)) == (10, 1, 1)
    files_in_c1 = len(git(work, "ls-tree", "-r", "--name-only", c1.files_tree_id).split())
    assert result.written == 11 and result.unchanged == files_in_c1 - 11
    assert result.to_dict()["written"] == 11 and result.to_dict()["deleted"] == 1
    # the restore told the stat cache what it wrote: the next snapshot reads no file. (Files
    # written in the same clock tick as the index are racily clean and read again, as git reads
    # them; the index is dated later here so that only the recorded stat data counts.)
    index = run.store.workspace.index_path
    later = os.stat(index).st_mtime_ns + 10**10
    os.utime(index, ns=(later, later))
    ticks: list[int] = []
    snap = run.store.workspace.snapshot(fast=True, progress=ticks.append)
    assert ticks == [] and snap.tree == c1.files_tree_id
    assert run.store.workspace.snapshot(progress=ticks.append).tree == c1.files_tree_id  # libgit2 agrees
    assert ticks == []


def test_progress_reports_phases_with_totals(work: Path) -> None:
    run = gitstate.open_store(work).create_run()
    c1 = run.checkpoint({}, files=True)
    for name in ("a.py", "b.py"):
        (work / "src" / name).write_text("edited\n")
    (work / "new.txt").write_text("new\n")
    seen: list[tuple[str, int, int]] = []
    run.restore(c1, force=True, progress=lambda phase, done, total: seen.append((phase, done, total)))
    reading = [s for s in seen if s[0] == "reading"]
    writing = [s for s in seen if s[0] == "writing"]
    assert reading[-1] == ("reading", 3, 3)
    assert [d for _, d, _ in writing] == [1, 2, 3] and {t for _, _, t in writing} == {3}
    assert seen.index(reading[-1]) < seen.index(writing[0])


def test_type_changes_both_ways(work: Path) -> None:
    run = gitstate.open_store(work).create_run()
    (work / "x").write_text("a file\n")
    (work / "y").mkdir()
    (work / "y" / "inner").write_text("in a directory\n")
    c1 = run.checkpoint({}, files=True)
    state1 = worktree_files(work)
    (work / "x").unlink()
    (work / "x").mkdir()
    (work / "x" / "deep").write_text("now a directory\n")
    (work / "y" / "inner").unlink()
    (work / "y").rmdir()
    (work / "y").write_text("now a file\n")
    run.checkpoint({}, files=True)
    run.restore(c1)
    assert worktree_files(work) == state1


def test_directory_swapped_for_a_link_during_the_restore_is_not_written_through(
        work: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The plan is checked, then (as an attacker racing the restore could) src/ becomes a link to a
    directory outside: the writes, made relative to O_NOFOLLOW directory descriptors, refuse."""
    outside = tmp_path / "outside"
    outside.mkdir()
    run = gitstate.open_store(work).create_run()
    c1 = run.checkpoint({}, files=True)
    (work / "src" / "a.py").write_text("edited\n")
    run.checkpoint({}, files=True)
    original = gitstate.Run._safety_checkpoint

    def swap(self: gitstate.Run, files_tree: str, target: gitstate.Checkpoint, *rest: Any) -> gitstate.Checkpoint:
        cp = original(self, files_tree, target, *rest)
        os.rename(work / "src", tmp_path / "src-aside")
        os.symlink(outside, work / "src")
        return cp

    monkeypatch.setattr(gitstate.Run, "_safety_checkpoint", swap)
    with pytest.raises(gitstate.UnsafeTreeError, match="symbolic link"):
        run.restore(c1)
    assert list(outside.iterdir()) == []


def test_filters_still_apply_on_checkout(work: Path) -> None:
    (work / ".gitattributes").write_text("*.txt text eol=crlf\n")
    (work / "notes.txt").write_text("one\ntwo\n")
    run = gitstate.open_store(work).create_run()
    c1 = run.checkpoint({}, files=True)
    blob = git(work, "rev-parse", f"{c1.files_tree_id}:notes.txt").strip()
    assert git(work, "cat-file", "blob", blob) == "one\ntwo\n"  # stored as git stores it
    (work / "notes.txt").write_text("changed\n")
    run.restore(c1, force=True)
    assert (work / "notes.txt").read_bytes() == b"one\r\ntwo\r\n"


def test_dry_run_lists_unsaved_and_changes_nothing(work: Path) -> None:
    store = gitstate.open_store(work)
    run = store.create_run()
    c1 = run.checkpoint({}, files=True)
    (work / "src" / "a.py").write_text("unsaved\n")
    (work / "fresh.txt").write_text("also unsaved\n")
    files = worktree_files(work)
    refs = git(work, "for-each-ref")
    result = run.restore(c1, dry_run=True)
    assert result.dry_run and result.safety is None
    assert result.unsaved == ("fresh.txt", "src/a.py")
    assert result.changed == ("src/a.py",) and result.removed == ("fresh.txt",)
    assert worktree_files(work) == files and git(work, "for-each-ref") == refs


def _git_dir_state(repo: Path) -> dict[str, tuple[int, int]]:
    """Every file under .git with its size and modification time (but the worktree's restore lock,
    a flock file that stays once a restore has taken it)."""
    out: dict[str, tuple[int, int]] = {}
    for dirpath, _dirs, files in os.walk(repo / ".git"):
        for name in files:
            if name.endswith(".restore.lock"):
                continue
            st = os.lstat(os.path.join(dirpath, name))
            out[os.path.join(dirpath, name)] = (st.st_size, st.st_mtime_ns)
    return out


def _edit_every_way(work: Path, round_: int) -> None:
    """Changes of every kind a restore plans for: content, new and removed files, a mode, a link,
    a file turned into a folder and back, a new folder, a big file (above the packing limit)."""
    (work / "src" / "a.py").write_text(f"edited {round_}\n")
    (work / f"new-{round_}.txt").write_text("new\n")
    if (work / "src" / "b.py").exists():
        (work / "src" / "b.py").unlink()
    (work / "tool.sh").chmod(0o644 if round_ % 2 else 0o755)
    os.unlink(work / "alink")
    os.symlink("tool.sh" if round_ % 2 else "src/a.py", work / "alink")
    folder = work / "grown" / "deeper"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "leaf.txt").write_text(f"leaf {round_}\n")


def test_dry_run_writes_nothing_under_git_and_plans_as_a_restore(work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A dry run of a worktree the scan can read leaves every file of .git as it was (no object,
    no stat cache: it works on a read-only repository), and plans exactly what the restore then
    does: the same files to write, change and remove, and the same unsaved files."""
    from gitstate.workspace import snapshot

    monkeypatch.setattr(snapshot, "BIG_BLOB", 64)  # the big-file path of the scan is taken too
    store = gitstate.open_store(work)
    run = store.create_run()
    c1 = run.checkpoint({}, files=True)
    run.checkpoint({}, files=True)  # the stat cache and the last look at the user's index exist
    for round_ in range(3):
        _edit_every_way(work, round_)
        (work / "big.bin").write_bytes(os.urandom(200 + round_))
        store.wait_for_housekeeping()
        before, files = _git_dir_state(work), worktree_files(work)
        planned = run.restore(c1, dry_run=True)
        assert _git_dir_state(work) == before, "a dry run wrote under .git"
        assert worktree_files(work) == files
        assert planned.dry_run and planned.unsaved and planned.changed and planned.removed
        done = run.restore(c1, force=True)
        assert (done.changed, done.added, done.removed, done.skipped) == (
            planned.changed, planned.added, planned.removed, planned.skipped)
        assert done.unchanged == planned.unchanged
        # the unsaved files are those the safety checkpoint had to keep
        assert set(planned.unsaved) <= set(done.changed) | set(done.removed)


def test_a_refused_restore_writes_nothing_under_git(work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A restore refused for unsaved changes leaves every file of .git as it was (no object of
    the unsaved files, no stat cache), as a dry run does; with --force the same restore goes on."""
    from gitstate.workspace import snapshot

    monkeypatch.setattr(snapshot, "BIG_BLOB", 64)
    store = gitstate.open_store(work)
    run = store.create_run()
    c1 = run.checkpoint({}, files=True)
    run.checkpoint({}, files=True)
    for round_ in range(2):
        _edit_every_way(work, round_)
        (work / "big.bin").write_bytes(os.urandom(200 + round_))
        store.wait_for_housekeeping()
        before, files = _git_dir_state(work), worktree_files(work)
        with pytest.raises(gitstate.RestoreConflictError) as info:
            run.restore(c1)
        assert "src/a.py" in info.value.paths
        assert _git_dir_state(work) == before, "a refused restore wrote under .git"
        assert worktree_files(work) == files
        assert run.restore(c1, force=True).safety is not None


def test_dry_run_of_some_paths_reads_only_those(work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A dry run limited to paths hashes only the changed files under them (a huge changed file
    elsewhere is not read), writes nothing, and plans what the restore of those paths then does."""
    from gitstate.workspace import snapshot

    monkeypatch.setattr(snapshot, "BIG_BLOB", 64)
    store = gitstate.open_store(work)
    run = store.create_run()
    c1 = run.checkpoint({}, files=True)
    run.checkpoint({}, files=True)
    totals: list[int] = []
    hashed: list[str] = []
    real = snapshot.Workspace._hashed

    def progress(phase: str, done: int, total: int) -> None:
        if phase == "reading":
            totals.append(total)

    for round_ in range(2):
        _edit_every_way(work, round_)
        (work / "big.bin").write_bytes(os.urandom(300 + round_))  # outside the paths restored
        (work / "src" / "c.py").write_text(f"new {round_}\n")
        store.wait_for_housekeeping()
        totals.clear()
        hashed.clear()
        monkeypatch.setattr(snapshot.Workspace, "_hashed",
                            lambda self, name: hashed.append(name) or real(self, name))
        before, files = _git_dir_state(work), worktree_files(work)
        planned = run.restore(c1, ["src"], dry_run=True, progress=progress)
        monkeypatch.setattr(snapshot.Workspace, "_hashed", real)
        assert _git_dir_state(work) == before and worktree_files(work) == files
        assert totals and max(totals) == 2, totals  # src/a.py and src/c.py: nothing else was read
        assert "big.bin" not in hashed
        assert planned.changed == ("src/a.py",) and set(planned.removed) == {"src/c.py"}
        done = run.restore(c1, ["src"], force=True)
        assert (done.changed, done.added, done.removed, done.unchanged) == (
            planned.changed, planned.added, planned.removed, planned.unchanged)
        assert (work / "big.bin").exists() and (work / "src" / "b.py").exists()


@pytest.mark.parametrize("event", ["user_add", "user_commit", "gc", "pack_refs", "gitignore", "exclude",
                                   "tracked_ignored"])
def test_dry_run_after_everyday_git_events_writes_nothing(work: Path, event: str) -> None:
    """The user's git changing its index, a gc, packed refs, changed ignore rules: the dry run
    still plans without writing under .git (captured and dropped files worked out in memory),
    and plans what the restore then does."""
    store = gitstate.open_store(work)
    run = store.create_run()
    c1 = run.checkpoint({}, files=True)
    run.checkpoint({}, files=True)
    (work / "src" / "a.py").write_text("changed\n")
    (work / "extra.txt").write_text("extra\n")
    if event == "user_add":
        git(work, "add", "extra.txt")
    elif event == "user_commit":
        git(work, "add", "-A")
        git(work, "-c", "user.name=u", "-c", "user.email=u@x", "commit", "-qm", "user")
    elif event == "gc":
        store.wait_for_housekeeping()
        git(work, "gc", "-q")
    elif event == "pack_refs":
        git(work, "pack-refs", "--all")
    elif event == "gitignore":
        (work / ".gitignore").write_text("*.log\nextra.txt\n")
    elif event == "exclude":
        (work / ".git" / "info").mkdir(exist_ok=True)
        (work / ".git" / "info" / "exclude").write_text("extra.txt\n")
    else:
        (work / "debug.log").write_text("now tracked by the user\n")
        git(work, "add", "-f", "debug.log")
    store.wait_for_housekeeping()
    before = _git_dir_state(work)
    planned = run.restore(c1, dry_run=True)
    assert _git_dir_state(work) == before, "a dry run wrote under .git"
    # what the survey found is exactly the tree a snapshot then stores
    survey = store.core.workspace.survey()
    assert survey is not None
    root, _trees = build_trees({os.fsencode(p): (mode, bytes.fromhex(oid)) for p, (oid, mode) in survey.entries.items()})
    assert root.hex() == store.core.workspace.snapshot(fast=True).tree
    done = run.restore(c1, force=True)
    assert (done.changed, done.added, done.removed, done.unchanged) == (
        planned.changed, planned.added, planned.removed, planned.unchanged)
    # committed by the user, the change is saved (HEAD's tree holds it); otherwise it is not
    assert ("src/a.py" in planned.unsaved) == (event != "user_commit")
    # a file that became ignored is no longer the restore's to remove
    assert ("extra.txt" in planned.removed) == (event not in ("gitignore", "exclude"))


def test_dry_run_that_needs_an_unwritable_snapshot_says_so(work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where only a snapshot can tell and the store cannot be written, the dry run's error says
    why it had to write; a restore's error stays the store's own."""
    from gitstate.workspace import snapshot

    run = gitstate.open_store(work).create_run()
    c1 = run.checkpoint({}, files=True)

    def unwritable(self: object, *args: object, **kwargs: object) -> None:
        raise gitstate.StoreWriteError("/repo/.git/objects/pack", "[Errno 13] Permission denied")

    monkeypatch.setattr(snapshot.Workspace, "survey", lambda self, **kw: None)
    monkeypatch.setattr(snapshot.Workspace, "snapshot", unwritable)
    with pytest.raises(gitstate.StoreWriteError) as err:
        run.restore(c1, dry_run=True)
    assert str(err.value) == ("cannot write the store at /repo/.git/objects/pack: a dry run of this worktree needs "
                              "a snapshot (no stat cache yet, or checkout filters apply), which cannot be written: "
                              "[Errno 13] Permission denied")
    with pytest.raises(gitstate.StoreWriteError) as err:
        run.restore(c1, force=True)
    assert str(err.value) == "cannot write the store at /repo/.git/objects/pack: [Errno 13] Permission denied"


def test_restore_of_a_path_that_names_nothing_is_refused(work: Path) -> None:
    """A mistyped path (in neither the snapshot nor the worktree) is an error, as git's checkout
    reports a pathspec that matched nothing, with or without a dry run; the worktree is unchanged.
    A file only in the snapshot, or only in the worktree, is restored or removed as before."""
    run = gitstate.open_store(work).create_run()
    c1 = run.checkpoint({}, files=True)
    (work / "src" / "a.py").write_text("changed\n")
    (work / "later.txt").write_text("new\n")
    files = worktree_files(work)
    for wrong in (["nope.txt"], ["src/nope.py"], ["src/a.py/below"], ["src/a.py", "nope/deeper"]):
        for dry_run in (True, False):
            with pytest.raises(gitstate.UsageError, match="is neither in the snapshot of checkpoint"):
                run.restore(c1, wrong, dry_run=dry_run, force=True)
    assert worktree_files(work) == files
    assert run.restore(c1, ["later.txt"], force=True).removed == ("later.txt",)
    (work / "src" / "a.py").unlink()
    assert run.restore(c1, ["src/a.py"], force=True).added == ("src/a.py",)


def test_dry_run_with_a_name_that_is_not_utf8(work: Path) -> None:
    """A new file whose name is not UTF-8: no traceback (the scan leaves such a worktree to the
    snapshot, which captures the file), and the restore removes it as planned."""
    run = gitstate.open_store(work).create_run()
    c1 = run.checkpoint({}, files=True)
    odd = os.path.join(os.fsencode(work), b"caf\xff.txt")
    with open(odd, "wb") as fh:
        fh.write(b"odd\n")
    planned = run.restore(c1, dry_run=True)
    assert planned.removed == (os.fsdecode(b"caf\xff.txt"),)
    done = run.restore(c1, force=True)
    assert done.removed == planned.removed and not os.path.lexists(odd)


def test_validation_fast_path_agrees_with_check_name(work: Path) -> None:
    """validate_tree skips check_name for plainly safe names; it must refuse exactly what
    check_name refuses, whatever the name and mode."""
    import random

    from gitstate.workspace.pathsafety import check_name
    from gitstate.workspace.restore import validate_tree

    store = gitstate.open_store(work)
    payload = _blob(store, b"x\n")
    sub = _tree(store, [("f", payload, MODE_BLOB)])
    rng = random.Random(7)
    alphabet = "abgG.~1 :\\/-_\u200c\ufeffTI"
    names = {"", ".", "..", ".git", "git~1", "GIT~1", ".gitmodules", "gi7eba~1", "a\\b", "a/b", "x.git",
             "gitx", "Git", ".g\u200cit", "normal", "README.md"}
    names |= {"".join(rng.choice(alphabet) for _ in range(rng.randint(1, 6))) for _ in range(300)}
    modes = [MODE_BLOB, MODE_EXEC, MODE_LINK, MODE_TREE, MODE_COMMIT, 0o100664, 0o100600]
    for name in sorted(names):
        mode = rng.choice(modes)
        oid = sub if mode == MODE_TREE else payload
        tree = _tree(store, [(name, oid, mode)]) if name else None
        if tree is None:
            continue
        refused = check_name(name, mode) is not None
        try:
            validate_tree(store.core.reader, tree)
        except gitstate.UnsafeTreeError:
            assert refused, (name, oct(mode))
        else:
            assert not refused, (name, oct(mode))


# -- large restores: several writer threads ---------------------------------------------------------

def _many_files(work: Path) -> None:
    """A worktree a restore writes with several threads: 300 files in nested folders, a link, an
    executable, and a file/directory pair that swap types."""
    for i in range(300):
        folder = work / f"pkg{i % 7}" / f"sub{i % 3}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"m{i:03d}.py").write_text(f"value = {i}\n")
    (work / "pkg0" / "run.sh").write_text("#!/bin/sh\n")
    (work / "pkg0" / "run.sh").chmod(0o755)
    os.symlink("sub0/m000.py", work / "pkg0" / "link")
    (work / "kind").write_text("a file first\n")


def test_parallel_restore_writes_what_a_serial_one_writes(work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gitstate.workspace import restore as restoring

    assert restoring.WRITERS > 1 and restoring.PARALLEL_MIN <= 300  # the path under test is taken
    _many_files(work)
    run = gitstate.open_store(work).create_run()
    c1 = run.checkpoint({}, files=True)
    state1 = worktree_files(work)
    threads: set[str] = set()
    place = restoring._place

    def spying(*args: object) -> os.stat_result:
        threads.add(threading.current_thread().name)
        return place(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(restoring, "_place", spying)
    for round_ in range(2):
        shutil.rmtree(work / "pkg3")  # whole folders to create again, concurrently
        for i in range(0, 300, 2):
            path = work / f"pkg{i % 7}" / f"sub{i % 3}" / f"m{i:03d}.py"
            if path.exists():
                path.write_text(f"edited {round_} {i}\n")
        (work / "pkg0" / "run.sh").chmod(0o644)
        (work / "kind").unlink()
        (work / "kind").mkdir()
        (work / "kind" / "inner").write_text("now a directory\n")
        (work / "pkg9" / "new").mkdir(parents=True)
        (work / "pkg9" / "new" / "created.py").write_text("created since\n")
        on_main: list[bool] = []

        def progress(*_: object, seen: list[bool] = on_main) -> None:
            seen.append(threading.current_thread() is threading.main_thread())

        result = run.restore(c1, force=True, progress=progress)
        assert worktree_files(work) == state1
        assert result.written > restoring.PARALLEL_MIN and all(on_main) and on_main
    assert len(threads) > 1 and threading.main_thread().name not in threads
    assert not [t for t in threading.enumerate() if t.name.startswith("gitstate-restore")]
    # every file written went to the stat cache: the next snapshot reads none of them
    index = run.store.workspace.index_path
    later = os.stat(index).st_mtime_ns + 10**10
    os.utime(index, ns=(later, later))
    ticks: list[int] = []
    assert run.store.workspace.snapshot(fast=True, progress=ticks.append).tree == c1.files_tree_id
    assert ticks == []


@pytest.mark.parametrize("where", ["writer", "reader", "in place"])
def test_parallel_restore_stops_at_the_first_failure(work: Path, monkeypatch: pytest.MonkeyPatch,
                                                      where: str) -> None:
    """A failure of a writer thread (a file replaced), of the reading thread, or of a file rewritten
    in place on the reading thread stops the restore, is raised once, and leaves no thread."""
    from gitstate.workspace import restore as restoring

    _many_files(work)
    run = gitstate.open_store(work).create_run()
    c1 = run.checkpoint({}, files=True)
    for i in range(300):
        (work / f"pkg{i % 7}" / f"sub{i % 3}" / f"m{i:03d}.py").write_text(f"edited {i}\n")
    calls: list[str] = []
    if where in ("writer", "in place"):
        if where == "writer":
            monkeypatch.setattr(restoring, "INPLACE_MAX", -1)  # every file replaced, by the writer threads
        name = "_place" if where == "writer" else "_overwrite"
        real = getattr(restoring, name)

        def failing(*args: Any) -> os.stat_result:
            job = args[2]
            calls.append(job.path)
            if len(calls) == 40:
                raise OSError(errno.EIO, "Input/output error")
            return real(*args)  # type: ignore[no-any-return]

        monkeypatch.setattr(restoring, name, failing)
        expected: type[Exception] = gitstate.StoreWriteError
    else:
        prepare = restoring._prepare

        def failing_read(*args: object) -> restoring._Job:
            calls.append(str(args[1]))
            if len(calls) == 40:
                raise gitstate.CorruptObjectError("0" * 40, "truncated")
            return prepare(*args)  # type: ignore[arg-type]

        monkeypatch.setattr(restoring, "_prepare", failing_read)
        expected = gitstate.CorruptObjectError
    with pytest.raises(expected) as caught:
        bounded(lambda: run.restore(c1, force=True), seconds=30)
    if where != "reader":
        assert calls[39] in str(caught.value)  # the path that failed is named
        assert isinstance(caught.value, gitstate.WorktreeWriteError)
        assert str(caught.value).startswith(f"cannot write {work}") and "in the worktree" in str(caught.value)
    assert not [t for t in threading.enumerate() if t.name.startswith("gitstate-restore")]
    assert len(calls) < 300  # the writing stopped: not every queued file was written
    monkeypatch.undo()
    assert run.restore(c1, force=True).checkpoint == c1.id  # the restore can simply run again
    assert (work / "pkg1" / "sub1" / "m001.py").read_text() == "value = 1\n"


def test_large_restore_still_checks_a_damaged_loose_blob(work: Path) -> None:
    """The loose objects of a large restore are looked up in directory listings, not opened one by
    one; a damaged loose copy of a blob to write is still found before anything is written."""
    _many_files(work)
    run = gitstate.open_store(work).create_run()
    c1 = run.checkpoint({}, files=True)
    target = work / "pkg2" / "sub2" / "m002.py"
    oid = git(work, "hash-object", str(target)).strip()
    for i in range(300):
        (work / f"pkg{i % 7}" / f"sub{i % 3}" / f"m{i:03d}.py").write_text(f"edited {i}\n")
    loose = work / ".git" / "objects" / oid[:2] / oid[2:]
    loose.parent.mkdir(exist_ok=True)
    loose.write_bytes(zlib.compress(b"blob 11\0value = 2\n")[:9])  # truncated
    before = worktree_files(work)
    with pytest.raises(gitstate.CorruptObjectError) as caught:
        bounded(lambda: run.restore(c1, force=True), seconds=30)
    assert caught.value.oid == oid
    assert worktree_files(work) == before


def test_two_restores_of_one_worktree_at_once_take_turns(work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A restore started while another one of the same worktree is writing (another process, or
    here another store on another thread) waits for it, then runs whole: the worktree ends as the
    second one's checkpoint, never a mix (before, both wrote at once: 'File exists' failures, and
    the first one's remaining files overwrote the second's)."""
    from gitstate.workspace import restore as restoring

    _many_files(work)
    run = gitstate.open_store(work).create_run(run_id="r")
    c1 = run.checkpoint({}, files=True)
    for i in range(0, 300, 3):
        path = work / f"pkg{i % 7}" / f"sub{i % 3}" / f"m{i:03d}.py"
        path.write_text(f"second version {i}\n" * 20)
    c2 = run.checkpoint({}, files=True)
    state2 = worktree_files(work)
    run.restore(c1, force=True)
    for i in range(1, 300, 3):
        (work / f"pkg{i % 7}" / f"sub{i % 3}" / f"m{i:03d}.py").write_text("unsaved\n")
    first_writing, go_on = threading.Event(), threading.Event()

    def pausing(real: Any) -> Any:
        def wrapper(*args: object) -> os.stat_result | None:
            if not first_writing.is_set():  # the first file of the first restore: it waits there
                first_writing.set()
                go_on.wait(10)
            return real(*args)  # type: ignore[no-any-return]
        return wrapper

    # a file is written in place (_overwrite) or replaced (_place): the first one written pauses
    monkeypatch.setattr(restoring, "_place", pausing(restoring._place))
    monkeypatch.setattr(restoring, "_overwrite", pausing(restoring._overwrite))
    failures: list[BaseException] = []
    done: list[str] = []

    def restore(cp: gitstate.Checkpoint, name: str) -> None:
        store = gitstate.open_store(work)
        try:
            store.get_run("r").restore(cp.id, force=True)
            done.append(name)
        except BaseException as exc:  # noqa: BLE001 - checked below
            failures.append(exc)
        finally:
            store.close()

    one = threading.Thread(target=restore, args=(c1, "first"))
    one.start()
    assert first_writing.wait(10)  # the first restore is writing files, paused
    two = threading.Thread(target=restore, args=(c2, "second"))
    two.start()
    two.join(1.0)
    assert done == [], "the second restore ran while the first one was writing"
    go_on.set()
    one.join(30)
    two.join(30)
    assert not failures, failures
    assert done == ["first", "second"]
    assert worktree_files(work) == state2


def test_a_restore_waits_for_another_then_says_it_is_busy(work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gitstate.workspace import snapshot as snapshots

    run = gitstate.open_store(work).create_run(run_id="r")
    cp = run.checkpoint({}, files=True)
    (work / "src" / "a.py").write_text("unsaved\n")
    other = gitstate.open_store(work)
    monkeypatch.setattr(snapshots, "RESTORE_WAIT", 0.3)
    with other.core.workspace.restoring():  # another restore is running
        with pytest.raises(gitstate.WorktreeBusyError, match=f"another restore of the worktree .* is running "
                           f"\\(pid {os.getpid()}\\).*nothing was changed"):
            bounded(lambda: run.restore(cp, force=True))
        assert (work / "src" / "a.py").read_text() == "unsaved\n"
        assert run.restore(cp, dry_run=True).changed == ("src/a.py",)  # a dry run writes nothing: no wait
    assert run.restore(cp, force=True).changed == ("src/a.py",)
    assert (work / "src" / "a.py").read_text() == "a = 1\n"


def test_a_restore_lock_is_a_flock_released_at_the_end(work: Path) -> None:
    """The restore lock is held for the block only, and another taker is refused meanwhile."""
    from gitstate.git import lockfile

    workspace = gitstate.open_store(work).core.workspace
    lock = Path(workspace.index_path + ".restore.lock")
    with workspace.restoring():
        assert lockfile.acquire(str(lock)) is None
        assert lockfile.holder(str(lock)) == os.getpid()
    again = lockfile.acquire(str(lock))
    assert again is not None
    again.release()


@pytest.mark.parametrize("where", ["outside", "inside"])
def test_a_link_that_replaced_a_directory_is_saved_then_replaced(work: Path, tmp_path: Path, where: str) -> None:
    """``d -> /somewhere`` (or ``d -> e``) where the snapshot has ``d/f``: the link is a captured
    file like any other. Without force it is unsaved work (its target is in no checkpoint), a dry
    run lists the plan, and with force it is saved in the safety checkpoint, removed and the
    directory restored; what the link points to is never looked at or written through (the restore
    was refused with "directories are in the way: d/f", found through the link)."""
    run = gitstate.open_store(work).create_run()
    (work / "d").mkdir()
    (work / "d" / "f").write_text("the checkpoint's\n")
    target = tmp_path / "somewhere" if where == "outside" else work / "e"
    target.mkdir()
    (target / "f").write_text("the link target's, never touched\n")  # inside: in the checkpoint too
    c1 = run.checkpoint({}, files=True)
    shutil.rmtree(work / "d")
    os.symlink(target if where == "outside" else "e", work / "d")
    before = worktree_files(work)

    with pytest.raises(gitstate.RestoreConflictError) as err:
        run.restore(c1)
    assert err.value.paths == ["d"]
    plan = run.restore(c1, dry_run=True)
    assert (plan.added, plan.removed, plan.unsaved) == (("d/f",), ("d",), ("d",))
    assert worktree_files(work) == before

    result = run.restore(c1, force=True)
    assert not (work / "d").is_symlink()
    assert (work / "d" / "f").read_text() == "the checkpoint's\n"
    assert (target / "f").read_text() == "the link target's, never touched\n"
    assert result.safety is not None
    saved = run.load(result.safety).files_tree_id
    assert git(work, "ls-tree", f"{saved}", "d").split()[0] == f"{MODE_LINK:o}"

    run.restore(result.safety, force=True)  # undone: the link is back
    assert worktree_files(work) == before


def test_an_ignored_link_where_a_directory_must_go_is_named(work: Path, tmp_path: Path) -> None:
    run = gitstate.open_store(work).create_run()
    (work / "d").mkdir()
    (work / "d" / "f").write_text("the checkpoint's\n")
    c1 = run.checkpoint({}, files=True)
    shutil.rmtree(work / "d")
    (tmp_path / "somewhere").mkdir()
    (tmp_path / "somewhere" / "f").write_text("never touched\n")
    os.symlink(tmp_path / "somewhere", work / "d")
    (work / ".gitignore").write_text("*.log\nd\n")
    with pytest.raises(gitstate.RestoreConflictError, match="symbolic links") as err:
        run.restore(c1, force=True)
    assert err.value.paths == ["d"]
    assert (work / "d").is_symlink() and (tmp_path / "somewhere" / "f").read_text() == "never touched\n"


def test_the_cli_dry_run_lists_a_link_that_replaced_a_directory(work: Path, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from gitstate_cli.main import cli

    monkeypatch.chdir(work)
    (work / "d").mkdir()
    (work / "d" / "f").write_text("the checkpoint's\n")
    runner = CliRunner()
    assert runner.invoke(cli, ["checkpoint", "r", "--files"], input="{}").exit_code == 0
    shutil.rmtree(work / "d")
    (tmp_path / "somewhere").mkdir()
    (tmp_path / "somewhere" / "f").write_text("never touched\n")
    os.symlink(tmp_path / "somewhere", work / "d")
    dry = runner.invoke(cli, ["restore", "r", "--dry-run"], prog_name="git agentos")
    assert dry.exit_code == 0, dry.output
    lines = dry.stdout.splitlines()
    assert "  would create: d/f" in lines and "  would remove: d" in lines
    assert "  unsaved, refused without --force: d" in lines
    refused = runner.invoke(cli, ["restore", "r"], prog_name="git agentos")
    assert refused.exit_code != 0 and "d" in refused.stderr and "d/f" not in refused.stderr
    assert runner.invoke(cli, ["restore", "r", "--force"]).exit_code == 0
    assert (work / "d" / "f").read_text() == "the checkpoint's\n"
    assert (tmp_path / "somewhere" / "f").read_text() == "never touched\n"


@pytest.mark.parametrize("count", [3, 300])  # written by the calling thread / with the writer threads
def test_small_files_are_rewritten_in_place_with_exact_bytes(work: Path, count: int) -> None:
    """A small, plain file is rewritten in place (its inode stays: nothing freed, nothing made),
    to exactly the snapshot's bytes whether it grows or shrinks; a snapshot then finds the
    worktree as restored."""
    paths = [work / "src" / f"f{i:03d}.txt" for i in range(count)]
    for i, path in enumerate(paths):
        path.write_bytes(b"x" * (10 + i))
    run = gitstate.open_store(work).create_run()
    first = run.checkpoint({}, files=True)
    for i, path in enumerate(paths):
        path.write_bytes(b"y" * (5000 if i % 2 else 3))  # longer and shorter than before
    second = run.checkpoint({}, files=True)
    # a descriptor open on each file reads what the restore wrote only if the file was rewritten
    # (an unlinked one keeps its old bytes for its open descriptors; inode numbers can be reused)
    held = {p: os.open(p, os.O_RDONLY) for p in paths}
    try:
        result = run.restore(first)
        assert len(result.changed) == count
        for i, path in enumerate(paths):
            assert path.read_bytes() == b"x" * (10 + i)
            assert os.pread(held[path], 10_000, 0) == b"x" * (10 + i), "replaced, not rewritten in place"
    finally:
        for fd in held.values():
            os.close(fd)
    assert run.restore(second).changed and paths[1].read_bytes() == b"y" * 5000
    assert paths[0].read_bytes() == b"yyy"
    assert run.store.workspace.snapshot(fast=True).tree == second.files_tree_id


def test_files_git_would_replace_are_replaced_not_rewritten(work: Path, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Rewriting in place is only for a file git's checkout would leave the same: a second name of a
    hard-linked file keeps its bytes, a read-only file comes back with the usual permissions, a
    file that becomes executable or stops being one is replaced, and so is a file above the size
    limit."""
    from gitstate.workspace import restore as restoring

    src = work / "src"
    def text(name: str, version: int) -> str:
        return f"{name} {version}\n" * (50 if name == "big" else 1)

    for name in ("linked", "readonly", "to-exec", "from-exec", "big"):
        (src / name).write_text(text(name, 1))
    (src / "from-exec").chmod(0o755)
    run = gitstate.open_store(work).create_run()
    first = run.checkpoint({}, files=True)
    for name in ("linked", "readonly", "to-exec", "from-exec", "big"):
        (src / name).write_text(text(name, 2))
    (src / "to-exec").chmod(0o755)
    (src / "from-exec").chmod(0o644)
    run.checkpoint({}, files=True)
    other_name = tmp_path / "other-name"
    os.link(src / "linked", other_name)
    (src / "readonly").chmod(0o444)
    monkeypatch.setattr(restoring, "INPLACE_MAX", 100)  # "big" is above it, the others below
    names = ("linked", "readonly", "to-exec", "from-exec", "big")
    held = {name: os.open(src / name, os.O_RDONLY) for name in names}  # see the test above
    try:
        bounded(lambda: run.restore(first), seconds=30)
        for name in names:
            assert (src / name).read_text() == text(name, 1), name
            assert os.pread(held[name], 1000, 0) == text(name, 2).encode(), f"{name} was rewritten in place"
    finally:
        for fd in held.values():
            os.close(fd)
    assert other_name.read_text() == "linked 2\n"  # the other name of the linked file kept its bytes
    assert (src / "readonly").stat().st_mode & 0o200  # made anew, with the umask's permissions
    assert os.access(src / "to-exec", os.X_OK) is False
    assert (src / "from-exec").stat().st_mode & 0o100


def _age(root: Path) -> None:
    """Date every worktree file a minute back, so none is racily clean against the stat cache
    written next (a snapshot then trusts them all without reading)."""
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d != ".git"]
        for name in files:
            full = os.path.join(dirpath, name)
            st = os.lstat(full)
            os.utime(full, ns=(st.st_atime_ns - 60 * 10**9, st.st_mtime_ns - 60 * 10**9), follow_symlinks=False)


@pytest.mark.parametrize("edited", [False, True])
def test_a_restore_scans_a_worktree_it_finds_as_cached_once(work: Path, monkeypatch: pytest.MonkeyPatch,
                                                           edited: bool) -> None:
    """A restore checks the worktree first with a scan that writes nothing; when that scan found
    every file as the stat cache holds it, it is the snapshot (no second scan) and the safety
    checkpoint holds that tree. A file changed since (here to content a checkpoint holds, so no
    refusal) needs the snapshot, taken as before."""
    run = gitstate.open_store(work).create_run()
    first = run.checkpoint({}, files=True)
    (work / "src" / "a.py").write_text("a = 2\n")
    second = run.checkpoint({}, files=True)
    _age(work)
    run.store.workspace.snapshot(fast=True)  # the stat cache takes every file, as a restore's snapshot does
    if edited:
        (work / "src" / "a.py").write_text("a = 1\n")  # as in the first checkpoint: saved
    calls: list[int] = []
    real = gitstate.Workspace.snapshot

    def counting(self: gitstate.Workspace, *args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(gitstate.Workspace, "snapshot", counting)
    result = run.restore(first if not edited else second)
    assert len(calls) == (1 if edited else 0)
    assert result.safety is not None
    safety = run.load(result.safety)
    assert safety.files_tree_id == (second.files_tree_id if not edited else first.files_tree_id)
    assert (work / "src" / "a.py").read_text() == ("a = 1\n" if not edited else "a = 2\n")


def test_unsaved_takes_a_saved_tree_that_is_the_worktree_whole(work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The unsaved-work check knows the worktree's tree when it has one: a saved tree that is
    that tree holds every file the restore would overwrite (no file looked up in it); a tree
    that is not still has each file looked up, and unsaved content is still found."""
    from gitstate.workspace import restore as restoring

    store = gitstate.open_store(work)
    run = store.create_run()
    first = run.checkpoint({}, files=True)
    (work / "src" / "a.py").write_text("a = 2\n")
    (work / "src" / "b.py").write_text("b = 2\n")
    second = run.checkpoint({}, files=True)
    assert first.files_tree_id is not None and second.files_tree_id is not None
    plan = restoring.make_plan(store.repo, second.files_tree_id, first.files_tree_id, None)
    assert set(plan.changed) == {"src/a.py", "src/b.py"}
    lookups: list[str] = []
    real = restoring.find_entry

    def counting(reader: Any, tree_id: str, path: str, trees: Any = None) -> Any:
        lookups.append(tree_id)
        return real(reader, tree_id, path, trees)

    monkeypatch.setattr(restoring, "find_entry", counting)
    saved = [first.files_tree_id, second.files_tree_id]
    assert restoring.unsaved(store.core.reader, plan, saved, second.files_tree_id) == []
    assert lookups == [first.files_tree_id] * 2  # the second tree is the worktree's: no lookup
    lookups.clear()
    assert restoring.unsaved(store.core.reader, plan, saved) == []
    assert len(lookups) == 4
    # a worktree tree that no saved tree is: its changed files are unsaved
    assert restoring.unsaved(store.core.reader, plan, [first.files_tree_id], second.files_tree_id) == ["src/a.py", "src/b.py"]


_RESTORE_AND_MEASURE = """
import json, resource, sys
import gitstate
run = gitstate.open_store(sys.argv[1]).get_run(sys.argv[2])
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
run.restore(sys.argv[3], force=True)
print(json.dumps({"before": before, "self": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before,
                  "children": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss - before}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="ru_maxrss in KiB is Linux's")
def test_restoring_a_big_file_holds_none_of_it_in_memory(work: Path) -> None:
    """A 64 MiB file (packed by the snapshot, as every file above BIG_BLOB is) is restored by a
    fresh process whose peak memory, and that of every git it starts, stays well under the file's
    size above what the process had before: the blob is streamed, never held whole. (A child's
    peak counts the parent's pages it shares between fork and exec, hence ``before``.)"""
    from gitstate.workspace.snapshot import BIG_BLOB

    size = 64 << 20
    assert size > BIG_BLOB
    digest = hashlib.sha256()
    with open(work / "big.bin", "wb") as fh:
        for _ in range(size >> 20):
            chunk = os.urandom(1 << 20)
            digest.update(chunk)
            fh.write(chunk)
    run = gitstate.open_store(work).create_run(run_id="big")
    c1 = run.checkpoint({}, files=True)
    (work / "big.bin").write_bytes(b"small")
    run.checkpoint({}, files=True)
    proc = subprocess.run([sys.executable, "-c", _RESTORE_AND_MEASURE, str(work), "big", c1.id],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    peak = json.loads(proc.stdout)  # KiB
    restored = hashlib.sha256()
    with open(work / "big.bin", "rb") as fh:
        while chunk := fh.read(1 << 20):
            restored.update(chunk)
    assert restored.hexdigest() == digest.hexdigest()
    assert peak["self"] < (size >> 10) // 4, peak
    assert peak["children"] < (size >> 10) // 4, peak
