#!/usr/bin/env python3
"""What ``git agentos gc`` gives back and what it costs.

Fills a fresh repository with ``--runs`` runs of ``--checkpoints`` checkpoints each (a message list
appended to at every checkpoint, each a step of node ``step``; the last one ``completed``), plus a
user commit, branch and stash, then runs ``git agentos gc --keep-last N --now`` (as the command
does: plan, apply, repack), after a ``--dry-run`` estimate. Prints the git directory's size before
and after (``du -sb`` and ``du -sk``), the estimate against the bytes given back, the times, and
checks that every kept checkpoint reads as before, the user's refs and objects are untouched and
``git fsck --strict`` is clean. ``--big``: 2,000 runs x 50 checkpoints.

``--fill bulk`` (the default) writes each run in one transaction through the library's staging
calls (``Run.stage_checkpoint``, ``NodeLog.stage``), then appends the reflog lines one write per
checkpoint would have left, so the store has the shape of one written checkpoint by checkpoint
(same objects, refs, node logs and reflogs) in a fraction of the time; ``--fill one`` writes them
one by one (``Run.checkpoint(..., node="step")``: about 5 ms each)."""

from __future__ import annotations

import argparse
import dataclasses
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

import gitstate
from gitstate.format import checkpoint as cpfmt
from gitstate.format import nodes as nodefmt
from gitstate.format.names import node_log_ref
from gitstate.format.nodes import NodeRecord
from gitstate.git import housekeeping, packs
from gitstate.git.objects import MODE_BLOB, MODE_COMMIT
from gitstate.store import nodes
from gitstate.store import retention as R
from gitstate.store.transaction import RefUpdate, Transaction

ZERO = "0" * 40


def state(i: int, j: int) -> dict[str, Any]:
    return {"messages": [f"run {i} message {k}: " + "lorem ipsum " * 8 for k in range(j + 1)], "step": j}


def fill_one(store: gitstate.Store, runs: int, checkpoints: int) -> None:
    for i in range(runs):
        run = store.create_run(workflow="bench", run_id=f"r{i:05d}")
        for j in range(checkpoints):
            run.checkpoint(state(i, j), node="step", status="completed" if j == checkpoints - 1 else None)


def fill_bulk(store: gitstate.Store, runs: int, checkpoints: int, per_tx: int = 50) -> None:
    """``per_tx`` runs of ``checkpoints`` checkpoints in one transaction (``Run.stage_checkpoint``
    and the node-log record of each step, as ``checkpoint(..., node="step")`` writes them), each
    branch and node log moved once; then the reflog lines one write per checkpoint appends."""
    common = store.location.common_dir
    who, email = store.core.identity
    for start in range(0, runs, per_tx):
        batch = [store.new_run(workflow="bench", run_id=f"r{i:05d}") for i in range(start, min(start + per_tx, runs))]
        lines: dict[str, list[str]] = {}

        def build(tx: Transaction, batch: list[gitstate.Run] = batch, lines: dict[str, list[str]] = lines) -> None:
            lines.clear()
            for run in batch:
                i = int(run.id[1:])
                ref, log_ref = run.ref("main"), node_log_ref(run.worktree, run.id, "main")
                tip: str | None = None
                log_tip: str | None = None
                record: NodeRecord | None = None
                heads, logs = lines.setdefault(ref, []), lines.setdefault(log_ref, [])
                for j in range(checkpoints):
                    status = "completed" if j == checkpoints - 1 else None
                    cp = run.stage_checkpoint(tx, tip, cpfmt.state_entry(tx.writer, state(i, j)), node="step",
                                              status=status)
                    store.core.remember_position(cp.id, cp.step, cp.base)
                    when = int(cp.created_at.timestamp())
                    heads.append(f"{tip or ZERO} {cp.id} {who} <{email}> {when} +0000\t"
                                 f"gitstate: checkpoint {cpfmt.subject('step', j, None, status)}\n")
                    if record is None:
                        record = dataclasses.replace(nodes.new_record(run.id, "step", "main", None, None, None),
                                                     status="completed", entry=cp.id, exit=cp.id,
                                                     ended_at=nodes.now_iso())
                    else:
                        record = dataclasses.replace(record, exit=cp.id, ended_at=nodes.now_iso())
                    assert record.entry is not None and record.exit is not None
                    entries = [(nodefmt.RECORD, tx.blob(nodefmt.encode(record, run.id)), MODE_BLOB),
                               (nodefmt.ENTRY_LINK, record.entry, MODE_COMMIT),
                               (nodefmt.EXIT_LINK, record.exit, MODE_COMMIT)]
                    new_log = tx.commit(tx.tree(entries), [log_tip] if log_tip else [], nodefmt.message(record, run.id))
                    logs.append(f"{log_tip or ZERO} {new_log} {who} <{email}> {when} +0000\t"
                                f"gitstate: node step completed\n")
                    tip, log_tip = cp.id, new_log
                # each ref moved once, from absent (its reflog lines are appended below)
                tx.updates[:] = [u for u in tx.updates if u.ref != ref]
                assert tip is not None and log_tip is not None
                tx.updates += [RefUpdate(ref, None, tip, "", True, log=False),
                               RefUpdate(log_ref, None, log_tip, "", True, log=False)]

        store.core.write(build)
        for ref, appended in lines.items():
            path = os.path.join(common, "logs", *ref.split("/"))
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "a", encoding="utf-8") as fh:
                fh.writelines(appended)
    # gitstate's packs merged into one with deltas, as the housekeeping of one write per checkpoint
    # leaves them: its merges see each run's versions in different packs, which git deltifies
    # (git does not look for deltas between objects of one pack it reuses: --no-reuse-delta; with
    # this window the git directory is that of a store written checkpoint by checkpoint within 1 %
    # at 40 runs, and 26 % larger at 2,000 x 50: 212 against 169 MiB, given back alike)
    pack_dir = os.path.join(common, "objects", "pack")
    listed = os.path.join(housekeeping.agentos_dir(common), housekeeping.TX_PACKS)
    names = list(dict.fromkeys(n for path in (listed, listed + ".kept") for n in housekeeping.read_names(path)))
    ids = "".join(packs.index_id_lines(os.path.join(pack_dir, n + ".idx")) for n in names)
    done = subprocess.run(["git", "-C", common, "-c", "pack.packSizeLimit=0", "pack-objects", "-q", "--threads=1",
                           "--no-reuse-delta", "--window=50", "--depth=50", "--delta-base-offset",
                           os.path.join(pack_dir, "pack")],
                          input=ids, capture_output=True, text=True, check=True)
    merged = "pack-" + done.stdout.strip()
    housekeeping.write_names(listed + ".kept", [merged])
    if os.path.exists(listed):
        os.unlink(listed)
    packs.remove_packs(pack_dir, [n for n in names if n != merged])


def du(path: str, *flags: str) -> int:
    return int(subprocess.run(["du", "-s", *flags, path], capture_output=True, text=True, check=True).stdout.split()[0])


def git(path: str, *args: str) -> str:
    return subprocess.run(["git", "-C", path, *args], capture_output=True, text=True, check=True).stdout


def user_setup(path: str) -> None:
    for args in (["config", "user.name", "bench"], ["config", "user.email", "bench@example.com"]):
        git(path, *args)
    with open(os.path.join(path, "user.txt"), "w") as fh:
        fh.write("the user's file\n")
    git(path, "add", "user.txt")
    git(path, "commit", "-q", "-m", "user commit")
    git(path, "branch", "feature")
    with open(os.path.join(path, "user.txt"), "w") as fh:
        fh.write("a stashed change\n")
    git(path, "stash", "-q")


def user_view(path: str) -> tuple[str, str, str]:
    """The user's refs, reflogs and every object they reach."""
    git_dir = os.path.join(path, ".git")
    refs = [line for line in git(path, "for-each-ref", "--format=%(objectname) %(refname)").splitlines()
            if "refs/agentos" not in line]
    logs = []
    for folder, _dirs, files in os.walk(os.path.join(git_dir, "logs")):
        if "agentos" not in folder:
            for name in files:
                with open(os.path.join(folder, name), encoding="utf-8") as fh:
                    logs.append(f"{name}: {fh.read()}")
    tips = {line.split()[0] for line in refs} | {w for log in logs for w in log.split() if len(w) == 40 and w.strip("0")}
    objects = subprocess.run(["git", "-C", path, "rev-list", "--objects", "--stdin"], input="\n".join(sorted(tips)),
                             capture_output=True, text=True, check=True).stdout
    return "\n".join(refs), "\n".join(sorted(logs)), objects


def mib(n: int) -> str:
    return f"{n / 1048576:8.2f} MiB"


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--checkpoints", type=int, default=20)
    parser.add_argument("--keep-last", type=int, default=5)
    parser.add_argument("--big", action="store_true", help="2,000 runs x 50 checkpoints")
    parser.add_argument("--fill", choices=["bulk", "one"], default="bulk")
    parser.add_argument("--repo", help="gc this existing repository (a copy is made) instead of filling one")
    parser.add_argument("--save", help="keep a copy of the filled repository there (for --repo)")
    args = parser.parse_args()
    if args.big:
        args.runs, args.checkpoints = 2000, 50
    with tempfile.TemporaryDirectory(prefix="bench-gc-") as tmp:
        path = os.path.join(tmp, "repo")
        if args.repo:
            subprocess.run(["cp", "-a", args.repo, path], check=True)
            print(f"copied {args.repo}")
        else:
            subprocess.run(["git", "init", "-q", path], check=True)
            user_setup(path)
            print(f"filling {args.runs} runs x {args.checkpoints} checkpoints ({args.fill}) ...", flush=True)
            t0 = time.perf_counter()
            store = gitstate.open_store(path, pack_in_background=False, fsync=False)  # (a bench: no flushes)
            (fill_bulk if args.fill == "bulk" else fill_one)(store, args.runs, args.checkpoints)
            store.wait_for_housekeeping()
            print(f"fill: {time.perf_counter() - t0:.1f} s")
            if args.save:
                subprocess.run(["cp", "-a", path, args.save], check=True)
        store = gitstate.open_store(path)
        git_dir = store.location.common_dir
        kept = {s.id: [cp.state for cp in store.get_run(s.id).history(limit=args.keep_last)]
                for s in store.list_runs()}
        user = user_view(path)
        before_b, before_k = du(git_dir, "-b"), du(git_dir, "-k")
        print(f"before: du -sb {mib(before_b)}   du -sk {before_k / 1024:8.2f} MiB")
        policy = R.Policy(keep_last=args.keep_last)
        t0 = time.perf_counter()
        dry = R.plan(store, policy, now=True, estimate=True)
        t1 = time.perf_counter()
        print(f"dry run: {t1 - t0:6.1f} s, {dry.checkpoints} checkpoints would go, "
              f"estimate {mib(dry.estimate_bytes or 0)}")
        done = subprocess.run([sys.executable, "-m", "gitstate_cli", "gc", "--keep-last", str(args.keep_last),
                               "--now", "--json"], cwd=path, capture_output=True, text=True)
        t2 = time.perf_counter()
        if done.returncode != 0:
            print("gc failed:", done.stderr.strip()[:500])
            return 1
        after_b, after_k = du(git_dir, "-b"), du(git_dir, "-k")
        freed = before_b - after_b
        est = dry.estimate_bytes or 0
        print(f"gc --keep-last {args.keep_last} --now: {t2 - t1:6.1f} s (the whole command)")
        print(f"after:  du -sb {mib(after_b)}   du -sk {after_k / 1024:8.2f} MiB")
        print(f"smaller by {100 * freed / before_b:.1f} % (du -sb), {100 * (before_k - after_k) / before_k:.1f} % (du -sk)")
        print(f"estimate {mib(est)} vs given back {mib(freed)} (du -sb): {100 * (est - freed) / freed:+.1f} %")
        store = gitstate.open_store(path)
        same = all([cp.state for cp in store.get_run(run_id).history()] == states for run_id, states in kept.items())
        print("kept checkpoints read as before:", "yes" if same else "NO")
        print("user refs and objects untouched:", "yes" if user_view(path) == user else "NO")
        fsck = subprocess.run(["git", "-C", path, "fsck", "--strict", "--no-dangling"], capture_output=True, text=True)
        print("git fsck --strict:", "clean" if fsck.returncode == 0 else fsck.stderr.strip()[:300])
        return 0 if fsck.returncode == 0 and same else 1


if __name__ == "__main__":
    sys.exit(main())
