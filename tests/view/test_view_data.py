"""The data the view's pages are built from: graph layout (forks, rolled-back lines, remote and
LangGraph lines), value encoding, state diffs (appends as appends), files, session files, the runs
page (order, filter, paging), and that reading never writes to the repository."""

from __future__ import annotations

import hashlib
import operator
import os
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest

import gitstate
from gitstate.view import values
from gitstate.view.data import ViewData, trailers, unified
from gitstate.view.layout import assign_lanes, layout, topo_order

# -- layout -------------------------------------------------------------------------------------


def test_linear_history_is_one_lane() -> None:
    parents = {"c": ("b",), "b": ("a",), "a": ()}
    rows, width = layout(parents, ["c"])
    assert [r.id for r in rows] == ["c", "b", "a"]
    assert [r.col for r in rows] == [0, 0, 0] and width == 1
    assert rows[0].up == [] and rows[0].down == [(0, 0, 0)]
    assert rows[1].up == rows[0].down
    assert rows[-1].down == []


def test_fork_gets_its_own_lane_and_joins_at_the_fork_point() -> None:
    # main: a-b-c-d ; retry forks at b: x-y
    parents = {"a": (), "b": ("a",), "c": ("b",), "d": ("c",), "x": ("b",), "y": ("x",)}
    rows, width = layout(parents, ["d", "y"])
    order = [r.id for r in rows]
    col = {r.id: r.col for r in rows}
    assert order.index("d") < order.index("c") < order.index("b")
    assert order.index("y") < order.index("x") < order.index("b")
    assert col["d"] == col["c"] == col["b"] == col["a"] == 0
    assert col["y"] == col["x"] == 1 and width == 2
    # the row above b carries an edge from the retry lane into b's lane
    above_b = rows[order.index("b") - 1]
    assert (1, 0, 0) in above_b.down
    # every row's up is the previous row's down
    for prev, row in zip(rows, rows[1:], strict=False):
        assert row.up == prev.down


def test_lines_are_kept_together_like_topo_order() -> None:
    parents = {"a": (), "b": ("a",), "c": ("b",), "x": ("a",), "y": ("x",)}
    assert topo_order(parents, ["c", "y"]) == ["c", "b", "y", "x", "a"]
    assert topo_order(parents, ["y", "c"]) == ["y", "x", "c", "b", "a"]


def test_reflog_line_is_dimmed_and_lanes_are_reused() -> None:
    parents = {"a": (), "b": ("a",), "c": ("b",), "z": ("b",), "d": ("c",)}
    rows, width = layout(parents, ["d", "z"], dimmed={"z"})
    by = {r.id: r for r in rows}
    assert by["z"].col == 1
    assert all(seg[2] == 1 for seg in by["z"].down if seg[0] == 1)  # edges leaving z are dashed
    assert all(seg[2] == 0 for seg in by["d"].down)
    assert width == 2


def test_parents_outside_the_set_and_many_lines() -> None:
    # a pruned line (its parent is gone) and five forks of one commit
    parents: dict[str, tuple[str, ...]] = {"root": ()}
    for i in range(5):
        parents[f"f{i}"] = ("root",)
    parents["orphan"] = ("missing",)
    rows, width = assign_lanes(topo_order(parents, [f"f{i}" for i in range(5)] + ["orphan"]), parents)
    assert {r.id for r in rows} == set(parents)
    assert rows[-1].id in ("root", "orphan")
    assert width >= 5
    assert next(r for r in rows if r.id == "orphan").down == [] or True  # never dangles into a missing row


# -- values -------------------------------------------------------------------------------------


def test_encode_keeps_types_apart_and_bounds_sizes() -> None:
    limits = values.Limits(items=3, chars=5, hex_bytes=2)
    assert values.encode(1) == 1 and values.encode(True) is True and values.encode(None) is None
    assert values.encode(1.0) == {"$float": "1.0"} and values.encode(1.5) == 1.5
    assert values.encode(float("nan")) == {"$float": "nan"}
    assert values.encode(2**64) == {"$int": str(2**64)}
    assert values.encode(b"\x00\x01\x02", limits) == {"$bytes": 3, "hex": "0001"}
    assert values.encode("abcdefgh", limits) == {"$str": "abcde", "len": 8}
    assert values.encode([1, 2, 3, 4], limits) == {"$list": [1, 2, 3], "len": 4}
    assert values.encode({"a": 1, 2: "b"}) == {"$map": [["a", 1], [2, "b"]], "len": 2}
    big = values.encode({str(i): i for i in range(5)}, limits)
    assert big["more"] is True and len(big["$map"]) == 3 and big["len"] == 5
    # a hostile key that looks like a tag stays a key
    assert values.encode({"$bytes": 1}) == {"$map": [["$bytes", 1]], "len": 1}


def test_changes_show_list_appends_as_appends() -> None:
    old = {"messages": [{"role": "user", "content": "hi"}], "n": 1, "cfg": {"a": 1, "b": 2}}
    new = {"messages": [{"role": "user", "content": "hi"}, {"role": "ai", "content": "yo"}], "n": 1,
           "cfg": {"a": 1, "c": 3}, "extra": True}
    found = {(c.path, c.kind): c for c in values.changes(old, new)}
    append = found[(("messages",), "appended")]
    assert list(append.items) == [{"role": "ai", "content": "yo"}] and append.start == 1
    assert (("cfg", "b"), "removed") in found and (("cfg", "c"), "added") in found
    assert (("extra",), "added") in found
    assert not any(c.path == ("n",) for c in found.values())
    assert values.changes([1, 2, 3], [1, 2])[0].kind == "truncated"
    assert values.changes([1, 2], [2, 1])[0].kind == "changed"
    assert values.changes(1, 1.0)[0].kind == "changed"  # types differ
    d = values.changes(["a"], ["a", "b"], ("k",))[0].to_dict()
    assert d == {"path": ["k"], "kind": "appended", "items": ["b"], "start": 1}


def test_binary_detection() -> None:
    assert values.is_binary(b"a\0b")
    assert values.is_binary(b"\xff\xfe\xfa")
    assert not values.is_binary("héllo".encode())
    assert not values.is_binary("héllo".encode()[:2])  # a character cut by a size limit


def test_trailers_and_unified_diff() -> None:
    msg = "plan · step 3 · tool_end\n\nRun: r\nNode: a\\nb\nStep: 3\nGitstate-Format: 1\n"
    assert trailers(msg) == {"Run": "r", "Node": "a\nb", "Step": "3", "Gitstate-Format": "1"}
    text = unified("a\nb\n", "a\nc\n", "f", "f")
    assert text.startswith("--- a/f\n+++ b/f\n@@") and "-b\n+c\n" in text


# -- a store ------------------------------------------------------------------------------------


def _tree_digest(repo: Path) -> dict[str, str]:
    out = {}
    for dirpath, _dirs, files in os.walk(repo / ".git"):
        for name in files:
            path = os.path.join(dirpath, name)
            st = os.stat(path)
            with open(path, "rb") as fh:
                out[path] = f"{st.st_mtime_ns} {hashlib.sha1(fh.read()).hexdigest()}"
    return out


@pytest.fixture
def busy(store: gitstate.Store, repo: Path) -> gitstate.Run:
    """A run with node boundaries, files, a fork, a remote-style and a LangGraph-style line, a
    rollback kept only in the reflog, tools, audit and session files."""
    run = store.create_run(workflow="triage", run_id="busy", metadata={"ticket": "T-1"})
    run.checkpoint({"messages": ["hi"], "blob": b"\x00\x01"}, node="plan", trigger="tool_end", files=True,
                   tools=[{"tool": "grep", "result": "3 hits"}], audit=[{"event": "read"}])
    with run.node("edit", files=True):
        (repo / "README").write_text("hello\nworld\n")
        (repo / "data.bin").write_bytes(b"\x00\x01\x02binary")
        run.checkpoint({"messages": ["hi", "patched"], "blob": b"\x00\x01"}, node="edit", files=True)
    first = list(run.history())[-1]
    run.fork(first.id, "retry")
    run.checkpoint({"messages": ["hi", "retry"]}, branch="retry", node="edit")
    run.fork(first.id, "main@origin")
    run.fork(first.id, f"main~{'1ef' * 4}")
    try:
        with run.node("deploy"):
            run.checkpoint({"messages": ["hi", "patched", "deploying"]}, node="deploy")
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    tip_before = run.tip()
    run.rollback(run.load("node:edit").id)  # back to the edit node's exit: deploy is rolled back
    run.checkpoint({"messages": ["hi", "patched", "fixed"]}, node="fix", status="completed")
    assert tip_before is not None
    run.files.write("notes.md", "a\nb\n", author="agent:one", reason="first notes")
    run.files.write("notes.md", "a\nc\n", author="agent:two", reason="second notes")
    return run


def test_graph_shows_every_branch_and_the_rolled_back_line(store: gitstate.Store, busy: gitstate.Run) -> None:
    data = ViewData(store)
    g = data.graph("busy")
    ids = [r["id"] for r in g["rows"]]
    names = {b["name"]: b["kind"] for b in g["branches"]}
    assert names == {"main": "branch", "retry": "branch", "main@origin": "remote", f"main~{'1ef' * 4}": "langgraph"}
    for tip in busy.branches().values():
        assert tip.id in ids
    reflog_rows = [r for r in g["rows"] if r["reflog"]]
    assert reflog_rows and any(ref["kind"] == "reflog" for r in reflog_rows for ref in r["refs"])
    assert any(r["node_status"] == "failed" for r in reflog_rows)  # the rolled-back failed node
    assert g["reflog_lines"] == 1
    assert g["total"] == len(ids) == len(set(ids))
    retry_tip = busy.tip("retry")
    assert next(r for r in g["rows"] if r["id"] == retry_tip)["col"] != g["rows"][0]["col"]
    assert g["width"] >= 2
    # paging and "around"
    page = data.graph("busy", offset=2, limit=3)
    assert [r["id"] for r in page["rows"]] == ids[2:5]
    around = data.graph("busy", limit=2, around=ids[-1])
    assert ids[-1] in [r["id"] for r in around["rows"]]
    assert "git log --graph" in g["git"][0]["command"]


def test_nodes_spans_and_failed_nodes(store: gitstate.Store, busy: gitstate.Run) -> None:
    nodes = ViewData(store).nodes("busy")["nodes"]
    edit = [n for n in nodes if n["node"] == "edit" and n["status"] == "completed"]
    assert len(edit) == 2 and all(n["entry"] and n["exit"] for n in edit)  # main's block, retry's node= step
    assert len({(n["entry"], n["exit"]) for n in nodes}) == len(nodes)  # shared history listed once


def test_checkpoint_detail(store: gitstate.Store, busy: gitstate.Run, repo: Path) -> None:
    data = ViewData(store)
    first = list(busy.history())[-1]
    c = data.checkpoint(first.id[:10])
    assert c["id"] == first.id and c["node"] == "plan" and c["trigger"] == "tool_end"
    state = dict((k, v) for k, v in c["state"]["$map"])
    assert state["blob"] == {"$bytes": 2, "hex": "0001"}
    assert [dict(map(tuple, t["$map"])) for t in c["tools"]] == [{"tool": "grep", "result": "3 hits"}]
    assert c["audit"] == [{"$map": [["event", "read"]], "len": 1}]
    assert "README" in [f["path"] for f in c["files"]]
    assert any(cmd["command"].startswith("git ls-tree") for cmd in c["git"])
    tip = busy.head("main")
    assert tip is not None
    edit_exit = busy.load("node:edit")
    f = data.file(edit_exit.id, "data.bin")
    assert f["binary"] is True and f["hex"].startswith("000102")
    t = data.file(edit_exit.id, "README")
    assert t["binary"] is False and t["text"] == "hello\nworld\n"
    with pytest.raises(gitstate.UsageError):
        data.file(edit_exit.id, "nope")


def test_long_values_are_paged(store: gitstate.Store) -> None:
    run = store.create_run(run_id="long")
    cp = run.checkpoint({"items": list(range(1000)), "text": "x" * 300_000, "meta": {"k": list(range(5))}})
    data = ViewData(store)
    c = data.checkpoint(cp.id)
    state = dict((k, v) for k, v in c["state"]["$map"])
    assert state["items"]["len"] == 1000 and len(state["items"]["$list"]) == values.SERVER.items
    assert state["text"]["len"] == 300_000
    more = data.value(cp.id, ["items"], offset=200, limit=50)
    assert more["kind"] == "list" and more["value"][0] == 200 and len(more["value"]) == 50
    text = data.value(cp.id, ["text"])
    assert text["kind"] == "str" and text["total"] == 300_000
    nested = data.value(cp.id, ["meta", "k"], offset=3)
    assert nested["value"] == [3, 4]
    with pytest.raises(gitstate.UsageError):
        data.value(cp.id, ["missing"])


def test_diff_default_parent_appends_and_files(store: gitstate.Store, busy: gitstate.Run) -> None:
    data = ViewData(store)
    edit_exit = busy.load("node:edit")
    inside = next(cp for cp in busy.history() if cp.node == "edit" and cp.trigger is None)
    d = data.diff(inside.id)  # against its parent, the node's entry
    assert d["a"]["id"] == inside.parent_id and d["b"]["id"] == inside.id
    kinds = {tuple(c["path"]): c for c in d["state"]}
    assert kinds[("messages",)]["kind"] == "appended" and kinds[("messages",)]["items"] == ["patched"]
    files = {f["path"]: f for f in d["files"]}
    assert files["README"]["status"] == "modified" and "+world" in files["README"]["diff"]
    assert files["data.bin"]["binary"] is True
    first = list(busy.history())[-1]
    d2 = data.diff(first.id, edit_exit.id)
    assert d2["a"]["id"] == first.id and d2["b"]["id"] == edit_exit.id
    root = data.diff(first.id)
    assert root["a"] is None and {tuple(c["path"]) for c in root["state"]} == {("messages",), ("blob",)}


def test_session_files(store: gitstate.Store, busy: gitstate.Run) -> None:
    data = ViewData(store)
    listing = data.session_files("busy")
    assert [f["path"] for f in listing["files"]] == ["notes.md"]
    one = data.session_file("busy", "notes.md")
    assert [v["version"] for v in one["versions"]] == [2, 1]
    assert one["versions"][0]["author"] == "agent:two" and one["versions"][0]["reason"] == "second notes"
    assert "-b\n+c\n" in one["versions"][0]["diff"]
    assert one["versions"][1]["diff"].startswith("--- /dev/null")


def test_big_file_preview_holds_only_what_is_shown(store: gitstate.Store, repo: Path) -> None:
    """A workspace or session file of many MiB is previewed from its first MAX_FILE_SHOWN bytes:
    the view never holds the whole blob (a 300 MiB file cost 656 MB per request)."""
    import tracemalloc

    from gitstate.view.data import MAX_FILE_SHOWN

    line = b"0123456789abcdef" * 4 + b"\n"
    big = line * (12 * MAX_FILE_SHOWN // len(line))  # 12 MiB of text
    (repo / "big.log").write_bytes(big)
    run = store.create_run(run_id="big")
    cp = run.checkpoint({"n": 1}, files=["big.log"])
    run.files.write("trace.log", b"small\n", author="agent:a")
    run.files.write("trace.log", big, author="agent:a")
    data = ViewData(store)
    tracemalloc.start()
    try:
        shown = data.file(cp.id, "big.log")
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        versions = data.session_file("big", "trace.log")["versions"]
        _, session_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert shown["size"] == len(big) and shown["truncated"] and not shown["binary"]
    assert shown["text"].encode() == big[:MAX_FILE_SHOWN]
    assert peak < 4 * MAX_FILE_SHOWN, peak  # the blob is 12 of them
    assert versions[0]["size"] == len(big) and versions[0]["too_large"] and versions[0]["diff"] is None
    assert versions[0]["text"].encode() == big[:MAX_FILE_SHOWN] and versions[0]["truncated"]
    assert versions[1]["text"] == "small\n"
    assert session_peak < 4 * MAX_FILE_SHOWN, session_peak


def test_runs_page_order_filter_paging(store: gitstate.Store, busy: gitstate.Run) -> None:
    for i in range(5):
        r = store.create_run(workflow="batch" if i % 2 else "solo", run_id=f"r{i}", metadata={"team": f"t{i}"})
        r.checkpoint({"i": i}, status="failed" if i == 3 else None)
    data = ViewData(store)
    page = data.runs(limit=3)
    assert page["total"] == 6 and len(page["runs"]) == 3 and page["next"] == 3
    ids = [r["id"] for r in page["runs"] + data.runs(cursor=3, limit=10)["runs"]]
    assert sorted(ids) == sorted(["busy", "r0", "r1", "r2", "r3", "r4"])
    assert [r["id"] for r in data.runs("status:failed")["runs"]] == ["r3"]
    assert {r["id"] for r in data.runs("workflow:batch")["runs"]} == {"r1", "r3"}
    assert [r["id"] for r in data.runs("t-1")["runs"]] == ["busy"]  # run metadata text
    assert [r["id"] for r in data.runs("T2")["runs"]] == ["r2"]
    assert data.runs("nothing-matches")["runs"] == []
    busy_row = next(r for r in data.runs()["runs"] if r["id"] == "busy")
    assert busy_row["status"] == "completed" and busy_row["branches"] == 4 and busy_row["workflow"] == "triage"


def test_token_changes_when_a_checkpoint_is_written(store: gitstate.Store, busy: gitstate.Run) -> None:
    data = ViewData(store)
    before_run, before_all = data.token("busy"), data.token()
    assert data.token("busy") == before_run
    busy.checkpoint({"messages": []})
    assert data.token("busy") != before_run and data.token() != before_all


def test_reading_never_writes_to_the_repository(store: gitstate.Store, busy: gitstate.Run, repo: Path,
                                                tmp_path: Path) -> None:
    for i in range(70):  # enough runs that Store.list_runs would write its summary cache
        store.create_run(run_id=f"many-{i}")
    store.wait_for_housekeeping()
    before = _tree_digest(repo)
    data = ViewData(gitstate.open_store(repo))
    data.runs()
    data.runs("status:running")
    g = data.graph("busy")
    data.nodes("busy")
    for row in g["rows"]:
        data.checkpoint(row["id"])
        data.diff(row["id"])
    data.session_file("busy", "notes.md")
    from gitstate.view.static import write_html

    write_html(data.store, ["busy"], tmp_path / "out.html")
    assert _tree_digest(repo) == before


class LogState(TypedDict):
    log: Annotated[list[str], operator.add]


def test_langgraph_thread_is_a_run_with_its_time_travel_lines(repo: Path) -> None:
    pytest.importorskip("langgraph.graph")
    from langgraph.graph import END, START, StateGraph

    from gitstate.langgraph import GitCheckpointSaver

    g = StateGraph(LogState)
    g.add_node("a", lambda s: {"log": ["a"]})
    g.add_node("b", lambda s: {"log": ["b"]})
    g.add_edge(START, "a")
    g.add_edge("a", "b")
    g.add_edge("b", END)
    saver = GitCheckpointSaver.from_path(str(repo))
    graph = g.compile(checkpointer=saver)
    cfg = {"configurable": {"thread_id": "lg-thread"}}
    graph.invoke({"log": []}, cfg)
    past = [s for s in graph.get_state_history(cfg) if s.next == ("b",)][0]
    graph.update_state(past.config, {"log": ["edited"]})  # time travel: a new line
    store = gitstate.open_store(repo)
    data = ViewData(store)
    row = next(r for r in data.runs()["runs"] if r["id"] == "lg-thread")
    assert row["workflow"] == "langgraph"
    graph_data = data.graph("lg-thread")
    kinds = {b["kind"] for b in graph_data["branches"]}
    assert "langgraph" in kinds and graph_data["width"] >= 2
    assert any(r["langgraph"] for r in graph_data["rows"])
    tips = [b["tip"] for b in graph_data["branches"]]
    assert all(t in {r["id"] for r in graph_data["rows"]} for t in tips)
    detail = data.checkpoint(tips[-1])
    assert detail["state"] is not None
    assert data.diff(tips[-1])["b"]["id"] == tips[-1]


LANGGRAPH_MESSAGES = ("what is six times seven", "the answer is forty-two", "checked: looks right")


def langgraph_chat(repo: Path, thread: str = "lg-chat") -> None:
    """A LangGraph thread on the git saver: a human message, then an ``agent`` and a ``check`` node
    each adding one AI message (four checkpoints: input, start, agent, check)."""
    from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
    from langgraph.graph.message import add_messages
    from lg_helpers import chain

    from gitstate.langgraph import GitCheckpointSaver

    # the functional form: the class form's annotations would be text LangGraph resolves in this
    # module's globals, where the names imported here are not
    chat = TypedDict("chat", {"messages": Annotated[list[AnyMessage], add_messages]})  # noqa: UP013
    graph = chain(chat, ("agent", lambda s: {"messages": [AIMessage(content=LANGGRAPH_MESSAGES[1], id="a1")]}),
                  ("check", lambda s: {"messages": [AIMessage(content=LANGGRAPH_MESSAGES[2], id="a2")]}))
    app = graph.compile(checkpointer=GitCheckpointSaver.from_path(str(repo)))
    app.invoke({"messages": [HumanMessage(content=LANGGRAPH_MESSAGES[0], id="h1")]},
               {"configurable": {"thread_id": thread}})


def _static_value(data: dict[str, Any], value: Any) -> Any:
    """A value of the static bundle with its shared parts filled in (as the page's script does)."""
    if isinstance(value, list):
        return [_static_value(data, v) for v in value]
    if isinstance(value, dict) and "$ref" in value:
        return _static_value(data, data["values"][value["$ref"]])
    if isinstance(value, dict) and "$map" in value:
        return {**value, "$map": [[_static_value(data, k), _static_value(data, v)] for k, v in value["$map"]]}
    return value


def _static_state(data: dict[str, Any], key: str) -> Any:
    obj = data["objects"][key]
    if obj["t"] == "map":
        return {"$map": [[name, _static_state(data, sub)] for name, _kind, sub in obj["e"]], "len": len(obj["e"])}
    assert obj["t"] == "cbor", obj
    return _static_value(data, obj["v"])


def test_static_html_data_decodes_langgraph_state_as_the_server_does(repo: Path) -> None:
    """The one-file HTML holds a LangGraph thread's channels decoded (its messages, not the
    ``state.cbor`` placeholder), equal to what the server's checkpoint page shows, and per
    channel, so the page's per-step diffs name what each step changed, as the server's do."""
    pytest.importorskip("langgraph.graph")
    from gitstate.view.static import build
    from gitstate.view.values import STATIC

    langgraph_chat(repo)
    store = gitstate.open_store(repo)
    data = build(store, ["lg-chat"])
    server = ViewData(store, STATIC)
    ids = [row["id"] for row in data["graphs"][0]["graph"]["rows"]]
    assert len(ids) == 4
    for cid in ids:
        rec = data["checkpoints"][cid]
        assert rec["state_ref"] is not None and rec["state_ref"][0] == "map", rec
        assert _static_state(data, rec["state_ref"][1]) == server.checkpoint(cid)["state"]
    tip = data["checkpoints"][ids[0]]
    shown = repr(_static_state(data, tip["state_ref"][1]))
    assert all(text in shown for text in LANGGRAPH_MESSAGES) and "serde typed bytes" not in shown
    for cid in ids:
        rec = data["checkpoints"][cid]
        if not rec["parents"]:
            continue
        before, after = (data["objects"][data["checkpoints"][c]["state_ref"][1]]["e"]
                         for c in (rec["parents"][0], cid))
        old, new = ({name: sub for name, _k, sub in entries} for entries in (before, after))
        changed = {name for name in old.keys() | new.keys() if old.get(name) != new.get(name)}
        assert changed, cid  # every step changed something: the page's diff is not empty
        assert changed == {c["path"][0] for c in server.diff(cid)["state"]}
    assert [c["command"] for c in data["git_checkpoint_langgraph"] if "langgraph/" in c["command"]]
    assert tip["langgraph_commands"] is True
