"""``git agentos textconv FILE``: the converter ``git agentos setup`` registers (hidden command).
Imports neither gitstate's store nor pygit2: git runs it once per blob."""

from __future__ import annotations

import sys

import click

from . import output as out


@click.command()
@click.argument("path", type=click.Path(dir_okay=False))
@out.json_option
def textconv(path: str, as_json: bool) -> None:
    """Print a stored CBOR payload or LangGraph value as readable text (used by git diff).

    Other input is printed unchanged.

    JSON: the payload as shown (one JSON document); input it does not convert as
    {"$bytes": hex}.
    """
    from .textconv import convert

    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise click.FileError(path, hint=exc.strerror or str(exc)) from None
    shown = convert(data, path)
    if as_json and shown is data:  # not converted: the bytes as they are, as JSON
        out.emit_json(data)
        return
    sys.stdout.buffer.write(shown)  # converted text is already one JSON document
    sys.stdout.flush()
