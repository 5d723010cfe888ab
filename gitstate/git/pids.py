"""Whether a process of this machine runs, by its pid: for the records and folders gitstate names
by the process that made them (node boundaries, push sessions, snapshot quarantines)."""

from __future__ import annotations

import os


def proc_stat(pid: int) -> tuple[str, int] | None:
    """``(state, start time)`` of a process from ``/proc/<pid>/stat`` (fields 3 and 22; the start
    time is in clock ticks since boot), or None where there is no such file or it is unreadable."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    # field 2 is "(comm)" and comm may hold spaces and parentheses: split after the last ")"
    fields = data[data.rfind(b")") + 2:].split()
    try:
        return fields[0].decode("ascii", "replace"), int(fields[19])
    except (IndexError, ValueError):
        return None


def process_start_time(pid: int) -> int | None:
    """The start time of process ``pid`` (Linux; None elsewhere or when unreadable)."""
    stat = proc_stat(pid)
    return stat[1] if stat is not None else None


def pid_exists(pid: int) -> bool:
    """Whether a process ``pid`` exists on this machine (one that cannot be told does)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by another user
    except OSError:
        return True  # cannot tell: assume it exists (the safe side)
    return True


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` of this machine runs (a zombie, killed but not reaped yet, does not;
    one that cannot be told, another user's, does)."""
    if not pid_exists(pid):
        return False
    stat = proc_stat(pid)
    return stat is None or stat[0] != "Z"
