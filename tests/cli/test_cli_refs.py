"""One reference grammar on every command that takes a run, a branch or a checkpoint: RUN@BRANCH
with '@' and '~' inside branch names (a restore's safety branch, a pull's kept copy, LangGraph's
fork branches), ambiguous ids listing their candidates, and errors that name CLI flags."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

import gitstate
from gitstate_cli.main import cli

BIN = Path(sys.executable).parent


def agentos(*args: str, input: str | None = None, code: int = 0) -> Result:
    result = CliRunner().invoke(cli, list(args), input=input, prog_name="git agentos")
    assert result.exit_code == code, (args, result.exit_code, result.stdout, result.stderr)
    return result


def as_json(*args: str, input: str | None = None) -> Any:
    return json.loads(agentos(*args, "--json", input=input).stdout)


def error_line(result: Result) -> str:
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


@pytest.fixture
def at_repo(repo: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(repo)
    return repo


def test_restore_safety_branch_is_a_reference_everywhere(at_repo: Path) -> None:
    (at_repo / "a.txt").write_text("saved\n")
    agentos("checkpoint", "my-run", "--files", "--state", "-", input='{"n": 1}')
    agentos("checkpoint", "my-run", "--state", "-", input='{"n": 2}')
    (at_repo / "a.txt").write_text("unsaved\n")
    agentos("restore", "my-run~1", "--force")
    rows = as_json("log", "my-run@restore-safety")
    assert len(rows) == 1 and rows[0]["branch"] == "restore-safety" and rows[0]["trigger"] == "restore_safety"
    assert "restore_safety" in agentos("log", "my-run@restore-safety").stdout
    assert as_json("show", "my-run@restore-safety")["id"] == rows[0]["id"]
    assert as_json("nodes", "my-run@restore-safety") == []
    branches = {b["branch"]: b for b in as_json("branches", "my-run")}
    assert branches["restore-safety"]["kind"] == "safety" and branches["restore-safety"]["local_only"] is True
    agentos("restore", "my-run@restore-safety", "--force")  # undo the restore by its safety copy
    assert (at_repo / "a.txt").read_text() == "unsaved\n"


def test_branch_names_with_tilde_and_at(at_repo: Path) -> None:
    for n in range(3):
        agentos("checkpoint", "r", "--state", "-", input=json.dumps({"n": n}))
    fork = "main~1ef4f797-8335-6428-8001-8a1503f9b875"
    assert as_json("fork", "r", "~1", fork)["branch"] == fork
    tip = as_json("checkpoint", f"r@{fork}", "--state", "-", input='{"fork": 1}')
    assert tip["branch"] == fork
    assert [c["id"] for c in as_json("log", f"r@{fork}")][0] == tip["id"]
    assert as_json("show", f"r@{fork}~1")["state"] == {"n": 1}
    assert as_json("diff", f"r@{fork}", "r")["a"] == tip["id"]
    # a kept copy's name ('@' inside a branch name), as a pull makes one (fork refuses such a name)
    kept = gitstate.open_store(at_repo)
    kept.core.move_ref(kept.get_run("r").ref("main@origin"), None, as_json("show", "r@main~2")["id"],
                  "gitstate: pull from origin (diverged main)")
    kept.close()
    assert as_json("show", "r@main@origin")["state"] == {"n": 0}
    moved = as_json("rollback", f"r@{fork}", "~1")
    assert (moved["branch"], moved["to"]["state"] if "state" in moved["to"] else None) == (fork, None)
    assert as_json("undo", f"r@{fork}")["tip"]["id"] == tip["id"]
    one_ref = as_json("rollback", f"r@{fork}~1")  # a single REF: its branch moves
    assert one_ref["branch"] == fork and one_ref["moved"] is True
    agentos("undo", f"r@{fork}")
    assert as_json("prune", f"r@{fork}", "--keep", "3")["branch"] == fork
    assert as_json("fork", f"r@{fork}", "~1", "from-fork")["at"]["branch"] == "main"  # recorded on main
    names = [b["branch"] for b in as_json("branches", "r")]
    assert names[0] == "main" and {fork, "main@origin", "from-fork"} <= set(names)
    deleted = as_json("branch", "-D", f"r@{fork}", "r@main@origin")["deleted"]
    assert [(d["run"], d["branch"]) for d in deleted] == [("r", fork), ("r", "main@origin")]
    assert [b["branch"] for b in as_json("branches", "r")] == ["main", "from-fork"]


def test_exact_run_id_still_wins(at_repo: Path) -> None:
    agentos("checkpoint", "a@b", "--state", "-", input='{"run": "a@b"}')  # no run 'a' yet: a new run id
    agentos("checkpoint", "a", "--state", "-", input='{"run": "a"}')
    assert as_json("show", "a@b")["run"] == "a@b"
    assert as_json("checkpoint", "a@c", "--state", "-", input="{}")["branch"] == "c"  # run 'a' exists: its branch
    agentos("checkpoint", "a", "--branch", "b", "--state", "-", input='{"branch": "b"}')
    assert as_json("show", "a@b")["run"] == "a@b"  # the exact run id, though branch 'b' exists
    assert as_json("log", "a@b")[0]["run"] == "a@b"
    assert as_json("show", "a@b~0")["run"] == "a@b"


def test_expect_takes_the_reference_grammar(at_repo: Path) -> None:
    first = as_json("checkpoint", "r", "--state", "-", input='{"n": 0}')
    agentos("fork", "r", "~0", "alt")
    second = as_json("checkpoint", "r", "--state", "-", input='{"n": 1}')
    third = as_json("checkpoint", "r", "--state", "-", "--expect", "r@main", input='{"n": 2}')
    assert third["parent_ids"] == [second["id"]]
    fourth = as_json("checkpoint", "r", "--state", "-", "--expect", "r", input='{"n": 3}')
    assert fourth["parent_ids"] == [third["id"]]
    assert as_json("checkpoint", "r@alt", "--state", "-", "--expect", "r@alt", input="{}")["parent_ids"] == [first["id"]]
    lost = agentos("checkpoint", "r", "--state", "-", "--expect", "r~1", input="{}", code=1)
    assert "conflict" in error_line(lost).lower()
    assert as_json("checkpoint", "r", "--state", "-", "--expect", fourth["id"][:8], input="{}")["parent_ids"] == \
        [fourth["id"]]
    agentos("checkpoint", "other", "--state", "-", input="{}")
    elsewhere = error_line(agentos("checkpoint", "r", "--state", "-", "--expect", "other", input="{}", code=1))
    assert "'other': it names a checkpoint of run 'other', not of run 'r'" in elsewhere, elsewhere


def test_branch_option_and_at_branch_must_agree(at_repo: Path) -> None:
    agentos("checkpoint", "r", "--state", "-", input="{}")
    agentos("fork", "r", "~0", "alt")
    assert as_json("log", "r", "--branch", "alt")[0]["branch"] == "main"  # forked: recorded on main
    assert len(as_json("log", "r@alt", "--branch", "alt")) == 1
    result = agentos("log", "r@alt", "--branch", "main", code=2)
    assert "--branch" in error_line(result)


def test_commands_that_take_a_branch_refuse_other_forms(at_repo: Path) -> None:
    for n in range(2):
        agentos("checkpoint", "r", "--state", "-", input=json.dumps({"n": n}))
    for args in (["undo", "r~1"], ["prune", "r~1", "--keep", "1"], ["nodes", "r:node:x"]):
        line = error_line(agentos(*args, code=1))
        assert "RUN@BRANCH" in line, line
    line = error_line(agentos("delete", "r@main", "--yes", code=2))
    assert "git agentos branch -d" in line
    line = error_line(agentos("branch", "-d", "r", code=2))
    assert "r@BRANCH" in line
    for args in (["push", "origin", "r@main"], ["export", "r@main", "-o", "x.bundle"]):
        line = error_line(agentos(*args, code=2))
        assert "whole runs move: name the run 'r'" in line, line
    agentos("branch", code=2)


def test_ambiguous_prefix_lists_the_candidates(at_repo: Path) -> None:
    from test_refspec import colliding_checkpoints, make_colliding_blob

    store = gitstate.open_store(at_repo)
    first, second = colliding_checkpoints(store, "r")
    blob = make_colliding_blob(store, first.id)
    store.close()
    for args in (["show", first.id[:4]], ["log", first.id[:4]], ["restore", first.id[:4]], ["rollback", "r", first.id[:4]]):
        line = error_line(agentos(*args, code=1))
        assert "ambiguous" in line and first.id[:12] in line and second.id[:12] in line and blob[:12] in line, line
        assert f"checkpoint (run 'r', branch 'main', step {first.step})" in line and "blob" in line
    result = CliRunner().invoke(cli, ["show", first.id[:4], "--json"])
    doc = json.loads(result.stdout)
    assert doc["type"] == "AmbiguousReferenceError"
    # other objects of the run (trees, state blobs) may share the 4-digit prefix too
    assert {c["id"] for c in doc["candidates"]} >= {first.id, second.id, blob}


def test_a_prefix_shared_by_one_checkpoint_and_other_objects_names_it(at_repo: Path) -> None:
    """As ``git log PREFIX`` takes the one commit among objects sharing a prefix: state blobs and
    trees of a long run share short prefixes with checkpoints all the time."""
    from test_refspec import make_colliding_blob

    cp = as_json("checkpoint", "r", "--state", "-", input='{"k": 1}')
    store = gitstate.open_store(at_repo)
    make_colliding_blob(store, cp["id"])
    store.close()
    assert as_json("show", cp["id"][:4])["id"] == cp["id"]


PYTHONISMS = ("force=True", "files=", "Run.", "Store.", "keep_latest", "include_safety", "()")


def test_errors_speak_cli_not_python(at_repo: Path) -> None:
    (at_repo / "a.txt").write_text("one\n")
    agentos("checkpoint", "r", "--files", "--state", "-", input='{"n": 1}')
    agentos("checkpoint", "r", "--state", "-", input='{"n": 2}')  # no snapshot
    agentos("fork", "r", "~1", "own")
    agentos("checkpoint", "r@own", "--state", "-", input='{"own": 1}')
    (at_repo / "a.txt").write_text("unsaved work\n")
    cases = {
        ("restore", "r~1"): "--force",
        ("rollback", "r", "~1", "--restore"): "--force",
        ("restore", "r"): "--files",
        ("branch", "-d", "r@own"): "-D",
        ("branch", "-d", "r@main"): "-D",
        ("checkpoint", "r", "--expect", "0000000"): None,
    }
    for args, flag in cases.items():
        result = CliRunner().invoke(cli, [*args])
        assert result.exit_code != 0, args
        line = error_line(result)
        assert result.exit_code == 1, (args, result.stdout)
        assert not any(p in line for p in PYTHONISMS), line
        if flag:
            assert flag in line, (args, line)
    refused = CliRunner().invoke(cli, ["restore", "r~1"])
    assert "--force" in error_line(refused) and "git agentos checkpoint r --files" in error_line(refused)
    agentos("rollback", "r", "~1", "--restore", "--force")
    assert (at_repo / "a.txt").read_text() == "one\n"


def test_log_of_a_safety_branch_in_a_real_process(repo: Path) -> None:
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")

    def run(*args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["git", "agentos", *args], cwd=repo, input=input, capture_output=True, text=True,
                              env=env, check=False)

    (repo / "f.txt").write_text("x\n")
    assert run("checkpoint", "my-run", "--files", "--state", "-", input="{}").returncode == 0
    (repo / "f.txt").write_text("y\n")
    assert run("restore", "my-run", "--force").returncode == 0
    done = run("log", "my-run@restore-safety")
    assert done.returncode == 0 and "restore_safety" in done.stdout, done.stderr
    assert run("log", "my-run@nope").stderr == "error: run 'my-run' has no branch 'nope'\n"


def test_langgraph_fork_branches_by_name(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("langgraph.graph")
    from test_langgraph_graphs import scenario

    from gitstate.langgraph import GitCheckpointSaver

    saver = GitCheckpointSaver(gitstate.open_store(repo))
    scenario(saver)
    monkeypatch.chdir(repo)
    fork = next(b["branch"] for b in as_json("branches", "thread-a") if b["branch"].startswith("main~"))
    rows = as_json("log", f"thread-a@{fork}")
    assert rows and all(r["run"] == "thread-a" for r in rows)
    assert as_json("show", f"thread-a@{fork}")["id"] == rows[0]["id"]
    assert as_json("show", f"thread-a@{fork}~1")["id"] == rows[1]["id"]
    assert as_json("nodes", f"thread-a@{fork}") is not None
    assert as_json("rollback", f"thread-a@{fork}", "~1")["to"]["id"] == rows[1]["id"]
    assert as_json("undo", f"thread-a@{fork}")["tip"]["id"] == rows[0]["id"]
    info = next(b for b in as_json("branches", "thread-a") if b["branch"] == fork)
    assert info["tip"] == rows[0]["id"]
