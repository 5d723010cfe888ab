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

The two backends of a pair are driven in alternation, operation by operation (which of the two goes
first alternates from round to round), so machine noise hits both alike; ``--rounds`` repeats the
whole benchmark on fresh stores. Prints, per metric, the median over rounds of each backend's
per-round median, and the ratio gitstate ÷ reference (< 1 means gitstate is faster or smaller) as the
median, mean and min–max spread of the per-round ratios; then bytes on disk at the end of the last
round (gitstate: .git/objects, refs, logs, packed-refs after its own housekeeping; SQLite: the
database with its -wal/-shm files while open; files: the directory). The write bars
(``GitSession.add_items`` ≤ 2.0× ``SQLiteSession``, ``GitStore.put`` ≤ 2.0× ``SqliteStore``, on the
median ratio) are printed as met or MISSED. Frameworks that are not installed are skipped and named
(CrewAI lives in .venv-crewai: run this script with that interpreter for it).

``--long N`` measures instead how a write's cost grows with what it appends to: one session of N
items (``add_items`` vs ``SQLiteSession``), one memory namespace of N items and one memory root of N
namespaces of one item each (``GitStore.put`` vs ``SqliteStore``), driven in alternation, printing
every 1,000 items the medians of the last 500 writes and their ratio.

Usage: python scripts/bench_adapters.py [--ops 1000] [--rounds 3] [--only openai,agent-framework,store,crewai]
                                        [--dir DIR] [--json FILE] [--long N]"""

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
from dataclasses import dataclass
from typing import Any

# (integration, reference, metric): the bar on the median ratio gitstate ÷ reference
BARS = {("OpenAI Agents session", "SQLiteSession", "write (add_items)"): 2.0,
        ("LangGraph memory", "SqliteStore", "write (put)"): 2.0}
REFERENCE_FIRST = [False]  # this round times the reference before gitstate in each operation

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


@dataclass
class Row:
    """One metric of one pair over all rounds: per-round medians (ms or MB) and ratios."""

    metric: str
    unit: str
    ours: list[float]
    theirs: list[float]

    @property
    def ratios(self) -> list[float]:
        return [a / b if b else float("inf") for a, b in zip(self.ours, self.theirs, strict=True)]


def rows(rounds: list[Pair]) -> list[Row]:
    """The rows of one pair over its rounds (the rounds of one pair have the same metrics)."""
    out = [Row(metric, "ms", [median_ms(p.samples[metric][0]) for p in rounds],
               [median_ms(p.samples[metric][1]) for p in rounds]) for metric in rounds[0].samples]
    disks = [p.disk for p in rounds if p.disk is not None]
    if disks:
        out.append(Row("bytes on disk (last round)", "MB", [disks[-1][0] / 1e6], [disks[-1][1] / 1e6]))
    return out


def timed_sync(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


async def timed(fn: Callable[[], Awaitable[Any]]) -> float:
    t0 = time.perf_counter()
    await fn()
    return time.perf_counter() - t0


def both_sync(ours: Callable[[], Any], theirs: Callable[[], Any]) -> tuple[float, float]:
    """Times of ``ours()`` and ``theirs()``, run one after the other (the round says which first)."""
    if REFERENCE_FIRST[0]:
        b = timed_sync(theirs)
        return timed_sync(ours), b
    a = timed_sync(ours)
    return a, timed_sync(theirs)


def all_sync(ours: Callable[[], Any], theirs: list[Callable[[], Any]]) -> tuple[float, list[float]]:
    """As :func:`both_sync`, with several references."""
    if REFERENCE_FIRST[0]:
        bs = [timed_sync(fn) for fn in theirs]
        return timed_sync(ours), bs
    a = timed_sync(ours)
    return a, [timed_sync(fn) for fn in theirs]


async def both(ours: Callable[[], Awaitable[Any]], theirs: Callable[[], Awaitable[Any]]) -> tuple[float, float]:
    """As :func:`both_sync`, for coroutines."""
    if REFERENCE_FIRST[0]:
        b = await timed(theirs)
        return await timed(ours), b
    a = await timed(ours)
    return a, await timed(theirs)


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
        pair.add("write (add_items)", *await both(lambda item=item: ours.add_items([item]),
                                                  lambda item=item: theirs.add_items([item])))
    for _ in range(50):
        pair.add("read (get_items limit=10)", *await both(lambda: ours.get_items(limit=10),
                                                          lambda: theirs.get_items(limit=10)))
    for _ in range(10):
        pair.add(f"list (get_items, {ops} items)", *await both(lambda: ours.get_items(), lambda: theirs.get_items()))
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
        pair.add("write (save)", *await both(lambda cp=cp: ours.save(cp), lambda cp=cp: theirs.save(cp)))
    for _ in range(50):
        cid = rng.choice(ids)
        pair.add("read (load)", *await both(lambda cid=cid: ours.load(cid), lambda cid=cid: theirs.load(cid)))
    for _ in range(5):
        pair.add(f"list ({ops} checkpoint ids)", *await both(lambda: ours.list_checkpoint_ids(workflow_name="bench"),
                                                             lambda: theirs.list_checkpoint_ids(workflow_name="bench")))
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
        a, bs = all_sync(lambda ns=ns, key=key, value=value: ours.put(ns, key, value),
                         [lambda ref=ref, ns=ns, key=key, value=value: ref.put(ns, key, value) for ref in references])
        for pair, b in zip(pairs, bs, strict=True):
            pair.add("write (put)", a, b)
    for _ in range(50):
        ns, key = rng.choice(keys)
        a, bs = all_sync(lambda ns=ns, key=key: ours.get(ns, key),
                         [lambda ref=ref, ns=ns, key=key: ref.get(ns, key) for ref in references])
        for pair, b in zip(pairs, bs, strict=True):
            pair.add("read (get)", a, b)
    for _ in range(20):
        ns = ("users", f"u{rng.randrange(20)}")
        a, bs = all_sync(lambda ns=ns: ours.search(ns, filter={"kind": "fact"}, limit=10),
                         [lambda ref=ref, ns=ns: ref.search(ns, filter={"kind": "fact"}, limit=10) for ref in references])
        for pair, b in zip(pairs, bs, strict=True):
            pair.add("list (search, filter, limit 10)", a, b)
    ours.store.wait_for_housekeeping()
    if conn is not None:
        pairs[1].disk = (git_disk(repo), du([db, db + "-wal", db + "-shm"]))
    pairs[0].note = "InMemoryStore keeps nothing on disk: compare its speed only"
    return pairs


# -- long sessions and namespaces -----------------------------------------------------------------


async def bench_long(base: str, items: int) -> None:
    """One session and one memory namespace growing to ``items`` items, each write timed beside
    its SQLite counterpart's; every 1,000 items the medians of the last 500 writes."""
    from agents import SQLiteSession
    from langgraph.store.sqlite import SqliteStore

    from gitstate.langgraph import GitStore
    from gitstate.openai_agents import GitSession

    rng = random.Random(5)
    session, sql_session = GitSession("long", new_repo(base, "long-session")), SQLiteSession(
        "long", os.path.join(base, "long-session.sqlite"))
    conn = sqlite3.connect(os.path.join(base, "long-store.sqlite"), check_same_thread=False, isolation_level=None)
    memory, sql_memory = GitStore.from_path(new_repo(base, "long-store")), SqliteStore(conn)
    sql_memory.setup()
    times: dict[str, tuple[list[float], list[float]]] = {
        "session add_items": ([], []), "memory put": ([], []), "put, new namespace": ([], [])}
    print(f"{'items':>7}  {'write':<20}{'gitstate':>11}{'SQLite':>11}{'ratio':>8}")
    for i in range(items):
        item = {"role": ("user", "assistant")[i % 2], "content": text(rng, 300)}
        a, b = await both(lambda item=item: session.add_items([item]), lambda item=item: sql_session.add_items([item]))
        times["session add_items"][0].append(a)
        times["session add_items"][1].append(b)
        value = {"text": text(rng, 200), "i": i}
        a, b = both_sync(lambda i=i, value=value: memory.put(("users", "ada"), f"memory-{i}", value),
                         lambda i=i, value=value: sql_memory.put(("users", "ada"), f"memory-{i}", value))
        times["memory put"][0].append(a)
        times["memory put"][1].append(b)
        a, b = both_sync(lambda i=i, value=value: memory.put(("tenants", f"t{i}"), "profile", value),
                         lambda i=i, value=value: sql_memory.put(("tenants", f"t{i}"), "profile", value))
        times["put, new namespace"][0].append(a)
        times["put, new namespace"][1].append(b)
        if (i + 1) % 1000 == 0:
            for what, (ours, theirs) in times.items():
                mo, mt = median_ms(ours[-500:]), median_ms(theirs[-500:])
                print(f"{i + 1:>7}  {what:<20}{mo:>8.3f} ms{mt:>8.3f} ms{mo / mt:>7.2f}x", flush=True)
    sql_session.close()
    conn.close()


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
        pair.add("write (save_state)", *both_sync(lambda s=state, i=i: ours.save_state("flow-1", f"m{i}", s),
                                                  lambda s=state, i=i: theirs.save_state("flow-1", f"m{i}", s)))
    for _ in range(50):
        pair.add("read (load_state)", *both_sync(lambda: ours.load_state("flow-1"), lambda: theirs.load_state("flow-1")))
        pair.add("list (load_pending_feedback)", *both_sync(lambda: ours.load_pending_feedback("flow-1"),
                                                            lambda: theirs.load_pending_feedback("flow-1")))
    assert ours.load_state("flow-1") == theirs.load_state("flow-1")
    ours.store.wait_for_housekeeping()
    pair.disk = (git_disk(repo), du([db, db + "-wal", db + "-shm"]))
    return pair


def run_round(base: str, ops: int, wanted: set[str], available: dict[str, str]) -> tuple[list[Pair], list[str]]:
    """One round: every wanted integration on fresh stores under ``base``; (pairs, skipped)."""
    pairs: list[Pair] = []
    skipped = []
    for name, module in available.items():
        if name not in wanted:
            continue
        if importlib.util.find_spec(module.split(".")[0]) is None:
            skipped.append(name)
            continue
        if name == "openai":
            pairs.append(asyncio.run(bench_openai(base, ops)))
        elif name == "agent-framework":
            pairs.append(asyncio.run(bench_agent_framework(base, ops)))
        elif name == "store":
            pairs.extend(bench_store(base, ops))
        else:
            pairs.append(bench_crewai(base, ops))
    return pairs, skipped


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3, help="rounds on fresh stores (3)")
    ap.add_argument("--only", default="openai,agent-framework,store,crewai")
    ap.add_argument("--dir", default=None)
    ap.add_argument("--json", default=None)
    ap.add_argument("--long", type=int, default=0, metavar="N",
                    help="measure only how writes grow: a session and a memory namespace of N items")
    args = ap.parse_args()
    base = args.dir or tempfile.mkdtemp(prefix="bench-adapters-")
    if args.long:
        asyncio.run(bench_long(base, args.long))
        return
    wanted = set(args.only.split(","))
    available = {"openai": "agents", "agent-framework": "agent_framework", "store": "langgraph.store.base",
                 "crewai": "crewai"}
    by_pair: dict[tuple[str, str], list[Pair]] = {}
    skipped: list[str] = []
    for rnd in range(args.rounds):
        REFERENCE_FIRST[0] = rnd % 2 == 1
        pairs, skipped = run_round(os.path.join(base, f"round-{rnd + 1}"), args.ops, wanted, available)
        for pair in pairs:
            by_pair.setdefault((pair.name, pair.reference), []).append(pair)
        print(f"round {rnd + 1} done", flush=True)
    print(f"\n{args.ops} operations per integration, {args.rounds} rounds; per metric the median over rounds of "
          "each backend's per-round median; ratio = gitstate ÷ reference per round: median, mean, min–max\n")
    print(f"{'integration':<28}{'reference':<22}{'metric':<34}{'gitstate':>11}{'reference':>11}"
          f"{'ratio':>8}{'mean':>8}{'spread':>16}")
    figures: dict[str, Any] = {}
    bars: dict[str, Any] = {}
    for (name, reference), rounds in by_pair.items():
        for row in rows(rounds):
            ratios = row.ratios
            med, mean = statistics.median(ratios), statistics.fmean(ratios)
            ours, theirs = statistics.median(row.ours), statistics.median(row.theirs)
            unit = " ms" if row.unit == "ms" else " MB"
            digits = 3 if row.unit == "ms" else 2
            print(f"{name:<28}{reference:<22}{row.metric:<34}{ours:>8.{digits}f}{unit}{theirs:>8.{digits}f}{unit}"
                  f"{med:>7.2f}x{mean:>7.2f}x{f'{min(ratios):.2f}–{max(ratios):.2f}x':>16}")
            figures.setdefault(f"{name} vs {reference}", {})[row.metric] = {
                "gitstate": f"{ours:.{digits}f}{unit}", "reference": f"{theirs:.{digits}f}{unit}",
                "ratio": round(med, 3), "ratio_mean": round(mean, 3),
                "ratio_min": round(min(ratios), 3), "ratio_max": round(max(ratios), 3)}
            bar = BARS.get((name, reference, row.metric))
            if bar is not None:
                bars[f"{name} {row.metric} vs {reference}"] = {"bar": bar, "ratio": round(med, 3), "met": med <= bar}
        note = rounds[-1].note
        if note:
            print(f"{'':<28}{note}")
    if bars:
        print()
    for what, bar in bars.items():
        print(f"bar: {what} ≤ {bar['bar']}x: median {bar['ratio']:.2f}x {'met' if bar['met'] else 'MISSED'}")
    if skipped:
        print(f"\nnot installed here, skipped: {', '.join(skipped)}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"ops": args.ops, "rounds": args.rounds, "results": figures, "bars": bars, "skipped": skipped},
                      fh, indent=2)


if __name__ == "__main__":
    main()
