#!/usr/bin/env python3
"""Benchmark the pre-push leak guard: what the hook adds to a push of a user branch with no
checkpoints, in a repository with many checkpoints.

Builds a repository with ``--history`` commits on ``main`` (pushed to a bare ``origin``, so
``refs/remotes/origin/main`` exists), a ``feature`` branch of ``--commits`` more commits, and
``--checkpoints`` checkpoints in 30 runs (``agentos.pushRemotes`` unset: no remote allowed). Then
runs the installed hook as git would, with the line git writes for ``git push origin feature``, and
prints the median wall time of ``--rounds`` runs:

- to ``origin`` (its remote-tracking refs bound the range: the ``--commits`` new commits);
- to origin's URL (no remote-tracking refs: the whole history of ``feature`` is read);
- a checkpoint pushed by id (refused);
- a no-op ``sh`` hook that reads its input (the floor: starting ``sh``).

Small smoke run: ``python scripts/bench_leak_guard.py --history 100 --commits 50 --checkpoints 30 --rounds 3``."""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import gitstate  # noqa: E402

ENV = {**os.environ, "GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@example.com",
       "GIT_COMMITTER_NAME": "bench", "GIT_COMMITTER_EMAIL": "bench@example.com", "GIT_CONFIG_NOSYSTEM": "1"}
ZERO = "0" * 40


def git(cwd: Path, *args: str, stdin: str | None = None) -> str:
    return subprocess.run(["git", *args], cwd=cwd, env=ENV, check=True, capture_output=True, text=True,
                          input=stdin).stdout


def fast_import(repo: Path, branch: str, count: int, start: int, parent: str | None) -> None:
    """``count`` commits on ``branch``, each changing one of 200 files."""
    out = []
    for i in range(count):
        msg = f"{branch} {i}\n"
        data = f"{branch} line {i}\n"
        out.append(f"commit refs/heads/{branch}\ncommitter bench <bench@example.com> {1700000000 + start + i} +0000\n"
                   f"data {len(msg)}\n{msg}")
        if i == 0 and parent:
            out.append(f"from {parent}\n")
        out.append(f"M 100644 inline {branch}/f{i % 200}.txt\ndata {len(data)}\n{data}\n")
    git(repo, "fast-import", "--quiet", stdin="".join(out))


def median_ms(cmd: list[str], cwd: Path, stdin: str, rounds: int, expect: int) -> float:
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        proc = subprocess.run(cmd, cwd=cwd, env=ENV, input=stdin, capture_output=True, text=True, check=False)
        times.append(time.perf_counter() - t)
        if proc.returncode != expect:
            raise SystemExit(f"{cmd}: exit {proc.returncode}, expected {expect}: {proc.stderr}")
    return statistics.median(times) * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--history", type=int, default=5000, help="commits on main (already on the remote)")
    ap.add_argument("--commits", type=int, default=1000, help="commits on the pushed branch")
    ap.add_argument("--checkpoints", type=int, default=3000, help="checkpoints in the repository")
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-leak-guard-") as tmp:
        base = Path(tmp)
        remote = base / "origin.git"
        git(base, "init", "-q", "--bare", str(remote))
        repo = base / "work"
        git(base, "init", "-q", "-b", "main", str(repo))
        git(repo, "remote", "add", "origin", remote.as_uri())
        fast_import(repo, "main", args.history, 0, None)
        git(repo, "reset", "-q", "--hard", "main")
        git(repo, "push", "-q", "origin", "main")
        fast_import(repo, "feature", args.commits, args.history, "refs/heads/main")
        t = time.perf_counter()
        with gitstate.open_store(repo) as store:
            runs = 30
            for r in range(runs):
                run = store.create_run(run_id=f"r{r}")
                for i in range(args.checkpoints // runs + (r < args.checkpoints % runs)):
                    run.checkpoint({"i": i, "token": f"sk-{r}-{i}"})
            hook = gitstate.install_hooks(store).path
        built = time.perf_counter() - t
        cps = git(repo, "rev-list", "--count", "--glob=refs/agentos/*").strip()
        feature = git(repo, "rev-parse", "feature").strip()
        checkpoint = git(repo, "rev-parse", "refs/agentos/main/runs/r0/heads/main").strip()
        url = remote.as_uri()
        noop = base / "noop.sh"
        noop.write_text("#!/bin/sh\ncat >/dev/null\nexit 0\n")
        line = f"refs/heads/feature {feature} refs/heads/feature {ZERO}\n"

        rows = [
            ("push feature to origin (tracking refs)", median_ms(["sh", hook, "origin", url], repo, line, args.rounds, 0)),
            ("push feature to a URL (no tracking refs)", median_ms(["sh", hook, url, url], repo, line, args.rounds, 0)),
            ("push a checkpoint by id (refused)",
             median_ms(["sh", hook, "origin", url], repo, f"{checkpoint} {checkpoint} refs/heads/x {ZERO}\n",
                       args.rounds, 1)),
            ("no-op sh hook (floor)", median_ms(["sh", str(noop), "origin", url], repo, line, args.rounds, 0)),
        ]
        print(f"pre-push leak guard: {args.history} commits on the remote's main, a new branch of "
              f"{args.commits} commits, {cps} gitstate commits (built in {built:.1f} s); "
              f"median of {args.rounds} runs")
        for name, ms in rows:
            print(f"  {name:<44} {ms:8.1f} ms")
        print(f"  {'added by the guard (tracking refs)':<44} {rows[0][1] - rows[3][1]:8.1f} ms")


if __name__ == "__main__":
    main()
