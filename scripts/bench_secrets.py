"""Benchmark: ``git agentos scan`` over a LangGraph thread of N steps (default 1,000 checkpoints),
each step appending one ~420-byte message (bench_langgraph.py's workload), one of them holding an
AWS key; and the scanner alone on 40,000 negative strings (git ids, UUIDs, base64 blobs and image
data URLs of 50 to 3,000 bytes). Prints seconds and the findings (one expected).

Usage: python scripts/bench_secrets.py [--steps 1000]"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import random
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
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as base:
        repo = os.path.join(base, "repo")
        git_init(repo)
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
        out = subprocess.run(["git", "agentos", "scan", "--json"], cwd=repo, capture_output=True, text=True)
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
