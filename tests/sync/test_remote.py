"""Push and pull between two clones through a real git server: ``git daemon`` on 127.0.0.1, git's
smart HTTP (``git http-backend``, :mod:`githttp`) on 127.0.0.1, and a bare repository over
``file://``. Two repositories play two machines."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import git
from githttp import http_server, served_repo
from remote_helpers import bare, git_daemon, machine

import gitstate
from gitstate.verify.checks import verify


@pytest.fixture(scope="module")
def daemon_base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    base = tmp_path_factory.mktemp("served")
    with git_daemon(base) as url:
        yield base, url


__all__ = ["http_server"]  # the session's HTTP server fixture, used by ``server``


@pytest.fixture(params=["git-daemon", "http", "file"])
def server(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """URL of a fresh bare repository, served by git daemon, over smart HTTP or as file://."""
    if request.param == "http":
        root, url = request.getfixturevalue("http_server")
        name = f"{tmp_path.name}.git"
        served_repo(root, name)
        return f"{url}/{name}"
    if request.param == "git-daemon":
        base, url = request.getfixturevalue("daemon_base")
        name = f"{tmp_path.name}.git"
        bare(base / name)
        return f"{url}/{name}"
    return (bare(tmp_path / "server.git")).as_uri()


def stores(tmp_path: Path, url: str) -> tuple[gitstate.Store, gitstate.Store]:
    a = gitstate.open_store(machine(tmp_path / "A", url))
    b = gitstate.open_store(machine(tmp_path / "B", url))
    return a, b


def ids(run: gitstate.Run, branch: str = "main") -> list[str]:
    return [cp.id for cp in run.history(branch)]


def statuses(results: list[gitstate.PullResult] | list[gitstate.PushResult]) -> dict[str, str]:
    return {r.ref.split("/runs/", 1)[1]: r.status for res in results for r in res.refs}


def test_resume_on_another_machine(tmp_path: Path, server: str) -> None:
    a, b = stores(tmp_path, server)
    run = a.create_run(workflow="triage", run_id="job 1/ä")
    for step in range(5):
        run.checkpoint({"step": step, "messages": ["m"] * step}, node=f"n{step}")
    pushed = gitstate.push(a)
    assert [r.run_id for r in pushed] == ["job 1/ä"] and all(r.ok for r in pushed)

    pulled = gitstate.pull(b)
    assert [(r.run_id, r.status) for r in pulled] == [("job 1/ä", "created")]
    resumed = b.get_run("job 1/ä")
    assert resumed.head() is not None and resumed.head().state["step"] == 4  # type: ignore[union-attr]
    for step in range(5, 10):
        resumed.checkpoint({"step": step}, node=f"n{step}")
    assert all(r.ok for r in gitstate.push(b))

    assert {r.status for r in gitstate.pull(a)} == {"fast-forward"}
    assert len(ids(a.get_run("job 1/ä"))) == 10
    assert ids(a.get_run("job 1/ä")) == ids(resumed)
    assert statuses(gitstate.pull(a)) == {k: "up-to-date" for k in statuses(gitstate.pull(a))}
    assert verify(a).ok and verify(b).ok
    # nothing but refs/agentos moved: no remote-tracking refs, no FETCH_HEAD, no staging left
    refs = git(tmp_path / "B", "for-each-ref", "--format=%(refname)").split()
    assert all(r.startswith(("refs/agentos/", "refs/heads/")) for r in refs)
    assert not (tmp_path / "B" / ".git" / "FETCH_HEAD").exists()


def test_concurrent_lines_are_both_kept(tmp_path: Path, server: str) -> None:
    a, b = stores(tmp_path, server)
    run_a = a.create_run(run_id="r")
    for step in range(3):
        run_a.checkpoint({"step": step})
    gitstate.push(a)
    gitstate.pull(b)
    run_b = b.get_run("r")
    for step in range(3, 5):
        run_a.checkpoint({"a": step})
    for step in range(3, 6):
        run_b.checkpoint({"b": step})
    line_a, line_b = ids(run_a), ids(run_b)

    assert all(r.ok for r in gitstate.push(a))
    refused = gitstate.push(b)
    assert statuses(refused) == {"r/run": "up-to-date", "r/heads/main": "rejected"}
    message = next(r.message for res in refused for r in res.refs if r.status == "rejected")
    assert "pull first" in message

    pulled = gitstate.pull(b)
    main = next(r for res in pulled for r in res.refs if r.ref.endswith("/heads/main"))
    assert (main.status, main.kept_as) == ("diverged", "main@origin")
    assert ids(run_b) == line_b and ids(run_b, "main@origin") == line_a  # ours untouched
    again_pulled = gitstate.pull(b)[0].refs[-1]  # pulling again changes nothing, and says so
    assert (again_pulled.status, again_pulled.kept_as, again_pulled.ok) == ("kept", "main@origin", True)
    assert sorted(run_b.branches()) == ["main", "main@origin"]

    # B shares its line under its own name; main stays refused, main@origin is not pushed back
    run_b.fork(line_b[0], "main-b")
    again = statuses(gitstate.push(b))
    assert again["r/heads/main-b"] == "pushed" and again["r/heads/main"] == "rejected"
    assert again["r/heads/main@origin"] == "kept"  # origin has that line: not a failure
    kept = next(r for res in gitstate.push(b) for r in res.refs if r.ref.endswith("main@origin"))
    assert kept.ok and "not pushed back" in kept.message
    gitstate.pull(a)
    assert ids(run_a) == line_a and ids(run_a, "main-b") == line_b
    # no checkpoint lost on either machine
    for store in (a, b):
        run = store.get_run("r")
        every = {cp.id for branch in run.branches() for cp in run.history(branch)}
        assert set(line_a) | set(line_b) <= every
        assert verify(store).ok


def test_many_runs_in_one_push_and_pull(tmp_path: Path, daemon_base: tuple[Path, str]) -> None:
    base, url = daemon_base
    bare(base / "many.git")
    a, b = stores(tmp_path, f"{url}/many.git")
    for i in range(500):
        a.create_run(workflow="bulk", run_id=f"run-{i:03d}").checkpoint({"i": i})
    pushed = gitstate.push(a)
    assert len(pushed) == 500 and all(r.ok and r.status == "pushed" for r in pushed)
    remote = git(tmp_path / "A", "ls-remote", "origin", "refs/agentos/*").splitlines()
    assert len(remote) == 1000

    pulled = gitstate.pull(b)
    assert len(pulled) == 500 and {r.status for r in pulled} == {"created"}
    assert len(b.list_runs()) == 500
    assert b.get_run("run-123").head().state == {"i": 123}  # type: ignore[union-attr]
    report = verify(b)
    assert report.ok and report.checkpoints == 500
    assert git(tmp_path / "B", "for-each-ref", "refs/agentos-incoming/") == ""


def test_named_runs_and_errors(tmp_path: Path, server: str) -> None:
    a, b = stores(tmp_path, server)
    for rid in ("one", "two"):
        a.create_run(run_id=rid).checkpoint({"id": rid})
    assert [r.run_id for r in gitstate.push(a, runs=["one"])] == ["one"]
    with pytest.raises(gitstate.RunNotFound):
        gitstate.push(a, runs=["nope"])
    pulled = gitstate.pull(b, runs=["one", "two"])
    assert {r.run_id: r.ok for r in pulled} == {"one": True, "two": False}
    with pytest.raises(gitstate.RemoteError, match="nowhere"):
        gitstate.pull(a, "nowhere")


def test_push_needs_an_allowed_remote(tmp_path: Path, server: str) -> None:
    a = gitstate.open_store(machine(tmp_path / "A", server, allow=None))
    a.create_run(run_id="r").checkpoint({})
    with pytest.raises(gitstate.PushNotAllowedError, match="agentos.pushRemotes origin"):
        gitstate.push(a)
    git(tmp_path / "A", "config", "agentos.pushRemotes", "backup, origin")
    assert all(r.ok for r in gitstate.push(a))
    git(tmp_path / "A", "config", "agentos.pushRemotes", server)  # by URL works too
    assert all(r.ok for r in gitstate.push(a))


def test_prune_deletes_with_a_lease(tmp_path: Path, server: str) -> None:
    a, b = stores(tmp_path, server)
    for rid in ("keep", "gone"):
        a.create_run(run_id=rid).checkpoint({})
    gitstate.push(a)
    gitstate.pull(b)
    a.delete_run("gone")
    assert "gone" not in {r.run_id for r in gitstate.push(a)}  # without --prune nothing is deleted
    assert git(tmp_path / "A", "ls-remote", "origin", "refs/agentos/main/runs/gone/*")
    results = statuses(gitstate.push(a, prune=True))
    assert results["gone/run"] == "deleted" and results["gone/heads/main"] == "deleted"
    assert not git(tmp_path / "A", "ls-remote", "origin", "refs/agentos/main/runs/gone/*")
    # B still has it locally: pull never deletes
    assert b.get_run("gone")


def test_failed_lease_is_reported(tmp_path: Path, server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from gitstate.sync import remote

    a, b = stores(tmp_path, server)
    a.create_run(run_id="x").checkpoint({})
    gitstate.push(a)
    seen = remote._ls_remote(a, "origin", [remote.NAMESPACE])
    gitstate.pull(b)
    b.get_run("x").checkpoint({"moved": True})
    gitstate.push(b)  # the remote moves after A looked
    a.delete_run("x")
    monkeypatch.setattr(remote, "_ls_remote", lambda *args: seen)
    results = gitstate.push(a, prune=True)
    head = next(r for res in results for r in res.refs if r.ref.endswith("heads/main"))
    assert head.status == "rejected" and "lease" in head.message
    assert git(tmp_path / "A", "ls-remote", "origin", "refs/agentos/main/runs/x/heads/main")


def test_pending_writes_no_put_folded_travel_with_the_thread(tmp_path: Path) -> None:
    """A LangGraph writes ref that no put folded (writes stored after the checkpoint's child, as
    asynchronous durability allows) is pushed and pulled like the thread's branches: created on
    the other side, then up to date, and the pull succeeds (it was "skipped: object is a blob, not
    a commit", which failed every pull of that thread)."""
    pytest.importorskip("langgraph.checkpoint.base")
    from langgraph.checkpoint.base import empty_checkpoint

    from gitstate.langgraph import GitCheckpointSaver

    url = bare(tmp_path / "server.git").as_uri()
    a, b = stores(tmp_path, url)
    saver = GitCheckpointSaver(a)
    first = saver.put({"configurable": {"thread_id": "t", "checkpoint_ns": ""}}, empty_checkpoint(),
                      {"source": "input", "step": -1}, {})
    saver.put(first, empty_checkpoint(), {"source": "loop", "step": 0}, {})
    saver.put_writes(first, [("messages", "late")], "task-1", "~__pregel_pull, worker")
    assert all(r.ok for r in gitstate.push(a))
    pulled = gitstate.pull(b)
    assert all(r.ok for r in pulled), [(r.ref, r.status, r.message) for res in pulled for r in res.refs]
    writes = {k: v for k, v in statuses(pulled).items() if "/writes/" in k}
    assert list(writes.values()) == ["created"], statuses(pulled)
    other = GitCheckpointSaver(b)
    assert other.get_tuple(first).pending_writes == [("task-1", "messages", "late")]  # type: ignore[union-attr]
    again = gitstate.pull(b)
    assert all(r.ok for r in again) and set(statuses(again).values()) == {"up-to-date"}
    assert verify(b).ok


def test_a_ref_of_unknown_kind_under_a_run_is_not_pulled(tmp_path: Path) -> None:
    """``runs/<run>/<kind>`` with a kind gitstate does not write (a hostile or newer peer) is no
    gitstate ref: a pull skips it instead of creating a run that nothing lists rightly or removes,
    and verify reports one made locally."""
    url = bare(tmp_path / "server.git").as_uri()
    a, b = stores(tmp_path, url)
    tip = a.create_run(run_id="r").checkpoint({"a": 1}).id
    assert all(r.ok for r in gitstate.push(a))
    git(tmp_path / "server.git", "update-ref", "refs/agentos/main/runs/x/weird", tip)
    pulled = gitstate.pull(b)
    weird = [r for res in pulled for r in res.refs if r.ref.endswith("/runs/x/weird")]
    assert [(r.status, r.message) for r in weird] == [("skipped", "not a gitstate ref name")]
    assert not git(b.path, "for-each-ref", "refs/agentos/main/runs/x/")
    assert [s.id for s in b.list_runs()] == ["r"]
    git(b.path, "update-ref", "refs/agentos/main/runs/y/other", tip)
    report = verify(b)
    assert not report.ok and any("runs/y/other" in str(problem) for problem in report.problems)


def test_a_thread_goes_on_from_its_own_line_after_a_diverged_pull(tmp_path: Path) -> None:
    """Both clones advanced a LangGraph thread; B pulls A's line (kept as main@origin, with the
    thread's newest checkpoint by time): B's thread goes on from B's own line, in the saver and in
    what the CLI reads as the thread's line; push then keeps the copy as the remote's."""
    pytest.importorskip("langgraph.checkpoint.base")
    from langgraph.checkpoint.base import empty_checkpoint

    from gitstate.format.checkpoint import latest_line
    from gitstate.langgraph import GitCheckpointSaver

    def step(saver: GitCheckpointSaver, config: dict, n: int) -> dict:
        cp = empty_checkpoint()
        cp["channel_values"] = {"n": n}
        cp["channel_versions"] = {"n": n}
        return dict(saver.put(config, cp, {"source": "loop", "step": n}, {"n": n}))

    url = bare(tmp_path / "server.git").as_uri()
    a, b = stores(tmp_path, url)
    thread = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    sa = GitCheckpointSaver(a)
    step(sa, step(sa, thread, 0), 1)
    assert all(r.ok for r in gitstate.push(a))
    assert all(r.ok for r in gitstate.pull(b))
    sb = GitCheckpointSaver(b)
    ours = step(sb, sb.get_tuple(thread).config, 2)  # type: ignore[union-attr]
    step(sa, sa.get_tuple(thread).config, 20)  # type: ignore[union-attr]  # A's, newer than B's
    assert all(r.ok for r in gitstate.push(a))
    pulled = gitstate.pull(b)
    assert "diverged" in statuses(pulled).values()
    fresh = GitCheckpointSaver(gitstate.open_store(b.path))  # the index read from the refs
    latest = fresh.get_tuple(thread)
    assert latest is not None and latest.config["configurable"]["checkpoint_id"] == ours["configurable"]["checkpoint_id"]
    step(fresh, latest.config, 3)
    run = gitstate.open_store(b.path).get_run("t")
    tips = run.branches()
    assert set(tips) == {"main", "main@origin"} and tips["main"].metadata["langgraph_step"] == 3
    assert tips["main@origin"].metadata["langgraph_step"] == 20  # the kept copy did not move
    assert latest_line(tips) == "main"


def test_a_kept_copy_written_on_then_shared_by_its_branch_is_kept_in_the_same_push(tmp_path: Path) -> None:
    """A kept copy that got checkpoints here, then shared as the README says (main put on the
    copy's line, pushed): the copy is judged after the push, so that very push is all ok."""
    url = bare(tmp_path / "server.git").as_uri()
    a, b = stores(tmp_path, url)
    a.create_run(run_id="r").checkpoint({"n": 0})
    assert all(r.ok for r in gitstate.push(a))
    assert all(r.ok for r in gitstate.pull(b))
    b.get_run("r").checkpoint({"n": "b"})
    a.get_run("r").checkpoint({"n": "a"})
    assert all(r.ok for r in gitstate.push(a))
    assert statuses(gitstate.pull(b))["r/heads/main"] == "diverged"
    run = b.get_run("r")
    run.checkpoint({"n": "on the copy"}, branch="main@origin")  # e.g. a thread resumed from it by id
    run.fork(run.tip() or "", "mine")
    run.rollback(run.tip("main@origin") or "", branch="main")
    pushed = gitstate.push(b)
    got = statuses(pushed)
    assert got["r/heads/main@origin"] == "kept" and got["r/heads/main"] == "pushed", got
    assert all(r.ok for r in pushed)


def test_a_remote_run_of_another_workflow_with_the_same_id_is_not_grafted(tmp_path: Path) -> None:
    """A LangGraph thread there, a session here, both named chat-1: the run records conflict, and
    none of the remote run's lines is pulled into ours (kept as main@origin, its readers refused
    them); a remote run of the same workflow still keeps its diverged line."""
    url = bare(tmp_path / "server.git").as_uri()
    a, b = stores(tmp_path, url)
    a.create_run(run_id="chat-1", workflow="langgraph-like").checkpoint({"from": "a"})
    a.create_run(run_id="same", workflow="w").checkpoint({"from": "a"})
    assert all(r.ok for r in gitstate.push(a))
    mine = b.create_run(run_id="chat-1", workflow="session-like").checkpoint({"from": "b"})
    b.create_run(run_id="same", workflow="w").checkpoint({"from": "b"})
    got = statuses(gitstate.pull(b))
    assert got["chat-1/run"] == "conflict" and got["chat-1/heads/main"] == "skipped", got
    run = b.get_run("chat-1")
    assert set(run.branches()) == {"main"} and run.head().id == mine.id  # type: ignore[union-attr]
    assert got["same/heads/main"] == "diverged" and set(b.get_run("same").branches()) == {"main", "main@origin"}


def test_push_says_when_the_remotes_run_of_that_id_is_another_workflows(tmp_path: Path) -> None:
    """The remote's run of the same id is another workflow's: push says so for its refs instead of
    "pull first" (the pull would skip that run, so the hint could never be followed)."""
    url = bare(tmp_path / "server.git").as_uri()
    a, b = stores(tmp_path, url)
    a.create_run(run_id="chat-1", workflow="session-like").checkpoint({"from": "a"})
    assert all(r.ok for r in gitstate.push(a))
    b.create_run(run_id="chat-1", workflow="langgraph-like").checkpoint({"from": "b"})
    pushed = gitstate.push(b)
    refs = {r.ref.split("/runs/", 1)[1]: r for res in pushed for r in res.refs}
    for name in ("chat-1/run", "chat-1/heads/main"):
        assert refs[name].status == "rejected", (name, refs[name])
        assert "another run (workflow session-like there, langgraph-like here)" in refs[name].message
        assert "pull first" not in refs[name].message
