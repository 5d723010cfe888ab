"""Read-only commands: runs, log, show, diff, nodes. Each opens the store, makes one library call
and prints."""

from __future__ import annotations

import json
from typing import Any

import click

import gitstate
from gitstate.format import frameworks
from gitstate.secrets import masked

from . import output as out
from .context import locate, locate_branch, pass_store, resolve
from .pager import paged

json_option = out.json_option
branch_option = click.option("--branch", "-b", default=None,
                             help="Branch of the run when RUN names none (default: main; a LangGraph "
                                  "thread's latest line).")
no_pager_option = click.option("--no-pager", is_flag=True, help="Do not pipe the output into a pager.")


@click.command()
@click.option("--all", "all_worktrees", is_flag=True, help="Include the runs of every worktree.")
@click.option("--remote", default=None, metavar="REMOTE",
              help="List the runs REMOTE holds instead, without fetching them (git ls-remote).")
@json_option
@pass_store
def runs(store: gitstate.Store, all_worktrees: bool, remote: str | None, as_json: bool) -> None:
    """List runs, most recently updated first.

    With --remote, the runs a remote holds (nothing is fetched): run, branches, refs and whether
    this repository has the run as it is there ("same"), otherwise ("differs") or not at all
    ("absent"); JSON: a list of {"id", "worktree", "branches", "refs", "here"}. Pull one with
    `git agentos pull REMOTE RUN`.

    \b
    Example:
      git agentos runs --all
      git agentos runs --remote origin

    STATUS follows 'git agentos help status' (a LangGraph thread: from its latest checkpoint,
    interrupted while an interrupt() waits there, stopped before a task that did not run; a
    session or memory store that never says it finished: saved); STEP is the step of the
    branch's tip (LangGraph's own for a LangGraph thread); CHECKPOINTS counts that branch's line.

    JSON: a list of {"id", "workflow", "branch", "node", "step", "status", "updated_at",
    "created_at", "checkpoints", "branches", "worktree", "error", "pinned"}; status is running,
    completed, failed, interrupted, stopped, saved or corrupt (then "error" says why); pinned runs
    are never touched by gc (`git agentos pin`).
    """
    from gitstate.store.retention import pinned

    if remote is not None:
        from .remote_commands import show_remote_runs

        show_remote_runs(store, remote, all_worktrees, as_json)
        return
    summaries = store.list_runs(all_worktrees=all_worktrees)
    pins = pinned(store, None if all_worktrees else store.worktree)
    if as_json:
        out.emit_json([{**s.to_dict(), "pinned": (s.worktree, s.id) in pins} for s in summaries])
        return
    if not summaries:
        click.echo("no runs" + ("" if all_worktrees else f" in worktree {store.worktree!r} (try --all)"))
        return
    headers = ["run", "workflow", "status", "node", "step", "checkpoints", "branches", "updated"]
    if all_worktrees:
        headers.insert(1, "worktree")
    rows = []
    shown: dict[str, str] = {}  # each status word styled once
    for s in summaries:
        status = shown.get(s.status)
        if status is None:
            status = shown[s.status] = out.status(s.status)
        row: list[Any] = [s.id + (" (pinned)" if (s.worktree, s.id) in pins else ""), s.workflow, status, s.node,
                          s.step, s.checkpoints, s.branches, s.updated_at]
        if all_worktrees:
            row.insert(1, s.worktree)
        rows.append(row)
    out.table(headers, rows)
    for s in summaries:
        if s.error:
            click.echo(f"warning: run {s.id!r}: {s.error}", err=True)


def shown_status(cp: gitstate.Checkpoint, tip: str | None) -> str | None:
    """A checkpoint's status as printed: the recorded one; for the branch's tip (``tip``: its id),
    the status of the line (a LangGraph thread stopped before a task that did not write reads
    ``stopped``)."""
    return (cp.tip_status if cp.id == tip else cp.status) or cp.node_status


def _tip_of(store: gitstate.Store, cp: gitstate.Checkpoint) -> str | None:
    """The tip of the branch ``cp`` was written on, in this worktree (``None`` if there is none)."""
    try:
        return store.get_run(cp.run_id).tip(cp.branch)
    except gitstate.GitStateError:
        return None


def _checkpoint_table(cps: list[gitstate.Checkpoint], tip: str | None) -> tuple[list[str], list[list[Any]]]:
    """Headers and rows of ``log``; a LangGraph thread's also show LangGraph's checkpoint ids, which
    name checkpoints as gitstate's ids do."""
    langgraph = any(isinstance(cp.metadata.get("checkpoint_id"), str) and cp.workflow == frameworks.LANGGRAPH
                    for cp in cps)
    headers = ["id", *(["langgraph id"] if langgraph else []), "step", "node", "trigger", "status", "created"]
    rows = [[out.style(cp.short_id, fg="yellow"),
             *([out.safe(str(cp.metadata.get("checkpoint_id", "-")))] if langgraph else []),
             cp.display_step, cp.node, cp.trigger, out.status(shown_status(cp, tip)), cp.created_at] for cp in cps]
    return headers, rows


@click.command()
@click.argument("ref", metavar="REF")
@branch_option
@click.option("-n", "limit", type=click.IntRange(min=1), default=None, help="Show at most N checkpoints.")
@no_pager_option
@json_option
@pass_store
def log(store: gitstate.Store, ref: str, branch: str | None, limit: int | None, no_pager: bool,
        as_json: bool) -> None:
    """List the checkpoints of a run's branch, newest first.

    REF is RUN (its main branch, or --branch; a LangGraph thread's latest line, as `runs` shows
    it), RUN@BRANCH, or any checkpoint (RUN~N, an id, ...) to list from there back. On a
    terminal the list goes through git's pager (GIT_PAGER, core.pager, PAGER, else less -FRX);
    --no-pager or 'git agentos --no-pager log' prints it as it is.

    For a LangGraph thread, STEP is LangGraph's step (-1 for the input checkpoint), NODE the
    node(s) whose step produced the checkpoint, and STATUS what was recorded (running: tasks were
    pending) but on the branch's tip, which shows the thread's status (interrupted at a pending
    interrupt(), stopped before a task that did not run: 'git agentos help status').

    \b
    Examples:
      git agentos log my-run -n 10
      git agentos log my-run@restore-safety

    JSON: a list of checkpoints {"id", "run", "branch", "node", "step", "trigger", "status",
    "node_status", "node_entry", "workflow", "metadata", "files_paths", "created_at",
    "parent_ids"}; "step" is the STEP shown (LangGraph's for a LangGraph checkpoint), "status"
    the one recorded.
    """
    loc = locate(store, ref, branch)
    run = store.get_run(loc.run)
    cps = list(run.history(loc.branch, limit=limit, start=loc.checkpoint))
    if as_json:
        out.emit_json([masked(cp.to_dict()) for cp in cps])
        return
    with paged(store.location.git_dir, store.location.workdir, no_pager):
        out.table(*_checkpoint_table(cps, run.tip(loc.branch)))


def _show_value(state: Any) -> str:
    """A value as indented JSON; a credential in it shows as its marker (a checkpoint stored with
    the warn policy holds it)."""
    return out.dumps(out.readable(masked(state)))


def _one_line(value: Any, limit: int = 200) -> str:
    """A value as one line of compact JSON, cut at ``limit`` characters, safe for a terminal."""
    text = json.dumps(out.jsonable(out.readable(masked(value))), ensure_ascii=False, sort_keys=True, default=str,
                      separators=(", ", ": "))
    if len(text) > limit:
        text = text[:limit] + f"… ({len(text) - limit} more characters)"
    return out.safe(text)


MAX_DETAIL_LINES = 20


def _detail_lines(kind: str, old: Any, new: Any) -> list[str]:
    """What changed inside one state key, for people: the values added or removed; for lists the
    items after their common beginning (an appended message is one ``+`` line), for maps the keys."""
    if kind == "added":
        lines = [f"+ {_one_line(new)}"]
    elif kind == "removed":
        lines = [f"- {_one_line(old)}"]
    elif isinstance(old, list) and isinstance(new, list):
        same = 0
        while same < min(len(old), len(new)) and old[same] == new[same]:
            same += 1
        lines = [f"- [{i}] {_one_line(v)}" for i, v in enumerate(old[same:], same)]
        lines += [f"+ [{i}] {_one_line(v)}" for i, v in enumerate(new[same:], same)]
    elif isinstance(old, dict) and isinstance(new, dict):
        lines = []
        for key in sorted(set(old) | set(new), key=str):
            if key not in new:
                lines.append(f"- .{out.safe(str(key))}: {_one_line(old[key])}")
            elif key not in old:
                lines.append(f"+ .{out.safe(str(key))}: {_one_line(new[key])}")
            elif old[key] != new[key]:
                lines += [f"- .{out.safe(str(key))}: {_one_line(old[key])}",
                          f"+ .{out.safe(str(key))}: {_one_line(new[key])}"]
    else:
        lines = [f"- {_one_line(old)}", f"+ {_one_line(new)}"]
    if len(lines) > MAX_DETAIL_LINES:
        lines = lines[:MAX_DETAIL_LINES] + [f"… {len(lines) - MAX_DETAIL_LINES} more lines (see --json)"]
    return lines


@click.command()
@click.argument("ref", metavar="REF")
@json_option
@pass_store
def show(store: gitstate.Store, ref: str, as_json: bool) -> None:
    """Show one checkpoint: metadata, decoded state, files.

    REF is an id or unique prefix, RUN, RUN@BRANCH, RUN~N or RUN:node:NAME ('git agentos help refs';
    RUN of a LangGraph thread is the tip of its latest line, the checkpoint LangGraph's get_state
    returns).

    A LangGraph checkpoint shows its channel values decoded for display (messages as {type,
    content, ...}, other objects as {"$type": "module.Name", fields}; nothing is imported or
    built), LangGraph's step, checkpoint id, next nodes and pending writes.

    \b
    Example:
      git agentos show my-run~1

    JSON: the checkpoint fields of `log --json` plus "state" (the decoded state), "tools",
    "audit" (lists) and "files" (the workspace snapshot: a list of {"path", "size", "id", "mode"});
    a LangGraph checkpoint adds "langgraph": {"checkpoint_id", "checkpoint_ns", "source", "step",
    "parents", "next", "metadata", "writes": [{"task", "path", "node", "channel", "idx", "value"}]}
    ("next": the nodes scheduled there; at a branch's tip, those still to run, as LangGraph's
    get_state shows them). "status" is what the checkpoint recorded, as in log --json;
    "line_status" is the status of the branch whose tip it is, as runs and the text form show it
    (null when it is not a tip).
    """
    from gitstate.workspace import views  # show alone reads snapshot listings

    cp = resolve(store, ref)
    files = views.snapshot_files(cp)
    tip = _tip_of(store, cp)  # a line's tip shows what is still to run, as LangGraph's get_state does
    if as_json:
        data = cp.to_dict(with_state=True, live=cp.id == tip)
        data.update(tools=cp.tools, audit=cp.audit, files=[f.to_dict() for f in files])
        data["line_status"] = cp.tip_status if cp.id == tip else None  # as the text form and runs show it
        out.emit_json(masked(data))
        return
    lg = cp.langgraph_view(live=cp.id == tip)
    label = out.style
    click.echo(label(f"checkpoint {cp.id}", fg="yellow"))
    fields = [("run", cp.run_id), ("branch", cp.branch), ("workflow", cp.workflow), ("node", cp.node),
              ("step", cp.display_step), ("trigger", cp.trigger),
              ("status", shown_status(cp, tip)),
              ("node status", cp.node_status), ("node entry", cp.node_entry),
              ("parent", cp.parent_id), ("created", cp.created_at.isoformat())]
    if lg is not None:
        fields[5:5] = [("langgraph id", lg["checkpoint_id"]), ("namespace", lg["checkpoint_ns"] or None),
                       ("next", ", ".join(lg["next"]) or None)]
    width = max(len(k) for k, _ in fields)
    for key, value in fields:
        if value is not None:
            click.echo(f"{key + ':':<{width + 1}} {out.safe(str(value))}")
    metadata = cp.metadata if lg is None else lg["metadata"]
    if metadata:
        click.echo("metadata:")
        click.echo(_indent(_show_value(metadata)))
    click.echo("state:")
    click.echo(_indent(_show_value(cp.state)))
    if lg is not None and lg["writes"]:
        click.echo(f"pending writes ({len(lg['writes'])}):")
        for write in lg["writes"]:
            if not isinstance(write, dict) or "channel" not in write:
                click.echo(f"  {_one_line(write)}")
                continue
            task = write["node"] or write["path"] or write["task"]
            click.echo(f"  {out.safe(str(task))} -> {out.safe(str(write['channel']))}: {_one_line(write['value'], 400)}")
    for name, items in (("tools", cp.tools), ("audit", cp.audit)):
        if items:
            click.echo(f"{name}:")
            click.echo(_indent(_show_value(items)))
    if files:
        click.echo(f"files ({len(files)}):")
        for f in files:
            click.echo(f"  {out.safe(f.path)}  ({f.size} bytes)")


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.splitlines())


@click.command()
@click.argument("ref_a", metavar="REF")
@click.argument("ref_b", metavar="REF")
@json_option
@pass_store
def diff(store: gitstate.Store, ref_a: str, ref_b: str, as_json: bool) -> None:
    """Show the state keys and files that changed between two checkpoints.

    Under each changed key, the values that differ (one line each, cut at 200 characters): the
    items after a list's common beginning (an appended message is one + line), the keys of a
    map. A LangGraph checkpoint's keys are its channels, values decoded as `show` does.

    \b
    Example:
      git agentos diff my-run~3 my-run

    JSON: {"a": id, "b": id, "files_compared": bool (false when neither has a snapshot),
    "state": [{"key", "kind": "added"|"removed"|"changed", "old", "new"}],
    "files": [{"path", "status": "added"|"modified"|"deleted"|"renamed", "old_path", "old_id",
    "new_id", "old_mode", "new_mode", "similarity"}], "renames_skipped": bool}. A state that is not
    a mapping is the single key "".

    Renames are found as git's diff finds them: files with the same content always; edited ones
    only while deleted x added files stay within diff.renameLimit squared and deleted + added
    files within four times the limit (default 1000, 0: no limit). Above it "renames_skipped" is true, a warning says so on stderr, and edited renamed files
    show as deleted and added. Files above 32 MiB are never compared by content.
    """
    a, b = resolve(store, ref_a), resolve(store, ref_b)
    result = store.diff(a, b)
    if as_json:
        out.emit_json(result.to_dict())
        return
    click.echo(f"diff {a.short_id} {b.short_id}")
    if result.empty:
        click.echo("no changes")
    for change in result.state:
        mark, colour = _MARKS[change.kind]
        click.echo(out.style(f"{mark} state {out.safe(change.key) or '(whole state)'}", fg=colour))
        for line in _detail_lines(change.kind, change.old, change.new):
            click.echo("    " + line)
    for f in result.files:
        mark, colour = _MARKS[f.status]
        name = f"{out.safe(f.old_path)} -> {out.safe(f.path)}" if f.old_path else out.safe(f.path)
        click.echo(out.style(f"{mark} file  {name}", fg=colour))
    if result.renames_skipped:
        click.echo("warning: too many files added and deleted to look for edited renames (diff.renameLimit); "
                   "only unchanged files are shown as renamed", err=True)


_MARKS = {"added": ("+", "green"), "removed": ("-", "red"), "deleted": ("-", "red"),
          "changed": ("~", "yellow"), "modified": ("~", "yellow"), "renamed": (">", "yellow")}


@click.command()
@click.argument("run_id", metavar="RUN")
@branch_option
@json_option
@pass_store
def nodes(store: gitstate.Store, run_id: str, branch: str | None, as_json: bool) -> None:
    """List the node boundaries of a run's branch.

    Boundaries are listed in execution order. RUN may be RUN@BRANCH; a bare RUN is its main
    branch (a LangGraph thread: its latest line, 'git agentos help refs').

    \b
    Example:
      git agentos nodes my-run

    JSON: a list of {"node", "entry", "exit", "status", "branch"}; entry and exit are checkpoint
    ids (exit is null while the node is running); status is completed, failed or running, or
    stopped when the process that opened the node ended inside it (killed; it is never
    closed, 'git agentos help status'); branch is the branch listed. A LangGraph
    thread's nodes come from its checkpoints: entry and exit are the checkpoint a node step
    produced (or where it failed or called interrupt(); status failed or interrupted).
    """
    loc = locate_branch(store, run_id, branch)
    boundaries = store.get_run(loc.run).nodes(loc.branch)
    if as_json:
        out.emit_json([{"node": b.node, "entry": b.entry, "exit": b.exit, "status": b.status, "branch": loc.branch}
                       for b in boundaries])
        return
    out.table(["node", "status", "entry", "exit"],
              [[b.node, out.status(b.status), out.short(b.entry), out.short(b.exit)] for b in boundaries])
