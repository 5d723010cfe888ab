#!/usr/bin/env python3
"""Benchmark the fixed cost of a ``git agentos`` process: start-up, imports, store open, exit.

Each contender is a Python interpreter that can run ``-m gitstate_cli`` (a virtualenv with some
version of git-agentos installed, or this checkout through ``PYTHONPATH``): ``--contender
NAME=PYTHON[:PYTHONPATH]``, given twice or more to compare installs side by side. Every round runs
each command once per contender, contenders in a rotating order, so load on the machine hits them
alike. Commands timed:

- ``--version`` (no store), ``runs`` (opens the store, reads refs),
- ``restore ID --force`` on a repository of ``--files`` files (1,000 bytes each, 100 per directory)
  with ``--changed`` of them edited before every call (the issue-11 scenario),
- ``api``: the same restore through the library in a fresh process (``import gitstate``,
  ``open_store``, ``run.restore``), so the difference to the CLI is the CLI's own share.

Bytecode caching is on (``PYTHONDONTWRITEBYTECODE`` removed), as in a pip-installed package; one
untimed warm-up call per command compiles whatever is not compiled yet. Printed per command and
contender: wall-clock and CPU time (user + system of the child) as median, min and max, and the
ratio of the medians to the first contender.

Example: ``python scripts/bench_cli.py --contender old=/tmp/old/bin/python --contender
new=.venv/bin/python --rounds 15``."""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_files import ENV, git, make_tree  # noqa: E402

_API = """
import sys, gitstate
store = gitstate.open_store()
from gitstate.store import refspec
cp = refspec.resolve(store, sys.argv[1])
store.get_run(cp.run_id).restore(cp, force=True)
store.close()
"""


def _env(pythonpath: str | None) -> dict[str, str]:
    env = {k: v for k, v in ENV.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPATH")}
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    return env


def _timed(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(argv, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _stats(values: list[float]) -> str:
    ms = [1000 * v for v in values]
    return f"median {statistics.median(ms):7.1f} ms  min {min(ms):7.1f}  max {max(ms):7.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--contender", action="append", required=True, metavar="NAME=PYTHON[:PYTHONPATH]")
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--changed", type=int, default=1_000)
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--commands", default="version,runs,restore,api",
                        help="comma-separated subset of version,runs,restore,api")
    args = parser.parse_args()
    contenders: dict[str, tuple[str, dict[str, str]]] = {}
    for spec in args.contender:
        name, _, rest = spec.partition("=")
        python, _, pythonpath = rest.partition(":")
        contenders[name] = (python, _env(pythonpath or None))
    commands = args.commands.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "repo"
        root.mkdir()
        t0 = time.perf_counter()
        paths = [p.relative_to(root) for p in make_tree(root, args.files, args.files * 1000 / 1024 / 1024)]
        git(root, "repack", "-adq")
        first_python, first_env = next(iter(contenders.values()))
        out = subprocess.run([first_python, "-m", "gitstate_cli", "checkpoint", "bench", "--files", "--json"],
                             cwd=root, env=first_env, check=True, capture_output=True, text=True).stdout
        cp_id = json.loads(out)["id"]
        argvs = {
            "version": ["-m", "gitstate_cli", "--version"],
            "runs": ["-m", "gitstate_cli", "runs"],
            "restore": ["-m", "gitstate_cli", "restore", cp_id, "--force"],
            "api": ["-c", _API, cp_id],
        }
        for python, env in contenders.values():  # compiles what is not compiled yet, untimed
            for command in commands:
                subprocess.run([python, *argvs[command]], cwd=root, env=env, check=True, capture_output=True)
        print(f"{args.files} files ({args.changed} changed before each restore), {args.rounds} rounds, "
              f"set up in {time.perf_counter() - t0:.1f}s")
        names = list(contenders)
        wall: dict[tuple[str, str], list[float]] = {(c, n): [] for c in commands for n in names}
        cpu: dict[tuple[str, str], list[float]] = {(c, n): [] for c in commands for n in names}
        rng = random.Random(3)
        for r in range(args.rounds):
            edit = rng.sample(paths, min(args.changed, len(paths)))
            for command in commands:
                order = names[r % len(names):] + names[:r % len(names)]
                for name in order:
                    python, env = contenders[name]
                    if command in ("restore", "api"):
                        for rel in edit:
                            full = root / rel
                            full.write_bytes(b"round %d\n" % r + full.read_bytes()[::-1])
                        os.sync()  # the edits' writeback is not charged to the restore
                    w, c = _timed([python, *argvs[command]], root, env)
                    if command in ("restore", "api"):
                        assert not (root / edit[0]).read_bytes().startswith(b"round"), f"{name} did not restore"
                    wall[command, name].append(w)
                    cpu[command, name].append(c)
        for command in commands:
            print(f"\n{command}:")
            for name in names:
                ratio = statistics.median(wall[command, name]) / statistics.median(wall[command, names[0]])
                print(f"  {name:10s} wall {_stats(wall[command, name])}  ratio {ratio:.2f}")
                print(f"  {'':10s} CPU  {_stats(cpu[command, name])}")


if __name__ == "__main__":
    main()
