"""gitstate.git.packs: packs written in Python must be what real git writes and reads.

Every check that git accepts a pack runs real git (``cat-file``, ``verify-pack -v``, ``fsck --strict``,
``index-pack``) with ``LC_ALL=C``; git and pygit2 are test dependencies, never skipped."""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pygit2
import pytest

from gitstate.errors import CorruptObjectError, StoreWriteError, UsageError
from gitstate.git import packs
from gitstate.git.objects import MODE_BLOB, MODE_TREE, tree_bytes

TYPE_NAMES = {1: "commit", 2: "tree", 3: "blob", 4: "tag"}


def run_git(cwd: Path, *args: str, data: bytes | None = None, check: bool = True) -> str:
    env = dict(os.environ, LC_ALL="C")
    proc = subprocess.run(["git", *args], cwd=cwd, input=data, capture_output=True, env=env, check=False)
    if check and proc.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed ({proc.returncode}): {proc.stderr.decode()}")
    return proc.stdout.decode()


def obj(kind: int, body: bytes) -> tuple[str, int, bytes]:
    header = b"%s %d\x00" % (TYPE_NAMES[kind].encode(), len(body))
    return hashlib.sha1(header + body).hexdigest(), kind, body


def blobs(tag: str, n: int, size: int = 300) -> list[tuple[str, int, bytes]]:
    rng = random.Random(tag)
    return [obj(3, (f"{tag}-{i}:".encode() + rng.randbytes(size))) for i in range(n)]


def pack_dir(repo: Path) -> Path:
    return repo / ".git" / "objects" / "pack"


def pack_files(repo: Path) -> set[str]:
    return set(os.listdir(pack_dir(repo)))


def fsck_clean(repo: Path) -> None:
    env = dict(os.environ, LC_ALL="C")
    proc = subprocess.run(["git", "fsck", "--strict", "--full", "--no-dangling"], cwd=repo,
                          capture_output=True, env=env, check=False)
    assert proc.returncode == 0, proc.stderr.decode() + proc.stdout.decode()
    noise = [line for line in (proc.stdout + proc.stderr).decode().splitlines()
             if not line.startswith(("Checking", "notice:"))]
    assert noise == [], noise


def verify_pack(repo: Path, name: str) -> str:
    out = run_git(repo, "verify-pack", "-v", str(pack_dir(repo) / f"{name}.idx"))
    assert out.rstrip().endswith(f"{name}.pack: ok"), out
    return out


def show_index(idx: Path) -> dict[str, int]:
    """``{id: offset}`` of an ``.idx``, as git reads it (``git show-index``)."""
    with idx.open("rb") as fh:
        out = subprocess.run(["git", "show-index"], stdin=fh, capture_output=True, check=True).stdout.decode()
    return {line.split()[1]: int(line.split()[0]) for line in out.splitlines()}


def history(repo: Path, n_files: int = 6) -> list[tuple[str, int, bytes]]:
    """A commit on refs/agentos/test (tree of blobs, a subtree) and an annotated tag naming it."""
    files = blobs("history", n_files)
    sub = obj(2, tree_bytes([("inner", files[0][0], MODE_BLOB)]))
    root = obj(2, tree_bytes([*((f"f{i}", oid, MODE_BLOB) for i, (oid, _, _) in enumerate(files)),
                              ("dir", sub[0], MODE_TREE)]))
    parent = run_git(repo, "rev-parse", "HEAD").strip()
    commit = obj(1, (f"tree {root[0]}\nparent {parent}\n"
                     "author A U Thor <a@example.com> 1700000000 +0000\n"
                     "committer A U Thor <a@example.com> 1700000000 +0000\n\ncheckpoint\n").encode())
    tag = obj(4, (f"object {commit[0]}\ntype commit\ntag v1\n"
                  "tagger A U Thor <a@example.com> 1700000000 +0000\n\na tag\n").encode())
    return [*files, sub, root, commit, tag]


def point_refs_at(repo: Path, objects: list[tuple[str, int, bytes]]) -> None:
    commit = next(oid for oid, kind, _ in objects if kind == 1)
    tag = next(oid for oid, kind, _ in objects if kind == 4)
    run_git(repo, "update-ref", "refs/agentos/test", commit)
    run_git(repo, "update-ref", "refs/tags/v1", tag)


# -- write_pack --------------------------------------------------------------------------------------


def test_ids_are_git_hash_object(repo: Path) -> None:
    for oid, kind, body in history(repo):
        assert run_git(repo, "hash-object", "-t", TYPE_NAMES[kind], "--stdin", data=body).strip() == oid


def test_written_pack_is_read_by_git_and_pygit2(repo: Path) -> None:
    handle = pygit2.Repository(str(repo))  # opened before the pack exists
    sizes = [0, 1, 15, 16, 17, 127, 128, 2047, 2048, 70_000]
    rng = random.Random(1)
    objects = [obj(3, rng.randbytes(size)) for size in sizes] + history(repo)
    written = packs.write_pack(str(pack_dir(repo)), objects)

    assert written.count == len(objects)
    assert written.oids == tuple(sorted(oid for oid, _, _ in objects))
    assert written.name == "pack-" + (pack_dir(repo) / f"{written.name}.pack").read_bytes()[-20:].hex()
    assert not written.existed
    point_refs_at(repo, objects)
    for oid, kind, body in objects:
        assert run_git(repo, "cat-file", "-t", oid).strip() == TYPE_NAMES[kind]
        raw = subprocess.run(["git", "cat-file", TYPE_NAMES[kind], oid], cwd=repo, capture_output=True,
                             check=True).stdout
        assert raw == body
        assert handle.odb.read(oid) == (kind, body)
        assert oid in handle.odb
        found = handle.get(oid)
        assert found is not None and found.id == pygit2.Oid(hex=oid)
    assert run_git(repo, "cat-file", "-p", objects[-2][0]).startswith("tree ")
    out = verify_pack(repo, written.name)
    assert f"non delta: {len(objects)} objects" in out
    fsck_clean(repo)


def test_files_are_installed_like_git(repo: Path) -> None:
    before = pack_files(repo)
    objects = blobs("install", 4)
    written = packs.write_pack(str(pack_dir(repo)), objects, fsync=True)
    added = pack_files(repo) - before
    assert added == {f"{written.name}.pack", f"{written.name}.idx"}  # no temp files left behind
    for name in added:
        mode = stat.S_IMODE(os.stat(pack_dir(repo) / name).st_mode)
        assert mode & 0o222 == 0 and mode & 0o444 == 0o444 & ~_umask()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_duplicates_written_once_and_existing_pack_left(repo: Path) -> None:
    objects = blobs("dup", 3)
    written = packs.write_pack(str(pack_dir(repo)), [*objects, objects[1], objects[0]])
    assert written.count == 3
    assert packs.index_ids(str(pack_dir(repo) / f"{written.name}.idx")) == sorted(oid for oid, _, _ in objects)
    pack_path = pack_dir(repo) / f"{written.name}.pack"
    os.utime(pack_path, (1_000_000, 1_000_000))
    inode = os.stat(pack_path).st_ino
    again = packs.write_pack(str(pack_dir(repo)), objects)
    assert again.name == written.name and again.existed
    assert os.stat(pack_path).st_ino == inode  # left in place...
    assert os.stat(pack_path).st_mtime > 1_000_000  # ...but freshened, as git does
    assert not [n for n in pack_files(repo) if n.startswith("tmp_")]


def test_half_installed_pack_is_completed(repo: Path) -> None:
    objects = blobs("half", 2)
    written = packs.write_pack(str(pack_dir(repo)), objects)
    (pack_dir(repo) / f"{written.name}.idx").unlink()  # as if its writer died between the renames
    again = packs.write_pack(str(pack_dir(repo)), objects)
    assert again.name == written.name and not again.existed
    verify_pack(repo, written.name)
    (pack_dir(repo) / f"{written.name}.pack").unlink()  # an index whose pack is gone
    third = packs.write_pack(str(pack_dir(repo)), objects)
    assert third.name == written.name and not third.existed
    verify_pack(repo, written.name)
    assert pack_files(repo) == {f"{written.name}.pack", f"{written.name}.idx"}


def test_write_pack_rejects_bad_input(repo: Path) -> None:
    d = str(pack_dir(repo))
    good = blobs("bad", 1)[0]
    with pytest.raises(UsageError):
        packs.write_pack(d, [])
    with pytest.raises(UsageError):
        packs.write_pack(d, [(good[0], 6, good[2])])
    with pytest.raises(UsageError):
        packs.write_pack(d, [(good[0][:39], 3, good[2])])
    with pytest.raises(UsageError):
        packs.write_pack(d, [("z" * 40, 3, good[2])])
    with pytest.raises(UsageError):
        packs.write_pack(d, [good], compression=10)
    assert not [n for n in pack_files(repo) if not n.startswith("pack-")]


def test_write_failure_is_store_write_error(repo: Path) -> None:
    blocker = repo / "not-a-dir"
    blocker.write_text("x")
    with pytest.raises(StoreWriteError):
        packs.write_pack(str(blocker / "pack"), blobs("fail", 1))


def test_index_is_byte_for_byte_gits(repo: Path, tmp_path: Path) -> None:
    written = packs.write_pack(str(pack_dir(repo)), history(repo) + blobs("git-idx", 20))
    copy = tmp_path / "copy.pack"
    shutil.copyfile(pack_dir(repo) / f"{written.name}.pack", copy)
    run_git(tmp_path, "index-pack", "-o", str(tmp_path / "copy.idx"), str(copy))
    assert (tmp_path / "copy.idx").read_bytes() == (pack_dir(repo) / f"{written.name}.idx").read_bytes()


def test_64bit_offsets(repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A pack above 2 GiB is too costly for a test, so the 32-bit limit is lowered the way
    ``git index-pack --index-version=2,<offset>`` lowers it, and git's index is compared."""
    plain = packs.write_pack(str(pack_dir(repo)), blobs("big-offsets", 12))
    expected = show_index(pack_dir(repo) / f"{plain.name}.idx")
    shutil.rmtree(pack_dir(repo))
    limit = 1000
    monkeypatch.setattr(packs, "_OFF32_LIMIT", limit)
    objects = blobs("big-offsets", 12)
    written = packs.write_pack(str(pack_dir(repo)), objects)
    assert written.name == plain.name
    idx_path = pack_dir(repo) / f"{written.name}.idx"
    assert show_index(idx_path) == expected
    n_large = sum(1 for offset in expected.values() if offset > limit)
    assert 0 < n_large < len(expected)
    assert idx_path.stat().st_size == 8 + 1024 + 28 * len(expected) + 8 * n_large + 40
    copy = tmp_path / "copy.pack"
    shutil.copyfile(pack_dir(repo) / f"{written.name}.pack", copy)
    run_git(tmp_path, "index-pack", f"--index-version=2,{limit}", "-o", str(tmp_path / "copy.idx"), str(copy))
    assert (tmp_path / "copy.idx").read_bytes() == idx_path.read_bytes()
    verify_pack(repo, written.name)
    handle = pygit2.Repository(str(repo))
    for oid, kind, body in objects:
        assert handle.odb.read(oid) == (kind, body)
        assert run_git(repo, "cat-file", "-t", oid).strip() == "blob"


# -- index_ids ---------------------------------------------------------------------------------------


def test_index_ids_match_verify_pack(repo: Path) -> None:
    written = packs.write_pack(str(pack_dir(repo)), blobs("read", 8))
    idx = str(pack_dir(repo) / f"{written.name}.idx")
    theirs = [line.split()[0] for line in verify_pack(repo, written.name).splitlines()
              if len(line.split()) >= 5 and len(line.split()[0]) == 40]
    assert packs.index_ids(idx) == sorted(theirs) == list(written.oids)
    assert packs.index_id_lines(idx) == "".join(oid + "\n" for oid in written.oids)
    assert packs.object_count(idx) == 8


def test_index_ids_refuse_other_versions_and_damage(repo: Path, tmp_path: Path) -> None:
    written = packs.write_pack(str(pack_dir(repo)), blobs("v1", 3))
    copy = tmp_path / "copy.pack"
    shutil.copyfile(pack_dir(repo) / f"{written.name}.pack", copy)
    run_git(tmp_path, "index-pack", "--index-version=1", "-o", str(tmp_path / "v1.idx"), str(copy))
    with pytest.raises(CorruptObjectError, match="version 1"):
        packs.index_ids(str(tmp_path / "v1.idx"))
    with pytest.raises(CorruptObjectError):
        packs.object_count(str(tmp_path / "v1.idx"))
    good = (pack_dir(repo) / f"{written.name}.idx").read_bytes()
    (tmp_path / "short.idx").write_bytes(good[:-30])
    with pytest.raises(CorruptObjectError):
        packs.index_ids(str(tmp_path / "short.idx"))
    flipped = bytearray(good)
    flipped[8 + 1024 + 3] ^= 0x01  # inside the first object name
    (tmp_path / "flipped.idx").write_bytes(bytes(flipped))
    with pytest.raises(CorruptObjectError, match="checksum"):
        packs.index_ids(str(tmp_path / "flipped.idx"))
    unsorted = bytearray(good)
    unsorted[8:12] = (2**31).to_bytes(4, "big")  # fan-out entry 0 above the later ones
    (tmp_path / "fanout.idx").write_bytes(bytes(unsorted))
    with pytest.raises(CorruptObjectError, match="monotonic"):
        packs.index_ids(str(tmp_path / "fanout.idx"))
    with pytest.raises(FileNotFoundError):
        packs.index_ids(str(tmp_path / "absent.idx"))


# -- remove_orphans ----------------------------------------------------------------------------------


def test_remove_orphans_removes_only_old_orphans(repo: Path) -> None:
    d = pack_dir(repo)
    complete = packs.write_pack(str(d), blobs("complete", 2))
    kept_orphan = "pack-" + "1" * 40
    old_orphan = "pack-" + "2" * 40
    new_orphan = "pack-" + "3" * 40
    files = {  # name: (made old, expected to be removed)
        "tmp_pack_" + "a1" * 8: (True, True), "tmp_idx_" + "b2" * 8: (True, True), f"{old_orphan}.pack": (True, True),
        "tmp_pack_" + "c3" * 8: (False, False), "tmp_idx_" + "d4" * 8: (False, False),
        f"{new_orphan}.pack": (False, False),
        # git's own temporary files (mkstemp's six characters): git prunes them, gitstate never does
        "tmp_pack_Ab3xYz": (True, False), "tmp_idx_Q9wE2r": (True, False), "tmp_pack_old1": (True, False),
        f"{kept_orphan}.pack": (True, False), f"{kept_orphan}.keep": (True, False),
        "tmp_rev_old": (True, False), "multi-pack-index": (True, False), "notes.txt": (True, False),
        "old-pack.pack": (True, False),
    }
    for name in files:
        (d / name).write_bytes(b"x")
    (d / "tmp_pack_dir").mkdir()
    old = time.time() - 7200
    for name in [n for n, (aged, _gone) in files.items() if aged] + [
            f"{complete.name}.pack", f"{complete.name}.idx", "tmp_pack_dir"]:
        os.utime(d / name, (old, old))

    assert packs.remove_orphans(str(d), 3600) == 3

    left = pack_files(repo)
    assert left == ({n for n, (_aged, gone) in files.items() if not gone}
                    | {f"{complete.name}.pack", f"{complete.name}.idx", "tmp_pack_dir"})
    verify_pack(repo, complete.name)
    assert packs.remove_orphans(str(d), 3600) == 0
    assert packs.remove_orphans(str(repo / "no-such-dir"), 0) == 0
    with pytest.raises(UsageError):
        packs.remove_orphans(str(d), -1)


# -- orphan packs (an .idx removed by git gc) ---------------------------------------------------------


def test_reindex_orphans_repairs_packs_git_can_index(repo: Path) -> None:
    d = pack_dir(repo)
    ours = packs.write_pack(str(d), blobs("lost index", 4))
    idx = d / f"{ours.name}.idx"
    expected = idx.read_bytes()
    mode = stat.S_IMODE(idx.stat().st_mode)
    idx.unlink()  # as `git gc` removes an .idx whose .pack its scan missed
    oid = ours.oids[0]
    assert run_git(repo, "cat-file", "-t", oid, check=False) == ""
    (d / ("pack-" + "4" * 40 + ".pack")).write_bytes(b"PACK damaged")  # left alone
    text = "".join(f"line {i}\n" for i in range(2000))
    similar = [run_git(repo, "hash-object", "-w", "--stdin", data=(text + tail).encode()).strip()
               for tail in ("a\n", "b\n")]
    delta = run_git(repo, "pack-objects", "-q", str(d / "pack"), data="\n".join(similar).encode() + b"\n").strip()
    delta_idx = (d / f"pack-{delta}.idx").read_bytes()
    assert "delta" in run_git(repo, "verify-pack", "-v", str(d / f"pack-{delta}.idx"))
    (d / f"pack-{delta}.idx").unlink()  # a merged pack (git pack-objects, with deltas) loses it too
    assert sorted(packs.reindex_orphans(str(d))) == sorted([ours.name, f"pack-{delta}"])
    assert idx.read_bytes() == expected and stat.S_IMODE(idx.stat().st_mode) == mode
    assert (d / f"pack-{delta}.idx").read_bytes() == delta_idx
    assert run_git(repo, "cat-file", "-t", oid).strip() == "blob"
    assert (d / ("pack-" + "4" * 40 + ".pack")).exists()
    assert packs.reindex_orphans(str(d)) == []
    assert not [n for n in pack_files(repo) if n.startswith("tmp_")]
    fsck_clean(repo)


# -- geometric_plan ----------------------------------------------------------------------------------


def is_progression(weights: list[int], factor: int) -> bool:
    ordered = sorted(weights)
    return all(ordered[i + 1] >= factor * ordered[i] for i in range(len(ordered) - 1))


def apply(packs_now: list[tuple[str, int]], plan: list[str], merged_name: str) -> list[tuple[str, int]]:
    chosen = set(plan)
    rest = [p for p in packs_now if p[0] not in chosen]
    return [*rest, (merged_name, sum(w for n, w in packs_now if n in chosen))] if plan else rest


def test_geometric_plan_examples() -> None:
    assert packs.geometric_plan([]) == []
    assert packs.geometric_plan([("a", 5)]) == []
    assert packs.geometric_plan([("a", 1), ("b", 2), ("c", 4)]) == []
    assert packs.geometric_plan([("a", 1), ("b", 1)]) == ["a", "b"]
    assert packs.geometric_plan([("big", 100), ("x", 1), ("y", 1)]) == ["x", "y"]
    assert packs.geometric_plan([("c", 4), ("a", 1), ("b", 1)]) == ["a", "b"]  # 4 >= 2 * (1 + 1) stays
    # rolling up 1+1 makes 2, and 3 < 2*2 joins it; then 16 >= 2*5 stays
    assert packs.geometric_plan([("p16", 16), ("p3", 3), ("p1", 1), ("q1", 1)]) == ["p1", "q1", "p3"]
    # ... while 8 < 2*5 would join too
    assert packs.geometric_plan([("p8", 8), ("p3", 3), ("p1", 1), ("q1", 1)]) == ["p1", "q1", "p3", "p8"]
    assert packs.geometric_plan([("a", 1), ("b", 1), ("c", 3)], factor=3) == ["a", "b", "c"]
    assert packs.geometric_plan([("a", 3), ("b", 9), ("c", 27)], factor=3) == []
    with pytest.raises(UsageError):
        packs.geometric_plan([("a", 1), ("a", 2)])
    with pytest.raises(UsageError):
        packs.geometric_plan([("a", 1)], factor=1)
    with pytest.raises(UsageError):
        packs.geometric_plan([("a", -1)])


@pytest.mark.parametrize("factor", [2, 3])
def test_geometric_plan_properties(factor: int) -> None:
    rng = random.Random(factor)
    for trial in range(3000):
        n = rng.randrange(0, 12)
        weights = [rng.choice([rng.randrange(0, 4), rng.randrange(1, 200), 2 ** rng.randrange(0, 12)])
                   for _ in range(n)]
        current = [(f"p{i}", w) for i, w in enumerate(weights)]
        plan = packs.geometric_plan(current, factor)
        assert len(plan) != 1 and len(set(plan)) == len(plan)
        assert set(plan) <= {name for name, _ in current}
        if not plan:
            assert is_progression(weights, factor), (weights, plan)
            continue
        # the rolled-up packs are the lightest ones
        chosen = [w for name, w in current if name in plan]
        others = [w for name, w in current if name not in plan]
        assert not others or max(chosen) <= min(others)
        after = apply(current, plan, f"m{trial}")
        assert is_progression([w for _, w in after], factor), (weights, plan)
        assert packs.geometric_plan(after, factor) == []  # one merge restores the progression


def test_geometric_plan_keeps_pack_count_small() -> None:
    current: list[tuple[str, int]] = []
    most = 0
    merges = 0
    for step in range(10_000):
        current.append((f"w{step}", 1))
        plan = packs.geometric_plan(current)
        if plan:
            merges += 1
            current = apply(current, plan, f"m{step}")
        most = max(most, len(current))
        assert sum(w for _, w in current) == step + 1
    print(f"\n10,000 one-object packs: at most {most} packs at once, {len(current)} at the end, "
          f"{merges} merges")
    assert most <= 50
    assert most <= 2 * 14 + 2  # log2(10,000) ~ 13.3: logarithmic, not merely below git's limit


# -- what an open libgit2 handle sees ------------------------------------------------------------


def _deleted_fds_under(directory: Path) -> int:
    prefix = os.path.realpath(directory)
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(prefix) and target.endswith("(deleted)"):
            count += 1
    return count


def test_libgit2_sees_packs_written_after_open(repo: Path) -> None:
    handle = pygit2.Repository(str(repo))
    objects = blobs("late", 3)
    assert objects[0][0] not in handle.odb
    packs.write_pack(str(pack_dir(repo)), objects)
    oid, kind, body = objects[1]
    found = handle.get(oid)
    assert found is not None and found.read_raw() == body
    assert objects[2][0] in handle.odb
    assert handle.odb.read(objects[0][0]) == (3, objects[0][2])


def test_libgit2_keeps_merged_away_packs_until_a_new_odb(repo: Path) -> None:
    d = pack_dir(repo)
    handle = pygit2.Repository(str(repo))
    names = []
    everything = []
    for i in range(6):
        objects = blobs(f"dead{i}", 2)
        everything += objects
        names.append(packs.write_pack(str(d), objects).name)
        for oid, _kind, _body in objects:
            handle.odb.read(oid)
    merged = packs.write_pack(str(d), everything)  # a merge: one pack of them all, the others removed
    packs.remove_packs(str(d), names)
    assert pack_files(repo) == {f"{merged.name}.pack", f"{merged.name}.idx"}
    # the old handle still holds every merged-away pack open (their disk space is not freed) ...
    assert _deleted_fds_under(d) == 6
    assert all(handle.odb.read(oid) == (kind, body) for oid, kind, body in everything)
    # ... and refreshing its backends does not drop them
    for backend in handle.odb.backends:
        backend.refresh()
    assert _deleted_fds_under(d) == 6
    assert not hasattr(handle.odb, "refresh")
    # a new object database does
    handle.set_odb(pygit2.Odb(str(repo / ".git" / "objects")))
    assert _deleted_fds_under(d) == 0
    assert all(handle.odb.read(oid) == (kind, body) for oid, kind, body in everything)


def test_bench_script_quick_run(tmp_path: Path) -> None:
    """scripts/bench_packs.py runs and prints its tables; its timings are never asserted."""
    script = Path(__file__).resolve().parents[2] / "scripts" / "bench_packs.py"
    out_json = tmp_path / "figures.json"
    proc = subprocess.run([sys.executable, str(script), "--rounds", "20", "--fsync-rounds", "3",
                           "--json", str(out_json), "--keep", str(tmp_path / "work")],
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    for label in ("loose files", "ObjectWriter.write", "write_pack + merges", "÷write_pack",
                  "deleted packs it holds open", "old ÷ fresh", "git fsck --strict of the merged repository: clean"):
        assert label in proc.stdout, label
    figures = json.loads(out_json.read_text())
    assert set(figures["writes"]) == {"loose files", "Odb.write", "ObjectWriter.write", "write_pack",
                                       "write_pack + git index-pack", "write_pack + merges"}
    assert figures["writes"]["write_pack"]["n"] == 20
    assert figures["handle"]["deleted_pack_fds_held"] > 0 and figures["handle"]["after_set_odb_fds"] == 0
    assert figures["fsck_clean"] is True


def test_a_transaction_pack_never_reuses_a_pack_of_the_same_bytes(repo: Path) -> None:
    """A ``git repack -a -d`` that listed a pack as unkept when it started deletes it even once a
    ``.keep`` appears, so a transaction's pack (``keep``) holding objects already written in the
    same order gets its own name: the first entry's zlib header differs, the objects are the same.
    Without ``keep`` (a merge) the existing pack is still reused."""
    d = str(pack_dir(repo))
    for objects in (blobs("again", 3), blobs("one", 1)):
        first = packs.write_pack(d, objects, keep=b"test\n")
        names = {first.name}
        for _ in range(3):
            again = packs.write_pack(d, objects, keep=b"test\n")
            assert not again.existed and again.name not in names
            assert sorted(again.oids) == sorted(oid for oid, _, _ in objects)
            names.add(again.name)
            verify_pack(repo, again.name)
        reused = packs.write_pack(d, objects)
        assert reused.existed and reused.name in names
        for oid, kind, _body in objects:
            assert run_git(repo, "cat-file", "-t", oid).strip() == TYPE_NAMES[kind]
    fsck_clean(repo)
