"""What `git agentos runs` says of LangGraph threads is what happened: completed when the graph
reached END (also after an interrupt and a resume), interrupted while it waits at an interrupt,
failed when a node raised; and each checkpoint names the node that produced it."""

from __future__ import annotations

import json
import operator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from click.testing import CliRunner

import gitstate

pytest.importorskip("langgraph")

from langgraph.graph import END, START, StateGraph  # noqa: E402
from langgraph.types import Command, interrupt  # noqa: E402

from gitstate.langgraph import GitCheckpointSaver  # noqa: E402
from gitstate_cli.main import cli  # noqa: E402


class S(TypedDict):
    msgs: Annotated[list[str], operator.add]


def _app(saver: GitCheckpointSaver, ask: bool = False, fail: bool = False) -> Any:
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
    return graph.compile(checkpointer=saver)


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
