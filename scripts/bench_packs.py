#!/usr/bin/env python3
"""What one pack per write transaction costs against one loose file per object, and what an open
libgit2 handle pays for the packs merged away under it.

Part 1, writes. Each round makes ``--objects`` new objects (blobs of about ``--size`` bytes, different
every round) and writes them in each variant, in a shuffled order per round (so machine noise hits
all alike), each variant into its own fresh repository. Every variant starts from (type, body) and
includes computing the ids:

- ``loose files``: ``ObjectWriter._write_loose`` per object (zlib level 1, temp file, rename): only
  the file writes of today's path. The loose repositories have their 256 fan-out directories made
  beforehand, as a repository in use has.
- ``Odb.write``: libgit2's loose write per object (``repo.odb.write``), what ``loose files``
  replaces.
- ``ObjectWriter.write``: today's whole path per object (existence checks with libgit2, then the
  loose write).
- ``write_pack``: ``gitstate.git.packs.write_pack`` of all of them (one ``.pack`` + one ``.idx``).
- ``write_pack + git index-pack``: the same, then ``git index-pack`` of that pack into a scratch
  file: what letting git write the ``.idx`` would add to every transaction.
- ``write_pack + merges``: the same, listed as a store lists its packs, with the store's merge
  (``housekeeping.merge_tx_packs``, ``git pack-objects``) every ``TX_MERGE_AT`` packs: the
  amortized cost the pack count is bounded with (the store runs merges in a background thread).

Medians, 10th and 90th percentiles per variant; ratios are of medians. The same again with fsync
(files, and for packs the directory) over fewer rounds.

Part 2, an open handle. The ``write_pack + merges`` repository had one ``pygit2.Repository`` open
throughout, reading each new object once after it was written, as a long-lived store would. Its
lookups (an absent id, ``id in odb`` of present ids, ``odb.read``) are timed against a freshly
opened handle, then again after ``repo.set_odb(pygit2.Odb(objects_dir))``; the file descriptors it
holds to deleted packs are counted (Linux ``/proc``).

Usage: ``python scripts/bench_packs.py [--rounds 400] [--fsync-rounds 60] [--quick] [--json FILE]``.
Nothing is asserted about timings (they depend on the machine).
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pygit2
from pygit2.enums import ObjectType

from gitstate.git import packs
from gitstate.git.objects import ObjectWriter
from gitstate.store import housekeeping

Objects = list[tuple[int, bytes]]


def make_objects(rng: random.Random, round_no: int, count: int, size: int) -> Objects:
    words = [b"state", b"message", b"tool", b"call", b"result", b"agent", b"step", b"value", b"{", b"}"]
    out = []
    for i in range(count):
        n = max(1, int(size * rng.uniform(0.6, 1.4)))
        body = b"%d/%d " % (round_no, i) + b" ".join(rng.choice(words) for _ in range(n // 5))
        out.append((3, body[:n]))
    return out


def ids(objects: Objects) -> list[tuple[str, int, bytes]]:
    names = {1: b"commit", 2: b"tree", 3: b"blob", 4: b"tag"}
    return [(hashlib.sha1(b"%s %d\x00" % (names[kind], len(body)) + body, usedforsecurity=False).hexdigest(),
             kind, body) for kind, body in objects]


def init_repo(path: Path, fanout: bool = False) -> pygit2.Repository:
    """A new repository; with ``fanout`` its 256 loose-object directories exist already, as in any
    repository in use (a fresh one would charge a mkdir to most loose writes)."""
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    if fanout:
        for i in range(256):
            os.makedirs(path / ".git" / "objects" / f"{i:02x}", exist_ok=True)
    return pygit2.Repository(str(path))


class Variants:
    """The write variants, each in its own repository."""

    def __init__(self, root: Path, fsync: bool) -> None:
        self.fsync = fsync
        self.loose_repo = init_repo(root / "loose", fanout=True)
        self.loose_writer = ObjectWriter(self.loose_repo, fsync=fsync)
        self.odb_repo = init_repo(root / "odb", fanout=True)
        self.writer_repo = init_repo(root / "writer", fanout=True)
        self.writer = ObjectWriter(self.writer_repo, fsync=fsync)
        self.pack_dir = str(root / "pack" / ".git" / "objects" / "pack")
        init_repo(root / "pack")
        self.merge_root = root / "merge"
        self.merge_handle = init_repo(self.merge_root)
        self.merge_dir = str(self.merge_root / ".git" / "objects" / "pack")
        self.index_dir = str(root / "index-pack" / ".git" / "objects" / "pack")
        init_repo(root / "index-pack")
        self.merges = 0
        self.most_packs = 0
        self.to_read: list[str] = []

    def loose(self, objects: Objects) -> None:
        objects_dir = self.loose_writer.objects
        names = {3: b"blob"}
        for kind, body in objects:
            raw = b"%s %d\x00" % (names[kind], len(body)) + body
            oid = hashlib.sha1(raw, usedforsecurity=False).hexdigest()
            self.loose_writer._write_loose(os.path.join(objects_dir, oid[:2], oid[2:]), raw)

    def odb_write(self, objects: Objects) -> None:
        for kind, body in objects:
            self.odb_repo.odb.write(kind, body)

    def object_writer(self, objects: Objects) -> None:
        for kind, body in objects:
            self.writer.write(ObjectType(kind), body)

    def pack(self, objects: Objects) -> None:
        packs.write_pack(self.pack_dir, ids(objects), fsync=self.fsync)

    def pack_and_index(self, objects: Objects) -> None:
        written = packs.write_pack(self.index_dir, ids(objects), fsync=self.fsync)
        scratch = os.path.join(self.index_dir, "scratch.idx")
        subprocess.run(["git", "index-pack", "-o", scratch, os.path.join(self.index_dir, written.name + ".pack")],
                       check=True, capture_output=True)
        os.unlink(scratch)

    def pack_and_merge(self, objects: Objects) -> None:
        with_ids = ids(objects)
        written = packs.write_pack(self.merge_dir, with_ids, fsync=self.fsync)
        common = str(self.merge_root / ".git")
        if housekeeping.record_tx_pack(common, written.name) >= housekeeping.TX_MERGE_AT:
            self.merges += housekeeping.merge_tx_packs(common) is not None
        self.most_packs = max(self.most_packs, len(self.live()))
        self.to_read.extend(oid for oid, _, _ in with_ids)

    def live(self) -> list[str]:
        """The packs of the merged repository."""
        return [n[: -len(".idx")] for n in os.listdir(self.merge_dir) if n.endswith(".idx")]

    def read_back(self) -> None:
        """Untimed: the long-lived handle reads what was just written, as a store would."""
        for oid in self.to_read:
            self.merge_handle.odb.read(oid)
        self.to_read.clear()


def run_writes(root: Path, rounds: int, count: int, size: int, fsync: bool, seed: int) -> tuple[
        dict[str, list[float]], Variants]:
    variants = Variants(root, fsync)
    table: dict[str, Callable[[Objects], None]] = {
        "loose files": variants.loose,
        "Odb.write": variants.odb_write,
        "ObjectWriter.write": variants.object_writer,
        "write_pack": variants.pack,
        "write_pack + git index-pack": variants.pack_and_index,
        "write_pack + merges": variants.pack_and_merge,
    }
    times: dict[str, list[float]] = {name: [] for name in table}
    rng = random.Random(seed)
    order = list(table)
    for round_no in range(rounds):
        objects = make_objects(rng, round_no, count, size)
        rng.shuffle(order)
        for name in order:
            gc.disable()
            start = time.perf_counter_ns()
            table[name](objects)
            elapsed = time.perf_counter_ns() - start
            gc.enable()
            times[name].append(elapsed / 1e3)
        variants.read_back()
    return times, variants


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summarize(times: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    return {name: {"median_us": statistics.median(v), "p10_us": pct(v, 0.10), "p90_us": pct(v, 0.90),
                   "n": len(v)} for name, v in times.items()}


def print_writes(title: str, summary: dict[str, dict[str, float]], count: int) -> None:
    base = summary["write_pack"]["median_us"]
    print(f"\n{title}")
    print(f"  {'variant':<30}{'median µs':>11}{'p10':>9}{'p90':>9}{'per object':>12}{'÷write_pack':>13}")
    for name, row in summary.items():
        print(f"  {name:<30}{row['median_us']:>11.0f}{row['p10_us']:>9.0f}{row['p90_us']:>9.0f}"
              f"{row['median_us'] / count:>12.1f}{row['median_us'] / base:>13.2f}")


def deleted_fds_under(directory: str) -> int | None:
    if not os.path.isdir("/proc/self/fd"):
        return None
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


def time_lookups(handle: pygit2.Repository, present: list[str], absent: list[str]) -> dict[str, float]:
    def per_call(fn: Callable[[], None], n: int) -> float:
        samples = []
        for _ in range(5):
            start = time.perf_counter_ns()
            fn()
            samples.append((time.perf_counter_ns() - start) / 1e3 / n)
        return statistics.median(samples)

    odb = handle.odb

    def missing() -> None:
        for oid in absent:
            _ = oid in odb

    def exists() -> None:
        for oid in present:
            _ = oid in odb

    def read() -> None:
        for oid in present:
            odb.read(oid)

    return {"absent id": per_call(missing, len(absent)), "id in odb": per_call(exists, len(present)),
            "odb.read": per_call(read, len(present))}


def run_handle(variants: Variants) -> dict[str, object]:
    root = variants.merge_root
    present_all = [oid for name in variants.live()
                   for oid in packs.index_ids(os.path.join(variants.merge_dir, name + ".idx"))]
    present = random.Random(1).sample(present_all, min(500, len(present_all)))
    absent = [hashlib.sha1(b"absent %d" % i).hexdigest() for i in range(200)]
    old = variants.merge_handle
    dead_fds = deleted_fds_under(variants.merge_dir)
    fresh = pygit2.Repository(str(root))
    result: dict[str, object] = {"merges": variants.merges,
                                 "live_packs": len(variants.live()), "deleted_pack_fds_held": dead_fds}
    rows = {"old handle": time_lookups(old, present, absent), "fresh handle": time_lookups(fresh, present, absent)}
    old.set_odb(pygit2.Odb(str(root / ".git" / "objects")))
    gc.collect()
    rows["old handle after set_odb"] = time_lookups(old, present, absent)
    result["after_set_odb_fds"] = deleted_fds_under(variants.merge_dir)
    result["lookups_us"] = rows
    return result


def print_handle(result: dict[str, object], rounds: int) -> None:
    rows = result["lookups_us"]
    assert isinstance(rows, dict)
    print(f"\nan open pygit2 handle after {rounds} write_pack calls and {result['merges']} merges "
          f"({result['live_packs']} packs left)")
    print(f"  deleted packs it holds open: {result['deleted_pack_fds_held']} "
          f"(after set_odb: {result['after_set_odb_fds']})")
    fresh = rows["fresh handle"]
    print(f"  {'µs per lookup':<28}" + "".join(f"{k:>12}" for k in fresh))
    for name, row in rows.items():
        print(f"  {name:<28}" + "".join(f"{row[k]:>12.2f}" for k in fresh))
    print(f"  {'old ÷ fresh':<28}" + "".join(f"{rows['old handle'][k] / fresh[k]:>12.1f}" for k in fresh))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=400)
    parser.add_argument("--fsync-rounds", type=int, default=60)
    parser.add_argument("--objects", type=int, default=10)
    parser.add_argument("--size", type=int, default=300)
    parser.add_argument("--quick", action="store_true", help="40 rounds, 8 with fsync")
    parser.add_argument("--json", help="write the figures to this file")
    parser.add_argument("--keep", help="work in this directory and keep it")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.fsync_rounds = 40, 8
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench_packs_"))
    root.mkdir(parents=True, exist_ok=True)
    print(f"pygit2 {pygit2.__version__}, libgit2 {pygit2.LIBGIT2_VERSION}, {os.cpu_count()} cores; "
          f"{args.objects} objects of ~{args.size} bytes per write")
    figures: dict[str, object] = {}
    try:
        times, variants = run_writes(root / "plain", args.rounds, args.objects, args.size, False, 1)
        summary = summarize(times)
        figures["writes"] = summary
        print_writes(f"one write of {args.objects} objects, no fsync ({args.rounds} rounds, interleaved)",
                     summary, args.objects)
        print(f"  (write_pack + merges: {variants.merges} merges, at most {variants.most_packs} packs at once)")
        if args.fsync_rounds:
            fs_times, _fs = run_writes(root / "fsync", args.fsync_rounds, args.objects, args.size, True, 2)
            fs_summary = summarize(fs_times)
            figures["writes_fsync"] = fs_summary
            print_writes(f"the same with fsync ({args.fsync_rounds} rounds)", fs_summary, args.objects)
        handle = run_handle(variants)
        figures["handle"] = handle
        print_handle(handle, args.rounds)
        fsck = subprocess.run(["git", "fsck", "--strict", "--no-dangling"], cwd=variants.merge_root,
                              capture_output=True, text=True, env=dict(os.environ, LC_ALL="C"), check=False)
        complaints = [line for line in (fsck.stdout + fsck.stderr).splitlines()
                      if line.strip() and not line.startswith(("notice:", "Checking"))]
        clean = fsck.returncode == 0 and not complaints
        figures["fsck_clean"] = clean
        print(f"\ngit fsck --strict of the merged repository: {'clean' if clean else complaints}")
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
