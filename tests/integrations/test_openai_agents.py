"""gitstate.openai_agents.GitSession against the real OpenAI Agents SDK: the same calls on the SDK's
SQLiteSession / AdvancedSQLiteSession give the same results (seeded random sequences, limits, pops
on empty, branching), concurrent writers from two processes lose nothing, a real Runner.run with a
scripted model keeps its history in git, and bad input fails cleanly without writing."""

from __future__ import annotations

import asyncio
import json
import random
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, Runner, SQLiteSession
from agents.extensions.memory import AdvancedSQLiteSession
from agents.memory import Session
from agents.testing import ScriptedModel, assistant_message
from click.testing import CliRunner
from conftest import git

import gitstate
from gitstate.openai_agents import GitSession, SessionBranchError, UnknownBranchError
from gitstate.verify import verify
from gitstate_cli.main import cli


def _item(rnd: random.Random, n: int) -> dict[str, Any]:
    kind = rnd.random()
    if kind < 0.4:
        return {"role": "user", "content": f"question {n} " + "x" * rnd.randint(0, 60)}
    if kind < 0.7:
        return {"role": "assistant", "content": [{"type": "output_text", "text": f"answer {n}"}],
                "id": f"msg_{n}", "type": "message", "status": "completed"}
    if kind < 0.85:
        return {"type": "function_call", "name": "lookup", "call_id": f"c{n}", "arguments": json.dumps({"n": n})}
    return {"type": "function_call_output", "call_id": f"c{n}", "output": str(n * 7), "extra": (n, "tuple"),
            "ids": {1: "int key"}, "score": 0.5 * n}


async def _same(ops: list[tuple[str, Any]], a: Any, b: Any) -> None:
    for i, (op, arg) in enumerate(ops):
        if op == "add":
            await a.add_items(arg)
            await b.add_items(arg)
        elif op == "pop":
            assert await a.pop_item() == await b.pop_item(), i
        elif op == "get":
            assert await a.get_items(arg) == await b.get_items(arg), (i, arg)
        elif op == "clear":
            await a.clear_session()
            await b.clear_session()


def _ops(seed: int, count: int) -> list[tuple[str, Any]]:
    rnd = random.Random(seed)
    ops: list[tuple[str, Any]] = []
    n = 0
    for _ in range(count):
        r = rnd.random()
        if r < 0.55:
            batch = [_item(rnd, n + j) for j in range(rnd.choice([0, 1, 1, 2, 3, 7, 40]))]
            n += len(batch)
            ops.append(("add", batch))
        elif r < 0.72:
            ops.append(("pop", None))
        elif r < 0.97:
            ops.append(("get", rnd.choice([None, 0, 1, 2, 5, 31, 32, 33, 64, 100, -1, -5])))
        else:
            ops.append(("clear", None))
    return ops


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_random_sequences_match_sqlite_session(repo: Path, tmp_path: Path, seed: int) -> None:
    ours = GitSession(f"s{seed}", repo)
    theirs = SQLiteSession(f"s{seed}", tmp_path / "ref.db")
    await _same(_ops(seed, 150), ours, theirs)
    assert await ours.get_items() == await theirs.get_items()
    # a fresh instance (other process, empty caches) reads the same
    assert await GitSession(f"s{seed}", repo).get_items() == await theirs.get_items()


async def test_bar_200_operations_then_branch_from_turn_3(repo: Path, tmp_path: Path) -> None:
    ours = GitSession("bar", repo)
    theirs = AdvancedSQLiteSession(session_id="bar", db_path=tmp_path / "adv.db", create_tables=True)
    rnd = random.Random(200)
    ops: list[tuple[str, Any]] = []
    for i in range(200):
        r = rnd.random()
        if i < 10 or r < 0.7:
            ops.append(("add", [{"role": "user", "content": f"q{i}"}, _item(rnd, i)]))
        elif r < 0.85:
            ops.append(("pop", None))
        else:
            ops.append(("get", rnd.choice([None, 5])))
    await _same(ops, ours, theirs)
    assert await ours.get_items() == await theirs.get_items()
    assert await ours.get_items(limit=5) == await theirs.get_items(limit=5)
    main_items = await theirs.get_items()
    for s in (ours, theirs):
        assert await s.create_branch_from_turn(3, "retry") == "retry"
        await s.add_items([{"role": "user", "content": "a different third question"}])
    assert await ours.get_items() == await theirs.get_items()
    assert len(await ours.get_items()) < len(main_items)
    for s in (ours, theirs):
        await s.switch_to_branch("main")
    assert await ours.get_items() == await theirs.get_items() == main_items
    assert (await ours.get_items(branch_id="retry"))[-1]["content"] == "a different third question"
    # both lines are gitstate branches; the fork's parent is a checkpoint of main
    run = ours.store.get_run("bar")
    assert set(run.branches()) == {"main", "retry"}
    line = list(run.history("retry"))
    assert [cp.branch for cp in line[:2]] == ["retry", "retry"] and line[1].node == "create_branch"
    assert line[2].branch == "main" and line[2].metadata["items"] <= 4


async def test_branch_api_matches_advanced_sqlite_session(repo: Path, tmp_path: Path) -> None:
    ours = GitSession("b", repo)
    theirs = AdvancedSQLiteSession(session_id="b", db_path=tmp_path / "adv.db", create_tables=True)

    def strip(rows: list[dict[str, Any]], key: str) -> list[dict[str, Any]]:
        return [{k: v for k, v in r.items() if k != key} for r in rows]

    def branches(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        # both stores name a branch after the second it was made and list branches by their
        # creation second: the two sessions may straddle a second, so compare without either
        assert [str(r["created_at"]) for r in rows] == sorted(str(r["created_at"]) for r in rows)
        rows = [{**r, "branch_id": re.sub(r"_[0-9]+$", "_<time>", r["branch_id"])} for r in strip(rows, "created_at")]
        return sorted(rows, key=lambda r: str(r["branch_id"]))

    names: dict[Any, str] = {}
    for s in (ours, theirs):
        assert await s.list_branches() == []
        for t in range(5):
            await s.add_items([{"role": "user", "content": f"q{t} " + "long " * 30},
                               {"role": "assistant", "content": f"a{t}"}])
    assert strip(await ours.get_conversation_turns(), "timestamp") == strip(await theirs.get_conversation_turns(), "timestamp")
    assert strip(await ours.find_turns_by_content("Q3"), "timestamp") == strip(await theirs.find_turns_by_content("Q3"), "timestamp")
    for s in (ours, theirs):
        with pytest.raises(ValueError):
            await s.create_branch_from_turn(9)
        with pytest.raises(ValueError):
            await s.create_branch_from_turn(2, "  ")
        name = await s.create_branch_from_turn(2)
        names[s] = name
        assert name.startswith("branch_from_turn_2_")
        assert await s.get_items() == [{"role": "user", "content": "q0 " + "long " * 30}, {"role": "assistant", "content": "a0"}]
        with pytest.raises(ValueError):
            await s.create_branch_from_turn(1, "main")
        await s.add_items([{"role": "user", "content": "other"}])
        with pytest.raises(ValueError):
            await s.delete_branch("main")
        with pytest.raises(ValueError):
            await s.delete_branch(name)  # current, no force
        with pytest.raises(ValueError):
            await s.switch_to_branch("nope")
        with pytest.raises(ValueError):
            await s.delete_branch("nope")
        with pytest.raises(ValueError):
            await s.delete_branch("")
    assert branches(await ours.list_branches()) == branches(await theirs.list_branches())
    assert await ours.pop_item() == await theirs.pop_item()
    for s in (ours, theirs):
        await s.delete_branch(names[s], force=True)  # switches to main first
    assert await ours.get_items() == await theirs.get_items()
    assert branches(await ours.list_branches()) == branches(await theirs.list_branches())
    for s in (ours, theirs):
        await s.create_branch_from_content("q4", "from-content")
        await s.clear_session()
        assert await s.list_branches() == []
        assert await s.get_items() == []
        assert await s.pop_item() is None
    with pytest.raises(UnknownBranchError) as info:
        await ours.switch_to_branch("from-content")
    assert isinstance(info.value, gitstate.GitStateError)
    with pytest.raises(SessionBranchError):
        await ours.delete_branch("main")


async def test_protocol_and_pop_on_empty(repo: Path, tmp_path: Path) -> None:
    ours = GitSession("p", repo, session_settings={"limit": 2})
    theirs = SQLiteSession("p", tmp_path / "p.db", session_settings={"limit": 2})
    assert isinstance(ours, Session)
    assert await ours.pop_item() is None and await theirs.pop_item() is None
    assert await ours.get_items() == [] and ours.store.list_runs() == []  # reading writes nothing
    await ours.add_items([])
    assert ours.store.list_runs() == []
    for s in (ours, theirs):
        await s.add_items([{"role": "user", "content": str(i)} for i in range(5)])
    assert await ours.get_items() == await theirs.get_items()  # the settings' limit: last 2
    assert await ours.get_items(limit=4) == await theirs.get_items(limit=4)
    # a session never says it finished: saved, not running
    assert [(r.id, r.status) for r in ours.store.list_runs()] == [("p", "saved")]



async def _after_close(session: Any) -> list[tuple[str, str]]:
    """What each call does on a closed session: ``(call, exception type of note and message)``."""
    item = {"role": "user", "content": "later"}
    calls = [("get_items", lambda: session.get_items()), ("get_items(0)", lambda: session.get_items(0)),
             ("add_items", lambda: session.add_items([item])), ("add_items([])", lambda: session.add_items([])),
             ("pop_item", session.pop_item), ("clear_session", session.clear_session),
             ("create_branch_from_turn", lambda: session.create_branch_from_turn(1)),
             ("switch_to_branch", lambda: session.switch_to_branch("main")),
             ("list_branches", session.list_branches), ("delete_branch", lambda: session.delete_branch("x")),
             ("delete_branch(main)", lambda: session.delete_branch("main")),
             ("get_conversation_turns", session.get_conversation_turns),
             ("find_turns_by_content", lambda: session.find_turns_by_content("a")),
             ("create_branch_from_content", lambda: session.create_branch_from_content("a"))]
    out = []
    for name, call in calls:
        try:
            result = await call()
        except RuntimeError as exc:
            out.append((name, "RuntimeError: " + str(exc).replace(type(session).__name__, "<Session>")
                        .replace("SQLiteSession", "<Session>")))
        except ValueError:
            out.append((name, "ValueError"))
        else:
            out.append((name, f"returned {result!r}"))
    return out


async def test_closed_session_refuses_every_call_as_sqlite_session(repo: Path, tmp_path: Path) -> None:
    ours = GitSession("closing", repo)
    theirs = AdvancedSQLiteSession(session_id="closing", db_path=tmp_path / "c.db", create_tables=True)
    for s in (ours, theirs):
        await s.add_items([{"role": "user", "content": "a"}])
        s.close()
        s.close()  # closing again does nothing
    expected = await _after_close(theirs)
    assert expected[0] == ("get_items", "RuntimeError: <Session> is closed")
    assert await _after_close(ours) == expected
    with pytest.raises(RuntimeError, match="^GitSession is closed$") as info:
        await ours.add_items([{"role": "user", "content": "b"}])
    assert isinstance(info.value, gitstate.GitStateError)
    # nothing was written after close
    assert await GitSession("closing", repo).get_items() == [{"role": "user", "content": "a"}]
    assert len(list(gitstate.open_store(repo).get_run("closing").history())) == 1


async def test_close_of_a_session_on_a_shared_store(repo: Path) -> None:
    store = gitstate.open_store(repo)
    first, second = GitSession("one", store=store), GitSession("two", store=store)
    await first.add_items([{"role": "user", "content": "a"}])
    # calls under way when close() is called either finish or are refused, never half done
    tasks = [asyncio.create_task(first.add_items([{"role": "user", "content": str(i)}])) for i in range(8)]
    await asyncio.sleep(0)
    first.close()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert all(r is None or isinstance(r, RuntimeError) for r in results), results
    written = [str(i) for i, r in enumerate(results) if r is None]
    assert sorted(i["content"] for i in await GitSession("one", repo).get_items()) == sorted(["a", *written])
    with pytest.raises(RuntimeError):
        await first.get_items()
    # the store it did not open stays open for others
    await second.add_items([{"role": "user", "content": "b"}])
    assert await second.get_items() == [{"role": "user", "content": "b"}]

async def test_runner_with_scripted_model_keeps_history(repo: Path, tmp_path: Path) -> None:
    async def conversation(session: Any) -> list[Any]:
        model = ScriptedModel([[assistant_message("Hello! I am a test double.", item_id="m1")],
                               [assistant_message("You said hi twice.", item_id="m2")]])
        agent = Agent(name="assistant", instructions="Be brief.", model=model)
        first = await Runner.run(agent, "hi", session=session)
        assert first.final_output == "Hello! I am a test double."
        second = await Runner.run(agent, "hi again", session=session)
        assert second.final_output == "You said hi twice."
        seen = model.last_call
        assert seen is not None
        return await session.get_items()

    ours = await conversation(GitSession("chat", repo))
    theirs = await conversation(SQLiteSession("chat", tmp_path / "chat.db"))
    assert ours == theirs
    assert [i.get("role") for i in ours] == ["user", "assistant", "user", "assistant"]
    run = gitstate.open_store(repo).get_run("chat")
    assert run.workflow == "openai-agents"
    assert [cp.node for cp in run.history()] == ["add_items"] * len(list(run.history()))


def test_two_processes_add_concurrently(repo: Path) -> None:
    script = textwrap.dedent("""
        import asyncio, sys
        from gitstate.openai_agents import GitSession
        async def main(tag):
            s = GitSession("shared", sys.argv[2])
            for i in range(40):
                await s.add_items([{"role": "user", "content": f"{tag}-{i}"}])
        asyncio.run(main(sys.argv[1]))
    """)
    procs = [subprocess.Popen([sys.executable, "-c", script, tag, str(repo)]) for tag in ("a", "b")]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    items = asyncio.run(GitSession("shared", repo).get_items())
    contents = [i["content"] for i in items]
    assert len(contents) == 80
    for tag in ("a", "b"):
        assert [c for c in contents if c.startswith(tag)] == [f"{tag}-{i}" for i in range(40)]
    assert verify(gitstate.open_store(repo)).ok


async def test_appending_costs_about_the_new_items(repo: Path) -> None:
    s = GitSession("long", repo)
    for i in range(40):
        await s.add_items([{"role": "user", "content": f"turn {i}"}])
    s.store.wait_for_housekeeping()  # a merge deleting packs under cat-file hides objects from it
    before = set(git(repo, "cat-file", "--batch-all-objects", "--batch-check=%(objectname)").split())
    await s.add_items([{"role": "user", "content": "one more"}])
    s.store.wait_for_housekeeping()
    new = set(git(repo, "cat-file", "--batch-all-objects", "--batch-check=%(objectname)").split()) - before
    # commit, root tree, meta, state tree, list tree, last chunk, turns (+ its list tree)
    assert len(new) <= 8
    tip = s.store.get_run("long").head()
    assert tip is not None
    assert git(repo, "ls-tree", "--name-only", f"{tip.id}:state/items.list").split() == [
        "0000000000.cbor", "0000000032.cbor"]


async def test_long_sessions_write_turns_from_remembered_chunks_exactly(repo: Path, tmp_path: Path) -> None:
    # A write of a long session takes the ids of the turns' full chunks from memory: a pop or a
    # cut at a chunk's edge, followed by other turns, must not leave a stale chunk behind. A
    # fresh instance (nothing in memory) reads what was stored; it must match the SDK's session.
    ours = GitSession("turns", repo)
    theirs = AdvancedSQLiteSession(session_id="turns", db_path=tmp_path / "adv.db", create_tables=True)

    def turns(rows: list[dict[str, Any]]) -> list[tuple[int, str]]:
        return [(r["turn"], r["full_content"]) for r in rows]

    async def check(branch: str = "main") -> None:
        fresh = GitSession("turns", repo)
        assert turns(await fresh.get_conversation_turns(branch)) == turns(await theirs.get_conversation_turns())
        fresh.close()

    for i in range(70):  # past two full chunks of 32 turns
        await _same([("add", [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": "a"}])],
                    ours, theirs)
    await check()
    for _ in range(7):  # down to 63 turns (the second chunk no longer full), then other turns
        await _same([("pop", None), ("pop", None)], ours, theirs)
    await _same([("add", [{"role": "assistant", "content": "b"}]),  # the next turns sit one item later
                 *[("add", [{"role": "user", "content": f"other {i}"}]) for i in range(3)]], ours, theirs)
    await check()
    tip = ours.store.get_run("turns").head()
    assert tip is not None and git(repo, "ls-tree", "--name-only", f"{tip.id}:state/turns.list").split() == [
        "0000000000.cbor", "0000000032.cbor", "0000000064.cbor"]
    for s in (ours, theirs):  # a cut inside the first chunk, then a line past a chunk again
        await s.create_branch_from_turn(20, "cut")
    await _same([("add", [{"role": "user", "content": f"cut {i}"}]) for i in range(40)], ours, theirs)
    await check("cut")


async def test_bad_input_writes_nothing(repo: Path) -> None:
    s = GitSession("bad", repo)
    await s.add_items([{"role": "user", "content": "ok"}])
    tip = s.store.get_run("bad").tip()
    with pytest.raises(gitstate.NotSerializableError) as info:
        await s.add_items([{"role": "user", "content": object()}])
    assert isinstance(info.value, TypeError) and isinstance(info.value, gitstate.GitStateError)
    assert s.store.get_run("bad").tip() == tip
    with pytest.raises(gitstate.InvalidNameError):
        GitSession("", repo)
    store = gitstate.open_store(repo)
    store.create_run(workflow="langgraph", run_id="a-thread")
    with pytest.raises(gitstate.ForeignRunError):
        await GitSession("a-thread", repo).get_items()
    with pytest.raises(gitstate.ForeignRunError):
        await GitSession("a-thread", repo).add_items([{"role": "user", "content": "x"}])
    assert store.get_run("a-thread").head() is None


async def test_corrupt_payload_is_reported(repo: Path) -> None:
    store = gitstate.open_store(repo)
    run = store.create_run(workflow="openai-agents", run_id="broken")
    run.checkpoint({"format": "gitstate/openai-agents-session", "v": 1, "items": [1], "turns": [[5, "t"]],
                    "created_at": "now"})
    with pytest.raises(gitstate.CorruptObjectError):
        await GitSession("broken", repo).get_items()
    run.checkpoint({"format": "gitstate/openai-agents-session", "v": 9, "items": [], "turns": [], "created_at": ""})
    with pytest.raises(gitstate.UnsupportedFormatError):
        await GitSession("broken", repo).get_items()
    report = verify(store)
    assert not report.ok
    assert any("openai-agents state" in p.message for p in report.problems)


async def test_cli_shows_sessions(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    s = GitSession("cli-session", repo)
    await s.add_items([{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"}])
    await s.pop_item()
    monkeypatch.chdir(repo)
    runner = CliRunner()
    runs = runner.invoke(cli, ["runs"])
    assert runs.exit_code == 0 and "cli-session" in runs.stdout and "openai-agents" in runs.stdout
    log = runner.invoke(cli, ["log", "cli-session"])
    assert "pop_item" in log.stdout and "add_items" in log.stdout
    shown = runner.invoke(cli, ["show", "cli-session", "--json"])
    state = json.loads(shown.stdout)["state"]
    assert state["items"] == [{"role": "user", "content": "hello"}]
    assert runner.invoke(cli, ["verify"]).exit_code == 0


def _unsorted_item(n: int) -> dict[str, Any]:
    """An item whose keys (and its nested maps' keys) are in no sorted order, as the SDK's items
    are (``type`` before ``role``, ``id`` after ``content``...)."""
    if n % 3 == 0:
        return {"type": "message", "role": "user", "content": f"question {n}"}
    if n % 3 == 1:
        return {"type": "message", "role": "assistant", "status": "completed", "id": f"msg_{n}",
                "content": [{"type": "output_text", "text": f"answer {n}", "annotations": [],
                             "logprobs": {"zeta": 1, "alpha": [{"y": 0.5, "b": None}]}}]}
    return {"type": "function_call", "name": "lookup", "call_id": f"c{n}",
            "arguments": json.dumps({"z": n, "a": 1}), "extra": {"z": {"y": 1, "x": 2}, "a": 0}}


async def test_items_json_is_byte_for_byte_sqlite_sessions(repo: Path, tmp_path: Path) -> None:
    """The JSON the model receives is the same text: every item (and every map inside it) keeps its
    key order, in the tail, in full chunks, after pops, on a branch and in a fresh instance."""
    ours = GitSession("order", repo)
    theirs = AdvancedSQLiteSession(session_id="order", db_path=tmp_path / "adv.db", create_tables=True)

    async def same_json(limit: int | None = None, branch: str | None = None) -> None:
        mine = await (ours.get_items(limit, branch_id=branch) if branch else ours.get_items(limit))
        ref = await theirs.get_items(limit, branch_id=branch) if branch else await theirs.get_items(limit)
        assert json.dumps(mine) == json.dumps(ref)

    for start, size in ((0, 3), (3, 7), (10, 40), (50, 50)):  # 100 items: full chunks of 32 and a tail
        batch = [_unsorted_item(n) for n in range(start, start + size)]
        for s in (ours, theirs):
            await s.add_items(batch)
        await same_json()
        await same_json(5)
    assert list((await ours.get_items())[1]) == ["type", "role", "status", "id", "content"]
    for s in (ours, theirs):
        assert json.dumps(await s.pop_item()) == json.dumps(_unsorted_item(99))
    await same_json()
    await same_json(40)
    for s in (ours, theirs):
        await s.create_branch_from_turn(2, "again")
        await s.add_items([_unsorted_item(1)])
    await same_json()
    await same_json(branch="main")
    fresh = GitSession("order", repo)
    assert json.dumps(await fresh.get_items(branch_id="main")) == json.dumps(await theirs.get_items(branch_id="main"))
    assert json.dumps(await fresh.get_items(branch_id="again")) == json.dumps(await theirs.get_items(branch_id="again"))
    assert verify(fresh.store).ok
