"""Concurrency, crashes and bad input, with real processes and real repositories: every
acknowledged checkpoint survives, nothing half-written is visible, errors are GitStateErrors and
leave the store unchanged."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

import gitstate
from tests.conftest import bounded, git, loosen

ROOT = Path(__file__).resolve().parents[2]

WRITER = r"""
import sys, gitstate
path, run_id, branch, worker, count = sys.argv[1:6]
store = gitstate.open_store(path, stale_lock_age=0.5)
run = store.open_run(run_id, workflow="w")
for i in range(int(count)):
    cp = run.checkpoint({"worker": int(worker), "i": i, "log": list(range(i % 40))}, branch=branch)
    print(cp.id, flush=True)
"""


def _writer(repo: Path, run_id: str, branch: str, worker: int, count: int) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen([sys.executable, "-c", WRITER, str(repo), run_id, branch, str(worker), str(count)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _chain(run: gitstate.Run, branch: str = "main") -> list[gitstate.Checkpoint]:
    hist = list(run.history(branch))
    for newer, older in zip(hist, hist[1:], strict=False):
        assert newer.parent_ids == (older.id,)
        assert newer.step == older.step + 1
    assert hist[-1].parent_ids == () and hist[-1].step == 0
    return hist


def test_four_processes_four_runs(repo: Path) -> None:
    gitstate.open_store(repo)  # fail early if the repo is unusable
    procs = [_writer(repo, f"run-{w}", "main", w, 100) for w in range(4)]
    outputs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1] for o in outputs]
    store = gitstate.open_store(repo)
    for w, (out, _err) in enumerate(outputs):
        hist = _chain(store.get_run(f"run-{w}"))
        assert len(hist) == 100
        assert {c.id for c in hist} == set(out.split())
        assert sorted(c.state["i"] for c in hist) == list(range(100))
    git(repo, "fsck", "--strict")


def test_four_processes_one_branch(repo: Path) -> None:
    gitstate.open_store(repo).create_run(run_id="shared", workflow="w")
    procs = [_writer(repo, "shared", "main", w, 100) for w in range(4)]
    outputs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1] for o in outputs]
    hist = _chain(gitstate.open_store(repo).get_run("shared"))
    assert len(hist) == 400
    acknowledged = set().union(*(set(o[0].split()) for o in outputs))
    assert {c.id for c in hist} == acknowledged
    assert sorted((c.state["worker"], c.state["i"]) for c in hist) == [(w, i) for w in range(4) for i in range(100)]
    git(repo, "fsck", "--strict")


def test_sigkill_at_random_points(repo: Path) -> None:
    gitstate.open_store(repo).create_run(run_id="crashy", workflow="w")
    acknowledged: list[str] = []
    rng = random.Random(1234)
    for _ in range(12):
        proc = _writer(repo, "crashy", "main", 0, 100000)
        assert proc.stdout is not None
        first = proc.stdout.readline()  # kill while writing, not while starting (a loaded machine is slow)
        time.sleep(rng.uniform(0.0, 0.5))
        proc.send_signal(signal.SIGKILL)
        out, _ = proc.communicate()
        acknowledged += (first + out).split()  # ids printed after their ref move: acknowledged writes
    store = gitstate.open_store(repo, stale_lock_age=0.5)
    run = store.get_run("crashy")
    hist = _chain(run)
    ids = {c.id for c in hist}
    assert acknowledged and set(acknowledged) <= ids
    for cp in hist:
        assert isinstance(cp.state["log"], list)  # every visible checkpoint decodes fully
    nxt = run.checkpoint({"after": "crash"})
    assert nxt.parent_ids == (hist[0].id,)
    store.wait_for_housekeeping()  # a merge this write started would delete packs under fsck
    git(repo, "fsck", "--strict")


def test_stale_lock_is_recovered_fresh_lock_is_respected(store: gitstate.Store) -> None:
    run = store.create_run(run_id="locked")
    run.checkpoint({"a": 1})
    lock = Path(store.location.common_dir) / (run.ref("main") + ".lock")
    lock.write_text("")
    quick = gitstate.open_store(store.path, stale_lock_age=60, lock_timeout=0.3)
    with pytest.raises(gitstate.LockTimeoutError):
        quick.get_run("locked").checkpoint({"a": 2})
    assert lock.exists()  # a fresh lock is never broken
    old = time.time() - 120
    os.utime(lock, (old, old))
    cp = quick.get_run("locked").checkpoint({"a": 3})
    assert not lock.exists() and cp.step == 1


def _loose_path(repo: Path, oid: str) -> Path:
    return repo / ".git" / "objects" / oid[:2] / oid[2:]


def _corrupt(repo: Path, oid: str) -> None:
    loosen(repo)
    path = _loose_path(repo, oid)
    assert path.exists(), "expected a loose object to corrupt"
    os.chmod(path, 0o644)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])  # truncated: libgit2 alone would loop forever on it


def test_corrupt_objects_are_reported_and_others_listed(store: gitstate.Store, repo: Path) -> None:
    good = store.create_run(run_id="good")
    good.checkpoint({"ok": True})
    bad_state = store.create_run(run_id="bad-state")
    cp = bad_state.checkpoint({"unique-key-xyz": "value only here 8f3e"})
    state_blob = git(repo, "rev-parse", f"{cp.id}:state/unique-key-xyz.cbor").strip()
    _corrupt(repo, state_blob)
    bad_meta = store.create_run(run_id="bad-meta")
    cp2 = bad_meta.checkpoint({"x": "meta victim"}, metadata={"unique": "c0ffee-meta"})
    meta_blob = git(repo, "rev-parse", f"{cp2.id}:meta.cbor").strip()
    _corrupt(repo, meta_blob)
    fresh = gitstate.open_store(repo)
    with pytest.raises(gitstate.CorruptObjectError):
        _ = fresh.get_run("bad-state").load(cp.id).state
    summaries = {s.id: s for s in fresh.list_runs()}
    assert set(summaries) == {"good", "bad-state", "bad-meta"}
    assert summaries["good"].status != "corrupt"
    assert summaries["bad-meta"].status == "corrupt" and summaries["bad-meta"].error
    latest = fresh.latest_run()
    assert latest is not None and latest.id != "bad-meta"


def test_foreign_objects_under_namespace(store: gitstate.Store, repo: Path) -> None:
    store.create_run(run_id="fine").checkpoint({"a": 1})
    blob = subprocess.run(["git", "hash-object", "-w", "--stdin"], cwd=repo, input="x", capture_output=True,
                          text=True, check=True).stdout.strip()
    user_commit = git(repo, "rev-parse", "HEAD").strip()
    git(repo, "update-ref", "refs/agentos/main/runs/blobby/heads/main", blob)
    git(repo, "update-ref", "refs/agentos/main/runs/blobby/run", blob)
    git(repo, "update-ref", "refs/agentos/main/runs/usercommit/run", user_commit)
    git(repo, "update-ref", "refs/agentos/main/runs/bad%ZZname/run", user_commit)
    summaries = {s.id: s for s in store.list_runs()}
    assert summaries["fine"].status != "corrupt"
    assert summaries["blobby"].status == "corrupt"
    assert summaries["usercommit"].status == "corrupt"
    with pytest.raises(gitstate.CorruptObjectError):
        store.get_run("usercommit")
    with pytest.raises(gitstate.CheckpointNotFound):
        store.get_run("fine").load(user_commit)


def test_bad_references(store: gitstate.Store, repo: Path) -> None:
    run = store.create_run(run_id="r")
    run.checkpoint({"a": 1})
    before = git(repo, "for-each-ref", "refs/agentos")
    for bad in ["", "zz", "123", "g" * 40, "node:nothing", "0" * 41]:
        with pytest.raises(gitstate.InvalidReferenceError):
            run.load(bad)
        with pytest.raises(gitstate.InvalidReferenceError):
            run.rollback(bad)
    with pytest.raises(gitstate.RunNotFound):
        store.get_run("missing")
    assert git(repo, "for-each-ref", "refs/agentos") == before


@pytest.mark.parametrize("name", ["packed-refs", "config", "HEAD", "index", "info/exclude", "info/attributes",
                                  "objects/info/alternates", ".git in a subdirectory", "AGENTOS_REPO"])
def test_a_fifo_where_git_keeps_a_file_is_one_error_line_not_a_hang(repo: Path, name: str) -> None:
    """A FIFO where git keeps a file it reads (packed-refs, config, the index, ignore and attribute
    files of .git/info, alternates, a `.git` on the way up) makes libgit2 (and git) wait for a
    writer for ever. Every command refuses at once, in one line that names it, and changes nothing."""
    assert _cli(repo, "checkpoint", "r", "--files").returncode == 0
    cwd, env = repo, {}
    if name == ".git in a subdirectory":
        (repo / "sub").mkdir()
        os.mkfifo(repo / "sub" / ".git")
        cwd = repo / "sub"
    elif name == "AGENTOS_REPO":
        os.mkfifo(repo / "pipe")
        env = {"AGENTOS_REPO": str(repo / "pipe")}
    else:
        target = repo / ".git" / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.unlink(missing_ok=True)
        os.mkfifo(target)
    for args in (["runs"], ["log", "r"], ["checkpoint", "r", "--files"], ["restore", "r", "--force"]):
        try:
            done = subprocess.run([sys.executable, "-m", "gitstate_cli", *args], cwd=cwd, capture_output=True, text=True,
                                  env=dict(os.environ, PYTHONPATH=str(ROOT), **env), timeout=30, check=False)
        except subprocess.TimeoutExpired:
            pytest.fail(f"git agentos {' '.join(args)} hung on a FIFO ({name})")
        assert done.returncode == 1 and done.stdout == "", (args, done.stdout, done.stderr)
        assert done.stderr.startswith("error: ") and "a FIFO" in done.stderr and "Traceback" not in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("after_gc", [False, True])
def test_a_fifo_at_a_path_the_user_tracks_never_hangs_a_snapshot_or_restore(repo: Path, after_gc: bool) -> None:
    """The user's git index tracks ``p``; ``p`` is now a FIFO. A snapshot leaves it out, as git
    adds no FIFO (libgit2 opened it to hash it, waiting for a writer for ever, whenever the private
    index was empty: the first snapshot, or any after a `git gc`); a restore that would write ``p``
    refuses, naming it as a special file in the way, even with --force."""
    (repo / "p").write_text("p\n")
    (repo / "q").write_text("q\n")
    git(repo, "add", "p", "q")
    git(repo, "commit", "-q", "-m", "p and q")
    if after_gc:
        assert _cli(repo, "checkpoint", "r", "--files").returncode == 0
        git(repo, "gc", "-q", "--prune=now")
    (repo / "p").unlink()
    os.mkfifo(repo / "p")
    try:
        done = _cli(repo, "checkpoint", "r", "--files", "--json", timeout=30)
        assert done.returncode == 0, done.stderr
        if after_gc:
            refused = _cli(repo, "restore", "r~1", "--force", timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail("a FIFO at a tracked path made a command hang")
    tree = gitstate.open_store(repo).get_run("r").load(json.loads(done.stdout)["id"]).files_tree_id
    assert tree is not None and git(repo, "ls-tree", "--name-only", tree).split() == ["README", "q"]
    if after_gc:
        assert refused.returncode == 1 and "special files" in refused.stderr and refused.stderr.rstrip().endswith(": p")
        assert stat.S_ISFIFO(os.lstat(repo / "p").st_mode)


@pytest.mark.skipif(not shutil.which("setpriv") and os.geteuid() == 0, reason="needs setpriv to drop root")
def test_read_only_git_dir() -> None:
    base = Path(tempfile.mkdtemp(prefix="gitstate-ro-"))
    try:
        repo = base / "repo"
        git(base, "init", "-q", str(repo))
        gitstate.open_store(repo).create_run(run_id="existing").checkpoint({"a": 1})
        before = git(repo, "for-each-ref")
        script = ("import gitstate,sys\n"
                  "s=gitstate.open_store(sys.argv[1])\n"
                  "try:\n  s.get_run('existing').checkpoint({'a': 2})\n"
                  "except gitstate.StoreWriteError as e:\n  print('StoreWriteError', e); sys.exit(3)\n")
        cmd = [sys.executable, "-c", script, str(repo)]
        env = dict(os.environ, PYTHONPATH=str(ROOT), HOME=str(base))
        if os.geteuid() == 0:
            os.chmod(base, 0o755)
            subprocess.run(["chown", "-R", "nobody", str(repo)], check=True)
            cmd = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", *cmd]
        subprocess.run(["chmod", "-R", "a-w", str(repo / ".git")], check=True)
        out = subprocess.run(cmd, capture_output=True, text=True, env=env)
        assert out.returncode == 3, out.stderr
        assert "StoreWriteError" in out.stdout and "Traceback" not in out.stderr
        assert git(repo, "-c", "safe.directory=*", "for-each-ref") == before
    finally:
        subprocess.run(["chmod", "-R", "u+w", str(base)], check=False)
        shutil.rmtree(base, ignore_errors=True)


def test_listing_many_runs_uses_the_cache_and_stays_right(store: gitstate.Store) -> None:
    from gitstate.store.store import SUMMARY_CACHE_MIN_RUNS

    runs = [store.create_run(workflow="w", run_id=f"m{i:03d}") for i in range(SUMMARY_CACHE_MIN_RUNS + 2)]
    for i, run in enumerate(runs):
        run.checkpoint({"i": i}, node="n")
    first = {s.id: s for s in store.list_runs()}
    cache = Path(store.location.common_dir) / "agentos" / f"summaries-{store.worktree}.cbor"
    assert cache.exists()
    runs[3].checkpoint({"i": "moved"}, node="later", status="completed")
    store.delete_run(runs[4].id)
    again = {s.id: s for s in gitstate.open_store(store.path).list_runs()}
    assert set(again) == set(first) - {runs[4].id}
    assert (again[runs[3].id].node, again[runs[3].id].status, again[runs[3].id].checkpoints) == ("later", "completed", 2)
    assert again[runs[5].id] == first[runs[5].id]
    cache.write_bytes(b"garbage")  # a damaged cache is rebuilt, never trusted
    assert {s.id: s for s in gitstate.open_store(store.path).list_runs()} == again
    cache.unlink()
    os.mkfifo(cache)  # reading it would wait for ever for a writer: taken as missing, then replaced
    assert {s.id: s for s in bounded(gitstate.open_store(store.path).list_runs, 30)} == again
    assert cache.is_file()


def test_a_deleted_repository_is_an_error_never_an_empty_store(repo: Path) -> None:
    store = gitstate.open_store(repo)
    run = store.create_run(run_id="gone", workflow="w")
    run.checkpoint({"x": 1})
    shutil.rmtree(repo / ".git")
    calls = {
        "list_runs": store.list_runs, "head": run.head, "get_run": lambda: store.get_run("gone"),
        "has_run": lambda: store.has_run("gone"), "history": lambda: list(run.history()),
        "checkpoint": lambda: run.checkpoint({"x": 2}), "create_run": lambda: store.create_run(run_id="new"),
        "pack": store.pack, "latest_run": store.latest_run,
    }
    for name, call in calls.items():
        with pytest.raises(gitstate.RepositoryGoneError) as info:
            call()
        assert "deleted or moved" in str(info.value) and "\n" not in str(info.value), name
        assert isinstance(info.value, gitstate.NotARepositoryError)
    assert not (repo / ".git").exists()  # nothing brought back as an empty shell


@pytest.mark.skipif(not shutil.which("setpriv") and os.geteuid() == 0, reason="needs setpriv to drop root")
def test_every_call_on_a_read_only_repository_is_a_gitstate_error() -> None:
    base = Path(tempfile.mkdtemp(prefix="gitstate-ro-"))
    try:
        repo = base / "repo"
        git(base, "init", "-q", str(repo))
        (repo / "f").write_text("x")
        store = gitstate.open_store(repo)
        run = store.create_run(run_id="existing", workflow="w")
        run.checkpoint({"a": 1}, files=True)
        (repo / "g").write_text("y")
        run.checkpoint({"a": 2}, files=True)  # loose objects journaled for packing
        script = r"""
import sys, gitstate
from gitstate.verify import verify
s = gitstate.open_store(sys.argv[1])
r = s.get_run("existing")
calls = {"pack": s.pack, "checkpoint": lambda: r.checkpoint({"a": 3}), "create": lambda: s.create_run(run_id="b"),
         "delete": lambda: s.delete_run("existing"), "fork": lambda: r.fork(r.head().id, "x"),
         "prune": lambda: r.prune(keep_latest=1), "files": lambda: r.checkpoint({"a": 4}, files=True),
         "list": lambda: len(s.list_runs()), "verify": lambda: verify(s, repair=True).ok}
for name, call in calls.items():
    try:
        print(name, "ok", call())
    except gitstate.GitStateError as exc:
        print(name, "error", type(exc).__name__, str(exc).count("\n"))
"""
        cmd = [sys.executable, "-c", script, str(repo)]
        env = dict(os.environ, PYTHONPATH=str(ROOT), HOME=str(base))
        if os.geteuid() == 0:
            os.chmod(base, 0o755)
            subprocess.run(["chown", "-R", "nobody", str(repo)], check=True)
            cmd = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", *cmd]
        subprocess.run(["chmod", "-R", "a-w", str(repo / ".git")], check=True)
        out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
        assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
        lines = dict(line.split(" ", 1) for line in out.stdout.splitlines())
        for name in ("pack", "checkpoint", "create", "delete", "fork", "prune", "files"):
            assert lines[name] == "error StoreWriteError 0", (name, lines[name])
        assert lines["list"] == "ok 1" and lines["verify"] == "ok True"
    finally:
        subprocess.run(["chmod", "-R", "u+w", str(base)], check=False)
        shutil.rmtree(base, ignore_errors=True)


def _cli(cwd: Path, *args: str, stdin: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``git agentos ARGS`` as a process (this checkout's code), killed after ``timeout`` seconds:
    a hang fails the test instead of the suite."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "gitstate_cli", *args], cwd=cwd, input=stdin, capture_output=True,
                          text=True, env=env, timeout=timeout, check=False)


@pytest.mark.parametrize("name", ["git-version", "locks-swept", "tx-packs", "loose.journal", "index-main", "index-main.tree",
                                  "index-main.user", "index-main.epoch", "index-main.restore.lock"])
def test_a_fifo_in_place_of_a_private_file_never_hangs_a_command(repo: Path, name: str) -> None:
    """A FIFO (a plain open of it waits for ever for the other end) where a file of
    ``.git/agentos/`` should be: every command still runs, taking it as a missing or damaged file."""
    for i in (1, 2):
        (repo / "a.txt").write_text(f"{i}\n")
        assert _cli(repo, "checkpoint", "r1", "--state", "-", "--files", stdin=f'{{"n": {i}}}').returncode == 0
    fifo = repo / ".git" / "agentos" / name
    fifo.unlink(missing_ok=True)
    os.mkfifo(fifo)
    (repo / "new.txt").write_text("new\n")
    for args in (["runs"], ["checkpoint", "r1", "--state", "-"], ["checkpoint", "r1", "--state", "-", "--files"],
                 ["restore", "r1~3", "--dry-run"], ["restore", "r1~3", "--force"]):
        try:
            done = _cli(repo, *args, stdin='{"n": 3}', timeout=30)
        except subprocess.TimeoutExpired:
            pytest.fail(f"git agentos {' '.join(args)} hung on a FIFO at .git/agentos/{name}")
        assert done.returncode == 0 and "Traceback" not in done.stderr, (args, done.stderr)
    assert (repo / "a.txt").read_text() == "1\n" and not (repo / "new.txt").exists()  # restored
    assert [line.split()[1] for line in _cli(repo, "log", "r1").stdout.splitlines()[1:]] == ["3", "2", "1", "0"]


@pytest.mark.skipif(not shutil.which("setpriv") and os.geteuid() == 0, reason="needs setpriv to drop root")
def test_restores_and_file_snapshots_on_a_read_only_repository_are_one_error_line() -> None:
    """restore, rollback --restore and checkpoint --files (a new file to store) where .git cannot
    be written: exit 1 with one line ``error: cannot write the store at …``, nothing changed; a
    restore's dry run, which writes nothing, still plans."""
    base = Path(tempfile.mkdtemp(prefix="gitstate-ro-"))
    try:
        repo = base / "repo"
        git(base, "init", "-q", str(repo))
        for i in (1, 2):
            (repo / "a.txt").write_text(f"{i}\n")
            assert _cli(repo, "checkpoint", "r1", "--state", "-", "--files", stdin=f'{{"n": {i}}}').returncode == 0
        (repo / "new.txt").write_text("new\n")
        prefix: list[str] = []
        if os.geteuid() == 0:
            os.chmod(base, 0o755)
            subprocess.run(["chown", "-R", "nobody", str(repo)], check=True)
            prefix = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
        subprocess.run(["chmod", "-R", "a-w", str(repo / ".git")], check=True)
        before = git(repo, "-c", "safe.directory=*", "for-each-ref")
        env = dict(os.environ, PYTHONPATH=str(ROOT), HOME=str(base))

        def cli(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run([*prefix, sys.executable, "-m", "gitstate_cli", *args], cwd=repo, env=env,
                                  capture_output=True, text=True, timeout=60, check=False)

        wrong = {}
        for args in (["restore", "r1~1", "--force"], ["rollback", "r1", "~1", "--restore", "--force"],
                     ["checkpoint", "r1", "--files"]):
            done = cli(*args)
            if done.returncode != 1 or not done.stderr.startswith("error: cannot write the store at ") \
                    or done.stderr.count("\n") != 1:
                wrong[" ".join(args)] = (done.returncode, done.stderr[-300:])
            assert git(repo, "-c", "safe.directory=*", "for-each-ref") == before
            assert (repo / "a.txt").read_text() == "2\n" and (repo / "new.txt").exists()
        assert wrong == {}
        planned = cli("restore", "r1~1", "--dry-run")
        assert planned.returncode == 0 and "a.txt" in planned.stdout and "Traceback" not in planned.stderr, \
            planned.stderr
    finally:
        subprocess.run(["chmod", "-R", "u+w", str(base)], check=False)
        shutil.rmtree(base, ignore_errors=True)
