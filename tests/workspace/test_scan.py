"""The fast capture (gitstate.workspace.scan) against libgit2's add_all: same trees on the same
worktrees, a stat cache libgit2 agrees with, and a fall back wherever it does not apply."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pygit2
import pytest

import gitstate
from gitstate.workspace import scan
from gitstate.workspace import snapshot as snapshot_module
from tests.conftest import git


def loose_objects(repo: Path) -> set[str]:
    objdir = repo / ".git" / "objects"
    return {d.name + f.name for d in objdir.iterdir() if len(d.name) == 2 for f in d.iterdir()}


def reference_tree(repo: Path) -> gitstate.Snapshot:
    """The worktree captured by libgit2 alone, from nothing: a fresh private index, add_all."""
    common = repo / ".git" / "agentos"
    saved = repo.parent / "saved-agentos"
    shutil.copytree(common, saved)
    for name in os.listdir(common):
        if name.startswith("index-"):
            os.unlink(common / name)
    try:
        store = gitstate.open_store(repo)
        snap = store.core.workspace.snapshot()
        store.close()
    finally:
        shutil.rmtree(common)
        shutil.move(saved, common)
    assert not snap.scanned
    return snap


def fast(store: gitstate.Store) -> gitstate.Snapshot:
    snap = store.core.workspace.snapshot(fast=True)
    assert snap.scanned, "the fast capture fell back to add_all"
    return snap


@pytest.fixture
def work(repo: Path) -> Path:
    (repo / ".gitignore").write_text("*.log\nbuild/\n")
    (repo / "src" / "pkg").mkdir(parents=True)
    (repo / "src" / "pkg" / "a.py").write_text("a\n")
    (repo / "src" / "b.py").write_text("b\n")
    (repo / "run.sh").write_text("#!/bin/sh\n")
    (repo / "run.sh").chmod(0o755)
    os.symlink("src/b.py", repo / "link")
    os.symlink("src", repo / "dirlink")
    (repo / "debug.log").write_text("ignored\n")
    (repo / "build").mkdir()
    (repo / "build" / "out.o").write_text("ignored\n")
    (repo / "spaced name ü.txt").write_text("unicode\n")
    return repo


def edit_everything(repo: Path) -> None:
    (repo / "src" / "pkg" / "a.py").write_text("a, edited\n")
    (repo / "src" / "b.py").unlink()
    (repo / "run.sh").chmod(0o644)
    (repo / "link").unlink()
    os.symlink("run.sh", repo / "link")
    (repo / "new" / "deep").mkdir(parents=True)
    (repo / "new" / "deep" / "c.txt").write_text("c\n")
    (repo / "new" / "skip.log").write_text("ignored in a new directory\n")
    (repo / "emptydir").mkdir()
    (repo / "dirlink").unlink()
    (repo / "dirlink").mkdir()  # a link became a directory
    (repo / "dirlink" / "inside").write_text("x\n")
    shutil.rmtree(repo / "src" / "pkg")
    (repo / "src" / "pkg").write_text("a directory became a file\n")
    nested = repo / "vendor" / "lib"
    nested.mkdir(parents=True)
    git(nested, "init", "-q")
    (nested / "x").write_text("x\n")
    (repo / "vendor" / "other.txt").write_text("o\n")


def test_fast_capture_matches_add_all(work: Path) -> None:
    store = gitstate.open_store(work)
    first = store.core.workspace.snapshot()  # the first capture is libgit2's: it hashes everything
    assert not first.scanned
    assert fast(store).tree == first.tree == reference_tree(work).tree
    edit_everything(work)
    changed = fast(store)
    reference = reference_tree(work)
    assert changed.tree == reference.tree
    assert changed.skipped == reference.skipped == ("vendor/lib",)
    listing = git(work, "ls-tree", "-r", "--name-only", changed.tree).split()
    assert "new/deep/c.txt" in listing and "new/skip.log" not in listing and "debug.log" not in listing
    assert git(work, "fsck", "--strict", "--no-dangling") == ""


def test_snapshot_after_gc_keeps_tracked_but_ignored_files(work: Path) -> None:
    """A ``git gc`` since the stat cache was saved: the private index is cleared and everything
    hashed again, and files the user tracks although ignored are still captured."""
    (work / "keep.log").write_text("tracked although ignored\n")
    git(work, "add", "-f", "keep.log")
    store = gitstate.open_store(work)
    first = store.core.workspace.snapshot()
    assert "keep.log" in git(work, "ls-tree", "--name-only", first.tree).split()
    git(work, "gc", "--quiet", "--prune=now")  # the first snapshot is in no checkpoint: pruned
    assert store.core.workspace.snapshot().tree == first.tree
    assert git(work, "fsck", "--strict", "--no-dangling") == ""


def test_stat_cache_written_by_the_fast_capture_satisfies_libgit2(work: Path) -> None:
    store = gitstate.open_store(work)
    store.core.workspace.snapshot()
    edit_everything(work)
    snap = fast(store)
    hashed: list[int] = []
    again = store.core.workspace.snapshot(progress=hashed.append)  # libgit2's add_all over the same index
    assert again.tree == snap.tree
    assert hashed == []  # nothing looked changed to libgit2: every recorded stat matches
    ticks: list[int] = []
    assert store.core.workspace.snapshot(fast=True, progress=ticks.append).tree == snap.tree
    assert ticks == []


def test_new_objects_go_into_one_pack(work: Path) -> None:
    store = gitstate.open_store(work)
    store.core.workspace.snapshot()
    loose = loose_objects(work)
    packs = set(os.listdir(work / ".git" / "objects" / "pack"))
    for i in range(20):
        (work / "src" / f"new{i}.py").write_text(f"{i}\n")
    snap = fast(store)
    assert loose_objects(work) == loose
    new_packs = set(os.listdir(work / ".git" / "objects" / "pack")) - packs
    assert len([p for p in new_packs if p.endswith(".pack")]) == 1
    assert len(git(work, "ls-tree", "-r", snap.tree).splitlines()) > 20
    assert git(work, "fsck", "--strict", "--no-dangling") == ""
    # an unchanged worktree writes nothing at all
    packs = set(os.listdir(work / ".git" / "objects" / "pack"))
    assert fast(store).tree == snap.tree
    assert set(os.listdir(work / ".git" / "objects" / "pack")) == packs and loose_objects(work) == loose


def test_same_size_edit_with_the_old_mtime_is_seen(work: Path) -> None:
    store = gitstate.open_store(work)
    store.core.workspace.snapshot()
    target = work / "src" / "b.py"
    st = target.stat()
    target.write_text("B\n")  # same size
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))  # and the old mtime: ctime still moved
    snap = fast(store)
    blob = git(work, "rev-parse", f"{snap.tree}:src/b.py").strip()
    assert git(work, "cat-file", "blob", blob) == "B\n"


def test_tracked_but_ignored_and_new_ignore_rules(work: Path) -> None:
    store = gitstate.open_store(work)
    store.core.workspace.snapshot()
    (work / "keep.log").write_text("tracked although ignored\n")
    git(work, "add", "-f", "keep.log")
    (work / "notes.txt").write_text("soon ignored\n")
    snap = fast(store)
    assert {"keep.log", "notes.txt"} <= set(git(work, "ls-tree", "--name-only", snap.tree).split())
    (work / ".gitignore").write_text("*.log\nbuild/\nnotes.txt\n")
    snap = fast(store)
    names = set(git(work, "ls-tree", "--name-only", snap.tree).split())
    assert "keep.log" in names and "notes.txt" not in names
    assert snap.tree == reference_tree(work).tree


def _take(store: gitstate.Store, fast_path: bool) -> set[str]:
    snap = fast(store) if fast_path else store.core.workspace.snapshot()
    return set(git(store.location.workdir, "ls-tree", "-r", "--name-only", snap.tree).split())


def _tracking_an_ignored_file(work: Path, fast_path: bool) -> gitstate.Store:
    """A store whose snapshots hold ``keep.log``, which the user tracks although ``*.log`` is
    ignored."""
    (work / "keep.log").write_text("tracked although ignored\n")
    git(work, "add", "-f", "keep.log")
    store = gitstate.open_store(work)
    store.core.workspace.snapshot()
    assert "keep.log" in _take(store, fast_path)
    return store


@pytest.mark.parametrize("fast_path", [True, False], ids=["scan", "add_all"])
@pytest.mark.parametrize("fresh", [False, True], ids=["same-store", "new-process"])
def test_untracking_an_ignored_file_leaves_it_out(work: Path, fast_path: bool, fresh: bool) -> None:
    """``git rm --cached`` of a file the user tracked although ignored: from then on it is an
    ignored file like any other, and the next snapshot leaves it out (it stayed in until a gc)."""
    store = _tracking_an_ignored_file(work, fast_path)
    git(work, "rm", "-q", "--cached", "keep.log")
    if fresh:
        store.close()
        store = gitstate.open_store(work)
    names = _take(store, fast_path)
    assert "keep.log" not in names and "src/b.py" in names
    assert store.core.workspace.snapshot().tree == reference_tree(work).tree


@pytest.mark.parametrize("fast_path", [True, False], ids=["scan", "add_all"])
@pytest.mark.parametrize("fresh", [False, True], ids=["same-store", "new-process"])
@pytest.mark.parametrize("change", ["edited", "created", "configured"])
def test_a_change_of_the_global_excludes_file_applies(work: Path, fast_path: bool, fresh: bool, change: str) -> None:
    """The global excludes file edited, created where it is configured, or configured (as a path
    relative to the worktree's top) while a store is open: the next snapshot follows the new rules
    (libgit2 settles which file it reads, and whether it exists, when its handle is opened)."""
    excludes = work / "global-ignore"
    if change == "edited":
        excludes.write_text("")
    if change != "configured":
        git(work, "config", "core.excludesFile", str(excludes))
    (work / "scratch.tmp").write_text("scratch\n")
    store = gitstate.open_store(work)
    store.core.workspace.snapshot()
    assert "scratch.tmp" in _take(store, fast_path)
    excludes.write_text("*.tmp\nglobal-ignore\n")
    if change == "configured":
        git(work, "config", "core.excludesFile", "global-ignore")
    if fresh:
        store.close()
        store = gitstate.open_store(work)
    names = _take(store, fast_path)
    assert "scratch.tmp" not in names and "global-ignore" not in names and "src/b.py" in names
    assert store.core.workspace.snapshot().tree == reference_tree(work).tree


def test_a_path_untracked_and_tracked_again_by_turns_of_two_processes(work: Path) -> None:
    """A store kept open (one process) while another process drops a tracked-but-ignored file the
    user untracked, then the user tracks it again: the first store captures it again (it trusted
    its own list of the user's paths, which still held the file, and left it out for good)."""
    first = _tracking_an_ignored_file(work, True)
    git(work, "rm", "-q", "--cached", "keep.log")
    other = gitstate.open_store(work)
    assert "keep.log" not in _take(other, True)
    other.close()
    git(work, "add", "-f", "keep.log")
    assert "keep.log" in _take(first, True)
    assert "keep.log" in _take(first, False)
    assert first.core.workspace.snapshot().tree == reference_tree(work).tree


def test_big_files_are_left_to_git(work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file above BIG_BLOB: the fast capture leaves it to git, which streams it into a pack
    (core.bigFileThreshold), never a loose object read whole."""
    monkeypatch.setattr(snapshot_module, "BIG_BLOB", 1000)
    store = gitstate.open_store(work)
    store.core.workspace.snapshot()
    data = os.urandom(50_000)
    (work / "big.bin").write_bytes(data)
    snap = store.core.workspace.snapshot(fast=True)
    assert not snap.scanned
    blob = git(work, "rev-parse", f"{snap.tree}:big.bin").strip()
    assert blob not in loose_objects(work)
    assert git(work, "cat-file", "-s", blob).strip() == "50000"
    assert snap.tree == reference_tree(work).tree


def _failing_reads(monkeypatch: pytest.MonkeyPatch, name: str, times: int) -> list[int]:
    """git fails to read ``name`` in ``git add -A`` and then ``times`` times more (as for a file
    rewritten while git reads it); returns the count of failures left."""
    original = snapshot_module.Workspace._git
    left = [times]

    def git_failing(self: snapshot_module.Workspace, index: str, args: list[str], stdin: bytes | None = None,
                    **kw: bool) -> object:
        if args[:2] == ["add", "-A"]:
            proc = original(self, index, args, stdin, **kw)
            proc.stderr += f"error: unable to index file '{name}'\n".encode()
            proc.returncode = 1
            return proc
        if args == ["add", "--", name] and left[0]:
            left[0] -= 1
            return subprocess.CompletedProcess(args, 1, b"", f"error: unable to index file '{name}'\n".encode())
        return original(self, index, args, stdin, **kw)

    monkeypatch.setattr(snapshot_module.Workspace, "_git", git_failing)
    return left


def test_a_file_git_fails_to_read_is_read_again(work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = gitstate.open_store(work)
    store.core.workspace.snapshot()
    (work / "src" / "b.py").write_text("b, rewritten\n")
    left = _failing_reads(monkeypatch, "src/b.py", 2)
    snap = store.core.workspace.snapshot()  # two failures, then git reads it
    assert left == [0]
    assert git(work, "cat-file", "blob", f"{snap.tree}:src/b.py") == "b, rewritten\n"


def test_a_file_git_keeps_failing_to_read_is_added_from_gitstates_own_read(work: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A file git fails to read on every try (a log written without pause): gitstate reads it
    itself (a file that only grew is stored as read); the rest of the snapshot is there too."""
    store = gitstate.open_store(work)
    store.core.workspace.snapshot()
    (work / "src" / "journal.txt").write_bytes(b"entry\n" * 50)
    _failing_reads(monkeypatch, "src/journal.txt", 100)
    snap = store.core.workspace.snapshot()
    assert git(work, "cat-file", "blob", f"{snap.tree}:src/journal.txt") == "entry\n" * 50
    assert git(work, "cat-file", "blob", f"{snap.tree}:src/b.py") != ""


def test_a_big_file_git_cannot_read_is_a_store_write_error(work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(snapshot_module, "BIG_BLOB", 1000)
    store = gitstate.open_store(work)
    store.core.workspace.snapshot()
    (work / "big.bin").write_bytes(os.urandom(50_000))  # too big for gitstate's own read
    _failing_reads(monkeypatch, "big.bin", 100)
    with pytest.raises(gitstate.StoreWriteError, match="big.bin.*unable to index file"):
        store.core.workspace.snapshot()


@pytest.mark.parametrize("setup", ["gitattributes", "info-attributes", "autocrlf", "nested-gitattributes"])
def test_cases_left_to_add_all(work: Path, setup: str) -> None:
    store = gitstate.open_store(work)
    store.core.workspace.snapshot()
    if setup == "gitattributes":
        (work / ".gitattributes").write_text("*.py text eol=crlf\n")
    elif setup == "nested-gitattributes":
        (work / "src" / ".gitattributes").write_text("*.py text eol=crlf\n")
    elif setup == "info-attributes":
        (work / ".git" / "info").mkdir(exist_ok=True)
        (work / ".git" / "info" / "attributes").write_text("*.py -text\n")
    else:
        git(work, "config", "core.autocrlf", "true")
    (work / "src" / "b.py").write_text("b\nb\n")
    snap = store.core.workspace.snapshot(fast=True)
    assert not snap.scanned
    assert snap.tree == reference_tree(work).tree


def test_read_stat_cache_refuses_what_it_cannot_read(tmp_path: Path) -> None:
    assert scan.read_stat_cache(str(tmp_path / "missing")) is None
    (tmp_path / "junk").write_bytes(b"DIRC\x00\x00\x00\x04\x00\x00\x00\x00")  # version 4
    assert scan.read_stat_cache(str(tmp_path / "junk")) is None
    (tmp_path / "short").write_bytes(b"DIRC\x00\x00\x00\x02\x00\x00\x00\x05" + b"\x00" * 30)
    assert scan.read_stat_cache(str(tmp_path / "short")) is None


def test_build_trees_matches_git(work: Path) -> None:
    store = gitstate.open_store(work)
    snap = store.core.workspace.snapshot()
    entries: dict[bytes, tuple[int, bytes]] = {}
    for line in git(work, "ls-tree", "-r", "-z", snap.tree).split("\0"):
        if line:
            meta, path = line.split("\t", 1)
            mode, _kind, oid = meta.split()
            entries[os.fsencode(path)] = (int(mode, 8), bytes.fromhex(oid))
    root, trees = scan.build_trees(entries)
    assert root.hex() == snap.tree
    assert all(git(work, "cat-file", "-t", oid.hex()).strip() == "tree" for oid in trees)


def test_memory_stays_bounded_by_the_batch(work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """New blobs are handed to the store whenever a batch fills up, not all held to the end."""
    monkeypatch.setattr(snapshot_module, "PACK_BATCH", 3000)
    store = gitstate.open_store(work)
    store.core.workspace.snapshot()
    batches: list[int] = []
    original = store.core.store_objects
    monkeypatch.setattr(store.core.workspace, "_store_objects", lambda objects: (batches.append(
        sum(len(body) for _, body in objects)), original(objects)))
    for i in range(10):
        (work / "src" / f"chunk{i}.bin").write_bytes(os.urandom(1000))
    snap = fast(store)
    assert len(batches) >= 3 and max(batches) <= 3000 + 1000
    assert snap.tree == reference_tree(work).tree
    assert git(work, "fsck", "--strict", "--no-dangling") == ""


def _rewriting_reads(monkeypatch: pytest.MonkeyPatch, target: Path, times: int, append: bool = False) -> list[int]:
    """Make the capture's reads of ``target`` race a writer: right after each of the first
    ``times`` reads of it, the file is rewritten in place (longer), as a program writing it would
    (or, with ``append``, a line is appended to it, as to a log)."""
    original = scan._read_all
    left = [times]
    inode = target.stat().st_ino

    def racing(fd: int, size: int) -> bytes:
        data = original(fd, size)
        if left[0] and os.fstat(fd).st_ino == inode:
            left[0] -= 1
            if append:
                with open(target, "ab") as fh:
                    fh.write(b"appended line %d\n" % left[0])
            else:
                with open(target, "r+b") as fh:  # in place: same inode, new bytes, new size
                    fh.write(b"rewritten %d " % left[0] + target.read_bytes())
        return data

    monkeypatch.setattr(scan, "_read_all", racing)
    monkeypatch.setattr(scan, "SETTLE_DELAYS", (0.0, 0.0, 0.0))
    return left


def test_a_file_rewritten_while_read_is_read_again(work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = gitstate.open_store(work)
    store.core.workspace.snapshot()
    target = work / "src" / "b.py"
    target.write_bytes(b"old content " * 100)
    left = _rewriting_reads(monkeypatch, target, 2)
    snap = fast(store)
    assert left == [0]
    stored = git(work, "cat-file", "blob", f"{snap.tree}:src/b.py")
    assert stored.encode() == target.read_bytes()  # the settled file, not a mix of two versions


def test_a_file_appended_to_while_read_is_stored_as_read(work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A log a program keeps appending to never settles, but what was read is a version it had:
    stored as such, and a restore goes on (it failed with FileChangingError); the next snapshot
    reads the file again."""
    store = gitstate.open_store(work)
    run = store.create_run(run_id="r")
    cp = run.checkpoint({}, files=True)
    target = work / "server.out"
    target.write_bytes(b"line\n" * 1000)
    left = _rewriting_reads(monkeypatch, target, 100, append=True)
    result = run.restore(cp, force=True)
    assert left[0] < 100 and target.exists() is False  # read while growing, then removed by the restore
    assert result.safety is not None
    saved = git(work, "cat-file", "blob", f"{run.load(result.safety).files_tree_id}:server.out")
    assert saved.encode() == b"line\n" * 1000  # the bytes as read: the file's first 5,000 bytes


def test_a_file_that_never_settles_stops_the_restore_before_it_writes(work: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    store = gitstate.open_store(work)
    run = store.create_run(run_id="r")
    cp = run.checkpoint({}, files=True)
    store.core.workspace.snapshot()
    target = work / "src" / "b.py"
    target.write_bytes(b"unsaved " * 100)
    (work / "run.sh").write_text("also unsaved\n")
    _rewriting_reads(monkeypatch, target, 100)
    with pytest.raises(gitstate.FileChangingError, match="cannot save .*b.py: it kept changing"):
        run.restore(cp, force=True)
    assert (work / "run.sh").read_text() == "also unsaved\n"  # nothing was written
    assert target.read_bytes().endswith(b"unsaved " * 100)
    assert "restore-safety" not in run.branches()


def test_a_read_torn_by_one_write_begun_before_it_is_read_again(work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One big ``write`` sets the mtime when it starts: a read overlapping it sees half of the
    old bytes and half of the new while the stat data before and after the read agree. A file
    modified that recently is read a second time (after any write running then has ended) and
    kept only when both reads agree."""
    store = gitstate.open_store(work)
    store.core.workspace.snapshot()
    target = work / "src" / "b.py"
    old, new = b"o" * 4096, b"n" * 4096
    target.write_bytes(old)
    with open(target, "r+b") as fh:  # the write the read overlaps: in place, same size
        fh.write(new)
    original = scan._read_all
    torn = [1]

    def overlapping(fd: int, size: int) -> bytes:
        data = original(fd, size)
        if torn[0] and data == new:
            torn[0] -= 1
            return new[:1000] + old[1000:]  # what a read that overtook the write saw
        return data

    monkeypatch.setattr(scan, "_read_all", overlapping)
    monkeypatch.setattr(scan, "SETTLE_DELAYS", (0.0, 0.0, 0.0))
    snap = fast(store)
    assert torn == [0]
    assert git(work, "cat-file", "blob", f"{snap.tree}:src/b.py").encode() == new


def test_a_torn_read_of_git_is_read_again(work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same for the files git's add reads (``checkpoint(files=True)``): it checks only the
    size, so what it stored for a file modified just before is checked by a second read."""
    store = gitstate.open_store(work)
    run = store.create_run(run_id="r")
    run.checkpoint({}, files=True)
    target = work / "src" / "b.py"
    old, new = b"o" * 4096, b"n" * 4096
    target.write_bytes(old)
    with open(target, "r+b") as fh:
        fh.write(new)
    torn_id = str(pygit2.Repository(str(work)).create_blob(new[:1000] + old[1000:]))
    original = snapshot_module.Workspace._add_all

    def tearing(self: snapshot_module.Workspace, work_index: str, *args: object) -> object:
        out = original(self, work_index, *args)  # type: ignore[arg-type]
        # as if git's read had overtaken a write
        self._git(work_index, ["update-index", "--cacheinfo", f"100644,{torn_id},src/b.py"])
        return out

    monkeypatch.setattr(snapshot_module.Workspace, "_add_all", tearing)
    cp = run.checkpoint({}, files=True)
    assert git(work, "cat-file", "blob", f"{cp.files_tree_id}:src/b.py").encode() == new


_WRITER = """
import os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR)
n = 0
end = time.monotonic() + float(sys.argv[2])
while time.monotonic() < end:
    os.pwrite(fd, b"%08d" % n * 200000, 0)  # 1.6 MB in one write, in place, same size
    n += 1
"""


@pytest.mark.skipif(not os.uname().sysname == "Linux", reason="waiting for a running write needs Linux")
@pytest.mark.parametrize("fast_path", [True, False])
def test_a_file_written_in_place_by_another_process_is_never_stored_torn(
        work: Path, fast_path: bool, tmp_path: Path) -> None:
    """A real writer rewriting a 1.6 MB file in place with one ``write`` after another: each
    snapshot holds one of its versions or fails with FileChangingError, never a mix of writes."""
    import subprocess
    import sys

    target = work / "hot.txt"
    target.write_bytes(b"%08d" % 0 * 200000)
    store = gitstate.open_store(work)
    run = store.create_run(run_id="r")
    run.checkpoint({}, files=True)
    script = tmp_path / "writer.py"
    script.write_text(_WRITER)
    writer = subprocess.Popen([sys.executable, str(script), str(target), "30"])
    try:
        outcomes: list[object] = []
        for _ in range(4):
            try:
                if fast_path:
                    with store.core.keeping_objects():
                        tree: str | None = fast(store).tree
                else:
                    tree = run.checkpoint({}, files=True).files_tree_id
            except gitstate.FileChangingError:
                outcomes.append("changing")
                continue
            data = subprocess.run(["git", "cat-file", "blob", f"{tree}:hot.txt"], cwd=work,
                                  capture_output=True, check=True).stdout
            outcomes.append(len({data[i:i + 8] for i in range(0, len(data), 8)}))
    finally:
        writer.kill()
        writer.wait()
    assert all(o in ("changing", 1) for o in outcomes), outcomes


def test_what_git_stored_of_a_log_appended_to_since_is_kept(work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file modified just before the snapshot that only grew after libgit2 read it (a log being
    written) keeps what libgit2 stored: that is a version the file had, so the checkpoint does not
    fail as for a file that keeps changing in place."""
    store = gitstate.open_store(work)
    run = store.create_run(run_id="r")
    run.checkpoint({}, files=True)
    log = work / "src" / "journal.txt"
    first = b"line 1\n" * 100
    log.write_bytes(first)
    original = snapshot_module.Workspace._add_all

    def appending(self: snapshot_module.Workspace, index: str, *args: object) -> object:
        out = original(self, index, *args)  # type: ignore[arg-type]
        with open(log, "ab") as fh:  # the writer appends right after git read the file
            fh.write(b"line 2\n")
        return out

    monkeypatch.setattr(snapshot_module.Workspace, "_add_all", appending)
    monkeypatch.setattr(scan, "SETTLE_DELAYS", (0.0, 0.0, 0.0))
    cp = run.checkpoint({}, files=True)
    assert git(work, "cat-file", "blob", f"{cp.files_tree_id}:src/journal.txt").encode() == first


def test_a_recent_file_that_grew_between_the_two_reads_is_stored_as_first_read(work: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The scan's second read of a file modified just before (for a write begun before the first)
    finds it longer, beginning with what was read: a log appended to; the first read is kept."""
    target = work / "src" / "journal.txt"
    target.write_bytes(b"a" * 100)
    fd = os.open(target, os.O_RDONLY)
    try:
        st = os.fstat(fd)
        original = scan._pread_all

        def grown(fd_: int, size: int) -> bytes:
            with open(target, "ab") as fh:  # appended between the two reads
                fh.write(b"b" * 10)
            monkeypatch.setattr(scan, "_pread_all", original)
            return original(fd_, size)

        monkeypatch.setattr(scan, "_pread_all", grown)
        monkeypatch.setattr(scan, "SETTLE_DELAYS", ())
        data, _ = scan.read_settled(fd, os.fsencode(target), st)
    finally:
        os.close(fd)
    assert data == b"a" * 100


def test_a_tracked_but_ignored_file_git_cannot_store_is_named(work: Path) -> None:
    """git's ``update-index --add`` of the files the user tracks although ignored stops at the first
    it cannot store and saves none: the snapshot names that file instead of leaving them all out
    and succeeding."""
    git(work, "config", "agentos.secrets", "off")  # git writes the blobs itself, not a quarantine
    store = gitstate.open_store(work)
    store.create_run(run_id="ignored").checkpoint({}, files=True)  # (*.log is ignored)
    for name in ("x", "y"):
        (work / f"{name}.log").write_text(f"{name}, tracked although ignored\n")
    git(work, "add", "-f", "x.log", "y.log")
    for n in range(1000):  # x.log changed since: its new blob in a fan-out folder not made yet
        (work / "x.log").write_text(f"x, changed {n}\n")
        blob = git(work, "hash-object", "x.log").strip()
        folder = work / ".git" / "objects" / blob[:2]
        if not folder.exists():
            break
    assert not folder.exists()
    folder.write_text("")  # the blob's folder cannot be made (a file in its place)
    try:
        with pytest.raises(gitstate.StoreWriteError, match=r"x\.log"):
            store.create_run(run_id="ignored-2").checkpoint({}, files=True)
    finally:
        folder.unlink()
    cp = store.create_run(run_id="ignored-3").checkpoint({}, files=True)
    assert cp.files_tree_id is not None
    assert {"x.log", "y.log"} <= set(git(work, "ls-tree", "--name-only", cp.files_tree_id).split())
