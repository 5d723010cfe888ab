"""End-to-end: real LangGraph graphs run on GitCheckpointSaver and on InMemorySaver give the same
results (interrupts and resume, history, time travel, update_state forks, subgraphs, parallel
tasks, two threads), and what lands in git is a run per thread with every checkpoint on a ref."""

from __future__ import annotations

import json
import operator
import subprocess
import sys
import threading
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest

pytest.importorskip("langgraph.graph")

from conftest import git  # noqa: E402
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from langgraph.graph import END, START, StateGraph  # noqa: E402
from langgraph.graph.message import add_messages  # noqa: E402
from langgraph.types import Command, Interrupt, interrupt  # noqa: E402
from lg_helpers import chain  # noqa: E402

import gitstate  # noqa: E402
from gitstate.langgraph import GitCheckpointSaver  # noqa: E402


class Chat(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    log: Annotated[list[str], operator.add]


def agent(state: Chat) -> dict[str, Any]:
    n = len(state["messages"])
    return {"messages": [AIMessage(content=f"thinking about {n} messages", id=f"ai-{n}")], "log": ["agent"]}


def tool(state: Chat) -> dict[str, Any]:
    return {"messages": [AIMessage(content="tool result: 42", id=f"tool-{len(state['messages'])}")],
            "log": ["tool"]}


def review(state: Chat) -> dict[str, Any]:
    answer = interrupt({"question": "approve?", "seen": len(state["messages"])})
    return {"log": [f"review:{answer}"]}


def chat_graph(saver: Any, interrupt_before: list[str] | None = None) -> Any:
    g = StateGraph(Chat)
    g.add_node("agent", agent)
    g.add_node("tool", tool)
    g.add_node("review", review)
    g.add_edge(START, "agent")
    g.add_edge("agent", "tool")
    g.add_edge("tool", "review")
    g.add_edge("review", END)
    return g.compile(checkpointer=saver, interrupt_before=interrupt_before or [])


def norm(value: Any) -> Any:
    """Comparable form: messages as (type, content), ids and timestamps dropped."""
    if isinstance(value, Interrupt):
        return ("interrupt", norm(value.value))
    if isinstance(value, dict):
        return {k: norm(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [norm(v) for v in value]
    if hasattr(value, "content") and hasattr(value, "type"):
        return (value.type, value.content)
    return value


def snapshot(graph: Any, config: dict[str, Any]) -> dict[str, Any]:
    st = graph.get_state(config, subgraphs=True)
    return {
        "values": norm(st.values), "next": st.next, "source": st.metadata.get("source"),
        "step": st.metadata.get("step"),
        "tasks": [(t.name, norm([i.value for i in t.interrupts]), norm(t.result)) for t in st.tasks],
    }


def history(graph: Any, config: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [(norm(s.values), s.next, s.metadata.get("source"), s.metadata.get("step"),
             s.parent_config is not None, len(s.tasks))
            for s in graph.get_state_history(config)]


def scenario(saver: Any) -> list[Any]:
    """Everything a user does with a checkpointer, recorded as comparable data."""
    out: list[Any] = []
    graph = chat_graph(saver, interrupt_before=["tool"])
    a = {"configurable": {"thread_id": "thread-a"}}
    b = {"configurable": {"thread_id": "thread-b"}}
    out.append(norm(graph.invoke({"messages": [HumanMessage(content="hi", id="h1")], "log": []}, a)))
    out.append(snapshot(graph, a))  # stopped before tool
    out.append(norm(graph.invoke(None, a)))  # resume: tool runs, review interrupts
    out.append(snapshot(graph, a))
    out.append(norm(graph.invoke(Command(resume="yes"), a)))  # dynamic interrupt resumed
    out.append(snapshot(graph, a))
    out.append(history(graph, a))
    # second thread, independent
    out.append(norm(graph.invoke({"messages": [HumanMessage(content="other", id="h2")], "log": []}, b)))
    out.append(snapshot(graph, b))
    # time travel: replay from the checkpoint before "tool" ran
    past = [s for s in graph.get_state_history(a) if s.next == ("tool",)][0]
    out.append(norm(graph.invoke(None, past.config)))
    out.append(snapshot(graph, a))
    # update_state on an earlier checkpoint forks the thread
    fork = graph.update_state(past.config, {"messages": [HumanMessage(content="edited", id="h3")]})
    out.append(snapshot(graph, fork))
    out.append(norm(graph.invoke(None, fork)))
    out.append(norm(graph.invoke(Command(resume="no"), a)))
    out.append(history(graph, a))
    out.append(history(graph, b))
    return out


def test_graph_results_match_in_memory(repo: Path) -> None:
    saver = GitCheckpointSaver(gitstate.open_store(repo))
    assert scenario(saver) == scenario(InMemorySaver())


class Outer(TypedDict):
    items: Annotated[list[str], operator.add]


def subgraph_app(saver: Any) -> Any:
    inner = chain(Outer, ("inner_a", lambda s: {"items": ["inner_a"]}),
                  ("inner_ask", lambda s: {"items": [f"inner_ask:{interrupt('sub?')}"]}))
    outer = chain(Outer, ("first", lambda s: {"items": ["first"]}), ("sub", inner.compile()),
                  ("last", lambda s: {"items": ["last"]}))
    return outer.compile(checkpointer=saver)


def sub_scenario(saver: Any) -> list[Any]:
    app = subgraph_app(saver)
    cfg = {"configurable": {"thread_id": "nested"}}
    out: list[Any] = [norm(app.invoke({"items": []}, cfg))]
    st = app.get_state(cfg, subgraphs=True)
    out.append((st.next, [(t.name, t.state.values if t.state else None, t.state.next if t.state else None)
                          for t in st.tasks]))
    out.append(norm(app.invoke(Command(resume="ok"), cfg)))
    out.append(history(app, cfg))
    return out


def test_subgraphs_match_in_memory(repo: Path) -> None:
    store = gitstate.open_store(repo)
    saver = GitCheckpointSaver(store)
    assert sub_scenario(saver) == sub_scenario(InMemorySaver())
    branches = store.get_run("nested").branches()
    assert "main" in branches
    assert any(b.startswith("ns:sub:") for b in branches), sorted(branches)


def test_threads_are_runs_and_every_checkpoint_is_on_a_ref(repo: Path) -> None:
    store = gitstate.open_store(repo)
    saver = GitCheckpointSaver(store)
    scenario(saver)
    runs = {r.id: r for r in store.list_runs()}
    assert {"thread-a", "thread-b"} <= set(runs)
    assert runs["thread-a"].workflow == "langgraph"
    run = store.get_run("thread-a")
    branches = run.branches()
    assert "main" in branches and len(branches) >= 3, sorted(branches)  # forks got their own refs
    # every checkpoint LangGraph can list is a commit reachable from the run's refs
    listed = list(saver.list({"configurable": {"thread_id": "thread-a"}}))
    refs = [run.ref(b) for b in branches]
    reachable = set(git(repo, "rev-list", *refs).split())
    by_id = {c.metadata["checkpoint_id"] for c in (store.checkpoint(o) for o in reachable)}
    assert {t.config["configurable"]["checkpoint_id"] for t in listed} == by_id
    # git log shows readable subjects and the LangGraph trailers
    log = git(repo, "log", "--format=%s", run.ref("main"))
    assert "checkpoint · step" in log and "loop" in log
    full = git(repo, "log", "-1", "--format=%B", run.ref("main"))
    assert "LangGraph-Checkpoint: " in full and "Run: thread-a" in full
    assert git(repo, "fsck", "--strict", "--no-dangling").strip() == ""
    # the user's branch and working tree are untouched
    assert git(repo, "status", "--porcelain").strip() == ""


def test_a_saver_given_a_path_opens_the_store_there(repo: Path, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # not inside the repository: the path alone must find it
    for where in (str(repo), repo / "sub"):
        (repo / "sub").mkdir(exist_ok=True)
        graph = chat_graph(GitCheckpointSaver(where), interrupt_before=["review"])
        graph.invoke({"messages": [HumanMessage(content="hi", id="h")], "log": []},
                     {"configurable": {"thread_id": f"t-{type(where).__name__}"}})
    assert {r.id for r in gitstate.open_store(repo).list_runs()} == {"t-str", "t-PosixPath"}


def test_cli_lists_threads_subgraphs_and_forks(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`git agentos runs` and `git agentos log` read LangGraph threads: a subgraph namespace and a
    fork are branches whose checkpoints show readable steps, nodes and triggers."""
    from click.testing import CliRunner

    from gitstate_cli.main import cli

    saver = GitCheckpointSaver(gitstate.open_store(repo))
    sub_scenario(saver)
    scenario(saver)
    monkeypatch.chdir(repo)

    def agentos(*args: str) -> str:
        result = CliRunner().invoke(cli, list(args), prog_name="git agentos")
        assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
        return result.stdout

    runs = {r["id"]: r for r in json.loads(agentos("runs", "--json"))}
    assert {"nested", "thread-a", "thread-b"} <= set(runs)
    assert runs["nested"]["workflow"] == "langgraph" and runs["nested"]["branches"] == 2
    assert "nested" in agentos("runs") and "langgraph" in agentos("runs")
    run = gitstate.open_store(repo).get_run("nested")
    sub = next(b for b in run.branches() if b.startswith("ns:sub:"))
    rows = json.loads(agentos("log", "nested", "--branch", sub, "--json"))
    assert rows and rows[-1]["trigger"] == "input" and rows[-1]["node"] is None  # no node ran (not "sub")
    assert {"inner_a", "inner_ask"} <= {r["node"] for r in rows[:-1]} <= {"inner_a", "inner_ask", None}
    assert rows[-1]["metadata"]["checkpoint_ns"].startswith("sub:")  # the subgraph's node in its parent
    # "step" is LangGraph's own (-1 for the subgraph's input), as log and show print it
    assert [r["step"] for r in rows] == list(range(len(rows) - 2, -2, -1))
    assert [r["step"] for r in rows] == [r["metadata"]["langgraph_step"] for r in rows]
    table = agentos("log", "nested", "--branch", sub)
    assert "inner_a" in table and "input" in table and "loop" in table
    main_rows = json.loads(agentos("log", "nested", "--json"))
    assert all(r["metadata"].get("checkpoint_id") for r in main_rows)
    fork = next(b for b in gitstate.open_store(repo).get_run("thread-a").branches() if b.startswith("main~"))
    fork_rows = json.loads(agentos("log", "thread-a", "--branch", fork, "--json"))
    assert "fork" in {r["trigger"] for r in fork_rows} or "update" in {r["trigger"] for r in fork_rows}
    assert "thread-a" in agentos("show", f"thread-a@{fork}")
    subjects = git(repo, "log", "--format=%s", run.ref(sub)).splitlines()
    assert subjects and all(s.split(" · ")[0] in ("checkpoint", "inner_a", "inner_ask") and " · step " in s
                            for s in subjects), subjects
    assert subjects[0].endswith(" · completed") and any(s.endswith(" · interrupted") for s in subjects)


class Fan(TypedDict):
    hits: Annotated[list[str], operator.add]


def fan_graph(saver: Any, width: int = 6) -> Any:
    g = StateGraph(Fan)
    names = [f"w{i}" for i in range(width)]
    for name in names:
        g.add_node(name, lambda s, name=name: {"hits": [name]})
        g.add_edge(START, name)
    g.add_node("join", lambda s: {"hits": ["join"]})
    g.add_edge(names, "join")
    g.add_edge("join", END)
    return g.compile(checkpointer=saver)


def test_one_saver_many_threads(repo: Path) -> None:
    saver = GitCheckpointSaver(gitstate.open_store(repo))
    graph = fan_graph(saver)
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            for j in range(3):
                out = graph.invoke({"hits": []}, {"configurable": {"thread_id": f"t{i}-{j}"}})
                assert sorted(out["hits"]) == sorted([f"w{k}" for k in range(6)] + ["join"])
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for i in range(4):
        for j in range(3):
            cfg = {"configurable": {"thread_id": f"t{i}-{j}"}}
            assert len(list(saver.list(cfg))) == len(list(InMemoryRun.history()))


class InMemoryRun:
    """The reference history length of fan_graph, computed once on InMemorySaver."""

    _cache: list[Any] | None = None

    @classmethod
    def history(cls) -> list[Any]:
        if cls._cache is None:
            mem = InMemorySaver()
            g = fan_graph(mem)
            cfg = {"configurable": {"thread_id": "x"}}
            g.invoke({"hits": []}, cfg)
            cls._cache = list(mem.list(cfg))
        return cls._cache


_CHILD = """
import sys
import gitstate
from gitstate.langgraph import GitCheckpointSaver
sys.path[:0] = ["tests", "tests/langgraph"]
from test_langgraph_graphs import chat_graph
from langchain_core.messages import HumanMessage
from langgraph.types import Command
saver = GitCheckpointSaver(gitstate.open_store(sys.argv[1]))
graph = chat_graph(saver)
for j in range(3):
    cfg = {"configurable": {"thread_id": f"proc-{sys.argv[2]}-{j}"}}
    graph.invoke({"messages": [HumanMessage(content="hi", id="h")], "log": []}, cfg)
    graph.invoke(Command(resume="yes"), cfg)
"""


def test_processes_write_different_threads(repo: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    procs = [subprocess.Popen([sys.executable, "-c", _CHILD, str(repo), str(i)], cwd=root,
                              stderr=subprocess.PIPE, text=True) for i in range(3)]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    saver = GitCheckpointSaver(gitstate.open_store(repo))
    graph = chat_graph(saver)
    for i in range(3):
        for j in range(3):
            st = graph.get_state({"configurable": {"thread_id": f"proc-{i}-{j}"}})
            assert st.values["log"] == ["agent", "tool", "review:yes"]
            assert st.next == ()
    assert git(repo, "fsck", "--strict", "--no-dangling").strip() == ""


def test_appending_a_message_costs_about_its_size(repo: Path) -> None:
    """Structural sharing: after 200 appends, the objects one more put writes are small."""
    store = gitstate.open_store(repo)
    saver = GitCheckpointSaver(store)
    from langgraph.checkpoint.base import empty_checkpoint
    msgs: list[dict[str, str]] = []
    cfg: dict[str, Any] = {"configurable": {"thread_id": "big", "checkpoint_ns": ""}}
    version: Any = None
    for i in range(201):
        msgs = msgs + [{"role": "user", "content": f"message {i} " + "lorem ipsum dolor " * 22}]
        version = saver.get_next_version(version, None)
        cp = empty_checkpoint()
        cp["channel_values"] = {"messages": msgs, "constant": "x" * 5000}
        cp["channel_versions"] = {"messages": version, "constant": "1"}
        if i == 200:
            store.wait_for_housekeeping()  # a merge deleting packs under cat-file hides objects
            before = set(_loose_and_packed(repo))
        cfg = saver.put(cfg, cp, {"source": "loop", "step": i}, {"messages": version} if i else
                        {"messages": version, "constant": "1"})
    store.wait_for_housekeeping()
    new = set(_loose_and_packed(repo)) - before
    repo_obj = store.repo
    written = sum(len(repo_obj.odb.read(o)[1]) for o in new)
    total = sum(len(m["content"]) for m in msgs)
    assert written < 16_000, written  # one chunk of ≤32 messages + small trees, commit, meta
    assert total > 80_000
    tup = saver.get_tuple(cfg)
    assert tup is not None and tup.checkpoint["channel_values"]["messages"] == msgs
    assert tup.checkpoint["channel_values"]["constant"] == "x" * 5000


def _loose_and_packed(repo: Path) -> list[str]:
    out = git(repo, "cat-file", "--batch-all-objects", "--batch-check=%(objectname)")
    return out.split()


def test_writes_on_an_inner_checkpoint_and_re_put(repo: Path) -> None:
    """put_writes on a checkpoint that already has children rewrites the line (ids stay), and a
    checkpoint id put twice replaces the stored checkpoint in place."""
    from langgraph.checkpoint.base import empty_checkpoint

    saver = GitCheckpointSaver(gitstate.open_store(repo))
    cfg: dict[str, Any] = {"configurable": {"thread_id": "rw", "checkpoint_ns": ""}}
    configs = []
    for i in range(3):
        cp = empty_checkpoint()
        cp["channel_values"] = {"n": i}
        cp["channel_versions"] = {"n": str(i + 1)}
        cfg = saver.put(cfg, cp, {"source": "loop", "step": i}, {"n": str(i + 1)})
        configs.append(cfg)
    saver.put_writes(configs[0], [("n", 10), ("__error__", "boom")], "task-a", "p")
    first = saver.get_tuple(configs[0])
    assert first is not None and first.pending_writes == [("task-a", "__error__", "boom"), ("task-a", "n", 10)]
    last = saver.get_tuple(configs[2])
    assert last is not None and last.parent_config == {"configurable": {**configs[1]["configurable"]}}
    assert [t.checkpoint["channel_values"]["n"] for t in saver.list({"configurable": {"thread_id": "rw"}})] == [2, 1, 0]
    # same id again: replaced, not duplicated
    again = empty_checkpoint()
    again["id"] = configs[1]["configurable"]["checkpoint_id"]
    again["channel_values"] = {"n": 99}
    again["channel_versions"] = {"n": "9"}
    saver.put({"configurable": {**configs[0]["configurable"]}}, again, {"source": "update", "step": 1}, {"n": "9"})
    listed = list(saver.list({"configurable": {"thread_id": "rw"}}))
    assert [t.checkpoint["channel_values"]["n"] for t in listed] == [2, 99, 0]
    # a fresh saver (another process) sees the same thing
    other = GitCheckpointSaver(gitstate.open_store(repo))
    assert [t.checkpoint["channel_values"]["n"] for t in other.list({"configurable": {"thread_id": "rw"}})] == [2, 99, 0]
    assert other.get_tuple(configs[0]).pending_writes == first.pending_writes  # type: ignore[union-attr]
    assert git(repo, "fsck", "--strict", "--no-dangling").strip() == ""
