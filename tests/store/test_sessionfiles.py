"""Versioned session files: versions, conflicts, concurrency from real processes."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import gitstate
from tests.conftest import git


def test_write_read_list_history(store: gitstate.Store) -> None:
    run = store.create_run()
    v1 = run.files.write("src/main.go", "package main\n", author="agent:surgeon", reason="first draft")
    v2 = run.files.write("src/main.go", b"package main // fixed\n", author="agent:surgeon", reason="fix build")
    run.files.write("src", "a file named like a directory", author="user", reason="d/f")
    assert (v1.version, v2.version) == (1, 2)
    assert v2.size == len(b"package main // fixed\n")
    assert run.files.read("src/main.go") == b"package main // fixed\n"
    assert run.files.read("src/main.go", version=1) == b"package main\n"
    listing = run.files.list()
    assert set(listing) == {"src/main.go", "src"}
    assert listing["src/main.go"].version == 2 and listing["src/main.go"].reason == "fix build"
    hist = run.files.history("src/main.go")
    assert [(h.version, h.reason, h.author) for h in hist] == [
        (1, "first draft", "agent:surgeon"), (2, "fix build", "agent:surgeon")]
    with pytest.raises(gitstate.SessionFileNotFound):
        run.files.read("src/main.go", version=3)
    with pytest.raises(gitstate.SessionFileNotFound):
        run.files.read("nope")


def test_plain_git_log_shows_history(store: gitstate.Store, repo: Path) -> None:
    run = store.create_run()
    run.files.write("notes.md", "a", author="agent:writer", reason="start notes")
    run.files.write("notes.md", "b", author="user", reason="edit notes")
    log = git(repo, "log", "--format=%an|%s", run.files.ref("notes.md"))
    assert log.splitlines() == ["user|edit notes", "agent:writer|start notes"]
    assert git(repo, "fsck", "--strict", "--no-dangling") == ""


def test_expect_version_conflict_writes_nothing(store: gitstate.Store) -> None:
    run = store.create_run()
    run.files.write("f", "1", author="a", expect_version=0)
    run.files.write("f", "2", author="a", expect_version=1)
    with pytest.raises(gitstate.ConflictError) as err:
        run.files.write("f", "stale", author="b", expect_version=1)
    assert err.value.expected == "1" and err.value.actual == "2"
    with pytest.raises(gitstate.ConflictError):
        run.files.write("g", "x", author="b", expect_version=3)
    assert run.files.read("f") == b"2" and len(run.files.history("f")) == 2
    assert "g" not in run.files.list()


def test_long_and_odd_paths(store: gitstate.Store) -> None:
    run = store.create_run()
    long_path = "d/" * 150 + "file.txt"
    odd = "sp ace/ünï/..//x:y"
    run.files.write(long_path, "L", author="a")
    run.files.write(odd, "O", author="a")
    assert run.files.read(long_path) == b"L" and run.files.read(odd) == b"O"
    assert set(run.files.list()) == {long_path, odd}


_WRITER = textwrap.dedent("""
    import sys, gitstate
    repo, run_id, who, count, mode = sys.argv[1:6]
    run = gitstate.open_store(repo).get_run(run_id)
    out = []
    for i in range(int(count)):
        if mode == "append":
            v = run.files.write("shared.txt", f"{who}:{i}", author=f"agent:{who}", reason=f"write {i}")
            out.append(str(v.version))
        else:
            try:
                v = run.files.write("race.txt", who, author=f"agent:{who}", expect_version=0)
                out.append("won")
            except gitstate.ConflictError:
                out.append("conflict")
    print(" ".join(out))
""")


def _spawn(repo: Path, run_id: str, who: str, count: int, mode: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", _WRITER, str(repo), run_id, who, str(count), mode],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_ten_processes_twenty_writes_each(store: gitstate.Store, repo: Path) -> None:
    run = store.create_run()
    procs = [_spawn(repo, run.id, f"w{n}", 20, "append") for n in range(10)]
    versions: list[int] = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        versions += [int(v) for v in out.split()]
    assert sorted(versions) == list(range(1, 201))
    hist = run.files.history("shared.txt")
    assert [h.version for h in hist] == list(range(1, 201))
    contents = {run.files.read("shared.txt", h.version).decode() for h in hist}
    assert contents == {f"w{n}:{i}" for n in range(10) for i in range(20)}
    assert git(repo, "fsck", "--strict", "--no-dangling") == ""


def test_expect_version_losers_get_conflict(store: gitstate.Store, repo: Path) -> None:
    run = store.create_run()
    procs = [_spawn(repo, run.id, f"w{n}", 1, "expect") for n in range(6)]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        results.append(out.strip())
    assert results.count("won") == 1 and results.count("conflict") == 5
    assert [h.version for h in run.files.history("race.txt")] == [1]
