"""Benchmark: GitCheckpointSaver against LangGraph's SqliteSaver on one workload, side by side.

One thread of N steps (default 1,000); each step appends one ~420-byte message (varied realistic
text) to a ``messages`` list channel, the way LangGraph's loop does: ``put_writes`` of the task's
write on the current checkpoint, then ``put`` of the next checkpoint. Both savers run in this one
process, step-interleaved (step i on gitstate, step i on SQLite, ...), so the machine's noise hits
both alike. Measured per run: put (each step's put_writes + put: median, mean, p99), get_tuple of
the latest, get_tuple by id (random checkpoints), list of all checkpoints, and bytes on disk at the
end (gitstate: files under .git/objects, refs, logs and packed-refs after the housekeeping gitstate
started on its own finished; SQLite: db + wal + shm).

Sections printed:

1. the main table at ``--steps``, repeated ``--repeat`` times (every run's ratios, then the median
   and mean of each figure over the runs and the spread of the ratio), with the issue's goals;
2. ``core.fsync=all`` in the repository (gitstate flushes packs, refs, reflogs and directories)
   against the same SqliteSaver (WAL, synchronous=FULL, its default): put only;
3. a scaling table (``--scaling``, default 10 and 100 steps, plus the main size; ``--with-5000``
   adds 5,000 steps, put and disk only, since SQLite's list of 5,000 checkpoints takes minutes);
4. system calls per step (``strace -c -f``, when strace is installed): each saver alone in a child
   process, the difference between a run of W+M steps and one of W steps, divided by M.

Usage: python scripts/bench_langgraph.py [--steps 1000] [--repeat 3] [--with-5000] [--quick]"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sqlite3
import statistics
import subprocess
import sys
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
GOALS = {"put": 1.0, "put_mean": None, "p99": None, "get_latest": 0.8, "get_id": 1.0, "list": 0.5,
         "disk": 0.02}
BARS = {"put": 1.0, "get_latest": 1.0, "get_id": 1.0, "list": 0.5, "disk": 0.02}


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
        """One LangGraph step: the task's write on the current checkpoint, then the next one."""
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
        """Seconds of one get_tuple of the thread's latest checkpoint (checked)."""
        t0 = time.perf_counter()
        tup = self.saver.get_tuple({"configurable": {"thread_id": THREAD, "checkpoint_ns": ""}})
        elapsed = time.perf_counter() - t0
        assert tup is not None and len(tup.checkpoint["channel_values"]["messages"]) == self.steps
        return elapsed

    def get_id(self, checkpoint_id: str) -> float:
        """Seconds of one get_tuple of a checkpoint by id."""
        t0 = time.perf_counter()
        tup = self.saver.get_tuple({"configurable": {"thread_id": THREAD, "checkpoint_ns": "",
                                                     "checkpoint_id": checkpoint_id}})
        elapsed = time.perf_counter() - t0
        assert tup is not None and tup.config["configurable"]["checkpoint_id"] == checkpoint_id
        return elapsed

    def list_all(self) -> float:
        """Seconds of one list of every checkpoint of the thread (checked)."""
        t0 = time.perf_counter()
        listed = list(self.saver.list({"configurable": {"thread_id": THREAD}}))
        elapsed = time.perf_counter() - t0
        assert len(listed) == self.steps, len(listed)
        assert listed[0].checkpoint["channel_values"]["messages"] == self.messages
        return elapsed


def du(paths: list[str]) -> int:
    """Sum of the sizes of the files at or below ``paths``."""
    total = 0
    for p in paths:
        if os.path.isfile(p):
            total += os.path.getsize(p)
        for root, _dirs, files in os.walk(p):
            for f in files:
                try:
                    total += os.path.getsize(os.path.join(root, f))
                except FileNotFoundError:
                    pass
    return total


def git_init(path: str, fsync: str | None = None) -> None:
    """A fresh repository (``core.fsync`` set when given)."""
    subprocess.run(["git", "init", "-q", path], check=True)
    if fsync is not None:
        subprocess.run(["git", "-C", path, "config", "core.fsync", fsync], check=True)


def git_disk(repo: str) -> int:
    """Bytes gitstate's data takes in ``repo``."""
    gitdir = os.path.join(repo, ".git")
    return du([os.path.join(gitdir, n) for n in ("objects", "refs", "logs", "packed-refs")])


def pack_count(repo: str) -> int:
    """Number of packs in ``repo``."""
    pack_dir = os.path.join(repo, ".git", "objects", "pack")
    return sum(1 for n in os.listdir(pack_dir) if n.endswith(".idx")) if os.path.isdir(pack_dir) else 0


def run_once(base: str, steps: int, *, reads: bool = True, lists: bool = True, fsync: str | None = None,
             reps: int = 50) -> tuple[dict[str, float], dict[str, float], dict[str, Any]]:
    """One interleaved run in ``base``; returns gitstate's figures, SQLite's, and facts."""
    repo = os.path.join(base, "repo")
    git_init(repo, fsync)
    git_saver = GitCheckpointSaver(gitstate.open_store(repo))
    db = os.path.join(base, "checkpoints.sqlite")
    conn = sqlite3.connect(db, check_same_thread=False)
    sql_saver = SqliteSaver(conn)
    a, b = Workload(git_saver, steps), Workload(sql_saver, steps)
    for i in range(steps):
        if i % 2:
            b.step(i)
            a.step(i)
        else:
            a.step(i)
            b.step(i)
    out: tuple[dict[str, float], dict[str, float]] = ({}, {})
    if reads:
        rng = random.Random(99)
        picks = [rng.randrange(steps) for _ in range(reps)]
        samples: dict[str, list[list[float]]] = {"get_latest": [[], []], "get_id": [[], []], "list": [[], []]}
        for rep in range(reps):
            for w in ((a, b) if rep % 2 else (b, a)):
                k = 0 if w is a else 1
                samples["get_latest"][k].append(w.get_latest())
                samples["get_id"][k].append(w.get_id(w.ids[picks[rep]]))
        if lists:
            for rep in range(3):
                for w in ((a, b) if rep % 2 else (b, a)):
                    samples["list"][0 if w is a else 1].append(w.list_all())
        for k in (0, 1):
            for key, vals in samples.items():
                if vals[k]:
                    out[k][key] = statistics.median(vals[k])
    for k, w in enumerate((a, b)):
        times = sorted(w.put_times)
        out[k]["put"] = statistics.median(times)
        out[k]["put_mean"] = statistics.fmean(times)
        out[k]["p99"] = times[max(0, int(len(times) * 0.99) - 1)]
    git_saver.store.wait_for_housekeeping()  # housekeeping started during the run is part of it
    out[0]["disk"] = git_disk(repo)
    conn.close()
    out[1]["disk"] = du([db, db + "-wal", db + "-shm"])
    facts = {"packs": pack_count(repo)}
    fsck = subprocess.run(["git", "-C", repo, "fsck", "--strict", "--no-dangling"], capture_output=True, text=True)
    facts["fsck"] = fsck.returncode == 0 and not fsck.stdout.strip()
    git_saver.store.close()
    return out[0], out[1], facts


def fmt(key: str, value: float) -> str:
    """A figure as text."""
    if key == "disk":
        return f"{value / 1e6:.2f} MB"
    return f"{value * 1e3:.3f} ms"


def spread(values: list[float]) -> str:
    """``min–max`` of ratios."""
    return f"{min(values):.2f}–{max(values):.2f}"


def table(title: str, runs: list[tuple[dict[str, float], dict[str, float], dict[str, Any]]],
          keys: list[str], goals: dict[str, float | None], bars: dict[str, float] | None = None) -> None:
    """Print every run's ratios, then medians, means and spread over the runs, with goals."""
    print(f"\n== {title} ==")
    print("per run, gitstate / SqliteSaver:  " + "  ".join(f"{k}" for k in keys))
    for n, (g, s, facts) in enumerate(runs, 1):
        cells = "  ".join(f"{k}={g[k] / s[k]:.2f}x" for k in keys if k in g and s.get(k))
        extra = f"  packs={facts['packs']} fsck={'clean' if facts['fsck'] else 'FAILED'}"
        print(f"  run {n}: {cells}{extra}")
    print(f"{'metric':<11}{'gitstate med':>14}{'Sqlite med':>14}{'ratio med':>10}{'ratio mean':>11}"
          f"{'spread':>12}  goal")
    for key in keys:
        ratios = [g[key] / s[key] for g, s, _f in runs if key in g and s.get(key)]
        if not ratios:
            continue
        gm = statistics.median(g[key] for g, _s, _f in runs)
        sm = statistics.median(s[key] for _g, s, _f in runs)
        rmed, rmean = statistics.median(ratios), statistics.fmean(ratios)
        goal = goals.get(key)
        mark = "" if goal is None else f"≤{goal}x " + ("met" if rmed <= goal else "MISSED")
        if bars and key in bars and bars[key] != goal:
            mark += f" (bar ≤{bars[key]}x {'met' if rmed <= bars[key] else 'MISSED'})"
        print(f"{key:<11}{fmt(key, gm):>14}{fmt(key, sm):>14}{rmed:>9.2f}x{rmean:>10.2f}x{spread(ratios):>12}  {mark}")


# -- system calls per step ----------------------------------------------------------------------


def child(kind: str, steps: int, base: str) -> None:
    """``--child``: run ``steps`` steps of one saver alone (for strace)."""
    if kind == "gitstate":
        repo = os.path.join(base, "repo")
        git_init(repo)
        saver: BaseCheckpointSaver = GitCheckpointSaver(gitstate.open_store(repo))
    else:
        saver = SqliteSaver(sqlite3.connect(os.path.join(base, "c.sqlite"), check_same_thread=False))
    w = Workload(saver, steps)
    for i in range(steps):
        w.step(i)
    if isinstance(saver, GitCheckpointSaver):
        saver.store.wait_for_housekeeping()


def strace_counts(kind: str, steps: int, work: str) -> dict[str, int]:
    """Syscall counts (``strace -c -f``) of a child running ``steps`` steps of ``kind``."""
    base = tempfile.mkdtemp(prefix=f"st-{kind}-", dir=work)
    out = os.path.join(base, "strace.txt")
    subprocess.run(["strace", "-c", "-f", "-o", out, sys.executable, os.path.abspath(__file__), "--child", kind,
                    "--steps", str(steps), "--dir", base], check=True, capture_output=True)
    counts: dict[str, int] = {}
    with open(out, encoding="utf-8") as fh:
        for line in fh:
            parts = line.split()
            if len(parts) >= 5 and parts[0][0].isdigit() and parts[-1] != "total":
                calls = int(parts[3])
                counts[parts[-1]] = counts.get(parts[-1], 0) + calls
    counts["total"] = sum(counts.values())
    return counts


def syscalls(warm: int, measured: int, work: str) -> None:
    """Print system calls per step at a thread of ``warm`` steps (strace, each saver alone)."""
    print(f"\n== system calls per step (strace -c -f; steps {warm + 1}..{warm + measured}, each saver alone in "
          "a child process, difference of two runs / steps; background housekeeping included) ==")
    if shutil.which("strace") is None:
        print("strace is not installed: not measured")
        return
    keys = ["total", "fdatasync", "fsync", "openat", "rename", "unlink", "write", "getdents64"]
    print(f"{'saver':<14}" + "".join(f"{k:>12}" for k in keys))
    for kind in ("gitstate", "sqlite"):
        lo = strace_counts(kind, warm, work)
        hi = strace_counts(kind, warm + measured, work)
        print(f"{kind:<14}" + "".join(f"{(hi.get(k, 0) - lo.get(k, 0)) / measured:>12.1f}" for k in keys))


# -- main ---------------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=1000, help="steps of the main table (1000)")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each table (3)")
    ap.add_argument("--scaling", default="10,100", help="other thread lengths for the scaling table (10,100)")
    ap.add_argument("--with-5000", action="store_true", help="add 5,000 steps to the scaling table (put, disk)")
    ap.add_argument("--no-fsync-all", action="store_true", help="skip the core.fsync=all table")
    ap.add_argument("--no-strace", action="store_true", help="skip the system call counts")
    ap.add_argument("--quick", action="store_true", help="smoke-size run (numbers not meaningful)")
    ap.add_argument("--dir", default=None, help="work here (kept) instead of a temporary directory")
    ap.add_argument("--child", choices=("gitstate", "sqlite"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.steps, args.dir)
        return
    if args.quick:
        args.steps, args.repeat, args.scaling = min(args.steps, 30), 1, "5"
    work = args.dir or tempfile.mkdtemp(prefix="bench-lg-")
    os.makedirs(work, exist_ok=True)
    try:
        counter = iter(range(10**6))

        def fresh() -> str:
            return tempfile.mkdtemp(prefix=f"r{next(counter)}-", dir=work)

        print(f"gitstate {gitstate.__version__}, sqlite {sqlite3.sqlite_version}, python {sys.version.split()[0]}; "
              f"{args.steps} steps, one ~420-byte message appended per step; {args.repeat} runs per table")
        main_runs = []
        for _ in range(args.repeat):
            main_runs.append(run_once(fresh(), args.steps, reps=10 if args.quick else 50))
        table(f"{args.steps} steps, git's default core.fsync (pack + idx flushed) vs SqliteSaver",
              main_runs, ["put", "put_mean", "p99", "get_latest", "get_id", "list", "disk"], GOALS, BARS)
        own = [g["p99"] / g["put"] for g, _s, _f in main_runs]
        print(f"gitstate p99 put / its median put: {spread(own)}x over the runs")

        if not args.no_fsync_all:
            fs_runs = [run_once(fresh(), args.steps, reads=False, fsync="all") for _ in range(args.repeat)]
            table(f"{args.steps} steps, core.fsync=all vs SqliteSaver (synchronous=FULL)", fs_runs,
                  ["put", "put_mean", "p99"], {"put": 1.5})

        sizes = sorted({int(x) for x in args.scaling.split(",") if x.strip()} | {args.steps})
        print("\n== scaling: ratio gitstate / SqliteSaver, median over the runs [spread] ==")
        print(f"{'steps':>6}{'put':>22}{'get_latest':>22}{'get_id':>22}{'list':>22}{'disk':>22}")
        rows: list[tuple[int, list[tuple[dict[str, float], dict[str, float], dict[str, Any]]]]] = []
        for n in sizes:
            rows.append((n, main_runs if n == args.steps else
                         [run_once(fresh(), n, reps=20) for _ in range(args.repeat)]))
        if args.with_5000:
            rows.append((5000, [run_once(fresh(), 5000, reads=False)]))
        for n, runs in rows:
            cells = []
            for key in ("put", "get_latest", "get_id", "list", "disk"):
                ratios = [g[key] / s[key] for g, s, _f in runs if key in g and s.get(key)]
                cells.append(f"{statistics.median(ratios):.2f}x [{spread(ratios)}]" if ratios else "—")
            print(f"{n:>6}" + "".join(f"{c:>22}" for c in cells))
        if not args.no_strace:
            syscalls(5 if args.quick else 500, 5 if args.quick else 100, work)
    finally:
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
