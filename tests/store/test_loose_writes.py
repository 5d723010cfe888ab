"""How a write stores its objects: one pack by default; with ``agentos.looseObjects`` set, a small
write loose (as ``git commit`` writes), journaled for housekeeping, when ``core.fsync`` leaves loose
objects unflushed."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import git

import gitstate
from gitstate.errors import UsageError
from gitstate.git import durability
from gitstate.git.objects import MODE_BLOB
from gitstate.store import base, housekeeping
from gitstate.store.transaction import Transaction
from gitstate_cli.main import cli

REF = "refs/agentos/main/runs/w/heads/main"


@pytest.fixture
def repo(repo: Path) -> Path:
    """A fresh repository whose small writes (up to 16 objects) are written loose."""
    git(repo, "config", "agentos.looseObjects", "16")
    return repo


def _packs(repo: Path) -> set[str]:
    return {p.name for p in (repo / ".git" / "objects" / "pack").glob("*.pack")}


def _loose(repo: Path, oid: str) -> bool:
    return (repo / ".git" / "objects" / oid[:2] / oid[2:]).is_file()


def _journaled(repo: Path) -> set[str]:
    journal = repo / ".git" / "agentos" / "loose.journal"
    return set(journal.read_text().split()) if journal.exists() else set()


def _write(store: gitstate.Store, blobs: int, tip: str | None = None) -> tuple[str, list[str]]:
    """One write of ``blobs`` new blobs, a tree and a commit moving REF; returns (commit, all ids)."""
    made: list[str] = []

    def build(tx: Transaction) -> str:
        made.clear()
        made.extend(tx.blob(b"blob %d of a write after %s\n" % (i, (tip or "-").encode())) for i in range(blobs))
        tree = tx.tree([(f"f{i}", oid, MODE_BLOB) for i, oid in enumerate(made)])
        commit = tx.commit(tree, [tip] if tip else [], "a write")
        tx.set_ref(REF, tip, commit, "gitstate: test write")
        made.extend([tree, commit])
        return commit

    return store.core.write(build), list(made)


def test_a_small_write_is_loose_and_journaled_and_plain_git_reads_it(repo: Path) -> None:
    store = gitstate.open_store(repo, pack_in_background=False)
    before = _packs(repo)
    commit, ids = _write(store, 3)
    assert _packs(repo) == before  # no pack, no .idx, no .keep
    assert all(_loose(repo, oid) for oid in ids)
    assert set(ids) <= _journaled(repo)  # housekeeping packs them later
    assert git(repo, "rev-parse", REF).strip() == commit
    assert git(repo, "cat-file", "-p", f"{commit}:f2") == "blob 2 of a write after -\n"
    assert "gitstate: test write" in git(repo, "reflog", "show", REF)
    git(repo, "fsck", "--strict", "--no-dangling")
    assert store.pack() >= len(ids)  # housekeeping packs the journaled objects and removes them
    assert not any(_loose(repo, oid) for oid in ids)
    assert git(repo, "cat-file", "-t", commit) == "commit\n"
    git(repo, "fsck", "--strict", "--no-dangling")


@pytest.mark.parametrize("setting", [("core.fsync", "committed"), ("core.fsync", "loose-object"),
                                     ("core.fsyncObjectFiles", "true"), ("agentos.looseObjects", "0")])
def test_a_write_is_one_pack_when_loose_objects_are_flushed_or_turned_off(repo: Path,
                                                                         setting: tuple[str, str]) -> None:
    git(repo, "config", *setting)
    store = gitstate.open_store(repo, pack_in_background=False)
    before = _packs(repo)
    commit, ids = _write(store, 3)
    assert len(_packs(repo) - before) == 1
    assert not any(_loose(repo, oid) for oid in ids) and not _journaled(repo)
    assert git(repo, "cat-file", "-t", commit) == "commit\n"


def test_a_write_of_more_objects_than_the_limit_is_one_pack(repo: Path) -> None:
    git(repo, "config", "agentos.looseObjects", "4")
    store = gitstate.open_store(repo, pack_in_background=False)
    before = _packs(repo)
    tip, small = _write(store, 2)  # 4 objects: loose
    assert _packs(repo) == before and all(_loose(repo, oid) for oid in small)
    _commit, large = _write(store, 3, tip)  # 5 objects: a pack
    assert len(_packs(repo) - before) == 1 and not any(_loose(repo, oid) for oid in large)
    # open_store(fsync=...) decides what is flushed, not how small writes are stored
    store = gitstate.open_store(repo, fsync=False, pack_in_background=False)
    assert store.core.durability.loose_max == 4


def test_a_write_of_large_objects_is_one_pack(repo: Path) -> None:
    store = gitstate.open_store(repo, pack_in_background=False)

    def build(tx: Transaction) -> str:
        big = tx.blob(b"x" * (durability.LOOSE_BYTES + 1))
        commit = tx.commit(tx.tree([("big", big, MODE_BLOB)]), [], "a large write")
        tx.set_ref(REF, None, commit, "gitstate: test write")
        return commit

    commit = store.core.write(build)
    assert len(_packs(repo)) == 1 and not _loose(repo, commit)


@pytest.mark.parametrize("value", ["lots", "-1", "1.5"])
def test_a_loose_limit_that_is_not_a_whole_number_is_a_clear_error(repo: Path, value: str,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    git(repo, "config", "agentos.looseObjects", value)
    with pytest.raises(UsageError, match="agentos.looseObjects must be a whole number"):
        gitstate.open_store(repo)
    monkeypatch.chdir(repo)
    result = CliRunner().invoke(cli, ["runs"], prog_name="git agentos")
    assert result.exit_code != 0
    assert "agentos.looseObjects must be a whole number" in result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1


def test_checkpoints_written_loose_read_back_in_a_fresh_process_and_after_git_gc(repo: Path) -> None:
    store = gitstate.open_store(repo)
    run = store.create_run(run_id="r")
    ids = [run.checkpoint({"i": i, "text": f"step {i}"}).id for i in range(5)]
    assert _packs(repo) == set() or all(p.startswith("pack-") for p in _packs(repo))
    git(repo, "gc", "--quiet")  # git packs the loose objects and removes them
    fresh = gitstate.open_store(repo)
    assert [fresh.checkpoint(i).state["i"] for i in ids] == list(range(5))
    git(repo, "fsck", "--strict", "--no-dangling")


def test_a_writer_packs_what_its_small_writes_left_loose_itself(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(base, "SELF_PACK_AT", 10)
    store = gitstate.open_store(repo, pack_in_background=False)
    tip, first = _write(store, 3)  # 5 objects: loose, waiting
    assert _packs(repo) == set() and all(_loose(repo, oid) for oid in first)
    _tip, second = _write(store, 3, tip)  # 10 objects waiting: packed by the writer, from memory
    assert len(_packs(repo)) == 1
    assert not any(_loose(repo, oid) for oid in first + second)
    listed = (repo / ".git" / "agentos" / "tx-packs").read_text().split()
    assert [p.removesuffix(".pack") for p in _packs(repo)] == listed  # merged with transaction packs
    git(repo, "fsck", "--strict", "--no-dangling")
    assert git(repo, "cat-file", "-p", f"{REF}:f0").startswith("blob 0")


def test_the_automatic_packing_leaves_young_objects_to_their_writer(repo: Path) -> None:
    store = gitstate.open_store(repo, pack_in_background=False)
    _commit, ids = _write(store, 3)
    common = store.location.common_dir
    assert housekeeping.pack_loose(store.repo, common, min_age=housekeeping.AUTO_MIN_AGE) == 0
    assert all(_loose(repo, oid) for oid in ids) and set(ids) <= _journaled_anywhere(repo)  # listed again
    assert housekeeping.pack_loose(store.repo, common) == len(ids)  # an explicit pack takes them all
    assert not any(_loose(repo, oid) for oid in ids)


def _journaled_anywhere(repo: Path) -> set[str]:
    found: set[str] = set()
    for path in (repo / ".git" / "agentos").glob("loose.journal*"):
        found.update(path.read_text().split())
    return found


def test_closing_a_store_packs_what_its_small_writes_left_loose(repo: Path) -> None:
    store = gitstate.open_store(repo, pack_in_background=False)
    _commit, ids = _write(store, 2)
    assert all(_loose(repo, oid) for oid in ids)
    store.close()
    assert not any(_loose(repo, oid) for oid in ids) and len(_packs(repo)) == 1
    git(repo, "fsck", "--strict", "--no-dangling")


def test_by_default_every_write_is_one_pack(tmp_path: Path) -> None:
    from conftest import make_repo

    repo = make_repo(tmp_path / "fresh")
    store = gitstate.open_store(repo, pack_in_background=False)
    assert store.core.durability.loose_max == 0
    _commit, ids = _write(store, 1)
    assert len(_packs(repo)) == 1 and not any(_loose(repo, oid) for oid in ids)


@pytest.mark.parametrize("loose_writes", [False, True])
def test_young_snapshot_objects_are_packed_at_once_unless_writes_go_loose(tmp_path: Path, loose_writes: bool,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from conftest import make_repo

    repo = make_repo(tmp_path / "fresh")
    git(repo, "config", "agentos.looseObjects", "16" if loose_writes else "0")
    monkeypatch.setattr(housekeeping, "PACK_THRESHOLD", 1)
    (repo / "new.txt").write_text("a file the snapshot writes as a new loose object\n")
    blob = git(repo, "hash-object", "new.txt").strip()
    store = gitstate.open_store(repo, pack_in_background=False)
    store.create_run(run_id="r").checkpoint({"n": 1}, files=True)
    store.core.write(lambda tx: None)  # a write that journals and so checks the journal's size
    assert _loose(repo, blob) == loose_writes  # left to the store's own packing only when it has one
    assert git(repo, "cat-file", "-t", blob) == "blob\n"
