"""One damaged object under refs/agentos/ never hangs a reader: every library reader, the LangGraph
saver and the CLI end within a bound with a clear error naming the object, listing goes on for the
sound runs, and ``verify`` fails. (libgit2 1.9 loops forever inflating a truncated loose object.)

Each scenario runs in a child process with a hard timeout, so a regression shows as a failure here
instead of a hung suite."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
from conftest import git, loosen

import gitstate

BIN = Path(sys.executable).parent
LIMIT = 15  # seconds: the bar for every reader on a damaged store


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    os.chmod(path, 0o644)
    path.write_bytes(data[: len(data) // 2])


def _loose(repo: Path, oid: str) -> Path:
    return repo / ".git" / "objects" / oid[:2] / oid[2:]


def _child(repo: Path, code: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    return subprocess.run([sys.executable, "-c", code, str(repo)], capture_output=True, text=True, env=env,
                          timeout=LIMIT, check=False)


def _cli(repo: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    return subprocess.run(["git", "agentos", *args], cwd=repo, capture_output=True, text=True, env=env,
                          timeout=LIMIT, check=False, input=stdin)


def _store_with_damage(repo: Path, what: str) -> tuple[str, str]:
    """Two runs; one object of run ``bad``'s tip is damaged: its root ``tree``, its ``state`` tree, its
    ``meta.cbor`` blob, its ``commit`` (each truncated to half), its state tree made ``empty``, its
    commit or meta blob with a header claiming ~100 GB (``huge``, ``hugeblob``), or
    a truncated ``pack`` holding everything. Returns (bad tip, its damaged oid)."""
    store = gitstate.open_store(repo)
    good = store.create_run(run_id="good", workflow="w")
    good.checkpoint({"n": 1})
    bad = store.create_run(run_id="bad", workflow="w")
    bad.checkpoint({"messages": ["a"] * 40, "k": "v"}, node="plan")
    tip = bad.checkpoint({"messages": ["a"] * 41, "k": "v2"}, node="act")
    reader = store.core.reader
    root = reader.tree(tip.tree_id)
    victim = {"tree": tip.tree_id, "state": root["state"].id, "blob": root["meta.cbor"].id,
              "commit": tip.id, "empty": root["state"].id, "pack": tip.id, "huge": tip.id,
              "hugeblob": root["meta.cbor"].id}[what]
    store.close()
    if what == "pack":
        git(repo, "repack", "-a", "-d", "-q")
        git(repo, "prune-packed")
        packs = glob.glob(str(repo / ".git" / "objects" / "pack" / "*.pack"))
        assert len(packs) == 1 and not _loose(repo, victim).exists()
        _truncate(Path(packs[0]))
    else:
        loosen(repo)  # transactions write packs: give the victim a loose file of its own
    if what == "pack":
        pass
    elif what == "empty":
        os.chmod(_loose(repo, victim), 0o644)
        _loose(repo, victim).write_bytes(b"")
    elif what.startswith("huge"):  # a header claiming ~100 GB: libgit2 fails to allocate it
        path = _loose(repo, victim)
        kind, body = zlib.decompress(path.read_bytes()).split(b"\0", 1)
        os.chmod(path, 0o644)
        path.write_bytes(zlib.compress(kind.split(b" ")[0] + b" 99999999999\0" + body))
    else:
        _truncate(_loose(repo, victim))
    return tip.id, victim


LIBRARY = r"""
import sys, gitstate
store = gitstate.open_store(sys.argv[1])
results = {}
run = None
try:
    run = store.get_run("bad")
except gitstate.GitStateError as exc:
    results["get_run"] = type(exc).__name__ + ": " + str(exc)
for name, call in [] if run is None else [("head", lambda: run.head()), ("history", lambda: list(run.history())),
                   ("state", lambda: run.head().state), ("load", lambda: run.load(run.tip()[:10]).state),
                   ("diff", lambda: run.diff(list(run.history())[-1].id)),
                   ("branches", lambda: run.branches()), ("nodes", lambda: run.nodes())]:
    try:
        call()
        results[name] = "ok"
    except gitstate.GitStateError as exc:
        results[name] = type(exc).__name__ + ": " + str(exc)
listing = {s.id: (s.status, s.error) for s in store.list_runs()}
import json
print(json.dumps({"results": results, "listing": listing}))
"""


@pytest.mark.parametrize("what", ["tree", "state", "blob", "commit", "empty", "pack", "huge", "hugeblob"])
def test_library_readers_end_with_a_clear_error(repo: Path, what: str) -> None:
    _tip, victim = _store_with_damage(repo, what)
    done = _child(repo, LIBRARY)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    failed = {k: v for k, v in out["results"].items() if v != "ok"}
    assert failed, "the damage went unnoticed"
    for name, message in failed.items():
        assert message.startswith("CorruptObjectError"), (name, message)
    if what != "pack":  # a damaged pack is named by its path, a loose object by its id
        assert any(victim in m for m in failed.values()), failed
    assert out["listing"]["good"][0] != "corrupt" or what == "pack"
    assert out["listing"]["bad"][0] == "corrupt" and out["listing"]["bad"][1]


SAVER = r"""
import sys, json, gitstate
from gitstate.langgraph import GitCheckpointSaver
from langgraph.checkpoint.base import empty_checkpoint
saver = GitCheckpointSaver.from_path(sys.argv[1])
cfg = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
out = {}
for name, call in [("get_tuple", lambda: saver.get_tuple(cfg)), ("list", lambda: list(saver.list(cfg)))]:
    try:
        call()
        out[name] = "ok"
    except gitstate.GitStateError as exc:
        out[name] = type(exc).__name__
print(json.dumps(out))
"""

SAVER_SETUP = r"""
import sys
from gitstate.langgraph import GitCheckpointSaver
from langgraph.checkpoint.base import empty_checkpoint
saver = GitCheckpointSaver.from_path(sys.argv[1])
cfg = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
for i in range(3):
    cp = empty_checkpoint()
    cp["channel_values"] = {"messages": ["m"] * (i + 1)}
    cp["channel_versions"] = {"messages": str(i + 1)}
    cfg = saver.put(cfg, cp, {"source": "loop", "step": i}, {"messages": str(i + 1)})
print(cfg["configurable"]["checkpoint_id"])
"""


@pytest.mark.parametrize("what", ["tree", "commit"])
def test_saver_reads_end_with_a_clear_error(repo: Path, what: str) -> None:
    pytest.importorskip("langgraph")
    done = _child(repo, SAVER_SETUP)
    assert done.returncode == 0, done.stderr
    store = gitstate.open_store(repo)
    tip = store.read_checkpoint(store.core.read_ref("refs/agentos/main/runs/t/heads/main") or "")
    victim = tip.id if what == "commit" else store.core.reader.tree(tip.tree_id)["langgraph"].id
    store.close()
    loosen(repo)
    _truncate(_loose(repo, victim))
    done = _child(repo, SAVER)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"get_tuple": "CorruptObjectError", "list": "CorruptObjectError"}


@pytest.mark.parametrize("what", ["tree", "blob", "commit", "pack", "huge", "hugeblob"])
def test_cli_ends_with_an_error_line(repo: Path, what: str) -> None:
    tip, _victim = _store_with_damage(repo, what)
    runs = _cli(repo, "runs", "--json")
    assert runs.returncode == 0 and "Traceback" not in runs.stderr, runs.stderr
    listed = {r["id"]: r for r in json.loads(runs.stdout)}
    assert listed["bad"]["status"] == "corrupt"
    for args in (("log", "bad"), ("show", tip)):
        done = _cli(repo, *args)
        assert done.returncode == 1, (args, done.stdout, done.stderr)
        assert done.stderr.startswith("error: ") and "Traceback" not in done.stderr, done.stderr
    verify = _cli(repo, "verify")
    assert verify.returncode != 0 and "Traceback" not in verify.stderr
    assert "bad" in verify.stdout + verify.stderr


@pytest.mark.parametrize("what", ["blob", "commit"])
def test_view_export_warns_of_the_checkpoints_it_shows_as_unreadable(repo: Path, what: str) -> None:
    """The one-file export still writes the page (the other runs are readable), but names each
    checkpoint it could not read: a warning line on stderr and "errors" in --json."""
    tip, _victim = _store_with_damage(repo, what)
    page = repo.parent / f"view-{what}.html"
    done = _cli(repo, "view", "--html", str(page), "--json")
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert page.exists()
    errors = json.loads(done.stdout)["errors"]
    assert errors and all(e.startswith(("run bad: ", f"checkpoint {tip[:12]}: ")) for e in errors), errors
    warnings = [line for line in done.stderr.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == len(errors), done.stderr
    assert not any("good" in e for e in errors)


def test_a_run_or_branch_whose_tip_is_missing_can_be_deleted(repo: Path) -> None:
    """Deleting reads no checkpoint: a branch naming a missing object goes with ``branch -D`` (``-d``
    cannot tell it is merged: refused), and a run with one goes with ``delete``."""
    store = gitstate.open_store(repo)
    run = store.create_run(run_id="gone")
    cp = run.checkpoint({"a": 1})
    run.fork(cp.id, "side")
    run.fork(cp.id, "other")
    heads = repo / ".git" / "refs" / "agentos" / "main" / "runs" / "gone" / "heads"
    for name, missing in (("side", "01234567" * 5), ("main", "89abcdef" * 5)):
        (heads / name).write_text(missing + "\n")
    refused = _cli(repo, "branch", "-d", "gone@side")
    assert refused.returncode == 1 and "use -D" in refused.stderr, refused.stderr
    done = _cli(repo, "branch", "-D", "gone@side")
    assert done.returncode == 0, done.stderr
    done = _cli(repo, "delete", "gone", "--yes", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"run": "gone", "deleted": True, "branches": ["main", "other"]}
    assert not git(repo, "for-each-ref", "refs/agentos/")


_NODE_RECORD = {"format": "gitstate/node", "v": 1, "run": "r", "id": "0123456789abcdef", "node": "plan",
                "branch": "main", "status": "completed", "entry": "a" * 40, "exit": "b" * 40, "base": "c" * 40,
                "started_at": "2026-01-01T00:00:00.000000Z", "ended_at": "2026-01-01T00:00:01.000000Z"}


@pytest.mark.parametrize("variant", [
    b"\xff", b"", "[1]", "v=3", "v=True", "v='1'", "format=None", "status='weird'", "status=7", "status=None",
    "node=7", "id=7", "branch=None", "started_at=None", "ended_at=17", "error=b'x'", "metadata=[1]",
    "owner='me'", "entry='zz'", "exit='B' * 40", "base=5", "base='c' * 39", "entry='a' * 40 + '\\n'",
])
def test_node_record_decoder_refuses_malformed_records_as_corrupt(variant: str | bytes) -> None:
    """Every reader of a node log decodes its records with one decoder: a malformed record is a
    CorruptObjectError (never a TypeError, KeyError or ValueError), whatever field is wrong."""
    import cbor2

    from gitstate.errors import CorruptObjectError
    from gitstate.format import nodes as nodefmt

    assert nodefmt.decode(cbor2.dumps(_NODE_RECORD, canonical=True), "x").exit == "b" * 40
    if isinstance(variant, bytes):
        data = variant
    elif variant == "[1]":
        data = cbor2.dumps([1], canonical=True)
    else:
        key, value = variant.split("=", 1)
        record = {**_NODE_RECORD, key: eval(value)}  # noqa: S307 - the test's own literals
        data = cbor2.dumps({k: v for k, v in record.items() if v is not None}, canonical=True)
    with pytest.raises(CorruptObjectError) as caught:
        nodefmt.decode(data, "0" * 40)
    assert caught.value.oid == "0" * 40


def test_cli_on_a_node_record_naming_no_object_id(repo: Path) -> None:
    """A node log whose newest record names an entry that is no object id (a pull can bring one):
    every command that reads the log prints one error line (checkpoint --node raised ValueError
    building the next record's tree), verify names the log, and verify --repair makes it usable."""
    import cbor2

    def raw(*args: str, data: bytes = b"") -> bytes:
        return subprocess.run(["git", *args], cwd=repo, input=data, capture_output=True, check=True).stdout

    assert _cli(repo, "checkpoint", "r", "--state", "-", "--node", "plan", stdin="{}").returncode == 0
    log = "refs/agentos/main/runs/r/nodes/main"
    record = cbor2.loads(raw("cat-file", "blob", f"{log}:node.cbor"))
    blob = raw("hash-object", "-w", "--stdin", data=cbor2.dumps({**record, "entry": "zz"}, canonical=True))
    tree = raw("mktree", data=b"100644 blob " + blob.strip() + b"\tnode.cbor\n")
    bad = raw("commit-tree", tree.decode().strip(), "-p", log, "-m", "node plan · completed").decode().strip()
    raw("update-ref", log, bad)
    for args in (("nodes", "r"), ("show", "r:node:plan"), ("rollback", "r", "node:plan"),
                 ("checkpoint", "r", "--state", "-", "--node", "plan")):
        done = _cli(repo, *args, stdin="{}")
        assert done.returncode == 1, (args, done.stdout, done.stderr)
        assert done.stderr.startswith("error: corrupt object ") and len(done.stderr.splitlines()) == 1, done.stderr
    verify = _cli(repo, "verify")
    assert verify.returncode == 1 and f"{log} ({bad[:12]}): node log record does not read" in verify.stdout
    repaired = _cli(repo, "verify", "--repair")
    assert repaired.returncode == 0 and f"repaired {log}: node log rewritten" in repaired.stdout, repaired.stdout
    assert _cli(repo, "checkpoint", "r", "--state", "-", "--node", "plan", stdin="{}").returncode == 0
    assert _cli(repo, "verify").returncode == 0


def test_export_of_a_damaged_object_fails_and_writes_no_bundle(repo: Path, tmp_path: Path) -> None:
    """A loose object whose bytes are another object's (valid zlib, valid object, wrong id): git
    bundle create writes it without a word and the bundle only fails on import; export reads its
    bundle back first, so it fails and writes nothing (an existing file is left as it was)."""
    store = gitstate.open_store(repo)
    run = store.create_run(run_id="r")
    run.checkpoint({"a": 1})
    tip = run.checkpoint({"a": 2, "b": "x" * 100})
    victim = store.core.reader.tree(tip.tree_id)["meta.cbor"].id
    other = store.core.reader.tree(run.load(tip.parent_id or "").tree_id)["meta.cbor"].id
    store.close()
    loosen(repo)
    os.chmod(_loose(repo, victim), 0o644)
    _loose(repo, victim).write_bytes(_loose(repo, other).read_bytes())  # another object's bytes under this id
    out = tmp_path / "runs.bundle"
    out.write_bytes(b"an older backup")
    done = _cli(repo, "export", "-o", str(out))
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith("error: ") and "does not read back" in done.stderr, done.stderr
    assert out.read_bytes() == b"an older backup"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".gitstate-bundle-")]
