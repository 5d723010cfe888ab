"""``git agentos setup``: plain-git readability (the textconv itself is ``cmd_textconv``), the
optional pre-push guard, and ``--check``, which says whether they work."""

from __future__ import annotations

import os
import shlex
import shutil
import site
import sys
import sysconfig
from dataclasses import dataclass

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


def own_executable() -> str | None:
    """The ``git-agentos`` of the installation running this command: the script that was run, else
    the one in this interpreter's scripts directory (a virtual environment's ``bin``; the user
    scheme's when gitstate is installed there); ``None`` when there is none (run from a checkout)."""
    argv0 = sys.argv[0] if sys.argv else ""
    if os.path.basename(argv0) == "git-agentos" and os.path.isfile(argv0) and os.access(argv0, os.X_OK):
        return os.path.abspath(argv0)
    dirs = [sysconfig.get_path("scripts")]
    user_site = getattr(site, "USER_SITE", None)
    if user_site and os.path.abspath(gitstate.__file__).startswith(os.path.abspath(user_site) + os.sep):
        dirs.insert(0, sysconfig.get_path("scripts", f"{os.name}_user"))
    for folder in dirs:
        candidate = os.path.join(folder, "git-agentos")
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


@dataclass(frozen=True)
class CommandCheck:
    """Whether ``git agentos`` works from this shell: ``state`` is ``ok`` (git finds
    ``git-agentos`` on PATH: ``path``), ``not-on-path`` (this installation's ``installed`` is not
    on PATH) or ``not-installed`` (this interpreter has no ``git-agentos``); ``advice`` says exactly
    what to do; ``setup_command`` is a command that runs setup from here."""

    state: str
    path: str | None
    installed: str | None
    advice: str | None
    setup_command: str

    def to_dict(self) -> dict[str, object]:
        """The ``git_agentos`` part of ``setup --check --json``."""
        return {"state": self.state, "path": self.path, "installed": self.installed, "advice": self.advice}


def check_command() -> CommandCheck:
    """Find out whether ``git agentos`` works from this shell, and what to do when it does not."""
    found = shutil.which("git-agentos")
    own = own_executable()
    python = shlex.quote(sys.executable or "python3")
    if found is not None:
        return CommandCheck("ok", os.path.abspath(found), own, None, "git agentos setup")
    if own is not None:
        folder = os.path.dirname(own)
        advice = (f"git-agentos is not on PATH, so `git agentos` does not work from this shell: add "
                  f"{folder} to PATH (export PATH={shlex.quote(folder)}:\"$PATH\"), or run "
                  f"{shlex.quote(own)} instead of git agentos")
        return CommandCheck("not-on-path", None, own, advice, f"{shlex.quote(own)} setup")
    advice = (f"no git-agentos is installed for {sys.executable}, so `git agentos` does not work: run "
              f"{python} -m gitstate_cli instead of git agentos, or install gitstate with pip "
              "(pip install .) so that it provides git-agentos")
    return CommandCheck("not-installed", None, None, advice, f"{python} -m gitstate_cli setup")


@click.command()
@click.option("--hooks", is_flag=True,
              help="Also install the pre-push hook that refuses pushing checkpoints (refs/agentos/..., "
                   "or any ref whose new commits include gitstate commits) to remotes not allowed by "
                   "agentos.pushRemotes (an existing hook is chained).")
@click.option("--hide-refs", is_flag=True,
              help="Also keep checkpoint refs out of git log's decorations (log.excludeDecoration="
                   "refs/agentos/ in .git/config). To keep the checkpoints out of git log --all or "
                   "gitk --all, put --exclude='refs/agentos/*' before --all.")
@click.option("--check", "check_only", is_flag=True,
              help="Change nothing; report whether the textconv, attributes and hook work (exit 1 if not).")
@out.json_option
@pass_store
def setup(store: gitstate.Store, hooks: bool, hide_refs: bool, check_only: bool, as_json: bool) -> None:
    """Configure plain git to print checkpoints as readable state.

    Registers a textconv diff driver so that `git show <checkpoint>`, `git log -p <run ref>` and
    `git diff A B` print stored CBOR payloads as JSON. Idempotent; touches only the repository's
    .git/config (diff.agentos.textconv) and .git/info/attributes (a marked block). The driver
    finds the converter when git runs it (git-agentos on PATH, else the git-agentos that ran
    setup if it still exists, else python3 -m gitstate_cli, else the raw payload), so removing
    a virtual environment never breaks `git show`. With --hooks it also installs the pre-push
    leak guard where git looks for hooks (core.hooksPath respected); an existing pre-push hook
    is kept as pre-push.gitstate-chained and runs first.

    Checkpoints are commits under refs/agentos/, so `git log --all`, `gitk --all` and IDE graphs
    list them. `git log --exclude='refs/agentos/*' --all` leaves them out (--exclude must come
    before --all; gitk takes the same arguments); --hide-refs adds log.excludeDecoration=
    refs/agentos/ so no commit of `git log --decorate` is labelled with a checkpoint ref (undo:
    git config --unset log.excludeDecoration refs/agentos/).

    --check changes nothing: it says whether `git agentos` works from this shell (git-agentos on
    PATH; if not, the directory to add to PATH, or the command to run instead), runs the
    configured textconv on a sample payload as git would, checks the attributes block and the
    hook, lists agentos.pushRemotes, and exits 1 when git-agentos is not on PATH, checkpoints
    would not print decoded or an installed hook is unusable.

    \b
    Example:
      git agentos setup --hooks && git config --add agentos.pushRemotes origin
      git agentos setup --hide-refs && git log --exclude='refs/agentos/*' --all --oneline
      git agentos setup --check

    JSON: {"config_path", "attributes_path", "textconv" (the command), "config_changed",
    "attributes_changed", "hook": {"path", "action", "chained"} or null, "hide_refs":
    {"log.excludeDecoration", "changed"} or null, "log_all" (the git log that leaves
    checkpoints out)}. With --check:
    {"ok", "git_agentos": {"state": ok|not-on-path|not-installed, "path" (the git-agentos git
    runs), "installed" (this installation's), "advice"}, "textconv": {"state":
    ok|raw|broken|missing|foreign, "command", "detail", "config_path"}, "attributes": {"state":
    ok|missing|outdated, "path"}, "hook": {"state": installed|missing|outdated|not-executable|
    foreign, "path", "chained"}, "push_remotes": [...], "refs_hidden" (log.excludeDecoration
    holds refs/agentos/)}.
    """
    if check_only:
        if hooks or hide_refs:
            raise click.UsageError("--check changes nothing; run --hooks or --hide-refs without it")
        report = setting_up.check(store)
        command = check_command()
        if as_json:
            out.emit_json({**report.to_dict(), "ok": report.ok and command.state == "ok",
                           "git_agentos": command.to_dict()})
        else:
            r = report.readable
            if command.state == "ok":
                click.echo(f"git agentos: ok ({out.safe(command.path or '')})")
            else:
                click.echo(f"git agentos: {command.state} - {out.safe(command.advice or '')}")
            click.echo(f"textconv:   {r.textconv} - {r.detail}")
            click.echo(f"attributes: {r.attributes} ({r.attributes_path})")
            click.echo(f"pre-push:   {_HOOK_WORDS.get(report.hook.state, report.hook.state)} ({report.hook.path})")
            remotes = ", ".join(out.safe(r) for r in report.push_remotes) or "none (git agentos push is refused)"
            click.echo(f"push remotes allowed: {remotes}")
            click.echo("log decorations: " + ("checkpoint refs hidden" if report.refs_hidden else
                                              "checkpoint refs shown (hide: git agentos setup --hide-refs)"))
        if not report.ok:
            click.echo("error: the setup does not work as it should; run: " + out.safe(command.setup_command)
                       + (" --hooks" if report.hook.state in ("outdated", "not-executable") else ""), err=True)
            click.get_current_context().exit(1)
        if command.state != "ok":
            click.echo(f"error: {out.safe(command.advice or '')}", err=True)
            click.get_current_context().exit(1)
        return
    done = setting_up.setup(store, hooks=hooks, executable=own_executable(), hide_refs=hide_refs)
    if as_json:
        out.emit_json(done.to_dict())
        return
    result = done.readable
    if result.config_changed or result.attributes_changed:
        click.echo(f"configured diff.agentos.textconv in {result.config_path} (finds git-agentos when git runs it)")
        click.echo(f"patterns in {result.attributes_path}")
    elif done.hid_refs:
        click.echo("textconv already set up")
    else:
        click.echo("already set up; nothing changed")
    if done.hook is not None:
        chained = f" (previous hook kept as {done.hook.chained})" if done.hook.chained else ""
        click.echo(f"pre-push hook {done.hook.action}: {done.hook.path}{chained}")
    if done.hid_refs is not None:
        click.echo(f"log.excludeDecoration={setting_up.HIDDEN_DECORATION} "
                   + ("added: " if done.hid_refs else "already set: ")
                   + "git log labels no commit with a checkpoint ref")
    click.echo("try: git show <checkpoint id>   or   git log -p refs/agentos/<worktree>/runs/<run>/heads/main")
    click.echo(f"git log --all lists checkpoints too; leave them out: {setting_up.LOG_ALL_WITHOUT_CHECKPOINTS}")
