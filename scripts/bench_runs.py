#!/usr/bin/env python3
"""What ``git agentos runs`` costs over many runs, next to ``git for-each-ref refs/agentos/``.

A repository gets a few real runs written by gitstate (a run record, a branch of 3 checkpoints, a
node log), then ``--runs`` runs made from them with one ``git update-ref --stdin`` (each new run's
refs point at one of the real runs' commits, under its own run id: 3 refs a run). Both commands run
as subprocesses with their output to a pipe, alternating which goes first, ``--rounds`` times each;
the first ``runs`` (which builds gitstate's summary cache) is timed apart. Measured twice: with the
refs loose (as ``update-ref`` leaves them), then after ``git pack-refs --all``. Prints medians,
means, the ratio of medians and the spread of the per-round ratios; the bar is ``runs`` ≤ 2×
``for-each-ref``.

Usage: python scripts/bench_runs.py [--runs 10000] [--rounds 5] [--profile FILE]"""

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

BAR = 2.0


def git(repo: str, *args: str, stdin: str | None = None) -> str:
    """Output of a git command in ``repo``."""
    return subprocess.run(["git", "-C", repo, *args], input=stdin, capture_output=True, text=True,
                          check=True).stdout


def build(repo: str, runs: int) -> None:
    """``repo`` with ``runs`` runs (see the module docstring)."""
    subprocess.run(["git", "init", "-q", repo], check=True)
    store = gitstate.open_store(repo)
    for k in range(3):
        run = store.new_run(f"bench-{k}")
        for i in range(3):
            run.checkpoint({"i": i, "k": k, "text": "x" * 40}, node=f"node{i}",
                           status="completed" if k == 1 and i == 2 else None)
    store.close()
    real: list[dict[str, str]] = []
    current: dict[str, dict[str, str]] = {}
    for line in git(repo, "for-each-ref", "--format=%(objectname) %(refname)", "refs/agentos/").splitlines():
        oid, name = line.split(" ", 1)
        parts = name.split("/")  # refs agentos <wt> runs <id> <kind...>
        current.setdefault(parts[4], {})["/".join(parts[5:])] = oid
    real = list(current.values())
    lines = []
    for i in range(runs - len(real)):
        refs = real[i % len(real)]
        run_id = f"20260101-{i // 100000:06d}-{i % 100000:06x}"
        for rest, oid in refs.items():
            lines.append(f"create refs/agentos/main/runs/{run_id}/{rest} {oid}\n")
    git(repo, "update-ref", "--stdin", stdin="".join(lines))


def timed(cmd: list[str], cwd: str, env: dict[str, str]) -> tuple[float, int]:
    """Seconds of one command (output to a pipe) and the lines it printed."""
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, check=True)
    return time.perf_counter() - t0, proc.stdout.count(b"\n")


def measure(repo: str, rounds: int, env: dict[str, str], label: str) -> list[float]:
    """Print one table; the per-round ratios."""
    agentos = [shutil.which("git-agentos", path=env["PATH"]) or "git-agentos", "runs"]
    feref = ["git", "for-each-ref", "refs/agentos/"]
    cold, cold_lines = timed(agentos, repo, env)
    a_times, f_times = [], []
    lines = (0, 0)
    for r in range(rounds):
        pair = [(agentos, a_times), (feref, f_times)]
        for cmd, into in (pair if r % 2 else pair[::-1]):
            secs, n = timed(cmd, repo, env)
            into.append(secs)
            lines = (n, lines[1]) if cmd is agentos else (lines[0], n)
    ratios = [a / f for a, f in zip(a_times, f_times, strict=True)]
    am, fm = statistics.median(a_times), statistics.median(f_times)
    print(f"\n== {label} ==")
    print(f"git agentos runs, first (builds the summary cache): {cold:.3f}s ({cold_lines} lines)")
    print(f"{'command':<32}{'median':>10}{'mean':>10}{'min':>10}{'max':>10}  lines")
    print(f"{'git agentos runs':<32}{am:>9.3f}s{statistics.fmean(a_times):>9.3f}s{min(a_times):>9.3f}s"
          f"{max(a_times):>9.3f}s  {lines[0]}")
    print(f"{'git for-each-ref refs/agentos/':<32}{fm:>9.3f}s{statistics.fmean(f_times):>9.3f}s"
          f"{min(f_times):>9.3f}s{max(f_times):>9.3f}s  {lines[1]}")
    rmed = am / fm
    print(f"ratio runs / for-each-ref: {rmed:.2f}x (per round {min(ratios):.2f}–{max(ratios):.2f}x); "
          f"first run {cold / fm:.2f}x; bar ≤{BAR}x {'met' if rmed <= BAR else 'MISSED'}")
    return ratios


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10000, help="runs in the repository (10000)")
    ap.add_argument("--rounds", type=int, default=5, help="timed rounds of each command (5)")
    ap.add_argument("--profile", default=None, help="also write a cProfile of `runs` (packed refs) here")
    ap.add_argument("--dir", default=None, help="work here (kept) instead of a temporary directory")
    args = ap.parse_args()
    work = args.dir or tempfile.mkdtemp(prefix="bench-runs-")
    os.makedirs(work, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("GIT_DIR", "GIT_WORK_TREE", "AGENTOS_REPO")}
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env["GIT_PAGER"] = env["PAGER"] = "cat"
    try:
        repo = os.path.join(work, "repo")
        t0 = time.perf_counter()
        build(repo, args.runs)
        refs = git(repo, "for-each-ref", "--format=x", "refs/agentos/").count("\n")
        print(f"gitstate {gitstate.__version__}; {args.runs} runs, {refs} refs under refs/agentos/ "
              f"(built in {time.perf_counter() - t0:.1f}s); {args.rounds} rounds")
        measure(repo, args.rounds, env, "loose refs")
        git(repo, "pack-refs", "--all")
        measure(repo, args.rounds, env, "packed refs (git pack-refs --all)")
        if args.profile:
            subprocess.run([sys.executable, "-m", "cProfile", "-o", args.profile, "-m", "gitstate_cli.main", "runs"],
                           cwd=repo, env=env, capture_output=True, check=True)
            print(f"profile of `runs` written to {args.profile}")
    finally:
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
