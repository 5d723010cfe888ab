"""A bare RUN of a LangGraph thread names the thread as LangGraph sees it now: after time travel
(the graph run again from an earlier checkpoint, or update_state on one) the thread's latest
checkpoint is on a fork line main~<id>, and show, log, diff, nodes, fork, rollback, undo and the
view read that line, as `runs` and get_state do; RUN@main still names the first line. A plain
run's bare RUN stays its main branch."""

from __future__ import annotations

import json
import operator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from click.testing import CliRunner

import gitstate

pytest.importorskip("langgraph")

from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from langgraph.graph import END, START, StateGraph  # noqa: E402

from gitstate.langgraph import GitCheckpointSaver  # noqa: E402
from gitstate.view.data import ViewData  # noqa: E402
from gitstate_cli.main import cli  # noqa: E402


class S(TypedDict):
    msgs: Annotated[list[str], operator.add]


def _app(saver: Any) -> Any:
    graph = StateGraph(S)
    graph.add_node("first", lambda s: {"msgs": ["first"]})
    graph.add_node("second", lambda s: {"msgs": [f"second after {len(s['msgs'])}"]})
    graph.add_edge(START, "first")
    graph.add_edge("first", "second")
    graph.add_edge("second", END)
    return graph.compile(checkpointer=saver)


def _cli(*args: str, input: str | None = None) -> str:
    result = CliRunner().invoke(cli, list(args), input=input, prog_name="git agentos")
    assert result.exit_code == 0, (args, result.output)
    return result.stdout


def _json(*args: str, input: str | None = None) -> Any:
    return json.loads(_cli(*args, "--json", input=input))


def _cid(config: Any) -> str:
    return str(config["configurable"]["checkpoint_id"])


def _travel(saver: Any, how: str) -> tuple[Any, dict[str, Any], Any]:
    """Run the graph, then travel back to before "second": run it again from there (``replay``) or
    edit the state there (``update``). Returns the app, the thread's config and the old state."""
    app = _app(saver)
    cfg: dict[str, Any] = {"configurable": {"thread_id": "tt"}}
    app.invoke({"msgs": []}, cfg)
    older = next(s for s in app.get_state_history(cfg) if s.next == ("second",))
    if how == "replay":
        app.invoke(None, older.config)
    else:
        app.update_state(older.config, {"msgs": ["edited"]})
    return app, cfg, older


@pytest.mark.parametrize("how", ["replay", "update"])
def test_bare_run_of_a_thread_is_its_latest_line(repo: Path, monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    saver = GitCheckpointSaver(gitstate.open_store(repo))
    app, cfg, older = _travel(saver, how)
    mem_app, mem_cfg, _ = _travel(InMemorySaver(), how)
    latest = app.get_state(cfg)
    assert latest.values == mem_app.get_state(mem_cfg).values  # the same graph on LangGraph's own saver
    line = [_cid(latest.config)]  # the latest checkpoint and its ancestors, as LangGraph links them
    while (parent := app.get_state(cfg | {"configurable": {**cfg["configurable"], "checkpoint_id": line[-1]}})
           .parent_config) is not None:
        line.append(_cid(parent))
    monkeypatch.chdir(repo)
    summary = next(r for r in _json("runs") if r["id"] == "tt")
    fork = summary["branch"]
    assert fork.startswith("main~")

    shown = _json("show", "tt")
    assert shown["langgraph"]["checkpoint_id"] == line[0] and shown["branch"] == fork
    assert shown["state"]["msgs"] == latest.values["msgs"]
    assert f"branch:       {fork}" in _cli("show", "tt")
    log = _json("log", "tt")
    assert [r["metadata"]["checkpoint_id"] for r in log] == line
    assert log == _json("log", f"tt@{fork}")
    assert [r["metadata"]["checkpoint_id"] for r in _json("log", "tt~1")] == line[1:]
    assert _json("show", "tt~1")["langgraph"]["checkpoint_id"] == line[1]
    # RUN@main and --branch main still name the first line, which the thread has left
    main = _json("log", "tt@main")
    assert main[0]["branch"] == "main" and main[0]["metadata"]["checkpoint_id"] not in line
    assert _json("log", "tt", "--branch", "main") == main
    assert _json("show", "tt@main")["id"] == main[0]["id"]
    diff = _json("diff", "tt@main", "tt")
    assert (diff["a"], diff["b"]) == (main[0]["id"], shown["id"])
    nodes = _json("nodes", "tt")
    assert nodes and {n["branch"] for n in nodes} == {fork}
    assert nodes == _json("nodes", f"tt@{fork}")
    assert {n["branch"] for n in _json("nodes", "tt@main")} == {"main"}
    if how == "replay":  # "second" ran again on the new line
        assert _json("show", "tt:node:second")["id"] == shown["id"] != _json("show", "tt@main:node:second")["id"]
    # commands that act on a branch take the same one
    forked = _json("fork", "tt", "~0", "copy")
    assert (forked["at"]["id"], forked["from_branch"]) == (shown["id"], fork)
    plan = _json("rollback", "tt", "~1", "--dry-run")
    assert (plan["branch"], plan["from"], plan["to"]["id"]) == (fork, shown["id"], log[1]["id"])
    # the view shows that line first: its tip is the graph's first row, the newest checkpoint
    graph = ViewData(gitstate.open_store(repo)).graph("tt")
    assert graph["branches"][0]["name"] == fork and graph["rows"][0]["id"] == shown["id"]
    assert ViewData(gitstate.open_store(repo)).nodes("tt")["nodes"][0]["branch"] == fork


def test_rollback_of_a_thread_says_which_line_to_undo(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A rollback of a thread's latest line may make another line the latest: its undo hint names
    the line it moved (RUN@BRANCH), and undo of that line puts the thread back."""
    saver = GitCheckpointSaver(gitstate.open_store(repo))
    app, cfg, older = _travel(saver, "replay")
    latest = _cid(app.get_state(cfg).config)
    monkeypatch.chdir(repo)
    fork = _json("show", "tt")["branch"]
    log = _json("log", "tt")
    back_to = next(r for r in log if r["branch"] == "main")  # the fork point: main's, older than main's tip
    out = _cli("rollback", "tt", back_to["id"])
    assert f"undo with: git agentos undo 'tt@{fork}'" in out
    assert _json("show", "tt")["branch"] == "main"  # main's tip is now the thread's latest checkpoint
    assert _cid(app.get_state(cfg).config) == _json("show", "tt")["langgraph"]["checkpoint_id"]
    undone = _json("undo", f"tt@{fork}")
    assert undone["branch"] == fork and undone["tip"]["metadata"]["checkpoint_id"] == latest
    assert _json("show", "tt")["langgraph"]["checkpoint_id"] == latest == _cid(app.get_state(cfg).config)


def test_a_plain_run_keeps_main(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only a LangGraph thread follows its latest line: a plain run's bare RUN is main even when
    another branch holds its newest checkpoint, and its undo hint is the bare run id."""
    monkeypatch.chdir(repo)
    first = _json("checkpoint", "r", "--state", "-", "--node", "a", input="{}")
    second = _json("checkpoint", "r", "--node", "b")
    _json("fork", "r", "~1", "alt")
    newest = _json("checkpoint", "r@alt", "--node", "c")
    assert _json("show", "r")["id"] == second["id"] != newest["id"]
    assert [n["branch"] for n in _json("nodes", "r")] == ["main", "main"]
    assert _json("fork", "r", "~1", "other")["from_branch"] == "main"
    out = _cli("rollback", "r", "~1")
    assert "undo with: git agentos undo r\n" in out and _json("show", "r")["id"] == first["id"]
