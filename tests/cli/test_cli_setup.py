"""`git agentos setup` survives the virtual environment that ran it (the textconv finds its
converter when git runs it), and `setup --check` says whether the textconv, attributes and hook
work, changing nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import git, user_snapshot

BIN = Path(sys.executable).parent
PLAIN = "/usr/bin:/bin"


def run(cwd: Path, *args: str, path: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PATH=path)
    return subprocess.run(list(args), cwd=cwd, input=input, capture_output=True, text=True, env=env, check=False)


def _store_files(repo: Path) -> dict[str, int]:
    """Every file under .git with its mtime (but the index, which `git status` refreshes)."""
    return {p.relative_to(repo / ".git").as_posix(): p.stat().st_mtime_ns for p in (repo / ".git").rglob("*")
            if p.is_file() and p.name != "index"}


def test_textconv_survives_deleting_the_venv_that_ran_setup(repo: Path, tmp_path: Path) -> None:
    exe = str(BIN / "git-agentos")
    full = f"{BIN}{os.pathsep}{PLAIN}"
    assert run(repo, exe, "checkpoint", "r", "--state", "-", path=full, input='{"answer": 41}').returncode == 0
    assert run(repo, exe, "checkpoint", "r", "--state", "-", path=full, input='{"answer": 42}').returncode == 0
    venv = tmp_path / "doomed-venv" / "bin"  # stands for the venv that runs setup, deleted later
    venv.mkdir(parents=True)
    (venv / "git-agentos").symlink_to(exe)
    done = run(repo, "git-agentos", "setup", path=f"{venv}{os.pathsep}{PLAIN}")
    assert done.returncode == 0, done.stderr
    config = git(repo, "config", "--get", "diff.agentos.textconv")
    assert str(venv) in config  # a fallback only: PATH is searched first, at run time
    shown = run(repo, "git", "show", "refs/agentos/main/runs/r/heads/main", "--", "state", path=PLAIN)
    assert shown.returncode == 0 and "\n+42\n" in shown.stdout, shown.stderr  # via the absolute path
    import shutil

    shutil.rmtree(tmp_path / "doomed-venv")
    # the venv is gone: git show still works (raw bytes: nothing on PATH can decode) ...
    shown = run(repo, "git", "show", "refs/agentos/main/runs/r/heads/main", "--", "state", path=PLAIN)
    assert shown.returncode == 0 and "answer.cbor" in shown.stdout, shown.stderr
    # ... and decodes again as soon as any git-agentos is on PATH, without running setup again
    shown = run(repo, "git", "show", "refs/agentos/main/runs/r/heads/main", "--", "state", path=full)
    assert shown.returncode == 0 and "\n+42\n" in shown.stdout, shown.stderr
    check = run(repo, exe, "setup", "--check", "--json", path=PLAIN)
    assert check.returncode == 1 and json.loads(check.stdout)["textconv"]["state"] == "raw"
    check = run(repo, exe, "setup", "--check", "--json", path=full)
    assert check.returncode == 0 and json.loads(check.stdout)["textconv"]["state"] == "ok"


def test_setup_check_reports_and_changes_nothing(repo: Path) -> None:
    exe = str(BIN / "git-agentos")
    full = f"{BIN}{os.pathsep}{PLAIN}"
    before, files = user_snapshot(repo), _store_files(repo)
    done = run(repo, exe, "setup", "--check", path=full)
    assert done.returncode == 1 and "missing" in done.stdout and done.stderr.startswith("error: ")
    assert (user_snapshot(repo), _store_files(repo)) == (before, files)
    report = json.loads(run(repo, exe, "setup", "--check", "--json", path=full).stdout)
    assert report["ok"] is False and report["textconv"]["state"] == "missing"
    assert report["attributes"]["state"] == "missing" and report["hook"]["state"] == "missing"

    assert run(repo, exe, "setup", "--hooks", path=full).returncode == 0
    git(repo, "config", "--add", "agentos.pushRemotes", "origin")
    files = _store_files(repo)
    report = json.loads(run(repo, exe, "setup", "--check", "--json", path=full).stdout)
    assert report["ok"] is True and report["textconv"]["state"] == "ok" and report["attributes"]["state"] == "ok"
    assert report["hook"]["state"] == "installed" and report["push_remotes"] == ["origin"]
    human = run(repo, exe, "setup", "--check", path=full)
    assert human.returncode == 0 and "textconv:   ok" in human.stdout and "origin" in human.stdout
    assert _store_files(repo) == files  # --check wrote nothing

    hook = repo / ".git" / "hooks" / "pre-push"
    hook.chmod(0o644)
    report = json.loads(run(repo, exe, "setup", "--check", "--json", path=full).stdout)
    assert report["ok"] is False and report["hook"]["state"] == "not-executable"
    hook.chmod(0o755)

    # an older setup wrote an absolute path that no longer exists: git show fails; --check says so
    git(repo, "config", "diff.agentos.textconv", "/nonexistent/venv/bin/git-agentos textconv")
    report = json.loads(run(repo, exe, "setup", "--check", "--json", path=full).stdout)
    assert report["ok"] is False and report["textconv"]["state"] == "broken"
    assert run(repo, exe, "setup", path=full).returncode == 0  # setup repairs it
    assert json.loads(run(repo, exe, "setup", "--check", "--json", path=full).stdout)["ok"] is True


def test_check_says_exactly_what_to_do_when_git_agentos_is_not_on_path(repo: Path) -> None:
    """Run by its absolute path (or as ``python -m gitstate_cli``) from a shell whose PATH lacks
    the virtual environment, ``setup --check`` says that ``git agentos`` does not work there and
    names the directory to add to PATH; following that advice makes it work."""
    exe = str(BIN / "git-agentos")
    assert run(repo, exe, "checkpoint", "r", "--state", "-", path=PLAIN, input='{"answer": 42}').returncode == 0
    assert run(repo, "git", "agentos", "runs", path=PLAIN).returncode != 0  # git finds no git-agentos
    for argv in ([exe], [sys.executable, "-m", "gitstate_cli"]):
        # setup run from that shell records this installation, so git show decodes without PATH
        assert run(repo, *argv, "setup", path=PLAIN).returncode == 0
        shown = run(repo, "git", "show", "refs/agentos/main/runs/r/heads/main", "--", "state", path=PLAIN)
        assert shown.returncode == 0 and "+42" in shown.stdout, (argv, shown.stdout, shown.stderr)
        check = run(repo, *argv, "setup", "--check", path=PLAIN)
        assert check.returncode == 1, (argv, check.stdout, check.stderr)
        assert "git agentos: not-on-path" in check.stdout and "textconv:   ok" in check.stdout
        error = check.stderr.strip().splitlines()
        assert len(error) == 1 and error[0].startswith("error: git-agentos is not on PATH"), check.stderr
        assert f"add {BIN} to PATH (export PATH={BIN}:\"$PATH\")" in error[0], error[0]
        report = json.loads(run(repo, *argv, "setup", "--check", "--json", path=PLAIN).stdout)
        assert report["ok"] is False and report["textconv"]["state"] == "ok"
        assert report["git_agentos"]["state"] == "not-on-path" and report["git_agentos"]["path"] is None
        assert report["git_agentos"]["installed"] == exe and str(BIN) in report["git_agentos"]["advice"]
    # the advice, followed: BIN on PATH, and git finds the subcommand
    fixed = run(repo, "sh", "-c", f'export PATH={BIN}:"$PATH"; git agentos setup --check --json', path=PLAIN)
    assert fixed.returncode == 0, fixed.stderr
    assert json.loads(fixed.stdout)["git_agentos"] == {"state": "ok", "path": exe, "installed": exe, "advice": None}


def test_check_without_an_installed_script_names_python_m(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An interpreter that has gitstate but no ``git-agentos`` (run from a checkout): the advice is
    ``<python> -m gitstate_cli``, which works."""
    from click.testing import CliRunner

    from gitstate_cli import cmd_setup
    from gitstate_cli.main import cli

    monkeypatch.setattr(cmd_setup, "own_executable", lambda: None)
    monkeypatch.setenv("PATH", PLAIN)
    monkeypatch.chdir(repo)
    result = CliRunner().invoke(cli, ["setup", "--check", "--json"])
    assert result.exit_code == 1
    command = json.loads(result.stdout)["git_agentos"]
    assert command["state"] == "not-installed" and command["installed"] is None
    assert f"run {sys.executable} -m gitstate_cli instead of git agentos" in command["advice"], command
    works = run(repo, sys.executable, "-m", "gitstate_cli", "runs", "--json", path=PLAIN)
    assert works.returncode == 0 and json.loads(works.stdout) == []


def test_setup_says_how_to_keep_checkpoints_out_of_git_log_all(repo: Path) -> None:
    """`git log --all` lists checkpoints: setup prints the git log that leaves them out (it works
    on the git in use), and --hide-refs keeps their refs out of git log's decorations, once,
    keeping the user's other patterns; --check reports it and changes nothing."""
    exe = str(BIN / "git-agentos")
    full = f"{BIN}{os.pathsep}{PLAIN}"
    assert run(repo, exe, "checkpoint", "r", "--state", "-", input='{"a": 1}', path=full).returncode == 0
    tip = git(repo, "rev-parse", "refs/agentos/main/runs/r/heads/main").strip()
    assert tip in git(repo, "log", "--all", "--format=%H")
    done = run(repo, exe, "setup", path=full)
    assert done.returncode == 0 and "git log --exclude='refs/agentos/*' --all" in done.stdout
    assert run(repo, exe, "setup", "--check", "--json", path=full).stdout.count('"refs_hidden": false') == 1
    assert tip not in git(repo, "log", "--exclude=refs/agentos/*", "--all", "--format=%H")
    assert git(repo, "log", "--exclude=refs/agentos/*", "--all", "--format=%H").split()  # the user's own commits
    labelled = ["-c", "log.initialDecorationSet=all", "log", "--all", "--decorate", "--format=%H %d"]
    assert "refs/agentos/" in git(repo, *labelled)
    git(repo, "config", "--add", "log.excludeDecoration", "refs/notes/")  # the user's own pattern stays
    before = user_snapshot(repo)
    hidden = run(repo, exe, "setup", "--hide-refs", "--json", path=full)
    assert hidden.returncode == 0 and json.loads(hidden.stdout)["hide_refs"]["changed"] is True
    assert "refs/agentos/" not in git(repo, *labelled) and tip in git(repo, *labelled)
    again = run(repo, exe, "setup", "--hide-refs", path=full)
    assert again.returncode == 0 and "already set" in again.stdout
    values = git(repo, "config", "--get-all", "log.excludeDecoration").split()
    assert values == ["refs/notes/", "refs/agentos/"]
    after = user_snapshot(repo)
    assert {k: v for k, v in after.items() if k != "config"} == {k: v for k, v in before.items() if k != "config"}
    assert after["config"] == before["config"] + b"\texcludeDecoration = refs/agentos/\n"  # asked for by name
    report = json.loads(run(repo, exe, "setup", "--check", "--json", path=full).stdout)
    assert report["refs_hidden"] is True
    refused = run(repo, exe, "setup", "--check", "--hide-refs", path=full)
    assert refused.returncode == 2 and "--check changes nothing" in refused.stderr
