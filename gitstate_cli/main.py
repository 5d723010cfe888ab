"""The ``git agentos`` entry point: the click group, its lazy command registry and the one place
where gitstate errors become ``error: …`` lines.

Start-up stays cheap: this module imports click and nothing of gitstate, and a command's module is
imported only when that command runs or its help is shown, so ``git agentos --help`` and
``--version`` never load pygit2."""

from __future__ import annotations

import atexit
import gc
import importlib
import os
import sys
from collections.abc import Sequence
from typing import Any, NamedTuple

import click

#: The version ``--version`` prints: the distribution's (pyproject.toml) and ``gitstate.__version__``
#: (tests/cli/test_cli.py checks all three agree). A constant, because asking the installed metadata
#: (importlib.metadata) took ~40 ms of a ~110 ms ``git agentos --version``.
VERSION = "0.1.0"


class Entry(NamedTuple):
    """One registered command: where it lives (``"module:attribute"``, module relative to this
    package), its one-line summary for ``git agentos --help`` (must equal the first line of the
    command's docstring; a test checks), and whether the listing hides it."""

    target: str
    summary: str
    hidden: bool = False


#: Every command, imported only when it runs or its help is shown. Registering a command is one
#: line here; nothing else imports its module.
COMMANDS: dict[str, Entry] = {
    "help": Entry("cmd_help:help_", "Show help on a command or a topic (refs, json, exit-codes)."),
    "runs": Entry("cmd_read:runs", "List runs, most recently updated first."),
    "log": Entry("cmd_read:log", "List the checkpoints of a run's branch, newest first."),
    "show": Entry("cmd_read:show", "Show one checkpoint: metadata, decoded state, files."),
    "diff": Entry("cmd_read:diff", "Show the state keys and files that changed between two checkpoints."),
    "nodes": Entry("cmd_read:nodes", "List the node boundaries of a run's branch."),
    "branches": Entry("cmd_branches:branches", "List a run's branches: tips and where each came from."),
    "branch": Entry("cmd_branches:branch", "Delete a branch of a run (branch -d RUN@BRANCH)."),
    "checkpoint": Entry("cmd_write:checkpoint", "Write a checkpoint (creates the run if it is new)."),
    "rollback": Entry("cmd_write:rollback", "Move a branch back to an earlier checkpoint (undoable)."),
    "undo": Entry("cmd_write:undo", "Revert the last move of a branch (checkpoint, rollback, fork, prune or undo)."),
    "fork": Entry("cmd_write:fork", "Create a new branch of a run at a checkpoint."),
    "delete": Entry("cmd_write:delete", "Delete a run and all its branches."),
    "prune": Entry("cmd_write:prune", "Keep only the newest N checkpoints of a branch."),
    "gc": Entry("cmd_gc:gc", "Remove old runs and checkpoints by a retention policy and give their bytes back."),
    "pin": Entry("cmd_gc:pin", "Pin a run: gc never removes or prunes it."),
    "unpin": Entry("cmd_gc:unpin", "Unpin a run: gc policies apply to it again."),
    "restore": Entry("cmd_files:restore", "Restore workspace files from a checkpoint's snapshot."),
    "files": Entry("cmd_files:files", "List, read or show the history of a run's session files."),
    "view": Entry("cmd_view:view", "Show runs, checkpoints and diffs in the browser (read-only)."),
    "verify": Entry("cmd_verify:verify", "Check every ref, object and payload of the store."),
    "scan": Entry("cmd_scan:scan", "Find credentials in the stored checkpoints of runs (all of this worktree's by default)."),
    "setup": Entry("cmd_setup:setup", "Configure plain git to print checkpoints as readable state."),
    "textconv": Entry("cmd_textconv:textconv", "Print a stored CBOR payload or LangGraph value as readable text (used by git diff).",
                      hidden=True),
    "demo": Entry("cmd_demo:demo", "Run a small agent workflow in a fresh repository and show every feature."),
    "push": Entry("remote_commands:push", "Push runs to a git remote, fast-forward only."),
    "pull": Entry("remote_commands:pull", "Pull runs from a git remote without overwriting anything."),
    "clone-runs": Entry("remote_commands:clone_runs", "Keep runs in a repository of their own, at URL, and pull them."),
    "export": Entry("remote_commands:export",
                    "Write runs to a git bundle file (all runs of this worktree when none is named)."),
    "import": Entry("remote_commands:import_",
                    "Import the runs of a git bundle file, with the same no-overwrite rules as pull."),
}


def report_error(exc: BaseException, as_json: bool = False) -> int | None:
    """Print ``error: …`` for a failure a user can cause and return its exit code; ``None`` for a
    bug (the caller re-raises it so its traceback shows). With ``as_json`` (the command line had
    ``--json``) stdout also gets one JSON object: ``{"error": message, "type": kind,
    "exit_code": code}`` (an ambiguous id adds ``"candidates"``)."""
    extra: dict[str, Any] = {}
    if isinstance(exc, click.exceptions.UsageError):
        hint = ""
        if exc.ctx is not None:
            hint = f" (see '{exc.ctx.command_path} --help')"
        message, code, kind = f"{exc.format_message()}{hint}", exc.exit_code, "UsageError"
    elif isinstance(exc, click.ClickException):
        message, code, kind = exc.format_message(), exc.exit_code, "UsageError"
    elif isinstance(exc, click.exceptions.Abort | KeyboardInterrupt):
        message, code, kind = "interrupted", 130, "Interrupted"
    elif _is_gitstate_error(exc):
        from .errors import describe

        message, extra = describe(exc)  # type: ignore[arg-type]  # _is_gitstate_error checked it
        kind = type(exc).__name__
        # the library's UsageError is a bad argument too (a PATH not in the worktree, --keep 0)
        code = 2 if isinstance(exc, sys.modules["gitstate.errors"].UsageError) else 1
    else:
        return None
    from .output import safe

    click.echo(f"error: {safe(message)}", err=True)  # one line, whatever the store's names hold
    if as_json:
        import json

        doc = {"error": message, "type": kind, "exit_code": code, **extra}
        click.echo(json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False))
    return code


def wants_json(args: Sequence[str] | None) -> bool:
    """Whether a command line asks for JSON (``--json`` before any ``--``)."""
    argv = list(sys.argv[1:] if args is None else args)
    if "--" in argv:
        argv = argv[: argv.index("--")]
    return "--json" in argv


def _is_gitstate_error(exc: BaseException) -> bool:
    # gitstate is imported only if a command already loaded it: a failure before that cannot be one.
    errors = sys.modules.get("gitstate.errors")
    return errors is not None and isinstance(exc, errors.GitStateError)


class _PipeClosed(Exception):
    """Standard output's reader closed the pipe."""


class OutputError(click.ClickException):
    """Standard output cannot be written (a full disk, an I/O error): exit 1, as a store that
    cannot be written."""

    exit_code = 1

    def __init__(self, reason: str) -> None:
        super().__init__(f"cannot write the output: {reason}")


def _writing_output(exc: OSError) -> bool:
    """Whether ``exc`` was raised writing the command's output: in ``click.echo`` (every command
    prints through it) or the final flush of standard output."""
    echo = click.utils.echo.__code__
    tb = exc.__traceback__
    last = None
    while tb is not None:
        if tb.tb_frame.f_code is echo:
            return True
        last = tb
        tb = tb.tb_next
    return last is not None and last.tb_frame.f_code is LazyGroup.invoke.__code__  # the flush


def _silence_stdout() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass


class LazyGroup(click.Group):
    """A group whose commands are imported from :data:`COMMANDS` on first use."""

    #: Set by :func:`main` (a process of its own): once a command's modules are imported, their
    #: objects are frozen out of the garbage collector's passes (see :func:`main`).
    freeze_after_import = False

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = COMMANDS.get(cmd_name)
        if entry is None:
            return None
        module_name, _, attr = entry.target.partition(":")
        module = importlib.import_module(f"{__package__}.{module_name}")
        if self.freeze_after_import:
            gc.freeze()
        command = getattr(module, attr)
        if not isinstance(command, click.Command):  # pragma: no cover - a registry typo
            raise TypeError(f"{entry.target} is not a click command")
        return command

    def invoke(self, ctx: click.Context) -> Any:
        try:
            result = super().invoke(ctx)
            if sys.stdout is not None:
                sys.stdout.flush()  # a write that fails shows here, not silently at exit
            return result
        except BrokenPipeError as exc:  # (click would turn it into exit 1)
            raise _PipeClosed from exc
        except OSError as exc:
            if not _writing_output(exc):
                raise
            _silence_stdout()  # what it still holds is not written at exit either
            raise OutputError(exc.strerror or str(exc)) from exc

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # The listing must not import every command module: summaries come from the registry.
        rows = [(name, COMMANDS[name].summary) for name in self.list_commands(ctx) if not COMMANDS[name].hidden]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None,
             complete_var: str | None = None, standalone_mode: bool = True, **extra: Any) -> Any:
        """Run the CLI; in standalone mode every failure a user can cause ends as one
        ``error: …`` line on stderr: exit 1 for store errors, 2 for usage errors."""
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            result = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.exceptions.Exit as exc:
            sys.exit(exc.exit_code)
        except _PipeClosed:
            # the reader went away (`git agentos log | head`): exit as git does when SIGPIPE ends
            # it (128 + 13), silently; nothing more reaches the closed pipe at exit either
            _silence_stdout()
            sys.exit(141)
        except BaseException as exc:  # noqa: BLE001 - classified below, bugs re-raised
            code = report_error(exc, wants_json(args))
            if code is None:
                raise
            sys.exit(code)
        sys.exit(result if isinstance(result, int) else 0)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(VERSION, "--version", prog_name="git agentos", message="%(prog)s %(version)s")
@click.option("--no-pager", "-P", "no_pager", is_flag=True, help="Do not pipe output into a pager.")
@click.pass_context
def cli(ctx: click.Context, no_pager: bool) -> None:
    """gitstate: agent and workflow checkpoints stored as git objects under refs/agentos/.

    The store is the repository of the current directory; GIT_DIR (git --git-dir) and
    AGENTOS_REPO (which wins) choose another one. Runs, branches and checkpoints are named with
    one grammar everywhere: RUN, RUN@BRANCH, RUN~N, RUN:node:NAME, a checkpoint id or unique
    prefix (see 'git agentos help refs'). Every command takes --json ('git agentos help json').
    """
    from .handle import StoreHandle

    ctx.obj = StoreHandle(no_pager=no_pager)
    ctx.call_on_close(ctx.obj.close)


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point (``git-agentos``)."""
    _skip_final_collections()
    # The command's imports (click, pygit2, gitstate: some 100,000 objects) live as long as the
    # process: frozen once imported, the collections a command's own allocations trigger no longer
    # walk them all (a restore of 10,000 files: some 20 ms less). Only here, in a process of its
    # own, as at exit below; the group used in-process (tests, CliRunner) leaves the collector as is.
    cli.freeze_after_import = True
    cli.main(args=argv, prog_name="git agentos")


def _skip_final_collections() -> None:
    # At exit Python tears its modules down with full garbage collections over every object still
    # alive: click, pygit2 and a restore's 10,000-entry tables took ~35 ms (of ~50 ms exiting).
    # Frozen objects are left out; memory goes back to the OS with the process, and nothing of
    # gitstate's needs a collection to finish (locks, files and threads end inside the command).
    # Registered at exit, not now: an in-process caller (tests) keeps its collector untouched.
    global _final_collections_skipped
    if not _final_collections_skipped:
        atexit.register(gc.freeze)
        _final_collections_skipped = True


_final_collections_skipped = False


if __name__ == "__main__":  # pragma: no cover
    main(sys.argv[1:])
