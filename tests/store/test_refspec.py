"""REF / TARGET resolution (gitstate.refspec), including run ids holding the syntax's characters."""

from __future__ import annotations

import hashlib
import os
import subprocess

import pytest

import gitstate
from gitstate.store import refspec


def _run(store: gitstate.Store, run_id: str, n: int = 3, branch: str = "main") -> list[gitstate.Checkpoint]:
    run = store.open_run(run_id)
    return [run.checkpoint({"i": i, "run": run_id}, branch=branch) for i in range(n)]


def test_plain_forms(store: gitstate.Store) -> None:
    cps = _run(store, "r1")
    run = store.get_run("r1")
    assert refspec.resolve(store, "r1").id == cps[-1].id
    assert refspec.resolve(store, "r1~0").id == cps[-1].id
    assert refspec.resolve(store, "r1~2").id == cps[0].id
    assert refspec.resolve(store, cps[1].id).id == cps[1].id
    assert refspec.resolve(store, cps[1].id[:10]).id == cps[1].id
    run.fork(cps[0].id, "alt")
    alt = run.checkpoint({"alt": True}, branch="alt")
    assert refspec.resolve(store, "r1@alt").id == alt.id
    assert refspec.resolve(store, "r1@alt~1").id == cps[0].id


def test_node_forms(store: gitstate.Store) -> None:
    run = store.create_run(run_id="r")
    run.checkpoint({"x": 1})
    with run.node("plan") as scope:
        scope.checkpoint({"x": 2})
    run.checkpoint({"x": 3})
    assert scope.exit is not None
    assert refspec.resolve(store, "r:node:plan").id == scope.exit.id
    assert refspec.resolve_target(store, run, "node:plan").id == scope.exit.id
    run.fork(scope.exit.id, "b")
    assert refspec.resolve(store, "r@b:node:plan").id == scope.exit.id
    with pytest.raises(gitstate.InvalidReferenceError):
        refspec.resolve(store, "r:node:nope")


def test_exact_run_id_wins_over_syntax(store: gitstate.Store) -> None:
    weird = _run(store, "a@b~1")  # a run id that looks like RUN@BRANCH~N
    plain = _run(store, "a", 2)
    assert refspec.resolve(store, "a@b~1").id == weird[-1].id
    assert refspec.resolve(store, "a@b~1~2").id == weird[0].id
    assert refspec.resolve(store, "a~1").id == plain[0].id


def test_longest_run_id_wins(store: gitstate.Store) -> None:
    short = store.open_run("x")
    short.checkpoint({"s": 1})
    short_other = short.checkpoint({"s": 2}, branch="y@z")
    assert refspec.resolve(store, "x@y@z").id == short_other.id  # only run "x" exists
    long_run = _run(store, "x@y", 1)
    long_run_z = store.get_run("x@y").checkpoint({"z": 1}, branch="z")
    assert refspec.resolve(store, "x@y@z").id == long_run_z.id  # run "x@y" now exists: it wins
    assert long_run


def test_colons_in_run_ids(store: gitstate.Store) -> None:
    run = store.create_run(run_id="thread:42")
    run.checkpoint({})
    with run.node("n:1") as scope:
        pass
    assert scope.exit is not None
    assert refspec.resolve(store, "thread:42:node:n:1").id == scope.exit.id


def test_hex_looking_run_id_wins_over_prefix(store: gitstate.Store) -> None:
    cps = _run(store, "deadbeef", 2)
    assert refspec.resolve(store, "deadbeef").id == cps[-1].id


def test_errors(store: gitstate.Store) -> None:
    _run(store, "r1", 4)
    with pytest.raises(gitstate.RunNotFound):
        refspec.resolve(store, "nope~1")
    with pytest.raises(gitstate.RunNotFound):
        refspec.resolve(store, "nope@main")
    with pytest.raises(gitstate.InvalidReferenceError):
        refspec.resolve(store, "no such thing")
    with pytest.raises(gitstate.InvalidReferenceError):
        refspec.resolve(store, "r1~9")
    with pytest.raises(gitstate.InvalidReferenceError):
        refspec.resolve(store, "")
    with pytest.raises(gitstate.CheckpointNotFound):
        refspec.resolve(store, "0000000000")
    with pytest.raises(gitstate.BranchNotFound):
        refspec.resolve(store, "r1@nobranch")
    for malformed in ("r1@", "r1:node:"):
        with pytest.raises(gitstate.InvalidReferenceError) as info:
            refspec.resolve(store, malformed)
        assert not isinstance(info.value, gitstate.CheckpointNotFound)
    with pytest.raises(gitstate.BranchNotFound):  # branch names may hold ':node:' too
        refspec.resolve(store, "r1@:node:x")


def make_colliding_blob(store: gitstate.Store, oid: str, digits: int = 4) -> str:
    """Write a blob whose id shares ``oid``'s first ``digits`` hex digits (found by hashing)."""
    i = 0
    while True:
        data = f"collide {i}".encode()
        if hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()[:digits] == oid[:digits]:
            return str(store.repo.create_blob(data))
        i += 1


def colliding_checkpoints(store: gitstate.Store, run_id: str = "amb") -> tuple[gitstate.Checkpoint, gitstate.Checkpoint]:
    """Two checkpoints of ``run_id`` whose ids share their first 4 hex digits (written until two do)."""
    run = store.open_run(run_id)
    seen: dict[str, gitstate.Checkpoint] = {}
    while True:
        cp = run.checkpoint({"i": len(seen)})
        if cp.id[:4] in seen:
            return seen[cp.id[:4]], cp
        seen[cp.id[:4]] = cp


def test_ambiguous_prefix(store: gitstate.Store) -> None:
    """A prefix shared by one checkpoint and other objects names the checkpoint (as ``git log``
    takes the one commit); one shared by two checkpoints is ambiguous."""
    cps = _run(store, "amb", 1)
    make_colliding_blob(store, cps[0].id)
    assert refspec.resolve(store, cps[0].id[:4]).id == cps[0].id
    assert refspec.resolve(store, cps[0].id[:12]).id == cps[0].id
    first, second = colliding_checkpoints(store, "two")
    with pytest.raises(gitstate.AmbiguousReferenceError):
        refspec.resolve(store, second.id[:4])
    assert refspec.resolve(store, second.id[:12]).id == second.id


def test_targets_relative_to_run(store: gitstate.Store) -> None:
    cps = _run(store, "r", 3)
    other = _run(store, "s", 1)
    run = store.get_run("r")
    assert refspec.resolve_target(store, run, "~1").id == cps[1].id
    assert refspec.resolve_target(store, run, cps[0].id[:8]).id == cps[0].id
    assert refspec.resolve_target(store, run, "r~2").id == cps[0].id
    run.fork(cps[0].id, "b")
    assert refspec.resolve_target(store, run, "@b").id == cps[0].id
    assert refspec.resolve_target(store, run, "~0", branch="b").id == cps[0].id
    with pytest.raises(gitstate.CheckpointNotFound):
        refspec.resolve_target(store, run, other[0].id)
    with pytest.raises(gitstate.CheckpointNotFound):
        refspec.resolve_target(store, run, "s")
    with pytest.raises(gitstate.InvalidReferenceError):
        refspec.resolve_target(store, run, "~x")


def test_branch_names_with_tilde_and_at(store: gitstate.Store) -> None:
    cps = _run(store, "r", 3)
    run = store.get_run("r")
    fork = "main~1ef4f797-8335-6428-8001-8a1503f9b875"  # a LangGraph fork branch
    run.fork(cps[0].id, fork)
    lg = run.checkpoint({"lg": 1}, branch=fork)
    kept = run.fork(cps[1].id, "main@origin")
    assert refspec.resolve(store, f"r@{fork}").id == lg.id
    assert refspec.resolve(store, f"r@{fork}~1").id == cps[0].id
    assert refspec.resolve(store, "r@main@origin").id == kept.id
    assert refspec.resolve(store, "r@main@origin~1").id == cps[0].id
    assert refspec.resolve_target(store, run, f"@{fork}").id == lg.id
    assert refspec.resolve_target(store, run, f"@{fork}~1").id == cps[0].id
    assert refspec.resolve_target(store, run, "@main@origin").id == kept.id
    # an existing branch named like BRANCH~N is read literally; ~0 reaches the other reading
    run.fork(cps[0].id, "main~2")
    assert refspec.resolve(store, "r@main~2").id == cps[0].id
    assert refspec.resolve(store, "r@main~1").id == cps[1].id  # no branch 'main~1': one back from main
    run.checkpoint({"x": 1}, branch="main~2")
    tip2 = run.head("main~2")
    assert tip2 is not None and refspec.resolve(store, "r@main~2").id == tip2.id
    assert refspec.resolve(store, "r@main~2~0").id == tip2.id
    assert refspec.resolve_target(store, run, "@main~2").id == tip2.id


def test_id_with_steps_back(store: gitstate.Store) -> None:
    cps = _run(store, "r", 3)
    assert refspec.resolve(store, cps[2].id[:10] + "~2").id == cps[0].id
    with pytest.raises(gitstate.InvalidReferenceError):
        refspec.resolve(store, cps[2].id[:10] + "~3")


def test_locate_and_locate_branch(store: gitstate.Store) -> None:
    cps = _run(store, "r", 3)
    run = store.get_run("r")
    run.fork(cps[0].id, "alt@x")
    loc = refspec.locate(store, "r@alt@x")
    assert (loc.run, loc.branch, loc.named_branch, loc.is_branch) == ("r", "alt@x", True, True)
    loc = refspec.locate(store, "r~1")
    assert (loc.branch, loc.is_branch, loc.checkpoint.id) == ("main", False, cps[1].id)  # type: ignore[union-attr]
    loc = refspec.locate(store, "r~0", branch="alt@x")
    assert (loc.branch, loc.named_branch, loc.checkpoint.id) == ("alt@x", False, cps[0].id)  # type: ignore[union-attr]
    loc = refspec.locate(store, cps[1].id[:8])
    assert (loc.run, loc.branch, loc.is_branch) == ("r", "main", False)
    assert refspec.locate_branch(store, "r@alt@x").branch == "alt@x"
    assert refspec.locate_branch(store, "r", "alt@x").branch == "alt@x"
    with pytest.raises(gitstate.InvalidReferenceError) as info:
        refspec.locate_branch(store, "r~1")
    assert "RUN@BRANCH" in str(info.value)
    with pytest.raises(gitstate.RunNotFound):
        refspec.locate_branch(store, "nope")
    with pytest.raises(gitstate.BranchNotFound):
        refspec.locate_branch(store, "r@nope")
    new = refspec.locate_branch(store, "r@new", create=True)
    assert (new.run, new.branch, new.checkpoint) == ("r", "new", None)
    fresh = refspec.locate_branch(store, "fresh@run", create=True)
    assert (fresh.run, fresh.branch) == ("fresh@run", "main")


def test_ambiguous_prefix_lists_candidates(store: gitstate.Store) -> None:
    first, second = colliding_checkpoints(store)
    blob = make_colliding_blob(store, first.id)
    with pytest.raises(gitstate.AmbiguousReferenceError) as info:
        refspec.resolve(store, first.id[:4])
    found = dict(info.value.candidates)
    # Every object with the prefix is a candidate: the two commits, the blob, and any tree or
    # state blob the checkpoints wrote that happens to share it (git lists them all too).
    prefix = first.id[:4]
    store.wait_for_housekeeping()  # pack merges under way change the pack list being read
    listed = subprocess.run(["git", "cat-file", "--batch-all-objects", "--batch-check=%(objectname)"],
                            cwd=store.path, capture_output=True, text=True, check=True,
                            env={**os.environ, "LC_ALL": "C"}).stdout.split()
    assert set(found) == {oid for oid in listed if oid.startswith(prefix)}
    assert {first.id, second.id, blob} <= set(found)
    assert found[blob] == "blob" and "run 'amb'" in found[first.id] and "run 'amb'" in found[second.id]
    assert first.id[:12] in str(info.value) and blob[:12] in str(info.value)
