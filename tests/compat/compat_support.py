"""Helpers shared by the compatibility suite (tests/compat/): real git with a fixed locale and a
scrubbed environment, a settable clock for gitstate, and the "varied store" the golden-id and
git-equality tests write.

Only gitstate's public API is used (``gitstate.open_store``, ``Store``/``Run``/``Checkpoint``,
``gitstate.langgraph.GitCheckpointSaver``) plus the format-level helpers
``gitstate.format.encoding.dumps/loads``, ``gitstate.git.objects.tree_bytes``/``MODE_*`` and
``gitstate.format.names.encode_component/branch_ref/run_info_ref``.

Changing :func:`write_varied_store` changes the ids pinned in test_compat_golden.py."""

from __future__ import annotations

import os
import subprocess
import tarfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import gitstate

# 2026-01-01T00:00:00Z: every write of the varied store happens at T0 + a whole number of seconds
# plus a quarter second (so created_at shows microseconds and commit times truncate).
T0 = 1767225600.25
COMMITTER_NAME = "Compat Committer"
COMMITTER_EMAIL = "compat@gitstate.example"

# Variables that would point git (or gitstate) somewhere else or change its output.
_SCRUB = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY", "GIT_COMMON_DIR",
          "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_CEILING_DIRECTORIES", "AGENTOS_REPO", "GIT_CONFIG",
          "GIT_CONFIG_GLOBAL", "GIT_CONFIG_PARAMETERS", "GIT_CONFIG_COUNT", "GIT_NAMESPACE",
          "GIT_REPLACE_REF_BASE", "GIT_NO_REPLACE_OBJECTS", "GIT_GRAFT_FILE", "GIT_SHALLOW_FILE",
          "GIT_TRACE", "GIT_TRACE2", "GIT_TRACE2_EVENT", "GIT_PAGER", "PAGER", "LANGUAGE")


def git_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of every git call: the test's environment (already scrubbed by
    tests/conftest.py) with LC_ALL=C and nothing that redirects git."""
    env = {k: v for k, v in os.environ.items() if k not in _SCRUB}
    env.update({"LC_ALL": "C", "LANG": "C", "GIT_CONFIG_NOSYSTEM": "1", "GIT_TERMINAL_PROMPT": "0"})
    if extra:
        env.update(extra)
    return env


def git_raw(cwd: str | os.PathLike[str], *args: str, input: bytes | None = None,
            env: Mapping[str, str] | None = None, check: bool = True) -> subprocess.CompletedProcess[bytes]:
    """Run real git; stdout/stderr as bytes. Fails the test (with git's stderr) unless it succeeds."""
    out = subprocess.run(["git", *args], cwd=cwd, input=input, capture_output=True, env=git_env(env),
                         check=False, timeout=60)
    if check and out.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed ({out.returncode}): "
                             f"{out.stderr.decode('utf-8', 'replace')}")
    return out


def git(cwd: str | os.PathLike[str], *args: str, input: bytes | str | None = None,
        env: Mapping[str, str] | None = None) -> str:
    """Run real git and return its stdout as text (surrounding whitespace kept)."""
    data = input.encode("utf-8") if isinstance(input, str) else input
    return git_raw(cwd, *args, input=data, env=env).stdout.decode("utf-8")


def git_bytes(cwd: str | os.PathLike[str], *args: str, input: bytes | None = None) -> bytes:
    """Run real git and return its stdout as bytes."""
    return git_raw(cwd, *args, input=input).stdout


def unpack(fixture: Path, dest: Path) -> Path:
    """Extract a fixture tarball (one of tests/compat/fixtures/) into ``dest``; its repository."""
    with tarfile.open(fixture) as tar:
        if hasattr(tarfile, "data_filter"):  # Python 3.11.4+
            tar.extractall(dest, filter="data")
        else:  # pragma: no cover - our own fixture, from this repository
            tar.extractall(dest)  # noqa: S202
    return dest / "repo"


def init_repo(path: Path, *, files: Mapping[str, str] | None = None) -> Path:
    """A fresh non-bare repository on branch ``main`` with one commit of ``files`` (README by default)."""
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", "main")
    # The same identity as the environment (fixed_world): ids do not depend on which one wins.
    git(path, "config", "user.name", COMMITTER_NAME)
    git(path, "config", "user.email", COMMITTER_EMAIL)
    for name, text in (files or {"README": "hello\n"}).items():
        target = path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "initial",
        env={"GIT_AUTHOR_DATE": "1767225600 +0000", "GIT_COMMITTER_DATE": "1767225600 +0000"})
    return path


class Clock:
    """A settable replacement for ``time.time``: every call returns :attr:`now` until it is set again,
    so ids do not depend on how many times gitstate reads the clock within one write."""

    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def at(self, seconds: int) -> None:
        """Set the clock to ``T0 + seconds``."""
        self.now = T0 + seconds


#: The process an open node boundary's record names (its ``owner``): fixed, as the clock is.
GOLDEN_OWNER = {"pid": 4242, "start": 1, "host": "golden", "boot": "00000000-0000-0000-0000-000000000000",
                "pidns": "pid:[1]"}


def fixed_world(monkeypatch: pytest.MonkeyPatch) -> Clock:
    """Fix the committer identity (environment, as git reads it), gitstate's clock and the process
    an open node boundary names."""
    import gitstate.store.run

    monkeypatch.setenv("GIT_COMMITTER_NAME", COMMITTER_NAME)
    monkeypatch.setenv("GIT_COMMITTER_EMAIL", COMMITTER_EMAIL)
    clock = Clock()
    monkeypatch.setattr(time, "time", clock)
    monkeypatch.setattr(gitstate.store.run, "this_process", lambda: dict(GOLDEN_OWNER))
    return clock


def blob_id(repo: Path, data: bytes) -> str:
    """The id git gives ``data`` as a blob (``git hash-object --stdin``, nothing written)."""
    return git(repo, "hash-object", "--stdin", input=data).strip()


def rev(repo: Path, spec: str) -> str:
    """``git rev-parse --verify <spec>``."""
    return git(repo, "rev-parse", "--verify", "--end-of-options", spec).strip()


def ls_tree(repo: Path, tree: str) -> list[tuple[str, str, str, str]]:
    """``git ls-tree -z``: (mode, type, id, name) per entry, names as bytes-exact text."""
    raw = git_bytes(repo, "ls-tree", "-z", tree)
    out = []
    for record in raw.split(b"\0"):
        if not record:
            continue
        head, name = record.split(b"\t", 1)
        mode, kind, oid = head.decode().split(" ")
        out.append((mode, kind, oid, name.decode("utf-8")))
    return out


# -- the varied store ------------------------------------------------------------------------------

SMALL_STATE: dict[str, Any] = {
    "messages": ["hello", {"role": "user", "content": "plan a trip"}],
    "count": 3, "ratio": 0.5, "flag": True, "nothing": None, "raw": b"\x00\xffbytes",
    "big": 2**70, "negative": -(2**65), "tuple": (1, "two"), "int keys": {1: "one", 2: "two"},
    "hello world": "needs %20", "é": "non-ascii key", "": "empty key", "a.b": "dot in key",
}
LEAF_STATE: list[Any] = ["not", "a", "mapping", 1, 2.5, None, {"k": "v"}]
LONG_LIST_LEN = 65 * 32 + 5  # 66 chunks: more than 64, so the list tree gets a fan-out level
BIG_MAP_STATE: dict[str, Any] = {
    "config": {f"key{i:02d}": i for i in range(20)},  # 16+ keys: its own tree
    "nested": {"small": 1, "inner": list(range(40)), "deep": {"x": {"y": 1}}},  # holds a long list
    "tiny": {"a": 1, "b": [1, 2]},  # small: one blob
}
TOOLS = [{"name": "search", "args": {"q": "trains"}, "result": "3 hits", "ms": 12}]
AUDIT = [{"event": "tool_call", "actor": "agent:planner", "ok": True}, {"event": "approve", "by": "human"}]
WORKSPACE: dict[str, str] = {
    "README": "hello\n",
    "a.b": "file a.b\n",
    "a-b": "file a-b\n",
    "a0": "file a0\n",
    "a/inner.txt": "inside a/\n",
    "a/a.b": "nested a.b\n",
    "émoji-ñame/ü.txt": "non-ascii path\n",
    "Z upper": "capital and space\n",
    "script.sh": "#!/bin/sh\necho hi\n",
    ".gitignore": "*.log\n",
    "ignored.log": "never captured\n",
}


@dataclass
class VariedStore:
    """Ids written by :func:`write_varied_store`, by payload kind."""

    ids: dict[str, str] = field(default_factory=dict)
    run_id: str = "golden run/1"
    objects: dict[str, Any] = field(default_factory=dict)


def make_workspace(repo: Path) -> None:
    """Write :data:`WORKSPACE` plus an executable bit and a symbolic link into a work tree."""
    for name, text in WORKSPACE.items():
        target = repo / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    os.chmod(repo / "script.sh", 0o755)
    os.symlink("a.b", repo / "link-to-a.b")


def write_varied_store(store: gitstate.Store, clock: Clock) -> VariedStore:
    """Write one payload of every kind; each write at its own fixed clock value.

    The repository's work tree must hold :data:`WORKSPACE` (see :func:`make_workspace`)."""
    out = VariedStore()
    ids = out.ids
    clock.at(0)
    run = store.create_run(workflow="compat", run_id=out.run_id, metadata={"purpose": "golden", "n": 1})
    clock.at(1)
    small = run.checkpoint(SMALL_STATE, node="plan", trigger="tool_end", status="running",
                           metadata={"model": "m-1", "tokens": 42})
    ids["small"], ids["small.tree"], ids["small.state"] = small.id, small.tree_id, str(small.state_id)
    clock.at(2)
    leaf = run.checkpoint(LEAF_STATE, branch="leaf")
    ids["leaf"], ids["leaf.tree"], ids["leaf.state"] = leaf.id, leaf.tree_id, str(leaf.state_id)
    clock.at(3)
    long = run.checkpoint({"log": list(range(LONG_LIST_LEN)), "title": "long"}, node="collect",
                          trigger="tool_end")
    ids["long_list"], ids["long_list.tree"], ids["long_list.state"] = long.id, long.tree_id, str(long.state_id)
    clock.at(4)
    big = run.checkpoint(BIG_MAP_STATE, metadata={"why": "big map"})
    ids["big_map"], ids["big_map.tree"], ids["big_map.state"] = big.id, big.tree_id, str(big.state_id)
    clock.at(5)
    tools = run.checkpoint({"answer": 42}, node="act", trigger="tool_end", tools=TOOLS, audit=AUDIT)
    ids["tools_audit"], ids["tools_audit.tree"] = tools.id, tools.tree_id
    clock.at(6)
    with run.node("review", metadata={"reviewer": "bot"}) as scope:
        clock.at(7)
        scope.checkpoint({"answer": 42, "reviewed": True}, trigger="llm_end")
        scope.checkpoint({"answer": 42, "reviewed": "twice"}, trigger="llm_end")
    assert scope.entry is not None and scope.exit is not None
    ids["node.entry"], ids["node.exit"] = scope.entry.id, scope.exit.id
    clock.at(8)
    with pytest.raises(ValueError), run.node("explode") as failing:
        clock.at(9)
        scope.run.checkpoint({"answer": -1}, node="explode")
        raise ValueError("boom")
    assert failing.exit is not None
    ids["node_failed.exit"] = failing.exit.id
    ids["node.log"] = str(store.core.read_ref(run.node_log().ref))  # the node log's newest record
    clock.at(10)
    files = run.checkpoint({"answer": 43}, files=True, status="done")
    ids["files"], ids["files.tree"], ids["files.snapshot"] = files.id, files.tree_id, str(files.files_tree_id)
    clock.at(11)
    part = run.checkpoint({"answer": 44}, files=["a", "script.sh"], branch="partial")
    ids["files_partial"], ids["files_partial.snapshot"] = part.id, str(part.files_tree_id)
    clock.at(12)
    run.fork(big.id, "alt")
    alt = run.checkpoint({"alt": True}, branch="alt", trigger="edit")
    ids["fork"] = alt.id
    clock.at(13)
    for i in range(4):
        run.checkpoint({"i": i}, branch="prune-me")
    pruned = run.prune(keep_latest=2, branch="prune-me")
    head = run.head("prune-me")
    assert head is not None and pruned.kept == 2
    ids["pruned.head"] = head.id
    clock.at(14)
    v1 = run.files.write("notes/plan.md", "# Plan\n\n- go\n", author="agent:planner",
                         reason="first draft\n\nwritten by the planner")
    clock.at(15)
    v2 = run.files.write("notes/plan.md", b"# Plan\n\n- go\n- come back\n", author="human <x@y>",
                         reason="second")
    clock.at(16)
    other = run.files.write("data.bin", b"\x00\x01\x02", author="agent:tool")
    ids["session.v1"], ids["session.v2"], ids["session.other"] = v1.commit, v2.commit, other.commit
    clock.at(17)
    simple = store.create_run(run_id="plain")  # no workflow, no metadata
    ids["run_record.plain"] = rev(Path(store.path), gitstate_run_ref("plain"))
    clock.at(18)
    first = simple.checkpoint({})
    ids["empty_state"] = first.id
    ids["run_record"] = rev(Path(store.path), gitstate_run_ref(out.run_id))
    out.objects.update(small=small, leaf=leaf, long=long, big=big, tools=tools, files=files, part=part,
                       entry=scope.entry, exit=scope.exit, failed=failing.exit, alt=alt, pruned=head, v1=v1,
                       v2=v2, other=other, run=run, plain=simple)
    return out


def gitstate_run_ref(run_id: str, worktree: str = "main") -> str:
    """The documented ref of a run record."""
    from gitstate.format.names import run_info_ref

    return run_info_ref(worktree, run_id)
