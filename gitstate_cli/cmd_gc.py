"""Retention commands: gc, pin, unpin (one library call each, in gitstate.store.retention)."""

from __future__ import annotations

import click

import gitstate
from gitstate.store import retention

from . import output as out
from .context import pass_store

json_option = out.json_option


def _size(n: int | None) -> str:
    if n is None:
        return "?"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


@click.command()
@click.argument("runs", nargs=-1, metavar="[RUN]...")
@click.option("--keep-last", type=click.IntRange(min=1), default=None,
              help="Prune every branch of a selected run to its newest N checkpoints.")
@click.option("--older-than", metavar="DURATION", default=None,
              help="Remove whole runs not updated since (14d, 12h, 2w, or an ISO date).")
@click.option("--status", "statuses", metavar="LIST", default=None,
              help="Statuses a run must have to be touched (default: completed,failed; also stopped, "
                   "saved, running, interrupted).")
@click.option("--max-size", metavar="SIZE", default=None,
              help="Remove the oldest selected runs until the store's own objects fit (500M, 2G).")
@click.option("--all-worktrees", is_flag=True, help="Consider the runs of every worktree.")
@click.option("--dry-run", "-n", is_flag=True,
              help="Print what would go and an estimate of the bytes given back; change nothing.")
@click.option("--now", is_flag=True, help="No grace period: removed refs are not kept in the trash.")
@json_option
@pass_store
def gc(store: gitstate.Store, runs: tuple[str, ...], keep_last: int | None, older_than: str | None,
       statuses: str | None, max_size: str | None, all_worktrees: bool, dry_run: bool, now: bool,
       as_json: bool) -> None:
    """Remove old runs and checkpoints by a retention policy and give their bytes back.

    Only finished runs (completed, failed) are touched unless --status says otherwise; a running
    or interrupted run only when named; a pinned run never. Named RUNs without other options are
    removed whole. Without options the policy comes from agentos.gc.keepLast, agentos.gc.olderThan
    and agentos.gc.maxSize (unset: nothing goes). Removed refs stay restorable under
    refs/agentos-trash/ for agentos.gc.graceDays days (default 7) unless --now.

    \b
    Examples:
      git agentos gc --older-than 14d --dry-run
      git agentos gc --keep-last 20 --now

    JSON: {"runs": [{"run", "worktree", "status", "updated_at", "branches", "checkpoints",
    "reason"}], "branches": [{"run", "branch", "kept", "removed", ...}], "checkpoints",
    "expired_trash", "skipped", "estimated_bytes", "estimated_objects"}; a real run adds "failed",
    "bytes_before", "bytes_after", "bytes_freed", "trash" and "packs".
    """
    configured, grace = retention.config_policy(store)
    given = keep_last is not None or older_than is not None or max_size is not None
    policy = retention.Policy(
        keep_last=keep_last if given else configured.keep_last,
        older_than=(retention.parse_cutoff(older_than) if older_than else None) if given else configured.older_than,
        max_size=(retention.parse_size(max_size) if max_size else None) if given else configured.max_size,
        statuses=retention.parse_statuses(statuses) if statuses else retention.FINISHED,
        runs=tuple(runs), all_worktrees=all_worktrees)
    done = retention.gc(store, policy, grace_days=grace, now=now, dry_run=dry_run)
    if as_json:
        out.emit_json(done.to_dict())
        return
    plan = done.plan if isinstance(done, retention.Result) else done
    verb = "would remove" if dry_run else "removed"
    for r in plan.runs:
        click.echo(f"{verb} run {out.safe(r.run)} ({r.status}, {r.checkpoints} checkpoint(s), "
                   f"{len(r.branches)} branch(es)): {r.reason}")
    for p in plan.prunes:
        click.echo(f"{verb} {p.removed} checkpoint(s) of branch {out.safe(p.branch)} of run {out.safe(p.run)} "
                   f"(keeping {p.keep})")
    for run, why in plan.skipped:
        click.echo(f"skipped run {out.safe(run)}: {why}")
    if plan.expired_trash:
        click.echo(f"{'would drop' if dry_run else 'dropped'} {len(plan.expired_trash)} trash ref(s) past the grace period")
    if isinstance(done, retention.Result):
        for run, why in done.failed:
            click.echo(f"warning: {out.safe(run)} left as it is: {why}", err=True)
        if done.trashed:
            click.echo(f"kept {len(done.trashed)} ref(s) under {retention.TRASH} for {grace:g} day(s)")
        click.echo(f"{plan.checkpoints} checkpoint(s) removed; {_size(done.bytes_freed)} given back "
                   f"({_size(done.bytes_before)} -> {_size(done.bytes_after)})")
        if done.reclaimed is not None and done.reclaimed.deferred:
            click.echo(f"warning: packs not rewritten: {done.reclaimed.deferred}", err=True)
    else:
        click.echo(f"{plan.checkpoints} checkpoint(s) would go; about {_size(plan.estimate_bytes)} given back")


@click.command()
@click.argument("run_id", metavar="RUN")
@json_option
@pass_store
def pin(store: gitstate.Store, run_id: str, as_json: bool) -> None:
    """Pin a run: gc never removes or prunes it.

    The pin is the ref refs/agentos-pins/<worktree>/<run>; `runs` shows it.

    \b
    Example:
      git agentos pin my-run

    JSON: {"run", "pinned": true, "changed"}.
    """
    _said_pin(run_id, True, retention.pin(store, run_id), as_json)


@click.command()
@click.argument("run_id", metavar="RUN")
@json_option
@pass_store
def unpin(store: gitstate.Store, run_id: str, as_json: bool) -> None:
    """Unpin a run: gc policies apply to it again.

    \b
    Example:
      git agentos unpin my-run

    JSON: {"run", "pinned": false, "changed"}.
    """
    _said_pin(run_id, False, retention.unpin(store, run_id), as_json)


def _said_pin(run_id: str, pinned: bool, changed: bool, as_json: bool) -> None:
    """Print what ``pin``/``unpin`` did (``changed``: False when the run was so already)."""
    if as_json:
        out.emit_json({"run": run_id, "pinned": pinned, "changed": changed})
    elif changed:
        click.echo(f"{'pinned' if pinned else 'unpinned'} run {out.safe(run_id)}")
    else:
        click.echo(f"run {out.safe(run_id)} was {'pinned already' if pinned else 'not pinned'}")
