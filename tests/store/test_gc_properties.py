"""Property (hypothesis) of gc over generated histories: runs with forks, rollbacks, node blocks
and node steps, finished or not, and a LangGraph thread with pending writes; gc applies a
generated policy (keep-last, older-than, statuses, with or without the grace period). Afterwards
every checkpoint the policy keeps reads as before (state, metadata, step), its parent line is the
one it had (cut where the policy cut it), its node boundaries are the ones it had, the LangGraph
thread's latest checkpoint and its pending writes read as before, and ``git fsck --strict`` is
clean.

Few examples, no deadline (the machine is shared); failing examples are kept in hypothesis's
database and tried first next time."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import make_repo
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gitstate
from gitstate.store import retention as R

EXAMPLES = 12


def fsck(repo: Path) -> None:
    done = subprocess.run(["git", "-C", str(repo), "fsck", "--strict", "--no-dangling"], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def build_run(store: gitstate.Store, run_id: str, data: st.DataObject) -> None:
    """A run from generated operations: node steps, node blocks, forks, rollbacks, finished or not."""
    run = store.create_run(workflow="prop", run_id=run_id)
    items: list[str] = []
    ops = data.draw(st.lists(st.sampled_from(["step", "plain", "block", "fork", "rollback", "alt"]),
                             min_size=2, max_size=9), label=f"{run_id} ops")
    for n, op in enumerate(ops):
        items.append(f"{run_id} item {n} " + "z" * 40)
        state = {"items": list(items), "n": n}
        if op == "step":
            run.checkpoint(state, node=data.draw(st.sampled_from(["plan", "act"]), label="node"))
        elif op == "plain":
            run.checkpoint(state)
        elif op == "block":
            with run.node(data.draw(st.sampled_from(["plan", "act"]), label="block")) as scope:
                scope.checkpoint(state)
                if data.draw(st.booleans(), label="second"):
                    scope.checkpoint({**state, "again": True})
        elif op in ("fork", "rollback"):
            line = list(run.history("main"))
            if len(line) < 2:
                run.checkpoint(state)
                continue
            target = line[data.draw(st.integers(1, len(line) - 1), label="back")].id
            if op == "fork" and "side" not in run.branches():
                run.fork(target, "side")
            else:
                run.rollback(target)
        elif op == "alt" and "side" in run.branches():
            run.checkpoint(state, branch="side", node="act")
    status = data.draw(st.sampled_from(["completed", "failed", None]), label=f"{run_id} status")
    run.checkpoint({"items": list(items), "end": True}, node="end", status=status)


def langgraph_thread(store: gitstate.Store, data: st.DataObject) -> tuple[Any, Any]:
    """A LangGraph thread of a few checkpoints whose latest has pending writes."""
    pytest.importorskip("langgraph")
    from langgraph.checkpoint.base import empty_checkpoint

    from gitstate.langgraph import GitCheckpointSaver

    saver = GitCheckpointSaver(store)
    config: Any = {"configurable": {"thread_id": "thread", "checkpoint_ns": ""}}
    for n in range(data.draw(st.integers(2, 6), label="lg checkpoints")):
        cp = empty_checkpoint()
        cp["channel_values"] = {"n": n, "log": [f"entry {i}" for i in range(n)]}
        cp["channel_versions"] = {"n": str(n + 1), "log": str(n + 1)}
        config = saver.put(config, cp, {"source": "loop", "step": n, "parents": {}}, {"n": str(n + 1), "log": str(n + 1)})
    saver.put_writes(config, [("n", 99), ("log", ["late"])], "task-1", "path-1")
    return saver, config


def snapshot(store: gitstate.Store) -> dict[str, dict[str, Any]]:
    """Per run and branch: the line, newest first, as (id, state, metadata, step, node, status),
    and the node boundaries."""
    out: dict[str, dict[str, Any]] = {}
    for s in store.list_runs():
        run = store.get_run(s.id)
        out[s.id] = {b: ([(cp.id, cp.state, cp.metadata, cp.step, cp.node, cp.status, cp.parent_ids)
                          for cp in run.history(b)], run.nodes(b)) for b in run.branches()}
    return out


def lg_view(saver: Any, config: Any) -> Any:
    found = saver.get_tuple({"configurable": {"thread_id": "thread", "checkpoint_ns": ""}})
    return found.checkpoint["channel_values"], found.checkpoint["id"], found.metadata, found.pending_writes


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                       HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_gc_keeps_every_kept_checkpoint_whole(tmp_path_factory: pytest.TempPathFactory, data: st.DataObject) -> None:
    repo = make_repo(tmp_path_factory.mktemp("gcprop") / "repo")
    store = gitstate.open_store(repo, pack_in_background=False)
    for i in range(data.draw(st.integers(1, 3), label="runs")):
        build_run(store, f"run{i}", data)
    saver, config = langgraph_thread(store, data) if data.draw(st.booleans(), label="langgraph") else (None, None)
    if data.draw(st.booleans(), label="pack"):
        store.pack()
    before = snapshot(store)
    lg_before = lg_view(saver, config) if saver else None
    policy = R.Policy(
        keep_last=data.draw(st.integers(1, 4), label="keep_last"),
        older_than=R.parse_cutoff("0s") if data.draw(st.integers(0, 3), label="older_than") == 0 else None,
        statuses=R.FINISHED | frozenset(data.draw(st.lists(st.sampled_from(sorted(R.STATUSES)), unique=True),
                                                  label="statuses")))
    now = data.draw(st.booleans(), label="now")
    plan = R.plan(store, policy, now=now)
    result = R.apply(store, plan, now=now)
    assert result.failed == []
    gone = {r.run for r in plan.runs}
    cut = {(p.run, p.branch): p.keep for p in plan.prunes}
    store = gitstate.open_store(repo)
    after = snapshot(store)
    assert set(after) == set(before) - gone
    for run_id, branches in after.items():
        assert set(branches) == set(before[run_id])
        for branch, (line, bounds) in branches.items():
            old_line, old_bounds = before[run_id][branch]
            keep = cut.get((run_id, branch))
            if keep is None:  # untouched: the same ids
                assert (line, bounds) == (old_line, old_bounds)
                continue
            assert len(line) == keep
            new_id = {old[0]: new[0] for old, new in zip(old_line, line, strict=False)}
            for new, old in zip(line, old_line, strict=False):
                assert new[1:6] == old[1:6]  # state, metadata, step, node, status
            for i, new in enumerate(line):  # the parent line, cut where the policy cut it
                assert new[6] == ((line[i + 1][0],) if i + 1 < keep else ())
            expected = [type(b)(b.node, new_id.get(b.entry or "", b.entry), new_id.get(b.exit or "", b.exit), b.status)
                        for b in old_bounds if (b.exit if b.status != "running" else b.entry) in new_id]
            assert bounds == expected
    if saver is not None and "thread" not in gone:
        from gitstate.langgraph import GitCheckpointSaver

        assert lg_view(GitCheckpointSaver(store), config) == lg_before
    fsck(repo)
