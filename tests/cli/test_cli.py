"""`git agentos` through click's CliRunner (stdout and stderr apart): a scenario driven only through
the CLI compared with the library, and bad input that must give one `error:` line and no change."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from conftest import bounded, git, user_snapshot

import gitstate
from gitstate.verify.checks import verify
from gitstate_cli.main import cli

FILES_API = hasattr(gitstate.Run, "restore")
needs_files = pytest.mark.skipif(not FILES_API, reason="workspace snapshots/restore (issue 3, branch files) not merged yet")


@pytest.fixture
def at_repo(repo: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(repo)
    return repo


def agentos(*args: str, input: str | None = None, code: int = 0) -> Result:
    result = CliRunner().invoke(cli, list(args), input=input, prog_name="git agentos")
    assert result.exit_code == code, (result.exit_code, result.stdout, result.stderr, result.exception)
    if code == 0:
        assert result.stderr == "" or "warning" in result.stderr
    return result


def as_json(*args: str, input: str | None = None) -> Any:
    return json.loads(agentos(*args, "--json", input=input).stdout)


def store_snapshot(repo: Path) -> str:
    return git(repo, "for-each-ref", "--format=%(refname) %(objectname)", "refs/agentos/")


def test_help_and_version() -> None:
    out = agentos("--help").stdout
    for name in ("runs", "log", "show", "diff", "checkpoint", "nodes", "rollback", "undo", "fork", "restore",
                 "files", "delete", "prune", "verify", "setup", "demo"):
        assert name in out
        assert agentos(name, "--help").stdout.startswith("Usage: git agentos " + name)
    assert agentos("--version").stdout.startswith("git agentos ")
    assert agentos("-h").stdout == out


def test_version_is_the_distribution_version() -> None:
    import importlib.metadata
    import tomllib

    from gitstate_cli.main import VERSION

    declared = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())["project"]["version"]
    assert VERSION == gitstate.__version__ == declared == importlib.metadata.version("git-agentos")
    assert agentos("--version").stdout == f"git agentos {declared}\n"


def test_checkpoint_with_node_is_a_node_boundary(at_repo: Path) -> None:
    """`checkpoint --node NAME` records the checkpoint as a step of NAME in the node log (the
    marker format of docs/FORMAT.md): `nodes` lists it, consecutive checkpoints of one node form
    one boundary, `node:NAME` names its exit, and the README's `fork my-run node:plan try-b` works."""
    cp0 = as_json("checkpoint", "my-run", "--state", "-", "--node", "plan", input='{"m": []}')
    cp1 = as_json("checkpoint", "my-run", "--state", "-", "--node", "plan", input='{"m": [1]}')
    cp2 = as_json("checkpoint", "my-run", "--state", "-", "--node", "edit", input='{"m": [1, 2]}')
    cp3 = as_json("checkpoint", "my-run", "--state", "-", input='{"m": [1, 2, 3]}')  # no node: no boundary
    assert as_json("nodes", "my-run") == [
        {"node": "plan", "entry": cp0["id"], "exit": cp1["id"], "status": "completed", "branch": "main"},
        {"node": "edit", "entry": cp2["id"], "exit": cp2["id"], "status": "completed", "branch": "main"}]
    rows = agentos("nodes", "my-run").stdout.splitlines()
    assert len(rows) == 3 and rows[1].split()[:2] == ["plan", "completed"], rows
    assert as_json("show", "my-run:node:plan")["id"] == cp1["id"]
    assert as_json("fork", "my-run", "node:plan", "try-b")["at"]["id"] == cp1["id"]
    # the same node after another one is a boundary of its own; a failed checkpoint fails its node
    cp4 = as_json("checkpoint", "my-run", "--state", "-", "--node", "plan", "--status", "failed", input="{}")
    nodes = as_json("nodes", "my-run")
    assert nodes[-1] == {"node": "plan", "entry": cp4["id"], "exit": cp4["id"], "status": "failed", "branch": "main"}
    assert len(nodes) == 3 and as_json("runs")[0]["status"] == "failed"
    store = gitstate.open_store(at_repo)
    history = [cp.id for cp in store.get_run("my-run").history()]
    assert history == [cp4["id"], cp3["id"], cp2["id"], cp1["id"], cp0["id"]]  # markers, not checkpoints
    # a rollback behind a boundary drops it with its checkpoints, as for `with run.node(...)`
    agentos("rollback", "my-run", cp1["id"])
    assert [n["node"] for n in as_json("nodes", "my-run")] == ["plan"]
    cp5 = as_json("checkpoint", "my-run", "--state", "-", "--node", "plan", input='{"again": 1}')
    assert as_json("nodes", "my-run") == [  # the log's newest boundary (the failed one) ended elsewhere
        {"node": "plan", "entry": cp0["id"], "exit": cp1["id"], "status": "completed", "branch": "main"},
        {"node": "plan", "entry": cp5["id"], "exit": cp5["id"], "status": "completed", "branch": "main"}]
    cp6 = as_json("checkpoint", "my-run", "--state", "-", "--node", "plan", input='{"again": 2}')
    assert as_json("nodes", "my-run")[-1] == {"node": "plan", "entry": cp5["id"], "exit": cp6["id"],
                                              "status": "completed", "branch": "main"}
    log = git(at_repo, "log", "--format=%s", "refs/agentos/main/runs/my-run/nodes/main").split("\n")
    assert log[0] == "node plan · completed"
    assert verify(store).ok


def test_scenario_matches_library(at_repo: Path) -> None:
    state = {"messages": ["hello"], "count": 1}
    cp0 = as_json("checkpoint", "r1", "--workflow", "triage", "--state", "-", input=json.dumps(state))
    assert cp0["run"] == "r1" and cp0["step"] == 0 and cp0["workflow"] == "triage"
    state_file = at_repo.parent / "s.json"
    state_file.write_text(json.dumps({"messages": ["hello", "world"], "count": 2}))
    cp1 = as_json("checkpoint", "r1", "--state", str(state_file), "--node", "plan", "--trigger", "llm_end",
                  "--status", "done", "--meta", "n=3", "--meta", "who=me", "--expect", cp0["id"][:8])
    assert cp1["status"] == "completed" and cp1["metadata"] == {"n": 3, "who": "me"}
    cp2 = as_json("checkpoint", "r1", "--node", "act")  # no --state: carries the tip's state over

    store = gitstate.open_store(at_repo)
    run = store.get_run("r1")
    assert run.head() is not None and run.head().id == cp2["id"]  # type: ignore[union-attr]
    assert run.head().state == {"messages": ["hello", "world"], "count": 2}  # type: ignore[union-attr]

    runs = as_json("runs")
    assert [r["id"] for r in runs] == ["r1"] and runs[0]["checkpoints"] == 3
    assert [{k: v for k, v in r.items() if k != "pinned"} for r in runs] == [s.to_dict() for s in store.list_runs()]
    assert runs[0]["pinned"] is False  # (gc pins: git agentos pin)
    log = as_json("log", "r1")
    assert [c["id"] for c in log] == [cp.id for cp in run.history()]
    assert len(as_json("log", "r1", "-n", "2")) == 2
    shown = as_json("show", "r1~1")
    assert shown["id"] == cp1["id"] and shown["state"]["count"] == 2 and shown["files"] == []
    diff = as_json("diff", "r1~2", "r1")
    assert diff["a"] == cp0["id"] and diff["b"] == cp2["id"]
    human = agentos("diff", "r1~2", "r1").stdout
    assert "messages" in human and "count" in human

    # nodes through the library, read through the CLI
    with run.node("review") as scope:
        scope.checkpoint({"reviewed": True})
    nodes = as_json("nodes", "r1")
    assert nodes == [{"node": b.node, "entry": b.entry, "exit": b.exit, "status": b.status, "branch": "main"}
                     for b in run.nodes()]
    assert nodes[-1]["node"] == "review" and nodes[-1]["status"] == "completed"
    table = agentos("nodes", "r1").stdout.splitlines()
    assert table[0].split() == ["NODE", "STATUS", "ENTRY", "EXIT"]

    # fork, rollback, undo
    agentos("fork", "r1", "~2", "alt")
    assert store.get_run("r1").head("alt").id == cp1["id"]  # type: ignore[union-attr]
    as_json("checkpoint", "r1", "--branch", "alt", "--state", "-", input='{"alt": true}')
    assert as_json("show", "r1@alt")["state"] == {"alt": True}
    tip = run.head()
    assert tip is not None
    dry = agentos("rollback", "r1", "node:review", "--dry-run").stdout
    assert "would move" in dry and run.head().id == tip.id  # type: ignore[union-attr]
    agentos("rollback", "r1", "~2")
    assert run.head().id == cp1["id"]  # type: ignore[union-attr]
    agentos("undo", "r1")
    assert run.head().id == tip.id  # type: ignore[union-attr]

    # prune, verify, delete
    before = len(as_json("log", "r1"))
    out = agentos("prune", "r1", "--keep", "2").stdout
    assert f"removed {before - 2}" in out
    assert len(as_json("log", "r1")) == 2
    report = as_json("verify")
    assert report["ok"] is True and report["problems"] == []
    assert "ok" in agentos("verify").stdout
    agentos("delete", "r1", "--yes")
    assert as_json("runs") == []
    store.close()


def test_delete_removes_a_run_that_has_no_run_record(at_repo: Path) -> None:
    """Refs of a run without its record (pulled by an earlier version from a hostile remote, or
    left by hand) are listed by runs as corrupt; delete removes them like any run's."""
    cp = as_json("checkpoint", "r", "--state", "-", input="{}")
    git(at_repo, "update-ref", "refs/agentos/main/runs/plain/heads/main", cp["id"])
    assert {r["id"] for r in as_json("runs")} == {"r", "plain"}
    assert "deleted run plain" in agentos("delete", "plain", "--yes").stdout
    assert git(at_repo, "for-each-ref", "refs/agentos/main/runs/plain/").strip() == ""
    assert [r["id"] for r in as_json("runs")] == ["r"]
    agentos("delete", "nope", "--yes", code=1)


def test_show_human_and_runs_table(at_repo: Path) -> None:
    agentos("checkpoint", "r", "--state", "-", "--node", "n", input='{"k": [1, 2]}')
    out = agentos("show", "r").stdout
    assert "run:" in out and '"k"' in out and "node:" in out
    lines = agentos("runs").stdout.splitlines()
    assert lines[0].split()[:3] == ["RUN", "WORKFLOW", "STATUS"] and lines[1].startswith("r ")
    assert "\x1b[" not in "".join(lines)  # no colour outside a terminal


def test_cbor_state_file(at_repo: Path, tmp_path: Path) -> None:
    import cbor2

    path = tmp_path / "s.cbor"
    path.write_bytes(cbor2.dumps({"b": b"\x00\x01", "n": 5}))
    as_json("checkpoint", "r", "--state", str(path))
    assert as_json("show", "r")["state"] == {"b": {"$bytes": "0001"}, "n": 5}


def _error(result: Result) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    assert "Traceback" not in result.stderr + result.stdout
    return lines[0]


@pytest.mark.parametrize("args,code,needle", [
    (["log", "nope"], 1, "no run 'nope'"),
    (["show", "nope~1"], 1, "no run 'nope'"),
    (["show", "r~9"], 1, "has only"),
    (["show", "zzzz"], 1, "invalid checkpoint reference"),
    (["show", "r:node:missing"], 1, "node 'missing' has no checkpoint"),
    (["show", "r@nobranch"], 1, "no branch"),
    (["checkpoint", "r", "--state", "/does/not/exist.json"], 2, "/does/not/exist.json"),
    (["checkpoint", "r", "--state", "-", "--status", "weird"], 2, "'weird' is not one of"),
    (["checkpoint", "r", "--state", "BAD"], 2, "not valid JSON"),
    (["checkpoint", "newrun", "--state", "BAD"], 2, "not valid JSON"),
    (["checkpoint", "r", "--expect", "OLD"], 1, "conflict"),
    (["checkpoint", "newrun", "--expect", "abcd1234"], 1, "no run 'newrun'"),
    (["checkpoint", "r", "--meta", "novalue"], 2, "KEY=VALUE"),
    (["checkpoint", "r", "--state", "DEEP"], 2, "nested too deeply"),
    (["checkpoint", "newrun", "--state", "DEEP"], 2, "nested too deeply"),
    (["checkpoint", "r", "--meta", "DEEPMETA"], 2, "nested too deeply"),
    (["checkpoint", "r", "some/path"], 2, "--files"),
    (["rollback", "r", "~x"], 1, "~N"),
    (["fork", "r", "~0", "main"], 1, "already has a branch"),
    (["prune", "r", "--keep", "0"], 2, "--keep"),
    (["undo", "r", "--branch", "nobranch"], 1, "no branch"),
    (["delete", "r"], 2, "--yes"),
    (["log"], 2, "Missing argument"),
    (["frobnicate"], 2, "No such command"),
    # an empty path is a usage error naming its option, never the current directory or no path
    (["export", "-o", ""], 2, "'--output' / '-o': the path is empty"),
    (["export", "r", "--output", "/does/not/exist/r.bundle"], 2, "'--output' / '-o': cannot write"),
    (["import", ""], 2, "'FILE': the path is empty"),
    (["view", "--html", ""], 2, "'--html': the path is empty"),
    (["view", "--html", "/does/not/exist/v.html"], 2, "'--html': cannot write"),
    (["checkpoint", "r", "--state", ""], 2, "'--state': the path is empty"),
    (["checkpoint", "r", "--files", ""], 2, "the path is empty (use . for the current directory)"),
    (["restore", "r", ""], 2, "the path is empty (use . for the current directory)"),
    (["demo", "--dir", ""], 2, "'--dir': the path is empty"),
    (["checkpoint", "r", "-w", "other"], 2, "run 'r' exists with no workflow, not 'other'"),
    (["checkpoint", "r", "--state", "/dev/zero"], 2, "cannot read /dev/zero: it is a device, not a file"),
    (["checkpoint", "r", "--state", "FIFO"], 2, "is not valid JSON"),  # nobody writes to it: read as empty
    (["checkpoint", "r", "--state", "BIG"], 2, "holds more than 256 MiB: too large for --state"),
    (["checkpoint", "r", "--state", "SURROGATE"], 2, "lone.json: cannot encode state at b"),
    (["checkpoint", "r\udcff", "--state", "BAD"], 1, "invalid run id 'r\\\\xff': is not UTF-8 text"),
])
def test_bad_input(at_repo: Path, tmp_path: Path, args: list[str], code: int, needle: str) -> None:
    old = as_json("checkpoint", "r", "--state", "-", input='{"a": 1}')["id"]
    agentos("checkpoint", "r")  # OLD is no longer the tip: --expect OLD loses the compare-and-swap
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    deep = tmp_path / "deep.json"  # beyond Python's recursion limit: json raises RecursionError
    deep.write_text("[" * 100_000 + "]" * 100_000)
    lone = tmp_path / "lone.json"  # strict JSON, but "\ud800" is no text: the state cannot be stored
    lone.write_text('{"b": "\\ud800"}')
    fifo = tmp_path / "state.fifo"
    os.mkfifo(fifo)
    big = tmp_path / "big.json"  # sparse: its size is refused before anything is read
    with open(big, "wb") as fh:
        fh.truncate((256 << 20) + 1)
    args = [{"OLD": old, "BAD": str(bad), "DEEP": str(deep), "SURROGATE": str(lone), "FIFO": str(fifo), "BIG": str(big),
             "DEEPMETA": "k=" + "[" * 100_000 + "]" * 100_000}.get(a, a) for a in args]
    before, user = store_snapshot(at_repo), user_snapshot(at_repo)
    result = bounded(lambda: CliRunner().invoke(cli, args, prog_name="git agentos"), 30)  # a FIFO must not block
    assert result.exit_code == code, (result.stdout, result.stderr)
    assert needle in _error(result)
    assert store_snapshot(at_repo) == before
    assert user_snapshot(at_repo) == user


def test_state_from_stdin_is_read_up_to_a_bound(at_repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`--state -` stops reading past the bound (endless input, e.g. from /dev/zero, is refused
    without eating memory), and reads what fits."""
    from gitstate_cli import context

    monkeypatch.setattr(context, "MAX_STATE_BYTES", 64)
    before = store_snapshot(at_repo)
    result = CliRunner().invoke(cli, ["checkpoint", "r", "--state", "-"], input="[" + "1," * 100 + "1]")
    assert result.exit_code == 2 and "- holds more than 0 MiB: too large for --state" in _error(result)
    assert store_snapshot(at_repo) == before
    cp = as_json("checkpoint", "r", "--state", "-", input='{"fits": true}')["id"]
    assert gitstate.open_store(at_repo).checkpoint(cp).state == {"fits": True}


def test_show_of_a_user_commit_is_refused(at_repo: Path) -> None:
    head = git(at_repo, "rev-parse", "HEAD").strip()
    result = CliRunner().invoke(cli, ["show", head[:10]])
    assert result.exit_code == 1 and "no such checkpoint" in _error(result)


def test_import_says_what_is_wrong_with_the_file(at_repo: Path, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """`import` of what is not a whole git bundle says what is wrong (/dev/null was "no such file";
    a bundle cut short imported nothing, or failed with git's "index-pack died"), exits 1 and
    changes nothing, in a repository with or without the bundle's objects."""
    from conftest import make_repo

    agentos("checkpoint", "r", "--state", "-", input='{"a": 1}')
    bundle = tmp_path / "r.bundle"
    agentos("export", "r", "-o", str(bundle))
    data = bundle.read_bytes()
    pack = data.index(b"\n\n") + 2
    flipped = bytearray(data)
    flipped[pack + 40] ^= 0xFF
    cases = {"empty.bundle": (b"", "not a git bundle: the file is empty"),
             "notes.txt": (b"just some text\n", "does not start with '# v2 git bundle'"),
             "head.bundle": (data[: pack - 30], "its header ends before the pack"),
             "nopack.bundle": (data[:pack], "no whole pack"),
             "cut.bundle": (data[:-30], "checksum does not match"),
             "flipped.bundle": (bytes(flipped), "checksum does not match")}
    for name, (content, _) in cases.items():
        (tmp_path / name).write_bytes(content)
    (tmp_path / "a-directory").mkdir()
    fresh = make_repo(tmp_path / "fresh")
    for repo in (at_repo, fresh):
        monkeypatch.chdir(repo)
        before, user = store_snapshot(repo), user_snapshot(repo)
        for path, (code, needle) in {"/dev/null": (1, "not a git bundle: a character device"),
                                     str(tmp_path / "a-directory"): (2, "is a directory"),
                                     **{str(tmp_path / name): (1, needle) for name, (_, needle) in cases.items()}
                                     }.items():
            result = CliRunner().invoke(cli, ["import", path], prog_name="git agentos")
            assert result.exit_code == code, (path, result.stdout, result.stderr)
            assert needle in _error(result), path
            assert result.stdout == ""
        assert store_snapshot(repo) == before and user_snapshot(repo) == user
    assert "created r" in agentos("import", str(bundle)).stdout  # the whole bundle imports


def test_checkpoint_workflow_of_an_existing_run(at_repo: Path) -> None:
    """-w records the workflow when the run is created; on an existing run the same workflow is
    accepted without a word, and another one (it used to be ignored silently) is a usage error
    naming both, that writes nothing."""
    as_json("checkpoint", "r", "-w", "triage", "--state", "-", input='{"a": 1}')
    assert agentos("checkpoint", "r", "--workflow", "triage").stderr == ""
    before = store_snapshot(at_repo)
    for args in (["r", "-w", "review"], ["r@new-branch", "--workflow", "review"], ["r", "-w", "review", "--expect", "0" * 12]):
        result = CliRunner().invoke(cli, ["checkpoint", *args], prog_name="git agentos")
        assert result.exit_code == 2, (args, result.stdout, result.stderr)
        assert "'--workflow' / '-w': run 'r' exists with workflow 'triage', not 'review'" in _error(result)
    assert store_snapshot(at_repo) == before
    assert as_json("runs")[0]["workflow"] == "triage"


def test_unreadable_state_file(at_repo: Path, tmp_path: Path) -> None:
    directory = tmp_path / "a-directory.json"  # unreadable as a file, even for root
    directory.mkdir()
    result = CliRunner().invoke(cli, ["checkpoint", "r", "--state", str(directory)])
    assert result.exit_code == 2 and "a-directory.json" in _error(result)
    path = tmp_path / "secret.json"
    path.write_text("{}")
    path.chmod(0)
    try:
        result = CliRunner().invoke(cli, ["checkpoint", "r", "--state", str(path)])
        if os.geteuid() != 0:  # root reads it anyway
            assert result.exit_code == 2 and "secret.json" in _error(result)
    finally:
        path.chmod(0o600)
    if os.geteuid() != 0:
        assert store_snapshot(at_repo) == ""


def test_ambiguous_ref(at_repo: Path) -> None:
    from test_refspec import colliding_checkpoints

    store = gitstate.open_store(at_repo)
    first, _second = colliding_checkpoints(store, "r")
    store.close()
    result = CliRunner().invoke(cli, ["show", first.id[:4]])
    assert result.exit_code == 1 and "ambiguous" in _error(result)


def test_outside_a_repository(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.chdir(empty)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    result = CliRunner().invoke(cli, ["runs"])
    assert result.exit_code == 1
    assert "AGENTOS_REPO" in _error(result)
    assert not (empty / ".git").exists()


def test_agentos_repo_env(repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    monkeypatch.setenv("AGENTOS_REPO", str(repo))
    agentos("checkpoint", "r", "--state", "-", input="{}")
    assert "refs/agentos/main/runs/r/heads/main" in store_snapshot(repo)


@needs_files
def test_files_commands(at_repo: Path) -> None:
    (at_repo / "a.txt").write_text("one\n")
    cp = as_json("checkpoint", "r", "--files")
    assert any(f["path"].endswith("a.txt") for f in as_json("show", cp["id"])["files"])
    (at_repo / "a.txt").write_text("two\n")
    as_json("checkpoint", "r", "--files", "a.txt")
    dry = agentos("restore", "r~1", "--dry-run").stdout
    assert "a.txt" in dry and (at_repo / "a.txt").read_text() == "two\n"
    agentos("restore", "r~1", "a.txt", "--force")
    assert (at_repo / "a.txt").read_text() == "one\n"
    agentos("rollback", "r", "~1", "--restore")
    assert (at_repo / "a.txt").read_text() == "one\n"
    agentos("undo", "r")
    (at_repo / "a.txt").write_text("unsaved work\n")  # in no checkpoint: a restore must refuse
    before = store_snapshot(at_repo)
    refused = CliRunner().invoke(cli, ["restore", "r", "a.txt"])
    assert refused.exit_code == 1 and "a.txt" in _error(refused)
    assert (at_repo / "a.txt").read_text() == "unsaved work\n" and store_snapshot(at_repo) == before
    run = gitstate.open_store(at_repo).get_run("r")
    run.files.write("notes.md", b"v1\n", author="me", reason="first")  # type: ignore[attr-defined]
    run.files.write("notes.md", b"v2\n", author="me", reason="second")  # type: ignore[attr-defined]
    listing = as_json("files", "r")
    assert [(f["path"], f["version"]) for f in listing] == [("notes.md", 2)]
    assert agentos("files", "r", "notes.md").stdout == "v2\n"
    assert agentos("files", "r", "notes.md", "--version", "1").stdout == "v1\n"
    latest = as_json("files", "r", "notes.md")
    assert (latest["version"], latest["content"], latest["reason"]) == (2, "v2\n", "second")
    first = as_json("files", "r", "notes.md", "--version", "1")
    assert (first["version"], first["content"]) == (1, "v1\n")
    assert [v["version"] for v in as_json("files", "r", "notes.md", "--history")] in ([1, 2], [2, 1])


@needs_files
def test_restore_prints_a_summary_and_lists_files_on_request(at_repo: Path) -> None:
    for i in range(40):
        (at_repo / f"f{i}.txt").write_text(f"{i}\n")
    agentos("checkpoint", "r", "--files")
    for i in range(5):
        (at_repo / f"f{i}.txt").write_text("edited\n")
    (at_repo / "f39.txt").unlink()
    (at_repo / "extra.txt").write_text("new\n")
    dry = agentos("restore", "r", "--dry-run").stdout.splitlines()
    assert dry[0].startswith("would restore the files of ")
    assert dry[0].endswith(": 6 to write, 1 to delete, 35 unchanged, 6 unsaved (refused without --force)")
    assert "  would change: f0.txt" in dry and "  would create: f39.txt" in dry and "  would remove: extra.txt" in dry
    assert "  unsaved, refused without --force: extra.txt" in dry
    out = agentos("restore", "r", "--force").stdout.splitlines()
    assert out[0].endswith(": 6 written, 1 deleted, 35 unchanged")
    assert len(out) == 2 and "restore-safety" in out[1]  # one summary line and how to undo it: no file list
    for i in range(3):
        (at_repo / f"f{i}.txt").write_text("again\n")
    verbose = agentos("restore", "r", "--force", "-v").stdout.splitlines()
    assert verbose[0].endswith(": 3 written, 0 deleted, 38 unchanged")
    assert [line for line in verbose if line.startswith("  changed: ")] == [f"  changed: f{i}.txt" for i in range(3)]
    (at_repo / "f7.txt").write_text("once more\n")
    agentos("checkpoint", "r", "--files")
    rolled = agentos("rollback", "r", "~1", "--restore").stdout
    assert "  files: 1 written, 0 deleted, 40 unchanged" in rolled and "f7.txt" not in rolled
    agentos("undo", "r")
    rolled = agentos("rollback", "r", "~1", "--restore", "-v").stdout
    assert "  files: 0 written, 0 deleted, 41 unchanged" in rolled


@pytest.mark.parametrize("workflow", ["langgraph", "openai-agents", "langgraph-store"])
def test_checkpoint_refuses_a_run_an_integration_writes(at_repo: Path, workflow: str) -> None:
    """A plain checkpoint in a LangGraph thread would be one its saver cannot read (the thread would
    start over): the CLI refuses it, and refuses to make such a run, leaving the store as it was."""
    store = gitstate.open_store(at_repo)
    run = store.create_run(workflow=workflow, run_id="thread-1")
    run.checkpoint({"format": "x"})
    before = user_snapshot(at_repo), [cp.id for cp in run.history()]
    err = agentos("checkpoint", "thread-1", "--state", "-", input='{"n": 5}', code=2).stderr
    assert f"run thread-1 belongs to the {workflow} integration" in err and err.count("\n") == 1, err
    assert (user_snapshot(at_repo), [cp.id for cp in store.get_run("thread-1").history()]) == before
    err = agentos("checkpoint", "new-run", "--workflow", workflow, "--state", "-", input="{}", code=2).stderr
    assert f"workflow {workflow!r} is the {workflow} integration's" in err
    with pytest.raises(gitstate.RunNotFound):
        store.get_run("new-run")
    as_json("checkpoint", "other", "--workflow", "my-flow", "--state", "-", input="{}")  # any other name is fine
