"""Commands that move refs: checkpoint, rollback, undo, fork, delete, prune. Every input is read
and checked before the first write, so a bad argument leaves the store unchanged."""

from __future__ import annotations

import os
import sys
from typing import Any

import click

import gitstate
from gitstate.format import encoding, frameworks, names
from gitstate.format.checkpoint import STATUS_WORDS
from gitstate.store import refspec

from . import output as out
from .context import PathParam, get_run, locate, locate_branch, parse_meta, pass_store, read_state, resolve

branch_option = click.option("--branch", "-b", default=None,
                             help="Branch of the run when RUN names none (default: main; a LangGraph "
                                  "thread's latest line).")
json_option = out.json_option


def _describe(cp: gitstate.Checkpoint) -> str:
    return (f"{out.style(cp.short_id, fg='yellow')} (run {out.safe(cp.run_id)}, branch {out.safe(cp.branch)}, "
            f"step {cp.display_step})")


@click.command()
@click.argument("run_id", metavar="RUN")
@click.argument("paths", nargs=-1, metavar="[PATH]...",
                type=PathParam(empty_hint=" (use . for the current directory)"))
@click.option("--workflow", "-w", default=None,
              help="Workflow name, recorded when the run is created; on an existing run it must be the "
                   "run's own (another one is a usage error: a run's workflow never changes).")
@click.option("--state", "state_file", metavar="FILE|-", default=None,
              help="State as JSON (CBOR if FILE ends in .cbor); '-' reads stdin; at most 256 MiB. Default: the branch's current state.")
@click.option("--node", default=None,
              help="Node that wrote the checkpoint, recorded as a node step: `git agentos nodes` lists it "
                   "(consecutive checkpoints of one node form one boundary) and node:NAME names it.")
@click.option("--trigger", default=None, help="What caused it (e.g. tool_end, user_input).")
@click.option("--status", default=None, type=click.Choice(STATUS_WORDS, case_sensitive=False),
              help="The run's status as of this checkpoint: running, completed, failed, interrupted "
                   "(waits for an answer) or stopped (ended unfinished, e.g. cancelled); synonyms "
                   "such as done or error are normalised.")
@click.option("--meta", "meta", multiple=True, metavar="KEY=VALUE",
              help="User metadata; VALUE is parsed as JSON when it can be. Repeatable.")
@click.option("--files", "with_files", is_flag=True,
              help="Snapshot the workspace files (all, or only the PATHs given after the run, "
                   "relative to the current directory).")
@branch_option
@click.option("--expect", default=None, metavar="REF",
              help="Write only if the branch tip is this checkpoint (compare-and-swap); else fail. "
                   "REF is any checkpoint reference: an id or prefix, RUN@BRANCH, RUN~N ('help refs').")
@json_option
@pass_store
def checkpoint(store: gitstate.Store, run_id: str, paths: tuple[str, ...], workflow: str | None,
               state_file: str | None, node: str | None, trigger: str | None, status: str | None,
               meta: tuple[str, ...], with_files: bool, branch: str | None, expect: str | None,
               as_json: bool) -> None:
    """Write a checkpoint (creates the run if it is new).

    RUN may be RUN@BRANCH (an existing run's branch, created if new) or a new run id.
    Everything is checked before the first write: if the command fails, the store is unchanged
    (a run it created is removed again). PATHs are relative to the current directory and must
    exist (on disk or in git's index). A run a framework integration writes (a LangGraph thread,
    an OpenAI Agents session, ...) is refused: its reader would not understand a plain checkpoint.

    \b
    Examples:
      echo '{"messages": []}' | git agentos checkpoint my-run --state - --node plan
      git agentos checkpoint my-run --state s.json --files src/ README.md
      git agentos checkpoint my-run --state s.json --expect 3f2a9c01

    JSON: the new checkpoint, shaped as in `log --json`.
    """
    if paths and not with_files:
        raise click.UsageError("PATHs are only accepted with --files")
    if node == "":
        raise click.BadParameter("a node name cannot be empty", param_hint="'--node'")
    metadata = parse_meta(meta)
    names.check_name("run id", run_id)
    if branch is not None:
        names.check_name("branch name", branch)
    loc = locate_branch(store, run_id, branch, create=True)
    run_id, branch = loc.run, loc.branch
    names.check_name("branch name", branch)
    if state_file is not None:
        state: Any = read_state(state_file)
        try:
            encoding.check_value(state)
            # every value encoded once, lone surrogates too ("\ud800" in JSON), named by its key
            for key, value in (state.items() if isinstance(state, dict) else [("", state)]):
                encoding.dumps(value, str(key))
        except gitstate.EncodingError as exc:
            raise click.BadParameter(f"{state_file}: {exc}", param_hint="'--state'") from None
    encoding.check_value(metadata)
    kwargs: dict[str, Any] = {}
    if with_files:
        # PATHs are relative to the current directory, as in git; checked before anything is written
        files = [os.path.abspath(p) for p in paths]
        store.core.workspace.resolve_paths(files)
        kwargs["files"] = files or True
    if workflow in frameworks.INTEGRATION_WORKFLOWS:
        raise click.UsageError(f"workflow {workflow!r} is the {workflow} integration's: only it writes "
                               "checkpoints its reader understands; name another workflow")
    created = False
    if expect is not None:
        run = get_run(store, run_id)  # a compare-and-swap on a run that does not exist cannot hold
    else:
        run, created = _open_or_create(store, run_id, workflow)
    if run.workflow in frameworks.INTEGRATION_WORKFLOWS:
        # e.g. a LangGraph thread: its saver would not read a plain checkpoint and start the thread over
        raise click.UsageError(f"run {out.safe(run.id)} belongs to the {run.workflow} integration (workflow "
                               f"{run.workflow!r}); only it writes checkpoints its reader understands, so a "
                               "checkpoint from the command line is refused; write to another run id")
    if workflow is not None and not created and workflow != run.workflow:
        recorded = f"workflow {out.safe(run.workflow)!r}" if run.workflow is not None else "no workflow"
        raise click.BadParameter(f"run {out.safe(run.id)!r} exists with {recorded}, not {out.safe(workflow)!r}: a "
                                 "run's workflow is recorded when it is created and never changes; drop -w, "
                                 "or write to another run id", param_hint="'--workflow' / '-w'")
    if expect is not None:
        expected = resolve(store, expect)  # the one reference grammar
        if expected.run_id != run.id:
            raise gitstate.InvalidReferenceError(
                expect, f"it names a checkpoint of run {expected.run_id!r}, not of run {run.id!r}")
        expect = expected.id
    if state_file is None:
        head = run.head(branch) if run.saved else None
        state = head.state if head is not None else {}
    def write(run: gitstate.Run) -> gitstate.Checkpoint:
        with out.progress("snapshotting files") as step:
            return run.checkpoint(state, node=node, trigger=trigger, status=status, metadata=metadata or None,
                                  branch=branch, expect=expect, progress=step, **kwargs)

    try:
        cp = write(run)
    except gitstate.RunExistsError:
        # created by another writer since we looked: checkpoint onto it, as if it had been there
        run = get_run(store, run_id)
        if workflow is not None and workflow != run.workflow:
            raise
        cp = write(run)
    if as_json:
        out.emit_json(cp.to_dict())
    else:
        click.echo(f"checkpoint {_describe(cp)}")


def _open_or_create(store: gitstate.Store, run_id: str, workflow: str | None) -> tuple[gitstate.Run, bool]:
    """The run of that id, and whether it is new: a new one is written with its first checkpoint
    (:meth:`gitstate.Store.new_run`), so a failed command leaves no empty run behind."""
    try:
        return store.get_run(run_id), False
    except gitstate.RunNotFound:
        return store.new_run(workflow=workflow, run_id=run_id), True


RESTORE_PHASES = {"checking": "checking changed files", "reading": "reading changed files",
                  "writing": "restoring files"}

verbose_option = click.option("--verbose", "-v", is_flag=True,
                              help="List every file written or removed (a dry run always lists them).")


@click.command()
@click.argument("run_id", metavar="RUN")
@click.argument("target", metavar="[TARGET]", required=False)
@branch_option
@click.option("--restore", "restore_files", is_flag=True,
              help="Also restore the workspace files of the target checkpoint.")
@click.option("--force", is_flag=True,
              help="With --restore: overwrite files whose changes are saved in no checkpoint.")
@click.option("--dry-run", is_flag=True, help="Say what would happen; change nothing.")
@verbose_option
@json_option
@pass_store
def rollback(store: gitstate.Store, run_id: str, target: str | None, branch: str | None, restore_files: bool,
             force: bool, dry_run: bool, verbose: bool, as_json: bool) -> None:
    """Move a branch back to an earlier checkpoint (undoable).

    The old tip stays in the branch's reflog; `git agentos undo RUN` moves it back.

    RUN may be RUN@BRANCH. TARGET is relative to that branch: ~N (N back from its tip),
    node:NAME (the node's exit checkpoint), @OTHER[~N] (another branch), an id or prefix, or any
    REF of the same run. Without TARGET, RUN itself names the checkpoint (RUN~N,
    RUN@BRANCH:node:NAME) and the branch it is on moves.

    With --restore, one summary line says how many files were written, deleted and left as they
    were; -v lists them.

    \b
    Examples:
      git agentos rollback my-run ~2
      git agentos rollback my-run@try-b~1
      git agentos rollback my-run node:plan --restore

    JSON: {"run", "branch", "from" (the old tip id), "to" (the checkpoint, shaped as in
    `log --json`), "moved" (false when it already was the tip), "dry_run", "restore" (as in
    `restore --json`, or null)}.
    """
    if force and not restore_files:
        raise click.UsageError("--force only applies with --restore")
    if target is None:
        loc = locate(store, run_id, branch)
        if loc.is_branch:
            raise click.UsageError("name the checkpoint to move to: TARGET, or a REF such as RUN~1 or "
                                   "RUN@BRANCH:node:NAME")
        run = store.get_run(loc.run)
        assert loc.checkpoint is not None
        cp = loc.checkpoint
    else:
        loc = locate_branch(store, run_id, branch)
        run = store.get_run(loc.run)
        cp = refspec.resolve_target(store, run, target, loc.branch)
    branch = loc.branch
    tip = run.head(branch)
    if tip is None:
        raise gitstate.BranchNotFound(run.id, branch)
    where = f"branch {out.safe(branch)} of run {out.safe(run.id)}"
    if dry_run:
        plan = run.restore(cp, dry_run=True, force=force) if restore_files else None
        if as_json:
            out.emit_json(_rollback_doc(run, branch, tip, cp, True, plan))
            return
        click.echo(f"would move {where} from {tip.short_id} to {cp.short_id}")
        if plan is not None:
            print_restore(plan)
        return
    with out.phases(RESTORE_PHASES) as step:
        new = run.rollback(cp.id, branch=branch, restore=restore_files, force=force, progress=step)
    restored = run.last_restore if restore_files else None
    if as_json:
        out.emit_json(_rollback_doc(run, branch, tip, new, False, restored))
        return
    click.echo(f"rolled back {where}: {tip.short_id} -> {_describe(new)}")
    if restored is not None:
        print_restore(restored, verbose=verbose)
    click.echo(f"undo with: git agentos undo {out.shell_arg(refspec.branch_text(run, branch))}")


def _rollback_doc(run: gitstate.Run, branch: str, tip: gitstate.Checkpoint, cp: gitstate.Checkpoint,
                  dry_run: bool, restore: gitstate.RestoreResult | None) -> dict[str, Any]:
    return {"run": run.id, "branch": branch, "from": tip.id, "to": cp.to_dict(), "moved": tip.id != cp.id,
            "dry_run": dry_run, "restore": restore.to_dict() if restore is not None else None}


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
@click.option("--branch", "-b", default=None,
              help="Branch of the run when RUN names none (default: main; a LangGraph thread's line "
                   "that moved last).")
@json_option
@pass_store
def undo(store: gitstate.Store, run_id: str, branch: str | None, as_json: bool) -> None:
    """Revert the last move of a branch (checkpoint, rollback, fork, prune or undo).

    The moves are read from the branch's reflog, so undoing twice redoes, except after an undo
    that removed a branch it had just created (the branch goes with its reflog: nothing is left to
    redo from; checkpoint or fork again). RUN may be RUN@BRANCH.
    A bare RUN of a LangGraph thread is the line that moved last (the newest reflog entry among
    its lines): after `rollback RUN ~N` the line rolled back, even when another line now holds the
    thread's latest checkpoint, so the undo puts the thread back; else the line the graph wrote
    last.

    \b
    Example:
      git agentos undo my-run
      git agentos undo my-run@try-b

    JSON: {"run", "branch", "tip" (the branch's checkpoint now, shaped as in `log --json`, or
    null), "removed" (true when the undo removed a branch that was just created)}.
    """
    loc = locate_branch(store, run_id, branch, moved=True)
    run = store.get_run(loc.run)
    cp = run.undo(loc.branch)
    if as_json:
        out.emit_json({"run": run.id, "branch": loc.branch, "tip": cp.to_dict() if cp is not None else None,
                       "removed": cp is None})
        return
    where = f"branch {out.safe(loc.branch)} of run {out.safe(run.id)}"
    if cp is None:
        click.echo(f"undone: {where} removed (it was just created; an undo cannot bring it back)")
    else:
        click.echo(f"undone: {where} is at {_describe(cp)}")


@click.command()
@click.argument("run_id", metavar="RUN")
@click.argument("target", metavar="TARGET")
@click.argument("new_branch", metavar="NEW_BRANCH")
@json_option
@pass_store
def fork(store: gitstate.Store, run_id: str, target: str, new_branch: str, as_json: bool) -> None:
    """Create a new branch of a run at a checkpoint.

    RUN may be RUN@BRANCH; TARGET is relative to that branch (main by default; a LangGraph
    thread's latest line): ~N, node:NAME, @OTHER[~N], an id, a REF of the same run.

    \b
    Examples:
      git agentos fork my-run node:plan try-other-tool
      git agentos fork my-run @main@origin theirs

    JSON: {"run", "branch" (the new one), "at" (the checkpoint, shaped as in `log --json`),
    "from_branch" (the branch TARGET was read against)}.
    """
    loc = locate_branch(store, run_id)
    run = store.get_run(loc.run)
    cp = refspec.resolve_target(store, run, target, loc.branch)
    names.check_name("branch name", new_branch)
    run.fork(cp.id, new_branch, from_branch=loc.branch)
    if as_json:
        out.emit_json({"run": run.id, "branch": new_branch, "at": cp.to_dict(), "from_branch": loc.branch})
        return
    click.echo(f"forked branch {out.safe(new_branch)} of run {out.safe(run.id)} at "
               f"{out.style(cp.short_id, fg='yellow')}")


@click.command()
@click.argument("run_id", metavar="RUN")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@json_option
@pass_store
def delete(store: gitstate.Store, run_id: str, yes: bool, as_json: bool) -> None:
    """Delete a run and all its branches.

    Its objects become unreachable and are left to `git gc`. RUN is a run id; to delete one
    branch use `git agentos branch -d RUN@BRANCH`.

    \b
    Example:
      git agentos delete my-run --yes

    JSON: {"run", "deleted": true, "branches": [names]}.
    """
    if not store.has_run(run_id) and not store.has_run_refs(run_id):  # (refs without a run record: deleted too)
        loc = locate_branch(store, run_id)  # RunNotFound, or a RUN@BRANCH that names a branch
        raise click.UsageError(f"delete removes a whole run; to delete branch {out.safe(loc.branch)!r} of run "
                               f"{out.safe(loc.run)!r} use: git agentos branch -d {out.shell_arg(run_id)}")
    if not yes:
        if not sys.stdin.isatty():
            raise click.UsageError(f"deleting run {out.safe(run_id)!r} needs --yes when not on a terminal")
        click.confirm(f"delete run {out.safe(run_id)!r} and all its branches?", abort=True)
    branches = store.delete_run(run_id)
    if as_json:
        out.emit_json({"run": run_id, "deleted": True, "branches": branches})
        return
    click.echo(f"deleted run {out.safe(run_id)}")


@click.command()
@click.argument("run_id", metavar="RUN")
@click.option("--keep", type=click.IntRange(min=1), required=True, help="How many newest checkpoints to keep.")
@branch_option
@json_option
@pass_store
def prune(store: gitstate.Store, run_id: str, keep: int, branch: str | None, as_json: bool) -> None:
    """Keep only the newest N checkpoints of a branch.

    The kept checkpoints are rewritten onto a new root, so their ids change; `undo` reverts a
    prune while the reflog keeps the old line. RUN may be RUN@BRANCH.

    \b
    Example:
      git agentos prune my-run --keep 20

    JSON: {"run", "branch", "kept", "removed", "renamed": {old id: new id}}.
    """
    loc = locate_branch(store, run_id, branch)
    run = store.get_run(loc.run)
    result = run.prune(keep_latest=keep, branch=loc.branch)
    if as_json:
        out.emit_json({"run": run.id, "branch": loc.branch, "kept": result.kept, "removed": result.removed,
                       "renamed": result.renamed})
        return
    click.echo(f"kept {result.kept}, removed {result.removed} checkpoint(s) from branch {out.safe(loc.branch)} "
               f"of run {out.safe(run.id)}")
