"""Smoke test of scripts/bench_push.py: a tiny run over smart HTTP completes and prints every
figure and bar; its timings are never asserted."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_push.py"


def test_bench_push_quick_run(tmp_path: Path) -> None:
    env = dict(os.environ, TMPDIR=str(tmp_path))
    done = subprocess.run([sys.executable, str(SCRIPT), "--runs", "20", "--big", "60", "--limit-runs", "40",
                           "--limit", "12", "--repeat", "1"], capture_output=True, text=True, env=env, timeout=600,
                          check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    text = done.stdout
    for figure in ("  push ", "  pull (fresh clone, all runs) ", "  pull r000030 ", "the run's own objects packed",
                   "plain git push of everything", "pushChunk default (1000)", "pushChunk 30"):
        assert figure in text, (figure, text)
    assert "bar (<= 2x time, <= 2x the run's bytes): time " in text  # printed, not asserted: timings
    assert text.count("bar (all arrive in several pushes, fresh clone identical): PASS") == 2, text
    assert text.count("all arrived: True") == 2 and text.count("identical ids: True") == 2, text
    assert "0 refs arrived (refused whole)" in text
