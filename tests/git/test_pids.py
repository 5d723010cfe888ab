"""Whether a process runs, by its pid: a live one, an exited one, a zombie."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from gitstate.git.pids import pid_alive, process_start_time


def test_this_process_runs_an_exited_or_zombie_child_does_not() -> None:
    assert pid_alive(os.getpid()) and process_start_time(os.getpid()) is not None
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # exited, not reaped yet: a zombie
        if not pid_alive(child.pid):
            break
        time.sleep(0.01)
    assert not pid_alive(child.pid)
    child.wait()
    assert not pid_alive(child.pid)
