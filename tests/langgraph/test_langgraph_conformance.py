"""LangGraph's own conformance suite against GitCheckpointSaver: the report must be FULL (every base
and every extended capability detected and passing)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

pytest.importorskip("langgraph.checkpoint.conformance")

from langgraph.checkpoint.conformance import checkpointer_test, validate  # noqa: E402
from langgraph.checkpoint.conformance.capabilities import (  # noqa: E402
    BASE_CAPABILITIES,
    EXTENDED_CAPABILITIES,
)

import gitstate  # noqa: E402
from gitstate.langgraph import GitCheckpointSaver  # noqa: E402


async def test_conformance_full(repo: Path) -> None:
    @checkpointer_test(name="GitCheckpointSaver")
    async def git_saver() -> AsyncIterator[GitCheckpointSaver]:
        store = gitstate.open_store(repo)
        yield GitCheckpointSaver(store)

    report = await validate(git_saver)
    report.print_report()
    counts = {}
    for title, caps in (("base", BASE_CAPABILITIES), ("extended", EXTENDED_CAPABILITIES)):
        results = [report.results[c.value] for c in caps]
        passed = sum(r.tests_passed for r in results)
        total = passed + sum(r.tests_failed for r in results)
        counts[title] = (passed, total)
        print(f"{title}: {passed}/{total}")
        assert all(r.detected for r in results), f"{title} capability not detected"
    failures = [f for r in report.results.values() for f in r.failures]
    assert not failures, "\n".join(failures)
    assert report.conformance_level() == "FULL"
    assert counts["base"][0] == counts["base"][1] > 0
    assert counts["extended"][0] == counts["extended"][1] > 0
