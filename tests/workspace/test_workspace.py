"""Workspace snapshots: what is captured, and that nothing of the user's changes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pygit2
import pytest

import gitstate
from tests.conftest import bounded, git, user_snapshot


def tree_listing(repo: Path, tree: str) -> dict[str, tuple[str, str]]:
    out = {}
    for line in git(repo, "ls-tree", "-r", "-z", tree).split("\0"):
        if line:
            meta, path = line.split("\t", 1)
            mode, _kind, oid = meta.split()
            out[path] = (mode, oid)
    return out


def loose_objects(repo: Path) -> set[str]:
    objdir = repo / ".git" / "objects"
    return {d.name + f.name for d in objdir.iterdir() if len(d.name) == 2 for f in d.iterdir()}


@pytest.fixture
def work(repo: Path) -> Path:
    (repo / ".gitignore").write_text("*.log\nbuild/\n")
    git(repo, "add", ".gitignore")
    git(repo, "commit", "-q", "-m", "ignore")
    (repo / "debug.log").write_text("ignored\n")
    (repo / "build").mkdir()
    (repo / "build" / "out.o").write_text("ignored\n")
    (repo / "src").mkdir()
    (repo / "src" / "main.py").write_text("print('hi')\n")
    (repo / "run.sh").write_text("#!/bin/sh\n")
    (repo / "run.sh").chmod(0o755)
    os.symlink("src/main.py", repo / "link")
    (repo / "README").write_text("edited, not staged\n")
    return repo


def test_snapshot_captures_tracked_untracked_modes_and_links(work: Path) -> None:
    store = gitstate.open_store(work)
    before = user_snapshot(work)
    snap = store.core.workspace.snapshot()
    files = tree_listing(work, snap.tree)
    assert set(files) == {".gitignore", "README", "src/main.py", "run.sh", "link"}
    assert files["run.sh"][0] == "100755"
    assert files["link"][0] == "120000"
    assert files["src/main.py"][0] == "100644"
    assert git(work, "cat-file", "blob", files["README"][1]) == "edited, not staged\n"
    assert git(work, "cat-file", "blob", files["link"][1]) == "src/main.py"
    assert user_snapshot(work) == before
    assert not (work / ".git" / "index.lock").exists()
    assert os.path.exists(store.core.workspace.index_path)


def test_checkpoint_with_files_and_without(work: Path) -> None:
    store = gitstate.open_store(work)
    run = store.create_run()
    before = user_snapshot(work)
    with_files = run.checkpoint({"a": 1}, files=True)
    without = run.checkpoint({"a": 2})
    assert with_files.files_tree_id is not None
    assert without.files_tree_id is None
    assert store.checkpoint(with_files.id).files_tree_id == with_files.files_tree_id
    assert user_snapshot(work) == before
    assert git(work, "fsck", "--strict", "--no-dangling") == ""


def test_files_list_limits_capture(work: Path) -> None:
    run = gitstate.open_store(work).create_run()
    cp = run.checkpoint({}, files=["src", "run.sh"])
    assert cp.files_tree_id is not None
    assert set(tree_listing(work, cp.files_tree_id)) == {"src/main.py", "run.sh"}


def test_tracked_but_ignored_file_is_captured(work: Path) -> None:
    (work / "keep.log").write_text("tracked although ignored\n")
    git(work, "add", "-f", "keep.log")
    snap = gitstate.open_store(work).core.workspace.snapshot()
    files = tree_listing(work, snap.tree)
    assert "keep.log" in files and "debug.log" not in files


def test_deleted_and_newly_ignored_files_leave_the_snapshot(work: Path) -> None:
    store = gitstate.open_store(work)
    store.core.workspace.snapshot()
    (work / "src" / "main.py").unlink()
    (work / "notes.txt").write_text("x\n")
    (work / ".gitignore").write_text("*.log\nbuild/\nnotes.txt\n")
    files = tree_listing(work, store.core.workspace.snapshot().tree)
    assert "src/main.py" not in files and "notes.txt" not in files


def test_nested_repository_is_skipped_not_fatal(work: Path) -> None:
    nested = work / "vendor" / "lib"
    nested.mkdir(parents=True)
    git(nested, "init", "-q")
    (nested / "x").write_text("x\n")
    git(nested, "add", "x")
    git(nested, "commit", "-q", "-m", "x")
    (work / "vendor" / "other.txt").write_text("o\n")
    snap = gitstate.open_store(work).core.workspace.snapshot()
    assert snap.skipped == ("vendor/lib",)
    files = tree_listing(work, snap.tree)
    assert "vendor/other.txt" in files
    assert not any(p.startswith("vendor/lib") for p in files)


def test_unchanged_snapshot_writes_no_objects(work: Path) -> None:
    store = gitstate.open_store(work)
    first = store.core.workspace.snapshot()
    objects = loose_objects(work)
    second = store.core.workspace.snapshot()
    assert second.tree == first.tree
    assert loose_objects(work) == objects
    (work / "src" / "main.py").write_text("changed\n")
    third = store.core.workspace.snapshot()
    new = loose_objects(work) - objects
    assert third.tree in new and len(new) == 3  # the blob, src/ and the root tree


def test_new_objects_are_journaled_once_a_checkpoint_names_them(work: Path) -> None:
    store = gitstate.open_store(work)
    journal_path = work / ".git" / "agentos" / "loose.journal"
    snap = store.core.workspace.snapshot()
    # unreachable yet: left loose (a concurrent `git repack -a -d` keeps loose objects, not packed ones)
    assert not journal_path.exists() or snap.tree not in journal_path.read_text().split()
    cp = store.create_run().checkpoint({}, files=True)
    assert cp.files_tree_id == snap.tree
    assert snap.tree in journal_path.read_text().split()
    store.pack()
    assert snap.tree not in loose_objects(work)
    assert git(work, "fsck", "--strict", "--no-dangling") == ""


def test_snapshot_from_another_process_picks_up_edits(work: Path) -> None:
    store = gitstate.open_store(work)
    first = store.core.workspace.snapshot()
    # an edit made by some other program: nothing goes through gitstate
    subprocess.run(["sh", "-c", "echo more >> src/main.py"], cwd=work, check=True)
    second = store.core.workspace.snapshot()
    assert second.tree != first.tree
    blob = tree_listing(work, second.tree)["src/main.py"][1]
    assert git(work, "cat-file", "blob", blob).endswith("more\n")


def test_linked_worktree_has_its_own_private_index(work: Path, tmp_path: Path) -> None:
    linked = tmp_path / "linked"
    git(work, "worktree", "add", "-q", str(linked), "-b", "side")
    (linked / "only-here").write_text("x\n")
    main_before = user_snapshot(work)
    store = gitstate.open_store(linked)
    snap = store.core.workspace.snapshot()
    assert "only-here" in tree_listing(work, snap.tree)
    assert store.core.workspace.index_path.endswith("index-" + store.worktree)
    assert store.worktree != "main"
    assert user_snapshot(work) == main_before
    assert git(linked, "status", "--porcelain") == "?? only-here\n"


def test_paths_outside_the_worktree_are_refused(work: Path) -> None:
    run = gitstate.open_store(work).create_run()
    with pytest.raises(gitstate.UsageError):
        run.checkpoint({}, files=["../elsewhere"])
    with pytest.raises(gitstate.UsageError):
        run.checkpoint({}, files=[".git/config"])


def test_repository_without_commits_or_index(tmp_path: Path) -> None:
    path = tmp_path / "fresh"
    path.mkdir()
    git(path, "init", "-q")
    (path / "a").write_text("a\n")
    run = gitstate.open_store(path).create_run()
    cp = run.checkpoint({}, files=True)
    assert cp.files_tree_id is not None and "a" in tree_listing(path, cp.files_tree_id)
    assert not (path / ".git" / "index").exists()
    assert isinstance(pygit2.Repository(str(path)).head_is_unborn, bool)


@pytest.mark.parametrize("version", ["2", "3", "4"])
def test_read_index_paths_matches_libgit2(work: Path, version: str) -> None:
    from gitstate.workspace.snapshot import read_index_paths

    git(work, "add", "-A")
    git(work, "update-index", "--index-version", version)
    if version == "3":
        git(work, "update-index", "--skip-worktree", "README")  # an extended-flags entry
    expected = {e.path for e in pygit2.Index(str(work / ".git" / "index"))}
    assert read_index_paths(str(work / ".git" / "index")) == expected


def test_bench_script_runs_small(tmp_path: Path) -> None:
    script = Path(__file__).resolve().parents[2] / "scripts" / "bench_files.py"
    out = subprocess.run([sys.executable, str(script), "--files", "40", "--total-mb", "0.2", "--rounds", "2",
                          "--big-mib", "4", "--restore-files", "60", "--restore-changed", "6", "--full-files", "30",
                          "--restore-rounds", "2"], capture_output=True, text=True, check=True, timeout=300).stdout
    assert "ratio gitstate / git stash create" in out
    assert "unchanged tree: 0" in out
    assert out.count("peak RSS") == 2
    # the restore scenarios: some files changed, all changed, switching between two saved versions
    assert out.count("ratio gitstate API / git read-tree -u") == 3
    assert out.count("ratio gitstate CLI / git checkout -f") == 3
    assert "switching between two saved versions" in out


def test_a_tracked_directory_replaced_by_a_link_is_captured_as_the_link(repo: Path, tmp_path: Path) -> None:
    """The user's index still names ``d/inner.txt``; ``d`` is now a link to a directory. git records
    the link and nothing below it; the snapshot must not add ``d/inner.txt`` read through the link
    (it replaced the link in the tree)."""
    (repo / "d").mkdir()
    (repo / "d" / "inner.txt").write_text("in\n")
    git(repo, "add", "d/inner.txt")
    git(repo, "commit", "-q", "-m", "d")
    (repo / "real").mkdir()
    (repo / "d" / "inner.txt").rename(repo / "real" / "inner.txt")
    (repo / "d").rmdir()
    os.symlink("real", repo / "d")
    cp = gitstate.open_store(repo).create_run(run_id="r").checkpoint({}, files=True)
    env = dict(os.environ, GIT_INDEX_FILE=str(tmp_path / "reference-index"))
    subprocess.run(["git", "add", "-A"], cwd=repo, env=env, check=True)
    reference = subprocess.run(["git", "write-tree"], cwd=repo, env=env, check=True, capture_output=True,
                               text=True).stdout.strip()
    assert cp.files_tree_id == reference
    assert git(repo, "ls-tree", "-r", "--name-only", reference).split() == ["README", "d", "real/inner.txt"]


def test_a_name_that_is_not_utf8_survives_new_ignore_rules(repo: Path) -> None:
    """Ignore rules changed while the worktree holds a file whose name is not UTF-8: libgit2 cannot
    be asked whether it is ignored (pygit2 passes names as UTF-8), so it is kept, as add_all kept
    it; every later checkpoint and a dry-run restore still work."""
    (repo / ".gitignore").write_text("*.log\n")
    run = gitstate.open_store(repo).create_run(run_id="r")
    first = run.checkpoint({}, files=True)
    with open(os.path.join(os.fsencode(repo), b"bad\xff.txt"), "wb") as fh:
        fh.write(b"x\n")
    run.checkpoint({}, files=True)
    run.checkpoint({}, files=True)
    (repo / ".gitignore").write_text("*.log\n*.tmp\n")
    cp = run.checkpoint({}, files=True)
    names = subprocess.run(["git", "ls-tree", "-z", "--name-only", cp.files_tree_id], cwd=repo, check=True,
                           capture_output=True).stdout.split(b"\0")
    assert b"bad\xff.txt" in names
    plan = run.restore(first, dry_run=True)
    assert plan.dry_run and ".gitignore" in plan.changed


def test_read_index_paths_of_a_split_index(work: Path) -> None:
    """``core.splitIndex``: most entries live in a shared index; the paths still all come back
    (before, only the split part's few were read, so tracked-but-ignored files were lost)."""
    from gitstate.workspace.snapshot import read_index_paths

    (work / "later.log").write_text("tracked although ignored\n")
    (work / ".git" / "info" / "exclude").write_text("*.log\n")
    git(work, "add", "-A")
    git(work, "add", "-f", "later.log")
    git(work, "update-index", "--split-index")  # everything so far goes to the shared index
    (work / "newer.txt").write_text("in the split part\n")
    git(work, "add", "newer.txt")
    assert any(p.name.startswith("sharedindex.") for p in (work / ".git").iterdir())
    expected = set(git(work, "ls-files", "-z").split("\0")) - {""}
    assert len(expected) > 2 and "later.log" in expected
    index = str(work / ".git" / "index")
    assert read_index_paths(index, str(work / ".git"), str(work)) == expected
    store = gitstate.open_store(work)
    names = set(git(work, "ls-tree", "-r", "--name-only", store.core.workspace.snapshot().tree).split())
    assert expected <= names


@pytest.mark.parametrize("suffix", ["", ".tree", ".user", ".epoch", ".restore.lock"])
def test_a_fifo_among_the_private_index_files_never_blocks(work: Path, monkeypatch: pytest.MonkeyPatch,
                                                            suffix: str) -> None:
    """The stat cache (``index-<wt>``, read by libgit2), the files beside it and the restore lock,
    each replaced by a FIFO, which a plain open would wait on for ever: a snapshot (by a new
    handle, and by one that read the cache before) and a restore go on, taking it as missing, and
    capture what is there; the FIFO is replaced as the file is written again."""
    from gitstate.workspace import snapshot

    monkeypatch.setattr(snapshot, "BIG_BLOB", 64)  # big files are streamed into a pack by git
    (work / "big.bin").write_bytes(os.urandom(200))
    store = gitstate.open_store(work)
    run = store.create_run()
    first = run.checkpoint({}, files=True)
    path = Path(store.core.workspace.index_path + suffix)
    for round_, writer in enumerate((gitstate.open_store(work), store)):  # a fresh handle, then a warm one
        path.unlink(missing_ok=True)
        os.mkfifo(path)
        (work / "src" / "main.py").write_text(f"changed {round_}\n")
        (work / "big.bin").write_bytes(os.urandom(200))
        cp = bounded(lambda w=writer: w.get_run(run.id).checkpoint({}, files=True), 60)
        assert cp.files_tree_id is not None
        files = tree_listing(work, cp.files_tree_id)
        assert git(work, "cat-file", "blob", files["src/main.py"][1]) == f"changed {round_}\n"
        assert files["big.bin"][1] == git(work, "hash-object", "big.bin").strip()
        assert path.is_fifo() == (suffix == ".restore.lock")  # written again (a checkpoint takes no lock)
    path.unlink(missing_ok=True)
    os.mkfifo(path)
    bounded(lambda: run.restore(first, force=True), 60)
    assert (work / "src" / "main.py").read_text() == "print('hi')\n"
    if suffix == ".restore.lock":
        assert path.is_file()  # the FIFO was replaced by the lock's file (a flock file stays)
    assert git(work, "fsck", "--strict") == ""


def test_a_file_gone_while_git_adds_is_tried_again(work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file another program removes between git listing the worktree and reading it stops
    `git add` ("unable to stat"): the snapshot runs it again, as for a file changed under it."""
    import subprocess

    from gitstate.workspace import snapshot

    real = snapshot.Workspace._git
    failed: list[bool] = []

    def git_once_racing(self: snapshot.Workspace, index: str, args: list[str], stdin: bytes | None = None,
                        **kw: bool) -> subprocess.CompletedProcess[bytes]:
        if args[:2] == ["add", "-A"] and not failed:
            failed.append(True)
            return subprocess.CompletedProcess(args, 128, b"",
                                               b"fatal: unable to stat 'work-0.txt.1.tmp': No such file or directory\n")
        return real(self, index, args, stdin, **kw)

    monkeypatch.setattr(snapshot.Workspace, "_git", git_once_racing)
    cp = gitstate.open_store(work).create_run().checkpoint({}, files=True)
    assert failed and cp.files_tree_id is not None
    assert "src" in git(work, "ls-tree", "--name-only", cp.files_tree_id).split()
