"""Golden object ids: with a fixed committer identity and a fixed clock, every payload kind gitstate
writes has the same git object id in every version of a format. The ids below were computed once
with the format-2 code (state values keep their maps' key order); a change to the encoding, the
tree layout, the metadata, the commit message or the commit header changes them and fails this test.

If one of these fails, the on-disk format changed: either revert the change, or bump the format
version (docs/FORMAT.md "Upgrading") and pin the new ids in a new table, keeping a reader for these
(stores of format 1 are read by test_compat_fixture.py; :data:`GOLDEN_FORMAT_1` keeps the ids that
format wrote, for what the two formats share)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest
from compat_support import (
    LONG_LIST_LEN,
    T0,
    blob_id,
    fixed_world,
    git,
    init_repo,
    ls_tree,
    make_workspace,
    rev,
    write_varied_store,
)
from langgraph.checkpoint.base import Checkpoint, CheckpointMetadata

import gitstate
from gitstate.format.encoding import dumps
from gitstate.format.names import branch_ref
from gitstate.langgraph import GitCheckpointSaver

GOLDEN: dict[str, str] = {
    "run_record": "7ada3b0219c2e4c73995c5caa2da2149a0b022c9",
    "run_record.plain": "62b81b2d7a4e489068b7998518b6c50d0a4b6a10",
    "small": "31981fea699906f7bc124b10530837a87e4e62eb",
    "small.tree": "0c5277373231dcd469ee32b5eb8c0b284cf9b590",
    "small.state": "c82a013255a02da6eba893e735844725554a876e",
    "leaf": "43d536c97eb2fb57bc84c857e29a14b17f03f872",
    "leaf.tree": "c761e58964df6f153fa112aebaa7c4b866c01731",
    "leaf.state": "b9082c97af8c5b01bde2b13317d0a4279390236d",
    "long_list": "6bfbd63030fb572554df8db38eeba29663d8b03b",
    "long_list.tree": "4ff1e4b0184a50c203f1a7993cb4ae18364acfb7",
    "long_list.state": "d73bcc7cba37dbcc2db09795f7345649573175cd",
    "big_map": "e68e9f5b4d1c980ef4c50a1f48720a7db44a0eed",
    "big_map.tree": "c01790742a89525c358438d3ab004ed8e4ab4e52",
    "big_map.state": "591807e95f74f0db8f0a5f1c84723c52d16d5dff",
    "tools_audit": "d7e7684f9fb11d70b9dfa37d8ad9eed67197393a",
    "tools_audit.tree": "11dbb0923f8f37b6e23c055b205f4045d1d15ccb",
    "node.entry": "dada6fae5a6aaa3ee28c37a78c695c66f49ae47a",
    "node.exit": "b666c8d2e716eed530873b088960287b63d07f8d",
    "node_failed.exit": "0b92b68dd3309707b82bd5beedd7e580409fb268",
    "node.log": "822bd76574b4df3ae7219aeee1128ee1c6cc4147",  # an open boundary names its process (owner)
    "files": "7412a1e6eedd608ca39eb6982c03deb42fb8e864",
    "files.tree": "1c3e8db21b048fc4f8c1ab019b0c382c33534df4",
    "files.snapshot": "1465ac93f6d3e1af7cd3024a9795a47cfb815bdc",
    "files_partial": "3573203e3ab63c2e1bd907c396f25410844e9181",
    "files_partial.snapshot": "fd64e0aaab7501ff82621e6b8f371b5c080f120e",
    "fork": "81797da821f4ddc33805d49b4434728e9409bcce",
    "pruned.head": "1d11986967cd17f94ab571c49ac75a5c039cc26f",
    "session.v1": "90b4abe8a6390d5d0dc89751bad3d4ccad496e01",
    "session.v2": "8d9ced1db609d06e769ca6acd9b646b8c768b8e7",
    "session.other": "49ab33313afca2fe9c036f07785c323a67d9d4b9",
    "empty_state": "236dca424176df54e39cbbafbdad784c65f6cff4",
}

#: The ids the format-1 code wrote for the same store (maps in canonical order everywhere).
GOLDEN_FORMAT_1: dict[str, str] = {
    "run_record": "4e3fc5adab0a7b24ef9bc3c28414085871675eb7",
    "run_record.plain": "5791501a28442a39516bb8431489b7a5a16b39b2",
    "small": "b9d4b990e06e0f1d8597a6b2475ab44d1320cc28",
    "small.tree": "6937b7469c338ff411189ad7ee0b1f4989b8a730",
    "small.state": "b00c49ed38ecec100cc42f5b0b92c09f3ab45cc9",
    "leaf": "631b12411a55089db362f461717514f48be3de42",
    "leaf.tree": "cf45bd2efffd797e16d4bfc5e70b59d6ae5d8b4e",
    "leaf.state": "b9082c97af8c5b01bde2b13317d0a4279390236d",
    "long_list": "f07339da3d065d38d9bd9b98b73c320cdc41464e",
    "long_list.tree": "c2e8f02c642ed896d1878a89dbc5a7e5e7ae2d78",
    "long_list.state": "d73bcc7cba37dbcc2db09795f7345649573175cd",
    "big_map": "8a3c87cf4191978cd60930e91196e4e8c95fd3e5",
    "big_map.tree": "3fda84bebf8438ba4e65376b58d25dfbbab65732",
    "big_map.state": "ee2350233c9343485ad6660dd104353e72eb150f",
    "tools_audit": "0374a9220310a709f5085f80acce9e5b683cb99f",
    "tools_audit.tree": "082856539ab87ce3206fe5dac8e5fddc5f52d505",
    "node.entry": "73b23f6d54b45cb0b7893a1b7be6591ab4f0a76b",
    "node.exit": "bf072ee2d3626fe0b3a1d15416b1fc80550987fc",
    "node_failed.exit": "b42942e937d6731afb6a53bb8cee57c66ac48028",
    "node.log": "a421bcbd0cf37c3bc20fff63095d151a48b56818",  # an open boundary names its process (owner);
    # the log also holds the node steps of the checkpoints written with node=
    "files": "a6ef3d028181ce687c29070b73d6cbf6a21d6510",
    "files.tree": "28e07c47a828f02f50938445859250c3b5c1e612",
    "files.snapshot": "1465ac93f6d3e1af7cd3024a9795a47cfb815bdc",
    "files_partial": "57c6a43f79374d9e902bc71232d3f2d362341976",
    "files_partial.snapshot": "fd64e0aaab7501ff82621e6b8f371b5c080f120e",
    "fork": "e2c1da0c9ac3d353fadb2fc8679eb637da81f2a0",
    "pruned.head": "efc5ff8099b532a49403e6637492427addc0acb4",
    "session.v1": "458a6b9fdd5b22172a50b987cb809f70cdefab31",
    "session.v2": "80b6bde84e2a44f5c4a3a8bb936ff5a83742424c",
    "session.other": "76b15c4d3e9b1d53648017e6abf9f8f6f714a434",
    "empty_state": "10fa7b79570ead73df2832ff49d69d67adf6dc59",
}


@pytest.fixture
def golden_repo(tmp_path: Path) -> Path:
    repo = init_repo(tmp_path / "repo")
    make_workspace(repo)
    return repo


def test_golden_ids_of_every_payload_kind(golden_repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = fixed_world(monkeypatch)
    with gitstate.open_store(golden_repo) as store:
        written = write_varied_store(store, clock)
    assert written.ids == GOLDEN


def test_values_in_canonical_order_keep_their_format_1_ids() -> None:
    """What format 2 did not change keeps its id: state values whose maps were already in canonical
    order, list chunks and workspace snapshots are the objects format 1 wrote (and share storage
    with them); commits and records differ by their version, the states holding maps in another
    order by their key order."""
    same = {k for k in GOLDEN if GOLDEN[k] == GOLDEN_FORMAT_1[k]}
    assert same == {"leaf.state", "long_list.state", "files.snapshot", "files_partial.snapshot"}


def test_golden_layout_of_chunked_list(golden_repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The long list (2085 items, 66 chunks) has a fan-out level: two subtrees named after their
    first item, 64 + 2 chunk blobs named by 10-digit first-item index."""
    clock = fixed_world(monkeypatch)
    with gitstate.open_store(golden_repo) as store:
        cp = write_varied_store(store, clock).ids["long_list"]
    top = ls_tree(golden_repo, f"{cp}:state/log.list")
    assert [(m, k, n) for m, k, _o, n in top] == [("040000", "tree", "0000000000"),
                                                  ("040000", "tree", "0000002048")]
    assert [o for _m, _k, o, _n in top] == ["d15aa03c843fdef49865d27f87eeabb9bf1e99b1",
                                           "c926eb8d700f4ad35a63f3eb80006007017a6143"]
    first = ls_tree(golden_repo, top[0][2])
    assert [n for *_x, n in first] == [f"{i * 32:010d}.cbor" for i in range(64)]
    assert {m for m, *_x in first} == {"100644"}
    second = ls_tree(golden_repo, top[1][2])
    assert [(n, o) for _m, _k, o, n in second] == [
        ("0000002048.cbor", "b601c97261d1ced5cf17b1336e34ca126d5c2ac3"),
        ("0000002080.cbor", "6e73b09fc626222d1314ccd02f01d6fe9b4bd1e6"),
    ]
    # each chunk is the canonical CBOR array of its items, as git would hash it
    assert second[1][2] == blob_id(golden_repo, dumps(list(range(2080, LONG_LIST_LEN))))


# -- LangGraph ------------------------------------------------------------------------------------

LG_THREAD = "golden-thread"
CID_1 = "1f000000-0000-6000-8000-000000000001"
CID_2 = "1f000000-0000-6000-8000-000000000002"
CID_3 = "1f000000-0000-6000-8000-000000000003"
V = "00000000000000000000000000000001.0000000000000000"
V2 = "00000000000000000000000000000002.0000000000000000"
V3 = "00000000000000000000000000000003.0000000000000000"

# Commit ids changed (trees did not) when a LangGraph checkpoint's subject began to carry LangGraph's
# step and its message a LangGraph-Step trailer (docs/FORMAT.md, "Commit"), and with format 2 (the
# version in meta.cbor and the trailer; the channels' blobs and the writes blob are as before);
# stores written before keep reading (tests/compat/test_compat_fixture.py).
LG_GOLDEN: dict[str, str] = {
    "cp1": "b1be8bbf0ca19e0c3d8e359b14add5c4fc21d982",
    "cp1.tree": "b97fccf9ec32ae5c90d910fd0ab52851c44c1b44",
    "cp2": "6032afcd255bb05d04280a1a816a6827badf8eb0",
    "cp2.tree": "a6e9e82ef9944d86d03d8edad103a9a9a687db45",
    "cp2.pending": "da375565ad0206cd943d2570ab81609daff5cc43",
    "cp2.writes": "d7a10e8d5c2b814db29495be46738ce9754163f3",
    "cp2.writes.tree": "b3018550b59b837a5cef7a0dbb6d78ca2c5d671e",
    "serde.checkpoint1": "7350162b90913363fd33d6eb35db35ea341e0d6b",
    "serde.metadata1": "4a41885fa2baf5df5b42a234a64a9ce783cf1fa1",
}


def _lg_checkpoint(cid: str, ts: str, values: dict[str, Any], versions: dict[str, str],
                   seen: dict[str, dict[str, str]]) -> Checkpoint:
    return {"v": 4, "id": cid, "ts": ts, "channel_values": values, "channel_versions": versions,
            "versions_seen": seen, "updated_channels": sorted(versions)}


def test_golden_ids_of_langgraph_checkpoints(golden_repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Checkpoints put through GitCheckpointSaver with fixed LangGraph ids, timestamps and versions
    (no graph run: a graph would mint random uuid6 ids). The serde bytes are pinned first, so a
    LangGraph upgrade that changes its msgpack encoding is told apart from a gitstate change."""
    clock = fixed_world(monkeypatch)
    messages = [f"message {i}" for i in range(40)]  # > 32 items: a chunked `messages.l/` tree
    cp1 = _lg_checkpoint(CID_1, "2026-01-01T00:00:00+00:00", {"messages": messages, "topic": "compat"},
                         {"messages": V, "topic": V}, {"__input__": {}})
    md1: CheckpointMetadata = {"source": "input", "step": -1, "parents": {}}
    ids: dict[str, str] = {}
    with gitstate.open_store(golden_repo) as store:
        saver = GitCheckpointSaver(store)
        ids["serde.checkpoint1"] = hashlib.sha1(saver.serde.dumps_typed(
            {k: v for k, v in cp1.items() if k != "channel_values"})[1]).hexdigest()
        ids["serde.metadata1"] = hashlib.sha1(saver.serde.dumps_typed(dict(md1))[1]).hexdigest()
        clock.at(100)
        conf1 = saver.put({"configurable": {"thread_id": LG_THREAD, "checkpoint_ns": ""}}, cp1, md1,
                          {"messages": V, "topic": V})
        ref = branch_ref("main", LG_THREAD, "main")
        ids["cp1"] = rev(golden_repo, ref)
        ids["cp1.tree"] = rev(golden_repo, ref + "^{tree}")
        clock.at(101)
        cp2 = _lg_checkpoint(CID_2, "2026-01-01T00:00:01+00:00",
                             {"messages": [*messages, "message 40"], "topic": "compat"},
                             {"messages": V2, "topic": V}, {"agent": {"messages": V}})
        conf2 = saver.put(conf1, cp2, {"source": "loop", "step": 0, "parents": {}, "run_id": "lg-run-1"},
                          {"messages": V2})
        ids["cp2"] = rev(golden_repo, ref)
        ids["cp2.tree"] = rev(golden_repo, ref + "^{tree}")
        clock.at(102)
        saver.put_writes(conf2, [("topic", "next topic"), ("messages", ["pending"])], "task-1", "path-1")
        assert rev(golden_repo, ref) == ids["cp2"]  # pending writes do not move the branch ...
        pending = git(golden_repo, "for-each-ref", "--format=%(refname:lstrip=-1)",
                      f"refs/agentos/main/runs/{LG_THREAD}/writes/").split()
        assert len(pending) == 1  # ... they are a writes ref named by its blob's id
        ids["cp2.pending"] = pending[0]
        clock.at(103)
        cp3 = _lg_checkpoint(CID_3, "2026-01-01T00:00:02+00:00",
                             {"messages": [*messages, "message 40", "pending"], "topic": "next topic"},
                             {"messages": V3, "topic": V3}, {"agent": {"messages": V2}})
        saver.put(conf2, cp3, {"source": "loop", "step": 1, "parents": {}, "run_id": "lg-run-1"},
                  {"messages": V3, "topic": V3})
        # the next put folds the writes into cp2's commit (same bytes as amending it at once did)
        ids["cp2.writes"] = rev(golden_repo, ref + "^")
        ids["cp2.writes.tree"] = rev(golden_repo, ref + "^^{tree}")
        assert git(golden_repo, "for-each-ref", f"refs/agentos/main/runs/{LG_THREAD}/writes/") == ""
    serde_ids = {k: v for k, v in ids.items() if k.startswith("serde.")}
    assert serde_ids == {k: v for k, v in LG_GOLDEN.items() if k.startswith("serde.")}, (
        "LangGraph's serde encodes differently: the ids below change for that reason, not gitstate's")
    assert ids == LG_GOLDEN
    # the messages channel is chunked as documented: 32 + 9 items
    values = ls_tree(golden_repo, ids["cp2"] + ":langgraph")
    assert [(m, n) for m, _k, _o, n in values] == [("040000", "messages.l"), ("100644", "topic.v")]
    chunks = ls_tree(golden_repo, ids["cp2"] + ":langgraph/messages.l")
    assert [n for *_x, n in chunks] == ["0000000000", "0000000032"]
    assert git(golden_repo, "log", "--format=%s", ref) == (  # LangGraph's steps (since the subject holds them)
        "checkpoint · step 1 · loop · completed\ncheckpoint · step 0 · loop · completed\n"
        "checkpoint · step -1 · input · completed\n")
    assert T0 + 101 == float(git(golden_repo, "log", "-1", "--format=%ct", ids["cp2"]).strip()) + 0.25
