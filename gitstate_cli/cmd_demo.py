"""``git agentos demo``: a small but real agent workflow in a fresh repository, then a tour of what
it stored, through ``git agentos`` and through plain git. Needs nothing beyond the package (and
git, which ``git agentos`` runs under anyway)."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import subprocess
import sys
import tempfile
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import click

import gitstate
from gitstate.git.environ import scoped_environ

from . import output as out
from .context import PathParam

RUN = "demo-run"
_IDENTITY = ("-c", "user.name=gitstate demo", "-c", "user.email=demo@gitstate.invalid")


def _files_api() -> bool:
    """Whether this gitstate has workspace snapshots and restore (the file features)."""
    return hasattr(gitstate.Run, "restore")


def _heading(text: str) -> None:
    click.echo()
    click.echo(out.style(f"== {text}", fg="cyan", bold=True))


def _git_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE")}


def _git(repo: Path, *args: str, show: bool = True) -> str:
    """Run real git in the demo repository, echoing the command and its output."""
    if show:
        click.echo(out.style("$ git " + " ".join(shlex.quote(a) for a in args), bold=True))
    done = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, env=_git_env(), check=False)
    if done.returncode != 0:
        raise click.ClickException(f"git {' '.join(args)} failed: {done.stderr.strip()}")
    if show:
        click.echo(done.stdout.rstrip("\n"))
    return done.stdout


def _agentos(*args: str) -> None:
    """Run one ``git agentos`` command in-process, echoing it first."""
    from .main import cli

    click.echo(out.style("$ git agentos " + " ".join(shlex.quote(a) for a in args), bold=True))
    cli.main(args=["--no-pager", *args], prog_name="git agentos", standalone_mode=False)  # a tour, not a pager


def _pointed_at(repo: Path) -> AbstractContextManager[None]:
    """Make every store lookup in this process find the demo repository."""
    return scoped_environ({"AGENTOS_REPO": str(repo), "GIT_DIR": None, "GIT_WORK_TREE": None})


def _prepare(directory: str | None) -> Path:
    repo = Path(directory).resolve() if directory else Path(tempfile.mkdtemp(prefix="gitstate-demo-"))
    repo.mkdir(parents=True, exist_ok=True)
    marker = repo / ".git" / "agentos" / "demo-repository"
    if (repo / ".git").exists():
        # the demo writes files, config and the run demo-run (deleting an earlier one): only in a
        # repository it made itself, never in the user's own
        if not marker.is_file():
            raise click.UsageError(f"--dir {repo} holds a repository the demo did not make; the demo "
                                   "overwrites files and a run there: give a new or empty directory")
    else:
        if any(repo.iterdir()):
            raise click.UsageError(f"--dir {repo} exists, is not empty and is not a repository")
        _git(repo, "init", "-q", "-b", "main", show=False)
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text("made by git agentos demo\n")
        (repo / "README.md").write_text("# triage bot\n\nA repository an agent works in.\n")
        _git(repo, "add", "README.md", show=False)
        _git(repo, *_IDENTITY, "commit", "-q", "-m", "initial commit", show=False)
    return repo


def _checkpoint(scope: Any, state: dict[str, Any], **kwargs: Any) -> gitstate.Checkpoint:
    if _files_api():
        kwargs["files"] = True
    cp: gitstate.Checkpoint = scope.checkpoint(state, **kwargs)
    return cp


def _run_workflow(repo: Path) -> gitstate.Run:
    """The "agent": three nodes that read issues, plan, and act, editing files and state."""
    store = gitstate.open_store(repo)
    try:
        if RUN in {s.id for s in store.list_runs()}:
            store.delete_run(RUN)
        run = store.create_run(workflow="triage", run_id=RUN)
        state: dict[str, Any] = {"messages": [{"role": "user", "content": "triage the open issues"}]}
        run.checkpoint(state, trigger="input")
        issues = [{"id": 1, "title": "crash on start"}, {"id": 2, "title": "typo in docs"}]
        with run.node("load_data") as node:
            (repo / "data").mkdir(exist_ok=True)
            (repo / "data" / "issues.json").write_text(json.dumps(issues, indent=2) + "\n")
            state["issues"] = issues
            state["messages"].append({"role": "tool", "content": "loaded 2 issues"})
            _checkpoint(node, state, trigger="tool_end",
                        tools=[{"tool": "fetch_issues", "args": {"state": "open"}, "result": 2}])
        with run.node("plan") as node:
            (repo / "plan.md").write_text("1. fix the crash\n2. fix the typo\n")
            state["plan"] = ["fix crash", "fix typo"]
            state["messages"].append({"role": "assistant", "content": "plan: crash first, then typo"})
            _checkpoint(node, state, trigger="llm_end")
        with run.node("act") as node:
            (repo / "plan.md").write_text("1. fix the crash  [done]\n2. fix the typo\n")
            (repo / "report.md").write_text("Fixed the crash by checking the config path.\n")
            state["done"] = ["fix crash"]
            state["messages"].append({"role": "assistant", "content": "crash fixed, report written"})
            _checkpoint(node, state, trigger="tool_end", status="completed")
        vfs = getattr(run, "files", None)
        if vfs is not None and hasattr(vfs, "write"):
            vfs.write("notes.md", b"first notes\n", author="planner", reason="initial notes")
            vfs.write("notes.md", b"first notes\nsecond thought\n", author="actor", reason="after acting")
        return store.get_run(RUN)
    finally:
        store.close()


@click.command()
@click.option("--dir", "directory", type=PathParam(file_okay=False), default=None,
              help="Run in this directory (a new or empty one, or one an earlier demo made) instead of a "
                   "fresh temp dir.")
@out.json_option
def demo(directory: str | None, as_json: bool) -> None:
    """Run a small agent workflow in a fresh repository and show every feature.

    The workflow has three nodes (load_data, plan, act) that edit workspace files and state.
    Then the demo shows the run list, the log, a node boundary, a fork, a rollback with file
    restore, an undo, a diff, verify, and the plain-git commands that read the same data.

    \b
    Example:
      git agentos demo --dir /tmp/agentos-demo

    JSON: the tour goes to stderr; stdout gets {"repository", "run", "branches": {name: tip id},
    "checkpoints" (on main)}.
    """
    if not as_json:
        _tour(directory)
        return
    with contextlib.redirect_stdout(sys.stderr):
        repo = _tour(directory)
    with _pointed_at(repo):  # the demo's repository, whatever AGENTOS_REPO names
        store = gitstate.open_store(repo)
    try:
        run = store.get_run(RUN)
        out.emit_json({"repository": str(repo), "run": RUN,
                       "branches": {name: cp.id for name, cp in sorted(run.branches().items())},
                       "checkpoints": sum(1 for _ in run.history())})
    finally:
        store.close()


def _tour(directory: str | None) -> Path:
    repo = _prepare(directory)
    click.echo(f"demo repository: {repo}")
    files = _files_api()
    if not files:
        click.echo("note: this gitstate has no workspace snapshots; the file steps are skipped")
    with _pointed_at(repo):
        _heading("1. an agent runs three nodes (load_data, plan, act), checkpointing as it goes")
        _run_workflow(repo)
        _git(repo, "status", "--short")
        _heading("2. the runs of this worktree")
        _agentos("runs")
        _heading("3. the run's checkpoints, newest first")
        _agentos("log", RUN)
        _heading("4. node boundaries, and the exit checkpoint of one node")
        _agentos("nodes", RUN)
        _agentos("show", f"{RUN}:node:plan")
        _heading("5. fork: try another path from the end of 'plan'")
        _agentos("fork", RUN, "node:plan", "alt")
        with tempfile.TemporaryDirectory(prefix="gitstate-demo-") as scratch:
            state = os.path.join(scratch, "state.json")
            with open(state, "w", encoding="utf-8") as fh:
                json.dump({"messages": ["(alternative) ask a human first"], "plan": ["ask a human"]}, fh)
            _agentos("checkpoint", RUN, "--branch", "alt", "--state", state, "--node", "ask_human",
                     "--trigger", "interrupt")
        _agentos("log", RUN, "--branch", "alt", "-n", "3")
        _heading("6. rollback of main to the exit of node 'plan' (its last checkpoint)"
                 + (", restoring the files it captured" if files else ""))
        click.echo(f"plan.md before: {(repo / 'plan.md').read_text().strip()!r}")
        _agentos("rollback", RUN, "node:plan", *(["--restore"] if files else []))
        click.echo(f"plan.md after:  {(repo / 'plan.md').read_text().strip()!r}")
        _heading("7. undo the rollback (the branch's reflog remembers every move)")
        _agentos("undo", RUN)
        _agentos("log", RUN, "-n", "2")
        if files:
            click.echo("# undo moved the branch; bring the files of the 'act' step back too:")
            _agentos("restore", RUN)
            click.echo(f"plan.md now:    {(repo / 'plan.md').read_text().strip()!r}")
        _heading("8. what changed between the 'load_data' step and the 'act' step (state and files)")
        _agentos("diff", f"{RUN}:node:load_data", f"{RUN}:node:act")
        if files:
            _heading("9. session files of the run")
            _agentos("files", RUN)
        _heading("10. verify the whole store")
        _agentos("verify")
        _heading("11. the same data with plain git")
        ref = _git(repo, "for-each-ref", "--format=%(refname)", f"refs/agentos/main/runs/{RUN}/heads/main",
                   show=False).strip()
        _git(repo, "for-each-ref", "refs/agentos/")
        _git(repo, "log", "--oneline", "--decorate=no", ref)
        _git(repo, "log", "-1", "--format=%B", ref)
        _git(repo, "ls-tree", "-r", "--name-only", ref)
        click.echo("# without setup, state blobs are CBOR; `git agentos setup` adds a textconv:")
        _agentos("setup")
        _git(repo, "show", "--format=%s", f"{ref}~1", "--", "state", "meta.cbor")
        _git(repo, "show", "HEAD", "--stat", "--format=%s")
        click.echo("# the user's HEAD, index and branches were never touched (only files the agent wrote):")
        _git(repo, "status", "--short")
    click.echo()
    click.echo(f"done. explore it yourself: cd {shlex.quote(str(repo))} && git agentos runs")
    return repo
