"""Fixtures of the CrewAI tests, which run in their own virtualenv (``.venv-crewai``: CrewAI pins
``openai<3``, the OpenAI Agents SDK needs ``openai>=3``, so the two cannot share one environment;
scripts/test.sh runs both). Same scrubbed git environment as tests/conftest.py."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

_SCRUB = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY", "GIT_COMMON_DIR",
          "GIT_CEILING_DIRECTORIES", "AGENTOS_REPO", "GIT_CONFIG", "GIT_CONFIG_GLOBAL")


@pytest.fixture(autouse=True)
def clean_git_env(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path_factory.mktemp("home")
    for name in _SCRUB:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_COMMITTER_NAME", "Test Committer")
    monkeypatch.setenv("GIT_COMMITTER_EMAIL", "committer@example.com")
    monkeypatch.setenv("CREWAI_STORAGE_DIR", str(home / "crewai"))
    monkeypatch.setenv("CREWAI_DISABLE_TELEMETRY", "true")
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")


def git(cwd: str | os.PathLike[str], *args: str) -> str:
    out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True)
    return out.stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "repo"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    return path
