"""Regressions: partial workspace snapshots (``files=[paths]``) restore only their paths, CLI paths
are relative to the current directory, a failed CLI checkpoint leaves the store unchanged, and
session file arguments are type-checked."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

import gitstate
from gitstate_cli.main import cli
from tests.conftest import git


@pytest.fixture
def three(repo: Path) -> Path:
    """A repository with a.txt, b.txt and src/c.py committed."""
    (repo / "a.txt").write_text("a1\n")
    (repo / "b.txt").write_text("b1\n")
    (repo / "src").mkdir()
    (repo / "src" / "c.py").write_text("c = 1\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "three files")
    return repo


def _refs(repo: Path) -> str:
    return git(repo, "for-each-ref", "--format=%(refname) %(objectname)", "refs/agentos/")


# -- 1. partial snapshots ---------------------------------------------------------------------------

def test_restore_of_a_partial_snapshot_keeps_other_files(three: Path) -> None:
    run = gitstate.open_store(three).create_run("r")
    cp = run.checkpoint({"x": 1}, files=["a.txt"])
    (three / "a.txt").write_text("a2\n")
    run.checkpoint({"x": 2}, files=["a.txt"])
    result = run.restore(cp.id)
    assert result.paths == ("a.txt",)
    assert (three / "a.txt").read_text() == "a1\n"
    assert (three / "b.txt").read_text() == "b1\n" and (three / "src" / "c.py").read_text() == "c = 1\n"
    assert cp.files_paths == ("a.txt",) and run.load(cp.id).files_paths == ("a.txt",)
    # the safety checkpoint holds at least the restored scope (here: the whole worktree)
    assert result.safety is not None
    safety = run.load(result.safety)
    assert safety.files_paths is None
    run.restore(safety, force=True)
    assert (three / "a.txt").read_text() == "a2\n" and (three / "b.txt").exists()


def test_partial_scope_with_explicit_paths_and_new_files_inside_it(three: Path) -> None:
    run = gitstate.open_store(three).create_run("r")
    cp = run.checkpoint({}, files=["src"])
    assert cp.files_paths == ("src",)
    (three / "src" / "new.py").write_text("new\n")  # created after the snapshot, inside its scope
    (three / "other.txt").write_text("outside\n")  # outside its scope: never touched
    run.checkpoint({}, files=True)
    assert run.restore(cp, dry_run=True).removed == ("src/new.py",)
    assert run.restore(cp, paths=[three], dry_run=True).removed == ("src/new.py",)  # whole worktree ∩ scope
    assert run.restore(cp, paths=["src/c.py"], dry_run=True).paths == ()
    with pytest.raises(gitstate.UsageError):
        run.restore(cp, paths=["b.txt"])
    run.restore(cp)
    assert not (three / "src" / "new.py").exists()
    assert (three / "other.txt").read_text() == "outside\n" and (three / "b.txt").exists()


def test_rollback_restore_and_nodes_respect_the_scope(three: Path) -> None:
    run = gitstate.open_store(three).create_run("r")
    before = run.checkpoint({}, files=["a.txt"])
    with run.node("edit", files=["a.txt"]) as scope:
        (three / "a.txt").write_text("a2\n")
        scope.checkpoint({})
    assert scope.entry is not None and scope.entry.files_paths == ("a.txt",)
    assert scope.exit is not None and scope.exit.files_paths == ("a.txt",)
    with run.node("carry"):  # carries the tip's snapshot and its scope forward
        pass
    assert run.head().files_paths == ("a.txt",)  # type: ignore[union-attr]
    (three / "a.txt").write_text("a3\n")
    run.checkpoint({}, files=True)
    run.rollback(before.id, restore=True)
    assert (three / "a.txt").read_text() == "a1\n"
    assert (three / "b.txt").exists() and (three / "src" / "c.py").exists()


def test_prune_keeps_the_scope(three: Path) -> None:
    run = gitstate.open_store(three).create_run("r")
    for i in range(3):
        (three / "a.txt").write_text(f"a{i}\n")
        run.checkpoint({"i": i}, files=["a.txt"])
    result = run.prune(keep_latest=2)
    head = run.head()
    assert head is not None and head.id in result.renamed.values() and head.files_paths == ("a.txt",)
    (three / "a.txt").write_text("a9\n")
    run.checkpoint({}, files=True)
    run.restore(head.parent_id or "")
    assert (three / "a.txt").read_text() == "a1\n" and (three / "b.txt").exists()


# -- 4. session file arguments ----------------------------------------------------------------------

@pytest.mark.parametrize("content", [123, None, 1.5, ["a"], {"a": 1}, True])
def test_session_file_content_must_be_bytes_or_str(store: gitstate.Store, content: object) -> None:
    run = store.create_run("r")
    before = _refs(Path(store.location.workdir or ""))
    with pytest.raises(gitstate.UsageError):
        run.files.write("p", content, author="x")  # type: ignore[arg-type]
    assert _refs(Path(store.location.workdir or "")) == before and run.files.latest("p") is None


def test_session_file_content_kinds_and_version_checks(store: gitstate.Store) -> None:
    run = store.create_run("r")
    run.files.write("p", bytearray(b"ab"), author="x")
    run.files.write("p", memoryview(b"cd"), author="x")
    run.files.write("p", "é", author="x")
    assert [run.files.read("p", version=v) for v in (1, 2, 3)] == [b"ab", b"cd", "é".encode()]
    for bad in ("1", 0, -1, True, 1.0):
        with pytest.raises(gitstate.UsageError):
            run.files.read("p", version=bad)  # type: ignore[arg-type]
    for bad_expect in ("3", -1, True, 3.0):
        with pytest.raises(gitstate.UsageError):
            run.files.write("p", b"x", author="x", expect_version=bad_expect)  # type: ignore[arg-type]
    with pytest.raises(gitstate.UsageError):
        run.files.write("p", "\ud800", author="x")
    assert run.files.latest("p").version == 3  # type: ignore[union-attr]
    run.files.write("q", b"new", author="x", expect_version=0)


# -- 2. CLI paths are relative to the current directory ------------------------------------------

def _cli(*args: str, code: int = 0) -> str:
    result = CliRunner().invoke(cli, list(args), prog_name="git agentos")
    assert result.exit_code == code, (result.exit_code, result.stdout, result.stderr, result.exception)
    return result.stdout if code == 0 else result.stderr


def test_cli_checkpoint_and_restore_paths_from_a_subdirectory(repo: Path, monkeypatch: pytest.MonkeyPatch,
                                                              tmp_path: Path) -> None:
    (repo / "sub" / "x").mkdir(parents=True)
    (repo / "sub" / "x" / "f").write_text("f1\n")
    (repo / "top.txt").write_text("top\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "sub")
    state = tmp_path / "s.json"
    state.write_text("{}")
    monkeypatch.chdir(repo / "sub")
    _cli("checkpoint", "r", "--state", str(state), "--files", "x")
    run = gitstate.open_store(repo).get_run("r")
    cp = run.head()
    assert cp is not None and cp.files_paths == ("sub/x",)
    tree = run.store.repo[cp.files_tree_id or ""]
    assert [e.name for e in tree] == ["sub"]  # type: ignore[attr-defined]
    (repo / "sub" / "x" / "f").write_text("f2\n")
    (repo / "x").mkdir()  # a same-named path at the root must not be what "x" means
    _cli("checkpoint", "r", "--state", str(state), "--files", "x")
    _cli("restore", "r~1", "x")
    assert (repo / "sub" / "x" / "f").read_text() == "f1\n" and (repo / "top.txt").exists()
    # a missing path is an error, never an empty snapshot
    before = _refs(repo)
    assert "does not exist" in _cli("checkpoint", "r", "--state", str(state), "--files", "nope", code=2)
    assert _refs(repo) == before


def test_library_snapshot_refuses_missing_paths(three: Path) -> None:
    store = gitstate.open_store(three)
    run = store.create_run("r")
    with pytest.raises(gitstate.UsageError, match="does not exist"):
        run.checkpoint({}, files=["missing.txt"])
    with pytest.raises(gitstate.UsageError, match="outside"):
        run.checkpoint({}, files=[str(three.parent)])
    assert run.head() is None
    (three / "b.txt").unlink()  # deleted but still tracked in the user's index: a valid path
    cp = run.checkpoint({}, files=["b.txt", "src"])
    assert cp.files_paths == ("b.txt", "src")


# -- 3. a failed CLI checkpoint leaves the store unchanged -------------------------------------------

@pytest.mark.parametrize(("extra", "code"), [(["--branch", ""], 1), (["--files", "nope"], 2),
                                             (["--node", "n", "--expect", "abcd"], 1)])
def test_failed_first_checkpoint_creates_no_run(repo: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                extra: list[str], code: int) -> None:
    state = tmp_path / "s.json"
    state.write_text("{}")
    monkeypatch.chdir(repo)
    before = _refs(repo)
    _cli("checkpoint", "newrun3", "--state", str(state), *extra, code=code)
    assert _refs(repo) == before
    assert "newrun3" not in _cli("runs")


def test_failed_first_checkpoint_deletes_the_run_it_created(repo: Path, monkeypatch: pytest.MonkeyPatch,
                                                            tmp_path: Path) -> None:
    state = tmp_path / "s.json"
    state.write_text("{}")
    monkeypatch.chdir(repo)
    before = _refs(repo)

    def boom(*_args: object, **_kwargs: object) -> None:
        raise gitstate.StoreWriteError("x", "disk full")

    monkeypatch.setattr(gitstate.Run, "checkpoint", boom)
    _cli("checkpoint", "newrun4", "--state", str(state), code=1)
    assert _refs(repo) == before
    monkeypatch.undo()
    monkeypatch.chdir(repo)
    _cli("checkpoint", "kept", "--state", str(state))
    monkeypatch.setattr(gitstate.Run, "checkpoint", boom)
    _cli("checkpoint", "kept", "--state", str(state), code=1)  # an existing run is never deleted
    assert "refs/agentos/main/runs/kept/run " in _refs(repo)


def test_unencodable_state_is_refused_before_the_run_exists(repo: Path, monkeypatch: pytest.MonkeyPatch,
                                                             tmp_path: Path) -> None:
    deep: object = 1
    for _ in range(300):
        deep = [deep]
    state = tmp_path / "s.json"
    state.write_text(__import__("json").dumps(deep))
    monkeypatch.chdir(repo)
    before = _refs(repo)
    _cli("checkpoint", "newrun5", "--state", str(state), code=2)  # a --state that cannot be stored: usage
    assert _refs(repo) == before


# -- 5. the private index is used without touching os.environ ----------------------------------

class _RecordingEnv(dict):  # type: ignore[type-arg]
    """A stand-in for os.environ that remembers every key written (and, like os.environ, passes
    changes on to the C environment libgit2 reads)."""

    def __init__(self, *args: object) -> None:
        super().__init__(*args)
        self.written: list[str] = []

    def __setitem__(self, key: str, value: str) -> None:
        self.written.append(key)
        os.putenv(key, value)
        super().__setitem__(key, value)

    def pop(self, key: str, *default: object) -> object:
        if key in self:
            os.unsetenv(key)
        return super().pop(key, *default)


def test_private_index_snapshot_leaves_the_environment_alone(three: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """git runs on the private index through its own environment: os.environ is never written,
    and the user's index stays byte for byte as it was."""
    env = _RecordingEnv(os.environ)
    monkeypatch.setattr(os, "environ", env)
    before = (three / ".git" / "index").read_bytes()
    store = gitstate.open_store(three)
    (three / "new.txt").write_text("untracked\n")
    snap = store.core.workspace.snapshot()
    tree = store.repo[snap.tree]
    assert {e.name for e in tree} == {"README", "a.txt", "b.txt", "src", "new.txt"}  # type: ignore[attr-defined]
    assert (three / ".git" / "index").read_bytes() == before
    assert os.path.exists(store.core.workspace.index_path)
    assert env.written == []


def test_private_index_in_a_linked_worktree(three: Path, tmp_path: Path) -> None:
    wt = tmp_path / "linked"
    git(three, "worktree", "add", "-q", "-b", "other", str(wt))
    (wt / "only-here.txt").write_text("x\n")
    store = gitstate.open_store(wt)
    names = {e.name for e in store.repo[store.core.workspace.snapshot().tree]}  # type: ignore[attr-defined]
    assert "only-here.txt" in names and "a.txt" in names
    assert store.core.workspace.index_path.endswith(f"index-{store.worktree}")
    assert store.worktree != "main"
