"""Helpers for the sharing tests: a real ``git daemon`` on 127.0.0.1 (receive-pack enabled), bare
repositories served over it or over ``file://``, and clones that play separate machines."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from conftest import git, make_repo


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def serving(argv: list[str], port: int, what: str, url: str) -> Iterator[str]:
    """Start the server ``argv`` (listening on 127.0.0.1:``port``) in a process group of its own,
    wait until it accepts connections, yield ``url``; the group is killed on exit."""
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 30  # readiness wait, not a timing assertion
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    err = proc.stderr.read().decode() if proc.stderr else ""
                    raise RuntimeError(f"{what} did not start: {err}") from None
                time.sleep(0.02)
        yield url
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the whole group: killing `git` alone left git-daemon running
        except ProcessLookupError:
            pass
        proc.wait()


@contextmanager
def git_daemon(base: Path) -> Iterator[str]:
    """Serve every repository under ``base`` at ``git://127.0.0.1:<port>/`` (push enabled); the
    daemon is killed on exit."""
    port = free_port()
    with serving(["git", "daemon", "--reuseaddr", "--export-all", "--enable=receive-pack", f"--base-path={base}",
                  "--listen=127.0.0.1", f"--port={port}", "--informative-errors", str(base)],
                 port, "git daemon", f"git://127.0.0.1:{port}") as url:
        yield url


def bare(path: Path) -> Path:
    """A fresh bare repository."""
    subprocess.run(["git", "init", "-q", "--bare", str(path)], check=True)
    return path


def machine(path: Path, url: str, allow: str | None = "origin") -> Path:
    """A repository playing one machine, with ``origin`` at ``url`` and pushes of checkpoints to
    ``allow`` permitted (``None``: leave ``agentos.pushRemotes`` unset)."""
    make_repo(path)
    git(path, "remote", "add", "origin", url)
    if allow is not None:
        git(path, "config", "agentos.pushRemotes", allow)
    return path
