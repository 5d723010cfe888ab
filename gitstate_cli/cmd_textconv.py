"""``git agentos textconv FILE``: the converter ``git agentos setup`` registers (hidden command).
Imports neither gitstate nor pygit2: git runs it once per blob."""

from __future__ import annotations

import sys

import click


@click.command()
@click.argument("path", type=click.Path(dir_okay=False))
def textconv(path: str) -> None:
    """Print a stored CBOR payload or LangGraph value as readable text (used by git diff).

    Other input is printed unchanged.
    """
    from .textconv import convert

    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise click.FileError(path, hint=exc.strerror or str(exc)) from None
    sys.stdout.buffer.write(convert(data, path))
    sys.stdout.flush()
