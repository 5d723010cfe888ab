"""Where the store lives (seeds 000/001, scenarios 010-100 adapted: the "database" is the
repository's store under refs/agentos/): discovery, AGENTOS_REPO, GIT_DIR, worktrees, bare
repositories, unsupported formats, and never touching the user's data."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import gitstate
from tests.conftest import git, make_repo, user_snapshot


def _runs(path: Path | None = None) -> list[str]:
    return [s.id for s in gitstate.open_store(path).list_runs()]


def test_010_store_in_repo(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(repo)
    gitstate.open_store().create_run(run_id="r1").checkpoint({"a": 1})
    assert "refs/agentos/main/runs/r1/heads/main" in git(repo, "for-each-ref", "--format=%(refname)")


def test_020_repos_are_isolated(tmp_path: Path) -> None:
    a, b = make_repo(tmp_path / "a"), make_repo(tmp_path / "b")
    gitstate.open_store(a).create_run(run_id="only-a").checkpoint({"x": 1})
    assert _runs(a) == ["only-a"]
    assert _runs(b) == []


def test_030_env_override(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = make_repo(tmp_path / "a"), make_repo(tmp_path / "b")
    monkeypatch.chdir(a)
    monkeypatch.setenv("AGENTOS_REPO", str(b))
    gitstate.open_store().create_run(run_id="via-env")
    monkeypatch.delenv("AGENTOS_REPO")
    assert _runs(b) == ["via-env"]
    assert _runs(a) == []


def test_040_fail_closed_outside_repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    outside = tmp_path / "plain"
    outside.mkdir()
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    monkeypatch.chdir(outside)
    with pytest.raises(gitstate.NotARepositoryError) as info:
        gitstate.open_store()
    assert "AGENTOS_REPO" in str(info.value)
    monkeypatch.setenv("AGENTOS_REPO", str(tmp_path / "missing"))
    with pytest.raises(gitstate.NotARepositoryError) as info:
        gitstate.open_store()
    assert "AGENTOS_REPO" in str(info.value)


def test_agentos_repo_naming_a_file_is_refused(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file inside a repository is no repository: refused, not taken for the repository around it."""
    (repo / "notes.txt").write_text("x\n")
    monkeypatch.setenv("AGENTOS_REPO", str(repo / "notes.txt"))
    with pytest.raises(gitstate.NotARepositoryError, match="points to a file"):
        gitstate.open_store()
    monkeypatch.setenv("AGENTOS_REPO", str(repo))
    assert gitstate.open_store().path == str(repo)


def test_agentos_repo_naming_a_linked_worktrees_git_file_opens_that_worktree(
        repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wt = tmp_path / "linked"
    git(repo, "worktree", "add", "-q", str(wt))
    assert (wt / ".git").is_file()
    monkeypatch.setenv("AGENTOS_REPO", str(wt / ".git"))
    store = gitstate.open_store()
    assert store.worktree != "main" and os.path.realpath(store.path) == os.path.realpath(wt)


@pytest.mark.parametrize("where", ["top", "subdirectory", "git file", "AGENTOS_REPO", "GIT_DIR"])
def test_a_separate_git_dir_works_on_the_work_tree_its_git_file_is_in(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    """`git init --separate-git-dir`: the work tree holds a `.git` file, the git dir elsewhere has
    no core.worktree. The store's work tree is the one with the `.git` file, as git's; opened from
    the git dir's own path it was the git dir's parent, so a snapshot held the git dir's files and
    a restore deleted files there, outside the work tree."""
    wt, gd = tmp_path / "wt", tmp_path / "gd"
    gd.mkdir()
    git(tmp_path, "init", "-q", "-b", "main", "--separate-git-dir", str(gd / "repo.git"), str(wt))
    (wt / "sub").mkdir()
    (wt / "sub" / "a.txt").write_text("a\n")
    git(wt, "add", ".")
    git(wt, "commit", "-q", "-m", "a")
    outside = gd / "beside-the-git-dir.txt"
    outside.write_text("not in the work tree\n")
    start = {"top": wt, "subdirectory": wt / "sub", "git file": wt / ".git"}.get(where)
    if where == "AGENTOS_REPO":
        monkeypatch.setenv("AGENTOS_REPO", str(wt / "sub"))
    elif where == "GIT_DIR":  # git's rule: the current directory is the top of the work tree
        monkeypatch.setenv("GIT_DIR", str(gd / "repo.git"))
        monkeypatch.chdir(wt)
    store = gitstate.open_store(start)
    assert os.path.realpath(store.workspace.workdir) == os.path.realpath(wt)
    assert git(wt, "rev-parse", "--show-toplevel").strip() == os.path.realpath(wt)
    monkeypatch.delenv("GIT_DIR", raising=False)
    run = store.create_run(run_id="r")
    cp = run.checkpoint({}, files=True)
    listed = git(wt, "ls-tree", "-r", "--name-only", cp.files_tree_id or "")
    assert listed.split() == ["sub/a.txt"]
    (wt / "sub" / "a.txt").write_text("b\n")
    (gd / "new.txt").write_text("also outside\n")
    run.restore(cp, force=True)
    assert (wt / "sub" / "a.txt").read_text() == "a\n"
    assert outside.read_text() == "not in the work tree\n" and (gd / "new.txt").exists()


def test_050_worktrees_are_isolated(repo: Path, tmp_path: Path) -> None:
    wt = tmp_path / "wt"
    git(repo, "worktree", "add", "-q", str(wt))
    main_store, wt_store = gitstate.open_store(repo), gitstate.open_store(wt)
    assert wt_store.worktree.startswith("wt-") and main_store.worktree == "main"
    main_store.create_run(run_id="issue-78").checkpoint({"where": "main"})
    wt_store.create_run(run_id="issue-78").checkpoint({"where": "wt"})
    assert main_store.get_run("issue-78").head().state == {"where": "main"}  # type: ignore[union-attr]
    assert wt_store.get_run("issue-78").head().state == {"where": "wt"}  # type: ignore[union-attr]
    assert [s.worktree for s in main_store.list_runs()] == ["main"]
    both = main_store.list_runs(all_worktrees=True)
    assert sorted(s.worktree for s in both) == sorted(["main", wt_store.worktree])
    # a removed worktree's runs stay in the shared refs and can still be read
    git(repo, "worktree", "remove", "--force", str(wt))
    gone = [s for s in main_store.list_runs(all_worktrees=True) if s.worktree != "main"]
    assert [s.id for s in gone] == ["issue-78"]
    run = main_store.get_run("issue-78", worktree=gone[0].worktree)
    assert run.head().state == {"where": "wt"}  # type: ignore[union-attr]


def test_060_user_data_untouched(repo: Path) -> None:
    before = user_snapshot(repo)
    run = gitstate.open_store(repo).create_run(run_id="x")
    run.checkpoint({"a": 1})
    assert user_snapshot(repo) == before
    assert git(repo, "log", "--branches", "--format=%s").splitlines() == ["initial"]


def test_070_subdirectory(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sub = repo / "a" / "b"
    sub.mkdir(parents=True)
    monkeypatch.chdir(sub)
    store = gitstate.open_store()
    assert Path(store.path) == repo.resolve()
    store.create_run(run_id="from-sub")
    assert _runs(repo) == ["from-sub"]


def test_090_tilde_expansion(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home2"
    make_repo(home / "proj")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("AGENTOS_REPO", "~/proj")
    assert Path(gitstate.open_store().path) == (home / "proj").resolve()


def test_100_empty_env_means_unset(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(repo)
    monkeypatch.setenv("AGENTOS_REPO", "")
    assert Path(gitstate.open_store().path) == repo.resolve()


def test_git_dir_honoured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = make_repo(tmp_path / "a"), make_repo(tmp_path / "b")
    monkeypatch.chdir(a)
    monkeypatch.setenv("GIT_DIR", str(b / ".git"))
    gitstate.open_store().create_run(run_id="via-git-dir")
    monkeypatch.delenv("GIT_DIR")
    assert _runs(b) == ["via-git-dir"]
    assert _runs(a) == []


def test_bare_repository(tmp_path: Path) -> None:
    bare = tmp_path / "bare.git"
    git(tmp_path, "init", "-q", "--bare", str(bare))
    store = gitstate.open_store(bare)
    run = store.create_run(run_id="b")
    run.checkpoint({"k": "v"})
    assert store.get_run("b").head().state == {"k": "v"}  # type: ignore[union-attr]
    git(bare, "fsck", "--strict")


def test_sha256_repository_is_refused_clearly(tmp_path: Path) -> None:
    path = tmp_path / "s256"
    git(tmp_path, "init", "-q", "--object-format=sha256", str(path))
    with pytest.raises(gitstate.UnsupportedRepositoryError) as info:
        gitstate.open_store(path)
    assert "SHA-256" in str(info.value)


def test_reftable_repository_is_refused_clearly(repo: Path) -> None:
    git(repo, "config", "core.repositoryformatversion", "1")
    git(repo, "config", "extensions.refStorage", "reftable")
    with pytest.raises(gitstate.UnsupportedRepositoryError) as info:
        gitstate.open_store(repo)
    assert "reftable" in str(info.value)


def test_store_used_from_threads(store: gitstate.Store) -> None:
    import threading

    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            run = store.create_run(run_id=f"t{i}")
            for j in range(20):
                run.checkpoint({"i": i, "j": j})
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert sorted(s.id for s in store.list_runs()) == ["t0", "t1", "t2", "t3"]
    assert all(s.checkpoints == 20 for s in store.list_runs())
    assert os.path.isdir(store.location.common_dir)
