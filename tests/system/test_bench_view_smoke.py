"""Smoke test of scripts/bench_view.py: a --quick run builds its small stores with the public API,
measures every request through the real server and writes the HTML file. Timings are never
asserted (they depend on the machine)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_view.py"


def test_bench_view_quick_run_prints_every_figure(tmp_path: Path) -> None:
    out_json = tmp_path / "figures.json"
    env = {k: v for k, v in os.environ.items() if k not in ("GIT_DIR", "GIT_WORK_TREE", "AGENTOS_REPO")}
    proc = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--work", str(tmp_path / "work"),
                           "--json", str(out_json)], capture_output=True, text=True, env=env, timeout=600,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for line in ("runs page (100 newest)", "graph (first 300 rows)", "node spans", "one checkpoint (tip)",
                 "diff tip vs parent", "live-update token (run)", "static HTML of a run with"):
        assert line in proc.stdout, line
    figures = json.loads(out_json.read_text())
    assert figures["static_html_bytes"] > 0 and figures["static_html_checkpoints"] >= 100
