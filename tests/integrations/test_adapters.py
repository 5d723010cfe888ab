"""The workflow state adapter scenarios on GitStateAdapter: sessions, snapshots, node rollback to a
node's exit checkpoint, tool-level rollback to any checkpoint, branches keeping their lineage,
cleanup keeping the newest N, node boundaries and workspace snapshot links."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import git

import gitstate
from gitstate.adapters.workflow import ExecutionState, GitStateAdapter


def _adapter(repo: Path) -> GitStateAdapter:
    return GitStateAdapter(gitstate.open_store(repo))


def _run_node(adapter: GitStateAdapter, state: ExecutionState, node: str, tools: int) -> tuple[ExecutionState, list[str]]:
    """Execute one node with ``tools`` tool calls, a snapshot after each; returns state and ids."""
    ids = []
    with adapter.node(node):
        for t in range(tools):
            state = state.clone()
            state.current_node_id = node
            state.workflow_variables[f"{node}.tool{t}"] = t
            ids.append(adapter.save_snapshot(state, name=f"{node}/tool{t}"))
        state = state.clone()
        state.execution_path.append(node)
        state.node_results[node] = f"{node} done"
        ids.append(adapter.save_snapshot(state, name=f"{node}/result"))
    return state, ids


def test_session_snapshots_and_load(repo: Path) -> None:
    adapter = _adapter(repo)
    initial = ExecutionState("start", {"input": "/data"}, ["start"], {})
    session = adapter.initialize_session("exec-1", initial)
    assert session == "exec-1" == adapter.session_id
    state = initial.clone()
    state.current_node_id = "load"
    state.workflow_variables["rows"] = 10
    sid = adapter.save_snapshot(state, name="after load", metadata={"tool_track_position": 1})
    assert adapter.load_snapshot(sid) == state
    snaps = adapter.get_snapshots(session)
    assert [s["name"] for s in snaps] == ["initial", "after load"]
    assert snaps[1]["node_id"] == "load" and snaps[1]["parent_id"] == snaps[0]["id"]
    assert gitstate.open_store(repo).get_run("exec-1").workflow == "wtb"


def test_node_rollback_goes_to_the_node_exit_checkpoint(repo: Path) -> None:
    adapter = _adapter(repo)
    state = ExecutionState("start")
    adapter.initialize_session("exec-2", state)
    state, _ = _run_node(adapter, state, "load", 2)
    after_load = state.clone()
    state, _ = _run_node(adapter, state, "transform", 3)
    bounds = adapter.node_boundaries()
    assert [(b.node, b.status) for b in bounds] == [("load", "completed"), ("transform", "completed")]
    load = bounds[0]
    assert load.entry and load.exit
    restored = adapter.rollback(load.exit)
    assert restored == after_load
    assert adapter.rollback("node:load") == after_load  # same target by node name
    assert [b.node for b in adapter.node_boundaries()] == ["load"]
    # execution continues from the restored state on the same session
    state, _ = _run_node(adapter, restored, "transform", 1)
    assert adapter.load_snapshot(adapter.get_snapshots("exec-2")[-1]["id"]).execution_path == ["load", "transform"]


def test_failed_node_boundary(repo: Path) -> None:
    adapter = _adapter(repo)
    adapter.initialize_session("exec-3", ExecutionState("start"))
    with pytest.raises(RuntimeError), adapter.node("flaky"):
        raise RuntimeError("tool crashed")
    (bound,) = adapter.node_boundaries()
    assert bound.node == "flaky" and bound.status == "failed"


def test_tool_level_rollback_to_any_checkpoint(repo: Path) -> None:
    adapter = _adapter(repo)
    state = ExecutionState("start")
    adapter.initialize_session("exec-4", state)
    _, ids = _run_node(adapter, state, "agent", 4)
    target = ids[1]  # after the second tool call, mid-node
    expected = adapter.load_snapshot(target)
    assert adapter.rollback(target) == expected
    assert adapter.get_snapshots("exec-4")[-1]["id"] == target
    assert set(expected.workflow_variables) == {"agent.tool0", "agent.tool1"}
    # the abandoned checkpoints are recoverable: undo the rollback
    run = gitstate.open_store(repo).get_run("exec-4")
    restored = run.undo()
    assert restored is not None and restored.id == ids[-1] and restored.node == "agent"


def test_branching_preserves_lineage(repo: Path) -> None:
    adapter = _adapter(repo)
    state = ExecutionState("start", {"lr": 0.1})
    main = adapter.initialize_session("exec-5", state)
    state, ids = _run_node(adapter, state, "train", 1)
    fork_point = ids[-1]
    state, _ = _run_node(adapter, state, "eval", 1)
    branch = adapter.create_branch(fork_point)
    assert branch == "exec-5#branch-1" and adapter.session_id == branch
    variant = adapter.load_snapshot(fork_point)
    variant.workflow_variables["lr"] = 0.01
    adapter.save_snapshot(variant, name="variant")
    main_ids = [s["id"] for s in adapter.get_snapshots(main)]
    branch_ids = [s["id"] for s in adapter.get_snapshots(branch)]
    cut = main_ids.index(fork_point) + 1
    assert branch_ids[:cut] == main_ids[:cut]  # shared lineage up to the fork point
    assert adapter.load_snapshot(branch_ids[-1]).workflow_variables["lr"] == 0.01
    assert adapter.load_snapshot(main_ids[-1]).workflow_variables["lr"] == 0.1
    assert adapter.create_branch(fork_point) == "exec-5#branch-2"


def test_cleanup_keeps_newest(repo: Path) -> None:
    adapter = _adapter(repo)
    state = ExecutionState("start")
    session = adapter.initialize_session("exec-6", state)
    for i in range(9):
        state = state.clone()
        state.workflow_variables["i"] = i
        adapter.save_snapshot(state, name=f"s{i}")
    removed = adapter.cleanup(session, keep_latest=3)
    assert removed == 7
    snaps = adapter.get_snapshots(session)
    assert [s["name"] for s in snaps] == ["s6", "s7", "s8"]
    assert adapter.load_snapshot(snaps[-1]["id"]).workflow_variables["i"] == 8
    assert adapter.cleanup(session, keep_latest=5) == 0


def test_checkpoint_files_link(repo: Path) -> None:
    adapter = _adapter(repo)
    adapter.initialize_session("exec-7", ExecutionState("start"))
    tree = git(repo, "rev-parse", "HEAD^{tree}").strip()  # the user's committed workspace
    with_files = adapter.save_snapshot(ExecutionState("write"), name="wrote files", files_tree=tree)
    without = adapter.save_snapshot(ExecutionState("next"))
    assert adapter.checkpoint_files(with_files) == tree
    assert adapter.checkpoint_files(without) is None
    with pytest.raises(gitstate.GitStateError):
        adapter.save_snapshot(ExecutionState("bad"), files_tree="0" * 40)


def test_usage_errors(repo: Path) -> None:
    adapter = _adapter(repo)
    with pytest.raises(gitstate.UsageError):
        adapter.save_snapshot(ExecutionState())
    with pytest.raises(gitstate.RunNotFound):
        adapter.get_snapshots("missing")


@pytest.mark.parametrize("execution_id", ["exec#1", "a#b#c", "team/exec 1", "run #ünï cödé ✓", "#", "x#"])
def test_session_ids_with_any_characters(repo: Path, execution_id: str) -> None:
    adapter = _adapter(repo)
    state = ExecutionState("start")
    sid = adapter.initialize_session(execution_id, state)
    assert sid == execution_id
    for i in range(3):
        state = state.clone()
        state.workflow_variables["i"] = i
        adapter.save_snapshot(state, name=f"s{i}")
    assert [s["name"] for s in adapter.get_snapshots(sid)] == ["initial", "s0", "s1", "s2"]
    first = adapter.get_snapshots(sid)[1]["id"]
    branch = adapter.create_branch(first)
    assert branch == f"{execution_id}#branch-1"
    adapter.save_snapshot(state, name="on-branch")
    assert [s["name"] for s in adapter.get_snapshots(branch)] == ["initial", "s0", "on-branch"]
    assert adapter.cleanup(branch, 1) == 2
    assert adapter.cleanup(sid, 1) == 3
    assert [s["name"] for s in adapter.get_snapshots(sid)] == ["s2"]
    assert [s["name"] for s in adapter.get_snapshots(branch)] == ["on-branch"]


def test_session_id_that_is_also_a_run_id(repo: Path) -> None:
    """Run ``x`` and run ``x#branch-1``: the exact run id wins, and create_branch on ``x`` skips
    ``branch-1`` so its session id cannot be confused with the other run."""
    adapter = _adapter(repo)
    other = adapter.initialize_session("x#branch-1", ExecutionState("other"))
    adapter.save_snapshot(ExecutionState("other-2"), name="other")
    sid = adapter.initialize_session("x", ExecutionState("start"))
    snap = adapter.save_snapshot(ExecutionState("mine"), name="mine")
    branch = adapter.create_branch(snap)
    assert branch == "x#branch-2"
    assert [s["name"] for s in adapter.get_snapshots(other)] == ["initial", "other"]
    assert [s["name"] for s in adapter.get_snapshots(branch)] == ["initial", "mine"]
    assert [s["name"] for s in adapter.get_snapshots(sid)] == ["initial", "mine"]
    with pytest.raises(gitstate.RunNotFound):
        adapter.get_snapshots("nope#branch-1")
