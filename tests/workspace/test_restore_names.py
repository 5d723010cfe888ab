"""Every file name a git tree can hold either restores exactly or is refused, in one error line,
before anything is written: names that are not UTF-8 (bytes git stores as they are; a pulled
snapshot can hold them) restore byte for byte, with checkout filters on or off, through `restore`,
`restore --force` and `rollback --restore --force`; names longer than a file system allows, and
paths longer than the system's PATH_MAX, are refused up front."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

import gitstate
from gitstate.workspace import pathsafety
from tests.conftest import agentos_process, git

agentos = agentos_process


def mktree(repo: Path, entries: list[tuple[str, str, str, bytes]]) -> str:
    """``git mktree`` from (mode, type, id, raw name) entries: names as bytes, as a remote sends them."""
    lines = b"".join(f"{mode} {kind} {oid}\t".encode() + name + b"\n" for mode, kind, oid, name in entries)
    return subprocess.run(["git", "mktree"], cwd=repo, input=lines, capture_output=True, check=True).stdout.decode().strip()


def blob(repo: Path, data: bytes) -> str:
    return subprocess.run(["git", "hash-object", "-w", "--stdin"], cwd=repo, input=data, capture_output=True,
                          check=True).stdout.decode().strip()


def files(root: Path) -> dict[bytes, bytes]:
    """Every file under ``root`` but .git, by raw relative path."""
    out: dict[bytes, bytes] = {}
    base = os.fsencode(root)
    for dirpath, dirs, names in os.walk(base):
        if dirpath == base and b".git" in dirs:
            dirs.remove(b".git")
        for name in names:
            full = os.path.join(dirpath, name)
            with open(full, "rb") as fh:
                out[os.path.relpath(full, base)] = fh.read()
    return out


def hostile_tree(repo: Path) -> tuple[str, dict[bytes, bytes]]:
    """A snapshot whose names are not UTF-8 (a file, a folder and a file in it), with a
    .gitattributes so that checkout filters are looked up for every file."""
    text, other = blob(repo, b"line\n"), blob(repo, b"other\n")
    attrs = blob(repo, b"*.txt text eol=lf\n")
    inner = mktree(repo, [("100644", "blob", other, b"\xff\xfe.txt"), ("100644", "blob", text, b"ok.txt")])
    tree = mktree(repo, [("100644", "blob", attrs, b".gitattributes"), ("100644", "blob", text, b"a.txt"),
                         ("100644", "blob", text, b"caf\xe9.txt"), ("040000", "tree", inner, b"d\xe9r"),
                         ("100644", "blob", other, b"z.txt")])
    expected = {b".gitattributes": b"*.txt text eol=lf\n", b"a.txt": b"line\n", b"caf\xe9.txt": b"line\n",
                b"d\xe9r/\xff\xfe.txt": b"other\n", b"d\xe9r/ok.txt": b"line\n", b"z.txt": b"other\n"}
    return tree, expected


def test_names_that_are_not_utf8_restore_byte_for_byte(repo: Path) -> None:
    store = gitstate.open_store(repo)
    run = store.create_run(run_id="pulled")
    before = run.checkpoint({"n": 0}, files=True)
    tree, expected = hostile_tree(repo)
    cp = run.checkpoint({"n": 1}, files_tree=tree)
    git(repo, "config", "core.autocrlf", "input")  # checkout filters apply

    done = agentos(repo, "restore", cp.id)
    assert done.returncode == 0, done.stderr
    assert {k: v for k, v in files(repo).items() if k != b"README"} == expected
    assert agentos(repo, "restore", before.id, "--force").returncode == 0
    assert files(repo) == {b"README": b"hello\n"}
    done = agentos(repo, "restore", cp.id, "--force", "-v")
    assert done.returncode == 0 and "caf\\udce9.txt" in done.stdout, done.stderr
    assert {k: v for k, v in files(repo).items() if k != b"README"} == expected
    # the worktree holding such names: snapshotted, and restored away and back again
    again = agentos(repo, "checkpoint", "pulled", "--files")
    assert again.returncode == 0, again.stderr
    assert agentos(repo, "rollback", "pulled", before.id, "--restore", "--force").returncode == 0
    assert files(repo) == {b"README": b"hello\n"}
    assert agentos(repo, "undo", "pulled").returncode == 0
    done = agentos(repo, "restore", "pulled", "--json")
    assert done.returncode == 0, done.stderr
    assert {k: v for k, v in files(repo).items() if k != b"README"} == expected


def test_names_a_system_cannot_hold_are_refused_before_anything_is_written(repo: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    store = gitstate.open_store(repo)
    run = store.create_run(run_id="pulled")
    text = blob(repo, b"x\n")
    long_name = mktree(repo, [("100644", "blob", text, b"a.txt"), ("100644", "blob", text, b"l" * 256),
                              ("100644", "blob", text, b"z.txt")])
    deep = mktree(repo, [("100644", "blob", text, b"f")])
    for _ in range(20):
        deep = mktree(repo, [("040000", "tree", deep, b"d" * 250)])
    long_path = mktree(repo, [("100644", "blob", text, b"a.txt"), ("040000", "tree", deep, b"deep")])
    for tree, reason in ((long_name, "longer than file systems allow"), (long_path, "longer than this system allows")):
        cp = run.checkpoint({"n": 1}, files_tree=tree)
        for args in (["restore", cp.id], ["restore", cp.id, "--force"], ["restore", cp.id, "--dry-run"],
                     ["rollback", "pulled", cp.id, "--restore", "--force"]):
            done = agentos(repo, *args)
            assert done.returncode == 1 and reason in done.stderr, (args, done.stderr)
            assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: ")
            assert files(repo) == {b"README": b"hello\n"}, args

    # where file names are not bytes (macOS, Windows), a name that is not UTF-8 cannot be created
    monkeypatch.setattr(pathsafety, "BYTE_NAMES", False)
    tree = mktree(repo, [("100644", "blob", text, b"a.txt"), ("100644", "blob", text, b"\xe9t\xe9.txt")])
    cp = run.checkpoint({"n": 2}, files_tree=tree)
    for force in (False, True):
        with pytest.raises(gitstate.UnsafeTreeError) as info:
            run.restore(cp, force=force)
        assert "not UTF-8" in str(info.value)
        assert files(repo) == {b"README": b"hello\n"}
