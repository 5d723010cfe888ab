"""A writer killed (SIGKILL) between writing its transaction's pack and renaming it into place
leaves ``objects/pack/tmp_pack_*`` and ``tmp_idx_*``: ``verify`` reports them once they are old
enough not to be a live writer's, ``verify --repair`` removes them, and git's own temporary files
there are never touched (git prunes them itself)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import git, make_repo, packs_only

import gitstate
from gitstate.git import packs
from gitstate.store import housekeeping
from gitstate.verify.checks import verify
from gitstate_cli.main import cli


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A fresh repository whose every write is one pack: these tests are about packs."""
    return packs_only(make_repo(tmp_path / "repo"))


ROOT = Path(__file__).resolve().parents[2]

# Writes one checkpoint and is killed by SIGKILL as it renames its temporary pack into place.
_DIES = r"""
import os, signal, sys
import gitstate
run = gitstate.open_store(sys.argv[1]).open_run("k")
real = os.replace
def replace(src, dst, *args, **kwargs):
    if os.path.basename(src).startswith("tmp_"):
        os.kill(os.getpid(), signal.SIGKILL)
    return real(src, dst, *args, **kwargs)
os.replace = replace
run.checkpoint({"n": "never"})
"""


def _garbage(repo: Path) -> int:
    counts = dict(line.split(": ", 1) for line in git(repo, "count-objects", "-v").splitlines())
    return int(counts["garbage"])


def test_killed_writers_temporary_pack_files_are_reported_and_repaired(
        store: gitstate.Store, repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = store.create_run(run_id="k")
    first = run.checkpoint({"n": 0})
    done = subprocess.run([sys.executable, "-c", _DIES, str(repo)], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120, check=False)
    assert done.returncode == -9, done.stderr
    pack_dir = repo / ".git" / "objects" / "pack"
    left = sorted(p.name for p in pack_dir.iterdir() if p.name.startswith("tmp_"))
    assert len(left) == 2 and all(packs.is_temp_name(n) for n in left), left
    assert {n.split("_")[1] for n in left} == {"pack", "idx"}
    assert verify(store).ok  # young: it may be a live writer's
    ours = [pack_dir / n for n in left]
    gits = pack_dir / "tmp_pack_Ab3xYz"  # git's own (mkstemp's six characters): git's to prune
    gits.write_bytes(b"PACK")
    old = time.time() - 2 * housekeeping.ORPHAN_AGE
    for path in [*ours, gits]:
        os.utime(path, (old, old))
    # (and the killed writer's .keep without its pack: the next store to open removes it, its owner dead)
    assert _garbage(repo) == 4, git(repo, "count-objects", "-v")

    report = verify(store)
    assert sorted(p.ref for p in report.problems) == [f"objects/pack/{n}" for n in left]
    assert all("killed writer" in p.message for p in report.problems)
    monkeypatch.chdir(repo)
    shown = CliRunner().invoke(cli, ["verify"], prog_name="git agentos")
    assert shown.exit_code == 1 and shown.stdout.count("temporary pack file") == 2, shown.output
    repaired = CliRunner().invoke(cli, ["verify", "--repair", "--json"], prog_name="git agentos")
    assert repaired.exit_code == 0, repaired.output
    out = json.loads(repaired.stdout)
    assert out["ok"] and sorted(out["repaired"]) == [f"objects/pack/{n}" for n in left]
    assert not any(p.exists() for p in ours) and gits.exists()
    assert _garbage(repo) == 1  # git's own file, left to git gc
    assert verify(store).ok
    assert [cp.id for cp in run.history()] == [first.id]
    assert run.checkpoint({"n": 1}).step == 1


def test_merges_sweep_only_gitstates_own_temporary_files(repo: Path) -> None:
    pack_dir = repo / ".git" / "objects" / "pack"
    pack_dir.mkdir(parents=True, exist_ok=True)
    ours, gits = pack_dir / ("tmp_pack_" + "0f" * 8), pack_dir / "tmp_idx_Q9wE2r"
    old = time.time() - 2 * housekeeping.ORPHAN_AGE
    for path in (ours, gits):
        path.write_bytes(b"x")
        os.utime(path, (old, old))
    assert housekeeping.leftover_temps(str(repo / ".git")) == [str(ours)]
    housekeeping.merge_tx_packs(str(repo / ".git"))  # a merge sweeps killed writers' leftovers first
    assert not ours.exists() and gits.exists()
