"""Checking a store end to end: every ref under ``refs/agentos/`` resolves, every object it reaches
exists with the right type and reads in full (as ``git fsck`` reads it: a pack damaged inside an
object's compressed data is found; large blobs are streamed), every payload decodes with a known format version, node boundaries
(node_end checkpoints and every record of every node log) point where they should, and every
workspace snapshot passes restore's own validation (what ``restore`` would refuse is reported).
Read-only but for what ``repair`` asks; it reports problems instead of stopping at the first one."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from pygit2.enums import ObjectType

from gitstate.errors import CorruptObjectError, GitStateError, UnsafeTreeError
from gitstate.format import checkpoint as cpfmt
from gitstate.format import frameworks, lgtree
from gitstate.format import nodes as nodefmt
from gitstate.format.checkpoint import Checkpoint
from gitstate.format.names import NAMESPACE, STAGING, parse_ref, worktree_prefix
from gitstate.format.nodes import NodeRecord
from gitstate.format.statetree import MAX_TREE_DEPTH, StateReader
from gitstate.git import command, packs, refs
from gitstate.git.reader import CommitData
from gitstate.git.refs import list_refs
from gitstate.store import housekeeping
from gitstate.store import nodes as nodelog
from gitstate.store.sessionfiles import check_chain
from gitstate.store.store import Store
from gitstate.store.transaction import Transaction
from gitstate.workspace.restore import validate_tree
from gitstate.workspace.snapshot import BIG_BLOB

__all__ = ["Problem", "VerifyReport", "verify"]

# Trees below a checkpoint's root: the state readers follow MAX_TREE_DEPTH levels below "state/"
# (and the LangGraph saver as many below "langgraph/<channel>"), so two more from the root.
_MAX_PAYLOAD_DEPTH = MAX_TREE_DEPTH + 2

_WORKTREE_KEY = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_+=,@-%")

_NODE_LOG_REPAIR = "gitstate: verify --repair (node log without its unreadable records)"


@dataclass(frozen=True)
class _LogEntry:
    """One commit of a node log as verify read it: the commit (``None`` when it does not read,
    which cuts the chain), its record (``None`` when readers fail on it) and why not."""

    commit: CommitData | None
    record: NodeRecord | None
    damage: str | None


@dataclass(frozen=True)
class Problem:
    """One thing wrong in the store: the ref it was found from, the object (if any) and why."""

    ref: str
    message: str
    oid: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return {"ref": self.ref, "oid": self.oid, "message": self.message}

    def __str__(self) -> str:
        where = f" ({self.oid[:12]})" if self.oid else ""
        return f"{self.ref}{where}: {self.message}"


@dataclass
class VerifyReport:
    """What :func:`verify` checked and what it found."""

    refs: int = 0
    checkpoints: int = 0
    objects: int = 0
    problems: list[Problem] = field(default_factory=list)
    repaired: list[str] = field(default_factory=list)
    #: what ``repair`` did to a repaired ref when it did more than remove it (a node log rewritten
    #: without its unreadable records), by name
    repair_notes: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Whether no problem was found."""
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form (the CLI's ``verify --json`` shape)."""
        return {"ok": self.ok, "refs": self.refs, "checkpoints": self.checkpoints, "objects": self.objects,
                "problems": [p.to_dict() for p in self.problems], "repaired": list(self.repaired)}


class _Checker:
    def __init__(self, store: Store, report: VerifyReport, progress: Callable[[int], None] | None,
                 repair: bool = False) -> None:
        self.store = store
        self.repair = repair
        self.repo = store.repo
        self.reader = store.core.reader
        self.report = report
        self.progress = progress or (lambda n: None)
        self.seen_commits: set[str] = set()
        self.seen_objects: set[str] = set()
        self.refusals: dict[str, str | None] = {}  # snapshot tree -> why restore refuses it
        self.reported_trees: set[tuple[str, str]] = set()
        self.log_entries: dict[str, _LogEntry] = {}  # node-log commit -> what it holds (logs share records)
        self.damaged: set[str] = set()  # blobs found not to read in full

    def problem(self, ref: str, message: str, oid: str | None = None) -> None:
        self.report.problems.append(Problem(ref, message, oid))

    def check_ref(self, name: str, oid: str) -> None:
        self.report.refs += 1
        parsed = parse_ref(name)
        worktree = name[len(NAMESPACE):].split("/", 1)[0]
        if parsed is None or not worktree or not set(worktree) <= _WORKTREE_KEY:
            self.problem(name, "not a gitstate ref name (foreign or malformed ref under refs/agentos/)", oid)
            return
        if parsed.kind == "nodes" and self.repair and self._header_kind(oid) != ObjectType.COMMIT:
            self.remove_node_log(name, oid, "it names no commit")
            return
        kind = self._exists(name, oid)
        if kind is None:
            return
        if parsed.kind in ("run", "heads", "files", "nodes") and kind != ObjectType.COMMIT:
            self.problem(name, f"expected a commit, found a {ObjectType(kind).name.lower()}", oid)
            return
        if parsed.kind == "run":
            self.check_record(name, oid, parsed.run_id)
        elif parsed.kind == "heads":
            self.check_branch(name, oid, parsed.run_id)
        elif parsed.kind == "files":
            self.check_files(name, oid)
        elif parsed.kind == "nodes":
            self.check_node_log(name, oid)
        # other per-run kinds (added by later features) are only checked to resolve

    def _exists(self, ref: str, oid: str) -> int | None:
        """The object's type from its header (the object itself is never loaded), or ``None``
        after reporting it missing."""
        try:
            kind, _size = self.reader.header(oid)
        except CorruptObjectError as exc:
            self.problem(ref, f"ref does not resolve: {exc.reason}", oid)
            return None
        return int(kind)

    def _header_kind(self, oid: str) -> ObjectType | None:
        """The object's type from its header, or ``None`` when it does not read."""
        try:
            return self.reader.header(oid)[0]
        except CorruptObjectError:
            return None

    def _commit_damage(self, oid: str) -> str | None:
        """Why the commit ``oid`` or its root tree cannot be read, or ``None``."""
        try:
            commit = self.reader.commit(oid)
        except GitStateError as exc:
            return str(exc)
        try:
            self.reader.tree(commit.tree_id)
        except CorruptObjectError as exc:
            return f"its tree {commit.tree_id[:12]}: {exc.reason}"
        return None

    def read_whole(self, oid: str) -> tuple[ObjectType | None, str | None]:
        """Read the object ``oid`` in full, as ``git fsck`` does (its header alone says nothing of
        damage further in): its type, and why it does not read (``None`` when it does). libgit2
        inflates it (zlib's checksum) and hashes it against its id; a blob larger than
        :data:`STREAMED` is streamed through ``git cat-file`` and hashed here, never held whole."""
        try:
            kind, size = self.reader.header(oid)
        except CorruptObjectError as exc:
            return None, exc.reason
        if kind == ObjectType.BLOB and size > STREAMED:
            return kind, _streamed_damage(self.store, oid, size)
        try:
            self.reader.read(oid)
        except CorruptObjectError as exc:
            return kind, exc.reason
        return kind, None

    def check_files(self, ref: str, tip: str) -> None:
        for oid, message in check_chain(self.reader, tip):
            self.problem(ref, f"session file: {message}", oid)

    # -- node logs ---------------------------------------------------------------------------

    def _log_entry(self, ref: str, oid: str) -> _LogEntry:
        """Read one node-log commit as the readers do (:func:`gitstate.store.nodes.read_record`),
        once however many logs share it; its gitlinks are checked against its record then (a
        mismatch is reported once, against the first log found holding it)."""
        found = self.log_entries.get(oid)
        if found is not None:
            return found
        try:
            commit = self.reader.commit(oid)
        except GitStateError as exc:
            found = _LogEntry(None, None, str(exc))
        else:
            try:
                record = nodelog.read_record(self.reader, commit)
            except GitStateError as exc:
                found = _LogEntry(commit, None, str(exc))
            else:
                found = _LogEntry(commit, record, None)
                self._check_gitlinks(ref, commit, record)
        self.log_entries[oid] = found
        return found

    def _check_gitlinks(self, ref: str, commit: CommitData, record: NodeRecord) -> None:
        """The ``entry``/``exit`` gitlinks of a record commit name what its ``node.cbor`` names."""
        try:
            tree = self.reader.tree(commit.tree_id)
        except GitStateError:
            return  # read_record read it just now
        for name, want in ((nodefmt.ENTRY_LINK, record.entry), (nodefmt.EXIT_LINK, record.exit)):
            item = tree.get(name)
            if item is not None and item.type_str != "commit":
                self.problem(ref, f"node log record: {name} is a {item.type_str}, not a gitlink", commit.id)
            elif (item.id if item is not None else None) != want:
                have = item.id[:12] if item is not None else "nothing"
                self.problem(ref, f"node log record: gitlink {name} names {have}, its {nodefmt.RECORD} "
                                  f"{want[:12] if want else 'none'}", commit.id)

    def check_node_log(self, ref: str, tip: str) -> None:
        """Every record of a node log (``…/nodes/<branch>``, down its first parents, each commit
        once) reads as ``nodes``, ``show RUN:node:X``, ``rollback`` and ``checkpoint --node`` read
        it; then the boundaries those list (:func:`gitstate.store.nodes.listed`) point into the
        branch's line. With ``repair``, a log holding unreadable records is rewritten without them
        (:meth:`repair_node_log`)."""
        chain: list[str] = []  # newest first
        seen: set[str] = set()
        oid: str | None = tip
        while oid is not None and oid not in seen:
            seen.add(oid)
            chain.append(oid)
            entry = self._log_entry(ref, oid)
            if entry.commit is None:
                break
            oid = entry.commit.parent_ids[0] if entry.commit.parent_ids else None
        bad = [o for o in chain if self.log_entries[o].damage is not None]
        if bad and self.repair and self.repair_node_log(ref, tip, chain):
            bad = []
        for o in bad:
            self.problem(ref, f"node log record does not read (nodes, node:NAME and checkpoint --node fail on "
                              f"it; `git agentos verify --repair` leaves it out): {self.log_entries[o].damage}", o)
        records = [e.record for e in (self.log_entries[o] for o in chain) if e.record is not None]
        self.check_boundaries(ref, records)

    def check_boundaries(self, ref: str, records: list[NodeRecord]) -> None:
        """The boundaries the log lists for its branch (each latest record whose exit, while
        running its base, is on the branch's line) have their entry on that line too, unless a
        prune cut the line (its checkpoints' ``base`` > 0: the entry may be gone). Records the log
        no longer lists (rolled back, renamed by a prune) may name checkpoints git gc has removed:
        the gitlinks keep nothing alive."""
        if not records:
            return
        at = ref.rindex("/nodes/")
        head = ref[:at] + "/heads/" + ref[at + len("/nodes/"):]
        line: set[str] = set()
        oid = self.store.core.read_ref(head)
        try:
            if oid is not None and cpfmt.read_meta(self.reader, self.reader.commit(oid)).get("base"):
                return  # pruned
            while oid is not None and oid not in line:
                line.add(oid)
                parents = self.reader.commit(oid).parent_ids
                oid = parents[0] if parents else None
        except GitStateError:
            return  # the branch's own check reports it
        for record, _boundary in nodelog.listed(records, line):
            if record.entry is not None and record.entry not in line:
                try:
                    kind, _size = self.reader.header(record.entry)
                    what = "not a checkpoint of the branch's line" if kind == ObjectType.COMMIT else \
                        f"a {kind.name.lower()}, not a checkpoint"
                except CorruptObjectError:
                    what = "a missing commit"
                self.problem(ref, f"node log: entry {record.entry[:12]} of node {record.node!r} (boundary "
                                  f"{record.id}) is {what}", record.entry)

    def repair_node_log(self, ref: str, tip: str, chain: list[str]) -> bool:
        """Rewrite a node log without its unreadable records: the records below the oldest one
        that does not read stay as they are, the readable ones above it are copied onto them (same
        tree, message, author and committer), oldest first; the ref moves by one compare-and-swap
        from ``tip``, reflogged, so the old log stays in its reflog. When no record reads, the
        log is removed (:meth:`remove_node_log`). Whether it was repaired (else a problem says
        why not)."""
        entries = [self.log_entries[o] for o in chain]
        oldest_bad = max(i for i, e in enumerate(entries) if e.damage is not None)
        below = entries[oldest_bad].commit
        base = below.parent_ids[0] if below is not None and below.parent_ids else None
        keep = [e.commit for e in reversed(entries[:oldest_bad]) if e.damage is None and e.commit is not None]
        if base is None and not keep:
            return self.remove_node_log(ref, tip, "none of its records reads")

        def build(tx: Transaction) -> str:
            new = base
            for commit in keep:
                new = tx.commit(commit.tree_id, [new] if new else [], commit.message, author=commit.author,
                                committer=commit.committer)
            assert new is not None
            tx.set_ref(ref, tip, new, _NODE_LOG_REPAIR, strict=True)
            return new

        try:
            self.store.core.write(build)
        except GitStateError as exc:
            self.problem(ref, f"cannot repair the node log: {exc}", tip)
            return False
        self.store.core.forget_objects()  # what only the old log reached may now be pruned by git gc
        dropped = sum(1 for e in entries if e.damage is not None)
        self.report.repaired.append(ref)
        self.report.repair_notes[ref] = (f"node log rewritten without its {dropped} unreadable record(s), "
                                         f"{len(chain) - dropped} kept (the old log is in its reflog)")
        return True

    def remove_node_log(self, ref: str, tip: str, why: str) -> bool:
        """Delete a node log nothing of which reads (compare-and-swap from ``tip``): its branch
        then has no boundaries, as before any node was recorded. Whether it was removed."""
        try:
            self.store.core.move_ref(ref, tip, None, _NODE_LOG_REPAIR)
        except GitStateError as exc:
            self.problem(ref, f"cannot remove the node log: {exc}", tip)
            return False
        self.report.repaired.append(ref)
        self.report.repair_notes[ref] = f"node log removed: {why}"
        return True

    def check_record(self, ref: str, oid: str, run_id: str) -> None:
        damage = self._commit_damage(oid)
        if damage:
            self.problem(ref, damage, oid)
            return
        try:
            record = self.store.read_run_record(oid)
        except GitStateError as exc:
            self.problem(ref, str(exc), oid)
            return
        if record.get("id") not in (None, run_id):
            self.problem(ref, f"run record names run {record.get('id')!r}, ref names {run_id!r}", oid)

    def check_branch(self, ref: str, tip: str, run_id: str) -> None:
        chain: list[Checkpoint] = []
        oid: str | None = tip
        while oid is not None and oid not in self.seen_commits:
            damage = self._commit_damage(oid)
            if damage:
                self.problem(ref, damage, oid)
                return
            try:
                commit = self.reader.commit(oid)
                cp = Checkpoint.from_commit(self.reader, commit, self.store.location.git_dir)
            except GitStateError as exc:
                self.problem(ref, str(exc), oid)
                return
            self.seen_commits.add(oid)
            self.report.checkpoints += 1
            self.progress(1)
            if cp.run_id != run_id:
                self.problem(ref, f"checkpoint belongs to run {cp.run_id!r}", oid)
            self.check_payloads(ref, cp)
            if lgtree.checkpoint_key(commit.message) is not None:
                self.check_langgraph(ref, commit)
            chain.append(cp)
            oid = cp.parent_id
        # node_entry must be an earlier checkpoint of the same line (its ancestor)
        ancestors: set[str] = set()
        line = list(reversed(chain))
        if oid is not None:  # the rest of the line was verified from another ref: collect its ids
            walk: str | None = oid
            while walk is not None:
                ancestors.add(walk)
                try:
                    parents = self.reader.commit(walk).parent_ids
                except GitStateError:
                    break
                walk = parents[0] if parents else None
        for cp in line:
            if cp.trigger == cpfmt.NODE_END and cp.node_entry is not None:
                # a prune (base > 0) may cut a node's entry off the line; otherwise it must be there
                if cp.node_entry not in ancestors and cp.base == 0:
                    self.problem(ref, f"node_entry {cp.node_entry[:12]} of node {cp.node!r} is not an "
                                      "earlier checkpoint of this branch", cp.id)
            ancestors.add(cp.id)

    def check_langgraph(self, ref: str, commit: CommitData) -> None:
        """A checkpoint the LangGraph saver indexes (it has a ``LangGraph-Checkpoint`` trailer)
        holds in ``meta.cbor`` a checkpoint and metadata of the shape the saver returns and
        LangGraph reads (:func:`lgtree.stored_problem`: the display decoder, so LangGraph is not
        imported and nothing the data names is built; only the meta payload is read)."""
        try:
            meta = cpfmt.read_meta(self.reader, commit)
        except GitStateError:
            return  # Checkpoint.from_commit read it just now
        problem = lgtree.stored_problem(meta)
        if problem:
            self.problem(ref, f"{problem} (the LangGraph saver refuses it)", commit.id)

    def check_objects(self, ref: str, cp: Checkpoint) -> None:
        """Every object below the checkpoint's tree (but its workspace snapshot, which
        :meth:`check_tree` checks) exists with the type its mode says, and trees nest no deeper than
        any reader follows: this covers what the payload decoders do not read (an integration's
        own subtrees, such as the LangGraph saver's ``langgraph/``). Iterative; each object once."""
        try:
            root = self.reader.tree(cp.tree_id)
        except GitStateError as exc:
            self.problem(ref, str(exc), cp.id)
            return
        todo = [(item.name, item, 1) for item in root if item.name != cpfmt.FILES]
        while todo:
            path, item, depth = todo.pop()
            if item.id in self.seen_objects:
                continue
            self.seen_objects.add(item.id)
            if item.type_str == "tree":
                if depth > _MAX_PAYLOAD_DEPTH:
                    self.problem(ref, f"{_short(path)}: trees nested deeper than {_MAX_PAYLOAD_DEPTH} levels", cp.id)
                    return
                try:
                    sub = self.reader.tree(item.id)
                except GitStateError as exc:
                    self.problem(ref, f"{path}: {exc}", cp.id)
                    continue
                todo.extend((f"{path}/{child.name}", child, depth + 1) for child in sub)
            elif item.type_str == "blob":
                kind, damage = self.read_whole(item.id)
                if damage is not None:
                    self.damaged.add(item.id)
                    self.problem(ref, f"{path}: {damage}", item.id)
                elif kind is not None and kind != ObjectType.BLOB:
                    self.problem(ref, f"{path}: has a file mode but is a {kind.name.lower()}", item.id)
            else:
                self.problem(ref, f"{path}: a gitlink in a checkpoint tree", item.id)

    def check_payloads(self, ref: str, cp: Checkpoint) -> None:
        self.check_objects(ref, cp)
        try:
            state, _tools, _audit = cp.state, cp.tools, cp.audit
        except GitStateError as exc:
            if getattr(exc, "oid", None) not in self.damaged:  # else reported just now, by object
                self.problem(ref, f"payload does not decode: {exc}", cp.id)
        else:
            problem = frameworks.check_state(cp.workflow, state)  # integrations' own payloads
            if problem is None and cp.workflow == frameworks.LANGGRAPH_STORE:
                problem = self.memory_layout(cp)
            if problem:
                self.problem(ref, problem, cp.id)
        files = cp.files_tree_id
        if files is not None:
            self.check_tree(ref, cp.id, files)
            refusal = self.restore_refusal(files)
            if refusal is not None and (ref, files) not in self.reported_trees:
                self.reported_trees.add((ref, files))
                self.problem(ref, f"files snapshot: restore refuses it: {refusal}", cp.id)

    def memory_layout(self, cp: Checkpoint) -> str | None:
        """Why a langgraph-store checkpoint's trees are not laid out as ``GitStore`` reads them."""
        entry = self.reader.tree(cp.tree_id).get(cpfmt.STATE_TREE)
        if entry is None or entry.type_str != "tree":
            return None  # (check_state reported the state)
        try:
            problem = frameworks.memory_layout(StateReader(self.reader), str(entry.id))
        except GitStateError as exc:
            return f"langgraph-store state: {exc}"
        return None if problem is None else f"langgraph-store state: {problem}"

    def restore_refusal(self, tree_id: str) -> str | None:
        """Why ``restore`` would refuse the snapshot tree (its own validation, run once per tree),
        or ``None``. Damage (a missing or unreadable object) is :meth:`check_tree`'s to report."""
        if tree_id not in self.refusals:
            try:
                validate_tree(self.reader, tree_id)
                self.refusals[tree_id] = None
            except UnsafeTreeError as exc:
                self.refusals[tree_id] = f"{exc.path!r}: {exc.reason}"
            except GitStateError:
                self.refusals[tree_id] = None
        return self.refusals[tree_id]

    def check_tree(self, ref: str, cp_id: str, tree_id: str) -> None:
        stack = [tree_id]
        while stack:
            oid = stack.pop()
            if oid in self.seen_objects:
                continue
            self.seen_objects.add(oid)
            try:
                tree = self.reader.tree(oid)
            except GitStateError as exc:
                self.problem(ref, f"files snapshot: {exc}", cp_id)
                continue
            for entry in tree:
                sub = entry.id
                if entry.type_str == "tree":
                    stack.append(sub)
                elif entry.type_str == "blob" and sub not in self.seen_objects:
                    self.seen_objects.add(sub)
                    kind, damage = self.read_whole(sub)
                    if damage is not None:
                        self.problem(ref, f"files snapshot: blob of {entry.name!r}: {damage}", sub)
                    elif kind is not None and kind != ObjectType.BLOB:
                        self.problem(ref, f"files snapshot: {entry.name!r} has a file mode but is a "
                                          f"{kind.name.lower()} (restore refuses it)", sub)
        self.report.objects = len(self.seen_objects)


#: Blobs larger than this (bytes) are checked by streaming them, not by reading them whole.
STREAMED = BIG_BLOB
_CHUNK = 1 << 20


def _streamed_damage(store: Store, oid: str, size: int) -> str | None:
    """Why the blob ``oid`` of ``size`` bytes does not read in full, streamed through ``git cat-file
    blob`` (git inflates it, checking zlib's checksum) and hashed here against its id; or ``None``."""
    digest = hashlib.sha1(b"blob %d\0" % size)  # noqa: S324 - git's object id
    got = 0
    loc = store.location
    with command.popen_git(loc.git_dir, ["cat-file", "blob", oid]) as proc:
        assert proc.stdout is not None
        while chunk := proc.stdout.read(_CHUNK):
            digest.update(chunk)
            got += len(chunk)
    if proc.returncode != 0:
        return f"unreadable: {proc.error or f'git cat-file exited {proc.returncode}'}"
    if got != size:
        return f"unreadable: {got:,} bytes where its header says {size:,}"
    if digest.hexdigest() != oid:
        return "damaged: its content does not hash to its id"
    return None


def _without_record(listed: list[tuple[str, str]], broken: set[str]) -> set[str]:
    """The refs under ``…/runs/<run>/`` of runs that have no run record ref (``…/runs/<run>/run``,
    also not a broken one): every writer creates the record before a run's other refs and deletes
    it after them, so such refs hold nothing a run reaches."""
    names = {name for name, _oid in listed} | broken
    out: set[str] = set()
    for name in names:
        parts = name[len(NAMESPACE):].split("/")
        if len(parts) >= 4 and parts[1] == "runs" and parts[3] != "run" and parse_ref(name) is not None:
            if "/".join(name.split("/")[:5]) + "/run" not in names:
                out.add(name)
    return out


def _short(path: str, keep: int = 3) -> str:
    """A path shortened to its first ``keep`` components (a hostile one can be thousands long)."""
    parts = path.split("/")
    return path if len(parts) <= keep + 1 else "/".join(parts[:keep]) + f"/… ({len(parts) - keep} more levels)"


def verify(store: Store, all_worktrees: bool = True,
           progress: Callable[[int], None] | None = None, repair: bool = False) -> VerifyReport:
    """Check every gitstate ref (of every worktree, or only the store's) and what it reaches.

    ``progress`` is called with ``1`` per checkpoint checked. Stale ``.lock`` files under
    ``refs/agentos/`` (left by killed writers; they make the user's ``git gc`` fail) and refs there
    that hold no object id (symbolic, or unparsable: listings skip them) are reported, or with
    ``repair`` removed (and then listed in :attr:`VerifyReport.repaired`); so are gitstate's
    temporary pack files that writers killed before renaming them left in ``objects/pack``, when
    older than :data:`housekeeping.ORPHAN_AGE` (a younger one may be a live writer's), and a
    multi-pack-index naming packs that are gone or damaged (:func:`packs.stale_midx`,
    :func:`packs.damaged_midx`). A node log
    holding records that do not read is reported, or with ``repair`` rewritten without them (or
    removed when none reads; listed in :attr:`VerifyReport.repaired`, with what was done in
    :attr:`VerifyReport.repair_notes`). Returns a
    :class:`VerifyReport` whose ``problems`` list is empty when the store is sound."""
    report = VerifyReport()
    common = store.location.common_dir
    if repair:
        report.repaired = [os.path.relpath(p, common) for p in refs.remove_stale_locks(common, store.core.stale_lock_age)]
    for path in refs.stale_locks(common, store.core.stale_lock_age):
        report.problems.append(Problem(os.path.relpath(path, common), "stale lock left by a killed writer "
                                       "(it blocks git gc; `git agentos verify --repair` removes it)"))
    if repair:
        report.repaired += [os.path.relpath(p, common) for p in housekeeping.remove_leftover_temps(common)]
    for path in housekeeping.leftover_temps(common):
        report.problems.append(Problem(os.path.relpath(path, common), "temporary pack file left by a killed "
                                       "writer (git count-objects calls it garbage; `git agentos verify "
                                       "--repair` removes it)"))
    pack_dir = os.path.join(common, "objects", "pack")
    midx = os.path.relpath(os.path.join(pack_dir, packs.MIDX), common)  # a path, as for stale locks
    if repair and packs.clear_stale_midx(pack_dir):
        report.repaired.append(midx)
    gone = packs.stale_midx(pack_dir)
    if gone:
        report.problems.append(Problem(
            midx, f"names {len(gone)} pack(s) that are gone, such as {gone[0]} (a `git multi-pack-index write` "
            "ran while a merge removed them; git fsck fails on it; `git agentos verify --repair` removes "
            "it, and git reads the packs without one)"))
    elif packs.damaged_midx(pack_dir):
        report.problems.append(Problem(
            midx, "is damaged: it cannot be read (git fsck fails on it too; `git agentos verify --repair` "
            "removes it, and git reads the packs without one)"))
    checker = _Checker(store, report, progress, repair)
    prefix = NAMESPACE if all_worktrees else worktree_prefix(store.worktree)
    listed = list_refs(store.repo, prefix)
    orphans = _without_record(listed, {b.name for b in refs.broken_refs(store.repo, common, prefix)})
    for name, oid in listed:
        if name in orphans:
            if repair:
                try:
                    store.core.move_ref(name, oid, None, "gitstate: verify --repair (run without a run record)")
                except GitStateError as exc:
                    checker.problem(name, f"cannot remove it: {exc}", oid)
                    continue
                report.repaired.append(name)
            else:
                checker.problem(name, "its run has no run record (…/run), so it is no run gitstate can list or "
                                      "delete (a pull of an earlier version took it from a remote?); "
                                      "`git agentos verify --repair` removes it", oid)
            continue
        checker.check_ref(name, oid)
    for broken in refs.broken_refs(store.repo, common, prefix):  # git's for-each-ref: "ignoring broken ref"
        if repair:
            refs.remove_broken(store.repo, common, broken, "gitstate: verify --repair")
            report.repaired.append(broken.name)
        else:
            checker.problem(broken.name, f"{broken.problem}: it holds no checkpoint and hides what it names "
                                         "from every listing (`git agentos verify --repair` removes it)")
    for name, oid in list_refs(store.repo, STAGING):  # left by a pull that is running or was killed
        checker.problem(name, "staging ref of an unfinished pull (the next pull removes it once its "
                              "process is gone)", oid)
    report.objects = (max(report.objects, len(checker.seen_objects)) + len(checker.seen_commits)
                      + len(checker.log_entries))
    return report


def verify_refs(store: Store, refs: Iterable[tuple[str, str]]) -> VerifyReport:
    """Check named refs at the given values (``(name, object id)`` pairs, which need not be
    where the refs stand now: a server's pre-receive hook checks what a push would set) as
    :func:`verify` checks each ref: its name, what it reaches, every payload. Nothing else of the
    store is looked at; nothing is repaired."""
    report = VerifyReport()
    checker = _Checker(store, report, None)
    for name, oid in refs:
        checker.check_ref(name, oid)
    report.objects = len(checker.seen_objects) + len(checker.seen_commits) + len(checker.log_entries)
    return report
