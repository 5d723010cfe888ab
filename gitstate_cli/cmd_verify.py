"""``git agentos verify``: check the store; exit 1 when anything is wrong."""

from __future__ import annotations

import os

import click

import gitstate
from gitstate.verify.checks import verify as verify_store

from . import output as out
from .context import pass_store


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--repair", is_flag=True, help="Remove stale ref locks and temporary pack files left by killed "
              "writers, a damaged multi-pack-index or one naming packs that are gone, and refs under "
              "refs/agentos/ that hold no checkpoint (symbolic or unparsable); rewrite node logs "
              "without their unreadable records.")
@click.option("--pre-receive", "pre_receive", is_flag=True,
              help="Run as a server's pre-receive hook: check the ref updates git gives on standard input.")
@pass_store
def verify(store: gitstate.Store, as_json: bool, repair: bool, pre_receive: bool) -> None:
    """Check every ref, object and payload of the store.

    Checks every ref under refs/agentos/ (all worktrees): it resolves, each checkpoint it reaches
    is a commit whose payloads decode with a known format version (a LangGraph checkpoint's to the
    shape LangGraph reads, without importing LangGraph), node boundaries point at
    earlier checkpoints of the same branch, every record of every node log decodes (nodes,
    node:NAME and checkpoint --node read them), every object reached reads in full, as git fsck
    reads it (a pack damaged inside an object's compressed data is found; blobs over 32 MiB are
    streamed through git cat-file and hashed), and no foreign or malformed
    ref names sit in the namespace, no ref there holds something other than an object id (a
    symbolic ref, or a file git calls a "broken ref": listings skip them), no stale .lock file
    left by a killed writer blocks git's own gc, and no temporary pack file (objects/pack/tmp_*)
    of a gitstate writer killed before it renamed it is older than an hour (a younger one may be a
    running writer's; git's own are left to git gc), and that the multi-pack-index, if any, is not
    damaged and names no pack that is gone (a `git multi-pack-index write` that ran while a merge
    removed it: git fsck fails on either). --repair removes those locks, files, that
    multi-pack-index (git reads the packs without one) and refs (they hold no checkpoint), and
    rewrites a node log without the records that do not read (the
    old log stays in its reflog; one whose records all fail is removed). Exits 1 when it finds a
    problem.

    --pre-receive makes it the pre-receive hook of a repository that holds a team's runs: it
    reads git's "OLD NEW REF" lines, checks each ref under refs/agentos/ the push sets, at the
    value pushed (the objects still in git's quarantine), as verify checks a ref, that its run
    has a run record, and that no new checkpoint holds a credential; it prints one line per
    refused ref and exits 1 (git then refuses the whole push). Install it with
    `printf '#!/bin/sh\nexec git agentos verify --pre-receive\n' > hooks/pre-receive` in the bare
    repository (GitLab and Gitea: a server hook of that repository).

    \b
    Example:
      git agentos verify
      git agentos verify --repair

    JSON: {"ok": bool, "refs": int, "checkpoints": int, "objects": int,
    "problems": [{"ref", "oid", "message"}], "repaired": [path of a lock, a temporary file or the
    multi-pack-index, or name of a ref removed or rewritten]}; a problem's "ref" is the path of the
    lock or file for those.
    """
    if pre_receive:
        _pre_receive(store)
        return
    with out.progress("verifying") as step:
        report = verify_store(store, all_worktrees=True, progress=step, repair=repair)
    if as_json:
        out.emit_json(report.to_dict())
    else:
        for path in report.repaired:
            if path in report.repair_notes:
                click.echo(f"repaired {out.safe(path)}: {report.repair_notes[path]}")
                continue
            what = ("stale lock" if path.endswith(".lock")
                    else "damaged or stale multi-pack-index" if path.endswith("multi-pack-index")
                    else "temporary file" if path.startswith(os.path.join("objects", "pack", "")) else "broken ref")
            click.echo(f"removed {what}: {out.safe(path)}")
        for problem in report.problems:
            click.echo(f"problem: {problem}")
        summary = f"checked {report.refs} refs, {report.checkpoints} checkpoints, {report.objects} objects"
        if report.ok:
            click.echo(f"{summary}: {out.style('ok', fg='green')}")
    if not report.ok:
        click.echo(f"error: {len(report.problems)} problem(s) found", err=True)
        click.get_current_context().exit(1)


def _pre_receive(store: gitstate.Store) -> None:
    """``verify --pre-receive``: one line per refused ref update, exit 1 when there is one."""
    import sys

    from gitstate.sync.prereceive import check_updates, parse_updates, use_quarantine

    use_quarantine(store)
    refused = check_updates(store, parse_updates(sys.stdin.read()))
    if refused:  # the summary first: git shows the lines in order and callers quote the last one
        click.echo(f"error: {len(refused)} ref update(s) refused; nothing of this push was kept", err=True)
        for refusal in refused:
            click.echo(out.safe(str(refusal)), err=True)
        click.get_current_context().exit(1)
