"""Benchmark: the write-time secrets policy and ``git agentos scan``.

1. LangGraph put (each step's put_writes + put, bench_langgraph.py's workload: one ~420-byte
   message appended per step) at N steps (default 1,000) with ``agentos.secrets=off`` and with
   ``redact`` (the default), side by side: two savers driven step by step in alternation, repeated
   ``--repeat`` times; the median put of each run and the ratio redact/off, then the median ratio.
2. ``git agentos scan`` over a thread of N checkpoints written with ``warn``, one message holding
   an AWS key (one finding expected).
3. The scanner alone on 40,000 negative strings (git ids, UUIDs, base64 blobs and image data URLs
   of 50 to 3,000 bytes): seconds and false positives (none expected).

Usage: python scripts/bench_secrets.py [--steps 1000] [--repeat 3]"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_langgraph import Workload, git_init  # noqa: E402

import gitstate  # noqa: E402
from gitstate.langgraph import GitCheckpointSaver  # noqa: E402
from gitstate.secrets import Scanner  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    ratios = []
    for run in range(args.repeat):
        with tempfile.TemporaryDirectory() as base:
            works = {}
            for mode in ("off", "redact"):
                repo = os.path.join(base, mode)
                git_init(repo)
                subprocess.run(["git", "-C", repo, "config", "agentos.secrets", mode], check=True)
                works[mode] = Workload(GitCheckpointSaver(gitstate.open_store(repo)), args.steps)
            for i in range(args.steps):
                for mode in (("off", "redact") if i % 2 else ("redact", "off")):
                    works[mode].step(i)
            med = {mode: statistics.median(w.put_times) * 1e3 for mode, w in works.items()}
            ratios.append(med["redact"] / med["off"])
            print(f"run {run + 1}: put median off {med['off']:.3f} ms, redact {med['redact']:.3f} ms, "
                  f"ratio {ratios[-1]:.3f}")
            for w in works.values():
                w.saver.store.wait_for_housekeeping()
                w.saver.store.close()
    print(f"put at {args.steps} steps: median ratio redact/off {statistics.median(ratios):.3f} (bar: <= 1.20)")
    with tempfile.TemporaryDirectory() as base:
        repo = os.path.join(base, "repo")
        git_init(repo)
        subprocess.run(["git", "-C", repo, "config", "agentos.secrets", "warn"], check=True)
        saver = GitCheckpointSaver(gitstate.open_store(repo))
        work = Workload(saver, args.steps)
        t0 = time.perf_counter()
        for i in range(args.steps):
            if i == args.steps // 2:
                work.messages = [*work.messages, {"role": "tool", "content": "AWS_ACCESS_KEY_ID=AKIAQ3EGR7ZX5EXAMPLE"}]
            work.step(i)
        print(f"wrote {args.steps} checkpoints in {time.perf_counter() - t0:.1f} s")
        saver.store.wait_for_housekeeping()
        saver.store.close()
        t0 = time.perf_counter()
        env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
        out = subprocess.run(["git", "agentos", "scan", "--json"], cwd=repo, capture_output=True, text=True, env=env)
        elapsed = time.perf_counter() - t0
        doc = json.loads(out.stdout)
        kinds = sorted({(f["kind"], f["path"]) for f in doc["findings"]})
        print(f"git agentos scan: {doc['checkpoints']} checkpoints in {elapsed:.2f} s, exit {out.returncode}, "
              f"{len(doc['findings'])} findings at {kinds}")
    rng = random.Random(1)
    negatives = []
    for i in range(10_000):
        negatives.append(hashlib.sha1(str(i).encode()).hexdigest())
        negatives.append(str(uuid.UUID(int=rng.getrandbits(128))))
        negatives.append(base64.b64encode(rng.randbytes(rng.randint(50, 3000))).decode())
        negatives.append("data:image/png;base64," + base64.b64encode(rng.randbytes(rng.randint(50, 3000))).decode())
    scanner = Scanner()
    t0 = time.perf_counter()
    hits = sum(1 for text in negatives if scanner.find(text))
    size = sum(map(len, negatives)) / 1e6
    print(f"scanner: {len(negatives)} negative strings ({size:.0f} MB) in {time.perf_counter() - t0:.2f} s, "
          f"{hits} false positives")


if __name__ == "__main__":
    main()
