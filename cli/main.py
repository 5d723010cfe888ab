"""The ``git agentos`` entry point: the click group, its lazy command registry and the one place
where gitstate errors become ``error: …`` lines.

Start-up stays cheap: this module imports click and nothing of gitstate, and a command's module is
imported only when that command runs or its help is shown, so ``git agentos --help`` and
``--version`` never load pygit2."""

from __future__ import annotations

import importlib
import sys
from typing import Any

import click

#: Command name -> "module:attribute" (modules relative to this package). Registering a command
#: module is one line here; nothing else imports it.
COMMANDS: dict[str, str] = {
    "runs": "cmd_read:runs",
    "log": "cmd_read:log",
    "show": "cmd_read:show",
    "diff": "cmd_read:diff",
    "nodes": "cmd_read:nodes",
    "checkpoint": "cmd_write:checkpoint",
    "rollback": "cmd_write:rollback",
    "undo": "cmd_write:undo",
    "fork": "cmd_write:fork",
    "delete": "cmd_write:delete",
    "prune": "cmd_write:prune",
    "restore": "cmd_files:restore",
    "files": "cmd_files:files",
    "verify": "cmd_verify:verify",
    "setup": "cmd_setup:setup",
    "textconv": "cmd_setup:textconv",
    "demo": "cmd_demo:demo",
    "push": "remote_commands:push",
    "pull": "remote_commands:pull",
    "export": "remote_commands:export",
    "import": "remote_commands:import_",
}


def report_error(exc: BaseException) -> int | None:
    """Print ``error: …`` for a failure a user can cause and return its exit code; ``None`` for a
    bug (the caller re-raises it so its traceback shows)."""
    if isinstance(exc, click.exceptions.UsageError):
        hint = ""
        if exc.ctx is not None:
            hint = f" (see '{exc.ctx.command_path} --help')"
        click.echo(f"error: {exc.format_message()}{hint}", err=True)
        return exc.exit_code
    if isinstance(exc, click.ClickException):
        click.echo(f"error: {exc.format_message()}", err=True)
        return exc.exit_code
    if isinstance(exc, click.exceptions.Abort | KeyboardInterrupt):
        click.echo("error: interrupted", err=True)
        return 130
    if isinstance(exc, BrokenPipeError):  # `git agentos log r | head`
        return 0
    if _is_gitstate_error(exc):
        click.echo(f"error: {exc}", err=True)
        return 1
    return None


def _is_gitstate_error(exc: BaseException) -> bool:
    # gitstate is imported only if a command already loaded it: a failure before that cannot be one.
    errors = sys.modules.get("gitstate.errors")
    return errors is not None and isinstance(exc, errors.GitStateError)


class LazyGroup(click.Group):
    """A group whose commands are imported from :data:`COMMANDS` on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        module_name, _, attr = target.partition(":")
        module = importlib.import_module(f"{__package__}.{module_name}")
        command = getattr(module, attr)
        if not isinstance(command, click.Command):  # pragma: no cover - a registry typo
            raise TypeError(f"{target} is not a click command")
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # The listing must not import every command module: short help comes from SHORT_HELP.
        rows = [(name, SHORT_HELP.get(name, "")) for name in self.list_commands(ctx) if name not in HIDDEN]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def main(self, *args: Any, standalone_mode: bool = True, **kwargs: Any) -> Any:  # type: ignore[override]
        """Run the CLI; in standalone mode every failure a user can cause ends as one
        ``error: …`` line on stderr: exit 1 for store errors, 2 for usage errors."""
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)
        try:
            result = super().main(*args, standalone_mode=False, **kwargs)
        except click.exceptions.Exit as exc:
            sys.exit(exc.exit_code)
        except BaseException as exc:  # noqa: BLE001 - classified below, bugs re-raised
            code = report_error(exc)
            if code is None:
                raise
            sys.exit(code)
        sys.exit(result if isinstance(result, int) else 0)


#: One line per command for ``git agentos --help`` (kept here so the listing stays import-free;
#: a test checks each matches the first line of the command's own help).
SHORT_HELP: dict[str, str] = {
    "runs": "List runs, most recently updated first.",
    "log": "List the checkpoints of a run's branch, newest first.",
    "show": "Show one checkpoint: metadata, decoded state, files.",
    "diff": "Show the state keys and files that changed between two checkpoints.",
    "nodes": "List the node boundaries of a run's branch.",
    "checkpoint": "Write a checkpoint (creates the run if it is new).",
    "rollback": "Move a branch back to an earlier checkpoint (undoable).",
    "undo": "Revert the last move of a branch (checkpoint, rollback, fork, prune).",
    "fork": "Create a new branch of a run at a checkpoint.",
    "delete": "Delete a run and all its branches.",
    "prune": "Keep only the newest N checkpoints of a branch.",
    "restore": "Restore workspace files from a checkpoint's snapshot.",
    "files": "List, read or show the history of a run's session files.",
    "verify": "Check every ref, object and payload of the store.",
    "setup": "Configure plain git to print checkpoints as readable state.",
    "textconv": "Print a stored CBOR payload as readable text (used by git diff).",
    "demo": "Run a small agent workflow in a fresh repository and show every feature.",
    "push": "Push runs to a git remote, fast-forward only.",
    "pull": "Pull runs from a git remote without overwriting anything.",
    "export": "Write runs to a git bundle file (all runs of this worktree when none is named).",
    "import": "Import the runs of a git bundle file, with the same no-overwrite rules as pull.",
}

HIDDEN = frozenset({"textconv"})


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(None, "--version", package_name="gitstate", prog_name="git agentos",
                      message="%(prog)s %(version)s")
@click.pass_context
def cli(ctx: click.Context) -> None:
    """gitstate: agent and workflow checkpoints stored as git objects under refs/agentos/.

    The store is the repository of the current directory; GIT_DIR (git --git-dir) and
    AGENTOS_REPO (which wins) choose another one. REF names a checkpoint: an id or unique
    prefix, RUN (the tip of its main branch), RUN@BRANCH, RUN~N (N checkpoints back) or
    RUN:node:NAME (the exit checkpoint of a node).
    """
    from .context import StoreHandle

    ctx.obj = StoreHandle()
    ctx.call_on_close(ctx.obj.close)


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point (``git-agentos``)."""
    cli.main(args=argv, prog_name="git agentos")


if __name__ == "__main__":  # pragma: no cover
    main(sys.argv[1:])
