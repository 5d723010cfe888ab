"""Commands that move refs: checkpoint, rollback, undo, fork, delete, prune. Every input is read
and checked before the first write, so a bad argument leaves the store unchanged."""

from __future__ import annotations

import os
import sys
from typing import Any

import click

import gitstate
from gitstate.format import encoding, names
from gitstate.format.checkpoint import STATUS_WORDS
from gitstate.format.names import run_info_ref, run_prefix
from gitstate.git.refs import list_refs
from gitstate.store import refspec

from . import output as out
from .context import get_run, parse_meta, pass_store, read_state

branch_option = click.option("--branch", "-b", default="main", show_default=True, help="Branch of the run.")


def _describe(cp: gitstate.Checkpoint) -> str:
    return f"{out.style(cp.short_id, fg='yellow')} (run {cp.run_id}, branch {cp.branch}, step {cp.step})"


@click.command()
@click.argument("run_id", metavar="RUN")
@click.argument("paths", nargs=-1, metavar="[PATH]...")
@click.option("--workflow", "-w", default=None, help="Workflow name, recorded when the run is created.")
@click.option("--state", "state_file", metavar="FILE|-", default=None,
              help="State as JSON (CBOR if FILE ends in .cbor); '-' reads stdin. Default: the branch's current state.")
@click.option("--node", default=None, help="Node the checkpoint belongs to.")
@click.option("--trigger", default=None, help="What caused it (e.g. tool_end, user_input).")
@click.option("--status", default=None, type=click.Choice(STATUS_WORDS, case_sensitive=False),
              help="The run's status as of this checkpoint: running, completed, failed or interrupted "
                   "(synonyms such as done or error are normalised).")
@click.option("--meta", "meta", multiple=True, metavar="KEY=VALUE",
              help="User metadata; VALUE is parsed as JSON when it can be. Repeatable.")
@click.option("--files", "with_files", is_flag=True,
              help="Snapshot the workspace files (all, or only the PATHs given after the run, "
                   "relative to the current directory).")
@branch_option
@click.option("--expect", default=None, metavar="ID",
              help="Write only if the branch tip is this checkpoint (compare-and-swap); else fail.")
@click.option("--json", "as_json", is_flag=True, help="Print the new checkpoint as JSON.")
@pass_store
def checkpoint(store: gitstate.Store, run_id: str, paths: tuple[str, ...], workflow: str | None,
               state_file: str | None, node: str | None, trigger: str | None, status: str | None,
               meta: tuple[str, ...], with_files: bool, branch: str, expect: str | None, as_json: bool) -> None:
    """Write a checkpoint (creates the run if it is new).

    Everything is checked before the first write: if the command fails, the store is unchanged
    (a run it created is removed again). PATHs are relative to the current directory and must
    exist (on disk or in git's index).

    \b
    Examples:
      echo '{"messages": []}' | git agentos checkpoint my-run --state - --node plan
      git agentos checkpoint my-run --state s.json --files src/ README.md
      git agentos checkpoint my-run --state s.json --expect 3f2a9c01

    JSON: the new checkpoint, shaped as in `log --json`.
    """
    if paths and not with_files:
        raise click.UsageError("PATHs are only accepted with --files")
    metadata = parse_meta(meta)
    names.check_name("run id", run_id)
    names.check_name("branch name", branch)
    if state_file is not None:
        state: Any = read_state(state_file)
        encoding.check_value(state)
    encoding.check_value(metadata)
    kwargs: dict[str, Any] = {}
    if with_files:
        # PATHs are relative to the current directory, as in git; checked before anything is written
        files = [os.path.abspath(p) for p in paths]
        store.workspace.resolve_paths(files)
        kwargs["files"] = files or True
    created = False
    if expect is not None:
        run = get_run(store, run_id)  # a compare-and-swap on a run that does not exist cannot hold
    else:
        run, created = _open_or_create(store, run_id, workflow)
    try:
        if state_file is None:
            head = run.head(branch)
            state = head.state if head is not None else {}
        with out.progress("snapshotting files") as step:
            cp = run.checkpoint(state, node=node, trigger=trigger, status=status, metadata=metadata or None,
                                branch=branch, expect=expect, progress=step, **kwargs)
    except BaseException:
        if created:
            _discard_new_run(store, run)
        raise
    if as_json:
        out.emit_json(cp.to_dict())
    else:
        click.echo(f"checkpoint {_describe(cp)}")


def _open_or_create(store: gitstate.Store, run_id: str, workflow: str | None) -> tuple[gitstate.Run, bool]:
    """The run of that id, and whether this call created it."""
    try:
        return store.get_run(run_id), False
    except gitstate.RunNotFound:
        pass
    try:
        return store.create_run(workflow=workflow, run_id=run_id), True
    except gitstate.RunExistsError:
        return store.get_run(run_id), False


def _discard_new_run(store: gitstate.Store, run: gitstate.Run) -> None:
    """Delete a run this command created when its first checkpoint failed, so a failed command
    leaves the store as it found it; left alone if anything else was written to it meanwhile."""
    refs = list_refs(store.repo, run_prefix(run.worktree, run.id))
    if [name for name, _ in refs] == [run_info_ref(run.worktree, run.id)]:
        try:
            store.delete_run(run.id)  # compare-and-swap on each ref
        except gitstate.GitStateError:
            pass  # someone else changed it: theirs now


RESTORE_PHASES = {"reading": "reading changed files", "writing": "restoring files"}

verbose_option = click.option("--verbose", "-v", is_flag=True,
                              help="List every file written or removed (a dry run always lists them).")


@click.command()
@click.argument("run_id", metavar="RUN")
@click.argument("target", metavar="TARGET")
@branch_option
@click.option("--restore", "restore_files", is_flag=True,
              help="Also restore the workspace files of the target checkpoint.")
@click.option("--dry-run", is_flag=True, help="Say what would happen; change nothing.")
@verbose_option
@pass_store
def rollback(store: gitstate.Store, run_id: str, target: str, branch: str, restore_files: bool,
             dry_run: bool, verbose: bool) -> None:
    """Move a branch back to an earlier checkpoint (undoable).

    The old tip stays in the branch's reflog; `git agentos undo RUN` moves it back.

    TARGET is relative to RUN: ~N (N back from the branch tip), node:NAME (the node's exit
    checkpoint), @BRANCH[~N], an id or prefix, or any REF of the same run.

    With --restore, one summary line says how many files were written, deleted and left as they
    were; -v lists them.

    \b
    Examples:
      git agentos rollback my-run ~2
      git agentos rollback my-run node:plan --restore
    """
    run = get_run(store, run_id)
    cp = refspec.resolve_target(store, run, target, branch)
    tip = run.head(branch)
    if tip is None:
        raise gitstate.BranchNotFound(run.id, branch)
    if dry_run:
        click.echo(f"would move branch {branch} of run {out.safe(run.id)} from {tip.short_id} to {cp.short_id}")
        if restore_files:
            print_restore(run.restore(cp, dry_run=True))
        return
    with out.phases(RESTORE_PHASES) as step:
        new = run.rollback(cp.id, branch=branch, restore=restore_files, progress=step)
    click.echo(f"rolled back branch {branch} of run {out.safe(run.id)}: {tip.short_id} -> {_describe(new)}")
    if restore_files and run.last_restore is not None:
        print_restore(run.last_restore, verbose=verbose)
    click.echo(f"undo with: git agentos undo {_quote(run.id)}" + (f" --branch {_quote(branch)}" if branch != "main" else ""))


def _quote(text: str) -> str:
    import shlex

    return shlex.quote(text)


def restore_summary(result: gitstate.RestoreResult) -> str:
    """``47 written, 3 deleted, 12 unchanged`` (a dry run: ``47 to write, 3 to delete, …``)."""
    written, deleted = result.written, len(result.removed)
    if result.dry_run:
        text = f"{written} to write, {deleted} to delete, {result.unchanged} unchanged"
        if result.unsaved:
            text += f", {len(result.unsaved)} unsaved (refused without --force)"
    else:
        text = f"{written} written, {deleted} deleted, {result.unchanged} unchanged"
    if result.skipped:
        text += f", {len(result.skipped)} nested repositor{'y' if len(result.skipped) == 1 else 'ies'} left alone"
    return text


def print_restore(result: gitstate.RestoreResult, verbose: bool = False, headline: str = "  files") -> None:
    """Print what a restore changed (or would change): ``headline: summary``, the files when
    ``verbose`` (always on a dry run), and how to undo it."""
    click.echo(f"{headline}: {restore_summary(result)}")
    if verbose or result.dry_run:
        if result.dry_run:
            rows = [("would change", result.changed), ("would create", result.added),
                    ("would remove", result.removed), ("unsaved, refused without --force", result.unsaved)]
        else:
            rows = [("changed", result.changed), ("created", result.added), ("removed", result.removed)]
        rows.append(("skipped (nested repository)", result.skipped))
        for label, paths in rows:
            for path in paths:
                click.echo(f"  {label}: {out.safe(path)}")
    if result.safety:
        click.echo(f"  the workspace as it was is saved as {out.short(result.safety)} on branch "
                   f"{result.safety_branch}; restore it with: git agentos restore {result.safety[:12]}")


@click.command()
@click.argument("run_id", metavar="RUN")
@branch_option
@pass_store
def undo(store: gitstate.Store, run_id: str, branch: str) -> None:
    """Revert the last move of a branch (checkpoint, rollback, fork, prune or undo).

    The moves are read from the branch's reflog, so undoing twice redoes.

    \b
    Example:
      git agentos undo my-run
    """
    run = get_run(store, run_id)
    cp = run.undo(branch)
    if cp is None:
        click.echo(f"undone: branch {branch} of run {run.id} removed (it was just created)")
    else:
        click.echo(f"undone: branch {branch} of run {run.id} is at {_describe(cp)}")


@click.command()
@click.argument("run_id", metavar="RUN")
@click.argument("target", metavar="TARGET")
@click.argument("new_branch", metavar="NEW_BRANCH")
@pass_store
def fork(store: gitstate.Store, run_id: str, target: str, new_branch: str) -> None:
    """Create a new branch of a run at a checkpoint.

    TARGET is relative to the run's main branch (~N, node:NAME, @BRANCH[~N], an id, a REF).

    \b
    Example:
      git agentos fork my-run node:plan try-other-tool
    """
    run = get_run(store, run_id)
    cp = refspec.resolve_target(store, run, target, "main")
    run.fork(cp.id, new_branch)
    click.echo(f"forked branch {new_branch} of run {run.id} at {out.style(cp.short_id, fg='yellow')}")


@click.command()
@click.argument("run_id", metavar="RUN")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@pass_store
def delete(store: gitstate.Store, run_id: str, yes: bool) -> None:
    """Delete a run and all its branches.

    Its objects become unreachable and are left to `git gc`.

    \b
    Example:
      git agentos delete my-run --yes
    """
    run = get_run(store, run_id)
    if not yes:
        if not sys.stdin.isatty():
            raise click.UsageError(f"deleting run {run.id!r} needs --yes when not on a terminal")
        click.confirm(f"delete run {run.id!r} and all its branches?", abort=True)
    store.delete_run(run.id)
    click.echo(f"deleted run {run.id}")


@click.command()
@click.argument("run_id", metavar="RUN")
@click.option("--keep", type=click.IntRange(min=1), required=True, help="How many newest checkpoints to keep.")
@branch_option
@pass_store
def prune(store: gitstate.Store, run_id: str, keep: int, branch: str) -> None:
    """Keep only the newest N checkpoints of a branch.

    The kept checkpoints are rewritten onto a new root, so their ids change; `undo` reverts a
    prune while the reflog keeps the old line.

    \b
    Example:
      git agentos prune my-run --keep 20
    """
    run = get_run(store, run_id)
    result = run.prune(keep_latest=keep, branch=branch)
    click.echo(f"kept {result.kept}, removed {result.removed} checkpoint(s) from branch {branch} of run {run.id}")
