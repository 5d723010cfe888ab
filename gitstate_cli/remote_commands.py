"""``git agentos push``, ``pull``, ``export`` and ``import``: sharing runs through any git remote or
a bundle file. Each command makes one library call and prints one line per run (``--json``: the
per-run results). Exit 1 when any ref did not reach the state asked for."""

from __future__ import annotations

from collections.abc import Sequence

import click

import gitstate
from gitstate.sync.remote import SyncResult

from . import output as out
from .context import pass_store

_ALL_HELP = "Every worktree's runs, not only the current worktree's."


def _report(results: Sequence[SyncResult], as_json: bool, verb: str, where: str) -> None:
    if as_json:
        out.emit_json([r.to_dict() for r in results])
    else:
        for result in results:
            name = result.run_id if result.run_id is not None else "(not a run)"
            for ref in result.refs:
                if ref.status in ("up-to-date",) and result.ok:
                    continue
                tail = f" -> {ref.kept_as}" if ref.kept_as else ""
                why = f": {ref.message}" if ref.message and not ref.message.startswith("[") else ""
                click.echo(f"{out.style(ref.status, fg='red' if not ref.ok else None)} {name} "
                           f"{ref.ref.rsplit('/', 1)[-1]}{tail}{why}")
        changed = sum(1 for r in results if r.status not in ("up-to-date", "ahead"))
        click.echo(f"{verb} {where}: {len(results)} run(s), {changed} changed")
    failed = [r for r in results if not r.ok]
    if failed:
        click.echo(f"error: {len(failed)} run(s) not fully {verb}; see above", err=True)
        click.get_current_context().exit(1)


@click.command()
@click.argument("remote", default="origin", required=False)
@click.argument("runs", nargs=-1)
@click.option("--all", "all_worktrees", is_flag=True, help=_ALL_HELP)
@click.option("--prune", is_flag=True,
              help="Delete remote runs (refs) in scope that do not exist here, each with a lease.")
@click.option("--json", "as_json", is_flag=True, help="Print per-run results as JSON.")
@pass_store
def push(store: gitstate.Store, remote: str, runs: tuple[str, ...], all_worktrees: bool, prune: bool,
         as_json: bool) -> None:
    """Push runs to a git remote, fast-forward only.

    Uses the remote's own git configuration and credentials; only refs/agentos/... moves. A
    branch that advanced on the remote too is refused with a message while the others are pushed
    (pull first: the remote's line is kept as BRANCH@REMOTE). The remote must be allowed by
    `git config agentos.pushRemotes` (names or URLs; "*" for any).

    \b
    Example:
      git config --add agentos.pushRemotes origin
      git agentos push origin                 # every run of this worktree
      git agentos push origin 20261121-2311-3f2a9c --prune

    JSON: [{"run", "worktree", "status", "ok", "refs": [{"ref", "status", "old", "new",
    "message", "kept_as"}]}].
    """
    results = gitstate.push(store, remote, list(runs), all_worktrees=all_worktrees, prune=prune)
    _report(results, as_json, "pushed", remote)


@click.command()
@click.argument("remote", default="origin", required=False)
@click.argument("runs", nargs=-1)
@click.option("--all", "all_worktrees", is_flag=True, help=_ALL_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print per-run results as JSON.")
@pass_store
def pull(store: gitstate.Store, remote: str, runs: tuple[str, ...], all_worktrees: bool, as_json: bool) -> None:
    """Pull runs from a git remote without overwriting anything.

    New runs and branches are created, branches the remote advanced are fast-forwarded, and a
    branch that advanced on both sides keeps the remote's line as a separate branch
    BRANCH@REMOTE (reported as "diverged"). Refs that are not readable gitstate refs are skipped
    and reported; nothing fetched is executed.

    \b
    Example:
      git agentos pull origin
      git agentos pull origin 20261121-2311-3f2a9c --json

    JSON: the same shape as `push --json`.
    """
    results = gitstate.pull(store, remote, list(runs), all_worktrees=all_worktrees)
    _report(results, as_json, "pulled", remote)


@click.command("export")
@click.argument("runs", nargs=-1)
@click.option("--output", "-o", required=True, type=click.Path(dir_okay=False, writable=True),
              help="The bundle file to write.")
@pass_store
def export(store: gitstate.Store, runs: tuple[str, ...], output: str) -> None:
    """Write runs to a git bundle file (all runs of this worktree when none is named).

    Any git can read it (`git bundle verify FILE`); `git agentos import FILE` brings it in.

    \b
    Example:
      git agentos export 20261121-2311-3f2a9c --output run.bundle
    """
    refs = gitstate.export_bundle(store, list(runs), output)
    click.echo(f"wrote {output}: {len(refs)} ref(s)")


@click.command("import")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print per-run results as JSON.")
@pass_store
def import_(store: gitstate.Store, file: str, as_json: bool) -> None:
    """Import the runs of a git bundle file, with the same no-overwrite rules as pull.

    A branch that advanced on both sides keeps the bundle's line as BRANCH@bundle.

    \b
    Example:
      git agentos import run.bundle

    JSON: the same shape as `push --json`.
    """
    results = gitstate.import_bundle(store, file)
    _report(results, as_json, "imported", file)
