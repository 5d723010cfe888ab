"""What an unfinished push still owes a remote, kept in the git dir, and how a push is cut into
chunks a server accepts.

A push of many runs goes in chunks of at most ``agentos.pushChunk`` ref updates (default
:data:`DEFAULT_CHUNK`): servers refuse very large pushes (GitHub answers HTTP 500 to about 10,000
ref updates), and a chunk that lands is progress a dropped connection cannot take back. Before
the first chunk is sent, the refs the push will update are written to the push queue,
``<git dir>/agentos/push-queue/<key>`` (one file per remote, written whole to a temporary file
and renamed in place, so a reader sees the old or the new list, never half of one); each chunk
that lands is taken off it. A push that was killed (``kill -9``, a reboot) or lost its
connection leaves the queue behind, and the next push to that remote sends what is left on it
along with whatever it was asked for; what the remote already holds (a chunk that landed just
before the kill) is not sent again. The queue also keeps the chunk size the push settled on
when the server refused bigger ones, so a resumed push does not learn it again.

The file is plain text: a first line ``gitstate-push-queue v1``, then ``remote <remote>``,
``chunk <n>`` (when one was learned), and one ``ref <object id> <ref name>`` line per ref still
to push. Chunks hold whole runs (a run's record with its branches) except when one run alone
has more refs than a chunk."""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from gitstate.errors import RemoteError
from gitstate.git import command
from gitstate.store.store import Store

CHUNK_KEY = "agentos.pushChunk"
DEFAULT_CHUNK = 1000
BUDGET_KEY = "agentos.pushTimeout"
DEFAULT_BUDGET = 3600  # seconds; 0: no limit
_HEADER = "gitstate-push-queue v1"


def _config_int(store: Store, key: str, default: int) -> int:
    loc = store.location
    out = command.run_git(loc.git_dir, ["config", "--get", key], cwd=loc.workdir or loc.git_dir,
                          work_tree=loc.workdir)
    text = out.stdout.strip()
    if out.returncode != 0 or not text:
        return default
    try:
        return max(int(text), 0)
    except ValueError:
        raise RemoteError(key, "read config", f"{key} must be a whole number, not {text!r}") from None


def chunk_size(store: Store) -> int:
    """At most how many ref updates one ``git push`` carries: ``agentos.pushChunk`` (default
    :data:`DEFAULT_CHUNK`; 0 also means the default)."""
    return _config_int(store, CHUNK_KEY, DEFAULT_CHUNK) or DEFAULT_CHUNK


def time_budget(store: Store) -> float | None:
    """The seconds one push may take in all: ``agentos.pushTimeout`` (default
    :data:`DEFAULT_BUDGET`), ``None`` when it is 0 (no limit)."""
    return float(_config_int(store, BUDGET_KEY, DEFAULT_BUDGET)) or None


def queue_path(store: Store, remote: str) -> str:
    """Where the push queue of ``remote`` (a name, URL or path) lives."""
    key = hashlib.sha256(remote.encode("utf-8", "surrogateescape")).hexdigest()[:24]
    return os.path.join(store.location.common_dir, "agentos", "push-queue", key)


@dataclass
class PushQueue:
    """The refs a push to ``remote`` still has to send (``{ref: object id}``) and the chunk size
    it learned (``None``: none yet)."""

    path: str
    remote: str
    refs: dict[str, str] = field(default_factory=dict)
    chunk: int | None = None

    @classmethod
    def load(cls, store: Store, remote: str) -> PushQueue:
        """The queue an earlier push left, or an empty one. Lines that do not read are ignored
        (the queue only adds refs to a push; a lost line is a ref the push scope finds anyway)."""
        path = queue_path(store, remote)
        queue = cls(path, remote)
        try:
            with open(path, encoding="utf-8", errors="surrogateescape") as fh:
                lines = fh.read().splitlines()
        except OSError:
            return queue
        if not lines or lines[0] != _HEADER:
            return queue
        for line in lines[1:]:
            word, _, rest = line.partition(" ")
            if word == "remote" and rest != remote:
                return cls(path, remote)  # another remote's queue under a colliding key: not ours
            if word == "chunk" and rest.isdigit() and int(rest) > 0:
                queue.chunk = int(rest)
            elif word == "ref":
                oid, _, name = rest.partition(" ")
                if len(oid) in (40, 64) and name.startswith("refs/"):
                    queue.refs[name] = oid
        return queue

    def save(self) -> None:
        """Write the queue whole (temporary file, flushed, renamed in place); an empty queue
        removes the file."""
        if not self.refs:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)
            return
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        lines = [_HEADER, f"remote {self.remote}"]
        if self.chunk:
            lines.append(f"chunk {self.chunk}")
        lines += [f"ref {oid} {name}" for name, oid in sorted(self.refs.items())]
        tmp = f"{self.path}.tmp-{os.getpid()}"
        with open(tmp, "w", encoding="utf-8", errors="surrogateescape", newline="\n") as fh:
            fh.write("\n".join(lines) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.path)

    def done(self, names: Iterable[str]) -> None:
        """Take refs off the queue and write it."""
        for name in names:
            self.refs.pop(name, None)
        self.save()


def _run_key(ref: str) -> str:
    return "/".join(ref.split("/")[:5])


def run_groups(refs: Iterable[str]) -> list[list[str]]:
    """``refs`` grouped by run (``refs/agentos/<worktree>/runs/<run>/…``), in order, each group's
    run record first."""
    groups: dict[str, list[str]] = {}
    for ref in sorted(refs):
        groups.setdefault(_run_key(ref), []).append(ref)
    return [sorted(g, key=lambda r: (not r.endswith("/run"), r)) for g in groups.values()]


def chunks(refs: Iterable[str], size: int) -> list[list[str]]:
    """Chunks of at most ``size`` refs, each of whole runs, except that a run with more refs than
    ``size`` is cut across chunks."""
    out: list[list[str]] = []
    current: list[str] = []
    for group in run_groups(refs):
        if current and len(current) + len(group) > size:
            out.append(current)
            current = []
        while len(group) > size:
            out.append(group[:size])
            group = group[size:]
        current += group
    if current:
        out.append(current)
    return out


def halves(chunk: Sequence[str]) -> tuple[list[str], list[str]]:
    """A chunk cut in two near its middle, between two runs when it holds more than one."""
    middle = len(chunk) // 2
    keys = [_run_key(r) for r in chunk]
    best = None
    for i in range(1, len(chunk)):
        if keys[i] != keys[i - 1] and (best is None or abs(i - middle) < abs(best - middle)):
            best = i
    cut = best if best is not None else max(middle, 1)
    return list(chunk[:cut]), list(chunk[cut:])
