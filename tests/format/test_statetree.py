"""gitstate.format.statetree: StateWriter/StateReader round trips and the documented layout
(``.cbor`` leaves, ``.map/`` for large nested mappings, ``.list/`` chunks of 32, fanout subtrees of
64 beyond 64 chunks, ``.order.cbor`` when the keys are not in the tree's order), key order kept,
structural sharing when a long list grows, deterministic ids, and refusal of hostile trees (nested
too deep, bad entry names, wrong object types, a wrong key order list)."""

from __future__ import annotations

from pathlib import Path

import pygit2
import pytest
from conftest import bounded, git, make_repo

from gitstate.errors import CorruptObjectError, EncodingError
from gitstate.format import encoding
from gitstate.format.statetree import CHUNK, FANOUT, MAX_TREE_DEPTH, ORDER, StateReader, StateWriter
from gitstate.git.objects import MODE_BLOB, MODE_COMMIT, MODE_TREE, ObjectWriter
from gitstate.git.reader import ObjectReader


def open_repo(repo: Path) -> tuple[ObjectWriter, StateWriter, StateReader]:
    handle = pygit2.Repository(str(repo))
    writer = ObjectWriter(handle)
    return writer, StateWriter(writer), StateReader(handle)


def names(reader: StateReader, oid: str) -> list[str]:
    return [item.name for item in reader.tree(oid)]


def ids(reader: StateReader, oid: str) -> dict[str, str]:
    return {item.name: item.id for item in reader.tree(oid)}


def test_round_trip_of_a_plain_mapping(repo: Path) -> None:
    _w, sw, sr = open_repo(repo)
    state = {"n": 1, "f": 1.0, "b": True, "none": None, "s": "text", "bytes": b"\0\1", "small": {"a": [1, 2]},
             "list": [1, "two", 3.0], "": "empty key", "a/b": 1, "ü.x": 2, "big": 2**80}
    oid = sw.mapping(state)
    assert sr.mapping(oid) == state
    assert list(sr.mapping(oid)) == list(state)
    assert [type(v) for v in sr.mapping(oid).values()] == [type(state[k]) for k in sr.mapping(oid)]
    assert sorted(names(sr, oid)) == sorted(["n.cbor", "f.cbor", "b.cbor", "none.cbor", "s.cbor", "bytes.cbor",
                                             "small.cbor", "list.cbor", "%.cbor", "a%2Fb.cbor", "%C3%BC%2Ex.cbor",
                                             "big.cbor", ORDER])
    assert encoding.loads(sr.reader.blob(ids(sr, oid)[ORDER])) == list(state)
    git(repo, "fsck", "--strict")


def test_nested_mappings_split_into_map_trees(repo: Path) -> None:
    _w, sw, sr = open_repo(repo)
    wide = {f"k{i}": i for i in range(16)}
    narrow = {f"k{i}": i for i in range(15)}
    holding_list = {"items": list(range(CHUNK + 1)), "x": 1}
    deep = {"outer": {"inner": wide}}
    state = {"wide": wide, "narrow": narrow, "holding": holding_list, "deep": deep}
    oid = sw.mapping(state)
    assert sorted(names(sr, oid)) == [ORDER, "deep.map", "holding.map", "narrow.cbor", "wide.map"]
    top = ids(sr, oid)
    assert sorted(names(sr, top["wide.map"])) == sorted([*(f"k{i}.cbor" for i in range(16)), ORDER])  # k10 < k2
    assert sorted(names(sr, top["holding.map"])) == ["items.list", "x.cbor"]  # in the tree's order already
    assert names(sr, ids(sr, top["deep.map"])["outer.map"]) == ["inner.map"]
    assert sr.mapping(oid) == state
    assert list(sr.mapping(oid)) == list(state) and list(sr.mapping(oid)["wide"]) == list(wide)


def test_long_lists_are_chunked(repo: Path) -> None:
    _w, sw, sr = open_repo(repo)
    exact = list(range(CHUNK))
    state = {"exact": exact, "longer": list(range(CHUNK + 1)), "tuple": tuple(range(100))}
    oid = sw.mapping(state)
    top = ids(sr, oid)
    assert "exact.cbor" in top  # 32 items: one blob
    assert names(sr, top["longer.list"]) == ["0000000000.cbor", "0000000032.cbor"]
    assert names(sr, top["tuple.list"]) == ["0000000000.cbor", "0000000032.cbor", "0000000064.cbor",
                                            "0000000096.cbor"]
    chunk = sr.reader.blob(ids(sr, top["tuple.list"])["0000000096.cbor"])
    assert encoding.loads(chunk) == [96, 97, 98, 99]
    assert sr.mapping(oid) == {"exact": exact, "longer": list(range(CHUNK + 1)), "tuple": list(range(100))}


def test_more_than_64_chunks_fan_out_into_subtrees(repo: Path) -> None:
    _w, sw, sr = open_repo(repo)
    n = CHUNK * FANOUT * FANOUT + 1  # 4097 chunks: two levels of subtrees
    items = list(range(n))
    oid = sw.mapping({"l": items})
    lst = ids(sr, oid)["l.list"]
    level1 = names(sr, lst)
    assert level1 == ["0000000000", "0000131072"]  # index of the first item of each group
    first = ids(sr, lst)["0000000000"]
    assert len(names(sr, first)) == FANOUT and names(sr, first)[1] == "0000002048"
    assert names(sr, ids(sr, first)["0000000000"])[:2] == ["0000000000.cbor", "0000000032.cbor"]
    assert len(names(sr, ids(sr, first)["0000000000"])) == FANOUT
    assert names(sr, ids(sr, ids(sr, lst)["0000131072"])["0000131072"]) == ["0000131072.cbor"]
    assert sr.mapping(oid) == {"l": items}
    small = sw.mapping({"l": list(range(CHUNK * FANOUT))})  # exactly 64 chunks: no subtree
    assert len(names(sr, ids(sr, small)["l.list"])) == FANOUT
    assert all(n.endswith(".cbor") for n in names(sr, ids(sr, small)["l.list"]))


def test_appending_to_a_5000_item_list_changes_only_the_last_chunk(repo: Path) -> None:
    _w, sw, sr = open_repo(repo)
    base = [{"i": i, "text": f"message {i}"} for i in range(5000)]
    other = {f"k{i}": i for i in range(20)}
    before = sw.mapping({"history": base, "other": other, "x": 1})
    after = sw.mapping({"history": [*base, {"i": 5000}], "other": other, "x": 1})
    top_a, top_b = ids(sr, before), ids(sr, after)
    assert top_a["other.map"] == top_b["other.map"] and top_a["x.cbor"] == top_b["x.cbor"]
    assert top_a["history.list"] != top_b["history.list"]
    groups_a, groups_b = ids(sr, top_a["history.list"]), ids(sr, top_b["history.list"])
    assert list(groups_a) == list(groups_b) == ["0000000000", "0000002048", "0000004096"]  # 157 chunks
    assert groups_a["0000000000"] == groups_b["0000000000"]
    assert groups_a["0000002048"] == groups_b["0000002048"]
    assert groups_a["0000004096"] != groups_b["0000004096"]
    last_a, last_b = ids(sr, groups_a["0000004096"]), ids(sr, groups_b["0000004096"])
    assert list(last_a) == list(last_b)
    changed = [name for name in last_a if last_a[name] != last_b[name]]
    assert changed == ["0000004992.cbor"]
    assert sr.mapping(after)["history"][-2:] == [base[-1], {"i": 5000}]


def test_appending_a_new_chunk_keeps_every_old_chunk(repo: Path) -> None:
    _w, sw, sr = open_repo(repo)
    full = list(range(CHUNK * 10))
    a = ids(sr, sw.list(full, "l"))
    b = ids(sr, sw.list([*full, "one more"], "l"))
    assert list(b) == [*a, f"{CHUNK * 10:010d}.cbor"]
    assert all(a[name] == b[name] for name in a)


def test_ids_are_deterministic_across_writers_and_repositories(tmp_path: Path) -> None:
    state = {"history": [{"i": i} for i in range(3000)], "cfg": {f"k{i}": [i] * i for i in range(20)},
             "z": 1, "a": {"b": 2.5}}
    copy = {k: v for k, v in state.items()}
    one = open_repo(make_repo(tmp_path / "one"))[1].mapping(state)
    again = open_repo(tmp_path / "one")[1].mapping(copy)
    other = open_repo(make_repo(tmp_path / "two"))[1].mapping(state)
    assert one == again == other
    reordered = dict(reversed(list(state.items())))
    _w, sw, sr = open_repo(tmp_path / "one")
    turned = sw.mapping(reordered)
    assert turned != one and list(sr.mapping(turned)) == list(reordered)
    top, top_turned = ids(sr, one), ids(sr, turned)
    assert top[ORDER] != top_turned[ORDER]  # only the order entry differs: every value is shared
    assert {k: v for k, v in top.items() if k != ORDER} == {k: v for k, v in top_turned.items() if k != ORDER}


def test_key_order_is_kept_at_every_level(repo: Path) -> None:
    """Nested maps in blobs keep their order (the encoding), split ``.map/`` trees theirs (an
    ``.order.cbor`` entry); a mapping already in the tree's order gets no entry, so it is laid out
    as format 1 laid it out."""
    _w, sw, sr = open_repo(repo)
    wide = {f"k{i:02d}": {"z": i, "a": [i]} for i in range(20, 0, -1)}  # split: 16+ keys
    state = {"zeta": {"role": "user", "content": "hi", "meta": {"y": 1, "b": 2}}, "alpha": wide,
             "mid": [{"z": 1, "a": 2}] * 40}
    oid = sw.mapping(state)
    back = sr.mapping(oid)
    assert back == state
    assert list(back) == ["zeta", "alpha", "mid"] and list(back["zeta"]) == ["role", "content", "meta"]
    assert list(back["zeta"]["meta"]) == ["y", "b"]
    assert list(back["alpha"]) == list(wide) and all(list(v) == ["z", "a"] for v in back["alpha"].values())
    assert all(list(item) == ["z", "a"] for item in back["mid"])
    assert ORDER in names(sr, ids(sr, oid)["alpha.map"])
    in_order = sw.mapping({"a": 1, "b": {f"k{i:02d}": i for i in range(20)}, "c": 3})
    assert ORDER not in names(sr, in_order) and ORDER not in names(sr, ids(sr, in_order)["b.map"])
    assert list(sr.mapping(in_order)) == ["a", "b", "c"]


@pytest.mark.parametrize("order", [["a"], ["a", "b", "c"], ["a", "a"], ["a", "x"], [1, "a"], "ab", {"a": 1}],
                         ids=["missing", "extra", "repeated", "unknown", "not-text", "not-a-list", "a-map"])
def test_a_wrong_order_entry_is_corrupt(repo: Path, order: object) -> None:
    writer, _sw, sr = open_repo(repo)
    one = writer.blob(encoding.dumps(1))
    tree = writer.tree([("a.cbor", one, MODE_BLOB), ("b.cbor", one, MODE_BLOB),
                        (ORDER, writer.blob(encoding.dumps(order)), MODE_BLOB)])
    with pytest.raises(CorruptObjectError, match="order"):
        sr.mapping(tree)
    as_tree = writer.tree([("a.cbor", one, MODE_BLOB), (ORDER, writer.tree([("x.cbor", one, MODE_BLOB)]), MODE_TREE)])
    with pytest.raises(CorruptObjectError, match="wrong object type"):
        sr.mapping(as_tree)
    good = writer.tree([("a.cbor", one, MODE_BLOB), ("b.cbor", one, MODE_BLOB),
                        (ORDER, writer.blob(encoding.dumps(["b", "a"])), MODE_BLOB)])
    assert list(sr.mapping(good)) == ["b", "a"]


def test_equal_looking_values_of_different_types_stay_distinct(repo: Path) -> None:
    _w, sw, sr = open_repo(repo)
    leaves = [sw.leaf(v, "v") for v in (1, 1.0, True, "1", b"1")]
    assert len(set(leaves)) == 5
    state = {"a": 1, "b": 1.0, "c": True}
    back = sr.mapping(sw.mapping(state))
    assert [type(back[k]) for k in "abc"] == [int, float, bool]


def test_values_that_cannot_be_stored_are_refused(repo: Path) -> None:
    _w, sw, _sr = open_repo(repo)
    for bad in ({1, 2}, object(), {"k": {1: {(1, 2): "tuple key"}}}):
        with pytest.raises(EncodingError):
            sw.mapping({"bad": bad})


def _hostile(writer: ObjectWriter, depth: int, suffix: str, name: str) -> str:
    oid = writer.tree([("leaf.cbor" if suffix == ".map" else "0000000000.cbor", writer.blob(encoding.dumps([1])),
                        MODE_BLOB)])
    for _ in range(depth):
        oid = writer.tree([(name + (suffix if suffix == ".map" else ""), oid, MODE_TREE)])
    return writer.tree([("k" + suffix, oid, MODE_TREE)])


@pytest.mark.parametrize("suffix, name", [(".map", "k"), (".list", "0000000000")], ids=["map", "list"])
def test_a_state_tree_nested_100_deep_is_corrupt(repo: Path, suffix: str, name: str) -> None:
    writer, _sw, sr = open_repo(repo)
    top = _hostile(writer, 100, suffix, name)
    with pytest.raises(CorruptObjectError) as info:
        bounded(lambda: sr.mapping(top), 20.0)
    assert f"deeper than {MAX_TREE_DEPTH}" in info.value.reason
    shallow = _hostile(writer, MAX_TREE_DEPTH - 2, suffix, name)
    value = bounded(lambda: sr.mapping(shallow), 20.0)
    assert "k" in value


@pytest.mark.parametrize("entry", [
    ("noext", "blob"), ("bad%zz.cbor", "blob"), ("x.txt", "blob"), ("x.cbor", "tree"), ("x.map", "blob"),
    ("x.list", "blob"), ("x.cbor", "commit"), (".cbor.cbor", "blob"), ("a b.cbor", "blob"),
])
def test_bad_state_entries_are_refused(repo: Path, entry: tuple[str, str]) -> None:
    writer, _sw, sr = open_repo(repo)
    name, kind = entry
    blob = writer.blob(encoding.dumps(1))
    sub = writer.tree([("a.cbor", blob, MODE_BLOB)])
    head = git(repo, "rev-parse", "HEAD").strip()
    target = {"blob": (blob, MODE_BLOB), "tree": (sub, MODE_TREE), "commit": (head, MODE_COMMIT)}[kind]
    top = writer.tree([("ok.cbor", blob, MODE_BLOB), (name, *target)])
    with pytest.raises(CorruptObjectError) as info:
        sr.mapping(top)
    assert info.value.oid == top


def test_bad_list_trees_are_refused(repo: Path) -> None:
    writer, _sw, sr = open_repo(repo)
    not_array = writer.tree([("0000000000.cbor", writer.blob(encoding.dumps({"a": 1})), MODE_BLOB)])
    with pytest.raises(CorruptObjectError):
        sr.list(not_array)
    head = git(repo, "rev-parse", "HEAD").strip()
    gitlink = writer.tree([("0000000000", head, MODE_COMMIT)])
    with pytest.raises(CorruptObjectError):
        sr.list(gitlink)
    garbage = writer.tree([("0000000000.cbor", writer.blob(b"\xff\xff not cbor"), MODE_BLOB)])
    with pytest.raises(CorruptObjectError):
        sr.list(garbage)


def test_reader_accepts_an_object_reader(repo: Path) -> None:
    handle = pygit2.Repository(str(repo))
    oid = StateWriter(ObjectWriter(handle)).mapping({"a": list(range(40))})
    assert StateReader(ObjectReader(handle)).mapping(oid) == {"a": list(range(40))}
