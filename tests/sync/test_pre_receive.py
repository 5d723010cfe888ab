"""``git agentos verify --pre-receive`` as the pre-receive hook of a repository served over smart
HTTP: a hand-crafted malformed checkpoint and a checkpoint holding a credential are refused, one
line per ref; a valid push is accepted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import agentos_process, git
from githttp import http_server, served_repo
from remote_helpers import machine

import gitstate

__all__ = ["http_server"]

GIT_AGENTOS = Path(sys.executable).parent / "git-agentos"


@pytest.fixture
def verified(tmp_path: Path, http_server: tuple[Path, str]) -> tuple[Path, Path]:
    """``(server repository, machine A)``: the server runs ``verify --pre-receive`` on each push."""
    root, base = http_server
    repo = served_repo(root, f"{tmp_path.name}.git")
    hook = repo / "hooks" / "pre-receive.more"
    hook.write_text(f"#!/bin/sh\nexec '{GIT_AGENTOS}' verify --pre-receive\n")
    hook.chmod(0o755)
    return repo, machine(tmp_path / "A", f"{base}/{tmp_path.name}.git")


def plain_push(path: Path, *refs: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "push", "--porcelain", "origin", *refs], cwd=path, capture_output=True, text=True,
                          check=False)


def test_a_valid_push_is_accepted_and_a_malformed_checkpoint_refused(verified: tuple[Path, Path]) -> None:
    repo, path = verified
    store = gitstate.open_store(path)
    run = store.create_run(run_id="r")
    run.checkpoint({"step": 1})
    tip = run.checkpoint({"step": 2}).id
    assert all(r.ok for r in gitstate.push(store))
    assert git(repo, "rev-parse", "refs/agentos/main/runs/r/heads/main").strip() == tip
    # by hand: a commit that claims to be a checkpoint of r, whose meta.cbor is no CBOR
    message = git(path, "cat-file", "commit", tip).split("\n\n", 1)[1]
    blob = subprocess.run(["git", "hash-object", "-w", "--stdin"], cwd=path, input="\xff\xfe not cbor",
                          capture_output=True, text=True, check=True).stdout.strip()
    tree = subprocess.run(["git", "mktree"], cwd=path, input=f"100644 blob {blob}\tmeta.cbor\n",
                          capture_output=True, text=True, check=True).stdout.strip()
    bad = subprocess.run(["git", "commit-tree", tree, "-p", tip], cwd=path, input=message,
                         capture_output=True, text=True, check=True).stdout.strip()
    ref = "refs/agentos/main/runs/r/heads/main"
    git(path, "update-ref", ref, bad)
    done = plain_push(path, ref)
    assert done.returncode != 0
    lines = [line for line in done.stderr.splitlines() if "gitstate: refusing" in line]
    assert len(lines) == 1 and ref in lines[0] and bad[:12] in lines[0], done.stderr
    assert git(repo, "rev-parse", ref).strip() == tip  # nothing kept
    assert subprocess.run(["git", "cat-file", "-e", bad], cwd=repo, check=False).returncode != 0  # not kept


def test_a_branch_without_a_run_and_a_credential_are_refused_one_line_each(verified: tuple[Path, Path]) -> None:
    repo, path = verified
    store = gitstate.open_store(path)
    store.create_run(run_id="ok").checkpoint({"step": 1})
    git(path, "config", "agentos.secrets", "warn")  # stored as written (the default redacts it)
    store = gitstate.open_store(path)
    leaked = store.create_run(run_id="leaky").checkpoint({"key": "AKIA" + "Q" * 12 + "7ZXW"}).id
    orphan = "refs/agentos/main/runs/orphan/heads/main"
    git(path, "update-ref", orphan, leaked)
    done = plain_push(path, "refs/agentos/*:refs/agentos/*")
    assert done.returncode != 0
    lines = sorted(line.split("remote: ", 1)[-1].strip() for line in done.stderr.splitlines()
                   if "gitstate: refusing" in line)
    assert len(lines) == 2, done.stderr
    assert lines[0].startswith("gitstate: refusing refs/agentos/main/runs/leaky/heads/main: holds a credential "
                               "(aws-access-key")
    assert lines[1].startswith(f"gitstate: refusing {orphan}: ")
    assert git(repo, "for-each-ref") == ""
    # without them the push goes through
    git(path, "update-ref", "-d", orphan)
    pushed = agentos_process(path, "push", "origin", "ok")
    assert pushed.returncode == 0, pushed.stderr
    assert "refs/agentos/main/runs/ok/run" in git(repo, "for-each-ref")
