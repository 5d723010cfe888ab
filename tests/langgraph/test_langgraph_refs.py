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
from lg_helpers import chain  # noqa: E402

from gitstate.langgraph import GitCheckpointSaver  # noqa: E402
from gitstate.view.data import ViewData  # noqa: E402
from gitstate_cli.main import cli  # noqa: E402


class S(TypedDict):
    msgs: Annotated[list[str], operator.add]


def _app(saver: Any) -> Any:
    return chain(S, ("first", lambda s: {"msgs": ["first"]}),
                 ("second", lambda s: {"msgs": [f"second after {len(s['msgs'])}"]})).compile(checkpointer=saver)


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
    _json("checkpoint", "r@alt", "--node", "d")  # alt moved last: undo r is still main's undo
    undone = _json("undo", "r")
    assert (undone["branch"], undone["tip"]["id"]) == ("main", second["id"])


class L(TypedDict):
    log: Annotated[list[str], operator.add]


def _three_lines(saver: Any) -> tuple[Any, dict[str, Any]]:
    """START → a → b → c, run; run again from after a; update the state after b and run on from
    there: three lines, main and two forks, the thread's latest checkpoint on the last one."""
    graph = StateGraph(L)
    for name in "abc":
        graph.add_node(name, lambda s, name=name: {"log": [name]})
    graph.add_edge(START, "a")
    graph.add_edge("a", "b")
    graph.add_edge("b", "c")
    graph.add_edge("c", END)
    app = graph.compile(checkpointer=saver)
    cfg: dict[str, Any] = {"configurable": {"thread_id": "f"}}
    app.invoke({"log": []}, cfg)
    history = list(app.get_state_history(cfg))
    after_a = next(s for s in history if s.next == ("b",))
    after_b = next(s for s in history if s.next == ("c",))
    app.invoke(None, after_a.config)
    app.invoke(None, app.update_state(after_b.config, {"log": ["edited"]}, as_node="b"))
    return app, cfg


@pytest.mark.parametrize("same_second", [False, True])
def test_undo_of_a_thread_reverts_the_line_that_moved_last(repo: Path, monkeypatch: pytest.MonkeyPatch,
                                                           same_second: bool) -> None:
    """rollback RUN ~2 then undo RUN (the README's pattern) is no change on a thread with several
    lines, even when the rollback left another line holding the thread's latest checkpoint (a bare
    RUN of show, log and the rest now names that line): a bare RUN of undo is the line that moved
    last. Undo again redoes; a fork then an undo removes the fork. With only the saver moving the
    lines, that is the latest line. Reflog entries count whole seconds: ``same_second`` writes
    every entry at one time, as a fast script does."""
    if same_second:
        import gitstate.git.refs as refs_module

        monkeypatch.setattr(refs_module, "time", type("Frozen", (), {"time": staticmethod(lambda: 1_800_000_000.0)}))
    store = gitstate.open_store(repo)
    app, cfg = _three_lines(GitCheckpointSaver(store))
    before = app.get_state(cfg)
    run = store.get_run("f")
    tips = {name: cp.id for name, cp in run.branches().items()}
    assert len(tips) == 3
    current = gitstate.store.refspec.default_branch(run)
    assert current.startswith("main~") and gitstate.store.refspec.moved_branch(run) == current
    monkeypatch.chdir(repo)
    out = _cli("rollback", "f", "~2")
    assert f"rolled back branch {current} of run f" in out and f"undo with: git agentos undo 'f@{current}'" in out
    assert _json("show", "f")["branch"] != current  # another line holds the latest checkpoint now
    undone = _json("undo", "f")
    assert (undone["branch"], undone["tip"]["id"]) == (current, tips[current])
    assert {name: cp.id for name, cp in run.branches().items()} == tips
    after = app.get_state(cfg)
    assert (after.values, after.config) == (before.values, before.config)
    redone = _json("undo", "f")  # undoing twice redoes: the rollback again
    assert redone["branch"] == current and redone["tip"]["id"] != tips[current]
    assert _json("undo", "f")["tip"]["id"] == tips[current]
    assert _json("fork", "f", "~1", "copy")["branch"] == "copy"
    assert _json("undo", "f") == {"run": "f", "branch": "copy", "tip": None, "removed": True}
    assert {name: cp.id for name, cp in run.branches().items()} == tips
    # the graph goes on (on the latest line): undo f reverts its last write there
    app.invoke({"log": ["again"]}, cfg)
    tip = _json("show", "f")
    assert tip["branch"] == current and tip["id"] != tips[current]
    undone = _json("undo", "f")
    assert undone["branch"] == current and undone["tip"]["id"] != tip["id"]


def test_resume_after_a_cli_fork_and_rollback_extends_main(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """main and a branch made with `git agentos fork` share their tip after a rollback: the
    thread's next step goes on main (the thread's line), not on the other branch."""
    saver = GitCheckpointSaver(gitstate.open_store(repo))
    app = chain(S, ("first", lambda s: {"msgs": ["first"]}), ("second", lambda s: {"msgs": ["second"]}))
    app = app.compile(checkpointer=saver, interrupt_before=["second"])
    cfg: dict[str, Any] = {"configurable": {"thread_id": "tf"}}
    app.invoke({"msgs": []}, cfg)
    app.invoke(None, cfg)  # on to END
    monkeypatch.chdir(repo)
    _cli("fork", "tf", "~1", "alt")
    _cli("rollback", "tf", "~1")
    shared = _json("show", "tf@alt")["id"]
    assert _json("show", "tf@main")["id"] == shared
    fresh = GitCheckpointSaver(gitstate.open_store(repo))  # a new process: the index is read from the refs
    app2 = chain(S, ("first", lambda s: {"msgs": ["first"]}), ("second", lambda s: {"msgs": ["second"]}))
    app2 = app2.compile(checkpointer=fresh)
    assert app2.invoke(None, cfg)["msgs"] == ["first", "second"]  # the step's writes were kept: applied, not re-run
    branches = {b["branch"]: b for b in _json("branches", "tf")}
    assert branches["alt"]["tip"] == shared  # alt did not move
    assert branches["main"]["step"] == 2  # main did
    assert _json("show", "tf@main")["langgraph"]["checkpoint_id"] == _cid(app2.get_state(cfg).config)


def test_an_id_shown_before_the_next_step_names_the_checkpoint_after_it(repo: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The next step folds a checkpoint's pending writes into its commit (a new commit id): the id
    printed before still names that checkpoint, as it is on the line now, for show and rollback."""
    saver = GitCheckpointSaver(gitstate.open_store(repo))
    app = chain(S, ("first", lambda s: {"msgs": ["first"]}), ("second", lambda s: {"msgs": ["second"]})).compile(
        checkpointer=saver, interrupt_before=["second"])
    cfg: dict[str, Any] = {"configurable": {"thread_id": "ti"}}
    app.invoke({"msgs": []}, cfg)
    monkeypatch.chdir(repo)
    before = _json("show", "ti")
    # resumes: the stopped checkpoint's commit is rewritten (durability "sync": its pending writes
    # are saved before the next checkpoint is; with "async" the two saves may run in either order,
    # and writes saved after the next checkpoint stay in a writes ref)
    app.invoke(None, cfg, durability="sync")
    line = [r["id"] for r in _json("log", "ti")]
    assert before["id"] not in line  # the commit id changed...
    shown = _json("show", before["id"][:12])
    assert shown["id"] in line and shown["langgraph"]["checkpoint_id"] == before["langgraph"]["checkpoint_id"]
    run = gitstate.open_store(repo).get_run("ti")
    assert run.load(before["id"]).id == shown["id"]
    _cli("rollback", "ti", before["id"][:12])
    assert _json("show", "ti")["id"] == shown["id"]  # ...and rollback puts main on the copy on the line


def test_a_langgraph_checkpoint_id_is_a_reference(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The id LangGraph gives a checkpoint (a UUID, as get_state shows it), or 8+ characters of it,
    names that checkpoint wherever a checkpoint id does; the text log shows it."""
    app = _app(GitCheckpointSaver(gitstate.open_store(repo)))
    cfg: dict[str, Any] = {"configurable": {"thread_id": "lg"}}
    app.invoke({"msgs": []}, cfg)
    latest = app.get_state(cfg)
    assert latest.parent_config is not None
    cid, parent = _cid(latest.config), _cid(latest.parent_config)
    monkeypatch.chdir(repo)
    tip = _json("show", "lg")
    assert _json("show", cid)["id"] == tip["id"]
    assert _json("show", cid[:13])["id"] == tip["id"]  # a prefix, hyphen included
    assert _json("show", cid.upper())["id"] == tip["id"]  # as a user may copy it
    assert _json("show", f"{cid}~1")["langgraph"]["checkpoint_id"] == parent
    assert _json("show", parent)["langgraph"]["checkpoint_id"] == parent
    assert _json("diff", parent, cid)["b"] == tip["id"]
    assert cid in _cli("log", "lg")
    wrong = CliRunner().invoke(cli, ["show", "ffffffff-0000-0000-0000-000000000000"], prog_name="git agentos")
    assert wrong.exit_code != 0 and "Traceback" not in wrong.output
