"""Paging long output as git does: only when stdout is a terminal, through the pager git would
choose for the repository (``GIT_PAGER``, ``core.pager``, ``PAGER``, else ``less``; ``cat`` or an
empty value means none), with git's defaults ``LESS=FRX`` and ``LV=-c`` unless set, and never with
``--no-pager`` (on the command or on ``git agentos``). Quitting the pager early ends the output
quietly."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import click

from gitstate.git.command import PAGER_ENV, configured_pager

from . import output as out
from .handle import StoreHandle


def wanted(no_pager: bool) -> bool:
    """Whether output should be paged: stdout is a terminal and neither this command nor
    ``git agentos`` was given ``--no-pager``."""
    if no_pager:
        return False
    ctx = click.get_current_context(silent=True)
    handle = ctx.find_object(StoreHandle) if ctx is not None else None
    if handle is not None and handle.no_pager:
        return False
    return out.is_tty()


@contextmanager
def paged(git_dir: str | None, cwd: str | None, no_pager: bool = False) -> Iterator[None]:
    """Send what is printed inside the block to the pager (when :func:`wanted`)."""
    command = configured_pager(git_dir, cwd) if wanted(no_pager) else ""
    if not command:
        yield
        return
    env = dict(os.environ)
    for key, value in PAGER_ENV.items():
        env.setdefault(key, value)
    env["GIT_PAGER_IN_USE"] = "true"
    try:
        proc = subprocess.Popen(command, shell=True, stdin=subprocess.PIPE, env=env, cwd=cwd)  # noqa: S602 - git runs its pager through the shell too
    except OSError:
        yield  # no pager to start: print as usual
        return
    assert proc.stdin is not None
    stream = io.TextIOWrapper(proc.stdin, encoding="utf-8", errors="replace")
    saved = sys.stdout
    sys.stdout = stream
    out.set_paged(True)  # styles on, as on the terminal the pager draws on (less -R shows them)
    ctx = click.get_current_context(silent=True)
    saved_color = ctx.color if ctx is not None else None
    if ctx is not None:
        ctx.color = True  # click.echo would strip styles written to a pipe
    try:
        yield
        stream.flush()
    except BrokenPipeError:
        pass  # the user quit the pager: the rest is not wanted
    finally:
        sys.stdout = saved
        out.set_paged(False)
        if ctx is not None:
            ctx.color = saved_color
        try:
            stream.close()
        except (BrokenPipeError, OSError, ValueError):
            pass
        proc.wait()
