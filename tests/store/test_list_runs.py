"""Listing runs reads the refs in one pass (``scan_refs``: loose files, then ``packed-refs``) and must
see exactly what git sees; the summary cache (many runs) must give what a fresh read gives."""

from __future__ import annotations

import os
from pathlib import Path

from conftest import bounded, git

import gitstate
from gitstate.git.refs import scan_refs
from gitstate.store.store import SUMMARY_CACHE_MIN_RUNS


def test_scan_refs_sees_what_git_for_each_ref_sees(store: gitstate.Store, repo: Path) -> None:
    for run_id in ("a", "b", "c"):
        store.create_run(run_id=run_id, workflow="w").checkpoint({"x": run_id})
    git(repo, "pack-refs", "--all")
    store.create_run(run_id="d", workflow="w").checkpoint({"x": "d"})  # loose
    store.get_run("a").checkpoint({"x": "a2"})  # loose again, shadowing its packed value
    git(repo, "update-ref", "refs/agentos-pins/main/a", git(repo, "rev-parse", "refs/agentos/main/runs/a/run").strip())
    git(repo, "update-ref", "refs/heads/other", "HEAD")  # outside the prefix
    common = os.path.join(repo, ".git")
    listed, broken = scan_refs(common, "refs/agentos/main/")
    expected = [(line.split(" ")[0], line.split(" ")[1]) for line in
                git(repo, "for-each-ref", "--format=%(refname) %(objectname)", "refs/agentos/main/").splitlines()]
    assert listed == sorted(expected) and len(listed) == 8 and broken == []
    assert [n for n, _o in scan_refs(common, "refs/agentos-pins/main/")[0]] == ["refs/agentos-pins/main/a"]
    assert scan_refs(common, "refs/agentos/nowhere/") == ([], [])
    git(repo, "pack-refs", "--all")  # every ref packed: pins first, then runs, then refs/heads/
    assert scan_refs(common, "refs/agentos/main/") == (listed, [])
    assert [n for n, _o in scan_refs(common, "refs/agentos-pins/main/")[0]] == ["refs/agentos-pins/main/a"]
    assert [n for n, _o in scan_refs(common, "refs/agentos/main/runs/b/")[0]] == \
        ["refs/agentos/main/runs/b/heads/main", "refs/agentos/main/runs/b/run"]


def test_scan_refs_reports_broken_loose_files_and_never_waits_on_a_fifo(store: gitstate.Store, repo: Path) -> None:
    store.create_run(run_id="r", workflow="w").checkpoint({"x": 1})
    git(repo, "pack-refs", "--all")
    heads = repo / ".git" / "refs" / "agentos" / "main" / "runs" / "r" / "heads"
    heads.mkdir(parents=True, exist_ok=True)
    (heads / "main").write_text("garbage\n")  # shadows the packed value, as git ignores it
    (heads / "sym").write_text("ref: refs/heads/main\n")
    (heads / "taken.lock").write_text("0" * 40 + "\n")  # a lock, never a ref
    os.mkfifo(heads / "pipe")
    listed, broken = bounded(lambda: scan_refs(os.path.join(repo, ".git"), "refs/agentos/main/"), 30)
    assert [n for n, _o in listed] == ["refs/agentos/main/runs/r/run"]
    found = {b.name: b for b in broken}
    assert set(found) == {f"refs/agentos/main/runs/r/heads/{n}" for n in ("main", "sym", "pipe")}
    assert found["refs/agentos/main/runs/r/heads/sym"].symbolic
    assert "'garbage'" in found["refs/agentos/main/runs/r/heads/main"].problem
    (summary,) = bounded(store.list_runs, 30)
    assert summary.id == "r" and summary.status == "corrupt" and "verify --repair" in (summary.error or "")


def test_a_cached_listing_equals_a_fresh_one_loose_or_packed(store: gitstate.Store, repo: Path) -> None:
    runs = [store.create_run(workflow="w", run_id=f"m{i:03d}") for i in range(SUMMARY_CACHE_MIN_RUNS + 1)]
    for i, run in enumerate(runs):
        run.checkpoint({"i": i}, node="n", status="completed" if i % 2 else None)
    first = gitstate.open_store(repo).list_runs()  # builds the cache
    assert len(first) == len(runs)
    assert gitstate.open_store(repo).list_runs() == first  # from the cache
    git(repo, "pack-refs", "--all")
    assert gitstate.open_store(repo).list_runs() == first
    runs[7].checkpoint({"i": "moved"}, node="later")
    heads = repo / ".git" / "refs" / "agentos" / "main" / "runs" / "m009" / "heads"
    heads.mkdir(parents=True, exist_ok=True)
    (heads / "bad").write_text("ref: refs/heads/main\n")
    again = {s.id: s for s in gitstate.open_store(repo).list_runs()}
    assert (again["m007"].node, again["m007"].checkpoints) == ("later", 2)
    assert again["m009"].status == "corrupt" and "heads/bad" in (again["m009"].error or "")
    assert {k: v for k, v in again.items() if k not in ("m007", "m009")} == \
        {s.id: s for s in first if s.id not in ("m007", "m009")}
