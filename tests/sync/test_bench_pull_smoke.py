"""Smoke test of scripts/bench_pull.py (20 runs, one repetition): it completes in a subprocess,
prints both timings and what the pull left behind: every ref, none loose, no staging ref. Timings
are never asserted (they depend on the machine)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_pull.py"


def test_bench_pull_tiny_run(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("GIT_DIR", "GIT_WORK_TREE", "AGENTOS_REPO")}
    proc = subprocess.run([sys.executable, str(SCRIPT), "--runs", "20", "--repeat", "1"], capture_output=True,
                          text=True, env=env, cwd=tmp_path, timeout=600, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "Traceback" not in out
    assert "median of 1: pull " in out and "git fetch" in out
    assert "after the last pull: 40 refs under refs/agentos/, 0 of them loose; 0 staging refs left" in out
