"""Whether a process named in a stored record still runs: a ``running`` node boundary records the
process that opened it (pid, start time, host, kernel boot id, pid namespace), so a reader can
tell a boundary whose writer is gone. Locks do not need this: theirs is told by a flock
(:mod:`gitstate.git.lockfile`)."""

from __future__ import annotations

import os
from typing import Any

from gitstate.git.lockfile import Owner
from gitstate.git.pids import pid_alive, pid_exists, proc_stat, process_start_time

__all__ = ["gone", "pid_alive", "process_start_time", "this_process"]


def _pid_namespace() -> str | None:
    """This process's pid namespace (Linux), so pids of another container are never compared."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


def this_process() -> dict[str, Any]:
    """This process as a record names it: pid, start time, host, boot id and pid namespace (those
    known)."""
    me = Owner.current()
    found = {"pid": me.pid, "start": process_start_time(me.pid), "host": me.host, "boot": me.boot,
             "pidns": _pid_namespace()}
    return {k: v for k, v in found.items() if v is not None}


def gone(owner: dict[str, Any] | None) -> bool:
    """Whether the process a record's ``owner`` names provably no longer runs (same machine, boot
    and pid namespace, and no process of that pid and start time, or a zombie). False when it runs,
    or when this process cannot tell (no owner, another machine or container, or no start time to
    compare)."""
    if not owner:
        return False
    pid, start, host = owner.get("pid"), owner.get("start"), owner.get("host")
    boot, pidns = owner.get("boot"), owner.get("pidns")
    if (type(pid) is not int or pid <= 0 or not isinstance(host, str) or not (start is None or type(start) is int)
            or not all(v is None or isinstance(v, str) for v in (boot, pidns))):
        return False
    me = this_process()
    if (host, boot, pidns) != (me["host"], me.get("boot"), me.get("pidns")):
        return False
    if not pid_exists(pid):
        return True
    stat = proc_stat(pid)
    if stat is not None and stat[0] in ("Z", "X"):
        return True  # killed, not yet reaped by its parent
    return start is not None and stat is not None and stat[1] != start
