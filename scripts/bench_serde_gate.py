"""Benchmark: the cost of refusing at write time what the saver could not read back.

``StrictSerializer.dumps_typed`` re-reads the msgpack it just wrote with ormsgpack (an ext hook
that checks every extension record, building nothing).
This measures it side by side with the same serializer without the check (LangGraph's own
``JsonPlusSerializer.dumps_typed``), interleaved in one process, on values a graph stores:

* ``message``: one AIMessage of ~420 bytes with a tool call (a list item: the common write);
* ``32 messages``: a list of 32 LangChain messages (a whole chunk);
* ``checkpoint``: a checkpoint payload without values (versions only, no extension record);
* ``dict message``: a plain-dict message (no extension record);

and end to end: ``put_writes`` + ``put`` of one appended message per step on a GitCheckpointSaver
with the default serializer against one whose serializer skips the check, alternating step by step.

Usage: python scripts/bench_serde_gate.py [--rounds 7] [--steps 200]"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

import gitstate
from gitstate.langgraph import GitCheckpointSaver, StrictSerializer

TEXT = ("the agent called a tool to fetch the quarterly report and found that revenue grew while costs in "
        "the logistics segment rose sharply; next it will summarise risks, compare with last year, draft an "
        "email to finance, check the calendar for a review slot, and ask whether the forecast should include "
        "the delayed contract from the northern region")


class Unchecked(StrictSerializer):
    """The same serializer without the write-time check (the baseline)."""

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        return JsonPlusSerializer.dumps_typed(self, obj)


def message(i: int) -> AIMessage:
    return AIMessage(content=TEXT, id=str(uuid.UUID(int=i)),
                     tool_calls=[{"name": "search", "args": {"q": f"report {i}"}, "id": f"call-{i}"}])


def values() -> dict[str, Any]:
    cp = empty_checkpoint()
    cp["channel_versions"] = {f"ch{i}": f"{i:032}.{0.123456789:016}" for i in range(8)}
    cp["versions_seen"] = {f"node{i}": {f"ch{i}": f"{i:032}.{0.5:016}"} for i in range(5)}
    return {"message": message(1), "32 messages": [message(i) if i % 2 else HumanMessage(TEXT, id=str(i))
                                                   for i in range(32)],
            "checkpoint": cp, "dict message": {"role": "assistant", "content": TEXT, "id": "m1"}}


def per_call(fn: Callable[[], object], n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - start) / n * 1e6


def bench_values(rounds: int) -> None:
    checked, unchecked = StrictSerializer(), Unchecked()
    print(f"dumps_typed, µs per call (median of {rounds} interleaved rounds; spread = min..max)")
    for name, value in values().items():
        a: list[float] = []
        b: list[float] = []
        n = 200 if name == "32 messages" else 2000
        for _ in range(rounds):
            a.append(per_call(lambda value=value: checked.dumps_typed(value), n))
            b.append(per_call(lambda value=value: unchecked.dumps_typed(value), n))
        ma, mb = statistics.median(a), statistics.median(b)
        print(f"  {name:13} checked {ma:8.1f} ({min(a):.1f}..{max(a):.1f})   unchecked {mb:8.1f} "
              f"({min(b):.1f}..{max(b):.1f})   ratio {ma / mb:.2f}")


def bench_saver(steps: int, rounds: int) -> None:
    print(f"put_writes + put of one appended message, ms per step ({steps} steps, {rounds} rounds, alternating)")
    ratios: list[float] = []
    meds: dict[str, list[float]] = {"checked": [], "unchecked": []}
    for r in range(rounds):
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run(["git", "init", "-q", tmp], check=True)
            store = gitstate.open_store(tmp)
            savers = {"checked": GitCheckpointSaver(store), "unchecked": GitCheckpointSaver(store, serde=Unchecked())}
            state: dict[str, tuple[dict[str, Any], list[Any], int]] = {}
            for name, saver in savers.items():
                cp = empty_checkpoint()
                cp["channel_values"] = {"messages": []}
                cp["channel_versions"] = {"messages": 1}
                conf = saver.put({"configurable": {"thread_id": f"{name}-{r}", "checkpoint_ns": ""}}, cp,
                                 {"source": "input", "step": -1}, {"messages": 1})
                state[name] = (conf, [], 1)
            times: dict[str, list[float]] = {"checked": [], "unchecked": []}
            for step in range(steps):
                for name, saver in savers.items():
                    conf, msgs, version = state[name]
                    msg = message(step)
                    msgs = [*msgs, msg]
                    cp = empty_checkpoint()
                    cp["channel_values"] = {"messages": msgs}
                    cp["channel_versions"] = {"messages": version + 1}
                    start = time.perf_counter()
                    saver.put_writes(conf, [("messages", [msg])], task_id=f"task-{step}")
                    conf = saver.put(conf, cp, {"source": "loop", "step": step}, {"messages": version + 1})
                    times[name].append((time.perf_counter() - start) * 1e3)
                    state[name] = (conf, msgs, version + 1)
            for name in times:
                meds[name].append(statistics.median(times[name]))
            ratios.append(meds["checked"][-1] / meds["unchecked"][-1])
    for name, m in meds.items():
        print(f"  {name:9} median {statistics.median(m):.3f} ms  (rounds {min(m):.3f}..{max(m):.3f})")
    print(f"  ratio checked/unchecked: median {statistics.median(ratios):.3f} (rounds {min(ratios):.3f}..{max(ratios):.3f})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--steps", type=int, default=200)
    args = ap.parse_args()
    bench_values(args.rounds)
    bench_saver(args.steps, max(1, args.rounds // 2))


if __name__ == "__main__":
    main()
