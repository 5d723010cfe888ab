"""The pre-push leak guard looks at what a push sends, not only at ref names: with no remote allowed,
a checkpoint pushed by id, a tag on one, a branch that merged one, a mirror push, or a checkpoint's
tree or blob never reaches the remote; user branches, deletions and allowed remotes go through."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import git
from remote_helpers import bare, machine

import gitstate
from gitstate.sync import hooks

TIMEOUT = 120  # seconds: a hung push fails the test instead of hanging the suite
ZERO = "0" * 40


@dataclass
class Setup:
    path: Path      # the user's repository (hook installed, agentos.pushRemotes unset)
    remote: Path    # bare repository behind `origin`; it has `main`
    cp: str         # a checkpoint commit (its state holds a secret)
    private: set[str]  # every object only checkpoints reach: none may ever land on the remote


def _push(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # git-agentos on PATH: the hook scans what goes to an allowed remote (and refuses without it)
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    return subprocess.run(["git", "push", *args], cwd=repo, capture_output=True, text=True, check=False,
                          timeout=TIMEOUT, env=env)


def _objects(repo: Path, *revs: str) -> set[str]:
    return set(git(repo, "rev-list", "--objects", "--no-object-names", *revs).split())


def _remote_objects(remote: Path) -> set[str]:
    out = git(remote, "cat-file", "--batch-all-objects", "--batch-check=%(objectname)")
    return set(out.split())


def _commit(repo: Path, tree: str, *parents: str, message: str = "user work") -> str:
    args = ["commit-tree", tree, "-m", message]
    for parent in parents:
        args += ["-p", parent]
    return git(repo, *args).strip()


@pytest.fixture
def leaky(tmp_path: Path) -> Setup:
    remote = bare(tmp_path / "origin.git")
    path = machine(tmp_path / "A", remote.as_uri(), allow=None)
    git(path, "push", "-q", "origin", "main")  # origin has main, refs/remotes/origin/main exists
    store = gitstate.open_store(path)
    run = store.create_run(run_id="secret")
    run.checkpoint({"api_key": "sk-live-0001"}, files=True)
    cp = run.checkpoint({"api_key": "sk-live-0002", "prompt": "be evil"}, files=True).id
    run.files.write("notes.md", "tool output", author="agent", reason="notes")
    assert gitstate.install_hooks(store).action == "installed"
    store.close()
    private = _objects(path, "--glob=refs/agentos/*") - _objects(path, "--branches")
    assert cp in private and len(private) > 5
    return Setup(path, remote, cp, private)


def _assert_refused(s: Setup, *args: str) -> subprocess.CompletedProcess[str]:
    remote = next(a for a in args if not a.startswith("-"))  # a remote's name or a URL
    refs_before = git(s.remote, "for-each-ref")
    out = _push(s.path, *args)
    assert out.returncode != 0, out.stderr
    assert "gitstate: refusing to push agent checkpoints (prompts, tool outputs, secrets)" in out.stderr
    assert f"allow that remote with: git config --add agentos.pushRemotes {remote}\n" in out.stderr
    assert git(s.remote, "for-each-ref") == refs_before
    assert subprocess.run(["git", "cat-file", "-e", s.cp], cwd=s.remote, capture_output=True).returncode != 0
    assert not (_remote_objects(s.remote) & s.private)
    return out


# Each case prepares local refs in the repository and returns the `git push` arguments.
Case = Callable[[Path, str], list[str]]


def _lightweight_tag(path: Path, cp: str) -> list[str]:
    git(path, "tag", "light", cp)
    return ["origin", "--tags"]


def _annotated_tag(path: Path, cp: str) -> list[str]:
    git(path, "tag", "-a", "-m", "release", "v1", cp)
    return ["origin", "--tags"]


def _tag_of_tag(path: Path, cp: str) -> list[str]:
    git(path, "tag", "-a", "-m", "inner", "inner", cp)
    git(path, "tag", "-a", "-m", "outer", "outer", "inner")
    return ["origin", "refs/tags/outer"]


def _merged(path: Path, cp: str) -> list[str]:
    head = git(path, "rev-parse", "HEAD").strip()
    git(path, "branch", "merged", _commit(path, f"{head}^{{tree}}", head, cp, message="Merge a checkpoint"))
    return ["origin", "merged"]


def _built_on(path: Path, cp: str) -> list[str]:
    tip = _commit(path, f"{cp}^{{tree}}", cp)
    git(path, "branch", "built", _commit(path, f"{tip}^{{tree}}", tip))
    return ["origin", "built"]


def _tree_tag(path: Path, cp: str) -> list[str]:
    git(path, "tag", "tree", f"{cp}^{{tree}}")
    return ["origin", "refs/tags/tree"]


def _annotated_blob_tag(path: Path, cp: str) -> list[str]:
    blob = git(path, "rev-parse", f"{cp}:state/api_key.cbor").strip()
    git(path, "tag", "-a", "-m", "a blob", "blob", blob)
    return ["origin", "refs/tags/blob"]


CASES: dict[str, Case] = {
    "checkpoint id to a branch": lambda path, cp: ["origin", f"{cp}:refs/heads/x"],
    "checkpoint~0 to a tag": lambda path, cp: ["origin", f"{cp}~0:refs/tags/x"],
    "lightweight tag with --tags": _lightweight_tag,
    "annotated tag with --tags": _annotated_tag,
    "tag of a tag": _tag_of_tag,
    "mirror": lambda path, cp: ["--mirror", "origin"],
    "branch that merged a checkpoint": _merged,
    "branch built on a checkpoint": _built_on,
    "refs/agentos by name": lambda path, cp: ["origin", "refs/agentos/*:refs/agentos/*"],
    "refs/agentos renamed": lambda path, cp: ["origin", "refs/agentos/main/runs/secret/heads/main:refs/heads/ok"],
    # git sends the objects before the remote refuses a non-commit on a branch: the hook must stop it
    "checkpoint tree to a branch": lambda path, cp: ["origin", f"{cp}^{{tree}}:refs/heads/t"],
    "checkpoint tree as a tag": _tree_tag,
    "annotated tag of a state blob": _annotated_blob_tag,
    "checkpoint to a URL": lambda path, cp: [git(path, "remote", "get-url", "origin").strip(), f"{cp}:refs/heads/x"],
}


@pytest.mark.parametrize("case", CASES)
def test_pushes_that_send_checkpoints_are_refused(leaky: Setup, case: str) -> None:
    args = CASES[case](leaky.path, leaky.cp)
    out = _assert_refused(leaky, *args)
    assert len([line for line in out.stderr.splitlines() if line.startswith("gitstate:")]) == 2
    # allowing the remote (as the message says) lets the same push through, and the checkpoint lands
    git(leaky.path, "config", "--add", "agentos.pushRemotes", next(a for a in args if not a.startswith("-")))
    out = _push(leaky.path, *args)
    if case == "checkpoint tree to a branch":  # the remote itself refuses a tree on a branch
        assert "non-commit" in out.stderr
    else:
        assert out.returncode == 0, out.stderr
    assert _remote_objects(leaky.remote) & leaky.private


def test_message_names_the_ref_and_sha(leaky: Setup) -> None:
    git(leaky.path, "tag", "light", leaky.cp)
    out = _assert_refused(leaky, "origin", "refs/tags/light")
    assert f"refs/tags/light ({leaky.cp[:12]})" in out.stderr
    out = _assert_refused(leaky, "origin", f"{leaky.cp}:refs/heads/x")
    assert leaky.cp in out.stderr


def test_name_check_holds_even_when_the_remote_has_the_objects(leaky: Setup) -> None:
    # the objects are already there (pushed past the hook), so only the name can refuse this
    assert _push(leaky.path, "--no-verify", "origin", f"{leaky.cp}:refs/heads/leaked").returncode == 0
    git(leaky.path, "fetch", "-q", "origin")
    out = _push(leaky.path, "origin", "refs/agentos/main/runs/secret/heads/main")
    assert out.returncode != 0 and "refs/agentos/main/runs/secret/heads/main" in out.stderr
    assert "refs/agentos" not in git(leaky.remote, "for-each-ref")
    # ...while a branch the remote already has in full sends no checkpoint and passes
    assert _push(leaky.path, "origin", f"{leaky.cp}:refs/heads/leaked-too").returncode == 0


def test_user_pushes_pass(leaky: Setup) -> None:
    path, remote = leaky.path, leaky.remote
    store = gitstate.open_store(path)
    for r in range(5):  # many checkpoints beside the user's branches
        run = store.create_run(run_id=f"busy{r}")
        for step in range(20):
            run.checkpoint({"step": step, "token": f"sk-{r}-{step}"})
    store.close()
    head = git(path, "rev-parse", "HEAD").strip()
    tip = head
    for i in range(30):
        (path / "README").write_text(f"v{i}\n")
        git(path, "add", "README")
        tip = _commit(path, git(path, "write-tree").strip(), tip,
                      message=f"work {i}\n\nmentions the Gitstate-Format: 1 trailer in prose")
    git(path, "branch", "feature", tip)
    git(path, "update-ref", "refs/heads/main", tip, head)
    assert _push(path, "origin", "main").returncode == 0          # an update of a remote branch
    assert _push(path, "origin", "feature").returncode == 0       # a new remote branch
    assert _push(path, "origin", ":refs/heads/feature").returncode == 0  # a deletion
    git(path, "tag", "-a", "-m", "release", "v1", "main")
    git(path, "tag", "snapshot", "main^{tree}")  # a user tree tag (equal to a checkpoint snapshot's)
    assert _push(path, "origin", "--tags").returncode == 0
    url = git(path, "remote", "get-url", "origin").strip()
    assert _push(path, url, f"{head}:refs/heads/old").returncode == 0  # a URL, no tracking refs
    assert not (_remote_objects(remote) & leaky.private)
    assert "refs/agentos" not in git(remote, "for-each-ref")


def test_allowed_remote_gets_everything_and_git_agentos_push_works(leaky: Setup, monkeypatch: pytest.MonkeyPatch) -> None:
    from gitstate_cli.main import cli

    git(leaky.path, "config", "agentos.pushRemotes", "elsewhere, origin")
    monkeypatch.chdir(leaky.path)
    res = CliRunner().invoke(cli, ["push", "origin"])
    assert res.exit_code == 0, res.output
    assert "refs/agentos/main/runs/secret/heads/main" in git(leaky.remote, "for-each-ref")
    assert _push(leaky.path, "--mirror", "origin").returncode == 0
    assert leaky.private <= _remote_objects(leaky.remote)


SHELLS = [["sh"]] + ([["bash", "--posix"]] if shutil.which("bash") else [])


def _hook(s: Setup, stdin: str, remote: str = "origin", shell: list[str] | None = None,
          ) -> subprocess.CompletedProcess[str]:
    url = git(s.path, "remote", "get-url", "origin").strip()
    return subprocess.run([*(shell or ["sh"]), str(s.path / ".git" / "hooks" / "pre-push"), remote, url],
                          cwd=s.path, input=stdin, capture_output=True, text=True, check=False, timeout=TIMEOUT)


@pytest.mark.parametrize("shell", SHELLS, ids=" ".join)
def test_hook_reads_lines_git_writes(leaky: Setup, shell: list[str]) -> None:
    """The hook run by hand with the lines git writes (also under bash --posix, besides sh)."""

    def hook(stdin: str, remote: str = "origin") -> subprocess.CompletedProcess[str]:
        return _hook(leaky, stdin, remote, shell)

    head = git(leaky.path, "rev-parse", "HEAD").strip()
    # the local ref is what the user typed and may hold spaces
    out = hook(f"main@{{1 day ago}} {leaky.cp} refs/heads/x {ZERO}\n")
    assert out.returncode == 1 and f"main@{{1 day ago}} ({leaky.cp[:12]})" in out.stderr
    # deletions and empty input send nothing
    assert hook(f"(delete) {ZERO} refs/heads/x {head}\n").returncode == 0
    assert hook(f"(delete) {ZERO} refs/agentos/main/runs/secret/run {head}\n").returncode == 0
    assert hook("").returncode == 0
    # a remote value we do not have is no reason to fail; a checkpoint the remote has is no leak
    assert hook(f"refs/heads/main {head} refs/heads/main {'1' * 40}\n").returncode == 0
    assert hook(f"{leaky.cp} {leaky.cp} refs/heads/x {leaky.cp}\n").returncode == 0
    # many refused refs: three are named, the rest counted
    lines = "".join(f"refs/tags/t{i} {leaky.cp} refs/tags/t{i} {ZERO}\n" for i in range(5))
    out = hook(lines)
    assert out.returncode == 1 and "refs/tags/t2" in out.stderr and "and 2 more" in out.stderr
    # a remote name that would be a glob pattern is not used as one (no tracking refs are trusted)
    git(leaky.path, "config", "remote.o*.url", git(leaky.path, "remote", "get-url", "origin").strip())
    git(leaky.path, "update-ref", "refs/remotes/origin/seen", leaky.cp)
    assert hook(f"{leaky.cp} {leaky.cp} refs/heads/x {ZERO}\n", remote="o*").returncode == 1


def test_tracking_refs_of_a_longer_remote_name_are_not_trusted(leaky: Setup) -> None:
    # refs/remotes/origin/more/* belongs to remote "origin/more", not to origin: a checkpoint in it
    # says nothing about what origin has
    git(leaky.path, "remote", "add", "origin/more", bare(leaky.remote.parent / "more.git").as_uri())
    git(leaky.path, "update-ref", "refs/remotes/origin/more/main", leaky.cp)
    _assert_refused(leaky, "origin", f"{leaky.cp}:refs/heads/x")
    # the same ref as origin's own tracking ref is trusted (the remote had it when fetched)
    git(leaky.path, "update-ref", "refs/remotes/origin/seen", leaky.cp)
    assert _hook(leaky, f"{leaky.cp} {leaky.cp} refs/heads/x {ZERO}\n").returncode == 0


def test_old_hook_is_updated(tmp_path: Path) -> None:
    path = machine(tmp_path / "A", bare(tmp_path / "origin.git").as_uri(), allow=None)
    hook = path / ".git" / "hooks" / "pre-push"
    (path / ".git" / "hooks").mkdir(exist_ok=True)
    (path / ".git" / "hooks" / "pre-push.gitstate-chained").write_text("#!/bin/sh\nexit 0\n")
    (path / ".git" / "hooks" / "pre-push.gitstate-chained").chmod(0o755)
    hook.write_text("#!/bin/sh\n# gitstate-pre-push-guard v1 (installed by `git agentos setup --hooks`)\nexit 0\n")
    hook.chmod(0o755)
    store = gitstate.open_store(path)
    result = gitstate.install_hooks(store)
    assert result.action == "updated" and result.chained
    assert hook.read_text() == hooks.HOOK_SCRIPT and f"{hooks.MARKER} v3" in hook.read_text()
    assert gitstate.install_hooks(store).action == "unchanged"


def _assert_all_marked(path: Path) -> None:
    every = git(path, "rev-list", "--glob=refs/agentos/*").split()
    marked = git(path, "rev-list", "--basic-regexp", "--grep=^Gitstate-Format: [0-9][0-9]*$",
                 "--glob=refs/agentos/*").split()
    assert every and sorted(every) == sorted(marked)


def test_every_gitstate_commit_carries_the_trailer(repo: Path) -> None:
    """The hook recognises gitstate commits by their Gitstate-Format trailer: every kind has it."""
    store = gitstate.open_store(repo)
    run = store.create_run(run_id="kinds", workflow="wf")          # run record
    for step in range(4):
        run.checkpoint({"step": step}, files=True)                 # checkpoints
    with run.node("plan"):                                         # node entry and exit
        pass
    run.files.write("a/b.txt", "one", author="x", reason="first\n\nbody")  # session files
    run.files.write("a/b.txt", "two", author="x")
    run.prune(keep_latest=3)                                       # rewritten checkpoints
    run.restore(run.head())                                        # restore safety checkpoint
    run.fork(run.head().id, "other")  # type: ignore[union-attr]
    store.close()
    _assert_all_marked(repo)


def test_every_langgraph_commit_carries_the_trailer(repo: Path) -> None:
    pytest.importorskip("langgraph.checkpoint.base")
    from langgraph.checkpoint.base import empty_checkpoint

    from gitstate.langgraph import GitCheckpointSaver

    saver = GitCheckpointSaver(gitstate.open_store(repo))
    config: dict = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    for step in range(3):
        cp = empty_checkpoint()
        cp["channel_values"] = {"x": step}
        cp["channel_versions"] = {"x": step + 1}
        config = dict(saver.put(config, cp, {"source": "loop", "step": step}, {"x": step + 1}))
        saver.put_writes(config, [("x", step)], task_id=f"task-{step}")
    saver.copy_thread("t", "t2")
    saver.prune(["t2"], strategy="keep_latest")
    _assert_all_marked(repo)


def test_bench_script_runs(tmp_path: Path) -> None:
    """scripts/bench_leak_guard.py completes on a tiny repository (timings are never asserted)."""
    script = Path(__file__).resolve().parents[2] / "scripts" / "bench_leak_guard.py"
    proc = subprocess.run([sys.executable, str(script), "--history", "20", "--commits", "10",
                           "--checkpoints", "30", "--rounds", "1"],
                          capture_output=True, text=True, check=False, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    assert "added by the guard" in proc.stdout and "60 gitstate commits" in proc.stdout
