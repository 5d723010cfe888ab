"""Node boundaries with several writers on one branch: a block's entry and exit are the first and
the last checkpoint *it* wrote, never another writer's that landed on the branch meanwhile (the
writers here take turns in a fixed order, so each interleaving is deterministic). A block left open
by a process that died is ``stopped``, not ``running`` forever."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import bounded

import gitstate
from gitstate.store.nodes import new_record
from gitstate_cli.main import cli

ROOT = Path(__file__).resolve().parents[2]


class Turns:
    """Runs scripted steps of several threads in one global order: step ``i`` of the script runs
    on the thread it names, after step ``i - 1`` finished."""

    def __init__(self, script: list[tuple[str, Callable[[], object]]]) -> None:
        self.script = script
        self.done = 0
        self.cond = threading.Condition()
        self.errors: list[BaseException] = []

    def worker(self, who: str) -> None:
        for i, (owner, step) in enumerate(self.script):
            if owner != who:
                continue
            with self.cond:
                if not self.cond.wait_for(lambda i=i: self.done == i or self.errors, timeout=20):
                    raise AssertionError(f"step {i} never came")
                if self.errors:
                    return
            try:
                step()
            except BaseException as exc:
                with self.cond:
                    self.errors.append(exc)
                    self.cond.notify_all()
                raise
            with self.cond:
                self.done = i + 1
                self.cond.notify_all()

    def run(self, *who: str) -> None:
        threads = [threading.Thread(target=self.worker, args=(w,), daemon=True) for w in who]
        for t in threads:
            t.start()

        def join() -> None:
            for t in threads:
                t.join()

        bounded(join, 30)
        if self.errors:
            raise self.errors[0]
        assert self.done == len(self.script)


def _interleave(repo: Path, readme_style: bool) -> None:
    gitstate.open_store(repo).create_run(run_id="shared")
    runs = {w: gitstate.open_store(repo).open_run("shared") for w in "AB"}  # two writers, as two processes
    scopes: dict[str, object] = {}
    blocks: dict[str, gitstate.NodeScope] = {}

    def enter(w: str) -> Callable[[], None]:
        def step() -> None:
            blocks[w] = runs[w].node("blk-" + w)
            scopes[w] = blocks[w].__enter__()
        return step

    def write(w: str, i: int, inside: bool) -> Callable[[], None]:
        def step() -> None:
            state = {"who": w, "i": i, "in": inside}
            if inside and not readme_style:
                blocks[w].checkpoint(state)
            else:
                runs[w].checkpoint(state)
        return step

    def leave(w: str) -> Callable[[], None]:
        return lambda: blocks[w].__exit__(None, None, None)

    Turns([
        ("A", write("A", 0, False)),
        ("A", enter("A")),
        ("B", write("B", 0, False)),  # lands after A's block began: the old rule made it A's entry
        ("B", enter("B")),
        ("A", write("A", 1, True)),   # the old rule made it B's entry
        ("B", write("B", 1, True)),
        ("A", write("A", 2, True)),
        ("B", write("B", 2, True)),   # lands before A's block ends: the old rule made it A's exit
        ("A", leave("A")),
        ("A", write("A", 3, False)),  # after A's block, inside B's: the old rule made it B's exit
        ("B", leave("B")),
    ]).run("A", "B")
    run = gitstate.open_store(repo).open_run("shared")
    found = {b.node: b for b in run.nodes()}
    assert sorted(found) == ["blk-A", "blk-B"]
    for w in "AB":
        boundary = found["blk-" + w]
        assert boundary.status == "completed"
        assert run.load(boundary.entry).state == {"who": w, "i": 1, "in": True}, w
        assert run.load(boundary.exit).state == {"who": w, "i": 2, "in": True}, w
        assert (blocks[w].entry.id, blocks[w].exit.id) == (boundary.entry, boundary.exit)


def test_two_writers_on_one_branch_each_block_marks_its_own_checkpoints(repo: Path) -> None:
    _interleave(repo, readme_style=False)


def test_run_checkpoint_inside_a_block_with_another_writer(repo: Path) -> None:
    _interleave(repo, readme_style=True)


def test_nested_blocks_and_another_run_object_of_the_same_run(store: gitstate.Store, repo: Path) -> None:
    run = store.create_run(run_id="nest")
    other = gitstate.open_store(repo).open_run("nest")  # the same run through another object
    base = run.checkpoint({"n": 0})
    with run.node("outer") as outer:
        a = other.checkpoint({"n": 1})
        with run.node("inner") as inner:
            b = inner.checkpoint({"n": 2})
        c = run.checkpoint({"n": 3}, branch="side")  # another branch: not this block's
    assert (outer.entry.id, outer.exit.id) == (a.id, b.id)
    assert (inner.entry.id, inner.exit.id) == (b.id, b.id)
    assert c.branch == "side"
    with run.node("idle") as idle:  # wrote nothing: the tip as it was
        pass
    assert idle.entry.id == idle.exit.id == b.id != base.id


def test_rollback_inside_a_block_drops_what_it_removed(store: gitstate.Store) -> None:
    run = store.create_run(run_id="rb")
    run.checkpoint({"n": 0})
    with run.node("n") as scope:
        a = scope.checkpoint({"n": 1})
        scope.checkpoint({"n": 2})
        run.rollback(a.id)
        c = scope.checkpoint({"n": 3})
    assert (scope.entry.id, scope.exit.id) == (a.id, c.id)
    assert [(b.node, b.entry, b.exit) for b in run.nodes()] == [("n", a.id, c.id)]


_KILLED = r"""
import os, sys
import gitstate
run = gitstate.open_store(sys.argv[1]).open_run("k")
with run.node("work") as scope:
    scope.checkpoint({"step": 1})
    print("inside", flush=True)
    os._exit(0)  # as kill -9 would: the block is never left
"""


def test_block_of_a_dead_process_is_stopped(store: gitstate.Store, repo: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    run = store.create_run(run_id="k")
    run.checkpoint({"step": 0})
    out = subprocess.run([sys.executable, "-c", _KILLED, str(repo)], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120, check=False)
    assert out.stdout == "inside\n", out.stderr
    assert [(b.node, b.status) for b in run.nodes()] == [("work", "stopped")]
    assert run.load("node:work").state == {"step": 1}  # no closed boundary: the newest checkpoint of it
    # a record without an owner (written before owners were recorded) cannot be judged: running
    log = run.node_log()
    log.append(new_record(run.id, "old", "main", run.tip(), store.core.read_ref(log.ref), None))
    # one open by this (live) process stays running
    scope = run.node("live")
    scope.__enter__()
    try:
        assert [(b.node, b.status) for b in run.nodes()] == [
            ("work", "stopped"), ("old", "running"), ("live", "running")]
        monkeypatch.chdir(repo)
        result = CliRunner().invoke(cli, ["nodes", "k", "--json"], prog_name="git agentos")
        assert result.exit_code == 0, result.output
        assert [(b["node"], b["status"]) for b in json.loads(result.stdout)] == [
            ("work", "stopped"), ("old", "running"), ("live", "running")]
    finally:
        scope.__exit__(None, None, None)
    assert run.nodes()[-1].status == "completed"
