"""A pull lands whole or not at all: a forked child pulling ~50 runs (fast-forwards of branches and
node logs, new runs) is killed (SIGKILL) at a random one of its file-system calls after the fetch,
several times; after each kill every run is either exactly as before the pull or exactly as on the
remote, and a pull run again completes. Modelled on ``tests/store/test_atomic_kill.py`` (the child
counts its calls and kills itself at the chosen one: any point of the ref protocol can be hit)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import git
from remote_helpers import bare, machine

import gitstate
from gitstate.sync import remote as remote_mod

_CALLS = ("open", "rename", "replace", "unlink", "write", "pwrite", "fsync", "ftruncate", "rmdir", "mkdir",
          "link", "close")
_KILLS = 6


def _count_calls(on_count: Callable[[int], None]) -> None:
    """Count this (child) process's file-system calls from now on; ``on_count(n)`` runs before the
    n-th."""
    count = [0]
    for name in _CALLS:
        real = getattr(os, name)

        def counted(*args: Any, _real: Callable[..., Any] = real, **kwargs: Any) -> Any:
            count[0] += 1
            on_count(count[0])
            return _real(*args, **kwargs)

        setattr(os, name, counted)


def _child_pull(repo: Path, kill_at: int | None, max_tx: int | None, report: int | None) -> int:
    """Fork a child that pulls from origin; it counts its calls once the fetch is done and is
    killed at call ``kill_at`` (``None``: never; then it writes its count at the start of the merge
    and at the end to the pipe ``report``). Returns the child's wait status."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 1
        try:
            store = gitstate.open_store(repo, pack_in_background=False, lock_timeout=30)
            if max_tx is not None:
                remote_mod.MAX_TX_REFS = max_tx
            seen = [0]

            def on_count(n: int) -> None:
                seen[0] = n
                if kill_at is not None and n >= kill_at:
                    os.kill(os.getpid(), signal.SIGKILL)

            fetch = remote_mod.fetch_checked

            def fetch_then_count(*args: Any, **kwargs: Any) -> None:
                fetch(*args, **kwargs)
                _count_calls(on_count)  # from here on: the merge and the removal of the staging refs

            remote_mod.fetch_checked = fetch_then_count  # type: ignore[assignment]
            results = gitstate.pull(store)
            assert all(r.ok for r in results), [r.to_dict() for r in results if not r.ok]
            if report is not None:
                os.write(report, f"{seen[0]}\n".encode())
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return status


def _runs(repo: Path) -> dict[str, dict[str, str]]:
    """``{run id: {ref: oid}}`` of every run here."""
    out = git(repo, "for-each-ref", "--format=%(refname) %(objectname)", "refs/agentos/")
    runs: dict[str, dict[str, str]] = {}
    for line in out.splitlines():
        name, oid = line.split(" ")
        runs.setdefault(name.split("/")[4], {})[name] = oid
    return runs


@pytest.mark.parametrize("max_tx", [None, 12], ids=["one-transaction", "batches-of-runs"])
def test_killed_pull_leaves_each_run_whole(tmp_path: Path, max_tx: int | None) -> None:
    url = bare(tmp_path / "server.git").as_uri()
    a = gitstate.open_store(machine(tmp_path / "A", url))
    b_path = machine(tmp_path / "B", url)
    for i in range(40):
        run = a.create_run(workflow="w", run_id=f"r{i:02d}")
        with run.node("plan"):
            run.checkpoint({"i": i})
    assert all(r.ok for r in gitstate.push(a))
    b = gitstate.open_store(b_path)
    assert all(r.ok for r in gitstate.pull(b))
    for i in range(40):  # the remote goes on: fast-forwards of branches and node logs
        run = a.get_run(f"r{i:02d}")
        with run.node("act"):
            run.checkpoint({"i": i, "more": True})
    for i in range(40, 52):  # and has new runs
        a.create_run(workflow="w", run_id=f"r{i:02d}").checkpoint({"i": i})
    assert all(r.ok for r in gitstate.push(a))
    before, remote = _runs(b_path), _runs(tmp_path / "A")
    assert len(remote) == 52 and len(before) == 40

    # how many calls a whole pull makes after its fetch: a pull of a copy, not killed
    copy = tmp_path / "copy"
    subprocess.run(["cp", "-a", str(b_path), str(copy)], check=True)
    read, write = os.pipe()
    status = _child_pull(copy, None, max_tx, write)
    os.close(write)
    with os.fdopen(read) as fh:
        total = int(fh.read().split()[0])
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert _runs(copy) == remote

    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    steps = sorted(rng.sample(range(1, total), min(_KILLS, total - 1)))
    for n, step in enumerate(steps):  # each from the state before the pull: a copy of B
        work = tmp_path / f"kill{n}"
        subprocess.run(["cp", "-a", str(b_path), str(work)], check=True)
        status = _child_pull(work, step, max_tx, None)
        killed = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
        assert killed or (os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0), (seed, step, status)
        now = _runs(work)
        assert set(now) <= set(remote), (seed, step)
        for run_id, refs in remote.items():
            assert now.get(run_id, {}) in (before.get(run_id, {}), refs), (seed, step, run_id)
        if max_tx is None:  # one transaction: the whole pull landed or nothing of it
            assert now in (before, remote), (seed, step)
        landed = sum(now.get(r) == refs for r, refs in remote.items() if before.get(r) != refs)
        print(f"seed {seed}: killed at call {step} of {total}: {landed} of 52 runs pulled")
        store = gitstate.open_store(work)
        assert all(r.ok for r in gitstate.pull(store))  # and a pull again completes
        assert _runs(work) == remote
        assert not store.core.list_refs("refs/agentos-incoming/")
        store.close()
    git(work, "fsck", "--strict")
