#!/usr/bin/env python3
"""Benchmark gitstate against the two stores users would otherwise pick, in one run, side by side.

- ``gitstate``: the library (``open_store``, ``create_run``, ``checkpoint``, ``head``, ``load``,
  ``history``, ``list_runs``) in a fresh git repository.
- ``json``: a JSON-file run store as a JSON-file state store keeps runs: one file per
  run, ``<dir>/<id>.json``, holding the latest ``WorkflowState`` only (2-space indented JSON with id,
  workflow name, current step, status, step history, metadata and the state); every save rewrites the
  whole file atomically (write ``<id>.json.tmp``, fsync, rename); listing reads every file.
- ``sqlite``: a checkpoint table: one row per checkpoint, state as
  JSON text (``checkpoint_data``), metadata as JSON, WAL mode, an index on (session, id); history is
  a SELECT of a session's rows, read by id is a primary-key lookup, listing runs an aggregate query.

The main comparison runs everything without flushing to disk (gitstate with ``fsync=False``, ``json``
without its fsync, ``sqlite`` with ``synchronous=NORMAL``, under which WAL commits do not fsync). The
write phase is then repeated ``--repeat`` times on fresh stores (all runs printed, medians, means
and the spread of the ratios at steps 1..W and at the last W steps). The "durable writes" tables
compare the flushing variants (``json`` with fsync, ``sqlite`` with Python's default
``synchronous=FULL``) with gitstate under git's default ``core.fsync`` (each checkpoint's pack and
index flushed, as git flushes packs) and under ``core.fsync=all`` (refs, reflogs and directories
too).

Workload: a state whose ``messages`` list grows by one ~400-byte item (varied generated text) per
step, plus a few small changing keys. Writes are interleaved across stores step by step (machine
noise hits all alike); the write latency "at step 1" is taken over steps 1..W and "at step N" over
the last W steps. Reads decode the state. Ratios are gitstate / alternative: below 1 means gitstate
is faster (or smaller).

Usage: ``python scripts/bench_core.py [--steps 1000] [--runs 10000] [--repeat 3] [--quick] [--profile]``.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import json
import math
import os
import pstats
import random
import re
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pygit2

import gitstate

# -- workload ------------------------------------------------------------------------------------

_WORDS = (
    "agent plan tool result file patch test failure retry branch commit review model prompt context "
    "token budget summary issue fix regression parser module function argument return value error "
    "trace log output input config schema migration database index query cache latency request "
    "response handler worker queue event stream buffer chunk offset cursor window batch shard replica "
    "lease lock timeout deadline checkpoint rollback fork merge diff hunk line column symbol scope type "
    "generic interface protocol adapter client server socket header payload encoding decoding "
    "the a an of to in for with on by from into over under after before while because although "
    "quickly carefully again still already never often rarely maybe probably clearly"
).split()
_ROLES = ("user", "assistant", "tool", "assistant", "assistant")
_NODES = ("plan", "search", "edit", "test", "review")


def sentence(rng: random.Random) -> str:
    """One generated English-ish sentence."""
    words = [rng.choice(_WORDS) for _ in range(rng.randint(6, 16))]
    text = " ".join(words)
    return text[0].upper() + text[1:] + rng.choice((".", ".", ".", "?", "!"))


def make_item(rng: random.Random, step: int) -> dict[str, Any]:
    """One message of about 400 bytes of JSON with varied text."""
    role = _ROLES[step % len(_ROLES)]
    content = ""
    while len(content) < 300:
        content += sentence(rng) + " "
    item: dict[str, Any] = {"role": role, "content": content[:rng.randint(300, 340)].rstrip(), "step": step}
    if role == "tool":
        item["tool"] = rng.choice(("read_file", "run_tests", "grep", "apply_patch"))
        item["ok"] = rng.random() > 0.2
    return item


class Workload:
    """The state as it evolves: one message appended per step, a few small keys changing."""

    def __init__(self, seed: int = 7) -> None:
        self.rng = random.Random(seed)
        self.messages: list[dict[str, Any]] = []

    def state(self, step: int) -> dict[str, Any]:
        """The state after ``step`` (steps are numbered from 1; call in order)."""
        self.messages.append(make_item(self.rng, step))
        node = _NODES[(step // 7) % len(_NODES)]
        return {
            "messages": self.messages,
            "step": step,
            "node": node,
            "vars": {"cursor": step * 3, "phase": node, "retries": step % 3, "ok": step % 5 != 0},
            "status": "running",
        }


def node_of(step: int) -> str:
    """The node a step belongs to (as in :meth:`Workload.state`)."""
    return _NODES[(step // 7) % len(_NODES)]


# -- the three stores ----------------------------------------------------------------------------


class Backend:
    """The operations compared; ``None`` results mean the store has no such operation."""

    name = "?"
    has_load = True
    has_history = True

    def create_run(self, run_id: str, workflow: str) -> Any:
        """Create a run and return a handle for the other calls."""
        raise NotImplementedError

    def checkpoint(self, run: Any, state: dict[str, Any], step: int) -> Any:
        """Save ``state`` as the next checkpoint of ``run``; return its id."""
        raise NotImplementedError

    def head(self, run: Any) -> Any:
        """The latest state of ``run``, decoded."""
        raise NotImplementedError

    def load(self, run: Any, cp_id: Any) -> Any:
        """The state of one checkpoint, decoded."""
        raise NotImplementedError

    def history(self, run: Any) -> list[Any]:
        """Every checkpoint of ``run``, newest first, metadata decoded (not the state)."""
        raise NotImplementedError

    def history_states(self, run: Any) -> list[Any]:
        """Every checkpoint of ``run``, newest first, with the state decoded."""
        raise NotImplementedError

    def list_runs(self) -> list[Any]:
        """Summaries of every run, most recently updated first."""
        raise NotImplementedError

    def disk_bytes(self) -> int:
        """Bytes the store occupies on disk."""
        raise NotImplementedError

    def close(self) -> None:
        """Release handles."""


def _git(cwd: str, *args: str) -> str:
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "b@x",
           "GIT_COMMITTER_NAME": "bench", "GIT_COMMITTER_EMAIL": "b@x"}
    for var in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "AGENTOS_REPO"):
        env.pop(var, None)
    out = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)}: {out.stderr.strip()}")
    return out.stdout


def _tree_bytes(path: str) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


_LOOSE_DIR = re.compile(r"^[0-9a-f]{2}$")


def loose_objects(git_dir: str) -> int:
    """Number of loose objects under ``.git/objects``."""
    objects = os.path.join(git_dir, "objects")
    return sum(len(os.listdir(os.path.join(objects, d))) for d in os.listdir(objects) if _LOOSE_DIR.match(d))


class GitstateBackend(Backend):
    """gitstate in a fresh repository (one commit on ``main``, like a user's project)."""

    name = "gitstate"

    def __init__(self, root: str, fsync: bool | None = False, core_fsync: str | None = None) -> None:
        os.makedirs(root)
        _git(root, "init", "-q", "-b", "main")
        with open(os.path.join(root, "README"), "w") as fh:
            fh.write("project\n")
        _git(root, "add", "README")
        _git(root, "commit", "-q", "-m", "initial")
        if core_fsync is not None:
            _git(root, "config", "core.fsync", core_fsync)
        self.root = root
        self.store = gitstate.open_store(root, fsync=fsync)  # None: as the repository's core.fsync says
        self.git_dir = self.store.location.common_dir

    def create_run(self, run_id: str, workflow: str) -> Any:
        return self.store.create_run(workflow=workflow, run_id=run_id)

    def checkpoint(self, run: Any, state: dict[str, Any], step: int) -> Any:
        return run.checkpoint(state, node=node_of(step), trigger="tool_end",
                              metadata={"tool_track_position": step}).id

    def head(self, run: Any) -> Any:
        return run.head().state

    def load(self, run: Any, cp_id: Any) -> Any:
        return run.load(cp_id).state

    def history(self, run: Any) -> list[Any]:
        return list(run.history())

    def history_states(self, run: Any) -> list[Any]:
        return [cp.state for cp in run.history()]

    def list_runs(self) -> list[Any]:
        return self.store.list_runs()

    def disk_bytes(self) -> int:
        g = self.git_dir
        total = _tree_bytes(os.path.join(g, "objects")) + _tree_bytes(os.path.join(g, "refs"))
        total += _tree_bytes(os.path.join(g, "logs")) + _tree_bytes(os.path.join(g, "agentos"))
        packed = os.path.join(g, "packed-refs")
        return total + (os.path.getsize(packed) if os.path.exists(packed) else 0)

    def objects_bytes(self) -> int:
        """Sum of file sizes under ``.git/objects`` (the issue's bar)."""
        return _tree_bytes(os.path.join(self.git_dir, "objects"))

    def close(self) -> None:
        self.store.close()


_UNSAFE = re.compile(r"[^a-zA-Z0-9_-]")


class JsonBackend(Backend):
    """Seed 003's ``StateStore``: ``<dir>/<id>.json``, latest state only, atomic rename per save."""

    has_load = False
    has_history = False

    def __init__(self, root: str, fsync: bool) -> None:
        os.makedirs(root)
        self.dir = root
        self.fsync = fsync
        self.name = "json+fsync" if fsync else "json"

    def _path(self, run_id: str) -> str:
        return os.path.join(self.dir, _UNSAFE.sub("_", run_id) + ".json")

    def _save(self, ws: dict[str, Any]) -> None:
        path = self._path(ws["id"])
        tmp = path + ".tmp"
        data = json.dumps(ws, indent=2).encode()
        with open(tmp, "wb") as fh:
            fh.write(data)
            if self.fsync:
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(tmp, path)

    def create_run(self, run_id: str, workflow: str) -> Any:
        now = datetime.now(UTC).isoformat()
        ws: dict[str, Any] = {"id": run_id, "workflow_name": workflow, "current_step": "", "status": "running",
              "step_history": [], "metadata": {}, "created_at": now, "updated_at": now, "state": None}
        self._save(ws)
        return ws

    def checkpoint(self, run: Any, state: dict[str, Any], step: int) -> Any:
        now = datetime.now(UTC).isoformat()
        run["current_step"] = node_of(step)
        run["step_history"].append({"step": node_of(step), "event": "tool_end", "at": now})
        run["metadata"]["tool_track_position"] = step
        run["updated_at"] = now
        run["state"] = state
        self._save(run)
        return step

    def _read(self, path: str) -> dict[str, Any]:
        with open(path, "rb") as fh:
            data: dict[str, Any] = json.loads(fh.read())
        return data

    def head(self, run: Any) -> Any:
        return self._read(self._path(run["id"]))["state"]

    def list_runs(self) -> list[Any]:
        out = []
        for name in os.listdir(self.dir):
            if not name.endswith(".json"):
                continue
            try:
                ws = self._read(os.path.join(self.dir, name))
            except (OSError, ValueError):
                continue  # the seed: a corrupt file is skipped, not fatal
            out.append({"id": ws["id"], "workflow_name": ws["workflow_name"], "current_step": ws["current_step"],
                        "status": ws["status"], "updated_at": ws["updated_at"],
                        "step_count": len(ws["step_history"])})
        out.sort(key=lambda s: s["updated_at"], reverse=True)
        return out

    def disk_bytes(self) -> int:
        return _tree_bytes(self.dir)


_SCHEMA = """
CREATE TABLE IF NOT EXISTS internal_sessions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    external_session_id INTEGER NOT NULL DEFAULT 1,
    langgraph_session_id TEXT NOT NULL UNIQUE,
    workflow TEXT,
    metadata TEXT,
    created_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS checkpoints (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    internal_session_id INTEGER NOT NULL REFERENCES internal_sessions(id),
    checkpoint_name TEXT,
    metadata TEXT,
    is_auto INTEGER NOT NULL DEFAULT 1,
    created_at TEXT NOT NULL,
    user_id INTEGER NOT NULL DEFAULT 1,
    checkpoint_data TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS idx_checkpoints_session ON checkpoints(internal_session_id, id);
"""


class SqliteBackend(Backend):
    """AgentGit's checkpoint table: one row per checkpoint, state as JSON text, WAL.

    Kinder to SQLite than the seed's model, on purpose: metadata gets its own JSON column (the seed
    keeps it inside ``checkpoint_data``), and the large ``checkpoint_data`` column comes last, so a
    metadata-only SELECT does not walk the overflow pages of every row's state."""

    def __init__(self, root: str, synchronous: str) -> None:
        os.makedirs(root)
        self.path = os.path.join(root, "agentgit.db")
        self.db = sqlite3.connect(self.path)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute(f"PRAGMA synchronous={synchronous}")
        self.db.execute("PRAGMA foreign_keys=ON")
        self.db.executescript(_SCHEMA)
        self.db.commit()
        self.name = "sqlite" if synchronous == "NORMAL" else "sqlite+fsync"

    def create_run(self, run_id: str, workflow: str) -> Any:
        cur = self.db.execute(
            "INSERT INTO internal_sessions (langgraph_session_id, workflow, metadata, created_at) VALUES (?,?,?,?)",
            (run_id, workflow, "{}", datetime.now(UTC).isoformat()))
        self.db.commit()
        return cur.lastrowid

    def checkpoint(self, run: Any, state: dict[str, Any], step: int) -> Any:
        meta = {"trigger_type": "tool_end", "node_id": node_of(step), "tool_track_position": step, "step": step}
        cur = self.db.execute(
            "INSERT INTO checkpoints (internal_session_id, checkpoint_name, checkpoint_data, metadata, created_at)"
            " VALUES (?,?,?,?,?)",
            (run, f"{node_of(step)} · step {step}", json.dumps(state), json.dumps(meta),
             datetime.now(UTC).isoformat()))
        self.db.commit()
        return cur.lastrowid

    def head(self, run: Any) -> Any:
        row = self.db.execute("SELECT checkpoint_data FROM checkpoints WHERE internal_session_id=?"
                              " ORDER BY id DESC LIMIT 1", (run,)).fetchone()
        return json.loads(row[0])

    def load(self, run: Any, cp_id: Any) -> Any:
        row = self.db.execute("SELECT checkpoint_data, metadata FROM checkpoints WHERE id=?", (cp_id,)).fetchone()
        json.loads(row[1])
        return json.loads(row[0])

    def history(self, run: Any) -> list[Any]:
        rows = self.db.execute("SELECT id, checkpoint_name, metadata, created_at FROM checkpoints"
                               " WHERE internal_session_id=? ORDER BY id DESC", (run,)).fetchall()
        return [(r[0], r[1], json.loads(r[2]), r[3]) for r in rows]

    def history_states(self, run: Any) -> list[Any]:
        rows = self.db.execute("SELECT id, metadata, checkpoint_data FROM checkpoints"
                               " WHERE internal_session_id=? ORDER BY id DESC", (run,)).fetchall()
        return [(r[0], json.loads(r[1]), json.loads(r[2])) for r in rows]

    def list_runs(self) -> list[Any]:
        rows = self.db.execute(
            "SELECT s.langgraph_session_id, s.workflow, t.n, c.created_at, c.metadata"
            " FROM (SELECT internal_session_id AS sid, COUNT(*) AS n, MAX(id) AS last FROM checkpoints"
            "       GROUP BY internal_session_id) AS t"
            " JOIN internal_sessions s ON s.id = t.sid JOIN checkpoints c ON c.id = t.last"
            " ORDER BY c.created_at DESC").fetchall()
        out = []
        for run_id, workflow, n, updated, meta in rows:
            m = json.loads(meta)
            out.append({"id": run_id, "workflow": workflow, "checkpoints": n, "updated_at": updated,
                        "node": m.get("node_id"), "status": m.get("status", "running")})
        return out

    def disk_bytes(self) -> int:
        return sum(os.path.getsize(self.path + ext) for ext in ("", "-wal", "-shm")
                   if os.path.exists(self.path + ext))

    def close(self) -> None:
        self.db.close()


# -- measuring -----------------------------------------------------------------------------------


def pctl(samples: list[float], q: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


@dataclass
class Result:
    """Latency samples (seconds) of one operation on each store, or a size."""

    op: str
    samples: dict[str, list[float]] = field(default_factory=dict)
    note: str = ""
    unit: str = "s"  # "s" (latencies) or "B" (bytes: one sample)

    def med(self, name: str) -> float | None:
        s = self.samples.get(name)
        return statistics.median(s) if s else None

    def p99(self, name: str) -> float | None:
        s = self.samples.get(name)
        return pctl(s, 0.99) if s else None


def timed(fn: Callable[[], Any]) -> float:
    """Seconds one call of ``fn`` takes."""
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _fmt_time(sec: float | None) -> str:
    if sec is None:
        return "—"
    if sec < 1e-3:
        return f"{sec * 1e6:.0f}µs"
    if sec < 1:
        return f"{sec * 1e3:.2f}ms"
    return f"{sec:.2f}s"


def _fmt_bytes(n: float | None) -> str:
    if n is None:
        return "—"
    for unit, size in (("GB", 1 << 30), ("MB", 1 << 20), ("kB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f}{unit}"
    return f"{n:.0f}B"


def _ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or b == 0:
        return "—"
    return f"{a / b:.2f}×"


def print_table(title: str, results: list[Result], alts: list[str], out: io.TextIOBase | Any) -> None:
    """The comparison table: median and p99 per store, ratios gitstate/alternative, a verdict."""
    print(f"\n{title}", file=out)
    head = f"{'operation':<34} {'gitstate':>19}"
    for a in alts:
        head += f" {a:>19}"
    for a in alts:
        head += f" {'÷' + a:>13}"
    print(head, file=out)
    print(f"{'':<34} {'median / p99':>19}" + f" {'median / p99':>19}" * len(alts)
          + f" {'(median)':>13}" * len(alts), file=out)
    print("-" * len(head), file=out)
    for r in results:
        fmt = _fmt_bytes if r.unit == "B" else _fmt_time

        def cell(name: str, r: Result = r, fmt: Callable[[float | None], str] = fmt) -> str:
            m, p = r.med(name), r.p99(name)
            if m is None:
                return "n/a"
            return fmt(m) if r.unit == "B" else f"{fmt(m)} / {fmt(p)}"
        line = f"{r.op:<34} {cell('gitstate'):>19}"
        for a in alts:
            line += f" {cell(a):>19}"
        for a in alts:
            line += f" {_ratio(r.med('gitstate'), r.med(a)):>13}"
        print(line, file=out)
    print("", file=out)
    for r in results:
        print(f"  {r.op}: {verdict(r, alts)}" + (f"  [{r.note}]" if r.note else ""), file=out)


def print_repeats(title: str, runs: list[dict[str, list[float]]], cfg: Config, alts: list[str], out: Any) -> None:
    """Write latencies of several runs: each run's median per window and ratio to each alternative,
    then the median and mean over the runs and the spread (min-max) of the ratios."""
    w = min(cfg.window, max(1, cfg.steps // 2))
    windows = [(f"step 1..{w}", slice(0, w)), (f"step {cfg.steps - w + 1}..{cfg.steps}", slice(cfg.steps - w, cfg.steps))]
    print(f"\n{title}", file=out)
    for label, cut in windows:
        ratios: dict[str, list[float]] = {a: [] for a in alts}
        meds: dict[str, list[float]] = {}
        for n, lat in enumerate(runs, 1):
            m = {name: statistics.median(v[cut]) for name, v in lat.items()}
            for name, value in m.items():
                meds.setdefault(name, []).append(value)
            cells = []
            for a in alts:
                if a in m and m[a]:
                    ratios[a].append(m["gitstate"] / m[a])
                    cells.append(f"÷{a} {m['gitstate'] / m[a]:.2f}×")
            print(f"  write @ {label:<16} run {n}: gitstate {_fmt_time(m['gitstate'])}  " + "  ".join(cells), file=out)
        summary = []
        for a in alts:
            if ratios[a]:
                summary.append(f"÷{a} median {statistics.median(ratios[a]):.2f}× mean {statistics.fmean(ratios[a]):.2f}× "
                               f"[{min(ratios[a]):.2f}–{max(ratios[a]):.2f}]")
        print(f"  write @ {label:<16} over {len(runs)} runs: gitstate median {_fmt_time(statistics.median(meds['gitstate']))}"
              f"; " + "; ".join(summary), file=out)


def verdict(r: Result, alts: list[str]) -> str:
    """One line saying where gitstate wins and loses on this operation."""
    g = r.med("gitstate")
    if g is None:
        return "gitstate not measured"
    better: list[str] = []
    worse: list[str] = []
    word = "smaller" if r.unit == "B" else "faster"
    for a in alts:
        m = r.med(a)
        if m is None:
            continue
        (better if g < m else worse).append(f"{a} ({g / m:.2f}×)")
    parts = []
    if better:
        parts.append(f"gitstate {word} than " + ", ".join(better))
    if worse:
        parts.append(("larger than " if r.unit == "B" else "SLOWER than ") + ", ".join(worse))
    return "; ".join(parts) if parts else "no alternative has this operation"


# -- the benchmark -------------------------------------------------------------------------------


@dataclass
class Config:
    """Sizes of one benchmark run."""

    steps: int
    runs: int
    window: int
    reads: int
    history_reps: int
    state_history_reps: int
    list_reps: int
    durable: bool
    profile: bool
    repeat: int = 1


def write_phase(backends: list[Backend], cfg: Config, bar: GitstateBackend | None = None,
                ) -> tuple[dict[str, Any], dict[str, list[Any]], dict[str, list[float]], int]:
    """Write ``cfg.steps`` checkpoints on one run of each store, interleaved step by step.

    Returns the run handles, the checkpoint ids, the per-step write latencies and (when ``bar`` is
    given) the most loose objects seen in its repository after any step."""
    workload = Workload()
    runs = {b.name: b.create_run("bench-run", "bench-workflow") for b in backends}
    ids: dict[str, list[Any]] = {b.name: [] for b in backends}
    lat: dict[str, list[float]] = {b.name: [] for b in backends}
    max_loose = 0
    gc.collect()
    for step in range(1, cfg.steps + 1):
        state = workload.state(step)
        order = backends[step % len(backends):] + backends[:step % len(backends)]
        for b in order:
            t0 = time.perf_counter()
            cp = b.checkpoint(runs[b.name], state, step)
            lat[b.name].append(time.perf_counter() - t0)
            ids[b.name].append(cp)
        if bar is not None:
            max_loose = max(max_loose, loose_objects(bar.git_dir))
    return runs, ids, lat, max_loose


def write_results(lat: dict[str, list[float]], cfg: Config, suffix: str = "") -> list[Result]:
    """Write latencies over the first and the last ``cfg.window`` steps."""
    w = min(cfg.window, max(1, cfg.steps // 2))
    first = Result(f"write @ step 1..{w}{suffix}", {k: v[:w] for k, v in lat.items()})
    last = Result(f"write @ step {cfg.steps - w + 1}..{cfg.steps}{suffix}", {k: v[-w:] for k, v in lat.items()})
    return [first, last]


def interleaved(backends: list[Backend], reps: int, op: Callable[[Backend], Callable[[], Any] | None],
                ) -> dict[str, list[float]]:
    """Time ``op(backend)()`` ``reps`` times per store, alternating stores each repetition."""
    out: dict[str, list[float]] = {}
    calls = {b.name: op(b) for b in backends}
    gc.collect()
    for i in range(reps):
        order = backends[i % len(backends):] + backends[:i % len(backends)]
        for b in order:
            fn = calls[b.name]
            if fn is not None:
                out.setdefault(b.name, []).append(timed(fn))
    return out


def read_phase(backends: list[Backend], runs: dict[str, Any], ids: dict[str, list[Any]], cfg: Config,
               ) -> list[Result]:
    """Head, read by id and history of the written run."""
    results = [Result("read head (state decoded)",
                      interleaved(backends, cfg.reads, lambda b: lambda: b.head(runs[b.name])))]
    rng = random.Random(11)
    picks = [rng.randrange(cfg.steps) for _ in range(cfg.reads)]

    def by_id(b: Backend) -> Callable[[], Any] | None:
        if not b.has_load:
            return None
        it = iter(picks * 2)
        return lambda: b.load(runs[b.name], ids[b.name][next(it)])
    results.append(Result("read by id (state decoded)", interleaved(backends, cfg.reads, by_id),
                          note="random checkpoint of the run"))
    results.append(Result(f"history of {cfg.steps} (metadata)", interleaved(
        backends, cfg.history_reps, lambda b: (lambda: b.history(runs[b.name])) if b.has_history else None)))
    if cfg.state_history_reps:
        results.append(Result(f"history of {cfg.steps} (+ states)", interleaved(
            backends, cfg.state_history_reps,
            lambda b: (lambda: b.history_states(runs[b.name])) if b.has_history else None),
            note="every checkpoint's full state decoded"))
    return results


def populate_runs(b: Backend, n: int) -> float:
    """Create ``n`` small runs with one checkpoint each (setup, not measured); returns seconds taken."""
    rng = random.Random(5)
    t0 = time.perf_counter()
    for i in range(n):
        run = b.create_run(f"run-{i:05d}", "bench-workflow")
        b.checkpoint(run, {"messages": [make_item(rng, 1)], "step": 1, "status": "running"}, 1)
    return time.perf_counter() - t0


def _sizes(backends: list[Backend]) -> dict[str, list[float]]:
    return {b.name: [float(b.disk_bytes())] for b in backends}


def profile_op(label: str, fn: Callable[[], Any], reps: int, out: Any, top: int = 18) -> None:
    """Run ``fn`` ``reps`` times under cProfile and print where the time goes."""
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(reps):
        fn()
    prof.disable()
    buf = io.StringIO()
    stats = pstats.Stats(prof, stream=buf)
    stats.sort_stats("tottime").print_stats(top)
    print(f"\n=== cProfile: gitstate {label} ({reps} calls), by own time ===", file=out)
    text = buf.getvalue()
    start = text.find("   ncalls")
    print(text[start:] if start >= 0 else text, file=out)


def run(cfg: Config, workdir: str, out: Any = sys.stdout) -> dict[str, Any]:
    """Run the whole benchmark in ``workdir``; print the tables; return the figures."""
    print(f"gitstate {gitstate.__version__}, pygit2 {pygit2.__version__}, libgit2 {pygit2.LIBGIT2_VERSION}, "
          f"sqlite {sqlite3.sqlite_version}, python {sys.version.split()[0]}", file=out)
    print(f"steps={cfg.steps} runs={cfg.runs} window={cfg.window} reads={cfg.reads} in {workdir}", file=out)
    alts = ["json", "sqlite"]
    g = GitstateBackend(os.path.join(workdir, "gitstate"))
    user_before = _user_snapshot(g.root)
    js = JsonBackend(os.path.join(workdir, "json"), fsync=False)
    sq = SqliteBackend(os.path.join(workdir, "sqlite"), "NORMAL")
    backends: list[Backend] = [g, js, sq]

    t0 = time.perf_counter()
    runs, ids, lat, max_loose = write_phase(backends, cfg, bar=g)
    print(f"write phase: {time.perf_counter() - t0:.1f}s", file=out)
    results = write_results(lat, cfg)
    worst = {k: (max(v), v.index(max(v)) + 1) for k, v in lat.items()}
    results += read_phase(backends, runs, ids, cfg)
    sizes = Result(f"bytes on disk after {cfg.steps} steps", _sizes(backends), unit="B",
                   note="gitstate: objects+refs+logs+packed-refs+agentos; json: dir; sqlite: db+wal+shm")
    objects_bytes = g.objects_bytes()
    fsck = subprocess.run(["git", "fsck", "--strict"], cwd=g.root, capture_output=True, text=True)
    user_after = _user_snapshot(g.root)
    g.store.pack()
    packed_bytes = g.disk_bytes()

    # listing: fresh stores with cfg.runs small runs each
    g2 = GitstateBackend(os.path.join(workdir, "gitstate-runs"))
    j2 = JsonBackend(os.path.join(workdir, "json-runs"), fsync=False)
    s2 = SqliteBackend(os.path.join(workdir, "sqlite-runs"), "NORMAL")
    listing: list[Backend] = [g2, j2, s2]
    setup = {b.name: populate_runs(b, cfg.runs) for b in listing}
    print("setup of runs: " + ", ".join(f"{k} {v:.1f}s" for k, v in setup.items()), file=out)
    counts = {b.name: len(b.list_runs()) for b in listing}
    if len(set(counts.values())) != 1 or counts["gitstate"] != cfg.runs:
        raise RuntimeError(f"listing returned different run counts: {counts}")
    results.append(Result(f"list {cfg.runs} runs", interleaved(listing, cfg.list_reps, lambda b: b.list_runs)))
    _git(g2.root, "pack-refs", "--all")
    packed_list = interleaved([g2], cfg.list_reps, lambda b: b.list_runs)["gitstate"]
    results.append(Result(f"list {cfg.runs} runs, refs packed", {"gitstate": packed_list,
                                                                 "json": results[-1].samples["json"],
                                                                 "sqlite": results[-1].samples["sqlite"]},
                          note="after git pack-refs --all (gitstate only; others as above)"))
    results.append(sizes)
    results.append(Result(f"bytes on disk, {cfg.runs} runs", _sizes(listing), unit="B"))

    print_table("== gitstate vs the alternatives (no fsync anywhere) ==",
                results, alts, out)
    print("\nslowest single write over all steps: " + ", ".join(
        f"{k} {_fmt_time(t)} (step {i})" for k, (t, i) in worst.items())
        + "  (gitstate's includes packing its loose objects when the journal reaches 1,000)", file=out)
    print(f"gitstate after {cfg.steps} checkpoints: {_fmt_bytes(packed_bytes)} after store.pack() "
          f"(as left: {_fmt_bytes(sizes.med('gitstate'))})", file=out)

    runs_lat = [lat]
    for k in range(2, cfg.repeat + 1):
        again: list[Backend] = [GitstateBackend(os.path.join(workdir, f"gitstate-{k}")),
                                JsonBackend(os.path.join(workdir, f"json-{k}"), fsync=False),
                                SqliteBackend(os.path.join(workdir, f"sqlite-{k}"), "NORMAL")]
        runs_lat.append(write_phase(again, cfg)[2])
        for b in again:
            b.close()
    print_repeats(f"== writes, no fsync anywhere, {cfg.repeat} runs on fresh stores ==", runs_lat, cfg, alts, out)

    durable_results: list[Result] = []
    if cfg.durable:
        durable_runs: list[dict[str, list[float]]] = []
        all_runs: list[dict[str, list[float]]] = []
        t0 = time.perf_counter()
        for k in range(1, cfg.repeat + 1):
            gd = GitstateBackend(os.path.join(workdir, f"gitstate-fsync-{k}"), fsync=None)  # git's default
            ga = GitstateBackend(os.path.join(workdir, f"gitstate-all-{k}"), fsync=None, core_fsync="all")
            ga.name = "gitstate+all"
            jd = JsonBackend(os.path.join(workdir, f"json-fsync-{k}"), fsync=True)
            sd = SqliteBackend(os.path.join(workdir, f"sqlite-fsync-{k}"), "FULL")
            dlat = write_phase([gd, ga, jd, sd], cfg)[2]
            durable_runs.append({k2: v for k2, v in dlat.items() if k2 != "gitstate+all"})
            all_runs.append({("gitstate" if k2 == "gitstate+all" else k2): v for k2, v in dlat.items()
                             if k2 != "gitstate"})
            for durable in (gd, ga, jd, sd):
                durable.close()
        print(f"\ndurable write phases: {time.perf_counter() - t0:.1f}s", file=out)
        durable_alts = ["json+fsync", "sqlite+fsync"]
        durable_results = write_results(durable_runs[0], cfg)
        print_repeats("== durable writes: gitstate at git's default core.fsync (pack + idx flushed) vs json with "
                      "fsync vs sqlite synchronous=FULL ==", durable_runs, cfg, durable_alts, out)
        print_repeats("== durable writes: gitstate with core.fsync=all vs json with fsync vs sqlite "
                      "synchronous=FULL ==", all_runs, cfg, durable_alts, out)

    bar_ok = fsck.returncode == 0 and not fsck.stdout.strip() and objects_bytes <= 5 * 2**20 and max_loose < 6700
    print(f"\n== issue 2 bar after {cfg.steps} checkpoints of the ~400-byte append workload ==", file=out)
    print(f"git fsck --strict: {'clean' if fsck.returncode == 0 and not fsck.stdout.strip() else 'FAILED'}"
          f" (rc={fsck.returncode}{', ' + (fsck.stdout + fsck.stderr).strip()[:300] if fsck.returncode else ''})",
          file=out)
    print(f"files under .git/objects: {objects_bytes:,} bytes ({_fmt_bytes(objects_bytes)}; bar ≤ 5 MB)", file=out)
    print(f"max loose objects seen after any checkpoint: {max_loose} (bar < 6,700)", file=out)
    print(f"user HEAD/index/refs/heads unchanged: {user_before == user_after}", file=out)
    print(f"bar {'MET' if bar_ok and user_before == user_after else 'NOT MET'}", file=out)

    if cfg.profile:
        _profile_slower(results, g, g2, runs, ids, cfg, out)

    for b in backends + listing:
        b.close()
    return {
        "results": {r.op: {k: {"median": r.med(k), "p99": r.p99(k), "n": len(v)} for k, v in r.samples.items()}
                    for r in results + durable_results},
        "bar": {"fsck_clean": fsck.returncode == 0 and not fsck.stdout.strip(), "objects_bytes": objects_bytes,
                "max_loose": max_loose, "user_unchanged": user_before == user_after},
    }


def _profile_slower(results: list[Result], g: GitstateBackend, g2: GitstateBackend, runs: dict[str, Any],
                    ids: dict[str, list[Any]], cfg: Config, out: Any) -> None:
    """cProfile the gitstate side of every operation where an alternative was faster."""
    slower = [r for r in results if r.unit == "s" and any(
        r.med(a) is not None and r.med("gitstate") is not None and r.med("gitstate") > r.med(a)  # type: ignore[operator]
        for a in r.samples if a != "gitstate")]
    if not slower:
        print("\ngitstate is not slower than an alternative on any operation: nothing to profile", file=out)
        return
    run = runs["gitstate"]
    rng = random.Random(3)
    for r in slower:
        if r.op.startswith("write"):
            late = r.op.endswith(f"..{cfg.steps}")
            wl = Workload(seed=99)
            prun = g.store.create_run(workflow="profile", run_id=f"profile-{'late' if late else 'early'}")
            n = cfg.steps if late else 0
            for step in range(1, n - cfg.window + 1):
                prun.checkpoint(wl.state(step), node=node_of(step), trigger="tool_end")
            steps = iter(range(max(1, n - cfg.window + 1), 10**9))

            def write_one(prun: Any = prun, wl: Workload = wl, steps: Iterator[int] = steps) -> None:
                s = next(steps)
                prun.checkpoint(wl.state(s), node=node_of(s), trigger="tool_end")
            profile_op(r.op, write_one, cfg.window, out)
        elif r.op.startswith("read head"):
            profile_op(r.op, lambda: run.head().state, cfg.reads, out)
        elif r.op.startswith("read by id"):
            profile_op(r.op, lambda: run.load(rng.choice(ids["gitstate"])).state, cfg.reads, out)
        elif r.op.startswith("history") and "states" in r.op:
            profile_op(r.op, lambda: [cp.state for cp in run.history()], max(1, cfg.state_history_reps), out)
        elif r.op.startswith("history"):
            profile_op(r.op, lambda: list(run.history()), cfg.history_reps, out)
        elif r.op.startswith("list"):
            profile_op(r.op, g2.store.list_runs, max(1, cfg.list_reps // 2), out)


def _user_snapshot(root: str) -> tuple[str, bytes, str]:
    git_dir = os.path.join(root, ".git")
    with open(os.path.join(git_dir, "HEAD"), "rb") as fh:
        head = fh.read().decode()
    with open(os.path.join(git_dir, "index"), "rb") as fh:
        index = fh.read()
    return head, index, _git(root, "for-each-ref", "refs/heads", "refs/tags")


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--steps", type=int, default=1000, help="checkpoints written on the measured run (1000)")
    p.add_argument("--runs", type=int, default=10000, help="runs created for the listing benchmark (10000)")
    p.add_argument("--window", type=int, default=50, help="steps per write-latency window (50)")
    p.add_argument("--reads", type=int, default=200, help="repetitions of each read (200)")
    p.add_argument("--quick", action="store_true", help="smoke-size run (seconds, numbers not meaningful)")
    p.add_argument("--no-durable", action="store_true", help="skip the fsync comparison")
    p.add_argument("--repeat", type=int, default=3, help="runs of each write phase on fresh stores (3)")
    p.add_argument("--profile", action="store_true", help="cProfile gitstate where an alternative is faster")
    p.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    p.add_argument("--keep", metavar="DIR", help="work in DIR (kept) instead of a temporary directory")
    args = p.parse_args(argv)
    if args.quick:
        cfg = Config(steps=min(args.steps, 40), runs=min(args.runs, 30), window=5, reads=5, history_reps=2,
                     state_history_reps=1, list_reps=2, durable=not args.no_durable, profile=args.profile,
                     repeat=min(args.repeat, 2))
    else:
        cfg = Config(steps=args.steps, runs=args.runs, window=args.window, reads=args.reads, history_reps=20,
                     state_history_reps=3, list_reps=6, durable=not args.no_durable, profile=args.profile,
                     repeat=max(1, args.repeat))
    if cfg.steps < 2:
        p.error("--steps must be at least 2")
    if args.keep:
        os.makedirs(args.keep, exist_ok=False)
        workdir = args.keep
    else:
        workdir = tempfile.mkdtemp(prefix="gitstate-bench-")
    try:
        figures = run(cfg, workdir)
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(figures, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
