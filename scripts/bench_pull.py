#!/usr/bin/env python3
"""What ``git agentos pull`` of many runs costs, next to a plain ``git fetch`` of the same refs.

A bare repository plays the remote, holding ``--runs`` runs of one worktree, each with a run record
and one branch (``refs/agentos/main/runs/<run>/run`` and ``…/heads/main``: two refs a run, distinct
commits and blobs, written with ``git fast-import``). Each repetition makes two fresh clones (empty
repositories with ``origin`` set): one runs ``gitstate.pull`` (the library call behind
``git agentos pull``), the other a plain ``git fetch --no-tags origin
+refs/agentos/main/*:refs/agentos/main/*``; which goes first alternates between repetitions. Prints
the medians, their ratio (and the median and spread of the per-repetition ratios), and what the
pull left behind (loose refs under ``refs/agentos/``, staging refs). ``--runs 10000`` is the
figure the issue quotes (20,000 refs)."""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import gitstate
from gitstate.git.refs import count_loose_refs

_IDENT = "Bench <bench@example.com> 1767225600 +0000"


def make_remote(path: str, runs: int) -> None:
    """A bare repository with ``runs`` runs (a run record and one checkpoint each)."""
    subprocess.run(["git", "init", "-q", "--bare", path], check=True)
    lines: list[str] = []
    mark = 0

    def blob(data: str) -> int:
        nonlocal mark
        mark += 1
        raw = data.encode()
        lines.append(f"blob\nmark :{mark}\ndata {len(raw)}\n{data}\n")
        return mark

    def commit(ref: str, message: str, files: dict[str, int]) -> None:
        nonlocal mark
        mark += 1
        raw = message.encode()
        body = "".join(f"M 100644 :{m} {name}\n" for name, m in files.items())
        lines.append(f"commit {ref}\nmark :{mark}\nauthor {_IDENT}\ncommitter {_IDENT}\n"
                     f"data {len(raw)}\n{message}\n{body}\n")

    for i in range(runs):
        run = f"r{i:06d}"
        prefix = f"refs/agentos/main/runs/{run}/"
        commit(prefix + "run", f"run {run} · bench\n\nRun: {run}\nWorkflow: bench\nGitstate-Format: 2\n",
               {"run.cbor": blob(f"run record of {run}")})
        commit(prefix + "heads/main", f"step · 1 · checkpoint\n\nRun: {run}\nStep: 1\n",
               {"meta.cbor": blob(f"meta of {run}"), "state/messages": blob(f"state of {run} " * 4)})
    subprocess.run(["git", "-C", path, "fast-import", "--quiet"], input="".join(lines).encode(), check=True)


def fresh_clone(path: str, url: str) -> None:
    shutil.rmtree(path, ignore_errors=True)
    subprocess.run(["git", "init", "-q", path], check=True)
    subprocess.run(["git", "-C", path, "remote", "add", "origin", url], check=True)
    subprocess.run(["git", "-C", path, "config", "agentos.pullMaxRefs", "0"], check=True)


def time_pull(path: str, runs: int) -> float:
    store = gitstate.open_store(path, pack_in_background=False)
    started = time.perf_counter()
    results = gitstate.pull(store, "origin")
    took = time.perf_counter() - started
    store.close()
    bad = [r for r in results if not r.ok]
    if len(results) != runs or bad:
        raise SystemExit(f"pull went wrong: {len(results)} runs, {len(bad)} failed: {bad[:1]}")
    return took


def time_fetch(path: str) -> float:
    started = time.perf_counter()
    subprocess.run(["git", "-C", path, "fetch", "--quiet", "--no-tags", "origin",
                    "+refs/agentos/main/*:refs/agentos/main/*"], check=True)
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=2000, help="runs on the remote (two refs each)")
    parser.add_argument("--repeat", type=int, default=3, help="repetitions (each: one pull, one fetch)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-pull-") as tmp:
        remote = os.path.join(tmp, "remote.git")
        started = time.perf_counter()
        make_remote(remote, args.runs)
        print(f"remote: {args.runs} runs ({2 * args.runs} refs), made in {time.perf_counter() - started:.1f} s",
              flush=True)
        url = "file://" + remote
        pulls: list[float] = []
        fetches: list[float] = []
        for rep in range(args.repeat):
            pull_dir, fetch_dir = os.path.join(tmp, "pull"), os.path.join(tmp, "fetch")
            fresh_clone(pull_dir, url)
            fresh_clone(fetch_dir, url)
            order = ["pull", "fetch"] if rep % 2 == 0 else ["fetch", "pull"]
            for what in order:
                if what == "pull":
                    pulls.append(time_pull(pull_dir, args.runs))
                else:
                    fetches.append(time_fetch(fetch_dir))
            print(f"  #{rep + 1}: pull {pulls[-1]:6.2f} s   git fetch {fetches[-1]:6.2f} s", flush=True)
        store = gitstate.open_store(pull_dir)
        loose = count_loose_refs(store.location.common_dir)
        staging = len(store.core.list_refs("refs/agentos-incoming/"))
        moved = len(store.core.list_refs("refs/agentos/"))
        store.close()
        pull_s, fetch_s = statistics.median(pulls), statistics.median(fetches)
        ratios = sorted(p / f for p, f in zip(pulls, fetches, strict=True))
        print(f"median of {args.repeat}: pull {pull_s:.2f} s, git fetch {fetch_s:.2f} s, "
              f"ratio {pull_s / fetch_s:.2f}x (per repetition: median {statistics.median(ratios):.2f}x, "
              f"{ratios[0]:.2f}–{ratios[-1]:.2f}x)")
        print(f"after the last pull: {moved} refs under refs/agentos/, {loose} of them loose; "
              f"{staging} staging refs left")
    return 0


if __name__ == "__main__":
    sys.exit(main())
