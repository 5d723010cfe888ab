"""Generate the integrations fixture for tests/compat/test_compat_integrations.py: an OpenAI Agents
SDK session, LangGraph long-term memory (GitStore) and an Agent Framework checkpoint whose values
hold maps with their keys in no sorted order, as a given format's code stores them.

RUN ONLY TO CREATE A NEW FIXTURE VERSION, with the gitstate code of the format it pins: the fixtures
under tests/compat/fixtures/ must never be regenerated in place (later code must keep reading bytes
earlier code wrote). ``integrations-format1.tar.gz`` was written by the format-1 code, which stored
every map with its keys in canonical order; from a checkout of that code:

    .venv/bin/python tests/compat/make_integrations_fixture.py --output /tmp/integrations-format1.tar.gz

The repository (work tree and ``.git``) is saved as a gzipped tarball as make_fixture.py saves its
store. Times and the session's item order differ at every run; the values do not."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from compat_support import COMMITTER_EMAIL, COMMITTER_NAME, git, init_repo  # noqa: E402
from make_fixture import SCRUB, _tar  # noqa: E402

SESSION = "chat"
NAMESPACE = ("users", "ada")
WORKFLOW = "ordered"
CHECKPOINT_ID = "cp-1"


def item(n: int) -> dict[str, Any]:
    """A session item whose keys (and its nested maps' keys) are in no sorted order."""
    if n % 2 == 0:
        return {"type": "message", "role": "user", "content": f"question {n}"}
    return {"type": "function_call", "name": "lookup", "call_id": f"c{n}", "arguments": json.dumps({"z": n, "a": 1}),
            "extra": {"zeta": {"y": n, "x": 2}, "alpha": 0}}


ITEMS = [item(n) for n in range(40)]  # > 32: a .list/ tree with a full chunk
MEMORY = {"zeta": 1, "alpha": {"y": [{"q": 0, "b": 1.5}], "c": None}, "mid": "x"}
AF_STATE = {"zeta": {"y": 1, "b": 2}, "alpha": {f"key{i:02d}": {"z": i, "a": i} for i in range(20, 0, -1)}, "mid": 1}


async def write(repo: Path) -> None:
    from agent_framework import WorkflowCheckpoint

    from gitstate.agent_framework import GitCheckpointStorage
    from gitstate.langgraph import GitStore
    from gitstate.openai_agents import GitSession

    session = GitSession(SESSION, repo)
    await session.add_items(ITEMS[:30])
    await session.add_items(ITEMS[30:])
    session.close()
    GitStore.from_path(repo).put(NAMESPACE, "prefs", MEMORY)
    storage = GitCheckpointStorage(repo)
    await storage.save(WorkflowCheckpoint(workflow_name=WORKFLOW, graph_signature_hash="h", checkpoint_id=CHECKPOINT_ID,
                                          timestamp="2026-01-01T00:00:00+00:00", state=AF_STATE))
    storage.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output", type=Path, required=True, help="tarball to write (must not exist)")
    args = parser.parse_args()
    if args.output.exists():
        sys.exit(f"{args.output} exists: fixtures are never regenerated in place; choose a new name")
    with tempfile.TemporaryDirectory(prefix="gitstate-fixture-") as tmp:
        home = Path(tmp) / "home"
        home.mkdir()
        for name in SCRUB:
            os.environ.pop(name, None)
        os.environ.update({"HOME": str(home), "GIT_CONFIG_NOSYSTEM": "1", "LC_ALL": "C",
                           "GIT_AUTHOR_NAME": COMMITTER_NAME, "GIT_AUTHOR_EMAIL": COMMITTER_EMAIL,
                           "GIT_COMMITTER_NAME": COMMITTER_NAME, "GIT_COMMITTER_EMAIL": COMMITTER_EMAIL})
        repo = init_repo(Path(tmp) / "repo")
        asyncio.run(write(repo))
        refs = git(repo, "for-each-ref", "--format=%(objectname) %(refname)", "refs/agentos/")
        args.output.parent.mkdir(parents=True, exist_ok=True)
        _tar(repo, args.output)
    print(refs)
    print(f"wrote {args.output} ({args.output.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
