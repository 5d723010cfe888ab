"""What every command shares: the store on ``ctx.obj`` (opened on first use, as git would find
it), reading ``--state`` input, and ``KEY=VALUE`` metadata. Imported only by command modules."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

import gitstate
from gitstate.store import refspec

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


def get_run(store: gitstate.Store, run_id: str) -> gitstate.Run:
    """The run of that id in this worktree (``RunNotFound`` otherwise)."""
    return store.get_run(run_id)


def resolve(store: gitstate.Store, text: str) -> gitstate.Checkpoint:
    """A REF argument (see ``git agentos --help``) as a checkpoint."""
    return refspec.resolve(store, text)


def read_state(source: str) -> Any:
    """Read ``--state``: a path or ``-`` (stdin); JSON, or CBOR when the path ends in ``.cbor``."""
    is_cbor = source.endswith(".cbor")
    try:
        if source == "-":
            data = sys.stdin.buffer.read()
        else:
            with open(os.path.expanduser(source), "rb") as fh:
                data = fh.read()
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
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise click.BadParameter(f"{source} is not valid JSON: {exc}", param_hint="'--state'") from None


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
    return out
