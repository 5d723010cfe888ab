"""``git agentos branches RUN`` (list a run's branches with their tips and where they came from)
and ``git agentos branch -d RUN@BRANCH`` (delete one, as safely as ``git branch -d``)."""

from __future__ import annotations

import click

import gitstate

from . import output as out
from .context import get_run, locate_branch, pass_store


@click.command()
@click.argument("run_id", metavar="RUN")
@out.json_option
@pass_store
def branches(store: gitstate.Store, run_id: str, as_json: bool) -> None:
    """List a run's branches: tips and where each came from.

    main first, then by name. FROM says how the branch began: a fork (at which checkpoint), a
    pull that kept a remote's diverged line (BRANCH@REMOTE), a restore's safety copy of unsaved
    work (restore-safety: stays local, push and export leave it out), or its first checkpoint.
    Name a branch elsewhere as RUN@BRANCH.

    \b
    Example:
      git agentos branches my-run

    JSON: a list of {"branch", "tip", "step", "checkpoints", "node", "status", "updated_at",
    "created_at" (when the branch ref was created, from its reflog; null if unknown), "kind"
    (main, fork, pulled, kept-copy, safety, created, unknown), "origin" (in words), "fork_point"
    (the newest checkpoint shared with main, or null), "local_only"}.
    """
    run = get_run(store, run_id)
    infos = run.branch_list()
    if as_json:
        out.emit_json([b.to_dict() for b in infos])
        return
    out.table(["branch", "tip", "step", "checkpoints", "updated", "from"],
              [[b.name, out.style(b.tip.short_id, fg="yellow"), b.tip.display_step, b.checkpoints, b.tip.created_at,
                b.origin] for b in infos])


@click.command()
@click.argument("refs", nargs=-1, required=True, metavar="RUN@BRANCH...")
@click.option("--delete", "-d", "delete", is_flag=True,
              help="Delete the branches (refused for main and for a branch whose checkpoints no other branch has).")
@click.option("-D", "force_delete", is_flag=True, help="Delete even then (--delete --force).")
@click.option("--force", "-f", is_flag=True, help="With --delete: the same as -D.")
@out.json_option
@pass_store
def branch(store: gitstate.Store, refs: tuple[str, ...], delete: bool, force_delete: bool, force: bool,
           as_json: bool) -> None:
    """Delete a branch of a run (branch -d RUN@BRANCH).

    As `git branch -d`: main is refused, and so is a branch holding checkpoints that no other
    branch of the run reaches (they would be left to `git gc`); -D (or -d --force) deletes it
    anyway. The branch's reflog goes with it, so `undo` cannot bring it back; its checkpoints
    stay readable by id until git gc prunes them. Every branch is checked before the first is
    deleted. To create a branch use `git agentos fork`; to list them, `git agentos branches RUN`.

    \b
    Examples:
      git agentos branch -d my-run@main@origin
      git agentos branch -D my-run@restore-safety

    JSON: {"deleted": [{"run", "branch", "tip"}]}.
    """
    if not (delete or force_delete):
        raise click.UsageError("say what to do: -d (delete) or -D (delete even unmerged); "
                               "list branches with: git agentos branches RUN")
    force = force or force_delete
    located = []
    for text in refs:
        loc = locate_branch(store, text, read_tip=False)
        if not loc.named_branch:
            raise click.UsageError(f"name the branch to delete: {out.safe(text)}@BRANCH "
                                   f"({out.safe(text)} alone is its run; delete a run with: git agentos delete)")
        located.append(loc)
    runs = {loc.run: store.get_run(loc.run) for loc in located}
    from gitstate.store.branches import check_deletable

    for loc in located:  # all refusals before the first deletion
        run = runs[loc.run]
        check_deletable(store.core, run.worktree, run.id, loc.branch, force)
    deleted = []
    for loc in located:
        tip = runs[loc.run].delete_branch(loc.branch, force=force)
        deleted.append({"run": loc.run, "branch": loc.branch, "tip": tip})
        if not as_json:
            click.echo(f"deleted branch {out.safe(loc.branch)} of run {out.safe(loc.run)} (was {out.short(tip)})")
    if as_json:
        out.emit_json({"deleted": deleted})
