"""Pending writes of LangGraph checkpoints: the write records and their two stored forms.

A record is ``[task_id, channel, type, bytes, task_path, idx]`` (the value as the saver's serde
``dumps_typed`` gave it), keyed by ``(task_id, idx)``. A checkpoint's pending writes live

- in its commit's tree, as ``langgraph-writes.cbor`` (canonical CBOR array of the records, sorted
  by key), and
- in **writes refs** ``refs/agentos/<wt>/runs/<thread>/writes/<blob id>``, each naming one blob
  written by one ``put_writes`` (:func:`encode_pending`: format ``langgraph-writes``, version
  :data:`VERSION`, the checkpoint's namespace and id, the records it added). A writes ref is
  *created*, never moved, and deleted once the next checkpoint's ``put`` has folded its records
  into the checkpoint's commit (one written after that ``put`` stays: :func:`ref_records`).

A checkpoint's pending writes are the union of both, the commit's first, then the writes refs in
name order; the first record of a key wins (LangGraph keeps the first write of a regular key; the
special channels, whose writes replace earlier ones, are never stored in writes refs)."""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping
from typing import Any

from gitstate.errors import CorruptObjectError, UnsupportedFormatError
from gitstate.format import encoding
from gitstate.format.names import NAMESPACE, run_prefix
from gitstate.git.reader import ObjectReader
from gitstate.git.refs import list_refs

WRITES_BLOB = "langgraph-writes.cbor"  # tree entry of a checkpoint commit
REF_KIND = "writes"  # refs/agentos/<wt>/runs/<thread>/writes/<blob id>
PAYLOAD = "langgraph-writes"  # the "format" of a writes-ref blob
VERSION = 1

Key = tuple[str, int]
Record = list[Any]


def _check_records(records: object, oid: str) -> dict[Key, Record]:
    if not isinstance(records, list) or not all(
            isinstance(r, list) and len(r) == 6 and isinstance(r[0], str) and isinstance(r[1], str)
            and isinstance(r[2], str) and isinstance(r[3], bytes) and isinstance(r[4], str)
            and type(r[5]) is int
            for r in records):
        raise CorruptObjectError(oid, "writes are not a list of write records")
    return {(r[0], r[5]): r for r in records}


def encode_records(records: Mapping[Key, Record]) -> bytes:
    """The ``langgraph-writes.cbor`` blob of a checkpoint commit."""
    return encoding.dumps([records[k] for k in sorted(records)], "writes")


def decode_records(data: bytes, oid: str) -> dict[Key, Record]:
    """Invert :func:`encode_records` (``oid`` names the blob in errors)."""
    return _check_records(encoding.loads(data, oid), oid)


def encode_pending(ns: str, checkpoint_id: str, records: Mapping[Key, Record]) -> bytes:
    """The blob a writes ref names: the records one ``put_writes`` added to a checkpoint."""
    return encoding.dumps({"format": PAYLOAD, "v": VERSION, "checkpoint_ns": ns,
                           "checkpoint_id": checkpoint_id,
                           "writes": [records[k] for k in sorted(records)]}, "writes")


def decode_pending(data: bytes, oid: str) -> tuple[str, str, dict[Key, Record]]:
    """``(namespace, checkpoint id, records)`` of a writes-ref blob; a newer version than this code
    reads raises :class:`UnsupportedFormatError`, anything malformed :class:`CorruptObjectError`."""
    payload = encoding.loads(data, oid)
    if not isinstance(payload, dict) or payload.get("format") != PAYLOAD:
        raise CorruptObjectError(oid, "a writes ref does not name a LangGraph writes blob")
    version = payload.get("v")
    if type(version) is not int or version < 1:
        raise CorruptObjectError(oid, "LangGraph writes blob has no valid version")
    if version > VERSION:
        raise UnsupportedFormatError(oid, f"LangGraph writes format version {version} is not supported "
                                          f"(this gitstate reads {VERSION})")
    ns, cid = payload.get("checkpoint_ns"), payload.get("checkpoint_id")
    if not isinstance(ns, str) or not isinstance(cid, str):
        raise CorruptObjectError(oid, "LangGraph writes blob does not name its checkpoint")
    return ns, cid, _check_records(payload.get("writes"), oid)


def union(parts: Iterable[Mapping[Key, Record]]) -> dict[Key, Record]:
    """The records of ``parts`` (in order), the first of each key kept."""
    out: dict[Key, Record] = {}
    for part in parts:
        for key, record in part.items():
            out.setdefault(key, record)
    return out


def ref_records(reader: ObjectReader, worktree: str, run_id: str, ns: str, checkpoint_id: str) -> dict[Key, Record]:
    """The records the writes refs of run ``run_id`` of ``worktree`` hold for the checkpoint
    ``(ns, checkpoint_id)``, in ref name order: those a ``put`` has not folded into the commit yet,
    or never will (a ``put_writes`` that came after the checkpoint's child was put, as LangGraph's
    asynchronous durability allows). A writes blob that cannot be read raises as
    :func:`decode_pending` does (it may belong to any checkpoint of the run). Lists the refs
    through libgit2's iterator, which reads every ref of the repository (some 40 ms for 20,000
    packed refs): for showing one checkpoint, not for a loop over a history."""
    prefix = run_prefix(worktree, run_id) + REF_KIND + "/"
    return blob_records(reader, [oid for _name, oid in sorted(list_refs(reader.repo, prefix))], ns, checkpoint_id)


def blob_records(reader: ObjectReader, blobs: Iterable[str], ns: str, checkpoint_id: str) -> dict[Key, Record]:
    """The records the writes blobs ``blobs`` (in writes-ref name order) hold for the checkpoint
    ``(ns, checkpoint_id)`` (see :func:`ref_records`)."""
    found: list[dict[Key, Record]] = []
    for oid in blobs:
        ref_ns, ref_cid, records = decode_pending(reader.blob(oid), oid)
        if (ref_ns, ref_cid) == (ns, checkpoint_id):
            found.append(records)
    return union(found)


class WritesIndex:
    """The records of the writes refs of every run, for a loop over many checkpoints (a scan):
    the refs are listed once, and each run's blobs decoded once, when a checkpoint of the run first
    asks (:func:`ref_records` lists the refs and decodes every blob of the run per checkpoint).
    Holds what the refs were when first listed."""

    def __init__(self, reader: ObjectReader) -> None:
        self.reader = reader
        self._refs: list[tuple[str, str]] | None = None
        self._names: list[str] = []
        self._runs: dict[tuple[str, str], dict[tuple[str, str], dict[Key, Record]]] = {}

    def records(self, worktree: str, run_id: str, ns: str, checkpoint_id: str) -> dict[Key, Record]:
        """What :func:`ref_records` returns for the checkpoint (an unreadable writes blob of the run
        raises as it does)."""
        by_checkpoint = self._runs.get((worktree, run_id))
        if by_checkpoint is None:
            if self._refs is None:
                self._refs = sorted(list_refs(self.reader.repo, NAMESPACE))
                self._names = [name for name, _oid in self._refs]
            prefix = run_prefix(worktree, run_id) + REF_KIND + "/"
            parts: dict[tuple[str, str], list[dict[Key, Record]]] = {}
            at = bisect.bisect_left(self._names, prefix)
            while at < len(self._refs) and self._names[at].startswith(prefix):
                oid = self._refs[at][1]
                ref_ns, ref_cid, records = decode_pending(self.reader.blob(oid), oid)
                parts.setdefault((ref_ns, ref_cid), []).append(records)
                at += 1
            by_checkpoint = {key: union(found) for key, found in parts.items()}
            self._runs[(worktree, run_id)] = by_checkpoint
        return dict(by_checkpoint.get((ns, checkpoint_id), {}))
