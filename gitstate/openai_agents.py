"""OpenAI Agents SDK sessions on gitstate: :class:`GitSession` implements the SDK's
``agents.memory.Session`` protocol (install the ``openai-agents`` extra of ``git-agentos``) and the branching
of its ``AdvancedSQLiteSession``.

A session is a gitstate run (run id = ``session_id``, workflow ``openai-agents``); a branch of the
conversation is a branch of the run (``main`` first). Every ``add_items`` is one checkpoint whose
state appends the items to the branch's list: items live in chunks of 32 (the core list layout),
so appending rewrites only the last chunk and a 1,000-turn session costs about the size of its
items. ``pop_item`` and ``clear_session`` are checkpoints too, so ``git agentos log <session>``
shows the whole conversation's history. Items are stored as the SDK's ``SQLiteSession`` stores them
(JSON-like data: what ``json.dumps`` accepts, read back as ``json.loads`` gives it, maps with their
keys in their order), and every call returns what ``SQLiteSession`` returns for the same calls. A
session never says it finished, so ``git agentos runs`` lists it as ``saved`` (not ``running``). See
docs/FORMAT.md, "Framework
integrations"."""

from __future__ import annotations

import asyncio
import json
import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

try:
    from agents.memory import SessionSettings
    from agents.memory.session_settings import resolve_session_limit
except ImportError as exc:  # pragma: no cover - exercised only without the extra installed
    # not "pip install gitstate[...]": that name on PyPI is another project's
    raise ImportError("gitstate.openai_agents needs the OpenAI Agents SDK: install the openai-agents extra of git-agentos "
                      f"(from a checkout: pip install '.[openai-agents]') ({exc})") from exc

from gitstate.errors import BranchNotFound, ConflictError, CorruptObjectError, GitStateError, UsageError
from gitstate.format import checkpoint as cpfmt
from gitstate.format import encoding, frameworks
from gitstate.format.checkpoint import Checkpoint
from gitstate.format.statetree import CHUNK, LIST, StateReader, StateWriter, Written
from gitstate.integrations import RunHandle, check_payload, json_data, sql_time, store_at
from gitstate.store.run import NO_CHANGE, Run
from gitstate.store.store import Store
from gitstate.store.transaction import Transaction

__all__ = ["GitSession", "SessionBranchError", "SessionClosedError", "UnknownBranchError"]

WORKFLOW = frameworks.OPENAI_AGENTS
KIND = frameworks.KINDS[WORKFLOW]
T = TypeVar("T")


class SessionBranchError(UsageError):
    """A branch operation the SDK's ``AdvancedSQLiteSession`` refuses with ``ValueError`` (a turn
    without a user message, a used branch id, deleting ``main`` or the current branch)."""


class SessionClosedError(GitStateError, RuntimeError):
    """The session was closed (:meth:`GitSession.close`): a ``RuntimeError``, as ``SQLiteSession``
    raises after ``close()``."""

    def __init__(self) -> None:
        super().__init__("GitSession is closed")


class UnknownBranchError(BranchNotFound, ValueError):
    """The session has no branch of that name holding items (``AdvancedSQLiteSession`` raises
    ``ValueError`` too)."""

    def __init__(self, session_id: str, branch: str) -> None:
        super().__init__(session_id, branch)
        self.args = (f"Branch '{branch}' does not exist",)


@dataclass
class _Line:
    """What the adapter keeps of a branch tip: the ids of its full item chunks, the items after
    them (1..32 of them, or none for an empty branch), the user turns and the creation time.

    ``turn_chunks`` remembers the blob ids of the first full chunks of ``turns`` as last written,
    so a write of a long session hashes its newest turns only; every edit of ``turns`` other than
    an append calls :meth:`turns_changed`."""

    tip: str | None
    full: list[str] = field(default_factory=list)
    tail: list[Any] = field(default_factory=list)
    turns: list[list[Any]] = field(default_factory=list)
    created_at: str = ""
    turn_chunks: list[str] = field(default_factory=list)

    @property
    def count(self) -> int:
        return len(self.full) * CHUNK + len(self.tail)

    def copy(self) -> _Line:
        return _Line(self.tip, list(self.full), list(self.tail), list(self.turns), self.created_at,  # turns: never edited
                     list(self.turn_chunks))

    def turns_changed(self) -> None:
        """Forget the chunk ids of turns past the full chunks that are left (``turns`` was cut)."""
        del self.turn_chunks[len(self.turns) // CHUNK:]

    def state(self, writer: StateWriter) -> dict[str, Any]:
        """The checkpoint state (items written as chunk blobs and a list tree when long)."""
        items: Any = self.tail
        if self.full:
            tail_blob = [writer.leaf(self.tail, "items")] if self.tail else []
            items = Written(LIST, writer.list_tree(self.full + tail_blob))
        # keys in the order of the tree's entries, so the state tree needs no .order.cbor entry
        return {"created_at": self.created_at, "format": KIND, "items": items, "turns": self._turns(writer),
                "v": frameworks.WRITTEN}

    def _turns(self, writer: StateWriter) -> Any:
        """``turns`` as :meth:`StateWriter.mapping` writes a list (a long one is a list tree of
        chunks), the full chunks written before taken from :attr:`turn_chunks`."""
        turns = self.turns
        if len(turns) <= CHUNK:
            return turns
        self.turns_changed()
        known = len(self.turn_chunks)
        self.turn_chunks.extend(writer.leaf(turns[start:start + CHUNK], "turns")
                                for start in range(known * CHUNK, len(turns) // CHUNK * CHUNK, CHUNK))
        rest = len(turns) % CHUNK
        last = [writer.leaf(turns[-rest:], "turns")] if rest else []
        return Written(LIST, writer.list_tree(self.turn_chunks + last))

    def append(self, items: list[Any], writer: StateWriter, now: str) -> None:
        for item in items:
            if _is_user(item):
                self.turns.append([self.count, now])
            self.tail.append(item)
            if len(self.tail) > CHUNK:
                self.full.append(writer.leaf(self.tail[:CHUNK], "items"))
                self.tail = self.tail[CHUNK:]

    def pop(self, reader: StateReader) -> Any:
        item = self.tail.pop()
        if self.turns and self.turns[-1][0] == self.count:
            self.turns.pop()
            self.turns_changed()
        if not self.tail and self.full:
            self.tail = reader.chunk(self.full.pop())
        return item

    def truncate(self, length: int, reader: StateReader) -> None:
        """Keep the first ``length`` items."""
        keep_full = min(len(self.full), length // CHUNK)
        if keep_full < len(self.full):
            rest = reader.chunk(self.full[keep_full])
            self.full = self.full[:keep_full]
            self.tail = rest[: length - keep_full * CHUNK]
        else:
            self.tail = self.tail[: length - keep_full * CHUNK]
        if not self.tail and self.full:
            self.tail = reader.chunk(self.full.pop())
        self.turns = [t for t in self.turns if t[0] < length]
        self.turns_changed()

    def items(self, reader: StateReader, limit: int | None) -> list[Any]:
        """The items (a fresh copy), or the last ``limit`` of them."""
        tail = encoding.loads(encoding.dumps(self.tail, "items", ordered=True))
        if limit is None:
            out: list[Any] = []
            for oid in self.full:
                out.extend(reader.chunk(oid))
            return out + tail
        chunks = [tail]
        have = len(tail)
        for oid in reversed(self.full):
            if have >= limit:
                break
            chunk = reader.chunk(oid)
            chunks.append(chunk)
            have += len(chunk)
        flat = [item for chunk in reversed(chunks) for item in chunk]
        return flat[-limit:] if limit else []


def _is_user(item: Any) -> bool:
    return isinstance(item, dict) and item.get("role") == "user"


def _preview(content: Any, max_length: int | None = None) -> str:
    """As the SDK previews a user message's content (text, or the JSON of structured parts)."""
    text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
    if max_length is not None and len(text) > max_length:
        return text[:max_length] + "..."
    return text


class GitSession:
    """An OpenAI Agents SDK session kept in a git repository (``agents.memory.Session``).

    ``GitSession(session_id, path=None)``: ``path`` finds the repository as
    :func:`gitstate.open_store` does (default: the current directory); ``store`` passes an open
    store instead. ``session_settings`` (or a dict) sets the default ``limit`` of :meth:`get_items`,
    as for ``SQLiteSession``. Every method is async, as the protocol defines; each runs its git work
    in a worker thread. One instance may be used from several tasks and threads, several processes
    may write the same session: concurrent ``add_items`` all land, none is lost.

    Branching works as in ``AdvancedSQLiteSession``: :meth:`create_branch_from_turn` starts a
    branch holding the items before a user turn and switches to it, :meth:`switch_to_branch`,
    :meth:`list_branches`, :meth:`delete_branch`, :meth:`get_conversation_turns`,
    :meth:`find_turns_by_content` and :meth:`create_branch_from_content`; reads and writes go to
    the current branch (``main`` at first; per instance, as in the SDK).

    After :meth:`close`, every method raises :class:`SessionClosedError` (a ``RuntimeError``:
    ``GitSession is closed``), as ``SQLiteSession`` does."""

    session_settings: SessionSettings | None = None

    def __init__(self, session_id: str, path: str | os.PathLike[str] | None = None, *, store: Store | None = None,
                 session_settings: SessionSettings | dict[str, Any] | None = None) -> None:
        self.session_id = session_id
        if session_settings is None:
            session_settings = SessionSettings()
        elif isinstance(session_settings, dict):
            session_settings = SessionSettings(**session_settings)
        self.session_settings = session_settings
        self._own_store = store is None
        self.store = store_at(path, store)
        self._handle = RunHandle(self.store, session_id, WORKFLOW)
        self._branch = "main"
        self._lines: dict[str, _Line] = {}
        self._lock = threading.Lock()
        self._closed = False
        self._active = 0  # calls running in worker threads (close waits for them)
        self._idle = threading.Condition()

    def __repr__(self) -> str:
        return f"<GitSession {self.session_id!r} branch={self._branch!r} store={self.store.path!r}>"

    # -- reading ------------------------------------------------------------------------------

    def _line(self, cp: Checkpoint | None) -> _Line:
        """The line at a checkpoint (from memory when this instance saw that tip)."""
        if cp is None:
            return _Line(None)
        with self._lock:
            hit = self._lines.get(cp.id)
        if hit is not None:
            return hit.copy()
        line = self._read_line(cp)
        with self._lock:
            if len(self._lines) > 64:
                self._lines.clear()
            self._lines[cp.id] = line
        return line.copy()

    def _read_line(self, cp: Checkpoint) -> _Line:
        reader = StateReader(self.store.core.reader)
        root = reader.tree(cp.tree_id)
        entry = root.get(cpfmt.STATE_TREE)
        if entry is None or entry.type_str != "tree":
            raise CorruptObjectError(cp.id, "not an openai-agents session checkpoint (no state tree)")
        entries = reader.entries(entry.id)
        small = {k: reader.value(kind, oid) for k, (kind, oid) in entries.items() if k != "items"}
        items_kind, items_oid = entries.get("items", ("", ""))
        if items_kind == "list":
            chunks = reader.list_chunks(items_oid)
            full, tail = chunks[:-1], reader.chunk(chunks[-1]) if chunks else []
        elif items_kind == "cbor":
            full, tail = [], reader.blob_value(items_oid)
        else:
            raise CorruptObjectError(cp.id, "openai-agents session state has no item list")
        if not isinstance(tail, list) or len(tail) > CHUNK or (full and not tail):
            raise CorruptObjectError(cp.id, "openai-agents session items are not a chunked list")
        line = _Line(cp.id, full, tail)
        check_payload(WORKFLOW, {**small, "items": [None] * line.count}, cp.id)  # all but the items' values
        line.turns, line.created_at = small["turns"], small["created_at"]
        turns_kind, turns_oid = entries.get("turns", ("", ""))
        if turns_kind == "list":
            chunks = reader.list_chunks(turns_oid)
            if len(chunks) == -(-len(line.turns) // CHUNK):
                line.turn_chunks = chunks[:len(line.turns) // CHUNK]
        return line

    def _run(self) -> Run | None:
        return self._handle.get()

    def _tip_line(self, branch: str) -> _Line:
        run = self._run()
        return self._line(None if run is None else run.head(branch))

    def _check_open(self) -> None:
        if self._closed:
            raise SessionClosedError()

    async def _thread(self, fn: Callable[[], T]) -> T:
        self._check_open()
        return await asyncio.to_thread(self._guarded, fn)

    def _guarded(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` unless the session was closed meanwhile; :meth:`close` waits for it."""
        with self._idle:
            self._check_open()
            self._active += 1
        try:
            return fn()
        finally:
            with self._idle:
                self._active -= 1
                if not self._active:
                    self._idle.notify_all()

    async def get_items(self, limit: int | None = None, branch_id: str | None = None) -> list[Any]:
        """The items of the current branch (or ``branch_id``) in order; with ``limit`` (else the
        session settings' limit) the latest ``limit`` of them, oldest first. Read as
        ``SQLiteSession`` reads: ``limit=0`` gives ``[]``, a negative limit everything."""
        session_limit = resolve_session_limit(limit, self.session_settings)
        branch = self._branch if branch_id is None else branch_id

        def read() -> list[Any]:
            line = self._tip_line(branch)
            if session_limit is not None and session_limit == 0:
                return []
            wanted = session_limit if session_limit is not None and session_limit > 0 else None
            return line.items(StateReader(self.store.core.reader), wanted)

        return await self._thread(read)

    # -- writing ------------------------------------------------------------------------------

    def _write(self, branch: str, change: Callable[[_Line, Transaction], bool], op: str) -> _Line | None:
        """One read-modify-write checkpoint on ``branch``: ``change`` edits the line in place and
        says whether anything changed. Returns the new line, or ``None`` if nothing was written."""
        run = self._handle.ensure()
        result: list[_Line] = []

        def update(tip: Checkpoint | None, tx: Transaction) -> Any:
            line = self._line(tip)
            result.clear()
            if not change(line, tx):
                return NO_CHANGE
            if not line.created_at:
                line.created_at = sql_time()
            result.append(line)
            return line.state(StateWriter(tx.writer))

        cp = run.update(update, branch=branch, node=op, trigger="session",
                        metadata=lambda _state: {"items": result[0].count})
        if cp is None or not result:
            return None
        line = result[0]
        line.tip = cp.id
        with self._lock:
            self._lines[cp.id] = line.copy()
        return line

    async def add_items(self, items: list[Any]) -> None:
        """Append items to the current branch: one checkpoint. Items are stored as
        ``SQLiteSession`` stores them (``json.dumps``); one it refuses raises
        :class:`gitstate.NotSerializableError` (a ``TypeError``) and nothing is written."""
        self._check_open()  # also for no items, as SQLiteSession checks
        if not items:
            return
        data = [json_data(item, f"items[{i}]") for i, item in enumerate(items)]
        # the store's secrets policy, before anything is written (warn: the push check finds them)
        data = self.store.core.secrets.value(data, "items", [])
        branch = self._branch

        def add() -> None:
            now = sql_time()

            def change(line: _Line, tx: Transaction) -> bool:
                line.append(data, StateWriter(tx.writer), now)
                return True

            self._write(branch, change, "add_items")

        await self._thread(add)

    async def pop_item(self) -> Any | None:
        """Remove and return the newest item of the current branch (``None`` when it is empty)."""
        branch = self._branch

        def pop() -> Any | None:
            popped: list[Any] = []

            def change(line: _Line, _tx: Transaction) -> bool:
                popped.clear()
                if line.count == 0:
                    return False
                popped.append(line.pop(StateReader(self.store.core.reader)))
                return True

            if self._run() is None:
                return None
            self._write(branch, change, "pop_item")
            return popped[0] if popped else None

        return await self._thread(pop)

    async def clear_session(self) -> None:
        """Remove every item: ``main`` gets an empty checkpoint (its history stays in git), every
        other branch is deleted, and the current branch becomes ``main``."""

        def clear() -> None:
            run = self._run()
            if run is None:
                return

            def change(line: _Line, _tx: Transaction) -> bool:
                if line.count == 0 and line.tip is not None:
                    return False
                line.full, line.tail, line.turns, line.turn_chunks = [], [], [], []
                return True

            self._write("main", change, "clear_session")
            for name in run.branches():
                if name != "main":
                    try:
                        run.delete_branch(name, force=True)
                    except BranchNotFound:
                        pass
            self._branch = "main"

        await self._thread(clear)

    def close(self) -> None:
        """Close the session: calls running in other threads finish first, later calls raise
        :class:`SessionClosedError`; the store is released if this session opened it. Closing
        again does nothing."""
        with self._idle:
            if self._closed:
                return
            self._closed = True
            while self._active:
                self._idle.wait()
        if self._own_store:
            self.store.close()

    # -- branches (as AdvancedSQLiteSession) -----------------------------------------------------

    @property
    def current_branch(self) -> str:
        """The branch reads and writes go to."""
        return self._branch

    def _branch_lines(self) -> dict[str, _Line]:
        run = self._run()
        if run is None:
            return {}
        return {name: self._line(cp) for name, cp in run.branches().items()}

    async def create_branch_from_turn(self, turn_number: int, branch_name: str | None = None) -> str:
        """Start a branch holding the items before user turn ``turn_number`` (1-based, of the
        current branch) and switch to it; returns its id (``branch_from_turn_<n>_<time>`` unless
        ``branch_name``). The new branch's first checkpoint has the newest checkpoint of the
        current branch within that prefix as its parent, so ``git log`` shows where it forked."""
        if branch_name is not None and not branch_name.strip():
            raise SessionBranchError("Branch name cannot be empty")
        source = self._branch

        def create() -> str:
            run = self._handle.ensure()
            tip = run.head(source)
            line = self._line(tip)
            if not isinstance(turn_number, int) or not 1 <= turn_number <= len(line.turns):
                raise SessionBranchError(
                    f"Turn {turn_number} does not contain a user message in branch '{source}'")
            cut = line.turns[turn_number - 1][0]
            name = branch_name if branch_name is not None else self._new_branch_name(run, turn_number)
            if run.tip(name) is not None:
                raise SessionBranchError(f"Branch ID '{name}' has already been used. Choose a new branch ID.")
            fork = None
            for cp in run.history(source):  # the newest checkpoint holding at most the prefix
                count = cp.metadata.get("items")
                if isinstance(count, int) and count <= cut:
                    fork = cp.id
                    break
            reader = StateReader(self.store.core.reader)
            created = sql_time()
            result: list[Checkpoint] = []

            def build(tx: Transaction) -> None:
                new = line.copy()
                new.truncate(cut, reader)
                new.created_at = created
                state = cpfmt.state_entry(tx.writer, new.state(StateWriter(tx.writer)))
                result[:] = [run.stage_checkpoint(
                    tx, None, state, branch=name, node="create_branch", trigger="session", strict=True,
                    fork_from=fork, metadata={"items": new.count, "from_branch": source, "from_turn": turn_number})]

            try:
                self.store.core.write(build)
            except ConflictError:
                raise SessionBranchError(
                    f"Branch ID '{name}' has already been used. Choose a new branch ID.") from None
            self.store.core.remember(result[0])
            self._branch = name
            return name

        return await self._thread(create)

    @staticmethod
    def _new_branch_name(run: Run, turn_number: int) -> str:
        base = f"branch_from_turn_{turn_number}_{int(time.time())}"
        name, suffix = base, 1
        while run.tip(name) is not None:
            suffix += 1
            name = f"{base}_{suffix}"
        return name

    async def switch_to_branch(self, branch_id: str) -> None:
        """Make ``branch_id`` the current branch (:class:`UnknownBranchError`, a ``ValueError``,
        unless it holds items)."""

        def check() -> None:
            if self._tip_line(branch_id).count == 0:
                raise UnknownBranchError(self.session_id, branch_id)

        await self._thread(check)
        self._branch = branch_id

    async def delete_branch(self, branch_id: str, force: bool = False) -> None:
        """Delete a branch (not ``main``; the current one only with ``force``, which switches to
        ``main`` first). Its checkpoints stay reachable through other branches that share them."""
        if not branch_id or not branch_id.strip():
            raise SessionBranchError("Branch ID cannot be empty")
        if branch_id == "main":
            raise SessionBranchError("Cannot delete the 'main' branch")
        if branch_id == self._branch:
            if not force:
                raise SessionBranchError(
                    f"Cannot delete current branch '{branch_id}'. Use force=True or switch branches first")
            if not any(b["branch_id"] == branch_id for b in await self.list_branches()):
                raise UnknownBranchError(self.session_id, branch_id)
            await self.switch_to_branch("main")

        def delete() -> None:
            run = self._run()
            if run is None or self._tip_line(branch_id).count == 0:
                raise UnknownBranchError(self.session_id, branch_id)
            run.delete_branch(branch_id, force=True)

        await self._thread(delete)

    async def list_branches(self) -> list[dict[str, Any]]:
        """Branches holding items: ``branch_id``, ``message_count``, ``user_turns``, ``is_current``,
        ``created_at``, oldest first (as ``AdvancedSQLiteSession`` lists them)."""

        def listing() -> list[dict[str, Any]]:
            rows = [{"branch_id": name, "message_count": line.count, "user_turns": len(line.turns),
                     "is_current": name == self._branch, "created_at": line.created_at}
                    for name, line in self._branch_lines().items() if line.count]
            rows.sort(key=lambda r: (str(r["created_at"]), str(r["branch_id"]).encode("utf-8")))
            return rows

        return await self._thread(listing)

    def _turn_rows(self, branch: str, max_length: int | None) -> list[dict[str, Any]]:
        line = self._tip_line(branch)
        if not line.turns:
            return []
        items = line.items(StateReader(self.store.core.reader), None)
        rows = []
        for number, (index, when) in enumerate(line.turns, start=1):
            item = items[index]
            content = item.get("content", "") if isinstance(item, dict) else ""
            rows.append({"turn": number, "content": _preview(content, max_length), "full_content": content,
                         "timestamp": when, "can_branch": True})
        return rows

    async def get_conversation_turns(self, branch_id: str | None = None) -> list[dict[str, Any]]:
        """The user turns of a branch (default: the current one): ``turn`` (1-based),
        ``content`` (first 100 characters), ``full_content``, ``timestamp``, ``can_branch``."""
        branch = self._branch if branch_id is None else branch_id
        return await self._thread(lambda: self._turn_rows(branch, 100))

    async def find_turns_by_content(self, search_term: str, branch_id: str | None = None) -> list[dict[str, Any]]:
        """User turns whose text contains ``search_term`` (ASCII case-insensitive, as SQLite's
        ``LIKE``), in the shape of :meth:`get_conversation_turns` (full previews)."""
        branch = self._branch if branch_id is None else branch_id
        pattern = re.compile(re.escape(search_term), re.IGNORECASE | re.ASCII)

        def search() -> list[dict[str, Any]]:
            out = []
            for row in self._turn_rows(branch, None):
                content = row["full_content"]
                texts = [content] if isinstance(content, str) else [
                    part.get("text", "") if isinstance(part, dict) else "" for part in content or []]
                if any(isinstance(t, str) and pattern.search(t) for t in texts):
                    out.append(row)
            return out

        return await self._thread(search)

    async def create_branch_from_content(self, search_term: str, branch_name: str | None = None) -> str:
        """:meth:`create_branch_from_turn` at the first user turn containing ``search_term``."""
        matches = await self.find_turns_by_content(search_term)
        if not matches:
            raise SessionBranchError(f"No user turns found containing '{search_term}'")
        return await self.create_branch_from_turn(matches[0]["turn"], branch_name)

