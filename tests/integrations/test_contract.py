"""The integrations' public names and signatures, that `import gitstate` imports no framework, and
that the README example of each integration runs as written in a fresh repository."""

from __future__ import annotations

import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def readme_block(heading: str) -> str:
    """The first python block after a README heading."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index(f"\n### {heading}\n"):]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match is not None, heading
    return match.group(1)


def test_import_gitstate_imports_no_framework() -> None:
    code = ("import sys, gitstate, gitstate.integrations, gitstate.format.frameworks, gitstate.format.typed\n"
            "loaded = [m for m in ('agents', 'agent_framework', 'crewai', 'langgraph', 'langchain_core', 'openai')"
            " if m in sys.modules]\nassert not loaded, loaded\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_public_names_and_signatures() -> None:
    from gitstate.agent_framework import GitCheckpointStorage
    from gitstate.langgraph import GitStore
    from gitstate.openai_agents import GitSession

    session = inspect.signature(GitSession)
    assert list(session.parameters)[:2] == ["session_id", "path"] and session.parameters["path"].default is None
    storage = inspect.signature(GitCheckpointStorage)
    assert list(storage.parameters)[0] == "path" and storage.parameters["path"].default is None
    assert list(inspect.signature(GitStore.from_path).parameters)[0] == "path"
    for cls, methods in ((GitSession, ["get_items", "add_items", "pop_item", "clear_session", "create_branch_from_turn",
                                       "switch_to_branch", "list_branches", "delete_branch", "get_conversation_turns"]),
                         (GitCheckpointStorage, ["save", "load", "list_checkpoints", "delete", "get_latest",
                                                 "list_checkpoint_ids"]),
                         (GitStore, ["batch", "abatch"])):
        for name in methods:
            assert callable(getattr(cls, name)), (cls, name)


@pytest.mark.parametrize("heading", ["LangGraph long-term memory", "OpenAI Agents SDK", "Microsoft Agent Framework"])
def test_readme_example_runs_as_written(repo: Path, heading: str) -> None:
    done = subprocess.run([sys.executable, "-c", readme_block(heading)], cwd=repo, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip()
