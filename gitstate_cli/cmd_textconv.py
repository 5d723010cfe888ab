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
    """Print a stored CBOR payload as readable text (used by git diff).

    Non-CBOR input is printed unchanged.

    JSON: the decoded payload as one JSON document (input that is not gitstate CBOR as
    {"$bytes": hex}).
    """
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise click.FileError(path, hint=exc.strerror or str(exc)) from None
    if as_json:
        from gitstate.errors import CorruptObjectError
        from gitstate.format.encoding import loads

        try:
            value = loads(data)
        except CorruptObjectError:  # not gitstate CBOR: the bytes as they are
            value = data
        out.emit_json(value)
        return
    from .textconv import convert

    sys.stdout.buffer.write(convert(data))
    sys.stdout.flush()
