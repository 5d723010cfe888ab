"""Where the store lives (seeds 000/001, scenarios 010-100 adapted: the "database" is the
repository's store under refs/agentos/): discovery, AGENTOS_REPO, GIT_DIR, worktrees, bare
repositories, unsupported formats, and never touching the user's data."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

import gitstate
from tests.conftest import bounded, git, make_repo, user_snapshot


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
    assert os.path.realpath(store.core.workspace.workdir) == os.path.realpath(wt)
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


def _layouts(tmp: Path) -> dict[str, Path]:
    """A repository, a separate git dir with its work tree, one whose `.git` is a link to a git dir
    elsewhere, and a bare repository, each with one commit of `sub/a.txt` (and a file beside the
    git dirs, which no work tree holds)."""
    repo, wt, gd, lwt, store = tmp / "repo", tmp / "wt", tmp / "gd", tmp / "lwt", tmp / "store"
    for path in (repo, gd, store):
        path.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(tmp, "init", "-q", "-b", "main", "--separate-git-dir", str(gd / "repo.git"), str(wt))
    git(store, "init", "-q", "--bare", "real.git")
    git(store / "real.git", "config", "core.bare", "false")
    lwt.mkdir()
    (lwt / ".git").symlink_to(store / "real.git")
    for top in (repo, wt, lwt):
        (top / "sub").mkdir()
        (top / "sub" / "a.txt").write_text("a\n")
        git(top, "add", ".")
        git(top, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "a")
    git(tmp, "init", "-q", "--bare", "bare.git")
    (repo / "sub" / "inner" / ".git").mkdir(parents=True)  # a `.git` that is no repository: passed
    (tmp / "elsewhere").mkdir()
    (tmp / "other").mkdir()
    (tmp / "other" / "link").symlink_to(repo / "sub")  # other/link/.. is repo on disk, other as text
    (tmp / "store2").mkdir()  # a separate git dir named .git, in a folder that is no work tree
    git(tmp, "init", "-q", "-b", "main", "--separate-git-dir", str(tmp / "store2" / ".git"), str(tmp / "wt2"))
    for folder in (gd, store, tmp / "store2", tmp / "other"):
        (folder / "beside.txt").write_text("x\n")
    return {"repo": repo, "wt": wt, "gd": gd / "repo.git", "lwt": lwt, "bare": tmp / "bare.git",
            "elsewhere": tmp / "elsewhere", "other": tmp / "other", "store2": tmp / "store2"}


# (cwd, environment, the work tree git and gitstate use: None = none)
WORK_TREE_CASES = {
    "separate git dir, from inside it": ("gd", {}, None),
    "separate git dir, from a folder inside it": ("gd/refs", {}, None),
    "separate git dir named by AGENTOS_REPO": ("elsewhere", {"AGENTOS_REPO": "gd"}, None),
    "`.git` a link to a git dir elsewhere, from the work tree": ("lwt/sub", {}, "lwt"),
    "below a `.git` that is no repository": ("repo/sub/inner", {}, "repo"),
    "inside a `.git` that is no repository": ("repo/sub/inner/.git", {}, "repo"),
    "a `.git` that is no repository named by AGENTOS_REPO": (
        "elsewhere", {"AGENTOS_REPO": "repo/sub/inner/.git"}, "repo"),
    "inside a separate git dir named .git": ("store2/.git", {}, None),
    "inside a repository's .git": ("repo/.git/refs", {}, None),
    "GIT_WORK_TREE without GIT_DIR": ("repo", {"GIT_WORK_TREE": "repo/sub"}, "repo/sub"),
    "GIT_WORK_TREE through a link and ..": (
        "elsewhere", {"GIT_DIR": "repo/.git", "GIT_WORK_TREE": "other/link/.."}, "repo"),
    "`.git` a link named by AGENTOS_REPO": ("elsewhere", {"AGENTOS_REPO": "lwt/.git"}, "lwt"),
    "GIT_DIR from a subdirectory: the current directory, as git": ("repo/sub", {"GIT_DIR": "repo/.git"}, "repo/sub"),
    "GIT_DIR from elsewhere: the current directory, as git": ("elsewhere", {"GIT_DIR": "repo/.git"}, "elsewhere"),
    "GIT_DIR of a bare repository with GIT_WORK_TREE": (
        "elsewhere", {"GIT_DIR": "bare", "GIT_WORK_TREE": "elsewhere"}, "elsewhere"),
}


@pytest.mark.parametrize("case", list(WORK_TREE_CASES))
def test_the_work_tree_is_the_one_git_uses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str) -> None:
    """Which work tree a store snapshots and restores is git's, checked against `git rev-parse
    --show-toplevel` in the same place: where git has none, gitstate has none (workspace commands
    refuse, refs work), and nothing outside git's work tree is ever captured or written."""
    paths = _layouts(tmp_path)

    def at(spec: str) -> Path:  # "lwt/sub": the folder sub of the layout lwt
        first, _, rest = spec.partition("/")
        return paths[first] / rest if rest else paths[first]

    cwd_name, env, expected = WORK_TREE_CASES[case]
    cwd = at(cwd_name)
    environ = {k: str(at(v)) for k, v in env.items()}
    for key in ("AGENTOS_REPO", "GIT_DIR", "GIT_WORK_TREE"):
        monkeypatch.delenv(key, raising=False)
    shown = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=cwd, capture_output=True, text=True,
                           env={**os.environ, **{k: v for k, v in environ.items() if k != "AGENTOS_REPO"}})
    want = None if expected is None else os.path.realpath(at(expected))
    if "AGENTOS_REPO" not in environ:  # git's own answer, where git is asked the same thing
        assert (shown.stdout.strip() or None) == want, shown.stderr
    monkeypatch.chdir(cwd)
    for key, value in environ.items():
        monkeypatch.setenv(key, value)
    store = gitstate.open_store()
    got = store.location.workdir
    assert (None if got is None else os.path.realpath(got)) == want
    run = store.create_run(run_id="r")
    run.checkpoint({"refs": "work"})  # refs work wherever the repository is
    if want is None:
        with pytest.raises(gitstate.UsageError, match="no work tree here"):
            run.checkpoint({}, files=True)
    else:
        cp = run.checkpoint({}, files=True)
        assert cp.files_tree_id is not None
        names = git(tmp_path, f"--git-dir={store.location.git_dir}", "ls-tree", "-r", "--name-only", cp.files_tree_id)
        assert not [n for n in names.split() if n in ("HEAD", "config") or n.startswith(("objects/", "refs/"))]
    for folder in ("gd", "store", "store2", "other"):
        assert (tmp_path / folder / "beside.txt").exists()


@pytest.mark.parametrize("case", ["GIT_DIR names a work tree", "GIT_DIR names a folder of a git dir",
                                  "GIT_WORK_TREE names nothing", "the current directory is gone"])
def test_what_git_refuses_is_one_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str) -> None:
    """GIT_DIR is the git dir itself, never searched from (git: not a git repository); a
    GIT_WORK_TREE that is no directory, or a current directory deleted under the process, is a
    NotARepositoryError (one line from the CLI), never a traceback or a guess."""
    repo = make_repo(tmp_path / "repo")
    for key in ("AGENTOS_REPO", "GIT_DIR", "GIT_WORK_TREE"):
        monkeypatch.delenv(key, raising=False)
    if case == "GIT_DIR names a work tree":
        monkeypatch.setenv("GIT_DIR", str(repo))
    elif case == "GIT_DIR names a folder of a git dir":
        monkeypatch.setenv("GIT_DIR", str(repo / ".git" / "refs"))
    elif case == "GIT_WORK_TREE names nothing":
        monkeypatch.setenv("GIT_DIR", str(repo / ".git"))
        monkeypatch.setenv("GIT_WORK_TREE", str(tmp_path / "missing"))
    else:
        gone = tmp_path / "gone"
        gone.mkdir()
        monkeypatch.chdir(gone)
        gone.rmdir()
    with pytest.raises(gitstate.NotARepositoryError):
        gitstate.open_store()


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


def test_git_is_asked_once_per_place_and_again_when_the_way_up_changes(
        repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Discovery asks git (one process), remembers its answer in the process for the same place and
    environment, and asks again when what it depends on changed: a `.git` appearing on the way up,
    the git dir's config rewritten, another environment."""
    from gitstate.git import location

    asked: list[str] = []

    def counting(*args: object, **kwargs: object) -> object:
        asked.append(str(kwargs["cwd"]))
        return real(*args, **kwargs)

    real = location.run_git
    monkeypatch.setattr(location, "run_git", counting)
    sub = repo / "sub"
    sub.mkdir()
    for _ in range(3):
        assert gitstate.open_store(sub).location.workdir == str(repo)
    assert len(asked) == 1
    git(sub, "init", "-q")  # a repository inside: git's answer changes, and so does gitstate's
    assert gitstate.open_store(sub).location.workdir == str(sub) and len(asked) == 2
    elsewhere = repo.parent / "elsewhere"
    elsewhere.mkdir()
    git(sub, "config", "core.worktree", str(elsewhere))
    assert gitstate.open_store(sub).location.workdir == str(elsewhere) and len(asked) == 3
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(repo))
    assert gitstate.open_store(sub).location.workdir == str(elsewhere) and len(asked) == 4


@pytest.mark.parametrize("where", ["HEAD in a folder on the way up", "config of the git dir a .git file names",
                                   "config of GIT_DIR"])
def test_a_fifo_git_would_open_while_searching_is_refused_before_git_starts(
        repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    """git opens each folder's HEAD on its way up, and the config of the git dir it takes (a FIFO
    there makes git wait for ever): refused, in one error, before git is started."""
    sub = repo / "sub"
    sub.mkdir()
    monkeypatch.chdir(sub)
    if where == "HEAD in a folder on the way up":
        os.mkfifo(sub / "HEAD")
    elif where == "config of the git dir a .git file names":
        store = tmp_path / "store.git"
        git(tmp_path, "init", "-q", "--bare", str(store))
        (store / "config").unlink()
        os.mkfifo(store / "config")
        (sub / ".git").write_text(f"gitdir: {store}\n")
    else:
        store = tmp_path / "store.git"
        git(tmp_path, "init", "-q", "--bare", str(store))
        (store / "config").unlink()
        os.mkfifo(store / "config")
        monkeypatch.setenv("GIT_DIR", str(store))
    with pytest.raises(gitstate.UnsupportedRepositoryError, match="is a FIFO"):
        bounded(gitstate.open_store, 30)
