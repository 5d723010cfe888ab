#!/usr/bin/env python3
"""What ``git agentos gc`` gives back and what it costs.

Fills a fresh repository with ``--runs`` runs of ``--checkpoints`` checkpoints each (a message list
appended to at every checkpoint; every other run completed, the others left running), then, in
order: a dry run of ``--older-than 0s --now`` (plan + measured estimate), the real gc (removing the
completed half), and a ``--keep-last`` prune of the rest. Prints the git directory's size before and
after each, the estimate against the bytes given back, and the times. ``--big``: 2,000 runs x 50
checkpoints (the filling dominates: some minutes)."""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time

import gitstate
from gitstate.store import retention as R


def fill(path: str, runs: int, checkpoints: int) -> float:
    started = time.perf_counter()
    store = gitstate.open_store(path)
    for i in range(runs):
        run = store.create_run(workflow="bench", run_id=f"r{i:05d}")
        messages: list[str] = []
        for j in range(checkpoints):
            messages.append(f"run {i} message {j}: " + "lorem ipsum " * 8)
            last = j == checkpoints - 1
            run.checkpoint({"messages": list(messages), "step": j}, node="step",
                           status=("completed" if i % 2 else None) if last else None)
    store.wait_for_housekeeping()
    return time.perf_counter() - started


def mib(n: int) -> str:
    return f"{n / 1048576:8.2f} MiB"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--checkpoints", type=int, default=20)
    parser.add_argument("--keep-last", type=int, default=5)
    parser.add_argument("--big", action="store_true", help="2,000 runs x 50 checkpoints")
    args = parser.parse_args()
    if args.big:
        args.runs, args.checkpoints = 2000, 50
    with tempfile.TemporaryDirectory(prefix="bench-gc-") as path:
        subprocess.run(["git", "init", "-q", path], check=True)
        print(f"filling {args.runs} runs x {args.checkpoints} checkpoints ...", flush=True)
        took = fill(path, args.runs, args.checkpoints)
        store = gitstate.open_store(path)
        common = store.location.common_dir
        print(f"fill: {took:.1f} s, git dir {mib(R.git_dir_size(common))}")
        for label, policy in [("older-than 0s (completed half)", R.Policy(older_than=R.parse_cutoff("0s"))),
                              (f"keep-last {args.keep_last} (the rest)",
                               R.Policy(keep_last=args.keep_last, statuses=frozenset({"running"})))]:
            t0 = time.perf_counter()
            plan = R.plan(store, policy, now=True, estimate=True)
            t1 = time.perf_counter()
            result = R.apply(store, plan, now=True)
            t2 = time.perf_counter()
            est = plan.estimate_bytes or 0
            freed = result.bytes_freed
            err = (est - freed) / freed * 100 if freed else 0.0
            print(f"gc {label}: {len(plan.runs)} runs, {len(plan.prunes)} branches, {plan.checkpoints} checkpoints")
            print(f"  dry run (plan + estimate): {t1 - t0:6.1f} s   estimate {mib(est)}")
            print(f"  gc (apply + repack):       {t2 - t1:6.1f} s   given back {mib(freed)} ({err:+.1f} % off)")
            print(f"  git dir {mib(result.bytes_before)} -> {mib(result.bytes_after)}; "
                  f"{len(result.reclaimed.removed) if result.reclaimed else 0} packs rewritten")
        fsck = subprocess.run(["git", "-C", path, "fsck", "--strict", "--no-dangling"], capture_output=True, text=True)
        print("git fsck --strict:", "clean" if fsck.returncode == 0 else fsck.stderr.strip()[:200])
        return 0 if fsck.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
