"""Benchmark: a whole compiled LangGraph run on gitstate's saver against SqliteSaver, PostgresSaver and
InMemorySaver, side by side in one process.

The graph has 3 trivial nodes run in a chain ``a -> b -> c -> a -> ...``; each node is one superstep
(default 300) and bumps a counter. The ``messages`` variant also appends a ~400-byte message per step
to a list channel (``operator.add``), so each checkpoint holds the whole conversation so far. Each run
is one ``graph.invoke`` on a fresh store (a new repository, a new SQLite file, emptied Postgres tables,
a new InMemorySaver), with ``durability="sync"`` and ``"async"`` (LangGraph's default).

Backends: ``gitstate`` (git's default ``core.fsync``), ``gitstate-fsync-all`` (``core.fsync=all`` in
that repository's config: as durable as SQLite and Postgres), ``gitstate-loose`` (not run unless
named in ``--backends``: ``agentos.looseObjects 16``, a small write written as loose objects, not
flushed, instead of one flushed pack), two bounds for design work, not run unless named and not
usable as savers: ``gitstate-no-flush`` (``core.fsync=none``: nothing flushed, what any change to
the flushes could at best give) and ``gitstate-ceiling`` (no flush, and ``put_writes`` stores
nothing: what a free pending-writes path could at best add to that), ``sqlite`` (SqliteSaver on a file, its
defaults), ``postgres`` (PostgresSaver on a local PostgreSQL server that this script starts from
Debian's ``postgresql`` package with its defaults, on 127.0.0.1; skipped with the reason printed when it
cannot start), ``memory`` (InMemorySaver: the graph's own cost).

Measured per run and printed as median and mean over ``--rounds`` rounds (every round runs every
backend on every variant, the backends' order rotated from round to round, so the machine's noise hits
all alike), with the ratios gitstate / SqliteSaver and gitstate / PostgresSaver (median, mean and
min–max spread of the per-round ratios):

- wall: seconds of ``graph.invoke`` (what the user waits for);
- CPU: CPU seconds of this process (all its threads) plus its reaped child processes (git), from the
  start of the run until gitstate's background housekeeping has finished, plus for PostgresSaver the
  CPU of the server's processes over the run (``/proc/<pid>/stat``).

Then a counting pass (``--no-count`` skips it): each backend runs each variant once more, alone, in a
child process, and the script prints per superstep:

- files created: new directory entries made in the store's directories (``IN_CREATE`` events of
  inotify, watches added to every directory, including ones created during the run): lock files,
  temporary files, packs, indexes, loose refs... whether or not they survive; directories, renames
  onto a name (``IN_MOVED_TO``) and unlinks (``IN_DELETE``) are counted apart;
- fsyncs: ``fsync``/``fdatasync``/``sync_file_range``/``syncfs``/``msync`` calls made by the child and
  its subprocesses (``strace -f -c`` filtered by seccomp, so untraced calls run at full speed); for
  PostgresSaver, whose client never syncs, the server's WAL syncs (``pg_stat_wal.wal_sync``) instead
  (data-file syncs happen at the server's checkpoints, every 5 minutes, and are not counted).

``--kill N`` measures no time: it checks the bar "kill -9 during the end-to-end run loses no
acknowledged checkpoint". A child process runs the graph on gitstate's saver, one thread per variant
(plain and messages, sync and async durability, all in one repository), and appends each checkpoint
the saver acknowledged (its ``put`` returned) to an ``O_APPEND`` file; this process SIGKILLs it (its
process group: git subprocesses die with it) at a random moment (0 to ``--kill-delay`` seconds into
its run; in every other round of as many kills as variants, 0 to a fifth of that, then 0-2 ms after
the next acknowledgement), then the next child resumes the next variant's thread from its latest checkpoint (``invoke(None,
config)``), N kills in all, the variants in turn. After every kill a fresh saver must read every acknowledged checkpoint
by id with the ``n`` (and message count) it had, and ``git fsck --strict`` must be clean (dangling
objects allowed); at the end every thread is run to completion and must reach ``n = --steps``.

Usage: python scripts/bench_e2e.py [--steps 300] [--rounds 3] [--no-postgres] [--no-count]
       python scripts/bench_e2e.py --kill 20 [--steps 300] [--kill-delay 2.0] [--seed 1] [--json FILE]"""

from __future__ import annotations

import argparse
import ctypes
import json
import operator
import os
import random
import resource
import select
import shutil
import signal
import socket
import sqlite3
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, TypedDict

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver, ChannelVersions, Checkpoint, CheckpointMetadata
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph

import gitstate
from gitstate.langgraph import GitCheckpointSaver

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from soak_kill import git, leftovers, make_repo  # noqa: E402

BACKENDS = ("gitstate", "gitstate-fsync-all", "sqlite", "postgres", "memory")
GITSTATE = ("gitstate", "gitstate-fsync-all", "gitstate-loose", "gitstate-no-flush", "gitstate-ceiling")
NAMED_ONLY = ("gitstate-loose", "gitstate-no-flush", "gitstate-ceiling")  # run only when named
WORKLOADS = ("plain", "messages")
DURABILITIES = ("sync", "async")
BARS = {("gitstate", "sqlite"): 1.5, ("gitstate", "postgres"): 1.0, ("gitstate-fsync-all", "sqlite"): 2.0}
WORDS = ("the agent called a tool to fetch the quarterly report and found that revenue grew while "
         "costs in the logistics segment rose sharply; next it will summarise risks, compare with last "
         "year, draft an email to finance, check the calendar for a review slot, and ask the user "
         "whether the forecast should include the delayed contract from the northern region").split()
PG_TABLES = ("checkpoints", "checkpoint_blobs", "checkpoint_writes")


# -- the graph ------------------------------------------------------------------------------------


class State(TypedDict):
    """The counter, and (``messages`` variant) the conversation."""

    n: int
    messages: Annotated[list[dict[str, str]], operator.add]


def message(n: int) -> dict[str, str]:
    """A chat message of about 400 bytes of varied text (deterministic in ``n``)."""
    rng = random.Random(n)
    words: list[str] = []
    while sum(len(w) + 1 for w in words) < 330:
        words.append(rng.choice(WORDS))
    return {"role": ("user", "assistant", "tool")[n % 3], "id": str(uuid.UUID(int=rng.getrandbits(128))),
            "content": " ".join(words)}


def build_graph(steps: int, with_messages: bool) -> StateGraph:
    """Nodes a, b, c in a cycle; each bumps ``n`` (and appends a message); ``steps`` supersteps."""
    graph = StateGraph(State)
    names = ("a", "b", "c")

    def make(name: str) -> Callable[[State], dict[str, Any]]:
        def node(state: State) -> dict[str, Any]:
            n = state["n"] + 1
            return {"n": n, "messages": [message(n)]} if with_messages else {"n": n}
        node.__name__ = name
        return node

    for i, name in enumerate(names):
        graph.add_node(name, make(name))
        nxt = names[(i + 1) % 3]
        graph.add_conditional_edges(name, lambda s, nxt=nxt: END if s["n"] >= steps else nxt, [nxt, END])
    graph.add_edge(START, "a")
    return graph


# -- PostgreSQL ---------------------------------------------------------------------------------------


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Postgres:
    """A throwaway PostgreSQL server (Debian's package) in a temporary directory, its defaults kept."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.data = os.path.join(base, "data")
        self.port = free_port()
        self.uri = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        self.version = ""
        self.pid = 0
        bins = sorted((d for d in os.listdir("/usr/lib/postgresql") if d.isdigit()), key=int) \
            if os.path.isdir("/usr/lib/postgresql") else []
        if not bins:
            raise RuntimeError("PostgreSQL is not installed (apt-get install postgresql)")
        self.bin = os.path.join("/usr/lib/postgresql", bins[-1], "bin")
        self.prefix: list[str] = []
        if os.geteuid() == 0:  # postgres refuses to run as root
            runuser = shutil.which("runuser")
            if runuser is None:
                raise RuntimeError("running as root and runuser is missing (postgres refuses root)")
            self.prefix = [runuser, "-u", "nobody", "--"]
            os.chmod(base, 0o755)
            os.chown(base, 65534, 65534)  # its socket lives here
            parent = os.path.dirname(os.path.abspath(base))  # nobody must be able to pass through
            os.chmod(parent, os.stat(parent).st_mode | 0o011)
            os.makedirs(self.data)
            os.chown(self.data, 65534, 65534)

    @classmethod
    def attach(cls, uri: str, data: str) -> Postgres:
        """The server this script started, seen from a child process."""
        pg = cls.__new__(cls)
        pg.uri, pg.data, pg.version = uri, data, ""
        with open(os.path.join(data, "postmaster.pid"), encoding="utf-8") as fh:
            pg.pid = int(fh.readline())
        return pg

    def _run(self, *args: str) -> None:
        proc = subprocess.run([*self.prefix, *args], capture_output=True, text=True, cwd=self.base)
        if proc.returncode:
            raise RuntimeError(f"{os.path.basename(args[0])} failed: {(proc.stderr or proc.stdout).strip()[-400:]}")

    def start(self) -> None:
        """initdb, then start the server listening on 127.0.0.1 only (and a socket in ``base``)."""
        self._run(os.path.join(self.bin, "initdb"), "-D", self.data, "-U", "postgres", "-A", "trust",
                  "--no-sync", "-E", "UTF8")
        opts = f"-c listen_addresses=127.0.0.1 -p {self.port} -c unix_socket_directories={self.base}"
        log = os.path.join(self.data, "server.log")
        self.log = log
        try:
            self._run(os.path.join(self.bin, "pg_ctl"), "-D", self.data, "-o", opts, "-l", log, "-w", "-t", "60",
                      "start")
        except RuntimeError as exc:
            tail = open(log, encoding="utf-8", errors="replace").read().strip()[-400:] if os.path.exists(log) else ""
            raise RuntimeError(f"{exc} {tail}") from None
        with open(os.path.join(self.data, "postmaster.pid"), encoding="utf-8") as fh:
            self.pid = int(fh.readline())
        import psycopg
        with psycopg.connect(self.uri, autocommit=True) as conn:
            row = conn.execute("show server_version").fetchone()
            self.version = str(row[0]) if row else "?"

    def stop(self) -> None:
        """Stop the server (fast shutdown)."""
        if self.pid:
            self._run(os.path.join(self.bin, "pg_ctl"), "-D", self.data, "-m", "fast", "-w", "stop")
            self.pid = 0

    def cpu(self) -> float:
        """CPU seconds used so far by the server's processes (the postmaster and its children)."""
        tick = os.sysconf("SC_CLK_TCK")
        total = 0
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                with open(f"/proc/{name}/stat", encoding="utf-8") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(name) == self.pid or int(fields[1]) == self.pid:  # fields[1]: ppid
                total += int(fields[11]) + int(fields[12])  # utime, stime
        return total / tick

    def wal_syncs(self) -> int:
        """WAL syncs the server has made so far (pg_stat_wal)."""
        import psycopg
        with psycopg.connect(self.uri, autocommit=True) as conn:
            row = conn.execute("select wal_sync from pg_stat_wal").fetchone()
            return int(row[0]) if row else 0


def pg_saver(uri: str) -> tuple[Any, Callable[[], None]]:
    """A PostgresSaver on emptied tables, and its closer."""
    import psycopg
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg.rows import dict_row
    conn = psycopg.connect(uri, autocommit=True, prepare_threshold=0, row_factory=dict_row)
    saver = PostgresSaver(conn)  # type: ignore[arg-type]
    saver.setup()
    conn.execute("truncate " + ", ".join(PG_TABLES))
    return saver, conn.close


# -- one run ---------------------------------------------------------------------------------------


@dataclass
class Run:
    """One graph.invoke's figures."""

    wall: float
    cpu: float
    counts: dict[str, float] = field(default_factory=dict)


def git_init(path: str, backend: str) -> None:
    """A fresh repository configured for one of the :data:`GITSTATE` backends."""
    subprocess.run(["git", "init", "-q", path], check=True)
    if backend == "gitstate-fsync-all":
        subprocess.run(["git", "-C", path, "config", "core.fsync", "all"], check=True)
    if backend == "gitstate-loose":
        subprocess.run(["git", "-C", path, "config", "agentos.looseObjects", "16"], check=True)
    if backend in ("gitstate-no-flush", "gitstate-ceiling"):
        subprocess.run(["git", "-C", path, "config", "core.fsync", "none"], check=True)


class _NoPendingWrites(GitCheckpointSaver):
    """``gitstate-ceiling``: pending writes are dropped, not stored (a bound, not a saver: a resumed
    run would run its finished tasks again)."""

    def put_writes(self, config: Any, writes: Any, task_id: str, task_path: str = "") -> None:
        return None


def make_saver(backend: str, base: str, pg: Postgres | None) -> tuple[BaseCheckpointSaver, Callable[[], None], str]:
    """A fresh saver of ``backend`` under ``base``: (saver, close, directory its files live in)."""
    if backend in GITSTATE:
        repo = os.path.join(base, "repo")
        git_init(repo, backend)
        saver = (_NoPendingWrites if backend == "gitstate-ceiling" else GitCheckpointSaver)(gitstate.open_store(repo))
        return saver, saver.store.close, repo
    if backend == "sqlite":
        os.makedirs(os.path.join(base, "db"))
        conn = sqlite3.connect(os.path.join(base, "db", "checkpoints.sqlite"), check_same_thread=False)
        return SqliteSaver(conn), conn.close, os.path.join(base, "db")
    if backend == "postgres":
        assert pg is not None
        saver, close = pg_saver(pg.uri)
        return saver, close, pg.data
    return InMemorySaver(), lambda: None, ""


def cpu_now() -> float:
    """CPU seconds of this process (every thread) and of its reaped children."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def run_once(backend: str, workload: str, durability: str, steps: int, base: str, pg: Postgres | None,
             before_invoke: Callable[[str], None] | None = None) -> Run:
    """One graph.invoke of ``steps`` supersteps on a fresh ``backend`` store."""
    saver, close, where = make_saver(backend, base, pg)
    graph = build_graph(steps, workload == "messages").compile(checkpointer=saver)
    config: dict[str, Any] = {"configurable": {"thread_id": f"bench-{uuid.uuid4().hex[:8]}"},
                              "recursion_limit": steps + 10}
    if before_invoke is not None:
        before_invoke(where)
    pg_cpu0 = pg.cpu() if backend == "postgres" and pg else 0.0
    cpu0 = cpu_now()
    t0 = time.perf_counter()
    out = graph.invoke({"n": 0, "messages": []}, config, durability=durability)  # type: ignore[arg-type]
    wall = time.perf_counter() - t0
    if isinstance(saver, GitCheckpointSaver):
        saver.store.wait_for_housekeeping()
    cpu = cpu_now() - cpu0 + ((pg.cpu() - pg_cpu0) if backend == "postgres" and pg else 0.0)
    assert out["n"] == steps, out
    assert len(out["messages"]) == (steps if workload == "messages" else 0)
    state = graph.get_state(config)
    assert state.values["n"] == steps
    close()
    return Run(wall, cpu)


# -- counting: inotify + strace -------------------------------------------------------------------

IN_CREATE, IN_DELETE, IN_MOVED_TO, IN_ISDIR, IN_Q_OVERFLOW = 0x100, 0x200, 0x80, 0x40000000, 0x4000
EVENT = struct.Struct("iIII")


class CreateCounter:
    """Counts directory entries created, renamed onto and deleted below a directory (inotify)."""

    def __init__(self, root: str) -> None:
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.fd = self.libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        self.paths: dict[int, str] = {}
        self.counts = {"files": 0, "dirs": 0, "renames": 0, "unlinks": 0, "overflow": 0}
        self.stop = threading.Event()
        for dirpath, _dirs, _files in os.walk(root):
            self._watch(dirpath)
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _watch(self, path: str) -> None:
        wd = self.libc.inotify_add_watch(self.fd, os.fsencode(path), IN_CREATE | IN_DELETE | IN_MOVED_TO)
        if wd >= 0:
            self.paths[wd] = path

    def _drain(self) -> None:
        while True:
            try:
                buf = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                return
            pos = 0
            while pos < len(buf):
                wd, mask, _cookie, length = EVENT.unpack_from(buf, pos)
                name = buf[pos + EVENT.size: pos + EVENT.size + length].rstrip(b"\0")
                pos += EVENT.size + length
                if mask & IN_Q_OVERFLOW:
                    self.counts["overflow"] += 1
                elif mask & IN_CREATE and mask & IN_ISDIR:
                    self.counts["dirs"] += 1
                    path = os.path.join(self.paths.get(wd, ""), os.fsdecode(name))
                    self._watch(path)
                    try:  # entries made before the watch was in place
                        for dirpath, dirs, files in os.walk(path):
                            self.counts["files"] += len(files)
                            self.counts["dirs"] += len(dirs)
                            for d in dirs:
                                self._watch(os.path.join(dirpath, d))
                    except OSError:
                        pass
                elif mask & IN_CREATE:
                    self.counts["files"] += 1
                elif mask & IN_MOVED_TO:
                    self.counts["renames"] += 1
                elif mask & IN_DELETE:
                    self.counts["unlinks"] += 1

    def _loop(self) -> None:
        while not self.stop.is_set():
            select.select([self.fd], [], [], 0.05)
            self._drain()

    def finish(self) -> dict[str, int]:
        """Stop counting; the counts."""
        time.sleep(0.1)
        self.stop.set()
        self.thread.join()
        self._drain()
        os.close(self.fd)
        return self.counts


SYNC_CALLS = ("fsync", "fdatasync", "sync_file_range", "syncfs", "msync")


def child(spec: str, steps: int, base: str, pg_uri: str, pg_data: str, out: str) -> None:
    """``--child``: one run of ``backend,workload,durability`` alone, counting created files (the
    strace around this process counts the syncs)."""
    backend, workload, durability = spec.split(",")
    pg: Postgres | None = None
    if backend == "postgres":
        pg = Postgres.attach(pg_uri, pg_data)
    counter: list[CreateCounter] = []
    wal0 = [0]

    def before(where: str) -> None:
        if pg is not None:
            wal0[0] = pg.wal_syncs()
        if where:
            counter.append(CreateCounter(where))

    run_once(backend, workload, durability, steps, base, pg, before)
    counts: dict[str, int] = counter[0].finish() if counter else {}
    if pg is not None:
        time.sleep(1.2)  # the backend reports its WAL statistics when idle, at most once a second
        counts["wal_syncs"] = pg.wal_syncs() - wal0[0]
    with open(out, "w", encoding="utf-8") as fh:
        json.dump(counts, fh)


def count_run(spec: str, steps: int, work: str, pg: Postgres | None) -> dict[str, float]:
    """Per-superstep counts of one run of ``spec`` in a child process under strace."""
    base = tempfile.mkdtemp(prefix="count-", dir=work)
    out, trace = os.path.join(base, "counts.json"), os.path.join(base, "strace.txt")
    cmd = [sys.executable, os.path.abspath(__file__), "--child", spec, "--steps", str(steps), "--dir", base,
           "--child-out", out]
    if pg is not None:
        cmd += ["--pg-uri", pg.uri, "--pg-data", pg.data]
    strace = shutil.which("strace")
    if strace:
        cmd = [strace, "-f", "--seccomp-bpf", "-e", "trace=" + ",".join(SYNC_CALLS), "-c", "-o", trace, *cmd]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"counting run {spec} failed: {proc.stderr.strip()[-800:]}")
    with open(out, encoding="utf-8") as fh:
        counts: dict[str, float] = json.load(fh)
    syncs = None
    if strace:
        syncs = 0
        with open(trace, encoding="utf-8") as fh:
            for line in fh:
                parts = line.split()
                if len(parts) >= 5 and parts[-1] in SYNC_CALLS and parts[3].isdigit():
                    syncs += int(parts[3])
    if "wal_syncs" in counts:
        counts["syncs"] = counts.pop("wal_syncs")
    elif syncs is not None:
        counts["syncs"] = syncs
    return {k: v / steps for k, v in counts.items()}


# -- kill -9 ---------------------------------------------------------------------------------------


class AckingSaver(GitCheckpointSaver):
    """gitstate's saver that, once ``put`` has returned, appends ``thread checkpoint_id step n
    messages`` to ``ack_fd`` (one ``write`` on an ``O_APPEND`` file: a SIGKILL never cuts a line, and
    the line survives the process)."""

    ack_fd = -1

    def put(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
            new_versions: ChannelVersions) -> RunnableConfig:
        out = super().put(config, checkpoint, metadata, new_versions)
        conf = out["configurable"]
        values = checkpoint.get("channel_values") or {}
        os.write(self.ack_fd, f"{conf['thread_id']} {conf['checkpoint_id']} {metadata.get('step')} "
                              f"{values.get('n', -1)} {len(values.get('messages') or [])}\n".encode())
        return out


def kill_config(thread: str, steps: int, checkpoint_id: str | None = None) -> dict[str, Any]:
    """The config of ``thread`` (of one checkpoint of it when ``checkpoint_id`` is given)."""
    conf: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ""}
    if checkpoint_id:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf, "recursion_limit": steps + 10}


def kill_child() -> None:
    """``--kill-child``: says ``loaded``, reads a job (one JSON line on stdin: repo, ack file, steps,
    runs of thread/workload/durability), says ``ready`` and runs (or resumes) each run's thread to
    the end on an AckingSaver; prints the final ``n`` and message count of each as one JSON line."""
    print("loaded", flush=True)
    job = json.loads(sys.stdin.readline())
    steps = int(job["steps"])
    store = gitstate.open_store(job["repo"])
    saver = AckingSaver(store)
    saver.ack_fd = os.open(job["acks"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    print("ready", flush=True)
    done = []
    for run in job["runs"]:
        graph = build_graph(steps, run["workload"] == "messages").compile(checkpointer=saver)
        config = kill_config(run["thread"], steps)
        resume = saver.get_tuple(config) is not None  # LangGraph resumes from the latest checkpoint
        out = graph.invoke(None if resume else {"n": 0, "messages": []}, config,  # type: ignore[arg-type]
                           durability=run["durability"])
        done.append({"thread": run["thread"], "n": out["n"], "messages": len(out["messages"])})
    store.wait_for_housekeeping()
    store.close()
    print(json.dumps(done), flush=True)


@dataclass
class Ack:
    """One acknowledged checkpoint, as the child wrote it."""

    thread: str
    checkpoint_id: str
    step: int
    n: int
    messages: int


def read_kill_acks(path: str) -> list[Ack]:
    """The acknowledged checkpoints in the ack file (a line cut short cannot happen; skipped if so)."""
    if not os.path.exists(path):
        return []
    out = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            parts = line.split()
            if len(parts) == 5:
                out.append(Ack(parts[0], parts[1], int(parts[2]), int(parts[3]), int(parts[4])))
    return out


def check_acks(repo: str, acks: list[Ack], steps: int) -> list[str]:
    """Every acknowledged checkpoint, read by id through a fresh saver: what is missing or differs."""
    lost = []
    store = gitstate.open_store(repo, pack_in_background=False)
    try:
        saver = GitCheckpointSaver(store)
        listed: dict[str, set[str]] = {}
        for ack in acks:
            if ack.thread not in listed:
                listed[ack.thread] = {str(t.config["configurable"]["checkpoint_id"])
                                      for t in saver.list(kill_config(ack.thread, steps))}  # type: ignore[arg-type]
            tup = saver.get_tuple(kill_config(ack.thread, steps, ack.checkpoint_id))  # type: ignore[arg-type]
            if tup is None:
                lost.append(f"{ack.thread} {ack.checkpoint_id} (step {ack.step}): not found")
                continue
            values = tup.checkpoint.get("channel_values") or {}
            got = (tup.config["configurable"].get("checkpoint_id"), values.get("n", -1), len(values.get("messages") or []))
            if got != (ack.checkpoint_id, ack.n, ack.messages):
                lost.append(f"{ack.thread} {ack.checkpoint_id} (step {ack.step}): read {got}, "
                            f"acknowledged n={ack.n} messages={ack.messages}")
            elif ack.checkpoint_id not in listed[ack.thread]:
                lost.append(f"{ack.thread} {ack.checkpoint_id} (step {ack.step}): not in the thread's list")
    finally:
        store.close()
    return lost


def fsck_problems(repo: str) -> str:
    """``git fsck --strict``'s complaints (dangling objects are fine); empty when clean."""
    done = git(repo, "fsck", "--strict", "--no-dangling", check=False)
    out = (done.stdout + done.stderr).strip()
    return out or (f"exit {done.returncode}" if done.returncode else "")


class KillChild:
    """A ``--kill-child`` process in its own process group, its imports done ahead of its job."""

    def __init__(self, work: str, number: int) -> None:
        self.err = os.path.join(work, f"child-{number}.err")
        env = {k: v for k, v in os.environ.items() if k not in ("GIT_DIR", "GIT_WORK_TREE", "AGENTOS_REPO")}
        with open(self.err, "w", encoding="utf-8") as err:
            self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--kill-child"],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True,
                                         env=env, start_new_session=True)

    def expect(self, word: str, timeout: float = 120.0) -> None:
        """Wait for the line ``word`` from the child."""
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline().strip() if ready else "(nothing)"
        if line != word:
            self.kill()
            raise RuntimeError(f"kill child said {line!r}, not {word!r}: {self.stderr()}")

    def start(self, job: dict[str, Any]) -> None:
        """Give the child its job; return once it runs the graph."""
        self.expect("loaded")
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(job) + "\n")
        self.proc.stdin.flush()
        self.expect("ready")

    def kill(self) -> None:
        """SIGKILL the child's process group (the child and any git it runs); reap the child."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()

    def stderr(self) -> str:
        with open(self.err, encoding="utf-8", errors="replace") as fh:
            return fh.read()[-2000:]


def wait_for_ack(child_: KillChild, acks_path: str, timeout: float = 30.0) -> None:
    """Return as soon as the ack file grows (or the child has exited, or ``timeout``)."""
    size = os.path.getsize(acks_path) if os.path.exists(acks_path) else 0
    deadline = time.monotonic() + timeout
    while child_.proc.poll() is None and time.monotonic() < deadline:
        if os.path.exists(acks_path) and os.path.getsize(acks_path) > size:
            return
        time.sleep(0.0002)


def kill_run(kills: int, steps: int, workloads: list[str], durabilities: list[str], max_delay: float,
             seed: int, work: str) -> dict[str, Any]:
    """Kill children running the graph ``kills`` times, checking after each kill; then complete every
    thread. Returns the figures (``ok`` says whether the bar is met)."""
    rng = random.Random(seed)
    repo, acks_path = make_repo(os.path.join(work, "repo")), os.path.join(work, "acks.log")
    variants = [(w, d) for w in workloads for d in durabilities]
    threads = {v: [f"kill-{v[0]}-{v[1]}-1"] for v in variants}
    figures: dict[str, Any] = {"kills": 0, "kills_after_ack": 0, "attempts": 0, "finished_before_kill": 0, "lost": [], "fsck": [],
                               "died": [], "steps": steps, "variants": [f"{w}/{d}" for w, d in variants]}
    started = time.monotonic()
    spawned = [0]
    slowest = {"start": 0.0, "check": 0.0, "last run": 0.0}  # seconds: a child's start, a check, the last run
    figures["slowest_seconds"] = slowest

    def spawn() -> KillChild:
        spawned[0] += 1
        return KillChild(work, spawned[0])

    def job(runs: list[tuple[str, str, str]]) -> dict[str, Any]:
        return {"repo": repo, "acks": acks_path, "steps": steps,
                "runs": [{"thread": t, "workload": w, "durability": d} for t, w, d in runs]}

    spare = spawn()
    try:
        while figures["kills"] < kills and figures["attempts"] < 3 * kills + 8:
            variant = variants[figures["attempts"] % len(variants)]
            figures["attempts"] += 1
            child_, spare = spare, spawn()  # the next child imports while this one runs
            t0 = time.monotonic()
            child_.start(job([(threads[variant][-1], *variant)]))
            slowest["start"] = max(slowest["start"], time.monotonic() - t0)
            # every other round of kills (as many as variants) lands 0-2 ms after an acknowledgement
            after_ack = figures["kills"] // len(variants) % 2 == 1
            time.sleep(rng.uniform(0.0, max_delay / 5 if after_ack else max_delay))
            if after_ack:
                wait_for_ack(child_, acks_path)
                time.sleep(rng.uniform(0.0, 0.002))
            if child_.proc.poll() is None:
                child_.kill()
                figures["kills"] += 1
                figures["kills_after_ack"] += after_ack
            else:
                child_.proc.wait()
                if child_.proc.returncode == 0:  # the thread ran to its end before the kill: a new one
                    figures["finished_before_kill"] += 1
                    threads[variant].append(f"kill-{variant[0]}-{variant[1]}-{len(threads[variant]) + 1}")
                else:
                    figures["died"].append(child_.stderr())
            t0 = time.monotonic()
            acks = read_kill_acks(acks_path)
            lost = check_acks(repo, acks, steps)
            figures["lost"] = sorted(set(figures["lost"]) | set(lost))
            problems = fsck_problems(repo)
            if problems:
                figures["fsck"].append(f"after attempt {figures['attempts']}: {problems[-1000:]}")
            slowest["check"] = max(slowest["check"], time.monotonic() - t0)
        figures["left_after_kills"] = leftovers(repo)
        # every thread (those that ended before a kill too) runs to the end in one last child
        last, spare = spare, spawn()
        t0 = time.monotonic()
        last.start(job([(t, *v) for v, ts in threads.items() for t in ts]))
        assert last.proc.stdout is not None
        out = last.proc.stdout.readline()
        last.proc.wait()
        slowest["last run"] = time.monotonic() - t0
        if last.proc.returncode:
            figures["died"].append(last.stderr())
            final: list[dict[str, Any]] = []
        else:
            final = json.loads(out)
    finally:
        spare.kill()
    acks = read_kill_acks(acks_path)
    figures["lost"] = sorted(set(figures["lost"]) | set(check_acks(repo, acks, steps)))
    problems = fsck_problems(repo)
    if problems:
        figures["fsck"].append(f"at the end: {problems[-1000:]}")
    figures["left_at_end"] = leftovers(repo)
    # the threads' last checkpoints, read back by a fresh saver
    ends: dict[str, tuple[int, int]] = {}
    store = gitstate.open_store(repo, pack_in_background=False)
    try:
        saver = GitCheckpointSaver(store)
        for ts in threads.values():
            for t in ts:
                tup = saver.get_tuple(kill_config(t, steps))  # type: ignore[arg-type]
                values = (tup.checkpoint.get("channel_values") or {}) if tup else {}
                ends[t] = (values.get("n", -1), len(values.get("messages") or []))
    finally:
        store.close()
    expected = {t: (steps, steps if v[0] == "messages" else 0) for v, ts in threads.items() for t in ts}
    returned = {r["thread"]: (r["n"], r["messages"]) for r in final}
    figures["threads"] = {t: list(ends[t]) for t in expected}
    figures["incomplete"] = sorted(t for t in expected if ends.get(t) != expected[t] or returned.get(t) != expected[t])
    figures["acknowledged"] = len(acks)
    figures["acknowledged_by_variant"] = {f"{w}/{d}": sum(1 for a in acks if a.thread.startswith(f"kill-{w}-{d}-"))
                                          for w, d in variants}
    figures["lost_count"] = len(figures["lost"])
    figures["seconds"] = round(time.monotonic() - started, 1)
    figures["ok"] = (figures["kills"] == kills and not figures["lost"] and not figures["fsck"]
                     and not figures["died"] and not figures["incomplete"])
    return figures


def kill_report(f: dict[str, Any]) -> None:
    """The kill run's figures and the bar."""
    print(f"kill -9: {f['kills']} kills ({f['kills_after_ack']} just after an acknowledgement) in {f['attempts']} "
          f"attempts ({f['finished_before_kill']} runs ended before their kill), {f['seconds']} s; "
          f"variants {', '.join(f['variants'])}, {f['steps']} supersteps")
    print("  slowest: " + ", ".join(f"{k} {v:.2f} s" for k, v in f["slowest_seconds"].items()))
    print(f"  checkpoints acknowledged: {f['acknowledged']} "
          f"({', '.join(f'{k} {v}' for k, v in f['acknowledged_by_variant'].items())})")
    print(f"  acknowledged and lost (missing, or read back different): {f['lost_count']}")
    for line in f["lost"][:10]:
        print(f"    {line}")
    print(f"  git fsck --strict after every kill and at the end: {'clean' if not f['fsck'] else 'NOT clean'}")
    for line in f["fsck"][:5]:
        print(f"    {line}")
    print(f"  left behind after the kills: {f['left_after_kills']}; after the last run: {f['left_at_end']}")
    done = sum(1 for t in f["threads"] if t not in f["incomplete"])
    print(f"  threads run to the end afterwards: {done} of {len(f['threads'])} reached n={f['steps']}"
          + (f"; incomplete: {', '.join(f['incomplete'])}" if f["incomplete"] else ""))
    for err in f["died"][:3]:
        print(f"  a child died on its own: {err.strip()[-600:]}")
    print(f"  bar: kill -9 during the end-to-end run, zero acknowledged checkpoints lost, git fsck --strict "
          f"clean: {'met' if f['ok'] else 'MISSED'}")


# -- report ----------------------------------------------------------------------------------------


def spread(values: list[float]) -> str:
    """``min–max``."""
    return f"{min(values):.2f}–{max(values):.2f}"


def report(results: dict[tuple[str, str, str], list[Run]], backends: list[str], steps: int) -> None:
    """The tables: per variant, each backend's medians and means, then gitstate's ratios."""
    for workload in WORKLOADS:
        for durability in DURABILITIES:
            key = (workload, durability)
            if not any((b, *key) in results for b in backends):
                continue
            print(f"\n== {workload}, durability={durability}, {steps} supersteps ==")
            print(f"{'backend':<20}{'wall med':>10}{'wall mean':>11}{'CPU med':>10}{'CPU mean':>10}"
                  f"{'ms/step':>9}")
            for b in backends:
                runs = results.get((b, *key))
                if not runs:
                    continue
                walls, cpus = [r.wall for r in runs], [r.cpu for r in runs]
                print(f"{b:<20}{statistics.median(walls):>9.3f}s{statistics.fmean(walls):>10.3f}s"
                      f"{statistics.median(cpus):>9.3f}s{statistics.fmean(cpus):>9.3f}s"
                      f"{statistics.median(walls) / steps * 1e3:>9.2f}")
            for g in GITSTATE:
                for ref in ("sqlite", "postgres"):
                    gr, rr = results.get((g, *key)), results.get((ref, *key))
                    if not gr or not rr:
                        continue
                    for what in ("wall", "cpu"):
                        ratios = [getattr(x, what) / max(getattr(y, what), 1e-6) for x, y in zip(gr, rr, strict=True)]
                        bar = BARS.get((g, ref)) if what == "wall" else None
                        rmed = statistics.median(ratios)
                        mark = "" if bar is None else f"  bar ≤{bar}x {'met' if rmed <= bar else 'MISSED'}"
                        print(f"  {g} / {ref} {what:<4}: median {rmed:.2f}x  mean {statistics.fmean(ratios):.2f}x"
                              f"  spread {spread(ratios)}{mark}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=300, help="supersteps per run (300)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds; each runs every backend on every variant (3)")
    ap.add_argument("--backends", default=",".join(BACKENDS),
                    help="comma-separated, of " + ",".join((*BACKENDS, *NAMED_ONLY)))
    ap.add_argument("--workloads", default=",".join(WORKLOADS), help="plain,messages")
    ap.add_argument("--durability", default=",".join(DURABILITIES), help="sync,async")
    ap.add_argument("--no-postgres", action="store_true", help="leave PostgresSaver out")
    ap.add_argument("--no-count", action="store_true", help="skip the counting pass (files created, fsyncs)")
    ap.add_argument("--count-workloads", default=None, help="workloads of the counting pass (default: --workloads)")
    ap.add_argument("--dir", default=None, help="work here (kept) instead of a temporary directory")
    ap.add_argument("--kill", type=int, default=0, metavar="N",
                    help="measure nothing: SIGKILL a child running the graph N times, check no acknowledged "
                         "checkpoint is lost (see above)")
    ap.add_argument("--kill-delay", type=float, default=2.0,
                    help="--kill: each kill comes after a random 0..this many seconds of the run (2.0)")
    ap.add_argument("--seed", type=int, default=1, help="--kill: seed of the random delays (1)")
    ap.add_argument("--json", default=None, help="--kill: write the figures here as JSON")
    ap.add_argument("--kill-child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--child-out", help=argparse.SUPPRESS)
    ap.add_argument("--pg-uri", default="", help=argparse.SUPPRESS)
    ap.add_argument("--pg-data", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.steps, args.dir, args.pg_uri, args.pg_data, args.child_out)
        return
    if args.kill_child:
        kill_child()
        return
    backends = [b for b in args.backends.split(",") if b]
    unknown = set(backends) - {*BACKENDS, *GITSTATE}
    if unknown:
        ap.error(f"unknown backend(s): {', '.join(sorted(unknown))}")
    workloads = [w for w in args.workloads.split(",") if w in WORKLOADS]
    durabilities = [d for d in args.durability.split(",") if d in DURABILITIES]
    if args.no_postgres and "postgres" in backends:
        backends.remove("postgres")
    work = args.dir or tempfile.mkdtemp(prefix="bench-e2e-")
    os.makedirs(work, exist_ok=True)
    if args.kill:
        try:
            figures = kill_run(args.kill, args.steps, workloads, durabilities, args.kill_delay, args.seed, work)
        finally:
            if not args.dir:
                shutil.rmtree(work, ignore_errors=True)
        kill_report(figures)
        if args.json:
            with open(args.json, "w", encoding="utf-8") as fh:
                json.dump(figures, fh, indent=2)
        sys.exit(0 if figures["ok"] else 1)
    pg: Postgres | None = None
    try:
        if "postgres" in backends:
            try:
                import langgraph.checkpoint.postgres  # noqa: F401
                import psycopg  # noqa: F401
                pg = Postgres(tempfile.mkdtemp(prefix="pg-", dir=work))
                pg.start()
            except (ImportError, RuntimeError, OSError) as exc:
                print(f"PostgresSaver skipped: {exc}")
                backends.remove("postgres")
                pg = None
        print(f"gitstate {gitstate.__version__}, sqlite {sqlite3.sqlite_version}"
              + (f", postgres {pg.version}" if pg else "") + f", python {sys.version.split()[0]}; "
              f"{args.steps} supersteps per run, {args.rounds} rounds, backends {', '.join(backends)}")
        results: dict[tuple[str, str, str], list[Run]] = {}
        counter = iter(range(10**6))
        for rnd in range(args.rounds):
            order = backends[rnd % len(backends):] + backends[:rnd % len(backends)]
            for workload in workloads:
                for durability in durabilities:
                    for b in order:
                        base = tempfile.mkdtemp(prefix=f"r{next(counter)}-", dir=work)
                        run = run_once(b, workload, durability, args.steps, base, pg)
                        results.setdefault((b, workload, durability), []).append(run)
                        if not args.dir:
                            shutil.rmtree(base, ignore_errors=True)
            print(f"round {rnd + 1} done", flush=True)
        report(results, backends, args.steps)
        if not args.no_count:
            print(f"\n== per superstep, each run alone in a child process (files: inotify IN_CREATE in the "
                  f"store's directories; syncs: {'strace -f, ' + '/'.join(SYNC_CALLS) if shutil.which('strace') else 'strace missing: not counted'}"
                  "; postgres: the server's WAL syncs from pg_stat_wal) ==")
            keys = ["files", "dirs", "renames", "unlinks", "syncs"]
            print(f"{'backend':<20}{'variant':<16}" + "".join(f"{k:>9}" for k in keys))
            count_workloads = workloads if args.count_workloads is None else [
                w for w in args.count_workloads.split(",") if w in WORKLOADS]
            for workload in count_workloads:
                for durability in durabilities:
                    for b in backends:
                        c = count_run(f"{b},{workload},{durability}", args.steps, work, pg)
                        cells = "".join(f"{c[k]:>9.2f}" if k in c else f"{'—':>9}" for k in keys)
                        flag = "  (inotify queue overflowed: undercounted)" if c.get("overflow") else ""
                        print(f"{b:<20}{workload + '/' + durability:<16}{cells}{flag}", flush=True)
    finally:
        if pg is not None:
            try:
                pg.stop()
            except RuntimeError as exc:
                print(f"warning: {exc}", file=sys.stderr)
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
