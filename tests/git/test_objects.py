"""gitstate.git.objects against real git: ObjectWriter computes the ids git computes, writes trees in
git's order (a directory sorts as ``name/``), writes objects git reads and fsck accepts, and
forget() makes it write again an object deleted behind its back."""

from __future__ import annotations

import os
import stat
import subprocess
import time
import zlib
from pathlib import Path

import pygit2
import pytest
from conftest import git
from pygit2.enums import ObjectType

from gitstate.git.objects import (
    MODE_BLOB,
    MODE_COMMIT,
    MODE_EXEC,
    MODE_LINK,
    MODE_TREE,
    ObjectWriter,
    tree_bytes,
)
from gitstate.git.reader import parse_tree


def git_in(repo: Path, *args: str, stdin: bytes) -> str:
    out = subprocess.run(["git", *args], cwd=repo, input=stdin, capture_output=True, check=False)
    assert out.returncode == 0, out.stderr.decode()
    return out.stdout.decode().strip()


def loose_path(repo: Path, oid: str) -> Path:
    return repo / ".git" / "objects" / oid[:2] / oid[2:]


def writer_for(repo: Path, written: list[str] | None = None) -> ObjectWriter:
    return ObjectWriter(pygit2.Repository(str(repo)), on_write=None if written is None else written.append)


@pytest.mark.parametrize("data", [b"", b"hello\n", bytes(range(256)) * 3, b"\0" * 100_000, "ünï ✓".encode()],
                         ids=["empty", "text", "binary", "zeros", "utf8"])
def test_blob_ids_equal_git_hash_object(repo: Path, data: bytes) -> None:
    oid = writer_for(repo).blob(data)
    assert oid == git_in(repo, "hash-object", "--stdin", stdin=data)
    assert subprocess.run(["git", "cat-file", "blob", oid], cwd=repo, capture_output=True,
                          check=True).stdout == data
    raw = zlib.decompress(loose_path(repo, oid).read_bytes())
    assert raw == b"blob %d\0" % len(data) + data
    assert not loose_path(repo, oid).stat().st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)
    assert git(repo, "cat-file", "-t", oid).strip() == "blob"


def test_tree_ids_and_order_equal_git(repo: Path) -> None:
    writer = writer_for(repo)
    blob = writer.blob(b"content\n")
    sub = writer.tree([("inner", blob, MODE_BLOB)])
    head = git(repo, "rev-parse", "HEAD").strip()
    # "a" the directory sorts as "a/": after "a.txt" and "a-b" ('-' < '.' < '/'), before "a0"
    entries = [("a0", blob, MODE_BLOB), ("a", sub, MODE_TREE), ("a.txt", blob, MODE_EXEC),
               ("a-b", blob, MODE_LINK), ("b", sub, MODE_TREE), ("ünï", blob, MODE_BLOB),
               ("mod", head, MODE_COMMIT), ("A", blob, MODE_BLOB)]
    oid = writer.tree(entries)
    assert oid == writer.tree(list(reversed(entries)))  # input order does not matter
    listing = "".join(f"{mode:06o} {kind} {eid}\t{name}\n" for name, eid, mode in entries
                      for kind in [{MODE_TREE: "tree", MODE_COMMIT: "commit"}.get(mode, "blob")])
    assert oid == git_in(repo, "mktree", "--missing", stdin=listing.encode())
    names = git(repo, "ls-tree", "--name-only", "-z", oid).split("\0")[:-1]
    assert names == ["A", "a-b", "a.txt", "a", "a0", "b", "mod", "ünï"]
    shown = git(repo, "cat-file", "-p", oid)
    assert f"040000 tree {sub}\ta\n" in shown and f"160000 commit {head}\tmod\n" in shown
    git(repo, "fsck", "--strict", "--no-dangling")


def test_directory_sorts_as_name_slash_in_tree_bytes() -> None:
    blob, tree = "1" * 40, "2" * 40
    data = tree_bytes([("foo", tree, MODE_TREE), ("foo.c", blob, MODE_BLOB), ("foo0", blob, MODE_BLOB)])
    assert [(i.name, i.filemode) for i in parse_tree("t", data)] == [
        ("foo.c", MODE_BLOB), ("foo", MODE_TREE), ("foo0", MODE_BLOB)]
    as_file = tree_bytes([("foo", blob, MODE_BLOB), ("foo.c", blob, MODE_BLOB), ("foo0", blob, MODE_BLOB)])
    assert as_file.startswith(b"100644 foo\0")


def test_commits_and_trees_are_readable_and_fsck_clean(repo: Path) -> None:
    writer = writer_for(repo)
    blob = writer.blob(b"x\n")
    tree = writer.tree([("x.txt", blob, MODE_BLOB), ("sub", writer.tree([("y", blob, MODE_BLOB)]), MODE_TREE)])
    head = git(repo, "rev-parse", "HEAD").strip()
    body = (f"tree {tree}\nparent {head}\nauthor A <a@x> 1700000000 +0200\n"
            f"committer C <c@x> 1700000000 +0200\n\nmade by ObjectWriter\n").encode()
    commit = writer.write(ObjectType.COMMIT, body)
    assert commit == git_in(repo, "hash-object", "-t", "commit", "--stdin", stdin=body)
    assert git(repo, "cat-file", "-p", f"{commit}:sub/y") == "x\n"
    assert git(repo, "log", "--format=%s", commit).splitlines() == ["made by ObjectWriter", "initial"]
    git(repo, "update-ref", "refs/heads/written", commit)
    git(repo, "fsck", "--strict", "--no-dangling")


def test_on_write_reports_only_new_objects_and_freshens_existing_ones(repo: Path) -> None:
    existing = git_in(repo, "hash-object", "-w", "--stdin", stdin=b"already there\n")
    path = loose_path(repo, existing)
    old = time.time() - 7 * 86400
    os.utime(path, (old, old))
    written: list[str] = []
    writer = writer_for(repo, written)
    assert writer.blob(b"already there\n") == existing
    assert written == []  # not ours: not reported for packing
    assert path.stat().st_mtime > old + 86400  # touched, so a concurrent gc keeps it
    new = writer.blob(b"brand new\n")
    assert written == [new]
    assert writer.blob(b"brand new\n") == new and written == [new]
    assert writer.knows(new) and writer.knows(existing)


def test_forget_makes_the_writer_write_again(repo: Path) -> None:
    written: list[str] = []
    writer = writer_for(repo, written)
    oid = writer.blob(b"will be deleted behind the writer's back\n")
    path = loose_path(repo, oid)
    os.chmod(path, 0o644)
    path.unlink()
    assert writer.blob(b"will be deleted behind the writer's back\n") == oid
    assert not path.exists()  # trusted from memory: not written again (the cost forget() exists for)
    writer.forget()
    assert not writer.knows(oid)
    assert writer.blob(b"will be deleted behind the writer's back\n") == oid
    assert path.exists()
    assert written == [oid, oid]
    assert git(repo, "cat-file", "-p", oid) == "will be deleted behind the writer's back\n"


def test_forget_drops_the_value_cache(repo: Path) -> None:
    writer = writer_for(repo)
    writer.cache_value(b"k" * 20, "3" * 40)
    assert writer.cached_value(b"k" * 20) == "3" * 40
    writer.forget()
    assert writer.cached_value(b"k" * 20) is None


def test_a_fan_out_directory_removed_again_and_again_is_made_again(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A concurrent ``git prune-packed`` (run by ``git gc`` and ``git repack -d``) removes empty
    fan-out directories: one that vanishes between the writer's mkdir and its open, several times
    in a row, is made again until the loose object is written (a LangGraph writer beside a
    ``git gc`` loop failed with ``No such file or directory`` after one retry)."""
    writer = writer_for(repo)
    real_open, vanished = os.open, []

    def racing_open(path: str, flags: int, mode: int = 0o777) -> int:
        if "tmp_obj_" in os.fspath(path) and len(vanished) < 5:
            os.rmdir(os.path.dirname(path))  # what prune-packed does to an empty directory
            vanished.append(path)
            raise FileNotFoundError(2, "No such file or directory", path)
        return real_open(path, flags, mode)

    monkeypatch.setattr(os, "open", racing_open)
    oid = writer.blob(b"written at last\n")
    monkeypatch.undo()
    assert len(vanished) == 5
    assert git_in(repo, "cat-file", "-p", oid, stdin=b"") == "written at last"

