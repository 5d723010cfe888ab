"""Smoke test of scripts/bench_core.py: a --quick run completes in a subprocess and prints its tables
and the issue-2 bar check. Timings are never asserted (they depend on the machine)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_core.py"


def test_bench_quick_run_prints_the_table(tmp_path: Path) -> None:
    out_json = tmp_path / "figures.json"
    env = {k: v for k, v in os.environ.items() if k not in ("GIT_DIR", "GIT_WORK_TREE", "AGENTOS_REPO")}
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--profile", "--json", str(out_json), "--keep",
         str(tmp_path / "work")],
        capture_output=True, text=True, env=env, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert "gitstate vs the alternatives" in text
    for op in ("write @ step 1..", "read head", "read by id", "history of", "list 30 runs", "bytes on disk"):
        assert op in text, op
    assert "÷json" in text and "÷sqlite" in text
    assert "durable writes" in text
    assert "git fsck --strict: clean" in text
    assert "user HEAD/index/refs/heads unchanged: True" in text
    figures = json.loads(out_json.read_text())
    assert figures["bar"]["fsck_clean"] is True
    assert set(figures["results"]["read head (state decoded)"]) == {"gitstate", "json", "sqlite"}
    # the alternatives without history/read-by-id are reported as such, not invented
    assert "json" not in figures["results"]["read by id (state decoded)"]


LG_SCRIPT = SCRIPT.parent / "bench_langgraph.py"


def test_bench_langgraph_quick_run_prints_every_table(tmp_path: Path) -> None:
    """scripts/bench_langgraph.py --quick completes and prints its sections: the interleaved table
    with every figure, the core.fsync=all table, the scaling table and the system calls (or why
    they were not measured). Timings are never asserted."""
    env = {k: v for k, v in os.environ.items() if k not in ("GIT_DIR", "GIT_WORK_TREE", "AGENTOS_REPO")}
    proc = subprocess.run([sys.executable, str(LG_SCRIPT), "--quick", "--dir", str(tmp_path / "work")],
                          capture_output=True, text=True, env=env, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert "git's default core.fsync" in text and "core.fsync=all" in text
    for metric in ("put ", "put_mean", "p99", "get_latest", "get_id", "list", "disk"):
        assert f"\n{metric}" in text, metric
    assert "fsck=clean" in text and "FAILED" not in text
    assert "== scaling" in text
    assert "system calls per step" in text
    assert ("gitstate" in text.split("system calls per step")[1]) or "strace is not installed" in text
