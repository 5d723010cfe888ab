"""Hostile and unusual trees end in clear errors, never a RecursionError or a traceback, through the
library and through `git agentos` as a real process: a 3,000-level workspace snapshot, a file entry
that points at a tree, snapshots restore would refuse (which `verify` reports, and goes on), and a
store holding mixed-type map keys, the largest integer stored and maps and lists nested 2,000 deep
(built with plumbing where the API refuses them)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import git

import gitstate
from gitstate.format import checkpoint as cpfmt
from gitstate.git.objects import MODE_BLOB, MODE_TREE
from gitstate.verify import verify

BIN = Path(sys.executable).parent
DEEP = 3000


def agentos(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`git agentos ARGS` as a real process; it must end on its own, without a traceback."""
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    done = subprocess.run(["git", "agentos", *args], cwd=cwd, capture_output=True, text=True, env=env,
                          timeout=120, check=False)
    assert "Traceback" not in done.stderr and "RecursionError" not in done.stderr, (args, done.stderr)
    assert done.returncode in (0, 1), (args, done.returncode, done.stderr)
    if done.returncode:
        assert done.stderr.splitlines()[-1].startswith("error: "), (args, done.stderr)
    return done


def deep_tree(store: gitstate.Store, levels: int, name: str = "d", leaf: tuple[str, bytes] = ("f", b"x\n")) -> str:
    w = store.core.object_writer()
    tree = w.tree([(leaf[0], w.blob(leaf[1]), MODE_BLOB)])
    for _ in range(levels):
        tree = w.tree([(name, tree, MODE_TREE)])
    return tree


def files_checkpoint(run: gitstate.Run, tree: str, branch: str = "evil") -> gitstate.Checkpoint:
    return run.checkpoint({"n": 1}, branch=branch, files_tree=tree)


def test_a_3000_level_snapshot_is_refused_by_restore_library_and_cli(repo: Path) -> None:
    store = gitstate.open_store(repo)
    run = store.create_run(run_id="deep")
    cp = files_checkpoint(run, deep_tree(store, DEEP))
    before = sorted(p.name for p in repo.iterdir())
    for kwargs in ({}, {"force": True}, {"dry_run": True}):
        with pytest.raises(gitstate.UnsafeTreeError) as info:
            run.restore(cp, **kwargs)  # type: ignore[arg-type]
        assert "deeper than" in str(info.value)
    assert sorted(p.name for p in repo.iterdir()) == before
    for args in (["restore", cp.id], ["restore", cp.id, "--dry-run"], ["restore", cp.id, "--force"]):
        done = agentos(repo, *args)
        assert done.returncode == 1 and "refusing to restore" in done.stderr and "deeper than" in done.stderr
    assert sorted(p.name for p in repo.iterdir()) == before
    for args in (["show", cp.id], ["log", "deep@evil"], ["runs"]):
        agentos(repo, *args)


def test_a_file_entry_that_points_at_a_tree_is_refused_and_flagged(repo: Path) -> None:
    store = gitstate.open_store(repo)
    run = store.create_run(run_id="odd")
    w = store.core.object_writer()
    inner = w.tree([("secret", w.blob(b"raw tree bytes must never land on disk\n"), MODE_BLOB)])
    cp = files_checkpoint(run, w.tree([("ok.txt", w.blob(b"ok\n"), MODE_BLOB), ("f", inner, MODE_BLOB)]))
    for kwargs in ({}, {"force": True}, {"dry_run": True}):
        with pytest.raises(gitstate.UnsafeTreeError) as info:
            run.restore(cp, **kwargs)  # type: ignore[arg-type]
        assert info.value.path == "f"
    assert not (repo / "f").exists() and not (repo / "ok.txt").exists()
    problems = [str(p) for p in verify(store).problems]
    assert len(problems) == 1 and "'f' has a file mode but is a tree" in problems[0]


def test_verify_reports_snapshots_restore_refuses_and_goes_on(repo: Path) -> None:
    store = gitstate.open_store(repo)
    good = store.create_run(run_id="good")
    (repo / "a.txt").write_text("a\n")
    good.checkpoint({"n": 1}, files=True)
    w = store.core.object_writer()
    payload = w.blob(b"#!/bin/sh\necho pwned\n")
    bad = {
        "dotgit": w.tree([(".git", w.tree([("config", payload, MODE_BLOB)]), MODE_TREE)]),
        "dotdot": w.tree([("..", w.tree([("x", payload, MODE_BLOB)]), MODE_TREE)]),
        "deep": deep_tree(store, DEEP),
    }
    for name, tree in bad.items():
        run = store.create_run(run_id=name)
        files_checkpoint(run, tree, branch="main")
        run.checkpoint({"n": 2})  # the snapshot is carried to the next checkpoint: reported once
    report = verify(store)
    assert report.checkpoints == 1 + 2 * len(bad)
    refused = {p.ref.split("/")[4]: p.message for p in report.problems}
    assert set(refused) == set(bad) and len(report.problems) == len(bad), report.problems
    assert all("restore refuses it" in m for m in refused.values())
    assert "'.git'" in refused["dotgit"] and "'..'" in refused["dotdot"] and "deeper than" in refused["deep"]
    done = agentos(repo, "verify")
    assert done.returncode == 1 and done.stdout.count("problem: ") == len(bad)
    data = json.loads(agentos(repo, "verify", "--json").stdout)
    assert data["ok"] is False and data["checkpoints"] == report.checkpoints


def _replace_state(store: gitstate.Store, run: gitstate.Run, extra: dict[str, tuple[str, int]]) -> str:
    """Swap entries into the state tree of the run's tip with plumbing (same meta, same parents)
    and move the branch there: what a crafted push could deliver."""
    reader, w = store.core.reader, store.core.object_writer()
    tip = run.head()
    assert tip is not None
    commit = reader.commit(tip.id)
    root = reader.tree(commit.tree_id)
    state = reader.tree(root[cpfmt.STATE_TREE].id)
    entries = {e.name: (e.id, e.filemode) for e in state}
    entries.update(extra)
    new_state = w.tree([(n, oid, mode) for n, (oid, mode) in entries.items()])
    new_root = w.tree([(e.name, new_state if e.name == cpfmt.STATE_TREE else e.id, e.filemode) for e in root])
    raw = reader.read(tip.id)[1].replace(commit.tree_id.encode(), new_root.encode(), 1)
    from pygit2.enums import ObjectType

    new = w.write(ObjectType.COMMIT, raw)
    store.core.move_ref(run.ref("main"), tip.id, new, "crafted")
    return new


def test_a_store_with_mixed_keys_a_huge_integer_and_2000_deep_values(repo: Path) -> None:
    store = gitstate.open_store(repo)
    with pytest.raises(gitstate.EncodingError):
        store.create_run(run_id="refused").checkpoint({"deep": _nested(2000)})  # refused at write time
    store.delete_run("refused")
    run = store.create_run(run_id="odd", workflow="w")
    run.checkpoint({"mixed": {1: "int key", "b": "text key"}, "big": 2**8192 - 1, "deep": 0, "msgs": list(range(40))})
    w = store.core.object_writer()
    deep_map = w.blob(b"\xa1\x61k" * 2000 + b"\x00")  # {"k": {"k": ... 0}} in CBOR, 2,000 deep
    deep_list = w.blob(b"\x81" * 2000 + b"\x00")  # [[[...0]]]
    crafted = _replace_state(store, run, {"deep.cbor": (deep_map, MODE_BLOB), "deeper.cbor": (deep_list, MODE_BLOB),
                                          "tree.map": (deep_tree(store, 2000, "k.map", ("leaf.cbor", b"\x01")),
                                                       MODE_TREE)})
    other = store.create_run(run_id="fine")
    other.checkpoint({"a": 1})
    summaries = {s.id: s for s in store.list_runs()}
    assert set(summaries) == {"odd", "fine"}
    for args in (["runs"], ["runs", "--json"], ["show", "odd"], ["show", "odd", "--json"], ["show", crafted],
                 ["log", "odd"], ["verify"], ["verify", "--json"], ["show", "fine"]):
        agentos(repo, *args)
    listed = json.loads(agentos(repo, "runs", "--json").stdout)
    assert {r["id"] for r in listed} == {"odd", "fine"}
    report = verify(store)
    assert report.checkpoints == 2 and {p.oid for p in report.problems} == {crafted}
    assert agentos(repo, "show", "fine").returncode == 0
    git(repo, "fsck", "--strict")


def _nested(levels: int) -> object:
    value: object = 0
    for _ in range(levels):
        value = {"k": value}
    return value
