"""A store written by the format-1 code (tests/compat/fixtures/store-format1.tar.gz, made by
make_fixture.py) is read the same by the current code: ids, steps, states, node boundaries,
workspace snapshots, session-file versions, LangGraph tuples. The expectations are hard-coded from
what was written; they must never be edited to follow a reader change (that would be a reader that
no longer reads old stores). A new format gets a new fixture file and a new test beside this one."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from compat_support import git, git_raw, unpack
from langgraph.types import Interrupt
from make_fixture import build_graph

import gitstate
from gitstate.langgraph import GitCheckpointSaver
from gitstate.verify import verify

FIXTURE = Path(__file__).parent / "fixtures" / "store-format1.tar.gz"
RUN = "agent run/1"

A0 = "b541221023795f87de4671d00b3c714668148fe9"  # input, files=True (v1 world)
A1 = "29dff3436fdc438703eb62cf21ae6bb666356a9a"  # plan entry
A2 = "19f61922f3b0929db17c445f14606fde10a0c118"  # inside plan, tools/audit
A3 = "e0b1e9ad28a05a87aad98598a90da62e48d3862d"  # plan exit
A4 = "9712e2d12ebbbf654f45098c2f82148a0e425c26"  # patch entry (files: v2 world)
A5 = "38ff9e82602f12aa0c61fd77d4a7778acf8023d6"  # inside patch: long list, big map
A6 = "59a62ea2f48ced9707bddf9dfde5522d22c64565"  # patch exit (files) = main's tip
A7 = "949d494f7de0306199ab1c309dce9dffbcc6a458"  # test entry (only in main's reflog)
A8 = "7ae85c48df25b5e446024e1b79bdd8bb530d3a04"  # test exit, failed
A9 = "edc8998a6894d3569e747871c069151094a26465"  # partial snapshot of src/, status done
E4 = "465c6adff64b7daea021ce7af66239045760aec6"  # experiment: non-mapping state
SAFETY = "2a5fb90fdc16f22eac04fe6ad6b64dec5c18afa3"  # restore-safety before restoring A0
SNAP_V1 = "fa81fe12abe0f7aa8a9441dd4678209a6e0b837a"
SNAP_V2 = "b09da48474da5e4cf3f7eba641485618334067ac"
SNAP_SRC = "d73b84c24d5fb528d77b14f0f664575e445e0b29"
PRUNED = ["83065adf3d639b400bf1b34a43549a24dabb09fb", "6f955f470c62d5cb555de36cd1a2012dd9044838",
          "eb626904d72a88db8d65c330b4a14cb5de8af528"]
PLAN_V = ["7a4fa770afa25fa22569f25e7a59d2983d0ae9a9", "5ea9ff577d881e084d9c83b7eda25b9935c10875",
          "1531e4e9dde49f88c127718794c2de706a77951f"]
REPORT_V1 = "add37ba36fd99e659c83bfdedb309018034da4e9"

S0 = {"messages": [{"role": "user", "content": "fix the bug"}], "turn": 0}
S2 = {"messages": [{"role": "user", "content": "fix the bug"}], "turn": 1, "plan": ["read", "patch", "test"]}
S5 = {"turn": 2, "log": [f"edit {i}" for i in range(100)], "index": {f"file{i:02d}": {"lines": i} for i in range(20)}}
V1_FILES = {".gitignore": "*.tmp\n", "README": "fixture repository\n", "data/config.json": '{"debug": false}\n',
            "src/app.py": "print('v1')\n"}
V2_FILES = {**V1_FILES, "src/app.py": "print('v2')\n", "src/util.py": "def helper():\n    return 2\n"}

LG = "lg-thread"
SUB_NS = "sub:71c138e9-5b58-bfe4-d5a6-949264f964a0"
LG_FORK = "1f1e729a-0efd-68fb-8002-68c89b6f3487"
LG_ROOT = ["1f1e729a-0ea7-6817-8003-46130a2a3e3d", "1f1e729a-0e77-6a09-8002-13bf7b8d90aa",
           "1f1e729a-0d1f-69e3-8001-fa5dac6a264f", "1f1e729a-0d15-6995-8000-6bdd59e51bb3",
           "1f1e729a-0ceb-6edc-bfff-c6eb8d2a7a15"]
LG_SUB = ["1f1e729a-0d82-6738-8001-eee1affcc0e9", "1f1e729a-0d7d-6c86-8000-50feda528289",
          "1f1e729a-0d66-6216-bfff-b310443107aa"]
LG_TASK = "12c705d8-8572-ead7-4a8d-645ecfa268c0"

REFS = """\
1531e4e9dde49f88c127718794c2de706a77951f refs/agentos/main/runs/agent%20run%2F1/files/notes%2Fplan%2Emd
add37ba36fd99e659c83bfdedb309018034da4e9 refs/agentos/main/runs/agent%20run%2F1/files/report%2Ejson
465c6adff64b7daea021ce7af66239045760aec6 refs/agentos/main/runs/agent%20run%2F1/heads/experiment
59a62ea2f48ced9707bddf9dfde5522d22c64565 refs/agentos/main/runs/agent%20run%2F1/heads/main
2a5fb90fdc16f22eac04fe6ad6b64dec5c18afa3 refs/agentos/main/runs/agent%20run%2F1/heads/restore-safety
760674dfe6c481470f1d84a205ef708fdffb1646 refs/agentos/main/runs/agent%20run%2F1/run
92d07cb2b8c698b2b7eab096d730bacfd3f38b8c refs/agentos/main/runs/empty/run
7bf6ec0bcb912c80776ffb86b203f3b32445a914 refs/agentos/main/runs/lg-thread/heads/main
a7d54bd06921685d18219f4812e6603bd16e3e16 refs/agentos/main/runs/lg-thread/heads/main%7E1f1e729a-0efd-68fb-8002-68c89b6f3487
c812904db0a567e883a848afdb02e018e6e8a8b3 refs/agentos/main/runs/lg-thread/heads/ns%3Asub%3A71c138e9-5b58-bfe4-d5a6-949264f964a0
32aec16acd7f7958e2fda0aa9b3dd6a8d4d1d5b3 refs/agentos/main/runs/lg-thread/run
83065adf3d639b400bf1b34a43549a24dabb09fb refs/agentos/main/runs/pruned/heads/main
2fb4026c635f724112759f8f2e04e489a5f2f54f refs/agentos/main/runs/pruned/run
"""


def at(seconds: int) -> datetime:
    """The fixture's core writes happened at 2026-01-01T00:00:00.25Z + ``seconds``."""
    return datetime(2026, 1, 1, 0, 0, seconds, 250000, UTC)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return unpack(FIXTURE, tmp_path)


@pytest.fixture
def store(repo: Path) -> Iterator[gitstate.Store]:
    with gitstate.open_store(repo) as s:
        yield s


def test_fixture_is_small_and_sound(repo: Path) -> None:
    assert FIXTURE.stat().st_size < 200_000
    out = git_raw(repo, "fsck", "--strict", "--full", "--no-dangling", "--no-progress", check=False)
    assert (out.returncode, out.stdout, out.stderr) == (0, b"", b"")
    assert git(repo, "for-each-ref", "--format=%(objectname) %(refname)", "refs/agentos/") == REFS


def test_verify_finds_nothing_wrong(store: gitstate.Store) -> None:
    """Every check of verify (node logs and their boundaries, LangGraph checkpoints' stored shape,
    a pruned run …) accepts what the format-1 code wrote."""
    report = verify(store)
    assert report.ok and report.checkpoints == 21, report.problems


def test_runs_are_listed_as_written(store: gitstate.Store) -> None:
    rows = [(r.id, r.workflow, r.branch, r.node, r.step, r.status, r.checkpoints, r.branches, r.worktree,
             r.created_at, r.updated_at, r.error) for r in store.list_runs()]
    assert rows == [
        # summarised on the line of its latest checkpoint (an update_state on a past one), with
        # LangGraph's step; written before statuses were recorded: running
        (LG, "langgraph", "main~1f1e729a-0efd-68fb-8002-68c89b6f3487", None, 2, "running", 4, 3, "main",
         datetime(2026, 11, 23, 10, 35, 40, 284097, UTC), datetime(2026, 11, 23, 10, 35, 40, 497169, UTC), None),
        ("empty", None, None, None, None, "running", 0, 0, "main", at(29), at(29), None),
        ("pruned", "batch", "main", None, 5, "running", 3, 1, "main", at(21), at(27), None),
        (RUN, "triage", "main", "patch", 6, "running", 7, 3, "main", at(0), at(16), None),
    ]
    run = store.get_run(RUN)
    assert (run.workflow, run.metadata, run.created_at) == ("triage", {"ticket": 78}, at(0))
    assert store.get_run("empty").workflow is None


def _rows(run: gitstate.Run, branch: str) -> list[tuple[Any, ...]]:
    return [(c.id, c.step, c.base, c.node, c.trigger, c.status, c.node_status, c.node_entry, c.metadata,
             c.files_tree_id, c.files_paths, c.created_at, c.parent_id) for c in run.history(branch)]


def test_checkpoints_read_back_as_written(store: gitstate.Store) -> None:
    run = store.get_run(RUN)
    assert sorted(run.branches()) == ["experiment", "main", "restore-safety"]
    line = [
        (A3, 3, 0, "plan", "node_end", None, "completed", A1, {"attempt": 1}, None, None, at(4), A2),
        (A2, 2, 0, "plan", "tool_end", None, None, None, {}, None, None, at(3), A1),
        (A1, 1, 0, "plan", "node_start", None, "running", None, {"attempt": 1}, SNAP_V1, None, at(2), A0),
        (A0, 0, 0, None, "input", None, None, None, {"model": "m-1"}, SNAP_V1, None, at(1), None),
    ]
    assert _rows(run, "main") == [
        (A6, 6, 0, "patch", "node_end", None, "completed", A4, {}, SNAP_V2, None, at(7), A5),
        (A5, 5, 0, "patch", "tool_end", None, None, None, {}, None, None, at(6), A4),
        (A4, 4, 0, "patch", "node_start", None, "running", None, {}, SNAP_V2, None, at(5), A3),
        *line,
    ]
    assert _rows(run, "experiment") == [(E4, 4, 0, None, "edit", None, None, None, {}, None, None, at(12), A3),
                                        *line]
    assert _rows(run, "restore-safety") == [
        (SAFETY, 0, 0, None, "restore_safety", None, None, None, {"restore_of": A0, "branch": "main"}, SNAP_V2,
         None, at(16), None)]
    states = {c.id: c.state for c in run.history("main")}
    assert states == {A0: S0, A1: S0, A2: S2, A3: S2, A4: S2, A5: S5, A6: S5}
    assert run.head("experiment") is not None and run.load(E4).state == ["not", "a", "mapping", 4]
    assert run.load(SAFETY).state == S5
    a2 = run.load(A2[:8])
    assert (a2.tools, a2.audit) == ([{"name": "read", "args": {"path": "src/app.py"}, "ok": True}],
                                    [{"event": "tool_call", "tool": "read"}])
    assert (a2.run_id, a2.branch, a2.workflow, a2.parent_ids) == (RUN, "main", "triage", (A1,))
    assert run.load(A0).tools == [] and run.load(A0).audit == []
    assert len({run.load(x).state_id for x in (A2, A3, A4)}) == 1  # boundaries carry the state tree as is


def test_node_boundaries(store: gitstate.Store) -> None:
    run = store.get_run(RUN)
    assert [(b.node, b.entry, b.exit, b.status) for b in run.nodes()] == [
        ("plan", A1, A3, "completed"), ("patch", A4, A6, "completed")]
    assert [(b.node, b.entry, b.exit, b.status) for b in run.nodes("experiment")] == [("plan", A1, A3, "completed")]
    assert run.load("node:patch").id == A6
    assert run.load("node:plan").id == A3
    assert run.load("node:plan", branch="experiment").id == A3
    with pytest.raises(gitstate.InvalidReferenceError):
        run.load("node:test")  # the failed node is only on the rolled-back line


def test_rolled_back_line_comes_back_with_undo(store: gitstate.Store) -> None:
    """main was rolled back to node:plan, undone, then rolled back to node:patch: the old reflog
    still undoes that last rollback, and the line after it reads as written."""
    run = store.get_run(RUN)
    back = run.undo()
    assert back is not None and back.id == A9
    assert _rows(run, "main")[:3] == [
        (A9, 9, 0, None, None, "completed", None, None, {}, SNAP_SRC, ("src",), at(10), A8),
        (A8, 8, 0, "test", "node_end", None, "failed", A7, {"error": "RuntimeError: tests failed"}, SNAP_V2, None,
         at(9), A7),
        (A7, 7, 0, "test", "node_start", None, "running", None, {}, SNAP_V2, None, at(8), A6),
    ]
    assert run.head() is not None and run.load(A9).state == {"turn": 3, "result": "partial"}
    assert run.load(A8).state == S5
    assert [(b.node, b.status) for b in run.nodes()] == [("plan", "completed"), ("patch", "completed"),
                                                         ("test", "failed")]
    assert run.load("node:test").id == A8
    listed = {s.id: s for s in store.list_runs()}[RUN]
    assert (listed.step, listed.status, listed.checkpoints) == (9, "completed", 10)
    nxt = run.checkpoint({"turn": 4}, trigger="after-upgrade")
    assert (nxt.step, nxt.parent_id, nxt.state) == (10, A9, {"turn": 4})


def _tree_files(repo: Path, tree: str) -> dict[str, str]:
    names = git(repo, "ls-tree", "-r", "--name-only", tree).splitlines()
    return {name: git(repo, "cat-file", "blob", f"{tree}:{name}") for name in names}


def _disk_files(repo: Path) -> dict[str, str]:
    return {p.relative_to(repo).as_posix(): p.read_text() for p in sorted(repo.rglob("*"))
            if p.is_file() and ".git" not in p.relative_to(repo).parts and not p.name.endswith(".tmp")}


def test_workspace_snapshots_and_restore(repo: Path, store: gitstate.Store) -> None:
    assert _tree_files(repo, SNAP_V1) == V1_FILES
    assert _tree_files(repo, SNAP_V2) == V2_FILES
    assert _tree_files(repo, SNAP_SRC) == {k: v for k, v in V2_FILES.items() if k.startswith("src/")}
    assert _disk_files(repo) == V1_FILES  # the fixture's worktree was restored to A0
    run = store.get_run(RUN)
    result = run.restore("node:patch")
    assert (result.checkpoint, result.changed, result.added, result.removed) == (
        A6, ("src/app.py",), ("src/util.py",), ())
    assert _disk_files(repo) == V2_FILES
    assert result.safety is not None
    run.restore(result.safety)
    assert _disk_files(repo) == V1_FILES
    # the partial snapshot restores only src/
    (repo / "README").write_text("edited, outside the snapshot\n")
    partial = run.restore(A9)
    assert (partial.changed, partial.added, partial.removed) == (("src/app.py",), ("src/util.py",), ())
    assert _disk_files(repo) == {**V2_FILES, "README": "edited, outside the snapshot\n"}
    assert (repo / "scratch.tmp").read_text() == "ignored\n"  # ignored files are never touched


def test_session_files(store: gitstate.Store) -> None:
    files = store.get_run(RUN).files
    listing = files.list()
    assert {p: (v.version, v.commit) for p, v in listing.items()} == {
        "notes/plan.md": (3, PLAN_V[2]), "report.json": (1, REPORT_V1)}
    assert listing.errors == {}
    assert [(v.path, v.version, v.author, v.reason, v.size, v.created_at, v.commit)
            for v in files.history("notes/plan.md")] == [
        ("notes/plan.md", 1, "agent:planner", "draft", 16, at(17), PLAN_V[0]),
        ("notes/plan.md", 2, "agent:planner", "add patch step\n\nafter reading the code", 25, at(18), PLAN_V[1]),
        ("notes/plan.md", 3, "human <me@x>", "review", 33, at(19), PLAN_V[2]),
    ]
    assert [files.read("notes/plan.md", version=n) for n in (1, 2, 3)] == [
        b"# Plan\n\n1. read\n", b"# Plan\n\n1. read\n2. patch\n", b"# Plan\n\n1. read\n2. patch\n3. test\n"]
    assert files.read("report.json") == b'{"ok": false}'
    latest = files.latest("report.json")
    assert latest is not None and (latest.author, latest.reason, latest.created_at) == ("agent:tester", "", at(20))
    v4 = files.write("notes/plan.md", "4\n", author="agent:upgrade", expect_version=3)
    assert v4.version == 4 and files.read("notes/plan.md") == b"4\n"


def test_pruned_empty_and_deleted_runs(repo: Path, store: gitstate.Store) -> None:
    pruned = store.get_run("pruned")
    assert [(c.id, c.step, c.base, c.state, c.trigger, c.parent_id) for c in pruned.history()] == [
        (PRUNED[0], 5, 3, {"i": 5}, "tick", PRUNED[1]), (PRUNED[1], 4, 3, {"i": 4}, "tick", PRUNED[2]),
        (PRUNED[2], 3, 3, {"i": 3}, "tick", None)]
    undone = pruned.undo()  # the pre-prune line is still in the reflog
    assert undone is not None and [c.step for c in pruned.history()] == [5, 4, 3, 2, 1, 0]
    assert store.get_run("empty").branches() == {}
    with pytest.raises(gitstate.RunNotFound):
        store.get_run("short-lived")
    assert not store.has_run("short-lived")
    assert git(repo, "for-each-ref", "refs/agentos/main/runs/short-lived/") == ""


def test_langgraph_thread(store: gitstate.Store) -> None:
    saver = GitCheckpointSaver(store)
    latest = saver.get_tuple({"configurable": {"thread_id": LG}})
    assert latest is not None
    assert latest.config == {"configurable": {"thread_id": LG, "checkpoint_ns": "", "checkpoint_id": LG_FORK}}
    assert latest.parent_config == {"configurable": {"thread_id": LG, "checkpoint_ns": "", "checkpoint_id": LG_ROOT[2]}}
    assert latest.checkpoint == {
        "v": 4, "id": LG_FORK, "ts": "2026-11-23T10:35:40.494445+00:00", "updated_channels": None,
        "channel_values": {"branch:to:sub": None, "count": 1, "items": ["start", "agent", "edited"]},
        "channel_versions": {"__start__": "00000000000000000000000000000002.0.08114751764626327",
                             "branch:to:agent": "00000000000000000000000000000003.0.5752794548343511",
                             "branch:to:sub": "00000000000000000000000000000004.0.685227955455393",
                             "count": "00000000000000000000000000000003.0.5752794548343511",
                             "items": "00000000000000000000000000000004.0.685227955455393"},
        "versions_seen": {"__input__": {},
                          "__start__": {"__start__": "00000000000000000000000000000001.0.8263309376560026"},
                          "agent": {"branch:to:agent": "00000000000000000000000000000002.0.08114751764626327"}},
    }
    assert latest.metadata == {"parents": {}, "source": "update", "step": 2}
    assert latest.pending_writes == []
    asked = saver.get_tuple({"configurable": {"thread_id": LG, "checkpoint_ns": "", "checkpoint_id": LG_ROOT[1]}})
    assert asked is not None and asked.metadata == {"parents": {}, "source": "loop", "step": 2}
    assert asked.checkpoint["channel_values"] == {"branch:to:ask": None, "count": 2,
                                                  "items": ["start", "agent", "start", "agent", "inner"]}
    assert asked.checkpoint["updated_channels"] == ["branch:to:ask", "count", "items"]
    assert asked.pending_writes == [
        ("00000000-0000-0000-0000-000000000000", "__resume__", "yes"),
        (LG_TASK, "__resume__", ["yes"]),
        (LG_TASK, "__interrupt__", [Interrupt(value="approve?", id="a5798d258b0f9804353ceaad6c98a935")]),
        (LG_TASK, "items", ["answer:yes"]),
        (LG_TASK, "count", 3),
    ]
    listed = [(t.config["configurable"]["checkpoint_ns"], t.config["configurable"]["checkpoint_id"],
               t.metadata.get("source"), t.metadata.get("step"))
              for t in saver.list({"configurable": {"thread_id": LG}})]
    assert listed == [("", LG_FORK, "update", 2), ("", LG_ROOT[0], "loop", 3), ("", LG_ROOT[1], "loop", 2),
                      ("", LG_ROOT[2], "loop", 1), ("", LG_ROOT[3], "loop", 0), ("", LG_ROOT[4], "input", -1),
                      (SUB_NS, LG_SUB[0], "loop", 1), (SUB_NS, LG_SUB[1], "loop", 0), (SUB_NS, LG_SUB[2], "input", -1)]
    sub = saver.get_tuple({"configurable": {"thread_id": LG, "checkpoint_ns": SUB_NS}})
    assert sub is not None and sub.checkpoint["channel_values"] == {"count": 2, "items": ["start", "agent", "inner"]}
    assert sub.metadata == {"source": "loop", "step": 1, "parents": {"": LG_ROOT[2]}}
    # the graph itself sees the thread as it was, and continues it from the fork
    graph = build_graph(saver)
    cfg: Any = {"configurable": {"thread_id": LG}}
    assert [(s.values, s.next) for s in graph.get_state_history(cfg)] == [
        ({"items": ["start", "agent", "edited"], "count": 1}, ("sub",)),
        ({"items": ["start", "agent", "start", "agent", "inner", "answer:yes"], "count": 3}, ()),
        ({"items": ["start", "agent", "start", "agent", "inner"], "count": 2}, ("ask",)),
        ({"items": ["start", "agent"], "count": 1}, ("sub",)),
        ({"items": ["start"], "count": 0}, ("agent",)),
        ({"items": []}, ("__start__",)),
    ]
    out = graph.invoke(None, latest.config)
    assert (out["count"], out["items"][-1]) == (2, "inner")
    assert graph.get_state(cfg).next == ("ask",)
    run = store.get_run(LG)
    assert run.head() is not None and run.head().metadata == {"checkpoint_id": LG_ROOT[0], "langgraph_step": 3}


def test_an_old_langgraph_commit_amended_now_keeps_its_trailers(repo: Path, store: gitstate.Store) -> None:
    """A checkpoint written before its subject carried LangGraph's step, amended now by an
    interrupt write: the commit gets today's message (LangGraph's step in the subject, the
    interrupted status) and keeps its LangGraph trailers, so the saver still finds it."""
    saver = GitCheckpointSaver(store)
    ref = "refs/agentos/main/runs/lg-thread/heads/main"
    assert git(repo, "log", "-1", "--format=%s", ref) == "checkpoint · step 4 · loop\n"  # the position
    conf: Any = {"configurable": {"thread_id": LG, "checkpoint_ns": "", "checkpoint_id": LG_ROOT[0]}}
    saver.put_writes(conf, [("__interrupt__", [Interrupt(value="again?", id="i-2")])], "task-2",
                     "~__pregel_pull, agent")
    message = git(repo, "log", "-1", "--format=%B", ref)
    assert message.startswith("checkpoint · step 3 · loop · interrupted\n"), message
    assert f"LangGraph-Checkpoint: {LG_ROOT[0]}\n" in message and f"LangGraph-Parent: {LG_ROOT[1]}\n" in message
    again = GitCheckpointSaver(gitstate.open_store(repo)).get_tuple(conf)
    assert again is not None and again.metadata == {"parents": {}, "source": "loop", "step": 3}
    assert ("task-2", "__interrupt__", [Interrupt(value="again?", id="i-2")]) in again.pending_writes
    assert len(list(saver.list({"configurable": {"thread_id": LG}}))) == 9
