"""What every command shares: the store on ``ctx.obj`` (opened on first use, as git would find
it), reading ``--state`` input, and ``KEY=VALUE`` metadata. Imported only by command modules."""

from __future__ import annotations

import json
import os
import stat
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

import gitstate
from gitstate.store import refspec

from . import output as out
from .handle import StoreHandle

F = TypeVar("F", bound=Callable[..., Any])


def pass_store(f: F) -> F:
    """Decorator: call the command with the open store as its first argument."""
    import functools

    @click.pass_context
    @functools.wraps(f)
    def wrapper(ctx: click.Context, *args: Any, **kwargs: Any) -> Any:
        handle = ctx.find_object(StoreHandle)
        if handle is None:  # invoked outside the group (tests calling a command directly)
            handle = StoreHandle()
            ctx.call_on_close(handle.close)
            ctx.obj = handle
        return ctx.invoke(f, handle.store, *args, **kwargs)

    return wrapper  # type: ignore[return-value]


def get_run(store: gitstate.Store, text: str) -> gitstate.Run:
    """The run a RUN argument names: an exact run id of this worktree, else the run of a
    ``RUN@BRANCH`` reference (``RunNotFound`` otherwise)."""
    if store.has_run(text):
        return store.get_run(text)
    return store.get_run(refspec.locate_branch(store, text).run)


def resolve(store: gitstate.Store, text: str) -> gitstate.Checkpoint:
    """A REF argument (see ``git agentos help refs``) as a checkpoint."""
    return refspec.resolve(store, text)


def _check_branch(loc: refspec.Located, option: str | None) -> None:
    if option is not None and loc.named_branch and option != loc.branch:
        raise click.UsageError(f"the reference names branch {out.safe(loc.branch)!r} but --branch says "
                               f"{out.safe(option)!r}; give one of them")


def locate(store: gitstate.Store, text: str, branch: str | None = None) -> refspec.Located:
    """A REF argument as run, branch and checkpoint (``--branch`` applies when REF names none; without
    it, the run's default branch: main, a LangGraph thread's latest line)."""
    loc = refspec.locate(store, text, branch)
    _check_branch(loc, branch)
    return loc


def locate_branch(store: gitstate.Store, text: str, branch: str | None = None, *,
                  create: bool = False, read_tip: bool = True, moved: bool = False) -> refspec.Located:
    """A ``RUN`` or ``RUN@BRANCH`` argument (``--branch`` applies to a bare RUN; without it, the
    run's default branch, or with ``moved`` (undo) the line that moved last)."""
    loc = refspec.locate_branch(store, text, branch, create=create, read_tip=read_tip, moved=moved)
    _check_branch(loc, branch)
    return loc


class PathParam(click.Path):
    """``click.Path`` for file system paths given on the command line: an empty one (``''``) is a
    usage error naming the option or argument, as git refuses an empty pathspec (it would
    otherwise stand for the current directory, or for no path at all). With ``in_existing_dir``
    (a file the command writes) the directory it goes in must exist."""

    def __init__(self, *, in_existing_dir: bool = False, empty_hint: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.in_existing_dir = in_existing_dir
        self.empty_hint = empty_hint

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str | bytes) and not value:
            self.fail(f"the path is empty{self.empty_hint}", param, ctx)
        path = super().convert(value, param, ctx)
        if self.in_existing_dir:
            parent = os.path.dirname(os.path.abspath(os.fsdecode(path)))
            if not os.path.isdir(parent):
                why = "is not a directory" if os.path.exists(parent) else "does not exist"
                self.fail(f"cannot write {os.fsdecode(path)!r}: {parent!r} {why}", param, ctx)
        return path


#: The most ``--state`` reads (JSON or CBOR); more is refused before it is read whole.
MAX_STATE_BYTES = 256 << 20


def _too_big(source: str) -> str:
    return f"{source} holds more than {MAX_STATE_BYTES >> 20} MiB: too large for --state"


def _read_bounded(read: Callable[[int], bytes], source: str) -> bytes:
    """All that ``read(n)`` gives (a file, pipe or terminal), refused past :data:`MAX_STATE_BYTES`."""
    parts: list[bytes] = []
    size = 0
    while chunk := read(1 << 20):
        size += len(chunk)
        if size > MAX_STATE_BYTES:
            raise click.BadParameter(_too_big(source), param_hint="'--state'")
        parts.append(chunk)
    return b"".join(parts)


def read_state(source: str) -> Any:
    """Read ``--state``: a path or ``-`` (stdin); JSON, or CBOR when the path ends in ``.cbor``."""
    if not source:
        raise click.BadParameter("the path is empty (give a file, or - for stdin)", param_hint="'--state'")
    is_cbor = source.endswith(".cbor")
    try:
        if source == "-":
            data = _read_bounded(sys.stdin.buffer.read, source)
        else:
            # O_NONBLOCK: a FIFO nobody writes to is read as empty instead of blocking the open
            fd = os.open(os.path.expanduser(source), os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
            try:
                mode = os.fstat(fd).st_mode
                if stat.S_ISDIR(mode) or stat.S_ISBLK(mode) or (stat.S_ISCHR(mode) and not os.isatty(fd)):
                    # /dev/zero would be read until memory runs out; a pipe (<(cmd)) or a terminal is fine
                    kind = "a directory" if stat.S_ISDIR(mode) else "a device"
                    raise click.BadParameter(f"cannot read {source}: it is {kind}, not a file",
                                             param_hint="'--state'")
                if stat.S_ISREG(mode) and os.fstat(fd).st_size > MAX_STATE_BYTES:
                    raise click.BadParameter(_too_big(source), param_hint="'--state'")
                os.set_blocking(fd, True)  # a pipe with a writer is read to its end
                data = _read_bounded(lambda n: os.read(fd, n), source)
            finally:
                os.close(fd)
    except OSError as exc:  # a usage error like the others (exit 2), naming the file
        raise click.BadParameter(f"cannot read {source}: {exc.strerror or exc}", param_hint="'--state'") from None
    if is_cbor:
        from gitstate.format import encoding

        try:
            return encoding.loads(data, source)
        except gitstate.GitStateError as exc:
            raise click.BadParameter(f"{source}: {exc}", param_hint="'--state'") from None
    try:
        return json.loads(data.decode("utf-8-sig"))
    except UnicodeDecodeError as exc:  # JSON is UTF-8 text (RFC 8259)
        raise click.BadParameter(f"{source} is not valid JSON: byte {exc.start + 1} is not UTF-8 text",
                                 param_hint="'--state'") from None
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"{source} is not valid JSON: {exc}", param_hint="'--state'") from None
    except ValueError:  # an integer of more digits than Python converts (4,300): never storable
        raise click.BadParameter(f"{source} holds an integer too large to store", param_hint="'--state'") from None
    except RecursionError:  # json's decoder recurses per level: thousands of '[' exhaust the stack
        raise click.BadParameter(f"{source}: JSON nested too deeply to read", param_hint="'--state'") from None


def parse_meta(pairs: tuple[str, ...]) -> dict[str, Any]:
    """``--meta KEY=VALUE`` pairs as a dict; a VALUE that parses as JSON is stored as that value
    (``n=3`` stores the number 3, ``tags=["a"]`` a list), anything else as the string."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"expected KEY=VALUE, got {pair!r}", param_hint="'--meta'")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
        except ValueError:  # an integer of more digits than Python converts (4,300): never storable
            raise click.BadParameter(f"the value of {key!r} holds an integer too large to store",
                                     param_hint="'--meta'") from None
        except RecursionError:
            raise click.BadParameter(f"the value of {key!r} is JSON nested too deeply to read",
                                     param_hint="'--meta'") from None
    return out
