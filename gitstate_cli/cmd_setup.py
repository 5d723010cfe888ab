"""``git agentos setup``: plain-git readability (the textconv itself is ``cmd_textconv``)."""

from __future__ import annotations

import click

import gitstate

from .context import pass_store


@click.command()
@click.option("--hooks", is_flag=True,
              help="Also install the pre-push hook that refuses pushing checkpoints (refs/agentos/..., "
                   "or any ref whose new commits include gitstate commits) to remotes not allowed by "
                   "agentos.pushRemotes (an existing hook is chained).")
@pass_store
def setup(store: gitstate.Store, hooks: bool) -> None:
    """Configure plain git to print checkpoints as readable state.

    Registers a textconv diff driver so that `git show <checkpoint>`, `git log -p <run ref>` and
    `git diff A B` print stored CBOR payloads as JSON. Idempotent; touches only the repository's
    .git/config (diff.agentos.textconv) and .git/info/attributes (a marked block). With --hooks it
    also installs the pre-push leak guard where git looks for hooks (core.hooksPath respected);
    an existing pre-push hook is kept as pre-push.gitstate-chained and runs first.

    \b
    Example:
      git agentos setup --hooks && git config --add agentos.pushRemotes origin
      git agentos setup && git show $(git for-each-ref --format='%(objectname)' refs/agentos/ | head -1)
    """
    from gitstate.git import plaingit

    result = plaingit.setup(store.location)
    if result.config_changed or result.attributes_changed:
        click.echo(f"configured diff.agentos.textconv = {result.command} in {result.config_path}")
        click.echo(f"patterns in {result.attributes_path}")
    else:
        click.echo("already set up; nothing changed")
    if hooks:
        installed = gitstate.install_hooks(store)
        chained = f" (previous hook kept as {installed.chained})" if installed.chained else ""
        click.echo(f"pre-push hook {installed.action}: {installed.path}{chained}")
    click.echo("try: git show <checkpoint id>   or   git log -p refs/agentos/<worktree>/runs/<run>/heads/main")
