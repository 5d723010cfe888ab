"""Bounded housekeeping: gitstate packs the loose objects it wrote, so a repository never crosses
git's ``gc.auto`` threshold (6,700 loose objects) because of checkpoints, and merges its own packs
when they become many (below ``gc.autoPackLimit``). It never deletes anything that is not also in a
pack it just wrote, never touches packs it did not write, and never runs ``git gc`` or prunes.

Writers append the ids of the loose objects they create to ``agentos/loose.journal``; at
:data:`PACK_THRESHOLD` ids the writer that notices takes ``agentos/housekeeping.lock`` (a
:class:`lockfile.FileLock`), packs them (``git pack-objects``) and removes the loose copies; those
packs, listed in ``agentos/packs``, are merged into one at :data:`MERGE_THRESHOLD`. Transactions'
packs are listed in ``agentos/tx-packs`` and merged geometrically (:func:`merge_tx_packs`). At
:data:`REF_PACK_THRESHOLD` loose refs under ``refs/agentos/`` they go to ``packed-refs``."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Iterable

import pygit2

from gitstate.errors import GitStateError
from gitstate.git import lockfile, packs, refs, safeopen
from gitstate.git.command import run_git
from gitstate.git.durability import fsync_dir
from gitstate.git.objects import KEEP_PREFIX
from gitstate.git.safeopen import NotRegularFileError

PACK_THRESHOLD = 1000  # loose objects written by gitstate before they are packed
AUTO_MIN_AGE = 30.0  # seconds: with loose writes on, the automatic packing leaves younger loose objects to their writer
MERGE_THRESHOLD = 12  # gitstate packs before they are merged (git's gc.autoPackLimit is 50)
REF_PACK_THRESHOLD = 500  # loose refs under refs/agentos/ before they are moved to packed-refs
LEFTOVER_AGE = 120.0  # seconds: a private pack directory this old was left by a killed packer


_MADE: set[str] = set()  # agentos directories known to exist (one makedirs per process, not per write)


def agentos_dir(common_dir: str) -> str:
    path = os.path.join(common_dir, "agentos")
    if path not in _MADE:
        os.makedirs(path, exist_ok=True)
        _MADE.add(path)
    return path


def _append(path: str, data: bytes) -> int:
    """Append ``data`` to the list file ``path`` (made if missing, its folder too); return its size.

    A packer or merger takes a list aside by renaming it before reading it, so a line that lands
    in the list after that is appended again to the new one (a name listed twice is read once). A
    FIFO, device or socket in the list's place is replaced (opening it would block)."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
    for _attempt in range(8):
        try:
            fd = safeopen.open_fd(path, flags, 0o644, replace_special=True)
        except FileNotFoundError:  # the directory was removed since we made it
            _MADE.discard(os.path.dirname(path))
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fd = safeopen.open_fd(path, flags, 0o644, replace_special=True)
        try:
            os.write(fd, data)
            written = os.fstat(fd)
        finally:
            os.close(fd)
        try:
            if os.stat(path).st_ino == written.st_ino:
                return written.st_size
        except FileNotFoundError:
            pass
    return written.st_size


def _journal(common_dir: str) -> str:
    return os.path.join(agentos_dir(common_dir), "loose.journal")


def record(common_dir: str, oids: Iterable[str]) -> int:
    """Append written object ids to the journal; return the journal's size in entries."""
    data = "".join(f"{oid}\n" for oid in oids).encode()
    if not data:
        return 0
    return _append(_journal(common_dir), data) // 41


def _loose_path(common_dir: str, oid: str) -> str:
    return os.path.join(common_dir, "objects", oid[:2], oid[2:])


PACK_TMP_PREFIX = "agentos-pack-"  # private directories under objects/ that packs are written into


def pack_objects(common_dir: str, pack_dir: str, ids: str) -> str | None:
    """Write the objects ``ids`` names (one hex id a line) into one new pack with deltas (``git
    pack-objects``, run with ``LC_ALL=C``) and put it in place; return its name (``pack-<hash>``),
    or ``None`` when git failed (nothing installed).

    git writes into a private directory beside the pack directory (same file system), where the
    only pack is ours by construction (the pack directory can gain other packs meanwhile: a
    concurrent ``git gc``, fetch or push), then its files are renamed into place, the ``.idx``
    last since readers find packs by their index, and the directory is flushed. A pack of the same
    name already there has the same content, so it is kept as it is. ``pack.packSizeLimit`` is 0
    for the run (split packs would be chosen again at every merge) and ``pack.indexVersion`` 2 (the
    version gitstate reads)."""
    private = tempfile.mkdtemp(prefix=PACK_TMP_PREFIX, dir=os.path.dirname(pack_dir))
    try:
        done = run_git(common_dir, ["-c", "pack.packSizeLimit=0", "-c", "pack.indexVersion=2", "pack-objects",
                                    "-q", "--threads=1", "--delta-base-offset", "--depth=20",
                                    os.path.join(private, "pack")], stdin=ids)
        name = "pack-" + done.stdout.strip()
        if done.returncode != 0 or not packs.is_pack_name(name):
            return None
        for entry in sorted(os.listdir(private), key=lambda n: n.endswith(".idx")):  # the index last
            target = os.path.join(pack_dir, name + entry[entry.rfind("."):])
            if not os.path.exists(target):
                os.rename(os.path.join(private, entry), target)
        fsync_dir(pack_dir)  # the pack is durable before any loose copy or source pack is removed
        return name
    finally:
        shutil.rmtree(private, ignore_errors=True)


def _remove_leftover_dirs(common_dir: str) -> None:
    """Remove the private pack directories and ``tx-packs.kept`` copies of killed packers and
    merges (with the lock held; the age limit spares one that a packer on another machine, whose
    flock this kernel may not see, still writes)."""
    objects = os.path.join(common_dir, "objects")
    kept_tmp = os.path.join(glob.escape(agentos_dir(common_dir)), TX_PACKS + ".kept.*.tmp")
    for path in glob.glob(os.path.join(glob.escape(objects), PACK_TMP_PREFIX + "*")) + glob.glob(kept_tmp):
        try:
            if time.time() - os.stat(path).st_mtime > LEFTOVER_AGE:
                if os.path.isdir(path):
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    os.unlink(path)
        except OSError:
            pass


def read_names(path: str) -> list[str]:
    try:
        with safeopen.open_file(path, encoding="ascii", errors="replace") as fh:
            return [line.strip() for line in fh if line.strip()]
    except OSError:
        return []


def write_names(path: str, names: Iterable[str]) -> None:
    """Replace the list file ``path`` by ``names`` (through a temporary file renamed over it)."""
    tmp = f"{path}.{os.getpid()}.tmp"
    with safeopen.open_file(tmp, "w", encoding="ascii", replace_special=True) as fh:
        fh.write("".join(n + "\n" for n in names))
    os.replace(tmp, path)


def lock_housekeeping(common_dir: str, wait: float) -> lockfile.FileLock | None:
    """The housekeeping lock, waited for up to ``wait`` seconds: ``None`` when another process holds
    it (with a ``wait``, :class:`HousekeepingBusy` when it held it all that time)."""
    path = os.path.join(agentos_dir(common_dir), "housekeeping.lock")
    deadline = time.monotonic() + wait
    while (lock := lockfile.acquire(path)) is None:
        if time.monotonic() >= deadline:
            if wait > 0:
                raise HousekeepingBusy(common_dir)
            return None
        time.sleep(0.005)
    return lock


def pack_loose(repo: pygit2.Repository, common_dir: str, min_age: float = 0.0) -> int:
    """Pack the journaled loose objects now (if no other process is doing it); return how many.

    Safe to call at any time and from any process: it packs only objects listed in the journal that
    are still loose, and deletes a loose file only after the pack holding it is complete. (``repo``
    is not used: git reads the objects.) ``min_age``: objects written less than that many seconds
    ago are left loose and listed again, for the next step: the writer that wrote them packs them
    itself soon (:meth:`gitstate.git.objects.ObjectWriter.pack_published`), and packing them here
    too would write them twice (the automatic packing of a store that writes small writes loose
    passes :data:`AUTO_MIN_AGE`)."""
    lock = lock_housekeeping(common_dir, 0.0)
    if lock is None:
        return 0
    with lock:
        return _pack_locked(common_dir, min_age)


def pack_journaled(repo: pygit2.Repository, common_dir: str, steps: int = 1000) -> int:
    """Pack every journaled loose object now, step after step (each packs at most
    :data:`PACK_STEP`), until none is left or another process holds the housekeeping lock;
    returns how many were packed. Before gc rewrites gitstate's packs, so that what small writes
    left loose is given back too."""
    total = 0
    for _ in range(steps):
        done = pack_loose(repo, common_dir)
        if done == 0:
            break
        total += done
    return total


def _take_aside(path: str, suffix: str) -> list[str]:
    """Rename the list ``path`` aside to ``<path>.<pid>.<suffix>`` (names appended from now on land
    in a fresh list; a missing list is fine) and return every list taken aside so, this one and
    those a killed process left, sorted. Called with the housekeeping lock held."""
    try:
        os.rename(path, f"{path}.{os.getpid()}.{suffix}")
    except FileNotFoundError:
        pass
    return sorted(glob.glob(glob.escape(path) + f".*.{suffix}"))


PACK_STEP = 5000  # loose objects one pack step packs at most; a larger backlog takes more steps


def _pack_locked(common_dir: str, min_age: float = 0.0) -> int:
    journal = _journal(common_dir)
    # With the lock held no other packer runs, so every other ".packing" file was left by a
    # packer that was killed: its objects are packed now (at most PACK_STEP of them per step).
    batches = _take_aside(journal, "packing")
    if not batches:
        return 0
    _remove_leftover_dirs(common_dir)
    remove_orphan_temps(common_dir)
    wanted: set[str] = set()
    for batch in batches:
        try:
            with safeopen.open_file(batch, encoding="ascii", errors="replace") as fh:
                wanted.update(line.strip() for line in fh if len(line.strip()) == 40)
        except NotRegularFileError:
            continue  # a FIFO or such taken aside as the journal: it lists nothing (removed below)
    young: list[str] = []
    if min_age > 0:
        born_after = time.time() - min_age
        loose: list[str] = []
        for oid in sorted(wanted):
            try:
                (young if os.stat(_loose_path(common_dir, oid)).st_mtime > born_after else loose).append(oid)
            except OSError:
                pass  # packed (by its writer, or by an earlier step) or pruned: nothing to do
    else:
        loose = sorted(o for o in wanted if os.path.exists(_loose_path(common_dir, o)))
    later = loose[PACK_STEP:] + young
    loose = loose[:PACK_STEP]
    if later:  # the rest is written back for the next step before the batches go
        rest = f"{journal}.{os.getpid()}-rest.packing"
        write_names(rest, later)
        batches = [b for b in batches if b != rest]
    pack_dir = os.path.join(common_dir, "objects", "pack")
    os.makedirs(pack_dir, exist_ok=True)
    name = None
    if loose:
        name = pack_objects(common_dir, pack_dir, "".join(o + "\n" for o in loose))
        if name is None:
            raise OSError(f"git pack-objects could not pack {len(loose)} loose objects")
    listed = os.path.join(agentos_dir(common_dir), "packs")
    ours = [n for n in read_names(listed) if os.path.exists(os.path.join(pack_dir, n + ".idx"))]
    if name:
        if name not in ours:
            ours.append(name)
        write_names(listed, ours)
        for oid in loose:
            try:
                os.unlink(_loose_path(common_dir, oid))
            except OSError:
                pass
    for batch in batches:
        try:
            os.unlink(batch)
        except FileNotFoundError:
            pass
    # Merging deletes packs: not while the user's `git gc` runs (it fails when a pack it listed
    # goes away).
    if len(ours) >= MERGE_THRESHOLD and not git_gc_running(common_dir):
        merged = _merge_with_deltas(common_dir, pack_dir, ours)
        if merged is not None:
            write_names(listed, [merged])
    if refs.count_loose_refs(common_dir) >= REF_PACK_THRESHOLD:
        refs.pack_refs(common_dir)
    return len(loose)


_TEMP_PREFIXES = ("tmp_obj_", "tmp_object_git2_")  # ours (ObjectWriter) and libgit2's loose temps


def remove_orphan_temps(common_dir: str, max_age: float | None = None) -> int:
    """Remove temporary loose-object files that killed writers left in ``objects/??/`` (gitstate's
    ``tmp_obj_*`` and libgit2's ``tmp_object_git2_*``) older than ``max_age`` seconds (default
    :data:`ORPHAN_AGE`); returns how many. Lists the 256 fan-out folders: runs with the pack step."""
    objects = os.path.join(common_dir, "objects")
    try:
        fanout = [os.path.join(objects, d) for d in os.listdir(objects) if len(d) == 2]
    except OSError:
        return 0
    old = [path for directory in fanout for path in packs.old_files(
        directory, lambda n: n.startswith(_TEMP_PREFIXES), ORPHAN_AGE if max_age is None else max_age)]
    return len(_remove(old))


def _remove(paths: Iterable[str]) -> list[str]:
    """Remove ``paths``; return those removed."""
    removed = []
    for path in paths:
        try:
            os.unlink(path)
        except OSError:
            continue
        removed.append(path)
    return removed


def git_gc_running(common_dir: str) -> bool:
    """Whether a ``git gc`` runs on this repository now: its ``gc.pid`` names a live process of
    this host (git's own test, with its 12-hour limit). gitstate then defers deleting packs, which
    makes a running ``git gc`` fail ("unable to add recent objects")."""
    path = os.path.join(common_dir, "gc.pid")
    try:
        with safeopen.open_file(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read(512)
        age = time.time() - os.stat(path).st_mtime
    except OSError:
        return False
    parts = text.split()
    if len(parts) < 2 or not parts[0].isdigit() or age > 12 * 3600:
        return False
    if parts[1] != socket.gethostname():
        return True  # another machine's gc (a shared file system): assume it runs
    try:
        os.kill(int(parts[0]), 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def maybe_pack(repo: pygit2.Repository, common_dir: str, journal_size: int, min_age: float = 0.0) -> None:
    """Pack when the journal has reached the threshold (called after each checkpoint); ``min_age``
    as :func:`pack_loose` takes it."""
    if journal_size >= PACK_THRESHOLD:
        pack_loose(repo, common_dir, min_age)


# -- packs written by transactions ---------------------------------------------------------------

TX_PACKS = "tx-packs"  # agentos/tx-packs: names of the packs transactions wrote, one per line
TX_MERGE_AT = 16  # packs written since the last merge before a geometric merge is worth a background pass
SWEEP_EVERY = 60.0  # seconds between two sweeps of killed writers' leftovers by one process
ORPHAN_AGE = 3600.0  # seconds before a dead writer's temporary pack files are removed


_TX_PACKS_PATHS: dict[str, str] = {}  # common dir -> its tx-packs list


def record_tx_pack(common_dir: str, name: str) -> int:
    """Note a pack a transaction wrote; return how many transaction packs are listed."""
    path = _TX_PACKS_PATHS.get(common_dir)
    if path is None:  # (a folder removed since is made again by _append)
        path = _TX_PACKS_PATHS[common_dir] = os.path.join(agentos_dir(common_dir), TX_PACKS)
    size = _append(path, f"{name}\n".encode("ascii"))
    return size // (len(name) + 1)


class HousekeepingBusy(Exception):
    """Another process held the housekeeping lock for the whole wait a merge was given."""


def merge_tx_packs(common_dir: str, wait: float = 0.0) -> str | None:
    """Merge transaction packs geometrically (the packs ``git repack --geometric=2`` would choose,
    merged by :func:`_merge_with_deltas`) so their number stays logarithmic, and remove what killed
    writers left (:func:`_sweep_leftovers`). Runs under the housekeeping lock (see :func:`lock_housekeeping`
    for ``wait``); returns the merged pack's name, or ``None`` when nothing was merged.

    Writers append their packs to ``tx-packs``; the packs a merge leaves are listed in
    ``tx-packs.kept``, so ``tx-packs`` holds the packs written since the last merge. It is taken
    aside by a rename first (names appended meanwhile land in a fresh list); a killed merge leaves
    its ``.merging`` file, read by the next one."""
    lock = lock_housekeeping(common_dir, wait)
    if lock is None:
        return None
    with lock:
        return _merge_tx_locked(common_dir, agentos_dir(common_dir))


def remove_dead_keeps(common_dir: str, max_age: float = ORPHAN_AGE) -> list[str]:
    """Remove the ``.keep`` files of transactions whose writer is gone: its flock on the file is
    free (:func:`lockfile.is_stale`), or, for one whose holder this kernel cannot see (another
    machine, an older gitstate), older than ``max_age`` seconds. A ``.keep`` gitstate did not write
    is never touched. Returns the packs whose ``.keep`` was removed."""
    pack_dir = os.path.join(common_dir, "objects", "pack")
    removed = []
    for path in glob.glob(os.path.join(glob.escape(pack_dir), "pack-*.keep")):
        try:
            with safeopen.open_file(path, "rb") as fh:
                ours = fh.read(len(KEEP_PREFIX)) == KEEP_PREFIX
        except OSError:
            continue
        if ours and lockfile.is_stale(path, max_age, prefix=KEEP_PREFIX):
            try:
                os.unlink(path)
                removed.append(os.path.basename(path)[: -len(".keep")])
            except OSError:
                pass
    return removed


def leftover_temps(common_dir: str, max_age: float = ORPHAN_AGE) -> list[str]:
    """gitstate's temporary pack files (:func:`packs.is_temp_name`) older than ``max_age`` seconds:
    left by writers killed between writing a pack and renaming it into place (``git count-objects
    -v`` counts them as garbage). git's own there are never listed (``git prune`` removes them)."""
    return packs.old_files(os.path.join(common_dir, "objects", "pack"), packs.is_temp_name, max_age)


def remove_leftover_temps(common_dir: str, max_age: float = ORPHAN_AGE) -> list[str]:
    """Remove :func:`leftover_temps` (``verify --repair``; merges remove them too); returns them."""
    return _remove(leftover_temps(common_dir, max_age))


_SWEPT: dict[str, float] = {}  # common dir -> when this process last removed what killed writers left


def _sweep_leftovers(common_dir: str, pack_dir: str) -> None:
    """Remove what killed writers and merges left (old temporary and orphan pack files, the
    ``.keep`` of dead writers, private pack folders): at a process's first merge, then at most
    every :data:`SWEEP_EVERY` seconds (scanning at every merge cost more than the merge's work)."""
    now = time.monotonic()
    last = _SWEPT.get(common_dir)
    if last is not None and now - last < SWEEP_EVERY:
        return
    if len(_SWEPT) > 64:
        _SWEPT.clear()
    _SWEPT[common_dir] = now
    packs.remove_orphans(pack_dir, ORPHAN_AGE)
    remove_dead_keeps(common_dir)
    _remove_leftover_dirs(common_dir)


def _merge_tx_locked(common_dir: str, agentos: str) -> str | None:
    pack_dir = os.path.join(common_dir, "objects", "pack")
    _sweep_leftovers(common_dir, pack_dir)
    path = os.path.join(agentos, TX_PACKS)
    sources = _take_aside(path, "merging")
    kept_path = path + ".kept"
    names = list(dict.fromkeys(n for src in [kept_path, *sources] for n in read_names(src)))
    weights = []
    kept = []  # packs of transactions still under way (or of killed ones, until their .keep goes)
    for name in names:
        if os.path.exists(os.path.join(pack_dir, name + ".keep")):
            kept.append(name)
            continue
        try:
            weights.append((name, packs.object_count(os.path.join(pack_dir, name + ".idx"))))
        except (OSError, GitStateError):
            continue  # removed meanwhile (a user's repack) or damaged: not ours to merge now
    chosen = packs.geometric_plan(weights)
    if chosen and git_gc_running(common_dir):
        chosen = []  # deleting packs under a running `git gc` makes it fail: merge next time
    merged = _merge_with_deltas(common_dir, pack_dir, chosen) if chosen else None
    if merged is None:
        chosen = []  # nothing merged: every pack stays listed
    keep = kept + [n for n, _w in weights if n not in chosen] + ([merged] if merged else [])
    write_names(kept_path, keep)  # before the sources go: a crash in between only lists names twice
    for src in sources:
        os.unlink(src)
    return merged


def _merge_with_deltas(common_dir: str, pack_dir: str, chosen: list[str]) -> str | None:
    """Write every object of the packs ``chosen`` into one pack with deltas (:func:`pack_objects`),
    then remove the merged-away packs; returns its name, or ``None`` when nothing was merged (every
    pack left in place).

    git is given the ids the chosen packs' indexes list (:func:`packs.index_id_lines`, made at C
    speed: this thread holds the GIL beside the writer's for a moment only; walking the packs'
    commits in Python, as this once did, doubled a LangGraph step while merges ran). Unnamed
    objects are sorted by size for delta search, which still finds the versions of a list chunk as
    deltas of each other. Every object of the chosen packs goes into the new pack, also those
    another pack holds too: ``pack-objects --stdin-packs`` would leave those out, and a concurrent
    ``git repack --geometric`` doing the same with our packs could then delete the only other copy.
    Only gitstate's own packs are chosen, and only they are removed, once the new one is in place."""
    try:
        lines = "".join(packs.index_id_lines(os.path.join(pack_dir, name + ".idx")) for name in chosen)
    except (OSError, GitStateError):
        return None  # removed or damaged meanwhile: merge nothing now
    name = pack_objects(common_dir, pack_dir, lines)
    if name is not None:
        packs.remove_packs(pack_dir, [source for source in chosen if source != name])
    return name
