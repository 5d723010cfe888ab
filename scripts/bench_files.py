#!/usr/bin/env python3
"""Benchmark workspace snapshots against ``git stash create`` and measure peak memory with a big file.

1. A worktree of ``--files`` files (``--total-mb`` in all, committed). First snapshot: no private
   index (each round starts without one) against ``GIT_INDEX_FILE=<new> git add -A`` (the issue's
   bar: ratio <= 1.5), interleaved. Then ``--changed`` files edited before each round: the median time of ``run.checkpoint(files=True)`` and of ``git stash create``
   on the same tree, in the same rounds, and their ratio (the issue's bar: ratio <= 1).
2. Loose objects written by a snapshot of an unchanged tree (bar: 0), and by a whole unchanged
   ``checkpoint(files=True)`` (its commit, meta blob and root tree only).
3. Peak RSS (``ru_maxrss`` of a fresh child process, git children included) while snapshotting and
   while restoring a worktree holding one ``--big-mib`` file (bar: < 200 MB).
4. Restore against git's own checkout of the same tree, side by side: identical worktrees, one per
   contender (so each keeps its own stat cache, as it would in use), the same files changed in each
   before every round, the contenders run in a rotating order, ``sync`` before each timed call.
   Contenders: ``run.restore(cp, force=True)`` (the API), ``git agentos restore ID --force`` (the CLI,
   a fresh process), ``git read-tree -u --reset HEAD`` and ``git checkout -f``. Scenarios:
   ``--restore-files`` files with ``--restore-changed`` changed (the issue's bar: gitstate within
   2x of git), and ``--full-files`` files all changed. Medians, means, spread and ratios (of the
   medians, and the median of the per-round ratios) are printed.
5. Switching between two saved versions, as an agent rolling back does: in each worktree a
   checkpoint (and a commit) A, then ``--restore-changed`` files edited and checkpoint (commit) B;
   each round every contender goes to the other version, A then B then A..., with nothing unsaved,
   so gitstate's restore runs without ``--force``: ``run.restore(cp)``, ``git agentos restore ID``,
   ``git read-tree -u --reset COMMIT`` and ``git checkout -f COMMIT``.

Small smoke run: ``python scripts/bench_files.py --files 200 --total-mb 2 --rounds 3 --big-mib 64
--restore-files 300 --restore-changed 30 --full-files 200``. ``--only restore`` runs parts 4 and 5 alone."""

from __future__ import annotations

import argparse
import itertools
import os
import random
import resource
import shutil
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
    # no automatic gc: a background repack would race the copies and the timings
    return subprocess.run(["git", "-c", "gc.auto=0", *args], cwd=cwd, env=ENV, check=True, capture_output=True,
                          text=True).stdout


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


def bench_first(root: Path, rounds: int) -> None:
    """The first snapshot of the committed worktree (no private index yet: each round starts
    without one, from a new store) against ``GIT_INDEX_FILE=<new> git add -A`` (a new index each
    round), interleaved in alternating order; medians and ratios."""
    agentos = root / ".git" / "agentos"
    fresh = root.parent / f"{root.name}-fresh-index"
    ours, theirs = [], []
    for r in range(rounds):
        for which in ("ours", "git") if r % 2 == 0 else ("git", "ours"):
            if which == "ours":
                if agentos.exists():
                    for p in agentos.glob("index-*"):
                        p.unlink()
                store = gitstate.open_store(root)
                t0 = time.perf_counter()
                store.core.workspace.snapshot()
                ours.append(time.perf_counter() - t0)
                store.close()
            else:
                fresh.unlink(missing_ok=True)
                t0 = time.perf_counter()
                subprocess.run(["git", "add", "-A"], cwd=root, env={**ENV, "GIT_INDEX_FILE": str(fresh)}, check=True)
                theirs.append(time.perf_counter() - t0)
    fresh.unlink(missing_ok=True)
    mo, mt = statistics.median(ours), statistics.median(theirs)
    per_round = statistics.median(a / b for a, b in zip(ours, theirs, strict=True))
    print(f"first snapshot (no private index), workspace.snapshot(): median {1000 * mo:.1f} ms over {rounds}")
    print(f"GIT_INDEX_FILE=<new> git add -A, same tree:             median {1000 * mt:.1f} ms over {rounds}")
    print(f"ratio gitstate / git add -A into a new index: {mo / mt:.2f} (of the medians; median of the per-round "
          f"ratios {per_round:.2f}; bar <= 1.5)")


def bench_speed(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        t0 = time.perf_counter()
        paths = make_tree(root, args.files, args.total_mb)
        print(f"worktree: {args.files} files, {args.total_mb} MB (built in {time.perf_counter() - t0:.1f}s)")
        bench_first(root, args.rounds)
        store = gitstate.open_store(root)
        run = store.create_run()
        run.checkpoint({"round": -1}, files=True)
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
        per_round = statistics.median(a / b for a, b in zip(ours, theirs, strict=True))
        print(f"ratio gitstate / git stash create: {mo / mt:.2f} (of the medians; median of the per-round "
              f"ratios {per_round:.2f}; bar <= 1.0)")

        before = loose_count(root)
        store.core.workspace.snapshot()
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


CONTENDERS = ("gitstate API", "gitstate CLI", "git read-tree -u", "git checkout -f")


def _restore_once(which: str, root: Path, run: gitstate.Run | None, cp: gitstate.Checkpoint | None,
                  commit: str = "HEAD", force: bool = True) -> None:
    if which == "gitstate API":
        assert run is not None and cp is not None
        run.restore(cp, force=force)
    elif which == "gitstate CLI":
        assert cp is not None
        _cli(root, "restore", cp.id, *(["--force"] if force else []))
    elif which == "git read-tree -u":
        git(root, "read-tree", "-u", "--reset", commit)
    else:
        git(root, "checkout", "-f", "-q", *([] if commit == "HEAD" else [commit]))


def _cli(root: Path, *args: str) -> None:
    # bytecode caching on, as in an installed package (pip compiles it at install time)
    env = {k: v for k, v in ENV.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parent.parent)
    subprocess.run([sys.executable, "-m", "gitstate_cli", *args], cwd=root, env=env, check=True, capture_output=True)


def _cpu_seconds() -> float:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _spread(values: list[float]) -> str:
    ms = [1000 * v for v in values]
    return (f"median {statistics.median(ms):8.1f} ms  mean {statistics.fmean(ms):8.1f} ms  "
            f"min {min(ms):8.1f}  max {max(ms):8.1f}")


def _packed_tree(tmp: Path, files: int) -> tuple[Path, list[Path]]:
    """A repository ``tmp/base`` of ``files`` files of about 1 KB, committed and packed (history
    packed, as a repository in use has it), and the files' relative paths."""
    base = tmp / "base"
    base.mkdir()
    paths = [p.relative_to(base) for p in make_tree(base, files, files * 1000 / 1024 / 1024)]
    git(base, "repack", "-adq")
    return base, paths


def bench_restore(files: int, changed: int, rounds: int, contenders: list[str]) -> None:
    """Part 4: one scenario of restore against git's checkout (see the module docstring)."""
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        base, paths = _packed_tree(Path(tmp), files)
        roots = {}
        for i, which in enumerate(contenders):
            roots[which] = Path(tmp) / f"w{i}"
            shutil.copytree(base, roots[which], symlinks=True)
        shutil.rmtree(base)
        runs: dict[str, tuple[gitstate.Run, gitstate.Checkpoint]] = {}
        for which in contenders:
            root = roots[which]
            git(root, "read-tree", "-u", "--reset", "HEAD")  # the copy's index stat data is stale
            if which.startswith("gitstate"):
                run = gitstate.open_store(root).create_run(run_id="bench")
                runs[which] = (run, run.checkpoint({"round": -1}, files=True))
                if which == "gitstate CLI":
                    _cli(root, "restore", runs[which][1].id, "--dry-run")  # compiles the CLI's modules once
        print(f"\nrestore, {files} files ({changed} changed), {rounds} rounds "
              f"(set up in {time.perf_counter() - t0:.1f}s)")
        times: dict[str, list[float]] = {w: [] for w in contenders}
        cpu: dict[str, list[float]] = {w: [] for w in contenders}
        rng = random.Random(3)
        for r in range(rounds):
            edit = paths if changed >= files else rng.sample(paths, changed)
            order = contenders[r % len(contenders):] + contenders[:r % len(contenders)]
            for which in order:
                root = roots[which]
                for rel in edit:
                    full = root / rel
                    full.write_bytes(b"round %d\n" % r + full.read_bytes()[::-1])
                os.sync()
                run, cp = runs.get(which, (None, None))
                c0, t0 = _cpu_seconds(), time.perf_counter()
                _restore_once(which, root, run, cp)
                times[which].append(time.perf_counter() - t0)
                cpu[which].append(_cpu_seconds() - c0)
                sample = root / edit[0]
                assert not sample.read_bytes().startswith(b"round"), f"{which} did not restore {edit[0]}"
        _report(contenders, times, cpu)


def _report(contenders: list[str], times: dict[str, list[float]], cpu: dict[str, list[float]]) -> None:
    print("  wall time:")
    for which in contenders:
        print(f"  {which:18s} {_spread(times[which])}")
    print("  CPU time (user + system, the process and its children; waiting for the disk excluded):")
    for which in contenders:
        print(f"  {which:18s} {_spread(cpu[which])}")
    for ours, theirs in itertools.product([w for w in contenders if w.startswith("gitstate")],
                                          [w for w in contenders if w.startswith("git ")]):
        per_round = [a / b for a, b in zip(times[ours], times[theirs], strict=True)]
        ratio = statistics.median(times[ours]) / statistics.median(times[theirs])
        cpu_ratio = statistics.median(cpu[ours]) / max(statistics.median(cpu[theirs]), 1e-9)
        print(f"  ratio {ours} / {theirs}: {ratio:.2f} (medians); per round: median "
              f"{statistics.median(per_round):.2f}, min {min(per_round):.2f}, max {max(per_round):.2f}; "
              f"CPU {cpu_ratio:.2f}")


def bench_switch(files: int, changed: int, rounds: int, contenders: list[str]) -> None:
    """Part 5: going back and forth between two saved versions (see the module docstring)."""
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        base, paths = _packed_tree(Path(tmp), files)
        edit = paths if changed >= files else random.Random(5).sample(paths, changed)
        targets: dict[str, list[tuple[gitstate.Run | None, gitstate.Checkpoint | None, str]]] = {}
        roots = {}
        for i, which in enumerate(contenders):
            root = roots[which] = Path(tmp) / f"w{i}"
            shutil.copytree(base, root, symlinks=True)
            git(root, "read-tree", "-u", "--reset", "HEAD")  # the copy's index stat data is stale
            run = gitstate.open_store(root).create_run(run_id="bench") if which.startswith("gitstate") else None
            versions = []
            for version in ("a", "b"):
                if version == "b":
                    for rel in edit:
                        full = root / rel
                        full.write_bytes(b"version b\n" + full.read_bytes()[::-1])
                    git(root, "commit", "-qam", "b")
                cp = run.checkpoint({"version": version}, files=True) if run is not None else None
                versions.append((run, cp, git(root, "rev-parse", "HEAD").strip()))
            targets[which] = versions
            if which == "gitstate CLI":
                _cli(root, "restore", versions[1][1].id, "--dry-run")  # type: ignore[union-attr]  # compiles the CLI once
        shutil.rmtree(base)
        print(f"\nswitching between two saved versions, {files} files ({changed} differ), {rounds} rounds "
              f"(set up in {time.perf_counter() - t0:.1f}s)")
        times: dict[str, list[float]] = {w: [] for w in contenders}
        cpu: dict[str, list[float]] = {w: [] for w in contenders}
        for r in range(rounds):
            order = contenders[r % len(contenders):] + contenders[:r % len(contenders)]
            want = r % 2  # every worktree holds version b first: the first round goes to a
            for which in order:
                run, cp, commit = targets[which][want]
                os.sync()
                c0, t0 = _cpu_seconds(), time.perf_counter()
                _restore_once(which, roots[which], run, cp, commit=commit, force=False)
                times[which].append(time.perf_counter() - t0)
                cpu[which].append(_cpu_seconds() - c0)
                sample = (roots[which] / edit[0]).read_bytes()
                assert sample.startswith(b"version b") == (want == 1), f"{which} did not switch {edit[0]}"
        _report(contenders, times, cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--total-mb", type=float, default=100.0)
    parser.add_argument("--changed", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--big-mib", type=int, default=1024, help="0 skips the memory benchmark")
    parser.add_argument("--restore-files", type=int, default=10_000)
    parser.add_argument("--restore-changed", type=int, default=1_000)
    parser.add_argument("--full-files", type=int, default=20_000, help="0 skips the full-restore scenario")
    parser.add_argument("--restore-rounds", type=int, default=7)
    parser.add_argument("--no-cli", action="store_true", help="leave the CLI out of the restore benchmark")
    parser.add_argument("--only", choices=["snapshot", "memory", "restore"], default=None)
    args = parser.parse_args()
    if args.only in (None, "snapshot"):
        bench_speed(args)
    if args.big_mib and args.only in (None, "memory"):
        bench_memory(args)
    if args.only in (None, "restore"):
        contenders = [w for w in CONTENDERS if not (args.no_cli and w == "gitstate CLI")]
        if args.restore_files:
            bench_restore(args.restore_files, args.restore_changed, args.restore_rounds, contenders)
        if args.full_files:
            bench_restore(args.full_files, args.full_files, args.restore_rounds, contenders)
        if args.restore_files:
            bench_switch(args.restore_files, args.restore_changed, args.restore_rounds, contenders)


if __name__ == "__main__":
    main()
