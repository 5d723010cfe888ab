"""gitstate.format.checkpoint: the readable commit message (subject and trailers, escaped so a
caller's text never forges a line, as git itself parses them), check_format's refusals, read_meta
on commits that are not sound checkpoints, files_paths validation and status synonyms."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pygit2
import pytest
from conftest import git
from pygit2.enums import ObjectType

import gitstate
from gitstate.errors import CorruptObjectError, UnsupportedFormatError
from gitstate.format import checkpoint as cpfmt
from gitstate.format import encoding
from gitstate.git.objects import MODE_BLOB, MODE_TREE, ObjectWriter
from gitstate.git.reader import ObjectReader


def parse_trailers(repo: Path, message: str) -> list[str]:
    """What git itself reads as the message's trailers."""
    done = subprocess.run(["git", "interpret-trailers", "--parse"], cwd=repo, input=message, text=True,
                          capture_output=True, check=True)
    return done.stdout.splitlines()


def test_trailer_value_escapes_backslash_newline_and_cr() -> None:
    assert cpfmt.trailer_value("plain") == "plain"
    assert cpfmt.trailer_value("a\nb") == "a\\nb"
    assert cpfmt.trailer_value("a\r\nb") == "a\\r\\nb"
    assert cpfmt.trailer_value("back\\slash\\n") == "back\\\\slash\\\\n"  # not confused with an escape
    assert cpfmt.trailer_value(3) == "3"


def test_subject() -> None:
    assert cpfmt.subject(None, 0, None, None) == "checkpoint · step 0 · save"
    assert cpfmt.subject("plan", 3, "tool_end", "failed") == "plan · step 3 · tool_end · failed"
    assert cpfmt.subject("two\nlines", 1, "x\ry", None) == "two\\nlines · step 1 · x\\ry"
    assert "\n" not in cpfmt.subject("a\nb\nc", 1, "t\n", "s\n")


def test_message_trailers_as_git_reads_them(repo: Path) -> None:
    meta = {"run": "r 1", "branch": "main", "workflow": "wf", "node": "plan\nRun: forged", "step": 2,
            "trigger": "tool_end", "status": "completed", "node_status": None, "node_entry": None}
    text = cpfmt.message(meta)
    lines = text.splitlines()
    assert lines[0] == "plan\\nRun: forged · step 2 · tool_end · completed" and lines[1] == ""
    assert parse_trailers(repo, text) == [
        "Run: r 1", "Branch: main", "Workflow: wf", "Node: plan\\nRun: forged", "Step: 2", "Trigger: tool_end",
        "Status: completed", "Gitstate-Format: 2"]
    # in a real commit, git log shows the same trailers
    tree = git(repo, "rev-parse", "HEAD^{tree}").strip()
    oid = subprocess.run(["git", "commit-tree", tree], cwd=repo, input=text, text=True, capture_output=True,
                         check=True).stdout.strip()
    assert git(repo, "log", "-1", "--format=%(trailers:key=Run,valueonly)", oid).strip() == "r 1"
    assert git(repo, "log", "-1", "--format=%s", oid).strip() == lines[0]


def test_message_of_a_minimal_meta_omits_absent_fields(repo: Path) -> None:
    text = cpfmt.message({"run": "r", "branch": "b", "step": 0})
    assert text == "checkpoint · step 0 · save\n\nRun: r\nBranch: b\nStep: 0\nGitstate-Format: 2\n"
    assert parse_trailers(repo, text) == ["Run: r", "Branch: b", "Step: 0", "Gitstate-Format: 2"]


def test_check_format() -> None:
    for known in (1, 2):  # format 1 (maps in canonical order) and format 2 (maps in their order)
        cpfmt.check_format({"format": cpfmt.CHECKPOINT_KIND, "v": known}, cpfmt.CHECKPOINT_KIND, "o")
    for wrong_kind in ({"format": cpfmt.RUN_KIND, "v": 1}, {"v": 1}, {"format": None, "v": 1}):
        with pytest.raises(CorruptObjectError) as info:
            cpfmt.check_format(wrong_kind, cpfmt.CHECKPOINT_KIND, "o")
        assert type(info.value) is CorruptObjectError and info.value.oid == "o"
    for no_version in ({}, {"v": None}, {"v": "1"}, {"v": True}, {"v": 1.0}):
        with pytest.raises(CorruptObjectError) as info:
            cpfmt.check_format({"format": cpfmt.CHECKPOINT_KIND, **no_version}, cpfmt.CHECKPOINT_KIND, "o")
        assert type(info.value) is CorruptObjectError, no_version
    for unknown in (3, 99, 0, -1):
        with pytest.raises(UnsupportedFormatError) as info:
            cpfmt.check_format({"format": cpfmt.CHECKPOINT_KIND, "v": unknown}, cpfmt.CHECKPOINT_KIND, "o")
        assert str(unknown) in info.value.reason


def _commit_with(repo: Path, entries: list[tuple[str, str, int]]) -> tuple[ObjectReader, Any]:
    handle = pygit2.Repository(str(repo))
    writer = ObjectWriter(handle)
    tree = writer.tree(entries)
    oid = writer.write(ObjectType.COMMIT, (f"tree {tree}\nauthor a <a@x> 1 +0000\ncommitter a <a@x> 1 +0000\n\n"
                                           "m\n").encode())
    reader = ObjectReader(handle)
    return reader, reader.commit(oid)


def _meta_blob(repo: Path, payload: Any) -> str:
    return ObjectWriter(pygit2.Repository(str(repo))).blob(encoding.dumps(payload))


GOOD = {"format": cpfmt.CHECKPOINT_KIND, "v": 1, "run": "r", "branch": "main", "step": 0}


def test_read_meta_of_a_real_checkpoint(store: gitstate.Store) -> None:
    cp = store.create_run(run_id="r").checkpoint({"a": 1}, node="n")
    reader = store.core.reader
    meta = cpfmt.read_meta(reader, reader.commit(cp.id))
    assert meta["run"] == "r" and meta["step"] == 0 and meta["node"] == "n" and meta["v"] == cpfmt.FORMAT_VERSION


def test_read_meta_of_the_users_own_commit(repo: Path) -> None:
    handle = pygit2.Repository(str(repo))
    reader = ObjectReader(handle)
    head = git(repo, "rev-parse", "HEAD").strip()
    with pytest.raises(CorruptObjectError) as info:
        cpfmt.read_meta(reader, reader.commit(head))
    assert info.value.oid == head and "not a gitstate checkpoint" in info.value.reason


@pytest.mark.parametrize("payload, error", [
    ([1, 2], CorruptObjectError), ({**GOOD, "format": cpfmt.RUN_KIND}, CorruptObjectError),
    ({**GOOD, "v": 3}, UnsupportedFormatError), ({k: v for k, v in GOOD.items() if k != "run"}, CorruptObjectError),
    ({**GOOD, "step": -1}, CorruptObjectError), ({**GOOD, "step": True}, CorruptObjectError),
    ({**GOOD, "step": "0"}, CorruptObjectError), ({**GOOD, "run": 5}, CorruptObjectError),
    ({**GOOD, "status": 7}, CorruptObjectError), ({**GOOD, "node": {"a": 1}}, CorruptObjectError),
    ({**GOOD, "branch": ["main"]}, CorruptObjectError), ({**GOOD, "trigger": b"x"}, CorruptObjectError),
], ids=["not-a-map", "run-kind", "newer", "no-run", "negative-step", "bool-step", "text-step", "int-run",
        "int-status", "map-node", "list-branch", "bytes-trigger"])
def test_read_meta_refuses_unsound_payloads(repo: Path, payload: Any, error: type[Exception]) -> None:
    reader, commit = _commit_with(repo, [(cpfmt.META, _meta_blob(repo, payload), MODE_BLOB)])
    with pytest.raises(error) as info:
        cpfmt.read_meta(reader, commit)
    assert isinstance(info.value, CorruptObjectError) and info.value.oid == commit.id


def test_read_meta_refuses_a_meta_tree_and_garbage(repo: Path) -> None:
    writer = ObjectWriter(pygit2.Repository(str(repo)))
    sub = writer.tree([("x", writer.blob(b"x"), MODE_BLOB)])
    reader, commit = _commit_with(repo, [(cpfmt.META, sub, MODE_TREE)])
    with pytest.raises(CorruptObjectError):
        cpfmt.read_meta(reader, commit)
    reader, commit = _commit_with(repo, [(cpfmt.META, writer.blob(b"\xa1garbage"), MODE_BLOB)])
    with pytest.raises(CorruptObjectError):
        cpfmt.read_meta(reader, commit)
    reader, commit = _commit_with(repo, [(cpfmt.META, writer.blob(encoding.dumps(GOOD) + b"\x00"), MODE_BLOB)])
    with pytest.raises(CorruptObjectError):
        cpfmt.read_meta(reader, commit)  # bytes after the CBOR value
    reader, commit = _commit_with(repo, [(cpfmt.META, _meta_blob(repo, GOOD), MODE_BLOB)])
    assert cpfmt.read_meta(reader, commit)["run"] == "r"


def test_files_paths_validation() -> None:
    assert cpfmt.files_paths({}, "o") is None
    assert cpfmt.files_paths({"files_paths": None}, "o") is None
    assert cpfmt.files_paths({"files_paths": ["a", "b/c"]}, "o") == ("a", "b/c")
    assert cpfmt.files_paths({"files_paths": []}, "o") == ()
    for bad in ("a", ["a", 1], {"a": 1}, [None], 3, [["a"]], b"a"):
        with pytest.raises(CorruptObjectError) as info:
            cpfmt.files_paths({"files_paths": bad}, "o")
        assert info.value.oid == "o"


def test_checkpoint_view_refuses_malformed_files_paths(repo: Path) -> None:
    reader, commit = _commit_with(repo, [(cpfmt.META, _meta_blob(repo, {**GOOD, "files_paths": "src"}), MODE_BLOB)])
    with pytest.raises(CorruptObjectError):
        cpfmt.Checkpoint.from_commit(reader, commit, str(repo / ".git"))


@pytest.mark.parametrize("given, stored", [
    ("done", "completed"), ("Complete", "completed"), ("SUCCESS", "completed"), ("succeeded", "completed"),
    ("ok", "completed"), (" error ", "failed"), ("failure", "failed"), ("errored", "failed"),
    ("cancelled", "stopped"), ("canceled", "stopped"), ("aborted", "stopped"), ("killed", "stopped"),
    ("paused", "interrupted"), ("waiting", "interrupted"), ("Stopped", "stopped"), ("active", "running"), ("in_progress", "running"), ("RUNNING", "running"),
    ("completed", "completed"), ("Failed", "failed"), ("custom-state", "custom-state"), ("Weird ", "Weird "),
    (None, None),
])
def test_normalize_status(given: str | None, stored: str | None) -> None:
    assert cpfmt.normalize_status(given) == stored


def test_status_synonyms_are_normalised_when_written(store: gitstate.Store) -> None:
    run = store.create_run(run_id="s")
    assert run.checkpoint({}, status="Done").status == "completed"
    assert run.checkpoint({}, status="custom").status == "custom"
    assert store.get_run("s").head().status == "custom"  # type: ignore[union-attr]
