"""A pull of many runs writes no loose ref: git fetches the objects without writing refs, the
staging refs live in ``packed-refs`` only while the pull runs, and all of the pull's moves are one
transaction whose new values land in ``packed-refs``, each with its reflog line. When a listed ref
moved on the remote before its objects came, the pull takes the loose staging refs' way and still
lands what the remote holds."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pygit2
import pytest
from conftest import git
from remote_helpers import bare, machine

import gitstate
from gitstate.format.names import STAGING
from gitstate.git import refs
from gitstate.sync import remote as remote_mod


def _pushed(tmp_path: Path, n: int) -> tuple[Path, Path]:
    url = bare(tmp_path / "server.git").as_uri()
    a_path = machine(tmp_path / "A", url)
    a = gitstate.open_store(a_path)
    for i in range(n):
        run = a.create_run(workflow="w", run_id=f"r{i:02d}")
        with run.node("plan"):
            run.checkpoint({"i": i})
    assert all(r.ok for r in gitstate.push(a))
    a.close()
    return a_path, machine(tmp_path / "B", url)


def _values(repo: Path) -> dict[str, str]:
    out = git(repo, "for-each-ref", "--format=%(refname) %(objectname)", "refs/agentos/")
    return dict(line.split(" ") for line in out.splitlines())


def test_pull_writes_no_loose_ref_and_moves_all_in_one_transaction(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    a_path, b_path = _pushed(tmp_path, 12)
    staging_dir = b_path / ".git" / Path(*STAGING.rstrip("/").split("/"))
    loose_after_fetch: list[int] = []
    fetch = remote_mod.fetch_checked

    def fetch_then_look(*args: Any, **kwargs: Any) -> None:
        fetch(*args, **kwargs)
        loose_after_fetch.append(sum(1 for p in staging_dir.rglob("*") if p.is_file()) if staging_dir.exists() else 0)

    transactions: list[int] = []
    update = refs.update_atomically

    def counted(common_dir: str, moves: list[refs.Move], **kwargs: Any) -> None:
        transactions.append(len(moves))
        update(common_dir, moves, **kwargs)

    monkeypatch.setattr(remote_mod, "fetch_checked", fetch_then_look)
    monkeypatch.setattr(refs, "update_atomically", counted)
    b = gitstate.open_store(b_path, pack_in_background=False)
    results = gitstate.pull(b)
    assert len(results) == 12 and all(r.ok for r in results)
    assert loose_after_fetch == [0]  # one fetch, and it wrote no staging ref
    want = _values(a_path)
    assert _values(b_path) == want
    assert transactions == [len(want)]  # every move in one transaction
    assert refs.count_loose_refs(str(b_path / ".git")) == 0
    assert git(b_path, "for-each-ref", STAGING) == ""
    assert not staging_dir.exists() or not any(staging_dir.rglob("*"))
    repo = pygit2.Repository(str(b_path))
    for name, oid in want.items():
        assert [(e.old, e.new) for e in refs.reflog(repo, name)] == [(None, oid)]
    git(b_path, "fsck", "--strict")
    b.close()


def test_a_ref_that_moved_on_the_remote_after_the_listing_takes_the_staged_way(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The listing names an object the fetch does not bring (as when the remote moved a ref away
    from it meanwhile): the pull fetches again into loose staging refs and lands the remote's refs."""
    a_path, b_path = _pushed(tmp_path, 3)
    listed = remote_mod._ls_remote

    def stale_listing(*args: Any, **kwargs: Any) -> dict[str, str]:
        out = listed(*args, **kwargs)
        first = sorted(out)[0]
        out[first] = "1" * 40  # no such object anywhere
        return out

    fetches: list[bool] = []
    fetch = remote_mod.fetch_checked

    def noted(store: Any, args: list[str], **kwargs: Any) -> None:
        fetches.append("--dry-run" in args)
        fetch(store, args, **kwargs)

    monkeypatch.setattr(remote_mod, "_ls_remote", stale_listing)
    monkeypatch.setattr(remote_mod, "fetch_checked", noted)
    b = gitstate.open_store(b_path, pack_in_background=False)
    results = gitstate.pull(b)
    assert all(r.ok for r in results), [r.to_dict() for r in results if not r.ok]
    assert fetches == [True, False]
    assert _values(b_path) == _values(a_path)
    assert git(b_path, "for-each-ref", STAGING) == ""
    assert refs.count_loose_refs(str(b_path / ".git")) == 0
    git(b_path, "fsck", "--strict")
    b.close()


def test_staging_refs_a_killed_pull_left_in_packed_refs_go_with_the_next_pull(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """In one rewrite of ``packed-refs`` (no ``git update-ref``, which locks each ref it deletes)."""
    a_path, b_path = _pushed(tmp_path, 2)
    dead = subprocess.Popen(["true"])
    dead.wait()
    head = git(a_path, "rev-parse", "HEAD").strip()
    session = f"{STAGING}origin/{dead.pid}-0123abcd/"
    common = str(b_path / ".git")
    refs.set_packed_namespace(common, session, {f"{session}main/runs/r{i:02d}/run": head for i in range(50)})
    assert len(git(b_path, "for-each-ref", STAGING).splitlines()) == 50
    ran: list[str] = []
    run_git = remote_mod.run_git

    def noted(store: Any, args: list[str], **kwargs: Any) -> Any:
        ran.append(args[0])
        return run_git(store, args, **kwargs)

    monkeypatch.setattr(remote_mod, "run_git", noted)
    b = gitstate.open_store(b_path, pack_in_background=False)
    assert all(r.ok for r in gitstate.pull(b))
    assert "update-ref" not in ran
    assert git(b_path, "for-each-ref", STAGING) == ""
    assert _values(b_path) == _values(a_path)
    git(b_path, "fsck", "--strict")
    b.close()
