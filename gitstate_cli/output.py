"""Printing: JSON for machines (``--json``: sorted keys, two-space indent, one document), aligned
tables and short lines for people, colour only when stdout is a terminal, progress bars only on a
terminal."""

from __future__ import annotations

import json
import sys
import time
import unicodedata
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import click

from gitstate.format.encoding import big_int_stub, big_int_text, escape_surrogates, is_big_int


def _default(value: Any) -> Any:
    if isinstance(value, bytes):
        return {"$bytes": value.hex()}
    if isinstance(value, datetime):
        return value.isoformat()
    if hasattr(value, "to_dict"):
        return value.to_dict()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


_NON_FINITE = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}


def jsonable(value: Any) -> Any:
    """Stored data in the form every JSON output uses: map keys as text (``1`` becomes ``"1"``, so
    maps with both kinds of keys print too; a key whose text another key of the map already is
    shows its type: ``{1: "a", "1": "b"}`` prints as ``{"1 (int)": "a", "1": "b"}``), byte strings as ``{"$bytes": hex}``, non-finite
    floats as the strings ``"NaN"``, ``"Infinity"`` and ``"-Infinity"`` (strict JSON has no such
    numbers), integers as numbers, but one beyond the stored bound (``MAX_INT_BITS`` of
    :mod:`gitstate.format.encoding`: data from an earlier version or a crafted one) as the stub
    ``{"$bigint": bits, "hex": "0x1234…"}`` (its decimal form costs time quadratic in its size)."""
    if isinstance(value, int):
        return big_int_stub(value) if is_big_int(value) else value
    if isinstance(value, dict):
        return {name: jsonable(v) for name, v in zip(_key_names(list(value)), value.values(), strict=True)}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, bytes):
        return {"$bytes": value.hex()}
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return _NON_FINITE[repr(value)]
    return value


def _key_names(keys: list[Any]) -> list[str]:
    """Map keys as text, none lost: a non-text key whose text collides gets its type appended."""
    if all(type(k) is str for k in keys):
        return keys
    texts = {k for k in keys if type(k) is str}
    names: list[str] = []
    for k in keys:
        name = k if type(k) is str else big_int_text(k) if is_big_int(k) else str(k)
        if type(k) is not str and name in texts:
            name = f"{name} ({type(k).__name__})"
            while name in texts:
                name += "'"
        texts.add(name)
        names.append(name)
    return names


def dumps(value: Any) -> str:
    """The stable JSON form used by every ``--json`` output (see :func:`jsonable`); always valid,
    strict JSON, encodable as UTF-8 (a lone surrogate in stored text is written as its escape)."""
    return escape_surrogates(json.dumps(jsonable(value), indent=2, sort_keys=True, ensure_ascii=False,
                                        default=_default, allow_nan=False))


_JSON_PIECE = 1 << 14


def emit_json(value: Any) -> None:
    """Print one JSON document to stdout, in pieces well below a pipe's buffer: a reader that goes
    away mid-document then fails the next write (exit 141) instead of taking part of one write,
    which Python would not report."""
    text = dumps(value)
    for start in range(0, len(text), _JSON_PIECE):
        click.echo(text[start:start + _JSON_PIECE], nl=False)
    click.echo()


#: Set while output goes to a pager on a terminal (the pager shows colour: ``less -R``).
_PAGED = False


def set_paged(on: bool) -> None:
    """Say that stdout is a pager on a terminal (styles stay on although stdout is a pipe)."""
    global _PAGED
    _PAGED = on


def is_tty() -> bool:
    """Whether stdout is a terminal, or a pager on one (colour and progress bars only then)."""
    if _PAGED:
        return True
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False


#: The ``--json`` option every command has (the flag's value is the ``as_json`` parameter). On a
#: failure the entry point prints ``{"error": …}`` instead of the command's document.
json_option = click.option("--json", "as_json", is_flag=True,
                           help="Print JSON (shape above; on failure an {\"error\": …} object: git agentos help json).")


class Styled(str):
    """Text this module styled (its escape sequences are ours, not data's)."""


def style(text: str, **kwargs: Any) -> str:
    """``click.style`` on a terminal, plain text elsewhere."""
    return Styled(click.style(text, **kwargs)) if is_tty() else text


STATUS_COLOURS = {"completed": "green", "failed": "red", "running": "yellow", "interrupted": "magenta",
                  "stopped": "red", "saved": "cyan", "corrupt": "red"}


def status(text: str | None) -> str:
    """A status word, coloured by meaning on a terminal."""
    if not text:
        return "-"
    return style(safe(text), fg=STATUS_COLOURS.get(text))


def safe(text: str) -> str:
    """Text from the store (ids, branch and node names, metadata; possibly pulled from an untrusted
    remote) made safe for a terminal: control characters (escape sequences that could retitle the
    window or move the cursor, tabs, newlines) are shown as ``\\xNN``/``\\t``/``\\n``."""
    if text.isprintable():
        return text
    out = []
    for ch in text:
        if ch.isprintable():
            out.append(ch)
        elif ch in "\t\n\r":
            out.append({"\t": "\\t", "\n": "\\n", "\r": "\\r"}[ch])
        else:
            code = ord(ch)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
    return "".join(out)


def shell_arg(text: str) -> str:
    """``text`` quoted for a command line the user may copy (``undo with: git agentos undo ...``):
    ``shlex.quote`` when every character is printable, else bash's ``$'...'`` form with control
    characters as escapes, so a hostile id neither drives the terminal nor loses its meaning."""
    import shlex

    if text.isprintable():
        return shlex.quote(text)
    parts = []
    for ch in text:
        if ch in "\\'":
            parts.append("\\" + ch)
        elif ch.isprintable():
            parts.append(ch)
        else:
            code = ord(ch)
            parts.append({"\t": "\\t", "\n": "\\n", "\r": "\\r"}.get(ch)
                         or (f"\\x{code:02x}" if code < 0x80 else f"\\u{code:04x}" if code < 0x10000
                             else f"\\U{code:08x}"))
    return "$'" + "".join(parts) + "'"


def width(text: str) -> int:
    """Columns ``text`` takes on a terminal (wide East Asian characters take two; combining marks
    and other zero-width characters none)."""
    if "\x1b" in text:
        text = click.unstyle(text)
    if text.isascii():
        return len(text)
    return sum(_columns(ch) for ch in text)


def _columns(ch: str) -> int:
    if ch.isascii():
        return 1
    if unicodedata.combining(ch) or unicodedata.category(ch) in ("Mn", "Me", "Cf"):
        return 0
    return 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """Print an aligned table (widths ignore colour codes, count wide characters as two, and every
    cell is made safe for the terminal)."""
    cells = [[_cell(c) for c in row] for row in rows]
    sizes = [[width(c) for c in row] for row in cells]  # each cell measured once
    widths = [len(h) for h in headers]
    for row_sizes in sizes:
        for i, size in enumerate(row_sizes):
            if size > widths[i]:
                widths[i] = size
    head = "  ".join(h.upper().ljust(widths[i]) for i, h in enumerate(headers)).rstrip()
    click.echo(style(head, bold=True))
    piece: list[str] = []
    length = 0
    for row, row_sizes in zip(cells, sizes, strict=True):
        line = "  ".join(c + " " * (widths[i] - row_sizes[i]) for i, c in enumerate(row)).rstrip()
        piece.append(line)
        length += len(line) + 1
        if length >= _JSON_PIECE:  # lines go out in pieces, as JSON does: few writes, none too big
            click.echo("\n".join(piece))
            piece, length = [], 0
    if piece:
        click.echo("\n".join(piece))


def _cell(value: Any) -> str:
    if type(value) is str:
        return value if value.isprintable() else safe(value)
    if value is None:
        return "-"
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S")
    return value if isinstance(value, Styled) else safe(str(value))


def short(oid: str | None) -> str:
    """The 12-digit short form of an id."""
    return oid[:12] if oid else "-"


@contextmanager
def progress(label: str, length: int | None = None) -> Iterator[Callable[[int], None]]:
    """A progress callback for long work: a bar on a terminal (stderr) when the total is known, a
    running count when it is not; nothing at all in pipes."""
    if not is_tty() or not sys.stderr.isatty():
        yield lambda n: None
        return
    if length is None:
        with _counter(label) as count:
            yield count
        return
    bar: Any
    with click.progressbar(length=length, label=label, file=sys.stderr) as bar:
        yield bar.update


@contextmanager
def _counter(label: str) -> Iterator[Callable[[int], None]]:
    done = 0
    shown = 0.0

    def count(n: int) -> None:
        nonlocal done, shown
        done += n
        now = time.monotonic()
        if now - shown >= 0.1:  # redraw at most ten times a second
            shown = now
            sys.stderr.write(f"\r{label}: {done}")
            sys.stderr.flush()

    try:
        yield count
    finally:
        if shown:
            sys.stderr.write(f"\r{label}: {done}\n")
            sys.stderr.flush()


def readable(value: Any, depth: int = 0) -> Any:
    """``value`` for people (text output, the textconv): an integer beyond the stored bound
    (``MAX_INT_BITS`` of :mod:`gitstate.format.encoding`) is shown as ``"<integer of N bits:
    0x1234…>"``; everything else unchanged. (``--json`` shows it as a ``{"$bigint": …}`` stub.)"""
    if isinstance(value, int):
        return big_int_text(value) if is_big_int(value) else value
    if depth > 400 or not isinstance(value, dict | list | tuple):
        return value
    if isinstance(value, dict):
        return {k: readable(v, depth + 1) for k, v in value.items()}
    return [readable(v, depth + 1) for v in value]


_BAR = 30  # columns of a progress bar


@contextmanager
def phases(labels: dict[str, str]) -> Iterator[Callable[[str, int, int], None]]:
    """A ``progress(phase, done, total)`` callback (a restore's) drawing one line per phase on a
    terminal's stderr: a bar with ``done/total`` when the total is known, a running count when it
    is not (``total`` 0); redrawn at most ten times a second; nothing at all in pipes. ``labels``
    names the phases."""
    if not is_tty() or not sys.stderr.isatty():
        yield lambda phase, done, total: None
        return
    state: dict[str, Any] = {"phase": None, "shown": 0.0, "line": ""}

    def draw(phase: str, done: int, total: int) -> None:
        label = labels.get(phase, phase)
        if total > 0:
            filled = min(_BAR, _BAR * done // total)
            line = f"{label} [{'#' * filled}{'-' * (_BAR - filled)}] {done}/{total}"
        else:
            line = f"{label}: {done}"
        sys.stderr.write("\r" + line + " " * max(0, len(state["line"]) - len(line)))
        sys.stderr.flush()
        state["line"] = line

    def update(phase: str, done: int, total: int) -> None:
        now = time.monotonic()
        if phase != state["phase"]:
            if state["line"]:
                sys.stderr.write("\n")
                state["line"] = ""
            state["phase"] = phase
        elif now - state["shown"] < 0.1 and done != total:
            return
        state["shown"] = now
        draw(phase, done, total)

    try:
        yield update
    finally:
        if state["line"]:
            sys.stderr.write("\n")
            sys.stderr.flush()
