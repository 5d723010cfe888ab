"""Soak: writer processes that checkpoint, fork branches, snapshot files and pack with low
housekeeping thresholds are killed with SIGKILL at random, again and again; then the store is
checked as issue 14 asks.

Each writer appends ``<checkpoint id> <run> <branch> <seconds>`` to its own acknowledgement log
(an ``O_APPEND`` write after the call returned, so a SIGKILL never loses an acknowledged line) and
is killed at a random moment once it has opened its store. Thresholds are lowered in the writers
so that packing loose objects, merging transaction packs and packing refs run all the time and
are killed too. At the end:

- every acknowledged checkpoint is readable (state decoded) and on its branch's history;
- after one more normal write the repository holds fewer than 6,700 loose objects (git's
  ``gc.auto``);
- after one gitstate command no ``*.lock`` under ``refs/agentos/`` is older than a minute (the
  locks left are aged by two minutes first, so the rule is exercised, not waited for);
- ``git gc`` succeeds and ``git fsck --strict`` is clean; ``git agentos verify`` is ok.

Figures: kills, acknowledged writes, the slowest writes (the first write after a kill used to wait
for the 5 s stale-lock age in ~4 % of kills), locks and temporary files found after the kills and
after the command, loose objects, packs.

    python scripts/soak_kill.py --kills 200           # the soak (several minutes on 2 cores)
    python scripts/soak_kill.py --kills 25 --json out.json --keep /tmp/soak   # the suite's short form
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RUNS = ("alpha", "beta", "gamma")
LOOSE_LIMIT = 6700  # git's gc.auto

WRITER = r"""
import faulthandler, os, random, sys, time
faulthandler.enable()  # a writer that crashes in C code says where
import gitstate
from gitstate.store import housekeeping

# low thresholds: every kind of housekeeping runs often, and is killed often
housekeeping.PACK_THRESHOLD = 8
housekeeping.MERGE_THRESHOLD = 3
housekeeping.REF_PACK_THRESHOLD = 4
housekeeping.TX_MERGE_AT = 3
housekeeping.ORPHAN_AGE = 20.0

repo, acks, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
runs = sys.argv[4].split(",")
rng = random.Random(seed)
store = gitstate.open_store(repo)
fd = os.open(acks, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
print("ready", flush=True)
n = 0
while True:
    n += 1
    run = store.open_run(rng.choice(runs), workflow="soak")
    op = rng.random()
    start = time.monotonic()
    branch = "main"
    if op < 0.08 and run.head() is not None:
        branch = f"f{os.getpid()}-{n}"
        run.fork(run.head().id, branch)
        cp = run.checkpoint({"forked": n, "pid": os.getpid()}, branch=branch)
    elif op < 0.16:
        # replaced whole (temp file, rename), as editors do: another writer's snapshot may see the
        # temp file come and go while git adds the worktree (it tries again)
        work = os.path.join(repo, f"work-{rng.randrange(4)}.txt")
        with open(f"{work}.{os.getpid()}.tmp", "w") as fh:
            fh.write(f"{os.getpid()} {n}\n" * rng.randrange(1, 50))
        os.replace(f"{work}.{os.getpid()}.tmp", work)
        cp = run.checkpoint({"files": n, "pid": os.getpid()}, files=True)
    elif op < 0.20:
        store.pack()
        continue
    else:
        branches = sorted(run.branches())
        if branches and rng.random() < 0.3:
            branch = rng.choice(branches)
        log = [f"message {i} of {os.getpid()}" for i in range(n % 70)]
        cp = run.checkpoint({"n": n, "pid": os.getpid(), "messages": log, "blob": os.urandom(64)},
                            branch=branch)
    took = time.monotonic() - start
    os.write(fd, f"{cp.id} {run.id} {branch} {took:.4f}\n".encode())
"""


def git(repo: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed: {done.stderr}")
    return done


def _spawn(repo: str, acks: str, seed: int, code: str) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=code + os.pathsep + os.environ.get("PYTHONPATH", ""))
    # not started in a checkout: `python -c` puts the current directory first on sys.path
    proc = subprocess.Popen([sys.executable, "-c", WRITER, repo, acks, str(seed), ",".join(RUNS)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            cwd=os.path.dirname(acks))
    return proc


def _wait_ready(proc: subprocess.Popen[str], timeout: float = 60.0) -> bool:
    assert proc.stdout is not None
    import select

    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    return bool(ready) and proc.stdout.readline().strip() == "ready"


def read_acks(directory: str) -> list[tuple[str, str, str, float]]:
    """Every acknowledged write: ``(checkpoint id, run, branch, seconds)``. A last line cut short
    cannot happen (one ``write`` of a short line on an ``O_APPEND`` file), but is skipped if so."""
    out = []
    for path in sorted(glob.glob(os.path.join(directory, "acks-*.log"))):
        with open(path, encoding="ascii") as fh:
            for line in fh:
                parts = line.split()
                if len(parts) == 4 and len(parts[0]) == 40:
                    out.append((parts[0], parts[1], parts[2], float(parts[3])))
    return out


def ref_locks(repo: str) -> list[str]:
    root = os.path.join(repo, ".git", "refs", "agentos")
    return sorted(os.path.join(d, f) for d, _s, files in os.walk(root) for f in files if f.endswith(".lock"))


def _mtime(path: str, default: float) -> float:
    """``path``'s mtime, ``default`` when it is gone."""
    try:
        return os.stat(path).st_mtime
    except FileNotFoundError:
        return default


def leftovers(repo: str) -> dict[str, int]:
    """Temporary files and journals that writers and packers leave when they are killed."""
    git_dir = os.path.join(repo, ".git")
    objects = os.path.join(git_dir, "objects")
    return {
        "tmp_obj": len(glob.glob(os.path.join(objects, "??", "tmp_obj_*"))),
        "tmp_pack": len(glob.glob(os.path.join(objects, "pack", "tmp_*"))),
        "pack_dirs": len(glob.glob(os.path.join(objects, "agentos-pack-*"))),
        "packing_journals": len(glob.glob(os.path.join(git_dir, "agentos", "loose.journal.*.packing"))),
        "merging_lists": len(glob.glob(os.path.join(git_dir, "agentos", "tx-packs.*.merging"))),
        "ref_locks": len(ref_locks(repo)),
        "housekeeping_lock": int(os.path.exists(os.path.join(git_dir, "agentos", "housekeeping.lock"))),
    }


def count_objects(repo: str) -> dict[str, int]:
    out = {}
    for line in git(repo, "count-objects", "-v").stdout.splitlines():
        key, _, value = line.partition(":")
        out[key.strip()] = int(value.strip())
    return out


def _locks_of(repo: str, pid: int) -> int:
    """How many ref locks (and packed-refs.lock) name ``pid`` as their owner."""
    from gitstate.git import lockfile

    paths = ref_locks(repo) + [os.path.join(repo, ".git", "packed-refs.lock")]
    return sum(1 for p in paths if (o := lockfile.read_owner(p)) is not None and o.pid == pid)


def soak(repo: str, kills: int, writers: int, seed: int, min_life: float, max_life: float,
         time_limit: float, code: str = str(ROOT)) -> dict[str, Any]:
    """Kill writers until ``kills`` kills (or ``time_limit`` seconds); returns what happened."""
    rng = random.Random(seed)
    acks_dir = os.path.join(os.path.dirname(repo), "acks")
    os.makedirs(acks_dir, exist_ok=True)
    started = time.monotonic()
    deaths: list[str] = []
    done_kills = 0
    spawned = 0
    holding = 0  # kills that left a ref lock of the killed writer behind

    def spawn() -> subprocess.Popen[str]:
        nonlocal spawned
        spawned += 1
        return _spawn(repo, os.path.join(acks_dir, f"acks-{spawned:04d}.log"), rng.randrange(1 << 30), code)

    procs = [spawn() for _ in range(writers)]
    try:
        while done_kills < kills and time.monotonic() - started < time_limit:
            i = rng.randrange(len(procs))
            proc = procs[i]
            if not _wait_ready(proc):
                proc.kill()
                _out, err = proc.communicate(timeout=30)
                deaths.append(f"not ready (exit {proc.returncode}): {err[-2000:]}")
                procs[i] = spawn()
                continue
            time.sleep(rng.uniform(min_life, max_life))
            if proc.poll() is not None:  # died on its own: a failed write
                _out, err = proc.communicate(timeout=30)
                deaths.append(f"exit {proc.returncode}: {err[-2000:]}")
            else:
                proc.send_signal(signal.SIGKILL)
                proc.communicate(timeout=30)
                done_kills += 1
                holding += _locks_of(repo, proc.pid) > 0
            procs[i] = spawn()
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGKILL)
            proc.communicate(timeout=30)
    acks = read_acks(acks_dir)
    took = sorted(a[3] for a in acks)
    return {
        "kills": done_kills, "writers": writers, "spawned": spawned, "seconds": round(time.monotonic() - started, 1),
        "acknowledged": len(acks), "died_on_their_own": len(deaths), "deaths": deaths[:3],
        "kills_leaving_a_lock": holding,
        "write_seconds": {
            "median": round(statistics.median(took), 4) if took else None,
            "p99": round(took[int(len(took) * 0.99)], 4) if took else None,
            "max": round(took[-1], 4) if took else None,
            "over_1s": sum(1 for t in took if t > 1.0), "over_4s": sum(1 for t in took if t > 4.0),
        },
    }


def check(repo: str) -> dict[str, Any]:
    """The bars of issue 14, measured (see the module documentation)."""
    import gitstate
    from gitstate.verify import verify

    acks_dir = os.path.join(os.path.dirname(repo), "acks")
    acks = read_acks(acks_dir)
    figures: dict[str, Any] = {"after_kills": leftovers(repo), "loose_after_kills": count_objects(repo)["count"]}
    # Locks left now are aged by three minutes, then one gitstate command runs: none older than a
    # minute may be left afterwards. packed-refs.lock too: a killed `git update-ref -d` leaves it
    # without an owner record, stale after refs.PACKED_LOCK_STALE_AGE (120 s), and until then the
    # user's `git gc` fails on it
    then = time.time() - 180
    # (the stamp of the last lock sweep too: three minutes pass for every file, and a store sweeps
    # again only a minute after the last sweep)
    for path in [*ref_locks(repo), os.path.join(repo, ".git", "packed-refs.lock"),
                 os.path.join(repo, ".git", "agentos", "locks-swept")]:
        try:
            os.utime(path, (then, then))
        except FileNotFoundError:
            pass
    store = gitstate.open_store(repo)
    lines: dict[tuple[str, str], set[str]] = {}
    unreadable = []
    for oid, run_id, branch, _took in acks:
        key = (run_id, branch)
        if key not in lines:
            lines[key] = {c.id for c in store.get_run(run_id).history(branch)}
        try:
            cp = store.checkpoint(oid)
            _ = cp.state
            if oid not in lines[key]:
                unreadable.append(f"{oid} not on {run_id}@{branch}")
        except gitstate.GitStateError as exc:
            unreadable.append(f"{oid}: {exc}")
    figures["acknowledged"] = len(acks)
    figures["acknowledged_unreadable"] = unreadable[:10]
    figures["acknowledged_unreadable_count"] = len(unreadable)
    now = time.time()
    figures["old_ref_locks_after_command"] = [p for p in [*ref_locks(repo), os.path.join(repo, ".git", "packed-refs.lock")]
                                              if now - _mtime(p, now) > 60]
    run = store.open_run("after", workflow="soak")
    run.checkpoint({"one more": "normal write"})
    store.wait_for_housekeeping(60)
    counts = count_objects(repo)
    figures["loose_after_one_write"] = counts["count"]
    figures["packs_after_one_write"] = counts["packs"]
    figures["after_command"] = leftovers(repo)
    report = verify(store)
    figures["verify_ok"] = report.ok
    figures["verify_problems"] = [str(p) for p in report.problems][:10]
    figures["verify_checkpoints"] = report.checkpoints
    store.close()
    gc = git(repo, "gc", "--quiet", check=False)
    figures["git_gc_rc"] = gc.returncode
    figures["git_gc_stderr"] = gc.stderr[-2000:]
    fsck = git(repo, "fsck", "--strict", "--no-dangling", check=False)
    figures["fsck_rc"] = fsck.returncode
    figures["fsck_output"] = (fsck.stdout + fsck.stderr)[-2000:]
    figures["bars_met"] = (not unreadable and counts["count"] < LOOSE_LIMIT
                           and not figures["old_ref_locks_after_command"] and gc.returncode == 0
                           and fsck.returncode == 0 and not (fsck.stdout + fsck.stderr).strip() and report.ok)
    return figures


def make_repo(path: str) -> str:
    os.makedirs(path, exist_ok=True)
    git(path, "init", "-q", "-b", "main")
    with open(os.path.join(path, "README"), "w", encoding="ascii") as fh:
        fh.write("soak\n")
    git(path, "add", "README")
    git(path, "-c", "user.name=soak", "-c", "user.email=soak@localhost", "commit", "-q", "-m", "initial")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=200)
    parser.add_argument("--writers", type=int, default=3)
    parser.add_argument("--seed", type=int, default=14)
    parser.add_argument("--min-life", type=float, default=0.05, help="seconds a writer runs at least")
    parser.add_argument("--max-life", type=float, default=0.8, help="seconds a writer runs at most")
    parser.add_argument("--time-limit", type=float, default=3600.0, help="stop killing after this")
    parser.add_argument("--code", default=str(ROOT), help="checkout whose gitstate the writers run (to "
                        "compare versions); the checks use this one")
    parser.add_argument("--keep", help="directory to work in (kept); default: a temporary one, removed")
    parser.add_argument("--json", help="write the figures here as JSON")
    args = parser.parse_args(argv)
    base = args.keep or tempfile.mkdtemp(prefix="gitstate-soak-")
    repo = make_repo(os.path.join(base, "repo"))
    result = soak(repo, args.kills, args.writers, args.seed, args.min_life, args.max_life, args.time_limit,
                  args.code)
    result.update(check(repo))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(result, fh, indent=2)
    w = result["write_seconds"]
    print(f"SIGKILL soak: {result['kills']} kills of {result['writers']} writers in {result['seconds']} s, "
          f"{result['acknowledged']} acknowledged writes, {result['died_on_their_own']} writers died on their own, "
          f"{result['kills_leaving_a_lock']} kills left a ref lock of the killed writer")
    print(f"  write time: median {w['median']} s, p99 {w['p99']} s, max {w['max']} s; "
          f"{w['over_1s']} over 1 s, {w['over_4s']} over 4 s")
    print(f"  after the kills: {result['after_kills']}, loose objects {result['loose_after_kills']}")
    print(f"  after one command: {result['after_command']}")
    print(f"  acknowledged and unreadable: {result['acknowledged_unreadable_count']}")
    print(f"  loose objects after one more write: {result['loose_after_one_write']} (limit {LOOSE_LIMIT}), "
          f"packs: {result['packs_after_one_write']}")
    print(f"  ref locks older than a minute after a command: {len(result['old_ref_locks_after_command'])}")
    print(f"  verify ok: {result['verify_ok']} ({result['verify_checkpoints']} checkpoints)"
          f"{'' if result['verify_ok'] else ' ' + str(result['verify_problems'])}")
    print(f"  git gc rc {result['git_gc_rc']}, git fsck --strict rc {result['fsck_rc']}"
          f"{'' if not result['fsck_output'].strip() else ': ' + result['fsck_output']}")
    if result["git_gc_rc"] != 0:
        print(f"  git gc said: {result['git_gc_stderr'].strip()}")
    print(f"  bars met: {result['bars_met']}")
    if not args.keep:
        import shutil

        shutil.rmtree(base, ignore_errors=True)
    return 0 if result["bars_met"] else 1


if __name__ == "__main__":
    sys.exit(main())
