"""Concurrent writers and the user's git: several processes invoking one LangGraph thread all
succeed (the line forks, every acknowledged checkpoint stays readable), and a checkpoint written
after its objects were pruned by `git gc` is whole."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import git

import gitstate

pytest.importorskip("langgraph")

WORKER = r"""
import operator, sys, json
from typing import Annotated, TypedDict
from langgraph.graph import StateGraph, START, END
import gitstate
from gitstate.langgraph import GitCheckpointSaver

class S(TypedDict):
    msgs: Annotated[list, operator.add]

def step(state):
    return {"msgs": ["x"]}

graph = StateGraph(S)
graph.add_node("step", step)
graph.add_edge(START, "step")
graph.add_edge("step", END)
app = graph.compile(checkpointer=GitCheckpointSaver(gitstate.open_store(sys.argv[1], lock_timeout=60)))
cfg = {"configurable": {"thread_id": "shared"}}
ids, errors = [], []
for i in range(int(sys.argv[2])):
    try:
        app.invoke({"msgs": [f"{sys.argv[3]}-{i}"]}, cfg)
        ids.append(app.get_state(cfg).config["configurable"]["checkpoint_id"])
    except gitstate.GitStateError as exc:  # the documented, typed errors
        errors.append(type(exc).__name__)
print(json.dumps({"ids": ids, "errors": errors}))
"""


def test_four_processes_invoke_one_thread(repo: Path) -> None:
    import json

    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, str(repo), "12", f"p{k}"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env) for k in range(4)]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err  # no KeyError, no traceback of any kind
        results.append(json.loads(out))
    assert all(r["errors"] == [] for r in results), results
    from gitstate.langgraph import GitCheckpointSaver

    saver = GitCheckpointSaver(gitstate.open_store(repo))
    stored = {t.config["configurable"]["checkpoint_id"]: t for t in saver.list({"configurable": {"thread_id": "shared"}})}
    for r in results:
        for cid in r["ids"]:
            assert cid in stored  # every acknowledged checkpoint is readable
    loops = [t for t in stored.values() if t.metadata.get("source") == "loop"]
    assert len(loops) >= 4 * 12  # each invoke's step is there (lines forked instead of lost)
    assert all(t.checkpoint["channel_values"]["msgs"] for t in loops)
    git(repo, "fsck", "--strict")


def test_rewrite_after_gc_prune_is_whole(repo: Path) -> None:
    store = gitstate.open_store(repo)
    state = {"messages": [f"message {i}" for i in range(100)], "plan": {"k": "v"}}
    store.create_run(run_id="first").checkpoint(state)
    store.delete_run("first")
    git(repo, "gc", "--prune=now", "-q")
    cp = store.create_run(run_id="second").checkpoint(state)
    assert gitstate.open_store(repo).get_run("second").head().state == state  # type: ignore[union-attr]
    assert cp.state == state
    git(repo, "fsck", "--strict")
