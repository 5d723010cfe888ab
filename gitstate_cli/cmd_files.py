"""File commands: restore a checkpoint's workspace snapshot, and read a run's session files."""

from __future__ import annotations

import os
from typing import Any

import click

import gitstate
from gitstate.secrets import masked_file

from . import output as out
from .cmd_write import RESTORE_PHASES, print_restore, verbose_option
from .context import PathParam, get_run, pass_store, resolve


@click.command()
@click.argument("ref", metavar="REF")
@click.argument("paths", nargs=-1, metavar="[PATH]...",
                type=PathParam(empty_hint=" (use . for the current directory)"))
@click.option("--dry-run", is_flag=True, help="List what would change; change nothing.")
@click.option("--force", is_flag=True, help="Overwrite files with uncommitted changes.")
@verbose_option
@out.json_option
@pass_store
def restore(store: gitstate.Store, ref: str, paths: tuple[str, ...], dry_run: bool, force: bool,
            verbose: bool, as_json: bool) -> None:
    """Restore workspace files from a checkpoint's snapshot.

    Only the working tree is written (never the index or HEAD). Without --force, files changed
    since they were last snapshotted are refused. PATHs are relative to the current directory
    (one in neither the snapshot nor the worktree is an error); a snapshot taken of some paths
    only (checkpoint --files PATH) restores only those.

    Prints one summary line (files written, deleted, and left as they were) and how to undo the
    restore; -v lists the files. --dry-run lists what would be written and removed, and the files
    a restore without --force would refuse, and changes nothing. On a terminal a progress bar
    shows the files as they are read and written.

    \b
    Examples:
      git agentos restore my-run~2 --dry-run
      git agentos restore my-run:node:plan src/app.py

    JSON: {"checkpoint", "changed", "added", "removed", "skipped", "unsaved" (lists of paths),
    "written", "deleted", "unchanged" (counts), "safety" (the checkpoint holding the workspace as
    it was, or null), "safety_branch", "dry_run"}.
    """
    cp = resolve(store, ref)
    run = store.get_run(cp.run_id)
    # PATHs are relative to the current directory, as in git
    with out.phases(RESTORE_PHASES) as step:
        result = run.restore(cp, paths=[os.path.abspath(p) for p in paths] or None, dry_run=dry_run, force=force,
                             progress=step)
    if as_json:
        out.emit_json(result.to_dict())
        return
    headline = ("would restore" if dry_run else "restored") + f" the files of {cp.short_id}"
    print_restore(result, verbose=verbose, headline=headline)


def _version_dict(v: gitstate.FileVersion) -> dict[str, Any]:
    return v.to_dict()


@click.command()
@click.argument("run_id", metavar="RUN")
@click.argument("path", required=False)
@click.option("--history", is_flag=True, help="List every version of PATH.")
@click.option("--version", "version", type=click.IntRange(min=1), default=None,
              help="Print this version of PATH instead of the latest.")
@click.option("--raw", is_flag=True,
              help="Print PATH as stored, credentials included (without it each one shows as its marker).")
@out.json_option
@pass_store
def files(store: gitstate.Store, run_id: str, path: str | None, history: bool, version: int | None,
          raw: bool, as_json: bool) -> None:
    """List, read or show the history of a run's session files.

    Without PATH: every path with its latest version. With PATH: its content (latest, or
    --version N) on stdout, byte for byte into a pipe or a file, but for the credentials a text
    file holds (stored with git config agentos.secrets warn or off): each is printed as its
    marker, as the redact policy would have stored it, unless --raw is given. On a terminal a text file is
    shown with its control characters escaped (newlines and tabs kept), so a file pulled from
    elsewhere cannot drive the terminal, and a binary file (NUL bytes, or not UTF-8) is refused:
    redirect stdout to a file, or use --json. With --history: every version of PATH. RUN may be
    RUN@BRANCH (session files belong to the run, whatever the branch).

    \b
    Examples:
      git agentos files my-run
      git agentos files my-run notes.md --history

    JSON: a list of {"path", "version", "author", "reason", "created_at", "size", "commit"}
    (listing sorted by path; --history oldest first); with PATH alone, that object plus "content"
    (text, or {"$bytes": hex}).
    """
    if (history or version is not None or raw) and path is None:
        raise click.UsageError("--history, --version and --raw need a PATH")
    if history and version is not None:
        raise click.UsageError("--history and --version cannot be combined")
    run = get_run(store, run_id)
    vfs = run.files
    if path is None:
        listing = sorted(vfs.list().values(), key=lambda v: v.path)
        if as_json:
            out.emit_json([_version_dict(v) for v in listing])
        else:
            out.table(["path", "version", "author", "size", "updated", "reason"],
                      [[v.path, v.version, v.author, v.size, v.created_at, v.reason] for v in listing])
        return
    if history:
        versions = list(vfs.history(path))
        if as_json:
            out.emit_json([_version_dict(v) for v in versions])
        else:
            out.table(["version", "author", "size", "created", "reason"],
                      [[v.version, v.author, v.size, v.created_at, v.reason] for v in versions])
        return
    content = vfs.read(path, version=version) if version is not None else vfs.read(path)
    data: bytes = content if isinstance(content, bytes) else str(content).encode("utf-8")
    if not raw:
        data = masked_file(data)
    if as_json:
        if version is None:
            meta = vfs.latest(path)
        else:
            meta = next((v for v in vfs.history(path) if v.version == version), None)
        doc: dict[str, Any] = _version_dict(meta) if meta is not None else {"path": path, "version": version}
        try:
            doc["content"] = data.decode("utf-8")
        except UnicodeDecodeError:
            doc["content"] = {"$bytes": data.hex()}
        out.emit_json(doc)
        return
    if out.is_tty():
        click.echo(_for_terminal(data, run_id, path, version), nl=False)
        return
    click.echo(data, nl=False)  # a pipe or a file: the bytes exactly


def _for_terminal(data: bytes, run_id: str, path: str, version: int | None) -> str:
    """A session file's content for a terminal: text with its control characters escaped as
    everything from the store is (:func:`output.safe`), newlines and tabs kept; a binary file
    (NUL bytes, or not UTF-8) is a usage error saying how to get its bytes."""
    try:
        text = None if b"\0" in data else data.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is None:
        command = " ".join(["git agentos files", out.shell_arg(run_id), out.shell_arg(path),
                            *(["--version", str(version)] if version is not None else [])])
        raise click.UsageError(f"{out.safe(path)} is a binary file (NUL bytes or not UTF-8): not printed on a "
                               f"terminal; redirect it to a file ({command} > FILE), or use --json "
                               "(its content as {\"$bytes\": hex})")
    return "\n".join("\t".join(out.safe(part) for part in line.split("\t")) for line in text.split("\n"))
