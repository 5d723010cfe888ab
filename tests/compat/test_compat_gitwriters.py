"""gitstate against git's own writers and readers: blobs and trees have the ids ``git hash-object``
and ``git mktree`` compute for the same content, workspace snapshots the ids ``git add`` +
``git write-tree`` give, ``git fsck --strict`` finds nothing to say about a varied store, and what
git shows (``cat-file``, ``log``, trailers, ``for-each-ref``, reflogs) is what docs/FORMAT.md says."""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import Any

import pytest
from compat_support import (
    AUDIT,
    BIG_MAP_STATE,
    SMALL_STATE,
    TOOLS,
    WORKSPACE,
    VariedStore,
    blob_id,
    fixed_world,
    git,
    git_bytes,
    git_raw,
    init_repo,
    ls_tree,
    make_workspace,
    rev,
    write_varied_store,
)
from langgraph.checkpoint.base import empty_checkpoint

import gitstate
from gitstate.format.encoding import dumps, loads
from gitstate.format.names import encode_component
from gitstate.git.objects import MODE_BLOB, MODE_COMMIT, MODE_EXEC, MODE_LINK, MODE_TREE, tree_bytes
from gitstate.langgraph import GitCheckpointSaver

RUN = "golden run/1"
RUN_REF = "refs/agentos/main/runs/golden%20run%2F1"


@pytest.fixture
def varied(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, VariedStore]:
    """A repository holding the varied store (fixed clock and identity) and a LangGraph thread."""
    clock = fixed_world(monkeypatch)
    repo = init_repo(tmp_path / "repo")
    make_workspace(repo)
    with gitstate.open_store(repo) as store:
        written = write_varied_store(store, clock)
        clock.at(50)
        saver = GitCheckpointSaver(store)
        cp = empty_checkpoint()
        cp["channel_values"] = {"items": [f"item {i}" for i in range(70)], "note": "x"}
        cp["channel_versions"] = {"items": "1", "note": "1"}
        conf = saver.put({"configurable": {"thread_id": "lg thread", "checkpoint_ns": ""}}, cp,
                         {"source": "input", "step": -1, "parents": {}}, {"items": "1", "note": "1"})
        saver.put_writes(conf, [("note", "y")], "task-1")
        store.pack()  # some objects in a gitstate pack, the rest loose
    return repo, written


# -- trees and blobs -------------------------------------------------------------------------------

def _fake_id(label: str) -> str:
    return hashlib.sha1(label.encode()).hexdigest()


TREE_CASES: dict[str, list[tuple[str, str, int]]] = {
    # `a` as a directory sorts as `a/`: after `a-b` and `a.b`, before `a0`
    "directory sorts as name/": [("a0", _fake_id("1"), MODE_BLOB), ("a", _fake_id("2"), MODE_TREE),
                                  ("a.b", _fake_id("3"), MODE_BLOB), ("a-b", _fake_id("4"), MODE_BLOB),
                                  ("a b", _fake_id("5"), MODE_BLOB), ("ab", _fake_id("6"), MODE_BLOB)],
    # `a` as a file sorts before `a.b`
    "file sorts as name": [("a.b", _fake_id("1"), MODE_BLOB), ("a", _fake_id("2"), MODE_BLOB),
                           ("a0", _fake_id("3"), MODE_TREE)],
    # bytes order of UTF-8, upper case before lower case
    "non-ascii names": [("é", _fake_id("1"), MODE_BLOB), ("e", _fake_id("2"), MODE_BLOB),
                        ("Ä", _fake_id("3"), MODE_TREE), ("日本語.txt", _fake_id("4"), MODE_BLOB),
                        ("Z", _fake_id("5"), MODE_BLOB), ("z", _fake_id("6"), MODE_BLOB),
                        ("e\u0301", _fake_id("7"), MODE_BLOB)],
    "every mode": [("run.sh", _fake_id("1"), MODE_EXEC), ("link", _fake_id("2"), MODE_LINK),
                   ("dir", _fake_id("3"), MODE_TREE), ("module", _fake_id("4"), MODE_COMMIT),
                   ("plain", _fake_id("5"), MODE_BLOB)],
    "state entry names": [(encode_component(k) + ".cbor", _fake_id(k), MODE_BLOB) for k in SMALL_STATE]
    + [("config.map", _fake_id("m"), MODE_TREE), ("log.list", _fake_id("l"), MODE_TREE)],
    "list chunks and subtrees": [(f"{i * 32:010d}.cbor", _fake_id(str(i)), MODE_BLOB) for i in range(5)]
    + [("0000002048", _fake_id("sub"), MODE_TREE)],
    "empty tree": [],
}


@pytest.mark.parametrize("case", sorted(TREE_CASES))
def test_tree_bytes_equal_git_mktree(case: str, tmp_path: Path) -> None:
    repo = init_repo(tmp_path / "repo")
    entries = TREE_CASES[case]
    data = tree_bytes(entries)
    ours = hashlib.sha1(b"tree %d\x00" % len(data) + data).hexdigest()
    kinds = {MODE_TREE: "tree", MODE_COMMIT: "commit"}
    listing = b"".join(b"%s %s %s\t%s\x00" % (f"{mode:06o}".encode(), kinds.get(mode, "blob").encode(),
                                               oid.encode(), name.encode("utf-8"))
                       for name, oid, mode in entries)
    theirs = git(repo, "mktree", "-z", "--missing", input=listing).strip()
    assert ours == theirs
    assert git_bytes(repo, "cat-file", "tree", theirs) == data


def test_state_blobs_and_tree_equal_git_hash_object_and_mktree(varied: tuple[Path, VariedStore]) -> None:
    """Each state key is a blob of ``dumps(value, ordered=True)`` named ``<encoded key>.cbor``, and
    the keys' order (not the tree's) is the blob ``.order.cbor``; git builds the same tree from
    those blobs."""
    repo, written = varied
    state = written.ids["small.state"]
    listing = b""
    for key, value in SMALL_STATE.items():
        oid = blob_id(repo, dumps(value, ordered=True))
        assert rev(repo, f"{state}:{encode_component(key)}.cbor") == oid, key
        listing += b"100644 blob %s\t%s\x00" % (oid.encode(), (encode_component(key) + ".cbor").encode())
    order = blob_id(repo, dumps(list(SMALL_STATE)))
    assert rev(repo, f"{state}:.order.cbor") == order
    listing += b"100644 blob %s\t.order.cbor\x00" % order.encode()
    assert git(repo, "mktree", "-z", input=listing).strip() == state
    tools = written.ids["tools_audit"]
    assert rev(repo, f"{tools}:tools.cbor") == blob_id(repo, dumps(TOOLS, ordered=True))
    assert rev(repo, f"{tools}:audit.cbor") == blob_id(repo, dumps(AUDIT, ordered=True))
    assert list(loads(git_bytes(repo, "cat-file", "blob", f"{tools}:tools.cbor"))[0]) == ["name", "args", "result", "ms"]
    leaf = written.ids["leaf"]
    assert rev(repo, f"{leaf}:state.cbor") == written.ids["leaf.state"]
    big = written.ids["big_map.state"]
    assert rev(repo, f"{big}:config.map/key07.cbor") == blob_id(repo, dumps(7))
    assert rev(repo, f"{big}:tiny.cbor") == blob_id(repo, dumps(BIG_MAP_STATE["tiny"], ordered=True))
    assert rev(repo, f"{big}:nested.map/deep.cbor") == blob_id(repo, dumps({"x": {"y": 1}}, ordered=True))
    assert rev(repo, f"{big}:nested.map/inner.list/0000000032.cbor") == blob_id(repo, dumps(list(range(32, 40))))
    assert rev(repo, f"{big}:nested.map/.order.cbor") == blob_id(repo, dumps(["small", "inner", "deep"]))
    assert git(repo, "ls-tree", "--name-only", f"{big}:config.map").split("\n")[0] == "key00.cbor"  # in order


def test_session_file_content_is_the_git_blob(varied: tuple[Path, VariedStore]) -> None:
    repo, written = varied
    assert rev(repo, written.ids["session.v1"] + ":content") == blob_id(repo, b"# Plan\n\n- go\n")
    assert rev(repo, written.ids["session.other"] + ":content") == blob_id(repo, b"\x00\x01\x02")
    assert git_bytes(repo, "show", written.ids["session.v2"] + ":content") == b"# Plan\n\n- go\n- come back\n"


def _git_add_tree(repo: Path, tmp: Path, paths: list[str]) -> str:
    """The tree ``git add`` + ``git write-tree`` build for ``paths`` in a scratch index."""
    env = {"GIT_INDEX_FILE": str(tmp / "scratch-index")}
    git(repo, "add", "-A", "--", *paths, env=env)
    return git(repo, "write-tree", env=env).strip()


def test_workspace_snapshot_equals_git_add(varied: tuple[Path, VariedStore], tmp_path: Path) -> None:
    """files=True captures what `git add -A` stages (sorting of a/ vs a.b, a-b, a0; non-ASCII paths;
    the executable bit; a symbolic link as a 120000 blob of its target; .gitignore honoured)."""
    repo, written = varied
    (tmp_path / "full").mkdir()
    (tmp_path / "part").mkdir()
    assert written.ids["files.snapshot"] == _git_add_tree(repo, tmp_path / "full", ["."])
    assert written.ids["files_partial.snapshot"] == _git_add_tree(repo, tmp_path / "part", ["a", "script.sh"])
    entries = {name: (mode, oid) for mode, _kind, oid, name in ls_tree(repo, written.ids["files.snapshot"])}
    assert entries["script.sh"] == ("100755", blob_id(repo, WORKSPACE["script.sh"].encode()))
    assert entries["link-to-a.b"] == ("120000", blob_id(repo, b"a.b"))
    assert entries["a"][0] == "040000"
    assert "ignored.log" not in entries and ".git" not in entries
    assert list(entries) == [".gitignore", "README", "Z upper", "a-b", "a.b", "a", "a0", "link-to-a.b",
                             "script.sh", "émoji-ñame"]


def test_workspace_snapshot_applies_gitattributes_like_git_add(tmp_path: Path) -> None:
    """Clean filters and .gitattributes apply as for `git add`: CRLF text normalised, binary kept."""
    repo = init_repo(tmp_path / "repo", files={".gitattributes": "*.txt text eol=crlf\n*.bin binary\n"})
    (repo / "crlf.txt").write_bytes(b"one\r\ntwo\r\n")
    (repo / "lf.txt").write_bytes(b"one\ntwo\n")
    (repo / "data.bin").write_bytes(b"a\r\nb\r\n")
    with gitstate.open_store(repo) as store:
        cp = store.create_run(run_id="attrs").checkpoint({}, files=True)
    (tmp_path / "idx").mkdir()
    assert cp.files_tree_id == _git_add_tree(repo, tmp_path / "idx", ["."])
    assert rev(repo, f"{cp.files_tree_id}:crlf.txt") == blob_id(repo, b"one\ntwo\n")


def test_every_tree_gitstate_wrote_is_what_git_mktree_builds(varied: tuple[Path, VariedStore]) -> None:
    repo, _written = varied
    objects = git(repo, "rev-list", "--objects", "--reflog", "--glob=refs/agentos/*").split("\n")
    ids = [line.split(" ", 1)[0] for line in objects if line]
    kinds = git(repo, "cat-file", "--batch-check=%(objectname) %(objecttype)", input="\n".join(ids) + "\n")
    trees = [line.split()[0] for line in kinds.splitlines() if line.endswith(" tree")]
    assert len(trees) > 40
    for tree in trees:
        listing = git_bytes(repo, "ls-tree", "-z", tree)
        assert git(repo, "mktree", "-z", input=listing).strip() == tree


def test_fsck_strict_is_clean(varied: tuple[Path, VariedStore]) -> None:
    repo, _written = varied
    packs = list((repo / ".git" / "objects" / "pack").glob("pack-*.pack"))
    assert packs, "store.pack() should have written a pack for fsck to check"
    out = git_raw(repo, "fsck", "--strict", "--full", "--no-dangling", "--no-progress", check=False)
    assert (out.returncode, out.stdout, out.stderr) == (0, b"", b"")


# -- what git shows --------------------------------------------------------------------------------

def _meta(repo: Path, spec: str) -> Any:
    raw = git_bytes(repo, "cat-file", "-p", spec)
    # canonical: re-encoding gives the same bytes (so a format-1 reader decodes it, finds v 2 and
    # refuses it as a newer version, not as a damaged object)
    assert dumps(loads(raw)) == raw
    return loads(raw)


def test_meta_cbor_decodes_to_documented_fields(varied: tuple[Path, VariedStore]) -> None:
    repo, w = varied
    ids = w.ids
    base = {"format": "gitstate/checkpoint", "v": 2, "run": RUN, "worktree": "main", "workflow": "compat"}
    assert _meta(repo, ids["small"] + ":meta.cbor") == {
        **base, "branch": "main", "step": 0, "node": "plan", "trigger": "tool_end", "status": "running",
        "metadata": {"model": "m-1", "tokens": 42}, "created_at": "2026-01-01T00:00:01.250000Z"}
    assert _meta(repo, ids["leaf"] + ":meta.cbor") == {
        **base, "branch": "leaf", "step": 0, "created_at": "2026-01-01T00:00:02.250000Z"}
    # checkpoints written inside a node are ordinary checkpoints; the boundary is in the node log
    assert _meta(repo, ids["node.entry"] + ":meta.cbor") == {
        **base, "branch": "main", "step": 4, "node": "review", "trigger": "llm_end",
        "created_at": "2026-01-01T00:00:07.250000Z"}
    assert _meta(repo, ids["node.exit"] + ":meta.cbor") == {
        **base, "branch": "main", "step": 5, "node": "review", "trigger": "llm_end",
        "created_at": "2026-01-01T00:00:07.250000Z"}
    assert _meta(repo, ids["node.log"] + ":node.cbor") == {
        "format": "gitstate/node", "v": 2, "run": RUN, "id": _meta(repo, ids["node.log"] + ":node.cbor")["id"],
        "node": "explode", "branch": "main", "status": "failed", "entry": ids["node_failed.exit"],
        "exit": ids["node_failed.exit"], "base": ids["node.exit"], "started_at": "2026-01-01T00:00:08.250000Z",
        "ended_at": "2026-01-01T00:00:09.250000Z", "error": "ValueError: boom"}
    assert git(repo, "ls-tree", ids["node.log"]) == (
        f"160000 commit {ids['node_failed.exit']}\tentry\n160000 commit {ids['node_failed.exit']}\texit\n"
        f"100644 blob {git(repo, 'rev-parse', ids['node.log'] + ':node.cbor').strip()}\tnode.cbor\n")
    assert _meta(repo, ids["files"] + ":meta.cbor") == {
        **base, "branch": "main", "step": 7, "status": "completed", "created_at": "2026-01-01T00:00:10.250000Z"}
    assert _meta(repo, ids["files_partial"] + ":meta.cbor")["files_paths"] == ["a", "script.sh"]
    pruned = _meta(repo, ids["pruned.head"] + ":meta.cbor")
    assert (pruned["branch"], pruned["step"], pruned["base"]) == ("prune-me", 3, 2)
    assert _meta(repo, f"{RUN_REF}/run:run.cbor") == {
        "format": "gitstate/run", "v": 2, "id": RUN, "workflow": "compat", "worktree": "main",
        "created_at": "2026-01-01T00:00:00.250000Z", "metadata": {"purpose": "golden", "n": 1}}
    assert _meta(repo, "refs/agentos/main/runs/plain/run:run.cbor") == {
        "format": "gitstate/run", "v": 2, "id": "plain", "worktree": "main",
        "created_at": "2026-01-01T00:00:17.250000Z"}
    assert _meta(repo, ids["session.v2"] + ":meta.cbor") == {
        "format": "gitstate/session-file", "v": 2, "run": RUN, "path": "notes/plan.md", "version": 2,
        "author": "human <x@y>", "reason": "second", "size": 25, "created_at": "2026-01-01T00:00:15.250000Z"}
    assert git(repo, "ls-tree", "--name-only", ids["session.v2"]) == "content\nmeta.cbor\n"
    assert git(repo, "ls-tree", "--name-only", ids["tools_audit"]) == "audit.cbor\nmeta.cbor\nstate\ntools.cbor\n"
    assert git(repo, "ls-tree", "--name-only", ids["files"]) == "files\nmeta.cbor\nstate\n"
    assert git(repo, "ls-tree", "--name-only", ids["leaf"]) == "meta.cbor\nstate.cbor\n"


def _trailers(repo: Path, rev_: str) -> list[str]:
    """The trailers as git's own parser finds them (git log %(trailers))."""
    return git(repo, "log", "-1", "--format=%(trailers:only,unfold)", rev_).strip().split("\n")


def test_commit_messages_and_trailers_as_git_shows_them(varied: tuple[Path, VariedStore]) -> None:
    repo, w = varied
    ids = w.ids
    assert git(repo, "log", "-1", "--format=%B", ids["small"]) == (
        "plan · step 0 · tool_end · running\n\nRun: golden run/1\nBranch: main\nWorkflow: compat\nNode: plan\n"
        "Step: 0\nTrigger: tool_end\nStatus: running\nGitstate-Format: 2\n\n")
    assert _trailers(repo, ids["node.exit"]) == [
        "Run: golden run/1", "Branch: main", "Workflow: compat", "Node: review", "Step: 5", "Trigger: llm_end",
        "Gitstate-Format: 2"]
    assert _trailers(repo, ids["node.log"])[:5] == [
        "Run: golden run/1", "Branch: main", "Node: explode",
        f"Node-Id: {_meta(repo, ids['node.log'] + ':node.cbor')['id']}", "Node-Status: failed"]
    assert git(repo, "log", "-1", "--format=%s", ids["leaf"]) == "checkpoint · step 0 · save\n"
    assert _trailers(repo, ids["leaf"]) == [
        "Run: golden run/1", "Branch: leaf", "Workflow: compat", "Step: 0", "Gitstate-Format: 2"]
    assert git(repo, "log", "-1", "--format=%(trailers:key=Step,valueonly)", ids["files"]).strip() == "7"
    assert git(repo, "log", "--format=%s", f"{RUN_REF}/heads/main").splitlines() == [
        "checkpoint · step 7 · save · completed", "explode · step 6 · save",
        "review · step 5 · llm_end", "review · step 4 · llm_end", "act · step 3 · tool_end",
        "checkpoint · step 2 · save", "collect · step 1 · tool_end", "plan · step 0 · tool_end · running"]
    # run record and session files
    assert git(repo, "log", "-1", "--format=%B", f"{RUN_REF}/run") == (
        "run golden run/1 · compat\n\nRun: golden run/1\nWorkflow: compat\nGitstate-Format: 2\n\n")
    assert git(repo, "log", "-1", "--format=%B", "refs/agentos/main/runs/plain/run") == (
        "run plain\n\nRun: plain\nGitstate-Format: 2\n\n")
    assert git(repo, "log", "-1", "--format=%B", ids["session.v1"]) == (
        "first draft\n\nwritten by the planner\n\nPath: notes/plan.md\nVersion: 1\nAuthor: agent:planner\n"
        "Run: golden run/1\nGitstate-Format: 2\n\n")
    assert git(repo, "log", "--format=%an <%ae>|%cn <%ce>|%(trailers:key=Version,valueonly,separator=)",
               f"{RUN_REF}/files/notes%2Fplan%2Emd") == (
        "human x@y <compat@gitstate.example>|Compat Committer <compat@gitstate.example>|2\n"
        "agent:planner <compat@gitstate.example>|Compat Committer <compat@gitstate.example>|1\n")
    assert git(repo, "log", "-1", "--format=%s", ids["session.other"]) == "write data.bin\n"
    assert git(repo, "show", f"{RUN_REF}/files/notes%2Fplan%2Emd:content") == "# Plan\n\n- go\n- come back\n"
    # LangGraph: the core trailers followed by the LangGraph ones, one trailer block
    lg = "refs/agentos/main/runs/lg%20thread/heads/main"
    trailers = _trailers(repo, lg)
    assert trailers[:5] == ["Run: lg thread", "Branch: main", "Workflow: langgraph", "Step: 0", "LangGraph-Step: -1"]
    assert trailers[5:8] == ["Trigger: input", "Status: completed", "Gitstate-Format: 2"]
    assert len(trailers) == 9 and trailers[8].startswith("LangGraph-Checkpoint: ")
    assert git(repo, "log", "-1", "--format=%s", lg) == "checkpoint · step -1 · input · completed\n"


def test_for_each_ref_lists_documented_ref_names(varied: tuple[Path, VariedStore], tmp_path: Path) -> None:
    repo, w = varied
    refs = git(repo, "for-each-ref", "--format=%(refname) %(objecttype)", "refs/agentos/").splitlines()
    # the pending writes of the thread's checkpoint (put_writes with no put after it) are a writes
    # ref named by its blob's id (the checkpoint id in the blob varies from run to run)
    writes_ref = re.compile(r"refs/agentos/main/runs/lg%20thread/writes/([0-9a-f]{40}) blob")
    found = [m for m in map(writes_ref.fullmatch, refs) if m]
    assert len(found) == 1
    lg_writes = found[0].group(1)
    assert blob_id(repo, git_bytes(repo, "cat-file", "blob", lg_writes)) == lg_writes
    assert loads(git_bytes(repo, "cat-file", "blob", lg_writes))["format"] == "langgraph-writes"
    assert refs == [f"{r} commit" for r in [
        "refs/agentos/main/runs/golden%20run%2F1/files/data%2Ebin",
        "refs/agentos/main/runs/golden%20run%2F1/files/notes%2Fplan%2Emd",
        "refs/agentos/main/runs/golden%20run%2F1/heads/alt",
        "refs/agentos/main/runs/golden%20run%2F1/heads/leaf",
        "refs/agentos/main/runs/golden%20run%2F1/heads/main",
        "refs/agentos/main/runs/golden%20run%2F1/heads/partial",
        "refs/agentos/main/runs/golden%20run%2F1/heads/prune-me",
        "refs/agentos/main/runs/golden%20run%2F1/nodes/alt",  # forked from main: starts with main's node log
        "refs/agentos/main/runs/golden%20run%2F1/nodes/main",
        "refs/agentos/main/runs/golden%20run%2F1/run",
        "refs/agentos/main/runs/lg%20thread/heads/main",
        "refs/agentos/main/runs/lg%20thread/run",
    ]] + [
        # the pending writes of the thread's checkpoint (put_writes with no put after it): a blob
        f"refs/agentos/main/runs/lg%20thread/writes/{lg_writes} blob",
    ] + [f"{r} commit" for r in [
        "refs/agentos/main/runs/plain/heads/main",
        "refs/agentos/main/runs/plain/run",
    ]]
    for line in refs:
        git(repo, "check-ref-format", line.split(" ")[0])
    assert rev(repo, f"{RUN_REF}/heads/main") == w.ids["files"]
    # a linked worktree's runs live under wt-<admin id>
    git(repo, "worktree", "add", "-q", "--detach", str(tmp_path / "wt.é"))
    assert os.listdir(repo / ".git" / "worktrees") == ["wt.é"]  # the admin id git chose
    with gitstate.open_store(tmp_path / "wt.é") as store:
        store.create_run(run_id="linked").checkpoint({"x": 1}, branch="feat/é")
    assert git(repo, "for-each-ref", "--format=%(refname)", "refs/agentos/").splitlines()[-2:] == [
        "refs/agentos/wt-wt%2E%C3%A9/runs/linked/heads/feat%2F%C3%A9",
        "refs/agentos/wt-wt%2E%C3%A9/runs/linked/run",
    ]


def test_reflogs_record_gitstate_moves(varied: tuple[Path, VariedStore]) -> None:
    """Every ref move is in the ref's reflog (created by gitstate), messages starting `gitstate: `."""
    repo, w = varied
    log = git(repo, "reflog", "show", "--format=%gs", f"{RUN_REF}/heads/prune-me").splitlines()
    assert log == ["gitstate: prune to the 2 newest checkpoints",
                   "gitstate: checkpoint checkpoint · step 3 · save",
                   "gitstate: checkpoint checkpoint · step 2 · save",
                   "gitstate: checkpoint checkpoint · step 1 · save",
                   "gitstate: checkpoint checkpoint · step 0 · save"]
    alt = git(repo, "reflog", "show", "--format=%gs", f"{RUN_REF}/heads/alt").splitlines()
    assert alt == ["gitstate: checkpoint checkpoint · step 3 · edit",
                   f"gitstate: fork alt from {w.ids['big_map'][:12]}"]
    assert git(repo, "reflog", "show", "--format=%gs", f"{RUN_REF}/run").splitlines() == [
        "gitstate: create run golden run/1"]
    assert (repo / ".git" / "logs" / "refs" / "agentos" / "main" / "runs" / "plain" / "heads" / "main").is_file()
