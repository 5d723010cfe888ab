"""``kill -9`` during the end-to-end run (scripts/bench_e2e.py ``--kill``, bounded: 8 kills of 60-step
runs): a child runs the compiled graph on gitstate's saver, plain and messages variants, sync and
async durability, and appends each checkpoint whose ``put`` returned to an ``O_APPEND`` file; the
script SIGKILLs it at random moments (half of them just after an acknowledgement), resuming the same
threads, and checks after every kill.

Checked here again, independently of the script's own report: every acknowledged checkpoint is
read by id through a fresh saver with the ``n`` and message count it was acknowledged with, ``git
fsck --strict`` is clean (dangling objects allowed), and every thread ends at ``n = 60``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import git

import gitstate

pytest.importorskip("langgraph.graph")

from gitstate.langgraph import GitCheckpointSaver  # noqa: E402

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_e2e.py"
STEPS = 60
KILLS = 8


def test_kill_9_loses_no_acknowledged_checkpoint(tmp_path: Path) -> None:
    work, out = tmp_path / "work", tmp_path / "figures.json"
    env = {k: v for k, v in os.environ.items() if k not in ("GIT_DIR", "GIT_WORK_TREE", "AGENTOS_REPO")}
    done = subprocess.run([sys.executable, str(SCRIPT), "--kill", str(KILLS), "--steps", str(STEPS),
                           "--kill-delay", "0.5", "--seed", "5", "--dir", str(work), "--json", str(out)],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300, check=False)
    assert out.exists(), done.stdout + done.stderr
    figures = json.loads(out.read_text())
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert figures["kills"] == KILLS and figures["died"] == [], figures
    assert figures["kills_after_ack"] >= 1, figures
    assert figures["lost"] == [] and figures["fsck"] == [] and figures["incomplete"] == []
    assert set(figures["variants"]) == {"plain/sync", "plain/async", "messages/sync", "messages/async"}
    assert all(n > 0 for n in figures["acknowledged_by_variant"].values()), figures
    assert "bar: kill -9 during the end-to-end run" in done.stdout and done.stdout.rstrip().endswith("met")

    repo = work / "repo"
    acks = [line.split() for line in (work / "acks.log").read_text().splitlines()]
    assert len(acks) == figures["acknowledged"] > KILLS
    store = gitstate.open_store(repo, pack_in_background=False)
    saver = GitCheckpointSaver(store)
    threads = set()
    for thread, checkpoint_id, _step, n, messages in acks:
        threads.add(thread)
        tup = saver.get_tuple({"configurable": {"thread_id": thread, "checkpoint_ns": "",
                                                "checkpoint_id": checkpoint_id}})
        assert tup is not None, (thread, checkpoint_id)
        values = tup.checkpoint["channel_values"]
        assert (values.get("n", -1), len(values.get("messages") or [])) == (int(n), int(messages))
    assert len(threads) >= 4
    for thread in threads:
        tup = saver.get_tuple({"configurable": {"thread_id": thread, "checkpoint_ns": ""}})
        assert tup is not None
        values = tup.checkpoint["channel_values"]
        assert values["n"] == STEPS
        assert len(values.get("messages") or []) == (STEPS if thread.startswith("kill-messages-") else 0)
    store.close()
    assert git(repo, "fsck", "--strict", "--no-dangling") == ""
