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
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver, empty_checkpoint
from langgraph.checkpoint.sqlite import SqliteSaver

import gitstate
from gitstate.langgraph import GitCheckpointSaver

THREAD = "bench-thread"
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


class Workload:
    """The LangGraph loop's calls for one thread, one step at a time (so two savers can be driven
    step by step in alternation: machine noise then hits both alike)."""

    def __init__(self, saver: BaseCheckpointSaver, steps: int, seed: int = 7) -> None:
        self.saver = saver
        self.steps = steps
        self.rng = random.Random(seed)
        self.config: dict[str, Any] = {"configurable": {"thread_id": THREAD, "checkpoint_ns": ""}}
        self.messages: list[dict[str, Any]] = []
        self.version: Any = None
        self.put_times: list[float] = []
        self.ids: list[str] = []

    def step(self, i: int) -> None:
        saver = self.saver
        msg = message(self.rng, i)
        t0 = time.perf_counter()
        if "checkpoint_id" in self.config["configurable"]:
            saver.put_writes(self.config, [("messages", [msg])], task_id=f"task-{i}",
                             task_path="~__pregel_pull, agent")
        self.messages = self.messages + [msg]  # add_messages returns a new list holding the same items
        self.version = saver.get_next_version(self.version, None)
        cp = empty_checkpoint()
        cp["channel_values"] = {"messages": self.messages}
        cp["channel_versions"] = {"messages": self.version}
        cp["versions_seen"] = {"agent": {"messages": self.version}}
        self.config = saver.put(self.config, cp, {"source": "loop", "step": i, "parents": {}},
                                {"messages": self.version})
        self.put_times.append(time.perf_counter() - t0)
        self.ids.append(self.config["configurable"]["checkpoint_id"])

    def get_latest(self) -> float:
        t0 = time.perf_counter()
        tup = self.saver.get_tuple({"configurable": {"thread_id": THREAD, "checkpoint_ns": ""}})
        elapsed = time.perf_counter() - t0
        assert tup is not None and len(tup.checkpoint["channel_values"]["messages"]) == self.steps
        return elapsed

    def get_id(self, checkpoint_id: str) -> float:
        t0 = time.perf_counter()
        tup = self.saver.get_tuple({"configurable": {"thread_id": THREAD, "checkpoint_ns": "",
                                                     "checkpoint_id": checkpoint_id}})
        elapsed = time.perf_counter() - t0
        assert tup is not None
        return elapsed

    def list_all(self) -> float:
        t0 = time.perf_counter()
        listed = list(self.saver.list({"configurable": {"thread_id": THREAD}}))
        elapsed = time.perf_counter() - t0
        assert len(listed) == self.steps, len(listed)
        assert listed[0].checkpoint["channel_values"]["messages"] == self.messages
        return elapsed


def measure(a: Workload, b: Workload) -> tuple[dict[str, float], dict[str, float]]:
    """Drive both workloads in alternation; return their figures."""
    for i in range(a.steps):
        a.step(i)
        b.step(i)
    out: tuple[dict[str, float], dict[str, float]] = ({}, {})
    rng = random.Random(99)
    picks = [rng.randrange(a.steps) for _ in range(50)]
    samples: dict[str, list[list[float]]] = {"get_latest": [[], []], "get_id": [[], []], "list": [[], []]}
    for rep in range(50):
        for k, w in enumerate((a, b)):
            samples["get_latest"][k].append(w.get_latest())
            samples["get_id"][k].append(w.get_id(w.ids[picks[rep]]))
    for _ in range(3):
        for k, w in enumerate((a, b)):
            samples["list"][k].append(w.list_all())
    for k, w in enumerate((a, b)):
        times = sorted(w.put_times)
        out[k]["put"] = statistics.median(times)
        out[k]["p99"] = times[max(0, int(len(times) * 0.99) - 1)]
        for key, vals in samples.items():
            out[k][key] = statistics.median(vals[k])
    return out


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
    db = os.path.join(base, "checkpoints.sqlite")
    conn = sqlite3.connect(db, check_same_thread=False)
    sql_saver = SqliteSaver(conn)
    git, sql = measure(Workload(git_saver, args.steps), Workload(sql_saver, args.steps))
    packer = git_saver.store._packer
    if packer is not None:
        packer.join()  # housekeeping started during the run finishes (it is part of the run)
    gitdir = os.path.join(repo, ".git")
    git["disk"] = du([os.path.join(gitdir, n) for n in ("objects", "refs", "logs", "packed-refs")])
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
