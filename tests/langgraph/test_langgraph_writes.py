"""Pending writes of the LangGraph saver: a ``put_writes`` creates a writes ref (a loose blob) and
moves no branch; the next ``put`` folds the writes into the checkpoint's commit with the step's one
ref move, packs the blob and deletes the ref. Other processes read the writes from the refs;
rewrites (copy, prune, delete_for_runs) carry them; a newer format version is refused."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph.checkpoint.base")

from conftest import git  # noqa: E402
from langgraph.checkpoint.base import empty_checkpoint  # noqa: E402

import gitstate  # noqa: E402
from gitstate.errors import UnsupportedFormatError  # noqa: E402
from gitstate.format import encoding  # noqa: E402
from gitstate.langgraph import GitCheckpointSaver  # noqa: E402

THREAD = "w"
WRITES = "refs/agentos/main/runs/w/writes/"
BRANCH = "refs/agentos/main/runs/w/heads/main"


def _checkpoint(n: int) -> Any:
    cp = empty_checkpoint()
    cp["channel_values"] = {"n": n, "log": [f"entry {i}" for i in range(n)]}
    cp["channel_versions"] = {"n": str(n), "log": str(n)}
    return cp


def _put(saver: GitCheckpointSaver, config: dict[str, Any], n: int) -> Any:
    return saver.put(config, _checkpoint(n), {"source": "loop", "step": n, "parents": {}},
                     {"n": str(n), "log": str(n)})


def _writes_refs(repo: Path) -> list[tuple[str, str]]:
    out = git(repo, "for-each-ref", "--format=%(refname) %(objecttype)", WRITES)
    return [tuple(line.split(" ")) for line in out.splitlines()]  # type: ignore[misc]


def _loose(repo: Path, oid: str) -> bool:
    return (repo / ".git" / "objects" / oid[:2] / oid[2:]).exists()


def _start(repo: Path) -> tuple[GitCheckpointSaver, Any]:
    saver = GitCheckpointSaver(gitstate.open_store(repo))
    first = _put(saver, {"configurable": {"thread_id": THREAD, "checkpoint_ns": ""}}, 1)
    return saver, first


@pytest.mark.parametrize("packed", [True, False], ids=["packs", "loose"])
def test_writes_ref_then_folded_by_the_next_put(repo: Path, packed: bool) -> None:
    git(repo, "config", "agentos.looseObjects", "0" if packed else "16")
    saver, first = _start(repo)
    tip = git(repo, "rev-parse", BRANCH).strip()
    reflog = git(repo, "reflog", BRANCH)
    saver.put_writes(first, [("n", 10), ("log", ["late"])], "task-1", "path-1")
    saver.put_writes(first, [("n", 11)], "task-2", "path-2")
    assert git(repo, "rev-parse", BRANCH).strip() == tip  # no branch moved
    assert git(repo, "reflog", BRANCH) == reflog
    refs = _writes_refs(repo)
    assert len(refs) == 2 and all(kind == "blob" for _name, kind in refs)
    for name, _kind in refs:
        oid = name.rsplit("/", 1)[1]
        assert git(repo, "rev-parse", name).strip() == oid  # named by its blob
        raw = subprocess.run(["git", "cat-file", "blob", oid], cwd=repo, capture_output=True, check=True).stdout
        payload = encoding.loads(raw)
        assert payload["format"] == "langgraph-writes" and payload["v"] == 1
        assert payload["checkpoint_id"] == first["configurable"]["checkpoint_id"]
        assert _loose(repo, oid)
    expected = [("task-1", "n", 10), ("task-1", "log", ["late"]), ("task-2", "n", 11)]
    assert saver.get_tuple(first).pending_writes == expected  # type: ignore[union-attr]
    other = GitCheckpointSaver(gitstate.open_store(repo))  # another process reads the refs
    assert other.get_tuple(first).pending_writes == expected  # type: ignore[union-attr]

    second = _put(saver, first, 2)
    assert _writes_refs(repo) == []
    folded = git(repo, "rev-parse", BRANCH + "^").strip()
    assert folded != tip  # the first checkpoint's commit now holds the writes ...
    assert "langgraph-writes.cbor" in git(repo, "ls-tree", "--name-only", folded)
    assert git(repo, "rev-parse", folded + "^{tree}") != git(repo, "rev-parse", tip + "^{tree}")
    assert git(repo, "log", "-1", "--format=%B", folded) == git(repo, "log", "-1", "--format=%B", tip)
    assert git(repo, "reflog", BRANCH).count("\n") == reflog.count("\n") + 1  # ... moved by one ref move
    journal = repo / ".git" / "agentos" / "loose.journal"
    for name, _kind in refs:
        oid = name.rsplit("/", 1)[1]
        if packed:  # the put's pack holds the blobs: their loose copies are gone
            assert not _loose(repo, oid)
        else:  # the put was written loose: the blobs stay loose, journaled for housekeeping
            assert _loose(repo, oid) and oid in journal.read_text().split()
        assert git(repo, "cat-file", "-t", oid) == "blob\n"
    if not packed:
        saver.store.pack()
        assert not any(_loose(repo, name.rsplit("/", 1)[1]) for name, _kind in refs)
    for reader in (saver, other, GitCheckpointSaver(gitstate.open_store(repo))):
        got = reader.get_tuple(first)
        assert got is not None and got.pending_writes == expected
        latest = reader.get_tuple({"configurable": {"thread_id": THREAD, "checkpoint_ns": ""}})
        assert latest is not None and latest.config == second and latest.pending_writes == []
        assert latest.parent_config == first
    git(repo, "fsck", "--strict", "--no-dangling")


def test_pending_writes_are_not_duplicated_and_first_write_wins(repo: Path) -> None:
    saver, first = _start(repo)
    saver.put_writes(first, [("n", 10)], "task-1")
    saver.put_writes(first, [("n", 99)], "task-1")  # same task and index: the first write stays
    assert len(_writes_refs(repo)) == 1
    assert saver.get_tuple(first).pending_writes == [("task-1", "n", 10)]  # type: ignore[union-attr]


def test_a_writes_ref_left_behind_is_read_once_and_removed_later(repo: Path) -> None:
    """A writer that died between moving the branch and deleting the writes ref (or a pack-refs
    that brought a deleted one back) leaves a ref whose writes the commit already holds: readers
    see each write once, and the next put deletes it."""
    saver, first = _start(repo)
    saver.put_writes(first, [("n", 10)], "task-1")
    (name, _kind), = _writes_refs(repo)
    oid = git(repo, "rev-parse", name).strip()
    second = _put(saver, first, 2)
    git(repo, "update-ref", name, oid)  # the stale ref is back
    for reader in (saver, GitCheckpointSaver(gitstate.open_store(repo))):
        assert reader.get_tuple(first).pending_writes == [("task-1", "n", 10)]  # type: ignore[union-attr]
    _put(saver, second, 3)
    assert _writes_refs(repo) == []
    assert saver.get_tuple(first).pending_writes == [("task-1", "n", 10)]  # type: ignore[union-attr]


def test_writes_of_another_process_are_folded_by_this_one(repo: Path) -> None:
    saver, first = _start(repo)
    other = GitCheckpointSaver(gitstate.open_store(repo))
    other.put_writes(first, [("n", 10)], "task-1")
    second = _put(saver, first, 2)  # this process folds the other's pending writes
    assert _writes_refs(repo) == []
    assert other.get_tuple(first).pending_writes == [("task-1", "n", 10)]  # type: ignore[union-attr]
    other.put_writes(second, [("n", 20)], "task-2")
    assert saver.get_tuple(second).pending_writes == [("task-2", "n", 20)]  # type: ignore[union-attr]


def test_error_writes_amend_at_once_and_fold_the_refs(repo: Path) -> None:
    saver, first = _start(repo)
    tip = git(repo, "rev-parse", BRANCH).strip()
    saver.put_writes(first, [("n", 10)], "task-1")
    saver.put_writes(first, [("__error__", ValueError("boom"))], "task-2")
    assert git(repo, "rev-parse", BRANCH).strip() != tip  # the status is the branch's: it moved
    assert _writes_refs(repo) == []
    assert "failed" in git(repo, "log", "-1", "--format=%s", BRANCH)
    got = saver.get_tuple(first)
    assert got is not None and [(t, c) for t, c, _v in got.pending_writes] == [("task-1", "n"), ("task-2", "__error__")]
    git(repo, "fsck", "--strict", "--no-dangling")


def test_copy_prune_and_delete_for_runs_carry_pending_writes(repo: Path) -> None:
    saver, first = _start(repo)
    second = _put(saver, first, 2)
    saver.put_writes(second, [("n", 20)], "task-2")
    saver.copy_thread(THREAD, "copy")
    copied = {"configurable": {**second["configurable"], "thread_id": "copy"}}
    assert saver.get_tuple(copied).pending_writes == [("task-2", "n", 20)]  # type: ignore[union-attr]
    assert git(repo, "for-each-ref", "refs/agentos/main/runs/copy/writes/") == ""  # in the commit
    saver.prune([THREAD], strategy="keep_latest")
    assert _writes_refs(repo) == []
    kept = saver.get_tuple({"configurable": {"thread_id": THREAD, "checkpoint_ns": ""}})
    assert kept is not None and kept.pending_writes == [("task-2", "n", 20)]
    git(repo, "fsck", "--strict", "--no-dangling")
    # the kept checkpoint is the first of its line: runs and branches count one checkpoint
    store = gitstate.open_store(repo)
    assert [(s.id, s.checkpoints) for s in store.list_runs() if s.id == THREAD] == [(THREAD, 1)]
    assert [(b.name, b.checkpoints) for b in store.get_run(THREAD).branch_list()] == [("main", 1)]
    assert store.get_run(THREAD).head().step == 0


def test_delete_for_runs_drops_the_writes_of_dropped_checkpoints(repo: Path) -> None:
    saver = GitCheckpointSaver(gitstate.open_store(repo))
    config: Any = {"configurable": {"thread_id": THREAD, "checkpoint_ns": ""}}
    kept = saver.put(config, _checkpoint(1), {"source": "loop", "step": 1, "run_id": "keep"}, {"n": "1", "log": "1"})
    dropped = saver.put(kept, _checkpoint(2), {"source": "loop", "step": 2, "run_id": "drop"}, {"n": "2", "log": "2"})
    saver.put_writes(kept, [("n", 1)], "task-1")  # kept is not a tip: its writes stay in a ref
    saver.put_writes(dropped, [("n", 2)], "task-2")
    assert len(_writes_refs(repo)) == 2
    saver.delete_for_runs(["drop"])
    assert saver.get_tuple(dropped) is None
    assert len(_writes_refs(repo)) == 1
    assert saver.get_tuple(kept).pending_writes == [("task-1", "n", 1)]  # type: ignore[union-attr]


def test_a_newer_writes_format_is_refused(repo: Path) -> None:
    saver, first = _start(repo)
    blob = encoding.dumps({"format": "langgraph-writes", "v": 2, "checkpoint_ns": "",
                           "checkpoint_id": first["configurable"]["checkpoint_id"], "writes": []})
    path = repo / "newer.bin"
    path.write_bytes(blob)
    oid = git(repo, "hash-object", "-w", str(path)).strip()
    os.unlink(path)
    git(repo, "update-ref", WRITES + oid, oid)
    with pytest.raises(UnsupportedFormatError):
        GitCheckpointSaver(gitstate.open_store(repo)).get_tuple(first)


KILLED_WRITER = r"""
import sys
from langgraph.checkpoint.base import empty_checkpoint
import gitstate
from gitstate.langgraph import GitCheckpointSaver

saver = GitCheckpointSaver(gitstate.open_store(sys.argv[1]))
config = {"configurable": {"thread_id": "k", "checkpoint_ns": ""}}
latest = saver.get_tuple(config)
if latest is not None:
    config = latest.config
items = list(latest.checkpoint["channel_values"]["log"]) if latest is not None else []
for i in range(100000):
    if "checkpoint_id" in config["configurable"]:
        saver.put_writes(config, [("log", [f"write {i}"])], f"task-{i}")
        print("W", config["configurable"]["checkpoint_id"], f"task-{i}", flush=True)
    items = items + [f"item {i}"]
    cp = empty_checkpoint()
    cp["channel_values"] = {"log": items}
    cp["channel_versions"] = {"log": str(len(items))}
    config = saver.put(config, cp, {"source": "loop", "step": i, "parents": {}}, {"log": str(len(items))})
    print("C", config["configurable"]["checkpoint_id"], len(items), flush=True)
"""


def test_sigkill_between_writes_and_puts_loses_nothing_acknowledged(repo: Path) -> None:
    """A writer killed at random points (between a put_writes and its put, during a fold, a merge):
    every checkpoint and pending write it acknowledged reads back from a new process, the next
    writer carries on (folding what the killed one left), and git fsck is clean."""
    import random
    import signal
    import sys
    import time

    rng = random.Random(7)
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    acked_cps: dict[str, int] = {}
    acked_writes: list[tuple[str, str]] = []
    for _round in range(4):
        proc = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(repo)], stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True, env=env)
        assert proc.stdout is not None
        first = proc.stdout.readline()  # it is writing (imports take a while on a loaded machine)
        time.sleep(rng.uniform(0.05, 0.6))
        proc.send_signal(signal.SIGKILL)
        out, _err = proc.communicate(timeout=60)
        for line in [first, *out.splitlines()]:
            line = line.strip()
            parts = line.split(" ")
            if parts[0] == "C" and len(parts) == 3:
                acked_cps[parts[1]] = int(parts[2])
            elif parts[0] == "W" and len(parts) == 3:
                acked_writes.append((parts[1], parts[2]))
    assert acked_cps, "the writer never acknowledged a checkpoint"
    saver = GitCheckpointSaver(gitstate.open_store(repo))
    for cid, length in acked_cps.items():
        got = saver.get_tuple({"configurable": {"thread_id": "k", "checkpoint_ns": "", "checkpoint_id": cid}})
        assert got is not None and len(got.checkpoint["channel_values"]["log"]) == length
    for cid, task in acked_writes:
        got = saver.get_tuple({"configurable": {"thread_id": "k", "checkpoint_ns": "", "checkpoint_id": cid}})
        assert got is not None and task in {t for t, _c, _v in got.pending_writes}, (cid, task)
    git(repo, "fsck", "--strict", "--no-dangling")


def test_a_put_on_a_stale_index_forks_instead_of_overwriting(repo: Path) -> None:
    """A put trusts the branches its process last knew (it reads no branch ref): when another
    process moved the branch meanwhile, the compare-and-swap fails and the put runs again on refs
    read afresh, so its checkpoint goes to a fork line and the other's stays on main."""
    saver, first = _start(repo)
    other = GitCheckpointSaver(gitstate.open_store(repo))
    theirs = _put(other, first, 2)
    saver.put_writes(first, [("n", 10)], "task-1")
    tip_before = git(repo, "rev-parse", BRANCH).strip()
    mine = saver.put(first, {**_checkpoint(3), "id": "mine-3"}, {"source": "loop", "step": 3, "parents": {}},
                     {"n": "3", "log": "3"})
    assert git(repo, "rev-parse", BRANCH).strip() == tip_before  # main still ends at theirs
    for reader in (saver, other, GitCheckpointSaver(gitstate.open_store(repo))):
        got_theirs, got_mine = reader.get_tuple(theirs), reader.get_tuple(mine)
        assert got_theirs is not None and got_theirs.checkpoint["channel_values"]["n"] == 2
        assert got_mine is not None and got_mine.checkpoint["channel_values"]["n"] == 3
        assert got_mine.parent_config is not None
        assert got_mine.parent_config["configurable"]["checkpoint_id"] == first["configurable"]["checkpoint_id"]
        assert reader.get_tuple(first).pending_writes == [("task-1", "n", 10)]  # type: ignore[union-attr]
    forks = git(repo, "for-each-ref", "--format=%(refname)", "refs/agentos/main/runs/w/heads/").split()
    assert len(forks) == 2 and BRANCH in forks
    git(repo, "fsck", "--strict", "--no-dangling")


def test_writes_that_come_after_the_next_put_are_shown_by_the_cli(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """LangGraph's asynchronous durability may store a task's writes after the next checkpoint:
    they stay in a writes ref (no put folds them), and `git agentos show` lists them as the saver
    returns them; a writes blob that cannot be read is one error line, never a silent omission."""
    from click.testing import CliRunner

    from gitstate_cli.main import cli

    saver, first = _start(repo)
    _put(saver, first, 2)
    saver.put_writes(first, [("n", 10)], "task-1", "~__pregel_pull, worker")
    assert saver.get_tuple(first).pending_writes == [("task-1", "n", 10)]  # type: ignore[union-attr]
    (name, _kind), = _writes_refs(repo)
    monkeypatch.chdir(repo)
    runner = CliRunner()
    shown = runner.invoke(cli, ["show", "w~1", "--json"], prog_name="git agentos")
    assert shown.exit_code == 0, shown.output
    writes = json.loads(shown.stdout)["langgraph"]["writes"]
    assert [(w["task"], w["node"], w["channel"], w["value"]) for w in writes] == [("task-1", "worker", "n", 10)]
    text = runner.invoke(cli, ["show", "w~1"], prog_name="git agentos")
    assert "pending writes (1):" in text.stdout and "worker -> n: 10" in text.stdout
    assert json.loads(runner.invoke(cli, ["show", "w", "--json"]).stdout)["langgraph"]["writes"] == []
    oid = git(repo, "rev-parse", name).strip()
    (repo / ".git" / "objects" / oid[:2] / oid[2:]).unlink()
    broken = runner.invoke(cli, ["show", "w~1"], prog_name="git agentos")
    assert broken.exit_code == 1 and broken.stderr.startswith("error: ") and oid[:7] in broken.stderr
    assert "Traceback" not in broken.output


def test_a_put_after_another_process_deleted_the_thread_makes_its_run_again(repo: Path) -> None:
    """This process's index still lists the thread another process deleted: the put's
    compare-and-swap fails, and the retry, finding no branch, records the run again before it
    writes, so the thread stays a run the CLI and the store can open (not orphan branches)."""
    saver, first = _start(repo)
    second = _put(saver, first, 2)
    GitCheckpointSaver(gitstate.open_store(repo)).delete_thread(THREAD)
    assert git(repo, "for-each-ref", "refs/agentos/").strip() == ""
    third = _put(saver, second, 3)
    run = gitstate.open_store(repo).get_run(THREAD)
    assert run.workflow == "langgraph" and run.head() is not None
    got = GitCheckpointSaver(gitstate.open_store(repo)).get_tuple(third)
    assert got is not None and got.checkpoint["channel_values"]["n"] == 3
    git(repo, "fsck", "--strict", "--no-dangling")


def test_late_writes_are_not_looked_at_again_by_every_put(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Writes that came after their checkpoint's child was put stay as writes refs (one in fifty
    steps of a real graph under asynchronous durability): a put compares with their checkpoint's
    commit only the writes refs that changed since the last put, so a long thread's puts do not
    get slower with every late write it gathered. They still read back, and a stale one (its
    records already in the commit) is still removed."""
    saver, config = _start(repo)
    late = []
    for n in range(2, 12):
        nxt = _put(saver, config, n)
        saver.put_writes(config, [("n", n * 10)], f"late-{n}", "")  # after its child was put
        late.append(config)
        config = nxt
    assert len(_writes_refs(repo)) == 10
    looked: list[str] = []
    real = GitCheckpointSaver._read_writes
    monkeypatch.setattr(GitCheckpointSaver, "_read_writes",
                        lambda self, commit: looked.append(commit.id) or real(self, commit))
    for n in range(12, 15):
        config = _put(saver, config, n)
    assert len(looked) <= 1, looked  # the last late write's checkpoint at most, once
    monkeypatch.undo()
    for k, cfg in enumerate(late, start=2):
        assert saver.get_tuple(cfg).pending_writes == [(f"late-{k}", "n", k * 10)]  # type: ignore[union-attr]
    assert len(_writes_refs(repo)) == 10


def test_a_pack_refs_between_listing_loose_and_packed_refs_hides_no_writes_ref(repo: Path,
                                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """`git pack-refs` writes packed-refs, then deletes the loose refs: the ref reader lists the
    loose writes refs first and reads packed-refs after, as git does, so a pack-refs that lands
    between the two (run here just before the loose listing) hides no writes ref from a put's fold
    or from get_tuple (read the other way round, another process's writes were lost)."""
    from langgraph.checkpoint.base import create_checkpoint

    import gitstate.langgraph.index as lgindex

    real, armed = lgindex._read_writes_names, [False]

    def packing_first(folder: str, out: dict[str, str]) -> None:
        if armed[0]:
            armed[0] = False
            git(repo, "pack-refs", "--all")
        real(folder, out)

    monkeypatch.setattr(lgindex, "_read_writes_names", packing_first)
    saver = GitCheckpointSaver(gitstate.open_store(repo))
    other = GitCheckpointSaver(gitstate.open_store(repo))  # another process
    cp0 = empty_checkpoint()
    k = saver.put({"configurable": {"thread_id": "t", "checkpoint_ns": ""}}, cp0, {"source": "input", "step": -1}, {})
    other.put_writes(k, [("items", "from-other")], "task-1")
    armed[0] = True
    saver.put(k, create_checkpoint(cp0, None, 0), {"source": "loop", "step": 0}, {})  # folds K's writes
    fresh = GitCheckpointSaver(gitstate.open_store(repo))
    assert [w[2] for w in fresh.get_tuple(k).pending_writes] == ["from-other"]  # type: ignore[union-attr]
    other.put_writes(k, [("items", "second")], "task-2")  # K is no tip now: a writes ref stays
    armed[0] = True
    reader = GitCheckpointSaver(gitstate.open_store(repo))
    assert [w[2] for w in reader.get_tuple(k).pending_writes] == ["from-other", "second"]  # type: ignore[union-attr]


def test_a_stale_writes_ref_a_pack_refs_brings_back_is_removed_again(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A stale writes ref (its records already in its checkpoint's commit) that a put deletes while
    a concurrent `git pack-refs` copies it into packed-refs comes back; the saver forgets the refs
    it deletes, so it sees the one that came back as new, and its next put removes it."""
    from langgraph.checkpoint.base import create_checkpoint

    import gitstate.git.refs as grefs

    saver = GitCheckpointSaver(gitstate.open_store(repo))
    cp = empty_checkpoint()
    k = saver.put({"configurable": {"thread_id": "t", "checkpoint_ns": ""}}, cp, {"source": "input", "step": -1}, {})
    saver.put_writes(k, [("items", "w1")], "task-1")
    (name, _kind), = [r for r in _all_writes_refs(repo)]
    path = repo / ".git" / name
    saved = path.read_text()
    cp = create_checkpoint(cp, None, 0)
    cfg = saver.put(k, cp, {"source": "loop", "step": 0}, {})  # folds w1, deletes the ref
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(saved)  # a writer died before deleting it: stale
    real, fired = grefs.remove_transient_ref, []

    def brought_back(common_dir: str, ref: str, old: str, message: str) -> None:
        real(common_dir, ref, old, message)
        if ref == name and not fired:
            fired.append(ref)
            with open(os.path.join(common_dir, "packed-refs"), "a") as fh:
                fh.write(f"{old} {ref}\n")  # what a pack-refs that read the loose ref just before writes

    monkeypatch.setattr(grefs, "remove_transient_ref", brought_back)
    second = GitCheckpointSaver(gitstate.open_store(repo))
    for i in range(1, 4):
        cp = create_checkpoint(cp, None, i)
        cfg = second.put(cfg, cp, {"source": "loop", "step": i}, {})
    assert fired and _all_writes_refs(repo) == []
    assert [w[2] for w in second.get_tuple(k).pending_writes] == ["w1"]  # type: ignore[union-attr]


def _all_writes_refs(repo: Path) -> list[tuple[str, str]]:
    out = git(repo, "for-each-ref", "--format=%(refname) %(objecttype)", "refs/agentos/")
    return [tuple(line.split(" ")) for line in out.splitlines() if "/writes/" in line]  # type: ignore[misc]
