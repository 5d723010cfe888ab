"""Whatever the API stores, the CLI prints without a traceback, and `--json` is strict JSON: maps
with both integer and text keys, the largest integers stored, non-finite floats, bytes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import gitstate
from gitstate_cli.main import cli


def _strict(text: str) -> object:
    def refuse(name: str) -> object:
        raise ValueError(f"not strict JSON: {name}")

    return json.loads(text, parse_constant=refuse)


def test_unusual_state_prints(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = gitstate.open_store(repo).create_run(run_id="odd")
    run.checkpoint({"mixed": {1: "int key", "b": "text key"}, "big": 2**8192 - 1, "nan": float("nan"),
                    "inf": float("-inf"), "raw": b"\x00\xff"})
    monkeypatch.chdir(repo)
    runner = CliRunner()
    human = runner.invoke(cli, ["show", "odd"], prog_name="git agentos")
    assert human.exit_code == 0 and human.exception is None, human.output
    result = runner.invoke(cli, ["show", "odd", "--json"], prog_name="git agentos")
    assert result.exit_code == 0, result.output
    state = _strict(result.stdout)["state"]  # type: ignore[index]
    assert state["mixed"] == {"1": "int key", "b": "text key"}
    assert state["big"] == 2**8192 - 1 and state["nan"] == "NaN" and state["inf"] == "-Infinity"
    assert state["raw"] == {"$bytes": "00ff"}
    for args in (["runs", "--json"], ["log", "odd", "--json"], ["verify", "--json"]):
        done = runner.invoke(cli, args, prog_name="git agentos")
        assert done.exit_code == 0 and done.exception is None, (args, done.output)
        _strict(done.stdout)


def test_keys_that_print_alike_are_all_shown(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = gitstate.open_store(repo).create_run(run_id="alike")
    run.checkpoint({"m": {1: "int", "1": "str"}})
    monkeypatch.chdir(repo)
    result = CliRunner().invoke(cli, ["show", "alike", "--json"], prog_name="git agentos")
    assert result.exit_code == 0, result.output
    assert _strict(result.stdout)["state"]["m"] == {"1 (int)": "int", "1": "str"}  # type: ignore[index]
    human = CliRunner().invoke(cli, ["show", "alike"], prog_name="git agentos")
    assert '"1 (int)": "int"' in human.output and '"1": "str"' in human.output


def test_store_text_cannot_drive_the_terminal(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = gitstate.open_store(repo)
    hostile = "evil\x1b]0;pwned\x07\x1b[31mred\tcol\nline"
    store.create_run(run_id=hostile, workflow="w\x1b[2J").checkpoint({"a": 1}, node="n\x1b[1A")
    store.create_run(run_id="日本語のラン").checkpoint({"a": 1})
    store.create_run(run_id="cafe\u0301s").checkpoint({"a": 1})  # a combining accent takes no column
    monkeypatch.chdir(repo)
    out = CliRunner().invoke(cli, ["runs"], prog_name="git agentos").stdout
    assert "\x1b" not in out and "\x07" not in out
    assert "evil\\x1b]0;pwned\\x07\\x1b[31mred\\tcol\\nline" in out
    from gitstate_cli.output import width

    rows = [line for line in out.splitlines()[1:] if "running" in line]
    assert len(rows) == 3
    assert len({width(row[: row.index("running")]) for row in rows}) == 1  # columns line up (CJK ids too)
    assert (width("cafe\u0301s"), width("日本語"), width("a\u200bb")) == (5, 6, 2)


def test_command_hints_quote_hostile_names_safely(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A hint the user may copy (``undo with: git agentos undo ...``) never carries raw control
    characters, and bash reads it back as the exact run and branch."""
    import shutil
    import subprocess

    hostile_run, hostile_branch = "evil\x1b]0;pwned\x07'x", "br\tan\u0085ch"
    run = gitstate.open_store(repo).create_run(run_id=hostile_run)
    run.checkpoint({"a": 1})
    run.checkpoint({"a": 2})
    run.fork(run.head().id, hostile_branch)  # type: ignore[union-attr]
    monkeypatch.chdir(repo)
    done = CliRunner().invoke(cli, ["rollback", f"{hostile_run}@{hostile_branch}", "~1"], prog_name="git agentos")
    assert done.exit_code == 0, done.output
    assert not any(ch in done.stdout for ch in "\x1b\x07\t\u0085"), done.stdout
    hint = done.stdout.split("undo with: git agentos undo ", 1)[1].strip()
    bash = shutil.which("bash")
    assert bash is not None
    echoed = subprocess.run([bash, "-c", f"printf %s {hint}"], capture_output=True, check=True,
                            env={"LC_ALL": "C.UTF-8"}).stdout.decode()
    assert echoed == f"{hostile_run}@{hostile_branch}"


def test_diff_file_names_cannot_drive_the_terminal(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A snapshotted file name (possibly from a pulled run) is escaped in `diff` like any store text."""
    run = gitstate.open_store(repo).create_run(run_id="files")
    monkeypatch.chdir(repo)
    run.checkpoint({"a": 1}, files=True)
    (repo / "evil\x1b]0;pwned\x07name").write_text("x")
    (repo / "tab\tname").write_text("y")
    run.checkpoint({"a": 2}, files=True)
    done = CliRunner().invoke(cli, ["diff", "files~1", "files"], prog_name="git agentos")
    assert done.exit_code == 0, done.output
    assert "\x1b" not in done.stdout and "\x07" not in done.stdout and "\t" not in done.stdout, done.stdout
    assert "+ file  evil\\x1b]0;pwned\\x07name" in done.stdout and "+ file  tab\\tname" in done.stdout


def test_session_file_cannot_drive_the_terminal(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`files RUN PATH` (a session file, possibly pulled from an untrusted remote) writes its bytes
    exactly into a pipe or a file; on a terminal (a real pty here) text has its control characters
    escaped, newlines and tabs kept, and a binary file is refused with one error line saying how to
    get it (redirect, or --json), printing none of its bytes."""
    import os

    from test_cli_pager import EXE, on_a_terminal

    hostile = "title\x1b]0;pwned\x07\n\tred\x1b[31m text\r\u009b2J\n".encode()
    binary = {"nul.bin": b"PNG\x00\x1b[2J", "latin1.txt": b"caf\xe9 \x1b[2J\n"}
    run = gitstate.open_store(repo).create_run(run_id="r")
    for name, data in {"evil.txt": hostile, **binary}.items():
        run.files.write(name, data, author="peer", reason="pulled")  # type: ignore[attr-defined]
    monkeypatch.chdir(repo)
    for name, data in {"evil.txt": hostile, **binary}.items():  # not a terminal: exact bytes
        piped = CliRunner().invoke(cli, ["files", "r", name], prog_name="git agentos")
        assert piped.exit_code == 0 and piped.stdout_bytes == data, piped.output

    env = dict(os.environ, PATH=f"{Path(EXE).parent}{os.pathsep}{os.environ['PATH']}")
    code, shown = on_a_terminal([EXE, "files", "r", "evil.txt"], repo, env)
    assert code == 0, shown
    assert shown == "title\\x1b]0;pwned\\x07\n\tred\\x1b[31m text\\r\\x9b2J\n"
    for name in binary:
        code, shown = on_a_terminal([EXE, "files", "r", name, "--version", "1"], repo, env)
        assert code == 2, shown
        assert shown.startswith(f"error: {name} is a binary file") and shown.count("\n") == 1, shown
        assert f"git agentos files r {name} --version 1 > FILE" in shown and "--json" in shown
        assert "\x1b" not in shown and "\x00" not in shown
