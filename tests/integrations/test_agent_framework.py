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
    later = GitCheckpointStorage(repo, allowed_checkpoint_types=[Approval])
    done = await review_flow(later).run(checkpoint_id=latest.checkpoint_id, responses={request.request_id: "ok"})
    assert done.get_outputs() == ["draft about gitstate: ok"]
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
