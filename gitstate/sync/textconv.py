"""Plain-git readability, for ``git agentos setup``: the idempotent setup that registers a textconv diff driver (the CLI's
``git agentos textconv``, which prints stored CBOR payloads as JSON) in the repository's own config
(``.git/config``) and attributes (``.git/info/attributes``), touching nothing else, so that
``git show``/``git log -p``/``git diff`` print checkpoints as readable state."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
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


#: Marks the driver command ``setup`` writes (a no-op ``:`` command at its start), so ``--check``
#: and a later ``setup`` know it from an older absolute-path command or the user's own.
DRIVER_MARK = ": gitstate-textconv v2"


def textconv_command(executable: str | None = None) -> str:
    """The command git runs (it appends the file name): a small ``sh`` driver that finds the
    converter when git runs it, not when ``setup`` ran, so deleting or moving a virtual
    environment never breaks ``git show``. In order: ``git-agentos`` on PATH; the ``git-agentos``
    that ran ``setup`` (``executable``, else the one on PATH at setup time: an absolute path, for
    shells, IDEs and CI jobs whose PATH lacks the virtual environment), if it still exists;
    ``python3 -m gitstate_cli`` if that interpreter has gitstate; else the payload as it is
    (``cat``: raw CBOR, as without ``setup``)."""
    exe = executable or shutil.which("git-agentos")
    known = f"[ -x {shlex.quote(os.path.abspath(exe))} ] && exec {shlex.quote(os.path.abspath(exe))} textconv \"$1\"; " \
        if exe else ""
    script = (f"{DRIVER_MARK}; command -v git-agentos >/dev/null 2>&1 && exec git-agentos textconv \"$1\"; "
              f"{known}python3 -c 'import gitstate_cli' >/dev/null 2>&1 && exec python3 -m gitstate_cli textconv \"$1\"; "
              "exec cat \"$1\"")
    return f"sh -c {shlex.quote(script)} agentos-textconv"


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
    block = _attributes_block()
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


#: A small CBOR payload ({"check": "ok"}) and what the converter prints for it.
_SAMPLE = b"\xa1echeckbok"
_SAMPLE_TEXT = '"check": "ok"'


@dataclass(frozen=True)
class SetupCheck:
    """Whether plain-git readability works here: ``textconv`` is ``ok`` (decodes), ``raw`` (runs
    but prints payloads undecoded: no converter found), ``broken`` (fails: ``git show`` of a
    checkpoint errors), ``missing`` (not set up) or ``foreign`` (``diff.agentos.textconv`` is set
    to a command ``setup`` did not write, and it does not decode); ``command`` is the configured
    value; ``detail`` says why; ``attributes`` is ``ok``, ``missing`` or ``outdated`` (the marked
    block differs from what ``setup`` writes)."""

    textconv: str
    command: str | None
    detail: str
    attributes: str
    config_path: str
    attributes_path: str

    @property
    def ok(self) -> bool:
        """True when ``git show`` prints checkpoints decoded."""
        return self.textconv == "ok" and self.attributes == "ok"


def _attributes_block() -> str:
    return "\n".join([BEGIN, *(f"{p} diff={DRIVER}" for p in PATTERNS), END]) + "\n"


def check(location: Location, timeout: float = 20.0) -> SetupCheck:
    """Check what :func:`setup` configures, without changing anything: run the configured
    textconv on a small payload as git would (through ``sh``, the file name appended) and look
    for the marked block in ``info/attributes``."""
    config = os.path.join(location.common_dir, "config")
    attributes = os.path.join(location.common_dir, "info", "attributes")
    current = _git_config(config, "--get", f"diff.{DRIVER}.textconv")
    command = current.stdout.strip() if current.returncode == 0 and current.stdout.strip() else None
    try:
        with open(attributes, encoding="utf-8") as fh:
            text = fh.read()
    except OSError:
        text = ""
    if BEGIN in text and END in text:
        start = text.index(BEGIN)
        block = text[start:text.index(END, start) + len(END)] + "\n"
        attrs = "ok" if block == _attributes_block() else "outdated"
    else:
        attrs = "missing"
    if command is None:
        return SetupCheck("missing", None, "diff.agentos.textconv is not set (run: git agentos setup)", attrs,
                          config, attributes)
    state, detail = _try_textconv(command, timeout)
    if state != "ok" and DRIVER_MARK not in command:
        state = "foreign" if state == "raw" else state
    return SetupCheck(state, command, detail, attrs, config, attributes)


def _try_textconv(command: str, timeout: float) -> tuple[str, str]:
    import tempfile

    with tempfile.TemporaryDirectory(prefix="gitstate-check-") as tmp:
        sample = os.path.join(tmp, "state.cbor")
        with open(sample, "wb") as fh:
            fh.write(_SAMPLE)
        env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
        try:
            # as git runs a textconv: through the shell, with the file name appended
            done = subprocess.run(["sh", "-c", f'{command} "$@"', command, sample], capture_output=True,
                                  env=env, timeout=timeout, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return "broken", f"the textconv could not run: {exc}"
    output = done.stdout.decode("utf-8", "replace")
    if done.returncode != 0:
        why = done.stderr.decode("utf-8", "replace").strip().splitlines()
        return "broken", (f"the textconv exits {done.returncode}" + (f": {why[-1]}" if why else "")
                          + "; git show of a checkpoint fails (run: git agentos setup)")
    if _SAMPLE_TEXT in output:
        return "ok", "decodes payloads"
    if done.stdout == _SAMPLE:
        return "raw", ("runs, but finds no converter (git-agentos not on PATH, python3 without gitstate): "
                       "payloads show as raw CBOR")
    return "broken", "the textconv runs but does not print the payload decoded"
