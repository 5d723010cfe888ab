"""The short forms of the soak scripts (real processes, bounded in count and time), with the
store checked here again, independently of the scripts' own report:

- scripts/soak_kill.py: 25 SIGKILLs of writers that checkpoint, fork, snapshot files and pack with
  low thresholds: every acknowledged checkpoint readable on its branch, fewer than 6,700 loose
  objects after one more write, no ref lock older than a minute after a gitstate command, `git gc`
  succeeds, `git fsck --strict` clean;
- scripts/soak_usergit.py: the user's `git repack -adf`, `git pack-refs --all` and `git gc`
  looping beside two writers for 15 s: no failed write, none lost, no traceback.

The soak forms (200 kills, minutes of the user's git) are the same scripts with larger figures."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from conftest import git

import gitstate

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "scripts"


def _script(name: str, *args: str, work: Path, timeout: float) -> dict[str, object]:
    out = work / "figures.json"
    env = {k: v for k, v in os.environ.items() if k not in ("GIT_DIR", "GIT_WORK_TREE", "AGENTOS_REPO")}
    done = subprocess.run([sys.executable, str(SCRIPTS / name), *args, "--keep", str(work), "--json", str(out)],
                          capture_output=True, text=True, env=env, timeout=timeout, check=False)
    assert out.exists(), done.stderr
    figures: dict[str, object] = json.loads(out.read_text())
    # what went wrong first (pytest cuts a long message short): the failures, then the rest
    telling = [f"{key}: {figures[key]}" for key in ("failures", "tracebacks", "lost_examples", "verify_problems",
                                                    "fsck_output") if figures.get(key)]
    assert done.returncode == 0, "\n".join([*telling, done.stdout, done.stderr])
    return figures


def _acknowledged(work: Path) -> list[tuple[str, str, str]]:
    out = []
    for path in sorted((work / "acks").glob("acks-*.log")):
        for line in path.read_text().splitlines():
            oid, run_id, branch, _took = line.split()
            out.append((oid, run_id, branch))
    return out


def _all_readable_on_their_branch(repo: Path, acks: list[tuple[str, str, str]]) -> None:
    store = gitstate.open_store(repo)
    lines: dict[tuple[str, str], set[str]] = {}
    for oid, run_id, branch in acks:
        if (run_id, branch) not in lines:
            lines[(run_id, branch)] = {c.id for c in store.get_run(run_id).history(branch)}
        assert oid in lines[(run_id, branch)], (oid, run_id, branch)
        assert isinstance(store.checkpoint(oid).state, dict)
    store.close()


def test_sigkill_loop_short(tmp_path: Path) -> None:
    work = tmp_path / "soak"
    figures = _script("soak_kill.py", "--kills", "25", "--seed", "7", work=work, timeout=900)
    assert figures["kills"] == 25 and figures["died_on_their_own"] == 0, figures["deaths"]
    repo = work / "repo"
    acks = _acknowledged(work)
    assert len(acks) == figures["acknowledged"] and len(acks) > 25
    _all_readable_on_their_branch(repo, acks)
    # after any gitstate command (here: listing runs), no lock older than a minute is left
    for lock in (repo / ".git" / "refs" / "agentos").rglob("*.lock"):
        old = time.time() - 120
        os.utime(lock, (old, old))
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    subprocess.run(["git", "agentos", "runs"], cwd=repo, capture_output=True, check=True, env=env)
    now = time.time()
    assert [p for p in (repo / ".git" / "refs" / "agentos").rglob("*.lock") if now - p.stat().st_mtime > 60] == []
    count = dict(line.split(": ") for line in git(repo, "count-objects", "-v").splitlines())
    assert int(count["count"]) < 6700
    git(repo, "gc", "--quiet")
    assert git(repo, "fsck", "--strict", "--no-dangling") == ""
    assert figures["bars_met"] is True


def test_users_git_beside_writers_short(tmp_path: Path) -> None:
    work = tmp_path / "usergit"
    figures = _script("soak_usergit.py", "--seconds", "15", work=work, timeout=900)
    assert figures["failed_writes"] == 0, figures["failures"]
    assert figures["tracebacks"] == [] and figures["writer_exit_codes"] == [0, 0]
    runs = figures["user_git_runs"]
    assert isinstance(runs, dict) and all(runs.get(k, 0) >= 1 for k in ("repack -adf", "pack-refs --all", "gc --quiet"))
    repo = work / "repo"
    acks = _acknowledged(work)
    assert len(acks) == figures["acknowledged"] and len(acks) > 20
    _all_readable_on_their_branch(repo, acks)
    assert git(repo, "fsck", "--strict", "--no-dangling") == ""
