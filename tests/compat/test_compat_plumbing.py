"""A store written by git plumbing alone (``hash-object -w``, ``mktree``, ``commit-tree``,
``update-ref --create-reflog``), following docs/FORMAT.md, with ``gitstate.format.encoding.dumps``
used only to produce the CBOR bytes, in format 1 (every map in canonical order) and in format 2
(state values keep their key order, ``.order.cbor`` entries). gitstate must read both as if it had
written them: this proves FORMAT.md is enough to write a store, and pins what readers accept.

The second test writes the same run with gitstate (same clock, same identity) and compares ids: it
passes only if FORMAT.md describes every byte gitstate writes (messages, trailers, meta keys)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from compat_support import COMMITTER_EMAIL, COMMITTER_NAME, T0, fixed_world, git, init_repo

import gitstate
from gitstate.format.encoding import dumps

RUN = "plumbed run/1"
WT = "main"
RUN_PREFIX = "refs/agentos/main/runs/plumbed%20run%2F1"
WORKFLOW = "by-hand"
LOG = [f"line {i}" for i in range(40)]  # > 32 items: a .list/ tree of two chunks
CONFIG = {f"opt{i:02d}": i for i in range(16)}  # 16 keys: a .map/ tree
TOOLS = [{"name": "grep", "args": ["-n", "x"], "exit": 0}]
AUDIT = [{"event": "tool_call", "actor": "agent"}]
FILES = {"README": b"hello\n", "src/main.py": b"print('hi')\n"}


def iso(seconds: int) -> str:
    return datetime.fromtimestamp(T0 + seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class Plumber:
    """Writes git objects and refs with git's plumbing commands only."""

    repo: Path
    version: int = 2  # the format written
    ids: dict[str, str] = field(default_factory=dict)

    def blob(self, data: bytes) -> str:
        return git(self.repo, "hash-object", "-w", "--stdin", input=data).strip()

    def cbor(self, value: Any) -> str:
        """A state value, tool or audit list: its maps in their key order since format 2."""
        return self.blob(dumps(value, ordered=self.version >= 2))

    def record(self, value: dict[str, Any]) -> str:
        """gitstate's own records (meta.cbor, run.cbor): maps in canonical order in every format."""
        return self.blob(dumps(value))

    def tree(self, entries: list[tuple[str, str, str]]) -> str:
        """``(mode, name, id)`` entries in any order: ``git mktree`` sorts them."""
        kinds = {"040000": "tree"}
        listing = "".join(f"{mode} {kinds.get(mode, 'blob')} {oid}\t{name}\0" for mode, name, oid in entries)
        return git(self.repo, "mktree", "-z", input=listing.encode("utf-8")).strip()

    def commit(self, tree: str, parents: list[str], message: str, seconds: int,
               author: str = COMMITTER_NAME) -> str:
        date = f"{int(T0 + seconds)} +0000"
        env = {"GIT_AUTHOR_NAME": author, "GIT_AUTHOR_EMAIL": COMMITTER_EMAIL, "GIT_AUTHOR_DATE": date,
               "GIT_COMMITTER_NAME": COMMITTER_NAME, "GIT_COMMITTER_EMAIL": COMMITTER_EMAIL,
               "GIT_COMMITTER_DATE": date}
        args = ["commit-tree", tree]
        for p in parents:
            args += ["-p", p]
        # the message on stdin is taken verbatim (no -m/-F, which would reformat it)
        return git(self.repo, *args, input=message, env=env).strip()

    def update_ref(self, ref: str, new: str, old: str, reason: str) -> None:
        git(self.repo, "update-ref", "--create-reflog", "-m", reason, ref, new, old)

    # -- FORMAT.md, section by section ---------------------------------------------------------

    def run_record(self, seconds: int) -> str:
        record = {"format": "gitstate/run", "v": self.version, "id": RUN, "workflow": WORKFLOW, "worktree": WT,
                  "created_at": iso(seconds), "metadata": {"owner": "plumbing", "attempt": 1}}
        tree = self.tree([("100644", "run.cbor", self.record(record))])
        message = f"run {RUN} · {WORKFLOW}\n\nRun: {RUN}\nWorkflow: {WORKFLOW}\nGitstate-Format: {self.version}\n"
        oid = self.commit(tree, [], message, seconds)
        self.update_ref(f"{RUN_PREFIX}/run", oid, "", f"gitstate: create run {RUN}")
        return oid

    def state_tree(self, state: dict[str, Any]) -> str:
        entries = []
        for key, value in state.items():
            if key == "log":
                chunks = [("100644", f"{i:010d}.cbor", self.cbor(value[i:i + 32])) for i in range(0, len(value), 32)]
                entries.append(("040000", "log.list", self.tree(chunks)))
            elif key == "config":
                leaves = [("100644", f"{k}.cbor", self.cbor(v)) for k, v in value.items()]
                entries.append(("040000", "config.map", self.tree(leaves)))
            else:
                entries.append(("100644", f"{key}.cbor", self.cbor(value)))
        if self.version >= 2 and list(state) != sorted(state):  # (these keys sort as their entries)
            entries.append(("100644", ".order.cbor", self.cbor(list(state))))
        return self.tree(entries)

    def checkpoint(self, name: str, *, branch: str, step: int, seconds: int, parent: str | None,
                   state: tuple[str, str], base: int = 0, node: str | None = None, trigger: str | None = None,
                   status: str | None = None, node_status: str | None = None, node_entry: str | None = None,
                   metadata: dict[str, Any] | None = None, extra: list[tuple[str, str, str]] | None = None,
                   expect_ref: str | None = "") -> str:
        meta = {"format": "gitstate/checkpoint", "v": self.version, "run": RUN, "branch": branch, "worktree": WT,
                "workflow": WORKFLOW, "step": step, "base": base or None, "node": node, "trigger": trigger,
                "status": status, "node_status": node_status, "node_entry": node_entry,
                "metadata": metadata or None, "created_at": iso(seconds)}
        meta = {k: v for k, v in meta.items() if v is not None}
        tree = self.tree([("100644", "meta.cbor", self.record(meta)), state, *(extra or [])])
        subject = " · ".join([node or "checkpoint", f"step {step}", trigger or "save", *([status] if status else [])])
        trailers = [("Run", RUN), ("Branch", branch), ("Workflow", WORKFLOW), ("Node", node), ("Step", step),
                    ("Trigger", trigger), ("Status", status), ("Node-Status", node_status),
                    ("Node-Entry", node_entry), ("Gitstate-Format", self.version)]
        message = subject + "\n\n" + "".join(f"{k}: {v}\n" for k, v in trailers if v is not None)
        oid = self.commit(tree, [parent] if parent else [], message, seconds)
        ref = f"{RUN_PREFIX}/heads/{branch}"
        self.update_ref(ref, oid, parent or "" if expect_ref == "" else expect_ref or "",
                        f"gitstate: checkpoint {subject}")
        self.ids[name] = oid
        return oid

    def session_file(self, path_component: str, path: str, versions: list[tuple[bytes, str, str, int]]) -> None:
        parent: str | None = None
        for n, (content, author, reason, seconds) in enumerate(versions, start=1):
            meta = {"format": "gitstate/session-file", "v": self.version, "run": RUN, "path": path, "version": n,
                    "author": author, "reason": reason, "size": len(content), "created_at": iso(seconds)}
            tree = self.tree([("100644", "meta.cbor", self.record(meta)), ("100644", "content", self.blob(content))])
            message = (f"{reason}\n\nPath: {path}\nVersion: {n}\nAuthor: {author}\nRun: {RUN}\n"
                       f"Gitstate-Format: {self.version}\n")
            oid = self.commit(tree, [parent] if parent else [], message, seconds, author=author)
            self.update_ref(f"{RUN_PREFIX}/files/{path_component}", oid, parent or "",
                            f"gitstate: session file {path} version {n}")
            self.ids[f"{path}@{n}"] = oid
            parent = oid


def write_by_plumbing(repo: Path, version: int = 2) -> Plumber:
    p = Plumber(repo, version)
    p.ids["run"] = p.run_record(0)
    s0 = ("040000", "state", p.state_tree({"messages": ["hi"], "count": 0}))
    c0 = p.checkpoint("c0", branch="main", step=0, seconds=1, parent=None, state=s0, trigger="input",
                      metadata={"source": "plumbing"})
    entry = p.checkpoint("entry", branch="main", step=1, seconds=2, parent=c0, state=s0, node="plan",
                         trigger="node_start", node_status="running", metadata={"attempt": 1})
    s2 = ("040000", "state", p.state_tree({"messages": ["hi", "planned"], "count": 1, "log": LOG,
                                           "config": CONFIG}))
    tools = [("100644", "tools.cbor", p.cbor(TOOLS)), ("100644", "audit.cbor", p.cbor(AUDIT))]
    c2 = p.checkpoint("c2", branch="main", step=2, seconds=3, parent=entry, state=s2, node="plan",
                      trigger="tool_end", extra=tools)
    exit_ = p.checkpoint("exit", branch="main", step=3, seconds=4, parent=c2, state=s2, node="plan",
                         trigger="node_end", node_status="completed", node_entry=entry, metadata={"attempt": 1})
    files_tree = p.tree([("100644", "README", p.blob(FILES["README"])),
                         ("040000", "src", p.tree([("100644", "main.py", p.blob(FILES["src/main.py"]))]))])
    p.checkpoint("c4", branch="main", step=4, seconds=5, parent=exit_, state=s2, status="completed",
                 extra=[("040000", "files", files_tree)])
    # a fork from c0 with a non-mapping state
    p.update_ref(f"{RUN_PREFIX}/heads/other", c0, "", f"gitstate: fork other from {c0[:12]}")
    p.checkpoint("other1", branch="other", step=1, seconds=6, parent=c0,
                 state=("100644", "state.cbor", p.cbor([1, 2, 3])), trigger="edit", expect_ref=c0)
    # a pruned line: it starts at step 7 (base 7), no parent
    p.checkpoint("pruned7", branch="pruned", step=7, seconds=7, parent=None, base=7, state=s0)
    p.checkpoint("pruned8", branch="pruned", step=8, seconds=8, parent=p.ids["pruned7"], base=7, state=s0)
    p.session_file("notes%2Etxt", "notes.txt", [(b"v1\n", "agent:writer", "first", 9),
                                                (b"v2\n", "agent:writer", "second", 10)])
    return p


@pytest.mark.parametrize("version", [1, 2])
def test_gitstate_reads_a_store_written_by_git_plumbing(tmp_path: Path, version: int) -> None:
    repo = init_repo(tmp_path / "repo")
    p = write_by_plumbing(repo, version)
    ids = p.ids
    assert git(repo, "fsck", "--strict", "--no-dangling", "--no-progress") == ""
    with gitstate.open_store(repo) as store:
        (summary,) = store.list_runs()
        assert (summary.id, summary.workflow, summary.branch, summary.node, summary.step, summary.status,
                summary.checkpoints, summary.worktree, summary.branches, summary.error) == (
            RUN, WORKFLOW, "main", None, 4, "completed", 5, "main", 3, None)
        assert summary.created_at == datetime(2026, 1, 1, 0, 0, 0, 250000, UTC)
        assert summary.updated_at == datetime(2026, 1, 1, 0, 0, 8, 250000, UTC)  # newest tip: pruned8
        run = store.get_run(RUN)
        assert (run.workflow, run.metadata) == (WORKFLOW, {"owner": "plumbing", "attempt": 1})
        assert run.created_at == summary.created_at
        history = list(run.history())
        assert [(c.id, c.step, c.node, c.trigger, c.status, c.node_status, c.node_entry, c.metadata)
                for c in history] == [
            (ids["c4"], 4, None, None, "completed", None, None, {}),
            (ids["exit"], 3, "plan", "node_end", None, "completed", ids["entry"], {"attempt": 1}),
            (ids["c2"], 2, "plan", "tool_end", None, None, None, {}),
            (ids["entry"], 1, "plan", "node_start", None, "running", None, {"attempt": 1}),
            (ids["c0"], 0, None, "input", None, None, None, {"source": "plumbing"}),
        ]
        assert [c.parent_id for c in history] == [ids["exit"], ids["c2"], ids["entry"], ids["c0"], None]
        assert all((c.run_id, c.branch, c.workflow, c.base) == (RUN, "main", WORKFLOW, 0) for c in history)
        assert [c.created_at.second for c in history] == [5, 4, 3, 2, 1]
        assert history[0].state == {"messages": ["hi", "planned"], "count": 1, "log": LOG, "config": CONFIG}
        assert history[4].state == {"messages": ["hi"], "count": 0}
        # format 2 keeps the keys' order; format 1 gives the tree's order (canonical inside blobs)
        assert list(history[0].state) == (["messages", "count", "log", "config"] if version == 2
                                          else ["config", "count", "log", "messages"])
        assert list(history[2].tools[0]) == (["name", "args", "exit"] if version == 2 else ["args", "exit", "name"])
        assert history[1].state_id == history[0].state_id  # a node exit carries the state tree as is
        assert (history[2].tools, history[2].audit) == (TOOLS, AUDIT)
        assert (history[0].tools, history[0].audit, history[0].files_paths) == ([], [], None)
        assert history[0].files_tree_id == git(repo, "rev-parse", f"{ids['c4']}:files").strip()
        assert history[1].files_tree_id is None
        assert run.load("node:plan").id == ids["exit"]
        assert run.load(ids["c2"][:10]).step == 2
        (boundary,) = run.nodes()
        assert (boundary.node, boundary.entry, boundary.exit, boundary.status) == (
            "plan", ids["entry"], ids["exit"], "completed")
        assert sorted(run.branches()) == ["main", "other", "pruned"]
        other = run.head("other")
        assert other is not None and (other.id, other.step, other.state, other.trigger) == (
            ids["other1"], 1, [1, 2, 3], "edit")
        assert [c.id for c in run.history("other")] == [ids["other1"], ids["c0"]]
        pruned = list(run.history("pruned"))
        assert [(c.step, c.base) for c in pruned] == [(8, 7), (7, 7)]
        listing = run.files.list()
        assert list(listing) == ["notes.txt"] and listing.errors == {}
        assert [(v.version, v.author, v.reason, v.size, v.commit) for v in run.files.history("notes.txt")] == [
            (1, "agent:writer", "first", 3, ids["notes.txt@1"]), (2, "agent:writer", "second", 3, ids["notes.txt@2"])]
        assert run.files.read("notes.txt") == b"v2\n"
        assert run.files.read("notes.txt", version=1) == b"v1\n"
        # and gitstate can continue the hand-written line
        nxt = run.checkpoint({"more": True}, trigger="after")
        assert (nxt.step, nxt.parent_id) == (5, ids["c4"])
        undone = run.undo()
        assert undone is not None and undone.id == ids["c4"]


def test_plumbing_store_has_the_ids_gitstate_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """gitstate writing the same run at the same times gives the same object ids as the plumbing
    writer: FORMAT.md describes every byte (meta keys, null omission, messages, trailers, identity)."""
    plumbed = write_by_plumbing(init_repo(tmp_path / "plumbed")).ids
    clock = fixed_world(monkeypatch)
    repo = init_repo(tmp_path / "gitstate")
    (repo / "src").mkdir()
    (repo / "src" / "main.py").write_bytes(FILES["src/main.py"])
    ids: dict[str, str] = {}
    with gitstate.open_store(repo) as store:
        clock.at(0)
        run = store.create_run(workflow=WORKFLOW, run_id=RUN, metadata={"owner": "plumbing", "attempt": 1})
        ids["run"] = git(repo, "rev-parse", f"{RUN_PREFIX}/run").strip()
        clock.at(1)
        ids["c0"] = run.checkpoint({"messages": ["hi"], "count": 0}, trigger="input",
                                   metadata={"source": "plumbing"}).id
        # (the plumbing store marks its node with the earlier node_start/node_end checkpoints, which
        # gitstate still reads but no longer writes: the main line after c0 is not compared)
        run.fork(ids["c0"], "other")
        clock.at(6)
        ids["other1"] = run.checkpoint([1, 2, 3], branch="other", trigger="edit").id
        clock.at(9)
        ids["notes.txt@1"] = run.files.write("notes.txt", b"v1\n", author="agent:writer", reason="first").commit
        clock.at(10)
        ids["notes.txt@2"] = run.files.write("notes.txt", b"v2\n", author="agent:writer", reason="second").commit
    assert {k: v for k, v in plumbed.items() if k in ids} == ids
    assert set(ids) == {"run", "c0", "other1", "notes.txt@1", "notes.txt@2"}
