"""The node a LangGraph checkpoint names is the node that ran, with real graphs: in a subgraph's
namespace its own nodes (not the subgraph's node in the parent graph, which no checkpoint of the
subgraph's line produced: `nodes` listed it completed twice while it failed), a failing inner node
failed there and the subgraph's node failed in the parent's line; with durability="exit" (one
checkpoint per invocation) every node that ran since the previous stored checkpoint, as LangGraph's
own stream of updates reports them."""

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
from langgraph.types import Command, interrupt  # noqa: E402
from lg_helpers import chain  # noqa: E402

from gitstate.format import lgtree  # noqa: E402
from gitstate.langgraph import GitCheckpointSaver  # noqa: E402
from gitstate_cli.main import cli  # noqa: E402


class S(TypedDict):
    msgs: Annotated[list[str], operator.add]


def _nested(saver: Any, broken: list[bool]) -> Any:
    """prep -> child (a subgraph: inner_ok -> inner_bad, which raises while ``broken[0]``) -> after."""

    def inner_bad(state: S) -> dict[str, list[str]]:
        if broken[0]:
            raise ValueError("inner tool crashed")
        return {"msgs": ["inner_bad"]}

    sub = chain(S, ("inner_ok", lambda s: {"msgs": ["inner_ok"]}), ("inner_bad", inner_bad))
    graph = chain(S, ("prep", lambda s: {"msgs": ["prep"]}), ("child", sub.compile()),
                  ("after", lambda s: {"msgs": ["after"]}))
    return graph.compile(checkpointer=saver)


def _cli(repo: Path, *args: str) -> Any:
    result = CliRunner().invoke(cli, [*args, "--json"], prog_name="git agentos")
    assert result.exit_code == 0, (args, result.output)
    return json.loads(result.stdout)


def _nodes(repo: Path, ref: str) -> list[tuple[str, str]]:
    return [(n["node"], n["status"]) for n in _cli(repo, "nodes", ref)]


def _sub_line(repo: Path, thread: str) -> str:
    return next(b["branch"] for b in _cli(repo, "branches", thread) if b["branch"].startswith("ns:child:"))


@pytest.mark.parametrize("durability", ["sync", "async"])
def test_a_failed_subgraph_node_is_named_and_failed(repo: Path, monkeypatch: pytest.MonkeyPatch,
                                                    durability: str) -> None:
    saver = GitCheckpointSaver(gitstate.open_store(repo))
    broken = [True]
    app, mem = _nested(saver, broken), _nested(InMemorySaver(), broken)
    cfg: dict[str, Any] = {"configurable": {"thread_id": "t"}}
    for graph in (app, mem):
        with pytest.raises(ValueError, match="inner tool crashed"):
            graph.invoke({"msgs": []}, cfg, durability=durability)
    failed = app.get_state(cfg)
    assert [(t.name, bool(t.error)) for t in failed.tasks] == [("child", True)]
    assert [(t.name, bool(t.error)) for t in mem.get_state(cfg).tasks] == [("child", True)]
    monkeypatch.chdir(repo)
    assert _nodes(repo, "t") == [("prep", "completed"), ("child", "failed")]
    sub = _sub_line(repo, "t")
    assert _nodes(repo, f"t@{sub}") == [("inner_ok", "completed"), ("inner_bad", "failed")]
    assert [r["node"] for r in _cli(repo, "log", f"t@{sub}")] == ["inner_ok", None, None]  # not "child"
    broken[0] = False
    for graph in (app, mem):
        graph.invoke(None, cfg, durability=durability)
    assert app.get_state(cfg).values == mem.get_state(cfg).values
    assert _nodes(repo, "t") == [("prep", "completed"), ("child", "completed"), ("after", "completed")]
    assert _nodes(repo, f"t@{sub}") == [("inner_ok", "completed"), ("inner_bad", "completed")]


def test_durability_exit_names_every_node_that_ran_since_the_stored_parent(repo: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """durability="exit" stores one checkpoint per invocation: it names the nodes LangGraph reports
    as having run in that invocation, in the order of their (last) runs; the subgraph's line names
    its inner node, and the failing inner node and the subgraph's node are failed."""

    def ask(state: S) -> dict[str, list[str]]:
        return {"msgs": [f"ask:{interrupt('ok?')}"]}

    graph = StateGraph(S)
    for name in ("a", "b", "c"):
        graph.add_node(name, lambda s, name=name: {"msgs": [name]})
    graph.add_node("ask", ask)
    graph.add_edge(START, "a")
    graph.add_edge("a", "b")
    graph.add_edge("b", "ask")
    graph.add_edge("ask", "c")
    graph.add_edge("c", END)
    app = graph.compile(checkpointer=GitCheckpointSaver(gitstate.open_store(repo)))
    cfg: dict[str, Any] = {"configurable": {"thread_id": "x"}}
    ran = []
    for given in ({"msgs": []}, Command(resume="yes"), {"msgs": ["again"]}):
        updates = app.stream(given, cfg, durability="exit", stream_mode="updates")
        ran.append(",".join(node for update in updates for node in update if node != "__interrupt__"))
    assert ran == ["a,b", "ask,c", "a,b"]
    monkeypatch.chdir(repo)
    rows = _cli(repo, "log", "x")
    assert [r["node"] for r in rows] == ran[::-1] and [r["trigger"] for r in rows] == ["loop"] * 3
    assert _nodes(repo, "x") == [("a", "completed"), ("b", "completed"), ("ask", "completed"), ("c", "completed"),
                                 ("a", "completed"), ("b", "completed"), ("ask", "interrupted")]

    broken = [True]
    nested = _nested(GitCheckpointSaver(gitstate.open_store(repo)), broken)
    cfg = {"configurable": {"thread_id": "t"}}
    with pytest.raises(ValueError, match="inner tool crashed"):
        nested.invoke({"msgs": []}, cfg, durability="exit")
    assert _nodes(repo, "t") == [("prep", "completed"), ("child", "failed")]
    sub = _sub_line(repo, "t")
    assert _nodes(repo, f"t@{sub}") == [("inner_ok", "completed"), ("inner_bad", "failed")]
    broken[0] = False
    updates = nested.stream(None, cfg, durability="exit", stream_mode="updates")
    assert [node for update in updates for node in update] == ["child", "after"]
    assert _cli(repo, "log", "t")[0]["node"] == "child,after"
    assert _nodes(repo, "t") == [("prep", "completed"), ("child", "completed"), ("after", "completed")]


def test_subgraph_lines_written_before_name_the_subgraph_node_only_in_log(repo: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Checkpoints written before this version named the subgraph's node on the subgraph's input
    and first step (no node of the subgraph ran there): `log` shows what they recorded, `nodes`
    leaves those names out."""
    original = GitCheckpointSaver._meta

    def old_meta(self: GitCheckpointSaver, thread_id: str, ns: str, *args: Any) -> dict[str, Any]:
        meta = original(self, thread_id, ns, *args)
        meta["node"] = meta["node"] or lgtree.subgraph_node(ns)  # the earlier writer's fallback
        return meta

    monkeypatch.setattr(GitCheckpointSaver, "_meta", old_meta)
    broken = [True]
    app = _nested(GitCheckpointSaver(gitstate.open_store(repo)), broken)
    cfg: dict[str, Any] = {"configurable": {"thread_id": "old"}}
    with pytest.raises(ValueError):
        app.invoke({"msgs": []}, cfg)
    monkeypatch.chdir(repo)
    sub = _sub_line(repo, "old")
    assert [r["node"] for r in _cli(repo, "log", f"old@{sub}")] == ["inner_ok", "child", "child"]
    assert _nodes(repo, f"old@{sub}") == [("inner_ok", "completed"), ("inner_bad", "failed")]
