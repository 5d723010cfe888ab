"""Integers beyond the stored bound (``MAX_INT_BITS``): refused when written, and, when a store holds
one anyway (written by an earlier version, or crafted by a pulled remote), shown as a bounded stub by
every reader: the CLI's text and --json, the view server's JSON and the one-file HTML. Printing such
an integer in decimal costs time quadratic in its size (a 1 MiB one took minutes)."""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
from pathlib import Path

import cbor2
import pygit2
import pytest
from click.testing import CliRunner

import gitstate
from gitstate.format import checkpoint as cpfmt
from gitstate.format.encoding import MAX_INT_BITS, dumps, loads
from gitstate.format.names import encode_component
from gitstate.view.server import make_server
from gitstate_cli.main import cli
from gitstate_cli.output import jsonable, readable

BIN = Path(sys.executable).parent
BIG = 1 << (8 * (1 << 20) - 1)  # a 1 MiB big integer: 8,388,608 bits
BIG_BITS = f"{8 * (1 << 20):,}"


def agentos(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    done = subprocess.run(["git", "agentos", *args], cwd=cwd, capture_output=True, text=True, env=env,
                          timeout=600, check=False)
    assert "Traceback" not in done.stderr, (args, done.stderr)
    return done


def test_the_encoder_refuses_integers_beyond_the_bound() -> None:
    for ok in (2**MAX_INT_BITS - 1, -(2**MAX_INT_BITS) + 1, {"k": [2**MAX_INT_BITS - 1]}):
        assert loads(dumps(ok)) == ok
    for value, path in ((2**MAX_INT_BITS, "<root>"), ({"a": [1, -(2**MAX_INT_BITS)]}, "a[1]"),
                        ({"m": {2**9000: 1}}, "m"), ([1.5, 10**5000], "[1]")):
        with pytest.raises(gitstate.IntegerTooLargeError) as info:
            dumps(value)
        assert isinstance(info.value, gitstate.EncodingError) and f"at {path}:" in str(info.value)


def test_the_api_and_cli_refuse_a_huge_integer_in_one_line(repo: Path) -> None:
    run = gitstate.open_store(repo).create_run(run_id="r")
    with pytest.raises(gitstate.IntegerTooLargeError):
        run.checkpoint({"big": 10**5000})
    assert run.head() is None
    for args in (["checkpoint", "r", "--state", "-"], ["checkpoint", "r", "--meta", "n=" + "9" * 5000],
                 ["checkpoint", "r", "--meta", f"n={2**9000}"]):
        env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
        done = subprocess.run(["git", "agentos", *args], cwd=repo, capture_output=True, text=True, env=env,
                              input='{"big": ' + "9" * 5000 + "}", timeout=120, check=False)
        assert done.returncode != 0 and "Traceback" not in done.stderr, (args, done.stderr)
        assert done.stderr.strip().count("\n") == 0 and "integer" in done.stderr, done.stderr


def _hostile_checkpoint(store: gitstate.Store, run: gitstate.Run) -> str:
    """A checkpoint whose state and metadata hold a 1 MiB integer (and one as a map key), written
    as raw objects with pygit2, bypassing the encoder: what a pulled remote could deliver."""
    tip = run.head()
    assert tip is not None
    repo = pygit2.Repository(store.path)
    commit = repo[tip.id]
    root = commit.tree
    raw_value = cbor2.dumps(BIG, canonical=True)
    assert len(raw_value) > 1 << 20
    keyed = cbor2.dumps({-BIG: "key", "x": 1}, canonical=True)
    state = repo.TreeBuilder(root[cpfmt.STATE_TREE])
    state.insert(encode_component("big") + ".cbor", repo.create_blob(raw_value), pygit2.GIT_FILEMODE_BLOB)
    state.insert(encode_component("keyed") + ".cbor", repo.create_blob(keyed), pygit2.GIT_FILEMODE_BLOB)
    meta = cbor2.loads(repo[root[cpfmt.META].id].data)
    meta["metadata"] = {"huge": -BIG}
    top = repo.TreeBuilder(root)
    top.insert(cpfmt.STATE_TREE, state.write(), pygit2.GIT_FILEMODE_TREE)
    top.insert(cpfmt.META, repo.create_blob(cbor2.dumps(meta, canonical=True)), pygit2.GIT_FILEMODE_BLOB)
    new = repo.create_commit(None, commit.author, commit.committer, commit.message, top.write(), [str(tip.id)])
    store.core.move_ref(run.ref("main"), tip.id, str(new), "crafted")
    return str(new)


def test_a_stored_1_mib_integer_is_shown_as_a_stub_by_every_reader(repo: Path, tmp_path: Path) -> None:
    store = gitstate.open_store(repo)
    run = store.create_run(run_id="odd")
    first = run.checkpoint({"n": 1})
    crafted = _hostile_checkpoint(store, run)
    cp = store.checkpoint(crafted)
    assert cp.state["big"] == BIG and cp.metadata["huge"] == -BIG  # data written earlier keeps reading

    stub = {"$bigint": 8 * (1 << 20), "hex": "0x8000000000000000…"}
    show = agentos(repo, "show", "odd", "--json")
    assert show.returncode == 0, show.stderr
    data = json.loads(show.stdout)
    assert data["state"]["big"] == stub and data["metadata"]["huge"]["hex"] == "-0x8000000000000000…"
    assert data["state"]["keyed"] == {f"<integer of {BIG_BITS} bits: -0x8000000000000000…>": "key", "x": 1}
    log = agentos(repo, "log", "odd", "--json")
    assert log.returncode == 0 and json.loads(log.stdout)[0]["metadata"]["huge"]["$bigint"] == 8 * (1 << 20)
    diff = agentos(repo, "diff", first.id, crafted, "--json")
    assert diff.returncode == 0, diff.stderr
    assert '"$bigint": 8388608' in diff.stdout and len(diff.stdout) < 100_000
    text = agentos(repo, "show", "odd")
    assert text.returncode == 0 and f"<integer of {BIG_BITS} bits: 0x8000000000000000…>" in text.stdout
    text_diff = agentos(repo, "diff", first.id, crafted)
    assert text_diff.returncode == 0 and f"<integer of {BIG_BITS} bits" in text_diff.stdout
    assert len(show.stdout + log.stdout + text.stdout + text_diff.stdout) < 100_000

    page = tmp_path / "odd.html"
    html = agentos(repo, "view", "odd", "--html", str(page))
    assert html.returncode == 0, html.stderr
    body = page.read_text()
    assert '"$bigint":8388608' in body and page.stat().st_size < 2_000_000

    server = make_server(store).start()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
        conn.request("GET", f"/api/checkpoint?id={crafted}", headers={"Host": f"127.0.0.1:{server.port}"})
        resp = conn.getresponse()
        answer = resp.read()
        conn.close()
    finally:
        server.stop()
    assert resp.status == 200 and b'"$bigint":8388608' in answer and len(answer) < 100_000


def test_output_helpers_stub_only_beyond_the_bound() -> None:
    fits = 2**MAX_INT_BITS - 1
    assert jsonable([fits, {fits: 1}]) == [fits, {str(fits): 1}]
    assert readable(fits) == fits
    assert jsonable(2**MAX_INT_BITS)["$bigint"] == MAX_INT_BITS + 1
    assert readable(-(2**MAX_INT_BITS)).startswith(f"<integer of {MAX_INT_BITS + 1:,} bits: -0x")
    runner = CliRunner()
    assert runner.invoke(cli, ["help"], prog_name="git agentos").exit_code == 0
