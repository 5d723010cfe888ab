"""Plain-git readability: the idempotent setup that registers a textconv diff driver (the CLI's
``git agentos textconv``, which prints stored CBOR payloads as JSON) in the repository's own config
(``.git/config``) and attributes (``.git/info/attributes``), touching nothing else, so that
``git show``/``git log -p``/``git diff`` print checkpoints as readable state."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass

from gitstate.errors import StoreWriteError
from gitstate.git.location import Location

DRIVER = "agentos"
BEGIN = "# >>> gitstate (git agentos setup): decode checkpoint payloads"
END = "# <<< gitstate"
#: Paths inside checkpoint and run-record trees that hold CBOR payloads or LangGraph channel values.
#: Anchored at the tree root so a user's own files elsewhere are not affected (and a file that is
#: neither passes through unchanged).
PATTERNS = ("/meta.cbor", "/run.cbor", "/state.cbor", "/tools.cbor", "/audit.cbor", "/node.cbor", "/state/**/*.cbor",
            "/langgraph/*.v", "/langgraph/*.l/**", "/langgraph-writes.cbor")


def textconv_command() -> str:
    """The command git runs (it appends the file name): the absolute path of ``git-agentos``
    when it is on PATH, else this interpreter running the CLI module. Absolute, so ``git show``
    keeps working from shells, IDEs and CI jobs whose PATH lacks the virtual environment."""
    exe = shutil.which("git-agentos")
    if exe:
        return f"{shlex.quote(os.path.abspath(exe))} textconv"
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
