"""``git agentos push``, ``pull``, ``clone-runs``, ``export`` and ``import``: sharing runs through
any git remote or a bundle file. Each command makes one library call and prints one line per run (``--json``: the
per-run results). Exit 1 when any ref did not reach the state asked for."""

from __future__ import annotations

import os
from collections.abc import Sequence

import click

import gitstate
from gitstate.format import names
from gitstate.sync.remote import RefResult, SyncResult, default_remote, is_safety_ref

from . import output as out
from .context import PathParam, pass_store

_ALL_HELP = "Every worktree's runs, not only the current worktree's."


_CHANGED = frozenset({"pushed", "deleted", "created", "fast-forward", "diverged"})


def _ref_label(refname: str) -> str:
    """How a ref is named in the report: a branch by its name (``main~<id>``, ``main@origin``, not
    the ``%XX``-escaped ref component), ``run`` for the run record, the node log and session files
    said as such."""
    parsed = names.parse_ref(refname)
    if parsed is None:
        return refname
    if parsed.kind == "heads" and parsed.name is not None:
        return parsed.name
    if parsed.kind == "nodes" and parsed.name is not None:
        return f"{parsed.name} (node log)"
    if parsed.kind == "files" and parsed.name is not None:
        try:
            return f"file {names.decode_component(parsed.name)}"
        except ValueError:
            return f"file {parsed.name}"
    return parsed.kind


def _why(ref: RefResult, run_id: str | None, remote: str) -> str:
    """The reason shown for one ref, phrased with the commands that act on it."""
    parsed = names.parse_ref(ref.ref)
    branch = parsed.name if parsed is not None and parsed.kind == "heads" else None
    if ref.status == "rejected" and "pull first" in ref.message and run_id is not None:
        pull = f"git agentos pull {out.shell_arg(remote)} {out.shell_arg(run_id)}"
        if "session file" in ref.message:
            return f": {remote} has versions this repository lacks; pull first ({pull}), then share yours under another path"
        if branch is not None:
            kept = f"{branch}@{remote}"
            return (f": {remote} has checkpoints this repository lacks; pull first ({pull}) — its line is kept as "
                    f"{kept} — then share yours under a name of its own "
                    f"(git agentos fork {out.shell_arg(f'{run_id}@{branch}')} @{out.shell_arg(branch)} NEW_BRANCH) "
                    f"and put {branch} "
                    f"on {remote}'s line (git agentos rollback {out.shell_arg(f'{run_id}@{branch}')} "
                    f"@{out.shell_arg(kept)})")
    if ref.status == "behind" and run_id is not None:
        pull = f"git agentos pull {out.shell_arg(remote)} {out.shell_arg(run_id)}"
        return f": {remote} has newer checkpoints on this line; nothing to push (bring them here: {pull})"
    if ref.message and not ref.message.startswith("["):
        return f": {ref.message}"
    return ""


def _whole_runs(store: gitstate.Store, runs: Sequence[str]) -> list[str]:
    """The run ids as given; a RUN@BRANCH is refused with the run to name instead (these commands
    move whole runs). Ids that name nothing are left to the library (its error, or a pull of a
    run only the remote has)."""
    from gitstate.store import refspec

    for text in runs:
        if store.has_run(text):
            continue
        try:
            loc = refspec.locate_branch(store, text)
        except gitstate.GitStateError:
            continue
        raise click.UsageError(f"{out.safe(text)!r} names branch {out.safe(loc.branch)!r} of run "
                               f"{out.safe(loc.run)!r}; whole runs move: name the run {out.safe(loc.run)!r}")
    return list(runs)


def _report(results: Sequence[SyncResult], as_json: bool, verb: str, where: str) -> None:
    """Print the per-run results; a summary line only when everything reached the state asked for,
    else one ``error:`` line and exit 1 (also with ``--json``, after the results document)."""
    failed = [r for r in results if not r.ok]
    changed = sum(1 for r in results if any(ref.status in _CHANGED for ref in r.refs))
    if as_json:
        out.emit_json([r.to_dict() for r in results])
    else:
        for result in results:
            name = out.safe(result.run_id) if result.run_id is not None else "(not a run)"
            for ref in result.refs:
                if ref.status == "up-to-date" and result.ok and not is_safety_ref(ref.ref):
                    continue
                label = _ref_label(ref.ref)
                tail = f" -> {out.safe(ref.kept_as)}" if ref.kept_as else ""
                why = _why(ref, result.run_id, where)
                click.echo(f"{out.style(ref.status, fg='red' if not ref.ok else None)} {name} "
                           f"{out.safe(label)}{tail}{out.safe(why)}")
        if not failed:
            click.echo(f"{verb} {out.safe(where)}: {len(results)} run(s), "
                       + (f"{changed} changed" if changed else "nothing changed"))
    if failed:
        click.echo(f"error: {len(failed)} of {len(results)} run(s) not fully {verb} ({out.safe(where)}); "
                   + ("see the refs of each run in the JSON output" if as_json else "see the lines above"), err=True)
        click.get_current_context().exit(1)


_REMOTE_HELP = ("REMOTE is a remote's name, a URL or a path; by default `git config agentos.remote` (runs kept "
                "in a repository of their own, see clone-runs), else origin.")


@click.command()
@click.argument("remote", default=None, required=False)
@click.argument("runs", nargs=-1)
@click.option("--all", "all_worktrees", is_flag=True, help=_ALL_HELP)
@click.option("--timeout", type=click.FloatRange(min=0), default=None, metavar="SECONDS",
              help="Stop sending after this long; what is left stays queued for the next push "
                   "(default: git config agentos.pushTimeout, 3600; 0: no limit).")
@click.option("--prune", is_flag=True,
              help="Delete remote runs and branches (refs) in scope that do not exist here, each with a "
                   "lease: also those others pushed that you never pulled (use it on runs only you push to).")
@click.option("--include-safety", is_flag=True,
              help="Also push the restore-safety branches (unsaved work a restore set aside; local by default).")
@click.option("--allow-secret", "allow", multiple=True, metavar="FINGERPRINT",
              help="Let a known false positive of the secret scan through (repeatable; see `git agentos scan`).")
@out.json_option
@pass_store
def push(store: gitstate.Store, remote: str | None, runs: tuple[str, ...], all_worktrees: bool,
         timeout: float | None, prune: bool, include_safety: bool, allow: tuple[str, ...], as_json: bool) -> None:
    """Push runs to a git remote, fast-forward only.

    Uses the remote's own git configuration and credentials; only refs/agentos/... moves. A
    branch that advanced on the remote too is refused with a message while the others are pushed
    (pull first: the remote's line is kept as BRANCH@REMOTE). The remote must be allowed by
    `git config agentos.pushRemotes` (names or URLs; "*" for any). RUN is a run id: whole runs
    move.

    Not pushed, and not failures: BRANCH@REMOTE copies a pull kept of this remote's own lines
    while the remote still has them ("kept"), and each run's restore-safety branch, which holds
    workspace files a restore set aside without checkpointing them ("local"; --include-safety
    sends it; "up-to-date" when an earlier --include-safety push sent the remote this very
    branch). A branch that only the remote advanced (ours is on its line, nothing to push) is
    "behind", not a failure: pull brings the remote's checkpoints. Exit 1 when any ref was
    refused or failed; the lines above the error say which and why (no success summary is
    printed then).

    Every checkpoint the push would send (each one the remote lacks, not only the tips) is
    scanned for credentials first, as `git agentos scan` does: one finding refuses the whole
    push, nothing is sent, and each finding is listed (run, checkpoint, key path, kind,
    fingerprint; never the secret). --allow-secret FINGERPRINT, `git config --add
    agentos.secrets.allow FINGERPRINT` or .agentos-secrets.toml let a known false positive
    through.

    Refs the remote already has are not sent; the rest go in pushes of at most `git config
    agentos.pushChunk` ref updates (default 1000), whole runs each. A push the server refuses
    whole is halved until it lands or one ref is left, which is reported "rejected" with the
    server's words while the others are pushed. What is still to send is kept in
    .git/agentos/push-queue: a push that was killed or lost its connection is resumed by the
    next push to that remote, without sending anything twice.

    \b
    Example:
      git config --add agentos.pushRemotes origin
      git agentos push origin                 # every run of this worktree
      git agentos push origin 20261121-2311-3f2a9c --prune

    JSON: [{"run", "worktree", "status", "ok", "refs": [{"ref", "status", "ok", "old", "new",
    "message", "kept_as"}]}]; ref statuses: pushed, deleted, up-to-date, kept, local, behind
    (ok), rejected, error, skipped (failures). On failure the document is printed, then the error line.
    """
    from gitstate.sync.secretscan import SecretsFoundError

    remote = remote or default_remote(store)
    try:
        results = gitstate.push(store, remote, _whole_runs(store, runs), all_worktrees=all_worktrees, prune=prune,
                                include_safety=include_safety, allow_secrets=allow, timeout=timeout)
    except SecretsFoundError as exc:
        if not as_json:  # the error line only names the first few
            for f in exc.findings:
                click.echo(f"secret: {out.safe(f.run or '')} {out.short(f.checkpoint)} {out.safe(f.path)} {f.kind} "
                           f"{f.fingerprint}", err=True)
        raise
    _report(results, as_json, "pushed", remote)


@click.command()
@click.argument("remote", default=None, required=False)
@click.argument("runs", nargs=-1)
@click.option("--all", "all_worktrees", is_flag=True, help=_ALL_HELP)
@out.json_option
@pass_store
def pull(store: gitstate.Store, remote: str | None, runs: tuple[str, ...], all_worktrees: bool, as_json: bool) -> None:
    """Pull runs from a git remote without overwriting anything.

    New runs and branches are created, branches the remote advanced are fast-forwarded, and a
    branch that advanced on both sides keeps the remote's line as a separate branch
    BRANCH@REMOTE (reported once as "diverged"; a later pull reports "kept" while that copy
    already holds the remote's line, and "diverged" again only when it moves the copy forward).
    The branch's node log goes with it: the remote's is kept as the node log of BRANCH@REMOTE,
    and once BRANCH is put on that line (rollback) its node log becomes the remote's followed
    by its own boundaries still on the line (push does this too).
    Refs that are not readable gitstate refs (or belong to a run without a run record) are
    skipped and reported; nothing fetched is executed. One pull accepts at most
    `git config agentos.pullMaxRefs` refs (default 20000; 0: no limit). The last line counts the runs that changed ("nothing changed" when none did).

    Named runs are fetched on their own: the server is asked for their refs only, so pulling
    one run of a server holding thousands costs about what a `git fetch` of one branch does.
    `git agentos runs --remote REMOTE` lists a remote's runs without fetching them.

    \b
    Example:
      git agentos pull origin
      git agentos pull origin 20261121-2311-3f2a9c --json

    JSON: the same shape as `push --json`; ref statuses: created, fast-forward, diverged,
    kept, up-to-date, ahead (ok), conflict, skipped, error (failures).
    """
    remote = remote or default_remote(store)
    results = gitstate.pull(store, remote, _whole_runs(store, runs), all_worktrees=all_worktrees)
    _report(results, as_json, "pulled", remote)


@click.command("clone-runs")
@click.argument("url")
@click.argument("runs", nargs=-1)
@click.option("--name", default="agentos", show_default=True, help="The name of the remote to add.")
@out.json_option
@pass_store
def clone_runs(store: gitstate.Store, url: str, runs: tuple[str, ...], name: str, as_json: bool) -> None:
    """Keep runs in a repository of their own, at URL, and pull them.

    Adds remote NAME (its URL only: no branches or tags are fetched from it), makes it the
    remote push and pull use by default (`git config agentos.remote NAME`) and allows pushing
    checkpoints to it (`agentos.pushRemotes`); then pulls every worktree's runs from it, or the
    named RUNs. The code's remote is left as it is: it receives no checkpoints unless it is
    allowed too. Running it again pulls again.

    \b
    Example:
      git agentos clone-runs https://git.example.com/team/agent-runs.git
      git agentos push                       # to that repository

    JSON: the same shape as `pull --json`.
    """
    from gitstate.sync.remote import clone_runs as clone

    _report(clone(store, url, name, list(runs) or None), as_json, "pulled", name)


def show_remote_runs(store: gitstate.Store, remote: str | None, all_worktrees: bool, as_json: bool) -> None:
    """``git agentos runs --remote REMOTE``: the runs a remote holds, from its ref list alone."""
    from gitstate.sync.remote import remote_runs

    remote = remote or default_remote(store)
    listed = remote_runs(store, remote, all_worktrees)
    if as_json:
        out.emit_json([r.to_dict() for r in listed])
        return
    if not listed:
        click.echo(f"no runs on {out.safe(remote)}" + ("" if all_worktrees else
                                                       f" in worktree {store.worktree!r} (try --all)"))
        return
    headers = ["run", "branches", "refs", "here"]
    if all_worktrees:
        headers.insert(1, "worktree")
    rows: list[list[object]] = []
    for r in listed:
        row: list[object] = [r.run_id, ", ".join(r.branches), len(r.refs), r.here]
        if all_worktrees:
            row.insert(1, r.worktree)
        rows.append(row)
    out.table(headers, rows)


@click.command("export")
@click.argument("runs", nargs=-1)
@click.option("--output", "-o", required=True, type=PathParam(dir_okay=False, writable=True, in_existing_dir=True),
              help="The bundle file to write.")
@click.option("--include-safety", is_flag=True,
              help="Also export the restore-safety branches (unsaved work a restore set aside; left out by default).")
@click.option("--allow-secret", "allow", multiple=True, metavar="FINGERPRINT",
              help="Let a known false positive of the secret scan through (repeatable; see `git agentos scan`).")
@out.json_option
@pass_store
def export(store: gitstate.Store, runs: tuple[str, ...], output: str, include_safety: bool, allow: tuple[str, ...],
           as_json: bool) -> None:
    """Write runs to a git bundle file (all runs of this worktree when none is named).

    Any git can read it (`git bundle verify FILE`); `git agentos import FILE` brings it in. RUN
    is a run id. Each run's restore-safety branch (workspace files a restore set aside without
    checkpointing them) stays out unless --include-safety; the output says what was left out.
    The bundle is read back as an import would read it before FILE is written, so a damaged
    object in the store fails the export and leaves FILE as it was. Like push, export refuses
    when a checkpoint it would write holds a credential (see `git agentos scan`; --allow-secret
    lets a known false positive through).

    \b
    Example:
      git agentos export 20261121-2311-3f2a9c --output run.bundle

    JSON: {"output" (the bundle's path), "refs" (the ref names written), "left_out" (refs kept
    local)}.
    """
    refs = gitstate.export_bundle(store, _whole_runs(store, runs), output, include_safety=include_safety,
                                  allow_secrets=allow)
    if as_json:
        out.emit_json({"output": os.path.abspath(output), "refs": list(refs), "left_out": refs.left_out})
        return
    click.echo(f"wrote {out.safe(output)}: {len(refs)} ref(s)")
    if refs.left_out:
        click.echo(f"left out {len(refs.left_out)} restore-safety ref(s) (unsaved work stays local; "
                   "--include-safety exports them)")


@click.command("import")
@click.argument("file", type=PathParam(exists=True, dir_okay=False))
@out.json_option
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
