"""gc under load: four writer processes checkpoint (each a running run of its own, plus finished
runs of a few checkpoints sharing its objects, for gc to prune and remove) while gc runs in a loop
with alternating policies. No checkpoint a writer was told was written is lost (each writer records
the ids it got back; afterwards every one reads, with its state), and no writer or gc sees an error
other than the typed ones their documentation names. Bounded in checkpoints and in time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from conftest import make_repo

import gitstate
from gitstate.store import retention as R

WRITERS = 4
CHECKPOINTS = 40  # per writer, at most
SECONDS = 10.0  # writers stop after this long whatever they wrote

WRITER = r"""
import json, sys, time, traceback
import gitstate
from gitstate.errors import GitStateError, LockTimeoutError

path, name, count, seconds, acked = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
store = gitstate.open_store(path)
live = store.create_run(workflow="w", run_id=f"live-{name}")
items = []
deadline = time.monotonic() + seconds
typed = 0
with open(acked, "a", encoding="utf-8") as out:
    for i in range(count):
        if time.monotonic() > deadline:
            break
        items.append(f"{name} item {i} " + "y" * 200)
        try:
            done = store.create_run(workflow="w", run_id=f"done-{name}-{i}")
            for k in range(3):  # shares its blobs with the live run: gc drops them only when nothing else has them
                done.checkpoint({"items": list(items[: len(items) - k])}, node="step", status="completed" if k == 2 else None)
            cp = live.checkpoint({"items": list(items), "i": i}, node="step")
        except LockTimeoutError:  # documented for a write: gc held the store longer than lock_timeout
            typed += 1
            continue
        except GitStateError as exc:
            print("TYPED", type(exc).__name__, exc, file=sys.stderr)
            sys.exit(2)
        except BaseException:
            traceback.print_exc()
            print("UNTYPED", file=sys.stderr)
            sys.exit(3)
        out.write(json.dumps({"run": f"live-{name}", "id": cp.id, "i": i}) + "\n")
        out.flush()
        time.sleep(0.02)  # (an agent thinks between checkpoints: gc finds moments without a write under way)
print("ok", typed)
"""


def test_writers_lose_nothing_while_gc_runs_in_a_loop(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    acked = tmp_path / "acked.jsonl"
    store = gitstate.open_store(repo)
    for n in range(10):  # finished runs for the first rounds to prune and remove
        seed = store.create_run(workflow="w", run_id=f"seed{n}")
        for k in range(3):
            seed.checkpoint({"items": [f"seed item {i} " + "y" * 200 for i in range(k + 1)]}, node="step",
                            status="completed" if k == 2 else None)
    writers = [subprocess.Popen([sys.executable, str(script), str(repo), f"w{n}", str(CHECKPOINTS), str(SECONDS),
                                 str(acked)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for n in range(WRITERS)]
    policies = [lambda: R.Policy(keep_last=1), lambda: R.Policy(older_than=R.parse_cutoff("0s")),
                lambda: R.Policy(keep_last=2, older_than=R.parse_cutoff("1s"))]
    rounds = removed = pruned = 0
    started = time.monotonic()
    try:
        while any(w.poll() is None for w in writers) and time.monotonic() - started < SECONDS + 60:
            policy = policies[rounds % len(policies)]()
            plan = R.plan(store, policy, now=rounds % 2 == 0)
            result = R.apply(store, plan, now=rounds % 2 == 0)
            assert all(why in ("changed since planned",) for _what, why in result.failed), result.failed
            removed += len(plan.runs)
            pruned += len(plan.prunes)
            rounds += 1
    finally:
        outputs = [w.communicate(timeout=120) for w in writers]
    for w, (out, err) in zip(writers, outputs, strict=True):
        assert w.returncode == 0 and out.startswith("ok"), err
    assert rounds >= 2 and removed > 0 and pruned > 0, (rounds, removed, pruned)
    final = R.apply(store, R.plan(store, R.Policy(older_than=R.parse_cutoff("0s"))), now=True)
    assert final.failed == []
    store = gitstate.open_store(repo)
    lines = [json.loads(line) for line in acked.read_text().splitlines()]
    assert lines
    for entry in lines:
        state = store.read_checkpoint(entry["id"]).state
        assert state["i"] == entry["i"] and len(state["items"]) == entry["i"] + 1
    for n in range(WRITERS):
        live = store.get_run(f"live-w{n}")
        ids = {cp.id for cp in live.history()}
        assert {e["id"] for e in lines if e["run"] == f"live-w{n}"} <= ids
    assert {s.id for s in store.list_runs()} == {f"live-w{n}" for n in range(WRITERS)}
    done = subprocess.run(["git", "-C", str(repo), "fsck", "--strict", "--no-dangling"], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert os.path.exists(repo / ".git")
