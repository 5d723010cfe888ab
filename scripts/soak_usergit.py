"""Soak: writer processes checkpoint (and fork, snapshot files, pack with low thresholds) while the
user's own git loops beside them: ``git repack -adf``, ``git pack-refs --all``, ``git gc``.

The bar (issue 14): 0 failed writes, 0 lost (every acknowledged checkpoint readable, on its
branch), and no background thread of a writer dies with a traceback. A files snapshot refused
because a worktree file was being rewritten meanwhile (the writers rewrite the same files:
``FileChangingError``) is the right answer, not a failed write: it is counted apart. Each writer catches and
logs any exception a write raises (a failed write) and keeps going; its stderr is searched for
tracebacks (``threading.excepthook`` prints those of background threads). Then ``git fsck
--strict`` must be clean and ``git agentos verify`` ok.

With ``SOAK_STRACE=<dir>`` the writers and each git command run under ``strace``, logging who
renames and removes which file: that is how a ``git gc`` was caught removing the ``.idx`` of a
pack renamed into place during its last directory scan (see ``packs.reindex_orphans``).

    python scripts/soak_usergit.py --seconds 180      # the soak
    python scripts/soak_usergit.py --seconds 15       # the suite's short form
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from soak_kill import count_objects, git, make_repo, read_acks  # noqa: E402

WRITER = r"""
import os, random, sys, time, traceback
import gitstate
from gitstate.store import housekeeping

housekeeping.PACK_THRESHOLD = 8
housekeeping.MERGE_THRESHOLD = 3
housekeeping.REF_PACK_THRESHOLD = 4
housekeeping.TX_MERGE_AT = 3

repo, acks, fails, seed, seconds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5])
rng = random.Random(seed)
store = gitstate.open_store(repo)
fd = os.open(acks, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
ffd = os.open(fails, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
end = time.monotonic() + seconds
n = 0
while time.monotonic() < end:
    n += 1
    start = time.monotonic()
    try:
        run = store.open_run(rng.choice(["one", "two"]), workflow="soak")
        op = rng.random()
        branch = "main"
        if op < 0.05 and run.head() is not None:
            branch = f"f{os.getpid()}-{n}"
            run.fork(run.head().id, branch)
            cp = run.checkpoint({"forked": n}, branch=branch)
        elif op < 0.12:
            with open(os.path.join(repo, f"work-{rng.randrange(3)}.txt"), "w") as fh:
                fh.write(f"{os.getpid()} {n}\n" * rng.randrange(1, 40))
            cp = run.checkpoint({"files": n}, files=True)
        else:
            cp = run.checkpoint({"n": n, "pid": os.getpid(), "log": list(range(n % 50)),
                                 "blob": os.urandom(32)})
    except Exception as exc:
        os.write(ffd, (f"{type(exc).__name__}: {exc}".replace("\n", " ") + "\n").encode())
        continue
    os.write(fd, f"{cp.id} {run.id} {branch} {time.monotonic() - start:.4f}\n".encode())
store.wait_for_housekeeping(60)
"""

USER_GIT = (["repack", "-adf", "-q"], ["pack-refs", "--all"], ["gc", "--quiet"])


def user_git_loop(repo: str, stop: threading.Event, counts: dict[str, Any]) -> None:
    """The user's git, in a loop until ``stop``: each command's runs and failures are counted (a
    failure of the user's git is reported, not the bar: git may refuse while our locks are held)."""
    while not stop.is_set():
        for args in USER_GIT:
            if stop.is_set():
                break
            started = time.time()
            cmd = ["git", *args]
            if os.environ.get("SOAK_STRACE"):  # who removes or renames pack files (debugging)
                cmd = ["strace", "-f", "-qq", "--seccomp-bpf", "-e", "trace=unlink,unlinkat,rename,renameat,renameat2",
                       "-o", os.path.join(os.environ["SOAK_STRACE"], f"git-{started:.6f}"), *cmd]
            done = subprocess.run(cmd, cwd=repo, capture_output=True, text=True, check=False)
            counts.setdefault("times", []).append(f"{started:.6f} {time.time():.6f} {' '.join(args)}")
            key = " ".join(args[:2]).replace(" -q", "")
            counts["runs"][key] = counts["runs"].get(key, 0) + 1
            if done.returncode != 0:
                counts["failed"][key] = counts["failed"].get(key, 0) + 1
                counts["errors"].append(" | ".join(done.stderr.strip().splitlines()[-4:]))


def soak(repo: str, writers: int, seconds: float, seed: int) -> dict[str, Any]:
    work = os.path.dirname(repo)
    acks_dir = os.path.join(work, "acks")
    os.makedirs(acks_dir, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    counts: dict[str, Any] = {"runs": {}, "failed": {}, "errors": []}
    stop = threading.Event()
    looper = threading.Thread(target=user_git_loop, args=(repo, stop, counts))
    procs = []
    fails = [os.path.join(acks_dir, f"fails-{i}.log") for i in range(writers)]
    started = time.monotonic()
    looper.start()
    try:
        for i in range(writers):
            cmd = [sys.executable, "-c", WRITER, repo, os.path.join(acks_dir, f"acks-{i}.log"), fails[i],
                   str(seed + i), str(seconds)]
            if os.environ.get("SOAK_STRACE"):
                cmd = ["strace", "-f", "-qq", "--seccomp-bpf", "-e", "trace=unlink,unlinkat,rename,renameat,renameat2",
                       "-o", os.path.join(os.environ["SOAK_STRACE"], f"writer-{i}"), *cmd]
            procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                          cwd=work))
        outputs = [p.communicate(timeout=seconds + 600) for p in procs]
    finally:
        stop.set()
        looper.join(600)
        for p in procs:
            if p.poll() is None:
                p.kill()
    failures: list[str] = []
    for path in fails:
        if os.path.exists(path):
            with open(path, encoding="utf-8") as fh:
                failures += [line.strip() for line in fh]
    # a snapshot that finds a worktree file being rewritten (the other writer writes the same
    # files) refuses rather than store a torn file: the right answer, not a failure of the store
    changing = [f for f in failures if f.startswith("FileChangingError:")]
    failures = [f for f in failures if not f.startswith("FileChangingError:")]
    tracebacks = [err[-3000:] for _out, err in outputs if "Traceback" in err or "Exception in thread" in err]
    acks = read_acks(acks_dir)
    return {
        "writers": writers, "seconds": round(time.monotonic() - started, 1), "acknowledged": len(acks),
        "failed_writes": len(failures), "failures": failures[:10], "refused_file_changing": len(changing),
        "writer_exit_codes": [p.returncode for p in procs], "tracebacks": tracebacks[:3],
        "user_git_runs": counts["runs"], "user_git_failed": counts["failed"],
        "user_git_errors": counts["errors"][:8], "user_git_times": counts.get("times", []),
    }


def check(repo: str) -> dict[str, Any]:
    import gitstate
    from gitstate.verify import verify

    acks = read_acks(os.path.join(os.path.dirname(repo), "acks"))
    store = gitstate.open_store(repo)
    lost = []
    wanted: dict[tuple[str, str], set[str]] = {}
    for oid, run_id, branch, _took in acks:
        try:
            _ = store.checkpoint(oid).state
            wanted.setdefault((run_id, branch), set()).add(oid)
        except gitstate.GitStateError as exc:
            lost.append(f"{oid}: {exc}")
    # each branch walked from its tip until every checkpoint acknowledged on it was met: a fork's
    # are just below its tip (a walk of its whole history per fork made a long soak's check quadratic)
    for (run_id, branch), missing in wanted.items():
        for cp in store.get_run(run_id).history(branch):
            missing.discard(cp.id)
            if not missing:
                break
        lost += [f"{oid} not on {run_id}@{branch}" for oid in sorted(missing)]
    report = verify(store)
    store.close()
    fsck = git(repo, "fsck", "--strict", "--no-dangling", check=False)
    return {"lost": len(lost), "lost_examples": lost[:10], "verify_ok": report.ok,
            "verify_problems": [str(p) for p in report.problems][:10], "fsck_rc": fsck.returncode,
            "fsck_output": (fsck.stdout + fsck.stderr)[-2000:], "objects": count_objects(repo)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=180.0)
    parser.add_argument("--writers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--keep", help="directory to work in (kept); default: a temporary one, removed")
    parser.add_argument("--json", help="write the figures here as JSON")
    args = parser.parse_args(argv)
    base = args.keep or tempfile.mkdtemp(prefix="gitstate-usergit-")
    repo = make_repo(os.path.join(base, "repo"))
    result = soak(repo, args.writers, args.seconds, args.seed)
    result.update(check(repo))
    result["bars_met"] = (result["failed_writes"] == 0 and result["lost"] == 0 and not result["tracebacks"]
                          and all(rc == 0 for rc in result["writer_exit_codes"]) and result["verify_ok"]
                          and result["fsck_rc"] == 0 and not result["fsck_output"].strip())
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(result, fh, indent=2)
    print(f"user's git beside {result['writers']} writers for {result['seconds']} s: "
          f"{result['acknowledged']} acknowledged writes, {result['failed_writes']} failed, {result['lost']} lost "
          f"({result['refused_file_changing']} snapshots refused: a file the other writer was rewriting)")
    print(f"  user's git runs: {result['user_git_runs']}, failed: {result['user_git_failed']} "
          f"{result['user_git_errors']}")
    print(f"  writer exit codes {result['writer_exit_codes']}, tracebacks: {len(result['tracebacks'])}")
    if result["failures"]:
        print(f"  failures: {result['failures']}")
    if result["tracebacks"]:
        print(result["tracebacks"][0])
    print(f"  verify ok: {result['verify_ok']}, git fsck --strict rc {result['fsck_rc']}, objects {result['objects']}")
    print(f"  bars met: {result['bars_met']}")
    if not args.keep:
        shutil.rmtree(base, ignore_errors=True)
    return 0 if result["bars_met"] else 1


if __name__ == "__main__":
    sys.exit(main())
