"""What `git agentos runs` says of LangGraph threads is what happened: completed when the graph
reached END (also after an interrupt and a resume), interrupted while it waits at an interrupt,
stopped before a task that did not run (a breakpoint, a process that died), failed when a node
raised; and each checkpoint names the node that produced it."""

from __future__ import annotations

import json
import operator
import os
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from click.testing import CliRunner

import gitstate

pytest.importorskip("langgraph")

from langgraph.graph import END, START, StateGraph  # noqa: E402
from langgraph.types import Command, Send, interrupt  # noqa: E402

from gitstate.langgraph import GitCheckpointSaver  # noqa: E402
from gitstate_cli.main import cli  # noqa: E402


class S(TypedDict):
    msgs: Annotated[list[str], operator.add]


def _app(saver: GitCheckpointSaver, ask: bool = False, fail: bool = False, before: list[str] | None = None) -> Any:
    def first(state: S) -> dict[str, list[str]]:
        return {"msgs": ["first"]}

    def second(state: S) -> dict[str, list[str]]:
        if fail:
            raise ValueError("tool crashed")
        answer = interrupt("go on?") if ask else "auto"
        return {"msgs": [str(answer)]}

    graph = StateGraph(S)
    graph.add_node("first", first)
    graph.add_node("second", second)
    graph.add_edge(START, "first")
    graph.add_edge("first", "second")
    graph.add_edge("second", END)
    return graph.compile(checkpointer=saver, interrupt_before=before)


def _runs(repo: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, dict[str, Any]]:
    monkeypatch.chdir(repo)
    result = CliRunner().invoke(cli, ["runs", "--json"], prog_name="git agentos")
    assert result.exit_code == 0, result.output
    return {r["id"]: r for r in json.loads(result.stdout)}


def test_status_follows_what_the_graph_did(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    saver = GitCheckpointSaver(gitstate.open_store(repo))
    done = {"configurable": {"thread_id": "done"}}
    _app(saver).invoke({"msgs": []}, done)
    waiting = {"configurable": {"thread_id": "waiting"}}
    _app(saver, ask=True).invoke({"msgs": []}, waiting)
    resumed = {"configurable": {"thread_id": "resumed"}}
    _app(saver, ask=True).invoke({"msgs": []}, resumed)
    _app(saver, ask=True).invoke(Command(resume="yes"), resumed)
    broken = {"configurable": {"thread_id": "broken"}}
    with pytest.raises(ValueError):
        _app(saver, fail=True).invoke({"msgs": []}, broken)
    runs = _runs(repo, monkeypatch)
    assert {k: runs[k]["status"] for k in ("done", "waiting", "resumed", "broken")} == {
        "done": "completed", "waiting": "interrupted", "resumed": "completed", "broken": "failed"}
    assert runs["waiting"]["node"] == "first"  # the checkpoint left after "first" ran


def test_checkpoints_name_the_node_that_ran(repo: Path) -> None:
    saver = GitCheckpointSaver(gitstate.open_store(repo))
    _app(saver).invoke({"msgs": []}, {"configurable": {"thread_id": "t"}})
    run = gitstate.open_store(repo).get_run("t")
    assert [(cp.node, cp.trigger, cp.status) for cp in run.history()][:3] == [
        ("second", "loop", "completed"), ("first", "loop", "running"), (None, "loop", "running")]


def _cli(repo: Path, monkeypatch: pytest.MonkeyPatch, *args: str) -> str:
    monkeypatch.chdir(repo)
    result = CliRunner().invoke(cli, list(args), prog_name="git agentos")
    assert result.exit_code == 0, (args, result.output)
    return result.stdout


def test_a_thread_stopped_before_a_node_is_stopped(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Interrupted only when a question is pending (interrupt() inside a node); stopped when the
    latest checkpoint has a next task that did not write. A graph compiled with interrupt_before
    stops with "second" scheduled and no interrupt write, as a process that died before "second"
    wrote would leave it: stopped (not running, not interrupted) in runs, branches, the tip's row
    of log, show and the view; resumed to END, completed. interrupt(): interrupted, then completed."""
    from gitstate.view.data import ViewData

    saver = GitCheckpointSaver(gitstate.open_store(repo))
    graph = StateGraph(S)
    graph.add_node("first", lambda s: {"msgs": ["first"]})
    graph.add_node("second", lambda s: {"msgs": ["second"]})
    graph.add_edge(START, "first")
    graph.add_edge("first", "second")
    graph.add_edge("second", END)
    app = graph.compile(checkpointer=saver, interrupt_before=["second"])
    before = {"configurable": {"thread_id": "before"}}
    app.invoke({"msgs": []}, before)
    assert app.get_state(before).next == ("second",) and not app.get_state(before).interrupts
    asked = {"configurable": {"thread_id": "asked"}}
    _app(saver, ask=True).invoke({"msgs": []}, asked)
    assert _app(saver, ask=True).get_state(asked).interrupts
    runs = _runs(repo, monkeypatch)
    assert (runs["before"]["status"], runs["asked"]["status"]) == ("stopped", "interrupted")
    table = _cli(repo, monkeypatch, "runs")
    assert sorted(line.split()[2] for line in table.splitlines()[1:]) == ["interrupted", "stopped"]
    assert json.loads(_cli(repo, monkeypatch, "branches", "before", "--json"))[0]["status"] == "stopped"
    assert json.loads(_cli(repo, monkeypatch, "branches", "asked", "--json"))[0]["status"] == "interrupted"
    log = _cli(repo, monkeypatch, "log", "before").splitlines()
    at = log[0].split().index("STATUS") - 1  # the header's "LANGGRAPH ID" is two words
    assert log[1].split()[at] == "stopped" and log[2].split()[at] == "running"  # the tip; one that went on
    assert "status:       stopped" in _cli(repo, monkeypatch, "show", "before")
    assert "status:       running" in _cli(repo, monkeypatch, "show", "before~1")
    assert "status:       interrupted" in _cli(repo, monkeypatch, "show", "asked")
    view = ViewData(gitstate.open_store(repo))
    assert {r["id"]: r["status"] for r in view.runs()["runs"]}["before"] == "stopped"
    rows = view.graph("before")["rows"]
    assert rows[0]["status"] == "stopped" and rows[1]["status"] == "running"
    assert view.checkpoint(rows[0]["id"])["status"] == "stopped"
    # resumed to END: completed
    app.invoke(None, before)
    _app(saver, ask=True).invoke(Command(resume="yes"), asked)
    runs = _runs(repo, monkeypatch)
    assert (runs["before"]["status"], runs["asked"]["status"]) == ("completed", "completed")


_DIES = r"""
import operator, os, sys
from typing import Annotated, TypedDict
from langgraph.graph import END, START, StateGraph
import gitstate
from gitstate.langgraph import GitCheckpointSaver

class S(TypedDict):
    msgs: Annotated[list[str], operator.add]

def second(state):
    print("inside", flush=True)
    os._exit(0)  # as kill -9 would: the task never writes

graph = StateGraph(S)
graph.add_node("first", lambda s: {"msgs": ["first"]})
graph.add_node("second", second)
graph.add_edge(START, "first")
graph.add_edge("first", "second")
graph.add_edge("second", END)
app = graph.compile(checkpointer=GitCheckpointSaver(gitstate.open_store(sys.argv[1])))
app.invoke({"msgs": []}, {"configurable": {"thread_id": "died"}}, durability="sync")
"""


def test_a_thread_whose_process_died_in_a_node_is_stopped_not_interrupted(
        repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A process killed while a node runs leaves no interrupt to answer: the thread is stopped, and
    no node of it reads interrupted."""
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", _DIES, str(repo)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(root)}, check=False)
    assert done.stdout == "inside\n", done.stderr
    assert _runs(repo, monkeypatch)["died"]["status"] == "stopped"
    assert "status:       stopped" in _cli(repo, monkeypatch, "show", "died")
    nodes = json.loads(_cli(repo, monkeypatch, "nodes", "died", "--json"))
    assert [(n["node"], n["status"]) for n in nodes] == [("first", "completed")]


def test_a_thread_stopped_before_a_join_is_stopped_and_the_join_is_named(repo: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A node reached by an edge from several nodes (add_edge(["a", "b"], "join")) is triggered by
    a join channel (join:a+b:join), not by branch:to:join: stopped before it the thread is
    stopped with "join" next (not completed); resumed, the checkpoint it wrote names it."""
    saver = GitCheckpointSaver(gitstate.open_store(repo))
    graph = StateGraph(S)
    graph.add_node("a", lambda s: {"msgs": ["a"]})
    graph.add_node("b", lambda s: {"msgs": ["b"]})
    graph.add_node("join", lambda s: {"msgs": ["joined"]})
    graph.add_edge(START, "a")
    graph.add_edge(START, "b")
    graph.add_edge(["a", "b"], "join")
    graph.add_edge("join", END)
    app = graph.compile(checkpointer=saver, interrupt_before=["join"])
    config = {"configurable": {"thread_id": "fan"}}
    app.invoke({"msgs": []}, config)
    assert app.get_state(config).next == ("join",)
    assert _runs(repo, monkeypatch)["fan"]["status"] == "stopped"
    shown = json.loads(_cli(repo, monkeypatch, "show", "fan", "--json"))
    assert shown["langgraph"]["next"] == ["join"] and shown["status"] == "running"  # JSON: as recorded
    assert shown["line_status"] == "stopped"
    assert "status:       stopped" in _cli(repo, monkeypatch, "show", "fan")  # the line's status
    app.invoke(None, config)
    assert sorted(app.get_state(config).values["msgs"]) == ["a", "b", "joined"]
    assert _runs(repo, monkeypatch)["fan"]["status"] == "completed"
    run = gitstate.open_store(repo).get_run("fan")
    assert [cp.node for cp in run.history()][:2] == ["join", "a,b"]
    assert json.loads(_cli(repo, monkeypatch, "show", "fan", "--json"))["langgraph"]["next"] == []
    nodes = {n["node"] for n in json.loads(_cli(repo, monkeypatch, "nodes", "fan", "--json"))}
    assert {"a", "b", "join"} <= nodes


def test_a_thread_is_summarised_on_its_latest_line(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Time travel writes the new checkpoints on a fork line (main~<id>): the thread's status,
    node and step are those of its latest checkpoint, the one LangGraph's get_state returns."""
    saver = GitCheckpointSaver(gitstate.open_store(repo))
    app = _app(saver, ask=True)
    cfg = {"configurable": {"thread_id": "tt"}}
    app.invoke({"msgs": []}, cfg)
    app.invoke(Command(resume="yes"), cfg)
    assert _runs(repo, monkeypatch)["tt"]["status"] == "completed"
    older = next(s for s in app.get_state_history(cfg) if s.next == ("second",))
    app.invoke(None, older.config)  # replay from before "second": stops at its interrupt again
    latest = app.get_state(cfg)
    assert latest.interrupts and latest.config["configurable"]["checkpoint_id"] != \
        older.config["configurable"]["checkpoint_id"]
    summary = _runs(repo, monkeypatch)["tt"]
    assert summary["branch"].startswith("main~") and summary["status"] == "interrupted"
    assert summary["step"] == latest.metadata["step"]


def test_a_thread_that_sent_tasks_and_reached_end_is_completed_and_names_them(repo: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """``Send`` fans out to a node: once the sent tasks ran, LangGraph keeps ``__pregel_tasks`` as
    an empty list, which is no pending task; the checkpoint the sent tasks wrote names their node,
    and so does one reached through ``Command(goto=Send(...))``."""

    def plan(state: S) -> dict[str, list[str]]:
        return {}

    def work(arg: int) -> dict[str, list[str]]:
        return {"msgs": [f"work {arg}"]}

    def route(state: S) -> Command[str]:
        return Command(goto=Send("work", 9))

    graph = StateGraph(S)
    graph.add_node("plan", plan)
    graph.add_node("work", work)
    graph.add_node("route", route)
    graph.add_edge(START, "plan")
    graph.add_conditional_edges("plan", lambda s: [Send("work", i) for i in range(2)], ["work"])
    graph.add_edge("work", END)
    saver = GitCheckpointSaver(gitstate.open_store(repo))
    app = graph.compile(checkpointer=saver)
    config = {"configurable": {"thread_id": "fan"}}
    app.invoke({"msgs": []}, config)
    assert app.get_state(config).next == ()
    assert _runs(repo, monkeypatch)["fan"]["status"] == "completed"
    run = saver.store.open_run("fan")
    assert [cp.node for cp in run.history()][0] == "work"
    assert [n.node for n in run.nodes()] == ["plan", "work"]

    other = StateGraph(S)
    other.add_node("route", route, destinations=("work",))
    other.add_node("work", work)
    other.add_edge(START, "route")
    other.add_edge("work", END)
    app = other.compile(checkpointer=saver)
    config = {"configurable": {"thread_id": "goto"}}
    app.invoke({"msgs": []}, config)
    assert app.get_state(config).values == {"msgs": ["work 9"]}
    assert _runs(repo, monkeypatch)["goto"]["status"] == "completed"
    assert [cp.node for cp in saver.store.open_run("goto").history()][0] == "work"


class Q(TypedDict):
    q: str


def _asking(saver: GitCheckpointSaver) -> Any:
    def ask(state: Q) -> dict[str, str]:
        answer = interrupt("give number")
        return {"q": str(int(answer))}

    graph = StateGraph(Q)
    graph.add_node("ask", ask)
    graph.add_edge(START, "ask")
    graph.add_edge("ask", END)
    return graph.compile(checkpointer=saver)


@pytest.mark.parametrize("edited", [False, True])
def test_a_node_that_raised_on_resume_failed(repo: Path, monkeypatch: pytest.MonkeyPatch, edited: bool) -> None:
    """A node stopped at its interrupt, resumed, then raised: nodes says it failed, as runs, log
    and LangGraph do (its interrupt write stays beside the error on the checkpoint). So too when the
    state was updated while it waited (the error goes to the update's checkpoint, the interrupt
    stays on the earlier one)."""
    from gitstate.view.data import ViewData

    app = _asking(GitCheckpointSaver(gitstate.open_store(repo)))
    cfg = {"configurable": {"thread_id": "t"}}
    app.invoke({"q": "x"}, cfg)
    if edited:
        app.update_state(cfg, {"q": "y"})
    with pytest.raises(ValueError):
        app.invoke(Command(resume="nan?"), cfg)
    state = app.get_state(cfg)
    assert [(t.name, bool(t.error)) for t in state.tasks] == [("ask", True)]
    tip = state.config["configurable"]["checkpoint_id"]
    assert _runs(repo, monkeypatch)["t"]["status"] == "failed"
    log = _cli(repo, monkeypatch, "log", "t").splitlines()
    assert log[1].split()[log[0].split().index("STATUS") - 1] == "failed"  # "LANGGRAPH ID" is two words
    nodes = json.loads(_cli(repo, monkeypatch, "nodes", "t", "--json"))
    assert [(n["node"], n["status"]) for n in nodes] == [("ask", "failed")]
    shown = json.loads(_cli(repo, monkeypatch, "show", nodes[0]["exit"], "--json"))
    assert shown["langgraph"]["checkpoint_id"] == tip  # where it failed: the thread's latest checkpoint
    assert [line.split()[:2] for line in _cli(repo, monkeypatch, "nodes", "t").splitlines()[1:]] == [["ask", "failed"]]
    view = ViewData(gitstate.open_store(repo)).nodes("t")["nodes"]
    assert [(n["node"], n["status"]) for n in view] == [("ask", "failed")]


def test_a_thread_rolled_back_to_a_step_whose_tasks_wrote_is_running_as_get_state_says(
        repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    saver = GitCheckpointSaver(gitstate.open_store(repo))
    config = {"configurable": {"thread_id": "back"}}
    app = _app(saver)
    app.invoke({"msgs": []}, config)
    monkeypatch.chdir(repo)
    rolled = CliRunner().invoke(cli, ["rollback", "back", "~1"], prog_name="git agentos")
    assert rolled.exit_code == 0, rolled.output
    state = app.get_state(config)
    assert state.next == () and state.values["msgs"] == ["first", "auto"]  # "second" wrote already
    assert _runs(repo, monkeypatch)["back"]["status"] == "running"
    tip = gitstate.open_store(repo).get_run("back").head("main")
    view = tip.langgraph_view(live=True) if tip is not None else None
    assert view is not None and view["next"] == [] and tip.langgraph["next"] == ["second"]  # type: ignore[index, union-attr]
    shown = CliRunner().invoke(cli, ["show", "back"], prog_name="git agentos")
    assert shown.exit_code == 0 and "status:       running" in shown.output and "next:" not in shown.output
    # a task that wrote only an interrupt has not run to its end: still next, as get_state says
    asked = {"configurable": {"thread_id": "asked"}}
    _app(saver, ask=True).invoke({"msgs": []}, asked)
    assert _app(saver, ask=True).get_state(asked).next == ("second",)
    assert _runs(repo, monkeypatch)["asked"]["status"] == "interrupted"
    waiting = gitstate.open_store(repo).get_run("asked").head("main")
    assert waiting is not None and waiting.langgraph_view(live=True)["next"] == ["second"]  # type: ignore[index]


def test_sent_tasks_that_wrote_are_not_next() -> None:
    from gitstate.format import lgtree

    records = [["t1", "msgs", "msgpack", b"", "~__pregel_push, 0000000001", 0],
               ["t2", "__interrupt__", "msgpack", b"", "~__pregel_push, 0000000002", 0],
               ["t3", "__no_writes__", "null", b"", "~__pregel_pull, plan", 0],
               ["t4", "__error__", "msgpack", b"", "~__pregel_pull, review", 0],
               ["t5", "x", "msgpack", b"", "~__pregel_push, ~__pregel_pull, plan, 0000000002, t9", 0],
               ["t6", "y", "msgpack", b"", "~__pregel_push, 0000000003, 0000000000", 0],  # as LangGraph runs it
               ["t7", "z", "msgpack", b"", "~__pregel_pull, review, node_error_handler, 0000000000", 0]]
    assert lgtree.ran_tasks(records) == ({"plan"}, {1, 3})
    packets = [{"args": ["work", 1]}, {"args": ["work", 2]}, {"args": ["check", 3]}]
    assert lgtree.send_targets(packets, skip={1}) == {"work", "check"}
    assert lgtree.send_targets(packets, skip={0, 1}) == {"check"}


def test_show_json_of_a_tip_has_the_line_status_the_text_shows(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _app(GitCheckpointSaver(gitstate.open_store(repo)), before=["second"]).invoke(
        {"msgs": []}, {"configurable": {"thread_id": "ib"}})
    monkeypatch.chdir(repo)
    shown = CliRunner().invoke(cli, ["show", "ib", "--json"], prog_name="git agentos")
    text = CliRunner().invoke(cli, ["show", "ib"], prog_name="git agentos").output
    data = json.loads(shown.stdout)
    assert data["line_status"] == "stopped" and "status:       stopped" in text
    assert data["status"] == "running"  # what the checkpoint recorded, as log --json says
    assert data["langgraph"]["next"] == ["second"] and _runs(repo, monkeypatch)["ib"]["status"] == "stopped"
    logged = json.loads(CliRunner().invoke(cli, ["log", "ib", "--json"], prog_name="git agentos").stdout)
    assert logged[0]["status"] == "running"  # log keeps what the checkpoint recorded
