"""The git version check: asked of the ``git`` on PATH, remembered per executable in the store's
private folder so a new process opening the store starts no ``git --version``."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import bounded

from gitstate.errors import GitVersionError
from gitstate.git.command import check_git_version, forget_git_version

REAL_GIT = shutil.which("git")


def fake_git(folder: Path, version: str | None = None) -> Path:
    """A ``git`` on PATH that logs each call; it answers ``--version`` itself when given a version,
    and hands everything else to the real git."""
    folder.mkdir(parents=True, exist_ok=True)
    log = folder / "calls.log"
    answer = f'if [ "$1" = "--version" ]; then echo "git version {version}"; exit 0; fi\n' if version else ""
    script = folder / "git"
    script.write_text(f'#!/bin/sh\necho "$*" >> "{log}"\n{answer}exec "{REAL_GIT}" "$@"\n')
    script.chmod(0o755)
    return log


def calls(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


@pytest.fixture
def fresh() -> Iterator[None]:
    forget_git_version()  # each check below is a new process as far as the check can tell
    yield
    forget_git_version()


def test_version_is_asked_once_per_executable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh: None) -> None:
    log = fake_git(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    cache = tmp_path / "git-version"
    check_git_version(str(cache))
    assert calls(log) == ["--version"] and cache.read_text().startswith(str(tmp_path / "bin" / "git") + "\t")
    forget_git_version()
    check_git_version(str(cache))
    assert calls(log) == ["--version"]  # remembered
    script = tmp_path / "bin" / "git"
    st = script.stat()
    os.utime(script, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))  # git upgraded in place
    forget_git_version()
    check_git_version(str(cache))
    assert calls(log) == ["--version", "--version"]
    whole = cache.read_text()
    cache.write_text(whole[:-3])  # a write cut short: "…\t2.4" of "…\t2.45.1" would read as too old
    forget_git_version()
    check_git_version(str(cache))
    assert len(calls(log)) == 3 and cache.read_text() == whole
    cache.write_text("garbage\tgarbage\n")
    forget_git_version()
    check_git_version(str(cache))
    assert len(calls(log)) == 4 and cache.read_text() == whole


def test_too_old_git_is_refused_whatever_the_cache_says(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        fresh: None) -> None:
    cache = tmp_path / "git-version"
    check_git_version(str(cache))  # the real git, remembered
    assert cache.exists()
    fake_git(tmp_path / "old", version="2.20.1")
    monkeypatch.setenv("PATH", f"{tmp_path / 'old'}{os.pathsep}{os.environ['PATH']}")
    forget_git_version()
    with pytest.raises(GitVersionError, match="2.20.1 is too old"):
        check_git_version(str(cache))
    forget_git_version()
    with pytest.raises(GitVersionError, match="too old"):  # and remembered as too old
        check_git_version(str(cache))


def test_unwritable_cache_still_checks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh: None) -> None:
    log = fake_git(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    missing = tmp_path / "no-such-folder" / "git-version"
    for _ in range(2):
        forget_git_version()
        check_git_version(str(missing))
    assert calls(log) == ["--version", "--version"] and not missing.parent.exists()


def test_cache_never_written_through_a_symbolic_link(tmp_path: Path, fresh: None) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("the user's own file\n")
    cache = tmp_path / "git-version"
    cache.symlink_to(victim)  # planted in the store's private folder
    for _ in range(2):
        forget_git_version()
        check_git_version(str(cache))  # still checks git
    assert victim.read_text() == "the user's own file\n" and cache.is_symlink()


def test_a_fifo_in_the_caches_place_never_blocks_and_is_replaced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  fresh: None) -> None:
    log = fake_git(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    cache = tmp_path / "git-version"
    os.mkfifo(cache)  # reading it (or writing it) would wait for ever for the other end
    bounded(lambda: check_git_version(str(cache)), 10)
    assert calls(log) == ["--version"] and cache.is_file()  # asked git, then made the cache anew
    forget_git_version()
    bounded(lambda: check_git_version(str(cache)), 10)
    assert calls(log) == ["--version"]  # remembered from then on


def test_opening_a_store_starts_no_git_version_once_remembered(repo: Path, tmp_path: Path) -> None:
    """Each opening process asks git where the repository is (one `git rev-parse`), and no
    `git --version` once the version is remembered in the store's private folder."""
    log = fake_git(tmp_path / "bin")
    env = dict(os.environ, PATH=f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    code = "import sys, gitstate\ngitstate.open_store(sys.argv[1]).close()\n"
    where = "rev-parse --absolute-git-dir --git-common-dir --show-toplevel"
    for _ in range(3):
        subprocess.run([sys.executable, "-c", code, str(repo)], env=env, check=True)
    assert calls(log) == [where, "--version"] * 3  # a store never written to has no private folder: asked each time
    (repo / ".git" / "agentos").mkdir()
    for _ in range(3):
        subprocess.run([sys.executable, "-c", code, str(repo)], env=env, check=True)
    assert calls(log) == [where, "--version"] * 4 + [where] * 2
    assert (repo / ".git" / "agentos" / "git-version").read_text().count("\t") == 4
    code = ("import sys, gitstate\nfrom gitstate.git.command import run_git\n"
            "store = gitstate.open_store(sys.argv[1])\nrun_git(store.location.git_dir, ['rev-parse', 'HEAD'])\n")
    subprocess.run([sys.executable, "-c", code, str(repo)], env=env, check=True)
    assert calls(log)[-2:] == [where, "rev-parse HEAD"]  # the remembered version serves run_git too
    assert "--version" not in calls(log)[8:]
