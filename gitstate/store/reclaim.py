"""Giving bytes back after ``git agentos gc`` removed checkpoints: gitstate's own packs are
rewritten without the objects nothing reaches any more, under the housekeeping lock, by the
protocol of :func:`reclaim`. Built on the plumbing's housekeeping (its lock, its pack lists and
``git pack-objects``); the user's packs and loose objects are never touched."""

from __future__ import annotations

import glob
import os
from collections.abc import Callable

from gitstate.errors import GitStateError
from gitstate.git import lockfile, packs, safeopen
from gitstate.store import housekeeping

RECLAIM_WAIT = 30.0  # seconds gc waits for another process's housekeeping before giving up
RECLAIM_ROUNDS = 4  # reachability passes before the old packs go (each one packs what the last missed)


class Reclaimed:
    """What :func:`reclaim` did: the packs it removed and wrote, and how many objects it dropped."""

    def __init__(self) -> None:
        self.removed: list[str] = []
        self.written: list[str] = []
        self.dropped = 0
        self.deferred = ""  # why nothing was removed, when nothing was

    def to_dict(self) -> dict[str, object]:
        """A JSON-friendly form."""
        return {"removed_packs": self.removed, "written_packs": self.written, "dropped_objects": self.dropped,
                "deferred": self.deferred or None}


def own_packs(common_dir: str) -> list[str]:
    """gitstate's own packs that are in place and not kept (no ``.keep``: no transaction under way
    uses them): those listed in ``agentos/packs``, ``agentos/tx-packs`` and ``tx-packs.kept``."""
    agentos = housekeeping.agentos_dir(common_dir)
    pack_dir = os.path.join(common_dir, "objects", "pack")
    lists = [os.path.join(agentos, "packs"), os.path.join(agentos, housekeeping.TX_PACKS), os.path.join(agentos, housekeeping.TX_PACKS + ".kept")]
    lists += glob.glob(glob.escape(os.path.join(agentos, housekeeping.TX_PACKS)) + ".*.merging")
    names = dict.fromkeys(n for path in lists for n in housekeeping.read_names(path) if packs.is_pack_name(n))
    return [n for n in names if os.path.exists(os.path.join(pack_dir, n + ".idx"))
            and not os.path.exists(os.path.join(pack_dir, n + ".keep"))]


def bump_gc_epoch(common_dir: str) -> None:
    """Rewrite ``objects/info/packs`` (the list of packs ``git update-server-info`` writes, which
    every ``git repack`` rewrites too) so that :func:`gitstate.git.objects.gc_epoch` changes: every
    writer's next transaction then stops trusting its caches of objects known to exist and writes
    again what it stages instead of naming a copy that gc is about to drop."""
    objects = os.path.join(common_dir, "objects")
    info = os.path.join(objects, "info")
    os.makedirs(info, exist_ok=True)
    names = sorted(n for n in os.listdir(os.path.join(objects, "pack")) if n.endswith(".pack"))
    path = os.path.join(info, "packs")
    tmp = f"{path}.{os.getpid()}.agentos.tmp"
    with safeopen.open_file(tmp, "w", encoding="ascii", replace_special=True) as fh:
        fh.write("".join(f"P {n}\n" for n in names) + "\n")
    os.replace(tmp, path)


def reclaim(common_dir: str, reachable: Callable[[], set[str] | None], wait: float = RECLAIM_WAIT) -> Reclaimed:
    """Rewrite gitstate's own packs (:func:`own_packs`) without the objects nothing reaches, and
    remove the old ones; the user's packs and loose objects are never touched.

    ``reachable()`` returns every object id some ref, reflog or index reaches (``None``: it could
    not tell, and nothing is removed). The protocol, under the housekeeping lock (no pack, merge or
    other gc meanwhile): once every transaction under way has ended (writers hold ``agentos/gc.lock``
    shared while one runs, :class:`lockfile.Gate`), the gc epoch is bumped (:func:`bump_gc_epoch`), so transactions that
    begin from now on write again every object they stage; then the objects of the old packs that
    ``reachable()`` names go into one new pack; ``reachable()`` is asked again and what it names
    now that the new packs lack (published meanwhile by a transaction that began before the bump)
    is packed too, until a pass finds nothing new; only then do the old packs go (a pack that got a
    ``.keep`` meanwhile stays), and the epoch is bumped again. Packs written after the list was
    read are never touched. Deferred (nothing removed) while a ``git gc`` runs."""
    result = Reclaimed()
    lock = housekeeping.lock_housekeeping(common_dir, wait)
    assert lock is not None
    with lock:
        pack_dir = os.path.join(common_dir, "objects", "pack")
        candidates = own_packs(common_dir)
        if not candidates:
            return result
        # every transaction under way ends first (writers hold the gate while they run): one that
        # began before the bump could name an object of a pack about to go
        with lockfile.Gate.exclusive(os.path.join(housekeeping.agentos_dir(common_dir), "gc.lock"), wait) as free:
            if not free:
                result.deferred = "writers kept the store busy"
                return result
            bump_gc_epoch(common_dir)
        ids: set[str] = set()
        for name in candidates:
            try:
                ids.update(packs.index_id_lines(os.path.join(pack_dir, name + ".idx")).split())
            except (OSError, GitStateError):
                result.deferred = f"cannot read {name}.idx"
                return result
        kept: set[str] = set()
        settled = False
        for _round in range(RECLAIM_ROUNDS):
            found = reachable()
            if found is None:
                result.deferred = "could not list the reachable objects"
                return result
            more = sorted((ids & found) - kept)
            if not more:
                settled = True
                break
            new = housekeeping.pack_objects(common_dir, pack_dir, "".join(o + "\n" for o in more))
            if new is None:
                result.deferred = "git pack-objects failed"
                return result
            result.written.append(new)
            kept.update(more)
        if not settled:
            result.deferred = "the store kept changing"
            return result
        if housekeeping.git_gc_running(common_dir):
            result.deferred = "a git gc is running"
            return result
        doomed = [n for n in candidates if n not in result.written]
        agentos = housekeeping.agentos_dir(common_dir)
        # the lists first (a pack listed but gone is skipped by every reader of the lists)
        kept_path = os.path.join(agentos, housekeeping.TX_PACKS + ".kept")
        gone = set(doomed)
        housekeeping.write_names(kept_path, [n for n in housekeeping.read_names(kept_path) if n not in gone] +
                     [n for n in result.written if n not in housekeeping.read_names(kept_path)])
        listed = os.path.join(agentos, "packs")
        if os.path.exists(listed):
            housekeeping.write_names(listed, [n for n in housekeeping.read_names(listed) if n not in gone])
        packs.remove_packs(pack_dir, doomed)
        result.removed = [n for n in doomed if not os.path.exists(os.path.join(pack_dir, n + ".idx"))]
        result.dropped = len(ids - kept)
        bump_gc_epoch(common_dir)
        stamp = os.path.join(agentos, "merged")  # other processes' handles reopen the object database
        with safeopen.open_file(stamp, "a", encoding="ascii", replace_special=True):
            pass
        os.utime(stamp)
    return result
