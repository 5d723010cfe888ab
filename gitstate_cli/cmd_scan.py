"""``git agentos scan``: credentials in stored checkpoints (one library walk, one scan each)."""

from __future__ import annotations

import click

import gitstate

from . import output as out
from .context import pass_store

allow_option = click.option(
    "--allow-secret", "allow", multiple=True, metavar="FINGERPRINT",
    help="Let a known false positive through (its fingerprint, as scan prints it; repeatable).")


@click.command()
@click.argument("runs", nargs=-1, metavar="[RUN]...")
@click.option("--all", "all_worktrees", is_flag=True, help="Scan the runs of every worktree.")
@allow_option
@out.json_option
@pass_store
def scan(store: gitstate.Store, runs: tuple[str, ...], all_worktrees: bool, allow: tuple[str, ...],
         as_json: bool) -> None:
    """Find credentials in the stored checkpoints of runs (all of this worktree's by default).

    Every checkpoint of every branch of each run is read: its metadata, decoded state (a
    LangGraph checkpoint's channel values), tool invocations, audit events and LangGraph's
    pending writes. Each finding prints as RUN CHECKPOINT KEYPATH KIND FINGERPRINT; the secret
    itself is never printed. The fingerprint (8 hex digits of the secret's SHA-256) names it for
    an allowlist: --allow-secret, `git config --add agentos.secrets.allow FINGERPRINT`, or
    `allow = [...]` in .agentos-secrets.toml in the work tree, which also takes extra patterns
    (docs/SECURITY.md). Exit 1 when anything is found.

    \b
    Example:
      git agentos scan
      git agentos scan 20261121-2311-3f2a9c --json

    JSON: {"checkpoints": number scanned, "findings": [{"run", "checkpoint", "path", "kind",
    "fingerprint"}]}.
    """
    from gitstate.format.names import run_prefix
    from gitstate.git.refs import list_refs
    from gitstate.secrets import Scanner
    from gitstate.sync.remote import scope_prefixes
    from gitstate.sync.secretscan import checkpoints_between, load_rules, scan_checkpoints

    scanner = Scanner(load_rules(store, allow))
    for run_id in runs:
        if not list_refs(store.repo, run_prefix(store.worktree, run_id)):
            raise gitstate.RunNotFound(run_id, store.worktree)
    tips = [oid for p in scope_prefixes(store, runs, all_worktrees) for _name, oid in list_refs(store.repo, p)]
    oids = checkpoints_between(store, tips)
    findings = scan_checkpoints(store, oids, scanner)
    if as_json:
        out.emit_json({"checkpoints": len(oids), "findings": [f.to_dict() for f in findings]})
    elif findings:
        out.table(["run", "checkpoint", "keypath", "kind", "fingerprint"],
                  [[f.run, out.short(f.checkpoint), f.path, f.kind, f.fingerprint]
                   for f in findings])
    else:
        click.echo(f"no credentials found in {len(oids)} checkpoint(s)")
    if findings:
        where = len({f.checkpoint for f in findings})
        click.echo(f"error: {len(findings)} credential(s) found in {where} of {len(oids)} checkpoint(s)", err=True)
        click.get_current_context().exit(1)
