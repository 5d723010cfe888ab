"""gitstate.git.reader against real git: ObjectReader on loose and packed objects, damaged loose
objects (read in a child process with a hard timeout: libgit2 1.9 alone never returns from a
truncated one), wrong-type reads, parse_commit/parse_tree against what git wrote and lists,
walk_tree's depth limit, is_ancestor and expand_id."""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import subprocess
import sys
import zlib
from pathlib import Path

import pygit2
import pytest
from conftest import git
from pygit2.enums import ObjectType

from gitstate.errors import (
    AmbiguousReferenceError,
    CheckpointNotFound,
    CorruptObjectError,
    InvalidReferenceError,
)
from gitstate.git.objects import MODE_BLOB, MODE_TREE, ObjectWriter
from gitstate.git.reader import ObjectReader, Signature, check_loose, expand_id, parse_commit, parse_tree

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 20  # seconds for a child process reading one damaged object


def git_in(repo: Path, *args: str, stdin: str | bytes | None = None) -> str:
    """Real git with input on stdin."""
    data = stdin.encode() if isinstance(stdin, str) else stdin
    out = subprocess.run(["git", *args], cwd=repo, input=data, capture_output=True, check=False)
    assert out.returncode == 0, out.stderr.decode()
    return out.stdout.decode().strip()


def loose_path(repo: Path, oid: str) -> Path:
    return repo / ".git" / "objects" / oid[:2] / oid[2:]


def reader_of(repo: Path) -> ObjectReader:
    return ObjectReader(pygit2.Repository(str(repo)))


# -- loose and packed objects ------------------------------------------------------------------


def _some_objects(repo: Path) -> dict[str, str]:
    blob = git_in(repo, "hash-object", "-w", "--stdin", stdin="payload\n")
    tree = git_in(repo, "mktree", stdin=f"100644 blob {blob}\tp.txt\n")
    commit = git_in(repo, "commit-tree", tree, "-m", "objects")
    return {"blob": blob, "tree": tree, "commit": commit}


@pytest.mark.parametrize("packed", [False, True], ids=["loose", "packed"])
def test_reads_loose_and_packed_objects(repo: Path, packed: bool) -> None:
    ids = _some_objects(repo)
    if packed:
        git(repo, "update-ref", "refs/heads/keep", ids["commit"])
        git(repo, "repack", "-a", "-d", "-q")
        git(repo, "prune-packed")
        assert not loose_path(repo, ids["blob"]).exists()
    else:
        assert loose_path(repo, ids["blob"]).exists()
    reader = reader_of(repo)
    assert reader.blob(ids["blob"]) == b"payload\n"
    assert reader.header(ids["blob"]) == (ObjectType.BLOB, 8)
    assert reader.read(ids["tree"]) == (ObjectType.TREE, b"100644 p.txt\0" + bytes.fromhex(ids["blob"]))
    tree = reader.tree(ids["tree"])
    assert [(i.name, i.id, i.filemode) for i in tree] == [("p.txt", ids["blob"], MODE_BLOB)]
    commit = reader.commit(ids["commit"])
    assert commit.tree_id == ids["tree"] and commit.parent_ids == () and commit.message == "objects\n"
    assert all(reader.exists(oid) for oid in ids.values())
    assert all(check_loose(reader.repo, oid) is None for oid in ids.values())


def test_wrong_type_and_missing_objects(repo: Path) -> None:
    ids = _some_objects(repo)
    reader = reader_of(repo)
    cases = [(reader.tree, "blob"), (reader.commit, "blob"), (reader.blob, "tree"), (reader.commit, "tree"),
             (reader.blob, "commit"), (reader.tree, "commit")]
    for method, kind in cases:
        with pytest.raises(CorruptObjectError) as info:
            method(ids[kind])
        assert info.value.oid == ids[kind] and f"found {kind}" in info.value.reason
    missing = "0123456789abcdef0123456789abcdef01234567"
    assert not reader.exists(missing)
    for method in (reader.blob, reader.tree, reader.commit, reader.header):
        with pytest.raises(CorruptObjectError) as info:
            method(missing)
        assert info.value.oid == missing


# -- damaged loose objects: in a child process, under a hard timeout ----------------------------

_CHILD = r"""
import json, sys, pygit2
from gitstate.errors import CorruptObjectError
from gitstate.git.reader import ObjectReader
reader = ObjectReader(pygit2.Repository(sys.argv[1]))
oid, out = sys.argv[2], {}
for name in ("read", "header", "blob", "tree", "commit"):
    try:
        if sys.argv[3:] == ["listed"]:
            with reader.listing_loose():
                getattr(reader, name)(oid)
        else:
            getattr(reader, name)(oid)
        out[name] = "no error"
    except CorruptObjectError as exc:
        out[name] = ["CorruptObjectError", exc.oid, exc.reason]
    except Exception as exc:
        out[name] = [type(exc).__name__, str(exc)]
print(json.dumps(out))
"""


def _damage(path: Path, how: str) -> None:
    data = path.read_bytes()
    os.chmod(path, 0o644)
    if how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif how == "zero-length":
        path.write_bytes(b"")
    elif how == "garbage":
        path.write_bytes(b"\x00not zlib at all\xff" * 8)
    elif how == "bad-header":  # inflates completely, but is no object
        path.write_bytes(zlib.compress(b"nonsense without a header"))
    elif how == "wrong-content":  # a sound object stored under another object's name
        path.write_bytes(zlib.compress(b"blob 5\0other"))
    else:  # pragma: no cover
        raise AssertionError(how)


@pytest.mark.parametrize(("how", "listed"), [("truncated", False), ("zero-length", False), ("garbage", False),
                                             ("bad-header", False), ("wrong-content", False),
                                             ("truncated", True), ("zero-length", True)])
@pytest.mark.parametrize("kind", ["blob", "tree", "commit"])
def test_damaged_loose_object_is_corrupt_in_bounded_time(repo: Path, kind: str, how: str, listed: bool) -> None:
    """Also through :meth:`ObjectReader.listing_loose` (``listed``): a listed loose object is checked."""
    # a big blob, so half of it is a real truncated zlib stream and not a few header bytes
    big = git_in(repo, "hash-object", "-w", "--stdin", stdin=os.urandom(50_000).hex())
    tree = git_in(repo, "mktree", stdin=f"100644 blob {big}\tbig\n")
    oid = {"blob": big, "tree": tree, "commit": git_in(repo, "commit-tree", tree, "-m", "m")}[kind]
    _damage(loose_path(repo, oid), how)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-c", _CHILD, str(repo), oid, *(["listed"] if listed else [])],
                          capture_output=True, text=True, env=env, timeout=LIMIT, check=False)
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)
    if how == "wrong-content":
        # a header read does not hash the body (as `git cat-file -t` does not): only body reads must
        # notice that the content is not the object's
        del results["header"]
    for name, result in results.items():
        assert result[:2] == ["CorruptObjectError", oid], (name, result)


@pytest.mark.parametrize("how", ["truncated", "zero-length", "garbage"])
def test_check_loose_names_the_damage(repo: Path, how: str) -> None:
    oid = git_in(repo, "hash-object", "-w", "--stdin", stdin=os.urandom(20_000).hex())
    handle = pygit2.Repository(str(repo))
    assert check_loose(handle, oid) is None
    _damage(loose_path(repo, oid), how)
    assert check_loose(handle, oid) in ("loose object is truncated", "loose object does not inflate")


def test_listing_loose_opens_no_file_for_packed_objects(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gitstate.git import reader as reading

    packed = [git_in(repo, "hash-object", "-w", "--stdin", stdin=f"packed {i}\n") for i in range(20)]
    git_in(repo, "pack-objects", "-q", str(repo / ".git" / "objects" / "pack" / "pack"), stdin="\n".join(packed) + "\n")
    git_in(repo, "prune-packed")
    loose = git_in(repo, "hash-object", "-w", "--stdin", stdin="loose\n")
    checked: list[str] = []
    real = reading.check_loose
    monkeypatch.setattr(reading, "check_loose", lambda handle, oid: checked.append(oid) or real(handle, oid))
    reader = ObjectReader(pygit2.Repository(str(repo)))
    with reader.listing_loose():
        assert [reader.blob(oid) for oid in packed] == [f"packed {i}\n".encode() for i in range(20)]
        assert reader.blob(loose) == b"loose\n"
        # written loose after the listing: read (checked only if its directory was listed later)
        late = git_in(repo, "hash-object", "-w", "--stdin", stdin="late\n")
        assert reader.blob(late) == b"late\n"
    assert checked[0] == loose and set(checked) <= {loose, late}  # no packed object's file opened
    checked.clear()
    reader.blob(packed[0])  # outside the block: every read checks again
    assert checked == [packed[0]]


# -- parse_commit / parse_tree against git ------------------------------------------------------


def test_parse_commit_of_commit_tree_commits(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tree = git(repo, "rev-parse", "HEAD^{tree}").strip()
    head = git(repo, "rev-parse", "HEAD").strip()
    p2 = git_in(repo, "commit-tree", tree, "-m", "second root")
    p3 = git_in(repo, "commit-tree", tree, "-m", "third root")
    monkeypatch.setenv("GIT_AUTHOR_DATE", "1700000000 +0530")
    monkeypatch.setenv("GIT_COMMITTER_DATE", "1700000123 -0845")
    message = "subject line\n\nbody one\n  indented\n\nTrailer: value\nÜnïcödé: ✓\n"
    oid = git_in(repo, "commit-tree", tree, "-p", head, "-p", p2, "-p", p3, stdin=message)
    commit = reader_of(repo).commit(oid)
    assert commit.id == oid and commit.tree_id == tree
    assert commit.parent_ids == (head, p2, p3)
    assert git(repo, "log", "-1", "--format=%P", oid).split() == list(commit.parent_ids)
    assert commit.author == Signature("Test Author", "author@example.com", 1700000000, 5 * 60 + 30)
    assert commit.committer == Signature("Test Committer", "committer@example.com", 1700000123, -(8 * 60 + 45))
    assert commit.commit_time == 1700000123
    assert commit.message == message
    raw = git(repo, "cat-file", "commit", oid)
    assert f"author {commit.author.to_git()}\n" in raw and f"committer {commit.committer.to_git()}\n" in raw
    via_pygit2 = pygit2.Repository(str(repo))[oid]
    assert (via_pygit2.author.offset, via_pygit2.committer.offset) == (commit.author.offset, commit.committer.offset)


def test_parse_commit_skips_continuation_headers(repo: Path) -> None:
    tree = git(repo, "rev-parse", "HEAD^{tree}").strip()
    head = git(repo, "rev-parse", "HEAD").strip()
    raw = (f"tree {tree}\nparent {head}\n"
           "author A U <a@example.com> 1700000000 +0100\n"
           "committer C O <c@example.com> 1700000001 -0000\n"
           "gpgsig -----BEGIN PGP SIGNATURE-----\n \n iQEzBAABCAAdFiEE\n parent 0000000000000000000000000000000000000000\n"
           " tree 1111111111111111111111111111111111111111\n -----END PGP SIGNATURE-----\n"
           "encoding UTF-8\n"
           "\nsigned subject\n\nsigned body\n")
    oid = git_in(repo, "hash-object", "-t", "commit", "-w", "--stdin", stdin=raw)
    git(repo, "fsck", "--strict", "--no-dangling")
    commit = reader_of(repo).commit(oid)
    assert commit.tree_id == tree and commit.parent_ids == (head,)
    assert commit.author == Signature("A U", "a@example.com", 1700000000, 60)
    assert commit.committer.offset == 0
    assert commit.message == "signed subject\n\nsigned body\n"
    assert commit == parse_commit(oid, raw.encode())


@pytest.mark.parametrize("raw", [b"", b"tree abc\n\nmsg", b"author x <y> 1 +0000\n\n",
                                 b"tree " + b"a" * 40 + b"\nauthor nobody\ncommitter c <d> 1 +0000\n\n",
                                 b"tree " + b"a" * 40 + b"\nauthor a <b> notatime +0000\ncommitter c <d> 1 +0000\n\n"])
def test_parse_commit_refuses_malformed_commits(raw: bytes) -> None:
    with pytest.raises(CorruptObjectError) as info:
        parse_commit("f" * 40, raw)
    assert info.value.oid == "f" * 40


def test_parse_tree_matches_git_ls_tree(repo: Path) -> None:
    blob = git_in(repo, "hash-object", "-w", "--stdin", stdin="x\n")
    link = git_in(repo, "hash-object", "-w", "--stdin", stdin="target")
    sub = git_in(repo, "mktree", stdin=f"100644 blob {blob}\tinner\n")
    head = git(repo, "rev-parse", "HEAD").strip()
    listing = (f"100644 blob {blob}\ta.txt\n100755 blob {blob}\trun.sh\n120000 blob {link}\tlink\n"
               f"040000 tree {sub}\ta\n100644 blob {blob}\ta-b\n160000 commit {head}\tmodule\n"
               f"100644 blob {blob}\tünïcödé name\n100644 blob {blob}\twith space\n")
    tree = git_in(repo, "mktree", "--missing", stdin=listing)
    parsed = reader_of(repo).tree(tree)
    shown = git(repo, "ls-tree", "-z", tree).split("\0")[:-1]
    expected = []
    for line in shown:
        info, name = line.split("\t", 1)
        mode, kind, oid = info.split()
        expected.append((name, oid, int(mode, 8), kind))
    assert [(i.name, i.id, i.filemode, i.type_str) for i in parsed] == expected
    assert len(parsed) == 8 and "a" in parsed and "missing" not in parsed
    assert parsed["a"].type_str == "tree" and parsed.get("module").type_str == "commit"  # type: ignore[union-attr]
    with pytest.raises(KeyError):
        parsed["missing"]


@pytest.mark.parametrize("raw", [b"100644 name", b"100644 name\0short", b"10x644 name\0" + b"\1" * 20,
                                 b"100644 ok\0" + b"\1" * 20 + b"100644"])
def test_parse_tree_refuses_malformed_trees(raw: bytes) -> None:
    with pytest.raises(CorruptObjectError):
        parse_tree("e" * 40, raw)


# -- walk_tree, is_ancestor, expand_id ----------------------------------------------------------


def _deep_tree(repo: Path, depth: int) -> str:
    writer = ObjectWriter(pygit2.Repository(str(repo)))
    leaf = writer.blob(b"bottom")
    tree = writer.tree([("leaf", leaf, MODE_BLOB)])
    for _ in range(depth - 1):
        tree = writer.tree([("d", tree, MODE_TREE), ("f", leaf, MODE_BLOB)])
    return tree


def test_walk_tree_depth_limit_on_a_100_deep_tree(repo: Path) -> None:
    top = _deep_tree(repo, 100)
    reader = reader_of(repo)
    walked = reader.walk_tree(top, max_depth=10)
    seen = []
    with pytest.raises(CorruptObjectError) as info:
        for path, _item in walked:
            seen.append(path)
    assert "deeper than 10" in info.value.reason
    assert max(p.count("/") for p in seen) <= 10
    everything = list(reader.walk_tree(top, max_depth=100))
    assert len(everything) == 2 * 99 + 1
    assert everything[-1][0] == "d/" * 99 + "leaf"
    assert len(git(repo, "ls-tree", "-r", "-t", top).splitlines()) == len(everything)


def test_is_ancestor(repo: Path) -> None:
    tree = git(repo, "rev-parse", "HEAD^{tree}").strip()
    a = git(repo, "rev-parse", "HEAD").strip()
    b = git_in(repo, "commit-tree", tree, "-p", a, "-m", "b")
    c = git_in(repo, "commit-tree", tree, "-p", b, "-m", "c")
    other = git_in(repo, "commit-tree", tree, "-m", "unrelated root")
    merge = git_in(repo, "commit-tree", tree, "-p", c, "-p", other, "-m", "merge")
    reader = reader_of(repo)
    for x, y in itertools.product([a, b, c, other, merge], repeat=2):
        by_git = subprocess.run(["git", "merge-base", "--is-ancestor", x, y], cwd=repo, check=False).returncode == 0
        assert reader.is_ancestor(x, y) is by_git, (x, y)


def _two_blobs_sharing_a_prefix() -> tuple[bytes, bytes, str]:
    seen: dict[str, bytes] = {}
    for i in itertools.count():
        data = b"collide %d" % i
        oid = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
        if oid[:4] in seen:
            return seen[oid[:4]], data, oid[:4]
        seen[oid[:4]] = data
    raise AssertionError("unreachable")  # pragma: no cover


def test_expand_id(repo: Path) -> None:
    handle = pygit2.Repository(str(repo))
    head = git(repo, "rev-parse", "HEAD").strip()
    assert expand_id(handle, head) == head
    assert expand_id(handle, head[:7]) == head
    assert expand_id(handle, head[:7].upper()) == head
    one, two, prefix = _two_blobs_sharing_a_prefix()
    writer = ObjectWriter(handle)
    writer.blob(one)
    writer.blob(two)
    handle = pygit2.Repository(str(repo))
    with pytest.raises(AmbiguousReferenceError):
        expand_id(handle, prefix)
    unused = next(p for p in (f"{n:04x}" for n in range(0x10000))
                  if subprocess.run(["git", "rev-parse", "--disambiguate=" + p], cwd=repo, capture_output=True,
                                    text=True, check=False).stdout.strip() == "")
    with pytest.raises(CheckpointNotFound):
        expand_id(handle, unused + "0" * 8)
    for bad in ("xyz1234", "abc", "", head + "0", "12 34", "g" * 40):
        with pytest.raises(InvalidReferenceError) as info:
            expand_id(handle, bad)
        assert type(info.value) is InvalidReferenceError, bad
