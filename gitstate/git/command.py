"""Running the ``git`` command: the one place gitstate starts it.

pygit2 covers most of what gitstate does; where git is run instead, the caller of :func:`run_git`
says why. Every run has ``LC_ALL=C``, so the little read from git's output is in one language;
failures are classified by exit code or by the repository afterwards, never by translated text.

gitstate needs git :data:`MIN_GIT_VERSION` or newer (negative refspecs and
``fetch --no-write-fetch-head`` arrived in 2.29; ``--no-auto-maintenance`` in 2.29 too).
:func:`check_git_version` says so in one clear line when the installed git is older or missing."""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from typing import IO

from gitstate.errors import GitVersionError
from gitstate.git import safeopen

MIN_GIT_VERSION = (2, 29)


def git_environment(git_dir: str | None = None, work_tree: str | None = None,
                    extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for a git command: the caller's, with ``LC_ALL=C``, no inherited
    ``GIT_DIR``/``GIT_WORK_TREE``/``GIT_INDEX_FILE``, and the given repository, if any."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_COMMON_DIR", "LANGUAGE")}
    env["LC_ALL"] = "C"
    if git_dir is not None:
        env["GIT_DIR"] = git_dir
    if work_tree is not None:
        env["GIT_WORK_TREE"] = work_tree
    if extra:
        env.update(extra)
    return env


def run_git(git_dir: str | None, args: Sequence[str], *, cwd: str | None = None, work_tree: str | None = None,
            stdin: str | bytes | None = None, text: bool = True, env: Mapping[str, str] | None = None,
            stdout: int | None = None, stdin_file: IO[bytes] | None = None,
            check_version: bool = True) -> subprocess.CompletedProcess[str]:
    """Run ``git args`` on the repository at ``git_dir`` (``None``: the one around ``cwd``) and
    return the completed process (never raises for a non-zero exit; callers classify it).
    ``stdin_file``: an open file git reads from where it stands (instead of ``stdin``).
    ``check_version=False``: no :func:`check_git_version` first (it may start ``git --version``),
    for a command any supported git runs alike whose caller checks the version when it fails."""
    if check_version:
        check_git_version()
    kwargs: dict[str, object] = {}
    if stdin_file is not None:
        kwargs["stdin"] = stdin_file
    if stdout is not None:
        kwargs["stdout"] = stdout
        kwargs["stderr"] = subprocess.PIPE
    else:
        kwargs["capture_output"] = True
    try:
        return subprocess.run(["git", *args], cwd=cwd or git_dir, input=stdin, text=text, check=False,
                              env=git_environment(git_dir, work_tree, env), **kwargs)  # type: ignore[call-overload]
    except OSError as exc:
        raise GitVersionError(f"cannot run git: {exc}") from exc


class StreamingGit:
    """A running ``git`` whose stdout is read as it comes (:func:`popen_git`); after the block,
    ``returncode`` and ``error`` (the telling line of its stderr, :func:`last_line`) are set."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self.stdout: IO[bytes] | None = proc.stdout
        self.returncode: int | None = None
        self.error = ""


@contextlib.contextmanager
def popen_git(git_dir: str | None, args: Sequence[str], *, cwd: str | None = None) -> Iterator[StreamingGit]:
    """Start ``git args`` on the repository at ``git_dir`` with its stdout a pipe to read from (for
    output too large to hold: a big blob); stderr goes to a temporary file, so a chatty git never
    blocks. Leaving the block waits for git (killing it when the block raised)."""
    check_git_version()
    with tempfile.TemporaryFile() as err:
        try:
            proc = subprocess.Popen(["git", *args], cwd=cwd or git_dir, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=err, env=git_environment(git_dir))
        except OSError as exc:
            raise GitVersionError(f"cannot run git: {exc}") from exc
        running = StreamingGit(proc)
        try:
            yield running
        except BaseException:
            proc.kill()
            raise
        finally:
            if proc.stdout is not None:
                proc.stdout.close()
            running.returncode = proc.wait()
            err.seek(0)
            running.error = last_line(err.read(1 << 16))


def last_line(stderr: str | bytes | None) -> str:
    """The most telling line of git's stderr (a ``fatal:``/``error:`` line if there is one)."""
    text = stderr.decode("utf-8", "replace") if isinstance(stderr, bytes) else (stderr or "")
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in reversed(lines):
        if ln.startswith(("fatal:", "error:")):
            return ln
    return lines[-1] if lines else ""


@functools.cache
def git_version() -> tuple[int, ...]:
    """The installed git's version, e.g. ``(2, 39, 5)`` (asks ``git --version`` once per process)."""
    try:
        out = subprocess.run(["git", "--version"], capture_output=True, text=True, check=False,
                             env={**os.environ, "LC_ALL": "C"})
    except OSError as exc:
        raise GitVersionError(f"git is not installed or not on PATH ({exc}); gitstate needs git "
                              f"{'.'.join(map(str, MIN_GIT_VERSION))} or newer") from exc
    found = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", out.stdout)
    if out.returncode != 0 or found is None:
        raise GitVersionError(f"cannot tell the version of git from {out.stdout.strip()!r}")
    return tuple(int(p) for p in found.groups() if p is not None)


def check_git_version(cache: str | None = None) -> None:
    """Raise :class:`GitVersionError` unless git :data:`MIN_GIT_VERSION` or newer is installed.

    With ``cache`` (a file path) the version is remembered there for the ``git`` executable as it
    is now (its resolved path, inode, size and mtime), so the next process to open the store
    needs no ``git --version`` (a process start on every ``git agentos`` command); another or a
    changed executable is asked again. The cache is advisory: unreadable or unwritable, git is asked."""
    if cache is not None:
        have = _cached_version(cache)
    else:
        have = _remembered[0] if _remembered else git_version()
    if have[:2] < MIN_GIT_VERSION:
        raise GitVersionError(
            f"git {'.'.join(map(str, have))} is too old: gitstate needs git "
            f"{'.'.join(map(str, MIN_GIT_VERSION))} or newer (negative refspecs, fetch --no-write-fetch-head)")


#: The version a cache file gave this process (then no check of this process starts git).
_remembered: list[tuple[int, ...]] = []


def forget_git_version() -> None:
    """Forget what this process knows of git's version (the next check asks again, or the cache)."""
    git_version.cache_clear()
    _remembered.clear()


def _executable_key() -> str | None:
    """Who ``git`` is on PATH now (the one :func:`run_git` starts): resolved path, inode, size and
    mtime, tab-separated; ``None`` when there is none (asking git then raises the clear error)."""
    found = shutil.which("git")
    if found is None:
        return None
    try:
        real = os.path.realpath(found)
        st = os.stat(real)
    except OSError:
        return None
    if "\t" in real or "\n" in real:
        return None
    return f"{real}\t{st.st_ino}\t{st.st_size}\t{st.st_mtime_ns}"


def _cached_version(cache: str) -> tuple[int, ...]:
    if git_version.cache_info().currsize:  # asked already in this process
        return git_version()
    key = _executable_key()
    if key is None:
        return git_version()
    try:
        with safeopen.open_file(cache, encoding="utf-8") as fh:  # a FIFO there never blocks
            line = fh.readline(4096)
        stored_key, _, text = line.rpartition("\t")
        # a whole line only: a write cut short (or raced by another process) is never taken
        if stored_key == key and re.fullmatch(r"\d{1,9}(\.\d{1,9}){1,2}\n", text):
            _remembered[:] = [tuple(int(p) for p in text.rstrip("\n").split("."))]  # run_git's checks too
            return _remembered[0]
    except (OSError, UnicodeDecodeError):
        pass
    version = git_version()
    # One write in place, no temporary file: a process killed meanwhile leaves nothing behind but
    # a line the next reader does not take; processes racing write lines that each stand alone.
    # O_NOFOLLOW: a symbolic link put in the cache's place is never written (nor its target cut);
    # a FIFO, device or socket there is replaced (opening it would block, or write elsewhere).
    try:
        fd = safeopen.open_fd(cache, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666, follow=False,
                              replace_special=True)
    except OSError:  # no private folder yet, a read-only repository, or a link: ask again next time
        return version
    try:
        os.write(fd, f"{key}\t{'.'.join(map(str, version))}\n".encode())
    except OSError:
        pass
    finally:
        os.close(fd)
    return version


def configured_pager(git_dir: str | None, cwd: str | None = None) -> str:
    """The pager git would use in this repository, by git's own rules (``git var GIT_PAGER``:
    ``GIT_PAGER``, then ``core.pager``, then ``PAGER``, else ``less``); ``""`` when that is none
    (an empty value or ``cat``). Falls back to the environment alone when git cannot say."""
    try:
        out = run_git(git_dir, ["var", "GIT_PAGER"], cwd=cwd)
        pager = out.stdout.strip() if out.returncode == 0 else ""
    except GitVersionError:
        pager = ""
    if not pager:
        pager = os.environ.get("GIT_PAGER", os.environ.get("PAGER", "less"))
    return "" if pager.strip() in ("", "cat") else pager


#: What git puts in a pager's environment unless the user set it (git's PAGER_ENV).
PAGER_ENV = {"LESS": "FRX", "LV": "-c"}
