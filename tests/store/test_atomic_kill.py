"""Multi-ref changes are all or nothing under ``kill -9``: a forked child runs a fork, a delete of a
run or a copy of a LangGraph thread and kills itself (SIGKILL) at its N-th file-system call, for
every N until the change completes; after each kill the refs of the change are all moved or none,
and the next writer goes on (the dead writer's locks are broken at once).

Counting system calls, not sleeping a random time, makes every point of the protocol a kill point
and the test deterministic."""

from __future__ import annotations

import functools
import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import git

import gitstate

pytest.importorskip("langgraph.checkpoint.base")

from langgraph.checkpoint.base import empty_checkpoint  # noqa: E402

from gitstate.langgraph import GitCheckpointSaver  # noqa: E402

# the calls a ref or object write makes: killing before any of them is a kill at that point
_CALLS = ("open", "rename", "replace", "unlink", "write", "pwrite", "fsync", "ftruncate", "rmdir", "mkdir",
          "link", "close")
_MAX_STEPS = 400  # far more than any of these changes makes; reached only if a change never ends


def _die_at(step: int) -> None:
    """Make this (child) process kill itself at its ``step``-th counted call from now on."""
    count = [0]
    for name in _CALLS:
        real = getattr(os, name)

        def counted(*args: Any, _real: Callable[..., Any] = real, **kwargs: Any) -> Any:
            count[0] += 1
            if count[0] >= step:
                os.kill(os.getpid(), signal.SIGKILL)
            return _real(*args, **kwargs)

        setattr(os, name, counted)


def _run_killed(repo: Path, step: int, change: Callable[[gitstate.Store], None]) -> bool:
    """Run ``change`` in a forked child killed at ``step``; True when it completed instead."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 1
        try:
            store = gitstate.open_store(repo, pack_in_background=False)
            _die_at(step)
            change(store)
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        assert os.WTERMSIG(status) == signal.SIGKILL
        return False
    assert os.WEXITSTATUS(status) == 0, f"the change failed at step {step} (not killed)"
    return True


def _refs(repo: Path, prefix: str) -> dict[str, str]:
    out = git(repo, "for-each-ref", "--format=%(refname) %(objectname)", prefix)
    return dict(line.split(" ") for line in out.splitlines())  # type: ignore[misc]


def _every_step(repo: Path, prepare: Callable[[int], Any], change: Callable[[gitstate.Store, Any], None],
                check: Callable[[Any, bool], None]) -> int:
    """Kill ``change`` at step 1, 2, ... until it completes; ``prepare(n)`` makes the n-th attempt's
    subject, ``check(subject, completed)`` looks at the refs after it. Returns the number of kills."""
    for step in range(1, _MAX_STEPS):
        subject = prepare(step)
        completed = _run_killed(repo, step, functools.partial(change, subject=subject))
        check(subject, completed)
        if completed:
            print(f"{step - 1} kill points")
            return step - 1
    raise AssertionError(f"the change never completed within {_MAX_STEPS} steps")


@pytest.fixture
def store(repo: Path) -> Iterator[gitstate.Store]:
    s = gitstate.open_store(repo, pack_in_background=False, lock_timeout=30)
    yield s
    s.close()


def test_fork_is_whole_or_absent(repo: Path, store: gitstate.Store) -> None:
    """A fork creates the branch and its node log together: never one without the other."""
    run = store.create_run(run_id="f")
    with run.node("plan"):
        first = run.checkpoint({"n": 1})
    run.checkpoint({"n": 2})
    prefix = "refs/agentos/main/runs/f/"

    def check(name: str, completed: bool) -> None:
        got = _refs(repo, prefix)
        head, log = f"{prefix}heads/{name}", f"{prefix}nodes/{name}"
        assert (head in got) == (log in got), got
        assert (head in got) or not completed
        if head in got:
            assert got[head] == first.id and got[log] == got[f"{prefix}nodes/main"]

    def change(s: gitstate.Store, subject: str) -> None:
        s.get_run("f").fork(first.id, subject)

    kills = _every_step(repo, lambda n: f"b{n}", change, check)
    assert kills >= 5
    git(repo, "fsck", "--strict")


def test_delete_run_is_whole_or_absent(repo: Path, store: gitstate.Store) -> None:
    """A run's refs (record, branches, node logs) are deleted all together or not at all."""

    def prepare(n: int) -> dict[str, str]:
        run = store.create_run(run_id=f"d{n}")
        with run.node("plan"):
            first = run.checkpoint({"n": n})
        run.fork(first.id, "side")
        before = _refs(repo, f"refs/agentos/main/runs/d{n}/")
        assert len(before) == 5  # run, heads/main, heads/side, nodes/main, nodes/side
        return before

    def check(before: dict[str, str], completed: bool) -> None:
        run_id = next(iter(before)).split("/")[4]
        after = _refs(repo, f"refs/agentos/main/runs/{run_id}/")
        assert after in (before, {}), after
        assert after == {} or not completed

    def change(s: gitstate.Store, subject: dict[str, str]) -> None:
        s.delete_run(next(iter(subject)).split("/")[4])

    kills = _every_step(repo, prepare, change, check)
    assert kills >= 5
    assert sorted(r.id for r in store.list_runs()) == sorted(
        {name.split("/")[4] for name in _refs(repo, "refs/agentos/main/runs/")})
    git(repo, "fsck", "--strict")


def _lg_checkpoint(n: int) -> Any:
    cp = empty_checkpoint()
    cp["channel_values"] = {"n": n}
    cp["channel_versions"] = {"n": str(n)}
    return cp


def test_copy_thread_is_whole_or_absent(repo: Path, store: gitstate.Store) -> None:
    """A LangGraph thread of two branches is copied with both, or not at all."""
    saver = GitCheckpointSaver(store)
    config: Any = {"configurable": {"thread_id": "src", "checkpoint_ns": ""}}
    first = saver.put(config, _lg_checkpoint(1), {"source": "loop", "step": 1, "parents": {}}, {"n": "1"})
    saver.put(first, _lg_checkpoint(2), {"source": "loop", "step": 2, "parents": {}}, {"n": "2"})
    saver.put(first, _lg_checkpoint(3), {"source": "fork", "step": 2, "parents": {}}, {"n": "3"})  # a branch
    source = _refs(repo, "refs/agentos/main/runs/src/heads/")
    assert len(source) == 2

    def check(dst: str, completed: bool) -> None:
        got = _refs(repo, f"refs/agentos/main/runs/{dst}/heads/")
        assert len(got) in (0, len(source)), got
        assert got or not completed

    def change(s: gitstate.Store, subject: str) -> None:
        GitCheckpointSaver(s).copy_thread("src", subject)

    kills = _every_step(repo, lambda n: f"c{n}", change, check)
    assert kills >= 5
    git(repo, "fsck", "--strict")
