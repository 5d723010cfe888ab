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

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from make_fixture import make_fixture  # noqa: E402

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
    make_fixture(__doc__, None, lambda repo: asyncio.run(write(repo)))


if __name__ == "__main__":
    main()
