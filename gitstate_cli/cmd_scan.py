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
@click.option("--redact", is_flag=True,
              help="Rewrite the runs that hold findings without them (their checkpoint ids change).")
@click.option("--now", is_flag=True,
              help="With --redact: drop the replaced objects at once, as `git agentos gc --now` does.")
@click.option("--pre-push", "pre_push", metavar="REMOTE", default=None,
              help="Read a pre-push hook's input and refuse (exit 1) when what it sends holds a finding.")
@allow_option
@out.json_option
@pass_store
def scan(store: gitstate.Store, runs: tuple[str, ...], all_worktrees: bool, redact: bool, now: bool,
         pre_push: str | None, allow: tuple[str, ...], as_json: bool) -> None:
    """Find credentials in the stored checkpoints of runs (all of this worktree's by default).

    Every checkpoint of every branch of each run is read: its metadata, decoded state (a
    LangGraph checkpoint's channel values), tool invocations, audit events, LangGraph's
    pending writes and the text files of its workspace snapshot; and the run's other records
    (run record, node logs, session files). Each finding prints as RUN CHECKPOINT KEYPATH KIND FINGERPRINT; the secret
    itself is never printed. The fingerprint (8 hex digits of the secret's SHA-256) names it for
    an allowlist: --allow-secret, `git config --add agentos.secrets.allow FINGERPRINT`, or
    `allow = [...]` in .agentos-secrets.toml in the work tree, which also takes extra patterns
    (docs/SECURITY.md). Exit 1 when anything is found.

    \b
    Example:
      git agentos scan
      git agentos scan 20261121-2311-3f2a9c --json

    --redact rewrites the runs scanned that hold findings (in this worktree), each credential
    replaced by its marker «redacted:KIND:FP4», as the default write policy (git config
    agentos.secrets = redact) stores it: one atomic update of their refs; checkpoint ids change
    as after a prune, and the old objects leave with the next `git agentos gc` (or `git gc`).
    With --now they go at once: the stat caches of workspace snapshots that name them are
    deleted, gitstate's loose objects packed and its packs rewritten without what nothing
    reaches (as `git agentos gc --now` does); one that a `git gc` had moved into git's own
    packs stays until `git gc --prune=now` (the output says how many).

    --pre-push REMOTE is what the pre-push hook runs: it reads the hook's input lines and scans
    every checkpoint the push sends that REMOTE lacks.

    \b
    JSON: {"checkpoints": number scanned, "findings": [{"run", "checkpoint", "path", "kind",
    "fingerprint"}]}; with --redact also "redacted": {"renamed": {old: new}, "refs", "objects"}
    (with --now also "dropped" and "remaining": counts of replaced objects).
    """
    from gitstate.format.names import run_prefix
    from gitstate.git.refs import list_refs
    from gitstate.secrets import Scanner
    from gitstate.sync.remote import scope_prefixes
    from gitstate.sync.secretscan import load_rules, scan_between

    if now and not redact:
        raise gitstate.UsageError("--now goes with --redact")
    rules = load_rules(store, allow)
    scanner = Scanner(rules)
    if pre_push is not None:
        _pre_push(store, pre_push, allow)
        return
    for run_id in runs:
        if not list_refs(store.repo, run_prefix(store.worktree, run_id)):
            raise gitstate.RunNotFound(run_id, store.worktree)
    tips = [oid for p in scope_prefixes(store, runs, all_worktrees) for _name, oid in list_refs(store.repo, p)]
    oids, findings = scan_between(store, tips, (), scanner)
    redacted = None
    if redact and findings:
        from gitstate.format.names import run_prefix as prefix_of
        from gitstate.sync.redact import changed_runs, redact_runs

        mine = [r for r in changed_runs(findings) if list_refs(store.repo, prefix_of(store.worktree, r))]
        before = len(findings)
        redacted = redact_runs(store, mine, rules, now=now)
        tips = [oid for p in scope_prefixes(store, runs, all_worktrees) for _name, oid in list_refs(store.repo, p)]
        oids, findings = scan_between(store, tips, (), Scanner(rules))
        if not as_json:
            click.echo(f"redacted {before - len(findings)} credential(s) in {len(mine)} run(s): "
                       f"{len(redacted.renamed)} commit(s) rewritten, {len(redacted.refs)} ref(s) moved")
            if redacted.dropped is not None:
                click.echo(f"dropped {redacted.dropped} replaced object(s) now"
                           + (f"; {redacted.remaining} remain in packs or loose objects gitstate does not own "
                              "(git gc --prune=now drops them)" if redacted.remaining else ""))
    if as_json:
        doc: dict[str, object] = {"checkpoints": len(oids), "findings": [f.to_dict() for f in findings]}
        if redacted is not None:
            doc["redacted"] = redacted.to_dict()
        out.emit_json(doc)
    elif findings:
        out.table(["run", "checkpoint", "keypath", "kind", "fingerprint"],
                  [[f.run, out.short(f.checkpoint), f.path, f.kind, f.fingerprint]
                   for f in findings])
    else:
        click.echo(f"no credentials found in {len(oids)} checkpoint(s)")
    if findings:
        scanned = set(oids)
        where = {f.checkpoint for f in findings}
        records = len(where - scanned)  # run records, node logs, session files
        click.echo(f"error: {len(findings)} credential(s) found in {len(where & scanned)} of {len(oids)} "
                   f"checkpoint(s)" + (f" and {records} other record(s)" if records else ""), err=True)
        click.get_current_context().exit(1)


def _pre_push(store: gitstate.Store, remote: str, allow: tuple[str, ...]) -> None:
    """The pre-push hook's check: each input line is ``<local ref> <local sha> <remote ref>
    <remote sha>``; the checkpoints reachable from the local shas and not from the remote shas or
    the remote's tracking refs are scanned (:class:`gitstate.sync.secretscan.SecretsFoundError`)."""
    import sys

    from gitstate.git.refs import list_refs
    from gitstate.sync.secretscan import check_push

    tips: list[str] = []
    have: list[str] = []
    for line in sys.stdin.read().splitlines():
        fields = line.split()
        if len(fields) < 4:
            continue
        lsha, rsha = fields[-3], fields[-1]
        if lsha.strip("0"):
            tips.append(lsha)
        if rsha.strip("0"):
            have.append(rsha)
    if not tips:
        return
    have += [oid for _name, oid in list_refs(store.repo, f"refs/remotes/{remote}/")]
    check_push(store, remote, tips, have, allow)
