"""gitstate.git.deflate: zlib streams built by appending parts must inflate to the object's bytes,
in Python's zlib and in git (a pack whose entries hold them is read and checked by real git)."""

from __future__ import annotations

import os
import random
import subprocess
import zlib
from pathlib import Path

import pygit2
import pytest
from test_packs import fsck_clean, obj, pack_dir, run_git, verify_pack

from gitstate.git import packs
from gitstate.git.deflate import MAX_HEAD, STORED_BELOW, AppendDeflater, adler32_combine, compress


def test_adler32_combine_matches_zlib() -> None:
    rng = random.Random(3)
    for _ in range(500):
        a, b = rng.randbytes(rng.randrange(0, 300)), rng.randbytes(rng.randrange(0, 200_000))
        assert adler32_combine(zlib.adler32(a), zlib.adler32(b), len(b)) == zlib.adler32(a + b)


def test_every_prefix_inflates_to_head_and_parts() -> None:
    rng = random.Random(4)
    words = [b"agent", b"tool", b"report", b" ", b"\x00", b"\xff"]
    for _trial in range(60):
        d = AppendDeflater()
        parts: list[bytes] = []
        assert zlib.decompress(d.stream(b"")) == b""
        for _ in range(rng.randrange(1, 40)):
            kind = rng.randrange(3)
            part = (b"" if kind == 0 else rng.randbytes(rng.randrange(1, 600)) if kind == 1
                    else b"".join(rng.choice(words) for _ in range(rng.randrange(1, 2000))))
            d.append(part)
            parts.append(part)
            head = rng.randbytes(rng.randrange(0, 6))
            stream = d.stream(head)
            assert zlib.decompress(stream) == head + b"".join(parts)
            assert zlib.decompressobj().decompress(stream) == head + b"".join(parts)
        assert d.parts == parts and d.length == sum(map(len, parts))
    big = AppendDeflater()
    big.append(b"x" * 10)
    assert zlib.decompress(big.stream(b"h" * MAX_HEAD)) == b"h" * MAX_HEAD + b"x" * 10
    with pytest.raises(ValueError):
        big.stream(b"h" * (MAX_HEAD + 1))


def test_a_pack_of_appended_streams_is_read_by_git(repo: Path) -> None:
    rng = random.Random(5)
    d = AppendDeflater()
    objects, streams = [], {}
    items: list[bytes] = []
    for i in range(40):
        item = f"message {i}: ".encode() + rng.randbytes(rng.randrange(0, 300)) + b"the agent called a tool " * 8
        items.append(item)
        d.append(item)
        head = bytes([0x90 | min(len(items), 15)])
        o = obj(3, head + b"".join(items))
        objects.append(o)
        streams[o[0]] = d.stream(head)
    written = packs.write_pack(str(pack_dir(repo)), objects, compressed=streams)
    handle = pygit2.Repository(str(repo))
    for oid, _kind, body in objects:
        raw = subprocess.run(["git", "cat-file", "blob", oid], cwd=repo, capture_output=True, check=True).stdout
        assert raw == body
        assert handle.odb.read(oid) == (3, body)
    verify_pack(repo, written.name)
    run_git(repo, "index-pack", "--stdin", data=(pack_dir(repo) / f"{written.name}.pack").read_bytes())
    fsck_clean(repo)
    assert os.path.getsize(pack_dir(repo) / f"{written.name}.pack") < sum(len(b) for _o, _k, b in objects)


def test_sized_streams_inflate_and_stay_as_small_as_zlibs() -> None:
    rng = random.Random(6)
    words = [b"agent ", b"tool ", b"report ", b"revenue ", b"\x00", rng.randbytes(7)]
    for size in (0, 1, 40, 511, 512, 600, 1023, 1024, 4097, 20_000, 32_767, 32_768, 100_000):
        data = b"".join(rng.choice(words) for _ in range(size))[:size]
        for level in (1, 6, 9):
            stream = compress(data, level)
            assert zlib.decompress(stream) == data
            # the window covers the whole object, so nothing is lost beyond a smaller hash table
            if size < STORED_BELOW:
                assert stream[2] == 0x01 and stream[7:-4] == data  # one final stored block
            else:
                assert len(stream) <= len(zlib.compress(data, level)) * 1.03 + 8, (size, level)


def test_a_pack_of_sized_streams_is_read_by_git(repo: Path) -> None:
    rng = random.Random(7)
    objects = [obj(3, rng.randbytes(n // 3) + b"the agent called a tool " * (n // 24))
               for n in (10, 700, 3000, 40_000)]
    written = packs.write_pack(str(pack_dir(repo)), objects)
    for oid, _kind, body in objects:
        raw = subprocess.run(["git", "cat-file", "blob", oid], cwd=repo, capture_output=True, check=True).stdout
        assert raw == body
    verify_pack(repo, written.name)
    fsck_clean(repo)
