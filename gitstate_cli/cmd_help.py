"""``git agentos help [TOPIC|COMMAND]``: the help topics (references, JSON output, exit codes) and
each command's help, without opening a store."""

from __future__ import annotations

import click

from . import output as out
from .topics import TOPICS


@click.command("help")
@click.argument("topic", required=False, metavar="[TOPIC|COMMAND]")
@out.json_option
@click.pass_context
def help_(ctx: click.Context, topic: str | None, as_json: bool) -> None:
    """Show help on a command or a topic (refs, json, exit-codes).

    Without an argument: the list of commands and topics.

    \b
    Examples:
      git agentos help refs
      git agentos help rollback

    JSON: {"topic", "text"}; without an argument {"topics": {name: summary}, "commands":
    {name: summary}}.
    """
    from .main import COMMANDS

    group = ctx.parent.command if ctx.parent is not None else None
    if topic is None:
        if as_json:
            out.emit_json({"topics": {name: summary for name, (summary, _) in TOPICS.items()},
                           "commands": {n: e.summary for n, e in COMMANDS.items() if not e.hidden}})
            return
        if ctx.parent is not None:
            click.echo(ctx.parent.get_help())
        click.echo("\nTopics (git agentos help TOPIC):")
        for name, (summary, _) in TOPICS.items():
            click.echo(f"  {name:<12} {summary}")
        return
    if topic in TOPICS:
        text = TOPICS[topic][1]
    elif topic in COMMANDS and isinstance(group, click.Group):
        command = group.get_command(ctx, topic)
        assert command is not None
        sub = click.Context(command, info_name=topic, parent=ctx.parent)
        text = command.get_help(sub) + "\n"
    else:
        raise click.UsageError(f"no help topic or command {topic!r}; topics: {', '.join(TOPICS)}")
    if as_json:
        out.emit_json({"topic": topic, "text": text})
    else:
        click.echo(text, nl=False)
