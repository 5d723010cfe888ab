"""Bounded housekeeping: after 1,000 checkpoints of a state that appends one ~400-byte item per
step, the store is small, git never sees too many loose objects, fsck is clean and nothing of the
user's moved (the issue's bar, checked on a real repository)."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import tempfile
import zlib
from collections.abc import Iterator
from pathlib import Path

import pygit2
import pytest

import gitstate
from gitstate.git import lockfile, packs
from gitstate.store import housekeeping
from tests.conftest import bounded, git, make_repo, packs_only, user_snapshot

WORDS = ("agent tool call result plan step file patch test build error retry model prompt token "
         "context branch checkpoint state message reply user system review merge diff").split()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A fresh repository whose every write is one pack: these tests are about packs."""
    return packs_only(make_repo(tmp_path / "repo"))


def _item(rng: random.Random, i: int) -> dict[str, object]:
    text = " ".join(rng.choice(WORDS) for _ in range(60))[:380]
    return {"role": "assistant" if i % 2 else "user", "content": text, "id": f"msg-{i}"}


def _loose_count(objects: Path) -> int:
    return sum(len(os.listdir(objects / d)) for d in os.listdir(objects) if len(d) == 2)


def _bytes_under(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def test_thousand_step_append_stays_small(repo: Path) -> None:
    before = user_snapshot(repo)
    store = gitstate.open_store(repo)
    run = store.create_run(workflow="bench", run_id="long-thread")
    rng = random.Random(7)
    messages: list[dict[str, object]] = []
    objects = repo / ".git" / "objects"
    max_loose = 0
    for i in range(1000):
        messages.append(_item(rng, i))
        run.checkpoint({"messages": messages, "step": i, "node": "agent"}, node="agent", trigger="step")
        if i % 50 == 0:
            max_loose = max(max_loose, _loose_count(objects))
    max_loose = max(max_loose, _loose_count(objects))
    assert max_loose < 6700, max_loose
    assert max_loose <= 2 * housekeeping.PACK_THRESHOLD + 100
    store.wait_for_housekeeping()
    assert len(list((objects / "pack").glob("*.pack"))) <= 50  # git's gc.autoPackLimit
    size = _bytes_under(objects)
    assert size <= 5 * 1024 * 1024, f"{size} bytes under .git/objects"
    head = run.head()
    assert head is not None and head.state["messages"] == messages and head.step == 999
    assert run.load(next(iter(run.history(limit=500))).id).state["messages"] == messages
    git(repo, "fsck", "--strict")
    assert user_snapshot(repo) == before
    assert git(repo, "count-objects", "-v").count("\n") > 0


def test_transactions_write_packs_and_merges_keep_them_few(store: gitstate.Store, repo: Path) -> None:
    objects = repo / ".git" / "objects"
    users = _loose_count(objects)  # the user's own commit
    run = store.create_run(run_id="p")
    for i in range(3 * housekeeping.TX_MERGE_AT):
        run.checkpoint({"i": i, "log": list(range(i * 3))})
    store.wait_for_housekeeping()
    assert _loose_count(objects) == users  # every transaction wrote one pack, no loose object
    packs = sorted((objects / "pack").glob("*.pack"))
    assert 1 <= len(packs) < 2 * housekeeping.TX_MERGE_AT, len(packs)  # merged geometrically
    assert all(p.with_suffix(".idx").exists() for p in packs)
    assert [cp.state["i"] for cp in run.history()] == list(range(3 * housekeeping.TX_MERGE_AT))[::-1]
    git(repo, "fsck", "--strict")
    agentos = Path(store.location.common_dir) / "agentos"
    listed = [n for f in (housekeeping.TX_PACKS, housekeeping.TX_PACKS + ".kept") if (agentos / f).exists()
              for n in (agentos / f).read_text().split()]
    assert set(listed) == {p.stem for p in packs}


def _pack_count(repo: Path) -> int:
    return len(list((repo / ".git" / "objects" / "pack").glob("*.idx")))


@pytest.fixture
def memory_repo(tmp_path: Path) -> Iterator[Path]:
    """A fresh repository in memory (``/dev/shm``) where there is one, else on disk: for tests
    that create thousands of files and whose subject is not the file system."""
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK)):
        yield packs_only(make_repo(tmp_path / "repo"))
        return
    with tempfile.TemporaryDirectory(dir=shm, prefix="gitstate-test-") as where:
        yield packs_only(make_repo(Path(where) / "repo"))


def test_pack_count_stays_bounded_over_ten_thousand_transactions(memory_repo: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """10,000 write transactions, each publishing one small pack through the store's write path,
    with the merge policy as the LangGraph saver runs it (merges in a background thread; a writer
    that gets TX_MERGE_AT packs ahead of a running merge waits for it): the number of packs never
    exceeds git's gc.autoPackLimit (50), checked every 100 writes and at the end.

    The count is the policy's (when to merge, which packs, how far writers may run ahead); to keep
    this test at seconds the packs are merged by packs.write_pack of their objects instead of by
    ``git pack-objects``, whose deltas the next test checks on a shorter history."""
    repo = memory_repo
    odb = pygit2.Odb(str(repo / ".git" / "objects"))

    def quick_merge(_common: str, pack_dir: str, chosen: list[str], *_args: object) -> str:
        oids = [oid for name in chosen for oid in packs.index_ids(os.path.join(pack_dir, name + ".idx"))]
        name = packs.write_pack(pack_dir, [(oid, *odb.read(oid)) for oid in oids]).name
        packs.remove_packs(pack_dir, [n for n in chosen if n != name])
        return name

    monkeypatch.setattr(housekeeping, "_merge_with_deltas", quick_merge)
    store = gitstate.open_store(repo, fsync=False)
    store.core.pack_in_background = True
    seen = []
    ids = []
    for i in range(10_000):
        ids.append(store.core.write(lambda tx, i=i: tx.blob(b"checkpoint %d\n" % i)))
        if i % 100 == 99:
            seen.append(_pack_count(repo))
    store.wait_for_housekeeping()
    seen.append(_pack_count(repo))
    assert max(seen) <= 50, seen
    assert seen[-1] <= 50, seen
    reader = store.core.reader
    for i in (0, 1234, 5000, 9999):
        assert reader.blob(ids[i]) == b"checkpoint %d\n" % i
    agentos = Path(store.location.common_dir) / "agentos"

    def listed() -> list[str]:
        return [n for f in (housekeeping.TX_PACKS, housekeeping.TX_PACKS + ".kept") if (agentos / f).exists()
                for n in (agentos / f).read_text().split()]

    on_disk = sorted(p.stem for p in (repo / ".git" / "objects" / "pack").glob("*.idx"))
    assert set(on_disk) <= set(listed()), sorted(set(on_disk) - set(listed()))  # no pack of ours unlisted
    # a writer whose list was taken aside by a merge right after its append lists its pack again
    # (it cannot tell whether the merger read it); if the merge took that pack, the name is left
    # over until the next merge drops names whose pack is gone
    housekeeping.merge_tx_packs(store.location.common_dir)
    on_disk = sorted(p.stem for p in (repo / ".git" / "objects" / "pack").glob("*.idx"))
    assert sorted(set(listed())) == on_disk, (sorted(set(listed()) - set(on_disk)), sorted(set(on_disk) - set(listed())),
                                            sorted(p.name for p in (repo / ".git" / "objects" / "pack").iterdir()),
                                            sorted(p.name for p in agentos.iterdir()))


def test_merges_store_list_chunk_versions_as_deltas(repo: Path) -> None:
    """Merged transaction packs hold deltas (git pack-objects, objects named by their paths): each
    version of a growing list's last chunk is stored as a small delta of another, so the merged
    packs are a fraction of the whole objects' size; everything reads back and fsck is clean."""
    store = gitstate.open_store(repo, fsync=False)
    store.core.pack_in_background = False
    run = store.create_run(run_id="d")
    rng = random.Random(3)
    messages: list[dict[str, object]] = []
    for i in range(4 * housekeeping.TX_MERGE_AT):
        messages = [*messages, _item(rng, i)]
        run.checkpoint({"messages": messages})
    pack_dir = repo / ".git" / "objects" / "pack"
    deltas, total = _deltas(pack_dir)
    assert deltas >= 2 * housekeeping.TX_MERGE_AT, (deltas, total)
    whole = sum(len(zlib_size) for zlib_size in _whole_sizes(repo, pack_dir))
    assert _bytes_under(pack_dir) < whole / 2, (_bytes_under(pack_dir), whole)
    head = run.head()
    assert head is not None and head.state["messages"] == messages
    assert [cp.step for cp in run.history()] == list(range(4 * housekeeping.TX_MERGE_AT))[::-1]
    git(repo, "fsck", "--strict")


def test_merges_lose_nothing_and_keep_deltas_over_many_merges(repo: Path) -> None:
    """Over many merges (earlier merged packs merged again with new ones), every object of every
    pack written is still in a pack git reads, the list chunks end up as deltas, and each merge
    leaves one pack for the packs it took."""
    store = gitstate.open_store(repo, fsync=False)
    store.core.pack_in_background = False
    run = store.create_run(run_id="big")
    rng = random.Random(5)
    messages: list[dict[str, object]] = []
    pack_dir = repo / ".git" / "objects" / "pack"
    every: set[str] = set()
    for i in range(6 * housekeeping.TX_MERGE_AT):
        messages = [*messages, _item(rng, i)]
        run.checkpoint({"messages": messages})
        every |= {oid for idx in pack_dir.glob("*.idx") for oid in packs.index_ids(str(idx))}
    left = {oid for idx in pack_dir.glob("*.idx") for oid in packs.index_ids(str(idx))}
    assert every <= left, len(every - left)
    assert len(list(pack_dir.glob("*.idx"))) < 2 * housekeeping.TX_MERGE_AT
    assert _deltas(pack_dir)[0] >= 2 * housekeeping.TX_MERGE_AT
    head = run.head()
    assert head is not None and head.state["messages"] == messages


def _whole_sizes(repo: Path, pack_dir: Path) -> list[bytes]:
    """Each object of the packs compressed on its own (what packs without deltas would hold)."""
    odb = pygit2.Repository(str(repo)).odb
    return [zlib.compress(odb.read(oid)[1], 1) for idx in pack_dir.glob("*.idx") for oid in packs.index_ids(str(idx))]


def _deltas(pack_dir: Path) -> tuple[int, int]:
    """How many entries of the packs are deltas, of how many (``git verify-pack -v``: a delta's
    line names its depth and base)."""
    lines = [line.split() for idx in pack_dir.glob("*.idx")
             for line in git(pack_dir, "verify-pack", "-v", str(idx)).splitlines()]
    entries = [parts for parts in lines if len(parts) >= 5 and len(parts[0]) == 40]
    return sum(1 for parts in entries if len(parts) == 7), len(entries)


def test_pack_refs_only_ours_and_updates_still_work(store: gitstate.Store, repo: Path) -> None:
    from gitstate.git import refs

    git(repo, "branch", "user-branch")
    git(repo, "tag", "-a", "v1", "-m", "annotated")
    git(repo, "pack-refs", "--all")
    git(repo, "branch", "loose-user-branch")  # a loose user ref that must stay loose
    runs = [store.create_run(run_id=f"r{i}") for i in range(40)]
    cps = [r.checkpoint({"i": i}) for i, r in enumerate(runs)]
    before = git(repo, "for-each-ref")
    common = Path(store.location.common_dir)
    assert refs.count_loose_refs(str(common)) == 80
    assert refs.pack_refs(str(common)) == 80
    assert refs.count_loose_refs(str(common)) == 0
    # no empty directory is left behind (each one would cost every ref listing an opendir)
    assert not (common / "refs" / "agentos").exists() or list((common / "refs" / "agentos").iterdir()) == []
    assert (common / "refs" / "heads" / "loose-user-branch").exists()
    assert git(repo, "for-each-ref") == before
    assert git(repo, "rev-parse", "v1^{commit}").strip() == git(repo, "rev-parse", "HEAD").strip()
    fresh = gitstate.open_store(repo)
    assert len(fresh.list_runs()) == 40
    run = fresh.get_run("r3")
    nxt = run.checkpoint({"i": "after"}, expect=cps[3].id)  # CAS on a packed ref
    assert run.undo() is not None and run.head().id == cps[3].id  # type: ignore[union-attr]
    assert nxt.parent_ids == (cps[3].id,)
    fresh.delete_run("r5")
    assert "r5" not in {s.id for s in gitstate.open_store(repo).list_runs()}
    assert "refs/agentos/main/runs/r5/" not in git(repo, "for-each-ref")
    git(repo, "fsck", "--strict")
    assert git(repo, "reflog", "show", "--format=%gs", "refs/agentos/main/runs/r3/heads/main").startswith("gitstate: undo")


_DELETER = r"""
import sys, gitstate
store = gitstate.open_store(sys.argv[1], lock_timeout=30)
for name in sys.argv[3:]:
    store.core.move_ref(name, store.core.read_ref(name), None, "delete")
"""

_UPDATER = r"""
import sys, gitstate
store = gitstate.open_store(sys.argv[1], lock_timeout=30)
a, b = sys.argv[3], sys.argv[4]
for round_ in range(int(sys.argv[5])):
    for i in range(40):
        name = f"refs/agentos/main/runs/u{i}/heads/main"
        cur = store.core.read_ref(name)
        new = None if (round_ + i) % 4 == 0 and cur is not None else (b if cur == a else a)
        if cur is None and new is None:
            new = a
        store.core.move_ref(name, cur, new, "stress")
print("ok")
"""


def _py(*args: str) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    return subprocess.Popen([sys.executable, "-c", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)


def test_concurrent_deletes_of_packed_refs_lose_nothing(store: gitstate.Store, repo: Path) -> None:

    head = git(repo, "rev-parse", "HEAD").strip()
    common = store.location.common_dir
    names = [f"refs/agentos/main/runs/d{i}/heads/main" for i in range(200)]
    for name in names:
        store.core.move_ref(name, None, head, "create")
    git(repo, "tag", "v1")
    git(repo, "pack-refs", "--all")  # as the user's git gc would
    procs = [_py(_DELETER, str(repo), common, *names[k::2]) for k in range(2)]
    for p in procs:
        _out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    assert git(repo, "for-each-ref", "refs/agentos") == ""  # none came back
    assert git(repo, "rev-parse", "main", "v1").split() == [head, head]  # the user's refs intact
    git(repo, "fsck", "--strict")


def test_pack_refs_races_with_updates_and_deletes(store: gitstate.Store, repo: Path) -> None:
    from gitstate.git import refs

    a = git(repo, "rev-parse", "HEAD").strip()
    run = store.create_run(run_id="other")
    b = run.checkpoint({"x": 1}).id
    git(repo, "tag", "v1")
    git(repo, "pack-refs", "--all")
    common = store.location.common_dir
    writer = _py(_UPDATER, str(repo), common, a, b, "12")
    while writer.poll() is None:
        refs.pack_refs(common)
    out, err = writer.communicate()
    assert writer.returncode == 0 and "ok" in out, err
    # replay the writer's deterministic moves to know where every ref must be
    expected: dict[str, str | None] = {}
    for round_ in range(12):
        for i in range(40):
            name = f"refs/agentos/main/runs/u{i}/heads/main"
            cur = expected.get(name)
            new = None if (round_ + i) % 4 == 0 and cur is not None else (b if cur == a else a)
            if cur is None and new is None:
                new = a
            expected[name] = new
    for name, value in expected.items():
        assert refs.read_ref(store.repo, name) == value, name
    assert git(repo, "rev-parse", "main", "v1").split() == [a, a]
    assert not (Path(common) / "packed-refs.lock").exists()
    git(repo, "fsck", "--strict")


# --------------------------------------------------------------------------------------------
# the housekeeping lock and the pack it records


def _checkpoints(store: gitstate.Store, n: int = 10) -> None:
    """Checkpoints whose workspace snapshots leave loose objects for housekeeping to pack (a
    partial snapshot goes through libgit2's add_all, which writes them loose; transactions and
    whole-worktree snapshots write packs)."""
    run = store.create_run(run_id="hk")
    work = Path(store.path)
    for i in range(n):
        (work / f"file-{i}.txt").write_text(f"content {i}\n" * (i + 1))
        run.checkpoint({"i": i, "log": list(range(i * 3))}, files=[f"file-{i}.txt"])


def _lock_path(store: gitstate.Store) -> Path:
    return Path(store.location.common_dir) / "agentos" / "housekeeping.lock"


def test_killed_packers_lock_does_not_block_pack(store: gitstate.Store, repo: Path) -> None:
    """The housekeeping lock is a flock: a packer killed while holding it leaves nothing that
    blocks the next one (and the lock file stays, unlocked)."""
    _checkpoints(store)
    lock = _lock_path(store)
    holder = _py("import sys, time\nfrom gitstate.git import lockfile\n"
                 "lock = lockfile.acquire(sys.argv[1])\nprint(lock is not None, flush=True)\n"
                 "time.sleep(60)\n", str(lock))
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "True"
        assert lockfile.holder(str(lock)) == holder.pid
        assert store.pack() == 0  # a live packer's lock is respected
        assert lockfile.holder(str(lock)) == holder.pid
    finally:
        holder.kill()
        holder.communicate(timeout=30)
    assert store.pack() > 0  # its holder is gone: the kernel released the lock
    assert store.pack() == 0
    git(repo, "fsck", "--strict")


def test_pack_records_its_own_pack_not_a_concurrent_one(store: gitstate.Store, repo: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    _checkpoints(store)
    common = Path(store.location.common_dir)
    journaled = set((common / "agentos" / "loose.journal").read_text().split())
    pack_dir = common / "objects" / "pack"
    foreign: list[str] = []

    def concurrent_gc_pack(text: str) -> None:
        blob = subprocess.run(["git", "hash-object", "-w", "--stdin"], cwd=repo, input=text, capture_output=True,
                              text=True, check=True).stdout.strip()
        out = subprocess.run(["git", "pack-objects", str(pack_dir / "pack")], cwd=repo, input=blob + "\n",
                             capture_output=True, text=True, check=True).stdout.strip()
        foreign.append(f"pack-{out}")

    real = housekeeping.run_git

    def write_among_other_packs(*args: object, **kwargs: object) -> subprocess.CompletedProcess[str]:
        concurrent_gc_pack("before\n")
        done = real(*args, **kwargs)  # type: ignore[arg-type]
        concurrent_gc_pack("after\n")  # a pack that appears while ours is being put in place
        return done

    monkeypatch.setattr(housekeeping, "run_git", write_among_other_packs)
    assert store.pack() == len(journaled)
    names = (common / "agentos" / "packs").read_text().split()
    assert len(names) == 1 and names[0] not in foreign, (names, foreign)
    assert set(packs.index_ids(str(pack_dir / f"{names[0]}.idx"))) == journaled
    assert all((pack_dir / f"{n}.idx").exists() for n in foreign)  # theirs untouched
    assert not [p for p in (common / "objects").iterdir() if p.name.startswith(housekeeping.PACK_TMP_PREFIX)]
    git(repo, "fsck", "--strict")


def test_odd_state_keys_do_not_stop_merges(repo: Path) -> None:
    """State keys holding a newline, a tab or spaces (paths in the checkpoint's trees) merge like any
    other: git is given object ids only, never a path on its line-based input."""
    store = gitstate.open_store(repo, fsync=False)
    store.core.pack_in_background = False
    run = store.create_run(run_id="odd")
    for i in range(housekeeping.TX_MERGE_AT):
        run.checkpoint({"new\nline": i, "tab\tand space": [i] * 3, "i": i})
    pack_dir = repo / ".git" / "objects" / "pack"
    assert len(list(pack_dir.glob("*.idx"))) < housekeeping.TX_MERGE_AT  # merged
    assert [cp.state["new\nline"] for cp in run.history()] == list(range(housekeeping.TX_MERGE_AT))[::-1]
    git(repo, "fsck", "--strict")


def test_a_broken_pack_beside_ours_does_not_stop_merges(repo: Path) -> None:
    """An index whose pack is gone (another program's broken pack) is none of the merge's
    business: ours are merged all the same, and the broken one is left as it is."""
    store = gitstate.open_store(repo, fsync=False)
    store.core.pack_in_background = False
    run = store.create_run(run_id="beside")
    pack_dir = repo / ".git" / "objects" / "pack"
    run.checkpoint({"i": -1})
    first = next(pack_dir.glob("*.idx"))
    broken = pack_dir / ("pack-" + "ab" * 20 + ".idx")
    broken.write_bytes(first.read_bytes())  # an index with no pack beside it
    for i in range(housekeeping.TX_MERGE_AT):
        run.checkpoint({"i": i})
    ours = [p for p in pack_dir.glob("*.idx") if p != broken]
    assert len(ours) < housekeeping.TX_MERGE_AT, len(ours)  # merged
    assert broken.exists()  # not ours: left as it is
    assert [cp.state["i"] for cp in run.history()] == [*range(housekeeping.TX_MERGE_AT)][::-1] + [-1]
    broken.unlink()
    git(repo, "fsck", "--strict")


def test_an_object_another_pack_holds_too_is_merged_all_the_same(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every object of the merged packs is copied into the new pack, also those another pack holds:
    when that other pack is then deleted (a concurrent ``git repack --geometric`` that chose it and
    left those objects out of its own pack, because ours held them), nothing is lost."""
    monkeypatch.setattr(housekeeping, "TX_MERGE_AT", 10**6)  # this test runs the merge itself
    store = gitstate.open_store(repo, fsync=False)
    run = store.create_run(run_id="twice")
    pack_dir = repo / ".git" / "objects" / "pack"
    for i in range(12):
        run.checkpoint({"i": i, "items": [f"item {j}" for j in range(i + 1)]})
    ours = sorted(p.stem for p in pack_dir.glob("*.idx"))
    every = sorted({oid for name in ours for oid in packs.index_ids(str(pack_dir / f"{name}.idx"))})
    # another program's pack holding a copy of every object of ours
    theirs = subprocess.run(["git", "pack-objects", "-q", str(pack_dir / "pack")], cwd=repo, check=True,
                            input="".join(f"{oid}\n" for oid in every), capture_output=True, text=True).stdout.strip()
    assert housekeeping.merge_tx_packs(store.location.common_dir) is not None
    assert len(set(ours) - {p.stem for p in pack_dir.glob("*.idx")}) >= 2, "nothing merged"
    for ext in (".idx", ".pack", ".rev"):
        (pack_dir / f"pack-{theirs}{ext}").unlink(missing_ok=True)
    left = {oid for p in pack_dir.glob("*.idx") for oid in packs.index_ids(str(p))}
    assert set(every) <= left, len(set(every) - left)
    assert [cp.state["i"] for cp in run.history()] == list(range(12))[::-1]
    git(repo, "fsck", "--strict")


def test_a_pack_size_limit_does_not_stop_merges(repo: Path) -> None:
    """``pack.packSizeLimit`` would make git split the merged pack (and print several names): the
    merge runs without it, so it still leaves one pack and the count stays bounded."""
    git(repo, "config", "pack.packSizeLimit", "1m")
    store = gitstate.open_store(repo, fsync=False)
    store.core.pack_in_background = False
    run = store.create_run(run_id="big")
    rng = random.Random(11)
    for i in range(housekeeping.TX_MERGE_AT):
        run.checkpoint({"i": i, "blob": rng.randbytes(100_000).hex()})  # 3.2 MB in all
    pack_dir = repo / ".git" / "objects" / "pack"
    assert len(list(pack_dir.glob("*.idx"))) < housekeeping.TX_MERGE_AT // 2, sorted(pack_dir.iterdir())
    assert [cp.state["i"] for cp in run.history()] == list(range(housekeeping.TX_MERGE_AT))[::-1]
    git(repo, "fsck", "--strict")


def test_packs_of_loose_objects_are_merged_into_one(store: gitstate.Store, repo: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """When the packs of loose objects reach MERGE_THRESHOLD they are merged into one pack holding
    every object of them, listed alone, the merged-away packs removed."""
    monkeypatch.setattr(housekeeping, "MERGE_THRESHOLD", 3)
    common = Path(store.location.common_dir)
    pack_dir = common / "objects" / "pack"
    written: list[str] = []
    packed: set[str] = set()
    for round_ in range(3):
        run = store.create_run(run_id=f"hk{round_}")
        (Path(store.path) / f"loose-{round_}.txt").write_text(f"round {round_}\n" * 50)
        run.checkpoint({"round": round_}, files=[f"loose-{round_}.txt"])
        packed |= set((common / "agentos" / "loose.journal").read_text().split())
        assert store.pack() > 0
        written += (common / "agentos" / "packs").read_text().split()
    names = (common / "agentos" / "packs").read_text().split()
    assert len(names) == 1 and names[0] not in written[:2], (names, written)
    assert set(packs.index_ids(str(pack_dir / f"{names[0]}.idx"))) >= packed
    assert not [n for n in dict.fromkeys(written) if n != names[0] and (pack_dir / f"{n}.idx").exists()]
    git(repo, "fsck", "--strict")


def test_fifos_in_place_of_the_packers_files_never_block_it(store: gitstate.Store, repo: Path) -> None:
    """A FIFO where housekeeping reads a file (its pack list, its lock, a journal taken aside, git's
    gc.pid) would make the read wait for ever for a writer: each is taken as a missing or stale
    file, and the pack is made."""
    _checkpoints(store)
    common = Path(store.location.common_dir)
    agentos = common / "agentos"
    journaled = set((agentos / "loose.journal").read_text().split())
    for fifo in (agentos / "packs", _lock_path(store), agentos / "loose.journal.99999.packing", common / "gc.pid"):
        os.mkfifo(fifo)
    assert bounded(store.pack, 60) == len(journaled)
    names = (agentos / "packs").read_text().split()  # made anew
    assert len(names) == 1
    assert set(packs.index_ids(str(common / "objects" / "pack" / f"{names[0]}.idx"))) == journaled
    assert _lock_path(store).is_file() and not (agentos / "loose.journal.99999.packing").exists()
    git(repo, "fsck", "--strict")


def test_fifos_in_place_of_the_pack_lists_never_block_writes_or_merges(repo: Path) -> None:
    """The lists writers append to (``tx-packs``, ``loose.journal``) and the one merges read
    (``tx-packs.kept``), and a ``.keep`` the merge's sweep reads, as FIFOs: writes and merges go on,
    the appended lists are made anew."""
    store = gitstate.open_store(repo, fsync=False)
    store.core.pack_in_background = False
    agentos = Path(store.location.common_dir) / "agentos"
    run = store.create_run(run_id="fifo")
    for name in (housekeeping.TX_PACKS, housekeeping.TX_PACKS + ".kept", "loose.journal"):
        (agentos / name).unlink(missing_ok=True)
        os.mkfifo(agentos / name)
    pack_dir = repo / ".git" / "objects" / "pack"
    os.mkfifo(pack_dir / f"pack-{'0' * 40}.keep")

    def write() -> None:
        for i in range(housekeeping.TX_MERGE_AT):
            run.checkpoint({"i": i})
        (repo / "new.txt").write_text("new\n")
        run.checkpoint({"i": "files"}, files=["new.txt"])  # a partial snapshot: loose objects, journaled

    bounded(write, 120)
    assert (agentos / housekeeping.TX_PACKS).is_file() and (agentos / "loose.journal").is_file()
    assert len((agentos / "loose.journal").read_text().split()) >= 1
    assert (agentos / (housekeeping.TX_PACKS + ".kept")).is_file()  # a merge ran and replaced it
    assert len(list(pack_dir.glob("*.idx"))) < housekeeping.TX_MERGE_AT  # merged
    assert [cp.state["i"] for cp in run.history()] == ["files", *range(housekeeping.TX_MERGE_AT - 1, -1, -1)]
    git(repo, "fsck", "--strict")


def test_a_multi_pack_index_naming_merged_packs_is_removed_as_git_repack_does(repo: Path) -> None:
    """A multi-pack-index (``git multi-pack-index write``, ``git maintenance``) naming transaction
    packs that a merge deletes is removed first, as ``git repack -d`` removes it: git would find it
    naming packs that are gone (``git fsck`` fails on that); everything reads back."""
    store = gitstate.open_store(repo, fsync=False)
    store.core.pack_in_background = False
    run = store.create_run(run_id="midx")
    pack_dir = repo / ".git" / "objects" / "pack"
    run.checkpoint({"i": -1})
    git(repo, "multi-pack-index", "write")
    names = packs.midx_pack_names(str(pack_dir))
    assert names == {p.name for p in pack_dir.glob("*.idx")}, names  # the chunk table is read right
    for i in range(housekeeping.TX_MERGE_AT):
        run.checkpoint({"i": i})
    assert not (pack_dir / packs.MIDX).exists()
    assert [cp.state["i"] for cp in run.history()] == [*range(housekeeping.TX_MERGE_AT)][::-1] + [-1]
    git(repo, "fsck", "--strict")
    git(repo, "multi-pack-index", "verify")  # none: nothing to complain about


def test_a_multi_pack_index_of_other_packs_is_left_alone(repo: Path, tmp_path: Path) -> None:
    """A multi-pack-index that names none of the packs a merge deletes stays; an unreadable one is
    taken as naming anything (removed before packs go, as git would not trust it either)."""
    pack_dir = repo / ".git" / "objects" / "pack"
    assert packs.midx_pack_names(str(pack_dir)) == set()
    (pack_dir / packs.MIDX).write_bytes(b"MIDX\x01\x01\x01\x00\x00\x00\x00\x01" + b"PNAM" + (40).to_bytes(8, "big")
                                        + b"\x00" * 4 + (4000).to_bytes(8, "big") + b"pack-" + b"ab" * 20)
    assert packs.midx_pack_names(str(pack_dir)) is None  # its PNAM chunk ends beyond the file
    (pack_dir / packs.MIDX).write_bytes(b"not a midx")
    assert packs.midx_pack_names(str(pack_dir)) is None
    (pack_dir / packs.MIDX).unlink()
    store = gitstate.open_store(repo, fsync=False)
    store.core.pack_in_background = False
    run = store.create_run(run_id="other")
    run.checkpoint({"i": -1})
    git(repo, "multi-pack-index", "write")
    listed = packs.midx_pack_names(str(pack_dir))
    assert listed
    packs.remove_packs(str(pack_dir), ["pack-" + "cd" * 20])  # a pack it does not name
    assert (pack_dir / packs.MIDX).exists()
    # one a concurrent `git multi-pack-index write` made naming a pack that went meanwhile
    gone = pack_dir / sorted(listed)[0]
    gone.with_suffix(".idx").rename(tmp_path / "aside.idx")
    packs.remove_packs(str(pack_dir), ["pack-" + "cd" * 20])
    assert not (pack_dir / packs.MIDX).exists()
    (tmp_path / "aside.idx").rename(gone.with_suffix(".idx"))
    git(repo, "fsck", "--strict")


def test_pack_index_version_1_configured_does_not_stop_merges(repo: Path) -> None:
    """``pack.indexVersion=1`` would make git write merged packs whose index gitstate does not read
    (their size unknown, they would drop off its lists): merges write version 2."""
    git(repo, "config", "pack.indexVersion", "1")
    store = gitstate.open_store(repo, fsync=False)
    store.core.pack_in_background = False
    run = store.create_run(run_id="v1")
    for i in range(3 * housekeeping.TX_MERGE_AT):
        run.checkpoint({"i": i})
    pack_dir = repo / ".git" / "objects" / "pack"
    assert all(p.read_bytes()[:4] == b"\xfftOc" for p in pack_dir.glob("*.idx"))  # version 2 (v1 has no magic)
    assert sum(packs.object_count(str(p)) for p in pack_dir.glob("*.idx")) > 0
    assert len(list(pack_dir.glob("*.idx"))) < housekeeping.TX_MERGE_AT, len(list(pack_dir.glob("*.idx")))
    assert [cp.state["i"] for cp in run.history()] == list(range(3 * housekeeping.TX_MERGE_AT))[::-1]
    git(repo, "fsck", "--strict")


_WRITER = r"""
import os, sys, gitstate
store = gitstate.open_store(sys.argv[1], fsync=False, lock_timeout=60)
run = store.create_run(run_id=sys.argv[2])
pack_dir = os.path.join(sys.argv[1], ".git", "objects", "pack")
most = 0
for i in range(int(sys.argv[3])):
    run.checkpoint({"i": i, "k": list(range(i % 40))})
    if i % 5 == 0:
        most = max(most, sum(1 for n in os.listdir(pack_dir) if n.endswith(".idx")))
store.wait_for_housekeeping()
print(most)
"""


def test_pack_count_stays_bounded_with_several_writer_processes(memory_repo: Path) -> None:
    """Three processes writing at once: a merge that finds another process merging waits for the
    housekeeping lock (rather than giving up), and each writer waits for its own merge once it
    has written TX_MERGE_AT more packs, so the packs stay under git's gc.autoPackLimit (50)."""
    repo = memory_repo
    procs = [_py(_WRITER, str(repo), f"w{k}", "700") for k in range(3)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-500:] for o in outs]
    most = max(int(out.split()[-1]) for out, _err in outs)
    assert most <= 50, most
    store = gitstate.open_store(repo)
    for k in range(3):
        assert [cp.state["i"] for cp in store.get_run(f"w{k}").history()] == list(range(700))[::-1]
    git(repo, "fsck", "--strict")


def test_a_housekeeping_lock_held_long_pauses_merges_instead_of_every_write(
        repo: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    """While another process holds the housekeeping lock longer than a merge waits for it, a merge
    that gave up pauses merges for a while: the writes after it start no merge (each used to start
    one, which the next write then waited for)."""
    import gitstate.store.base as base

    monkeypatch.setattr(base, "MERGE_WAIT", 0.05)
    store = gitstate.open_store(repo, fsync=False)
    store.core.pack_in_background = False
    run = store.create_run(run_id="held")
    lock = Path(store.location.common_dir) / "agentos" / "housekeeping.lock"
    holder = _py("import sys, time\nfrom gitstate.git import lockfile\n"
                 "lock = lockfile.acquire(sys.argv[1])\nprint(lock is not None, flush=True)\n"
                 "time.sleep(120)\n", str(lock))
    assert holder.stdout is not None and holder.stdout.readline().strip() == "True"
    request.addfinalizer(lambda: (holder.kill(), holder.communicate(timeout=30)))
    tries: list[float] = []
    real = housekeeping.merge_tx_packs
    monkeypatch.setattr(housekeeping, "merge_tx_packs",
                        lambda common, wait=0.0: tries.append(wait) or real(common, wait=wait))
    for i in range(3 * housekeeping.TX_MERGE_AT):
        run.checkpoint({"i": i})
    assert len(tries) == 1, len(tries)  # then paused for MERGE_RETRY seconds
    assert [cp.state["i"] for cp in run.history()][:3] == [47, 46, 45]
