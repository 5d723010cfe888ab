"""Refs a hostile or broken remote offers: refs of a run that has no run record are not pulled
(they would make runs nothing lists rightly or deletes), verify --repair removes such refs made
earlier, and one pull accepts a bounded number of refs."""

from __future__ import annotations

from pathlib import Path

from conftest import git
from remote_helpers import bare, machine
from test_cli_sharing import agentos

import gitstate
from gitstate.verify.checks import verify


def test_refs_of_a_run_without_a_run_record_are_not_pulled(tmp_path: Path) -> None:
    server = bare(tmp_path / "server.git")
    a = gitstate.open_store(machine(tmp_path / "A", server.as_uri()))
    b = gitstate.open_store(machine(tmp_path / "B", server.as_uri()))
    tip = a.create_run(run_id="r").checkpoint({"a": 1}).id
    assert all(r.ok for r in gitstate.push(a))
    git(server, "update-ref", "refs/agentos/main/runs/plain/heads/main", tip)
    git(server, "update-ref", "refs/agentos/main/runs/a%2Fb/heads/main", tip)
    git(server, "update-ref", "refs/agentos/main/runs/plain/nodes/main", tip)
    pulled = gitstate.pull(b)
    junk = sorted((r.ref.split("/runs/", 1)[1], r.status) for res in pulled for r in res.refs
                  if "/runs/r/" not in r.ref)
    assert junk == [("a%2Fb/heads/main", "skipped"), ("plain/heads/main", "skipped"),
                    ("plain/nodes/main", "skipped")]
    assert all("no run record" in r.message for res in pulled for r in res.refs if "/runs/r/" not in r.ref)
    assert [s.id for s in b.list_runs()] == ["r"]
    assert not git(b.path, "for-each-ref", "refs/agentos/main/runs/plain/", "refs/agentos/main/runs/a%2Fb/")
    assert all(r.ok for res in pulled if res.run_id == "r" for r in res.refs)


def test_verify_repair_removes_refs_of_a_run_without_a_record(tmp_path: Path) -> None:
    """What an earlier version's pull left: verify reports it, --repair removes it (and only it)."""
    a = gitstate.open_store(machine(tmp_path / "A", "unused"))
    tip = a.create_run(run_id="r").checkpoint({"a": 1}).id
    git(a.path, "update-ref", "refs/agentos/main/runs/plain/heads/main", tip)
    git(a.path, "update-ref", "refs/agentos/main/runs/plain/nodes/main", tip)
    report = verify(a)
    assert not report.ok
    assert {p.ref for p in report.problems} == {"refs/agentos/main/runs/plain/heads/main",
                                                "refs/agentos/main/runs/plain/nodes/main"}
    assert all("no run record" in p.message for p in report.problems)
    repaired = verify(a, repair=True)
    assert repaired.ok, repaired.problems
    assert sorted(repaired.repaired) == ["refs/agentos/main/runs/plain/heads/main",
                                         "refs/agentos/main/runs/plain/nodes/main"]
    assert git(a.path, "for-each-ref", "--format=%(refname)", "refs/agentos/").split() == [
        "refs/agentos/main/runs/r/heads/main", "refs/agentos/main/runs/r/run"]
    assert verify(a).ok
    # the library's delete removes such a run too (no record needed)
    git(a.path, "update-ref", "refs/agentos/main/runs/plain/heads/main", tip)
    assert a.delete_run("plain") == ["main"]


def test_one_pull_accepts_a_bounded_number_of_refs(tmp_path: Path) -> None:
    server = bare(tmp_path / "server.git")
    a, b = machine(tmp_path / "A", server.as_uri()), machine(tmp_path / "B", server.as_uri())
    for run in ("r1", "r2"):
        agentos(a, "checkpoint", run, "--state", "-", input="{}")
    agentos(a, "push", "origin")  # 4 refs: two runs, each a record and main
    git(b, "config", "agentos.pullMaxRefs", "3")
    refused = agentos(b, "pull", "origin", code=None)
    assert refused.returncode != 0
    assert "offers 4 refs" in refused.stderr and "agentos.pullMaxRefs = 3" in refused.stderr, refused.stderr
    assert not git(b, "for-each-ref", "refs/agentos/", "refs/agentos-incoming/")
    agentos(b, "pull", "origin", "r1")  # a named run is within the limit
    git(b, "config", "agentos.pullMaxRefs", "0")  # no limit
    agentos(b, "pull", "origin")
    assert len(git(b, "for-each-ref", "refs/agentos/").splitlines()) == 4


def test_a_ref_git_cannot_fetch_does_not_break_a_full_pull(tmp_path: Path) -> None:
    """A ref whose name git refuses (written into the remote's refs directory by hand) is listed
    by the remote but cannot be fetched; the pull takes everything else and reports it."""
    server = bare(tmp_path / "server.git")
    a = gitstate.open_store(machine(tmp_path / "A", server.as_uri()))
    b = gitstate.open_store(machine(tmp_path / "B", server.as_uri()))
    tip = a.create_run(run_id="r").checkpoint({"a": 1}).id
    assert all(r.ok for r in gitstate.push(a))
    bad = server / "refs" / "agentos" / "main" / "runs" / "sp ace" / "heads"
    bad.mkdir(parents=True)
    (bad / "main").write_text(tip + "\n")
    pulled = gitstate.pull(b)
    good = [(r.ref, r.status) for res in pulled for r in res.refs if "/runs/r/" in r.ref]
    assert sorted(good) == [("refs/agentos/main/runs/r/heads/main", "created"),
                            ("refs/agentos/main/runs/r/run", "created")]
    others = [r for res in pulled for r in res.refs if "/runs/r/" not in r.ref]
    assert others and all(r.status == "skipped" and "cannot send" in r.message for r in others)
    assert [s.id for s in b.list_runs()] == ["r"]
    assert not git(b.path, "for-each-ref", "refs/agentos-incoming/")
