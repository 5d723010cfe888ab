"""Runs, checkpoints, branches, rollback, undo, node boundaries and prune through the public API,
checked against real git where it matters."""

from __future__ import annotations

from pathlib import Path

import pytest

import gitstate
from tests.conftest import git, user_snapshot


def test_new_run_is_written_with_its_first_checkpoint(store: gitstate.Store, repo: Path) -> None:
    """A run from new_run exists once its first checkpoint is written, in the same transaction: a
    first checkpoint that fails leaves nothing, and one created meanwhile is RunExistsError."""
    run = store.new_run(workflow="w", run_id="lazy")
    assert not run.saved and not store.has_run("lazy")
    with pytest.raises(gitstate.GitStateError):
        run.checkpoint({"bad": object()})
    assert not store.has_run("lazy") and git(repo, "for-each-ref", "refs/agentos/") == ""
    first = run.checkpoint({"n": 1})
    assert run.saved and store.get_run("lazy").workflow == "w"
    assert run.checkpoint({"n": 2}).parent_ids == (first.id,)
    assert len(git(repo, "for-each-ref", "refs/agentos/").splitlines()) == 2  # the record and main
    late = store.new_run(run_id="lazy")
    with pytest.raises(gitstate.RunExistsError):
        late.checkpoint({"n": 3})
    assert [c.state["n"] for c in store.get_run("lazy").history()] == [2, 1]


def test_create_get_list_delete(store: gitstate.Store) -> None:
    run = store.create_run(workflow="issue-workflow", run_id="issue-78")
    assert store.get_run("issue-78").workflow == "issue-workflow"
    with pytest.raises(gitstate.RunExistsError):
        store.create_run(run_id="issue-78")
    generated = store.create_run(workflow="w")
    assert generated.id != "issue-78" and len(generated.id) > 10
    run.checkpoint({"step": "plan"}, node="plan")
    ids = [s.id for s in store.list_runs()]
    assert ids[0] == "issue-78"  # most recently updated first
    assert set(ids) == {"issue-78", generated.id}
    latest = store.latest_run()
    assert latest is not None and latest.id == "issue-78"
    store.delete_run("issue-78")
    with pytest.raises(gitstate.RunNotFound):
        store.get_run("issue-78")
    with pytest.raises(gitstate.RunNotFound):
        store.delete_run("issue-78")
    assert [s.id for s in store.list_runs()] == [generated.id]


def test_empty_store(store: gitstate.Store) -> None:
    assert store.list_runs() == []
    assert store.latest_run() is None
    with pytest.raises(gitstate.RunNotFound):
        store.get_run("nope")


@pytest.mark.parametrize("run_id", ["a/b", "a b", "ünïcødé ✓", "..", ".lock", "x.lock", "@{1}", "a//b/", "~^:?*[\\",
                                    "-", "a" * 60, "line\nbreak", "%41"])
def test_ids_round_trip(store: gitstate.Store, repo: Path, run_id: str) -> None:
    run = store.create_run(workflow="w", run_id=run_id)
    run.checkpoint({"k": 1}, branch=run_id)
    again = store.get_run(run_id)
    assert again.id == run_id
    assert list(again.branches()) == [run_id]
    assert [s.id for s in store.list_runs()] == [run_id]
    git(repo, "fsck", "--strict")


def test_nested_ids_do_not_conflict(store: gitstate.Store) -> None:
    store.create_run(run_id="a/b").checkpoint({"x": 1})
    store.create_run(run_id="a/b/c").checkpoint({"x": 2})
    store.create_run(run_id="a").checkpoint({"x": 3})
    assert sorted(s.id for s in store.list_runs()) == ["a", "a/b", "a/b/c"]


def test_invalid_names(store: gitstate.Store) -> None:
    with pytest.raises(gitstate.InvalidNameError):
        store.create_run(run_id="")
    with pytest.raises(gitstate.InvalidNameError):
        store.create_run(run_id="x" * 300)
    run = store.create_run(run_id="ok")
    with pytest.raises(gitstate.InvalidNameError):
        run.checkpoint({}, branch="")


def test_checkpoint_fields_and_state(store: gitstate.Store) -> None:
    run = store.create_run(workflow="wf", run_id="r")
    assert run.head() is None
    state = {"step": "plan", "vars": {"a": [1, 2.5, None, True], "b": b"\x00bytes"}, "n": 10**30}
    meta = {f"k{i}": i for i in range(120)}
    cp0 = run.checkpoint(state, node="plan", trigger="tool_end", metadata=meta)
    cp1 = run.checkpoint({"step": "exec"}, node="exec", trigger="tool_end", status="completed")
    assert (cp0.step, cp1.step) == (0, 1)
    assert cp1.parent_ids == (cp0.id,)
    loaded = run.load(cp0.id)
    assert loaded.state == state
    assert loaded.metadata == meta
    assert (loaded.node, loaded.trigger, loaded.run_id, loaded.branch) == ("plan", "tool_end", "r", "main")
    assert loaded.created_at.tzinfo is not None
    head = run.head()
    assert head is not None and head.id == cp1.id and head.status == "completed"
    assert [c.id for c in run.history()] == [cp1.id, cp0.id]
    # every access returns a fresh copy: mutating it changes nothing stored
    copy = loaded.state
    copy["vars"]["a"].append(99)
    assert run.load(cp0.id).state == state


def test_numeric_types_are_exact(store: gitstate.Store) -> None:
    run = store.create_run(run_id="types")
    a = run.checkpoint({"v": [1] * 40})
    b = run.checkpoint({"v": [1.0] * 40})
    c = run.checkpoint({"v": [True] * 40})
    assert type(run.load(a.id).state["v"][0]) is int
    assert type(run.load(b.id).state["v"][0]) is float
    assert type(run.load(c.id).state["v"][0]) is bool


def test_tools_and_audit(store: gitstate.Store) -> None:
    run = store.create_run(run_id="t")
    tools = [{"tool": "grep", "args": {"q": "x"}, "result": "3 hits", "duration_ms": 4}]
    audit = [{"event_type": "TOOL_SUCCESS", "severity": "info", "message": "grep ok"}]
    cp = run.checkpoint({"s": 1}, tools=tools, audit=audit)
    again = run.load(cp.id)
    assert again.tools == tools and again.audit == audit
    assert run.checkpoint({"s": 2}).tools == []


def test_same_state_same_ids(store: gitstate.Store) -> None:
    run = store.create_run(run_id="dedup")
    a = run.checkpoint({"b": 2, "a": 1, "msgs": list(range(100))})
    b = run.checkpoint({"b": 2, "a": 1, "msgs": list(range(100))})
    assert a.id != b.id
    assert run.load(a.id).state_id == run.load(b.id).state_id
    # the same keys in another order: another state (its key order), every value shared
    c = run.checkpoint({"a": 1, "msgs": list(range(100)), "b": 2})
    assert run.load(c.id).state_id != a.state_id and list(c.state) == ["a", "msgs", "b"]
    entries = {e.name: e.id for e in store.core.reader.tree(a.state_id or "")}
    others = {e.name: e.id for e in store.core.reader.tree(c.state_id or "")}
    assert entries.pop(".order.cbor") != others.pop(".order.cbor") and entries == others


def test_load_references(store: gitstate.Store) -> None:
    run = store.create_run(run_id="refs")
    with run.node("plan"):
        run.checkpoint({"x": 1}, node="plan")
    exit_id = run.head().id  # type: ignore[union-attr]
    run.checkpoint({"x": 2})
    assert run.load("node:plan").id == exit_id
    assert run.load(exit_id[:7]).id == exit_id
    assert run.load(exit_id.upper()).id == exit_id
    with pytest.raises(gitstate.InvalidReferenceError):
        run.load("node:missing")
    with pytest.raises(gitstate.InvalidReferenceError):
        run.load("node:")
    with pytest.raises(gitstate.InvalidReferenceError):
        run.load("xyz")
    with pytest.raises(gitstate.CheckpointNotFound):
        run.load("0" * 40)
    other = store.create_run(run_id="other").checkpoint({"y": 1})
    with pytest.raises(gitstate.CheckpointNotFound):
        run.load(other.id)


def test_ambiguous_prefix(store: gitstate.Store) -> None:
    run = store.create_run(run_id="amb")
    seen: dict[str, str] = {}
    while True:
        cp = run.checkpoint({"i": len(seen)})
        if cp.id[:4] in seen:
            break
        seen[cp.id[:4]] = cp.id
    with pytest.raises(gitstate.AmbiguousReferenceError):
        run.load(cp.id[:4])


def test_expect_is_compare_and_swap(store: gitstate.Store) -> None:
    run = store.create_run(run_id="cas")
    a = run.checkpoint({"v": 1})
    b = run.checkpoint({"v": 2}, expect=a.id)
    with pytest.raises(gitstate.ConflictError) as info:
        run.checkpoint({"v": 3}, expect=a.id)
    assert info.value.expected == a.id and info.value.actual == b.id
    assert run.head().id == b.id  # type: ignore[union-attr]
    assert len(list(run.history())) == 2


def test_fork_rollback_undo(store: gitstate.Store, repo: Path) -> None:
    run = store.create_run(run_id="fru")
    cps = [run.checkpoint({"i": i}) for i in range(5)]
    tip = run.fork(cps[1].id[:10], "retry")
    assert tip.id == cps[1].id
    with pytest.raises(gitstate.BranchExistsError):
        run.fork(cps[2].id, "retry")
    r = run.checkpoint({"i": "retry"}, branch="retry")
    assert r.step == 2 and r.parent_ids == (cps[1].id,)
    assert set(run.branches()) == {"main", "retry"}

    back = run.rollback(cps[2].id)
    assert back.id == cps[2].id and run.head().id == cps[2].id  # type: ignore[union-attr]
    assert [c.step for c in run.history()] == [2, 1, 0]
    # the rolled-back checkpoints are still readable and reachable from the reflog
    assert run.load(cps[4].id).state == {"i": 4}
    assert cps[4].id in git(repo, "rev-list", "--reflog", "--all")
    undone = run.undo()
    assert undone is not None and undone.id == cps[4].id
    redone = run.undo()  # undoing the undo moves back again
    assert redone is not None and redone.id == cps[2].id
    assert git(repo, "reflog", "show", "--format=%gs", run.ref("main")).splitlines()[0].startswith("gitstate: undo")


def test_undo_fork_deletes_branch_and_nothing_to_undo(store: gitstate.Store) -> None:
    run = store.create_run(run_id="u")
    cp = run.checkpoint({"a": 1})
    run.fork(cp.id, "f")
    assert run.undo("f") is None
    assert "f" not in run.branches()
    with pytest.raises(gitstate.BranchNotFound):
        run.undo("f")
    with pytest.raises(gitstate.BranchNotFound):
        run.rollback(cp.id, branch="nope")


def test_deleting_a_branch_deletes_its_node_log(store: gitstate.Store, repo: Path) -> None:
    run = store.create_run(run_id="logs")
    base = run.checkpoint({"a": 0})
    run.fork(base.id, "b")
    with run.node("secret", branch="b") as n:
        n.checkpoint({"a": 1})
    run.fork(base.id, "c")
    with run.node("other", branch="c"):
        pass
    refs = git(repo, "for-each-ref", "--format=%(refname)", "refs/agentos/").split()
    assert run.ref("b").replace("/heads/", "/nodes/") in refs and run.ref("c").replace("/heads/", "/nodes/") in refs
    run.delete_branch("b", force=True)
    assert run.undo("c") is None  # the fork of c undone: c goes, with its node log
    refs = git(repo, "for-each-ref", "--format=%(refname)", "refs/agentos/").split()
    assert [r for r in refs if "/nodes/" in r] == [] and sorted(run.branches()) == ["main"]
    run.fork(base.id, "b")
    assert run.nodes("b") == []  # a branch made again under that name starts without the old markers


def test_node_boundaries(store: gitstate.Store) -> None:
    run = store.create_run(run_id="nodes")
    run.checkpoint({"x": 0})
    with run.node("plan") as n:
        cp1 = n.checkpoint({"x": 1})
        cp2 = n.checkpoint({"x": 1.5})
    with pytest.raises(RuntimeError):
        with run.node("exec"):
            cp3 = run.checkpoint({"x": 2}, node="exec")
            raise RuntimeError("boom")
    nodes = run.nodes()
    assert [(b.node, b.status) for b in nodes] == [("plan", "completed"), ("exec", "failed")]
    plan = nodes[0]
    assert (plan.entry, plan.exit) == (cp1.id, cp2.id)  # markers point at the caller's checkpoints
    assert (nodes[1].entry, nodes[1].exit) == (cp3.id, cp3.id)
    assert [cp.state for cp in run.history()] == [{"x": 2}, {"x": 1.5}, {"x": 1}, {"x": 0}]  # no extra checkpoints
    assert [cp.step for cp in run.history()] == [3, 2, 1, 0]
    assert run.load("node:plan").id == cp2.id
    records = list(run.node_log().records())
    assert "boom" in (records[0].error or "") and records[0].status == "failed"
    assert store.list_runs()[0].status == "failed"  # the tip closes a failed node
    # rollback to a node = rollback to its exit checkpoint; the failed node leaves with its checkpoint
    assert run.rollback("node:plan").id == cp2.id
    assert [(b.node, b.status) for b in run.nodes()] == [("plan", "completed")]


def test_checkpoint_node_is_a_node_step_as_on_the_command_line(store: gitstate.Store) -> None:
    """``run.checkpoint(node=NAME)`` means what ``git agentos checkpoint --node NAME`` means: the
    checkpoint is a step of NAME, so ``nodes()`` lists it and consecutive ones form one boundary;
    inside a ``run.node`` block the block is the boundary; ``mark_node=False`` only labels."""
    run = store.create_run(run_id="steps")
    cp0 = run.checkpoint({"x": 0}, node="plan")
    cp1 = run.checkpoint({"x": 1}, node="plan")
    cp2 = run.checkpoint({"x": 2}, node="edit", status="failed")
    assert run.nodes() == [gitstate.NodeBoundary("plan", cp0.id, cp1.id, "completed"),
                           gitstate.NodeBoundary("edit", cp2.id, cp2.id, "failed")]
    with run.node("act"):
        inside = run.checkpoint({"x": 3}, node="act")
        run.checkpoint({"x": 4}, node="act", branch="side")  # another branch: no block open there
    labelled = run.checkpoint({"x": 5}, node="note", mark_node=False)
    assert run.nodes()[2:] == [gitstate.NodeBoundary("act", inside.id, inside.id, "completed")]
    assert [b.node for b in run.nodes("side")] == ["act"]
    assert run.load("node:note").id == labelled.id and labelled.node == "note"
    with pytest.raises(gitstate.UsageError):
        run.checkpoint({}, mark_node=True)


def test_fork_carries_the_node_boundaries_up_to_the_fork_point(store: gitstate.Store) -> None:
    run = store.create_run(run_id="fork-nodes")
    with run.node("plan") as n:
        plan = n.checkpoint({"x": 1})
    with run.node("exec") as n:
        n.checkpoint({"x": 2})
    run.fork("node:plan", "try-b")
    assert [(b.node, b.exit) for b in run.nodes("try-b")] == [("plan", plan.id)]  # exec is after the fork point
    assert run.load("node:plan", branch="try-b").id == plan.id
    with run.node("retry", branch="try-b") as n:
        retried = n.checkpoint({"x": "b"})
    assert [(b.node, b.exit) for b in run.nodes("try-b")] == [("plan", plan.id), ("retry", retried.id)]
    assert [b.node for b in run.nodes()] == ["plan", "exec"]  # main's log is not touched
    # a checkpoint id: the node log of the branch whose line holds it; a name used before is re-seeded
    run.delete_branch("try-b", force=True)
    run.fork(plan.id, "try-b")
    assert [b.node for b in run.nodes("try-b")] == ["plan"]
    with pytest.raises(gitstate.BranchExistsError):
        run.fork(plan.id, "try-b")


def test_node_without_checkpoints_marks_the_tip(store: gitstate.Store) -> None:
    run = store.create_run(run_id="empty-node")
    with run.node("first") as scope:  # an empty branch: nothing to point at
        pass
    assert scope.entry is None and run.nodes() == [gitstate.NodeBoundary("first", None, None, "completed")]
    tip = run.checkpoint({"a": 1})
    with run.node("idle"):
        pass
    assert run.nodes()[-1] == gitstate.NodeBoundary("idle", tip.id, tip.id, "completed")
    assert run.load("node:idle").id == tip.id and len(list(run.history())) == 1


def test_node_boundaries_are_readable_with_plain_git(store: gitstate.Store, repo: Path) -> None:
    run = store.create_run(run_id="plain")
    with run.node("plan") as scope:
        cp = scope.checkpoint({"a": 1})
    log_ref = "refs/agentos/main/runs/plain/nodes/main"
    listing = git(repo, "ls-tree", log_ref)
    assert f"160000 commit {cp.id}\tentry" in listing and f"160000 commit {cp.id}\texit" in listing
    assert git(repo, "log", "--format=%s", log_ref).splitlines() == ["node plan · completed", "node plan · running"]
    git(repo, "fsck", "--strict")


def test_open_node_is_running(store: gitstate.Store) -> None:
    run = store.create_run(run_id="open")
    scope = run.node("long")
    scope.__enter__()
    assert [(b.node, b.exit, b.status) for b in run.nodes()] == [("long", None, "running")]
    scope.checkpoint({"step": 1})
    assert [(b.node, b.exit, b.status) for b in run.nodes()] == [("long", None, "running")]
    assert store.list_runs()[0].status == "running"


@pytest.mark.parametrize(("status", "expected"), [("completed", "completed"), ("done", "completed"),
                                                  ("failed", "failed"), ("interrupted", "interrupted"),
                                                  ("paused", "interrupted"), ("stopped", "stopped"),
                                                  ("cancelled", "stopped"), (None, "running")])
def test_derived_status(store: gitstate.Store, status: str | None, expected: str) -> None:
    store.create_run(run_id="s").checkpoint({"a": 1}, status=status)
    assert store.list_runs()[0].status == expected


def test_summary_fields(store: gitstate.Store) -> None:
    run = store.create_run(workflow="wf", run_id="sum")
    for i in range(3):
        run.checkpoint({"i": i}, node=f"n{i}")
    s = store.list_runs()[0]
    assert (s.id, s.workflow, s.branch, s.node, s.step, s.checkpoints, s.worktree) == ("sum", "wf", "main", "n2", 2, 3, "main")
    assert s.status == "running"
    assert s.updated_at >= s.created_at


def test_prune_keeps_newest(store: gitstate.Store, repo: Path) -> None:
    run = store.create_run(run_id="p")
    cps = [run.checkpoint({"i": i, "log": list(range(i * 10))}) for i in range(10)]
    result = run.prune(keep_latest=3)
    assert (result.kept, result.removed) == (3, 7)
    hist = list(run.history())
    assert [c.state["i"] for c in hist] == [9, 8, 7]
    assert [c.step for c in hist] == [9, 8, 7]
    assert hist[-1].parent_ids == ()
    assert result.renamed[cps[9].id] == hist[0].id
    assert store.list_runs()[0].checkpoints == 3
    assert run.checkpoint({"i": 10}).step == 10
    git(repo, "fsck", "--strict")
    with pytest.raises(gitstate.UsageError):
        run.prune(keep_latest=0)
    assert run.prune(keep_latest=100).removed == 0


def test_unencodable_state_writes_nothing(store: gitstate.Store, repo: Path) -> None:
    run = store.create_run(run_id="bad")
    good = run.checkpoint({"a": 1})
    refs_before = git(repo, "for-each-ref", "refs/agentos")
    for bad in ({"a": object()}, {"a": {1.5: "float key"}}, {"a": {"b": {1, 2}}}):
        with pytest.raises(gitstate.EncodingError):
            run.checkpoint(bad)
    cyclic: list[object] = []
    cyclic.append(cyclic)
    with pytest.raises(gitstate.EncodingError):
        run.checkpoint({"c": cyclic})
    assert git(repo, "for-each-ref", "refs/agentos") == refs_before
    assert run.head().id == good.id  # type: ignore[union-attr]


def test_user_data_untouched(repo: Path) -> None:
    (repo / "untracked.txt").write_text("mine\n")
    (repo / "README").write_text("edited\n")
    before = user_snapshot(repo)
    store = gitstate.open_store(repo)
    run = store.create_run(workflow="w", run_id="x")
    cp = run.checkpoint({"a": 1})
    run.checkpoint({"a": 2})
    run.fork(cp.id, "b")
    run.rollback(cp.id)
    run.undo()
    run.prune(1)
    store.delete_run("x")
    assert user_snapshot(repo) == before
    git(repo, "fsck", "--strict")


def test_plain_git_readability(store: gitstate.Store, repo: Path) -> None:
    run = store.create_run(workflow="wf", run_id="readable")
    run.checkpoint({"a": 1}, node="plan", trigger="tool_end")
    run.checkpoint({"a": 2}, node="load_data", trigger="tool_end", status="completed")
    log = git(repo, "log", "--format=%s", run.ref("main"))
    assert log.splitlines() == ["load_data · step 1 · tool_end · completed", "plan · step 0 · tool_end"]
    body = git(repo, "log", "-1", "--format=%B", run.ref("main"))
    for trailer in ("Run: readable", "Branch: main", "Node: load_data", "Step: 1", "Status: completed",
                    "Workflow: wf", "Gitstate-Format: 2"):
        assert trailer in body
    trailers = git(repo, "log", "-1", "--format=%(trailers:key=Step,valueonly)", run.ref("main"))
    assert trailers.strip() == "1"
    tree = git(repo, "ls-tree", "-r", "--name-only", run.ref("main"))
    assert "meta.cbor" in tree and "state/a.cbor" in tree
    refs = git(repo, "for-each-ref", "--format=%(refname)", "refs/agentos/")
    assert "refs/agentos/main/runs/readable/heads/main" in refs.splitlines()
    assert "refs/agentos/main/runs/readable/run" in refs.splitlines()


def test_node_boundaries_carry_or_capture_files(store: gitstate.Store, repo: Path) -> None:
    run = store.create_run(run_id="nf")
    (repo / "work.txt").write_text("v1\n")
    first = run.checkpoint({"a": 1}, files=True)
    with run.node("carry"):
        pass
    assert run.load("node:carry").id == first.id  # no checkpoint inside: the boundary marks the tip
    with run.node("edit", files=True) as scope:
        (repo / "work.txt").write_text("v2\n")
        scope.checkpoint({"a": 1.5})  # the node's files=True is the default for its checkpoints
    (repo / "work.txt").write_text("v3, unsaved\n")
    run.checkpoint({"a": 2}, files=True)
    run.rollback("node:edit", restore=True)
    assert (repo / "work.txt").read_text() == "v2\n"


def test_labels_must_be_strings(store: gitstate.Store) -> None:
    run = store.create_run(run_id="labels")
    for kwargs in ({"node": 5}, {"trigger": ["x"]}, {"status": True}):
        with pytest.raises(gitstate.UsageError):
            run.checkpoint({"a": 1}, **kwargs)  # type: ignore[arg-type]
    assert run.head() is None


def test_prune_keeps_node_boundaries(store: gitstate.Store, repo: Path) -> None:
    run = store.create_run(run_id="pt")
    run.checkpoint({"a": 0})
    with run.node("gone"):
        run.checkpoint({"a": 0.5}, node="gone")
    with run.node("n"):
        a = run.checkpoint({"a": 1}, node="n")
        b = run.checkpoint({"a": 2}, node="n")
    run.checkpoint({"a": 3})
    result = run.prune(keep_latest=3)
    assert run.nodes() == [gitstate.NodeBoundary("n", result.renamed[a.id], result.renamed[b.id], "completed")]
    assert run.load("node:n").id == result.renamed[b.id]
    git(repo, "fsck", "--strict")


def test_wrong_argument_kinds_are_clear_errors(store: gitstate.Store) -> None:
    """Arguments of the wrong kind are GitStateErrors that say what is expected; a state key that
    is not Unicode text (a lone surrogate) is refused as such a value is, nothing written."""
    run = store.create_run(run_id="kinds")
    cp = run.checkpoint({"a": 1})
    with pytest.raises(gitstate.UsageError, match="metadata must be a mapping, not list"):
        run.checkpoint({}, metadata=[1])  # type: ignore[arg-type]
    with pytest.raises(gitstate.InvalidReferenceError, match="a reference is text"):
        run.rollback(12345)  # type: ignore[arg-type]
    for state in ({"\udcff": 1}, {"a": {"b\udcff": 1, "long": list(range(100))}}):
        with pytest.raises(gitstate.EncodingError, match="not valid Unicode text"):
            run.checkpoint(state)
    assert [c.id for c in run.history()] == [cp.id]

