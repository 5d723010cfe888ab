"""Node boundary records: the payload of one entry of a branch's node log (docs/FORMAT.md, "Node
boundaries"). A node boundary is a marker, not a checkpoint: it names the first and the last
checkpoint written inside a node (entry and exit) and the node's status."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gitstate.errors import CorruptObjectError
from gitstate.format import encoding
from gitstate.format.checkpoint import FORMAT_VERSION, check_format, trailer_value

NODE_KIND = "gitstate/node"
RECORD = "node.cbor"
ENTRY_LINK = "entry"  # gitlink entries (mode 160000): `git ls-tree` shows the checkpoints
EXIT_LINK = "exit"
NODE_STATUSES = ("running", "completed", "failed")
_OBJECT_ID = re.compile(r"[0-9a-f]{40}")  # a commit id as git prints it


@dataclass(frozen=True)
class NodeRecord:
    """One record of a node log: the state of boundary ``id`` when it was written."""

    id: str
    node: str
    branch: str
    status: str
    entry: str | None
    exit: str | None
    base: str | None  # the branch tip when the node was entered
    started_at: str
    ended_at: str | None = None
    error: str | None = None
    metadata: dict[str, Any] | None = None
    # the process that opened the boundary ({"pid", "start", "host", "boot", "pidns"}, the fields of
    # a lock's owner record), so a reader can tell a ``running`` boundary whose writer is gone
    owner: dict[str, Any] | None = None

    def to_payload(self, run_id: str) -> dict[str, Any]:
        """The ``node.cbor`` map (``None`` fields left out)."""
        out = {"format": NODE_KIND, "v": FORMAT_VERSION, "run": run_id, "id": self.id, "node": self.node,
               "branch": self.branch, "status": self.status, "entry": self.entry, "exit": self.exit,
               "base": self.base, "started_at": self.started_at, "ended_at": self.ended_at,
               "error": self.error, "metadata": self.metadata or None,
               # only an open boundary names its process: an ended record stays the same bytes
               # wherever and by whichever process it was written
               "owner": (self.owner or None) if self.status == "running" else None}
        return {k: v for k, v in out.items() if v is not None}


def encode(record: NodeRecord, run_id: str) -> bytes:
    """Canonical CBOR of a record."""
    return encoding.dumps(record.to_payload(run_id), "node")


def decode(data: bytes, oid: str) -> NodeRecord:
    """A record from ``node.cbor`` bytes (:class:`CorruptObjectError` when malformed: not canonical
    CBOR, not a map, another kind or version, a field of the wrong type, an unknown status, or an
    ``entry``/``exit``/``base`` that is not an object id in lowercase hex)."""
    payload = encoding.loads_mapping(data, oid)
    check_format(payload, NODE_KIND, oid)

    def text(key: str, optional: bool = True) -> str | None:
        value = payload.get(key)
        if value is None and optional:
            return None
        if not isinstance(value, str):
            raise CorruptObjectError(oid, f"node record field {key!r} is not text")
        return value

    def object_id(key: str) -> str | None:
        value = text(key)
        if value is not None and not _OBJECT_ID.fullmatch(value):
            raise CorruptObjectError(oid, f"node record field {key!r} is not an object id")
        return value

    status = text("status", optional=False)
    if status not in NODE_STATUSES:
        raise CorruptObjectError(oid, f"node record has an unknown status {status!r}")
    metadata = payload.get("metadata")
    if metadata is not None and not isinstance(metadata, Mapping):
        raise CorruptObjectError(oid, "node record metadata is not a map")
    owner = payload.get("owner")
    if owner is not None and not isinstance(owner, Mapping):
        raise CorruptObjectError(oid, "node record owner is not a map")
    return NodeRecord(
        id=text("id", optional=False) or "", node=text("node", optional=False) or "",
        branch=text("branch", optional=False) or "", status=status, entry=object_id("entry"),
        exit=object_id("exit"), base=object_id("base"), started_at=text("started_at", optional=False) or "",
        ended_at=text("ended_at"),
        error=text("error"), metadata=dict(metadata) if metadata is not None else None,
        owner=dict(owner) if owner is not None else None)


def message(record: NodeRecord, run_id: str) -> str:
    """The node-log commit message: ``node <name> · <status>`` and trailers."""
    lines = [f"node {trailer_value(record.node)} · {record.status}", ""]
    trailers = [("Run", run_id), ("Branch", record.branch), ("Node", record.node), ("Node-Id", record.id),
                ("Node-Status", record.status), ("Node-Entry", record.entry), ("Node-Exit", record.exit),
                ("Gitstate-Format", FORMAT_VERSION)]
    lines += [f"{k}: {trailer_value(v)}" for k, v in trailers if v is not None]
    return "\n".join(lines) + "\n"
