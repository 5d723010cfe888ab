"""LangGraph memory in shards, as the code that introduced shards wrote it
(tests/compat/fixtures/memory-format3.tar.gz, made by make_memory_fixture.py): a namespace of 300
items and a root of 260 namespaces (state version 3) beside a small root (version 2). Read with the
current code: every item, and the current code continues it (a put rewrites one shard; below 257
items the namespace is flat and its root version 2 again). The expectations are hard-coded; a new
format gets a new fixture file."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from compat_support import git, unpack
from langgraph.store.base import PutOp
from make_memory_fixture import BIG, COUNT, SMALL, TENANTS, value

import gitstate
from gitstate.langgraph import GitStore
from gitstate.verify import verify

FIXTURE = Path(__file__).parent / "fixtures" / "memory-format3.tar.gz"
REFS = """\
cc8e443f5e23b2ca3d1d9ac755609ef726d2145d refs/agentos/main/runs/langgraph-store/heads/docs
0f97acda96ef233f12c9c0778ced8ce45c45ed61 refs/agentos/main/runs/langgraph-store/heads/tenants
30cb60a9771a4935e50a0f93f2a5af96daddef6b refs/agentos/main/runs/langgraph-store/heads/users
ddc49dd408bc5f66e13b5442abeedb0001cfeffd refs/agentos/main/runs/langgraph-store/run
"""
USERS = "refs/agentos/main/runs/langgraph-store/heads/users"
TENANTS_REF = "refs/agentos/main/runs/langgraph-store/heads/tenants"
BIG_TREE = "state/namespaces.map/users%2Eada.map"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return unpack(FIXTURE, tmp_path)


def test_fixture_is_as_written(repo: Path) -> None:
    assert git(repo, "for-each-ref", "--format=%(objectname) %(refname)", "refs/agentos/") == REFS
    assert git(repo, "ls-tree", "--name-only", f"{USERS}:{BIG_TREE}").split() == [
        "namespace.cbor", "seq.cbor", "shards.map"]
    with gitstate.open_store(repo) as store:
        assert verify(store).ok
        run = store.get_run("langgraph-store")
        users, docs, tenants = run.head("users"), run.head("docs"), run.head("tenants")
        assert users is not None and docs is not None and tenants is not None
        assert (users.state["v"], docs.state["v"], tenants.state["v"]) == (3, 2, 3)
    assert git(repo, "ls-tree", "--name-only", f"{TENANTS_REF}:state").split() == [
        "format.cbor", "namespace_shards.map", "v.cbor"]


def test_every_item_reads_with_its_key_order(repo: Path) -> None:
    memory = GitStore.from_path(repo)
    items = memory.search(BIG, limit=1000)
    assert len(items) == COUNT
    assert {item.key: item.value for item in items} == {f"k{n}": value(n) for n in range(COUNT)}
    got = memory.get(BIG, "k7")
    assert got is not None and list(got.value) == ["zeta", "alpha", "mid"]
    small = memory.get(SMALL, "readme")
    assert small is not None and small.value == value(-1)
    tenants = memory.search(("tenants",), limit=1000)
    assert sorted((item.namespace, item.value["zeta"]) for item in tenants) == sorted(
        (("tenants", f"t{n}"), n) for n in range(TENANTS))
    assert len(memory.list_namespaces(prefix=("tenants",), limit=1000)) == TENANTS


def test_the_current_code_continues_it(repo: Path) -> None:
    memory = GitStore.from_path(repo)
    before = git(repo, "rev-parse", USERS).strip()
    memory.put(BIG, "k7", {"changed": True})
    after = git(repo, "rev-parse", USERS).strip()
    shard = hashlib.sha1(b"k7").hexdigest()[:2]
    assert git(repo, "diff-tree", "-r", "--name-only", before, after).split() == [
        "meta.cbor", f"{BIG_TREE}/shards.map/{shard}.map/k7.cbor"]
    before = git(repo, "rev-parse", TENANTS_REF).strip()
    memory.put(("tenants", "t3"), "profile", {"changed": True})
    after = git(repo, "rev-parse", TENANTS_REF).strip()
    shard = hashlib.sha1(b"tenants.t3").hexdigest()[:2]
    assert git(repo, "diff-tree", "-r", "--name-only", before, after).split() == [
        "meta.cbor", f"state/namespace_shards.map/{shard}.map/tenants%2Et3.map/items.map/profile.cbor"]
    memory.batch([PutOp(BIG, f"k{n}", None) for n in range(50)])
    assert "items.map" in git(repo, "ls-tree", "--name-only", f"{USERS}:{BIG_TREE}").split()
    fresh = GitStore.from_path(repo)
    assert len(fresh.search(BIG, limit=1000)) == COUNT - 50
    with gitstate.open_store(repo) as store:
        head = store.get_run("langgraph-store").head("users")
        assert head is not None and head.state["v"] == 2
        assert verify(store).ok
