"""A run's branches as a list (tips, where each came from, fork points) and deleting one safely."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import git
from remote_helpers import bare, machine

import gitstate
from gitstate.workspace.restore import SAFETY_BRANCH


def test_branch_list_says_where_each_came_from(store: gitstate.Store) -> None:
    run = store.create_run(run_id="r")
    cps = [run.checkpoint({"i": i}) for i in range(3)]
    run.fork(cps[1].id, "try-b")
    run.checkpoint({"b": 1}, branch="try-b")
    run.checkpoint({"fresh": 1}, branch="fresh")  # a branch begun by a checkpoint, unrelated to main
    infos = {b.name: b for b in run.branch_list()}
    assert [b.name for b in run.branch_list()][0] == "main"
    assert (infos["main"].kind, infos["main"].fork_point, infos["main"].checkpoints) == ("main", None, 3)
    assert infos["try-b"].kind == "fork" and infos["try-b"].fork_point == cps[1].id
    assert cps[1].short_id in infos["try-b"].origin and infos["try-b"].checkpoints == 3
    assert infos["fresh"].kind == "created" and infos["fresh"].fork_point is None
    assert not any(b.local_only for b in infos.values())
    doc = infos["try-b"].to_dict()
    assert doc["branch"] == "try-b" and doc["tip"] == infos["try-b"].tip.id and doc["created_at"]


def test_safety_and_kept_copies_are_named(tmp_path: Path) -> None:
    url = bare(tmp_path / "server.git").as_uri()
    a = gitstate.open_store(machine(tmp_path / "A", url))
    b = gitstate.open_store(machine(tmp_path / "B", url))
    run_a = a.create_run(run_id="r")
    run_a.checkpoint({"x": 0})
    gitstate.push(a)
    gitstate.pull(b)
    run_a.checkpoint({"x": "a"})
    b.get_run("r").checkpoint({"x": "b"})
    gitstate.push(a)
    gitstate.pull(b)
    infos = {i.name: i for i in b.get_run("r").branch_list()}
    assert infos["main@origin"].kind == "kept-copy" and "origin" in infos["main@origin"].origin

    repo = tmp_path / "A"
    (repo / "f.txt").write_text("one\n")
    snap = run_a.checkpoint({"x": 1}, files=True)
    (repo / "f.txt").write_text("unsaved\n")
    run_a.restore(snap, force=True)
    safety = {i.name: i for i in run_a.branch_list()}[SAFETY_BRANCH]
    assert safety.kind == "safety" and safety.local_only


def test_delete_branch_is_as_careful_as_git_branch_d(store: gitstate.Store) -> None:
    run = store.create_run(run_id="r")
    cps = [run.checkpoint({"i": i}) for i in range(3)]
    run.fork(cps[1].id, "merged")  # every checkpoint is on main too
    run.fork(cps[1].id, "own")
    own_tip = run.checkpoint({"own": 1}, branch="own")
    with pytest.raises(gitstate.BranchDeleteRefused) as info:
        run.delete_branch("main")
    assert "force=True" in str(info.value) and info.value.branch == "main"
    with pytest.raises(gitstate.BranchDeleteRefused):
        run.delete_branch("own")  # its newest checkpoint is on no other branch
    with pytest.raises(gitstate.BranchNotFound):
        run.delete_branch("nope")
    assert sorted(run.branches()) == ["main", "merged", "own"]
    assert run.delete_branch("merged") == cps[1].id
    assert run.delete_branch("own", force=True) == own_tip.id
    assert sorted(run.branches()) == ["main"]
    assert store.checkpoint(own_tip.id).id == own_tip.id  # still readable by id until git gc
    assert "refs/agentos/main/runs/r/heads/own" not in git(store.path, "for-each-ref")


def _break_refs(store: gitstate.Store, repo: Path) -> tuple[Path, Path]:
    """A run ``r`` with a healthy main, a branch file git calls "broken" and a symbolic branch."""
    run = store.create_run(run_id="r")
    run.checkpoint({"i": 0})
    heads = repo / ".git" / "refs" / "agentos" / "main" / "runs" / "r" / "heads"
    (heads / "junk").write_text("garbage\n")
    (heads / "sym").write_text("ref: refs/heads/main\n")
    return heads / "junk", heads / "sym"


def test_refs_that_hold_no_checkpoint_are_reported_never_skipped(store: gitstate.Store, repo: Path) -> None:
    from gitstate.verify.checks import verify

    junk, sym = _break_refs(store, repo)
    master = git(repo, "rev-parse", "refs/heads/main")
    report = verify(store)
    found = {p.ref: p.message for p in report.problems}
    assert not report.ok and set(found) == {"refs/agentos/main/runs/r/heads/junk", "refs/agentos/main/runs/r/heads/sym"}
    assert "'garbage'" in found["refs/agentos/main/runs/r/heads/junk"]
    assert "symbolic ref (-> refs/heads/main)" in found["refs/agentos/main/runs/r/heads/sym"]
    with pytest.raises(gitstate.CorruptObjectError, match="heads/junk.*verify --repair"):
        store.get_run("r").branch_list()  # not a list that silently leaves the branch out
    (summary,) = store.list_runs()
    assert summary.status == "corrupt" and "heads/junk" in (summary.error or "")
    repaired = verify(store, repair=True).repaired
    assert sorted(repaired) == ["refs/agentos/main/runs/r/heads/junk", "refs/agentos/main/runs/r/heads/sym"]
    assert not junk.exists() and not sym.exists() and verify(store).ok
    assert git(repo, "rev-parse", "refs/heads/main") == master  # the symbolic ref's target is untouched
    assert [b.name for b in store.get_run("r").branch_list()] == ["main"]
    assert [(s.id, s.status) for s in store.list_runs()] == [("r", "running")]


def test_deleting_a_run_removes_refs_that_hold_no_checkpoint(store: gitstate.Store, repo: Path) -> None:
    junk, sym = _break_refs(store, repo)
    master = git(repo, "rev-parse", "refs/heads/main")
    store.delete_run("r")
    assert not junk.exists() and not sym.exists()
    assert git(repo, "for-each-ref", "refs/agentos/") == ""
    assert git(repo, "rev-parse", "refs/heads/main") == master
    run = store.create_run(run_id="r")  # a new run of that id inherits nothing
    run.checkpoint({"new": 1})
    assert [b.name for b in run.branch_list()] == ["main"]
    only_broken = repo / ".git" / "refs" / "agentos" / "main" / "runs" / "gone" / "heads"
    only_broken.mkdir(parents=True)
    (only_broken / "main").write_text("ref: refs/heads/main\n")
    store.delete_run("gone")  # a run made only of broken refs is still found and removed
    assert not (only_broken / "main").exists()
    with pytest.raises(gitstate.RunNotFound):
        store.delete_run("gone")


def test_a_forks_origin_stays_where_it_was_made(store: gitstate.Store) -> None:
    run = store.create_run(run_id="r")
    cps = [run.checkpoint({"i": i}) for i in range(3)]
    run.fork(cps[2].id, "try-b")
    run.rollback(cps[0].id)  # main now ends behind the fork point
    info = {b.name: b for b in run.branch_list()}["try-b"]
    assert info.origin == f"forked at {cps[2].short_id}" and info.kind == "fork"
    assert info.fork_point == cps[0].id  # the newest checkpoint it still shares with main
