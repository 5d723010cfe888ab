"""gitstate beside the user's own git (repack -a -d, gc, gc --prune=now) and after crashes: a
transaction's pack is kept until its refs moved, caches of existing objects are dropped when a
repack ran, deletes in another process are survived, housekeeping leaves a running `git gc` alone,
catches up in bounded steps and removes what killed writers left."""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import git, make_repo, packs_only

import gitstate
from gitstate.format import checkpoint as cpfmt
from gitstate.git.objects import KEEP_PREFIX, MODE_BLOB
from gitstate.store import base, housekeeping
from gitstate.store.transaction import Transaction


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A fresh repository whose every write is one pack: these tests are about packs."""
    return packs_only(make_repo(tmp_path / "repo"))


REF = "refs/agentos/main/runs/kept/heads/main"


def _fsck(repo: Path) -> None:
    assert git(repo, "fsck", "--strict", "--no-dangling") == ""


def _keeps(repo: Path) -> list[str]:
    return sorted(p.name for p in (repo / ".git" / "objects" / "pack").glob("*.keep"))


def test_a_user_repack_between_two_attempts_of_a_write_loses_nothing(repo: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    store = gitstate.open_store(repo)
    calls = 0
    kept_during: list[str] = []
    real_apply = base.apply_updates

    def lose_the_first_race(common: str, tx: Transaction, *, fsync: bool) -> None:
        if calls == 1:  # another writer moved the ref under the lock: a lost compare-and-swap
            raise gitstate.ConflictError(REF, None, "0" * 40)
        real_apply(common, tx, fsync=fsync)

    monkeypatch.setattr(base, "apply_updates", lose_the_first_race)

    def build(tx: Transaction) -> str:
        nonlocal calls
        calls += 1
        if calls == 2:  # the user's repack runs after the first attempt's pack was written
            kept_during.extend(_keeps(repo))
            git(repo, "repack", "-adf", "-q")
        tree = tx.tree([("payload", tx.blob(b"only in this transaction\n"), MODE_BLOB)])
        oid = tx.commit(tree, [], "kept\n", when=1_000_000)
        tx.set_ref(REF, None, oid, "gitstate: test")
        return oid

    oid = store.core.write(build)
    assert calls == 2 and kept_during  # the unpublished pack was kept from git repack -a -d
    assert git(repo, "rev-parse", REF).strip() == oid
    assert git(repo, "cat-file", "-p", f"{oid}:payload") == "only in this transaction\n"
    assert _keeps(repo) == []  # dropped once the ref moved
    _fsck(repo)
    git(repo, "repack", "-adf", "-q")
    _fsck(repo)


def test_a_ref_that_moved_during_build_is_rebuilt_before_any_pack_is_written(repo: Path) -> None:
    store = gitstate.open_store(repo)
    run = store.create_run(run_id="moving")
    first = run.checkpoint({"n": 0})
    packs_before = set((repo / ".git" / "objects" / "pack").glob("*.pack"))
    calls = 0
    real_entries = cpfmt.state_entry

    def racing_state_entry(writer: object, state: object) -> object:
        nonlocal calls
        if state != {"n": 1}:
            return real_entries(writer, state)  # type: ignore[arg-type]
        calls += 1
        if calls == 1:  # another process checkpoints while this build runs
            gitstate.open_store(repo).get_run("moving").checkpoint({"n": "other"})
        return real_entries(writer, state)  # type: ignore[arg-type]

    cpfmt.state_entry = racing_state_entry  # type: ignore[assignment]
    try:
        cp = run.checkpoint({"n": 1})
    finally:
        cpfmt.state_entry = real_entries  # type: ignore[assignment]
    assert calls == 2 and cp.step == 2 and cp.parent_ids != (first.id,)
    new_packs = set((repo / ".git" / "objects" / "pack").glob("*.pack")) - packs_before
    assert len(new_packs) == 2  # the other writer's and the rebuilt one: none for the stale attempt
    _fsck(repo)


def test_a_failed_write_drops_its_keep_and_trusts_nothing_it_wrote(repo: Path) -> None:
    store = gitstate.open_store(repo)

    def build(tx: Transaction) -> None:
        tx.blob(b"never published\n")
        tx.set_ref(REF, None, tx.commit(tx.tree([]), [], "x\n"), "m", strict=True)

    git(repo, "update-ref", REF, git(repo, "rev-parse", "HEAD").strip())
    with pytest.raises(gitstate.ConflictError):
        store.core.write(build)
    assert _keeps(repo) == []
    writer = store.core.object_writer()
    blob = hashlib.sha1(b"blob 16\0never published\n").hexdigest()
    assert not writer.knows(blob)  # a later write stages it again instead of trusting a lost pack


@pytest.mark.parametrize("cleanup", [["gc", "--prune=now", "-q"], ["repack", "-adf", "-q"]])
def test_a_run_deleted_by_another_process_then_gc_then_the_same_write(repo: Path, cleanup: list[str]) -> None:
    (repo / "notes.txt").write_text("the same files\n")
    store = gitstate.open_store(repo)
    store.create_run(run_id="first").checkpoint({"same": "state", "n": list(range(50))}, files=True)
    gitstate.open_store(repo).delete_run("first")  # another process: this store's caches never hear of it
    git(repo, *cleanup)
    cp = store.create_run(run_id="second").checkpoint({"same": "state", "n": list(range(50))}, files=True)
    fresh = gitstate.open_store(repo).checkpoint(cp.id)
    assert fresh.state == {"same": "state", "n": list(range(50))}
    assert fresh.files_tree_id is not None
    assert git(repo, "cat-file", "-p", f"{cp.id}:files/notes.txt") == "the same files\n"
    _fsck(repo)


def _snapshot_of_a_failed_write(repo: Path, files: bool | list[str]) -> gitstate.Run:
    """A checkpoint of ``new.txt`` whose write times out on a held branch lock (then released)."""
    store = gitstate.open_store(repo, lock_timeout=0.2, stale_lock_age=3600)
    run = store.create_run(run_id="busy")
    run.checkpoint({"n": 0})
    lock = Path(store.location.common_dir, run.ref("main") + ".lock")
    lock.write_text("")  # held (as git holds one): the write times out
    (repo / "new.txt").write_text("written while the branch was locked\n")
    with pytest.raises(gitstate.LockTimeoutError):
        run.checkpoint({"n": 1}, files=files)
    lock.unlink()
    return run


def test_snapshot_objects_of_a_failed_write_are_not_journaled(repo: Path) -> None:
    run = _snapshot_of_a_failed_write(repo, ["new.txt"])  # a partial snapshot: libgit2 writes it loose
    journal = repo / ".git" / "agentos" / "loose.journal"
    blob = git(repo, "hash-object", "new.txt").strip()
    assert not journal.exists() or blob not in journal.read_text().split()
    assert (repo / ".git" / "objects" / blob[:2] / blob[2:]).exists()  # loose: safe from repack -a -d
    cp = run.checkpoint({"n": 1}, files=["new.txt"])
    assert blob in journal.read_text().split()  # journaled once a write of this thread is published
    assert git(repo, "cat-file", "-p", f"{cp.id}:files/new.txt").startswith("written while")
    _fsck(repo)




_KEEPER = r"""
import os, sys
from gitstate.git import lockfile
from gitstate.git.objects import KEEP_PREFIX
lockfile.create_held(sys.argv[1], prefix=KEEP_PREFIX)
os._exit(0)  # dies holding it, as a killed writer does
"""


def test_keeps_of_dead_writers_are_removed_others_never(repo: Path) -> None:
    """A transaction's .keep is held by flock: a dead writer's is removed at once, a live one's
    never, one whose holder cannot be seen only by age, and one gitstate did not write never."""
    from gitstate.git import lockfile

    store = gitstate.open_store(repo)
    store.create_run(run_id="r").checkpoint({"a": 1})
    pack_dir = repo / ".git" / "objects" / "pack"
    names = [p.stem for p in pack_dir.glob("*.idx")]
    assert names
    dead = pack_dir / "pack-dead.keep"
    subprocess.run([sys.executable, "-c", _KEEPER, str(dead)], check=True,
                   env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2])))
    alive = pack_dir / "pack-alive.keep"
    fd = lockfile.create_held(str(alive), prefix=KEEP_PREFIX)
    foreign = pack_dir / "pack-user.keep"
    foreign.write_text("kept by the user\n")
    old = time.time() - 10 * housekeeping.ORPHAN_AGE
    os.utime(foreign, (old, old))
    os.utime(alive, (old, old))
    unknown = pack_dir / "pack-unknown.keep"
    unknown.write_bytes(KEEP_PREFIX + b"not a record")
    assert housekeeping.remove_dead_keeps(store.location.common_dir) == ["pack-dead"]
    os.utime(unknown, (old, old))  # a record nobody can check: only by age
    assert housekeeping.remove_dead_keeps(store.location.common_dir) == ["pack-unknown"]
    assert sorted(p.name for p in pack_dir.glob("*.keep")) == ["pack-alive.keep", "pack-user.keep"]
    lockfile.release_held(str(alive), fd)


def test_merges_wait_for_a_running_git_gc_and_skip_kept_packs(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(housekeeping, "TX_MERGE_AT", 10_000)  # merged by hand below
    store = gitstate.open_store(repo, pack_in_background=False)
    run = store.create_run(run_id="m")
    for i in range(6):
        run.checkpoint({"i": i})
    common = store.location.common_dir
    pack_dir = Path(common, "objects", "pack")
    before = sorted(p.name for p in pack_dir.glob("*.idx"))
    gc_pid = Path(common, "gc.pid")
    gc_pid.write_text(f"{os.getpid()} {socket.gethostname()}")  # as a running `git gc` leaves it
    assert housekeeping.git_gc_running(common)
    assert housekeeping.merge_tx_packs(common) is None
    assert sorted(p.name for p in pack_dir.glob("*.idx")) == before  # nothing deleted under it
    gc_pid.write_text(f"{2**22 + 12345} {socket.gethostname()}")  # a gc that died: not running
    assert not housekeeping.git_gc_running(common)
    kept = sorted(pack_dir.glob("*.idx"))[0].with_suffix(".keep")
    kept.write_text("kept\n")
    merged = housekeeping.merge_tx_packs(common)
    assert merged is not None
    assert kept.with_suffix(".idx").exists()  # a kept pack is neither merged nor deleted
    listed = (Path(common) / "agentos" / (housekeeping.TX_PACKS + ".kept")).read_text().split()
    assert kept.stem in listed and merged in listed  # and stays listed for a later merge
    assert [c.state["i"] for c in run.history()] == list(range(5, -1, -1))
    _fsck(repo)


def test_packing_a_backlog_is_bounded_per_step_and_catches_up(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = gitstate.open_store(repo, pack_in_background=False)
    run = store.create_run(run_id="backlog")
    for i in range(6):
        (repo / f"f{i}.txt").write_text(f"file {i}\n" * (i + 1))
        run.checkpoint({"i": i}, files=[f"f{i}.txt"])  # a partial snapshot: libgit2 writes loose objects
    common = Path(store.location.common_dir)
    journal = common / "agentos" / "loose.journal"
    ids = journal.read_text().split()
    assert len(ids) > 6
    journal.rename(common / "agentos" / "loose.journal.99999.packing")  # a killed packer's batch
    monkeypatch.setattr(housekeeping, "PACK_STEP", 4)
    steps = 0
    while any((common / "agentos").glob("loose.journal*")) and steps < 50:
        assert store.pack() <= 4
        steps += 1
    assert steps >= len(set(ids)) // 4
    loose = {p.parent.name + p.name for p in (common / "objects").glob("??/*")}
    assert not loose & set(ids)
    _fsck(repo)


def test_orphan_temp_objects_are_removed_when_old(repo: Path) -> None:
    objects = repo / ".git" / "objects"
    (objects / "ab").mkdir(exist_ok=True)
    ours = objects / "ab" / "tmp_obj_123_abcdef"
    libgit2s = objects / "ab" / "tmp_object_git2_XyZ"
    fresh = objects / "ab" / "tmp_obj_456_fresh"
    other = objects / "ab" / "cdef0123456789abcdef0123456789abcdef01"
    for path in (ours, libgit2s, fresh, other):
        path.write_bytes(b"x")
    old = time.time() - 2 * housekeeping.ORPHAN_AGE
    for path in (ours, libgit2s, other):
        os.utime(path, (old, old))
    assert housekeeping.remove_orphan_temps(str(repo / ".git")) == 2
    assert not ours.exists() and not libgit2s.exists()
    assert fresh.exists() and other.exists()


def _drop_index_of(repo: Path, oid: str) -> str:
    """Remove the .idx of the pack holding ``oid``, as `git gc` removes one whose .pack its last
    directory scan missed (the two files are renamed into place while it scans)."""
    pack_dir = repo / ".git" / "objects" / "pack"
    for idx in pack_dir.glob("*.idx"):
        with open(idx, "rb") as fh:
            listing = subprocess.run(["git", "show-index"], cwd=repo, stdin=fh, capture_output=True, text=True).stdout
        if oid in listing:
            idx.unlink()
            return idx.stem
    raise AssertionError(f"{oid} is in no pack")


def test_a_pack_whose_index_git_gc_removed_is_indexed_again(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = gitstate.open_store(repo)
    run = store.create_run(run_id="gc-race")
    cp = run.checkpoint({"payload": "in a pack that loses its index"})
    lost = _drop_index_of(repo, cp.id)
    assert git(repo, "cat-file", "-t", cp.id, check=False) == ""  # git no longer sees it
    # a reader that misses the object repairs it and reads on
    assert gitstate.open_store(repo).get_run("gc-race").head().state == {"payload": "in a pack that loses its index"}  # type: ignore[union-attr]
    assert (repo / ".git" / "objects" / "pack" / f"{lost}.idx").exists()
    _fsck(repo)
    # a store that opens repairs without reading anything
    second = run.checkpoint({"n": 2})
    _drop_index_of(repo, second.id)
    gitstate.open_store(repo)
    _fsck(repo)
    # a writer that saw a `git gc` running repairs when it has ended
    gc_pid = repo / ".git" / "gc.pid"
    gc_pid.write_text(f"{os.getpid()} {socket.gethostname()}")
    third = run.checkpoint({"n": 3})
    _drop_index_of(repo, third.id)
    gc_pid.unlink()
    run.checkpoint({"n": 4})
    _fsck(repo)


@pytest.mark.parametrize("cleanup", [["gc", "--prune=now", "-q"], ["repack", "-adf", "-q"]])
def test_delete_then_gc_then_the_same_write_again_and_again(repo: Path, cleanup: list[str]) -> None:
    # The second cycle's repack leaves the very packs the first one left, so objects/info/packs
    # stays byte for byte the same: gc's packed-refs and commit-graph tell the caches instead.
    (repo / "d" / "e").mkdir(parents=True)
    (repo / "d" / "e" / "f.txt").write_text("deep\n")
    (repo / "top.txt").write_text("top\n")
    store = gitstate.open_store(repo)
    for i in range(3):
        cp = store.create_run(run_id=f"r{i}").checkpoint({"k": 1}, files=True)
        fresh = gitstate.open_store(repo).checkpoint(cp.id)
        assert fresh.state == {"k": 1}
        assert git(repo, "cat-file", "-p", f"{cp.id}:files/d/e/f.txt") == "deep\n"
        _fsck(repo)
        store.delete_run(f"r{i}")
        git(repo, "gc", "--prune=now", "-q")
        if cleanup[0] == "repack":
            git(repo, *cleanup)


def test_cli_checkpoint_after_repeated_delete_and_gc(repo: Path) -> None:
    (repo / "d").mkdir()
    (repo / "d" / "f.txt").write_text("hello\n")
    (repo / "s.json").write_text('{"a": 1}')
    for i in range(3):
        done = subprocess.run([sys.executable, "-m", "gitstate_cli", "checkpoint", f"run{i}", "--state", "s.json",
                               "--files", "."], cwd=repo, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert "Traceback" not in done.stderr
        subprocess.run([sys.executable, "-m", "gitstate_cli", "delete", "--yes", f"run{i}"], cwd=repo,
                       check=True, capture_output=True, timeout=120)
        git(repo, "gc", "--prune=now", "-q")
    _fsck(repo)


def test_the_langgraph_saver_reports_a_deleted_repository(repo: Path) -> None:
    import shutil

    from langgraph.checkpoint.base import empty_checkpoint

    from gitstate.langgraph import GitCheckpointSaver

    saver = GitCheckpointSaver(gitstate.open_store(repo))
    cfg = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    saver.put(cfg, empty_checkpoint(), {"source": "input", "step": -1, "parents": {}}, {})
    assert saver.get_tuple(cfg) is not None
    shutil.rmtree(repo / ".git")
    with pytest.raises(gitstate.GitStateError):
        saver.get_tuple(cfg)
    with pytest.raises(gitstate.GitStateError):
        list(saver.list(cfg))


def test_a_snapshot_git_cannot_write_is_a_store_write_error(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess

    from gitstate.workspace.snapshot import Workspace

    original = Workspace._git

    def read_only(self: Workspace, index: str, args: list[str], stdin: bytes | None = None, **kw: bool) -> object:
        if args == ["write-tree"]:
            return subprocess.CompletedProcess(args, 128, b"", b"error: insufficient permission for adding an "
                                               b"object to repository database .git/objects\nfatal: git-write-tree: "
                                               b"error building trees\n")
        return original(self, index, args, stdin, **kw)

    (repo / "a.txt").write_text("a\n")
    monkeypatch.setattr(Workspace, "_git", read_only)
    with pytest.raises(gitstate.StoreWriteError, match="error building trees"):
        gitstate.open_store(repo).create_run(run_id="ro").checkpoint({"n": 1}, files=True)


def test_a_killed_merge_leaves_no_temporary_list_behind(repo: Path) -> None:
    store = gitstate.open_store(repo, pack_in_background=False)
    store.create_run(run_id="m").checkpoint({"n": 1})
    agentos = repo / ".git" / "agentos"
    old = agentos / f"{housekeeping.TX_PACKS}.kept.4194000.tmp"  # a merge killed between write and rename
    young = agentos / f"{housekeeping.TX_PACKS}.kept.4194001.tmp"
    for path in (old, young):
        path.write_text("pack-" + "0" * 40 + "\n")
    aged = time.time() - housekeeping.LEFTOVER_AGE - 60
    os.utime(old, (aged, aged))
    housekeeping.merge_tx_packs(str(repo / ".git"))
    assert not old.exists()
    assert young.exists()  # perhaps a merge on another machine, whose flock this kernel cannot see


def test_repack_between_a_snapshot_and_its_checkpoint_drops_nothing(repo: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A whole-worktree snapshot's objects are packed before the checkpoint naming them is
    written; a `git repack -a -d` in between (which drops what nothing names) must not take them:
    their pack stays kept until the checkpoint (or a restore's safety checkpoint) is written."""
    from gitstate.store.run import Run

    (repo / "d").mkdir()
    (repo / "d" / "new.txt").write_text("new in the snapshot\n")
    store = gitstate.open_store(repo)
    run = store.create_run(run_id="r")
    first = run.checkpoint({"n": 0}, files=True)
    original_commit, original_safety = Run.commit_checkpoint, Run._safety_checkpoint
    repacks: list[str] = []

    def repack_first(self: Run, *args: Any, **kwargs: Any) -> Any:
        git(repo, "repack", "-a", "-d", "-q")
        repacks.append("commit")
        return original_commit(self, *args, **kwargs)

    def repack_before_safety(self: Run, *args: Any, **kwargs: Any) -> Any:
        git(repo, "repack", "-a", "-d", "-q")
        repacks.append("safety")
        return original_safety(self, *args, **kwargs)

    monkeypatch.setattr(Run, "commit_checkpoint", repack_first)
    (repo / "d" / "new.txt").write_text("changed, then a repack before the checkpoint\n")
    cp = run.checkpoint({"n": 1}, files=True)
    assert git(repo, "cat-file", "-p", f"{cp.id}:files/d/new.txt").startswith("changed, then")
    _fsck(repo)
    monkeypatch.setattr(Run, "commit_checkpoint", original_commit)
    monkeypatch.setattr(Run, "_safety_checkpoint", repack_before_safety)
    (repo / "d" / "new.txt").write_text("unsaved, then a repack before the safety checkpoint\n")
    result = run.restore(first, force=True)
    assert repacks == ["commit", "safety"]
    assert result.safety is not None
    assert git(repo, "cat-file", "-p", f"{result.safety}:files/d/new.txt").startswith("unsaved, then")
    _fsck(repo)
