"""The view command: a local, read-only web view of the store, or one HTML file of some runs."""

from __future__ import annotations

import sys

import click

import gitstate

from . import output as out
from .context import PathParam, get_run, pass_store


@click.command()
@click.argument("run_ids", nargs=-1, metavar="[RUN]...")
@click.option("--port", type=click.IntRange(0, 65535), default=0, show_default="a free port",
              help="Port on 127.0.0.1 to serve on.")
@click.option("--no-open", is_flag=True, help="Do not open a browser (print the address only).")
@click.option("--html", "html_path", type=PathParam(dir_okay=False, writable=True, in_existing_dir=True), default=None,
              help="Write the view of the runs (every run of the worktree when none is named) to this "
                   "self-contained HTML file instead of serving.")
@click.option("--all", "all_worktrees", is_flag=True, help="With --html and no RUN: the runs of every worktree.")
@out.json_option
@pass_store
def view(store: gitstate.Store, run_ids: tuple[str, ...], port: int, no_open: bool, html_path: str | None,
         all_worktrees: bool, as_json: bool) -> None:
    """Show runs, checkpoints and diffs in the browser (read-only).

    Serves the view on 127.0.0.1 until interrupted (Ctrl-C): the runs of this worktree, newest
    first, with a filter; a run's checkpoints as a commit graph with every branch, rolled-back
    lines kept in the reflog and node spans; one checkpoint's state, metadata, tools, audit
    events and workspace files; the diff of any two checkpoints (tick two in the graph); session
    files. New checkpoints appear while the page is open. RUN opens that run's page. The server
    never writes to the repository and answers only requests addressed to 127.0.0.1:PORT.

    With --html FILE, writes the view of the named runs as one HTML file that needs no server
    and no network (for CI artifacts) and prints its size.

    \b
    Examples:
      git agentos view
      git agentos view my-run --port 8765 --no-open
      git agentos view my-run --html my-run.html

    JSON: with --html, {"path", "runs", "checkpoints", "size", "errors"} ("errors": the runs
    and checkpoints the page shows as unreadable, each also a warning on stderr); when serving, {"url"} once the
    server listens (it then serves until interrupted).
    """
    from gitstate.view import serve, write_html

    if html_path is None and len(run_ids) > 1:
        raise click.UsageError("name at most one RUN to serve (several only with --html)")
    run_ids = tuple(get_run(store, r).id for r in run_ids)  # RUN@BRANCH names its run
    if html_path is not None:
        result = write_html(store, list(run_ids) or None, html_path, all_worktrees=all_worktrees)
        for error in result.errors:
            click.echo(f"warning: {out.safe(error)} (shown as unreadable in the page)", err=True)
        if as_json:
            out.emit_json({"path": result.path, "runs": list(result.runs), "checkpoints": result.checkpoints,
                           "size": result.size, "errors": list(result.errors)})
            return
        click.echo(f"wrote {result.path} ({len(result.runs)} run{'s' if len(result.runs) != 1 else ''}, "
                   f"{result.checkpoints} checkpoints, {result.size:,} bytes)")
        return

    def ready(url: str) -> None:
        if as_json:
            out.emit_json({"url": url})
        else:
            click.echo(f"gitstate view: {url}  (Ctrl-C to stop)")
        sys.stdout.flush()

    serve(store, run_ids[0] if run_ids else None, port=port, open_browser=not no_open, ready=ready)
