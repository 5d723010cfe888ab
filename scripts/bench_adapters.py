"""Benchmark: each framework integration side by side with the framework's own default backend.

- OpenAI Agents SDK: ``GitSession`` vs ``SQLiteSession`` (file), an append-heavy session: N
  ``add_items`` of one ~300-byte message each; read = ``get_items(limit=10)``, list = ``get_items()``.
- Microsoft Agent Framework: ``GitCheckpointStorage`` vs ``FileCheckpointStorage``: a chain of N
  checkpoints whose state grows by one result per superstep; read = ``load`` of a random id, list =
  ``list_checkpoint_ids``.
- LangGraph memory: ``GitStore`` vs ``InMemoryStore`` (speed) and ``SqliteStore`` (persistent): N
  puts over 20 namespaces; read = ``get``, list = ``search`` of a namespace (limit 10).
- CrewAI: ``GitFlowPersistence`` vs ``SQLiteFlowPersistence``: N ``save_state`` of a growing flow
  state; read = ``load_state``, list = ``load_pending_feedback``.

The two backends of a pair are driven in alternation, operation by operation, so machine noise hits
both alike. Prints medians, ratios (gitstate ÷ reference; < 1 means gitstate is faster or smaller)
and bytes on disk at the end (gitstate: .git/objects, refs, logs, packed-refs after its own
housekeeping; SQLite: the database with its -wal/-shm files while open; files: the directory).
Frameworks that are not installed are skipped and named (CrewAI lives in .venv-crewai: run this
script with that interpreter for it).

Usage: python scripts/bench_adapters.py [--ops 1000] [--only openai,agent-framework,store,crewai]
                                        [--dir DIR] [--json FILE]"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import random
import sqlite3
import statistics
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable
from typing import Any

WORDS = ("the agent called a tool to fetch the quarterly report and found that revenue grew while costs in the "
         "logistics segment rose sharply next it will summarise risks compare with last year draft an email to "
         "finance check the calendar for a review slot and ask the user about the forecast").split()


def text(rng: random.Random, size: int) -> str:
    words: list[str] = []
    while sum(len(w) + 1 for w in words) < size:
        words.append(rng.choice(WORDS))
    return " ".join(words)


def du(paths: list[str]) -> int:
    total = 0
    for p in paths:
        if os.path.isfile(p):
            total += os.path.getsize(p)
        for root, _dirs, files in os.walk(p):
            total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
    return total


def git_disk(repo: str) -> int:
    gitdir = os.path.join(repo, ".git")
    return du([os.path.join(gitdir, n) for n in ("objects", "refs", "logs", "packed-refs")])


def new_repo(base: str, name: str) -> str:
    repo = os.path.join(base, name)
    subprocess.run(["git", "init", "-q", repo], check=True)
    return repo


def median_ms(values: list[float]) -> float:
    return statistics.median(values) * 1e3


class Pair:
    """Timings of gitstate and one reference backend for one integration."""

    def __init__(self, name: str, reference: str) -> None:
        self.name = name
        self.reference = reference
        self.samples: dict[str, tuple[list[float], list[float]]] = {}
        self.disk: tuple[int, int] | None = None
        self.note = ""

    def add(self, metric: str, ours: float, theirs: float) -> None:
        a, b = self.samples.setdefault(metric, ([], []))
        a.append(ours)
        b.append(theirs)

    def rows(self) -> list[tuple[str, str, str, float]]:
        out = []
        for metric, (a, b) in self.samples.items():
            ga, gb = median_ms(a), median_ms(b)
            out.append((metric, f"{ga:.3f} ms", f"{gb:.3f} ms", ga / gb if gb else float("inf")))
        if self.disk is not None:
            ga, gb = self.disk
            out.append(("bytes on disk", f"{ga / 1e6:.2f} MB", f"{gb / 1e6:.2f} MB", ga / gb if gb else float("inf")))
        return out


def timed_sync(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


async def timed(fn: Callable[[], Awaitable[Any]]) -> float:
    t0 = time.perf_counter()
    await fn()
    return time.perf_counter() - t0


# -- OpenAI Agents SDK --------------------------------------------------------------------------


async def bench_openai(base: str, ops: int) -> Pair:
    from agents import SQLiteSession

    from gitstate.openai_agents import GitSession

    pair = Pair("OpenAI Agents session", "SQLiteSession")
    repo = new_repo(base, "openai")
    db = os.path.join(base, "session.sqlite")
    ours, theirs = GitSession("bench", repo), SQLiteSession("bench", db)
    rng = random.Random(1)
    for i in range(ops):
        item = {"role": ("user", "assistant")[i % 2], "content": text(rng, 300)}
        a = await timed(lambda item=item: ours.add_items([item]))
        b = await timed(lambda item=item: theirs.add_items([item]))
        pair.add("write (add_items)", a, b)
    for _ in range(50):
        pair.add("read (get_items limit=10)", await timed(lambda: ours.get_items(limit=10)),
                 await timed(lambda: theirs.get_items(limit=10)))
    for _ in range(10):
        pair.add(f"list (get_items, {ops} items)", await timed(lambda: ours.get_items()),
                 await timed(lambda: theirs.get_items()))
    assert await ours.get_items() == await theirs.get_items()
    ours.store.wait_for_housekeeping()
    open_size = du([db, db + "-wal", db + "-shm"])
    pair.disk = (git_disk(repo), open_size)
    theirs.close()
    pair.note = f"SQLite after close (WAL checkpointed): {du([db, db + '-wal', db + '-shm']) / 1e6:.2f} MB"
    return pair


# -- Microsoft Agent Framework ------------------------------------------------------------------


async def bench_agent_framework(base: str, ops: int) -> Pair:
    from agent_framework import FileCheckpointStorage, WorkflowCheckpoint, WorkflowMessage

    from gitstate.agent_framework import GitCheckpointStorage

    pair = Pair("Agent Framework checkpoints", "FileCheckpointStorage")
    repo = new_repo(base, "agent-framework")
    folder = os.path.join(base, "af-files")
    ours, theirs = GitCheckpointStorage(repo), FileCheckpointStorage(folder)
    rng = random.Random(2)
    results: list[dict[str, Any]] = []
    previous = None
    ids = []
    for i in range(ops):
        results = results + [{"step": i, "summary": text(rng, 200)}]
        cp = WorkflowCheckpoint(
            workflow_name="bench", graph_signature_hash="sig", previous_checkpoint_id=previous, iteration_count=i,
            messages={"worker": [WorkflowMessage(data={"task": i}, source_id="worker", target_id="worker")]},
            state={"_executor_state": {"worker": {"results": results}}, "count": i})
        previous = cp.checkpoint_id
        ids.append(previous)
        pair.add("write (save)", await timed(lambda cp=cp: ours.save(cp)), await timed(lambda cp=cp: theirs.save(cp)))
    for _ in range(50):
        cid = rng.choice(ids)
        pair.add("read (load)", await timed(lambda cid=cid: ours.load(cid)), await timed(lambda cid=cid: theirs.load(cid)))
    for _ in range(5):
        pair.add(f"list ({ops} checkpoint ids)", await timed(lambda: ours.list_checkpoint_ids(workflow_name="bench")),
                 await timed(lambda: theirs.list_checkpoint_ids(workflow_name="bench")))
    assert await ours.load(ids[-1]) == await theirs.load(ids[-1])
    ours.store.wait_for_housekeeping()
    pair.disk = (git_disk(repo), du([folder]))
    return pair


# -- LangGraph long-term memory -----------------------------------------------------------------


def bench_store(base: str, ops: int) -> list[Pair]:
    from langgraph.store.memory import InMemoryStore

    from gitstate.langgraph import GitStore

    pairs = [Pair("LangGraph memory", "InMemoryStore")]
    repo = new_repo(base, "store")
    ours = GitStore.from_path(repo)
    references: list[Any] = [InMemoryStore()]
    db = os.path.join(base, "store.sqlite")
    conn = None
    if importlib.util.find_spec("langgraph.store.sqlite") is not None:
        from langgraph.store.sqlite import SqliteStore

        conn = sqlite3.connect(db, check_same_thread=False, isolation_level=None)
        sql = SqliteStore(conn)
        sql.setup()
        references.append(sql)
        pairs.append(Pair("LangGraph memory", "SqliteStore"))
    rng = random.Random(3)
    keys = []
    for i in range(ops):
        ns, key = ("users", f"u{i % 20}"), f"memory-{i}"
        keys.append((ns, key))
        value = {"text": text(rng, 200), "i": i, "kind": ("fact", "preference")[i % 2]}
        a = timed_sync(lambda ns=ns, key=key, value=value: ours.put(ns, key, value))
        for pair, ref in zip(pairs, references, strict=True):
            pair.add("write (put)", a, timed_sync(lambda ref=ref, ns=ns, key=key, value=value: ref.put(ns, key, value)))
    for _ in range(50):
        ns, key = rng.choice(keys)
        a = timed_sync(lambda ns=ns, key=key: ours.get(ns, key))
        for pair, ref in zip(pairs, references, strict=True):
            pair.add("read (get)", a, timed_sync(lambda ref=ref, ns=ns, key=key: ref.get(ns, key)))
    for _ in range(20):
        ns = ("users", f"u{rng.randrange(20)}")
        a = timed_sync(lambda ns=ns: ours.search(ns, filter={"kind": "fact"}, limit=10))
        for pair, ref in zip(pairs, references, strict=True):
            pair.add("list (search, filter, limit 10)", a,
                     timed_sync(lambda ref=ref, ns=ns: ref.search(ns, filter={"kind": "fact"}, limit=10)))
    ours.store.wait_for_housekeeping()
    if conn is not None:
        pairs[1].disk = (git_disk(repo), du([db, db + "-wal", db + "-shm"]))
    pairs[0].note = "InMemoryStore keeps nothing on disk: compare its speed only"
    return pairs


# -- CrewAI -------------------------------------------------------------------------------------


def bench_crewai(base: str, ops: int) -> Pair:
    from crewai.flow.persistence import SQLiteFlowPersistence

    from gitstate.crewai import GitFlowPersistence

    pair = Pair("CrewAI flow state", "SQLiteFlowPersistence")
    repo = new_repo(base, "crewai")
    db = os.path.join(base, "flows.sqlite")
    ours, theirs = GitFlowPersistence(repo), SQLiteFlowPersistence(db)
    rng = random.Random(4)
    state: dict[str, Any] = {"id": "flow-1", "notes": []}
    for i in range(ops):
        state = {"id": "flow-1", "notes": state["notes"][-50:] + [text(rng, 200)], "step": i}
        pair.add("write (save_state)", timed_sync(lambda s=state, i=i: ours.save_state("flow-1", f"m{i}", s)),
                 timed_sync(lambda s=state, i=i: theirs.save_state("flow-1", f"m{i}", s)))
    for _ in range(50):
        pair.add("read (load_state)", timed_sync(lambda: ours.load_state("flow-1")),
                 timed_sync(lambda: theirs.load_state("flow-1")))
        pair.add("list (load_pending_feedback)", timed_sync(lambda: ours.load_pending_feedback("flow-1")),
                 timed_sync(lambda: theirs.load_pending_feedback("flow-1")))
    assert ours.load_state("flow-1") == theirs.load_state("flow-1")
    ours.store.wait_for_housekeeping()
    pair.disk = (git_disk(repo), du([db, db + "-wal", db + "-shm"]))
    return pair


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, default=1000)
    ap.add_argument("--only", default="openai,agent-framework,store,crewai")
    ap.add_argument("--dir", default=None)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    base = args.dir or tempfile.mkdtemp(prefix="bench-adapters-")
    wanted = set(args.only.split(","))
    available = {"openai": "agents", "agent-framework": "agent_framework", "store": "langgraph.store.base",
                 "crewai": "crewai"}
    pairs: list[Pair] = []
    skipped = []
    for name, module in available.items():
        if name not in wanted:
            continue
        if importlib.util.find_spec(module.split(".")[0]) is None:
            skipped.append(name)
            continue
        if name == "openai":
            pairs.append(asyncio.run(bench_openai(base, args.ops)))
        elif name == "agent-framework":
            pairs.append(asyncio.run(bench_agent_framework(base, args.ops)))
        elif name == "store":
            pairs.extend(bench_store(base, args.ops))
        else:
            pairs.append(bench_crewai(base, args.ops))
    print(f"{args.ops} operations per integration; medians; ratio = gitstate ÷ reference\n")
    print(f"{'integration':<30}{'reference':<24}{'metric':<34}{'gitstate':>12}{'reference':>12}{'ratio':>9}")
    figures: dict[str, Any] = {}
    for pair in pairs:
        for metric, ours, theirs, ratio in pair.rows():
            print(f"{pair.name:<30}{pair.reference:<24}{metric:<34}{ours:>12}{theirs:>12}{ratio:>8.2f}x")
            figures.setdefault(f"{pair.name} vs {pair.reference}", {})[metric] = {
                "gitstate": ours, "reference": theirs, "ratio": round(ratio, 3)}
        if pair.note:
            print(f"{'':<30}{pair.note}")
    if skipped:
        print(f"\nnot installed here, skipped: {', '.join(skipped)}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"ops": args.ops, "results": figures, "skipped": skipped}, fh, indent=2)


if __name__ == "__main__":
    main()
