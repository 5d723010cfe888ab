"""A quarantine for the objects ``git add`` writes during a snapshot, so that a file's bytes reach
the object database only once the secrets policy has seen them.

git writes the objects of ``git add`` (and ``git update-index --add``) into
``$GIT_OBJECT_DIRECTORY`` and reads existing ones through ``$GIT_ALTERNATE_OBJECT_DIRECTORIES``
(the receive-pack quarantine works the same way). A snapshot run with :meth:`Quarantine.env`
therefore leaves in the quarantine exactly the blobs that are new to the repository: content
already stored (the user's commits, earlier snapshots) is found through the alternate and not
written again. :meth:`Quarantine.admit` then moves each of them into the repository's object
directory, or writes what the policy gives instead (its redacted text), and the quarantine is
removed. Nothing of it is ever an object of the repository: ``git cat-file --batch-all-objects``
does not list it.

The loose objects wait in a private directory of the system's temporary directory (``$TMPDIR``),
outside ``.git``: one per thread of a process (:func:`thread_root`; emptied after each snapshot,
removed when the process exits; those a killed process left are removed by the next process),
since making and removing a directory there costs milliseconds where the temporary directory is
crowded. Files above ``core.bigFileThreshold`` (:data:`gitstate.workspace.snapshot.BIG_BLOB`,
far above what the policy reads) are streamed by git into a pack: the quarantine's ``pack`` folder
is a link to a private folder beside the object directory (``objects/agentos-pack-*``, which
housekeeping sweeps when a killed process leaves one), so those packs are renamed into place, never
copied through the temporary directory."""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import stat
import tempfile
import threading
import time
import zlib
from collections.abc import Iterator

from gitstate.git import safeopen
from gitstate.git.pids import pid_alive

#: Prefix of the private pack folder beside ``objects/pack`` (the one housekeeping sweeps).
PACK_PREFIX = "agentos-pack-"
_TYPES = {b"blob": 3, b"tree": 2, b"commit": 1, b"tag": 4}


_ROOTS = threading.local()
_MADE: list[str] = []


ROOT_PREFIX = "gitstate-snapshot-"  # then the owner's pid and "-": what a killed process left is known
LEFTOVER_AGE = 600.0  # seconds: a quarantine of a dead process this old is removed


def thread_root() -> str:
    """This thread's quarantine directory (made on first use, removed when the process exits; what
    a killed process left is removed by the next process that makes one, :func:`remove_leftovers`)."""
    root: str | None = getattr(_ROOTS, "path", None)
    if root is None or not os.path.isdir(root):
        if not _MADE:
            atexit.register(_remove_roots)
            remove_leftovers(tempfile.gettempdir())
        root = tempfile.mkdtemp(prefix=f"{ROOT_PREFIX}{os.getpid()}-")
        _ROOTS.path = root
        _MADE.append(root)
    return root


def remove_leftovers(tmp: str, now: float | None = None) -> list[str]:
    """Remove the quarantines in ``tmp`` whose process is gone (a kill skips the removal at exit)
    and that are older than :data:`LEFTOVER_AGE`; returns their paths. Only directories named as
    :func:`thread_root` names them, owned by this user, are looked at."""
    now = time.time() if now is None else now
    removed: list[str] = []
    try:
        names = os.listdir(tmp)
    except OSError:
        return removed
    for name in names:
        if not name.startswith(ROOT_PREFIX):
            continue
        pid_text = name[len(ROOT_PREFIX):].partition("-")[0]
        path = os.path.join(tmp, name)
        try:
            st = os.lstat(path)
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or now - st.st_mtime < LEFTOVER_AGE:
                continue
            if pid_text.isdigit() and pid_alive(int(pid_text)):
                continue
        except OSError:
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


def _remove_roots() -> None:
    for root in _MADE:
        shutil.rmtree(root, ignore_errors=True)


class Quarantine:
    """One snapshot's quarantine (see the module doc); a context manager that empties it."""

    def __init__(self, objects: str) -> None:
        self.objects = objects  # the repository's object directory
        self.path = thread_root()
        self.close()  # (what a snapshot interrupted in this thread left)
        self.packs: str | None = None
        try:
            self.packs = tempfile.mkdtemp(prefix=PACK_PREFIX, dir=objects)
            os.symlink(self.packs, os.path.join(self.path, "pack"))
        except OSError:  # no links here: big files' packs pass through the temporary directory
            if self.packs is not None:
                shutil.rmtree(self.packs, ignore_errors=True)
            self.packs = None

    def __enter__(self) -> Quarantine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Remove what is left in the quarantine (its folders stay, empty, for the next snapshot)."""
        try:
            entries = list(os.scandir(self.path))
        except OSError:
            entries = []
        for entry in entries:
            with contextlib.suppress(OSError):
                if entry.is_symlink() or not entry.is_dir():
                    os.unlink(entry.path)
                elif len(entry.name) == 2:
                    for name in os.listdir(entry.path):
                        os.unlink(os.path.join(entry.path, name))
                else:
                    shutil.rmtree(entry.path, ignore_errors=True)
        packs = getattr(self, "packs", None)
        if packs is not None:
            shutil.rmtree(packs, ignore_errors=True)

    def env(self) -> dict[str, str]:
        """The environment that makes git write into the quarantine and read the repository."""
        alternates = [self.objects]
        inherited = os.environ.get("GIT_ALTERNATE_OBJECT_DIRECTORIES")
        if inherited:
            alternates.append(inherited)
        return {"GIT_OBJECT_DIRECTORY": self.path, "GIT_ALTERNATE_OBJECT_DIRECTORIES": os.pathsep.join(alternates)}

    def loose(self) -> Iterator[str]:
        """Ids of the loose objects in the quarantine."""
        try:
            fanout = [d for d in os.listdir(self.path) if len(d) == 2]
        except OSError:
            return
        for folder in fanout:
            with contextlib.suppress(OSError):
                for name in os.listdir(os.path.join(self.path, folder)):
                    if len(name) == 38:
                        yield folder + name

    def header(self, oid: str) -> tuple[int, int] | None:
        """``(type, size)`` of a loose object of the quarantine (``None``: not there)."""
        try:
            with open(self._file(oid), "rb") as fh:
                head = zlib.decompressobj().decompress(fh.read(256), 64)
        except (OSError, zlib.error):
            return None
        return _parse_header(head)

    def read(self, oid: str) -> bytes | None:
        """The body of a loose blob of the quarantine (``None``: not there, or not a blob)."""
        try:
            with open(self._file(oid), "rb") as fh:
                data = zlib.decompress(fh.read())
        except (OSError, zlib.error):
            return None
        head = _parse_header(data[:64])
        if head is None or head[0] != _TYPES[b"blob"]:
            return None
        return data[data.index(b"\0") + 1:]

    def move(self, oid: str) -> None:
        """Move a loose object of the quarantine into the repository (kept as it is if there)."""
        src = self._file(oid)
        folder = os.path.join(self.objects, oid[:2])
        dst = os.path.join(folder, oid[2:])
        if os.path.exists(dst):
            return
        try:
            safeopen.in_folder(folder, lambda: os.rename(src, dst))  # (a `git prune` may remove it)
            return
        except OSError:
            pass  # another file system: copied under a temporary name, then renamed
        fd, tmp = safeopen.in_folder(folder, lambda: tempfile.mkstemp(prefix="tmp_obj_", dir=folder))
        try:
            with os.fdopen(fd, "wb") as out, open(src, "rb") as fh:
                shutil.copyfileobj(fh, out)
                out.flush()
                os.fsync(out.fileno())
            os.chmod(tmp, 0o444)
            os.replace(tmp, dst)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    def move_packs(self) -> None:
        """Move the packs git streamed big files into (the ``.idx`` last: readers find packs by it)."""
        folder = self.packs or os.path.join(self.path, "pack")
        try:
            names = sorted((n for n in os.listdir(folder) if n.startswith("pack-")), key=lambda n: n.endswith(".idx"))
        except OSError:
            return
        target = os.path.join(self.objects, "pack")
        os.makedirs(target, exist_ok=True)
        for name in names:
            dst = os.path.join(target, name)
            if os.path.exists(dst):
                continue
            try:
                os.rename(os.path.join(folder, name), dst)
            except OSError:
                shutil.copyfile(os.path.join(folder, name), dst + ".tmp")
                os.replace(dst + ".tmp", dst)

    def _file(self, oid: str) -> str:
        return os.path.join(self.path, oid[:2], oid[2:])


def _parse_header(head: bytes) -> tuple[int, int] | None:
    end = head.find(b"\0")
    if end < 0:
        return None
    kind, _, size = head[:end].partition(b" ")
    if kind not in _TYPES or not size.isdigit():
        return None
    return _TYPES[kind], int(size)
