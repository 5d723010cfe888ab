"""Sharing through the CLI as a user (and CI) sees it: a refused push prints no success line, a
diverged pull's kept copy does not fail later pushes (nor scripts/ci/resume-and-push.sh), branches
are listed and deleted from the CLI, and the unsaved-work safety branch stays local."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import git
from remote_helpers import bare, machine

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def agentos(cwd: Path, *args: str, input: str | None = None, code: int | None = 0,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", **(env or {}))
    done = subprocess.run(["git", "agentos", *args], cwd=cwd, input=input, capture_output=True, text=True,
                          env=full, check=False)
    if code is not None:
        assert done.returncode == code, (args, done.returncode, done.stdout, done.stderr)
    return done


def machines(tmp_path: Path) -> tuple[Path, Path, Path]:
    server = bare(tmp_path / "server.git")
    return machine(tmp_path / "A", server.as_uri()), machine(tmp_path / "B", server.as_uri()), server


def remote_went_on(tmp_path: Path) -> tuple[Path, Path, Path]:
    """Machines A and B (and their server): run1 written with ``--node plan`` on A, pushed and
    pulled by B; then A wrote and pushed one more step (``--node act``), which B has not pulled."""
    a, b, server = machines(tmp_path)
    agentos(a, "checkpoint", "run1", "--state", "-", "--node", "plan", input="{}")
    agentos(a, "push", "origin")
    agentos(b, "pull", "origin")
    agentos(a, "checkpoint", "run1", "--state", "-", "--node", "act", input='{"a": 1}')
    agentos(a, "push", "origin")
    return a, b, server


def diverge(a: Path, b: Path) -> None:
    """Run r exists on both machines and advanced on both sides; B pulls (diverged)."""
    agentos(a, "checkpoint", "r", "--state", "-", input='{"n": 0}')
    agentos(a, "push", "origin")
    agentos(b, "pull", "origin")
    agentos(a, "checkpoint", "r", "--state", "-", input='{"a": 1}')
    agentos(b, "checkpoint", "r", "--state", "-", input='{"b": 1}')
    agentos(a, "push", "origin")
    refused = agentos(b, "push", "origin", code=1)
    assert "pushed origin:" not in refused.stdout and "rejected r main" in refused.stdout
    assert refused.stderr.startswith("error: 1 of 1 run(s) not fully pushed") and refused.stderr.count("\n") == 1
    assert "git agentos pull origin r" in refused.stdout  # the CLI names the commands, not Python
    pulled = agentos(b, "pull", "origin")
    assert "diverged r main -> main@origin" in pulled.stdout


def test_kept_copy_does_not_fail_every_later_push(tmp_path: Path) -> None:
    a, b, _server = machines(tmp_path)
    diverge(a, b)
    listing = json.loads(agentos(b, "branches", "r", "--json").stdout)
    kinds = {row["branch"]: row["kind"] for row in listing}
    assert kinds == {"main": "main", "main@origin": "kept-copy"}
    table = agentos(b, "branches", "r").stdout
    assert "main@origin" in table and "kept by a pull" in table
    # reconcile: B's line under its own name, main back on origin's line
    agentos(b, "fork", "r", "@main", "b-line")
    agentos(b, "rollback", "r", "@main@origin")
    pushed = agentos(b, "push", "origin")  # exit 0 although main@origin is not pushed back
    assert "kept r main@origin" in pushed.stdout and "pushed origin:" in pushed.stdout
    again = agentos(b, "push", "origin", "--json")
    refs = {ref["ref"].rsplit("/", 1)[1]: ref for run in json.loads(again.stdout) for ref in run["refs"]}
    assert refs["main@origin"]["status"] == "kept" and refs["main@origin"]["ok"] is True
    # the copy can go now
    agentos(b, "branch", "-d", "r@main@origin")
    assert [row["branch"] for row in json.loads(agentos(b, "branches", "r", "--json").stdout)] == ["main", "b-line"]


def test_resume_and_push_script_after_a_diverged_pull(tmp_path: Path) -> None:
    a, b, _server = machines(tmp_path)
    diverge(a, b)
    agentos(b, "fork", "r", "@main", "b-line")
    agentos(b, "rollback", "r", "@main@origin")
    step = tmp_path / "step.sh"
    step.write_text('#!/bin/sh\nexec git agentos checkpoint "$RUN_ID" --node resume --trigger ci\n')
    step.chmod(0o755)
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", RESUME_COMMAND=str(step))
    for _ in range(2):  # every later run too
        done = subprocess.run(["sh", str(ROOT / "scripts" / "ci" / "resume-and-push.sh"), "r", "origin"], cwd=b,
                              capture_output=True, text=True, env=env, check=False)
        assert done.returncode == 0, (done.stdout, done.stderr)
        assert "kept r main@origin" in done.stdout
    agentos(a, "pull", "origin")
    assert [c["node"] for c in json.loads(agentos(a, "log", "r", "-n", "2", "--json").stdout)] == ["resume", "resume"]


def test_safety_branch_stays_local_on_push_and_export(tmp_path: Path) -> None:
    a, _b, server = machines(tmp_path)
    (a / "notes.txt").write_text("checkpointed\n")
    agentos(a, "checkpoint", "r", "--files", "--state", "-", input="{}")
    (a / "notes.txt").write_text("a password I never checkpointed\n")
    agentos(a, "restore", "r", "--force")
    pushed = agentos(a, "push", "origin")
    assert "local r restore-safety: not pushed: the restore-safety branch holds workspace files a restore set " \
           "aside without checkpointing them; it stays in this repository unless you push with --include-safety" \
        in pushed.stdout, pushed.stdout
    assert "restore-safety" not in git(server, "for-each-ref")
    bundle = tmp_path / "r.bundle"
    exported = agentos(a, "export", "r", "-o", str(bundle))
    assert "left out 1 restore-safety ref(s)" in exported.stdout and "--include-safety" in exported.stdout
    assert "restore-safety" not in git(tmp_path, "bundle", "list-heads", str(bundle))
    doc = json.loads(agentos(a, "export", "r", "-o", str(bundle), "--json").stdout)
    assert doc["left_out"] == ["refs/agentos/main/runs/r/heads/restore-safety"]
    agentos(a, "export", "r", "-o", str(bundle), "--include-safety")
    assert "restore-safety" in git(tmp_path, "bundle", "list-heads", str(bundle))
    agentos(a, "push", "origin", "--include-safety")
    assert "restore-safety" in git(server, "for-each-ref")


def _safety_row(cwd: Path) -> dict[str, object]:
    doc = json.loads(agentos(cwd, "push", "origin", "--json").stdout)
    text = json.dumps(doc)
    assert "include_safety" not in text and "(include" not in text  # no Python parameter names
    return next(ref for run in doc for ref in run["refs"] if ref["ref"].endswith("/heads/restore-safety"))


def test_push_says_truthfully_where_the_safety_branch_is(tmp_path: Path) -> None:
    """``push --json`` and its text speak CLI, and once an ``--include-safety`` push sent the
    safety branch, later pushes no longer call it local: the remote has it (or an older one)."""
    a, _b, server = machines(tmp_path)
    (a / "notes.txt").write_text("checkpointed\n")
    agentos(a, "checkpoint", "r", "--files", "--state", "-", input="{}")
    (a / "notes.txt").write_text("unsaved one\n")
    agentos(a, "restore", "r", "--force")
    row = _safety_row(a)
    assert row["status"] == "local" and row["old"] is None and "--include-safety" in str(row["message"])
    agentos(a, "push", "origin", "--include-safety")
    sent = git(server, "rev-parse", "refs/agentos/main/runs/r/heads/restore-safety").strip()
    row = _safety_row(a)
    assert row["status"] == "up-to-date" and row["ok"] is True and row["old"] == sent == row["new"]
    assert "origin already has this restore-safety branch" in str(row["message"])
    text = agentos(a, "push", "origin").stdout
    assert "up-to-date r restore-safety: not pushed again: origin already has" in text, text
    assert "local r restore-safety" not in text
    # a newer restore moves the branch here: not sent, and the remote's older copy is named
    (a / "notes.txt").write_text("unsaved two\n")
    agentos(a, "restore", "r", "--force")
    row = _safety_row(a)
    assert row["status"] == "local" and row["old"] == sent and row["new"] != sent
    assert "origin still has an older restore-safety branch" in str(row["message"])
    assert git(server, "rev-parse", "refs/agentos/main/runs/r/heads/restore-safety").strip() == sent


def test_push_report_names_branches_as_users_name_them(tmp_path: Path) -> None:
    """The per-ref lines say ``main~<id>`` (a LangGraph fork line) and ``a@b~c``, not the
    ``%XX``-escaped ref components, and a refused branch's fork hint names a branch that resolves."""
    a, b, _server = machines(tmp_path)
    agentos(a, "checkpoint", "r", "--state", "-", input='{"n": 0}')
    agentos(a, "checkpoint", "r", "--state", "-", input='{"n": 1}')
    agentos(a, "fork", "r", "~1", "main~1ef4f797-8335")
    agentos(a, "fork", "r", "~1", "a@b~c")
    pushed = agentos(a, "push", "origin").stdout
    assert "pushed r main~1ef4f797-8335\n" in pushed and "pushed r a@b~c\n" in pushed, pushed
    assert "%7E" not in pushed
    # both sides advance the fork line: the refusal's hint names it as the CLI reads it
    agentos(b, "pull", "origin")
    agentos(a, "checkpoint", "r@main~1ef4f797-8335", "--state", "-", input='{"a": 1}')
    agentos(b, "checkpoint", "r@main~1ef4f797-8335", "--state", "-", input='{"b": 1}')
    agentos(a, "push", "origin")
    refused = agentos(b, "push", "origin", code=1).stdout
    assert "rejected r main~1ef4f797-8335:" in refused, refused
    assert "git agentos fork 'r@main~1ef4f797-8335' @'main~1ef4f797-8335' NEW_BRANCH" in refused, refused
    assert "git agentos rollback 'r@main~1ef4f797-8335' @'main~1ef4f797-8335@origin'" in refused, refused
    agentos(b, "log", "r@main~1ef4f797-8335")  # the name the hint gives resolves
    # doing what the hint says makes the next push succeed
    agentos(b, "pull", "origin")
    agentos(b, "fork", "r@main~1ef4f797-8335", "@main~1ef4f797-8335", "b-line")  # as the hint says
    agentos(b, "rollback", "r@main~1ef4f797-8335", "@main~1ef4f797-8335@origin")
    assert "pushed r b-line" in agentos(b, "push", "origin").stdout


def test_a_kept_divergence_is_reported_once(tmp_path: Path) -> None:
    """The pull that keeps the remote's line reports it as ``diverged``; pulling again changes
    nothing and says so (the copy listed as ``kept``, exit 0), until the remote's line moves on."""
    a, b, _server = machines(tmp_path)
    diverge(a, b)  # B's first pull after both sides advanced: "diverged r main -> main@origin"
    for _ in range(2):
        again = agentos(b, "pull", "origin")
        assert "diverged" not in again.stdout, again.stdout
        assert "kept r main -> main@origin: already kept" in again.stdout, again.stdout
        assert again.stdout.rstrip().endswith("pulled origin: 1 run(s), nothing changed"), again.stdout
        doc = json.loads(agentos(b, "pull", "origin", "--json").stdout)
        refs = {ref["ref"].rsplit("/", 1)[1]: ref for ref in doc[0]["refs"]}
        assert refs["main"]["status"] == "kept" and refs["main"]["kept_as"] == "main@origin"
        assert refs["main"]["ok"] is True and doc[0]["ok"] is True
    # origin's line advances: the copy moves forward with it, reported (once) as a change
    agentos(a, "checkpoint", "r", "--state", "-", input='{"a": 2}')
    agentos(a, "push", "origin")
    moved = agentos(b, "pull", "origin")
    assert "diverged r main -> main@origin: origin's line advanced" in moved.stdout, moved.stdout
    assert "1 changed" in moved.stdout
    tip_a = json.loads(agentos(a, "log", "r", "-n", "1", "--json").stdout)[0]["id"]
    assert json.loads(agentos(b, "log", "r@main@origin", "-n", "1", "--json").stdout)[0]["id"] == tip_a
    assert "nothing changed" in agentos(b, "pull", "origin").stdout
