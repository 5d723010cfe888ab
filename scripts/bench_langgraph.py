"""Benchmark: GitCheckpointSaver against LangGraph's SqliteSaver on one workload.

One thread of N steps (default 1,000); each step appends one ~420-byte message (varied realistic
text) to a ``messages`` list channel, the way LangGraph's loop does: ``put_writes`` of the task's
write on the current checkpoint, then ``put`` of the next checkpoint. Prints medians and ratios of
put (with its put_writes), p99 put, get_tuple of the latest, get_tuple by id, list of all
checkpoints, and bytes on disk at the end (gitstate: files under .git/objects, refs, logs and
packed-refs; whatever housekeeping gitstate did on its own during the run counts; no manual gc).

Usage: python scripts/bench_langgraph.py [--steps 1000] [--dir DIR]"""

from __future__ import annotations

import argparse
import os
import random
import sqlite3
import statistics
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver, empty_checkpoint
from langgraph.checkpoint.sqlite import SqliteSaver

import gitstate
from gitstate.langgraph import GitCheckpointSaver

WORDS = ("the agent called a tool to fetch the quarterly report and found that revenue grew while "
         "costs in the logistics segment rose sharply; next it will summarise risks, compare with last "
         "year, draft an email to finance, check the calendar for a review slot, and ask the user "
         "whether the forecast should include the delayed contract from the northern region").split()


def message(rng: random.Random, i: int) -> dict[str, Any]:
    """A chat message of about 420 bytes of varied text."""
    words: list[str] = []
    while sum(len(w) + 1 for w in words) < 360:
        words.append(rng.choice(WORDS))
    role = ("user", "assistant", "tool")[i % 3]
    return {"role": role, "id": str(uuid.UUID(int=rng.getrandbits(128))), "content": " ".join(words)}


def run(saver: BaseCheckpointSaver, steps: int, seed: int = 7) -> dict[str, Any]:
    rng = random.Random(seed)
    thread = "bench-thread"
    config: dict[str, Any] = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    messages: list[dict[str, Any]] = []
    version: Any = None
    put_times: list[float] = []
    ids: list[str] = []
    for i in range(steps):
        msg = message(rng, i)
        t0 = time.perf_counter()
        if "checkpoint_id" in config["configurable"]:
            saver.put_writes(config, [("messages", [msg])], task_id=f"task-{i}", task_path="~__pregel_pull, agent")
        messages = messages + [msg]  # add_messages returns a new list holding the same items
        version = saver.get_next_version(version, None)
        cp = empty_checkpoint()
        cp["channel_values"] = {"messages": messages}
        cp["channel_versions"] = {"messages": version}
        cp["versions_seen"] = {"agent": {"messages": version}}
        config = saver.put(config, cp, {"source": "loop", "step": i, "parents": {}}, {"messages": version})
        put_times.append(time.perf_counter() - t0)
        ids.append(config["configurable"]["checkpoint_id"])
    latest = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    get_latest = timed(lambda: saver.get_tuple(latest), 50)
    by_id = [{"configurable": {"thread_id": thread, "checkpoint_ns": "", "checkpoint_id": rng.choice(ids)}}
             for _ in range(50)]
    it = iter(by_id)
    get_id = timed(lambda: saver.get_tuple(next(it)), 50)
    t0 = time.perf_counter()
    listed = list(saver.list(latest))
    list_time = time.perf_counter() - t0
    assert len(listed) == steps, len(listed)
    assert listed[0].checkpoint["channel_values"]["messages"] == messages
    put_times.sort()
    return {
        "put": statistics.median(put_times), "p99": put_times[int(len(put_times) * 0.99) - 1],
        "get_latest": get_latest, "get_id": get_id, "list": list_time,
    }


def timed(fn: Callable[[], Any], n: int) -> float:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


def du(paths: list[str]) -> int:
    total = 0
    for p in paths:
        if os.path.isfile(p):
            total += os.path.getsize(p)
        for root, _dirs, files in os.walk(p):
            total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--dir", default=None)
    args = ap.parse_args()
    base = args.dir or tempfile.mkdtemp(prefix="bench-lg-")
    repo = os.path.join(base, "repo")
    subprocess.run(["git", "init", "-q", repo], check=True)
    git_saver = GitCheckpointSaver(gitstate.open_store(repo))
    git = run(git_saver, args.steps)
    gitdir = os.path.join(repo, ".git")
    git["disk"] = du([os.path.join(gitdir, n) for n in ("objects", "refs", "logs", "packed-refs")])

    db = os.path.join(base, "checkpoints.sqlite")
    conn = sqlite3.connect(db, check_same_thread=False)
    sql_saver = SqliteSaver(conn)
    sql = run(sql_saver, args.steps)
    conn.close()
    sql["disk"] = du([db, db + "-wal", db + "-shm"])

    goals = {"put": 1.0, "p99": None, "get_latest": 1.0, "get_id": 1.0, "list": 0.5, "disk": 0.02}
    print(f"{args.steps} steps, one ~420-byte message appended per step\n")
    print(f"{'metric':<12}{'gitstate':>14}{'SqliteSaver':>14}{'ratio':>9}  goal")
    for key, goal in goals.items():
        g, s = git[key], sql[key]
        if key == "disk":
            gs, ss = f"{g / 1e6:.2f} MB", f"{s / 1e6:.2f} MB"
        else:
            gs, ss = f"{g * 1e3:.3f} ms", f"{s * 1e3:.3f} ms"
        ratio = g / s if s else float("inf")
        mark = "" if goal is None else (f"≤{goal}x " + ("ok" if ratio <= goal else "MISSED"))
        print(f"{key:<12}{gs:>14}{ss:>14}{ratio:>8.2f}x  {mark}")
    own = git["p99"] / git["put"]
    print(f"\ngitstate p99 put / its median put: {own:.1f}x  (goal ≤10x {'ok' if own <= 10 else 'MISSED'})")


if __name__ == "__main__":
    main()
