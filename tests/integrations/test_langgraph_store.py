"""gitstate.langgraph.GitStore against LangGraph's own InMemoryStore: the same put/get/search/
delete/list_namespaces operations (seeded random sequences, batches, async, semantic search with an
embedding function) give the same results; every change is a commit on the namespace root's branch
that push/pull share (also after a diverged pull, whose kept copy is not memory, and for roots named
like branches push keeps back); TTL; a compiled graph with GitCheckpointSaver and GitStore runs end
to end."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any, TypedDict

import pytest
from conftest import git, make_repo
from langgraph.graph import END, START, StateGraph
from langgraph.store.base import BaseStore, GetOp, InvalidNamespaceError, ListNamespacesOp, PutOp, SearchOp
from langgraph.store.memory import InMemoryStore
from remote_helpers import bare, machine

import gitstate
from gitstate.langgraph import GitCheckpointSaver, GitStore
from gitstate.langgraph import store as store_module
from gitstate.verify import verify

NAMESPACES = [("users", "1"), ("users", "2"), ("docs",), ("users", "1", "notes"), ("x", "y", "z"), ("docs", "a")]
TEXTS = ["apple pie", "banana", "cherry", "a b c", "apple"]


def embed(texts: Any) -> list[list[float]]:
    """A deterministic embedding function (no network)."""
    return [[float(len(t)), float(sum(map(ord, t)) % 97), float(t.count("a")) + 1.0, float(t.count(" "))]
            for t in texts]


INDEX: Any = {"dims": 4, "embed": embed, "fields": ["text"]}


def view(result: Any) -> Any:
    """What both stores must agree on (timestamps differ by construction)."""
    if result is None:
        return None
    if isinstance(result, list):
        return [view(r) for r in result]
    if isinstance(result, tuple):
        return result
    return (result.namespace, result.key, result.value, getattr(result, "score", "-"))


def random_ops(rnd: random.Random, count: int, semantic: bool) -> list[tuple[str, Any, dict[str, Any]]]:
    ops: list[tuple[str, Any, dict[str, Any]]] = []
    for _ in range(count):
        ns = rnd.choice(NAMESPACES)
        key = rnd.choice("abcde")
        r = rnd.random()
        if r < 0.4:
            value = {"text": rnd.choice(TEXTS), "n": rnd.randint(0, 5), "tags": {"t": rnd.choice([1, 2])},
                     "list": [rnd.randint(0, 2)]}
            ops.append(("put", (ns, key, value), {"index": rnd.choice([None, None, False, ["text"]])}))
        elif r < 0.5:
            ops.append(("delete", (ns, key), {}))
        elif r < 0.65:
            ops.append(("get", (rnd.choice([*NAMESPACES, ("never",)]), key), {}))
        elif r < 0.87:
            kw: dict[str, Any] = {
                "filter": rnd.choice([None, {"n": 3}, {"n": {"$gt": 2}}, {"n": {"$lte": 1, "$ne": 0}},
                                      {"tags": {"t": 1}}, {"list": [1]}, {"missing": None}]),
                "limit": rnd.choice([1, 3, 10]), "offset": rnd.choice([0, 1, 2])}
            if semantic and rnd.random() < 0.5:
                kw["query"] = rnd.choice(TEXTS)
            ops.append(("search", rnd.choice([(), ("users",), ("users", "1"), ("docs",), ("nope",)]), kw))
        else:
            ops.append(("list", None, {"prefix": rnd.choice([None, ("users",), ("docs",)]),
                                       "suffix": rnd.choice([None, ("1",), ("*", "z")]),
                                       "max_depth": rnd.choice([None, 1, 2]), "limit": rnd.choice([100, 2]),
                                       "offset": rnd.choice([0, 1])}))
    return ops


def apply(store: BaseStore, ops: list[tuple[str, Any, dict[str, Any]]]) -> list[Any]:
    out = []
    for op, args, kw in ops:
        if op == "put":
            out.append(store.put(*args, **kw))
        elif op == "delete":
            out.append(store.delete(*args))
        elif op == "get":
            out.append(view(store.get(*args)))
        elif op == "search":
            out.append(view(store.search(args, **kw)))
        else:
            out.append(store.list_namespaces(**kw))
    return out


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
@pytest.mark.parametrize("semantic", [False, True])
def test_random_operations_match_in_memory_store(repo: Path, seed: int, semantic: bool) -> None:
    ops = random_ops(random.Random(seed), 120, semantic)
    index = INDEX if semantic else None
    ours = apply(GitStore.from_path(repo, index=index), ops)
    theirs = apply(InMemoryStore(index=index), ops)
    for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        assert a == b, (i, ops[i])
    # a fresh instance (another process) reads the same items
    fresh = GitStore.from_path(repo, index=index)
    reference = InMemoryStore(index=index)
    apply(reference, ops)
    assert view(fresh.search((), limit=1000)) == view(reference.search((), limit=1000))


def test_bar_mixed_sequence_and_batches(repo: Path) -> None:
    ours, theirs = GitStore.from_path(repo), InMemoryStore()
    for store in (ours, theirs):
        store.put(("users", "1"), "prefs", {"theme": "dark", "n": 1})
        store.put(("users", "2"), "prefs", {"theme": "light", "n": 2})
        store.put(("docs",), "d1", {"text": "hello", "n": 3})
    batch = [GetOp(("users", "1"), "prefs"), PutOp(("users", "1"), "prefs", {"theme": "blue", "n": 5}),
             GetOp(("users", "1"), "prefs"), SearchOp(("users",), filter={"n": {"$gte": 2}}),
             PutOp(("docs",), "d1", None), ListNamespacesOp(match_conditions=(), max_depth=None, limit=10, offset=0),
             PutOp(("users", "1"), "prefs", {"theme": "green", "n": 6}), GetOp(("docs",), "d1")]
    assert view(ours.batch(batch)) == view(theirs.batch(batch))  # reads see the store before the batch
    for store in (ours, theirs):
        store.delete(("users", "2"), "prefs")
    checks = [lambda s: view(s.get(("users", "1"), "prefs")), lambda s: view(s.get(("docs",), "d1")),
              lambda s: view(s.search(("users",))), lambda s: s.list_namespaces(),
              lambda s: s.list_namespaces(prefix=("users",), max_depth=1)]
    for check in checks:
        assert check(ours) == check(theirs)


async def test_async_api_matches(repo: Path) -> None:
    ours, theirs = GitStore.from_path(repo, index=INDEX), InMemoryStore(index=INDEX)
    for store in (ours, theirs):
        for i, text in enumerate(TEXTS):
            await store.aput(("docs", str(i % 2)), f"k{i}", {"text": text})
        await store.adelete(("docs", "0"), "k2")
    assert view(await ours.asearch(("docs",), query="apple", limit=3)) == view(
        await theirs.asearch(("docs",), query="apple", limit=3))
    assert view(await ours.aget(("docs", "1"), "k1")) == view(await theirs.aget(("docs", "1"), "k1"))
    assert await ours.alist_namespaces() == await theirs.alist_namespaces()


def test_memory_has_history_and_travels(tmp_path: Path) -> None:
    remote = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    here, there = make_repo(tmp_path / "here"), make_repo(tmp_path / "there")
    for repo in (here, there):
        git(repo, "remote", "add", "origin", str(remote))
        git(repo, "config", "agentos.pushRemotes", "origin")
    mine = GitStore.from_path(here)
    mine.put(("users", "1"), "prefs", {"theme": "dark"})
    mine.put(("users", "1"), "prefs", {"theme": "light"})
    mine.put(("docs",), "d", {"text": "x"})
    mine.delete(("docs",), "d")
    log = git(here, "log", "--format=%s", "refs/agentos/main/runs/langgraph-store/heads/users").splitlines()
    assert log == ["memory · step 1 · put", "memory · step 0 · put"]
    assert len(git(here, "log", "--oneline", "refs/agentos/main/runs/langgraph-store/heads/docs").splitlines()) == 2
    store = gitstate.open_store(here)
    assert store.get_run("langgraph-store").workflow == "langgraph-store"
    first = list(store.get_run("langgraph-store").history("users"))[-1]
    assert first.state["namespaces"]["users.1"]["items"]["prefs"]["value"] == {"theme": "dark"}
    gitstate.push(store, "origin")
    gitstate.pull(gitstate.open_store(there), "origin")
    theirs = GitStore.from_path(there)
    got = theirs.get(("users", "1"), "prefs")
    assert got is not None and got.value == {"theme": "light"}
    assert theirs.list_namespaces() == [("docs",), ("users", "1")]
    assert verify(gitstate.open_store(there)).ok


def agentos(cwd: Path, *args: str, code: int = 0) -> str:
    """``git agentos ARGS`` in ``cwd`` (this interpreter's CLI first on PATH); its stdout."""
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    done = subprocess.run(["git", "agentos", *args], cwd=cwd, capture_output=True, text=True, env=env, check=False)
    assert done.returncode == code, (args, done.returncode, done.stdout, done.stderr)
    return done.stdout


def machines(tmp_path: Path) -> tuple[Path, Path]:
    server = bare(tmp_path / "server.git")
    return machine(tmp_path / "A", server.as_uri()), machine(tmp_path / "B", server.as_uri())


def same_memory(ours: BaseStore, theirs: BaseStore) -> None:
    """Both stores list, search and get the same namespaces and items (each once)."""
    names = theirs.list_namespaces()
    assert ours.list_namespaces() == names
    assert view(ours.search((), limit=1000)) == view(theirs.search((), limit=1000))
    for root in dict.fromkeys(ns[0] for ns in names):
        assert view(ours.search((root,), limit=1000)) == view(theirs.search((root,), limit=1000))
        assert ours.list_namespaces(prefix=(root,)) == theirs.list_namespaces(prefix=(root,))
    for item in theirs.search((), limit=1000):
        assert view(ours.get(item.namespace, item.key)) == view(theirs.get(item.namespace, item.key))


def test_diverged_pull_memory_is_ours_once(tmp_path: Path) -> None:
    """After a pull that kept the remote's line of a root as ``<root>@origin``, memory is this
    machine's branch only (the copy is not read, nor swept), and the README's ways out work."""
    a, b = machines(tmp_path)
    GitStore.from_path(a).put(("users", "ada"), "prefs", {"who": "A1"})
    agentos(a, "push", "origin")
    agentos(b, "pull", "origin")
    mine = GitStore.from_path(b)
    mine.put(("users", "bob"), "prefs", {"who": "B1"})
    theirs = GitStore.from_path(a)
    theirs.put(("users", "ada"), "prefs", {"who": "A2"})
    theirs.put(("users", "ada"), "brief", {"who": "A2"}, ttl=0.0005)  # 30 ms: expired when B sweeps
    agentos(a, "push", "origin")
    assert "diverged langgraph-store users -> users@origin" in agentos(b, "pull", "origin")
    expected = InMemoryStore()
    expected.put(("users", "ada"), "prefs", {"who": "A1"})
    expected.put(("users", "bob"), "prefs", {"who": "B1"})
    same_memory(mine, expected)
    same_memory(GitStore.from_path(b), expected)
    run = gitstate.open_store(b).get_run("langgraph-store")
    copy = run.tip("users@origin")
    time.sleep(0.1)
    assert mine.sweep_ttl() == 0  # the expired item is on the kept copy: not memory, not swept
    assert run.tip("users@origin") == copy
    # keep yours (local only): delete the copy; push still refuses users, the next pull keeps it again
    agentos(b, "branch", "-D", "langgraph-store@users@origin")
    assert "rejected langgraph-store users" in agentos(b, "push", "origin", code=1)
    assert "diverged langgraph-store users -> users@origin" in agentos(b, "pull", "origin")
    same_memory(GitStore.from_path(b), expected)
    # keep theirs: your line on a fork (not memory), users on origin's line, the copy deleted, push
    agentos(b, "fork", "langgraph-store@users", "@users", "users-mine")
    agentos(b, "rollback", "langgraph-store@users", "@users@origin")
    agentos(b, "branch", "-d", "langgraph-store@users@origin")
    agentos(b, "push", "origin")
    expected = InMemoryStore()
    expected.put(("users", "ada"), "prefs", {"who": "A2"})
    expected.put(("users", "ada"), "brief", {"who": "A2"})
    same_memory(mine, expected)
    agentos(a, "pull", "origin")
    same_memory(GitStore.from_path(a), expected)
    agentos(b, "undo", "langgraph-store@users")  # the rollback is undoable: yours again
    assert GitStore.from_path(b).get(("users", "bob"), "prefs") is not None


def test_roots_named_like_branches_push_keeps_back_are_shared(tmp_path: Path) -> None:
    """A root label that is restore's safety branch name, or holds "@" (as a pull's kept copies
    do), is stored on an escaped branch name, so push shares it like any other root."""
    a, b = machines(tmp_path)
    names = [("restore-safety",), ("restore-safety", "x"), ("users@origin", "ada"), ("ada@example",), ("main",),
             ("users",), ("restore-safety@origin-2",), ("@" * 60 + "r" * 60,)]
    ours, expected = GitStore.from_path(a), InMemoryStore()
    for store in (ours, expected):
        for i, ns in enumerate(names):
            store.put(ns, "k", {"i": i})
    same_memory(ours, expected)
    pushed = agentos(a, "push", "origin")
    assert "local" not in pushed and "kept" not in pushed
    agentos(b, "pull", "origin")
    same_memory(GitStore.from_path(b), expected)
    branches = set(gitstate.open_store(a).get_run("langgraph-store").branches())
    assert {"restore-safety.ns", "users.origin.ns", "ada.example.ns", "main", "users",
            "restore-safety.origin-2.ns"} <= branches and len(branches) == 7
    assert not any(br == "restore-safety" or "@" in br for br in branches)


def test_memory_an_earlier_version_stored_on_such_branches_reads(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Roots earlier versions stored on their label's own branch (``restore-safety``, ``ada@home``)
    still read; the next write continues each on its new branch (the old tip its parent), which
    push then shares."""
    a, b = machines(tmp_path)
    expected = InMemoryStore()
    puts = [(("restore-safety",), "k", {"v": 1}), (("ada@home", "prefs"), "k", {"v": 2}), (("users",), "k", {"v": 3})]
    with monkeypatch.context() as patch:
        patch.setattr(store_module, "_branch", lambda root: root)  # earlier versions' names (short labels)
        old = GitStore.from_path(a)
        for ns, key, value in puts:
            old.put(ns, key, value)
            expected.put(ns, key, value)
    run = gitstate.open_store(a).get_run("langgraph-store")
    assert set(run.branches()) == {"restore-safety", "ada@home", "users"}
    ours = GitStore.from_path(a)
    same_memory(ours, expected)
    old_tip = run.tip("restore-safety")
    for store in (ours, expected):
        store.put(("restore-safety",), "k2", {"v": 4})
        store.put(("ada@home", "prefs"), "k", {"v": 5})
    same_memory(ours, expected)
    same_memory(GitStore.from_path(a), expected)
    agentos(a, "push", "origin")
    agentos(b, "pull", "origin")
    same_memory(GitStore.from_path(b), expected)
    new = run.head("restore-safety.ns")
    assert new is not None and new.parent_id == old_tip
    assert run.tip("ada.home.ns") is not None


def test_kept_tip_is_what_a_parse_of_it_gives(repo: Path) -> None:
    """A write keeps the tip it made in memory (the next put parses nothing): for every root's
    branch, that is equal to a parse of the tip from git."""
    store = GitStore.from_path(repo)
    apply(store, random_ops(random.Random(7), 150, False))
    store.put(("users", "1"), "more", {"n": 1})
    store.delete(("docs",), "a")
    kept = dict(store._roots)
    assert kept
    written = 0
    for branch, root in kept.items():
        assert root.tip == store.store.core.read_ref(store._branch_ref(branch))
        if root.tip is not None:  # (a root only read while it held nothing is kept as None)
            assert root == store._parse(root.tip)
            written += 1
    assert written >= 3  # users, docs, x


def test_a_namespace_of_many_items_is_stored_in_shards(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past SHARD_AT items a namespace is stored in shards (by the SHA-1 of the key), so a put
    rewrites one shard; the root's state is then version 3, and back to version 2 (what earlier
    versions read) once the namespace is small again. Everything reads back as InMemoryStore's."""
    import hashlib

    from gitstate.errors import CorruptObjectError
    from gitstate.format.names import decode_component

    ours, theirs = GitStore.from_path(repo), InMemoryStore()
    ns = ("users", "big")
    n = store_module.SHARD_AT
    ops = [PutOp(ns, f"k{i}", {"i": i}) for i in range(n)] + [PutOp(("users", "small"), "x", {"i": -1})]
    for s in (ours, theirs):
        s.batch(ops)
    tip = ours.store.get_run(store_module.DEFAULT_NAME).head("users")
    assert tip is not None and tip.state["v"] == 2
    assert "items.map" in git(repo, "ls-tree", "--name-only", f"{tip.id}:state/namespaces.map/users%2Ebig.map").split()
    for s in (ours, theirs):
        s.put(ns, "one more", {"i": n})
    tip = ours.store.get_run(store_module.DEFAULT_NAME).head("users")
    assert tip is not None and tip.state["v"] == 3
    big = f"{tip.id}:state/namespaces.map/users%2Ebig.map"
    assert git(repo, "ls-tree", "--name-only", big).split() == ["namespace.cbor", "seq.cbor", "shards.map"]
    paths = git(repo, "ls-tree", "-r", "--name-only", f"{big}/shards.map").split()
    assert len(paths) == n + 1 and len({p.split("/")[0] for p in paths}) > 100
    for path in paths:  # <shard>.map/<key>.cbor, the shard named by the key's SHA-1
        shard, name = path.split("/")
        key = decode_component(name.removesuffix(".cbor"))
        assert shard == hashlib.sha1(key.encode()).hexdigest()[:2] + ".map", path
    # a put rewrites one shard: one item path changes (and the checkpoint's own meta.cbor)
    ours.put(ns, "k7", {"i": "changed"})
    theirs.put(ns, "k7", {"i": "changed"})
    after = ours.store.get_run(store_module.DEFAULT_NAME).head("users")
    assert after is not None
    changed = git(repo, "diff-tree", "-r", "--name-only", tip.id, after.id).split()
    k7 = hashlib.sha1(b"k7").hexdigest()[:2]
    assert changed == ["meta.cbor", f"state/namespaces.map/users%2Ebig.map/shards.map/{k7}.map/k7.cbor"]
    fresh = GitStore.from_path(repo)
    assert view(fresh.search(ns, limit=1000)) == view(theirs.search(ns, limit=1000))
    assert view(fresh.get(ns, "k7")) == view(theirs.get(ns, "k7"))
    assert verify(gitstate.open_store(repo)).ok
    for root in ours._roots.values():  # the kept tip is what a parse of it gives
        assert root.tip is None or root == ours._parse(root.tip)
    for s in (ours, theirs):  # small again: version 2, items.map/
        s.batch([PutOp(ns, f"k{i}", None) for i in range(10)])
    tip = ours.store.get_run(store_module.DEFAULT_NAME).head("users")
    assert tip is not None and tip.state["v"] == 2
    assert "items.map" in git(repo, "ls-tree", "--name-only", f"{tip.id}:state/namespaces.map/users%2Ebig.map").split()
    assert view(GitStore.from_path(repo).search(ns, limit=1000)) == view(theirs.search(ns, limit=1000))
    # an item in a shard its key does not name is damage, reported as such
    monkeypatch.setattr(store_module, "_shard", lambda key: "00")
    wrong = GitStore.from_path(repo)
    wrong.batch([PutOp(("other",), f"k{i}", {"i": i}) for i in range(n + 1)])
    monkeypatch.undo()
    with pytest.raises(CorruptObjectError, match="shard"):
        GitStore.from_path(repo).get(("other",), "k1")
    report = verify(gitstate.open_store(repo))
    assert not report.ok and "is in shard 00" in str(report.problems)
    # shards in a state that says version 2 (which has none) is damage too
    monkeypatch.setattr(store_module, "SHARDED_VERSION", 2)
    GitStore.from_path(repo).put(("third",), "k", {"i": 0})
    GitStore.from_path(repo).batch([PutOp(("third",), f"k{i}", {"i": i}) for i in range(n + 1)])
    monkeypatch.undo()
    with pytest.raises(CorruptObjectError, match="version 2"):
        GitStore.from_path(repo).get(("third",), "k1")


def test_a_root_of_many_namespaces_is_stored_in_shards(repo: Path) -> None:
    """Past SHARD_AT namespaces under one root label (a namespace per user), the root's
    namespaces are stored in shards by name: a put rewrites its namespace's shard, and the other
    namespaces are neither copied nor listed again. Reads match InMemoryStore's."""
    import hashlib

    from gitstate.errors import CorruptObjectError
    from gitstate.format.names import decode_component

    ours, theirs = GitStore.from_path(repo), InMemoryStore()
    n = store_module.SHARD_AT + 1
    for s in (ours, theirs):
        s.batch([PutOp(("users", f"u{i}", "memories"), "prefs", {"i": i}) for i in range(n)])
    run = ours.store.get_run(store_module.DEFAULT_NAME)
    tip = run.head("users")
    assert tip is not None and tip.state["v"] == 3
    assert git(repo, "ls-tree", "--name-only", f"{tip.id}:state").split() == [
        "format.cbor", "namespace_shards.map", "v.cbor"]
    paths = git(repo, "ls-tree", "-r", "-d", "--name-only", f"{tip.id}:state/namespace_shards.map").split()
    names = [p for p in paths if p.count("/") == 1]
    assert len(names) == n
    for path in names:  # <shard>.map/<namespace name>.map, the shard named by the name's SHA-1
        shard, name = path.split("/")
        key = decode_component(name.removesuffix(".map"))
        assert shard == hashlib.sha1(key.encode()).hexdigest()[:2] + ".map", path
    for s in (ours, theirs):
        s.put(("users", "u7", "memories"), "prefs", {"i": "changed"})
    after = run.head("users")
    assert after is not None
    changed = git(repo, "diff-tree", "-r", "--name-only", tip.id, after.id).split()
    shard = hashlib.sha1(b"users.u7.memories").hexdigest()[:2]
    assert changed == ["meta.cbor",
                       f"state/namespace_shards.map/{shard}.map/users%2Eu7%2Ememories.map/items.map/prefs.cbor"]
    fresh = GitStore.from_path(repo)
    assert view(fresh.search(("users",), limit=1000)) == view(theirs.search(("users",), limit=1000))
    assert fresh.list_namespaces(prefix=("users",), limit=1000) == theirs.list_namespaces(prefix=("users",), limit=1000)
    assert verify(gitstate.open_store(repo)).ok
    for root in ours._roots.values():  # the kept tip is what a parse of it gives
        assert root.tip is None or root == ours._parse(root.tip)
    # a namespace in a shard its name does not name is damage: two shard trees swapped by hand
    def mktree(lines: list[str]) -> str:
        return subprocess.run(["git", "mktree"], cwd=repo, input="".join(f"{line}\n" for line in lines),
                              capture_output=True, text=True, check=True).stdout.strip()

    def replaced(treeish: str, name: str, oid: str) -> str:
        lines = git(repo, "ls-tree", treeish).splitlines()
        return mktree([f"{line.split()[0]} {line.split()[1]} {oid}\t{name}" if line.endswith(f"\t{name}") else line
                       for line in lines])

    shard_lines = git(repo, "ls-tree", f"{after.id}:state/namespace_shards.map").splitlines()
    a, b = (line.split()[2] for line in shard_lines[:2])
    swapped = mktree([line.replace(a, "@").replace(b, a).replace("@", b) for line in shard_lines])
    state = replaced(f"{after.id}:state", "namespace_shards.map", swapped)
    bad = git(repo, "commit-tree", replaced(after.id, "state", state), "-p", after.id, "-m", "damaged").strip()
    git(repo, "update-ref", "refs/agentos/main/runs/langgraph-store/heads/users", bad, after.id)
    with pytest.raises(CorruptObjectError, match="shard"):
        GitStore.from_path(repo).get(("users", "u1", "memories"), "prefs")
    report = verify(gitstate.open_store(repo))
    assert not report.ok and "is in shard" in str(report.problems)
    # a shard stored as a value that decodes to the same map: verify tells it from a tree too
    import pygit2

    from gitstate.format import encoding
    from gitstate.format.statetree import StateReader

    first = shard_lines[0].split("\t")[1].removesuffix(".map")
    value = StateReader(pygit2.Repository(str(repo))).mapping(shard_lines[0].split()[2])  # the shard, decoded
    blob = subprocess.run(["git", "hash-object", "-w", "--stdin"], cwd=repo, input=encoding.dumps(value, "x"),
                          capture_output=True, check=True).stdout.decode().strip()
    as_blob = mktree([f"100644 blob {blob}\t{first}.cbor", *shard_lines[1:]])
    state = replaced(f"{after.id}:state", "namespace_shards.map", as_blob)
    bad = git(repo, "commit-tree", replaced(after.id, "state", state), "-p", after.id, "-m", "damaged").strip()
    git(repo, "update-ref", "refs/agentos/main/runs/langgraph-store/heads/users", bad)
    report = verify(gitstate.open_store(repo))
    assert not report.ok and f"'{first}' is not a tree" in str(report.problems), report.problems
    # an empty shard is not what a writer makes of the same memory: damage too
    unused = next(f"{b:02x}" for b in range(256) if f"{b:02x}.map" not in {line.split("\t")[1] for line in shard_lines})
    empty = mktree([f"040000 tree {mktree([])}\t{unused}.map", *shard_lines])
    state = replaced(f"{after.id}:state", "namespace_shards.map", empty)
    bad = git(repo, "commit-tree", replaced(after.id, "state", state), "-p", after.id, "-m", "damaged").strip()
    git(repo, "update-ref", "refs/agentos/main/runs/langgraph-store/heads/users", bad)
    with pytest.raises(CorruptObjectError, match="empty"):
        GitStore.from_path(repo).get(("users", "u1", "memories"), "prefs")
    assert "is empty" in str(verify(gitstate.open_store(repo)).problems)


def test_a_batch_orders_new_namespaces_across_roots_as_in_memory_store(repo: Path) -> None:
    """New namespaces take their place in the order at their first put or delete in a batch,
    whichever roots they are under (the roots are written one after another)."""
    ours, theirs = GitStore.from_path(repo), InMemoryStore()
    batch = [PutOp(("a", "1"), "k", {"n": 1}), PutOp(("b",), "k", {"n": 2}), PutOp(("c", "x"), "gone", None),
             PutOp(("a", "2"), "k", {"n": 3}), PutOp(("c", "y"), "k", {"n": 4})]
    for s in (ours, theirs):
        s.batch(batch)
    assert ours.list_namespaces() == theirs.list_namespaces()
    assert view(ours.search((), limit=10)) == view(theirs.search((), limit=10))
    fresh = GitStore.from_path(repo)  # (a fresh instance knows no namespace that holds nothing)
    assert view(fresh.search((), limit=10)) == view(theirs.search((), limit=10))


def test_two_instances_interleave_on_one_root(repo: Path) -> None:
    """Each instance's kept tip is by tip id: a put after another writer moved the branch builds
    on that writer's tip, and no item is lost."""
    a, b = GitStore.from_path(repo), GitStore.from_path(repo)
    for i in range(6):
        (a if i % 2 else b).put(("shared", "x"), f"k{i}", {"i": i})
        (b if i % 3 else a).put(("shared",), f"top{i}", {"i": i})
    a.delete(("shared", "x"), "k0")
    for store in (a, b, GitStore.from_path(repo)):
        assert sorted(item.key for item in store.search(("shared",), limit=100)) == sorted(
            [f"k{i}" for i in range(1, 6)] + [f"top{i}" for i in range(6)])


def test_two_processes_write_one_root(repo: Path) -> None:
    script = textwrap.dedent("""
        import sys
        from gitstate.langgraph import GitStore
        s = GitStore.from_path(sys.argv[2])
        for i in range(25):
            s.put(("shared", sys.argv[1]), f"k{i}", {"i": i})
            s.put(("shared",), f"{sys.argv[1]}{i}", {"i": i})
    """)
    procs = [subprocess.Popen([sys.executable, "-c", script, tag, str(repo)]) for tag in ("a", "b")]
    assert [p.wait(timeout=180) for p in procs] == [0, 0]
    store = GitStore.from_path(repo)
    assert len(store.search(("shared",), limit=1000)) == 100
    assert store.list_namespaces() == [("shared",), ("shared", "a"), ("shared", "b")]


def test_unusual_names(repo: Path) -> None:
    ours, theirs = GitStore.from_path(repo), InMemoryStore()
    names = [(("a/b", "c%d", "é ü"), ""), (("a/b", "c%d", "é ü"), "k/e y"), (("r" * 300, "sub"), "k" * 300)]
    for store in (ours, theirs):
        for i, (ns, key) in enumerate(names):
            store.put(ns, key, {"i": i, "v": [1, 2.5, None, True, {"x": "y"}]})
    assert view(ours.search((), limit=10)) == view(theirs.search((), limit=10))
    assert ours.list_namespaces(max_depth=2) == theirs.list_namespaces(max_depth=2)
    fresh = GitStore.from_path(repo)
    assert view(fresh.get(("r" * 300, "sub"), "k" * 300)) == view(theirs.get(("r" * 300, "sub"), "k" * 300))
    assert view(fresh.search(("r" * 300,))) == view(theirs.search(("r" * 300,)))


def test_ttl(repo: Path) -> None:
    store = GitStore.from_path(repo, ttl={"refresh_on_read": True, "omit_expired": True})
    assert store.supports_ttl
    store.put(("t",), "short", {"v": 1}, ttl=0.0005)  # 30 ms
    store.put(("t",), "long", {"v": 2}, ttl=60)
    store.put(("t",), "forever", {"v": 3})
    run = gitstate.open_store(repo).get_run("langgraph-store")
    before = run.tip("t")
    assert store.get(("t",), "long") is not None
    assert run.tip("t") != before  # reading refreshed the expiry: one commit
    time.sleep(0.1)
    assert store.get(("t",), "short") is None  # expired items are omitted
    assert [i.key for i in store.search(("t",))] == ["long", "forever"]
    assert store.sweep_ttl() == 1
    plain = GitStore.from_path(repo)
    assert [i.key for i in plain.search(("t",))] == ["long", "forever"]
    with pytest.raises(NotImplementedError):
        InMemoryStore().put(("t",), "x", {"v": 1}, ttl=1)  # the reference store has no TTL at all


def test_bad_input_writes_nothing(repo: Path) -> None:
    store = GitStore.from_path(repo)
    store.put(("a",), "ok", {"v": 1})
    tip = gitstate.open_store(repo).get_run("langgraph-store").tip("a")
    with pytest.raises(gitstate.EncodingError):
        store.batch([PutOp(("a",), "x", {"v": 2}), PutOp(("b",), "bad", {"v": object()})])
    assert gitstate.open_store(repo).get_run("langgraph-store").tip("a") == tip
    assert store.get(("a",), "x") is None
    with pytest.raises(InvalidNamespaceError):
        store.put(("a.b",), "k", {"v": 1})
    with pytest.raises(InvalidNamespaceError):
        store.put((), "k", {"v": 1})
    gitstate.open_store(repo).create_run(workflow="openai-agents", run_id="taken")
    with pytest.raises(gitstate.ForeignRunError):
        GitStore.from_path(repo, name="taken").put(("a",), "k", {"v": 1})
    run = gitstate.open_store(repo).get_run("langgraph-store")
    head = run.head("a")
    assert head is not None
    state = head.state
    state["namespaces"]["a"]["items"]["ok"]["seq"] = "not a number"
    run.checkpoint(state, branch="a")
    with pytest.raises(gitstate.CorruptObjectError):
        GitStore.from_path(repo).get(("a",), "ok")
    assert any("langgraph-store state" in p.message for p in verify(gitstate.open_store(repo)).problems)


class Chat(TypedDict):
    user: str
    question: str
    answer: str


def remember(state: Chat, *, store: BaseStore) -> dict[str, Any]:
    store.put(("memories", state["user"]), f"q{len(store.search(('memories', state['user'])))}",
              {"text": state["question"]})
    return {}


def answer(state: Chat, *, store: BaseStore) -> dict[str, Any]:
    seen = [item.value["text"] for item in store.search(("memories", state["user"]))]
    return {"answer": f"I remember {len(seen)}: " + ", ".join(seen)}


def test_graph_with_saver_and_store(repo: Path) -> None:
    builder = StateGraph(Chat)
    builder.add_node("remember", remember)
    builder.add_node("answer", answer)
    builder.add_edge(START, "remember")
    builder.add_edge("remember", "answer")
    builder.add_edge("answer", END)
    graph = builder.compile(checkpointer=GitCheckpointSaver.from_path(repo), store=GitStore.from_path(repo))
    graph.invoke({"user": "ada", "question": "what is git?", "answer": ""}, {"configurable": {"thread_id": "t1"}})
    out = graph.invoke({"user": "ada", "question": "and gitstate?", "answer": ""},
                       {"configurable": {"thread_id": "t2"}})
    assert out["answer"] == "I remember 2: what is git?, and gitstate?"
    store = gitstate.open_store(repo)
    assert {s.id: s.workflow for s in store.list_runs()} == {"t1": "langgraph", "t2": "langgraph",
                                                              "langgraph-store": "langgraph-store"}
    # the threads reached END; memory never finishes: saved, not running
    assert {s.id: s.status for s in store.list_runs()} == {"t1": "completed", "t2": "completed",
                                                            "langgraph-store": "saved"}
    # a new process (fresh graph objects) finds the memory and the thread state
    again = builder.compile(checkpointer=GitCheckpointSaver.from_path(repo), store=GitStore.from_path(repo))
    snapshot = again.get_state({"configurable": {"thread_id": "t2"}})
    assert snapshot.values["answer"] == out["answer"]
    assert verify(store).ok


def test_values_keep_their_key_order(repo: Path) -> None:
    """A value comes back with its keys (and its nested maps' keys) in the order it was put, as from
    LangGraph's own stores, also from a fresh store, a search, and after a TTL refresh."""
    value = {"zeta": 1, "alpha": {"y": [{"q": 0, "b": 1.5}], "c": None}, "mid": "x", "Bee": [1, {"z": 1, "a": 2}]}
    store = GitStore.from_path(repo)
    store.put(("users", "ada"), "prefs", value)
    store.put(("users", "ada"), "short", {"b": 1, "a": 2}, ttl=60)
    reference = InMemoryStore()
    reference.put(("users", "ada"), "prefs", value)

    def order(v: Any) -> Any:
        if isinstance(v, dict):
            return [(k, order(x)) for k, x in v.items()]
        return [order(x) for x in v] if isinstance(v, list) else v

    for s in (store, GitStore.from_path(repo)):
        item = s.get(("users", "ada"), "prefs")
        assert item is not None and order(item.value) == order(reference.get(("users", "ada"), "prefs").value)
        (found,) = [i for i in s.search(("users",)) if i.key == "prefs"]
        assert order(found.value) == order(value)
    refreshed = GitStore.from_path(repo).get(("users", "ada"), "short", refresh_ttl=True)
    assert refreshed is not None and list(refreshed.value) == ["b", "a"]
    assert list(GitStore.from_path(repo).get(("users", "ada"), "short").value) == ["b", "a"]
    assert verify(store.store).ok
