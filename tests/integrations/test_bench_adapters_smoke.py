"""Smoke test of scripts/bench_adapters.py: a tiny run completes and prints the side-by-side table
for every integration installed here. Timings are never asserted (they depend on the machine)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_adapters.py"


def test_bench_adapters_quick_run(tmp_path: Path) -> None:
    out = tmp_path / "figures.json"
    env = {k: v for k, v in os.environ.items() if k not in ("GIT_DIR", "GIT_WORK_TREE", "AGENTOS_REPO")}
    proc = subprocess.run([sys.executable, str(SCRIPT), "--ops", "6", "--rounds", "2", "--dir", str(tmp_path / "work"),
                           "--json", str(out)], capture_output=True, text=True, env=env, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr
    for name in ("SQLiteSession", "FileCheckpointStorage", "InMemoryStore", "SqliteStore", "bytes on disk"):
        assert name in proc.stdout, name
    figures = json.loads(out.read_text())
    assert figures["skipped"] == ["crewai"]  # it lives in .venv-crewai
    write = figures["results"]["OpenAI Agents session vs SQLiteSession"]["write (add_items)"]
    assert write["ratio_min"] <= write["ratio"] <= write["ratio_max"] and write["ratio"] > 0
    assert figures["rounds"] == 2
    for bar in ("OpenAI Agents session write (add_items) vs SQLiteSession", "LangGraph memory write (put) vs SqliteStore"):
        assert figures["bars"][bar]["bar"] == 2.0
        assert f"bar: {bar} ≤ 2.0x: median" in proc.stdout
