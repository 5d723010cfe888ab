"""Shared fixtures: every test runs against fresh repositories in a temp dir with a scrubbed git
environment (no user config, fixed identities), so results never depend on the machine."""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import gitstate

# Test modules of one folder import helpers from another's (e.g. tests/sync from tests/cli): every
# folder is importable whichever tests are selected, as when the whole suite is collected.
for _folder in sorted(Path(__file__).resolve().parent.iterdir()):
    if _folder.is_dir() and any(_folder.glob("test_*.py")) and str(_folder) not in sys.path:
        sys.path.append(str(_folder))

_SCRUB = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY", "GIT_COMMON_DIR",
          "GIT_CEILING_DIRECTORIES", "AGENTOS_REPO", "GIT_CONFIG", "GIT_CONFIG_GLOBAL")
_FIXED = {"GIT_AUTHOR_NAME": "Test Author", "GIT_AUTHOR_EMAIL": "author@example.com",
          "GIT_COMMITTER_NAME": "Test Committer", "GIT_COMMITTER_EMAIL": "committer@example.com",
          "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z"}


def scrub_git_env(monkeypatch: pytest.MonkeyPatch, home: Path) -> None:
    """Set the environment every test runs in: no git variables or user config (``HOME`` is
    ``home``), fixed identities and dates. Also for fixtures wider than one test."""
    for name in _SCRUB:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for name, value in _FIXED.items():
        monkeypatch.setenv(name, value)


@pytest.fixture(autouse=True)
def clean_git_env(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    scrub_git_env(monkeypatch, tmp_path_factory.mktemp("home"))


def git(cwd: str | os.PathLike[str], *args: str, check: bool = True) -> str:
    """Run real git and return its stdout."""
    out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if check and out.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed: {out.stderr}")
    return out.stdout


_TEMPLATE: list[Path] = []  # the repository make_repo copies, made once per test process


def _template() -> Path:
    if not _TEMPLATE:
        path = Path(tempfile.mkdtemp(prefix="gitstate-template-")) / "repo"
        atexit.register(shutil.rmtree, path.parent, True)
        path.mkdir()
        env = {k: v for k, v in os.environ.items() if k not in _SCRUB and not k.startswith("GIT_")}
        env.update(_FIXED, HOME=str(path.parent), GIT_CONFIG_NOSYSTEM="1")  # whatever the first test set
        for args in (["init", "-q", "-b", "main"], ["add", "README"], ["commit", "-q", "-m", "initial"]):
            if args[0] == "add":
                (path / "README").write_text("hello\n")
            subprocess.run(["git", *args], cwd=path, env=env, check=True, capture_output=True)
        _TEMPLATE.append(path)
    return _TEMPLATE[0]


def agentos_process(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``git agentos ARGS`` in ``cwd`` as a user would (the command of this interpreter's
    environment first on PATH); never a traceback on stderr."""
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    done = subprocess.run(["git", "agentos", *args], cwd=cwd, capture_output=True, text=True, env=env,
                          timeout=120, check=False)
    assert "Traceback" not in done.stderr, (args, done.stderr)
    return done


def make_repo(path: Path) -> Path:
    """A fresh repository with one commit on ``main`` and a tracked file: a copy of one made with
    ``git init/add/commit`` once per test process, its index refreshed (the scrubbed environment fixes identities and
    dates, so every copy holds the same commit a fresh one would)."""
    shutil.copytree(_template(), path, symlinks=True, dirs_exist_ok=True)
    git(path, "update-index", "-q", "--refresh")  # the copy's stat data, as a user's git would write it
    return path


def packs_only(path: Path) -> Path:
    """Make every gitstate write in ``path`` one pack (``agentos.looseObjects 0``: no small write
    is written loose), for tests whose subject is transaction packs."""
    git(path, "config", "agentos.looseObjects", "0")
    return path


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """Path of a fresh repository (one commit on main)."""
    return make_repo(tmp_path / "repo")


@pytest.fixture
def store(repo: Path) -> Iterator[gitstate.Store]:
    """A store on the fresh repository."""
    s = gitstate.open_store(repo)
    yield s
    s.close()


def user_snapshot(repo: Path) -> dict[str, object]:
    """What belongs to the user: HEAD, index bytes, refs/heads and tags, config, status."""
    gitdir = repo / ".git"
    return {
        "HEAD": (gitdir / "HEAD").read_bytes(),
        "index": (gitdir / "index").read_bytes() if (gitdir / "index").exists() else None,
        "config": (gitdir / "config").read_bytes(),
        "refs": git(repo, "for-each-ref", "refs/heads", "refs/tags"),
        "status": git(repo, "status", "--porcelain", "--untracked-files=all"),
    }


def loosen(repo: Path) -> None:
    """Turn every pack of the repository into loose objects (``git unpack-objects``), so a test can
    damage one object's own file: gitstate writes each transaction as a pack."""
    pack_dir = repo / ".git" / "objects" / "pack"
    for idx in sorted(pack_dir.glob("*.idx")):
        pack = idx.with_suffix(".pack")
        aside = repo / ".git" / f"{pack.name}.aside"
        os.replace(pack, aside)
        idx.unlink()
        with open(aside, "rb") as fh:
            subprocess.run(["git", "unpack-objects", "-q"], cwd=repo, stdin=fh, check=True)
        aside.unlink()


def bounded(fn: Callable[[], Any], seconds: float = 10.0) -> Any:
    """Run ``fn`` in a thread; fail (instead of hanging the suite) if it does not return within
    ``seconds``. Returns what it returned, re-raises what it raised."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed back to the caller
            box["error"] = exc

    worker = threading.Thread(target=target, daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), f"call did not return within {seconds}s"
    if "error" in box:
        raise box["error"]
    return box.get("value")
