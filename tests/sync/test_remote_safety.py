"""What push and export leave out on purpose: the unsaved-work safety branch (local unless asked
for), and copies of a remote's own lines kept by pull (not failures while the remote has them)."""

from __future__ import annotations

from pathlib import Path

from conftest import git
from remote_helpers import bare, machine

import gitstate
from gitstate.workspace.restore import SAFETY_BRANCH


def _statuses(results: list[gitstate.PushResult]) -> dict[str, str]:
    return {r.ref.split("/runs/", 1)[1]: r.status for res in results for r in res.refs}


def _with_safety(tmp_path: Path) -> tuple[gitstate.Store, Path]:
    url = bare(tmp_path / "server.git").as_uri()
    repo = machine(tmp_path / "A", url)
    store = gitstate.open_store(repo)
    run = store.create_run(run_id="r")
    (repo / "f.txt").write_text("saved\n")
    cp = run.checkpoint({"n": 1}, files=True)
    (repo / "f.txt").write_text("secret, never checkpointed\n")
    assert run.restore(cp, force=True).safety is not None
    assert SAFETY_BRANCH in run.branches()
    return store, tmp_path / "server.git"


def test_push_keeps_the_safety_branch_local(tmp_path: Path) -> None:
    store, server = _with_safety(tmp_path)
    results = gitstate.push(store)
    statuses = _statuses(results)
    assert statuses["r/heads/restore-safety"] == "local" and statuses["r/heads/main"] == "pushed"
    assert all(r.ok for r in results)
    remote = git(server, "for-each-ref", "--format=%(refname)")
    assert "heads/main" in remote and SAFETY_BRANCH not in remote
    assert _statuses(gitstate.push(store))["r/heads/restore-safety"] == "local"  # every time
    assert _statuses(gitstate.push(store, include_safety=True))["r/heads/restore-safety"] == "pushed"
    assert SAFETY_BRANCH in git(server, "for-each-ref", "--format=%(refname)")


def test_export_leaves_the_safety_branch_out(tmp_path: Path) -> None:
    store, _server = _with_safety(tmp_path)
    bundle = tmp_path / "r.bundle"
    refs = gitstate.export_bundle(store, ["r"], bundle)
    assert refs.left_out == ["refs/agentos/main/runs/r/heads/restore-safety"]
    assert not any(SAFETY_BRANCH in r for r in refs)
    listed = git(tmp_path, "bundle", "list-heads", str(bundle))
    assert "heads/main" in listed and SAFETY_BRANCH not in listed
    every = gitstate.export_bundle(store, ["r"], bundle, include_safety=True)
    assert every.left_out == [] and any(SAFETY_BRANCH in r for r in every)
    assert SAFETY_BRANCH in git(tmp_path, "bundle", "list-heads", str(bundle))


def test_kept_copy_fails_only_when_the_remote_dropped_its_line(tmp_path: Path) -> None:
    url = bare(tmp_path / "server.git").as_uri()
    a = gitstate.open_store(machine(tmp_path / "A", url))
    b = gitstate.open_store(machine(tmp_path / "B", url))
    run_a = a.create_run(run_id="r")
    run_a.checkpoint({"x": 0})
    gitstate.push(a)
    gitstate.pull(b)
    run_b = b.get_run("r")
    run_a.checkpoint({"x": "a"})
    mine = run_b.checkpoint({"x": "b"})
    gitstate.push(a)
    gitstate.pull(b)  # diverged: origin's line kept as main@origin
    theirs = run_b.head("main@origin")
    assert theirs is not None
    # B reconciles: its own line on a branch of its own, main back on origin's line
    run_b.fork(mine.id, "mine")
    run_b.rollback(theirs.id)
    results = gitstate.push(b)
    statuses = _statuses(results)
    assert statuses["r/heads/main@origin"] == "kept" and statuses["r/heads/mine"] == "pushed"
    assert all(r.ok for r in results)  # the kept copy alone no longer fails every push
    # origin moves on (a checkpoint B has not fetched): the copy is still on origin's line
    run_a.checkpoint({"x": "a2"})
    gitstate.pull(a)
    gitstate.push(a)
    assert _statuses(gitstate.push(b))["r/heads/main@origin"] == "kept"
    # origin drops that line altogether, and B's branches no longer carry it either: now the copy
    # holds the only one; say so, and fail (judged after the push: B's main, were it still on the
    # copy's line, would have put the checkpoints back on origin)
    git(tmp_path / "server.git", "update-ref", "-d", "refs/agentos/main/runs/r/heads/main")
    git(tmp_path / "server.git", "update-ref", "-d", "refs/agentos/main/runs/r/heads/mine")
    run_b.rollback(list(run_b.history())[-1].id)  # main back to the first checkpoint, before both lines
    dropped = [r for res in gitstate.push(b) for r in res.refs if r.ref.endswith("main@origin")]
    assert dropped[0].status == "skipped" and not dropped[0].ok and "does not have" in dropped[0].message
