"""The pre-push leak guard, bundles, untrusted remotes, and the CLI commands for sharing."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import git
from remote_helpers import bare, machine

import gitstate
from gitstate.verify.checks import verify


def _push(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # git-agentos on PATH: the hook scans what goes to an allowed remote (and refuses without it)
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    return subprocess.run(["git", "push", *args], cwd=repo, capture_output=True, text=True, check=False, env=env)


@pytest.fixture
def guarded(tmp_path: Path) -> tuple[Path, gitstate.Store]:
    """Machine A with one run, origin allowed, a disallowed ``backup`` remote, hooks installed."""
    path = machine(tmp_path / "A", bare(tmp_path / "origin.git").as_uri())
    git(path, "remote", "add", "backup", bare(tmp_path / "backup.git").as_uri())
    store = gitstate.open_store(path)
    store.create_run(run_id="secret").checkpoint({"api_key": "sk-..."})
    assert gitstate.install_hooks(store).action == "installed"
    return path, store


def test_mirror_push_to_disallowed_remote_is_refused(tmp_path: Path, guarded: tuple[Path, gitstate.Store]) -> None:
    path, store = guarded
    out = _push(path, "--mirror", "backup")
    assert out.returncode != 0 and "refusing to push agent checkpoints" in out.stderr
    assert git(tmp_path / "backup.git", "for-each-ref") == ""
    # a hand-written refspec that renames the ref is caught too
    out = _push(path, "backup", "refs/agentos/main/runs/secret/heads/main:refs/heads/innocent")
    assert out.returncode != 0 and git(tmp_path / "backup.git", "for-each-ref") == ""
    # ordinary branches still go anywhere; checkpoints go where allowed
    assert _push(path, "backup", "main").returncode == 0
    assert _push(path, "--mirror", "origin").returncode == 0
    assert "refs/agentos/" in git(tmp_path / "origin.git", "for-each-ref")
    with pytest.raises(gitstate.PushNotAllowedError):
        gitstate.push(store, "backup")
    git(path, "config", "--add", "agentos.pushRemotes", "backup")
    assert _push(path, "--mirror", "backup").returncode == 0


def test_existing_hook_is_chained_and_install_is_idempotent(tmp_path: Path) -> None:
    path = machine(tmp_path / "A", bare(tmp_path / "origin.git").as_uri())
    hooks = tmp_path / "shared-hooks"  # core.hooksPath is respected
    git(path, "config", "core.hooksPath", str(hooks))
    hooks.mkdir()
    mine = hooks / "pre-push"
    mine.write_text('#!/bin/sh\necho "$1" >> "$(git rev-parse --git-dir)/mine.log"\ncat >> "$(git rev-parse --git-dir)/mine.log"\nexit 0\n')
    mine.chmod(0o755)
    store = gitstate.open_store(path)
    result = gitstate.install_hooks(store)
    assert result.action == "installed" and result.chained == str(hooks / "pre-push.gitstate-chained")
    assert gitstate.install_hooks(store).action == "unchanged"
    assert (hooks / "pre-push.gitstate-chained").read_text().startswith("#!/bin/sh\necho")
    assert _push(path, "origin", "main").returncode == 0
    log = (path / ".git" / "mine.log").read_text()
    assert log.startswith("origin\nrefs/heads/main ")  # the chained hook got the args and stdin
    # a failing chained hook still stops the push
    (hooks / "pre-push.gitstate-chained").write_text("#!/bin/sh\nexit 3\n")
    assert _push(path, "origin", "HEAD:refs/heads/other").returncode != 0
    # someone replaced our hook while a chained one exists: refuse rather than lose one of them
    mine.write_text("#!/bin/sh\nexit 0\n")
    with pytest.raises(gitstate.HookInstallError, match="by hand"):
        gitstate.install_hooks(store)


def test_bundle_round_trip(tmp_path: Path) -> None:
    a = gitstate.open_store(machine(tmp_path / "A", "file:///nonexistent"))
    b = gitstate.open_store(machine(tmp_path / "B", "file:///nonexistent"))
    run = a.create_run(workflow="w", run_id="r1")
    for step in range(4):
        run.checkpoint({"step": step}, node="n")
    a.create_run(run_id="r2").checkpoint({})
    bundle = tmp_path / "runs.bundle"
    assert gitstate.export_bundle(a, ["r1"], bundle) == ["refs/agentos/main/runs/r1/heads/main",
                                                         "refs/agentos/main/runs/r1/nodes/main",
                                                         "refs/agentos/main/runs/r1/run"]
    assert "refs/agentos/main/runs/r1/run" in git(tmp_path, "bundle", "list-heads", str(bundle))
    results = gitstate.import_bundle(b, bundle)
    assert [(r.run_id, r.status) for r in results] == [("r1", "created")]
    assert [cp.id for cp in b.get_run("r1").history()] == [cp.id for cp in run.history()]
    assert b.get_run("r1").head().state == {"step": 3}  # type: ignore[union-attr]
    assert {r.status for r in gitstate.import_bundle(b, bundle)} == {"up-to-date"}
    # both advance: importing again keeps the bundle's line beside ours
    b.get_run("r1").checkpoint({"b": 1})
    run.checkpoint({"a": 1})
    gitstate.export_bundle(a, ["r1"], bundle)
    results = gitstate.import_bundle(b, bundle)
    assert results[0].status == "diverged"
    assert sorted(b.get_run("r1").branches()) == ["main", "main@bundle"]
    assert verify(b).ok
    with pytest.raises(gitstate.RunNotFound):
        gitstate.export_bundle(a, ["nope"], bundle)
    (tmp_path / "junk.bundle").write_bytes(b"not a bundle")
    with pytest.raises(gitstate.RemoteError):
        gitstate.import_bundle(b, tmp_path / "junk.bundle")


def test_bundle_is_written_through_links_and_into_pipes(tmp_path: Path) -> None:
    """export writes as a shell's ``>`` would: through a symbolic link (the link stays; git's lock
    file and rename would replace it by a file) and into a pipe (never replaced by a file)."""
    a = gitstate.open_store(machine(tmp_path / "A", "file:///nonexistent"))
    a.create_run(run_id="r1").checkpoint({"x": 1})
    real, link = tmp_path / "real.bundle", tmp_path / "link.bundle"
    link.symlink_to(real)
    gitstate.export_bundle(a, ["r1"], link)
    assert link.is_symlink() and "refs/agentos/main/runs/r1/run" in git(tmp_path, "bundle", "list-heads", str(real))
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    gitstate.export_bundle(a, ["r1"], fifo)
    reader.join(timeout=60)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and got and got[0] == real.read_bytes()


def _hostile_remote(tmp_path: Path) -> Path:
    """A bare repository with refs/agentos/... that no gitstate wrote."""
    src = machine(tmp_path / "evil", "file:///nonexistent")
    store = gitstate.open_store(src)
    store.create_run(run_id="good").checkpoint({"ok": True})
    store.close()
    head = git(src, "rev-parse", "HEAD").strip()
    blob = subprocess.run(["git", "hash-object", "-w", "--stdin"], cwd=src, input="x" * 100_000,
                          capture_output=True, text=True, check=True).stdout.strip()
    garbage = subprocess.run(["git", "hash-object", "-w", "--stdin"], cwd=src, input="\xff\xfe garbage",
                             capture_output=True, text=True, check=True).stdout.strip()
    tree = subprocess.run(["git", "mktree"], cwd=src, input=f"100644 blob {garbage}\tmeta.cbor\n",
                          capture_output=True, text=True, check=True).stdout.strip()
    bad_commit = git(src, "commit-tree", tree, "-m", "not a checkpoint").strip()
    for ref, oid in [("refs/agentos/main/runs/odd.name/heads/main", head),   # not decodable
                     ("refs/agentos/main/runs/blob/heads/main", blob),       # not a commit
                     ("refs/agentos/main/runs/corrupt/heads/main", bad_commit),  # payload garbage
                     ("refs/agentos/main/runs/good/extra/deep/ref", head)]:  # unknown kind
        git(src, "update-ref", ref, oid)
    server = bare(tmp_path / "evil.git")
    git(src, "push", "-q", server.as_uri(), "refs/agentos/*:refs/agentos/*")
    return server


def test_untrusted_remote_does_not_crash_pull(tmp_path: Path) -> None:
    server = _hostile_remote(tmp_path)
    b = gitstate.open_store(machine(tmp_path / "B", server.as_uri()))
    results = gitstate.pull(b)
    by_ref = {r.ref.split("/runs/", 1)[1]: r for res in results for r in res.refs}
    assert by_ref["odd.name/heads/main"].status == "skipped"
    assert by_ref["blob/heads/main"].status == "skipped" and "blob" in by_ref["blob/heads/main"].message
    assert by_ref["good/heads/main"].status == "created"
    assert not git(tmp_path / "B", "for-each-ref", "refs/agentos/main/runs/odd.name",
                   "refs/agentos/main/runs/blob", "refs/agentos-incoming")
    # the garbage commit is a commit, but its run has no run record: not pulled (no run to list)
    assert by_ref["corrupt/heads/main"].status == "skipped"
    assert "no run record" in by_ref["corrupt/heads/main"].message
    assert verify(b).ok
    assert b.get_run("good").head().state == {"ok": True}  # type: ignore[union-attr]
    assert [s.id for s in b.list_runs()] == ["good"]


def test_missing_objects_fail_cleanly(tmp_path: Path) -> None:
    server = bare(tmp_path / "broken.git")
    (server / "refs" / "agentos" / "main" / "runs" / "x" / "heads").mkdir(parents=True)
    (server / "refs" / "agentos" / "main" / "runs" / "x" / "heads" / "main").write_text("1" * 40 + "\n")
    b = gitstate.open_store(machine(tmp_path / "B", server.as_uri()))
    before = git(tmp_path / "B", "for-each-ref")
    try:
        results = gitstate.pull(b)
    except gitstate.RemoteError as exc:
        assert "fetch" in str(exc) and "\n" not in str(exc)
    else:
        assert all(not r.ok for r in results)
    assert git(tmp_path / "B", "for-each-ref") == before


def test_cli_push_pull_export_import(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gitstate_cli.main import cli

    url = bare(tmp_path / "server.git").as_uri()
    a_path, b_path = machine(tmp_path / "A", url), machine(tmp_path / "B", url)
    with gitstate.open_store(a_path) as a:
        a.create_run(run_id="r").checkpoint({"x": 1})
    runner = CliRunner()
    monkeypatch.chdir(a_path)
    res = runner.invoke(cli, ["push", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)[0]["status"] == "pushed"
    res = runner.invoke(cli, ["export", "r", "--output", str(tmp_path / "r.bundle")])
    assert res.exit_code == 0 and "2 ref(s)" in res.stdout
    res = runner.invoke(cli, ["setup", "--hooks"])
    assert res.exit_code == 0 and "pre-push hook installed" in res.stdout
    res = runner.invoke(cli, ["push", "elsewhere"])
    assert res.exit_code == 1

    monkeypatch.chdir(b_path)
    res = runner.invoke(cli, ["pull"])
    assert res.exit_code == 0 and "created r" in res.stdout
    res = runner.invoke(cli, ["import", str(tmp_path / "r.bundle"), "--json"])
    assert res.exit_code == 0 and json.loads(res.stdout)[0]["status"] == "up-to-date"
    for name in ("push", "pull", "export", "import"):
        assert runner.invoke(cli, [name, "--help"]).exit_code == 0
    assert os.path.exists(b_path / ".git")
