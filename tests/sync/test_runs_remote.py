"""Runs kept in a repository of their own (``agentos.remote``, ``clone-runs``), listed without
fetching (``runs --remote``) and pulled one at a time, over smart HTTP and file://."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from conftest import agentos_process, git
from githttp import http_server, served_repo
from remote_helpers import bare, machine

import gitstate

__all__ = ["http_server"]


@pytest.fixture(params=["http", "file"])
def runs_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh bare repository for runs, over smart HTTP or file://."""
    if request.param == "http":
        root, url = request.getfixturevalue("http_server")
        served_repo(root, f"{tmp_path.name}.git")
        return f"{url}/{tmp_path.name}.git"
    return bare(tmp_path / "runs.git").as_uri()


def test_runs_go_to_their_own_repository_and_never_to_the_code_remote(tmp_path: Path, runs_url: str) -> None:
    code = bare(tmp_path / "code.git")
    path = machine(tmp_path / "A", code.as_uri(), allow=None)  # origin: the code's remote, not allowed
    assert agentos_process(path, "setup", "--hooks").returncode == 0
    store = gitstate.open_store(path)
    store.create_run(run_id="r1").checkpoint({"a": 1})
    done = agentos_process(path, "clone-runs", runs_url)
    assert done.returncode == 0, done.stderr
    assert git(path, "config", "agentos.remote").strip() == "agentos"
    assert git(path, "remote", "get-url", "agentos").strip() == runs_url
    assert "agentos" in git(path, "config", "--get-all", "agentos.pushRemotes").split()
    assert agentos_process(path, "push").returncode == 0  # no remote named: the runs' repository
    runs_repo = Path(runs_url.removeprefix("file://")) if runs_url.startswith("file:") else None
    if runs_repo is not None:
        assert "refs/agentos/main/runs/r1/run" in git(runs_repo, "for-each-ref")
    # the code's own pushes carry no checkpoints: git push --mirror is refused by the guard
    git(path, "push", "origin", "main")
    refused = subprocess_push_mirror(path)
    assert refused.returncode != 0 and "refusing to push agent checkpoints" in refused.stderr
    assert "refs/agentos/" not in git(code, "for-each-ref")
    # a second machine takes the runs from that repository
    other = machine(tmp_path / "B", code.as_uri(), allow=None)
    assert agentos_process(other, "clone-runs", runs_url).returncode == 0
    assert [r.id for r in gitstate.open_store(other).list_runs()] == ["r1"]
    # a name already used for another URL is refused in one line, nothing changed
    clash = agentos_process(other, "clone-runs", code.as_uri())
    assert clash.returncode != 0 and "exists with URL" in clash.stderr and clash.stderr.count("\n") == 1
    assert git(other, "remote", "get-url", "agentos").strip() == runs_url


def subprocess_push_mirror(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "push", "--mirror", "origin"], cwd=path, capture_output=True, text=True,
                          check=False)


def test_a_remote_lists_its_runs_and_one_is_pulled_alone(tmp_path: Path, runs_url: str) -> None:
    a = gitstate.open_store(machine(tmp_path / "A", runs_url))
    for i in range(6):
        run = a.create_run(run_id=f"r{i}")
        run.checkpoint({"i": i})
        run.checkpoint({"i": i, "more": "x" * 100})
    assert all(r.ok for r in gitstate.push(a))
    path_b = machine(tmp_path / "B", runs_url)
    objects = git(path_b, "count-objects")
    listed = agentos_process(path_b, "runs", "--remote", "origin", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    assert [(r["id"], r["branches"], r["here"]) for r in rows] == [(f"r{i}", ["main"], "absent") for i in range(6)]
    assert git(path_b, "for-each-ref", "refs/agentos/") == ""  # listing fetched nothing
    assert git(path_b, "count-objects") == objects
    done = agentos_process(path_b, "pull", "origin", "r3")
    assert done.returncode == 0, done.stderr
    b = gitstate.open_store(path_b)
    assert [r.id for r in b.list_runs()] == ["r3"]
    assert [cp.id for cp in b.get_run("r3").history()] == [cp.id for cp in a.get_run("r3").history()]
    assert b.get_run("r3").head().state == {"i": 3, "more": "x" * 100}  # type: ignore[union-attr]
    # only that run's objects came: no other run's checkpoint is here
    assert not b.repo.get(a.get_run("r2").head().id)  # type: ignore[union-attr]
    table = agentos_process(path_b, "runs", "--remote", "origin")
    assert [line.split()[-1] for line in table.stdout.splitlines()[1:]] == ["absent"] * 3 + ["same"] + ["absent"] * 2
    missing = gitstate.pull(b, "origin", ["nope"])
    assert [(r.run_id, r.status) for r in missing] == [("nope", "error")]
