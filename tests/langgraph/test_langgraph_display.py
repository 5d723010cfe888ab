"""LangGraph state is visible: `git agentos show`/`log`/`diff`/`nodes`, `git show` through the
textconv and the view read real graphs' checkpoints as LangGraph shows them (messages with their
contents, LangGraph's steps and nodes), decoded for display without building anything; hostile
bytes give bounded stubs, never a traceback. And the saver refuses at write time a value it could
not read back, storing nothing of that step."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, TypedDict

import ormsgpack
import pytest
from click.testing import CliRunner
from conftest import bounded, git
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command
from test_langgraph_graphs import chat_graph

import gitstate
from gitstate.format import lgtree
from gitstate.langgraph import GitCheckpointSaver
from gitstate.langgraph import saver as saver_module
from gitstate.view.data import ViewData
from gitstate_cli.main import cli

BIN = Path(sys.executable).parent


def agentos_process(repo: Path, *args: str) -> str:
    """`git agentos ...` as a real process under real git; asserts exit 0 and a clean stderr."""
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    done = subprocess.run(["git", "agentos", *args], cwd=repo, capture_output=True, text=True, env=env, check=False)
    assert done.returncode == 0 and "Traceback" not in done.stderr, (args, done.stdout, done.stderr)
    return done.stdout


def agentos(repo: Path, *args: str) -> str:
    old = os.getcwd()
    os.chdir(repo)
    try:
        result = CliRunner().invoke(cli, list(args), prog_name="git agentos")
    finally:
        os.chdir(old)
    assert result.exit_code == 0, (args, result.stdout, result.stderr, result.exception)
    return result.stdout


def column(table: list[str], name: str) -> list[str]:
    """The cells of column ``name`` of a table's rows (cells hold no spaces; the header's
    "LANGGRAPH ID" is two words)."""
    header = table[0].replace("LANGGRAPH ID", "LANGGRAPH_ID").split()
    return [row.split()[header.index(name)] for row in table[1:]]


def chat_thread(repo: Path, thread: str = "t") -> tuple[Any, dict[str, Any]]:
    """A chat graph run to its interrupt and resumed to END: agent, tool, review (interrupts)."""
    graph = chat_graph(GitCheckpointSaver(gitstate.open_store(repo)))
    cfg = {"configurable": {"thread_id": thread}}
    graph.invoke({"messages": [HumanMessage(content="hello there", id="h1")], "log": []}, cfg)
    return graph, cfg


def test_show_diff_and_textconv_of_real_graph_through_processes(repo: Path) -> None:
    graph, cfg = chat_thread(repo)
    graph.invoke(Command(resume="yes"), cfg)
    shown = agentos_process(repo, "show", "t")
    assert "hello there" in shown and "thinking about 1 messages" in shown and "tool result: 42" in shown
    assert "serde typed bytes" not in shown and "review:yes" in shown
    first = [s for s in graph.get_state_history(cfg) if s.metadata["step"] == 0][0]
    older = gitstate.open_store(repo).get_run("t").load(
        next(cp.id for cp in gitstate.open_store(repo).get_run("t").history()
             if cp.metadata.get("checkpoint_id") == first.config["configurable"]["checkpoint_id"]))
    diff = agentos_process(repo, "diff", older.id, "t")
    assert "~ state messages" in diff and "no changes" not in diff
    assert '+ [2] {"content": "tool result: 42", "id": "tool-2", "type": "ai"}' in diff
    assert '+ [1] {"content": "thinking about 1 messages"' in diff and "~ state log" in diff
    # plain git after setup: the commit's changed blobs print as text, messages included
    agentos_process(repo, "setup")
    tip = git(repo, "rev-parse", gitstate.open_store(repo).get_run("t").ref("main")).strip()
    tool = git(repo, "rev-parse", f"{tip}~1").strip()
    text = git(repo, "show", tool)
    assert '+    "content": "tool result: 42",' in text, text
    assert '"question": "approve?"' in text and "langgraph.types.Interrupt" in text  # the pending interrupt
    assert '"source": "loop"' in text  # meta.cbor's LangGraph metadata, decoded
    assert "\ufffd" not in text and "msgpack" not in text.replace("gitstate", "")
    root = git(repo, "rev-list", "--max-parents=0", tip).split()[0]
    assert '"content": "hello there"' in git(repo, "show", root)


def test_show_and_diff_hide_the_scheduling_channels_as_get_state_does(repo: Path) -> None:
    """LangGraph's trigger (branch:to:NODE) and join (join:A+B:NODE) channels only say what runs
    next: get_state leaves them out of values and names those nodes in next. show (text and
    JSON) and diff leave them out too; show's next says what they schedule."""
    graph, cfg = chat_thread(repo)  # stopped at review's interrupt: branch:to:review holds a value
    run = gitstate.open_store(repo).get_run("t")
    tip = run.head()
    assert tip is not None
    values = lgtree.values_tree(run.store.reader.tree(tip.tree_id))
    assert values is not None and "branch:to:review" in lgtree.channel_entries(run.store.reader, values)  # stored
    assert sorted(tip.state) == sorted(graph.get_state(cfg).values)
    assert "branch:to:" not in agentos(repo, "show", "t")
    data = json.loads(agentos(repo, "show", "t", "--json"))
    assert sorted(data["state"]) == sorted(graph.get_state(cfg).values) and data["langgraph"]["next"] == ["review"]
    ids = [cp.id for cp in run.history()]
    for newer, older in zip(ids, ids[1:], strict=False):
        assert "branch:to:" not in agentos(repo, "diff", older, newer)
        changed = json.loads(agentos(repo, "diff", older, newer, "--json"))
        assert not [c for c in json.dumps(changed).split('"') if c.startswith("branch:to:")]
    # a node reached from two nodes waits behind a join channel
    fan = StateGraph(TypedDict("Fan", {"a": int, "b": int}))  # type: ignore[operator]
    fan.add_node("a", lambda s: {"a": 1})
    fan.add_node("b", lambda s: {"b": 2})
    fan.add_node("join", lambda s: {"a": 3})
    fan.add_edge(START, "a")
    fan.add_edge(START, "b")
    fan.add_edge(["a", "b"], "join")
    fan.add_edge("join", END)
    app = fan.compile(checkpointer=GitCheckpointSaver(gitstate.open_store(repo)), interrupt_before=["join"])
    fan_cfg = {"configurable": {"thread_id": "fan"}}
    app.invoke({"a": 0, "b": 0}, fan_cfg)
    fan_tip = gitstate.open_store(repo).get_run("fan").head()
    assert fan_tip is not None
    fan_values = lgtree.values_tree(run.store.reader.tree(fan_tip.tree_id))
    assert fan_values is not None and "join:a+b:join" in lgtree.channel_entries(run.store.reader, fan_values)
    shown = agentos(repo, "show", "fan")
    assert "join:" not in shown and "branch:to:" not in shown and "join" in shown  # next: join
    assert sorted(json.loads(agentos(repo, "show", "fan", "--json"))["state"]) == sorted(app.get_state(fan_cfg).values)


def test_log_nodes_and_steps_as_langgraph_numbers_them(repo: Path) -> None:
    graph, cfg = chat_thread(repo)
    states = list(graph.get_state_history(cfg))
    rows = json.loads(agentos(repo, "log", "t", "--json"))
    assert [r["metadata"]["langgraph_step"] for r in rows] == [s.metadata["step"] for s in states]
    table = agentos(repo, "log", "t").splitlines()
    assert table[0].split()[:5] == ["ID", "LANGGRAPH", "ID", "STEP", "NODE"]
    assert column(table, "STEP") == [str(s.metadata["step"]) for s in states]
    assert column(table, "NODE")[:3] == ["tool", "agent", "-"]
    # stopped at review's interrupt: the node is interrupted, its question is a pending write
    nodes = json.loads(agentos(repo, "nodes", "t", "--json"))
    assert [(n["node"], n["status"]) for n in nodes] == [("agent", "completed"), ("tool", "completed"),
                                                         ("review", "interrupted")]
    shown = agentos(repo, "show", "t")
    assert "next:" in shown and "review" in shown and "approve?" in shown and "pending writes" in shown
    graph.invoke(Command(resume="yes"), cfg)
    nodes = json.loads(agentos(repo, "nodes", "t", "--json"))
    assert [(n["node"], n["status"]) for n in nodes] == [("agent", "completed"), ("tool", "completed"),
                                                         ("review", "completed")]
    run = gitstate.open_store(repo).get_run("t")
    assert [n.node for n in run.nodes()] == ["agent", "tool", "review"]
    after_agent = run.load("node:agent")
    assert after_agent.node == "agent" and len(after_agent.state["messages"]) == 2
    assert "thinking about 1 messages" in agentos(repo, "show", "t:node:agent")
    data = json.loads(agentos(repo, "show", "t", "--json"))
    assert data["langgraph"]["step"] == 3 and data["langgraph"]["source"] == "loop" and data["langgraph"]["next"] == []
    assert [m["content"] for m in data["state"]["messages"]] == ["hello there", "thinking about 1 messages",
                                                                "tool result: 42"]


def test_one_step_numbering_for_a_thread_everywhere(repo: Path) -> None:
    """Wherever a step is printed for a LangGraph checkpoint it is LangGraph's (-1 for the input):
    log, show, runs, branches, rollback/undo/fork lines, the commit subject (and LangGraph-Step
    trailer) of commits written now, the view; a plain run keeps its own numbering."""
    graph, cfg = chat_thread(repo)
    graph.invoke(Command(resume="yes"), cfg)
    states = list(graph.get_state_history(cfg))  # newest first
    lg_steps = [s.metadata["step"] for s in states]
    assert lg_steps[-1] == -1 and lg_steps[0] == 3
    run = gitstate.open_store(repo).get_run("t")
    positions = [cp.step for cp in run.history()]
    assert positions != lg_steps  # the position on the branch is another numbering
    assert [cp.display_step for cp in run.history()] == lg_steps
    assert column(agentos(repo, "log", "t").splitlines(), "STEP") == [str(n) for n in lg_steps]
    assert [r["step"] for r in json.loads(agentos(repo, "log", "t", "--json"))] == lg_steps
    assert "step:         3\n" in agentos(repo, "show", "t")
    runs = {r["id"]: r for r in json.loads(agentos(repo, "runs", "--json"))}
    assert runs["t"]["step"] == 3 and runs["t"]["checkpoints"] == len(lg_steps)
    assert agentos(repo, "runs").splitlines()[1].split()[4] == "3"
    assert json.loads(agentos(repo, "branches", "t", "--json"))[0]["step"] == 3
    assert agentos(repo, "branches", "t").splitlines()[1].split()[2] == "3"
    rolled = agentos(repo, "rollback", "t", "~1")
    assert f"step {lg_steps[1]})" in rolled, rolled
    assert "step 3)" in agentos(repo, "undo", "t")
    assert json.loads(agentos(repo, "fork", "t", "~2", "older", "--json"))["at"]["step"] == lg_steps[2]
    # subjects and trailers of the commits the saver wrote
    ref = run.ref("main")
    subjects = git(repo, "log", "--format=%s", ref).splitlines()
    assert [int(s.split(" · ")[1].removeprefix("step ")) for s in subjects] == lg_steps
    assert git(repo, "log", "-1", "--format=%(trailers:key=LangGraph-Step,valueonly)", ref).strip() == "3"
    assert git(repo, "log", "-1", "--format=%(trailers:key=Step,valueonly)", ref).strip() == str(positions[0])
    # the view: the runs page, the graph rows (read from commits alone) and a checkpoint
    view = ViewData(gitstate.open_store(repo))
    assert {r["id"]: r["step"] for r in view.runs()["runs"]}["t"] == 3
    rows = [r for r in view.graph("t")["rows"] if not r["reflog"] and "main" in r["branch"]]
    assert [r["step"] for r in rows] == lg_steps
    assert view.checkpoint(rows[-1]["id"])["step"] == -1
    # a plain run: positions, as before
    plain = gitstate.open_store(repo).create_run(run_id="plain")
    plain.checkpoint({"n": 0})
    plain.checkpoint({"n": 1})
    assert [line.split()[1] for line in agentos(repo, "log", "plain").splitlines()[1:]] == ["1", "0"]
    assert git(repo, "log", "-1", "--format=%s", plain.ref("main")).strip() == "checkpoint · step 1 · save"


def test_displayed_state_matches_langgraph_for_every_checkpoint(repo: Path) -> None:
    graph, cfg = chat_thread(repo)
    graph.invoke(Command(resume="yes"), cfg)
    graph.update_state(cfg, {"messages": [HumanMessage(content="edited", id="e1")]}, as_node="agent")
    run = gitstate.open_store(repo).get_run("t")
    by_id = {cp.metadata["checkpoint_id"]: cp for cp in run.history()}
    for snap in graph.get_state_history(cfg):
        cp = by_id[snap.config["configurable"]["checkpoint_id"]]
        state = cp.state
        assert [(m["type"], m["content"], m["id"]) for m in state.get("messages", [])] == \
            [(m.type, m.content, m.id) for m in snap.values.get("messages", [])]
        assert state.get("log", []) == snap.values.get("log", [])
        assert tuple(cp.langgraph["next"]) == tuple(sorted(snap.next))  # type: ignore[index]
        assert cp.langgraph["step"] == snap.metadata["step"]  # type: ignore[index]
    update = run.head()
    assert update is not None and update.trigger == "update" and update.node is None  # no node ran
    # the view shows the same decoded form (not a placeholder)
    view = ViewData(gitstate.open_store(repo)).checkpoint(update.id)
    assert "edited" in json.dumps(view["state"]) and "serde typed" not in json.dumps(view)


class Plain(TypedDict):
    x: Any
    y: Any


class CraftedSerde(JsonPlusSerializer):
    """Stores whatever raw bytes a test asks for: what a hostile remote could push."""

    def __init__(self, raw: dict[str, tuple[str, bytes]]) -> None:
        super().__init__(allowed_msgpack_modules=None)
        self.raw = raw

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        if isinstance(obj, str) and obj in self.raw:
            return self.raw[obj]
        return super().dumps_typed(obj)


HOSTILE = {
    "deep": ("msgpack", b"\x91" * 50_000 + b"\xc0"),
    "claims": ("msgpack", b"\xdd\xff\xff\xff\xff\x01"),
    "badext": ("msgpack", b"\xd5\x05\xc1\x00"),
    "evil": ("msgpack", ormsgpack.packb(ormsgpack.Ext(1, ormsgpack.packb(("os", "system", ["touch pwned"]))))),
    "bigint": ("json", b"9" * 200_000),
    "deepjson": ("json", b"[" * 200_000),
    "kind": ("no-such-kind", b"x"),
}


def test_hostile_values_print_bounded_readable_results(repo: Path) -> None:
    saver = GitCheckpointSaver(gitstate.open_store(repo), serde=CraftedSerde(HOSTILE))
    config = {"configurable": {"thread_id": "h", "checkpoint_ns": ""}}
    prev = None
    for name in HOSTILE:
        cp = empty_checkpoint()
        cp["channel_values"] = {"v": name, "l": [name]}
        cp["channel_versions"] = {"v": 1, "l": 1}
        conf = dict(config["configurable"], checkpoint_id=prev) if prev else config["configurable"]
        got = saver.put({"configurable": conf}, cp, {"source": "loop", "step": 0}, {"v": 1, "l": 1})
        prev = got["configurable"]["checkpoint_id"]
    shown = bounded(lambda: agentos_process(repo, "show", "h"), 60)
    assert "nested deeper than" not in shown  # the tip holds "kind"
    assert "unknown serde type" in shown
    for i in range(len(HOSTILE)):
        text = bounded(lambda i=i: agentos_process(repo, "show", f"h~{i}"), 60)
        assert len(text) < 20_000 and any(m in text for m in ("$error", "$more", "os.system", "$int", "\"error\"")), text
    everything = bounded(lambda: agentos_process(repo, "diff", f"h~{len(HOSTILE) - 1}", "h"), 60)
    assert "~ state v" in everything
    agentos_process(repo, "setup")
    run = gitstate.open_store(repo).get_run("h")
    log = bounded(lambda: subprocess.run(["git", "log", "-p", run.ref("main")], cwd=repo, capture_output=True,
                                         check=True).stdout.decode("utf-8", "replace"), 60)
    assert "os.system" in log and "nested deeper than" in log and '"digits": 200000' in log
    assert "\ufffd" not in log and "not msgpack" in log  # every blob printed as text, bad ones as stubs
    assert not (repo / "pwned").exists()


def test_textconv_needs_neither_langgraph_nor_ormsgpack(repo: Path, tmp_path: Path) -> None:
    graph, cfg = chat_thread(repo)
    tip = gitstate.open_store(repo).get_run("t").head()
    assert tip is not None
    chunk = git(repo, "rev-parse", f"{tip.id}:langgraph/messages.l/0000000000").strip()
    blob = tmp_path / "0000000000"
    blob.write_bytes(subprocess.run(["git", "cat-file", "blob", chunk], cwd=repo, capture_output=True,
                                    check=True).stdout)
    code = ("import sys\n"
            "for name in ('ormsgpack', 'langgraph', 'langchain_core', 'pygit2'):\n"
            "    sys.modules[name] = None\n"
            "from gitstate_cli.textconv import convert\n"
            f"sys.stdout.write(convert(open({str(blob)!r}, 'rb').read(), {str(blob)!r}).decode())\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)[0] == {"content": "hello there", "id": "h1", "type": "human"}


@dataclasses.dataclass
class Plan:
    """A user type kept in a channel without allowed_types."""

    steps: list[str]


class PlanState(TypedDict):
    plan: Any
    n: int


def plan_graph(saver: GitCheckpointSaver) -> Any:
    g = StateGraph(PlanState)
    g.add_node("make", lambda s: {"plan": Plan(["a", "b"]), "n": s["n"] + 1})
    g.add_edge(START, "make")
    g.add_edge("make", END)
    return g.compile(checkpointer=saver)


def _stored(repo: Path) -> tuple[str, str]:
    """All refs and all objects of the repository (what a refused write must leave alone)."""
    objects = git(repo, "cat-file", "--batch-all-objects", "--batch-check")
    return git(repo, "for-each-ref"), objects


def test_saver_refuses_at_write_what_it_could_not_read(repo: Path) -> None:
    graph = plan_graph(GitCheckpointSaver(gitstate.open_store(repo)))
    cfg = {"configurable": {"thread_id": "p"}}
    with pytest.raises(gitstate.TypeNotAllowedError) as err:
        graph.invoke({"plan": None, "n": 0}, cfg)
    message = str(err.value)
    assert f"{__name__}.Plan" in message and "allowed_types=[Plan]" in message and "corrupt" not in message
    assert isinstance(err.value, TypeError)
    # nothing of the refused step is stored: the thread is readable, waiting to run `make` again
    state = graph.get_state(cfg)
    assert state.values == {"plan": None, "n": 0} and state.next == ("make",)
    tip = gitstate.open_store(repo).get_run("p").head()
    assert tip is not None and tip.langgraph is not None and tip.langgraph["writes"] == []
    before = _stored(repo)
    with pytest.raises(gitstate.TypeNotAllowedError):
        graph.invoke(None, cfg)
    assert _stored(repo) == before
    # with the type allowed, the same thread goes on
    allowed = plan_graph(GitCheckpointSaver(gitstate.open_store(repo), allowed_types=[Plan]))
    assert allowed.invoke(None, cfg) == {"plan": Plan(["a", "b"]), "n": 1}
    assert allowed.get_state(cfg).values["plan"] == Plan(["a", "b"])
    assert "Plan" in agentos(repo, "show", "p") and '"steps"' in agentos(repo, "show", "p")


def test_direct_puts_and_writes_of_disallowed_types_store_nothing(repo: Path) -> None:
    saver = GitCheckpointSaver(gitstate.open_store(repo))
    base = {"configurable": {"thread_id": "d", "checkpoint_ns": ""}}
    cp = empty_checkpoint()
    cp["channel_values"] = {"x": 1}
    cp["channel_versions"] = {"x": 1}
    config = saver.put(base, cp, {"source": "input", "step": -1}, {"x": 1})
    before = _stored(repo)
    for value in (Plan(["a"]), {"deep": [{"deeper": Plan(["b"])}]}, [1, Plan(["c"])]):
        nxt = empty_checkpoint()
        nxt["channel_values"] = {"x": value}
        nxt["channel_versions"] = {"x": 2}
        with pytest.raises(gitstate.TypeNotAllowedError, match="Plan"):
            saver.put(config, nxt, {"source": "loop", "step": 0}, {"x": 2})
        with pytest.raises(gitstate.TypeNotAllowedError, match="Plan"):
            saver.put_writes(config, [("x", value)], task_id="task")
        with pytest.raises(gitstate.TypeNotAllowedError, match="Plan"):
            saver.put(config, cp, {"source": "loop", "step": 0, "extra": value}, {})
    assert _stored(repo) == before
    tup = saver.get_tuple(config)
    assert tup is not None and tup.checkpoint["channel_values"] == {"x": 1} and tup.pending_writes == []


def test_a_type_allowed_when_written_is_refused_on_read_as_policy_not_corruption(repo: Path) -> None:
    store = gitstate.open_store(repo)
    writer = GitCheckpointSaver(store, allowed_types=[Plan])
    cp = empty_checkpoint()
    cp["channel_values"] = {"plan": Plan(["x"])}
    cp["channel_versions"] = {"plan": 1}
    config = writer.put({"configurable": {"thread_id": "q", "checkpoint_ns": ""}}, cp,
                        {"source": "input", "step": -1}, {"plan": 1})
    with pytest.raises(gitstate.UnsafeValueError) as err:
        GitCheckpointSaver(store).get_tuple(config)
    text = str(err.value)
    assert "corrupt" not in text and f"{__name__}.Plan" in text and "allowed_types" in text
    assert not isinstance(err.value, gitstate.CorruptObjectError)
    # display never needs the type: show works without allowing it
    assert '"steps"' in agentos(repo, "show", "q")


def test_format_names_match_the_saver() -> None:
    assert (saver_module.LG_TREE, saver_module.WRITES_BLOB, saver_module.LG_META, saver_module.WORKFLOW) == \
        (lgtree.LG_TREE, lgtree.WRITES_BLOB, lgtree.LG_META, lgtree.WORKFLOW)


def test_textconv_bounds_huge_integers_and_passes_other_files_through(repo: Path) -> None:
    import cbor2

    from gitstate_cli.textconv import convert

    # as a hostile remote stores it (gitstate refuses to write an integer this large)
    data = cbor2.dumps({"n": 1 << 2_000_000, "small": 12}, canonical=True)
    text = bounded(lambda: convert(data, "/tmp/git-blob-x/meta.cbor").decode(), 10)
    assert '"<integer of 2,000,001 bits: 0x8000000000000000…>"' in text and '"small": 12' in text
    for name, raw in (("langgraph/notes.v", b"module top; endmodule\n"), ("0000000000", b"plain text\n"),
                      ("0000000000", b"\x00\x01binary")):
        assert convert(raw, name) == raw
    # setup's patterns reach the values tree but no other file of a top-level langgraph/ folder
    agentos(repo, "setup")
    attrs = ["langgraph/messages.v", "langgraph/messages.l/0000000000", "langgraph/m.l/0000000000/0000002048",
             "langgraph-writes.cbor", "langgraph/graph.py", "src/langgraph/messages.v"]
    out = git(repo, "check-attr", "diff", "--", *attrs).splitlines()
    assert [line.rsplit(": ", 1)[1] for line in out] == ["agentos"] * 4 + ["unspecified"] * 2
