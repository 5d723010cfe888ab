"""A store gives back the file descriptors it opened: a long-lived process that opens stores again
and again (a server, a test run) must not run out of them."""

from __future__ import annotations

import gc
import os
from pathlib import Path

import gitstate


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_opening_writing_and_closing_stores_leaks_no_descriptor(repo: Path) -> None:
    first = gitstate.open_store(repo)
    first.create_run(run_id="x").checkpoint({"n": 0})
    first.close()
    before = _open_fds()
    kept = []  # closed stores still referenced: only close() can give their descriptors back
    for n in range(60):
        store = gitstate.open_store(repo)
        store.get_run("x").checkpoint({"n": n})
        store.close()
        kept.append(store)
    assert _open_fds() - before <= 3


def test_stores_dropped_without_close_give_their_descriptors_back(repo: Path) -> None:
    gitstate.open_store(repo).create_run(run_id="x").checkpoint({"n": 0})
    gc.collect()
    before = _open_fds()
    for n in range(60):
        gitstate.open_store(repo).get_run("x").checkpoint({"n": n})
    gc.collect()
    assert _open_fds() - before <= 3
