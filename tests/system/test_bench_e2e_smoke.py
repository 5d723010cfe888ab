"""Smoke tests of scripts/bench_e2e.py (a tiny run: 5 supersteps, one round, no PostgreSQL) and
scripts/bench_runs.py (20 runs): each completes in a subprocess and prints its tables and counts.
Timings are never asserted (they depend on the machine)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_e2e.py"


def test_bench_e2e_tiny_run(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("GIT_DIR", "GIT_WORK_TREE", "AGENTOS_REPO")}
    proc = subprocess.run([sys.executable, str(SCRIPT), "--steps", "5", "--rounds", "1", "--no-postgres",
                           "--backends", "gitstate,sqlite,memory", "--workloads", "plain,messages",
                           "--durability", "async", "--count-workloads", "messages"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "Traceback" not in out
    for title in ("== plain, durability=async, 5 supersteps ==", "== messages, durability=async, 5 supersteps =="):
        assert title in out
    assert "gitstate / sqlite wall: median" in out and "gitstate / sqlite cpu : median" in out
    assert "postgres" not in out.split("backends ", 1)[1].splitlines()[0]
    counts = [line.split() for line in out[out.index("== per superstep"):].splitlines()[2:] if line.strip()]
    assert [row[:2] for row in counts] == [["gitstate", "messages/async"], ["sqlite", "messages/async"],
                                           ["memory", "messages/async"]]
    assert float(counts[0][2]) > 0  # gitstate creates files: the counter saw them


def test_bench_e2e_bounds_run_when_named(tmp_path: Path) -> None:
    """The two bounds (no flush; no flush and no pending writes) run only when named, with ratios."""
    env = {k: v for k, v in os.environ.items() if k not in ("GIT_DIR", "GIT_WORK_TREE", "AGENTOS_REPO")}
    proc = subprocess.run([sys.executable, str(SCRIPT), "--steps", "5", "--rounds", "1", "--no-postgres", "--no-count",
                           "--backends", "gitstate-no-flush,gitstate-ceiling,sqlite", "--workloads", "plain",
                           "--durability", "sync"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "gitstate-no-flush / sqlite wall: median" in out and "gitstate-ceiling / sqlite wall: median" in out
    assert "gitstate / sqlite" not in out  # the default backend was not named


def test_bench_runs_tiny_run(tmp_path: Path) -> None:
    """scripts/bench_runs.py with 20 runs: both tables print, and `runs` lists every run."""
    env = {k: v for k, v in os.environ.items() if k not in ("GIT_DIR", "GIT_WORK_TREE", "AGENTOS_REPO")}
    proc = subprocess.run([sys.executable, str(SCRIPT.parent / "bench_runs.py"), "--runs", "20", "--rounds", "1"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "== loose refs ==" in out and "== packed refs (git pack-refs --all) ==" in out
    assert out.count("ratio runs / for-each-ref:") == 2
    assert "git agentos runs                 " in out and "  21\n" in out  # 20 runs and the header
