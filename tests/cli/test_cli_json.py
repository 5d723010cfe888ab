"""`--json` on every command: one strict JSON document on success, an {"error": ...} object (and
the usual `error:` line on stderr) on failure, with the documented exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner
from conftest import git
from remote_helpers import bare

import gitstate
from gitstate_cli.main import COMMANDS, cli

BIN = Path(sys.executable).parent


def strict(text: str) -> Any:
    """Parse as strict JSON: NaN/Infinity are not JSON, and exactly one document."""
    def refuse(token: str) -> Any:
        raise ValueError(f"not strict JSON: {token}")
    return json.loads(text, parse_constant=refuse)


def invoke(*args: str, input: str | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args), input=input, prog_name="git agentos")
    return result.exit_code, result.stdout, result.stderr


def test_every_registered_command_has_a_json_flag() -> None:
    ctx = click.Context(cli)
    for name in COMMANDS:
        command = cli.get_command(ctx, name)
        assert command is not None
        flags = {o for p in command.params for o in getattr(p, "opts", [])}
        assert "--json" in flags, f"{name} has no --json"
        assert "JSON" in (command.help or ""), f"{name} does not document its JSON shape"


@pytest.fixture
def scene(repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A repository with a run (three checkpoints, files, a fork, a node), an allowed remote."""
    monkeypatch.chdir(repo)
    monkeypatch.setenv("PATH", f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")  # git-agentos for the textconv
    server = bare(tmp_path / "server.git")
    git(repo, "remote", "add", "origin", server.as_uri())
    git(repo, "config", "agentos.pushRemotes", "origin")
    (repo / "a.txt").write_text("one\n")
    for state in ('{"n": 1, "x": NaN}', '{"n": 2}', '{"n": 3}'):
        code, out, err = invoke("checkpoint", "r", "--state", "-", "--files", "--node", "plan", "--json", input=state)
        assert code == 0, err
    (tmp_path / "p.cbor").write_bytes(bytes.fromhex("a1616b6176"))  # {"k": "v"}
    return {"bundle": str(tmp_path / "r.bundle"), "html": str(tmp_path / "v.html"), "cbor": str(tmp_path / "p.cbor"),
            "demo": str(tmp_path / "demo"), "server": server.as_uri()}


# One successful invocation per command; a command added without a case here fails the test.
CASES: dict[str, list[list[str]]] = {
    "help": [["help"], ["help", "refs"], ["help", "log"]],
    "runs": [["runs"], ["runs", "--remote", "origin"]],
    "log": [["log", "r"], ["log", "r~1", "-n", "1"]],
    "show": [["show", "r~2"]],
    "diff": [["diff", "r~2", "r"]],
    "nodes": [["nodes", "r"]],
    "branches": [["branches", "r"]],
    "checkpoint": [["checkpoint", "r@side"]],
    "fork": [["fork", "r", "~1", "alt"]],
    "rollback": [["rollback", "r", "~1", "--dry-run"], ["rollback", "r", "~1"]],
    "undo": [["undo", "r"]],
    "branch": [["branch", "-d", "r@alt"]],
    "restore": [["restore", "r~1", "--dry-run"], ["restore", "r~1", "--force"]],
    "files": [["files", "r"]],
    "prune": [["prune", "r@side", "--keep", "2"]],
    "verify": [["verify"]],
    "scan": [["scan"]],
    "setup": [["setup"], ["setup", "--check"]],
    "push": [["push", "origin"]],
    "pull": [["pull", "origin"]],
    "clone-runs": [["clone-runs", "{server}"]],
    "export": [["export", "r", "-o", "{bundle}"]],
    "import": [["import", "{bundle}"]],
    "view": [["view", "r", "--html", "{html}"]],
    "textconv": [["textconv", "{cbor}"]],
    "demo": [["demo", "--dir", "{demo}"]],
    "pin": [["pin", "r"]],
    "unpin": [["unpin", "r"]],
    "gc": [["gc", "--keep-last", "2", "--dry-run"], ["gc", "--keep-last", "2", "--status", "running"]],
    "delete": [["delete", "r", "--yes"]],
}


def test_every_command_prints_strict_json(scene: dict[str, str]) -> None:
    assert set(CASES) == set(COMMANDS), set(COMMANDS) ^ set(CASES)
    for name in [*[n for n in CASES if n != "delete"], "delete"]:  # delete last
        for args in CASES[name]:
            args = [a.format(**scene) for a in args]
            code, out, err = invoke(*args, "--json")
            assert code == 0, (args, out, err)
            doc = strict(out)
            assert isinstance(doc, dict | list), args
            if isinstance(doc, dict):
                assert "error" not in doc, args


def test_nan_state_prints_as_a_string(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(repo)
    invoke("checkpoint", "r", "--state", "-", input='{"x": NaN, "y": Infinity}')
    doc = strict(invoke("show", "r", "--json")[1])
    assert doc["state"] == {"x": "NaN", "y": "Infinity"}


@pytest.mark.parametrize("args,code,kind", [
    (["log", "nope"], 1, "RunNotFound"),
    (["show", "r@nope"], 1, "BranchNotFound"),
    (["rollback", "r", "~9"], 1, "InvalidReferenceError"),
    (["undo", "nope"], 1, "RunNotFound"),
    (["fork", "r", "~0", "main"], 1, "BranchExistsError"),
    (["prune", "r", "--keep", "0"], 2, "UsageError"),
    (["delete", "r"], 2, "UsageError"),
    (["branch", "-d", "r@main"], 1, "BranchDeleteRefused"),
    (["restore", "r"], 1, "NoSnapshotError"),
    (["push", "origin"], 1, "PushNotAllowedError"),
    (["export", "nope", "-o", "x.bundle"], 1, "RunNotFound"),
    (["import", "missing.bundle"], 2, "UsageError"),
    (["checkpoint", "r", "--state", "/does/not/exist.json"], 2, "UsageError"),
    (["checkpoint", "r", "--node", ""], 2, "UsageError"),
    (["checkpoint", "r", "nosuchpath", "--files"], 2, "UsageError"),  # the library's UsageError
    (["checkpoint", "r", "--state", "latin1.json"], 2, "UsageError"),
    (["runs", "--bogus"], 2, "UsageError"),
    (["help", "nosuchtopic"], 2, "UsageError"),
])
def test_failures_print_an_error_object(repo: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], code: int,
                                        kind: str) -> None:
    monkeypatch.chdir(repo)
    invoke("checkpoint", "r", "--state", "-", input="{}")
    (repo / "latin1.json").write_bytes(b'{"x": "\xff"}')
    got, out, err = invoke(*args, "--json")
    assert got == code, (out, err)
    doc = strict(out)
    assert set(doc) >= {"error", "type", "exit_code"} and doc["type"] == kind and doc["exit_code"] == code
    assert err.count("\n") == 1 and err == f"error: {doc['error']}\n"
    assert "codec" not in err and "position" not in err  # no Python wording
    # without --json: the same error line, nothing on stdout
    got, out, err = invoke(*args)
    assert (got, out) == (code, "") and err.startswith("error: ")


def test_json_error_from_a_real_process(repo: Path) -> None:
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    done = subprocess.run(["git", "agentos", "log", "nope", "--json"], cwd=repo, capture_output=True, text=True,
                          env=env, check=False)
    assert done.returncode == 1
    assert strict(done.stdout) == {"error": "no run 'nope' in worktree 'main'", "type": "RunNotFound", "exit_code": 1}
    assert done.stderr == "error: no run 'nope' in worktree 'main'\n"
    done = subprocess.run(["git", "agentos", "log", "--json"], cwd=repo, capture_output=True, text=True, env=env,
                          check=False)
    assert done.returncode == 2 and strict(done.stdout)["type"] == "UsageError"


def test_partial_push_failure_prints_the_report_then_the_error(scene: dict[str, str], tmp_path: Path) -> None:
    other = tmp_path / "other"
    subprocess.run(["git", "clone", "-q", str(tmp_path / "server.git"), str(other)], check=True)
    assert invoke("push", "origin")[0] == 0
    # the remote's branch moves on from elsewhere; ours too: our push of main is refused
    git(tmp_path / "server.git", "update-ref", "refs/agentos/main/runs/r/heads/main",
        git(Path.cwd(), "rev-parse", "refs/agentos/main/runs/r/heads/main~1").strip())
    invoke("rollback", "r", "~2")
    invoke("checkpoint", "r", "--state", "-", input='{"diverged": true}')
    code, out, err = invoke("push", "origin", "--json")
    assert code == 1
    report = strict(out)
    assert isinstance(report, list) and not all(r["ok"] for r in report)
    assert err.startswith("error: ") and err.count("\n") == 1
    code, out, err = invoke("push", "origin")
    assert code == 1 and "pushed origin:" not in out and "rejected" in out
    assert "git agentos pull origin r" in out and "git agentos fork r@main @main" in out


def test_stored_text_that_is_not_unicode_is_printed_escaped(repo: Path, tmp_path: Path) -> None:
    """A key holding a lone surrogate, refused on write but possible in data pulled from elsewhere:
    every output escapes it (JSON stays strict and says the same), no command crashes."""
    from gitstate.format import encoding

    store = gitstate.open_store(repo)
    run = store.create_run(run_id="r")
    check = encoding.check_value
    encoding.check_value = lambda *args, **kwargs: None  # write what an older or foreign writer could
    try:
        run.checkpoint({"\ud800": "a"})
    finally:
        encoding.check_value = check
    run.checkpoint({"a": 1})
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", PYTHONIOENCODING="utf-8")
    for args in (["show", "r~1", "--json"], ["diff", "r~1", "r", "--json"], ["show", "r~1"], ["diff", "r~1", "r"],
                 ["log", "r"], ["view", "--html", str(tmp_path / "v.html")]):
        done = subprocess.run(["git", "agentos", *args], cwd=repo, capture_output=True, env=env, check=False)
        assert done.returncode == 0 and not done.stderr, (args, done.stderr)
        text = done.stdout.decode("utf-8")  # valid UTF-8
        if "--json" in args:
            assert "\\ud800" in text
    assert strict(subprocess.run(["git", "agentos", "show", "r~1", "--json"], cwd=repo, capture_output=True,
                                 env=env, check=True).stdout)["state"] == {"\ud800": "a"}
    assert "\\ud800" in (tmp_path / "v.html").read_text(encoding="utf-8")
