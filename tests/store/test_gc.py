"""gc: retention plans write nothing, applying them keeps what is kept readable (node boundaries
too), pinned and running runs stay, the dry-run estimate matches the bytes given back, the user's
refs and objects are never touched, and a concurrent writer loses nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import gitstate
from gitstate.store import retention as R
from tests.conftest import packs_only


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def refs_of(repo: Path) -> str:
    return git(repo, "for-each-ref", "--format=%(objectname) %(refname)")


def fsck(repo: Path) -> None:
    done = subprocess.run(["git", "-C", str(repo), "fsck", "--strict", "--no-dangling"], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    (path / "user.txt").write_text("the user's file\n")
    git(path, "add", "user.txt")
    git(path, "commit", "-q", "-m", "user commit")
    return path


def finished_run(store: gitstate.Store, run_id: str, n: int, status: str | None = "completed") -> gitstate.Run:
    run = store.create_run(workflow="w", run_id=run_id)
    messages: list[str] = []
    for i in range(n):
        messages.append(f"{run_id} message {i} " + "x" * 100)
        run.checkpoint({"messages": list(messages), "i": i}, node="step",
                       status=status if i == n - 1 else None)
    return run


def test_plan_writes_nothing_and_apply_keeps_what_it_keeps(repo: Path) -> None:
    store = gitstate.open_store(repo)
    run = store.create_run(workflow="w", run_id="forked")
    for i in range(3):
        with run.node(f"n{i}") as scope:
            scope.checkpoint({"i": i, "list": list(range(i + 1))})
            scope.checkpoint({"i": i, "list": list(range(i + 2)), "exit": True})
    line = list(run.history("main"))
    run.fork(line[2].id, "alt")
    run.checkpoint({"alt": 1}, branch="alt")
    run.checkpoint({"i": 9}, node="late")
    run.rollback(list(run.history("main"))[1].id)
    run.checkpoint({"i": 10, "done": True}, node="end", status="completed")
    finished_run(store, "other", 8)
    kept_states = [cp.state for cp in run.history("main", limit=3)]
    alt_states = [cp.state for cp in run.history("alt", limit=3)]
    before = refs_of(repo)

    plan = R.plan(store, R.Policy(keep_last=3), estimate=True)
    assert refs_of(repo) == before  # a plan writes nothing
    assert {(p.run, p.branch) for p in plan.prunes} == {("forked", "main"), ("forked", "alt"), ("other", "main")}
    assert plan.runs == [] and plan.estimate_bytes is not None

    result = R.apply(store, plan, now=True)
    assert result.failed == []
    run = store.get_run("forked")
    assert [cp.state for cp in run.history("main")] == kept_states
    assert [cp.state for cp in run.history("alt")] == alt_states
    exits = {b.exit for b in run.nodes("main")}
    assert exits and exits <= {cp.id for cp in run.history("main")}  # kept checkpoints' boundaries only
    assert len(list(store.get_run("other").history())) == 3
    assert not any(name.startswith(R.TRASH) for name in refs_of(repo).split())  # --now: no trash
    fsck(repo)


def test_pinned_running_and_interrupted_runs_are_untouched(repo: Path) -> None:
    store = gitstate.open_store(repo)
    finished_run(store, "done", 5)
    finished_run(store, "pinned", 5)
    finished_run(store, "live", 5, status=None)  # running
    finished_run(store, "paused", 5, status="interrupted")
    assert R.pin(store, "pinned") and not R.pin(store, "pinned")
    plan = R.plan(store, R.Policy(keep_last=1, older_than=R.parse_cutoff("0s")))
    assert [r.run for r in plan.runs] == ["done"]
    assert ("pinned", "pinned") in plan.skipped
    R.apply(store, plan, now=True)
    assert {s.id for s in store.list_runs()} == {"pinned", "live", "paused"}
    for run_id in ("pinned", "live", "paused"):
        assert len(list(store.get_run(run_id).history())) == 5
    # named: a running run goes, a pinned one never
    plan = R.plan(store, R.Policy(runs=("live", "pinned")))
    assert [r.run for r in plan.runs] == ["live"] and ("pinned", "pinned") in plan.skipped
    assert R.unpin(store, "pinned") and not R.unpin(store, "pinned")
    fsck(repo)


def test_grace_keeps_removed_refs_in_the_trash_until_it_ends(repo: Path) -> None:
    store = gitstate.open_store(repo)
    finished_run(store, "old", 4)
    tip = store.get_run("old").tip()
    R.apply(store, R.plan(store, R.Policy(runs=("old",))))
    assert [s.id for s in store.list_runs()] == []  # listings skip the trash
    trash = R.trash_refs(store)
    assert tip in {oid for _n, oid, _t in trash}
    fsck(repo)  # the trash keeps the removed run's objects
    assert store.read_checkpoint(tip).state == {"messages": [f"old message {i} " + "x" * 100 for i in range(4)], "i": 3}
    assert R.plan(store, R.Policy()).expired_trash == []  # within the grace period
    later = trash[0][2] + 8 * 86400
    assert len(R.plan(store, R.Policy(), at=later).expired_trash) == len(trash)
    R.apply(store, R.plan(store, R.Policy(), at=later))
    assert R.trash_refs(store) == []
    fsck(repo)


def test_user_refs_stashes_and_their_objects_are_untouched(repo: Path) -> None:
    store = gitstate.open_store(repo)
    git(repo, "checkout", "-q", "-b", "feature")
    (repo / "feature.txt").write_text("feature\n")
    git(repo, "add", "feature.txt")
    git(repo, "commit", "-q", "-m", "feature")
    (repo / "user.txt").write_text("stashed change\n")
    git(repo, "stash", "-q")
    (repo / "staged.txt").write_text("only in the index\n")
    git(repo, "add", "staged.txt")
    staged = git(repo, "rev-parse", ":staged.txt").strip()
    git(repo, "checkout", "-q", "-")
    git(repo, "reset", "-q", "--hard")
    dropped = git(repo, "rev-parse", "feature").strip()
    git(repo, "branch", "-q", "-D", "feature")  # only in HEAD's reflog now
    for i in range(5):
        finished_run(store, f"r{i}", 6)
    store.pack()
    user_refs = [line for line in refs_of(repo).splitlines() if "refs/agentos" not in line]
    R.apply(store, R.plan(store, R.Policy(older_than=R.parse_cutoff("0s"))), now=True)
    assert [line for line in refs_of(repo).splitlines() if "refs/agentos" not in line] == user_refs
    git(repo, "cat-file", "-e", dropped)  # reachable from a reflog only
    git(repo, "cat-file", "-e", "stash@{0}^{tree}")
    git(repo, "cat-file", "-e", staged) if git(repo, "ls-files", "staged.txt") else None
    assert store.list_runs() == []
    fsck(repo)


def du_sb(repo: Path) -> int:
    return int(subprocess.run(["du", "-sb", str(repo / ".git")], capture_output=True, text=True, check=True).stdout.split()[0])


def test_dry_run_estimate_matches_the_bytes_given_back(repo: Path) -> None:
    """Within 15 % of what ``du -sb`` sees go, for a prune of every run (as ``--keep-last``) and
    then a removal of half of them (as ``--older-than``)."""
    store = gitstate.open_store(repo)
    for i in range(40):
        finished_run(store, f"r{i:03d}", 10, status="completed" if i % 2 else "failed")
    store.wait_for_housekeeping()
    for policy, now, runs, cut in [(R.Policy(keep_last=3), True, 0, 40),
                                   (R.Policy(older_than=R.parse_cutoff("0s"), statuses=frozenset({"completed"})),
                                    True, 20, 0)]:
        plan = R.plan(store, policy, now=now, estimate=True)
        assert (len(plan.runs), len(plan.prunes)) == (runs, cut)
        before = du_sb(repo)
        result = R.apply(store, plan, now=now)
        freed = before - du_sb(repo)
        assert result.failed == [] and result.reclaimed is not None and freed > 0
        assert result.bytes_freed == freed  # gc measures as du -sb does
        assert plan.estimate_bytes is not None
        assert abs(plan.estimate_bytes - freed) <= 0.15 * freed, (policy, plan.estimate_bytes, freed)
    assert len(store.list_runs()) == 20
    for s in store.list_runs()[:5]:
        assert len(list(store.get_run(s.id).history())) == 3
    fsck(repo)


WRITER = r"""
import sys, gitstate
store = gitstate.open_store(sys.argv[1])
live = store.create_run(workflow="w", run_id="live")
items = []
for i in range(int(sys.argv[2])):
    done = store.create_run(workflow="w", run_id=f"done{i}")
    items.append("item %d " % i + "y" * 200)
    done.checkpoint({"items": list(items)}, status="completed")  # shares blobs with the live run
    live.checkpoint({"items": list(items), "i": i})
print("ok")
"""


def test_concurrent_writer_loses_nothing(repo: Path, tmp_path: Path) -> None:
    store = gitstate.open_store(repo)
    finished_run(store, "seed", 3)
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    count = 60
    writer = subprocess.Popen([sys.executable, str(script), str(repo), str(count)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    rounds = 0
    while writer.poll() is None and rounds < 40:
        R.apply(store, R.plan(store, R.Policy(older_than=R.parse_cutoff("0s"))), now=True)
        rounds += 1
    out, err = writer.communicate(timeout=300)
    assert writer.returncode == 0 and out.strip() == "ok", err
    R.apply(store, R.plan(store, R.Policy(older_than=R.parse_cutoff("0s"))), now=True)
    fsck(repo)
    live = gitstate.open_store(repo).get_run("live")
    states = [cp.state for cp in live.history()]
    assert len(states) == count
    assert all(len(s["items"]) == s["i"] + 1 for s in states)
    assert rounds >= 1


def test_cli_gc_dry_run_and_real(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(repo)
    store = gitstate.open_store(repo)
    finished_run(store, "a", 6)
    finished_run(store, "b", 6)

    def agentos(*args: str) -> dict:  # type: ignore[type-arg]
        done = subprocess.run([sys.executable, "-m", "gitstate_cli", *args, "--json"], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)  # type: ignore[no-any-return]

    assert agentos("pin", "a")["changed"] is True
    assert [r["pinned"] for r in agentos("runs")] == [False, True]
    before = refs_of(repo)
    dry = agentos("gc", "--keep-last", "2", "--dry-run")
    assert refs_of(repo) == before
    assert [(b["run"], b["removed"]) for b in dry["branches"]] == [("b", 4)]
    done = agentos("gc", "--keep-last", "2")
    assert done["checkpoints"] == 4 and done["trash"]
    git(repo, "config", "agentos.gc.olderThan", "0s")
    done = agentos("gc", "--now")
    assert [r["run"] for r in done["runs"]] == ["b"] and done["bytes_freed"] > 0
    bad = subprocess.run([sys.executable, "-m", "gitstate_cli", "gc", "--max-size", "lots"], capture_output=True, text=True)
    assert bad.returncode != 0 and bad.stderr.startswith("error:") and "Traceback" not in bad.stderr
    fsck(repo)
    assert os.path.exists(repo / ".git")


def test_the_pack_rewrite_waits_for_a_transaction_under_way(repo: Path) -> None:
    """A transaction that chose its objects before gc bumped the epoch may name an object of a
    pack gc is about to drop: gc waits until every transaction under way has ended (writers hold
    agentos/gc.lock shared), and gives up (removing nothing) when one outlasts its wait."""
    import threading

    from gitstate.store import reclaim

    packs_only(repo)  # the objects gc drops are in packs
    store = gitstate.open_store(repo, pack_in_background=False)
    run = store.create_run(run_id="old")
    for i in range(3):
        run.checkpoint({"i": i})
    store.delete_run("old")
    common = store.location.common_dir
    inside, release = threading.Event(), threading.Event()
    writer = gitstate.open_store(repo, pack_in_background=False).create_run(run_id="w")

    def slow_state(tip: object, tx: object) -> dict[str, int]:
        inside.set()
        release.wait(30)
        return {"n": 1}

    thread = threading.Thread(target=lambda: writer.update(slow_state))
    thread.start()
    try:
        assert inside.wait(30)
        busy = reclaim.reclaim(common, lambda: R.reachable_objects(store), wait=0.3)
        assert busy.deferred == "writers kept the store busy" and not busy.removed
    finally:
        release.set()
        thread.join(30)
    done = reclaim.reclaim(common, lambda: R.reachable_objects(store), wait=5)
    assert not done.deferred and done.removed
    assert gitstate.open_store(repo).get_run("w").head().state == {"n": 1}  # type: ignore[union-attr]
    assert subprocess.run(["git", "-C", str(repo), "fsck", "--strict"], capture_output=True).returncode == 0


def test_every_status_a_run_shows_can_be_selected() -> None:
    assert R.parse_statuses("saved,stopped") == {"saved", "stopped"}
    assert R.parse_statuses("completed, failed") == R.FINISHED
    with pytest.raises(gitstate.UsageError):
        R.parse_statuses("finished")


def test_cli_pin_and_unpin_say_what_they_did(repo: Path) -> None:
    from conftest import agentos_process

    finished_run(gitstate.open_store(repo), "a", 2)
    said = [agentos_process(repo, *args) for args in (["pin", "a"], ["pin", "a"], ["unpin", "a"], ["unpin", "a"])]
    assert [d.returncode for d in said] == [0, 0, 0, 0]
    assert [d.stdout.strip() for d in said] == ["pinned run a", "run a was pinned already", "unpinned run a",
                                                "run a was not pinned"]
    as_json = [json.loads(agentos_process(repo, *args, "--json").stdout) for args in (["pin", "a"], ["unpin", "a"])]
    assert as_json == [{"run": "a", "pinned": True, "changed": True}, {"run": "a", "pinned": False, "changed": True}]
