"""gitstate.agent_framework.GitCheckpointStorage against the real Microsoft Agent Framework: the
same calls on InMemoryCheckpointStorage (and FileCheckpointStorage for plain data) give the same
results, real workflows checkpoint to git and resume from a chosen checkpoint (also with a pending
human request), previous_checkpoint_id is the commit parent, and bad input fails cleanly."""

from __future__ import annotations

import asyncio
import datetime as dt
import random
import subprocess
import sys
import textwrap
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from agent_framework import (
    Executor,
    FileCheckpointStorage,
    InMemoryCheckpointStorage,
    WorkflowBuilder,
    WorkflowCheckpoint,
    WorkflowContext,
    WorkflowMessage,
    handler,
    response_handler,
)
from agent_framework.exceptions import WorkflowCheckpointException
from click.testing import CliRunner
from conftest import git

import gitstate
from gitstate.agent_framework import (
    CheckpointDecodeError,
    CheckpointEncodingError,
    DisallowedTypeError,
    GitCheckpointStorage,
    UnknownCheckpointError,
)
from gitstate.verify import verify
from gitstate_cli.main import cli


@dataclass
class Task:
    remaining: list[int]


class Plain:
    """Not a data class: stored only when allowed."""


@dataclass
class Finalized:
    """A dataclass with a finalizer is never rebuilt without being allowed."""

    path: str = ""

    def __del__(self) -> None:
        pass


@dataclass
class Approval:
    draft: str
    iteration: int = 0


class Start(Executor):
    @handler
    async def start(self, n: int, ctx: WorkflowContext[Task]) -> None:
        await ctx.send_message(Task(list(range(1, n + 1))))


class Worker(Executor):
    def __init__(self, id: str) -> None:
        super().__init__(id=id)
        self.done: dict[int, list[tuple[int, int]]] = {}

    @handler
    async def compute(self, task: Task, ctx: WorkflowContext[Task, dict[int, list[tuple[int, int]]]]) -> None:
        n = task.remaining.pop(0)
        self.done[n] = [(i, n // i) for i in range(1, n) if n % i == 0]
        if task.remaining:
            await ctx.send_message(task)
        else:
            await ctx.yield_output(self.done)

    async def on_checkpoint_save(self) -> dict[str, Any]:
        return {"done": self.done}

    async def on_checkpoint_restore(self, state: dict[str, Any]) -> None:
        self.done = state.get("done", {})


def factors(storage: Any) -> Any:
    start, worker = Start(id="start"), Worker(id="worker")
    return (WorkflowBuilder(start_executor=start, checkpoint_storage=storage, name="factors")
            .add_edge(start, worker).add_edge(worker, worker).build())


def _checkpoint(rnd: random.Random, name: str, previous: str | None, n: int) -> WorkflowCheckpoint:
    value: Any = rnd.choice([
        {"plain": [1, 2.5, "x", None, True]},
        {1: ("a", "tuple"), "when": dt.datetime(2026, 1, n % 28 + 1, tzinfo=dt.UTC)},
        {"set": frozenset({1, 2}), "id": uuid.UUID(int=n), "task": Task([n, n + 1])},
        {"nested": {"deep": [{"k": i} for i in range(rnd.randint(0, 40))]}},
    ])
    stamp = dt.datetime(2026, 5, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=rnd.choice([n, n, 5]))
    return WorkflowCheckpoint(
        workflow_name=name, graph_signature_hash="sig", checkpoint_id=f"cp-{n}", previous_checkpoint_id=previous,
        timestamp=stamp.isoformat(), iteration_count=n,
        messages={"worker": [WorkflowMessage(data=Task([n]), source_id="start", target_id="worker")]},
        state={"_executor_state": {"worker": value}, "user": {"n": n}}, metadata={"superstep": n})


async def _apply(storage: Any, ops: list[tuple[str, Any]]) -> list[Any]:
    out: list[Any] = []
    for op, arg in ops:
        if op == "save":
            out.append(await storage.save(arg))
        elif op == "load":
            try:
                out.append(await storage.load(arg))
            except WorkflowCheckpointException as exc:
                out.append(("missing", str(exc)))
        elif op == "delete":
            out.append(await storage.delete(arg))
        elif op == "list":
            out.append(await storage.list_checkpoints(workflow_name=arg))
        elif op == "ids":
            out.append(await storage.list_checkpoint_ids(workflow_name=arg))
        elif op == "latest":
            out.append(await storage.get_latest(workflow_name=arg))
    return out


def _ops(seed: int) -> list[tuple[str, Any]]:
    rnd = random.Random(seed)
    ops: list[tuple[str, Any]] = []
    saved: dict[str, list[str]] = {"wf-a": [], "wf-b": []}
    for n in range(60):
        name = rnd.choice(list(saved))
        r = rnd.random()
        if r < 0.5:
            ids = saved[name]
            previous = rnd.choice([None, ids[-1] if ids else None, rnd.choice(ids) if ids else None, "gone"])
            if ids and rnd.random() < 0.1:  # saving an id again replaces it
                cp = _checkpoint(rnd, name, previous, int(rnd.choice(ids)[3:]))
            else:
                cp = _checkpoint(rnd, name, previous, n)
                ids.append(cp.checkpoint_id)
            ops.append(("save", cp))
        elif r < 0.6:
            ops.append(("load", rnd.choice(saved[name] + ["cp-unknown"])))
        elif r < 0.7:
            ops.append(("delete", rnd.choice(saved[name] + ["cp-unknown"])))
        elif r < 0.8:
            ops.append(("list", name))
        elif r < 0.9:
            ops.append(("ids", rnd.choice([name, "nothing"])))
        else:
            ops.append(("latest", rnd.choice([name, "nothing"])))
    return ops


@pytest.mark.parametrize("seed", [11, 12, 13])
async def test_random_operations_match_in_memory_storage(repo: Path, seed: int) -> None:
    ops = _ops(seed)
    ours = await _apply(GitCheckpointStorage(repo, allowed_checkpoint_types=[Task]), ops)
    theirs = await _apply(InMemoryCheckpointStorage(), ops)
    assert ours == theirs
    # a fresh storage (another process: nothing cached) lists the same
    fresh = GitCheckpointStorage(repo, allowed_checkpoint_types=[Task])
    reference = InMemoryCheckpointStorage()
    await _apply(reference, ops)
    for name in ("wf-a", "wf-b"):
        assert await fresh.list_checkpoints(workflow_name=name) == await reference.list_checkpoints(workflow_name=name)
    assert verify(gitstate.open_store(repo)).ok



def _ops_across_workflows(seed: int) -> list[tuple[str, Any]]:
    """Operations where an id is saved again under any workflow (ids are the storage's keys, as
    in InMemoryCheckpointStorage), and loads and deletes pick any id."""
    rnd = random.Random(seed)
    ops: list[tuple[str, Any]] = []
    names = ["wf-a", "wf-b", "wf-c"]
    ids: list[str] = []
    for n in range(80):
        name = rnd.choice(names)
        r = rnd.random()
        if r < 0.55:
            previous = rnd.choice([None, ids[-1] if ids else None, rnd.choice(ids) if ids else None])
            if ids and rnd.random() < 0.4:  # an id saved before, maybe under another workflow
                cp = _checkpoint(rnd, name, previous, int(rnd.choice(ids)[3:]))
            else:
                cp = _checkpoint(rnd, name, previous, n)
                ids.append(cp.checkpoint_id)
            ops.append(("save", cp))
        elif r < 0.65:
            ops.append(("load", rnd.choice(ids + ["cp-unknown"])))
        elif r < 0.75:
            ops.append(("delete", rnd.choice(ids + ["cp-unknown"])))
        elif r < 0.85:
            ops.append(("list", name))
        elif r < 0.93:
            ops.append(("ids", name))
        else:
            ops.append(("latest", name))
    return ops


def _stored_ids(repo: Path) -> list[str]:
    """The checkpoint id of every commit on a branch of the repository's agent-framework runs."""
    store = gitstate.open_store(repo)
    commits: set[str] = set()
    for summary in store.list_runs():
        run = store.get_run(summary.id)
        for branch in run.branches():
            commits.update(cp.id for cp in run.history(branch))
    return sorted(store.read_checkpoint(c).metadata["checkpoint_id"] for c in commits)


@pytest.mark.parametrize("seed", [21, 22, 23, 24])
async def test_an_id_saved_under_another_workflow_moves_there(repo: Path, seed: int) -> None:
    ops = _ops_across_workflows(seed)
    assert any(op == "save" and any(o == "save" and a.checkpoint_id == arg.checkpoint_id
                                    and a.workflow_name != arg.workflow_name for o, a in ops) for op, arg in ops)
    ours = await _apply(GitCheckpointStorage(repo, allowed_checkpoint_types=[Task]), ops)
    reference = InMemoryCheckpointStorage()
    assert ours == await _apply(reference, ops)
    fresh = GitCheckpointStorage(repo, allowed_checkpoint_types=[Task])  # nothing cached
    kept: list[str] = []
    for name in ("wf-a", "wf-b", "wf-c"):
        assert await fresh.list_checkpoints(workflow_name=name) == await reference.list_checkpoints(workflow_name=name)
        kept += await reference.list_checkpoint_ids(workflow_name=name)
    assert _stored_ids(repo) == sorted(kept)  # each id is stored once: no stale copy is kept
    assert verify(gitstate.open_store(repo)).ok


async def test_same_id_under_two_workflows_as_in_memory_storage(repo: Path) -> None:
    def cp(name: str, v: int) -> WorkflowCheckpoint:
        return WorkflowCheckpoint(workflow_name=name, graph_signature_hash="h", checkpoint_id="c1", state={"v": v})

    async def calls(s: Any) -> list[Any]:
        await s.save(cp("wf-a", 1))
        await s.save(cp("wf-b", 2))
        out = [await s.list_checkpoint_ids(workflow_name="wf-a"), await s.list_checkpoint_ids(workflow_name="wf-b"),
               (await s.load("c1")).state, await s.get_latest(workflow_name="wf-a"), await s.delete("c1")]
        try:
            out.append((await s.load("c1")).state)
        except WorkflowCheckpointException as exc:
            out.append(str(exc))
        out.append(await s.delete("c1"))
        return out

    expected = await calls(InMemoryCheckpointStorage())
    assert expected == [[], ["c1"], {"v": 2}, None, True, "No checkpoint found with ID c1", False]
    assert await calls(GitCheckpointStorage(repo)) == expected
    assert _stored_ids(repo) == []
    assert git(repo, "for-each-ref", "refs/agentos/main/runs/wf-a/heads/", "refs/agentos/main/runs/wf-b/heads/") == ""


async def test_saving_again_an_id_whose_branch_goes_on(repo: Path) -> None:
    """The id's first save started a branch named after it, which later checkpoints extended: the
    branch of the new save gets another name (the save used to fail with a ConflictError after
    the old copy had already been deleted)."""

    def cp(cid: str, previous: str | None, v: int = 0) -> WorkflowCheckpoint:
        return WorkflowCheckpoint(workflow_name="w", graph_signature_hash="h", checkpoint_id=cid,
                                  previous_checkpoint_id=previous, state={"v": v})

    ops: list[tuple[str, Any]] = [("save", cp("c0", None)), ("save", cp("cx", "c0")), ("save", cp("c1", "c0")),
                                  ("save", cp("c5", "c1")), ("save", cp("c1", "c0", 2)), ("load", "c1"),
                                  ("ids", "w"), ("save", cp("c1", None, 3)), ("load", "c1"), ("ids", "w")]
    storage = GitCheckpointStorage(repo)
    storage.store.core.lock_timeout = 5
    assert await _apply(storage, ops) == await _apply(InMemoryCheckpointStorage(), ops)
    assert _stored_ids(repo) == ["c0", "c1", "c5", "cx"]
    assert verify(storage.store).ok


@pytest.mark.parametrize("newer", ["wf-a", "wf-b"])
async def test_store_written_before_with_an_id_under_two_workflows(repo: Path, newer: str) -> None:
    """Earlier versions kept a copy per workflow: the newest save is the checkpoint (loaded, listed
    only under its workflow), a save replaces every copy and a delete removes them all."""
    older = "wf-b" if newer == "wf-a" else "wf-a"
    storage = GitCheckpointStorage(repo)
    await storage.save(WorkflowCheckpoint(workflow_name=older, graph_signature_hash="h", checkpoint_id="c1",
                                          state={"v": 1}))
    await storage.save(WorkflowCheckpoint(workflow_name=older, graph_signature_hash="h", checkpoint_id="c0"))
    # the copy an earlier version wrote when c1 was saved again under the other workflow
    store = gitstate.open_store(repo)
    head = next(cp for cp in store.get_run(older).history() if cp.metadata["checkpoint_id"] == "c1")
    state = head.state
    state["workflow_name"], state["state"], state["saved"] = newer, {"v": 2}, head.metadata["saved"] + 1
    store.create_run(workflow="agent-framework", run_id=newer).checkpoint(
        state, node="superstep", metadata={**head.metadata, "saved": state["saved"]})
    assert _stored_ids(repo) == ["c0", "c1", "c1"]

    for s in (storage, GitCheckpointStorage(repo)):
        assert (await s.load("c1")).state == {"v": 2}
        assert await s.list_checkpoint_ids(workflow_name=newer) == ["c1"]
        assert await s.list_checkpoint_ids(workflow_name=older) == ["c0"]
        assert [cp.state for cp in await s.list_checkpoints(workflow_name=newer)] == [{"v": 2}]
    assert await storage.delete("c1") is True
    with pytest.raises(UnknownCheckpointError):
        await storage.load("c1")
    assert await storage.delete("c1") is False
    assert _stored_ids(repo) == ["c0"]

    # saving again replaces every copy
    await storage.save(WorkflowCheckpoint(workflow_name=older, graph_signature_hash="h", checkpoint_id="c0",
                                          state={"again": True}))
    state["checkpoint_id"] = "c0"
    store.get_run(newer).checkpoint(state, node="superstep", metadata={**head.metadata, "checkpoint_id": "c0"})
    assert (await storage.load("c0")).state == {"v": 2}
    await storage.save(WorkflowCheckpoint(workflow_name="wf-c", graph_signature_hash="h", checkpoint_id="c0",
                                          state={"v": 3}))
    assert _stored_ids(repo) == ["c0"]
    assert [await storage.list_checkpoint_ids(workflow_name=n) for n in ("wf-a", "wf-b", "wf-c")] == [[], [], ["c0"]]
    assert verify(storage.store).ok


class Crash(Exception):
    """The process stops here."""


@pytest.mark.parametrize("where", ["same workflow", "other workflow"])
async def test_a_save_cut_off_at_any_ref_move_leaves_one_copy_readable(
        repo: Path, monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    """A save that replaces a checkpoint moves several refs; cut off before any of them, it leaves
    the old checkpoint or the new one, never none, and the next save or delete cleans up."""
    from gitstate.git import refs

    def cp(name: str, cid: str, previous: str | None, v: int) -> WorkflowCheckpoint:
        return WorkflowCheckpoint(workflow_name=name, graph_signature_hash="h", checkpoint_id=cid,
                                  previous_checkpoint_id=previous, state={"v": v})

    target = "wf-a" if where == "same workflow" else "wf-b"
    outcomes: list[bool] = []
    for cut in range(1, 6):
        path = repo.parent / f"cut{cut}"
        git(repo.parent, "init", "-q", str(path))
        storage = GitCheckpointStorage(path)
        for c in (cp("wf-a", "c0", None, 0), cp("wf-a", "c1", "c0", 1), cp("wf-a", "c2", "c1", 0),
                  cp("wf-b", "b0", None, 0)):
            await storage.save(c)
        moves = [0]
        real_set, real_remove, real_many = refs.set_if_equals, refs.remove_if_equals, refs.update_atomically

        def counted(real: Any, moves: list[int] = moves, cut: int = cut) -> Any:
            def move(*args: Any, **kwargs: Any) -> Any:
                moves[0] += 1
                if moves[0] == cut:
                    raise Crash()
                return real(*args, **kwargs)
            return move

        monkeypatch.setattr(refs, "set_if_equals", counted(real_set))
        monkeypatch.setattr(refs, "remove_if_equals", counted(real_remove))
        monkeypatch.setattr(refs, "update_atomically", counted(real_many))
        try:
            await storage.save(cp(target, "c1", "c0", 2))
            done = True
        except Crash:
            done = False
        outcomes.append(done)
        monkeypatch.undo()
        for s in (storage, GitCheckpointStorage(path)):
            loaded = await s.load("c1")
            assert loaded.state in ({"v": 1}, {"v": 2}), cut
            assert done is False or loaded.state == {"v": 2}
            lists = {name: await s.list_checkpoint_ids(workflow_name=name) for name in ("wf-a", "wf-b")}
            assert [name for name, ids in lists.items() if "c1" in ids] == [loaded.workflow_name]
            assert all(c in lists["wf-a"] for c in ("c0", "c2")) and "b0" in lists["wf-b"]
        await storage.save(cp(target, "c1", "c0", 3))
        assert (await storage.load("c1")).state == {"v": 3}
        assert _stored_ids(path) == ["b0", "c0", "c1", "c2"]
        assert await storage.delete("c1") is True
        assert _stored_ids(path) == ["b0", "c0", "c2"]
        assert verify(storage.store).ok
        storage.close()
    assert outcomes == [False, True, True, True, True]  # the save moves its refs in one transaction

async def test_plain_data_matches_file_storage(repo: Path, tmp_path: Path) -> None:
    ours = GitCheckpointStorage(repo)
    theirs = FileCheckpointStorage(tmp_path / "files")
    previous = None
    for n in range(6):
        cp = WorkflowCheckpoint(workflow_name="plain", graph_signature_hash="h", previous_checkpoint_id=previous,
                                state={"count": n, "log": ["x"] * n, "nested": {"a": {"b": n / 3}}},
                                metadata={"n": n}, iteration_count=n)
        previous = cp.checkpoint_id
        assert await ours.save(cp) == await theirs.save(cp) == cp.checkpoint_id
    ids = await theirs.list_checkpoint_ids(workflow_name="plain")
    assert sorted(await ours.list_checkpoint_ids(workflow_name="plain")) == sorted(ids)
    for cid in ids:
        assert await ours.load(cid) == await theirs.load(cid)
    assert await ours.get_latest(workflow_name="plain") == await theirs.get_latest(workflow_name="plain")
    assert await ours.delete(ids[0]) is await theirs.delete(ids[0]) is True
    assert await ours.delete(ids[0]) is await theirs.delete(ids[0]) is False
    with pytest.raises(WorkflowCheckpointException):
        await theirs.load(ids[0])
    with pytest.raises(WorkflowCheckpointException):
        await ours.load(ids[0])


async def test_workflow_resumes_from_a_chosen_checkpoint(repo: Path) -> None:
    reference = InMemoryCheckpointStorage()
    expected = (await factors(reference).run(5)).get_outputs()
    storage = GitCheckpointStorage(repo, allowed_checkpoint_types=[Task])
    assert (await factors(storage).run(5)).get_outputs() == expected
    checkpoints = await storage.list_checkpoints(workflow_name="factors")
    assert [cp.iteration_count for cp in checkpoints] == list(range(len(checkpoints)))
    chosen = checkpoints[2]
    # resume in a new storage (as another process would), from the third checkpoint; a module's
    # dataclasses need no configuration
    again = GitCheckpointStorage(repo)
    resumed = await factors(again).run(checkpoint_id=chosen.checkpoint_id)
    assert resumed.get_outputs() == expected
    after = await again.list_checkpoints(workflow_name="factors")
    assert len(after) > len(checkpoints)
    # previous_checkpoint_id is the commit parent; the resumed line is a branch forked at the chosen one
    run = again.store.get_run("factors")
    assert run.workflow == "agent-framework"
    branches = run.branches()
    assert len(branches) == 2
    by_id = {cp.metadata["checkpoint_id"]: cp for b in branches for cp in run.history(b)}
    for cp in after:
        commit = by_id[cp.checkpoint_id]
        parent = None if commit.parent_id is None else again.store.read_checkpoint(commit.parent_id)
        assert (parent.metadata["checkpoint_id"] if parent else None) == cp.previous_checkpoint_id
    fork = next(name for name in branches if name != "main")
    first_resumed = [cp for cp in run.history(fork) if cp.branch == fork][-1]
    assert first_resumed.parent_id == by_id[chosen.checkpoint_id].id
    assert verify(again.store).ok


class Writer(Executor):
    @handler
    async def write(self, brief: str, ctx: WorkflowContext[str]) -> None:
        await ctx.send_message(f"draft about {brief}")


class Review(Executor):
    @handler
    async def review(self, draft: str, ctx: WorkflowContext) -> None:
        await ctx.request_info(request_data=Approval(draft, 1), response_type=str)

    @response_handler
    async def on_answer(self, request: Approval, answer: str, ctx: WorkflowContext[str, str]) -> None:
        await ctx.yield_output(f"{request.draft}: {answer}")


def review_flow(storage: Any) -> Any:
    writer, review = Writer(id="writer"), Review(id="review")
    return WorkflowBuilder(start_executor=writer, checkpoint_storage=storage, name="hitl").add_edge(writer, review).build()


async def test_pending_request_survives_in_git(repo: Path) -> None:
    storage = GitCheckpointStorage(repo, allowed_checkpoint_types=[Approval])
    first = await review_flow(storage).run("gitstate")
    [request] = first.get_request_info_events()
    latest = await storage.get_latest(workflow_name="hitl")
    assert latest is not None and list(latest.pending_request_info_events) == [request.request_id]
    # waiting for the answer is interrupted; once nothing waits, saved (the framework never says "done")
    assert [(s.id, s.status) for s in gitstate.open_store(repo).list_runs()] == [("hitl", "interrupted")]
    later = GitCheckpointStorage(repo, allowed_checkpoint_types=[Approval])
    done = await review_flow(later).run(checkpoint_id=latest.checkpoint_id, responses={request.request_id: "ok"})
    assert done.get_outputs() == ["draft about gitstate: ok"]
    assert [(s.id, s.status) for s in gitstate.open_store(repo).list_runs()] == [("hitl", "saved")]
    # a module's dataclass is rebuilt by default; strict storages build only what they are allowed
    rebuilt = await GitCheckpointStorage(repo).load(latest.checkpoint_id)
    event = rebuilt.pending_request_info_events[request.request_id]
    assert vars(event) == vars(latest.pending_request_info_events[request.request_id])
    assert event.data == Approval("draft about gitstate", 1)
    with pytest.raises(DisallowedTypeError) as info:
        await GitCheckpointStorage(repo, strict=True).load(latest.checkpoint_id)
    assert isinstance(info.value, WorkflowCheckpointException) and isinstance(info.value, gitstate.GitStateError)


async def test_errors_write_nothing(repo: Path) -> None:
    storage = GitCheckpointStorage(repo)
    with pytest.raises(UnknownCheckpointError) as unknown:
        await storage.load("nope")
    assert isinstance(unknown.value, WorkflowCheckpointException) and isinstance(unknown.value, gitstate.GitStateError)
    assert await storage.delete("nope") is False
    assert await storage.get_latest(workflow_name="none") is None
    assert await storage.list_checkpoints(workflow_name="none") == []

    @dataclass
    class Local:
        x: int = 0

    strict = GitCheckpointStorage(repo, strict=True)
    for target, bad in ((storage, {"x": Local()}), (strict, {"task": Task([1])}), (storage, {"f": print}),
                        (storage, {"plain object": Plain()}), (storage, {"finalizer": Finalized()})):
        with pytest.raises(CheckpointEncodingError) as enc:
            await target.save(WorkflowCheckpoint(workflow_name="w", graph_signature_hash="h", state=bad))
        assert isinstance(enc.value, WorkflowCheckpointException) and isinstance(enc.value, gitstate.GitStateError)
    assert storage.store.list_runs() == [] or all(s.checkpoints == 0 for s in storage.store.list_runs())
    gitstate.open_store(repo).create_run(workflow="openai-agents", run_id="taken")
    with pytest.raises(gitstate.ForeignRunError):
        await storage.save(WorkflowCheckpoint(workflow_name="taken", graph_signature_hash="h"))
    # a damaged payload: a typed value with a wrong shape
    cp = WorkflowCheckpoint(workflow_name="w", graph_signature_hash="h", state={"k": (1, 2)})
    await storage.save(cp)
    run = storage.store.get_run("w")
    head = run.head()
    assert head is not None
    state = head.state
    state["state"] = {"k": {"$gitstate": "tuple", "oops": 1}}
    run.checkpoint(state, metadata={**head.metadata, "checkpoint_id": "broken", "saved": 1})
    with pytest.raises(CheckpointDecodeError):
        await GitCheckpointStorage(repo).load("broken")
    report = verify(storage.store)
    assert any("agent-framework state" in p.message for p in report.problems)


def test_two_processes_save_concurrently(repo: Path) -> None:
    script = textwrap.dedent("""
        import asyncio, sys
        from agent_framework import WorkflowCheckpoint
        from gitstate.agent_framework import GitCheckpointStorage
        async def main(tag):
            s = GitCheckpointStorage(sys.argv[2])
            previous = None
            for i in range(15):
                cp = WorkflowCheckpoint(workflow_name="shared", graph_signature_hash="h", checkpoint_id=f"{tag}{i}",
                                        previous_checkpoint_id=previous, state={"i": i})
                previous = await s.save(cp)
        asyncio.run(main(sys.argv[1]))
    """)
    procs = [subprocess.Popen([sys.executable, "-c", script, tag, str(repo)]) for tag in ("a", "b")]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    ids = asyncio.run(GitCheckpointStorage(repo).list_checkpoint_ids(workflow_name="shared"))
    assert sorted(ids) == sorted(f"{t}{i}" for t in "ab" for i in range(15))
    for tag in "ab":
        assert [i for i in ids if i[0] == tag] == [f"{tag}{i}" for i in range(15)]
    assert len(git(repo, "for-each-ref", "refs/agentos/main/runs/shared/heads/").splitlines()) == 2




async def test_a_writer_moving_the_old_workflow_during_a_move_loses_nothing(
        repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another writer extends the old workflow's branch after the move read it, before its refs
    move: the transaction's compare-and-swap on it fails and nothing moves, the save drops the old copy again from the new tip (its new
    commit, already published, is not written twice), and the other writer's checkpoint stays."""
    from gitstate.git import refs

    def cp(name: str, cid: str, previous: str | None, v: int) -> WorkflowCheckpoint:
        return WorkflowCheckpoint(workflow_name=name, graph_signature_hash="h", checkpoint_id=cid,
                                  previous_checkpoint_id=previous, state={"v": v})

    storage, other = GitCheckpointStorage(repo), GitCheckpointStorage(repo)
    for c in (cp("wf-a", "c0", None, 0), cp("wf-a", "c1", "c0", 1), cp("wf-b", "b0", None, 0)):
        await storage.save(c)
    real_update = refs.update_atomically
    interfered: list[str] = []

    def update_atomically(common_dir: str, moves: list[refs.Move], **kwargs: Any) -> Any:
        if any(m.ref.endswith("/runs/wf-a/heads/main") for m in moves) and not interfered:
            interfered.append("wf-a")
            asyncio.run(other.save(cp("wf-a", "c2", "c1", 9)))  # another writer, in between
        return real_update(common_dir, moves, **kwargs)

    monkeypatch.setattr(refs, "update_atomically", update_atomically)
    await storage.save(cp("wf-b", "c1", "b0", 2))
    monkeypatch.undo()
    assert interfered
    for s in (storage, GitCheckpointStorage(repo)):
        assert (await s.load("c1")).state == {"v": 2}
        assert (await s.load("c2")).state == {"v": 9}
        assert await s.list_checkpoint_ids(workflow_name="wf-a") == ["c0", "c2"]
        assert await s.list_checkpoint_ids(workflow_name="wf-b") == ["c1", "b0"]
    assert _stored_ids(repo) == ["b0", "c0", "c1", "c2"]
    assert len(git(repo, "rev-list", "refs/agentos/main/runs/wf-b/heads/main").split()) == 2
    assert verify(storage.store).ok

def test_two_processes_move_the_same_ids_between_workflows(repo: Path) -> None:
    """Two processes save their own chains and, at the same time, the same ids under different
    workflows: nothing of either chain is lost, and each shared id ends up stored once."""
    script = textwrap.dedent("""
        import asyncio, sys
        from agent_framework import WorkflowCheckpoint
        from gitstate.agent_framework import GitCheckpointStorage
        async def main(tag):
            s = GitCheckpointStorage(sys.argv[2])
            previous = None
            for i in range(12):
                cp = WorkflowCheckpoint(workflow_name=f"own-{tag}", graph_signature_hash="h", checkpoint_id=f"{tag}{i}",
                                        previous_checkpoint_id=previous, state={"i": i})
                previous = await s.save(cp)
                for k in range(3):
                    await s.save(WorkflowCheckpoint(workflow_name=f"shared-{tag}", graph_signature_hash="h",
                                                    checkpoint_id=f"s{k}", state={"by": tag, "i": i}))
        asyncio.run(main(sys.argv[1]))
    """)
    procs = [subprocess.Popen([sys.executable, "-c", script, tag, str(repo)]) for tag in ("a", "b")]
    assert [p.wait(timeout=300) for p in procs] == [0, 0]
    storage = GitCheckpointStorage(repo)

    async def check() -> None:
        for tag in "ab":
            assert await storage.list_checkpoint_ids(workflow_name=f"own-{tag}") == [f"{tag}{i}" for i in range(12)]
        shared = {tag: await storage.list_checkpoint_ids(workflow_name=f"shared-{tag}") for tag in "ab"}
        assert sorted(shared["a"] + shared["b"]) == ["s0", "s1", "s2"]
        for k in range(3):
            loaded = await storage.load(f"s{k}")
            assert f"s{k}" in shared[loaded.state["by"]]
            assert loaded.workflow_name == f"shared-{loaded.state['by']}"

    asyncio.run(check())
    assert _stored_ids(repo) == sorted(["s0", "s1", "s2"] + [f"{t}{i}" for t in "ab" for i in range(12)])
    assert verify(storage.store).ok

async def test_cli_shows_workflow_checkpoints(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    storage = GitCheckpointStorage(repo, allowed_checkpoint_types=[Task])
    await factors(storage).run(3)
    monkeypatch.chdir(repo)
    runner = CliRunner()
    runs = runner.invoke(cli, ["runs"])
    assert "factors" in runs.stdout and "agent-framework" in runs.stdout
    log = runner.invoke(cli, ["log", "factors"])
    assert "superstep" in log.stdout and "iteration 2" in log.stdout
    shown = runner.invoke(cli, ["show", "factors"])
    assert shown.exit_code == 0 and "checkpoint_id" in shown.stdout
    assert runner.invoke(cli, ["verify"]).exit_code == 0


async def test_state_keeps_its_key_order(repo: Path, tmp_path: Path) -> None:
    """Checkpoint fields come back with their maps' keys in the order saved, as from the framework's
    own storages: small maps (inside blobs), large ones and ones holding long lists (split into
    trees), nested ones, also from a fresh storage."""
    wide = {f"key{i:02d}": {"z": i, "a": [i]} for i in range(20, 0, -1)}
    state = {"zeta": {"y": 1, "b": {"q": 0, "c": 2}}, "alpha": wide, "log": [{"z": n, "a": n} for n in range(40)],
             "mid": 1}
    messages = {"writer": [], "planner": []}
    cp = WorkflowCheckpoint(workflow_name="ordered", graph_signature_hash="h", state=state, messages=messages,
                            metadata={"zz": 1, "aa": 2})
    theirs = FileCheckpointStorage(tmp_path / "files")
    ours = GitCheckpointStorage(repo)
    await ours.save(cp)
    await theirs.save(cp)

    def order(v: Any) -> Any:
        if isinstance(v, dict):
            return [(k, order(x)) for k, x in v.items()]
        return [order(x) for x in v] if isinstance(v, list) else v

    reference = await theirs.load(cp.checkpoint_id)
    for storage in (ours, GitCheckpointStorage(repo)):
        loaded = await storage.load(cp.checkpoint_id)
        assert loaded == reference
        for name in ("state", "messages", "metadata"):
            assert order(getattr(loaded, name)) == order(getattr(reference, name)) == order(getattr(cp, name)), name
