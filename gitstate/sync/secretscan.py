"""Credentials in stored checkpoints: the user's rules read from git config and the work tree,
every checkpoint reachable from a set of refs (and not from what a remote already has), and the
push check that refuses to send one holding a finding. The scanning itself is
:mod:`gitstate.secrets`."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

import pygit2
from pygit2.enums import ObjectType, SortMode

from gitstate.errors import CorruptObjectError, GitStateError
from gitstate.format import checkpoint as cpfmt
from gitstate.format import encoding, lgtree, lgwrites
from gitstate.format.checkpoint import Checkpoint
from gitstate.format.statetree import MAX_TREE_DEPTH, StateReader
from gitstate.git.objects import MODE_TREE
from gitstate.secrets import (
    ALLOW_KEY,
    Finding,
    Rules,
    Scanner,
    checkpoint_parts,
    read_rules,
)
from gitstate.secrets.policy import MAX_FILE, strings
from gitstate.store.store import Store


class SecretsFoundError(GitStateError):
    """A push would send checkpoints that hold credentials; nothing was sent. ``findings`` says
    where (run, checkpoint, key path, kind, fingerprint), never what."""

    def __init__(self, remote: str, findings: Sequence[Finding], action: str = "push to") -> None:
        self.remote = remote
        self.findings = list(findings)
        checkpoints = {f.checkpoint for f in self.findings}
        shown = "; ".join(f"run {f.run!r} checkpoint {(f.checkpoint or '')[:12]} {f.path} {f.kind} {f.fingerprint}"
                          for f in self.findings[:3])
        more = f"; and {len(self.findings) - 3} more" if len(self.findings) > 3 else ""
        super().__init__(
            f"{action} {remote} refused: {len(self.findings)} credential(s) in {len(checkpoints)} commit(s) "
            f"it would send ({shown}{more}); nothing was sent. See them with 'git agentos scan'; let a known "
            f"false positive through with --allow-secret FINGERPRINT or git config {ALLOW_KEY}")


def load_rules(store: Store, allow: Iterable[str] = ()) -> Rules:
    """The user's rules (see :func:`gitstate.secrets.read_rules`) and ``allow`` (``--allow-secret``)."""
    return read_rules(store.repo, store.location.workdir, allow)


def checkpoints_between(store: Store, tips: Iterable[str], have: Iterable[str] = ()) -> list[str]:
    """Ids of the checkpoint commits reachable from ``tips`` and not from ``have`` (what a remote
    already has; ids missing here are ignored), newest first. Other commits (run records, node
    logs, session files) and tips that are not commits are left out."""
    return commits_between(store, tips, have)[0]


def commits_between(store: Store, tips: Iterable[str], have: Iterable[str] = ()) -> tuple[list[str], list[str]]:
    """The commits reachable from ``tips`` and not from ``have``, newest first: the checkpoints,
    and the others (run records, node logs, session files, integrations' records)."""
    repo = store.repo
    walker = repo.walk(None, SortMode.TOPOLOGICAL | SortMode.TIME)
    pushed = False
    for oid in dict.fromkeys(tips):
        if _is_commit(repo, oid):
            walker.push(pygit2.Oid(hex=oid))
            pushed = True
    if not pushed:
        return [], []
    for oid in dict.fromkeys(have):
        if _is_commit(repo, oid):
            walker.hide(pygit2.Oid(hex=oid))
    reader = store.core.reader
    found: list[str] = []
    others: list[str] = []
    state = StateReader(reader)
    for commit in walker:
        try:
            entry = reader.tree(str(commit.tree_id)).get(cpfmt.META)
            if entry is None:
                others.append(str(commit.id))
                continue
            payload = state.blob_value(entry.id)
            if isinstance(payload, dict) and payload.get("format") != cpfmt.CHECKPOINT_KIND:
                others.append(str(commit.id))
                continue  # another gitstate commit with a meta.cbor (not a checkpoint)
        except GitStateError:
            pass  # unreadable: scanning it reports the error
        found.append(str(commit.id))
    return found, others


def _is_commit(repo: pygit2.Repository, oid: str) -> bool:
    try:
        obj = repo.get(oid)
    except (ValueError, pygit2.GitError):
        return False
    return obj is not None and obj.type == ObjectType.COMMIT


_INDEX = re.compile(r"\[(\d+)\]")


class CheckpointScanner:
    """Scans checkpoints of one store. A LangGraph checkpoint's channel values are scanned blob by
    blob (each list chunk, each value), and a blob's findings are kept by its id: a thread's
    checkpoints share the chunks of their message lists, so N checkpoints cost about the size of
    their last state, not N times it."""

    def __init__(self, store: Store, scanner: Scanner) -> None:
        self.store = store
        self.scanner = scanner
        self._blobs: dict[str, tuple[int, list[Finding]]] = {}
        self._writes = lgwrites.WritesIndex(store.core.reader)  # each run's writes refs read once

    def scan(self, cp: Checkpoint) -> list[Finding]:
        """Findings of one checkpoint, as :meth:`gitstate.secrets.Scanner.scan_checkpoint` finds
        them, and in the text files (up to :data:`gitstate.secrets.policy.MAX_FILE` bytes) of its
        workspace snapshot (``files/PATH``), each distinct file read once."""
        return self._scan(cp) + [f.at(cp.run_id, cp.id) for f in self._files(cp)]

    def _files(self, cp: Checkpoint) -> list[Finding]:
        tree = cp.files_tree_id
        if tree is None:
            return []
        reader = self.store.core.reader
        found: list[Finding] = []
        for path, item in reader.walk_tree(tree, MAX_TREE_DEPTH):
            if item.filemode == MODE_TREE or item.filemode == 0o160000:
                continue
            oid = str(item.id)

            def text(oid: str = oid) -> tuple[int, Any]:
                if reader.header(oid)[1] > MAX_FILE:
                    return 1, None
                return 1, reader.blob(oid)

            rel = self._blob(oid, text)[1]
            found.extend(replace_path(f, join_path(f"files[{path!r}]", f.path)) for f in rel)
        return found

    def _scan(self, cp: Checkpoint) -> list[Finding]:
        values = lgtree.values_tree(self.store.core.reader.tree(cp.tree_id)) if cp.workflow == lgtree.WORKFLOW else None
        if values is None:
            return self.scanner.scan_checkpoint(cp, self._writes)
        found: list[Finding] = []
        for path, value in checkpoint_parts(cp, state=False, writes=self._writes):
            found.extend(self.scanner.scan_value(value, path))
        for n, (channel, entry) in enumerate(sorted(lgtree.channel_entries(self.store.core.reader, values).items())):
            base = "state" + self.scanner.key_segment(channel, n)
            found.extend(replace_path(f, join_path(base, f.path)) for f in self._channel(*entry))
        return [f.at(cp.run_id, cp.id) for f in found]

    def _channel(self, name: str, oid: str, mode: int) -> list[Finding]:
        reader = self.store.core.reader
        if not (name.endswith(lgtree.LIST) and mode == MODE_TREE):
            return self._blob(oid, lambda: (1, lgtree.show_entry(reader, name, oid, mode)))[1]
        chunks = sorted((path, item.id) for path, item in reader.walk_tree(oid, lgtree.MAX_CHUNK_DEPTH)
                        if item.filemode != MODE_TREE)
        found: list[Finding] = []
        offset = 0
        for _path, cid in chunks:
            count, rel = self._blob(cid, lambda cid=cid: _chunk_items(reader.blob(cid)))
            found.extend(replace_path(f, _shift(f.path, offset)) for f in rel)
            offset += count
        return found

    def _blob(self, oid: str, decode: Any) -> tuple[int, list[Finding]]:
        hit = self._blobs.get(oid)
        if hit is None:
            count, value = decode()
            hit = (count, self.scanner.scan_value(value, ""))
            if len(self._blobs) >= 100_000:
                self._blobs.clear()
            self._blobs[oid] = hit
        return hit


def _chunk_items(data: bytes) -> tuple[int, list[Any]]:
    shown = lgtree.show_chunk(data)
    items = shown if isinstance(shown, list) else [shown]
    return len(items), items


def _shift(path: str, offset: int) -> str:
    """A chunk-relative path (``[3].content``) as a path in the whole list (``[3+offset]…``)."""
    m = _INDEX.match(path)
    return f"[{int(m.group(1)) + offset}]{path[m.end():]}" if m else path


def join_path(base: str, path: str) -> str:
    """A key path relative to ``base`` (``content``, ``[3].content``) made whole."""
    return base + path if not path or path[0] in "[{" else f"{base}.{path}"


def replace_path(f: Finding, path: str) -> Finding:
    """``f`` at another key path."""
    return Finding(f.kind, path, f.fingerprint, f.run, f.checkpoint)


class RecordScanner:
    """Scans the commits beside the checkpoints that a push sends too: run records (``run.cbor``),
    node logs (``node.cbor``: a node's error text and metadata), session files (``content`` and
    ``meta.cbor``) and what else gitstate or an integration stores under a run. Every blob of such
    a commit's tree is read once (by id): CBOR decoded and walked as a value, other text (up to
    :data:`gitstate.secrets.policy.MAX_FILE` bytes) as a file, msgpack string by string; gitlinks
    (a node log's links to checkpoints) are not followed. A finding's key path starts with the
    blob's name (``run.cbor.metadata.token``; ``session['notes.md']`` for a session file's text),
    its ``checkpoint`` is the commit and its ``run`` the commit's ``Run:`` trailer."""

    def __init__(self, store: Store, scanner: Scanner) -> None:
        self.store = store
        self.scanner = scanner
        self._blobs: dict[str, list[Finding]] = {}

    def scan(self, oid: str) -> list[Finding]:
        """The findings of one commit (a corrupt object raises)."""
        reader = self.store.core.reader
        commit = reader.commit(oid)
        run = cpfmt.trailer(commit.message, "Run") or ""
        session = cpfmt.trailer(commit.message, "Path")
        found: list[Finding] = []
        for path, item in reader.walk_tree(str(commit.tree_id), MAX_TREE_DEPTH):
            if item.filemode in (MODE_TREE, 0o160000):
                continue
            base = f"session[{session!r}]" if session is not None and path == "content" else path
            found.extend(Finding(f.kind, join_path(base, f.path), f.fingerprint, run, oid)
                         for f in self._blob(str(item.id), path))
        return found

    def _blob(self, oid: str, name: str) -> list[Finding]:
        hit = self._blobs.get(oid)
        if hit is None:
            hit = self._read(oid, name)
            if len(self._blobs) >= 100_000:
                self._blobs.clear()
            self._blobs[oid] = hit
        return hit

    def _read(self, oid: str, name: str) -> list[Finding]:
        reader = self.store.core.reader
        if reader.header(oid)[1] > MAX_FILE and not name.endswith(".cbor"):
            return []
        data = reader.blob(oid)
        if name.endswith(".cbor") or not _is_text(data):
            try:
                return self.scanner.scan_value(encoding.loads(data, oid), "")
            except CorruptObjectError:
                texts = strings(data)
                if texts is not None:
                    return self.scanner.scan_value(texts, "")
        return self.scanner.scan_value(data, "") if len(data) <= MAX_FILE else []


def _is_text(data: bytes) -> bool:
    if b"\0" in data:
        return False
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def scan_records(store: Store, oids: Iterable[str], scanner: Scanner) -> list[Finding]:
    """The findings of the commits ``oids`` that are not checkpoints (see :class:`RecordScanner`)."""
    scan = RecordScanner(store, scanner)
    return [f for oid in oids for f in scan.scan(oid)]


def scan_checkpoints(store: Store, oids: Iterable[str], scanner: Scanner) -> list[Finding]:
    """The findings of each checkpoint (see :meth:`gitstate.secrets.Scanner.scan_checkpoint`);
    a checkpoint that cannot be read raises (a corrupt one is never taken as clean)."""
    found: list[Finding] = []
    scan = CheckpointScanner(store, scanner)
    for oid in oids:
        found.extend(scan.scan(store.read_checkpoint(oid)))
    return found


def scan_between(store: Store, tips: Iterable[str], have: Iterable[str],
                 scanner: Scanner) -> tuple[list[str], list[Finding]]:
    """The checkpoints reachable from ``tips`` and not from ``have``, and the findings in them and
    in the other commits between (run records, node logs, session files: :class:`RecordScanner`)."""
    checkpoints, others = commits_between(store, tips, have)
    return checkpoints, scan_checkpoints(store, checkpoints, scanner) + scan_records(store, others, scanner)


def check_push(store: Store, remote: str, tips: Iterable[str], have: Iterable[str],
               allow: Iterable[str] = (), action: str = "push to") -> None:
    """Raise :class:`SecretsFoundError` when a commit reachable from ``tips`` and not from
    ``have`` (what the remote has) holds a credential the rules do not let through: a checkpoint,
    or a run record, node log record or session file (see :func:`scan_between`)."""
    findings = scan_between(store, tips, have, Scanner(load_rules(store, allow)))[1]
    if findings:
        raise SecretsFoundError(remote, findings, action)
