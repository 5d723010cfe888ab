"""gitstate.crewai.GitFlowPersistence against the real CrewAI: the same calls on
SQLiteFlowPersistence return the same states and pending-feedback records, a Flow decorated with
@persist(GitFlowPersistence()) resumes from its saved state, and bad input fails cleanly."""

from __future__ import annotations

import datetime as dt
import random
from pathlib import Path
from typing import Any

import pytest
from conftest import git
from crewai.flow.async_feedback.types import PendingFeedbackContext
from crewai.flow.flow import Flow, listen, start
from crewai.flow.persistence import FlowPersistence, SQLiteFlowPersistence, persist
from pydantic import BaseModel

import gitstate
from gitstate.crewai import GitFlowPersistence
from gitstate.verify import verify


class Draft(BaseModel):
    id: str = ""
    title: str = ""
    count: int = 0
    tags: set[str] = set()
    when: dt.datetime | None = None
    log: list[str] = []


def _state(rnd: random.Random, i: int) -> Any:
    return rnd.choice([
        {"id": "x", "n": i, "nested": {"list": [1, (2, 3)], "d": dt.date(2026, 1, 2)}, 5: "int key"},
        Draft(id="x", title=f"t{i}", count=i, tags={"a"}, when=dt.datetime(2026, 1, 1, 12, 0)),
        {"id": "x", "model": Draft(title="inner"), "s": {1}},
    ])


def _context(flow_id: str, i: int) -> PendingFeedbackContext:
    return PendingFeedbackContext(flow_id=flow_id, flow_class="tests.ReviewFlow", method_name=f"review{i}",
                                  method_output={"draft": f"v{i}"}, message="approve?", emit=["ok", "no"])


def _run(p: FlowPersistence, seed: int) -> list[Any]:
    rnd = random.Random(seed)
    out: list[Any] = []
    for i in range(60):
        flow = rnd.choice(["f1", "f2", "f3"])
        r = rnd.random()
        if r < 0.45:
            out.append(p.save_state(flow, f"step{i}", _state(rnd, i)))
        elif r < 0.65:
            out.append(p.load_state(flow))
        elif r < 0.75:
            out.append(p.save_pending_feedback(flow, _context(flow, i), _state(rnd, i)))
        elif r < 0.9:
            got = p.load_pending_feedback(flow)
            out.append(None if got is None else (got[0], got[1].to_dict()))
        else:
            out.append(p.clear_pending_feedback(flow))
    return out


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_same_calls_as_sqlite(repo: Path, tmp_path: Path, seed: int) -> None:
    ours = _run(GitFlowPersistence(repo), seed)
    theirs = _run(SQLiteFlowPersistence(str(tmp_path / "flows.db")), seed)
    for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        if isinstance(a, tuple) and isinstance(b, tuple):  # requested_at is "now" on both sides
            a[1].pop("requested_at"), b[1].pop("requested_at")
        assert a == b, i
    assert GitFlowPersistence(repo).load_state("never") is None
    assert verify(gitstate.open_store(repo)).ok


def _flow(persistence: FlowPersistence) -> Any:
    @persist(persistence)
    class CountFlow(Flow[Draft]):
        @start()
        def first(self) -> None:
            self.state.count += 1
            self.state.log.append("first")

        @listen(first)
        def second(self) -> int:
            self.state.count += 10
            self.state.log.append("second")
            return self.state.count

    return CountFlow


def test_flow_resumes_from_saved_state(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(repo)
    flow_class = _flow(GitFlowPersistence())
    first = flow_class()
    assert first.kickoff() == 11
    flow_id = first.state.id
    again = _flow(GitFlowPersistence())()  # a new persistence instance, as in a new process
    assert again.kickoff(inputs={"id": flow_id}) == 22
    saved = GitFlowPersistence(repo).load_state(flow_id)
    assert saved is not None and saved["count"] == 22 and saved["log"] == ["first", "second"] * 2
    run = gitstate.open_store(repo).get_run(flow_id)
    assert run.workflow == "crewai"
    assert [cp.node for cp in run.history()] == ["second", "first", "second", "first"]
    assert "second · step 3 · method_end" in git(repo, "log", "--format=%s", "-1", run.ref())


def test_bad_input_writes_nothing(repo: Path) -> None:
    p = GitFlowPersistence(repo)
    p.save_state("f", "m", {"id": "f", "ok": 1})
    tip = gitstate.open_store(repo).get_run("f").tip()
    with pytest.raises(gitstate.EncodingError):
        p.save_state("f", "m", {"id": "f", "bad": object()})
    with pytest.raises(ValueError):
        p.save_state("f", "m", ["not", "a", "dict"])  # type: ignore[arg-type]
    with pytest.raises(gitstate.GitStateError):
        p.save_state("", "m", {"id": ""})
    assert gitstate.open_store(repo).get_run("f").tip() == tip
    gitstate.open_store(repo).create_run(workflow="langgraph", run_id="thread-1")
    with pytest.raises(gitstate.ForeignRunError):
        p.load_state("thread-1")
    run = gitstate.open_store(repo).get_run("f")
    run.checkpoint({"format": "gitstate/crewai-flow", "v": 1, "state": "not a map"})
    with pytest.raises(gitstate.CorruptObjectError):
        p.load_state("f")
    assert not verify(gitstate.open_store(repo)).ok


def test_readme_example_runs_as_written(repo: Path) -> None:
    import re
    import subprocess
    import sys

    text = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    block = re.search(r"```python\n(.*?)```", text[text.index("\n### CrewAI\n"):], re.S)
    assert block is not None
    done = subprocess.run([sys.executable, "-c", block.group(1)], cwd=repo, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert "'greeted': 2" in done.stdout
    assert "crewai" in git(repo, "log", "--all", "--format=%s")
