"""`git agentos log` pages like git: only on a terminal (a real pty here), through GIT_PAGER, then
core.pager, then PAGER, else `less` with LESS=FRX; never with --no-pager (on log or on git agentos),
and never into a pipe. Quitting the pager early ends quietly."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import git

BIN = Path(sys.executable).parent
EXE = str(BIN / "git-agentos")


def on_a_terminal(args: list[str], cwd: Path, env: dict[str, str], seconds: float = 60,
                  rows: int = 24, keys: bytes = b"") -> tuple[int, str]:
    """Run ``args`` with stdin, stdout and stderr on a fresh pty of ``rows`` lines; type ``keys``
    once output appears; return its exit code and output."""
    import fcntl
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, 100, 0, 0))
    proc = subprocess.Popen(args, cwd=cwd, stdin=slave, stdout=slave, stderr=slave, env=env, close_fds=True)
    os.close(slave)
    chunks: list[bytes] = []
    deadline = time.monotonic() + seconds  # a bound on a hung pager, not a timing assertion
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # EIO: every writer closed the pty
                    break
                if not chunk:
                    break
                chunks.append(chunk)
                if keys:
                    os.write(master, keys)
                    keys = b""
            elif proc.poll() is not None:
                break
        code = proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    return code, b"".join(chunks).decode("utf-8", "replace").replace("\r\n", "\n")


@pytest.fixture
def long_run(repo: Path) -> Path:
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}")
    import gitstate

    store = gitstate.open_store(repo)
    run = store.create_run(run_id="long")
    for i in range(60):
        run.checkpoint({"i": i})
    store.close()
    assert subprocess.run([EXE, "runs"], cwd=repo, env=env, capture_output=True, check=False).returncode == 0
    return repo


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("GIT_PAGER", "PAGER", "LESS", "LV")}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env.update(extra)
    return env


def _paged_lines(out: str, mark: str) -> int:
    return sum(1 for line in out.splitlines() if line.startswith(mark))


def test_log_pages_on_a_terminal_by_gits_rules(long_run: Path) -> None:
    tag = "sed s/^/PAGED:/"
    code, out = on_a_terminal([EXE, "log", "long"], long_run, _env(GIT_PAGER=tag))
    assert code == 0 and _paged_lines(out, "PAGED:") == 61, out  # header + 60 rows, all through the pager
    for args in ([EXE, "log", "long", "--no-pager"], [EXE, "--no-pager", "log", "long"], [EXE, "-P", "log", "long"]):
        code, out = on_a_terminal(args, long_run, _env(GIT_PAGER=tag))
        assert code == 0 and "PAGED:" not in out and out.count("\n") >= 61, (args, out)
    # core.pager, then PAGER; GIT_PAGER wins over both; "cat" means no pager
    git(long_run, "config", "core.pager", "sed s/^/CORE:/")
    assert _paged_lines(on_a_terminal([EXE, "log", "long"], long_run, _env(PAGER="sed s/^/ENV:/"))[1], "CORE:") == 61
    assert _paged_lines(on_a_terminal([EXE, "log", "long"], long_run, _env(GIT_PAGER=tag))[1], "PAGED:") == 61
    git(long_run, "config", "--unset", "core.pager")
    assert _paged_lines(on_a_terminal([EXE, "log", "long"], long_run, _env(PAGER="sed s/^/ENV:/"))[1], "ENV:") == 61
    code, out = on_a_terminal([EXE, "log", "long"], long_run, _env(GIT_PAGER="cat"))
    assert code == 0 and out.count("\n") == 61


def test_pager_gets_gits_less_defaults(long_run: Path) -> None:
    show_env = "sh -c 'cat >/dev/null; echo LESS=$LESS LV=$LV IN_USE=$GIT_PAGER_IN_USE'"
    code, out = on_a_terminal([EXE, "log", "long"], long_run, _env(GIT_PAGER=show_env))
    assert code == 0 and "LESS=FRX LV=-c IN_USE=true" in out, out
    code, out = on_a_terminal([EXE, "log", "long"], long_run, _env(GIT_PAGER=show_env, LESS="-S"))
    assert "LESS=-S " in out, out  # the user's own LESS is kept


def test_default_pager_is_less(long_run: Path, tmp_path: Path) -> None:
    """No GIT_PAGER, core.pager or PAGER: git's default, `less` (Debian's git says `pager`, its
    alternatives link to less; stand-ins on PATH record how they were called), then the real one,
    if installed, on a screen the log fits (-F: it exits by itself; "q" in case it does not)."""
    import shutil

    fake = tmp_path / "fakebin"
    fake.mkdir()
    for name in ("less", "pager"):
        (fake / name).write_text("#!/bin/sh\necho \"less called: LESS=$LESS\"\ncat >/dev/null\n")
        (fake / name).chmod(0o755)
    env = _env()
    code, out = on_a_terminal([EXE, "log", "long"], long_run, dict(env, PATH=f"{fake}{os.pathsep}{env['PATH']}"))
    assert code == 0 and "less called: LESS=FRX" in out, out
    if shutil.which("less", path=env["PATH"]) is not None:
        code, out = on_a_terminal([EXE, "log", "long"], long_run, env, rows=100, keys=b"q")
        assert code == 0 and _paged_lines(out, "") >= 61 and "STEP" in out, out


def test_no_pager_into_a_pipe_and_early_quit_is_quiet(long_run: Path) -> None:
    done = subprocess.run([EXE, "log", "long"], cwd=long_run, env=_env(GIT_PAGER="sed s/^/PAGED:/"),
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0 and "PAGED:" not in done.stdout and len(done.stdout.splitlines()) == 61
    code, out = on_a_terminal([EXE, "log", "long"], long_run, _env(GIT_PAGER="head -n 3"))
    assert code == 0 and "Traceback" not in out and "Error" not in out, out
    assert len([line for line in out.splitlines() if line.strip()]) == 3
