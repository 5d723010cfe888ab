#!/usr/bin/env python3
"""What sharing runs through a git server over smart HTTP costs, next to plain git.

The server is ``git http-backend`` behind the small web server of ``tests/sync/githttp.py`` on
127.0.0.1 (it counts the bytes of every request and response). Runs are written straight into
repositories with ``git fast-import`` in the format gitstate writes (a run record and one
checkpoint each: two refs a run), refs packed after. Three parts:

1. **push and pull of ``--runs`` runs**: ``gitstate.push`` (chunks of ``agentos.pushChunk``) next
   to ``git push URL 'refs/agentos/*:refs/agentos/*'``, and ``gitstate.pull`` into an empty
   repository next to ``git fetch`` of the same refs; interleaved (which goes first alternates),
   ``--repeat`` times, medians of time and of bytes on the wire.
2. **one run of a server holding ``--big`` runs**: ``gitstate.pull(store, URL, [RUN])`` next to a
   plain ``git fetch`` of that run's branch alone; the bar: at most 2x the time and at most 2x the
   run's own bytes (its objects packed, ``git pack-objects``).
3. **``--limit-runs`` runs through a server that refuses pushes of more than ``--limit`` ref
   updates**: ``gitstate.push`` with the default chunk and with a chunk bigger than the limit
   (halved until it fits); the bar: every run arrives, in several pushes, and a fresh clone pulls
   them all with identical ids. Plain ``git push`` of everything is refused there.

``--runs 2000 --big 20000 --limit-runs 10000 --limit 2000`` are the defaults."""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import cbor2

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "sync"))
from githttp import accepted_pushes, bytes_moved, http_git_server, served_repo  # noqa: E402

import gitstate  # noqa: E402

_IDENT = "Bench <bench@example.com> 1767225600 +0000"
_WHEN = "2026-01-01T00:00:00Z"


def write_runs(path: str, runs: int, prefix: str = "r") -> None:
    """``runs`` runs (``<prefix>000000`` …) in the repository at ``path``, as gitstate writes them:
    a run record (``run.cbor``) and a checkpoint (``meta.cbor``, two state values); one
    ``git fast-import``, then ``git pack-refs --all``."""
    out: list[bytes] = []
    mark = 0

    def blob(value: object) -> int:
        nonlocal mark
        mark += 1
        raw = cbor2.dumps(value)
        out.append(b"blob\nmark :%d\ndata %d\n%s\n" % (mark, len(raw), raw))
        return mark

    def commit(ref: str, message: str, files: dict[str, int]) -> None:
        nonlocal mark
        mark += 1
        raw = message.encode()
        body = "".join(f"M 100644 :{m} {name}\n" for name, m in files.items())
        out.append(f"commit {ref}\nmark :{mark}\nauthor {_IDENT}\ncommitter {_IDENT}\n".encode()
                   + b"data %d\n%s\n" % (len(raw), raw) + body.encode() + b"\n")

    for i in range(runs):
        run = f"{prefix}{i:06d}"
        base = f"refs/agentos/main/runs/{run}/"
        commit(base + "run", f"run {run} · bench\n\nRun: {run}\nWorkflow: bench\nGitstate-Format: 2\n",
               {"run.cbor": blob({"v": 2, "id": run, "format": "gitstate/run", "workflow": "bench",
                                  "worktree": "main", "created_at": _WHEN})})
        meta = {"v": 2, "run": run, "step": 0, "branch": "main", "format": "gitstate/checkpoint",
                "workflow": "bench", "worktree": "main", "created_at": _WHEN}
        commit(base + "heads/main", f"checkpoint · step 0 · save\n\nRun: {run}\nBranch: main\nWorkflow: bench\n"
                                    "Step: 0\nGitstate-Format: 2\n",
               {"meta.cbor": blob(meta), "state/i.cbor": blob(i), "state/text.cbor": blob(f"state of {run} " * 8)})
    subprocess.run(["git", "-C", path, "fast-import", "--quiet"], input=b"".join(out), check=True)
    subprocess.run(["git", "-C", path, "pack-refs", "--all"], check=True)


def machine(path: str, url: str) -> str:
    """An empty repository with ``origin`` at ``url``, allowed to receive checkpoints."""
    shutil.rmtree(path, ignore_errors=True)
    subprocess.run(["git", "init", "-q", path], check=True)
    for args in (["remote", "add", "origin", url], ["config", "agentos.pushRemotes", "*"],
                 ["config", "agentos.pullMaxRefs", "0"]):
        subprocess.run(["git", "-C", path, *args], check=True)
    return path


def refs_of(path: str, prefix: str = "refs/agentos/") -> dict[str, str]:
    out = subprocess.run(["git", "-C", path, "for-each-ref", "--format=%(refname) %(objectname)", prefix],
                         capture_output=True, text=True, check=True).stdout
    return dict(line.split(" ") for line in out.splitlines())


def measured(root: Path, action: Callable[..., object], *args: object) -> tuple[float, int]:
    """Seconds and bytes on the wire of ``action(*args)``."""
    before = bytes_moved(root)
    started = time.perf_counter()
    action(*args)
    return time.perf_counter() - started, bytes_moved(root) - before


def push_all(store: gitstate.Store, url: str, runs: int) -> None:
    ok_all(gitstate.push(store, url), runs, "push")


def pull_all(store: gitstate.Store, runs: int, named: list[str] | None = None) -> None:
    ok_all(gitstate.pull(store, "origin", named), runs, "pull")


def git(*args: str) -> None:
    subprocess.run(["git", *args], check=True, capture_output=True)


def git_may_fail(*args: str) -> None:
    subprocess.run(["git", *args], check=False, capture_output=True)


def ok_all(results: list[gitstate.PushResult] | list[gitstate.PullResult], runs: int, what: str) -> None:
    bad = [r for r in results if not r.ok]
    if len(results) != runs or bad:
        raise SystemExit(f"{what} went wrong: {len(results)} runs, {len(bad)} failed: "
                         f"{bad[0].to_dict() if bad else ''}")


def row(label: str, ours: list[tuple[float, int]], plain: list[tuple[float, int]]) -> None:
    t1, t2 = statistics.median(t for t, _ in ours), statistics.median(t for t, _ in plain)
    b1, b2 = statistics.median(b for _, b in ours), statistics.median(b for _, b in plain)
    print(f"  {label:<34} {t1:7.2f} s {b1 / 1e6:9.2f} MB | {t2:7.2f} s {b2 / 1e6:9.2f} MB | "
          f"time {t1 / t2:5.2f}x bytes {b1 / b2:5.2f}x", flush=True)


def part_push_pull(tmp: str, root: Path, base: str, runs: int, repeat: int) -> None:
    print(f"1. push and pull of {runs} runs ({2 * runs} refs), median of {repeat} "
          "| gitstate | plain git | ratio", flush=True)
    source = machine(os.path.join(tmp, "source"), "unused")
    write_runs(source, runs)
    pushes: list[tuple[float, int]] = []
    git_pushes: list[tuple[float, int]] = []
    pulls: list[tuple[float, int]] = []
    git_pulls: list[tuple[float, int]] = []
    for rep in range(repeat):
        ours_repo = f"p{rep}-ours.git"
        plain_repo = f"p{rep}-plain.git"
        served_repo(root, ours_repo)
        served_repo(root, plain_repo)
        store = gitstate.open_store(source, pack_in_background=False)
        for what in (["ours", "plain"] if rep % 2 == 0 else ["plain", "ours"]):
            if what == "ours":
                pushes.append(measured(root, push_all, store, f"{base}/{ours_repo}", runs))
            else:
                git_pushes.append(measured(root, git, "-C", source, "push", "--quiet", f"{base}/{plain_repo}",
                                           "refs/agentos/*:refs/agentos/*"))
        store.close()
        a, b = machine(os.path.join(tmp, "pull-a"), f"{base}/{ours_repo}"), machine(os.path.join(tmp, "pull-b"), "x")
        for what in (["ours", "plain"] if rep % 2 == 0 else ["plain", "ours"]):
            if what == "ours":
                pulled = gitstate.open_store(a, pack_in_background=False)
                pulls.append(measured(root, pull_all, pulled, runs))
                pulled.close()
            else:
                git_pulls.append(measured(root, git, "-C", b, "fetch", "--quiet", "--no-tags", f"{base}/{plain_repo}",
                                          "+refs/agentos/*:refs/agentos/*"))
        if refs_of(a) != refs_of(source) or refs_of(b) != refs_of(source):
            raise SystemExit("a pull did not bring the same refs")
    row("push", pushes, git_pushes)
    row("pull (fresh clone, all runs)", pulls, git_pulls)


def part_one_run(tmp: str, root: Path, base: str, big: int, repeat: int) -> None:
    print(f"2. one run of a server holding {big} runs ({2 * big} refs), median of {repeat} "
          "| gitstate pull RUN | git fetch of its branch | ratio", flush=True)
    repo = served_repo(root, "big.git")
    started = time.perf_counter()
    write_runs(str(repo), big)
    git("-C", str(repo), "repack", "-adq")
    print(f"  (server made in {time.perf_counter() - started:.1f} s)", flush=True)
    run = f"r{big // 2:06d}"
    prefix = f"refs/agentos/main/runs/{run}/"
    tips = "\n".join(refs_of(str(repo), prefix).values()) + "\n"
    own = len(subprocess.run(["git", "-C", str(repo), "pack-objects", "--revs", "--stdout", "-q"], input=tips.encode(),
                             capture_output=True, check=True).stdout)
    ours: list[tuple[float, int]] = []
    plain: list[tuple[float, int]] = []
    url = f"{base}/big.git"
    for rep in range(repeat):
        a, b = machine(os.path.join(tmp, "one-a"), url), machine(os.path.join(tmp, "one-b"), url)
        for what in (["ours", "plain"] if rep % 2 == 0 else ["plain", "ours"]):
            if what == "ours":
                store = gitstate.open_store(a, pack_in_background=False)
                ours.append(measured(root, pull_all, store, 1, [run]))
                store.close()
            else:
                plain.append(measured(root, git, "-C", b, "fetch", "--quiet", "--no-tags", "origin",
                                      f"+{prefix}heads/main:{prefix}heads/main"))
        if set(refs_of(a)) != {prefix + "run", prefix + "heads/main"}:
            raise SystemExit(f"pull RUN brought {len(refs_of(a))} refs")
    row(f"pull {run}", ours, plain)
    t1, t2 = statistics.median(t for t, _ in ours), statistics.median(t for t, _ in plain)
    b1 = statistics.median(b for _, b in ours)
    print(f"  the run's own objects packed: {own} bytes; pull moved {b1:.0f} bytes ({b1 / own:.2f}x)")
    print(f"  bar (<= 2x time, <= 2x the run's bytes): time {'PASS' if t1 <= 2 * t2 else 'FAIL'}, "
          f"bytes {'PASS' if b1 <= 2 * own else 'FAIL'}", flush=True)


def part_limit(tmp: str, root: Path, base: str, runs: int, limit: int) -> None:
    print(f"3. {runs} runs ({2 * runs} refs) through a server refusing pushes of more than {limit} ref updates",
          flush=True)
    source = machine(os.path.join(tmp, "limit-source"), "unused")
    write_runs(source, runs)
    want = refs_of(source)
    plain_repo = served_repo(root, "limit-plain.git", max_updates=limit)
    took, moved = measured(root, git_may_fail, "-C", source, "push", "--quiet", f"{base}/limit-plain.git",
                           "refs/agentos/*:refs/agentos/*")
    print(f"  plain git push of everything: {took:.2f} s, {moved / 1e6:.2f} MB, "
          f"{len(refs_of(str(plain_repo)))} refs arrived (refused whole)")
    for chunk in (None, 2 * limit + limit // 2):
        name = f"limit-{chunk or 'default'}.git"
        repo = served_repo(root, name, max_updates=limit)
        if chunk:
            git("-C", source, "config", "agentos.pushChunk", str(chunk))
        else:
            subprocess.run(["git", "-C", source, "config", "--unset-all", "agentos.pushChunk"], check=False)
        store = gitstate.open_store(source, pack_in_background=False)
        took, moved = measured(root, push_all, store, f"{base}/{name}", runs)
        store.close()
        accepted = accepted_pushes(repo)
        arrived = refs_of(str(repo)) == want
        fresh = machine(os.path.join(tmp, "limit-fresh"), f"{base}/{name}")
        pulled_store = gitstate.open_store(fresh, pack_in_background=False)
        ptook, pmoved = measured(root, pull_all, pulled_store, runs)
        pulled_store.close()
        same = refs_of(fresh) == want
        tried = bytes_log_requests(root)
        print(f"  gitstate push, pushChunk {chunk or 'default (1000)'}: {took:.2f} s, {moved / 1e6:.2f} MB, "
              f"{len(accepted)} pushes accepted (largest {max(accepted)} refs), all arrived: {arrived}; "
              f"fresh clone pull: {ptook:.2f} s, {pmoved / 1e6:.2f} MB, identical ids: {same} "
              f"[{tried} HTTP requests so far]", flush=True)
        print(f"  bar (all arrive in several pushes, fresh clone identical): "
              f"{'PASS' if arrived and same and len(accepted) > 1 else 'FAIL'}", flush=True)


def bytes_log_requests(root: Path) -> int:
    log = root / "http-bytes.log"
    return len(log.read_text().splitlines()) if log.exists() else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=2000, help="runs pushed and pulled in part 1")
    parser.add_argument("--big", type=int, default=20000, help="runs on the server in part 2")
    parser.add_argument("--limit-runs", type=int, default=10000, help="runs pushed in part 3")
    parser.add_argument("--limit", type=int, default=2000, help="ref updates the server of part 3 takes at most")
    parser.add_argument("--repeat", type=int, default=3, help="repetitions in parts 1 and 2")
    parser.add_argument("--parts", default="123", help="which parts to run (e.g. 13)")
    args = parser.parse_args()
    os.environ.setdefault("GIT_CONFIG_NOSYSTEM", "1")
    with tempfile.TemporaryDirectory(prefix="bench-push-") as tmp:
        root = Path(tmp) / "served"
        root.mkdir()
        with http_git_server(root) as base:
            if "1" in args.parts:
                part_push_pull(tmp, root, base, args.runs, args.repeat)
            if "2" in args.parts:
                part_one_run(tmp, root, base, args.big, args.repeat)
            if "3" in args.parts:
                part_limit(tmp, root, base, args.limit_runs, args.limit)
    return 0


if __name__ == "__main__":
    sys.exit(main())
