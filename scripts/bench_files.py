#!/usr/bin/env python3
"""Benchmark workspace snapshots against ``git stash create`` and measure peak memory with a big file.

1. A worktree of ``--files`` files (``--total-mb`` in all, committed), ``--changed`` files edited
   before each round: the median time of ``run.checkpoint(files=True)`` and of ``git stash create``
   on the same tree, in the same rounds, and their ratio (the issue's bar: ratio <= 1).
2. Loose objects written by a snapshot of an unchanged tree (bar: 0), and by a whole unchanged
   ``checkpoint(files=True)`` (its commit, meta blob and root tree only).
3. Peak RSS (``ru_maxrss`` of a fresh child process, git children included) while snapshotting and
   while restoring a worktree holding one ``--big-mib`` file (bar: < 200 MB).

Small smoke run: ``python scripts/bench_files.py --files 200 --total-mb 2 --rounds 3 --big-mib 64``."""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import gitstate  # noqa: E402

ENV = {**os.environ, "GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@example.com",
       "GIT_COMMITTER_NAME": "bench", "GIT_COMMITTER_EMAIL": "bench@example.com", "GIT_CONFIG_NOSYSTEM": "1"}


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, env=ENV, check=True, capture_output=True, text=True).stdout


def make_tree(root: Path, files: int, total_mb: float) -> list[Path]:
    git(root, "init", "-q", "-b", "main")
    size = max(1, int(total_mb * 1024 * 1024 / files))
    per_dir = 100
    paths = []
    rng = random.Random(1)
    for i in range(files):
        d = root / f"d{i // per_dir:03d}"
        d.mkdir(exist_ok=True)
        p = d / f"f{i:05d}.txt"
        p.write_bytes(rng.randbytes(size // 2).hex().encode()[:size])
        paths.append(p)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "tree")
    return paths


def loose_count(root: Path) -> int:
    objects = root / ".git" / "objects"
    return sum(len(os.listdir(objects / d)) for d in os.listdir(objects) if len(d) == 2)


def bench_speed(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        t0 = time.perf_counter()
        paths = make_tree(root, args.files, args.total_mb)
        print(f"worktree: {args.files} files, {args.total_mb} MB (built in {time.perf_counter() - t0:.1f}s)")
        store = gitstate.open_store(root)
        run = store.create_run()
        t0 = time.perf_counter()
        run.checkpoint({"round": -1}, files=True)
        print(f"first snapshot (hashes every file): {1000 * (time.perf_counter() - t0):.0f} ms")
        git(root, "stash", "create")
        ours, theirs = [], []
        rng = random.Random(2)
        for r in range(args.rounds):
            for p in rng.sample(paths, args.changed):
                p.write_bytes(p.read_bytes()[::-1])
            first_ours = r % 2 == 0  # alternate the order so caches favour neither
            for which in ("ours", "git") if first_ours else ("git", "ours"):
                t0 = time.perf_counter()
                if which == "ours":
                    run.checkpoint({"round": r}, files=True)
                    ours.append(time.perf_counter() - t0)
                else:
                    git(root, "stash", "create")
                    theirs.append(time.perf_counter() - t0)
            # the user stages the edits: git's stat cache is as fresh as ours for the next round
            git(root, "add", "-u")
        mo, mt = statistics.median(ours), statistics.median(theirs)
        print(f"checkpoint(files=True), {args.changed} files changed: median {1000 * mo:.1f} ms over {args.rounds}")
        print(f"git stash create, same tree:             median {1000 * mt:.1f} ms over {args.rounds}")
        print(f"ratio gitstate / git stash create: {mo / mt:.2f}")

        before = loose_count(root)
        store.workspace.snapshot()
        print(f"loose objects written by a snapshot of an unchanged tree: {loose_count(root) - before}")
        run.checkpoint({"round": "same"}, files=True)
        before = loose_count(root)
        run.checkpoint({"round": "same"}, files=True)
        print(f"loose objects written by an unchanged checkpoint(files=True): {loose_count(root) - before}"
              " (its commit, meta.cbor and root tree; no file blobs or trees)")


_CHILD = textwrap.dedent("""
    import resource, sys, gitstate
    root, mode = sys.argv[1], sys.argv[2]
    store = gitstate.open_store(root)
    if mode == "snapshot":
        run = store.create_run(run_id="big")
        cp = run.checkpoint({}, files=True)
        print(cp.id)
    else:
        run = store.get_run("big")
        cp = run.head()
        result = run.restore(cp, force=True)
        assert "big.bin" in result.changed, result
    self_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    kids_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    print(max(self_kb, kids_kb))
""")


def bench_memory(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        git(root, "init", "-q", "-b", "main")
        big = root / "big.bin"
        chunk = 4 * 1024 * 1024
        with open(big, "wb") as fh:
            for _ in range(args.big_mib * 1024 * 1024 // chunk):
                fh.write(os.urandom(chunk))
        (root / "small.txt").write_text("x\n")
        env = {**ENV, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
        for mode in ("snapshot", "restore"):
            if mode == "restore":
                with open(big, "r+b") as fh:
                    fh.write(b"modified")
            t0 = time.perf_counter()
            out = subprocess.run([sys.executable, "-c", _CHILD, str(root), mode], env=env, check=True,
                                 capture_output=True, text=True).stdout.split()
            elapsed = time.perf_counter() - t0
            print(f"{mode} of a worktree with a {args.big_mib} MiB file: peak RSS {int(out[-1]) / 1024:.0f} MB"
                  f" ({elapsed:.1f}s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--total-mb", type=float, default=100.0)
    parser.add_argument("--changed", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--big-mib", type=int, default=1024, help="0 skips the memory benchmark")
    args = parser.parse_args()
    bench_speed(args)
    if args.big_mib:
        bench_memory(args)


if __name__ == "__main__":
    main()
