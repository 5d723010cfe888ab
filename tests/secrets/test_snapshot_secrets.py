"""Workspace snapshots under the write-time secrets policy: a credential in an untracked or a
modified tracked file never reaches any object of ``.git`` with ``redact`` or ``refuse`` (checked
with ``git cat-file --batch-all-objects --batch``), ``warn`` stores and records it, ``off`` stores
it; the user's committed content is never rewritten; a restore's safety snapshot goes through the
policy too, and restoring a redacted snapshot writes the redacted text."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from conftest import git, make_repo

import gitstate
from gitstate.format.checkpoint import read_meta
from gitstate.secrets.policy import MAX_FILE
from gitstate.workspace.snapshot import SCRUB_MAX

AWS = "AKIA" + "Q" * 12 + "7ZXW"
GITHUB = "ghp_" + "Ab3" * 12


def all_objects(path: Path) -> bytes:
    return subprocess.run(["git", "cat-file", "--batch-all-objects", "--batch"], cwd=path, capture_output=True,
                          check=True).stdout


def private_files(path: Path) -> bytes:
    """Every file gitstate keeps beside the objects (private index, its records)."""
    return b"".join(p.read_bytes() for p in (path / ".git" / "agentos").rglob("*") if p.is_file())


def setup(tmp_path: Path, mode: str) -> tuple[Path, gitstate.Run]:
    path = make_repo(tmp_path / "repo")
    (path / "tracked.txt").write_text("hello\n")
    git(path, "add", "tracked.txt")
    git(path, "commit", "-q", "-m", "tracked")
    git(path, "config", "agentos.secrets", mode)
    run = gitstate.open_store(path).create_run(run_id="r")
    run.checkpoint({"step": 0}, files=True)
    (path / "tracked.txt").write_text(f"hello {AWS}\n")
    (path / "untracked.md").write_text(f"# notes\ntoken {GITHUB}\n")
    return path, run


def test_the_scrub_reads_what_the_policy_reads() -> None:
    assert SCRUB_MAX == MAX_FILE


def test_redact_keeps_the_files_secrets_out_of_every_object(tmp_path: Path) -> None:
    path, run = setup(tmp_path, "redact")
    cp = run.checkpoint({"step": 1}, files=True)
    data = all_objects(path)
    assert AWS.encode() not in data and GITHUB.encode() not in data
    assert AWS.encode() not in private_files(path) and GITHUB.encode() not in private_files(path)
    tree = git(path, "show", f"{cp.id}:files/untracked.md")
    assert tree.startswith("# notes\ntoken \u00abredacted:github-token:")
    assert git(path, "show", f"{cp.id}:files/tracked.txt").startswith("hello \u00abredacted:aws-access-key:")
    # unchanged, the files are read (and redacted) again: still nothing stored
    again = run.checkpoint({"step": 2}, files=True)
    assert again.files_tree_id == cp.files_tree_id
    assert AWS.encode() not in all_objects(path)
    # the worktree is the user's: never rewritten
    assert AWS in (path / "tracked.txt").read_text()


def test_refuse_names_the_file_and_writes_nothing(tmp_path: Path) -> None:
    path, run = setup(tmp_path, "refuse")
    before = (git(path, "for-each-ref"), sorted(all_objects(path).split(b"\n")[::2]))
    index = (path / ".git" / "agentos").glob("index-*")
    private = {p.name: p.read_bytes() for p in index}
    with pytest.raises(gitstate.SecretRefusedError) as info:
        run.checkpoint({"step": 1}, files=True)
    assert info.value.path in ("files['tracked.txt']", "files['untracked.md']")
    assert AWS not in str(info.value) and GITHUB not in str(info.value)
    assert (git(path, "for-each-ref"), sorted(all_objects(path).split(b"\n")[::2])) == before
    assert {p.name: p.read_bytes() for p in (path / ".git" / "agentos").glob("index-*")} == private
    (path / "tracked.txt").write_text("hello\n")
    (path / "untracked.md").write_text("# notes\n")
    assert run.checkpoint({"step": 1}, files=True).files_tree_id is not None


def test_warn_stores_and_records_the_findings(tmp_path: Path) -> None:
    path, run = setup(tmp_path, "warn")
    cp = run.checkpoint({"step": 1}, files=True)
    data = all_objects(path)
    assert AWS.encode() in data and GITHUB.encode() in data
    store = gitstate.open_store(path)
    meta = read_meta(store.core.reader, store.core.reader.commit(cp.id))
    assert {(f["path"], f["kind"]) for f in meta["secrets"]} == {
        ("files['tracked.txt']", "aws-access-key"), ("files['untracked.md']", "github-token")}


def test_off_stores_the_files_as_they_are(tmp_path: Path) -> None:
    path, run = setup(tmp_path, "off")
    run.checkpoint({"step": 1}, files=True)
    assert AWS.encode() in all_objects(path)


def test_content_already_stored_is_not_rewritten(tmp_path: Path) -> None:
    path = make_repo(tmp_path / "repo")
    (path / "committed.env").write_text(f"KEY={AWS}\n")
    git(path, "add", "committed.env")
    git(path, "commit", "-q", "-m", "the user's own")
    cp = gitstate.open_store(path).create_run(run_id="r").checkpoint({}, files=True)
    assert git(path, "show", f"{cp.id}:files/committed.env") == f"KEY={AWS}\n"
    assert git(path, "rev-parse", f"{cp.id}:files") == git(path, "rev-parse", "HEAD^{tree}")


def test_a_partial_snapshot_is_redacted(tmp_path: Path) -> None:
    path, run = setup(tmp_path, "redact")
    cp = run.checkpoint({"step": 1}, files=["untracked.md"])
    assert GITHUB.encode() not in all_objects(path)
    assert "\u00abredacted:github-token:" in git(path, "show", f"{cp.id}:files/untracked.md")


def test_restore_safety_snapshot_and_restored_text(tmp_path: Path) -> None:
    path, run = setup(tmp_path, "redact")
    redacted = run.checkpoint({"step": 1}, files=True)
    (path / "tracked.txt").write_text("hello\n")
    (path / "untracked.md").unlink()
    clean = run.checkpoint({"step": 2}, files=True)
    # a restore writes the redacted text: the snapshot holds nothing else
    result = run.restore(redacted)
    assert "untracked.md" in result.added
    assert (path / "untracked.md").read_text().startswith("# notes\ntoken \u00abredacted:github-token:")
    # a file whose bytes only a redacted copy holds is not overwritten unless forced, and the
    # safety checkpoint (the fast scan of the stat cache) stores it redacted
    (path / "untracked.md").write_text(f"edited {GITHUB} {AWS}\n")
    with pytest.raises(gitstate.RestoreConflictError):
        run.restore(clean)
    result = run.restore(clean, force=True)
    assert result.safety is not None and not (path / "untracked.md").exists()
    data = all_objects(path)
    assert AWS.encode() not in data and GITHUB.encode() not in data
    shown = git(path, "show", f"{result.safety}:files/untracked.md")
    assert shown.startswith("edited \u00abredacted:github-token:")


def test_warn_records_a_safety_snapshots_findings(tmp_path: Path) -> None:
    path, run = setup(tmp_path, "warn")
    cp = run.checkpoint({"step": 1}, files=True)
    (path / "later.txt").write_text(f"late {AWS} key\n")
    result = run.restore(cp, force=True)
    store = gitstate.open_store(path)
    meta = read_meta(store.core.reader, store.core.reader.commit(result.safety))
    assert [(f["path"], f["kind"]) for f in meta["secrets"]] == [("files['later.txt']", "aws-access-key")]


def test_show_log_view_and_html_mask_what_warn_stored(tmp_path: Path) -> None:
    import json
    import os
    import sys

    path, run = setup(tmp_path, "warn")
    run.checkpoint({"msg": f"key {AWS}", "raw": AWS.encode()}, tools=[{"out": GITHUB}], metadata={"n": AWS},
                   files=True)
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    html = tmp_path / "v.html"
    printed = ""
    for args in (["show", "r"], ["show", "r", "--json"], ["log", "r"], ["log", "r", "--json"],
                 ["diff", "r~1", "r"], ["view", "r", "--html", str(html)]):
        done = subprocess.run(["git", "agentos", *args], cwd=path, capture_output=True, text=True, env=env, check=False)
        assert done.returncode == 0, (args, done.stderr)
        printed += done.stdout + done.stderr
    printed += html.read_text(encoding="utf-8")
    assert AWS not in printed and GITHUB not in printed and AWS.encode().hex() not in printed
    assert "\u00abredacted:aws-access-key:" in printed and "\u00abredacted:github-token:" in printed
    assert json.loads(subprocess.run(["git", "agentos", "show", "r", "--json"], cwd=path, capture_output=True,
                                     text=True, env=env, check=True).stdout)["metadata"]["n"].startswith("\u00ab")


def test_file_diffs_and_session_files_mask_what_warn_stored(tmp_path: Path) -> None:
    """The view's diffs of snapshot files and session files (the live view's /api/diff and
    /api/session-file, the HTML file) and ``git agentos files`` print markers; ``--raw`` prints
    what is stored."""
    import json
    import os
    import sys

    from gitstate.view.data import ViewData

    path, run = setup(tmp_path, "warn")
    first = run.checkpoint({"step": 1}, files=True)
    (path / "creds.env").write_text(f"AWS_ACCESS_KEY_ID={AWS}\n")
    second = run.checkpoint({"step": 2}, files=True)
    run.files.write("notes.md", "no key yet\n", author="agent")
    run.files.write("notes.md", f"key {GITHUB}\n", author="agent")
    store = gitstate.open_store(path)
    data = ViewData(store)
    shown = json.dumps([data.diff(first.id, second.id), data.session_file("r", "notes.md")], ensure_ascii=False)
    assert "creds.env" in shown and AWS not in shown and GITHUB not in shown
    assert "\u00abredacted:aws-access-key:" in shown and "\u00abredacted:github-token:" in shown
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    html = tmp_path / "v.html"

    def agentos(*args: str) -> str:
        done = subprocess.run(["git", "agentos", *args], cwd=path, capture_output=True, text=True, env=env, check=False)
        assert done.returncode == 0, (args, done.stderr)
        return done.stdout

    agentos("view", "r", "--html", str(html))
    printed = html.read_text(encoding="utf-8") + agentos("files", "r", "notes.md") + agentos(
        "files", "r", "notes.md", "--json") + agentos("files", "r", "notes.md", "--version", "2")
    assert AWS not in printed and GITHUB not in printed and "\u00abredacted:github-token:" in printed
    assert agentos("files", "r", "notes.md", "--raw") == f"key {GITHUB}\n"
