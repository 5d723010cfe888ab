"""Pushing many runs to a git server over smart HTTP (:mod:`githttp`) that refuses big pushes:
chunks, halving down to the ref at fault, the push queue that resumes a killed or cut-off push,
and the time budget."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from conftest import agentos_process, git
from githttp import accepted_pushes, http_server, served_repo, updated_refs
from remote_helpers import machine

import gitstate
from gitstate.sync.pushqueue import PushQueue, chunks, halves, queue_path

__all__ = ["http_server"]

RUNS = 80  # two refs each (run record, branch main)


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A repository with RUNS runs, made once; each test works on a copy."""
    path = machine(tmp_path_factory.mktemp("src") / "A", "http://127.0.0.1:9/unset.git")
    store = gitstate.open_store(path, pack_in_background=False)  # copies must not race a packer
    for i in range(RUNS):
        store.create_run(run_id=f"r{i:03d}").checkpoint({"i": i, "text": f"run {i}"})
    store.close()
    return path


def copy_of(source: Path, tmp_path: Path, url: str) -> Path:
    path = tmp_path / "A"
    shutil.copytree(source, path, symlinks=True)
    git(path, "remote", "set-url", "origin", url)
    return path


def server_repo(http: tuple[Path, str], tmp_path: Path, max_updates: int | None = None) -> tuple[Path, str]:
    root, base = http
    name = f"{tmp_path.name}.git"
    return served_repo(root, name, max_updates=max_updates), f"{base}/{name}"


def agentos_refs(repo: Path) -> dict[str, str]:
    out = git(repo, "for-each-ref", "--format=%(refname) %(objectname)", "refs/agentos/")
    return dict(line.split(" ") for line in out.splitlines())


def test_many_runs_reach_a_server_that_refuses_big_pushes(source: Path, tmp_path: Path,
                                                          http_server: tuple[Path, str]) -> None:
    repo, url = server_repo(http_server, tmp_path, max_updates=30)
    path = copy_of(source, tmp_path, url)
    git(path, "config", "agentos.pushChunk", "100")  # bigger than the server takes: halved to fit
    results = gitstate.push(gitstate.open_store(path))
    assert len(results) == RUNS and all(r.ok for r in results), [r.to_dict() for r in results if not r.ok][:2]
    pushes = accepted_pushes(repo)
    assert len(pushes) > 1 and max(pushes) <= 30 and sum(pushes) == 2 * RUNS, pushes
    assert Counter(updated_refs(repo)) == Counter(list(agentos_refs(path)))  # each ref updated once
    assert agentos_refs(repo) == agentos_refs(path)
    assert not os.path.exists(queue_path(gitstate.open_store(path), "origin"))
    assert git(path, "for-each-ref", "refs/agentos-incoming/") == ""
    assert not list((path / ".git" / "agentos").glob("push-shadow-*"))
    # the chunk size learned is not kept once the queue is done; a second push sends nothing
    again = gitstate.push(gitstate.open_store(path))
    assert {r.status for r in again} == {"up-to-date"} and len(accepted_pushes(repo)) == len(pushes)
    # a fresh clone pulls every run with the same ids
    fresh = machine(tmp_path / "B", url)
    pulled = gitstate.pull(gitstate.open_store(fresh))
    assert len(pulled) == RUNS and {r.status for r in pulled} == {"created"}
    assert agentos_refs(fresh) == agentos_refs(path)


def test_the_ref_a_server_refuses_is_named_and_the_others_arrive(source: Path, tmp_path: Path,
                                                                  http_server: tuple[Path, str]) -> None:
    repo, url = server_repo(http_server, tmp_path)
    path = copy_of(source, tmp_path, url)
    git(path, "config", "agentos.pushChunk", "64")
    bad = "refs/agentos/main/runs/r041/heads/main"
    (repo / "refuse-refs").write_text(bad + "\n")
    done = agentos_process(path, "push", "origin")
    assert done.returncode == 1
    lines = [line for line in done.stdout.splitlines() if line.startswith("rejected")]
    assert lines == [f"rejected r041 main: origin refused this ref even when pushed alone: server: refusing {bad} "
                     "(pre-receive hook declined)"], done.stdout
    assert "1 of 80 run(s) not fully pushed" in done.stderr
    there = agentos_refs(repo)
    assert bad not in there and len(there) == 2 * RUNS - 1
    assert Counter(updated_refs(repo)) == Counter(list(there))
    # the refused ref is not queued for ever: once the server takes it, a push sends it alone
    (repo / "refuse-refs").unlink()
    assert agentos_process(path, "push", "origin").returncode == 0
    assert accepted_pushes(repo)[-1] == 1 and agentos_refs(repo) == agentos_refs(path)


def test_a_push_cut_off_resumes_from_its_queue(source: Path, tmp_path: Path,
                                                http_server: tuple[Path, str]) -> None:
    repo, url = server_repo(http_server, tmp_path)
    path = copy_of(source, tmp_path, "http://127.0.0.1:9/nothing-listens-here.git")
    git(path, "config", "agentos.pushRemotes", "*")
    store = gitstate.open_store(path)
    with pytest.raises(gitstate.RemoteError):  # the server cannot be reached: nothing is queued yet
        gitstate.push(store, "origin")
    # the connection drops after listing: every ref is queued, none sent
    git(path, "remote", "set-url", "origin", url)
    git(path, "remote", "set-url", "--push", "origin", "http://127.0.0.1:9/nothing-listens-here.git")
    failed = gitstate.push(store, "origin", ["r000", "r001"])
    assert {r.status for r in failed} == {"error"} and "push again" in failed[0].refs[0].message
    assert set(PushQueue.load(store, "origin").refs) == {n for n in agentos_refs(path)
                                                         if "/r000/" in n or "/r001/" in n}
    # the next push, of another run, sends the queued ones too
    git(path, "config", "--unset", "remote.origin.pushurl")
    resumed = gitstate.push(store, "origin", ["r002"])
    assert sorted(r.run_id for r in resumed) == ["r000", "r001", "r002"] and all(r.ok for r in resumed)
    assert not os.path.exists(queue_path(store, "origin"))


def test_a_push_out_of_time_keeps_the_rest_queued(source: Path, tmp_path: Path,
                                                   http_server: tuple[Path, str]) -> None:
    repo, url = server_repo(http_server, tmp_path)
    path = copy_of(source, tmp_path, url)
    store = gitstate.open_store(path)
    results = gitstate.push(store, timeout=1e-9)
    assert {r.status for r in results} == {"error"}
    assert "time budget" in results[0].refs[0].message and agentos_refs(repo) == {}
    assert len(PushQueue.load(store, "origin").refs) == 2 * RUNS
    assert all(r.ok for r in gitstate.push(store)) and agentos_refs(repo) == agentos_refs(path)


def test_kill_9_at_any_point_then_push_again_sends_every_run_once(source: Path, tmp_path: Path,
                                                                  http_server: tuple[Path, str]) -> None:
    """``git agentos push`` killed (the whole process group, as a machine going down) at points
    spread over one push's time, then run again: every ref arrives, each updated once."""
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")

    def start(path: Path) -> subprocess.Popen[bytes]:
        return subprocess.Popen(["git", "agentos", "push", "origin"], cwd=path, env=env, start_new_session=True,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    repo, url = server_repo(http_server, tmp_path / "whole")
    whole = copy_of(source, tmp_path / "whole", url)
    git(whole, "config", "agentos.pushChunk", "16")
    began = time.monotonic()
    assert start(whole).wait(timeout=120) == 0
    took = time.monotonic() - began  # where the kill points go, not a timing assertion
    kills = 8
    for k in range(1, kills + 1):
        case = tmp_path / f"k{k}"
        repo, url = server_repo(http_server, case)
        path = copy_of(source, case, url)
        git(path, "config", "agentos.pushChunk", "16")
        proc = start(path)
        try:
            proc.wait(timeout=took * k / (kills + 1))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        done = agentos_process(path, "push", "origin", "--json")
        assert done.returncode == 0, (k, done.stdout[-500:], done.stderr)
        assert all(run["ok"] for run in json.loads(done.stdout))
        assert agentos_refs(repo) == agentos_refs(path), k
        assert Counter(updated_refs(repo)) == Counter(list(agentos_refs(path))), k  # nothing sent twice
        assert git(path, "for-each-ref", "refs/agentos-incoming/") == ""
        assert not list((path / ".git" / "agentos").glob("push-shadow-*"))  # a killed push's: removed


def test_chunks_hold_whole_runs() -> None:
    refs = [f"refs/agentos/main/runs/r{i}/{kind}" for i in range(5) for kind in ("heads/a", "heads/b", "run")]
    cut = chunks(refs, 7)
    assert [len(c) for c in cut] == [6, 6, 3]
    assert all(c[0].endswith("/run") for c in cut)  # a run's record goes first
    assert sorted(r for c in cut for r in c) == sorted(refs)
    assert [len(c) for c in chunks(refs[:3], 2)] == [2, 1]  # one run bigger than a chunk is cut
    first, second = halves(cut[0])
    assert (len(first), len(second)) == (3, 3) and {r.split("/")[4] for r in first} == {"r0"}
    assert halves(["refs/agentos/main/runs/r/run", "refs/agentos/main/runs/r/heads/a"]) == (
        ["refs/agentos/main/runs/r/run"], ["refs/agentos/main/runs/r/heads/a"])
