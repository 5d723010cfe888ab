"""Plain-git readability: the textconv that turns stored CBOR payloads into readable JSON text for
``git show``/``git log -p``/``git diff``, and the idempotent setup that registers it in the
repository's own config (``.git/config``) and attributes (``.git/info/attributes``) only."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

from .errors import StoreWriteError
from .location import Location

DRIVER = "agentos"
BEGIN = "# >>> gitstate (git agentos setup): decode checkpoint payloads"
END = "# <<< gitstate"
#: Paths inside checkpoint and run-record trees that hold CBOR payloads. Anchored at the tree
#: root so a user's own files elsewhere are not affected (and a non-CBOR file passes through).
PATTERNS = ("/meta.cbor", "/run.cbor", "/state.cbor", "/tools.cbor", "/audit.cbor", "/state/**/*.cbor")


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes):
        return {"$bytes": value.hex()}
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def textconv(data: bytes) -> bytes:
    """Readable text for one stored blob: its CBOR decoded (safely, no tags) as indented JSON with
    sorted keys; anything that is not gitstate CBOR is returned unchanged."""
    from . import encoding
    from .errors import CorruptObjectError

    try:
        value = encoding.loads(data)
    except CorruptObjectError:
        return data
    text = json.dumps(_jsonable(value), indent=2, sort_keys=True, ensure_ascii=False, allow_nan=True)
    return (text + "\n").encode("utf-8")


def textconv_command() -> str:
    """The command git runs (it appends the file name): ``git-agentos textconv`` when that is on
    PATH, else this interpreter running the CLI module."""
    exe = shutil.which("git-agentos")
    if exe:
        return "git-agentos textconv"
    return f"{shlex.quote(sys.executable)} -m gitstate_cli textconv"


@dataclass(frozen=True)
class SetupResult:
    """What :func:`setup` changed (both ``False`` when it was already configured)."""

    config_changed: bool
    attributes_changed: bool
    config_path: str
    attributes_path: str
    command: str


def _git_config(config: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    return subprocess.run(["git", "config", "--file", config, *args], capture_output=True, text=True,
                          env=env, check=False)


def setup(location: Location, command: str | None = None) -> SetupResult:
    """Register the textconv driver (idempotent). Writes ``diff.agentos.textconv`` into the
    repository's ``config`` and a marked block of patterns into ``info/attributes``; nothing else."""
    command = command or textconv_command()
    config = os.path.join(location.common_dir, "config")
    current = _git_config(config, "--get", f"diff.{DRIVER}.textconv")
    config_changed = current.returncode != 0 or current.stdout.strip() != command
    if config_changed:
        done = _git_config(config, f"diff.{DRIVER}.textconv", command)
        if done.returncode != 0:
            raise StoreWriteError(config, done.stderr.strip() or "git config failed")
    info = os.path.join(location.common_dir, "info")
    attributes = os.path.join(info, "attributes")
    block = "\n".join([BEGIN, *(f"{p} diff={DRIVER}" for p in PATTERNS), END]) + "\n"
    try:
        with open(attributes, encoding="utf-8") as fh:
            text = fh.read()
    except FileNotFoundError:
        text = ""
    except OSError as exc:
        raise StoreWriteError(attributes, str(exc)) from exc
    if BEGIN in text and END in text:
        start = text.index(BEGIN)
        stop = text.index(END, start) + len(END)
        stop += 1 if text[stop:stop + 1] == "\n" else 0
        new_text = text[:start] + block + text[stop:]
    else:
        new_text = text + ("" if not text or text.endswith("\n") else "\n") + block
    attributes_changed = new_text != text
    if attributes_changed:
        try:
            os.makedirs(info, exist_ok=True)
            tmp = attributes + ".gitstate-tmp"
            with open(tmp, "w", encoding="utf-8") as fh:
                fh.write(new_text)
            os.replace(tmp, attributes)
        except OSError as exc:
            raise StoreWriteError(attributes, str(exc)) from exc
    return SetupResult(config_changed, attributes_changed, config, attributes, command)


def main_textconv(path: str) -> None:
    """Entry for the textconv command: write the converted file to stdout."""
    with open(path, "rb") as fh:
        data = fh.read()
    sys.stdout.buffer.write(textconv(data))
