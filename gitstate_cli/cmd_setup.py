"""``git agentos setup``: plain-git readability (the textconv itself is ``cmd_textconv``), the
optional pre-push guard, and ``--check``, which says whether they work."""

from __future__ import annotations

import click

import gitstate
from gitstate.sync import setup as setting_up

from . import output as out
from .context import pass_store

_HOOK_WORDS = {
    "installed": "installed", "missing": "not installed (optional: git agentos setup --hooks)",
    "outdated": "an older version (update: git agentos setup --hooks)",
    "not-executable": "not executable (git skips it; reinstall: git agentos setup --hooks)",
    "foreign": "a pre-push hook that is not the gitstate guard (setup --hooks chains it)",
}


@click.command()
@click.option("--hooks", is_flag=True,
              help="Also install the pre-push hook that refuses pushing checkpoints (refs/agentos/..., "
                   "or any ref whose new commits include gitstate commits) to remotes not allowed by "
                   "agentos.pushRemotes (an existing hook is chained).")
@click.option("--check", "check_only", is_flag=True,
              help="Change nothing; report whether the textconv, attributes and hook work (exit 1 if not).")
@out.json_option
@pass_store
def setup(store: gitstate.Store, hooks: bool, check_only: bool, as_json: bool) -> None:
    """Configure plain git to print checkpoints as readable state.

    Registers a textconv diff driver so that `git show <checkpoint>`, `git log -p <run ref>` and
    `git diff A B` print stored CBOR payloads as JSON. Idempotent; touches only the repository's
    .git/config (diff.agentos.textconv) and .git/info/attributes (a marked block). The driver
    finds the converter when git runs it (git-agentos on PATH, else the git-agentos that ran
    setup if it still exists, else python3 -m gitstate_cli, else the raw payload), so removing
    a virtual environment never breaks `git show`. With --hooks it also installs the pre-push
    leak guard where git looks for hooks (core.hooksPath respected); an existing pre-push hook
    is kept as pre-push.gitstate-chained and runs first.

    --check changes nothing: it runs the configured textconv on a sample payload as git would,
    checks the attributes block and the hook, lists agentos.pushRemotes, and exits 1 when
    checkpoints would not print decoded or an installed hook is unusable.

    \b
    Example:
      git agentos setup --hooks && git config --add agentos.pushRemotes origin
      git agentos setup --check

    JSON: {"config_path", "attributes_path", "textconv" (the command), "config_changed",
    "attributes_changed", "hook": {"path", "action", "chained"} or null}. With --check:
    {"ok", "textconv": {"state": ok|raw|broken|missing|foreign, "command", "detail",
    "config_path"}, "attributes": {"state": ok|missing|outdated, "path"}, "hook": {"state":
    installed|missing|outdated|not-executable|foreign, "path", "chained"}, "push_remotes": [...]}.
    """
    if check_only:
        if hooks:
            raise click.UsageError("--check changes nothing; run --hooks without it")
        report = setting_up.check(store)
        if as_json:
            out.emit_json(report.to_dict())
        else:
            r = report.readable
            click.echo(f"textconv:   {r.textconv} - {r.detail}")
            click.echo(f"attributes: {r.attributes} ({r.attributes_path})")
            click.echo(f"pre-push:   {_HOOK_WORDS.get(report.hook.state, report.hook.state)} ({report.hook.path})")
            remotes = ", ".join(out.safe(r) for r in report.push_remotes) or "none (git agentos push is refused)"
            click.echo(f"push remotes allowed: {remotes}")
        if not report.ok:
            click.echo("error: the setup does not work as it should; run: git agentos setup"
                       + (" --hooks" if report.hook.state in ("outdated", "not-executable") else ""), err=True)
            click.get_current_context().exit(1)
        return
    done = setting_up.setup(store, hooks=hooks)
    if as_json:
        out.emit_json(done.to_dict())
        return
    result = done.readable
    if result.config_changed or result.attributes_changed:
        click.echo(f"configured diff.agentos.textconv in {result.config_path} (finds git-agentos when git runs it)")
        click.echo(f"patterns in {result.attributes_path}")
    else:
        click.echo("already set up; nothing changed")
    if done.hook is not None:
        chained = f" (previous hook kept as {done.hook.chained})" if done.hook.chained else ""
        click.echo(f"pre-push hook {done.hook.action}: {done.hook.path}{chained}")
    click.echo("try: git show <checkpoint id>   or   git log -p refs/agentos/<worktree>/runs/<run>/heads/main")
