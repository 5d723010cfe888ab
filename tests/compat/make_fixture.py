"""Generate a fixture store for tests/compat/test_compat_fixture.py.

RUN ONLY TO CREATE A NEW FIXTURE VERSION. The fixtures under tests/compat/fixtures/ are stores
written by a released format and must never be regenerated in place: their whole point is that later
code keeps reading bytes written by earlier code. To add a version (say, after a format change),
run this script (adapted to the new writer) with a new ``--output`` name, then add a test for the new
file beside the existing ones, with expectations copied from what this script prints.

    .venv/bin/python tests/compat/make_fixture.py --output tests/compat/fixtures/store-format1.tar.gz

The store is written in a fresh repository (scrubbed git environment, fixed committer identity,
gitstate's clock fixed at 2026-01-01 + n seconds for the core writes), then the whole repository
(work tree and ``.git``, without git's sample hooks) is saved as a gzipped tarball with normalised
owners and times. The LangGraph thread is written by a real graph run, so its checkpoint ids and
timestamps differ at every run of this script.

What it holds (see the printed summary for ids):

- run ``agent run/1`` (workflow ``triage``): checkpoints with workspace snapshots (``files=True``,
  a partial one), node boundaries (``plan``, ``patch`` with files, a failed ``test``), tools/audit,
  a long list and a big map in the state, a fork ``experiment`` with a non-mapping state, a rollback,
  its undo and a second rollback (main ends at ``node:patch``; the rolled-back checkpoints are only
  in the reflog), a restore (so a ``restore-safety`` branch), session files ``notes/plan.md``
  (3 versions) and ``report.json``;
- run ``pruned`` (6 checkpoints pruned to 3), run ``empty`` (no checkpoint, no workflow), run
  ``short-lived`` (deleted: its refs and reflogs are gone, its objects stay unreachable);
- LangGraph thread ``lg-thread`` (GitCheckpointSaver): a graph with a subgraph and an interrupt,
  resumed, then forked by ``update_state`` on an earlier checkpoint.
"""

from __future__ import annotations

import argparse
import gzip
import io
import operator
import os
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any, TypedDict

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from compat_support import (  # noqa: E402
    COMMITTER_EMAIL,
    COMMITTER_NAME,
    T0,
    Clock,
    git,
    init_repo,
)

USER_FILES = {
    "README": "fixture repository\n",
    "src/app.py": "print('v1')\n",
    "data/config.json": '{"debug": false}\n',
    ".gitignore": "*.tmp\n",
}
SCRUB = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY", "GIT_COMMON_DIR",
         "GIT_CEILING_DIRECTORIES", "AGENTOS_REPO", "GIT_CONFIG", "GIT_CONFIG_GLOBAL", "GIT_AUTHOR_DATE",
         "GIT_COMMITTER_DATE")


class Item(TypedDict):
    items: Annotated[list[str], operator.add]
    count: int


def build_graph(saver: Any) -> Any:
    from langgraph.graph import END, START, StateGraph
    from langgraph.types import interrupt

    inner = StateGraph(Item)
    inner.add_node("inner", lambda s: {"items": ["inner"], "count": s["count"] + 1})
    inner.add_edge(START, "inner")
    inner.add_edge("inner", END)
    outer = StateGraph(Item)
    outer.add_node("agent", lambda s: {"items": ["agent"], "count": s["count"] + 1})
    outer.add_node("sub", inner.compile())
    outer.add_node("ask", lambda s: {"items": [f"answer:{interrupt('approve?')}"], "count": s["count"] + 1})
    outer.add_edge(START, "agent")
    outer.add_edge("agent", "sub")
    outer.add_edge("sub", "ask")
    outer.add_edge("ask", END)
    return outer.compile(checkpointer=saver)


def write_store(repo: Path, clock: Clock) -> dict[str, Any]:
    import gitstate
    from gitstate.langgraph import GitCheckpointSaver

    out: dict[str, Any] = {}
    real_time = time.time
    time.time = clock
    try:
        store = gitstate.open_store(repo, pack_in_background=False)
        clock.at(0)
        run = store.create_run(workflow="triage", run_id="agent run/1", metadata={"ticket": 78})
        clock.at(1)
        a0 = run.checkpoint({"messages": [{"role": "user", "content": "fix the bug"}], "turn": 0},
                            trigger="input", files=True, metadata={"model": "m-1"})
        clock.at(2)
        with run.node("plan", metadata={"attempt": 1}) as plan:
            clock.at(3)
            a2 = plan.checkpoint({"messages": [{"role": "user", "content": "fix the bug"}], "turn": 1,
                                  "plan": ["read", "patch", "test"]}, trigger="tool_end",
                                 tools=[{"name": "read", "args": {"path": "src/app.py"}, "ok": True}],
                                 audit=[{"event": "tool_call", "tool": "read"}])
            clock.at(4)
        (repo / "src" / "app.py").write_text("print('v2')\n")
        (repo / "src" / "util.py").write_text("def helper():\n    return 2\n")
        (repo / "scratch.tmp").write_text("ignored\n")
        clock.at(5)
        with run.node("patch", files=True) as patch:
            clock.at(6)
            a5 = patch.checkpoint({"turn": 2, "log": [f"edit {i}" for i in range(100)],
                                   "index": {f"file{i:02d}": {"lines": i} for i in range(20)}},
                                  trigger="tool_end")
            clock.at(7)
        clock.at(8)
        try:
            with run.node("test"):
                clock.at(9)
                raise RuntimeError("tests failed")
        except RuntimeError:
            pass
        clock.at(10)
        a9 = run.checkpoint({"turn": 3, "result": "partial"}, status="done", files=["src"])
        store.pack()  # what is written so far goes into a gitstate pack; the rest stays loose
        clock.at(11)
        run.fork("node:plan", "experiment")
        clock.at(12)
        e4 = run.checkpoint(["not", "a", "mapping", 4], branch="experiment", trigger="edit")
        clock.at(13)
        run.rollback("node:plan")
        clock.at(14)
        run.undo()
        clock.at(15)
        run.rollback("node:patch")
        clock.at(16)
        restored = run.restore(a0)
        clock.at(17)
        f1 = run.files.write("notes/plan.md", "# Plan\n\n1. read\n", author="agent:planner", reason="draft")
        clock.at(18)
        f2 = run.files.write("notes/plan.md", "# Plan\n\n1. read\n2. patch\n", author="agent:planner",
                             reason="add patch step\n\nafter reading the code")
        clock.at(19)
        f3 = run.files.write("notes/plan.md", b"# Plan\n\n1. read\n2. patch\n3. test\n", author="human <me@x>",
                             reason="review")
        clock.at(20)
        r1 = run.files.write("report.json", b'{"ok": false}', author="agent:tester")
        clock.at(21)
        pruned = store.create_run(workflow="batch", run_id="pruned")
        for i in range(6):
            clock.at(22 + i)
            pruned.checkpoint({"i": i}, trigger="tick")
        clock.at(28)
        prune = pruned.prune(keep_latest=3)
        clock.at(29)
        store.create_run(run_id="empty")
        clock.at(30)
        gone = store.create_run(workflow="tmp", run_id="short-lived")
        gone.checkpoint({"x": 1})
        clock.at(31)
        store.delete_run("short-lived")
        out.update(a0=a0.id, a2=a2.id, a5=a5.id, a9=a9.id, e4=e4.id, plan=(plan.entry, plan.exit),
                   patch=(patch.entry, patch.exit), restored=restored, files=[f1, f2, f3, r1],
                   prune=prune)
    finally:
        time.time = real_time
    # LangGraph: real graph, real clock (LangGraph's own ids are time-based uuid6)
    from langgraph.types import Command

    saver = GitCheckpointSaver(store)
    graph = build_graph(saver)
    cfg: Any = {"configurable": {"thread_id": "lg-thread"}}
    graph.invoke({"items": ["start"], "count": 0}, cfg)
    graph.invoke(Command(resume="yes"), cfg)
    past = [s for s in graph.get_state_history(cfg) if s.next == ("sub",)][0]
    fork_cfg = graph.update_state(past.config, {"items": ["edited"]})
    out["lg_fork"] = fork_cfg
    out["lg_list"] = [(t.config["configurable"]["checkpoint_ns"], t.config["configurable"]["checkpoint_id"],
                       t.metadata.get("source"), t.metadata.get("step"))
                      for t in saver.list({"configurable": {"thread_id": "lg-thread"}})]
    store.close()
    return out


def write_tarball(repo: Path, output: Path) -> None:
    """The repository as a tarball with sorted entries, owner 0 and fixed times."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(repo.rglob("*")):
            rel = path.relative_to(repo.parent)
            if rel.parts[1:3] == (".git", "hooks") and path.name.endswith(".sample"):
                continue
            info = tar.gettarinfo(str(path), arcname=str(rel))
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mtime = int(T0)
            if info.isfile():
                with open(path, "rb") as fh:
                    tar.addfile(info, fh)
            else:
                tar.addfile(info)
    with open(output, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, compresslevel=9) as gz:
        gz.write(buf.getvalue())


def make_fixture(description: str | None, files: Mapping[str, str] | None,
                 write: Callable[[Path], dict[str, Any] | None]) -> None:
    """The command line of a fixture maker: ``--output TARBALL`` (never overwritten); ``write``
    fills a fresh repository (one commit of ``files``) in a scrubbed environment, and its refs and
    what it returns are printed."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output", type=Path, required=True, help="tarball to write (must not exist)")
    args = parser.parse_args()
    if args.output.exists():
        sys.exit(f"{args.output} exists: fixtures are never regenerated in place; choose a new name")
    with tempfile.TemporaryDirectory(prefix="gitstate-fixture-") as tmp:
        home = Path(tmp) / "home"
        home.mkdir()
        for name in SCRUB:
            os.environ.pop(name, None)
        os.environ.update({"HOME": str(home), "GIT_CONFIG_NOSYSTEM": "1", "LC_ALL": "C",
                           "GIT_AUTHOR_NAME": COMMITTER_NAME, "GIT_AUTHOR_EMAIL": COMMITTER_EMAIL,
                           "GIT_COMMITTER_NAME": COMMITTER_NAME, "GIT_COMMITTER_EMAIL": COMMITTER_EMAIL})
        repo = init_repo(Path(tmp) / "repo", files=files)
        written = write(repo) or {}
        refs = git(repo, "for-each-ref", "--format=%(objectname) %(refname)", "refs/agentos/")
        args.output.parent.mkdir(parents=True, exist_ok=True)
        write_tarball(repo, args.output)
    print(refs)
    for key, value in written.items():
        print(f"{key}: {value!r}")
    print(f"wrote {args.output} ({args.output.stat().st_size} bytes)")


def main() -> None:
    make_fixture(__doc__, USER_FILES, lambda repo: write_store(repo, Clock()))


if __name__ == "__main__":
    main()
