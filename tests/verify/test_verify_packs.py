"""`verify` reads every object it counts in full, as `git fsck` does: one damaged byte inside a
packed blob's compressed data (its header still reads) is reported, for a workspace file, for a
state blob, and for a blob large enough to be streamed rather than read whole."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

import gitstate
from gitstate.verify import checks
from gitstate.verify.checks import verify
from tests.conftest import agentos_process, git

agentos = agentos_process


def damage_packed(repo: Path, oid: str) -> None:
    """Pack everything, then flip one byte in the middle of ``oid``'s compressed data."""
    git(repo, "repack", "-a", "-d", "-q")
    pack_dir = repo / ".git" / "objects" / "pack"
    (idx,) = pack_dir.glob("pack-*.idx")
    for line in git(repo, "verify-pack", "-v", str(idx)).splitlines():
        fields = line.split()
        if fields and fields[0] == oid:
            assert len(fields) == 5, f"{oid} is stored as a delta: {line}"
            in_pack, offset = int(fields[3]), int(fields[4])
            break
    else:
        raise AssertionError(f"{oid} is not in {idx}")
    pack = idx.with_suffix(".pack")
    pack.chmod(0o644)
    data = bytearray(pack.read_bytes())
    data[offset + in_pack // 2] ^= 0xFF
    pack.write_bytes(bytes(data))


@pytest.mark.parametrize("where", ["files", "state"])
def test_a_damaged_byte_inside_a_packed_blob_is_reported(repo: Path, where: str) -> None:
    store = gitstate.open_store(repo)
    (repo / "data.bin").write_bytes(os.urandom(4000))  # random: its own object, not a delta
    run = store.create_run(run_id="r")
    run.checkpoint({"blob": os.urandom(4000), "n": 1}, files=True)
    assert verify(store).ok
    spec = "files/data.bin" if where == "files" else "state/blob.cbor"
    oid = git(repo, "rev-parse", f"{run.ref('main')}:{spec}").strip()
    damage_packed(repo, oid)
    assert store.core.reader.header(oid)  # the header still reads: only a full read finds the damage
    done = agentos(repo, "verify")
    assert done.returncode == 1 and oid[:12] in done.stdout, (done.stdout, done.stderr)
    assert done.stdout.count("problem: ") == 1 and "incorrect data check" in done.stdout, done.stdout
    assert "error" in subprocess.run(["git", "fsck"], cwd=repo, capture_output=True, text=True,
                                     check=False).stderr  # git fsck agrees


def test_large_blobs_are_streamed_and_checked(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(checks, "STREAMED", 1024)  # every blob above 1 KiB goes through the stream
    store = gitstate.open_store(repo)
    (repo / "big.bin").write_bytes(os.urandom(300_000))
    (repo / "small.txt").write_text("small\n")
    run = store.create_run(run_id="r")
    run.checkpoint({"n": 1}, files=True)
    report = verify(store)
    assert report.ok, report.problems
    oid = git(repo, "rev-parse", f"{run.ref('main')}:files/big.bin").strip()
    damage_packed(repo, oid)
    problems = verify(store).problems
    assert len(problems) == 1 and problems[0].oid == oid and "big.bin" in problems[0].message, problems
    assert "unreadable" in problems[0].message
