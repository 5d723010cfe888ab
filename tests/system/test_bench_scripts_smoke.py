"""Smoke test of scripts/bench_files.py (bench_langgraph.py's is in test_bench_smoke.py): a tiny run
completes in a subprocess and prints both sides of its comparison. Timings are never asserted (they depend on
the machine); the scripts themselves are the measuring tools."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def _run(args: list[str], cwd: Path) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("GIT_DIR", "GIT_WORK_TREE", "AGENTOS_REPO")}
    proc = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_bench_files_tiny_run(tmp_path: Path) -> None:
    out = _run([str(SCRIPTS / "bench_files.py"), "--files", "60", "--total-mb", "0.2", "--changed", "3",
                "--rounds", "1", "--big-mib", "0", "--restore-files", "60", "--restore-changed", "6",
                "--full-files", "0", "--restore-rounds", "1", "--no-cli"], tmp_path)
    assert "git stash create" in out
    assert "ratio gitstate / git stash create" in out
    assert "ratio gitstate API / git read-tree -u" in out and "ratio gitstate API / git checkout -f" in out
    switching = out[out.index("switching between two saved versions"):]
    assert "ratio gitstate API / git checkout -f" in switching


def test_bench_transactions_tiny_run(tmp_path: Path) -> None:
    out = _run([str(SCRIPTS / "bench_transactions.py"), "--refs", "5", "--rounds", "2"], tmp_path)
    assert "2 refs atomic" in out and "2 refs one by one" in out
    assert len([line for line in out.splitlines() if line.split() and line.split()[0] == "5"]) == 1
