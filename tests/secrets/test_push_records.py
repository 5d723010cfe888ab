"""What a push sends beside checkpoints: a run record, a node log record or a session file that
holds a credential (stored with ``warn``) is refused by ``git agentos push`` and by a plain
``git push`` (the pre-push hook), and nothing reaches the remote; ``scan`` reports it, and
``scan --redact --now`` leaves it in no object at once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import git, make_repo
from remote_helpers import bare, machine

import gitstate

AWS = "AKIA" + "Q" * 12 + "7ZXW"
BIN = Path(sys.executable).parent


def run_git(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, env=env, check=False)
    assert "Traceback" not in done.stderr, (args, done.stderr)
    return done


def all_objects(path: Path) -> bytes:
    return subprocess.run(["git", "cat-file", "--batch-all-objects", "--batch"], cwd=path, capture_output=True,
                          check=True).stdout


def write(path: Path, where: str) -> None:
    store = gitstate.open_store(path)
    run = store.create_run("w", "r", metadata={"token": AWS} if where == "run" else None)
    run.checkpoint({"step": 0})
    if where == "node":
        with pytest.raises(RuntimeError), run.node("fetch"):
            run.checkpoint({"step": 1})
            raise RuntimeError(f"401 for key {AWS}")
    elif where == "session":
        run.files.write("notes.md", f"# notes\nkey {AWS}\n", author="agent:a")
    store.close()


@pytest.mark.parametrize("where", ["run", "node", "session"])
def test_a_record_holding_a_secret_is_not_pushed(tmp_path: Path, where: str) -> None:
    remote = bare(tmp_path / "origin.git")
    path = machine(tmp_path / "A", remote.as_uri(), allow="origin")
    git(path, "config", "agentos.secrets", "warn")
    write(path, where)
    assert AWS.encode() in all_objects(path)
    assert gitstate.install_hooks(gitstate.open_store(path)).action == "installed"
    out = run_git(path, "agentos", "push", "origin")
    assert out.returncode == 1 and "aws-access-key" in out.stderr and AWS not in out.stderr
    out = run_git(path, "push", "origin", "refs/agentos/*:refs/agentos/*")
    assert out.returncode != 0 and "aws-access-key" in out.stderr and AWS not in out.stderr
    assert git(remote, "for-each-ref") == "" and git(remote, "count-objects").startswith("0 objects")
    out = run_git(path, "agentos", "scan", "--json")
    assert out.returncode == 1 and "aws-access-key" in out.stdout and AWS not in out.stdout
    # redacted at once: in no object any more, and the push goes
    out = run_git(path, "agentos", "scan", "--redact", "--now")
    assert out.returncode == 0, out.stderr
    assert AWS.encode() not in all_objects(path)
    assert run_git(path, "push", "origin", "refs/agentos/*:refs/agentos/*").returncode == 0
    assert AWS.encode() not in all_objects(remote)


def test_scan_redact_now_drops_a_warned_snapshot_file(tmp_path: Path) -> None:
    path = make_repo(tmp_path / "repo")
    git(path, "config", "agentos.secrets", "warn")
    (path / "creds.txt").write_text(f"AWS={AWS}\n")
    store = gitstate.open_store(path)
    run = store.create_run("w", "r")
    run.checkpoint({"note": f"saw {AWS}"}, files=True)
    run.checkpoint({"step": 2}, files=True)
    store.close()
    assert AWS.encode() in all_objects(path)
    assert run_git(path, "agentos", "scan", "--now").returncode != 0  # --now goes with --redact
    out = run_git(path, "agentos", "scan", "--redact", "--now", "--json")
    assert out.returncode == 0, out.stderr
    assert '"dropped"' in out.stdout and '"remaining": 0' in out.stdout
    assert AWS.encode() not in all_objects(path)
    assert AWS in (path / "creds.txt").read_text()  # the worktree is the user's


def test_scan_redact_without_now_leaves_the_old_objects_for_gc(tmp_path: Path) -> None:
    path = make_repo(tmp_path / "repo")
    git(path, "config", "agentos.secrets", "warn")
    gitstate.open_store(path).create_run("w", "r").checkpoint({"note": f"saw {AWS}"})
    assert run_git(path, "agentos", "scan", "--redact").returncode == 0
    assert AWS.encode() in all_objects(path)
    assert run_git(path, "agentos", "gc", "--now").returncode == 0
    assert AWS.encode() not in all_objects(path)


def test_scan_counts_checkpoints_and_records_apart(tmp_path: Path) -> None:
    """The closing line counts the checkpoints with findings among those scanned, and the other
    records (here a session file's commits) apart: never more checkpoints with findings than
    checkpoints."""
    path = make_repo(tmp_path / "repo")
    git(path, "config", "agentos.secrets", "warn")
    store = gitstate.open_store(path)
    run = store.create_run("w", "r")
    run.checkpoint({"step": 0, "key": AWS})
    for n in range(3):
        run.files.write(f"notes{n}.md", f"key {AWS}\n", author="agent:a")
    store.close()
    out = run_git(path, "agentos", "scan")
    assert out.returncode == 1
    assert out.stderr.strip() == "error: 4 credential(s) found in 1 of 1 checkpoint(s) and 3 other record(s)"
